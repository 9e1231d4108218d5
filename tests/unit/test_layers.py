"""The layering contracts (``.importlinter``, run by the test command) hold on the code as
it is, and fail when a pure module reaches for the Kubernetes edge or the tuner for the
operator: checked on a copy of the package with one import added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "llm_operator"
LINT = Path(sys.executable).parent / "lint-imports"

pytestmark = pytest.mark.unit


def lint(package_parent: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the project's contracts against the package under
    ``package_parent``."""
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run(
        [str(LINT), "--config", str(ROOT / ".importlinter"), "--no-cache"],
        capture_output=True, text=True, env=env, cwd=package_parent, timeout=120)


def copy_with(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the package with ``line`` appended to ``module`` (a path inside it)."""
    shutil.copytree(PACKAGE, tmp_path / "llm_operator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "llm_operator" / module
    target.write_text(target.read_text() + f"\n{line}\n")
    return tmp_path


def test_the_contracts_hold() -> None:
    proc = lint(ROOT / "operator")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize(("module", "line", "broken"), [
    ("planning/memory.py", "from llm_operator.controller import kube",
     "Pure modules import no client and no kopf"),
    ("health/status.py", "import time",
     "Pure modules read no clock"),
    ("inpod/tuner/search.py", "from llm_operator import planning",
     "The tuner (runs inside the tuning Job) imports nothing of the operator"),
    ("inpod/engine/cap.py", "from llm_operator.api import constants",
     "The admission controller (runs inside vLLM) imports nothing of the operator"),
    ("controller/reconcile.py", "from llm_operator.controller import handlers",
     "The kopf handlers are registered in one module that only run.py imports"),
])
def test_a_forbidden_import_breaks_a_contract(tmp_path: Path, module: str, line: str,
                                              broken: str) -> None:
    proc = lint(copy_with(tmp_path, module, line))
    assert proc.returncode != 0
    assert broken in proc.stdout and "BROKEN" in proc.stdout, proc.stdout[-3000:]

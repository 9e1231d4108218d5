"""Shared pytest configuration: paths every tier uses.

Tiers (one folder each, one marker each): unit (pure), chart (helm + schemas),
integration (the real operator process against the EMULATED API server, real kubectl),
prometheus and vllm (real Prometheus, real vLLM on the CPU), aic (NVIDIA AIConfigurator's
measured GPU points, from its own .venv-aic; skipped without it), nodes (pods in real
containers: Kubernetes' kubelet with containerd, images built here).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's top folder."""
    return ROOT


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool; fails (never skips) when it is missing."""
    found = shutil.which("promtool") or ("/usr/bin/promtool"
                                         if Path("/usr/bin/promtool").exists() else None)
    if found is None:
        pytest.fail("promtool not found: it comes with Debian's prometheus package; fix: "
                    "bash tools/setup.sh --tests (or apt-get install prometheus)")
    return found


def vllm_python() -> Path:
    """The Python that has vLLM (the CPU build in .venv-vllm, or LLMOP_VLLM_PYTHON)."""
    return Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with the tier its folder names, so `-m unit` etc. select tiers."""
    for item in items:
        tier = Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if tier in {"unit", "chart", "integration", "prometheus", "vllm", "aic", "nodes"}:
            item.add_marker(getattr(pytest.mark, tier))

"""Integration tier: the real operator process (``llm-operator run``) against the
EMULATED API server (kmock with the project's fixes; not a cluster), driven by the real
kubectl. Each test gets its own emulator, namespace and operator: nothing leaks between
tests, and every wait is bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llm_operator_sandbox.emulator import EmulatorThread
from tests.support.emulator import (
    CRD_PATH,
    EXAMPLES_DIR,
    EmulatorProcess,
    Kubectl,
    OperatorProcess,
    wait_for,
)

NAMESPACE = "ml"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[EmulatorProcess]:
    """A fresh emulated API server (a subprocess) with its kubeconfig."""
    emulator = EmulatorProcess(tmp_path).start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def kubectl(api: EmulatorProcess, tmp_path: Path) -> Kubectl:
    """The real kubectl against the emulator, with the LLMService CRD applied through it
    and the test namespace created."""
    k = Kubectl(api.kubeconfig, tmp_path / "kube-cache")
    k.apply(CRD_PATH)
    wait_for(lambda: k.run("get", "llms", check=False).returncode == 0, 15,
             "kubectl to discover the LLMService resource")
    k.create_namespace(NAMESPACE)
    return k


@pytest.fixture
def operator(api: EmulatorProcess, kubectl: Kubectl, tmp_path: Path) -> Iterator[OperatorProcess]:
    """``llm-operator run`` (a subprocess) watching the test namespace, started and ready."""
    proc = OperatorProcess(api.kubeconfig, tmp_path / "operator.log", [NAMESPACE]).start()
    try:
        proc.wait_log("Initial authentication has finished", timeout=60)
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmulatorThread]:
    """An emulated API server in this process (for tests that drive the operator's own
    client) holding the CRD and one example LLMService, ``default/llama-3-1-8b``."""
    with EmulatorThread() as api:
        k = Kubectl(api.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path / "cache")
        k.apply(CRD_PATH)
        k.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml")
        yield api

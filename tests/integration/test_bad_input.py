"""Bad input that only the API server sees, against the EMULATED API server (which
prunes unknown spec fields and refuses bad names and labels with 422, as a real one
does; see sandbox/k8s_rules.py): nothing the user gave is lost without a word, and a
child the API server refuses is a permanent error with its message, not a retry loop."""

from __future__ import annotations

import time
from pathlib import Path

from tests.integration.conftest import NAMESPACE
from tests.integration.test_operator import condition, wait_condition
from tests.support.emulator import EmulatorProcess, Kubectl, OperatorProcess, wait_for

TYPO = """\
apiVersion: llmops.dev/v1alpha1
kind: LLMService
metadata: {name: typo}
spec:
  model: {name: meta-llama/Llama-3.1-8B-Instruct}
  gpus: {product: L4}
  engine: {maxNumSeq: 64}
"""

BAD_LABEL = """\
apiVersion: llmops.dev/v1alpha1
kind: LLMService
metadata: {name: badlabel}
spec:
  model: {name: meta-llama/Llama-3.1-8B-Instruct}
  gpus: {product: L4}
"""
# The planner refuses spec.gpus.resourceName without a domain; an administrator's GPU
# class is the one place left where such a resource can reach a Deployment.
ODD_CLASS = {"LLMOP_GPU_CLASS": "odd", "LLMOP_GPU_CLASSES": '{"odd": {"resourceName": "gpu"}}'}


def test_a_field_the_api_server_dropped_is_named_in_status_and_an_event(
    kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    manifest = tmp_path / "typo.yaml"
    manifest.write_text(TYPO)
    kubectl.apply(manifest, NAMESPACE)  # without strict validation, as Helm or GitOps do
    stored = wait_for(lambda: kubectl.get("llms", "typo", NAMESPACE), 30, "the LLMService")
    assert "maxNumSeq" not in (stored["spec"].get("engine") or {})  # pruned, as a cluster does

    def warned() -> list[str] | None:
        svc = kubectl.get("llms", "typo", NAMESPACE) or {}
        warnings = ((svc.get("status") or {}).get("plan") or {}).get("warnings") or []
        return [w for w in warnings if "spec.engine.maxNumSeq" in w] or None

    assert "kubectl explain" in wait_for(warned, 60, "the dropped field in status")[0]
    events = (kubectl.get("events", namespace=NAMESPACE) or {}).get("items", [])
    assert any(e["reason"] == "UnknownFields" and "spec.engine.maxNumSeq" in e["message"]
               for e in events)


def test_a_child_the_api_server_refuses_is_a_permanent_error_with_its_message(
    kubectl: Kubectl, api: EmulatorProcess, tmp_path: Path
) -> None:
    operator = OperatorProcess(api.kubeconfig, tmp_path / "operator.log", [NAMESPACE],
                               env=ODD_CLASS).start()
    try:
        operator.wait_log("Initial authentication has finished", timeout=60)
        _refused_child(kubectl, operator, tmp_path)
    finally:
        operator.stop()


def _refused_child(kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path) -> None:
    manifest = tmp_path / "badlabel.yaml"
    manifest.write_text(BAD_LABEL)
    kubectl.apply(manifest, NAMESPACE)
    svc = wait_condition(kubectl, "ChildrenApplied", "False", name="badlabel")
    cond = condition(svc, "ChildrenApplied")
    # An extended resource needs a domain (nvidia.com/gpu): nothing before the API server
    # checks that, and it refuses the Deployment.
    assert cond is not None and "(422)" in cond["message"] and "'gpu'" in cond["message"]
    assert kubectl.get("deployment", "badlabel", NAMESPACE) is None
    events = (kubectl.get("events", namespace=NAMESPACE) or {}).get("items", [])
    assert any(e["reason"] == "ChildRejected" for e in events)
    # Permanent: not retried every 15 s like a 403 or a 500 would be.
    operator.wait_log("failed permanently")
    time.sleep(20)
    assert operator.log().count("the API server refused a child") == 1, operator.log()

"""Pod-level failures on the LLMService within two minutes, on the REAL control plane.

The ReplicaSet controller's FailedCreate is Kubernetes' own: the Priority admission
plugin refuses a pod whose PriorityClass does not exist, the ResourceQuota plugin one
the namespace's quota has no room for; the ReplicaSet controller records
``ReplicaFailure`` and the Deployment controller copies it onto the Deployment, where
the operator reads it (``PodsCreated``). Each test asserts the condition, the
controller's own words and the fix, the one Warning Event, and the time it took.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from tests.support.emulator import OperatorProcess, wait_for

from .conftest import ClusterKubectl
from .test_control_plane import condition, tiny_service

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

WITHIN_SECONDS = 120  # the promise: every pod-level failure on the LLMService in 2 minutes


def apply_until_false(admin: ClusterKubectl, namespace: str, svc: dict[str, Any],
                      ctype: str, what: str) -> dict[str, Any]:
    """Apply ``svc``; its ``ctype`` once False, within :data:`WITHIN_SECONDS` (the time
    taken goes to stderr, for the docs)."""
    name = svc["metadata"]["name"]
    started = time.monotonic()
    admin.apply_obj(svc, namespace)

    def probe() -> dict[str, Any] | None:
        c = condition(admin.get("llms", name, namespace), ctype)
        return c if c.get("status") == "False" else None
    cond = wait_for(probe, WITHIN_SECONDS, f"{ctype}=False on the LLMService", interval=1)
    sys.stderr.write(f"{ctype}=False ({what}) after {time.monotonic() - started:.1f} s\n")
    return cond


def warnings(admin: ClusterKubectl, namespace: str, name: str, reason: str
             ) -> list[dict[str, Any]]:
    return [e for e in admin.items("events", namespace)
            if e["involvedObject"].get("kind") == "LLMService"
            and e["involvedObject"].get("name") == name and e.get("reason") == reason
            and e.get("type") == "Warning"]


def test_a_missing_priority_class_is_failed_create_with_its_fix(
        admin: ClusterKubectl, namespace: str, operator: OperatorProcess) -> None:
    klass = f"inference-critical-{namespace}"
    svc = tiny_service("pinned")
    # H100: no node has one, so once the pod exists it waits for a node (no vLLM runs).
    svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}
    svc["spec"]["scheduling"] = {"priorityClassName": klass}
    cond = apply_until_false(admin, namespace, svc, "PodsCreated", "missing PriorityClass")
    assert cond["reason"] == "FailedCreate"
    # The Priority admission plugin's words, through the ReplicaSet and the Deployment.
    assert f"no PriorityClass with name {klass} was found" in cond["message"], cond
    assert (f"Fix: PriorityClass {klass} does not exist: create it (`kubectl create "
            f"priorityclass {klass}") in cond["message"]
    assert "or remove spec.scheduling.priorityClassName" in cond["message"]
    time.sleep(3)  # more Deployment events come; still one Event
    assert len(warnings(admin, namespace, "pinned", "FailedCreate")) == 1

    # Fixed: the ReplicaSet controller's next try creates the pod; the condition clears.
    admin.run("create", "priorityclass", klass, "--value=1000")
    fixed_at = time.monotonic()
    try:
        def created() -> dict[str, Any] | None:
            c = condition(admin.get("llms", "pinned", namespace), "PodsCreated")
            return c if c.get("status") == "True" else None
        fixed = wait_for(created, 90, "PodsCreated=True once the PriorityClass exists",
                         interval=1)
        assert fixed["reason"] == "Created"
        sys.stderr.write(f"PodsCreated=True {time.monotonic() - fixed_at:.1f} s after the "
                         "fix\n")
    finally:
        admin.run("delete", "llms", "pinned", "-n", namespace, "--wait=false", check=False)
        admin.run("delete", "priorityclass", klass, "--wait=false", check=False)


def test_an_exhausted_resource_quota_is_failed_create_with_its_figures(
        admin: ClusterKubectl, namespace: str, operator: OperatorProcess) -> None:
    admin.apply_obj({"apiVersion": "v1", "kind": "ResourceQuota",
                     "metadata": {"name": "gpu-quota"},
                     "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}, namespace)

    def counted() -> bool:  # the quota controller has computed its usage
        quota = admin.get("resourcequota", "gpu-quota", namespace) or {}
        return bool((quota.get("status") or {}).get("hard"))
    wait_for(counted, 30, "the ResourceQuota controller to fill in the quota's status")
    cond = apply_until_false(admin, namespace, tiny_service("quota"), "PodsCreated",
                             "exceeded quota")
    assert cond["reason"] == "FailedCreate"
    assert "exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1" in cond["message"]
    assert (f"Fix: ResourceQuota {namespace}/gpu-quota has no room for another pod "
            "(requested requests.nvidia.com/gpu=1, used requests.nvidia.com/gpu=0, limited "
            "requests.nvidia.com/gpu=0)") in cond["message"], cond
    assert "lower spec.replicas" in cond["message"]
    assert len(warnings(admin, namespace, "quota", "FailedCreate")) == 1
    admin.run("delete", "llms", "quota", "-n", namespace, "--wait=false", check=False)


# --- the local kubelet's stand-ins (llm_operator_sandbox.kubelet_faults) ----------------

def assert_missing_token_secret(cond: dict[str, Any], namespace: str) -> None:
    """The kubelet's words for spec.model.tokenSecretRef's missing Secret hf-token, on the
    download container, and the fix (also the nodes tier's, from Kubernetes' kubelet)."""
    assert cond["reason"] == "CreateContainerConfigError", cond
    assert ', container download-model: CreateContainerConfigError: secret "hf-token" not ' \
        "found" in cond["message"], cond
    assert (f"Fix: Secret {namespace}/hf-token not found: create it with `kubectl create "
            f"secret generic hf-token -n {namespace} --from-literal=token=...`") in cond[
                "message"]

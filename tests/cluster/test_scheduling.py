"""Scheduling by the REAL kube-scheduler: a tuning Job on spare GPUs (placement Spare, the
chart's PriorityClass: below serving, preemptionPolicy Never) never preempts serving
pods when every GPU is taken; it waits, and is placed once a GPU frees up."""

from __future__ import annotations

import time
from typing import Any

import pytest

from llm_operator_sandbox.cluster import Installed
from llm_operator_sandbox.kubelet import LocalKubelet
from tests.support.emulator import OperatorProcess, wait_for

from .conftest import ClusterKubectl
from .test_control_plane import condition, tiny_service

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def filler(replicas: int) -> dict[str, Any]:
    """Serving pods of another team that take all 8 GPUs of a node each (priority 0, as
    pods without a class have). Their image does not run here; the pods hold their GPUs
    all the same once bound."""
    labels = {"app": "filler"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "filler"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                      "effect": "NoSchedule"}],
                     "containers": [{"name": "serve", "image": "example.com/serve:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}


def test_a_spare_tuning_job_waits_and_never_preempts_serving(
        admin: ClusterKubectl, namespace: str, installed: Installed,
        operator: OperatorProcess, kubelet: LocalKubelet) -> None:
    admin.apply_obj(filler(2), namespace)

    def bound_fillers() -> list[dict[str, Any]] | None:
        pods = [p for p in admin.items("pods", namespace, "app=filler")
                if p["spec"].get("nodeName")]
        return pods if len(pods) == 2 else None
    fillers = wait_for(bound_fillers, 60, "two filler pods bound, 16 GPUs taken")
    uids = {p["metadata"]["uid"] for p in fillers}

    svc = tiny_service("spare")
    svc["spec"]["tuning"] = {"mode": "OnRollout", "placement": "Spare", "maxTrials": 1,
                             "maxDurationMinutes": 4}
    admin.apply_obj(svc, namespace)

    def tuning_pod() -> dict[str, Any] | None:
        pods = [p for p in admin.items("pods", namespace)
                if p["metadata"]["name"].startswith("spare-tune-")]
        return pods[0] if pods else None
    pod = wait_for(tuning_pod, 60, "the tuning Job's pod")
    priority_class = installed.env.get("LLMOP_TUNING_PRIORITY_CLASS")
    assert priority_class and pod["spec"].get("priorityClassName") == priority_class
    assert pod["spec"].get("preemptionPolicy") == "Never"
    assert pod["spec"].get("priority", 0) < 0

    def unschedulable() -> dict[str, Any] | None:
        c = condition(admin.get("pod", pod["metadata"]["name"], namespace), "PodScheduled")
        return c if c.get("reason") == "Unschedulable" else None
    cond = wait_for(unschedulable, 60, "the scheduler to find no GPU for the tuning pod")
    assert "Insufficient nvidia.com/gpu" in cond["message"], cond
    time.sleep(15)  # long enough for a preemption to have happened, were it allowed
    still = {p["metadata"]["uid"] for p in admin.items("pods", namespace, "app=filler")
             if not p["metadata"].get("deletionTimestamp")}
    assert still == uids, "the tuning pod preempted a serving pod"
    waiting = admin.get("pod", pod["metadata"]["name"], namespace)
    assert waiting is not None and not waiting["spec"].get("nodeName")
    assert not (waiting.get("status") or {}).get("nominatedNodeName")

    # A GPU node frees up: the waiting tuning pod is placed.
    admin.run("scale", "deployment", "filler", "-n", namespace, "--replicas=1")

    def placed() -> str | None:
        obj = admin.get("pod", pod["metadata"]["name"], namespace) or {}
        return obj.get("spec", {}).get("nodeName")
    node = wait_for(placed, 90, "the tuning pod placed once 8 GPUs are free", interval=1)
    assert node.startswith("gpu-node-")
    admin.run("delete", "llms", "spare", "-n", namespace, "--wait=false")

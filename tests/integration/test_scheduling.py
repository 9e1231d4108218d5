"""A server pod the scheduler cannot place is reported on its LLMService within a minute
(issue 13, item 4), with the operator process against the EMULATED API server.

The emulator has no scheduler and no ReplicaSet controller: the test plays both. It
creates the pod the ReplicaSet would create from the Deployment's template, then writes
the status the real kube-scheduler writes when no node fits (``PodScheduled=False``,
reason ``Unschedulable``, its "0/N nodes are available" message). What is tested is the
operator's side: watching its server pods and turning that into a condition and Event.
"""

from __future__ import annotations

import json
import time
from typing import Any

import yaml

from tests.integration.conftest import NAMESPACE
from tests.integration.test_operator import (
    EXAMPLE,
    NAME,
    condition,
    wait_condition,
    wait_deployment,
)
from tests.support.emulator import Kubectl, OperatorProcess, wait_for

POD = f"{NAME}-7d9f8b6c5-x2x4q"  # a ReplicaSet pod's name shape
SCHEDULER_MESSAGE = ("0/3 nodes are available: 3 node(s) didn't match Pod's node "
                     "affinity/selector. preemption: 0/3 nodes are available: 3 Preemption "
                     "is not helpful for scheduling.")


def create_server_pod(kubectl: Kubectl, deployment: dict[str, Any]) -> None:
    """Play the ReplicaSet controller: a pod from the Deployment's template."""
    template = deployment["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": POD, "namespace": NAMESPACE,
                        "labels": dict(template["metadata"]["labels"])},
           "spec": template["spec"]}
    kubectl.run("apply", "--validate=false", "-f", "-", stdin=yaml.safe_dump(pod))


def mark_unschedulable(kubectl: Kubectl) -> None:
    """Play the scheduler: no node fits, so the pod stays Pending with this condition."""
    status = {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": SCHEDULER_MESSAGE, "lastProbeTime": None,
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}
    kubectl.run("patch", "pod", POD, "-n", NAMESPACE, "--subresource", "status",
                "--type", "merge", "-p", json.dumps({"status": status}))


def mark_crash_looping(kubectl: Kubectl, container: dict[str, Any], exit_code: int,
                       message: str) -> None:
    """Play the kubelet: the vllm container exited with ``exit_code`` and ``message`` as
    its termination message, and waits in the crash back-off."""
    status = {"phase": "Running", "containerStatuses": [{
        "name": "vllm", "restartCount": 3, "ready": False, "image": container["image"],
        "imageID": "", "started": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": {"terminated": {"exitCode": exit_code, "reason": "Error",
                                     "message": message}}}]}
    kubectl.run("patch", "pod", POD, "-n", NAMESPACE, "--subresource", "status",
                "--type", "merge", "-p", json.dumps({"status": status}))


def test_an_unschedulable_server_pod_is_reported_within_a_minute(
    kubectl: Kubectl, operator: OperatorProcess
) -> None:
    kubectl.apply(EXAMPLE, NAMESPACE)
    deployment = wait_deployment(kubectl)
    wait_condition(kubectl, "Planned", "True", generation=1)
    create_server_pod(kubectl, deployment)
    mark_unschedulable(kubectl)
    started = time.monotonic()

    svc = wait_condition(kubectl, "PodsScheduled", "False", timeout=60)
    elapsed = time.monotonic() - started
    assert elapsed < 60
    cond = condition(svc, "PodsScheduled")
    assert cond is not None and cond["reason"] == "Unschedulable"
    # The scheduler's words, the pod, and which GPU class and label placed it.
    assert SCHEDULER_MESSAGE in cond["message"] and POD in cond["message"]
    assert "GPU class 'nvidia'" in cond["message"]
    assert "nvidia.com/gpu.product=NVIDIA-L4" in cond["message"]
    # The plan says the same (kubectl get llms -o yaml: status.plan.explanations).
    placement = [e for e in svc["status"]["plan"]["explanations"] if e["name"] == "placement"]
    assert placement and placement[0]["value"] == "nvidia.com/gpu.product=NVIDIA-L4"

    def warning() -> dict[str, Any] | None:
        events = kubectl.get("events", namespace=NAMESPACE) or {}
        return next((e for e in events.get("items", [])
                     if e["involvedObject"].get("name") == NAME
                     and e["reason"] == "Unschedulable"), None)

    event = wait_for(warning, 30, "the Unschedulable Event")
    assert event["type"] == "Warning" and SCHEDULER_MESSAGE in event["message"]

    # The pod goes (say the user fixed the selector and the ReplicaSet replaced it):
    # nothing waits for a node any more.
    kubectl.run("delete", "pod", POD, "-n", NAMESPACE)
    svc = wait_condition(kubectl, "PodsScheduled", "True", timeout=60)
    assert condition(svc, "PodsScheduled")["reason"] == "Scheduled"  # type: ignore[index]
    # The other writers' conditions were not undone by this one.
    assert condition(svc, "Planned")["status"] == "True"  # type: ignore[index]


def test_a_crash_looping_server_container_is_reported_with_its_last_line(
    kubectl: Kubectl, operator: OperatorProcess
) -> None:
    """The kubelet's part is played: the container exited 2 with vLLM's parser error as
    its log tail (FallbackToLogsOnError puts it in the termination message) and waits
    in the crash back-off."""
    kubectl.apply(EXAMPLE, NAMESPACE)
    deployment = wait_deployment(kubectl)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    create_server_pod(kubectl, deployment)
    line = "vllm serve: error: unrecognized arguments: --max-num-seqz 64"
    mark_crash_looping(kubectl, container, 2, f"usage: vllm serve [model_tag]\n{line}\n")
    svc = wait_condition(kubectl, "ContainersRunning", "False", timeout=60)
    cond = condition(svc, "ContainersRunning")
    assert cond is not None and cond["reason"] == "CrashLoopBackOff"
    assert POD in cond["message"] and "exit code 2" in cond["message"]
    assert cond["message"].endswith(line)

    def warning() -> dict[str, Any] | None:
        events = kubectl.get("events", namespace=NAMESPACE) or {}
        return next((e for e in events.get("items", [])
                     if e["reason"] == "CrashLoopBackOff" and line in e["message"]), None)

    assert wait_for(warning, 30, "the CrashLoopBackOff Event")["type"] == "Warning"


def test_a_server_crash_looping_on_the_live_caps_scheduler_turns_the_live_cap_off(
    api: Any, kubectl: Kubectl, tmp_path: Any
) -> None:
    """Issue 35 item 2, the operator's side: the kubelet's part is played with the
    termination message the rendered command writes when the scheduler's code is missing
    (tests/vllm/test_live_cap_failure.py produces it for real). The operator turns the
    live cap off for the spec's generation, says so (LiveCap condition and a Warning
    Event), and re-renders the Deployment with vLLM's own scheduler."""
    from pathlib import Path

    from llm_operator.rendering.admission import ENGINE_SCHEDULER_CLS

    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"]["adaptation"] = {"mode": "Apply"}  # the live cap is rendered for Apply
    path = Path(tmp_path) / "live.yaml"
    path.write_text(yaml.safe_dump(body))
    # A Prometheus URL (nothing answers it): without one the live cap is never rendered.
    operator = OperatorProcess(api.kubeconfig, Path(tmp_path) / "operator.log", [NAMESPACE],
                               env={"LLMOP_PROMETHEUS_URL": "http://127.0.0.1:9"}).start()
    try:
        operator.wait_log("Initial authentication has finished", timeout=60)
        kubectl.apply(path, NAMESPACE)
        deployment = wait_deployment(kubectl)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert ENGINE_SCHEDULER_CLS in container["args"]
        create_server_pod(kubectl, deployment)
        line = ("llmop-live-cap: the admission scheduler llm_operator.inpod.engine.scheduler "
                "is not on PYTHONPATH (/opt/llmop-engine): the init container copy-engine "
                "did not copy it")
        mark_crash_looping(kubectl, container, 1, f"{line}\n")

        svc = wait_condition(kubectl, "LiveCap", "False", timeout=60)
        cond = condition(svc, "LiveCap")
        assert cond is not None and cond["reason"] == "SchedulerFailed"
        assert POD in cond["message"] and "did not copy it" in cond["message"]
        fallback = svc["status"]["adaptation"]["liveCapFallback"]
        assert fallback["reason"] == "SchedulerFailed"
        assert fallback["generation"] == svc["metadata"]["generation"]
        # The crash itself is said too, with the same line.
        assert condition(svc, "ContainersRunning")["reason"] == "CrashLoopBackOff"  # type: ignore[index]

        def rolled() -> dict[str, Any] | None:
            d = kubectl.get("deployment", NAME, NAMESPACE) or {}
            args = d["spec"]["template"]["spec"]["containers"][0]["args"]
            return d if ENGINE_SCHEDULER_CLS not in args else None

        after = wait_for(rolled, 60, "the Deployment re-rendered without --scheduler-cls")
        assert "--scheduler-cls" not in after["spec"]["template"]["spec"]["containers"][0]["args"]

        def warning() -> dict[str, Any] | None:
            events = kubectl.get("events", namespace=NAMESPACE) or {}
            return next((e for e in events.get("items", [])
                         if e["reason"] == "LiveCapFallback" and POD in e["message"]), None)

        assert wait_for(warning, 30, "the LiveCapFallback Event")["type"] == "Warning"
    finally:
        operator.stop()

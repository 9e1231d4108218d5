"""A server pod whose node stopped reporting, read from the pod alone (pure): the node
lifecycle controller's mark (``Ready=False`` with ``ContainersReady=True``) turns
``ContainersRunning`` False with reason ``NodeNotReady``; the kubelet's own states never
do. The pod shapes are those the real control plane wrote in
tests/nodes/test_node_loss_in_containers.py."""

from __future__ import annotations

from typing import Any

from llm_operator.health.podscheduling import PodScheduling, crash_condition, node_lost_of
from llm_operator.health.status import get_condition

NOW = 1_800_000_000.0
TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300}]


def server_pod(ready: str, containers_ready: str, *, name: str = "svc-abc", node: str = "gpu-1",
               tolerations: list[dict[str, Any]] | None = None, **more: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "tolerations": TOLERATIONS
                            if tolerations is None else tolerations}
    spec.update(more.pop("spec", {}))
    return {"metadata": {"name": name, **more},
            "spec": spec,
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "ContainersReady", "status": containers_ready},
                {"type": "Ready", "status": ready,
                 "lastTransitionTime": "2026-12-06T02:00:00Z"}],
                "containerStatuses": [{"name": "vllm", "ready": containers_ready == "True",
                                       "restartCount": 0, "state": {"running": {}}}]}}


def running(*pods: dict[str, Any], before: list[Any] | None = None
            ) -> tuple[dict[str, Any], Any]:
    conds, notice = crash_condition(before or [], [PodScheduling.from_pod(p) for p in pods],
                                    generation=2, now=NOW)
    cond = get_condition(conds, "ContainersRunning")
    assert cond is not None
    return cond, notice


def test_the_node_controllers_mark_names_the_pod_node_eviction_and_fix() -> None:
    cond, notice = running(server_pod("False", "True"), server_pod("True", "True", name="b"))
    assert cond["status"] == "False" and cond["reason"] == "NodeNotReady"
    message = cond["message"]
    assert message.startswith("1 of 2 server pods are on a node that stopped reporting; "
                              "pod svc-abc on node gpu-1 was marked not Ready at "
                              "2026-12-06T02:00:00Z"), message
    assert "Its containers may still run there" in message
    assert "evicts it 300 s after the node became unreachable" in message
    assert "`kubectl describe node gpu-1`" in message
    assert notice is not None and notice.type == "Warning" and notice.reason == "NodeNotReady"
    # Said once: the next pod event with the node still silent posts no second Event.
    _, again = running(server_pod("False", "True"), before=[cond])
    assert again is None


def test_the_kubelets_own_states_are_not_a_lost_node() -> None:
    starting = server_pod("False", "False")  # vLLM loading: the kubelet sets both False
    serving = server_pod("True", "True")
    gated = server_pod("False", "True", spec={"readinessGates": [{"conditionType": "x"}]})
    leaving = server_pod("False", "True", deletionTimestamp="2026-12-06T02:01:00Z")
    unbound = server_pod("False", "True", node="")
    for pod in (starting, serving, gated, leaving, unbound):
        assert node_lost_of(pod) is None, pod
    cond, notice = running(starting, serving)
    assert cond["status"] == "True" and cond["reason"] == "Running" and notice is None


def test_the_node_coming_back_turns_it_true_again() -> None:
    lost, _ = running(server_pod("False", "True"))
    back, notice = running(server_pod("True", "True"), before=[lost])
    assert back["status"] == "True" and back["reason"] == "Running" and notice is None


def test_a_stale_crash_loop_on_a_lost_node_is_not_said_and_the_loss_comes_first() -> None:
    stale = server_pod("False", "True", name="a")
    stale["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    assert PodScheduling.from_pod(stale).crash is None
    crashing = server_pod("False", "False", name="b")
    crashing["status"]["containerStatuses"][0].update(
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"exitCode": 1, "message": "boom"}})
    cond, _ = running(stale, crashing)
    assert cond["reason"] == "NodeNotReady" and "pod a on node gpu-1" in cond["message"]


def test_a_pod_tolerating_unreachable_forever_is_said_not_to_be_evicted() -> None:
    forever = [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                "effect": "NoExecute"}]
    said = node_lost_of(server_pod("False", "True", tolerations=forever))
    assert said is not None and "tolerates node.kubernetes.io/unreachable without a limit" in said


def test_a_pod_without_the_toleration_is_said_to_be_evicted_at_once() -> None:
    said = node_lost_of(server_pod("False", "True", tolerations=[]))
    assert said is not None and "evicts it once the node is tainted" in said

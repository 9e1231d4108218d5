"""Why a failed tuning Job's pod ended (evicted, OOM-killed), read from the pods as the
kubelet leaves them (pure; the operator path is in tests/integration/test_faults.py)."""

from __future__ import annotations

from typing import Any

from llm_operator.tuning.control import pod_failure


def pod(name: str, status: dict[str, Any], created: str = "2026-01-01T00:00:00Z"
        ) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": status}


def test_an_evicted_pod_is_named_with_the_nodes_message() -> None:
    evicted = pod("tune-a", {"phase": "Failed", "reason": "Evicted",
                             "message": "The node was low on resource: memory."})
    assert pod_failure([evicted]) == (
        "pod tune-a Evicted: The node was low on resource: memory.")


def test_an_oom_killed_tuner_says_exit_137_and_the_field_to_raise() -> None:
    oom = pod("tune-b", {"phase": "Failed", "containerStatuses": [
        {"name": "tuner", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
    said = pod_failure([oom])
    assert "OOMKilled (exit code 137)" in said and "spec.resources.memory" in said


def test_a_plain_error_exit_or_another_container_says_nothing() -> None:
    error = pod("tune-c", {"phase": "Failed", "containerStatuses": [
        {"name": "tuner", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
        {"name": "sidecar", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
    assert pod_failure([error]) == ""
    assert pod_failure([]) == ""

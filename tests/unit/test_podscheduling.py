"""The PodsScheduled condition from server pods (pure)."""

from __future__ import annotations

from typing import Any

from llm_operator.health.podscheduling import PodScheduling, placement_note, scheduling_condition
from llm_operator.health.status import get_condition

NOW = 1_800_000_000.0
MSG = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."


def pod(name: str, *, status: str = "False", reason: str = "Unschedulable",
        node: str | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}, "spec": {"nodeName": node} if node else {},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": status, "reason": reason,
                 "message": MSG}]}}


def test_only_an_unbound_pod_the_scheduler_refused_is_unschedulable() -> None:
    assert PodScheduling.from_pod(pod("a")).unschedulable
    assert not PodScheduling.from_pod(pod("a", status="True", reason="")).unschedulable
    assert not PodScheduling.from_pod(pod("a", node="gpu-1")).unschedulable
    assert not PodScheduling.from_pod(pod("a", reason="SchedulingGated")).unschedulable
    assert not PodScheduling.from_pod(pod("a", deletionTimestamp="2026-01-01T00:00:00Z")
                                      ).unschedulable
    assert not PodScheduling.from_pod({"metadata": {"name": "new"}}).unschedulable


def test_unschedulable_sets_false_with_the_schedulers_words_and_warns_once() -> None:
    pods = [PodScheduling.from_pod(pod("b")), PodScheduling("a", False)]
    conds, notice = scheduling_condition(
        [], pods, placement="GPU class 'gke': nodeSelector cloud.google.com/gke-accelerator"
        "=nvidia-l4", generation=3, now=NOW)
    cond = get_condition(conds, "PodsScheduled")
    assert cond is not None and cond["status"] == "False"
    assert cond["reason"] == "Unschedulable" and cond["observedGeneration"] == 3
    assert cond["message"].startswith("1 of 2 server pods cannot be scheduled; pod b: " + MSG)
    assert "cloud.google.com/gke-accelerator=nvidia-l4" in cond["message"]
    assert notice is not None and notice.type == "Warning" and notice.reason == "Unschedulable"
    # Still unschedulable on the next event: the condition stays, no second Event.
    again, notice2 = scheduling_condition(conds, pods, placement=None, generation=3, now=NOW + 5)
    assert notice2 is None
    assert get_condition(again, "PodsScheduled")["lastTransitionTime"] == cond[  # type: ignore[index]
        "lastTransitionTime"]


def test_no_waiting_pod_sets_true() -> None:
    conds, notice = scheduling_condition([], [PodScheduling("a", False)], placement=None,
                                         generation=1, now=NOW)
    cond = get_condition(conds, "PodsScheduled")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "Scheduled"
    assert notice is None


def test_placement_note_reads_the_plan() -> None:
    status = {"plan": {"explanations": [{"name": "maxNumSeqs", "formula": "x"},
                                        {"name": "placement", "formula": "GPU class 'eks': y"}]}}
    assert placement_note(status) == "GPU class 'eks': y"
    assert placement_note({}) is None


# --- ContainersRunning: a crash loop with its last line ---------------------------------

VLLM_EXIT = ("INFO 11-23 16:40:01 [api_server.py:1] vLLM API server version 0.32.0\n"
             "usage: vllm serve [model_tag] [options]\n"
             "vllm serve: error: unrecognized arguments: --max-num-seqz 64\n")


def crashing(name: str, *, init: bool = False, message: str = VLLM_EXIT) -> dict[str, Any]:
    status = {"name": "download-model" if init else "vllm", "restartCount": 4,
              "state": {"waiting": {"reason": "CrashLoopBackOff",
                                    "message": "back-off 1m20s restarting failed container"}},
              "lastState": {"terminated": {"exitCode": 2, "reason": "Error",
                                           "message": message}}}
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": name}, "spec": {"nodeName": "gpu-1"},
            "status": {"phase": "Running", key: [status]}}


def test_a_crash_loop_is_said_with_the_container_exit_code_and_last_line() -> None:
    from llm_operator.health.podscheduling import crash_condition

    pods = [PodScheduling.from_pod(crashing("p")), PodScheduling("q", False)]
    conds, notice = crash_condition([], pods, generation=2, now=NOW)
    cond = get_condition(conds, "ContainersRunning")
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "CrashLoopBackOff"
    assert cond["message"] == ("1 of 2 server pods crash-loop; pod p: container vllm restarted "
                               "4 times (exit code 2, Error): vllm serve: error: unrecognized "
                               "arguments: --max-num-seqz 64")
    assert notice is not None and notice.type == "Warning"
    # Said once: the same crash again posts no second Event; a healed pod sets True.
    conds, notice = crash_condition(conds, pods, generation=2, now=NOW + 30)
    assert notice is None
    conds, notice = crash_condition(conds, [PodScheduling("p", False)], generation=2, now=NOW)
    assert get_condition(conds, "ContainersRunning")["status"] == "True"  # type: ignore[index]


def test_an_oom_kill_names_the_memory_limit_and_the_fix() -> None:
    """The kubelet's OOMKilled (exit 137) says nothing of why: the sentence names the
    container's limit, the spec field and what in vLLM holds host memory."""
    body = crashing("p", message="INFO ... Auto set KV cache")
    cs = body["status"]["containerStatuses"][0]
    cs["lastState"]["terminated"].update(exitCode=137, reason="OOMKilled")
    body["spec"]["containers"] = [{"name": "vllm", "resources": {
        "requests": {"memory": "3Gi"}, "limits": {"memory": "3Gi"}}}]
    crash = PodScheduling.from_pod(body).crash
    assert crash == ("container vllm restarted 4 times (exit code 137, OOMKilled): the "
                     "kernel killed container vllm at its memory limit of 3Gi "
                     "(spec.resources.memory). Fix: raise spec.resources.memory, or make "
                     "vLLM hold less in host memory: vLLM's CPU build keeps its KV cache "
                     "there (VLLM_CPU_KVCACHE_SPACE in spec.pod.env), a GPU build its swap "
                     "space (--swap-space) and CPU offload (--cpu-offload-gb)")
    del body["spec"]["containers"]  # no limit: the node ran out
    assert "with no memory limit of its own" in str(PodScheduling.from_pod(body).crash)


# The last 2,048 bytes vLLM 0.32's CPU build wrote (its termination message) when its engine
# refused an 8 GiB KV cache under a 6 GiB limit, in a real container (the nodes tier): the
# engine's own ValueError is further up, outside what the kubelet keeps.
ENGINE_FAILED_TAIL = (
    '  File "/opt/venv/lib/python3.11/site-packages/vllm/v1/engine/utils.py", line 1431, in '
    "wait_for_engine_startup\n    raise RuntimeError(\nRuntimeError: Engine core "
    "initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}\n")


def test_an_engine_that_failed_to_start_points_at_the_log_and_the_usual_cause() -> None:
    body = crashing("oom-77", message=ENGINE_FAILED_TAIL)
    body["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] = 1
    crash = PodScheduling.from_pod(body).crash
    assert crash is not None
    assert crash.startswith("container vllm restarted 4 times (exit code 1, Error): "
                            "RuntimeError: Engine core initialization failed."), crash
    assert "`kubectl logs oom-77 -c vllm --previous`" in crash, crash
    assert "lower VLLM_CPU_KVCACHE_SPACE in spec.pod.env or raise spec.resources.memory" \
        in crash, crash
    # Any other last line is quoted alone.
    assert "kubectl logs" not in str(PodScheduling.from_pod(crashing("p")).crash)


def test_a_failing_download_is_a_crash_loop_too_and_running_containers_are_not() -> None:
    gated = ("huggingface_hub.errors.GatedRepoError: 401 Client Error.\n"
             "Access to model meta-llama/Llama-3.1-8B-Instruct is restricted.")
    crash = PodScheduling.from_pod(crashing("p", init=True, message=gated)).crash
    assert crash is not None and crash.startswith("container download-model restarted 4 times")
    assert crash.endswith("Access to model meta-llama/Llama-3.1-8B-Instruct is restricted.")
    running = {"metadata": {"name": "r"}, "status": {"containerStatuses": [
        {"name": "vllm", "restartCount": 1, "state": {"running": {}}}]}}
    assert PodScheduling.from_pod(running).crash is None


# --- the live cap's scheduler failing: its own line, never vLLM's argument echo ---------

SCHEDULER_LINE = ("llmop-live-cap: the admission scheduler llm_operator.inpod.engine.scheduler "
                  "is not on PYTHONPATH (/opt/llmop-engine): the init container copy-engine "
                  "did not copy it")
# vLLM prints its arguments on every start, the scheduler class among them: a crash for
# another reason (here the KV cache) must not turn the live cap off.
VLLM_ARGS_ECHO = ("INFO [api_utils.py:286] non-default args: {'scheduler_cls': "
                  "'llm_operator.inpod.engine.scheduler.AdmissionCapScheduler'}\n"
                  "ValueError: No available memory for the cache blocks.\n")


def test_the_schedulers_own_failure_line_is_read_from_a_crash_loop_only() -> None:
    failing = PodScheduling.from_pod(crashing("p", message=f"{SCHEDULER_LINE}\n"))
    assert failing.live_cap_failure == SCHEDULER_LINE
    assert failing.crash is not None and failing.crash.endswith(SCHEDULER_LINE)
    assert PodScheduling.from_pod(crashing("p", message=VLLM_ARGS_ECHO)).live_cap_failure is None
    # The same message on a container that runs again (no back-off) is history: ignored.
    healed = crashing("p", message=SCHEDULER_LINE)
    healed["status"]["containerStatuses"][0]["state"] = {"running": {}}
    assert PodScheduling.from_pod(healed).live_cap_failure is None

"""The tuning bill (pure): what "GPUs held" means, the budget gate that queues a run
instead of creating its Job, the queued run starting once there is room, and what each
run cost (status.tuning.gpuMinutes, the Event, the metric)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest
from tests.unit.test_tuning_control import AT_LATER, AT_NOW, NOW, decide, job, service

from llm_operator.controller.metrics import OperatorMetrics
from llm_operator.settings import HELM_VALUES, Settings
from llm_operator.tuning import budget as tb
from llm_operator.tuning import control as tc
from llm_operator.tuning.job import build_tuning_job


def tuning_job(gpus: int | str = 1, *, name: str = "a-tune-1", namespace: str = "ml",
               phase: str | None = None, spare: str | None = "true",
               resource: str = "nvidia.com/gpu", **spec: Any) -> dict[str, Any]:
    """A tuning Job as the API server returns it."""
    annotations = {} if spare is None else {"llmops.dev/tuning-on-spare": spare}
    container = {"name": "tuner", "resources": {
        "requests": {"cpu": "2", "memory": "8Gi", resource: str(gpus)},
        "limits": {resource: str(gpus)}}}
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"template": {"spec": {
            "initContainers": [{"name": "copy-tuner",
                                "resources": {"requests": {"cpu": "10m"}}}],
            "containers": [container]}}, **spec},
        "status": {}}
    if phase:
        obj["status"]["conditions"] = [{"type": phase, "status": "True"}]
    return obj


# --------------------------------------------------------------------------- held
def test_only_device_resources_count_as_gpus() -> None:
    assert tb.is_device_resource("nvidia.com/gpu")
    assert tb.is_device_resource("amd.com/gpu")
    assert tb.is_device_resource("nvidia.com/mig-3g.40gb")
    for core in ("cpu", "memory", "ephemeral-storage", "hugepages-2Mi",
                 "requests.kubernetes.io/foo", "kubernetes.io/batch"):
        assert not tb.is_device_resource(core), core


def test_a_running_job_holds_its_pods_gpus() -> None:
    assert tb.job_gpus_held(tuning_job(8)) == 8
    assert tb.job_gpus_held(tuning_job(2, resource="amd.com/gpu")) == 2
    # A limit alone is the request (as the API server defaults it).
    only_limit = tuning_job(4)
    del only_limit["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][
        "nvidia.com/gpu"]
    assert tb.job_gpus_held(only_limit) == 4
    assert tb.job_gpus_held(tuning_job(2, parallelism=2)) == 4


@pytest.mark.parametrize("held, kwargs", [
    (0, {"phase": "Complete"}),  # finished: its pod is gone or done
    (0, {"phase": "Failed"}),
    (0, {"suspend": True}),  # suspended: no pod
    (0, {"parallelism": 0}),
    (0, {"spare": "false"}),  # on GPUs serving lent it (BorrowReplica, BeforeServing)
    (1, {"spare": None}),  # an older operator's Job: counted, as on spare GPUs
])
def test_what_a_job_holds(held: int, kwargs: dict[str, Any]) -> None:
    assert tb.job_gpus_held(tuning_job(1, **kwargs)) == held


def test_an_init_container_counts_when_it_asks_for_more() -> None:
    pod = {"initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}],
           "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}},
                          {"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    assert tb.pod_gpu_request(pod) == 4
    pod["initContainers"] = []
    assert tb.pod_gpu_request(pod) == 2


def test_gpus_held_sums_and_leaves_out_the_superseded() -> None:
    jobs = [tuning_job(8, name="a"), tuning_job(1, name="b", namespace="team2"),
            tuning_job(8, name="c", phase="Complete")]
    assert tb.gpus_held(jobs) == 9
    assert tb.gpus_held(jobs, exclude=[("ml", "a")]) == 1
    assert tb.gpus_held(jobs, exclude=[("team2", "a")]) == 9  # another namespace's "a"


# --------------------------------------------------------------------------- the check
def test_budget_check_and_its_message() -> None:
    assert tb.BudgetCheck(held=7, need=1, budget=8).fits
    waits = tb.BudgetCheck(held=8, need=1, budget=8)
    assert not waits.fits and not waits.never_fits
    assert waits.message() == (
        "tuning Jobs on spare GPUs hold 8 of the 8-GPU tuning budget and this run needs 1; "
        "it starts when enough of them end, or raise Helm value settings.tuningGpuBudget "
        "(LLMOP_TUNING_GPU_BUDGET) to 9 or more")
    never = tb.BudgetCheck(held=0, need=8, budget=4)
    assert never.never_fits and not never.fits
    assert "more than the whole tuning budget of 4" in never.message()
    assert "raise settings.tuningGpuBudget to at least 8" in never.message()
    assert "spec.tuning.placement" in never.message()
    assert tb.BudgetCheck(held=0, need=1, budget=0).never_fits  # 0: none on spare GPUs


def test_the_setting_and_its_helm_value() -> None:
    assert Settings().tuning_gpu_budget == 8
    assert HELM_VALUES[tb.SETTING] == tb.HELM_VALUE


def test_a_negative_budget_is_refused_naming_the_helm_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_operator.api.errors import InputError
    from llm_operator.settings import load_settings
    monkeypatch.setenv("LLMOP_TUNING_GPU_BUDGET", "-1")
    with pytest.raises(InputError) as err:
        load_settings()
    assert "LLMOP_TUNING_GPU_BUDGET (Helm value settings.tuningGpuBudget)" in str(err.value)


# --------------------------------------------------------------------------- the gate
def test_a_run_that_fits_starts() -> None:
    svc, plan, fp, name = service()
    start = decide(svc, plan, fp, name, None)
    gated = tc.gate_start(start, {}, tb.BudgetCheck(held=0, need=1, budget=8), AT_NOW)
    assert gated is start


def test_a_run_over_the_budget_is_queued_with_a_condition_saying_so() -> None:
    svc, plan, fp, name = service()
    start = decide(svc, plan, fp, name, None)
    check = tb.BudgetCheck(held=8, need=1, budget=8)
    queued = tc.gate_start(start, {}, check, AT_NOW)
    assert queued.action is tc.TuningAction.QUEUE
    assert not queued.create_job and not queued.supersedes
    tuning = queued.tuning
    assert tuning is not None and tuning["state"] == "Queued"
    assert "startedAt" not in tuning and tuning["attempts"] == 1
    assert tuning["queued"] == {"since": NOW, "heldGpus": 8, "needGpus": 1, "budgetGpus": 8,
                                "message": check.message()}
    cond = tc.tuned_condition(tuning)
    assert cond == ("Unknown", "TuningQueued",
                    f"Tuning Job {name} is not created yet: {check.message()}")
    assert queued.event is not None and queued.event.reason == "TuningQueued"


def test_a_queued_run_rechecked_keeps_since_and_posts_no_second_event() -> None:
    svc, plan, fp, name = service()
    check = tb.BudgetCheck(held=8, need=1, budget=8)
    first = tc.gate_start(decide(svc, plan, fp, name, None), {}, check, AT_NOW)
    assert first.tuning is not None
    again = decide(svc, plan, fp, name, first.tuning, now=AT_LATER)
    assert again.action is tc.TuningAction.START  # decide asks; the gate answers
    still = tc.gate_start(again, first.tuning, check, AT_LATER)
    assert still.action is tc.TuningAction.QUEUE and still.event is None
    assert still.tuning == first.tuning  # nothing to write: an empty merge patch
    assert tc.merge_patch(first.tuning, still.tuning) == {}


def test_a_queued_run_starts_when_the_budget_frees_with_its_attempt_number() -> None:
    svc, plan, fp, name = service()
    failed = {"state": "Retrying", "fingerprint": fp, "jobName": name, "attempts": 1,
              "failures": 1, "maxRetries": 1, "gpuMinutes": 12.5}
    retry = decide(svc, plan, fp, name, failed)
    assert retry.tuning is not None and retry.tuning["attempts"] == 2
    queued = tc.gate_start(retry, failed, tb.BudgetCheck(held=8, need=1, budget=8), AT_NOW)
    assert queued.tuning is not None and queued.tuning["attempts"] == 2
    start = decide(svc, plan, fp, name, queued.tuning, now=AT_LATER)
    assert start.action is tc.TuningAction.START and start.create_job
    assert start.tuning is not None and start.tuning["state"] == "Running"
    assert start.tuning["attempts"] == 2  # queuing is not an attempt
    assert start.tuning["gpuMinutes"] == 12.5  # the first attempt's cost stays
    assert start.event is not None and "the tuning GPU budget has room" in start.event.message
    assert tc.gate_start(start, queued.tuning, tb.BudgetCheck(7, 1, 8), AT_LATER) is start


def test_a_run_that_can_never_fit_says_how_to_fix_it() -> None:
    svc, plan, fp, name = service()
    queued = tc.gate_start(decide(svc, plan, fp, name, None), {},
                           tb.BudgetCheck(held=0, need=8, budget=4), AT_NOW)
    cond = tc.tuned_condition(queued.tuning or {})
    assert cond is not None and cond[1] == "TuningQueued"
    assert "raise settings.tuningGpuBudget to at least 8" in cond[2]


def test_disabling_tuning_cancels_a_queued_run() -> None:
    svc, plan, fp, name = service()
    queued = tc.gate_start(decide(svc, plan, fp, name, None), {},
                           tb.BudgetCheck(held=8, need=1, budget=8), AT_NOW)
    off, *_ = service(tuning={"mode": "Disabled"})
    d = decide(off, plan, fp, name, queued.tuning)
    assert d.action is tc.TuningAction.CANCEL
    assert d.tuning is not None and d.tuning["state"] == "Cancelled" and "queued" not in d.tuning


def test_the_job_says_whether_it_counts_against_the_budget() -> None:
    settings = Settings()
    svc, plan, fp, _ = service()
    spare = build_tuning_job(svc, plan, settings, fp)
    assert spare["metadata"]["annotations"]["llmops.dev/tuning-on-spare"] == "true"
    assert tb.job_gpus_held(spare) == plan.gpus_per_replica
    borrow, bplan, bfp, _ = service(replicas=2, tuning={"placement": "BorrowReplica"})
    lent = build_tuning_job(borrow, bplan, settings, bfp)
    assert lent["metadata"]["annotations"]["llmops.dev/tuning-on-spare"] == "false"
    assert tb.job_gpus_held(lent) == 0
    # The pod template does not carry it (the pods are not what is counted).
    assert "llmops.dev/tuning-on-spare" not in (
        spare["spec"]["template"]["metadata"].get("annotations") or {})


# --------------------------------------------------------------------------- the cost
def pod(gpus: int, start: str | None, finished: str | None = None, *,
        phase: str = "Succeeded") -> dict[str, Any]:
    state = ({"terminated": {"finishedAt": finished, "exitCode": 0}} if finished
             else {"running": {"startedAt": start}})
    status: dict[str, Any] = {"phase": phase if finished else "Running",
                              "containerStatuses": [{"name": "tuner", "state": state}]}
    if start:
        status["startTime"] = start
    return {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": status}


def test_gpu_seconds_count_the_time_on_a_node() -> None:
    done = pod(8, "2025-01-01T00:00:00Z", "2025-01-01T00:30:00Z")
    assert tb.gpu_seconds_of_pod(done, AT_LATER) == 8 * 1800
    running = pod(2, "2025-01-01T00:00:00Z")
    assert tb.gpu_seconds_of_pod(running, AT_NOW + 600) == 2 * 600
    never_placed = pod(8, None, phase="Pending")
    never_placed["status"] = {"phase": "Pending"}
    assert tb.gpu_seconds_of_pod(never_placed, AT_LATER) == 0
    assert tb.pods_gpu_seconds([done, running], AT_NOW + 600) == 8 * 1800 + 2 * 600
    assert tb.gpu_minutes(8 * 1800 + 2 * 600) == 260.0


def test_an_ended_attempt_carries_its_gpu_minutes_in_status_and_event() -> None:
    svc, plan, fp, name = service()
    running = {"state": "Running", "fingerprint": fp, "jobName": name, "jobUid": "job-0",
               "attempts": 1, "failures": 0, "maxRetries": 1}
    failed = decide(svc, plan, fp, name, running, job(name, fp, "Failed"))
    assert failed.action is tc.TuningAction.RETRY
    billed = tc.with_cost(failed, 8 * 1800.0)
    assert billed.tuning is not None and billed.tuning["gpuMinutes"] == 240.0
    assert billed.event is not None
    assert billed.event.message.endswith("; GPU time: 240 GPU-minutes")
    assert billed.delete_job == failed.delete_job
    # The retry's failure adds to the run's total, and says both.
    retry = decide(svc, plan, fp, name, billed.tuning)
    assert retry.tuning is not None
    running2 = {**retry.tuning, "jobUid": "job-2"}
    again = decide(svc, plan, fp, name, running2, job(name, fp, "Failed", uid="job-2"))
    assert again.action is tc.TuningAction.FAIL
    total = tc.with_cost(again, 8 * 600.0)
    assert total.tuning is not None and total.tuning["gpuMinutes"] == 320.0
    assert total.event is not None and total.event.message.endswith(
        "; GPU time: 80 GPU-minutes (320 over the run's attempts)")


def test_a_decision_that_ends_no_attempt_is_not_billed() -> None:
    svc, plan, fp, name = service()
    start = decide(svc, plan, fp, name, None)
    assert tc.with_cost(start, 600.0) is start
    assert not tc.ends_attempt(start)


def test_the_metric_counts_gpu_seconds_and_the_budget() -> None:
    metrics = OperatorMetrics()
    metrics.service_spec("ml", "llama", service()[0].spec)
    metrics.tuning_cost("ml", "llama", 8 * 1800.0)
    metrics.tuning_budget(held=3, budget=8)
    text = generate_latest(metrics.registry).decode()
    assert 'llmop_tuning_gpu_seconds_total{llmservice="llama",namespace="ml"} 14400.0' in text
    assert "llmop_tuning_gpus_held 3.0" in text
    assert "llmop_tuning_gpu_budget 8.0" in text
    metrics.forget_service("ml", "llama")
    assert "llmop_tuning_gpu_seconds_total{" not in generate_latest(metrics.registry).decode()

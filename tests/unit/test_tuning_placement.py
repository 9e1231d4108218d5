"""Where tuning runs and what it costs serving (pure): spec.tuning.placement, a tuning pod
that waits for GPUs, partial results of a stopped tuner, and the revision note. Results
are built with the tuner's own result code (tests/support/tuning_results.py)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.tuning_results import kv_constrained_result
from tests.unit.test_tuning_control import AT_NOW, decide, job, service

from llm_operator.api.errors import SpecError
from llm_operator.api.models import parse_llmservice
from llm_operator.api.timestamps import rfc3339
from llm_operator.planning import make_plan
from llm_operator.rendering import render_all
from llm_operator.rendering.pod import startup_budget_seconds
from llm_operator.settings import Settings
from llm_operator.tuning import control as tc
from llm_operator.tuning import placement as tp
from llm_operator.tuning.fingerprint import revision_note
from llm_operator.tuning.job import active_deadline_seconds, build_tuning_job, tuner_args

SETTINGS = Settings(tuning_priority_class="llm-operator-tuning")


def pod_spec(svc: Any, plan: Any, fp: str, **kw: Any) -> dict[str, Any]:
    return dict(build_tuning_job(svc, plan, SETTINGS, fp, **kw)["spec"]["template"]["spec"])


# --------------------------------------------------------------------------- placement
def test_default_placement_is_spare_at_the_tuning_priority_not_the_services() -> None:
    svc, plan, fp, _ = service(scheduling={"priorityClassName": "serving-high"})
    assert svc.spec.tuning.placement == "Spare"
    assert pod_spec(svc, plan, fp)["priorityClassName"] == "llm-operator-tuning"
    # The user's own class for tuning wins over the operator's setting.
    svc2, plan2, fp2, _ = service(tuning={"priorityClassName": "batch-low"})
    assert pod_spec(svc2, plan2, fp2)["priorityClassName"] == "batch-low"


@pytest.mark.parametrize("placement", ["BorrowReplica", "BeforeServing"])
def test_gpus_the_service_gives_up_keep_the_services_priority(placement: str) -> None:
    svc, plan, fp, _ = service(replicas=2, scheduling={"priorityClassName": "serving-high"},
                               tuning={"placement": placement})
    assert pod_spec(svc, plan, fp, held=placement == "BeforeServing")[
        "priorityClassName"] == "serving-high"


def test_borrow_replica_with_one_replica_is_refused_naming_the_field() -> None:
    svc, plan, fp, name = service(tuning={"placement": "BorrowReplica"})
    err = tp.placement_error(svc)
    assert isinstance(err, SpecError) and err.field == "spec.tuning.placement"
    d = decide(svc, plan, fp, name, None)
    assert d.action is tc.TuningAction.SKIP and not d.create_job
    assert d.tuning is not None and "spec.tuning.placement" in d.tuning["reason"]
    assert "spec.replicas" in d.tuning["reason"] and "Fix:" in d.tuning["reason"]
    assert tc.tuned_condition(d.tuning)[1] == "InvalidTuningSpec"  # type: ignore[index]
    assert d.event is not None and d.event.type == "Warning"
    # Serving is not refused: the workload still renders with its replica.
    assert render_all(tp.serving_view(svc, {"tuning": d.tuning}), plan, SETTINGS)[0][
        "spec"]["replicas"] == 1


def test_borrow_replica_lends_one_replica_while_running_and_returns_it() -> None:
    svc, plan, fp, name = service(replicas=3, tuning={"placement": "BorrowReplica"})
    start = decide(svc, plan, fp, name, None)
    assert start.action is tc.TuningAction.START and start.tuning is not None
    assert start.tuning["borrowedReplicas"] == 1
    assert "replica is lent" in tc.tuned_condition(start.tuning)[2]  # type: ignore[index]
    assert tp.render_changed(svc, plan, {}, start.tuning)
    lent = render_all(tp.serving_view(svc, {"tuning": start.tuning}), plan, SETTINGS)[0]
    assert lent["spec"]["replicas"] == 2
    running = {**start.tuning, "jobUid": "job-1"}
    result = kv_constrained_result(fp)
    done = decide(svc, plan, fp, name, running, job(name, fp, "Complete"), result.to_message())
    assert done.action is tc.TuningAction.ACCEPT and done.tuning is not None
    assert tp.render_changed(svc, plan, {"tuning": running}, done.tuning)
    back = render_all(tp.serving_view(svc, {"tuning": done.tuning}), plan, SETTINGS)[0]
    assert back["spec"]["replicas"] == 3
    # A failure that gives up returns the replica too.
    failed = decide(svc, plan, fp, name, {**running, "failures": 1},
                    job(name, fp, "Failed"), None)
    assert failed.action is tc.TuningAction.FAIL and failed.tuning is not None
    assert tp.serving_view(svc, {"tuning": failed.tuning}).spec.replicas == 3


def test_before_serving_holds_a_new_services_server_until_the_first_run_settles() -> None:
    svc, plan, fp, name = service(tuning={"placement": "BeforeServing"})
    assert tp.held_before_serving(svc, plan, {}) is not None
    start = tc.decide(svc, plan, fp, name, None, None, None, None, AT_NOW, held=True)
    assert start.tuning is not None and start.tuning["beforeServing"] is True
    status = {"tuning": {**start.tuning, "jobUid": "job-1"}}
    assert tp.held_before_serving(svc, plan, status) is not None
    done = decide(svc, plan, fp, name, status["tuning"], job(name, fp, "Complete"),
                  kv_constrained_result(fp, best_max_num_seqs=24).to_message())
    assert done.tuning is not None
    assert tp.held_before_serving(svc, plan, {"tuning": done.tuning}) is None
    assert tp.render_changed(svc, plan, status, done.tuning)
    # A service that already served (it has workload conditions) is never held back,
    # and its later runs take spare GPUs at the tuning priority.
    served = {"conditions": [{"type": "Available", "status": "True"}],
              "tuning": {"state": "Running"}}
    assert tp.held_before_serving(svc, plan, served) is None
    assert pod_spec(svc, plan, fp, held=False)["priorityClassName"] == "llm-operator-tuning"


def test_decide_keeps_the_signature_callers_use() -> None:
    svc, plan, fp, name = service()
    assert tc.decide(svc, plan, fp, name, None, None, None, None, AT_NOW).create_job


# --------------------------------------------------------------------------- pending pod
def pending_pod_obj(*, scheduled: bool, created: float, message: str = "") -> dict[str, Any]:
    cond = ({"type": "PodScheduled", "status": "True"} if scheduled else
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": message, "lastTransitionTime": rfc3339(created)})
    return {"metadata": {"name": "llama-tune-x", "creationTimestamp": rfc3339(created)},
            "status": {"phase": "Pending", "conditions": [cond]}}


SCHEDULER = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def test_an_unschedulable_tuning_pod_is_reported_with_the_schedulers_message() -> None:
    svc, plan, fp, name = service()
    running = {"state": "Running", "fingerprint": fp, "jobName": name, "jobUid": "job-1",
               "tunable": ["maxNumSeqs"]}
    pods = [pending_pod_obj(scheduled=False, created=AT_NOW, message=SCHEDULER)]
    pending = tc.pending_pod(pods, job(name, fp), AT_NOW + 40)
    assert pending is not None and pending.reason == "Unschedulable"
    d = tc.decide(svc, plan, fp, name, running, job(name, fp), None, None, AT_NOW + 40,
                  pending=pending)
    assert d.action is tc.TuningAction.WAIT and d.tuning is not None and not d.delete_job
    status, reason, message = tc.tuned_condition(d.tuning)  # type: ignore[misc]
    assert (status, reason) == ("Unknown", "TuningPending")
    assert SCHEDULER in message and "10 min" in message
    # The next poll with the same facts writes nothing.
    again = tc.decide(svc, plan, fp, name, d.tuning, job(name, fp), None, None, AT_NOW + 60,
                      pending=pending)
    assert again.tuning is None


def test_a_pod_pending_past_the_bound_gives_the_run_up_without_retrying() -> None:
    svc, plan, fp, name = service(tuning={"maxPendingMinutes": 5, "maxRetries": 2})
    running = {"state": "Running", "fingerprint": fp, "jobName": name, "jobUid": "job-1"}
    pods = [pending_pod_obj(scheduled=False, created=AT_NOW, message=SCHEDULER)]
    later = AT_NOW + 5 * 60 + 1
    d = tc.decide(svc, plan, fp, name, running, job(name, fp), None, None, later,
                  pending=tc.pending_pod(pods, job(name, fp), later))
    assert d.action is tc.TuningAction.FAIL and d.delete_job and d.tuning is not None
    assert d.tuning["state"] == "Failed" and d.tuning["unschedulable"] is True
    assert SCHEDULER in d.tuning["reason"] and "Fix:" in d.tuning["reason"]
    assert tc.tuned_condition(d.tuning)[1] == "TuningUnschedulable"  # type: ignore[index]
    # Settled: no new Job for this fingerprint once the Job is gone.
    after = decide(svc, plan, fp, name, d.tuning, None, now=later + 60)
    assert after.action is tc.TuningAction.NONE and not after.create_job


def test_a_scheduled_pod_pulling_its_image_gets_the_pull_margin() -> None:
    svc, plan, fp, name = service(tuning={"maxPendingMinutes": 5})
    pods = [pending_pod_obj(scheduled=True, created=AT_NOW)]
    pods[0]["status"]["containerStatuses"] = [
        {"name": "tuner", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    assert tc.pending_pod(pods, job(name, fp), AT_NOW + 10) is None  # just started
    later = AT_NOW + 6 * 60
    pending = tc.pending_pod(pods, job(name, fp), later)
    assert pending is not None and pending.scheduled and "ContainerCreating" in pending.message
    running = {"state": "Running", "fingerprint": fp, "jobName": name, "jobUid": "job-1"}
    d = tc.decide(svc, plan, fp, name, running, job(name, fp), None, None, later,
                  pending=pending)
    assert d.action is tc.TuningAction.WAIT


def test_a_running_pod_is_not_pending_and_clears_the_report() -> None:
    svc, plan, fp, name = service()
    pods = [{"metadata": {"name": "p", "creationTimestamp": rfc3339(AT_NOW)},
             "status": {"phase": "Running"}}]
    assert tc.pending_pod(pods, job(name, fp), AT_NOW + 900) is None
    running = {"state": "Running", "fingerprint": fp, "jobName": name, "jobUid": "job-1",
               "pending": {"reason": "Unschedulable"}}
    d = tc.decide(svc, plan, fp, name, running, job(name, fp), None, None, AT_NOW)
    assert d.tuning is not None and "pending" not in d.tuning


def test_a_job_that_makes_no_pod_is_reported_after_a_minute() -> None:
    svc, plan, fp, name = service()
    obj = {"metadata": {"name": name, "uid": "job-1", "creationTimestamp": rfc3339(AT_NOW),
                        "annotations": {"llmops.dev/tuning-fingerprint": fp}}}
    observed = tc.ObservedJob.from_object(obj)
    assert tc.pending_pod([], observed, AT_NOW + 30) is None
    pending = tc.pending_pod([], observed, AT_NOW + 61)
    assert pending is not None and pending.reason == "NoPod"
    assert "PriorityClass" in pending.message


# --------------------------------------------------------------------------- partial
def test_a_stopped_tuners_partial_result_is_used_and_marked_partial() -> None:
    svc, plan, fp, name = service()
    running = {"state": "Running", "fingerprint": fp, "jobName": name, "jobUid": "job-1"}
    result = kv_constrained_result(fp, complete=False).model_copy(
        update={"reason": "stopped early (terminated (SIGTERM)) after 3 trial(s)"})
    d = decide(svc, plan, fp, name, running, job(name, fp, "Failed", reason="DeadlineExceeded"),
               result.to_message())
    assert d.action is tc.TuningAction.ACCEPT and d.tuning is not None
    assert d.tuning["partial"] is True and d.tuning["complete"] is False
    assert "SIGTERM" in d.tuning["partialReason"] and "DeadlineExceeded" in d.tuning[
        "partialReason"]
    assert d.tuning["applied"] == {"maxNumSeqs": 24}
    assert tc.tuned_condition(d.tuning)[1] == "TuningPartial"  # type: ignore[index]
    assert f"{result.trials} trial(s)" in d.tuning["reason"]


def test_a_failed_job_whose_result_does_not_say_partial_is_a_failure() -> None:
    svc, plan, fp, name = service()
    running = {"state": "Running", "fingerprint": fp, "jobName": name, "jobUid": "job-1"}
    complete = kv_constrained_result(fp)  # says Succeeded: a Failed Job contradicts it
    d = decide(svc, plan, fp, name, running, job(name, fp, "Failed"), complete.to_message())
    assert d.action in (tc.TuningAction.RETRY, tc.TuningAction.FAIL)


# --------------------------------------------------------------------------- the Job
def test_start_timeout_and_deadlines_follow_the_models_load_time() -> None:
    small = parse_llmservice({"metadata": {"name": "s"}, "spec": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": {"product": "H100-SXM"}}})
    big = parse_llmservice({"metadata": {"name": "b"}, "spec": {
        "model": {"name": "meta-llama/Llama-3.1-70B-Instruct"}, "gpus": {"product": "H100-SXM"}}})
    timeouts = []
    for svc in (small, big):
        plan = make_plan(svc.spec)
        args = tuner_args(svc, plan, "f" * 16)
        timeout = int(args[args.index("--start-timeout") + 1])
        assert timeout == startup_budget_seconds(plan)
        deadline = int(args[args.index("--deadline-seconds") + 1])
        assert deadline < active_deadline_seconds(svc, plan)
        # The Job's deadline leaves room for the pod to wait for GPUs before the tuner
        # starts, so the tuner's own deadline comes first.
        assert active_deadline_seconds(svc, plan) - deadline >= (
            svc.spec.tuning.max_pending_minutes * 60)
        timeouts.append(timeout)
    assert timeouts[1] > timeouts[0] > 600


# --------------------------------------------------------------------------- revision
@pytest.mark.parametrize("revision,stale", [(None, True), ("main", True), ("v1.0", True),
                                            ("0123456789abcdef0123456789abcdef01234567", False)])
def test_a_moving_revision_is_noted_in_status(revision: str | None, stale: bool) -> None:
    model = {"name": "meta-llama/Llama-3.1-8B-Instruct", **(
        {"revision": revision} if revision else {})}
    svc, plan, fp, name = service(model=model)
    assert (revision_note(svc.spec) is not None) is stale
    d = decide(svc, plan, fp, name, {"state": "Running", "fingerprint": fp, "jobName": name,
                                     "jobUid": "job-1"},
               job(name, fp, "Complete"), kv_constrained_result(fp).to_message())
    assert d.tuning is not None and ("revisionNote" in d.tuning) is stale

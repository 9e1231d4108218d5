"""The tuning decisions (pure): when a Job starts, what a result changes, how failures
are retried and bounded, and that pins are never tuned. Results are built with the
tuner's own result code (tests/support/tuning_results.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from tests.support.tuning_results import (
    LIVE_SWEEP,
    failed_tuner_result,
    kv_constrained_result,
    slo_missed_result,
    slo_unmet_result,
    slo_unmet_typical_result,
)

from llm_operator.api.models import LLMService, parse_llmservice
from llm_operator.api.timestamps import parse_rfc3339
from llm_operator.health import status as st
from llm_operator.planning import Plan, make_plan
from llm_operator.rendering.vllm_args import build_vllm_args
from llm_operator.tuning import control as tc
from llm_operator.tuning.fingerprint import tuning_fingerprint
from llm_operator.tuning.job import tuning_job_name

NOW = "2025-01-01T00:00:00Z"  # as status shows the times
LATER = "2025-01-01T01:00:00Z"
AT_NOW, AT_LATER = parse_rfc3339(NOW), parse_rfc3339(LATER)  # as the caller passes them

BODY: dict[str, Any] = {
    "apiVersion": "llmops.dev/v1alpha1",
    "kind": "LLMService",
    "metadata": {"name": "llama", "namespace": "ml", "uid": "u-1", "generation": 1},
    "spec": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "gpus": {"product": "L4"},
        "tuning": {"maxRetries": 1},
    },
}


def service(**spec: Any) -> tuple[LLMService, Plan, str, str]:
    """A parsed service with ``spec`` merged in, its plan, fingerprint and Job name."""
    body = copy.deepcopy(BODY)
    annotations = spec.pop("annotations", None)
    if annotations:
        body["metadata"]["annotations"] = annotations
    for key, value in spec.items():
        if isinstance(value, dict):
            body["spec"].setdefault(key, {}).update(value)
        else:
            body["spec"][key] = value
    svc = parse_llmservice(body)
    plan = make_plan(svc.spec)
    fp = tuning_fingerprint(svc, plan)
    return svc, plan, fp, tuning_job_name(svc, fp)


def job(name: str, fp: str, phase: str | None = None, uid: str = "job-1",
        reason: str = "BackoffLimitExceeded") -> tc.ObservedJob:
    """A Job as the operator observes it, through the same reader as in production."""
    obj: dict[str, Any] = {"metadata": {"name": name, "uid": uid,
                                        "annotations": {"llmops.dev/tuning-fingerprint": fp}},
                           "status": {}}
    if phase is not None:
        obj["status"]["conditions"] = [{"type": phase, "status": "True", "reason": reason,
                                        "message": "Job has reached the specified backoff limit"}]
    return tc.ObservedJob.from_object(obj)


def decide(svc: LLMService, plan: Plan, fp: str, name: str, tuning: dict[str, Any] | None,
           observed: tc.ObservedJob | None = None, message: str | None = None,
           cached: dict[str, Any] | None = None, now: float = AT_NOW) -> tc.TuningDecision:
    return tc.decide(svc, plan, fp, name, tuning, observed, message, cached, now)


def rendered_max_num_seqs(svc: LLMService, plan: Plan, tuning: dict[str, Any]) -> str:
    args = build_vllm_args(svc, plan, st.engine_overrides({"tuning": tuning}))
    return args[args.index("--max-num-seqs") + 1]


# --------------------------------------------------------------------------- starting
def test_a_new_service_starts_a_job() -> None:
    svc, plan, fp, name = service()
    d = decide(svc, plan, fp, name, None)
    assert d.action is tc.TuningAction.START and d.create_job
    assert d.tuning is not None
    assert d.tuning["state"] == "Running" and d.tuning["fingerprint"] == fp
    assert d.tuning["jobName"] == name and d.tuning["attempts"] == 1
    assert d.tuning["tunable"] == ["maxNumSeqs", "maxNumBatchedTokens"]
    assert d.event is not None and d.event.reason == "TuningStarted"
    assert name in d.event.message and fp in d.event.message
    cond = tc.tuned_condition(d.tuning)
    assert cond is not None and cond[:2] == ("Unknown", "TuningInProgress")


def test_disabled_never_starts() -> None:
    svc, plan, fp, name = service(tuning={"mode": "Disabled"})
    d = decide(svc, plan, fp, name, None)
    assert d.action is tc.TuningAction.NONE and not d.create_job and d.tuning is None


def test_disabled_cancels_a_running_job() -> None:
    svc, plan, fp, name = service(tuning={"mode": "Disabled"})
    running = {"state": "Running", "fingerprint": fp, "jobName": name, "jobUid": "job-1"}
    d = decide(svc, plan, fp, name, running, job(name, fp))
    assert d.action is tc.TuningAction.CANCEL and d.delete_job
    assert d.tuning is not None and d.tuning["state"] == "Cancelled"


def test_manual_waits_for_the_annotation() -> None:
    svc, plan, fp, name = service(tuning={"mode": "Manual"})
    d = decide(svc, plan, fp, name, None)
    assert d.action is tc.TuningAction.PENDING and not d.create_job
    assert d.tuning is not None and d.tuning["state"] == "Pending"
    assert "llmops.dev/retune" in d.tuning["reason"]
    # Nothing more happens while it waits.
    assert decide(svc, plan, fp, name, d.tuning).action is tc.TuningAction.NONE

    svc, plan, fp, name = service(tuning={"mode": "Manual"},
                                  annotations={"llmops.dev/retune": "2025-01-01"})
    d = decide(svc, plan, fp, name, d.tuning)
    assert d.action is tc.TuningAction.START and d.create_job
    assert d.tuning is not None and d.tuning["retuneRequest"] == "2025-01-01"

    # Once that request is handled, the same annotation value asks for nothing more...
    done = {**kv_done(svc, plan, fp, name), "retuneRequest": "2025-01-01"}
    assert decide(svc, plan, fp, name, done).action is tc.TuningAction.NONE
    # ...and a new value runs again, bypassing the cache.
    svc, plan, fp, name = service(tuning={"mode": "Manual"},
                                  annotations={"llmops.dev/retune": "again"})
    cached = tc.cache_entry(kv_constrained_result(fp), svc, AT_NOW)
    d = decide(svc, plan, fp, name, done, cached=cached)
    assert d.action is tc.TuningAction.START


def kv_done(svc: LLMService, plan: Plan, fp: str, name: str) -> dict[str, Any]:
    """status.tuning after the Job for ``fp`` reported the KV-constrained result."""
    result = kv_constrained_result(fp)
    d = decide(svc, plan, fp, name, {"state": "Running", "fingerprint": fp, "jobName": name,
                                     "jobUid": "job-1", "attempts": 1},
               job(name, fp, "Complete"), result.to_message())
    assert d.action is tc.TuningAction.ACCEPT and d.tuning is not None
    return d.tuning


# --------------------------------------------------------------------------- results
def test_a_completed_job_is_accepted_with_its_evidence() -> None:
    svc, plan, fp, name = service()
    running = decide(svc, plan, fp, name, None).status_after(None)
    running["jobUid"] = "job-1"
    result = kv_constrained_result(fp)
    d = decide(svc, plan, fp, name, running, job(name, fp, "Complete"), result.to_message(),
               now=AT_LATER)
    assert d.action is tc.TuningAction.ACCEPT and d.delete_job and not d.create_job
    t = d.tuning
    assert t is not None
    assert t["state"] == "Succeeded" and t["complete"] is True and t["source"] == "job"
    assert t["applied"] == {"maxNumSeqs": 24}
    assert t["best"]["maxNumSeqs"] == 24 and t["best"]["goodput"] == result.best.goodput  # type: ignore[union-attr]
    assert t["baseline"]["goodput"] == result.baseline.goodput  # type: ignore[union-attr]
    assert "maxNumSeqs" not in t["baseline"]  # vLLM's default
    assert t["improvement"] == result.improvement and t["trials"] == 3
    # How the trials were measured: what a user reading "3 trials" asks next.
    assert t["serverStarts"] == 1 and t["sweep"] == LIVE_SWEEP
    assert t["startedAt"] == NOW and t["finishedAt"] == LATER and t["fingerprint"] == fp
    assert [row["phase"] for row in t["table"]] == ["baseline", "verify", "refine"]
    # The Deployment rolls onto it, and the result is cached under the fingerprint.
    assert tc.overrides_changed({"tuning": running}, t)
    assert rendered_max_num_seqs(svc, plan, t) == "24" != str(plan.max_num_seqs)
    assert d.cache_entry is not None and d.cache_entry["result"]["fingerprint"] == fp
    assert d.event is not None and d.event.reason == "TuningSucceeded"
    assert "--max-num-seqs 24" in d.event.message
    assert tc.tuned_condition(t) == ("True", "TuningSucceeded", t["reason"])
    # Recorded: the finished Job is only cleaned up afterwards, nothing is re-read.
    again = decide(svc, plan, fp, name, t, job(name, fp, "Complete"), result.to_message())
    assert again.action is tc.TuningAction.CLEANUP and again.delete_job and again.tuning is None
    assert decide(svc, plan, fp, name, t).action is tc.TuningAction.NONE


def test_best_equal_to_baseline_keeps_the_defaults() -> None:
    svc, plan, fp, name = service()
    running = {"state": "Running", "fingerprint": fp, "jobName": name, "jobUid": "job-1"}
    result = kv_constrained_result(fp, defaults_best=True)
    d = decide(svc, plan, fp, name, running, job(name, fp, "Complete"), result.to_message())
    assert d.action is tc.TuningAction.ACCEPT and d.tuning is not None
    assert d.tuning["applied"] == {}
    assert not tc.overrides_changed({"tuning": running}, d.tuning)
    assert rendered_max_num_seqs(svc, plan, d.tuning) == str(plan.max_num_seqs)
    assert "defaults were best" in d.tuning["reason"]


def test_a_partial_result_is_kept() -> None:
    svc, plan, fp, name = service()
    running = {"state": "Running", "fingerprint": fp, "jobName": name, "jobUid": "job-1"}
    result = kv_constrained_result(fp, complete=False)
    assert result.state == "Partial"
    d = decide(svc, plan, fp, name, running, job(name, fp, "Complete"), result.to_message())
    assert d.action is tc.TuningAction.ACCEPT and d.tuning is not None
    assert d.tuning["complete"] is False and d.tuning["applied"] == {"maxNumSeqs": 24}
    assert "partial" in d.tuning["reason"]


def test_pins_are_never_tunable() -> None:
    svc, plan, fp, name = service(engine={"maxNumSeqs": 32})
    start = decide(svc, plan, fp, name, None)
    assert start.tuning is not None and start.tuning["tunable"] == ["maxNumBatchedTokens"]
    running = {**start.tuning, "jobUid": "job-1"}
    result = kv_constrained_result(fp, best_max_num_seqs=24, best_batched_tokens=4096)
    d = decide(svc, plan, fp, name, running, job(name, fp, "Complete"), result.to_message())
    assert d.tuning is not None and d.tuning["applied"] == {"maxNumBatchedTokens": 4096}
    args = build_vllm_args(svc, plan, st.engine_overrides({"tuning": d.tuning}))
    assert args[args.index("--max-num-seqs") + 1] == "32"  # the pin wins

    svc, plan, fp, name = service(engine={"maxNumSeqs": 32, "maxNumBatchedTokens": 8192})
    d = decide(svc, plan, fp, name, None)
    assert d.action is tc.TuningAction.SKIP and not d.create_job
    assert d.tuning is not None and d.tuning["tunable"] == []
    assert tc.tuned_condition(d.tuning)[:2] == ("False", "NothingToTune")  # type: ignore[index]
    assert decide(svc, plan, fp, name, d.tuning).action is tc.TuningAction.NONE


def test_a_replica_over_several_nodes_is_not_tuned() -> None:
    svc, plan, fp, name = service()
    wide = plan.model_copy(update={"nodes_per_replica": 2})
    d = decide(svc, wide, fp, name, None)
    assert d.action is tc.TuningAction.SKIP and not d.create_job
    assert d.tuning is not None and "spec.tuning.mode" in d.tuning["reason"]


# --------------------------------------------------------------------------- rollouts
def test_a_fingerprint_change_tunes_again_and_drops_the_old_settings() -> None:
    svc, plan, fp, name = service()
    done = kv_done(svc, plan, fp, name)
    svc2, plan2, fp2, name2 = service(workload={"inputTokens": 2000})
    assert fp2 != fp and name2 != name
    d = decide(svc2, plan2, fp2, name2, done)
    assert d.action is tc.TuningAction.START and d.create_job
    assert d.tuning is not None and d.tuning["fingerprint"] == fp2
    assert "applied" not in d.tuning and "best" not in d.tuning
    assert "fingerprint changed" in d.why
    assert tc.overrides_changed({"tuning": done}, d.tuning)  # back to the plan's values


def test_a_cached_result_is_used_without_a_job() -> None:
    svc, plan, fp, name = service()
    cached = tc.cache_entry(kv_constrained_result(fp), svc, AT_NOW)
    cached = tc.parse_cache_value(tc.cache_text(cached))  # through the ConfigMap's text
    assert tc.cache_lookup_needed(svc, fp, {})
    d = decide(svc, plan, fp, name, None, cached=cached, now=AT_LATER)
    assert d.action is tc.TuningAction.USE_CACHE and not d.create_job and not d.delete_job
    assert d.tuning is not None and d.tuning["source"] == "cache"
    assert d.tuning["applied"] == {"maxNumSeqs": 24} and d.tuning["cachedAt"] == NOW
    assert tc.tuned_condition(d.tuning)[:2] == ("True", "TuningCached")  # type: ignore[index]
    assert d.cache_entry is None  # nothing new to store
    assert not tc.cache_lookup_needed(svc, fp, d.tuning)
    # An entry for another fingerprint, or a failed result, is not used.
    other = tc.cache_entry(kv_constrained_result("0123456789abcdef"), svc, AT_NOW)
    assert decide(svc, plan, fp, name, None, cached=other).action is tc.TuningAction.START
    failed = tc.cache_entry(failed_tuner_result(fp), svc, AT_NOW)
    assert decide(svc, plan, fp, name, None, cached=failed).action is tc.TuningAction.START


def test_restart_mid_run_follows_the_existing_job() -> None:
    svc, plan, fp, name = service()
    running = {**decide(svc, plan, fp, name, None).status_after(None), "jobUid": "job-1"}
    d = decide(svc, plan, fp, name, running, job(name, fp))
    assert d.action is tc.TuningAction.WAIT and not d.create_job and d.tuning is None
    # Status lost (the write after the create failed): the Job is adopted, not doubled.
    d = decide(svc, plan, fp, name, None, job(name, fp))
    assert d.action is tc.TuningAction.ADOPT and not d.create_job and d.event is None
    assert d.tuning is not None and d.tuning["jobUid"] == "job-1"


# --------------------------------------------------------------------------- failures
def test_failures_are_retried_then_fail_with_settings_unchanged() -> None:
    # A service tuned before (maxNumSeqs 24 applied); a manual re-run then fails twice.
    svc, plan, fp, name = service(annotations={"llmops.dev/retune": "1"})
    done = kv_done(svc, plan, fp, name)
    start = decide(svc, plan, fp, name, done)
    assert start.action is tc.TuningAction.START and start.tuning is not None
    assert start.tuning["applied"] == {"maxNumSeqs": 24}  # kept while it runs
    first = {**start.tuning, "jobUid": "job-2"}

    d = decide(svc, plan, fp, name, first, job(name, fp, "Failed", uid="job-2"),
               failed_tuner_result(fp).to_message())
    assert d.action is tc.TuningAction.RETRY and d.delete_job and not d.create_job
    t = d.status_after(first)
    assert t["state"] == "Retrying" and t["failures"] == 1
    assert "baseline failed" in t["reason"] and "BackoffLimitExceeded" in t["reason"]
    assert d.event is not None and d.event.type == "Warning" and d.event.reason == "TuningFailed"
    assert not tc.overrides_changed({"tuning": first}, t)
    # The failed Job is still there (deletion in progress): no new one yet.
    assert decide(svc, plan, fp, name, t, job(name, fp, "Failed", uid="job-2")).action in (
        tc.TuningAction.CLEANUP, tc.TuningAction.WAIT)
    # Gone: the retry starts (same deterministic name).
    retry = decide(svc, plan, fp, name, t)
    assert retry.action is tc.TuningAction.START and retry.tuning is not None
    assert retry.tuning["attempts"] == 2 and "retry 1 of 1" in retry.event.message  # type: ignore[union-attr]
    second = {**retry.tuning, "jobUid": "job-3"}

    # A timeout this time (the Job's activeDeadlineSeconds): retries are exhausted.
    d = decide(svc, plan, fp, name, second,
               job(name, fp, "Failed", uid="job-3", reason="DeadlineExceeded"), None)
    assert d.action is tc.TuningAction.FAIL and d.delete_job
    t = d.status_after(second)
    assert t["state"] == "Failed" and t["failures"] == 2
    assert "DeadlineExceeded" in t["reason"] and "keeps its current settings" in t["reason"]
    assert t["applied"] == {"maxNumSeqs": 24}  # the settings stay as they were
    assert not tc.overrides_changed({"tuning": second}, t)
    assert rendered_max_num_seqs(svc, plan, t) == "24"
    cond = tc.tuned_condition(t)
    assert cond is not None and cond[:2] == ("False", "TuningFailed")
    assert "DeadlineExceeded" in cond[2]
    # Failed is final for this fingerprint: no third Job.
    assert decide(svc, plan, fp, name, t).action is tc.TuningAction.NONE


def test_a_fresh_service_that_fails_keeps_the_planned_settings() -> None:
    svc, plan, fp, name = service(tuning={"maxRetries": 0})
    running = {**decide(svc, plan, fp, name, None).status_after(None), "jobUid": "job-1"}
    d = decide(svc, plan, fp, name, running, job(name, fp, "Complete"),
               "Traceback (most recent call last):\nImportError: no module named vllm")
    assert d.action is tc.TuningAction.FAIL
    t = d.status_after(running)
    assert "not a tuning result" in t["reason"] and "ImportError" in t["reason"]
    assert "applied" not in t
    assert rendered_max_num_seqs(svc, plan, t) == str(plan.max_num_seqs)


# --------------------------------------------------------------------------- helpers
def test_termination_message_is_read_from_the_tuner_container() -> None:
    pods = [
        {"metadata": {"creationTimestamp": "2025-01-01T00:00:00Z"},
         "status": {"containerStatuses": [
             {"name": "tuner", "state": {"terminated": {"exitCode": 1, "message": "old"}}}]}},
        {"metadata": {"creationTimestamp": "2025-01-01T00:05:00Z"},
         "status": {"containerStatuses": [
             {"name": "sidecar", "state": {"terminated": {"message": "not ours"}}},
             {"name": "tuner", "state": {"terminated": {"exitCode": 0, "message": "new"}}}]}},
    ]
    assert tc.termination_message(pods) == "new"
    assert tc.termination_message([]) is None


def test_merge_patch_removes_what_went_away() -> None:
    old = {"state": "Succeeded", "applied": {"maxNumSeqs": 24}, "best": {"goodput": 1.0},
           "table": [1]}
    new = {"state": "Running", "best": {"goodput": 1.0}, "table": [1, 2]}
    patch = tc.merge_patch(old, new)
    assert patch == {"state": "Running", "applied": None, "table": [1, 2]}
    assert tc.merge_patch(new, new) == {}


def test_cache_keeps_a_bounded_number_of_entries() -> None:
    data = {f"fp{i:02d}": json.dumps({"at": f"2025-01-01T00:{i:02d}:00Z"}) for i in range(5)}
    assert tc.cache_evictions(data, keep=10) == []
    assert tc.cache_evictions(data, keep=5) == ["fp00"]
    assert tc.cache_evictions(data, keep=3) == ["fp00", "fp01", "fp02"]


@pytest.mark.parametrize("state", [s.value for s in tc.State])
def test_every_state_has_a_tuned_condition(state: str) -> None:
    cond = tc.tuned_condition({"state": state, "reason": "why", "jobName": "j"})
    assert cond is not None and cond[0] in ("True", "False", "Unknown") and cond[2]
    conds = tc.with_tuned_condition([], {"state": state}, generation=3, now=AT_NOW)
    assert conds[0]["type"] == "Tuned" and conds[0]["observedGeneration"] == 3


def test_a_result_where_nothing_met_the_slo_says_so_and_what_to_change() -> None:
    """Defaults kept because nothing tried met the SLO is not "the defaults were best":
    the condition and the Event name the SLO and the fields that would change it."""
    svc, plan, fp, name = service()
    running = decide(svc, plan, fp, name, None).status_after(None)
    running["jobUid"] = "job-1"
    d = decide(svc, plan, fp, name, running, job(name, fp, "Complete"),
               slo_unmet_result(fp).to_message(), now=AT_LATER)
    t = d.tuning
    assert d.action is tc.TuningAction.ACCEPT and t is not None and not t.get("applied")
    assert "the defaults were best" not in t["reason"]
    assert ("vLLM's defaults met the SLO (TTFT p95 <= 15000 ms, ITL p95 <= 100 ms) for no "
            "request") in t["reason"]
    assert "spec.workload.slo" in t["reason"] and "spec.gpus" in t["reason"]
    assert d.event is not None and d.event.message == t["reason"]
    # Defaults whose typical run had no goodput but one run of three did: the message
    # does not say no run met it.
    d = decide(svc, plan, fp, name, running, job(name, fp, "Complete"),
               slo_unmet_typical_result(fp).to_message(), now=AT_LATER)
    t = d.tuning
    assert t is not None and not t.get("applied")
    assert "for no request in the tuning runs" not in t["reason"]
    assert ("for no request in their typical tuning run (some did in 1 of 3 runs) and no "
            "configuration tried beat them") in t["reason"]
    assert t["baseline"]["metRuns"] == 1 and t["baseline"]["goodput"] == 0
    # Where the defaults had goodput and stayed best, the usual words.
    kept = kv_constrained_result(fp, defaults_best=True)
    d = decide(svc, plan, fp, name, running, job(name, fp, "Complete"), kept.to_message(),
               now=AT_LATER)
    assert d.tuning is not None and "the defaults were best" in d.tuning["reason"]
    # Defaults that met the SLO in some run but miss it on average (what status.tuning's
    # baseline shows), kept because nothing tried was shown better, are not "best" either.
    d = decide(svc, plan, fp, name, running, job(name, fp, "Complete"),
               slo_missed_result(fp).to_message(), now=AT_LATER)
    t = d.tuning
    assert t is not None and not t.get("applied") and "the defaults were best" not in t["reason"]
    assert ("vLLM's defaults missed the SLO (TTFT p95 <= 15000 ms, ITL p95 <= 100 ms) in the "
            "tuning runs (TTFT p95 4000 ms, ITL p95 112.67 ms, mean of 3)") in t["reason"]
    assert "spec.workload.slo" in t["reason"] and "spec.gpus" in t["reason"]

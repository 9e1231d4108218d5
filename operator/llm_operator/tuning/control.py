"""When to tune and what a tuning result changes (pure: no API calls, no clock: the
caller passes ``now``).

One function, :func:`decide`, turns what the operator knows about one LLMService into
one decision: start a tuning Job, wait for it, accept its result, retry after a failure
or give up, reuse a cached result, or do nothing. The tuning step
(:mod:`llm_operator.controller.tuning`) fetches the inputs, calls it and carries the
decision out (create or delete the Job, write ``status.tuning``, the ``Tuned`` condition and
the cache, post the Event, re-render the Deployment).

When a run is wanted (``spec.tuning.mode``):

- ``OnRollout`` (default): whenever the tuning fingerprint (see
  :mod:`llm_operator.tuning.fingerprint`) has no settled result: on create and after a
  rollout that changed model, image, GPUs, parallelism, context length, dtype or
  workload. A result cached for the same fingerprint (a re-created service) is reused
  without a Job.
- ``Manual``: only when the ``llmops.dev/retune`` annotation carries a value not yet
  handled (any new value asks for one more run; the cache is bypassed).
- ``Disabled``: never; a running Job is cancelled.

``status.tuning`` (camelCase; the CRD keeps unknown fields there):

``state``
    ``Running`` (a Job benchmarks), ``Retrying`` (the last attempt failed, another
    starts), ``Succeeded`` (a result is applied; ``complete`` is false when the budget
    ran out first and the result is partial), ``Failed`` (retries exhausted), ``Pending``
    (Manual mode, waiting for the annotation), ``Skipped`` (nothing to tune: every tuned
    field pinned, or a replica spans several nodes), ``Cancelled`` (mode Disabled),
    ``Queued`` (a run on spare GPUs waits for the tuning GPU budget; see
    :mod:`.budget` and :func:`gate_start`).
``fingerprint``, ``jobName``, ``jobUid``, ``attempts``, ``failures``, ``maxRetries``
    the run and its bookkeeping (``jobUid`` tells a Job already accounted for).
``tunable``
    the engine fields the run may move: only those the user left to ``auto``.
``best``, ``baseline``, ``improvement``, ``trials``, ``serverStarts``, ``sweep``,
``wallSeconds``, ``table``
    the evidence: the best configuration and vLLM's defaults measured the same way
    (goodput in output tokens/s within the SLO, spread over repeats, p95 latencies,
    preemptions), their ratio, and the trial table (one record per trial, with its
    paired ratio and interval against the configuration it was compared with).
``versusDefaults``, ``decision``
    the kept configuration against vLLM's defaults measured in pairs: ``ratio`` (the
    typical goodput ratio), ``low``/``high`` (its interval), ``confidence``, ``pairs``,
    ``interleaved``; absent when the defaults were kept. ``decision`` is the sentence the
    ``TuningSucceeded`` Event carries, e.g. "--max-num-seqs 4: 0.60x (0.55-0.66x, 94%
    confidence, 6 pairs) of vLLM's defaults; kept vLLM's defaults (interval not above
    1.05x)".
    The Job and its log are deleted once the result is recorded, so the table lives
    here and in the cache.
``applied``
    the settings the Deployment runs with because of this result (``maxNumSeqs``,
    ``maxNumBatchedTokens``), only the tunable ones, and nothing when the defaults were
    best. The renderer reads it (:func:`llm_operator.health.status.engine_overrides`).
``placement``, ``borrowedReplicas``, ``beforeServing``
    where the run gets its GPUs (:mod:`.placement`): a replica lent by serving while the
    run is in flight, or a new service's server waiting for it.
``queued``
    the run waits for the tuning GPU budget: ``since``, ``heldGpus`` (what tuning Jobs on
    spare GPUs hold now), ``needGpus``, ``budgetGpus`` and the ``message`` the ``Tuned``
    condition (``TuningQueued``) carries, naming the Helm value that raises the budget.
``gpuMinutes``
    what the run cost: its pods' GPUs times the time they were on a node, over its
    attempts (:func:`~.budget.pods_gpu_seconds`); also in the Event that ends an attempt
    and in ``llmop_tuning_gpu_seconds_total``.
``pending``
    the run's pod waits (``since``, the scheduler's or kubelet's ``reason`` and
    ``message``, ``giveUpAfterSeconds``): ``Tuned`` is ``TuningPending``. Past the bound
    the run is given up without retries (``unschedulable``, ``Tuned`` reason
    ``TuningUnschedulable``).
``partial``, ``partialReason``
    the result is the best so far of a stopped run (the tuner said ``Partial``: its budget
    or deadline ran out, or it was terminated), with why and how many trials ran.
``revisionNote``
    the result is keyed on a model revision that can move (see
    :func:`~.fingerprint.revision_note`).
``invalidField``
    tuning is refused for a spec it cannot honour (the reason names the field and fix).

Why ``applied`` is dropped when the fingerprint changes: settings measured for another
model, GPU or context length are no evidence for the new one and can even be invalid
(a ``maxNumBatchedTokens`` below a larger ``maxModelLen`` stops vLLM from starting), so
the service runs on the plan's values until the new run reports. A failure keeps
whatever ``applied`` was, so a failed run never changes what serves.

This module holds the decision (:func:`decide`, :func:`gate_start`, :func:`with_cost`);
the rest lives beside it and is re-exported here: ``status.tuning``'s states and the
``Tuned`` condition (:mod:`.status`), the Job and its pods as read (:mod:`.observed`),
a result as the status shows it (:mod:`.results`) and the result cache (:mod:`.cache`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..api.constants import ANNOTATION_RETUNE
from ..api.models import LLMService, TuningMode, TuningPlacement
from ..api.timestamps import rfc3339
from ..health import status as st
from ..inpod.tuner.result import ResultParseError, TuningResult, parse_result
from ..planning import OVERRIDABLE, Plan
from ..rendering.leaderworkerset import is_multi_node
from .budget import BudgetCheck, gpu_minutes
from .cache import (
    CACHE_CONFIGMAP,
    CACHE_MAX_ENTRIES,
    _cached_result,
    cache_entry,
    cache_evictions,
    cache_text,
    parse_cache_value,
)
from .fingerprint import revision_note
from .observed import (
    NO_POD_REPORT_SECONDS,
    TUNER_CONTAINER,
    JobPhase,
    ObservedJob,
    PendingPod,
    pending_limit_seconds,
    pending_pod,
    pod_failure,
    termination_message,
)
from .placement import placement_error, runs_on_spare
from .results import accepted_message, applied_settings, score_summary, trial_table
from .status import (
    IN_FLIGHT,
    JSON,
    SETTLED,
    STEPPED,
    TUNED_REASONS,
    State,
    merge_patch,
    overrides_changed,
    tuned_condition,
    with_tuned_condition,
)

__all__ = [
    "CACHE_CONFIGMAP", "CACHE_MAX_ENTRIES", "IN_FLIGHT", "JSON", "JobPhase",
    "NO_POD_REPORT_SECONDS", "ObservedJob", "PendingPod", "SETTLED", "STEPPED", "State",
    "TUNED_REASONS", "TUNER_CONTAINER", "TuningAction", "TuningDecision", "accepted_message",
    "applied_settings", "cache_entry", "cache_evictions", "cache_lookup_needed", "cache_text",
    "decide", "ends_attempt", "gate_start", "merge_patch", "overrides_changed",
    "parse_cache_value", "pending_limit_seconds", "pending_pod", "pod_failure",
    "retune_request", "score_summary", "termination_message", "trial_table", "tunable_fields",
    "tuned_condition", "with_cost", "with_tuned_condition",
]


class TuningAction(StrEnum):
    """What :func:`decide` asks the handler to do."""

    NONE = "None"  # nothing to do (status may still be brought up to date)
    WAIT = "Wait"  # a Job runs (or is being deleted): wait for its next event
    START = "Start"  # create the tuning Job
    ADOPT = "Adopt"  # a Job for this fingerprint runs that status did not know
    ACCEPT = "Accept"  # record the finished Job's result, roll onto it, cache it
    USE_CACHE = "UseCache"  # the cache has a result for this fingerprint: no Job
    RETRY = "Retry"  # the Job failed; another attempt follows once it is deleted
    FAIL = "Fail"  # the Job failed and retries are exhausted: keep the settings
    CANCEL = "Cancel"  # mode Disabled: stop a running Job
    CLEANUP = "Cleanup"  # a finished Job already accounted for: delete it
    SKIP = "Skip"  # nothing to tune here
    PENDING = "Pending"  # Manual mode: wait for the annotation
    QUEUE = "Queue"  # a run on spare GPUs waits for the tuning GPU budget (see gate_start)


def tunable_fields(svc: LLMService) -> list[str]:
    """The engine fields a tuning run may move: those the user left to ``auto``."""
    engine = svc.spec.engine
    return [key for key, attr in OVERRIDABLE.items()
            if not isinstance(getattr(engine, attr), int)]


def retune_request(svc: LLMService) -> str | None:
    """The value of the ``llmops.dev/retune`` annotation (None when absent or empty)."""
    value = svc.metadata.annotations.get(ANNOTATION_RETUNE)
    return value or None


def cache_lookup_needed(svc: LLMService, fingerprint: str, tuning: Mapping[str, Any]) -> bool:
    """Whether :func:`decide` could use a cache entry now (saves a read otherwise):
    mode OnRollout, no manual request pending, and no settled or running run for this
    fingerprint."""
    if svc.spec.tuning.mode is not TuningMode.ON_ROLLOUT or _new_request(svc, tuning):
        return False
    same = tuning.get("fingerprint") == fingerprint
    return not (same and tuning.get("state") in SETTLED | STEPPED)


@dataclass(frozen=True)
class TuningDecision:
    """What to do, and ``status.tuning`` afterwards (None: leave it as it is)."""

    action: TuningAction
    tuning: JSON | None = None
    event: st.Notice | None = None
    create_job: bool = False
    delete_job: bool = False
    cache_entry: JSON | None = None  # write this under the fingerprint
    why: str = ""  # one line for the log

    def status_after(self, current: Mapping[str, Any] | None) -> JSON:
        """``status.tuning`` once the decision is carried out."""
        return dict(current or {}) if self.tuning is None else dict(self.tuning)

    @property
    def supersedes(self) -> bool:
        """The fingerprint's Job is created or adopted here: the service's other tuning
        Jobs are for fingerprints it no longer has and go. On adoption too: the operator
        that created the Job may have died before it deleted them."""
        return self.create_job or self.action is TuningAction.ADOPT


# --------------------------------------------------------------------------- decide
def decide(
    svc: LLMService,
    plan: Plan,
    fingerprint: str,
    job_name: str,
    tuning: Mapping[str, Any] | None,
    job: ObservedJob | None,
    message: str | None,
    cached: Mapping[str, Any] | None,
    now: float,
    *,
    pending: PendingPod | None = None,
    held: bool = False,
) -> TuningDecision:
    """The tuning decision for one LLMService (pure).

    ``tuning``: the current ``status.tuning``; ``job``: the Job named ``job_name`` (the
    name is derived from the fingerprint, so an operator restarted mid-run finds it);
    ``message``: its tuner's termination message once it finished; ``cached``: the
    cache entry for ``fingerprint`` (see :func:`cache_entry`); ``now``: seconds since the epoch;
    ``pending``: why the running Job's pod does not run (see :func:`pending_pod`);
    ``held``: the service's workload waits for this run (placement ``BeforeServing``).
    """
    cur: JSON = dict(tuning or {})
    spec = svc.spec.tuning
    same = cur.get("fingerprint") == fingerprint
    state = cur.get("state")

    if job is not None and job.fingerprint not in (None, fingerprint):
        # Another fingerprint whose hash prefix collides with ours: not our run.
        return TuningDecision(TuningAction.CLEANUP if job.finished else TuningAction.WAIT,
                        delete_job=job.finished, why=f"Job {job.name} is for another "
                        f"fingerprint ({job.fingerprint})")
    if job is not None and job.deleting:
        return TuningDecision(TuningAction.WAIT, why=f"Job {job.name} is being deleted")

    if spec.mode is TuningMode.DISABLED:
        return _disabled(cur, job, now)

    if job is not None:
        if job.uid and cur.get("jobUid") == job.uid and state != State.RUNNING:
            # Its outcome is recorded (Succeeded, Retrying, Failed): only the Job is left.
            return TuningDecision(TuningAction.CLEANUP if job.finished else TuningAction.WAIT,
                            delete_job=job.finished,
                            why=f"Job {job.name} is already accounted for")
        if not job.finished:
            if same and state == State.RUNNING and cur.get("jobUid") == job.uid:
                return _watch_pending(svc, cur, job, pending, now)
            new = _running(svc, cur, fingerprint, job_name, now, same=same, held=held,
                           attempts=max(1, int(cur.get("attempts") or 0) if same else 1))
            new["jobUid"] = job.uid
            return TuningDecision(TuningAction.ADOPT, new,
                                  why=f"Job {job.name} is running (adopted)")
        return _finished(svc, cur, fingerprint, job, message, now, same=same)

    # No Job for this fingerprint.
    tunable = tunable_fields(svc)
    invalid = placement_error(svc)
    if invalid is not None:
        # Tuning is refused, serving is not: an autoscaler may set spec.replicas through
        # the scale subresource, and that must never stop the service.
        new = {"state": State.SKIPPED.value, "fingerprint": fingerprint, "tunable": tunable,
               "reason": str(invalid), "invalidField": invalid.field, "mode": spec.mode.value}
        if cur.get("applied") and same:
            new["applied"] = cur["applied"]
        if _same_except_time(cur, new):
            return TuningDecision(TuningAction.NONE, why=str(invalid))
        return TuningDecision(TuningAction.SKIP, new, why=str(invalid),
                              event=st.Notice("Warning", "InvalidTuningSpec", str(invalid)))
    if not tunable or is_multi_node(plan):
        why = ("spec.engine.maxNumSeqs and spec.engine.maxNumBatchedTokens are pinned: "
               "nothing to tune" if not tunable else
               f"one replica spans {plan.nodes_per_replica} nodes and tuning runs in one "
               "pod: set spec.tuning.mode to Disabled and pin spec.engine.maxNumSeqs")
        new = {"state": State.SKIPPED.value, "fingerprint": fingerprint, "tunable": tunable,
               "reason": why, "mode": spec.mode.value}
        if cur.get("applied") and same:
            new["applied"] = cur["applied"]
        if _same_except_time(cur, new):
            return TuningDecision(TuningAction.NONE, why=why)
        return TuningDecision(TuningAction.SKIP, new, why=why)

    request = _new_request(svc, cur)
    if same and state in STEPPED and not request:
        # A retry after a failure, or the Job vanished (deleted by hand): start again.
        return _start(svc, cur, fingerprint, job_name, now, same=True, request=None,
                      held=held)
    if request:
        return _start(svc, cur, fingerprint, job_name, now, same=same, request=request,
                      held=held)
    if same and state in SETTLED:
        return TuningDecision(TuningAction.NONE,
                              why=f"tuning is {state} for fingerprint {fingerprint}")
    if spec.mode is TuningMode.MANUAL:
        if same and state == State.PENDING:
            return TuningDecision(TuningAction.NONE,
                                  why="waiting for the llmops.dev/retune annotation")
        new = {"state": State.PENDING.value, "fingerprint": fingerprint, "tunable": tunable,
               "mode": spec.mode.value,
               "reason": "spec.tuning.mode is Manual: annotate the LLMService with "
                         "llmops.dev/retune=<any new value> to run the tuner"}
        _carry(cur, new, "retuneRequest")
        if same:
            _carry(cur, new, "applied", "best", "baseline", "improvement", "versusDefaults",
                   "decision", "finishedAt")
        return TuningDecision(TuningAction.PENDING, new,
                              why="waiting for the llmops.dev/retune annotation")

    result = _cached_result(cached, fingerprint)
    if result is not None:
        return _accept(svc, cur, fingerprint, result, now, same=same, job=None,
                       source="cache", job_name=job_name, cached_at=(cached or {}).get("at"))
    return _start(svc, cur, fingerprint, job_name, now, same=same, request=None, held=held)


# --------------------------------------------------------------------------- budget
def gate_start(decision: TuningDecision, current: Mapping[str, Any], check: BudgetCheck,
               now: float) -> TuningDecision:
    """``decision`` (one that creates a Job on spare GPUs) as it stands against the tuning
    GPU budget: unchanged when the run fits; else the run is queued instead (pure).

    Queued: ``status.tuning`` is what the start would have written, with ``state``
    ``Queued``, no ``startedAt``, and ``queued`` (``since``, ``heldGpus``, ``needGpus``,
    ``budgetGpus``, ``message``); the ``Tuned`` condition is ``TuningQueued`` with that
    message. A ``TuningQueued`` Event is posted when the run first queues, not on each
    recheck (a recheck with the same numbers writes nothing: its merge patch is empty). The
    next step (:func:`decide` sees ``Queued``) starts it with the same attempt number.
    ``current``: ``status.tuning`` before the step."""
    if not decision.create_job or check.fits or decision.tuning is None:
        return decision
    start = decision.tuning
    previous = (current.get("queued") if current.get("state") == State.QUEUED
                and current.get("fingerprint") == start.get("fingerprint") else None)
    since = (previous or {}).get("since") or rfc3339(now)
    message = check.message()
    queued = {k: v for k, v in start.items() if k not in ("startedAt", "jobUid")}
    queued.update(state=State.QUEUED.value, reason=f"Tuning Job {start.get('jobName')} is "
                  f"not created yet: {message}", queued={"since": since, "heldGpus": check.held,
                                        "needGpus": check.need, "budgetGpus": check.budget,
                                        "message": message})
    return TuningDecision(TuningAction.QUEUE, queued,
                          event=st.Notice("Normal", "TuningQueued", queued["reason"])
                          if previous is None else None,
                          why=queued["reason"])


# Decisions that end an attempt whose Job was observed: its pods' GPU time is billed.
_ENDS_ATTEMPT = {TuningAction.ACCEPT, TuningAction.RETRY, TuningAction.FAIL,
                 TuningAction.CANCEL}


def ends_attempt(decision: TuningDecision) -> bool:
    """The decision ends an attempt whose Job was seen (its GPU time is billed)."""
    return decision.action in _ENDS_ATTEMPT and decision.tuning is not None


def with_cost(decision: TuningDecision, gpu_seconds: float | None) -> TuningDecision:
    """``decision`` with the attempt's GPU time added (pure): ``status.tuning.gpuMinutes``
    (the run's total over its attempts; a retry carries it) and the Event's message.
    ``gpu_seconds`` None: nothing was measured (no Job seen), the decision is unchanged."""
    if gpu_seconds is None or not ends_attempt(decision) or decision.tuning is None:
        return decision
    tuning = dict(decision.tuning)
    total = round(float(tuning.get("gpuMinutes") or 0.0) + gpu_seconds / 60.0, 1)
    tuning["gpuMinutes"] = total
    event = decision.event
    if event is not None:
        attempt = gpu_minutes(gpu_seconds)
        cost = (f"; GPU time: {attempt:g} GPU-minutes"
                + (f" ({total:g} over the run's attempts)" if total != attempt else ""))
        event = st.Notice(event.type, event.reason, event.message + cost)
    return TuningDecision(decision.action, tuning, event=event,
                          create_job=decision.create_job, delete_job=decision.delete_job,
                          cache_entry=decision.cache_entry, why=decision.why)


def _watch_pending(svc: LLMService, cur: JSON, job: ObservedJob, pending: PendingPod | None,
                   now: float) -> TuningDecision:
    """A running Job: report its pod waiting (``status.tuning.pending``), and give the
    run up once it waited longer than :func:`pending_limit_seconds`."""
    if pending is None:
        if "pending" in cur:
            new = {k: v for k, v in cur.items() if k != "pending"}
            return TuningDecision(TuningAction.WAIT, new, why=f"Job {job.name}'s pod started")
        return TuningDecision(TuningAction.WAIT, why=f"Job {job.name} is running")
    limit = pending_limit_seconds(svc, pending)
    if pending.waited(now) >= limit:
        return _give_up_pending(svc, cur, job, pending, now, limit)
    info = {"since": rfc3339(pending.since), "reason": pending.reason,
            "message": pending.message[:500], "giveUpAfterSeconds": limit}
    if pending.pod:
        info["pod"] = pending.pod
    if cur.get("pending") == info:
        return TuningDecision(TuningAction.WAIT, why=f"Job {job.name} is pending")
    return TuningDecision(TuningAction.WAIT, {**cur, "pending": info},
                          why=f"Job {job.name}'s pod waits: {pending.reason}: {pending.message}")


def _give_up_pending(svc: LLMService, cur: JSON, job: ObservedJob, pending: PendingPod,
                     now: float, limit: int) -> TuningDecision:
    """The pod waited too long: delete the Job and settle as Failed (no retry: the next
    attempt would wait for the same GPUs). A new ``llmops.dev/retune`` value or a rollout
    starts another run."""
    minutes = pending.waited(now) / 60
    what = ("was not scheduled" if pending.reason != "Pending" or not pending.scheduled
            else "did not start")
    problem = (f"the tuning pod {what} within {limit // 60} min ({pending.reason}: "
               f"{pending.message})")
    if svc.spec.tuning.placement is TuningPlacement.SPARE or runs_on_spare(
            svc, held=bool(cur.get("beforeServing"))):
        fix = ("free or add GPUs of this kind, raise spec.tuning.maxPendingMinutes, or set "
               "spec.tuning.placement to BorrowReplica (2+ replicas) or BeforeServing")
    else:
        fix = "check the pod's events (kubectl describe pod), then retry"
    new = {k: v for k, v in cur.items() if k not in ("pending", "jobUid")}
    new.update(state=State.FAILED.value, finishedAt=rfc3339(now), unschedulable=True,
               lastFailure={"at": rfc3339(now), "jobName": job.name, "reason": problem[:500]},
               reason=(f"gave up after {minutes:.0f} min: {problem}; the service keeps its "
                       f"current settings. Fix: {fix}; then annotate the LLMService with "
                       "llmops.dev/retune=<a new value> to run again"))
    return TuningDecision(TuningAction.FAIL, new, delete_job=True,
                          event=st.Notice("Warning", "TuningUnschedulable", new["reason"]),
                          why=new["reason"])


def _new_request(svc: LLMService, cur: Mapping[str, Any]) -> str | None:
    request = retune_request(svc)
    return request if request and request != cur.get("retuneRequest") else None


def _carry(src: Mapping[str, Any], dst: JSON, *keys: str) -> None:
    for key in keys:
        if src.get(key) not in (None, {}, []):
            dst[key] = src[key]


def _same_except_time(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return {k: v for k, v in a.items() if not k.endswith("At")} == {
        k: v for k, v in b.items() if not k.endswith("At")}


def _disabled(cur: JSON, job: ObservedJob | None, now: float) -> TuningDecision:
    running = job is not None and not job.finished
    if cur.get("state") in STEPPED or running:
        new = {k: v for k, v in cur.items() if k not in ("jobUid", "queued")}
        new.update(state=State.CANCELLED.value, finishedAt=rfc3339(now),
                   mode=TuningMode.DISABLED.value,
                   reason="spec.tuning.mode is Disabled: the run was cancelled; the service "
                          "keeps its current settings")
        return TuningDecision(TuningAction.CANCEL, new, delete_job=job is not None,
                        event=st.Notice("Normal", "TuningCancelled", new["reason"]),
                        why="spec.tuning.mode is Disabled")
    if job is not None and job.finished:
        return TuningDecision(TuningAction.CLEANUP, delete_job=True,
                              why="spec.tuning.mode is Disabled")
    return TuningDecision(TuningAction.NONE, why="spec.tuning.mode is Disabled")


def _running(svc: LLMService, cur: Mapping[str, Any], fingerprint: str, job_name: str,
             now: float, *, same: bool, attempts: int, held: bool = False) -> JSON:
    spec = svc.spec.tuning
    new: JSON = {
        "state": State.RUNNING.value,
        "fingerprint": fingerprint,
        "mode": spec.mode.value,
        "placement": spec.placement.value,
        "tunable": tunable_fields(svc),
        "jobName": job_name,
        "startedAt": rfc3339(now),
        "attempts": attempts,
        "failures": int(cur.get("failures") or 0) if same else 0,
        "maxRetries": spec.max_retries,
        "budget": {"maxTrials": spec.max_trials,
                   "maxDurationMinutes": spec.max_duration_minutes},
    }
    if spec.placement is TuningPlacement.BORROW_REPLICA and svc.spec.replicas >= 2:
        new["borrowedReplicas"] = 1  # serving runs one replica fewer until the run ends
    if held or (same and cur.get("beforeServing")):
        new["beforeServing"] = True  # the server waits for this run (its GPUs are ours)
    _carry(cur, new, "retuneRequest")
    if same and attempts > 1:
        _carry(cur, new, "gpuMinutes")  # a retry: the run's GPU-minutes so far
    if same:
        # The settings stay as they were while a new run of the same fingerprint goes on,
        # with the evidence that chose them.
        _carry(cur, new, "applied", "best", "baseline", "improvement", "versusDefaults",
               "decision", "finishedAt",
               "lastFailure")
    return new


def _start(svc: LLMService, cur: JSON, fingerprint: str, job_name: str, now: float, *,
           same: bool, request: str | None, held: bool = False) -> TuningDecision:
    queued = same and cur.get("state") == State.QUEUED
    attempts = (int(cur.get("attempts") or 1) if queued else
                int(cur.get("attempts") or 0) + 1 if same and not request else 1)
    new = _running(svc, cur, fingerprint, job_name, now, same=same, attempts=attempts,
                   held=held)
    if request:
        new["retuneRequest"] = request
        new["failures"] = 0
    spec = svc.spec.tuning
    retry = f" (retry {attempts - 1} of {spec.max_retries})" if attempts > 1 else ""
    last = (cur.get("lastFailure") or {}).get("reason")
    why = (f"llmops.dev/retune={request}" if request else
           f"the tuning GPU budget has room (queued since {cur['queued'].get('since')})"
           if queued and isinstance(cur.get("queued"), Mapping) else
           "the tuning fingerprint changed" if cur.get("fingerprint") not in (None, fingerprint)
           else f"the last attempt failed: {last}" if same and cur.get("state") == State.RETRYING
           and last
           else f"Job {job_name} disappeared" if same and cur.get("state") == State.RUNNING
           else "no result for this fingerprint yet")
    where = {"BorrowReplica": "on a replica borrowed from serving",
             "BeforeServing": "on the service's GPUs before it serves"}.get(
        spec.placement.value, "on spare GPUs at a lower priority")
    if spec.placement is TuningPlacement.BEFORE_SERVING and not new.get("beforeServing"):
        where = "on spare GPUs at a lower priority (the service already serves)"
    msg = (f"Started tuning Job {svc.metadata.namespace}/{job_name}{retry}: {why}; "
           f"fingerprint {fingerprint}, tuning {', '.join(new['tunable'])} {where}, budget "
           f"{spec.max_trials} trials / {spec.max_duration_minutes} min")
    return TuningDecision(TuningAction.START, new, create_job=True,
                    event=st.Notice("Normal", "TuningStarted", msg), why=why + retry)


def _finished(svc: LLMService, cur: JSON, fingerprint: str, job: ObservedJob,
              message: str | None, now: float, *, same: bool) -> TuningDecision:
    result: TuningResult | None = None
    problem = ""
    if message:
        try:
            result = parse_result(message)
        except ResultParseError as exc:
            problem = str(exc)
    if job.phase is JobPhase.COMPLETE:
        if result is None:
            problem = problem or "the Job completed without a result (no termination message)"
        elif result.state == "Failed":
            problem = f"the tuner reported failure: {result.reason or 'no reason given'}"
        elif result.fingerprint not in (None, fingerprint):
            problem = (f"the result is for fingerprint {result.fingerprint}, not "
                       f"{fingerprint}")
        elif result.best is None:
            problem = "the result has no best configuration"
        else:
            return _accept(svc, cur, fingerprint, result, now, same=same, job=job,
                           source="job", job_name=job.name)
    elif (result is not None and result.state == "Partial" and result.best is not None
          and result.baseline is not None and result.fingerprint in (None, fingerprint)):
        # The tuner was stopped (preempted, deadline) and said what it had measured:
        # a partial result, used as such (status.tuning.partial).
        return _accept(svc, cur, fingerprint, result, now, same=same, job=job,
                       source="job", job_name=job.name, job_problem=job.reason)
    else:
        detail = (result.reason if result is not None and result.reason else problem)
        problem = job.reason + (f" ({detail})" if detail else "")
    return _failure(svc, cur, fingerprint, job, problem, now, same=same)


def _failure(svc: LLMService, cur: JSON, fingerprint: str, job: ObservedJob, problem: str,
             now: float, *, same: bool) -> TuningDecision:
    spec = svc.spec.tuning
    failures = (int(cur.get("failures") or 0) if same else 0) + 1
    new = dict(cur) if same else _running(svc, cur, fingerprint, job.name, now, same=False,
                                          attempts=1)
    new.update(fingerprint=fingerprint, jobName=job.name, jobUid=job.uid, failures=failures,
               maxRetries=spec.max_retries,
               lastFailure={"at": rfc3339(now), "jobName": job.name, "reason": problem[:500]})
    new.setdefault("attempts", 1)
    new.pop("reason", None)
    keeps = ("the service keeps its current settings"
             + (f" (max-num-seqs {new['applied'].get('maxNumSeqs')})"
                if (new.get("applied") or {}).get("maxNumSeqs") else ""))
    if failures <= spec.max_retries:
        new["state"] = State.RETRYING.value
        new["reason"] = (f"attempt {failures} failed: {problem}; retrying "
                         f"({failures} of {spec.max_retries} retries)")
        return TuningDecision(TuningAction.RETRY, new, delete_job=True,
                        event=st.Notice("Warning", "TuningFailed",
                                     f"Tuning Job {job.name} failed: {problem}; retry "
                                     f"{failures} of {spec.max_retries} follows"),
                        why=new["reason"])
    new["state"] = State.FAILED.value
    new["finishedAt"] = rfc3339(now)
    new["reason"] = (f"{failures} attempt(s) failed, the last: {problem}; {keeps}")
    return TuningDecision(TuningAction.FAIL, new, delete_job=True,
                    event=st.Notice("Warning", "TuningFailed",
                                 f"Tuning Job {job.name} failed: {problem}; giving up after "
                                 f"{failures} attempt(s), {keeps}"),
                    why=new["reason"])


def _accept(svc: LLMService, cur: JSON, fingerprint: str, result: TuningResult, now: float, *,
            same: bool, job: ObservedJob | None, source: str, job_name: str,
            cached_at: str | None = None, job_problem: str = "") -> TuningDecision:
    tunable = tunable_fields(svc)
    applied = applied_settings(result, tunable)
    new: JSON = {
        "state": State.SUCCEEDED.value,
        "source": source,
        "fingerprint": fingerprint,
        "mode": svc.spec.tuning.mode.value,
        "tunable": tunable,
        "complete": result.state == "Succeeded",
        "trials": result.trials,
        "serverStarts": result.server_starts,
        "sweep": result.sweep,
        "wallSeconds": result.wall_seconds,
        "best": score_summary(result.best),
        "baseline": score_summary(result.baseline),
        "improvement": result.improvement,
        "versusDefaults": (result.versus_defaults.model_dump(by_alias=True, exclude_none=True)
                           if result.versus_defaults is not None else None),
        "decision": result.decision or None,
        "applied": applied,
        "finishedAt": rfc3339(now),
        "slo": dict(result.slo),
        "workload": dict(result.workload),
    }
    if result.table:
        new["table"] = trial_table(result.table)
    if result.state != "Succeeded":
        new["partial"] = True
        new["partialReason"] = "; ".join(x for x in (result.reason, job_problem) if x) or (
            "the budget ran out")
    note = revision_note(svc.spec)
    if note:
        new["revisionNote"] = note
    if source == "job" and job is not None:
        if same:
            _carry(cur, new, "gpuMinutes")  # earlier attempts of this run
        new.update(jobName=job.name, jobUid=job.uid,
                   attempts=int(cur.get("attempts") or 1) if same else 1,
                   failures=int(cur.get("failures") or 0) if same else 0)
        _carry(cur, new, "startedAt")
    else:
        new["cachedAt"] = cached_at
    _carry(cur, new, "retuneRequest")
    new = {k: v for k, v in new.items() if v is not None}
    new["reason"] = accepted_message(result, applied, source)
    cache = cache_entry(result, svc, now) if source == "job" else None
    return TuningDecision(TuningAction.ACCEPT if source == "job" else TuningAction.USE_CACHE, new,
                    delete_job=job is not None, cache_entry=cache,
                    event=st.Notice("Normal", "TuningSucceeded", new["reason"]),
                    why=new["reason"])

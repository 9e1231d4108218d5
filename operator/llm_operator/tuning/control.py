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
``best``, ``baseline``, ``improvement``, ``trials``, ``wallSeconds``, ``table``
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
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..api.constants import ANNOTATION_FINGERPRINT, ANNOTATION_RETUNE
from ..api.models import LLMService, TuningMode, TuningPlacement
from ..api.timestamps import parse_rfc3339_or_none, rfc3339
from ..health import status as st
from ..inpod.tuner.result import (
    TABLE_COLUMNS,
    ResultParseError,
    Score,
    TuningResult,
    parse_result,
    slo_ms,
)
from ..planning import OVERRIDABLE, Plan
from ..rendering.deployment import PROGRESS_MARGIN_SECONDS
from ..rendering.leaderworkerset import is_multi_node
from .budget import BudgetCheck, gpu_minutes
from .fingerprint import revision_note
from .placement import placement_error, runs_on_spare

JSON = dict[str, Any]

CACHE_CONFIGMAP = "llm-operator-tuning-cache"
CACHE_MAX_ENTRIES = 100  # ~4.5 KB each: far below a ConfigMap's 1 MiB
TUNER_CONTAINER = "tuner"


class State(StrEnum):
    """``status.tuning.state``."""

    RUNNING = "Running"
    RETRYING = "Retrying"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PENDING = "Pending"
    SKIPPED = "Skipped"
    CANCELLED = "Cancelled"
    QUEUED = "Queued"


SETTLED = {State.SUCCEEDED, State.FAILED, State.SKIPPED}
IN_FLIGHT = {State.RUNNING, State.RETRYING}
# A run the operator steps every PROGRESS_INTERVAL_SECONDS: in flight, or queued for the
# tuning GPU budget (its Job is created once the budget has room).
STEPPED = IN_FLIGHT | {State.QUEUED}


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


class JobPhase(StrEnum):
    RUNNING = "Running"
    COMPLETE = "Complete"
    FAILED = "Failed"


@dataclass(frozen=True)
class ObservedJob:
    """What the operator needs of a tuning Job, read from its object (pure)."""

    name: str
    uid: str | None
    fingerprint: str | None
    phase: JobPhase
    reason: str = ""  # a failed Job's condition reason and message
    deleting: bool = False
    created: float | None = None  # metadata.creationTimestamp, seconds since the epoch

    @property
    def finished(self) -> bool:
        """Complete or Failed."""
        return self.phase is not JobPhase.RUNNING

    @classmethod
    def from_object(cls, job: Mapping[str, Any]) -> ObservedJob:
        """Read a ``batch/v1`` Job: its finish from the ``Complete``/``Failed`` conditions
        (what the Job controller sets), its fingerprint from our annotation."""
        meta = job.get("metadata") or {}
        phase, reason = JobPhase.RUNNING, ""
        for cond in (job.get("status") or {}).get("conditions") or []:
            if cond.get("status") != "True":
                continue
            if cond.get("type") == "Complete":
                phase = JobPhase.COMPLETE
            elif cond.get("type") == "Failed":
                phase = JobPhase.FAILED
                reason = ": ".join(x for x in (cond.get("reason"), cond.get("message")) if x)
        return cls(
            name=str(meta.get("name")),
            uid=meta.get("uid"),
            fingerprint=(meta.get("annotations") or {}).get(ANNOTATION_FINGERPRINT),
            phase=phase,
            reason=reason or ("the Job failed" if phase is JobPhase.FAILED else ""),
            deleting=bool(meta.get("deletionTimestamp")),
            created=_time(meta.get("creationTimestamp")),
        )


_time = parse_rfc3339_or_none


# A Job with no pod, or a pod Pending without the scheduler saying why, is reported after
# this long (an Unschedulable pod at once): a pod is normally placed and started sooner.
NO_POD_REPORT_SECONDS = 60


@dataclass(frozen=True)
class PendingPod:
    """A tuning Job whose pod does not run yet, as the scheduler and kubelet tell it."""

    since: float  # seconds since the epoch: when it started waiting
    reason: str  # Unschedulable | Pending (scheduled, not started) | NoPod
    message: str  # the scheduler's (or kubelet's) own words
    scheduled: bool = False
    pod: str | None = None

    def waited(self, now: float) -> float:
        """Seconds waited by ``now``."""
        return max(0.0, now - self.since)


def pending_pod(pods: Sequence[Mapping[str, Any]], job: ObservedJob | None,
                now: float) -> PendingPod | None:
    """Why a running tuning Job's pod does not run (None when it runs, or has not
    waited long enough to say). Unscheduled: the ``PodScheduled=False`` condition's
    reason and message (``0/4 nodes are available: 4 Insufficient nvidia.com/gpu``), at
    once. Otherwise Pending for :data:`NO_POD_REPORT_SECONDS`: the waiting container's
    reason (``ImagePullBackOff``), or that the scheduler has not placed it yet.
    No pod at all after :data:`NO_POD_REPORT_SECONDS`: the Job controller could not make
    one (a missing PriorityClass, a ResourceQuota), which the Job's Events tell."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    if not live:
        if job is None or job.created is None or now - job.created < NO_POD_REPORT_SECONDS:
            return None
        return PendingPod(job.created, "NoPod",
                          f"the Job has created no pod (kubectl describe job {job.name} "
                          "shows why: a missing PriorityClass or a ResourceQuota)")
    newest = max(live, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")))
    meta, status = newest.get("metadata") or {}, newest.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    created = _time(meta.get("creationTimestamp")) or now
    name = meta.get("name")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            since = _time(cond.get("lastTransitionTime")) or created
            return PendingPod(since, str(cond.get("reason") or "Unschedulable"),
                              str(cond.get("message") or "not scheduled yet"), pod=name)
    if now - created < NO_POD_REPORT_SECONDS:
        return None  # a pod being placed or started: Pending only says something later
    scheduled = any(c.get("type") == "PodScheduled" and c.get("status") == "True"
                    for c in status.get("conditions") or [])
    waiting = [str((cs.get("state") or {}).get("waiting", {}).get("reason") or "")
               + (": " + str(cs["state"]["waiting"]["message"])
                  if (cs.get("state") or {}).get("waiting", {}).get("message") else "")
               for cs in [*(status.get("initContainerStatuses") or []),
                          *(status.get("containerStatuses") or [])]
               if (cs.get("state") or {}).get("waiting")]
    detail = "; ".join(w for w in waiting if w) or (
        "scheduled, containers not started" if scheduled else "not scheduled yet")
    return PendingPod(created, "Pending", detail, scheduled=scheduled, pod=name)


def pending_limit_seconds(svc: LLMService, pending: PendingPod) -> int:
    """How long a pod may wait before the run is given up: ``maxPendingMinutes`` for
    GPUs; a scheduled pod gets the image-pull margin on top (pulling a vLLM image is
    progress, not starvation)."""
    limit = svc.spec.tuning.max_pending_minutes * 60
    return limit + (PROGRESS_MARGIN_SECONDS if pending.scheduled else 0)


def termination_message(pods: Sequence[Mapping[str, Any]],
                        container: str = TUNER_CONTAINER) -> str | None:
    """The tuner container's termination message from the Job's pods (the newest pod
    that has one): where the tuner leaves its compact result JSON."""
    found: list[tuple[str, str]] = []
    for pod in pods:
        created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") != container:
                continue
            for key in ("state", "lastState"):
                term = (cs.get(key) or {}).get("terminated") or {}
                if term.get("message"):
                    found.append((created, str(term["message"])))
                    break
    return max(found)[1] if found else None


def pod_failure(pods: Sequence[Mapping[str, Any]], container: str = TUNER_CONTAINER) -> str:
    """Why a failed tuning Job's pods ended, in the kubelet's words ("" when none says):
    a pod evicted (``status.reason`` ``Evicted``, with the node's message: memory or disk
    pressure, a preemption) or the tuner container killed (``OOMKilled``, exit code 137,
    or another signal). The Job's own ``Failed`` reason (``BackoffLimitExceeded``) does
    not tell these apart, and they need different fixes."""
    said: list[str] = []
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get(
            "creationTimestamp") or "")):
        name = (pod.get("metadata") or {}).get("name")
        status = pod.get("status") or {}
        if status.get("reason"):
            text = f"pod {name} {status['reason']}"
            said.append(text + (f": {status['message']}" if status.get("message") else ""))
            continue
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") != container:
                continue
            for key in ("state", "lastState"):
                term = (cs.get(key) or {}).get("terminated") or {}
                code, reason = term.get("exitCode"), term.get("reason")
                if reason == "OOMKilled" or (isinstance(code, int) and code > 128):
                    said.append(f"container {container} of pod {name} {reason or 'killed'} "
                                f"(exit code {code})"
                                + ("; give the tuning pod more memory (spec.resources.memory)"
                                   if reason == "OOMKilled" else ""))
                    break
    return "; ".join(dict.fromkeys(said))[:300]


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


# --------------------------------------------------------------------------- results
def score_summary(score: Score | None) -> JSON | None:
    """One configuration's evidence for ``status.tuning`` (settings absent = vLLM's
    default)."""
    if score is None:
        return None
    out: JSON = {}
    if score.settings.max_num_seqs is not None:
        out["maxNumSeqs"] = score.settings.max_num_seqs
    if score.settings.max_num_batched_tokens is not None:
        out["maxNumBatchedTokens"] = score.settings.max_num_batched_tokens
    if score.settings.enable_chunked_prefill is not None:
        out["enableChunkedPrefill"] = score.settings.enable_chunked_prefill
    out.update(goodput=score.goodput, spread=score.spread, repeats=score.repeats,
               throughput=score.throughput, ttftP95Ms=score.ttft_p95_ms,
               itlP95Ms=score.itl_p95_ms, preemptions=score.preemptions)
    if score.met_runs is not None:
        out["metRuns"] = score.met_runs
    return out


def trial_table(rows: Sequence[Sequence[Any]]) -> list[JSON]:
    """The result's compact trial rows as readable records (a setting absent: vLLM's
    default; ``goodput`` absent: the trial failed, ``error`` says why)."""
    return [{col: value for col, value in zip(TABLE_COLUMNS, row, strict=False)
             if value is not None} for row in rows]


def applied_settings(result: TuningResult, tunable: Sequence[str]) -> JSON:
    """What the Deployment should run with: the best configuration's tunable settings,
    or nothing when the best is the baseline or does not beat it (then vLLM's defaults
    were as good as anything tried, and the service keeps its planned values). A result
    with a paired interval against the defaults (``versusDefaults``) already is the
    decision; an older one without it is judged by its medians."""
    best, base = result.best, result.baseline
    if best is None:
        return {}
    if base is not None and best.settings == base.settings:
        return {}
    if result.versus_defaults is None and base is not None and best.goodput <= base.goodput:
        return {}
    if best.settings.enable_chunked_prefill is False:
        # Measured with chunked prefill off, which the operator does not switch (vLLM
        # 0.32 does not officially support it for generate models): its other values
        # alone were not measured, so nothing is applied.
        return {}
    values = {"maxNumSeqs": best.settings.max_num_seqs,
              "maxNumBatchedTokens": best.settings.max_num_batched_tokens}
    return {k: v for k, v in values.items() if k in tunable and isinstance(v, int) and v > 0}


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


def accepted_message(result: TuningResult, applied: Mapping[str, int], source: str) -> str:
    """One line on what a result changed and why (condition message and Event)."""
    best, base = result.best, result.baseline
    where = "reused the cached result" if source == "cache" else (
        f"{result.trials} trial(s) in {result.wall_seconds:.0f} s")
    partial = "" if result.state == "Succeeded" else (
        f" (partial, {result.trials} trial(s): {result.reason or 'the budget ran out'})")
    evidence = ""
    if result.decision:
        evidence = result.decision
    elif best is not None:
        evidence = f"best goodput {best.goodput:g} tok/s"
        if base is not None:
            ratio = f"{result.improvement:g}x " if result.improvement is not None else ""
            evidence += f", {ratio}vLLM's defaults ({base.goodput:g} tok/s)"
    if applied:
        change = "running with " + ", ".join(f"{_flag(k)} {v}" for k, v in applied.items())
    elif base is not None and base.goodput <= 0 and (best is None or best.goodput <= 0):
        change = ("settings unchanged, but vLLM's defaults met the SLO"
                  f"{_slo_text(result.slo)} for no request {_where_unmet(base)} and no "
                  "configuration tried beat them: relax spec.workload.slo, or give the "
                  "service more or larger GPUs (spec.gpus)")
    elif base is not None and _misses(base, result.slo):
        change = ("settings unchanged, but vLLM's defaults missed the SLO"
                  f"{_slo_text(result.slo)} in the tuning runs (TTFT p95 "
                  f"{base.ttft_p95_ms:g} ms, ITL p95 {base.itl_p95_ms:g} ms, mean of "
                  f"{base.repeats}) and no configuration tried was shown to meet it: relax "
                  "spec.workload.slo, or give the service more or larger GPUs (spec.gpus)")
    else:
        change = "the defaults were best: settings unchanged"
    return f"Tuned{partial}: {change}; {evidence}; {where}"


def _where_unmet(score: Score) -> str:
    """Where a score without goodput (the median of its runs) met the SLO for no request:
    in every tuning run only where none had goodput (``metRuns`` 0); else in the typical
    run, with how many runs met it for some (a result without ``metRuns``: unknown)."""
    if score.met_runs == 0:
        return "in the tuning runs"
    if score.met_runs is None:
        return "in their typical tuning run"
    return (f"in their typical tuning run (some did in {score.met_runs} of "
            f"{score.repeats} runs)")


def _misses(score: Score, slo: Mapping[str, float]) -> bool:
    """Whether a score's mean p95 latencies (what ``status.tuning`` shows) miss the SLO."""
    ttft, itl = slo_ms(slo)
    return bool((ttft is not None and score.ttft_p95_ms > ttft)
                or (itl is not None and score.itl_p95_ms > itl))


def _slo_text(slo: Mapping[str, float]) -> str:
    """The result's SLO as the spec states it, e.g. `` (TTFT p95 <= 2000 ms, ...)``."""
    parts = [f"{name} <= {value:g} ms" for name, value in zip(
        ("TTFT p95", "ITL p95"), slo_ms(slo), strict=True) if value is not None]
    return f" ({', '.join(parts)})" if parts else ""


def _flag(key: str) -> str:
    return {"maxNumSeqs": "--max-num-seqs",
            "maxNumBatchedTokens": "--max-num-batched-tokens"}.get(key, key)


# --------------------------------------------------------------------------- cache
def cache_entry(result: TuningResult, svc: LLMService, now: float) -> JSON:
    """The cache record of one result (compact JSON under its fingerprint)."""
    return {"at": rfc3339(now), "service": f"{svc.metadata.namespace}/{svc.metadata.name}",
            "result": json.loads(result.to_message())}


def cache_text(entry: Mapping[str, Any]) -> str:
    """A cache entry as the ConfigMap value (compact JSON)."""
    return json.dumps(entry, separators=(",", ":"), sort_keys=True)


def parse_cache_value(text: str | None) -> JSON | None:
    """A ConfigMap value back into a cache entry (None when absent or unreadable)."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _cached_result(cached: Mapping[str, Any] | None, fingerprint: str) -> TuningResult | None:
    if not cached or not isinstance(cached.get("result"), dict):
        return None
    try:
        result = parse_result(json.dumps(cached["result"]))
    except ResultParseError:
        return None
    if result.state == "Failed" or result.best is None or result.fingerprint not in (
            None, fingerprint):
        return None
    return result


def cache_evictions(data: Mapping[str, str], keep: int = CACHE_MAX_ENTRIES) -> list[str]:
    """Keys to drop so that at most ``keep - 1`` entries stay before one is added (the
    oldest first, by their ``at``)."""
    if len(data) < keep:
        return []
    def when(key: str) -> str:
        return str((parse_cache_value(data[key]) or {}).get("at") or "")
    ordered = sorted(data, key=lambda k: (when(k), k))
    return ordered[: len(data) - keep + 1]


# --------------------------------------------------------------------------- status
TUNED_REASONS = {
    State.RUNNING: ("Unknown", "TuningInProgress"),
    State.RETRYING: ("False", "TuningRetrying"),
    State.SUCCEEDED: ("True", "TuningSucceeded"),
    State.FAILED: ("False", "TuningFailed"),
    State.PENDING: ("False", "WaitingForRetuneRequest"),
    State.SKIPPED: ("False", "NothingToTune"),
    State.CANCELLED: ("False", "TuningDisabled"),
    State.QUEUED: ("Unknown", "TuningQueued"),
}


def tuned_condition(tuning: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(status, reason, message)`` of the ``Tuned`` condition for ``status.tuning``
    (None when there is no tuning state to report)."""
    try:
        state = State(str(tuning.get("state")))
    except ValueError:
        return None
    status, reason = TUNED_REASONS[state]
    if state is State.SUCCEEDED and tuning.get("source") == "cache":
        reason = "TuningCached"
    if state is State.SUCCEEDED and tuning.get("partial"):
        reason = "TuningPartial"
    if state is State.FAILED and tuning.get("unschedulable"):
        reason = "TuningUnschedulable"
    if state is State.SKIPPED and tuning.get("invalidField"):
        reason = "InvalidTuningSpec"
    pending = tuning.get("pending") or {}
    if state is State.RUNNING and pending:
        return ("Unknown", "TuningPending",
                f"Job {tuning.get('jobName')}: pod {pending.get('pod') or '(none)'} waits "
                f"since {pending.get('since')}: {pending.get('reason')}: "
                f"{pending.get('message')}; the run is given up after "
                f"{int(pending.get('giveUpAfterSeconds') or 0) // 60} min")
    if state is State.RUNNING:
        retry = int(tuning.get("attempts") or 1) - 1
        message = (f"Job {tuning.get('jobName')} is benchmarking "
                   f"{', '.join(tuning.get('tunable') or [])}"
                   + (f" (retry {retry} of {tuning.get('maxRetries')})" if retry > 0 else "")
                   + ("; one serving replica is lent to it until it ends"
                      if tuning.get("borrowedReplicas") else "")
                   + ("; the server starts when it ends" if tuning.get("beforeServing")
                      else ""))
    else:
        message = str(tuning.get("reason") or state.value)
    return status, reason, message


def with_tuned_condition(conditions: Sequence[Mapping[str, Any]], tuning: Mapping[str, Any],
                         *, generation: int | None, now: float) -> list[JSON]:
    """``conditions`` with ``Tuned`` set from ``status.tuning`` (unchanged when there is
    no tuning state)."""
    cond = tuned_condition(tuning)
    if cond is None:
        return [dict(c) for c in conditions]
    return st.set_condition(conditions, st.ConditionType.TUNED, cond[0], cond[1], cond[2],
                            generation=generation, now=now)


def overrides_changed(before: Mapping[str, Any] | None, tuning_after: Mapping[str, Any]) -> bool:
    """Whether the engine overrides the renderer reads change when ``status.tuning``
    becomes ``tuning_after`` (then the Deployment must be re-rendered)."""
    before = dict(before or {})
    after = {**before, "tuning": dict(tuning_after)}
    return st.engine_overrides(before) != st.engine_overrides(after)


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``: keys that went
    away become None; lists and scalars are replaced whole. ``{}`` when equal."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: JSON = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            if isinstance(old[key], dict) and isinstance(value, dict):
                sub = merge_patch(old[key], value)
                if sub:
                    patch[key] = sub
            else:
                patch[key] = value
    return patch

"""What the operator reads of a tuning Job and its pods (pure): the Job's phase
(:class:`ObservedJob`), a pod that waits (:func:`pending_pod`), the tuner's
termination message and why a pod ended."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..api.constants import ANNOTATION_FINGERPRINT
from ..api.models import LLMService
from ..api.timestamps import parse_rfc3339_or_none
from ..rendering.deployment import PROGRESS_MARGIN_SECONDS

TUNER_CONTAINER = "tuner"


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

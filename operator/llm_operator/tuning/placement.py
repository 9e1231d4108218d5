"""Where a tuning run gets its GPUs (pure): ``spec.tuning.placement``.

The tuning Job needs the GPUs of one replica for up to ``maxDurationMinutes``. Taken
carelessly they come from serving: on a full cluster a Job at the service's own priority
waits Pending for hours, and during a rollout it races the new server pod for the GPUs
the old one freed. Three placements, each of which never takes a GPU serving needs:

``Spare`` (the default)
    Extra GPUs, at a PriorityClass below every serving pod's that never preempts
    (``preemptionPolicy: Never``; the chart creates it, ``LLMOP_TUNING_PRIORITY_CLASS``
    names it, ``spec.tuning.priorityClassName`` overrides it). The scheduler places a
    waiting server pod before it, a server pod can preempt it (the tuner then reports
    what it measured so far), and when no GPU is spare the operator gives up after
    ``spec.tuning.maxPendingMinutes`` and says so. Why the default: it is the only
    placement that costs serving nothing, on any cluster and any replica count; the
    worst case is a run that does not happen, reported in the ``Tuned`` condition.
``BorrowReplica``
    Serving scales down by one replica while the run goes on (its GPUs go to the Job,
    at the service's own priority) and back up when the run ends, however it ends.
    Needs ``spec.replicas`` >= 2: with one replica it would stop serving.
``BeforeServing``
    A new service tunes on its own GPUs before its server exists; the server starts
    on the tuned settings (or the planned ones if the run fails). Later rollouts of a
    service that already served tune as ``Spare`` (taking a serving service down to
    tune it is never wanted).

The controller reads these through :func:`serving_view` (the replicas the workload
runs with now) and :func:`held_before_serving` (the workload waits for the run); both
depend only on the spec and ``status``, so a restarted operator renders the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api.errors import SpecError
from ..api.models import LLMService, TuningMode, TuningPlacement
from ..planning import OVERRIDABLE, Plan
from ..rendering.leaderworkerset import is_multi_node
from ..settings import Settings

# status.tuning.state values (control.State; not imported: control imports this module)
_IN_FLIGHT = ("Running", "Retrying")
HELD_REASON = "TuningBeforeServing"


def placement_error(svc: LLMService) -> SpecError | None:
    """The error for a placement the spec cannot have (None when it can)."""
    spec = svc.spec
    if spec.tuning.placement is TuningPlacement.BORROW_REPLICA and spec.replicas < 2:
        return SpecError(
            "spec.tuning.placement",
            f"BorrowReplica needs at least 2 replicas, but spec.replicas is {spec.replicas}: "
            "borrowing the only replica would stop serving while tuning runs",
            "set spec.tuning.placement to Spare (extra GPUs at a lower priority) or "
            "BeforeServing (a new service tunes before it serves), or raise spec.replicas "
            "to 2 or more")
    return None


def runs_on_spare(svc: LLMService, *, held: bool = False) -> bool:
    """Whether the run takes extra GPUs: placement ``Spare``, or ``BeforeServing`` for a
    service whose workload is not held for it (it served already: see
    :func:`held_before_serving`)."""
    placement = svc.spec.tuning.placement
    return placement is TuningPlacement.SPARE or (
        placement is TuningPlacement.BEFORE_SERVING and not held)


def job_priority_class(svc: LLMService, settings: Settings, *, held: bool = False
                       ) -> str | None:
    """The tuning pod's ``priorityClassName``. On spare GPUs the tuning class
    (``spec.tuning.priorityClassName``, else ``LLMOP_TUNING_PRIORITY_CLASS``; an empty
    setting keeps the service's own); otherwise the service's own (the Job runs on GPUs
    the service gave up for it, so it must not lose them to anyone else)."""
    own = svc.spec.scheduling.priority_class_name
    if runs_on_spare(svc, held=held):
        return svc.spec.tuning.priority_class_name or settings.tuning_priority_class or own
    return own


def borrowed_replicas(svc: LLMService, status: Mapping[str, Any] | None) -> int:
    """Replicas lent to a tuning run now: 1 while a ``BorrowReplica`` run is in flight
    (recorded as ``status.tuning.borrowedReplicas`` when it started), else 0."""
    tuning = (status or {}).get("tuning") or {}
    if (svc.spec.tuning.placement is TuningPlacement.BORROW_REPLICA
            and svc.spec.replicas >= 2 and tuning.get("state") in _IN_FLIGHT
            and svc.spec.tuning.mode is not TuningMode.DISABLED):
        return max(0, min(1, int(tuning.get("borrowedReplicas") or 0)))
    return 0


def serving_view(svc: LLMService, status: Mapping[str, Any] | None) -> LLMService:
    """``svc`` as the workload renders it now: ``spec.replicas`` less the replica lent
    to a running ``BorrowReplica`` run (the same object when none is lent). Plan with
    the original: the fingerprint and the plan do not change while a replica is lent."""
    lent = borrowed_replicas(svc, status)
    if not lent:
        return svc
    spec = svc.spec.model_copy(update={"replicas": svc.spec.replicas - lent})
    return svc.model_copy(update={"spec": spec})


def held_before_serving(svc: LLMService, plan: Plan, status: Mapping[str, Any] | None
                        ) -> str | None:
    """Why the server workload is not created yet (None: render it).

    Held while placement is ``BeforeServing``, mode ``OnRollout``, something is tunable
    in one pod, the service never had a workload (no ``Available`` condition yet) and
    its first run has not settled (Succeeded, Failed, Skipped, Cancelled all release)."""
    spec = svc.spec
    if (spec.tuning.placement is not TuningPlacement.BEFORE_SERVING
            or spec.tuning.mode is not TuningMode.ON_ROLLOUT or is_multi_node(plan)):
        return None
    if all(isinstance(getattr(spec.engine, attr), int) for attr in OVERRIDABLE.values()):
        return None
    status = status or {}
    if any(c.get("type") == "Available" for c in status.get("conditions") or []):
        return None  # it served (or tried to): never hold a running service back
    tuning = status.get("tuning") or {}
    state = tuning.get("state")
    if state not in (None, *_IN_FLIGHT):
        return None
    jobs = f" (Job {tuning['jobName']})" if tuning.get("jobName") else ""
    return (f"spec.tuning.placement is BeforeServing: the first tuning run{jobs} uses this "
            "service's GPUs; the server starts on the tuned settings when it ends")


def render_changed(svc: LLMService, plan: Plan, before: Mapping[str, Any] | None,
                   tuning_after: Mapping[str, Any]) -> bool:
    """Whether the workload renders differently once ``status.tuning`` becomes
    ``tuning_after``: a replica lent or returned, or a held workload released."""
    after = {**(before or {}), "tuning": dict(tuning_after)}
    return (borrowed_replicas(svc, before) != borrowed_replicas(svc, after)
            or held_before_serving(svc, plan, before) != held_before_serving(svc, plan, after))

"""``status.tuning``'s states (:class:`State`), the ``Tuned`` condition they set, and
the merge patch that writes the status (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from ..health import status as st

JSON = dict[str, Any]


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

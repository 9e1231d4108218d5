"""What the policy remembers of a service between ticks (:class:`AdaptationState`, its
history of changes), the state after a change (:func:`record`) and
``status.adaptation``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from ..api.timestamps import parse_rfc3339, rfc3339
from .decision import CapDecision
from .evidence import Observation, _Camel
from .thresholds import DEFAULT_POLICY, PolicySettings


class CapChange(_Camel):
    """One applied change of the cap."""

    at: float
    from_value: int
    to_value: int
    reason: str
    kv_fit: int | None = Field(
        None, description="Sequences of the observed request size the KV cache held when the "
        "change was made (a later change of request mix may undo it)")
    binding: bool = Field(
        True, description="The change cut into the running batch (a lower below the running "
        "peak) or raised past the demand: it was step-limited and started the cooldown. "
        "False: it changed nothing for running requests (see CapDecision.binding)")

    @property
    def lowered(self) -> bool:
        """True for a lower, False for a raise."""
        return self.to_value < self.from_value


class AdaptationState(_Camel):
    """What the controller remembers of one service between ticks."""

    current: int = Field(ge=1, description="The cap the Deployment runs with")
    last_change_at: float | None = None
    history: tuple[CapChange, ...] = ()

    def to_status(self) -> dict[str, Any]:
        """The state as ``status.adaptation`` fields (camelCase, RFC 3339 times)."""
        return {
            "currentMaxNumSeqs": self.current,
            "lastChangeTime": _iso(self.last_change_at),
            "history": [
                {
                    "time": _iso(c.at),
                    "from": c.from_value,
                    "to": c.to_value,
                    "reason": c.reason,
                    **({} if c.kv_fit is None else {"kvFit": c.kv_fit}),
                    "binding": c.binding,
                }
                for c in self.history
            ],
        }

    @classmethod
    def from_status(cls, status: Mapping[str, Any], current: int) -> AdaptationState:
        """Rebuild the state from ``status.adaptation`` (``current`` when it has none)."""
        history = tuple(
            CapChange(
                at=parse_rfc3339(h["time"]),
                from_value=int(h["from"]),
                to_value=int(h["to"]),
                reason=str(h.get("reason", "")),
                kv_fit=int(h["kvFit"]) if h.get("kvFit") is not None else None,
                binding=h.get("binding") is not False,  # older entries: all bound
            )
            for h in status.get("history") or []
            if h.get("time")
        )
        last = status.get("lastChangeTime")
        return cls(
            current=int(status.get("currentMaxNumSeqs") or current),
            last_change_at=parse_rfc3339(last) if last else None,
            history=history,
        )


def record(state: AdaptationState, decision: CapDecision, settings: PolicySettings = DEFAULT_POLICY,
           ) -> AdaptationState:
    """The state after ``decision`` was applied (unchanged for a hold)."""
    if not decision.changed or decision.value is None or decision.current is None:
        return state
    fit = decision.evidence.get("kvFit")
    change = CapChange(at=decision.at, from_value=decision.current, to_value=decision.value,
                       reason=decision.reason, kv_fit=fit if isinstance(fit, int) else None,
                       binding=decision.binding)
    history = (*state.history, change)[-settings.history_length:]
    return AdaptationState(current=decision.value, last_change_at=decision.at, history=history)


def adaptation_status(
    state: AdaptationState, decision: CapDecision, observation: Observation | None
) -> dict[str, Any]:
    """``status.adaptation`` after a tick (pure): the state (current cap, last change time,
    history), the last observation summary and the last decision with its reason.

    Pass the state AFTER :func:`record` in Apply mode; in Recommend mode the unchanged
    state (the decision then reads as a recommendation).
    """
    return {
        **state.to_status(),
        "lastObservation": None if observation is None else {
            **observation.summary(), "time": _iso(observation.evaluated_at),
            "error": observation.error,
        },
        "lastDecision": {
            "time": _iso(decision.at),
            "action": decision.action.value,
            "from": decision.current,
            "to": decision.value,
            "reason": decision.reason,
            **({} if not decision.changed else {
                "binding": decision.binding,
                "free": None if decision.free_to is None else {
                    "to": decision.free_to, "reason": decision.free_reason}}),
        },
    }


def _iso(t: float | None) -> str | None:
    return None if t is None else rfc3339(t)

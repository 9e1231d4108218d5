"""What a decision is: the action, its cause as a code, and :class:`CapDecision`."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from .evidence import Evidence, _Camel


class CapAction(StrEnum):
    """What a decision does to the cap."""

    RAISE = "raise"
    LOWER = "lower"
    HOLD = "hold"


class DecisionCause(StrEnum):
    """What a decision turned on, as one code of a fixed set (the ``cause`` label of the
    operator's ``llmop_adaptation_decisions_total``; the reason text says the rest).

    Holds: ``pinned`` (spec.engine.maxNumSeqs), ``disabled`` (mode Disabled),
    ``no_state`` (the running cap not known yet), ``no_data`` (missing, unavailable,
    stale or too little data), ``settling`` (the window still holds samples from before
    the last change), ``steady`` (nothing asks for a move), ``at_bound`` (a move is
    wanted but the cap is at the bound it would cross), ``cooldown``, ``flap`` (the move
    would undo a recent change without strong evidence), ``applying`` (a change on its
    way: a rollout or the engines' report of a live cap). Moves: ``out_of_bounds`` (the
    cap was outside its bounds), ``preemptions`` / ``kv_usage`` (KV exhaustion or usage
    above the high watermark), ``ttft_slo`` (KV pressure with the TTFT p95 above its SLO,
    ``preemptions: Tolerate``), ``itl_slo`` (inter-token latency p95 above its SLO with
    the batch busy), ``queue`` (running at the cap with requests waiting and KV room),
    ``below_kv_fit`` (a queue below the KV fit)."""

    PINNED = "pinned"
    DISABLED = "disabled"
    NO_STATE = "no_state"
    NO_DATA = "no_data"
    SETTLING = "settling"
    STEADY = "steady"
    AT_BOUND = "at_bound"
    COOLDOWN = "cooldown"
    FLAP = "flap"
    APPLYING = "applying"
    OUT_OF_BOUNDS = "out_of_bounds"
    PREEMPTIONS = "preemptions"
    KV_USAGE = "kv_usage"
    TTFT_SLO = "ttft_slo"
    ITL_SLO = "itl_slo"
    QUEUE = "queue"
    BELOW_KV_FIT = "below_kv_fit"


class CapDecision(_Camel):
    """One decision for one service: the action, the new cap, why (``reason`` for a
    person, ``cause`` as a code), and the numbers behind it."""

    namespace: str
    name: str
    action: CapAction
    current: int | None
    value: int | None = Field(description="The cap after the decision (current on hold)")
    reason: str
    cause: DecisionCause = Field(description="What the decision turned on, as a code")
    evidence: Evidence = Field(default_factory=dict)
    at: float
    free_to: int | None = Field(
        None, description="A move: the cap it reaches without changing anything for running "
        "requests (a lower to no less than the running peak, a raise to no more than the "
        "demand), with no step limit and no cooldown; None when no part of it is free")
    free_reason: str | None = Field(None, description="Why that part is free")
    binding: bool = Field(
        False, description="A move: some of it cuts into the running batch (below the running "
        "peak) or raises past the demand; that part is step-limited (maxStepPercent of the "
        "binding value) and starts the cooldown")

    @property
    def changed(self) -> bool:
        """True when the decision moves the cap."""
        return self.action is not CapAction.HOLD

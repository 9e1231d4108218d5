"""What the operator changes by itself and how the pods are replaced:
``spec.tuning``, ``spec.adaptation`` and ``spec.rollout``."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator

from .base import AutoInt, _Model
from .formats import SUBDOMAIN_PATTERN


class TuningMode(StrEnum):
    ON_ROLLOUT = "OnRollout"
    MANUAL = "Manual"
    DISABLED = "Disabled"


class TuningPlacement(StrEnum):
    """Where the tuning Job gets its GPUs (see the CRD's description of
    ``spec.tuning.placement`` and :mod:`llm_operator.tuning.placement`)."""

    SPARE = "Spare"  # extra GPUs at a lower priority that never preempts
    BORROW_REPLICA = "BorrowReplica"  # one serving replica stands down while tuning runs
    BEFORE_SERVING = "BeforeServing"  # a new service tunes before its server starts


class TuningSpec(_Model):
    mode: TuningMode = TuningMode.ON_ROLLOUT
    max_trials: int = Field(default=12, ge=1, le=100)
    # The lower end of a candidate's paired interval must clear 1 + this / 100 (issue 32).
    min_gain_percent: int = Field(default=5, ge=0, le=100)
    max_duration_minutes: int = Field(default=60, ge=1, le=24 * 60)
    max_retries: int = Field(default=2, ge=0, le=10)
    placement: TuningPlacement = TuningPlacement.SPARE
    # None: the operator's LLMOP_TUNING_PRIORITY_CLASS (Spare placement only).
    priority_class_name: str | None = Field(default=None, min_length=1, max_length=253,
                                            pattern=SUBDOMAIN_PATTERN)
    max_pending_minutes: int = Field(default=10, ge=1, le=240)


class AdaptationMode(StrEnum):
    APPLY = "Apply"
    RECOMMEND = "Recommend"
    DISABLED = "Disabled"


class PreemptionPolicy(StrEnum):
    AVOID = "Avoid"
    TOLERATE = "Tolerate"


class AdaptationSpec(_Model):
    mode: AdaptationMode = AdaptationMode.RECOMMEND
    preemptions: PreemptionPolicy = PreemptionPolicy.AVOID
    interval_seconds: int = Field(default=60, ge=5, le=86_400)
    cooldown_seconds: int = Field(default=600, ge=0, le=604_800)
    min_max_num_seqs: int = Field(default=1, ge=1)
    max_max_num_seqs: AutoInt = "auto"
    max_step_percent: int = Field(default=50, ge=1, le=100)
    # Apply changes the engine's admission cap in place (no rollout) where the engine
    # supports it; False: every change rolls the workload (--max-num-seqs).
    live_cap: bool = True

    @field_validator("max_max_num_seqs")
    @classmethod
    def _positive(cls, v: AutoInt) -> AutoInt:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be at least 1 or 'auto'")
        return v


class RolloutSpec(_Model):
    """How the vLLM pods are replaced when their spec changes, and how each drains."""

    # 0: one pod at a time in place (no spare GPUs needed; one replica is an outage);
    # >= 1: that many extra replicas first, none taken down before its replacement serves.
    max_surge: int = Field(default=0, ge=0, le=1000)
    # vLLM's --shutdown-timeout: how long a replaced server may finish its requests.
    drain_seconds: int = Field(default=120, ge=0, le=3600)

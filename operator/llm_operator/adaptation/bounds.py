"""The range the cap may move in (:func:`bounds_for`) and what other parts of the
operator found for it (:class:`CapLimits`)."""

from __future__ import annotations

from pydantic import Field

from ..api.models import LLMServiceSpec
from .evidence import _Camel
from .thresholds import DEFAULT_POLICY, PolicySettings


class CapLimits(_Camel):
    """What other parts of the operator found for the cap: the planner's memory limit (an
    upper bound) and the tuning result (the starting point, not a bound)."""

    plan_max_num_seqs: int | None = Field(
        None, ge=1, description="The planner's memory limit (Plan.max_num_seqs)"
    )
    tuned: int | None = Field(
        None, ge=1, description="The tuner's best max-num-seqs (status.tuning.best), when a "
        "run succeeded: where the cap starts and what a raise above it names; never a bound "
        "(a measurement under a synthetic load must not hold the live load back)"
    )


class Bounds(_Camel):
    """The range the cap may move in, and what set each end."""

    lower: int
    upper: int
    lower_source: str
    upper_source: str


def bounds_for(spec: LLMServiceSpec, limits: CapLimits | None = None,
               settings: PolicySettings = DEFAULT_POLICY) -> Bounds:
    """The bounds of the cap: ``minMaxNumSeqs`` up to the smaller of the planner's memory
    limit and ``maxMaxNumSeqs``. The tuning result (``limits.tuned``) is not one of them."""
    limits = limits or CapLimits()
    lower = spec.adaptation.min_max_num_seqs
    uppers: list[tuple[int, str]] = []
    if limits.plan_max_num_seqs is not None:
        uppers.append((limits.plan_max_num_seqs, "the planner's memory limit"))
    if isinstance(spec.adaptation.max_max_num_seqs, int):
        uppers.append((spec.adaptation.max_max_num_seqs, "spec.adaptation.maxMaxNumSeqs"))
    if uppers:
        upper, source = min(uppers)
    else:
        upper, source = settings.default_upper_bound, (
            "the default ceiling (no plan or maxMaxNumSeqs known)")
    if upper < lower:  # a conflicting spec: the user's lower bound wins, say so
        upper, source = lower, f"spec.adaptation.minMaxNumSeqs (above {source}, {upper})"
    return Bounds(lower=lower, upper=upper, lower_source="spec.adaptation.minMaxNumSeqs",
                  upper_source=source)

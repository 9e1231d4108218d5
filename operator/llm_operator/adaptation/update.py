"""Online adaptation, the pure half of the operator's loop: which services are due,
the cap each runs with, and how a decision becomes a status patch and Events.

The loop that carries these out (fetch, call, write) is
:class:`llm_operator.controller.adaptation.AdaptationLoop`; the policy that decides is
:mod:`llm_operator.adaptation.policy`; the Prometheus reader is
:mod:`llm_operator.adaptation.prometheus`. Nothing here reads the clock or the network.

How a decision reaches the pods: ``Apply`` with a change writes
``status.adaptation.maxNumSeqs``; the reconciliation then renders the workload with it
(:func:`llm_operator.status.engine_overrides`, applied only where the user left
``spec.engine.maxNumSeqs`` to ``auto``) and rolls it. ``Recommend`` writes
``status.adaptation.recommendedMaxNumSeqs`` and an Event, never the workload.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import status as st
from ..models import AdaptationMode, LLMServiceSpec, parse_llmservice
from ..timestamps import rfc3339
from .policy import (
    DEFAULT_POLICY,
    AdaptationState,
    CapAction,
    CapDecision,
    CapLimits,
    MetricsReason,
    Observation,
    PolicySettings,
    ServiceKey,
    adaptation_status,
    data_quality,
    record,
)

IDLE_SECONDS = 15.0  # longest sleep between ticks (a new service is picked up this fast)
MIN_SLEEP_SECONDS = 1.0
JSON = dict[str, Any]


@dataclass(frozen=True)
class Service:
    """One LLMService as the loop sees it: its key, body and parsed spec."""

    key: ServiceKey
    body: Mapping[str, Any]
    spec: LLMServiceSpec

    @property
    def status(self) -> Mapping[str, Any]:
        """The body's status (empty when none)."""
        return self.body.get("status") or {}

    @property
    def generation(self) -> int | None:
        """``metadata.generation`` (None where the API server sets none)."""
        gen = (self.body.get("metadata") or {}).get("generation")
        return gen if isinstance(gen, int) else None


def parse_services(bodies: Iterable[Mapping[str, Any]]) -> dict[ServiceKey, Service]:
    """The services the loop may act on (pure): parsable specs, not being deleted.

    An invalid spec is skipped: the reconcile handler reports it.
    """
    out: dict[ServiceKey, Service] = {}
    for body in bodies:
        meta = body.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        try:
            svc = parse_llmservice(body)
        except Exception:  # noqa: BLE001 - SpecError(s) or a malformed body: not ours to report
            continue
        key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
        out[key] = Service(key=key, body=body, spec=svc.spec)
    return out


def is_pinned(spec: LLMServiceSpec) -> bool:
    """The user set ``spec.engine.maxNumSeqs``: adaptation never touches the service."""
    return isinstance(spec.engine.max_num_seqs, int)


def wants_adaptation(spec: LLMServiceSpec) -> bool:
    """Adaptation runs for the service: mode Apply or Recommend, cap left to auto."""
    return spec.adaptation.mode is not AdaptationMode.DISABLED and not is_pinned(spec)


def due_services(
    services: Mapping[ServiceKey, Service], last_run: Mapping[ServiceKey, float], now: float
) -> list[ServiceKey]:
    """The services whose ``spec.adaptation.intervalSeconds`` has passed since their last
    decision (never decided: due at once), in a stable order."""
    return sorted(
        key for key, svc in services.items()
        if wants_adaptation(svc.spec)
        and (key not in last_run or now - last_run[key] >= svc.spec.adaptation.interval_seconds)
    )


def seconds_until_next(
    services: Mapping[ServiceKey, Service], last_run: Mapping[ServiceKey, float], now: float,
    idle: float = IDLE_SECONDS,
) -> float:
    """How long the loop may sleep: until the earliest service is due, at most ``idle``,
    at least :data:`MIN_SLEEP_SECONDS`."""
    wait = idle
    for key, svc in services.items():
        if not wants_adaptation(svc.spec):
            continue
        last = last_run.get(key)
        left = 0.0 if last is None else last + svc.spec.adaptation.interval_seconds - now
        wait = min(wait, left)
    return max(MIN_SLEEP_SECONDS, wait)


def running_cap(spec: LLMServiceSpec, status: Mapping[str, Any]) -> int | None:
    """The ``--max-num-seqs`` the renderer gives the workload now: the user's pin, else the
    tuning or adaptation override (:func:`status.engine_overrides`), else the plan's value;
    None when no plan is known yet."""
    if isinstance(spec.engine.max_num_seqs, int):
        return spec.engine.max_num_seqs
    override = st.engine_overrides(status).get("maxNumSeqs")
    if override:
        return override
    planned = (status.get("plan") or {}).get("maxNumSeqs")
    return planned if isinstance(planned, int) and planned > 0 else None


def cap_limits(status: Mapping[str, Any]) -> CapLimits:
    """Upper limits for the cap from status: the planner's memory limit and the tuner's
    measured knee (the best configuration's max-num-seqs) when a run succeeded."""
    plan = (status.get("plan") or {}).get("maxNumSeqs")
    tuning = status.get("tuning") or {}
    knee = (tuning.get("best") or {}).get("maxNumSeqs") if tuning.get("state") == "Succeeded" \
        else None
    return CapLimits(plan_max_num_seqs=plan if isinstance(plan, int) and plan > 0 else None,
                     tuned_knee=knee if isinstance(knee, int) and knee > 0 else None)


def current_state(spec: LLMServiceSpec, status: Mapping[str, Any]) -> AdaptationState | None:
    """The controller's memory of a service, from status: the running cap (see
    :func:`running_cap`) with the change history kept in ``status.adaptation``."""
    cap = running_cap(spec, status)
    if cap is None:
        return None
    stored = AdaptationState.from_status(status.get("adaptation") or {}, cap)
    return stored.model_copy(update={"current": cap})


def fresher_status(status: Mapping[str, Any], written: Mapping[str, Any] | None
                   ) -> Mapping[str, Any]:
    """``status`` with ``status.adaptation`` replaced by what this loop wrote last, when the
    index has not caught up with that write yet (its last decision is older)."""
    if not written:
        return status
    have = ((status.get("adaptation") or {}).get("lastDecision") or {}).get("time") or ""
    mine = (written.get("lastDecision") or {}).get("time") or ""
    if mine > have:
        return {**status, "adaptation": {**(status.get("adaptation") or {}), **written}}
    return status


def metrics_condition(
    obs: Observation | None, now: float, policy: PolicySettings = DEFAULT_POLICY
) -> tuple[bool, MetricsReason, str]:
    """The ``MetricsAvailable`` condition for one observation (pure): whether Prometheus
    gave the signals the policy needs, the reason and the message, from the same check
    the policy holds on (:func:`~llm_operator.adaptation.policy.data_quality`)."""
    reason, text = data_quality(obs, now, policy)
    if reason is MetricsReason.OBSERVED:
        return True, reason, text
    return False, reason, f"{text}; max-num-seqs holds"


@dataclass
class Update:
    """What one decision writes: the status patch, the Events, and whether the workload
    must be re-rendered (Apply mode, the cap moved)."""

    status_patch: JSON
    events: list[st.Notice] = field(default_factory=list)
    rollout: bool = False
    adaptation: JSON = field(default_factory=dict)  # status.adaptation after the patch


def plan_update(
    svc: Service,
    decision: CapDecision,
    observation: Observation | None,
    state: AdaptationState | None,
    now: float,
    *,
    policy: PolicySettings = DEFAULT_POLICY,
    warn_again: bool = False,
) -> Update:
    """Turn one decision into the status patch and Events (pure).

    ``Apply`` and a change: ``status.adaptation.maxNumSeqs`` is the new cap, the state
    records the change (history, last change time), ``rollout`` is True and the Event says
    what moved and why. ``Recommend``: ``recommendedMaxNumSeqs`` holds the value a change
    would set (null on hold), the state is unchanged, the Event is posted only when the
    recommendation changed. ``warn_again``: repeat the Warning for an unreachable
    Prometheus even though the condition did not change.
    """
    status = svc.status
    before = dict(status.get("adaptation") or {})
    mode = svc.spec.adaptation.mode
    events: list[st.Notice] = []
    rollout = False
    if state is None:  # no plan yet: report the hold, nothing else is known
        adaptation: JSON = {
            "lastDecision": {"time": rfc3339(decision.at), "action": decision.action.value,
                             "from": None, "to": None, "reason": decision.reason},
            "mode": mode.value,
        }
    elif mode is AdaptationMode.APPLY and decision.changed and decision.value is not None:
        after = record(state, decision, policy)
        adaptation = {**adaptation_status(after, decision, observation),
                      "maxNumSeqs": decision.value, "recommendedMaxNumSeqs": None,
                      "mode": mode.value}
        rollout = True
        verb = "Lowered" if decision.action is CapAction.LOWER else "Raised"
        events.append(st.Notice("Normal", f"MaxNumSeqs{verb}", decision.reason))
    else:
        adaptation = {**adaptation_status(state, decision, observation), "mode": mode.value}
        if mode is AdaptationMode.RECOMMEND:
            recommended = decision.value if decision.changed else None
            adaptation["recommendedMaxNumSeqs"] = recommended
            if recommended is not None and recommended != before.get("recommendedMaxNumSeqs"):
                verb = "Lower" if decision.action is CapAction.LOWER else "Raise"
                events.append(st.Notice(
                    "Normal", f"MaxNumSeqs{verb}Recommended",
                    f"Recommendation (spec.adaptation.mode=Recommend, not applied): "
                    f"{decision.reason}"))
        else:
            adaptation["recommendedMaxNumSeqs"] = None
    patch: JSON = {"adaptation": adaptation}

    ok, reason, message = metrics_condition(observation, now, policy)
    conds = status.get("conditions") or []
    old = st.get_condition(conds, st.ConditionType.METRICS_AVAILABLE)
    new_conds = st.set_condition(conds, st.ConditionType.METRICS_AVAILABLE, ok, reason, message,
                                 generation=svc.generation, now=now)
    new = st.get_condition(new_conds, st.ConditionType.METRICS_AVAILABLE)
    if old is None or new is None or any(old.get(k) != new.get(k) for k in
                                         ("status", "reason", "message", "observedGeneration")):
        patch["conditions"] = new_conds
    reason_changed = old is None or old.get("reason") != str(reason)
    if not ok and (reason_changed or (reason is MetricsReason.UNAVAILABLE and warn_again)):
        events.append(st.Notice("Warning", str(reason), message))
    merged = {**before, **adaptation}
    return Update(status_patch=patch, events=events, rollout=rollout,
                  adaptation={k: v for k, v in merged.items() if v is not None})

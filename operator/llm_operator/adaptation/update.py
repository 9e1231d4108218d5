"""Online adaptation, the pure half of the operator's loop: which services are due,
the cap each runs with, and how a decision becomes a status patch and Events.

The loop that carries these out (fetch, call, write) is
:class:`llm_operator.controller.adaptation.AdaptationLoop`; the policy that decides is
:mod:`llm_operator.adaptation.policy`; the Prometheus reader is
:mod:`llm_operator.adaptation.prometheus`. Nothing here reads the clock or the network.

How a decision reaches the pods: ``Apply`` with a change writes
``status.adaptation.maxNumSeqs``; the reconciliation then renders the children with it
(:func:`llm_operator.health.status.engine_overrides`, applied only where the user left
``spec.engine.maxNumSeqs`` to ``auto``). Live (:func:`llm_operator.health.status.live_cap_in_use`):
only the admission-cap ConfigMap changes, the engines pick the cap up without a restart,
and ``status.adaptation.capRequested`` holds it until every engine reports it
(:func:`live_cap_progress`): until then the next decision holds, and the cooldown counts
from the report. Otherwise the Deployment rolls onto the new ``--max-num-seqs``, and
``status.adaptation.rolloutRequested`` holds the cap until the workload has rolled out
(:func:`rollout_progress`): until then the next decision holds, and the cooldown counts
from the rollout's completion.
``Recommend`` writes ``status.adaptation.recommendedMaxNumSeqs`` and an Event, never the
workload. Both modes write ``status.adaptation.bounds`` (the range the cap moves in and
what set each end) and ``status.adaptation.tuned`` (the tuning result the cap started
from, not a bound): :func:`cap_range`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.constants import DEFAULT_IMAGE
from ..api.models import AdaptationMode, LLMServiceSpec, parse_llmservice
from ..api.timestamps import parse_rfc3339, rfc3339
from ..health import status as st
from ..knowledge.vllm_version import LiveCapSupport, compat_table, reported_version_note
from .bounds import Bounds, CapLimits, bounds_for
from .decision import CapAction, CapDecision, DecisionCause
from .evidence import MetricsReason, Observation, ServiceKey, data_quality
from .state import AdaptationState, adaptation_status, record
from .thresholds import DEFAULT_POLICY, PolicySettings

IDLE_SECONDS = 15.0  # longest sleep between ticks (a new service is picked up this fast)
# The default of LLMOP_LIVE_CAP_REPORT_TIMEOUT_SECONDS (Settings; a test keeps them equal):
# how long a live cap change may take to show in the engines' reports before the operator
# gives up on live changes and rolls: the kubelet's ConfigMap refresh (its sync period,
# 60-90 s typically), one scrape interval (30 s by default) and the loop's interval.
LIVE_CAP_REPORT_TIMEOUT_SECONDS = 300.0
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
    tuning or adaptation override (:func:`status.engine_overrides`), else the plan's start
    (the SLO sizing's ``startMaxNumSeqs``, which the pods render; the memory limit
    ``maxNumSeqs`` where the plan has no start); None when no plan is known yet."""
    if isinstance(spec.engine.max_num_seqs, int):
        return spec.engine.max_num_seqs
    override = st.engine_overrides(status).get("maxNumSeqs")
    if override:
        return override
    plan = status.get("plan") or {}
    planned = plan.get("startMaxNumSeqs") or plan.get("maxNumSeqs")
    return planned if isinstance(planned, int) and planned > 0 else None


def decode_context_parallel_size(status: Mapping[str, Any]) -> int:
    """The plan's decode context parallel size (status.plan; 1 where absent)."""
    dcp = (status.get("plan") or {}).get("decodeContextParallelSize")
    return dcp if isinstance(dcp, int) and dcp > 1 else 1


def cap_limits(status: Mapping[str, Any]) -> CapLimits:
    """What status says of the cap's range: the planner's memory limit (an upper bound)
    and the tuning result (the best configuration's max-num-seqs, when a run succeeded:
    where the cap starts, not a bound)."""
    plan = (status.get("plan") or {}).get("maxNumSeqs")
    tuning = status.get("tuning") or {}
    tuned = (tuning.get("best") or {}).get("maxNumSeqs") if tuning.get("state") == "Succeeded" \
        else None
    return CapLimits(plan_max_num_seqs=plan if isinstance(plan, int) and plan > 0 else None,
                     tuned=tuned if isinstance(tuned, int) and tuned > 0 else None)


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


# The prefix cache "hits almost nothing" of a stated shared prefix when it holds less than
# this share of what the prefix would give (sharedPrefixTokens / inputTokens of the
# prompt tokens looked up), once the window looked up at least PREFIX_MIN_LOOKUPS
# prompts' worth of the prefix.
PREFIX_HIT_FLOOR = 0.25
PREFIX_MIN_LOOKUPS = 10


def prefix_cache_condition(spec: LLMServiceSpec, obs: Observation | None,
                           ) -> tuple[bool, str, str] | None:
    """The ``PrefixCacheHits`` condition (pure): whether vLLM's prefix cache serves the
    shared prefix the workload profile states (``spec.workload.sharedPrefixTokens``), from
    the window's hit share of the prompt tokens looked up. None: nothing to say (no
    prefix stated, or too few lookups in the window to judge)."""
    shared = spec.workload.shared_prefix_tokens
    if not shared:
        return None
    if spec.engine.enable_prefix_caching is False:
        return (False, "PrefixCachingOff",
                f"spec.workload.sharedPrefixTokens states a shared prefix of {shared} tokens, "
                "but spec.engine.enablePrefixCaching is false: every request computes it "
                "again; set enablePrefixCaching to true (vLLM's default)")
    if obs is None or obs.prefix_cache_hit_rate is None or obs.prefix_cache_query_rate is None:
        return None
    lookups = obs.prefix_cache_query_rate * obs.window_seconds
    if lookups < PREFIX_MIN_LOOKUPS * shared:
        return None
    expected = shared / spec.workload.input_tokens
    rate = obs.prefix_cache_hit_rate
    said = (f"the prefix cache held {rate:.0%} of the prompt tokens looked up over the last "
            f"{obs.window_seconds:.0f} s ({lookups:,.0f} tokens); the stated shared prefix of "
            f"{shared} tokens is {expected:.0%} of a {spec.workload.input_tokens}-token prompt")
    if rate < PREFIX_HIT_FLOOR * expected:
        return (False, "NoPrefixHits",
                f"{said}: the prompts do not start with the same tokens. Put the shared "
                "system prompt first and keep it byte-identical across requests (a "
                "timestamp, user id or request id before or inside it breaks every hit; "
                "so does another chat template or tokenizer); or set "
                "spec.workload.sharedPrefixTokens to 0 if there is no shared prefix")
    return True, "PrefixHits", said


def _changed(conds: list[Any], ctype: st.ConditionType, ok: bool, reason: str, message: str,
             generation: int | None, now: float,
             keys: tuple[str, ...] = ("status", "reason", "message", "observedGeneration"),
             ) -> tuple[list[Any] | None, Mapping[str, Any] | None]:
    """``conds`` with condition ``ctype`` set, when that changes any of ``keys`` (else
    None: nothing to write), and the condition as it was (pure)."""
    old = st.get_condition(conds, ctype)
    new_conds = st.set_condition(conds, ctype, ok, reason, message, generation=generation,
                                 now=now)
    new = st.get_condition(new_conds, ctype)
    if old is not None and new is not None and all(old.get(k) == new.get(k) for k in keys):
        return None, old
    return new_conds, old


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


_FIRST_SCRAPES = (MetricsReason.NO_SERIES, MetricsReason.NO_SAMPLES, MetricsReason.TOO_LITTLE)


def warmup_seconds(policy: PolicySettings = DEFAULT_POLICY) -> float:
    """How long after a service becomes available missing or too few samples are expected,
    not a fault: one window to fill plus the staleness limit (which bounds the scrape
    interval the policy accepts). Defaults: 120 + 90 = 210 s."""
    return policy.window_seconds + policy.max_staleness_seconds


def serving_for(conditions: Iterable[Mapping[str, Any]], now: float) -> float | None:
    """Seconds since the ``Available`` condition turned True; -1 while no replica serves
    (``Available`` False, or not set while ``Ready`` is False: a service held for its
    tuning before serving has no workload yet), so no series is expected; None when
    neither says, or no transition time."""
    conditions = list(conditions)
    cond = st.get_condition(conditions, st.ConditionType.AVAILABLE)
    ready = st.get_condition(conditions, st.ConditionType.READY)
    if (cond is not None and cond.get("status") == "False") or (
            cond is None and ready is not None and ready.get("status") == "False"):
        return -1.0
    if cond is None or cond.get("status") != "True" or not cond.get("lastTransitionTime"):
        return None
    try:
        return max(0.0, now - parse_rfc3339(str(cond["lastTransitionTime"])))
    except ValueError:
        return None


@dataclass(frozen=True)
class LiveCapProgress:
    """Where a live cap change stands (:func:`live_cap_progress`)."""

    in_force: int | None = None  # the cap every replica reports (None: none, or they differ)
    wait: str | None = None  # hold the next decision, for this reason
    took_effect: bool = False  # the engines report the requested cap as of now
    fallback: tuple[st.LiveCapReason, str] | None = None  # roll instead from now on


def reported_cap(obs: Observation | None) -> int | None:
    """The admission cap every replica's engine reports (None: no report, or they differ)."""
    if obs is None or obs.cap_in_force_min is None or obs.cap_in_force_max is None:
        return None
    if obs.cap_in_force_min != obs.cap_in_force_max:
        return None
    return int(obs.cap_in_force_min)


def live_cap_progress(
    adaptation: Mapping[str, Any], obs: Observation | None, now: float,
    timeout: float = LIVE_CAP_REPORT_TIMEOUT_SECONDS,
) -> LiveCapProgress:
    """Whether the cap requested last (``status.adaptation.capRequested``) is in force,
    still on its way (hold the next decision), or never arrived (fall back to rollouts);
    also a fallback when an engine reports it cannot take a cap live (pure)."""
    in_force = reported_cap(obs)
    if obs is not None and obs.live_cap_min is not None and obs.live_cap_min < 1:
        live = compat_table().supported()
        return LiveCapProgress(in_force=in_force, fallback=(
            st.LiveCapReason.NO_HOOK,
            "The engine reports that it cannot change its admission cap live (its vLLM has "
            f"no --max-num-active-seqs; vLLM {live[0]} to {live[-1]} have it): every change "
            "rolls the Deployment"))
    requested = adaptation.get("capRequested")
    if not isinstance(requested, int):
        return LiveCapProgress(in_force=in_force)
    if in_force == requested:
        return LiveCapProgress(in_force=in_force, took_effect=True)
    when = adaptation.get("capRequestedTime")
    waited = now - parse_rfc3339(when) if isinstance(when, str) else 0.0
    seen = "none yet" if in_force is None else str(in_force)
    if waited > timeout:
        return LiveCapProgress(in_force=in_force, fallback=(
            st.LiveCapReason.NO_REPORT,
            f"The engines did not report the admission cap {requested} within {timeout:.0f} s "
            f"of writing it (they report {seen}): rolling the Deployment instead"))
    return LiveCapProgress(in_force=in_force, wait=(
        f"waiting for the engines to report the admission cap {requested} written {waited:.0f} s "
        f"ago (they report {seen}; the kubelet refreshes the ConfigMap volume within about "
        f"60-90 s; rolling instead after {timeout:.0f} s)"))


@dataclass(frozen=True)
class RolloutProgress:
    """Where a rollout of a new ``--max-num-seqs`` stands (:func:`rollout_progress`)."""

    wait: str | None = None  # hold the next decision, for this reason
    completed: bool = False  # the workload rolled out onto the cap as of now
    cap: int | None = None  # the cap the rollout carries
    stalled: bool = False  # the workload's controller gave up (ProgressDeadlineExceeded)


_MAX_NUM_SEQS_ARG = re.compile(
    r"--max-num-seqs[= ]+(\d+)(?: --max-num-active-seqs[= ]+(\d+))?")


def workload_max_num_seqs(workload: Mapping[str, Any]) -> int | None:
    """The cap in a Deployment's or LeaderWorkerSet's pod templates (their containers'
    args and commands; a LeaderWorkerSet passes it inside a shell command): the
    ``--max-num-seqs``, or the ``--max-num-active-seqs`` the operator renders right after
    it where the image's vLLM takes that flag (``planning.engine_flags``; a user's own
    flag comes with extraArgs, after ``--shutdown-timeout``, so it is never read here);
    None when none is there."""
    spec = workload.get("spec") or {}
    lws = spec.get("leaderWorkerTemplate") or {}
    templates = [spec.get("template"), lws.get("leaderTemplate"), lws.get("workerTemplate")]
    found: int | None = None
    for template in templates:
        for container in ((template or {}).get("spec") or {}).get("containers") or []:
            words = [str(w) for w in [*(container.get("command") or []),
                                      *(container.get("args") or [])]]
            for match in _MAX_NUM_SEQS_ARG.finditer(" ".join(words)):
                found = int(match.group(2) or match.group(1))
    return found


def rollout_progress(
    adaptation: Mapping[str, Any], workload: Mapping[str, Any] | None, now: float,
    kind: str = "Deployment",
) -> RolloutProgress:
    """Whether the rollout asked for last (``status.adaptation.rolloutRequested``: a cap
    applied by rolling the workload) is complete: the workload's pod template carries the
    cap and its controller reports every desired replica updated and available at its
    latest generation (:attr:`llm_operator.health.status.WorkloadState.rolled_out`). Until then
    the next decision holds; the cooldown counts from the completion (pure)."""
    requested = adaptation.get("rolloutRequested")
    if not isinstance(requested, int):
        return RolloutProgress()
    when = adaptation.get("rolloutRequestedTime")
    waited = now - parse_rfc3339(when) if isinstance(when, str) else 0.0
    head = (f"waiting for the rollout of max-num-seqs {requested} (started {waited:.0f} s "
            f"ago) to complete")
    tail = "; the cooldown counts from its completion"
    if workload is None:
        return RolloutProgress(wait=f"{head}: the {kind} does not exist{tail}")
    rendered = workload_max_num_seqs(workload)
    if rendered != requested:
        return RolloutProgress(wait=f"{head}: the {kind} has max-num-seqs {rendered}, not "
                                    f"yet the new value{tail}")
    replicas = (workload.get("spec") or {}).get("replicas")
    desired = replicas if isinstance(replicas, int) else 1
    state = st.WorkloadState.from_object(workload, desired)
    if state.rolled_out and state.available >= state.desired:
        return RolloutProgress(completed=True, cap=requested)
    if state.stalled:
        return RolloutProgress(stalled=True, wait=(
            f"the rollout of max-num-seqs {requested} (started {waited:.0f} s ago) did not "
            f"complete: {state.stalled}. No further change until it does; fix what holds "
            f"the new pods (kubectl describe on them: GPUs, a crash loop, a download) or "
            f"set spec.adaptation.mode: Recommend"))
    if state.rollout_pending:
        where = "its controller has not picked up the new spec yet"
    else:
        where = (f"{state.updated or 0} of {desired} replicas updated, {state.available} "
                 "available")
    return RolloutProgress(wait=f"{head}: {where}{tail}")


def after_rollout(state: AdaptationState, progress: RolloutProgress | None, now: float
                  ) -> AdaptationState:
    """The state a decision starts from: a rollout that completed as of ``now`` is the
    last change (the cooldown and the policy's fresh-window check count from it)."""
    if progress is None or not progress.completed:
        return state
    return state.model_copy(update={"last_change_at": now})


@dataclass
class Update:
    """What one decision writes: the status patch, the Events, and whether the workload
    must be re-rendered (Apply mode, the cap moved); the bounds the decision moved within
    and the tuning result, as written to ``status.adaptation`` (``bounds``, ``tuned``)."""

    status_patch: JSON
    events: list[st.Notice] = field(default_factory=list)
    rollout: bool = False
    adaptation: JSON = field(default_factory=dict)  # status.adaptation after the patch
    bounds: Bounds | None = None
    tuned: int | None = None


def cap_range(spec: LLMServiceSpec, status: Mapping[str, Any],
              policy: PolicySettings = DEFAULT_POLICY) -> tuple[Bounds, int | None, JSON]:
    """The bounds the cap moves within, the tuning result and both as ``status.adaptation``
    fields (pure): ``bounds`` (``lower``, ``upper`` and what set each: ``lowerSource``,
    ``upperSource``) and ``tuned`` (``status.tuning.best.maxNumSeqs`` of a successful run,
    null when none: where the cap started, never a bound)."""
    limits = cap_limits(status)
    bounds = bounds_for(spec, limits, policy)
    return bounds, limits.tuned, {"bounds": bounds.model_dump(by_alias=True),
                                  "tuned": limits.tuned}


def plan_update(
    svc: Service,
    decision: CapDecision,
    observation: Observation | None,
    state: AdaptationState | None,
    now: float,
    *,
    policy: PolicySettings = DEFAULT_POLICY,
    warn_again: bool = False,
    progress: LiveCapProgress | None = None,
    rollout_state: RolloutProgress | None = None,
    default_image: str = DEFAULT_IMAGE,
) -> Update:
    """Turn one decision into the status patch and Events (pure).

    ``Apply`` and a change: ``status.adaptation.maxNumSeqs`` is the new cap, the state
    records the change (history, last change time), ``rollout`` is True and the Event says
    what moved and why. ``Recommend``: ``recommendedMaxNumSeqs`` holds the value a change
    would set (null on hold), the state is unchanged, the Event is posted only when the
    recommendation changed. ``warn_again``: repeat the Warning for an unreachable
    Prometheus even though the condition did not change. ``default_image``: the
    operator's ``LLMOP_DEFAULT_IMAGE`` (the live cap depends on the image's vLLM).
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
    bounds, tuned, range_fields = cap_range(svc.spec, status, policy)
    adaptation.update(range_fields)
    conds = list(status.get("conditions") or [])
    if mode is AdaptationMode.APPLY and state is not None:
        rollout, conds = _live_cap(svc, status, adaptation, events, conds, rollout,
                                   decision, progress or LiveCapProgress(), now,
                                   default_image,
                                   observation.engine_vllm_versions if observation else None)
        _rollout(adaptation, events, rollout, decision, state, rollout_state, now,
                 stalled_before=bool(before.get("rolloutStalled")))
    patch: JSON = {"adaptation": adaptation}
    if conds != list(status.get("conditions") or []):
        patch["conditions"] = conds

    ok, reason, message = metrics_condition(observation, now, policy)
    serving = serving_for(conds, now)
    if not ok and reason in _FIRST_SCRAPES and serving is not None \
            and serving < warmup_seconds(policy):
        reason, message = MetricsReason.WAITING, (
            "waiting for the first samples: no replica serves yet (see Available), so "
            f"there is nothing to scrape ({message})" if serving < 0 else
            f"waiting for the first samples: the service became available {serving:.0f} s "
            f"ago and Prometheus fills the {policy.window_seconds:.0f} s window over the "
            f"next scrapes ({message}); a Warning follows if this lasts "
            f"{warmup_seconds(policy):.0f} s")
    new_conds, old = _changed(conds, st.ConditionType.METRICS_AVAILABLE, ok, reason, message,
                              svc.generation, now)
    if new_conds is not None:
        patch["conditions"] = new_conds
    reason_changed = old is None or old.get("reason") != str(reason)
    if reason is MetricsReason.WAITING:
        pass  # normal for new pods: said in the condition, not as a Warning
    elif not ok and (reason_changed or (reason is MetricsReason.UNAVAILABLE and warn_again)):
        events.append(st.Notice("Warning", str(reason), message))
    prefix = prefix_cache_condition(svc.spec, observation)
    if prefix is not None:
        # Not on every change of the rate in the message: a write per change of state.
        new_conds, _ = _changed(patch.get("conditions") or conds,
                                st.ConditionType.PREFIX_CACHE_HITS, *prefix, svc.generation,
                                now, keys=("status", "reason", "observedGeneration"))
        if new_conds is not None:
            patch["conditions"] = new_conds
            if not prefix[0]:
                events.append(st.Notice("Warning", prefix[1], prefix[2]))
    merged = {**before, **adaptation}
    return Update(status_patch=patch, events=events, rollout=rollout,
                  adaptation={k: v for k, v in merged.items() if v is not None},
                  bounds=bounds, tuned=tuned)


def _live_cap(
    svc: Service, status: Mapping[str, Any], adaptation: JSON, events: list[st.Notice],
    conds: list[Any], rollout: bool, decision: CapDecision, progress: LiveCapProgress,
    now: float, default_image: str, reported: tuple[str, ...] | None = None,
) -> tuple[bool, list[Any]]:
    """The live admission cap's part of an Apply tick (pure; edits ``adaptation`` and
    ``events``): how the change travels (``actuation``), the cap the engines report
    (``capInForce``), the cap still on its way (``capRequested``), a fallback to rollouts,
    and the ``LiveCap`` condition, which adds what the engines report of their vLLM
    release (``reported``; ``engineVllmVersions``) where the image's tag named none or
    another. Returns whether to re-render and the new conditions."""
    live = st.live_cap_in_use(svc.spec, status, svc.generation, default_image=default_image)
    cfg = f"ConfigMap {svc.key[1]}-admission-cap"
    if progress.in_force is not None:
        adaptation["capInForce"] = progress.in_force
        adaptation["capInForceTime"] = rfc3339(now)
    if live and progress.fallback is not None:
        why, message = progress.fallback
        adaptation["liveCapFallback"] = {"reason": str(why), "message": message,
                                         "generation": svc.generation}
        adaptation["capRequested"] = adaptation["capRequestedTime"] = None
        events.append(st.Notice("Warning", "LiveCapFallback", message))
        live, rollout = False, True  # re-render: the Deployment rolls onto the cap
    elif live and progress.took_effect:
        adaptation["capRequested"] = adaptation["capRequestedTime"] = None
        adaptation["lastChangeTime"] = rfc3339(now)  # the cooldown counts from here
        events.append(st.Notice("Normal", "AdmissionCapInForce",
                                f"The engines report the admission cap {progress.in_force} "
                                f"in force (no restart)"))
    if live and rollout and decision.value is not None:
        adaptation["capRequested"] = decision.value
        adaptation["capRequestedTime"] = rfc3339(now)
        for i, notice in enumerate(events):
            if notice.reason in ("MaxNumSeqsLowered", "MaxNumSeqsRaised"):
                events[i] = st.Notice(notice.type, notice.reason,
                                      f"{notice.message} (live: written to {cfg}, no restart)")
    adaptation["actuation"] = "Live" if live else "Rollout"

    blocker = st.live_cap_blocker(svc.spec, {**status, "adaptation": {
        **(status.get("adaptation") or {}), **adaptation}}, svc.generation,
        default_image=default_image)
    pending = adaptation.get("capRequested") if "capRequested" in adaptation else (
        status.get("adaptation") or {}).get("capRequested")
    version = st.live_cap_version(svc.spec, default_image)
    said_version = False  # the message already says what the image's tag says
    if blocker is not None:
        cond = (False, str(blocker[0]), blocker[1])
    elif isinstance(pending, int):
        cond = (True, str(st.LiveCapReason.PENDING),
                f"Admission cap {pending} written to {cfg}; waiting for the engines to "
                "report it (the kubelet refreshes the volume within about 60-90 s)")
    elif progress.in_force is not None:
        cond = (True, str(st.LiveCapReason.REPORTED),
                f"The engines report the admission cap {progress.in_force} in force; changes "
                f"go through {cfg} without a restart")
    else:  # as the render said it (with_live_cap_version), not another wording
        cond = (True, str(st.LiveCapReason.PENDING), st.cap_pending_message(version))
        said_version = True
    note = reported_version_note(version.version, reported)
    if reported:
        adaptation["engineVllmVersions"] = list(reported)
    if cond[0] and version.support is LiveCapSupport.UNKNOWN and not said_version:
        # live on an unread version
        cond = (*cond[:2], f"{cond[2]}. {note or version.message}")
    elif note is not None:
        cond = (*cond[:2], f"{cond[2]}. {note}")
    new_conds, _ = _changed(conds, st.ConditionType.LIVE_CAP, *cond, svc.generation, now)
    return rollout, conds if new_conds is None else new_conds


def _rollout(
    adaptation: JSON, events: list[st.Notice], rollout: bool, decision: CapDecision,
    state: AdaptationState, progress: RolloutProgress | None, now: float,
    *, stalled_before: bool = False,
) -> None:
    """The rollout's part of an Apply tick (pure; edits ``adaptation`` and ``events``):
    a completed rollout becomes the last change (the cooldown counts from it), and a cap
    that travels by a rollout (``actuation: Rollout``) is remembered as
    ``rolloutRequested`` until the workload has rolled out (:func:`rollout_progress`). A
    rollout its controller gave up on (``rolloutStalled``) is said once, as a Warning."""
    if progress is not None and progress.stalled:
        if not stalled_before:  # once per stall, not on every tick
            events.append(st.Notice("Warning", "MaxNumSeqsRolloutStalled", progress.wait or ""))
        adaptation["rolloutStalled"] = True
    if progress is not None and progress.completed:
        done = progress.cap or state.current
        adaptation["rolloutRequested"] = adaptation["rolloutRequestedTime"] = None
        adaptation["rolloutStalled"] = None
        adaptation["lastChangeTime"] = rfc3339(now)
        free = bool(state.history) and not state.history[-1].binding
        events.append(st.Notice("Normal", "MaxNumSeqsRolledOut",
                                f"Every replica runs max-num-seqs {done}; " + (
                                    "the change cut into no running request, so no cooldown "
                                    "counts from it" if free else
                                    "the cooldown counts from now")))
    if rollout and adaptation.get("actuation") == "Rollout":
        cap = decision.value if decision.changed and decision.value else state.current
        adaptation["rolloutRequested"] = cap
        adaptation["rolloutRequestedTime"] = rfc3339(now)


def waiting_decision(svc: Service, state: AdaptationState, obs: Observation | None,
                     reason: str, now: float) -> CapDecision:
    """A hold while a live cap change is on its way (:attr:`LiveCapProgress.wait`)."""
    return CapDecision(namespace=svc.key[0], name=svc.key[1], action=CapAction.HOLD,
                       current=state.current, value=state.current, reason=reason,
                       cause=DecisionCause.APPLYING,
                       evidence={} if obs is None else obs.summary(), at=now)

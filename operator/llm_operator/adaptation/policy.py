"""Online adaptation of ``--max-num-seqs`` (pure policy: no I/O, no clock).

The controller keeps each LLMService's batch cap where the concurrency and KV-cache
pressure that Prometheus observes say it belongs. This module only decides:
:mod:`.prometheus` fetches the :class:`Observation` objects, the operator's loop
(:class:`llm_operator.controller.adaptation.AdaptationLoop`) calls :func:`decide` for each
due service with its current :class:`AdaptationState`, then applies (``Apply`` mode) or
only reports (``Recommend`` mode) each :class:`CapDecision` (the status patch and Events
come from :mod:`.update`), and records applied changes with :func:`record`.

Policy, in the order it is checked:

1. A cap the user pinned (``spec.engine.maxNumSeqs``) or ``spec.adaptation.mode:
   Disabled`` is never moved.
2. A current cap outside its bounds is moved inside them at once. Bounds: lower
   ``spec.adaptation.minMaxNumSeqs``; upper the smaller of the planner's memory limit
   and ``spec.adaptation.maxMaxNumSeqs`` (``default_upper_bound`` when neither is known).
   The tuning result (``status.tuning.best.maxNumSeqs``, :attr:`CapLimits.tuned`, the
   evidence key ``tuned``) is where the cap starts, never a bound: the tuner measured it
   against a synthetic load, the policy watches the live one. A raise above it needs the
   inter-token latency within its SLO (item 5) and says that it leaves the tuned value;
   a raise that then preempts or misses the latency SLO is lowered again (item 4).
3. Missing, unavailable, stale or too little data, or a window that still holds samples
   from before the last change: hold, and say which.
4. Lower on preemptions (at least one, and at least 1% of the requests finished in the
   window), on mean KV-cache usage above the high watermark, or on an
   inter-token latency p95 above the SLO while the batch is busy (batch interference).
   The target is the number of sequences the KV cache holds for the observed request
   size (the KV fit) when that is known (else scaled from the observed usage). Without
   KV exhaustion (preemptions) the lower never goes below the KV fit: a latency miss
   stops at it (``itl_floor_kv_fit_fraction``) and neither full KV nor a late token
   lowers a cap already within it; only preemptions at or below the fit (the sizes are
   off) lower further, scaled from usage. A cap above the tuned value is the exception:
   there a latency miss with the batch busy lowers it, below the fit if need be, but not
   below the tuned value (the live evidence the raise rested on is gone). With
   ``spec.adaptation.preemptions: Tolerate`` the KV signals lower only together with a
   TTFT p95 above its SLO and no queue (a queue explains a late first token, and a
   smaller batch would lengthen it); the latency trigger is the same in both modes.
5. Raise when running sits at the cap with requests waiting, mean KV usage is below the
   low watermark and the inter-token latency is within its SLO. The target is the
   observed demand (running + waiting), limited by the KV room. Below the KV fit a
   queue, no preemption and running that reached the cap at some point of the window
   (its max: a window straddling a burst's return or a change of request mix has a low
   mean) are enough: the cap goes to the demand up to the fit whatever the latency, but
   not above the tuned value while the latency misses its SLO.
6. Otherwise hold. The gap between the two watermarks (and between the "at the cap"
   and "busy" fractions) is the hysteresis band in which nothing moves.
7. A move changes nothing for running requests as far as it stays at or above the
   running peak (a lower: the window's max of ``vllm:num_requests_running`` on any
   replica; no request ran above it) or at or below the demand (a raise: running +
   waiting; it admits only requests already waiting). That part is free: it goes
   straight to the target the evidence gives, with no step limit, no cooldown to wait
   for and none started. Only the part that cuts into the running batch (or raises past
   the demand) waits out the cooldown after the last change that bound, and is limited
   to ``spec.adaptation.maxStepPercent`` of the value where it starts binding (the
   running peak; the current cap when the peak is not known; at least 1). Within the
   cooldown the free part alone is made. The decision says which part was free and why
   (:attr:`CapDecision.free_to`, ``binding``; ``status.adaptation.lastDecision.free``
   and each history entry's ``binding``). From 256 with a running peak of 16 and a KV
   fit of 12: 256 → 16 is free, 16 → 12 is within 50 % of the binding 16 (issue 57: the
   demo lowered 256 → 128, which bound nothing, then held on the cooldown). A move
   never returns to a value left within the flap window unless the evidence is strong
   (then the reason says so). A shift of the request mix is strong evidence: each change records
   the KV fit of its time, and a move that follows a KV fit changed since (a raise within
   a larger fit with no preemption, a lower to no less than a smaller one) may return.
   Around the tuned value: a lower that undoes a raise above it, to no less than the
   tuned value, may return whatever triggered it (the raise was live evidence that did
   not hold); a raise back above it to a value such a lower left needs a change of
   request mix, not a queue alone (the queue is what the undone raise rested on).

All thresholds live in :class:`PolicySettings`, each documented with its default.

This module holds the decision (:func:`decide` and its rules); what it reads and returns
lives beside it and is re-exported here: the thresholds (:mod:`.thresholds`), the
observation (:mod:`.evidence`), the bounds (:mod:`.bounds`), the decision types
(:mod:`.decision`) and the state with its history (:mod:`.state`).
"""

from __future__ import annotations

import math

from ..api.models import AdaptationMode, LLMServiceSpec, PreemptionPolicy
from ..planning import NULL_BLOCKS
from .bounds import Bounds, CapLimits, bounds_for
from .decision import CapAction, CapDecision, DecisionCause
from .evidence import (
    Evidence,
    MetricsReason,
    Observation,
    ServiceKey,
    data_quality,
    unavailable,
    with_decode_context_parallel,
)
from .state import AdaptationState, CapChange, adaptation_status, record
from .thresholds import (
    DEFAULT_POLICY,
    MIN_SCRAPES_PER_WINDOW,
    PolicySettings,
    min_samples_for_scrape,
    policy_for_scrape,
)

__all__ = [
    "AdaptationState", "Bounds", "CapAction", "CapChange", "CapDecision", "CapLimits",
    "DEFAULT_POLICY", "DecisionCause", "Evidence", "MIN_SCRAPES_PER_WINDOW", "MetricsReason",
    "Observation", "PolicySettings", "ServiceKey", "adaptation_status", "bounds_for",
    "data_quality", "decide", "min_samples_for_scrape", "policy_for_scrape", "record",
    "unavailable", "with_decode_context_parallel",
]


def decide(
    observation: Observation | None,
    state: AdaptationState | None,
    spec: LLMServiceSpec,
    now: float,
    *,
    namespace: str = "",
    name: str = "",
    limits: CapLimits | None = None,
    settings: PolicySettings = DEFAULT_POLICY,
) -> CapDecision:
    """Decide whether to raise, lower or hold the cap of one service (pure).

    ``now`` is Unix time; ``state`` None means the current cap is not known yet.
    """
    if observation is not None:
        namespace, name = observation.namespace, observation.name
    ev: Evidence = {} if observation is None else observation.summary()

    def hold(current: int | None, cause: DecisionCause, reason: str) -> CapDecision:
        return CapDecision(namespace=namespace, name=name, action=CapAction.HOLD, current=current,
                           value=current, reason=reason, cause=cause, evidence=ev, at=now)

    pinned = spec.engine.max_num_seqs
    if isinstance(pinned, int):
        return hold(pinned, DecisionCause.PINNED,
                    f"Pinned by the user (spec.engine.maxNumSeqs={pinned}): never changed")
    if spec.adaptation.mode is AdaptationMode.DISABLED:
        cur = None if state is None else state.current
        return hold(cur, DecisionCause.DISABLED,
                    "Adaptation is disabled (spec.adaptation.mode=Disabled)")
    if state is None:
        return hold(None, DecisionCause.NO_STATE,
                    "The current max-num-seqs is not known yet (no plan or status)")

    cap = state.current
    bounds = bounds_for(spec, limits, settings)
    tuned = None if limits is None else limits.tuned
    ev.update({"cap": cap, "lowerBound": bounds.lower, "upperBound": bounds.upper,
               "tuned": tuned})

    def move(to: int, cause: DecisionCause, reason: str, *, free_to: int | None = None,
             free_reason: str | None = None, binding: bool = True) -> CapDecision:
        action = CapAction.RAISE if to > cap else CapAction.LOWER
        return CapDecision(namespace=namespace, name=name, action=action, current=cap, value=to,
                           reason=reason, cause=cause, evidence=ev, at=now, free_to=free_to,
                           free_reason=free_reason, binding=binding)

    # Bounds first: a cap outside them is wrong whatever the load (e.g. the user narrowed
    # them); moving inside is not subject to data, cooldown or step limits.
    if cap > bounds.upper:
        return move(bounds.upper, DecisionCause.OUT_OF_BOUNDS,
                    f"Lower {cap} → {bounds.upper}: above the upper bound "
                    f"{bounds.upper} set by {bounds.upper_source}")
    if cap < bounds.lower:
        return move(bounds.lower, DecisionCause.OUT_OF_BOUNDS,
                    f"Raise {cap} → {bounds.lower}: below the lower bound "
                    f"{bounds.lower} set by {bounds.lower_source}")

    problem = _data_problem(observation, state, now, settings)
    if problem is not None:
        return hold(cap, problem[0], f"Hold at {cap}: {problem[1]}")
    assert observation is not None  # _data_problem returns a problem for None
    obs = observation
    fit = _kv_fit(obs, settings)
    if fit is not None:
        ev["kvFit"] = fit[0]

    want = _want(obs, cap, spec, settings, tuned)
    if want is None:
        return hold(cap, DecisionCause.STEADY,
                    f"Hold at {cap}: {_calm_text(obs, cap, spec, settings, tuned)}")
    direction, target, why, cause = want

    # Bounds, then the free part of the move, then the step limit on the rest.
    bounded = min(max(target, bounds.lower), bounds.upper)
    notes: list[str] = []
    if bounded != target:
        notes.append(f"target {target} clamped to the lower bound {bounds.lower}"
                     if direction is CapAction.LOWER else
                     f"target {target} clamped to the upper bound {bounds.upper} "
                     f"({bounds.upper_source})")
    ev["target"] = target
    free_to, free_why = _free_part(direction, obs, cap, bounded, ev)
    pct = spec.adaptation.max_step_percent
    start = cap if free_to is None else free_to  # where the binding part starts
    step = max(1, math.floor(start * pct / 100))
    new = (max(bounded, start - step) if direction is CapAction.LOWER else
           min(bounded, start + step))
    binding = new != start
    verb = "lower" if direction is CapAction.LOWER else "raise"
    if new == cap:
        end, at, source = (("lower", bounds.lower, bounds.lower_source)
                           if direction is CapAction.LOWER else
                           ("upper", bounds.upper, bounds.upper_source))
        return hold(cap, DecisionCause.AT_BOUND,
                    f"Hold at {cap}: would {verb} ({why}) but the cap is at its {end} "
                    f"bound ({at}) set by {source}")
    side = "the running peak" if direction is CapAction.LOWER else "the demand"
    if free_to is not None:
        notes.append(f"{cap} → {free_to} free: {free_why}"
                     + ("" if binding else ", so no step limit and no cooldown"))
    if binding:
        limited = "step limited to" if new != bounded else "within"
        what = "the current" if free_to is None else "the binding"
        cuts = ("cuts into the running batch" if direction is CapAction.LOWER else
                "raises past the demand")
        if direction is CapAction.LOWER and obs.running_max is None:
            cuts += " (the running peak is not known)"
        notes.append(f"{'' if free_to is None else 'then '}{start} → {new} {limited} {pct}% "
                     f"of {what} {start} (spec.adaptation.maxStepPercent): it {cuts}")

    cooling = _cooldown_start(state)
    if binding and cooling is not None:
        since = now - cooling
        cooldown = spec.adaptation.cooldown_seconds
        if since < cooldown:
            ev["cooldownRemainingSeconds"] = round(cooldown - since)
            wait = (f"the last change that cut into the running batch was {since:.0f} s ago, "
                    f"within the {cooldown} s cooldown (spec.adaptation.cooldownSeconds)")
            if free_to is None:
                return hold(cap, DecisionCause.COOLDOWN, f"Hold at {cap}: would {verb} to {new} "
                            f"({why}) but {wait}")
            # Only the free part now: the rest waits for the cooldown.
            notes[-1] = f"the step {start} → {new} past {side} waits: {wait}"
            new, binding = free_to, False
    flap = _flap(state, cap, new, now, settings)
    if flap is not None:
        strong = _strong(direction, obs, cap, new, spec, settings, flap, tuned)
        if strong is None:
            return hold(cap, DecisionCause.FLAP, f"Hold at {cap}: would {verb} to {new} ({why}) "
                        "but that returns to "
                        f"{flap.from_value}, left {now - flap.at:.0f} s ago ({flap.reason}); "
                        f"within the {settings.flap_window_seconds:.0f} s flap window only "
                        "strong evidence may undo a change")
        notes.append(f"returns to {flap.from_value} left {now - flap.at:.0f} s ago, allowed "
                     f"on strong evidence: {strong}")

    if direction is CapAction.RAISE and tuned is not None and new > tuned:
        notes.append(f"{'raises' if cap <= tuned else 'stays'} above the tuned value {tuned} "
                     "(status.tuning): the tuning result is where the cap starts, not its "
                     "ceiling, and the live evidence above says the cap holds the batch back; "
                     "preemptions or a latency miss lower it again")
    text = f"{verb.capitalize()} {cap} → {new}: {why}"
    if notes:
        text += "; " + "; ".join(notes)
    return move(new, cause, text, free_to=free_to, free_reason=free_why, binding=binding)


def _data_problem(
    obs: Observation | None, state: AdaptationState, now: float, s: PolicySettings
) -> tuple[DecisionCause, str] | None:
    reason, text = data_quality(obs, now, s)
    if reason is not MetricsReason.OBSERVED:
        return DecisionCause.NO_DATA, text
    assert obs is not None  # data_quality reports NO_SERIES for None
    if state.last_change_at is not None and \
            obs.evaluated_at - obs.window_seconds < state.last_change_at:
        return DecisionCause.SETTLING, (
            f"the {obs.window_seconds:.0f} s window still holds samples from before the last "
            f"change ({obs.evaluated_at - state.last_change_at:.0f} s ago)")
    return None


def _kv_fit(obs: Observation, s: PolicySettings) -> tuple[int, str] | None:
    """Sequences at their full observed length the KV cache holds without preempting.

    Counted as vLLM allocates (v1 scheduler and BlockPool, vLLM 0.32): a request's KV
    holds its prompt and every output token but the last (the last sampled token is never
    fed back), in whole blocks; one block of the pool is vLLM's null block, never given to
    a request. Sequences of 128 + 256 tokens in 32 blocks of 128: 383 tokens = 3 blocks,
    31 usable blocks, 10 fit.
    """
    if obs.kv_capacity_tokens and obs.mean_prompt_tokens is not None \
            and obs.mean_generation_tokens is not None:
        per_seq = obs.mean_prompt_tokens + obs.mean_generation_tokens
        if per_seq > 0:
            block = obs.kv_block_size or 1
            usable = obs.kv_capacity_tokens // block - (NULL_BLOCKS if block > 1 else 0)
            kv_tokens = max(per_seq - 1, 1.0)
            per_seq_blocks = math.ceil(kv_tokens / block)
            n = math.floor(s.kv_fit_fraction * usable / per_seq_blocks)
            share = "" if s.kv_fit_fraction == 1 else f" in {s.kv_fit_fraction:.0%} of it"
            unit = (f" ({per_seq_blocks} blocks of {block} each, {usable} blocks usable)"
                    if block > 1 else "")
            return max(1, n), (f"the KV cache ({obs.kv_capacity_tokens} tokens) holds {n} "
                               f"sequences of {per_seq:.0f} tokens{unit}{share}")
    return None


def _fit_floor(fit: tuple[int, str] | None, s: PolicySettings) -> int | None:
    """The lowest cap a latency miss (or KV usage without exhaustion) may lower to: the
    ``itl_floor_kv_fit_fraction`` share of the KV fit; None when the fit is not known or
    the share is 0."""
    if fit is None or s.itl_floor_kv_fit_fraction == 0:
        return None
    return max(1, math.floor(s.itl_floor_kv_fit_fraction * fit[0]))


def _itl_stop(floor: int | None, cap: int, tuned: int | None) -> int | None:
    """The lowest cap an inter-token-latency miss may lower to: the KV-fit floor
    (:func:`_fit_floor`), except for a cap raised above the tuned value within that floor,
    which a latency miss may lower back to the tuned value (the SLO the raise rested on no
    longer holds)."""
    if tuned is not None and floor is not None and tuned < cap <= floor:
        return tuned
    return floor


def _want(
    obs: Observation, cap: int, spec: LLMServiceSpec, s: PolicySettings,
    tuned: int | None = None,
) -> tuple[CapAction, int, str, DecisionCause] | None:
    """The move the evidence asks for (before bounds, steps, cooldown and flapping) and
    its cause: of the lower triggers the first of TTFT (Tolerate), preemptions, KV usage,
    inter-token latency that applies. ``tuned``: the tuning result (not a bound; see
    the module's policy, items 4 and 5)."""
    assert obs.running_mean is not None and obs.kv_usage_mean is not None
    running, kv = obs.running_mean, obs.kv_usage_mean
    waiting = obs.waiting_mean or 0.0
    preempt = obs.preemptions or 0.0
    itl_slo = spec.workload.slo.itl_p95_ms / 1000.0
    itl = obs.itl_p95_seconds
    fit = _kv_fit(obs, s)
    floor = _fit_floor(fit, s)
    stop = _itl_stop(floor, cap, tuned)

    # Lower side.
    reasons: list[str] = []
    exhausting = _exhausting(obs, s)
    kv_high = kv > s.kv_high_watermark
    if kv_high and not exhausting and floor is not None and cap <= floor:
        # Full KV with no exhaustion at or below the fit: vLLM holds admission on KV
        # itself; a smaller cap would only idle it (see _calm_text).
        kv_high = False
    pressure = exhausting or kv_high
    if pressure and spec.adaptation.preemptions == PreemptionPolicy.TOLERATE:
        # KV pressure counts only while it costs the SLO in a way a smaller batch fixes.
        ttft_slo = spec.workload.slo.ttft_p95_ms / 1000.0
        ttft = obs.ttft_p95_seconds
        if ttft is not None and ttft > ttft_slo and waiting <= s.min_waiting:
            reasons.append(f"TTFT p95 {ttft * 1000:.0f} ms above the {ttft_slo * 1000:.0f} ms "
                           "SLO with no request queued")
        else:
            pressure = False
    if pressure and exhausting:
        reasons.append(f"{_preemptions_text(preempt)} in the last {obs.window_seconds:.0f} s")
    if pressure and kv_high:
        reasons.append(f"KV cache {kv:.0%} used on average, above the "
                       f"{s.kv_high_watermark:.0%} high watermark")
    itl_miss = itl is not None and itl > itl_slo and running >= s.busy_fraction * cap \
        and (stop is None or cap > stop)
    if itl_miss:
        assert itl is not None
        reasons.append(f"inter-token latency p95 {itl * 1000:.0f} ms above the "
                       f"{itl_slo * 1000:.0f} ms SLO with the batch busy ({running:.1f} of {cap} "
                       "running): batch interference")
    if reasons:
        targets: list[tuple[int, str]] = []
        if pressure:
            # The KV fit of full-length sequences when known; a fit at or above the cap
            # while under pressure means the sizes are off: scale from usage instead.
            if fit is not None and fit[0] < cap:
                targets.append(fit)
            else:
                n = math.floor(max(running, 1.0) * s.kv_target / max(kv, 1e-6))
                targets.append((n, f"{running:.1f} running used {kv:.0%} of the KV cache, so "
                                   f"{n} fit at {s.kv_target:.0%}"))
        if itl_miss:
            assert itl is not None
            n = math.floor(running * itl_slo / itl)
            how = f"{n} sequences would bring the latency within the SLO"
            if stop is not None and stop != floor:  # a cap raised above the tuned value
                if n < stop:
                    how = (f"{n} sequences would bring the latency within the SLO, but a "
                           f"latency miss lowers a cap raised above the tuned value {stop} "
                           "(status.tuning) back to it, no further")
                    n = stop
            elif floor is not None and fit is not None and n < floor:
                how = (f"{n} sequences would bring the latency within the SLO, but a latency "
                       f"miss lowers no further than the KV fit: {fit[1]}")
                n = floor
            targets.append((n, how))
        target, how = min(targets)
        target = min(max(target, 1), cap - 1)
        if pressure and spec.adaptation.preemptions == PreemptionPolicy.TOLERATE:
            cause = DecisionCause.TTFT_SLO
        elif pressure and exhausting:
            cause = DecisionCause.PREEMPTIONS
        elif pressure:
            cause = DecisionCause.KV_USAGE
        else:
            cause = DecisionCause.ITL_SLO
        return CapAction.LOWER, target, "; ".join(reasons) + f" ({how})", cause

    # Raise side.
    queued = waiting > s.min_waiting
    at_cap = running >= s.at_cap_fraction * cap
    kv_room = kv < s.kv_low_watermark
    itl_ok = itl is None or itl <= itl_slo
    demand = math.ceil(running + waiting)
    if at_cap and queued and kv_room and itl_ok:
        room = math.floor(running * s.kv_target / max(kv, 1e-6))
        limit, how = (fit if fit is not None else
                      (room, f"{running:.1f} running use {kv:.0%} of the KV cache, so {room} fit "
                       f"at {s.kv_target:.0%}"))
        target = min(demand, limit)
        if target > cap:
            itl_txt = "no latency samples" if itl is None else \
                f"ITL p95 {itl * 1000:.0f} ms within the {itl_slo * 1000:.0f} ms SLO"
            why = (f"running sits at the cap ({running:.1f} of {cap}) with {waiting:.1f} "
                   f"requests waiting, KV cache {kv:.0%} used (below the "
                   f"{s.kv_low_watermark:.0%} low watermark), {itl_txt}; demand {demand}")
            if target < demand:
                why += f", KV room for {limit} ({how})"
            return CapAction.RAISE, target, why, DecisionCause.QUEUE
    calm = preempt < s.min_preemptions
    peak = running if obs.running_max is None else max(running, obs.running_max)
    if fit is not None and cap < fit[0] and queued and calm and demand > cap \
            and peak >= s.at_cap_fraction * cap:
        # Below the KV fit, with a queue, the mean demand above the cap, running at the cap
        # at some point of the window and no preemption, the cap is what holds the batch
        # back: go to the demand, up to the fit, whatever the latency and the KV usage (a
        # latency miss does not lower below the fit either, so the two never fight).
        target = min(demand, fit[0])
        late = itl is not None and itl > itl_slo
        if late and tuned is not None and target > max(cap, tuned):
            target = max(cap, tuned)  # above the tuned value only with the SLO met
        if target > cap:
            why = (f"below the KV fit with a queue: running reached the cap (max {peak:.0f}, "
                   f"mean {running:.1f} of {cap}) with {waiting:.1f} requests waiting and no "
                   f"preemption; demand {demand}, KV room for {fit[0]} ({fit[1]})")
            if late:
                assert itl is not None
                why += (f"; the inter-token latency p95 ({itl * 1000:.0f} ms) misses its SLO, "
                        "which does not hold a cap below the KV fit")
                if target == tuned:
                    why += (f", but above the tuned value {tuned} (status.tuning) only a "
                            "latency within the SLO raises")
            return CapAction.RAISE, target, why, DecisionCause.BELOW_KV_FIT
    return None


def _calm_text(obs: Observation, cap: int, spec: LLMServiceSpec, s: PolicySettings,
               tuned: int | None = None) -> str:
    assert obs.running_mean is not None and obs.kv_usage_mean is not None
    running, kv, waiting = obs.running_mean, obs.kv_usage_mean, obs.waiting_mean or 0.0
    itl = obs.itl_p95_seconds
    itl_slo = spec.workload.slo.itl_p95_ms / 1000.0
    preempt = obs.preemptions or 0.0
    facts = (f"running {running:.1f} of {cap}, waiting {waiting:.1f}, KV {kv:.0%}, "
             f"{_preemptions_text(preempt)}")
    if itl is not None:
        facts += f", ITL p95 {itl * 1000:.0f} ms"
    why: list[str] = []
    exhausting = _exhausting(obs, s)
    fit = _kv_fit(obs, s)
    floor = _fit_floor(fit, s)
    within_fit = fit is not None and floor is not None and cap <= floor
    if within_fit and kv > s.kv_high_watermark and not exhausting:
        assert fit is not None
        why.append(f"KV cache above the {s.kv_high_watermark:.0%} high watermark, but without "
                   f"KV exhaustion and with the cap within the KV fit ({fit[1]}): the engine "
                   "holds admission on the KV cache itself, a smaller cap would idle it")
    if preempt >= s.min_preemptions and not exhausting:
        why.append(f"{_preemptions_text(preempt)} in {obs.finished_requests:.0f} finished "
                   f"requests, below the {s.min_preemption_share:.0%} share that counts as KV "
                   "exhaustion")
    if spec.adaptation.preemptions == PreemptionPolicy.TOLERATE and (
            exhausting or kv > s.kv_high_watermark):
        why.append("KV pressure is tolerated (spec.adaptation.preemptions=Tolerate) while "
                   "the latency SLO holds or a queue, not the batch, explains the TTFT")
    if running >= s.at_cap_fraction * cap and waiting > s.min_waiting:
        if fit is not None and cap >= fit[0]:
            why.append(f"queueing, but the cap is at or above the KV fit ({fit[1]})")
        elif fit is not None and preempt >= s.min_preemptions:
            why.append(f"queueing below the KV fit, but with {_preemptions_text(preempt)} in "
                       "the window the fit is not to be trusted")
        elif kv >= s.kv_low_watermark:
            why.append(f"queueing, but KV usage is not below the {s.kv_low_watermark:.0%} low "
                       "watermark")
        elif itl is not None and itl > itl_slo and fit is not None and tuned is not None \
                and tuned <= cap < fit[0]:
            why.append(f"queueing below the KV fit, but the inter-token latency misses its SLO "
                       f"and the cap is at or above the tuned value {tuned} (status.tuning): "
                       "above it only a latency within the SLO raises")
        elif itl is not None and itl > itl_slo:
            why.append("queueing, but the inter-token latency misses its SLO")
        else:
            why.append("queueing, but the KV cache has no room for more sequences")
    elif itl is not None and itl > itl_slo and running >= s.busy_fraction * cap and within_fit:
        assert fit is not None
        why.append(f"ITL p95 misses the SLO with the batch busy, but the cap is within the KV "
                   f"fit ({fit[1]}): below the fit a late token is not blamed on the batch "
                   "(PolicySettings.itl_floor_kv_fit_fraction)")
    elif itl is not None and itl > itl_slo:
        why.append(f"ITL p95 misses the SLO, but the batch is not busy (running below "
                   f"{s.busy_fraction:.0%} of the cap), so a smaller cap would not help")
    return "no reason to move (" + facts + ")" + (": " + "; ".join(why) if why else "")


def _exhausting(obs: Observation, s: PolicySettings) -> bool:
    """Preemptions enough to call the KV cache exhausted: at least ``min_preemptions`` and
    ``min_preemption_share`` of the requests finished in the window."""
    return (obs.preemptions or 0.0) >= max(s.min_preemptions,
                                           s.min_preemption_share * obs.finished_requests)


def _preemptions_text(n: float) -> str:
    return f"{n:.0f} preemption" + ("" if round(n) == 1 else "s")


def _free_part(direction: CapAction, obs: Observation, cap: int, target: int,
               ev: Evidence) -> tuple[int | None, str | None]:
    """The part of a move toward ``target`` (within the bounds) that changes nothing for
    running requests: a lower to no less than the running peak (the window's max of
    ``vllm:num_requests_running`` on any replica: no request ran above it, so a cap there
    turns none away), a raise to no more than the demand (running + waiting: it admits
    only requests already waiting). Returns where that part ends and why (None, None when
    no part is free); records the peak and the demand in ``ev``."""
    if direction is CapAction.LOWER:
        if obs.running_max is None:
            return None, None
        peak = math.ceil(obs.running_max)
        ev["runningPeak"] = peak
        if peak >= cap:
            return None, None
        return max(target, peak), (f"no request runs above {peak} (running peak over the "
                                   f"{obs.window_seconds:.0f} s window)")
    running, waiting = obs.running_mean or 0.0, obs.waiting_mean or 0.0
    demand = math.ceil(running + waiting)
    ev["demand"] = demand
    if demand <= cap:
        return None, None
    return min(target, demand), (f"{demand} requests in the system ({running:.1f} running + "
                                 f"{waiting:.1f} waiting): the raise admits only requests "
                                 "already waiting")


def _cooldown_start(state: AdaptationState) -> float | None:
    """When the cooldown counts from: the last change that was step-limited (it cut into
    the running batch or raised past the demand; a state without history: its last
    change). A free change neither starts a cooldown nor waits for one. The last change
    counts from ``last_change_at`` (its rollout's completion or the engines' report); an
    earlier one from the next change's decision, by which time it was in force."""
    if not state.history:
        return state.last_change_at
    changes = state.history
    for i in range(len(changes) - 1, -1, -1):
        if changes[i].binding:
            return state.last_change_at if i == len(changes) - 1 else changes[i + 1].at
    return None


def _flap(state: AdaptationState, cap: int, new: int, now: float,
          s: PolicySettings) -> CapChange | None:
    """The recent change whose starting value the move would reach or pass again."""
    for change in reversed(state.history):
        if now - change.at > s.flap_window_seconds:
            break
        left = change.from_value
        if change.lowered and new > cap and cap < left <= new:  # A→B lowered, now back up
            return change
        if not change.lowered and new < cap and new <= left < cap:  # A→B raised, now back down
            return change
    return None


def _strong(direction: CapAction, obs: Observation, cap: int, new: int, spec: LLMServiceSpec,
            s: PolicySettings, flap: CapChange, tuned: int | None = None) -> str | None:
    """Why the evidence is strong enough to undo a recent change, or None. Around the
    tuned value (``tuned``): a lower that undoes a raise above it, to no less than it, is
    strong whatever triggered it (the raise rested on a queue with the SLO met and no KV
    exhaustion, and the live load no longer bears it); a raise back above it to a value
    left by such a lower is not strong on a queue alone (the queue is what the raise that
    did not hold rested on), only on a change of request mix."""
    preempt = obs.preemptions or 0.0
    fit = _kv_fit(obs, s)
    if fit is not None and flap.kv_fit is not None:
        # The request mix shifted since that change: the move follows the KV fit of the
        # sizes now observed (a raise stays within it with no preemption; a lower stops at
        # it), so it is not the same evidence swinging back.
        shifted = (f"the request mix shifted: the KV cache holds {fit[0]} sequences of the "
                   f"size now observed, {flap.kv_fit} when {flap.from_value} was left")
        if direction is CapAction.RAISE and fit[0] > flap.kv_fit and new <= fit[0] \
                and preempt < s.min_preemptions:
            return shifted
        if direction is CapAction.LOWER and fit[0] < flap.kv_fit and new >= fit[0]:
            return shifted
    above_tuned = tuned is not None and max(flap.from_value, flap.to_value) > tuned
    if direction is CapAction.LOWER:
        if above_tuned and new >= (tuned or 0):
            return (f"it undoes a raise above the tuned value {tuned} (status.tuning) that "
                    "the live load does not bear")
        if preempt >= s.strong_preemptions:
            return f"{preempt:.0f} preemptions (≥ {s.strong_preemptions:.0f})"
        itl, slo = obs.itl_p95_seconds, spec.workload.slo.itl_p95_ms / 1000.0
        if itl is not None and itl >= s.strong_itl_factor * slo and \
                (obs.running_mean or 0) >= s.busy_fraction * cap:
            return f"ITL p95 {itl * 1000:.0f} ms ≥ {s.strong_itl_factor} x the SLO"
        return None
    if above_tuned:
        return None
    waiting, kv_max = obs.waiting_mean or 0.0, obs.kv_usage_max
    if waiting >= s.strong_waiting_fraction * cap and kv_max is not None \
            and kv_max < s.kv_low_watermark and preempt < s.min_preemptions:
        return (f"{waiting:.1f} waiting (≥ {s.strong_waiting_fraction:.0%} of the cap) with the "
                f"KV cache never above {kv_max:.0%}")
    return None

"""The tuning result is the adaptation's starting point, not its ceiling (issue 32, item 2).

In ``bash tools/demo.sh`` on 2026-11-26 the tuner chose max-num-seqs 4 for the example
``demo/tiny-llama-local.yaml``, and the adaptation then held 4 for the whole load: 10
of its 19 decisions read "would raise (running reached the cap with 3-7 requests waiting
and no preemption; demand 5-8, KV room for 15) but the cap is at its upper bound (4)",
the bound being the tuned value. The windows below are shaped from those reasons (the
demo's spec, its 10 s window scraped every second, 128 + 128-token requests, a KV cache
that holds 15 of them, no preemption, the latency far within its 500 ms SLO); the
recorded series themselves were not kept. After a raise the same requests are in the
system each window (running + waiting), more of them run and fewer wait.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from llm_operator.adaptation.policy import (
    AdaptationState,
    CapAction,
    CapChange,
    CapDecision,
    CapLimits,
    DecisionCause,
    Observation,
    decide,
    policy_for_scrape,
    record,
)
from llm_operator.api.models import LLMServiceSpec
from llm_operator_sandbox.loop import Settings as DemoLoop
from llm_operator_sandbox.loop_demo import _Adaptation

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "demo" / "tiny-llama-local.yaml").read_text())
SPEC = LLMServiceSpec.model_validate(EXAMPLE["spec"])  # cooldown 20 s, ITL SLO 500 ms
WINDOW = float(DemoLoop.adaptation_window_seconds)  # 10 s
POLICY = policy_for_scrape(WINDOW, float(DemoLoop.scrape_interval_seconds))
INTERVAL = float(SPEC.adaptation.interval_seconds)  # 10 s between decisions
NOW = 1_800_000_000.0
TUNED = 4
LIMITS = CapLimits(plan_max_num_seqs=256, tuned=TUNED)  # a memory limit far above the load
KV_TOKENS = 4096  # 256 blocks of 16, 255 usable: 15 sequences of 255 tokens (16 blocks)
FIT = 15


@dataclass(frozen=True)
class Window:
    """One demo window at cap 4: the mean running and waiting (running reached 4)."""

    running: float
    waiting: float

    @property
    def in_system(self) -> float:
        return self.running + self.waiting


# 3-7 waiting, demand (ceil of running + waiting) 5-8, as the demo's reasons say.
DEMO = [Window(1.6, 3.2), Window(2.1, 4.4), Window(1.3, 5.1), Window(2.4, 3.5),
        Window(1.0, 6.8), Window(1.9, 4.0), Window(2.7, 3.0), Window(1.2, 6.1),
        Window(2.2, 4.6), Window(1.5, 3.4)]


def observed(w: Window, cap: int, at: float, *, preemptions: float = 0.0,
             kv: float | None = None, itl_ms: float = 40.0) -> Observation:
    """The demo's window ``w`` under ``cap``: as many of its requests run as the cap lets
    (in the demo's proportion of the cap, the rest of the time between turns), the others
    wait; each running sequence uses about 3 % of the KV cache."""
    running = min(cap, w.in_system) * w.running / TUNED
    waiting = w.in_system - running if w.in_system > cap else 0.0
    return Observation(
        namespace="default", name="tiny-llama", evaluated_at=at, window_seconds=WINDOW,
        samples=10, last_sample_at=at - 0.5, replicas=1, running_mean=running,
        running_max=float(min(cap, math.ceil(w.in_system))), waiting_mean=waiting,
        waiting_max=math.ceil(waiting), kv_usage_mean=0.03 * running if kv is None else kv,
        kv_usage_max=0.03 * min(cap, w.in_system) if kv is None else min(1.0, kv + 0.03),
        preemption_rate=preemptions / WINDOW, request_rate=2.0, ttft_p95_seconds=1.5,
        itl_p95_seconds=itl_ms / 1000, mean_prompt_tokens=128.0, mean_generation_tokens=128.0,
        kv_capacity_tokens=KV_TOKENS, kv_block_size=16)


def replay(spec: LLMServiceSpec, windows: list[Window], state: AdaptationState, start: float,
           **kw: float) -> tuple[list[CapDecision], AdaptationState]:
    """Decide every :data:`INTERVAL` seconds from ``start`` on the windows in turn, each as
    the cap of its time lets it run, applying each change (Apply mode)."""
    decisions = []
    for i, w in enumerate(windows):
        at = start + i * INTERVAL
        d = decide(observed(w, state.current, at, **kw), state, spec, at, limits=LIMITS,
                   settings=POLICY)
        decisions.append(d)
        state = record(state, d, POLICY)
    return decisions, state


def test_the_replay_reproduces_the_demos_hold_when_the_bound_is_four() -> None:
    # The windows are the demo's: with the upper bound at 4 (as the tuned value was) the
    # policy says what the demo said, for every window.
    bound_at_four = SPEC.model_copy(update={"adaptation": SPEC.adaptation.model_copy(
        update={"max_max_num_seqs": TUNED})})
    decisions, state = replay(bound_at_four, DEMO, AdaptationState(current=TUNED), NOW)
    assert state.current == TUNED
    for d in decisions:
        assert d.cause is DecisionCause.AT_BOUND, d.reason
        assert "running reached the cap (max 4" in d.reason and "no preemption" in d.reason
        assert "KV room for 15" in d.reason and "at its upper bound (4)" in d.reason
        assert 5 <= int(d.reason.split("; demand ")[1].split(",")[0]) <= 8
        assert 3 <= float(d.reason.split(" requests waiting")[0].rsplit(" ", 1)[1]) <= 7


def test_the_demos_load_raises_the_cap_above_the_tuned_value() -> None:
    decisions, state = replay(SPEC, DEMO * 2, AdaptationState(current=TUNED), NOW)
    first = decisions[0]
    assert first.action is CapAction.RAISE and first.value == 5, first.reason  # demand 5
    assert "raises above the tuned value 4 (status.tuning)" in first.reason
    assert "below the KV fit with a queue" in first.reason
    assert first.evidence["tuned"] == TUNED and first.evidence["upperBound"] == 256
    # Never a queue with KV room held against a bound, and no bound named after the tuner.
    for d in decisions:
        assert d.cause is not DecisionCause.AT_BOUND, d.reason
        assert "upper bound" not in d.reason and "knee" not in d.reason, d.reason
    # The cap follows the demand (5-8), within the KV fit. A raise to the demand admits
    # only requests already waiting (issue 57 item 4): free, no cooldown between them.
    raises = [d for d in decisions if d.action is CapAction.RAISE]
    assert [d.value for d in raises] == [5, 7, 8], [d.reason for d in decisions]
    assert state.current == 8 <= FIT
    assert all(not d.binding and d.free_to == d.value for d in raises)
    assert raises[1].at - raises[0].at == INTERVAL < SPEC.adaptation.cooldown_seconds
    assert decisions[-1].action is CapAction.HOLD  # demand met: nothing waits for the cap


def test_preemptions_after_the_raise_lower_it_again() -> None:
    _, raised = replay(SPEC, DEMO * 2, AdaptationState(current=TUNED), NOW)
    assert raised.current == 8
    # The load grows until the KV cache runs out: 3 preemptions in 10 s (of 20 finished),
    # not the 10 that would count as strong evidence against undoing a recent raise.
    start = NOW + len(DEMO) * 2 * INTERVAL
    decisions, state = replay(SPEC, [Window(3.8, 6.0)] * 4, raised, start, preemptions=3.0,
                              kv=0.95)
    lower = decisions[0]
    assert lower.action is CapAction.LOWER and lower.cause is DecisionCause.PREEMPTIONS
    assert lower.value is not None and TUNED <= lower.value < 8, lower.reason
    assert "3 preemptions in the last 10 s" in lower.reason
    assert "undoes a raise above the tuned value 4 (status.tuning)" in lower.reason
    assert state.current < raised.current


def test_a_latency_miss_above_the_tuned_value_lowers_back_to_it() -> None:
    # Raised 4 → 6 on the demo's queue; then the inter-token latency misses its 500 ms
    # SLO with the batch busy. 6 is within the KV fit (15), where a late token alone is
    # not blamed on the batch; above the tuned value it is: the raise rested on the SLO.
    raised = AdaptationState(current=6, last_change_at=NOW - 60, history=(
        CapChange(at=NOW - 60, from_value=4, to_value=6, reason="queue", kv_fit=FIT),))
    late = Window(3.6, 2.0)  # 6 x 3.6 / 4 = 5.4 running of 6, a busy batch
    o = observed(late, 6, NOW, itl_ms=700)  # 1.4 x the SLO: not "strong" by itself
    d = decide(o, raised, SPEC, NOW, limits=LIMITS, settings=POLICY)
    assert d.action is CapAction.LOWER and d.value == TUNED, d.reason
    assert d.cause is DecisionCause.ITL_SLO
    assert "lowers a cap raised above the tuned value 4 (status.tuning) back to it" in d.reason
    # Without a tuning result the same window holds: within the KV fit a latency miss
    # does not lower.
    plain = decide(o, raised, SPEC, NOW, limits=CapLimits(plan_max_num_seqs=256),
                   settings=POLICY)
    assert plain.action is CapAction.HOLD and "within the KV fit" in plain.reason

    back = record(raised, d, POLICY)
    later = NOW + 60
    # Back at 4, still late and queueing below the fit: no raise above the tuned value
    # while the latency misses.
    o = observed(Window(3.8, 4.0), TUNED, later, itl_ms=600)
    d = decide(o, back, SPEC, later, limits=LIMITS, settings=POLICY)
    assert d.action is CapAction.HOLD, d.reason
    assert "above it only a latency within the SLO raises" in d.reason
    # The latency recovers: the queue alone does not undo the lower within the flap
    # window (that queue is what the undone raise rested on).
    o = observed(Window(3.8, 4.0), TUNED, later, itl_ms=40)
    d = decide(o, back, SPEC, later, limits=LIMITS, settings=POLICY)
    assert d.action is CapAction.HOLD and d.cause is DecisionCause.FLAP, d.reason
    # Past the flap window the live evidence may try above the tuned value again.
    much_later = later + POLICY.flap_window_seconds + 1
    o = observed(Window(3.8, 4.0), TUNED, much_later, itl_ms=40)
    d = decide(o, back, SPEC, much_later, limits=LIMITS, settings=POLICY)
    assert d.action is CapAction.RAISE and d.value == 8, d.reason  # the demand, free


def test_below_the_tuned_value_a_latency_miss_still_lets_a_queue_raise_to_it() -> None:
    # The KV-fit rule stands below the tuned value: a queue below the fit raises whatever
    # the latency, up to the tuned value, and the reason says why it stops there.
    o = observed(Window(3.0, 5.0), 2, NOW, itl_ms=600)
    d = decide(o, AdaptationState(current=2), SPEC, NOW, limits=LIMITS, settings=POLICY)
    assert d.action is CapAction.RAISE and d.value == 4, d.reason  # free, below demand 8
    assert "above the tuned value 4 (status.tuning) only a latency within the SLO" in d.reason


def test_the_demo_prints_the_range_and_the_tuned_value_once() -> None:
    seen = _Adaptation("tiny-llama-0")
    status = {"status": {"adaptation": {
        "tuned": TUNED, "bounds": {"lower": 1, "upper": 256, "lowerSource": "x",
                                   "upperSource": "the planner's memory limit"}}}}
    assert seen.news(status) == [
        "  the cap moves between 1 and 256 (upper: the planner's memory limit); tuned value 4: "
        "where it starts, not a bound"]
    assert seen.news(status) == []  # said once, until it changes

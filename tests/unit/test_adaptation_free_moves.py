"""An adaptation step that binds (issue 57, item 4).

In ``bash tools/demo.sh`` on 2026-12-05, 32 clients ran against a KV cache that holds 15
sequences (128 + 128-token requests, 4,096 tokens in blocks of 16): 28 preemptions in
10 s, running never above 16. The adaptation lowered the cap 256 → 128 ("step limited to
50% of 256 (spec.adaptation.maxStepPercent)") and then held on the 20 s cooldown ("would
lower to 64"): the cap never bound and the preemptions went on. A lower that stays at or
above the running peak turns no request away, and a raise to no more than the demand
(running + waiting) admits only requests already waiting: such a move goes straight to
its target; the step limit and the cooldown apply only to the part that cuts into the
running batch. The windows below are the demo's as its reasons describe them (its spec,
its 10 s window scraped every second); the recorded series themselves were not kept
(``test_adaptation.py`` replays a real engine's recorded KV pressure the same way).
"""

from __future__ import annotations

from typing import Any

from tests.unit.test_adaptation_tuned import KV_TOKENS, NOW, POLICY, SPEC, WINDOW

from llm_operator.adaptation.policy import (
    AdaptationState,
    CapAction,
    CapChange,
    CapLimits,
    DecisionCause,
    Observation,
    adaptation_status,
    decide,
    record,
)
from llm_operator.api.models import LLMServiceSpec

# The demo's spec (demo/tiny-llama-local.yaml: cooldown 20 s, maxStepPercent 50), its
# 10 s window scraped every second, and its KV cache: 256 blocks of 16, 255 usable, 15
# sequences of 255 tokens (16 blocks).
LIMITS = CapLimits(plan_max_num_seqs=256)


def demo_window(at: float = NOW, *, kv_tokens: int = KV_TOKENS, **kw: Any) -> Observation:
    """The demo's window under KV pressure: 32 clients, running peak 16, 28 preemptions
    in 10 s of about 30 finished requests."""
    base: dict[str, Any] = dict(
        namespace="default", name="tiny-llama", evaluated_at=at, window_seconds=WINDOW,
        samples=10, last_sample_at=at - 0.5, replicas=1, running_mean=14.2, running_max=16.0,
        waiting_mean=17.8, waiting_max=20.0, kv_usage_mean=0.97, kv_usage_max=1.0,
        preemption_rate=2.8, request_rate=3.0, ttft_p95_seconds=2.0, itl_p95_seconds=0.05,
        mean_prompt_tokens=128.0, mean_generation_tokens=128.0, kv_capacity_tokens=kv_tokens,
        kv_block_size=16)
    base.update(kw)
    return Observation(**base)


def spec(**adaptation: Any) -> LLMServiceSpec:
    return SPEC.model_copy(update={"adaptation": SPEC.adaptation.model_copy(update=adaptation)})


def test_the_demos_first_lower_lands_at_or_below_the_running_peak() -> None:
    o = demo_window()
    d = decide(o, AdaptationState(current=256), SPEC, NOW, limits=LIMITS, settings=POLICY)
    # Before: "Lower 256 → 128: ...; step limited to 50% of 256".
    assert d.action is CapAction.LOWER and d.cause is DecisionCause.PREEMPTIONS
    assert d.value == 15 <= 16, d.reason  # the KV fit, below the running peak
    assert (d.free_to, d.binding) == (16, True)
    assert d.evidence["kvFit"] == 15 and d.evidence["runningPeak"] == 16
    assert "28 preemptions in the last 10 s" in d.reason
    assert "256 → 16 free: no request runs above 16 (running peak over the 10 s window)" \
        in d.reason
    assert "then 16 → 15 within 50% of the binding 16 (spec.adaptation.maxStepPercent): " \
           "it cuts into the running batch" in d.reason
    assert "50% of 256" not in d.reason
    # The cut into the running batch started the cooldown: still preempting 15 s later
    # (the window holds no sample from before the change), the policy holds.
    st = record(AdaptationState(current=256), d, POLICY)
    later = NOW + 15
    d2 = decide(demo_window(later, running_max=15.0, running_mean=14.8), st, SPEC, later,
                limits=LIMITS, settings=POLICY)
    assert d2.action is CapAction.HOLD and d2.cause is DecisionCause.COOLDOWN, d2.reason


def test_a_cut_into_the_running_batch_is_limited_by_the_binding_value() -> None:
    # The example: a KV fit of 12 (193 blocks of 16, one of them vLLM's null block).
    d = decide(demo_window(kv_tokens=193 * 16), AdaptationState(current=256), SPEC, NOW,
               limits=LIMITS, settings=POLICY)
    assert (d.value, d.free_to, d.binding) == (12, 16, True), d.reason
    assert "256 → 16 free: no request runs above 16 (running peak over the 10 s window); " \
           "then 16 → 12 within 50% of the binding 16" in d.reason
    # A fit of 4: the cut stops at 50 % of the binding 16, not of 256.
    d = decide(demo_window(kv_tokens=65 * 16), AdaptationState(current=256), SPEC, NOW,
               limits=LIMITS, settings=POLICY)
    assert (d.value, d.evidence["target"]) == (8, 4), d.reason
    assert "then 16 → 8 step limited to 50% of the binding 16" in d.reason


def test_a_lower_that_stays_above_the_running_peak_starts_no_cooldown() -> None:
    # Running peaked at 10 while the KV cache holds 15: 256 → 15 turns no request away.
    o = demo_window(running_max=10.0, running_mean=9.0)
    d = decide(o, AdaptationState(current=256), SPEC, NOW, limits=LIMITS, settings=POLICY)
    assert (d.action, d.value, d.free_to, d.binding) == (CapAction.LOWER, 15, 15, False)
    assert "256 → 15 free: no request runs above 10" in d.reason
    assert "so no step limit and no cooldown" in d.reason
    st = record(AdaptationState(current=256), d, POLICY)
    assert st.history[-1].binding is False
    # The next window, 10 s later, still preempts at 15: the cut goes on at once.
    later = NOW + WINDOW
    d2 = decide(demo_window(later, running_max=15.0), st, SPEC, later, limits=LIMITS,
                settings=POLICY)
    assert d2.action is CapAction.LOWER and d2.binding, d2.reason
    assert d2.value is not None and d2.value < 15


def test_within_the_cooldown_only_the_free_part_of_a_lower_is_made() -> None:
    # A cut 15 s ago (past the 10 s window, within the 20 s cooldown); the cap was since
    # set back to 64 (say by the user's bounds). Preempting again with running at 16:
    # 64 → 16 is free, the cut to 15 waits.
    st = AdaptationState(current=64, last_change_at=NOW - 15, history=(
        CapChange(at=NOW - 15, from_value=20, to_value=64, reason="", binding=True),))
    d = decide(demo_window(), st, SPEC, NOW, limits=LIMITS, settings=POLICY)
    assert (d.action, d.value, d.binding) == (CapAction.LOWER, 16, False), d.reason
    assert "64 → 16 free" in d.reason
    assert "the step 16 → 15 past the running peak waits: the last change that cut into " \
           "the running batch was 15 s ago, within the 20 s cooldown" in d.reason
    assert d.evidence["cooldownRemainingSeconds"] == 5
    # The same window with the running peak not known: nothing is free, hold.
    d = decide(demo_window(running_max=None), st, SPEC, NOW, limits=LIMITS, settings=POLICY)
    assert d.action is CapAction.HOLD and d.cause is DecisionCause.COOLDOWN, d.reason


def test_a_raise_below_the_demand_is_free() -> None:
    # Cap 8 after a cut, the load grew: 8 run, 10 wait, the KV cache half used, no
    # preemption. The demand (18) is above the KV fit (15): 8 → 15 at once, where the
    # step limit gave 12, and no cooldown is started.
    o = demo_window(running_mean=8.0, running_max=8.0, waiting_mean=10.0, kv_usage_mean=0.45,
                    kv_usage_max=0.55, preemption_rate=0.0)
    d = decide(o, AdaptationState(current=8), SPEC, NOW, limits=LIMITS, settings=POLICY)
    assert (d.action, d.value, d.free_to, d.binding) == (CapAction.RAISE, 15, 15, False)
    assert d.evidence["demand"] == 18
    assert "8 → 15 free: 18 requests in the system (8.0 running + 10.0 waiting): the raise " \
           "admits only requests already waiting, so no step limit and no cooldown" in d.reason
    # Even within the cooldown of an earlier cut (15 s ago) it goes.
    cut = AdaptationState(current=8, last_change_at=NOW - 15, history=(
        CapChange(at=NOW - 15, from_value=12, to_value=8, reason="", binding=True),))
    d = decide(o, cut, SPEC, NOW, limits=LIMITS, settings=POLICY)
    assert d.action is CapAction.RAISE and d.value == 15, d.reason


def test_bounds_and_pins_still_win() -> None:
    o = demo_window()
    # minMaxNumSeqs 20: the lower stops there, above the peak, so it is free.
    d = decide(o, AdaptationState(current=256), spec(min_max_num_seqs=20), NOW, limits=LIMITS,
               settings=POLICY)
    assert (d.value, d.free_to, d.binding) == (20, 20, False), d.reason
    assert "target 15 clamped to the lower bound 20" in d.reason
    # A pin never moves.
    pinned = SPEC.model_copy(update={"engine": SPEC.engine.model_copy(
        update={"max_num_seqs": 256})})
    d = decide(o, AdaptationState(current=256), pinned, NOW, limits=LIMITS, settings=POLICY)
    assert d.action is CapAction.HOLD and d.cause is DecisionCause.PINNED
    # The memory plan's ceiling: a cap above it goes there first.
    d = decide(o, AdaptationState(current=256), SPEC, NOW,
               limits=CapLimits(plan_max_num_seqs=171), settings=POLICY)
    assert (d.value, d.cause) == (171, DecisionCause.OUT_OF_BOUNDS), d.reason
    # A free raise stops at maxMaxNumSeqs (and at the plan's ceiling).
    q = demo_window(running_mean=8.0, running_max=8.0, waiting_mean=10.0, kv_usage_mean=0.45,
                    kv_usage_max=0.55, preemption_rate=0.0)
    d = decide(q, AdaptationState(current=8), spec(max_max_num_seqs=10), NOW, limits=LIMITS,
               settings=POLICY)
    assert (d.value, d.free_to) == (10, 10), d.reason
    d = decide(q, AdaptationState(current=8), SPEC, NOW, limits=CapLimits(plan_max_num_seqs=9),
               settings=POLICY)
    assert d.value == 9, d.reason


def test_status_records_which_part_was_free() -> None:
    d = decide(demo_window(), AdaptationState(current=256), SPEC, NOW, limits=LIMITS,
               settings=POLICY)
    st = record(AdaptationState(current=256), d, POLICY)
    status = adaptation_status(st, d, demo_window())
    last = status["lastDecision"]
    assert last["binding"] is True and last["free"]["to"] == 16
    assert last["free"]["reason"] == "no request runs above 16 (running peak over the 10 s " \
                                     "window)"
    assert status["history"][-1]["binding"] is True
    back = AdaptationState.from_status(status, 256)
    assert back.history[-1].binding is True
    # A history written before the flag counts each change as binding (the old cooldown).
    old = {**status, "history": [{k: v for k, v in h.items() if k != "binding"}
                                 for h in status["history"]]}
    assert AdaptationState.from_status(old, 256).history[-1].binding is True
    # A hold carries no such fields.
    hold = decide(demo_window(NOW + 15), st, SPEC, NOW + 15, limits=LIMITS, settings=POLICY)
    assert "binding" not in adaptation_status(st, hold, None)["lastDecision"]

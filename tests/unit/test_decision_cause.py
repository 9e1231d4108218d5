"""The ``cause`` code of every adaptation decision (``DecisionCause``, the ``cause`` label of
``llmop_adaptation_decisions_total``): each path through ``policy.decide`` (and the loop's
wait for a change on its way) yields exactly one code of the fixed set, and the code agrees
with what the reason text says."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_adaptation import NOW, PREEMPTING, QUEUEING, obs, spec, state

from llm_operator.adaptation.policy import (
    AdaptationState,
    CapAction,
    CapChange,
    DecisionCause,
    decide,
)
from llm_operator.adaptation.update import parse_services, waiting_decision

C = DecisionCause
LOWERED_32_TO_16 = AdaptationState(current=16, last_change_at=NOW - 900, history=(
    CapChange(at=NOW - 900, from_value=32, to_value=16, reason="preemptions"),))

# cause -> (observation, state, spec, expected action, words the reason must hold)
SCENARIOS: dict[DecisionCause, tuple[Any, Any, Any, CapAction, str]] = {
    C.PINNED: (obs(**PREEMPTING), state(16), spec(engine={"maxNumSeqs": 16}),
               CapAction.HOLD, "Pinned by the user"),
    C.DISABLED: (obs(**PREEMPTING), state(16), spec(mode="Disabled"),
                 CapAction.HOLD, "Adaptation is disabled"),
    C.NO_STATE: (obs(), None, spec(), CapAction.HOLD, "not known yet"),
    C.NO_DATA: (None, state(16), spec(), CapAction.HOLD, "no vLLM series"),
    C.SETTLING: (obs(**PREEMPTING), state(16, last_change_at=NOW - 60),
                 spec(cooldownSeconds=0), CapAction.HOLD, "from before the last change"),
    C.STEADY: (obs(), state(16), spec(), CapAction.HOLD, "no reason to move"),
    C.AT_BOUND: (obs(**PREEMPTING), state(4), spec(minMaxNumSeqs=4),
                 CapAction.HOLD, "at its lower bound"),
    C.COOLDOWN: (obs(**PREEMPTING), state(16, last_change_at=NOW - 300),
                 spec(cooldownSeconds=600), CapAction.HOLD, "cooldown"),
    C.FLAP: (obs(**{**QUEUEING, "waiting_mean": 16.0, "kv_usage_max": 0.75}),
             LOWERED_32_TO_16, spec(maxStepPercent=100), CapAction.HOLD, "flap window"),
    C.OUT_OF_BOUNDS: (None, state(64), spec(maxMaxNumSeqs=32), CapAction.LOWER,
                      "above the upper bound"),
    C.PREEMPTIONS: (obs(**PREEMPTING), state(16), spec(), CapAction.LOWER, "preemptions in"),
    C.KV_USAGE: (obs(running_mean=16, running_max=16, kv_usage_mean=0.95, kv_usage_max=0.99,
                     kv_capacity_tokens=4096), state(16), spec(), CapAction.LOWER,
                 "high watermark"),
    C.TTFT_SLO: (obs(**{**PREEMPTING, "ttft_p95_seconds": 5.0, "waiting_mean": 0.0}),
                 state(16), spec(preemptions="Tolerate"), CapAction.LOWER,
                 "TTFT p95 5000 ms above"),
    C.ITL_SLO: (obs(running_mean=14.0, running_max=16.0, itl_p95_seconds=0.2,
                    kv_capacity_tokens=None), state(16), spec(), CapAction.LOWER,
                "batch interference"),
    C.QUEUE: (obs(**QUEUEING), state(16), spec(), CapAction.RAISE, "requests waiting"),
    C.BELOW_KV_FIT: (obs(**{**QUEUEING, "itl_p95_seconds": 0.15}), state(16), spec(),
                     CapAction.RAISE, "below the KV fit with a queue"),
}


@pytest.mark.parametrize("cause", list(SCENARIOS), ids=str)
def test_each_path_of_the_policy_yields_its_cause(cause: DecisionCause) -> None:
    observation, st, sp, action, words = SCENARIOS[cause]
    d = decide(observation, st, sp, NOW, namespace="ns", name="svc")
    assert (d.action, d.cause) == (action, cause), d.reason
    assert words in d.reason, d.reason


def test_every_code_is_reachable_and_a_plain_label_value() -> None:
    """The scenarios above and the loop's wait cover the whole set; each code is a short
    snake_case word, never text (a label value Prometheus keeps one series per)."""
    assert set(SCENARIOS) | {C.APPLYING} == set(DecisionCause)
    for cause in DecisionCause:
        assert cause.value.replace("_", "").isalpha() and cause.value.islower()
        assert len(cause.value) <= 16


def test_waiting_for_a_change_on_its_way_is_applying() -> None:
    body = {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
            "metadata": {"name": "svc", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                     "gpus": {"product": "L4"}, "adaptation": {"mode": "Apply"}},
            "status": {"plan": {"maxNumSeqs": 16}}}
    svc = parse_services([body])[("ns", "svc")]
    d = waiting_decision(svc, state(16), obs(), "waiting for the engines' report", NOW)
    assert (d.action, d.cause) == (CapAction.HOLD, C.APPLYING)


def test_the_first_applicable_lower_trigger_names_the_cause() -> None:
    """Preemptions with a full KV cache and a late token: one decision, one code, the
    first of preemptions, KV usage and inter-token latency that applies."""
    o = obs(**{**PREEMPTING, "itl_p95_seconds": 0.3})
    d = decide(o, state(16), spec(), NOW)
    assert d.action is CapAction.LOWER and d.cause is C.PREEMPTIONS
    assert "preemptions in" in d.reason and "batch interference" in d.reason

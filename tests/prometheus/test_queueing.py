"""Scenario (b): queueing at a low cap with free KV on a real vLLM, through Prometheus.

``--max-num-seqs 2`` with a 64 MiB KV cache and 8 clients: requests wait while the KV
cache sits nearly empty, and the decision raises the cap. The model here is a larger
(still random, 8-layer, hidden 512) Llama: with the 2-layer one the two cores could not
feed the engine (the API server and the benchmark client share them), so it ran below
its cap with the queue in the front end (``tests/unit/data/frontend_bound.json``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llm_operator.adaptation.policy import AdaptationState, CapAction, decide
from llm_operator.api.models import LLMServiceSpec
from tests.conftest import vllm_python
from tests.prometheus.conftest import (
    MODEL_CACHE,
    Stack,
    full,
    observe_scenario,
    start_stack,
)
from tests.support.tiny_model import ensure_tiny_llama
from tests.support.vllm_load import Load

# The timeout includes waiting for the machine-wide vLLM lock (other servers may hold it).
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

CAP = 2
FLAGS = ["--kv-cache-memory-bytes", str(64 * 1024 * 1024), "--max-num-seqs", str(CAP),
         "--max-model-len", "1024"]
LOAD = Load(concurrency=8, num_prompts=2000, input_len=128, output_len=256)
WINDOW_S = 20.0


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    model = ensure_tiny_llama(MODEL_CACHE, vllm_python(), hidden=512, layers=8, heads=8,
                              kv_heads=4, intermediate=2048)
    yield from start_stack(model, FLAGS, "queueing")


@pytest.fixture(scope="module")
def observed(stack: Stack) -> list:  # type: ignore[type-arg]
    """Observations every 3 s while 8 clients load a server capped at 2 (about 35 s)."""
    return observe_scenario(stack, "queueing", LOAD, CAP, FLAGS, WINDOW_S)


def test_queueing_with_free_kv_raises_the_cap(observed: list) -> None:
    windows = full(observed, WINDOW_S)
    assert windows, f"no full window observed: {[o.samples for o in observed]}"
    obs = windows[-1]
    assert obs.running_max == CAP  # the engine never ran more than its cap
    assert obs.waiting_mean is not None and obs.waiting_mean > 3  # 8 clients, 2 slots
    assert obs.kv_usage_max is not None and obs.kv_usage_max < 0.2  # far below 70 %
    assert not obs.preemption_rate

    spec = LLMServiceSpec.model_validate({"model": {"name": "tiny"}})
    d = decide(obs, AdaptationState(current=CAP), spec, obs.evaluated_at)
    assert d.action is CapAction.RAISE, d.reason
    # Issue 57: a raise up to the demand (running + waiting) only admits requests already
    # waiting, so it is free: no step limit; past the demand it would be step-limited.
    # The demand never exceeds the load's clients: the old rule would have stopped at 3.
    assert d.value is not None and CAP + 1 < d.value <= LOAD.concurrency, d.reason
    assert d.binding is False and "free" in d.reason, d.reason
    # Mean running at the cap with free KV ("low watermark"), or, on a loaded machine
    # where the mean dips under 90 % of the cap, the cap reached below the KV fit.
    assert "requests waiting" in d.reason
    assert "low watermark" in d.reason or "below the KV fit with a queue" in d.reason, d.reason

    # The step limit does not apply to a free raise: a wide step lands at the same value.
    wide = LLMServiceSpec.model_validate({"model": {"name": "tiny"},
                                          "adaptation": {"maxStepPercent": 100}})
    d_wide = decide(obs, AdaptationState(current=CAP), wide, obs.evaluated_at)
    assert d_wide.action is CapAction.RAISE and d_wide.value == d.value, d_wide.reason


def test_upper_bound_holds_the_raise(observed: list) -> None:
    obs = full(observed, WINDOW_S)[-1]
    spec = LLMServiceSpec.model_validate({"model": {"name": "tiny"},
                                          "adaptation": {"maxMaxNumSeqs": CAP}})
    d = decide(obs, AdaptationState(current=CAP), spec, obs.evaluated_at)
    assert d.action is CapAction.HOLD and "upper bound" in d.reason

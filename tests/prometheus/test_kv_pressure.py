"""Scenario (a): KV pressure on a real vLLM, observed through a real Prometheus.

A 4,096-token KV cache (``--kv-cache-memory-bytes 2097152``) behind a cap of 64 and 48
clients with 128-token prompts and 256-token answers: the engine preempts, and the
controller's decision lowers the cap, explaining why.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator

import pytest

from llm_operator.adaptation.policy import AdaptationState, CapAction, decide
from llm_operator.api.models import LLMServiceSpec
from tests.prometheus.conftest import Stack, full, observe_scenario, start_stack
from tests.support.vllm_load import Load, engine_metric

# The timeout includes waiting for the machine-wide vLLM lock (other servers may hold it).
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

CAP = 64
FLAGS = ["--kv-cache-memory-bytes", "2097152", "--max-num-seqs", str(CAP),
         "--max-model-len", "1024"]
# More prompts than the observation sees (it stops the load): a window at its end would
# hold the drain of the last requests (600 prompts lasted about 25 s here).
LOAD = Load(concurrency=48, num_prompts=2000, input_len=128, output_len=256)
WINDOW_S = 20.0


@pytest.fixture(scope="module")
def stack(tiny_model) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    yield from start_stack(tiny_model, FLAGS, "kv-pressure")


@pytest.fixture(scope="module")
def observed(stack: Stack) -> list:  # type: ignore[type-arg]
    """Observations every 3 s while 48 clients load the server (about 35 s)."""
    return observe_scenario(stack, "kv_pressure", LOAD, CAP, FLAGS, WINDOW_S)


def _spec(**adaptation: object) -> LLMServiceSpec:
    return LLMServiceSpec.model_validate(
        {"model": {"name": "tiny"}, "adaptation": {"mode": "Apply", **adaptation}})


def test_preemptions_are_observed_and_the_decision_lowers_the_cap(
    stack: Stack, observed: list
) -> None:
    engine_preemptions = engine_metric(stack.server.url, "vllm:num_preemptions_total")
    assert engine_preemptions > 0, "the engine itself did not preempt: no KV pressure"

    windows = full(observed, WINDOW_S)
    assert windows, f"no full window observed: {[o.samples for o in observed]}"
    obs = windows[-1]
    assert obs.preemption_rate and obs.preemption_rate > 0
    assert obs.kv_capacity_tokens == 4096  # 2 MiB / (2 layers x 2 x 2 KV heads x 32 x 2 B)
    assert obs.kv_usage_max is not None and obs.kv_usage_max > 0.9
    assert obs.running_max is not None and obs.running_max <= CAP

    d = decide(obs, AdaptationState(current=CAP), _spec(), obs.evaluated_at)
    assert d.action is CapAction.LOWER, d.reason
    assert "preemptions" in d.reason
    # Issue 57: the part of the lower above the running peak changes nothing for running
    # requests, so it is free; only the cut below the peak is held to the default 50 %
    # step, of the peak (the value where the cap starts binding), not of the cap.
    peak = int(obs.running_max)
    start = peak if peak < CAP else CAP
    if peak < CAP:
        assert d.free_to == peak and "free" in d.reason, d.reason
    assert d.value is not None and start - max(1, start // 2) <= d.value <= start, d.reason

    # Without the step limit the target is what the KV cache holds for the observed size.
    d = decide(obs, AdaptationState(current=CAP), _spec(maxStepPercent=100), obs.evaluated_at)
    per_seq = (obs.mean_prompt_tokens or 0) + (obs.mean_generation_tokens or 0)
    assert obs.kv_block_size == 128  # the CPU backend's block
    # vLLM keeps one of the 32 blocks back (its null block) and never stores the KV of a
    # request's last sampled token.
    assert d.value == (4096 // 128 - 1) // math.ceil((per_seq - 1) / 128), d.reason
    assert "holds" in d.reason


def test_every_full_window_during_pressure_lowers(observed: list) -> None:
    decisions = [decide(o, AdaptationState(current=CAP), _spec(), o.evaluated_at)
                 for o in full(observed, WINDOW_S)]
    assert decisions and all(d.action is CapAction.LOWER for d in decisions), \
        [d.reason for d in decisions]


def test_recommend_cli_against_the_live_prometheus(stack: Stack, observed: list) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "llm_operator.cli", "recommend", "--prometheus", stack.prom.url,
         "--service", f"{stack.namespace}/{stack.name}", "--current", str(CAP),
         "--window", "30", "--scrape-interval", "1", "-o", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    doc = json.loads(out.stdout)
    assert doc["observation"]["preemptionRate"] > 0
    assert doc["decision"]["action"] == "lower", doc["decision"]["reason"]

    table = subprocess.run(
        [sys.executable, "-m", "llm_operator.cli", "recommend", "--prometheus", stack.prom.url,
         "--service", f"{stack.namespace}/{stack.name}", "--current", str(CAP),
         "--window", "30", "--scrape-interval", "1"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert "preemptions in window" in table and "lower" in table


def test_the_cap_it_lowers_to_stops_the_engine_preempting(stack: Stack, observed: list) -> None:
    """The rollout, played by hand: the same vLLM restarted on its port (Prometheus keeps
    scraping the same target) with the cap the decision chose, under the same 48 clients.
    Last in the module: it leaves the module's server at the new cap."""
    obs = full(observed, WINDOW_S)[-1]
    d = decide(obs, AdaptationState(current=CAP), _spec(maxStepPercent=100), obs.evaluated_at)
    assert d.value is not None and d.value < CAP, d.reason
    url = stack.server.url
    per_request_before = (engine_metric(url, "vllm:num_preemptions_total")
                          / max(1.0, engine_metric(url, "vllm:request_success_total")))
    assert per_request_before > 0.1, per_request_before  # under pressure at the old cap

    i = FLAGS.index("--max-num-seqs")
    stack.restart([*FLAGS[:i], "--max-num-seqs", str(d.value), *FLAGS[i + 2:]])
    result = stack.load(Load(concurrency=48, num_prompts=240, input_len=128,
                             output_len=256)).wait(timeout_s=600)
    # On two busy cores the benchmark's client loses requests (232 and 199 of 240 seen in
    # fresh clones); the engine's own success counter is what preemptions are set against,
    # and half the load is enough to measure a rate that was 0.8 per request.
    completed = engine_metric(stack.server.url, "vllm:request_success_total")
    assert completed >= 120, (completed, result["completed"])
    preempted = engine_metric(stack.server.url, "vllm:num_preemptions_total")
    # At the fit, a preemption needs a prompt a token or two longer than the mean (the
    # benchmark's text re-tokenises to 128-130 tokens): rare, not the rule it was.
    assert preempted / completed <= per_request_before / 10, \
        (preempted, completed, per_request_before, d.reason)

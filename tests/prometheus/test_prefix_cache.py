"""Prefix caching observed on a real vLLM through a real Prometheus (issue 37 item 2).

One server (vLLM's prefix cache on, its default) takes two loads from vLLM's benchmark,
each of prompts written to a file: first a chat service as the tuning guide asks, a
shared system prompt first and the user's question after it; then the same service
after a change that put a per-request line (a request id and a time) before the system
prompt. The adaptation's observation reads the hit rate from Prometheus and the
operator's status update reports it: above 50% for the first load, and for the second,
against a profile that still states the shared prefix, ``PrefixCacheHits=False`` with
the guide's fix and one Warning.

The prompts are files (in ShareGPT's shape, which vLLM's benchmark reads without
pandas), not vLLM's random dataset: the tiny model's tokenizer has about
1,000 tokens, and random prompts over so few repeat their first block often enough that
vLLM's cache hits 10-20% of "unshared" prompts (16% was seen).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_operator.adaptation.policy import AdaptationState, CapAction, CapDecision, DecisionCause
from llm_operator.adaptation.update import Service, plan_update
from llm_operator.api.models import parse_llmservice
from llm_operator.health import status as st
from tests.conftest import vllm_python
from tests.prometheus.conftest import MODEL_CACHE, Stack, observe_while, start_stack
from tests.support.tiny_model import ensure_tiny_llama
from tests.support.vllm_load import Load

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]

FLAGS = ["--kv-cache-memory-bytes", str(64 * 1024 * 1024), "--max-num-seqs", "8",
         "--max-model-len", "2048"]
WINDOW_S = 15.0
WORDS = ("route", "invoice", "cluster", "ticket", "refund", "policy", "latency", "budget",
         "replica", "schedule", "gateway", "quota", "archive", "payload", "tenant", "region")
SYSTEM = " ".join(
    f"Rule {i}: answer about the {WORDS[i % 16]} and the {WORDS[(i * 7) % 16]} in plain "
    f"words, cite the {WORDS[(i * 3) % 16]} section, and never guess a {WORDS[(i * 5) % 16]}."
    for i in range(10))


def question(i: int) -> str:
    return " ".join(WORDS[(i * k + k * k) % 16] for k in range(1, 25)) + f" {i}?"


def write_prompts(path: Path, shared_first: bool, n: int = 3000) -> str:
    prompts = [f"{SYSTEM}\nUser {i}: {question(i)}" if shared_first else
               f"Request {i} at 14:{i % 60:02d}:{i % 47:02d}\n{SYSTEM}\nUser: {question(i)}"
               for i in range(n)]
    path.write_text(json.dumps([{"conversations": [{"value": p}, {"value": "ok"}]}
                                for p in prompts]))
    return str(path)


def tokens(stack: Stack, text: str) -> int:
    req = urllib.request.Request(
        f"{stack.server.url}/tokenize", method="POST",
        data=json.dumps({"model": str(stack.model), "prompt": text}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return int(json.load(r)["count"])


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    model = ensure_tiny_llama(MODEL_CACHE, vllm_python())
    yield from start_stack(model, FLAGS, "prefix")


def observe(stack: Stack, load: Load) -> Any:
    """The last observation of the load (its window started after the previous load)."""
    run = stack.load(load)
    try:
        seen = observe_while(stack, run, WINDOW_S, every_s=3.0, max_s=WINDOW_S + 15)
    finally:
        run.kill()
    inside = [o for o in seen if o.prefix_cache_query_rate]
    assert inside, ("no window looked anything up in the prefix cache: windows "
                    f"{[(o.samples, o.running_mean, o.prefix_cache_query_rate) for o in seen]}, "
                    f"the benchmark's output:\n{run.output_tail()}")
    return inside[-1]


def reported(o: Any, body: dict[str, Any], status: dict[str, Any] | None = None) -> Any:
    b = {**body, "status": status or {}}
    svc = Service(("team-a", "prefix"), b, parse_llmservice(b).spec)
    hold = CapDecision(namespace="team-a", name="prefix", action=CapAction.HOLD, current=8,
                       value=8, reason="-", cause=DecisionCause.NO_DATA,
                       evidence=o.summary(), at=o.evaluated_at)
    return plan_update(svc, hold, o, AdaptationState(current=8), o.evaluated_at)


def test_shared_prefix_hits_and_a_prefix_that_is_not_there_is_said(
        stack: Stack, tmp_path: Path) -> None:
    shared = tokens(stack, SYSTEM)
    prompt = tokens(stack, f"{SYSTEM}\nUser 0: {question(0)}")
    assert shared >= 512, shared  # four of the CPU build's 128-token blocks at least
    assert prompt <= 1000, prompt  # vLLM's benchmark drops ShareGPT prompts over 1,024
    body: dict[str, Any] = {
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": "prefix", "namespace": "team-a", "generation": 1},
        "spec": {"model": {"name": "tiny"}, "gpus": {"memoryGib": 8, "count": 1},
                 "workload": {"inputTokens": prompt, "outputTokens": 8, "concurrency": 4,
                              "sharedPrefixTokens": shared},
                 "adaptation": {"mode": "Recommend"}}}

    first = observe(stack, Load(concurrency=4, num_prompts=3000, output_len=8,
                                prompts_file=write_prompts(tmp_path / "a.json", True)))
    assert first.prefix_cache_hit_rate is not None and first.prefix_cache_hit_rate > 0.5, (
        first.prefix_cache_hit_rate, shared, prompt)
    up = reported(first, body)
    assert up.status_patch["adaptation"]["lastObservation"]["prefixCacheHitRate"] > 0.5
    cond = st.get_condition(up.status_patch["conditions"], st.ConditionType.PREFIX_CACHE_HITS)
    assert cond is not None and cond["status"] == "True", cond

    later = observe(stack, Load(concurrency=4, num_prompts=3000, output_len=8,
                                prompts_file=write_prompts(tmp_path / "b.json", False)))
    assert later.prefix_cache_hit_rate is not None and later.prefix_cache_hit_rate < 0.1, (
        later.prefix_cache_hit_rate)
    print(f"\nprefix cache: shared system prompt first {first.prefix_cache_hit_rate:.0%}, "  # noqa: T201
          f"behind a per-request line {later.prefix_cache_hit_rate:.0%} "
          f"(shared {shared} of {prompt} tokens)")
    up2 = reported(later, body, {"conditions": up.status_patch["conditions"]})
    cond = st.get_condition(up2.status_patch["conditions"], st.ConditionType.PREFIX_CACHE_HITS)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "NoPrefixHits"
    assert "shared system prompt first" in cond["message"]
    assert [e.reason for e in up2.events if e.type == "Warning"] == ["NoPrefixHits"]

"""Prefix caching observed (issue 37 item 2): the workload profile may state a shared
prefix; the adaptation reads vLLM's prefix-cache hit rate from Prometheus, shows it in
status, and says when the cache hits almost nothing of the stated prefix, with the
guide's fix."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.adaptation.policy import (
    AdaptationState,
    CapAction,
    CapDecision,
    DecisionCause,
    Observation,
)
from llm_operator.adaptation.prometheus import parse_result, signal_queries
from llm_operator.adaptation.update import Service, plan_update, prefix_cache_condition
from llm_operator.api.errors import SpecErrors
from llm_operator.api.models import parse_llmservice
from llm_operator.health import status as st
from llm_operator.planning import make_plan
from llm_operator.settings import Settings
from llm_operator.tuning.fingerprint import tuning_fingerprint
from llm_operator.tuning.job import build_tuning_job

NOW = 1_800_000_000.0


def body(shared: int = 96, caching: bool | None = None) -> dict[str, Any]:
    engine = {} if caching is None else {"enablePrefixCaching": caching}
    return {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
            "metadata": {"name": "chat", "namespace": "team", "generation": 2},
            "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                     "gpus": {"product": "L4"}, "engine": engine,
                     "workload": {"inputTokens": 128, "outputTokens": 16,
                                  "sharedPrefixTokens": shared},
                     "adaptation": {"mode": "Recommend"}}}


def obs(hit: float | None, lookups_per_s: float | None = 1000.0) -> Observation:
    return Observation(namespace="team", name="chat", evaluated_at=NOW, window_seconds=60,
                       samples=60, last_sample_at=NOW - 1, replicas=1, running_mean=2.0,
                       running_max=4.0, waiting_mean=0.0, kv_usage_mean=0.1,
                       kv_usage_max=0.2, preemption_rate=0.0, request_rate=8.0,
                       prefix_cache_hit_rate=hit, prefix_cache_query_rate=lookups_per_s)


def spec(**kw: Any) -> Any:
    return parse_llmservice(body(**kw)).spec


def test_a_stated_prefix_the_cache_holds_is_reported_with_its_rate() -> None:
    ok, reason, message = prefix_cache_condition(spec(), obs(0.70))  # type: ignore[misc]
    assert (ok, reason) == (True, "PrefixHits")
    assert "70%" in message and "96 tokens is 75% of a 128-token prompt" in message


def test_a_stated_prefix_the_cache_misses_says_how_to_fix_the_prompts() -> None:
    ok, reason, message = prefix_cache_condition(spec(), obs(0.02))  # type: ignore[misc]
    assert (ok, reason) == (False, "NoPrefixHits")
    assert "shared system prompt first" in message and "byte-identical" in message
    assert "sharedPrefixTokens to 0" in message


def test_the_floor_is_a_quarter_of_what_the_stated_prefix_gives() -> None:
    # 96 of 128 tokens: the prefix would give 75%; under 18.75% is "almost nothing".
    assert prefix_cache_condition(spec(), obs(0.18))[0] is False  # type: ignore[index]
    assert prefix_cache_condition(spec(), obs(0.19))[0] is True  # type: ignore[index]


def test_nothing_is_said_without_a_stated_prefix_or_enough_lookups() -> None:
    assert prefix_cache_condition(spec(shared=0), obs(0.0)) is None
    assert prefix_cache_condition(spec(), obs(None, None)) is None  # idle window
    # 10 prompts' worth of the prefix (960 tokens) is the least a window must look up.
    assert prefix_cache_condition(spec(), obs(0.0, 900 / 60)) is None
    assert prefix_cache_condition(spec(), obs(0.0, 1000 / 60)) is not None


def test_caching_turned_off_under_a_stated_prefix_is_said_at_once() -> None:
    ok, reason, message = prefix_cache_condition(  # type: ignore[misc]
        spec(caching=False), None)
    assert (ok, reason) == (False, "PrefixCachingOff")
    assert "enablePrefixCaching" in message


def test_a_prefix_as_long_as_the_prompt_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecErrors) as err:
        spec(shared=128)
    assert "spec.workload.sharedPrefixTokens" in str(err.value)
    assert "below inputTokens" in str(err.value)


def _hold(o: Observation) -> CapDecision:
    return CapDecision(namespace="team", name="chat", action=CapAction.HOLD, current=8,
                       value=8, reason="steady", cause=DecisionCause.NO_DATA,
                       evidence=o.summary(), at=NOW)


def test_status_shows_the_rate_and_one_warning_per_change_of_state() -> None:
    b = body()
    svc = Service(("team", "chat"), b, parse_llmservice(b).spec)
    miss = obs(0.02)
    up = plan_update(svc, _hold(miss), miss, AdaptationState(current=8), NOW)
    assert up.status_patch["adaptation"]["lastObservation"]["prefixCacheHitRate"] == 0.02
    cond = st.get_condition(up.status_patch["conditions"], st.ConditionType.PREFIX_CACHE_HITS)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "NoPrefixHits"
    assert [e.reason for e in up.events if e.type == "Warning"] == ["NoPrefixHits"]
    # The next tick, still missing (another rate): no second Warning, no condition write.
    b2 = {**b, "status": {"conditions": up.status_patch["conditions"]}}
    svc2 = Service(("team", "chat"), b2, svc.spec)
    again = obs(0.03)
    up2 = plan_update(svc2, _hold(again), again, AdaptationState(current=8), NOW + 60)
    assert not [e for e in up2.events if e.reason == "NoPrefixHits"]
    got = st.get_condition(up2.status_patch.get("conditions") or b2["status"]["conditions"],
                           st.ConditionType.PREFIX_CACHE_HITS)
    assert got is not None and got["reason"] == "NoPrefixHits"


def test_the_query_yields_the_hit_rate_per_service() -> None:
    q = signal_queries(60)
    assert "vllm:prefix_cache_hits_total" in q["prefix_hit_rate"]
    assert "> 0" in q["prefix_hit_rate"]  # no lookups: no series, not 0 / 0
    series = [{"metric": {"llmop_signal": "prefix_hit_rate", "namespace": "team",
                          "llmservice": "chat"}, "value": [NOW, "0.61"]},
              {"metric": {"llmop_signal": "prefix_query_rate", "namespace": "team",
                          "llmservice": "chat"}, "value": [NOW, "512"]}]
    o = parse_result(series, NOW, 60)[("team", "chat")]
    assert o.prefix_cache_hit_rate == pytest.approx(0.61)
    assert o.prefix_cache_query_rate == pytest.approx(512)


def test_the_tuning_load_sends_the_prefix_and_only_then_changes_the_fingerprint() -> None:
    with_prefix = parse_llmservice({**body(), "spec": {**body()["spec"],
                                                       "tuning": {"mode": "OnRollout"}}})
    without = parse_llmservice({**body(shared=0), "spec": {**body(shared=0)["spec"],
                                                           "tuning": {"mode": "OnRollout"}}})
    plan = make_plan(with_prefix.spec)
    job = build_tuning_job(with_prefix, plan, Settings(), "fp")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--shared-prefix-tokens") + 1] == "96"
    job0 = build_tuning_job(without, plan, Settings(), "fp")
    assert "--shared-prefix-tokens" not in job0["spec"]["template"]["spec"]["containers"][0][
        "args"]
    assert tuning_fingerprint(with_prefix, plan) != tuning_fingerprint(without, plan)


def test_the_tuners_benchmark_sends_one_shared_prefix_inside_the_prompt_length() -> None:
    from llm_operator.inpod.tuner.bench import BenchTarget, bench_args
    from llm_operator.inpod.tuner.search import SLO

    t = BenchTarget("http://x", "m", "m", 128, 16, SLO(1000, 100), shared_prefix_tokens=96)
    args = bench_args(t, 4)
    assert args[args.index("--random-input-len") + 1] == "32"
    assert args[args.index("--random-prefix-len") + 1] == "96"
    plain = bench_args(BenchTarget("http://x", "m", "m", 128, 16, SLO(1000, 100)), 4)
    assert "--random-prefix-len" not in plain
    assert plain[plain.index("--random-input-len") + 1] == "128"

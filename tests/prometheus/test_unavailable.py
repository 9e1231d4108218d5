"""Scenario (c): Prometheus down, or up with no vLLM series: hold, and say why.

Needs only the real Prometheus (no vLLM).
"""

from __future__ import annotations

import time

from llm_operator.adaptation import prometheus
from llm_operator.adaptation.policy import AdaptationState, CapAction, decide
from llm_operator.api.models import LLMServiceSpec
from llm_operator.inpod.tuner.server import free_port
from tests.support.prometheus import Target, running_prometheus

SPEC = LLMServiceSpec.model_validate({"model": {"name": "tiny"},
                                      "adaptation": {"mode": "Apply"}})
KEY = ("team-a", "chat")


def test_prometheus_down_holds_with_the_reason() -> None:
    errors: list[Exception] = []
    client = prometheus.connect(f"http://127.0.0.1:{free_port()}", timeout_seconds=2)
    t0 = time.monotonic()
    obs = prometheus.fetch_observations(client, [KEY], time.time(), 60, on_error=errors.append)
    assert time.monotonic() - t0 < 10  # the timer must not hang on a dead Prometheus
    assert len(errors) == 1
    d = decide(obs[KEY], AdaptationState(current=16), SPEC, time.time())
    assert d.action is CapAction.HOLD and d.value == 16
    assert "Prometheus is unavailable" in d.reason and "cannot connect" in d.reason


def test_prometheus_without_vllm_series_holds_and_says_none_were_found() -> None:
    # The target is a port nobody serves: Prometheus runs, scrapes fail, no vLLM series.
    with running_prometheus([Target(f"127.0.0.1:{free_port()}",
                                    {"llmservice": "chat", "namespace": "team-a"})]) as prom:
        prom.wait_for_series('up{llmservice="chat"} == 0', 20)
        errors: list[Exception] = []
        client = prometheus.connect(prom.url)
        obs = prometheus.fetch_observations(client, [KEY], time.time(), 60,
                                            on_error=errors.append)
    assert errors == []  # the batched query is valid PromQL for a real Prometheus
    assert obs == {}
    d = decide(obs.get(KEY), AdaptationState(current=16), SPEC, time.time())
    assert d.action is CapAction.HOLD and "no vLLM series" in d.reason


def test_bad_promql_label_is_an_error_not_a_crash() -> None:
    with running_prometheus([]) as prom:
        errors: list[Exception] = []
        client = prometheus.connect(prom.url)
        obs = prometheus.fetch_observations(client, [KEY], time.time(), 60,
                                            service_label="bad-label",  # not a valid name
                                            on_error=errors.append)
    assert len(errors) == 1
    d = decide(obs[KEY], AdaptationState(current=16), SPEC, time.time())
    assert d.action is CapAction.HOLD and "Prometheus is unavailable" in d.reason

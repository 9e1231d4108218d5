"""The pure half of the Prometheus I/O: the batched query and the parsing of its result."""

from __future__ import annotations

from typing import Any

from llm_operator.adaptation.prometheus import (
    SIGNAL_LABEL,
    batched_query,
    fetch_observations,
    parse_result,
    signal_queries,
)

NOW = 1_800_000_000.0


def series(signal: str, value: str, ns: str = "ns", svc: str = "chat",
           **labels: str) -> dict[str, Any]:
    return {"metric": {SIGNAL_LABEL: signal, "namespace": ns, "llmservice": svc, **labels},
            "value": [NOW, value]}


def test_one_request_carries_every_signal_tagged() -> None:
    q = batched_query(60)
    for name in signal_queries(60):
        assert f'"{SIGNAL_LABEL}", "{name}"' in q
    assert "[60s]" in q and "by (namespace, llmservice)" in q
    assert "vllm:gpu_cache_usage_perc" in q  # the fallback for older vLLM
    assert "vllm:inter_token_latency_seconds_bucket" in q


def test_the_running_peak_is_the_max_over_the_window_of_any_replica() -> None:
    # Issue 57 item 4: a lower to no less than this peak is free (no request ran above
    # it on any replica within the window); an average or the last value would not say so.
    q = signal_queries(10)
    assert q["running_max"] == ('max by (namespace, llmservice) '
                                '(max_over_time(vllm:num_requests_running{llmservice!=""}[10s]))')
    assert q["running_mean"].startswith("avg by (namespace, llmservice) (avg_over_time(")


def test_label_names_are_configurable() -> None:
    q = batched_query(30, service_label="app_kubernetes_io_instance", namespace_label="ns")
    assert "by (ns, app_kubernetes_io_instance)" in q and "llmservice" not in q


def test_parse_groups_signals_per_service_and_drops_nan() -> None:
    result = [
        series("samples", "60"), series("last_sample_at", str(NOW - 2)),
        series("running_mean", "7.5"), series("running_max", "12"),
        series("waiting_mean", "3"), series("kv_usage_mean", "0.61"),
        series("preemption_rate", "0.25"), series("itl_p95", "NaN"),
        series("ttft_p95", "1.5"),
        series("kv_config", "1", num_gpu_blocks="32", block_size="128"),
        series("running_mean", "1.0", svc="other"),
        {"metric": {SIGNAL_LABEL: "running_mean"}, "value": [NOW, "5"]},  # no service label
    ]
    out = parse_result(result, NOW, 60)
    o = out[("ns", "chat")]
    assert (o.samples, o.running_mean, o.running_max, o.waiting_mean) == (60, 7.5, 12.0, 3.0)
    assert o.kv_usage_mean == 0.61 and o.preemptions == 15.0
    assert o.itl_p95_seconds is None and o.ttft_p95_seconds == 1.5
    assert (o.kv_capacity_tokens, o.kv_block_size) == (4096, 128)
    assert out[("ns", "other")].running_mean == 1.0
    assert len(out) == 2


class _Failing:
    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        raise ConnectionError("Connection refused")


def test_a_failed_request_makes_every_service_unavailable_and_counts() -> None:
    errors: list[Exception] = []
    out = fetch_observations(_Failing(), [("a", "x"), ("b", "y")], NOW, 60,
                             on_error=errors.append)
    assert len(errors) == 1
    assert {k: o.error for k, o in out.items()} == {("a", "x"): "cannot connect (ConnectionError)",
                                                    ("b", "y"): "cannot connect (ConnectionError)"}


def test_the_engines_vllm_releases_are_read_from_their_info_series() -> None:
    q = signal_queries(10)["vllm_version"]
    assert q == ('max by (namespace, llmservice, vllm_version) '
                 '(llmop_engine_vllm_info{llmservice!=""})')
    out = parse_result([series("vllm_version", "1", vllm_version="0.32.0"),
                        series("vllm_version", "1", vllm_version="0.31.1"),
                        series("vllm_version", "0", vllm_version="0.30.0"),  # not 1: no
                        series("vllm_version", "1", svc="solo", vllm_version="0.32.0"),
                        series("running_mean", "1", svc="none")], NOW, 10)
    assert out[("ns", "chat")].engine_vllm_versions == ("0.31.1", "0.32.0")
    assert out[("ns", "solo")].engine_vllm_versions == ("0.32.0",)
    assert out[("ns", "none")].engine_vllm_versions is None

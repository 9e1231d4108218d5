"""Reading a vLLM server's /metrics: one parser (prometheus_client's) for the tuner, the
sandbox and the tests, summing a sample over its label sets (one per engine)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llm_operator.inpod.tuner.server import (
    EngineReportedNothing,
    MetricsSampler,
    histogram_quantile,
    sample_sums,
    window_stats,
)

# The shape vLLM 0.32 exposes, with two engines (data parallel) and a label value that
# holds a space and a brace.
EXPOSITION = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny {a} b"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny {a} b"} 4.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny {a} b"} 18.0
vllm:num_preemptions_created{engine="0",model_name="tiny {a} b"} 1.7e9
# HELP llmop_admission_cap The admission cap in force.
# TYPE llmop_admission_cap gauge
llmop_admission_cap 15.0
"""


def test_a_gauge_is_summed_over_engines_and_a_counter_keeps_its_total_name() -> None:
    sums = sample_sums(EXPOSITION)
    assert sums["vllm:num_requests_running"] == 7.0
    assert sums["vllm:num_preemptions_total"] == 18.0
    assert sums["llmop_admission_cap"] == 15.0


def test_created_timestamps_and_absent_metrics_are_not_values() -> None:
    sums = sample_sums(EXPOSITION)
    assert "vllm:num_preemptions_created" not in sums
    assert sums.get("vllm:num_requests_waiting") is None


# --- a run's window from the engine's counters and histograms (issue 32 item 3) ----------

def _exposition(finished: float, running_s: float, queue_s: float, preempt: float,
                itl: dict[str, float]) -> str:
    """vLLM 0.32's shape for the series a window reads, split over two engines."""
    lines = []
    for name, kind, total in (
            ("vllm:request_success_total", "counter", finished),
            ("vllm:num_preemptions_total", "counter", preempt)):
        lines += [f"# TYPE {name.removesuffix('_total')} {kind}",
                  f'{name}{{engine="0",finished_reason="length"}} {total / 2}',
                  f'{name}{{engine="1",finished_reason="length"}} {total / 2}']
    for name, total in (("vllm:request_inference_time_seconds", running_s),
                        ("vllm:request_queue_time_seconds", queue_s)):
        lines += [f"# TYPE {name} histogram",
                  f'{name}_bucket{{engine="0",le="+Inf"}} {finished / 2}',
                  f'{name}_bucket{{engine="1",le="+Inf"}} {finished / 2}',
                  f'{name}_count{{engine="0"}} {finished / 2}',
                  f'{name}_count{{engine="1"}} {finished / 2}',
                  f'{name}_sum{{engine="0"}} {total / 2}', f'{name}_sum{{engine="1"}} {total / 2}']
    lines.append("# TYPE vllm:inter_token_latency_seconds histogram")
    for le, n in itl.items():
        lines.append(f'vllm:inter_token_latency_seconds_bucket{{engine="0",le="{le}"}} {n}')
    lines.append(f"vllm:inter_token_latency_seconds_count{{engine=\"0\"}} {itl['+Inf']}")
    lines.append('vllm:inter_token_latency_seconds_sum{engine="0"} 1.0')
    return "\n".join(lines) + "\n"


BEFORE = _exposition(100, 400.0, 50.0, 7, {"0.01": 900, "0.025": 1000, "0.05": 1000,
                                           "+Inf": 1000})
# Over a 20 s window: 64 requests finished, 160 s spent RUNNING (8 on average), 40 s
# WAITING (2 on average), 30 preemptions, 10,000 gaps of which 5,000 at most 10 ms, 9,000
# at most 25 ms and all at most 50 ms.
AFTER = _exposition(164, 560.0, 90.0, 37, {"0.01": 5900, "0.025": 10000, "0.05": 11000,
                                           "+Inf": 11000})


def test_a_window_counts_what_the_engine_counted_between_its_start_and_end() -> None:
    w = window_stats(BEFORE, AFTER, 20.0)
    assert w["finished"] == 64 and w["preemptions"] == 30
    assert w["running_mean"] == pytest.approx(8.0) and w["waiting_mean"] == pytest.approx(2.0)
    # p95 of the window's 10,000 new gaps: rank 9,500 lies in (25 ms, 50 ms], where 9,000
    # to 10,000 fall: 25 + 25 x 500 / 1,000 = 37.5 ms (Prometheus' interpolation).
    assert w["itl_p95_s"] == pytest.approx(0.0375)


def test_quantile_of_an_empty_window_is_none_not_zero() -> None:
    assert histogram_quantile(0.95, {0.01: 0.0, float("inf"): 0.0}) is None
    assert "itl_p95_s" not in window_stats(BEFORE, BEFORE, 20.0)


class _Metrics(BaseHTTPRequestHandler):
    texts: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = (self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


def _serve(texts: list[str]) -> tuple[ThreadingHTTPServer, str]:
    handler = type("H", (_Metrics,), {"texts": list(texts)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_sampler_that_saw_no_sample_still_reports_the_window_from_counters() -> None:
    server, url = _serve([BEFORE, AFTER])
    try:
        sampler = MetricsSampler(url, interval_s=3600)  # no sample lands in the window
        with sampler:
            pass
        out = sampler.summary()
    finally:
        server.shutdown()
    assert out["finished"] == 64 and out["preemptions"] == 30
    assert out["running_max"] >= out["running_mean"] > 0  # never "running max 0"


def test_time_run_outside_the_benchmark_does_not_lift_the_peak_above_the_cap() -> None:
    # CI at 63c4537: cap 2, a 0.82 s benchmark, and the engine's RUNNING time included a
    # request outside it (the benchmark's initial test request): "running max 2.03".
    server, url = _serve([BEFORE, AFTER])  # 160 s spent RUNNING between the reads
    try:
        sampler = MetricsSampler(url, interval_s=3600)
        with sampler:
            pass
    finally:
        server.shutdown()
    sampler._times = [0.0, 40.0]  # the reads 40 s apart; the benchmark busy for 16 s
    out = sampler.summary(busy_s=16.0)
    assert out["running_mean"] == pytest.approx(10.0)  # 160 s over the busy part
    # The peak's floor is the mean over the whole span (160 / 40), never the busy mean.
    assert out["running_max"] == pytest.approx(4.0)
    assert "running_span_mean" not in out


def test_a_run_the_engine_counted_nothing_for_is_an_error_not_a_zero() -> None:
    server, url = _serve([BEFORE])  # the same counters at both ends
    try:
        with MetricsSampler(url, interval_s=3600) as sampler:
            pass
        with pytest.raises(EngineReportedNothing, match="no finished request"):
            sampler.summary()
    finally:
        server.shutdown()
    with MetricsSampler("http://127.0.0.1:9", interval_s=3600) as unreachable:
        pass
    with pytest.raises(EngineReportedNothing, match="could not be read at the run's start"):
        unreachable.summary()


def test_a_client_reading_in_bursts_cannot_make_a_request_look_fast() -> None:
    from llm_operator.inpod.tuner.search import gap_p95

    # 100 tokens at 20 ms each, read in bursts of 25 by a client behind on a loaded
    # machine: 96 gaps near zero and 3 of about 0.5 s. The p95 of the gaps reads ~0.
    bursts = ([0.00001] * 24 + [0.5]) * 4
    gaps = bursts[1:]
    assert gap_p95(gaps) >= 0.019  # never below the mean gap
    steady = [0.02] * 50 + [0.04] * 5
    assert gap_p95(steady) == pytest.approx(0.04)  # a real p95 stays the p95

"""Reading a vLLM server's /metrics: one parser (prometheus_client's) for the tuner, the
sandbox and the tests, summing a sample over its label sets (one per engine)."""

from __future__ import annotations

from llm_operator.inpod.tuner.server import sample_sums

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

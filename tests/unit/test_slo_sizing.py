"""SLO sizing (issue 57, items 1-3): each decision of
:func:`llm_operator.planning.sizing.plan_for_slo` with the performance model's own figures
(estimates: llm_operator.planning.perfmodel as it is, not re-fitted). The rule was fixed
before these figures were read (the module's docstring); the figures are what it gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llm_operator.api.models import LLMServiceSpec, load_services
from llm_operator.health.status import ConditionType, build_status, plan_summary, slo_condition
from llm_operator.planning import engine_argv, make_plan
from llm_operator.planning.sizing import knob_grid, per_replica_concurrency, plan_for_slo
from llm_operator.tuning.job import start_hint

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def example(name: str) -> Any:
    ((_, svc),) = load_services([str(ROOT / "examples" / name)])
    return svc


def spec(**fields: Any) -> LLMServiceSpec:
    return LLMServiceSpec.model_validate(fields)


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_readme_example_memory_layout_meets_with_a_smaller_token_budget() -> None:
    """The README's example: memory's TP 4 missed with vLLM's 8,192-token budget (ITL p95
    155 ms at 32 clients per replica: the prefill stall); both knobs searched, 32
    sequences and 256 batched tokens meet, and that is what renders, what the plan says
    and what the tuner is told: one number per knob."""
    svc = example("llama-3.1-70b-h100.yaml")
    memory = make_plan(svc.spec)
    plan = plan_for_slo(svc.spec)
    assert (plan.tensor_parallel_size, plan.gpus_per_replica) == (4, 4) == (
        memory.tensor_parallel_size, memory.gpus_per_replica)
    assert per_replica_concurrency(svc.spec) == 32
    slo = plan.slo
    assert slo["attainable"] is True
    assert slo["layoutBy"] == "memory: TP=4 (4 GPUs) holds the workload and meets the SLO"
    assert slo["predicted"] == {"maxNumSeqs": 32, "maxNumBatchedTokens": 256,
                                "ttftP95Ms": 1098.2, "itlP95Ms": 25.2,
                                "outputTokensPerSecond": 1319.2}
    assert plan.max_num_seqs == 183  # the memory's limit: tuning's and adaptation's bound
    assert plan.start_max_num_seqs == 32
    argv = engine_argv(svc.spec, plan)
    assert flag(argv, "--max-num-seqs") == "32"
    assert flag(argv, "--max-num-batched-tokens") == "256"
    assert start_hint(svc, plan) == 32
    assert "SLO" not in " ".join(plan.warnings)
    why = {e.name: e for e in plan.explanations}
    assert why["maxNumBatchedTokens"].value == 256
    assert "no hint" in why["maxNumBatchedTokens"].formula  # why the tuner differs
    assert why["startMaxNumSeqs"].value == 32
    assert why["sloSizing"].inputs["layouts"] == {
        "TP=4 (4 GPUs)": "meets: --max-num-seqs 32 --max-num-batched-tokens 256: TTFT 1,098 "
                         "ms, ITL p95 25.2 ms, 1,319 output tok/s"}


def test_the_same_example_with_the_budget_pinned_says_it_cannot_and_why() -> None:
    """A pinned knob is never overridden: with maxNumBatchedTokens 8192 pinned no layout
    (TP 4, TP 8) meets; the plan keeps memory's TP 4 and names the closest figures and
    each fix, predicted."""
    svc = example("llama-3.1-70b-h100.yaml")
    s = svc.spec.model_copy(update={"engine": svc.spec.engine.model_copy(
        update={"max_num_batched_tokens": 8192})})
    plan = plan_for_slo(s)
    assert plan.tensor_parallel_size == 4 and plan.max_num_batched_tokens == 8192
    slo = plan.slo
    assert slo["attainable"] is False and slo["sloChoice"] is None
    assert slo["predicted"] == {"maxNumSeqs": 32, "maxNumBatchedTokens": 8192,
                                "ttftP95Ms": 683.5, "itlP95Ms": 155.1,
                                "outputTokensPerSecond": 1036.2}
    fixes = slo["fixes"]
    assert fixes[0].startswith("leave spec.engine.maxNumBatchedTokens auto: at TP=4 (4 GPUs) "
                               "the model predicts --max-num-seqs 32 --max-num-batched-tokens "
                               "256 meets it")
    assert fixes[1].startswith("more replicas: spec.replicas 3 (22 clients per replica "
                               "instead of 32, 12 GPUs in all)")
    assert fixes[2].startswith("a looser SLO")
    (warning,) = [w for w in plan.warnings if w.startswith("no plan meets the SLO")]
    assert "TTFT 683 ms, ITL p95 155.1 ms" in warning
    assert "TPOT 88%, output tok/s 88%, TTFT 55%" in warning  # the measured band
    assert "Qwen3-32B H100 TP 2" in warning  # what it was fitted to


def test_qwen_pinned_example_says_it_cannot_in_status() -> None:
    """Everything pinned (GPUs, TP, both knobs): nothing is changed; SLOAttainable False
    with the closest figures and the fixes, in status.plan and the condition."""
    svc = example("qwen2.5-72b-pinned.yaml")
    plan = plan_for_slo(svc.spec)
    assert (plan.tensor_parallel_size, plan.max_num_seqs, plan.max_num_batched_tokens) == (
        4, 128, 8192)
    slo = plan.slo
    assert slo["attainable"] is False
    assert slo["layoutBy"].startswith("spec.gpus.count is pinned")
    assert slo["predicted"]["itlP95Ms"] == 244.3 and slo["predicted"]["ttftP95Ms"] == 1880.9
    assert slo["fixes"][0].startswith("more replicas: spec.replicas 8 (12 clients per replica "
                                      "instead of 96, 32 GPUs in all)")
    assert plan_summary(plan)["slo"] == slo
    cond = slo_condition(plan)
    assert cond is not None and cond[0] == "False" and cond[1] == "NoPlanMeetsSLO"
    status = build_status(None, name="q", namespace="d", generation=1, now=0.0, plan=plan)
    (c,) = [c for c in status["conditions"] if c["type"] == ConditionType.SLO_ATTAINABLE]
    assert c["status"] == "False" and "spec.replicas 8" in c["message"]
    assert "TTFT p95 1,881 ms, ITL p95 244.3 ms at 96 clients per replica" in c["message"]


def test_slo_buys_more_gpus_than_memory_needs() -> None:
    """Llama 3.1 8B fits one H100 (memory: TP 1), but at 32 clients TP 1's best pair misses
    an 8 ms ITL p95 (8.2 ms); TP 2 is the fewest GPUs that meet it (6.9 ms)."""
    s = spec(model={"name": "meta-llama/Llama-3.1-8B-Instruct"}, gpus={"product": "H100-SXM"},
             workload={"inputTokens": 512, "outputTokens": 256, "concurrency": 32,
                       "slo": {"ttftP95Ms": 500, "itlP95Ms": 8}})
    assert make_plan(s).tensor_parallel_size == 1
    plan = plan_for_slo(s)
    assert plan.tensor_parallel_size == 2 and plan.gpus_per_replica == 2
    assert plan.slo["memoryChoice"] == "TP=1 (1 GPU)" and plan.slo["sloChoice"] == "TP=2 (2 GPUs)"
    assert plan.slo["predicted"]["itlP95Ms"] == 6.9
    why = {e.name: e for e in plan.explanations}
    assert why["tensorParallelSize"].formula.startswith("the SLO's choice")
    assert why["sloSizing"].inputs["layouts"]["TP=1 (1 GPU)"].startswith(
        "misses, closest: --max-num-seqs 32 --max-num-batched-tokens 256: TTFT 111 ms, ITL "
        "p95 8.2 ms")


def test_a_pinned_gpu_count_is_kept_and_the_fix_names_more_gpus() -> None:
    """The same service with spec.gpus.count 1: kept; the fix is TP 2, predicted."""
    s = spec(model={"name": "meta-llama/Llama-3.1-8B-Instruct"},
             gpus={"product": "H100-SXM", "count": 1},
             workload={"inputTokens": 512, "outputTokens": 256, "concurrency": 32,
                       "slo": {"ttftP95Ms": 500, "itlP95Ms": 8}})
    plan = plan_for_slo(s)
    assert plan.gpus_per_replica == 1 and plan.slo["attainable"] is False
    assert any(f.startswith("more GPUs per replica: spec.gpus.count and "
                            "spec.engine.tensorParallelSize 2") for f in plan.slo["fixes"])


def test_no_layout_meets_and_replicas_at_a_larger_layout_do() -> None:
    """70B at 16 clients, ITL p95 15 ms: TP 2, 4 and 8 all miss (34.4, 21.7, 15.3 ms); the
    plan keeps memory's TP 2 (more GPUs that still miss are not bought) and names the
    fewest GPUs in all that meet: 2 replicas of TP 8."""
    s = spec(model={"name": "meta-llama/Llama-3.1-70B-Instruct"}, gpus={"product": "H100-SXM"},
             workload={"inputTokens": 512, "outputTokens": 256, "concurrency": 16,
                       "slo": {"ttftP95Ms": 1000, "itlP95Ms": 15}})
    plan = plan_for_slo(s)
    assert plan.tensor_parallel_size == 2 and plan.slo["attainable"] is False
    assert plan.slo["fixes"][0].startswith(
        "more replicas: spec.replicas 2 with spec.engine.tensorParallelSize 8 (TP=8 (8 GPUs) "
        "each) (8 clients per replica instead of 16, 16 GPUs in all)")


def test_no_prediction_keeps_the_memory_plan_and_says_unknown() -> None:
    s = spec(model={"name": "meta-llama/Llama-3.1-8B-Instruct"}, gpus={"memoryGib": 80})
    plan = plan_for_slo(s)
    assert plan.slo["sized"] is False and plan.start_max_num_seqs == 0
    cond = slo_condition(plan)
    assert cond is not None and cond[0] == "Unknown" and cond[1] == "NoPrediction"


def test_knob_grid_respects_pins_and_vllm_rules() -> None:
    svc = example("qwen2.5-72b-pinned.yaml")
    plan = make_plan(svc.spec)
    assert knob_grid(svc.spec, plan) == ([128], [8192])
    seqs, tokens = knob_grid(svc.spec, plan, pins=False)
    assert tokens == [8192, 4096, 2048, 1024, 512, 256] and 96 in seqs
    assert max(seqs) == 256  # memory holds 376; vLLM's default cap on an A100 is 256
    off = svc.spec.model_copy(update={"engine": svc.spec.engine.model_copy(
        update={"max_num_batched_tokens": "auto", "enable_chunked_prefill": False})})
    assert knob_grid(off, make_plan(off))[1] == [16384]  # >= maxModelLen, not searched

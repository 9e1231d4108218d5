"""Decode context parallelism in the plan (issue 33): the KV cache split by tokens over
the tensor-parallel ranks that would each hold a copy of it.

With multi-head latent attention (DeepSeek-V3, Kimi-K2, GLM-5) every TP rank holds the
whole latent cache, so 8 H200s hold no more tokens than one would after its weights;
vLLM 0.32's ``--decode-context-parallel-size`` shards it by tokens on the same GPUs. The
planner sets it only where one copy per rank does not hold the workload, at the smallest
size vLLM takes that does (``tests/vllm/test_dcp_matches_vllm.py`` checks the sizes and
the capacity against vLLM's own code), and the adaptation and the tuner count the KV
cache vLLM reports accordingly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_operator.adaptation.policy import (
    DEFAULT_POLICY,
    Observation,
    _kv_fit,
    with_decode_context_parallel,
)
from llm_operator.adaptation.update import decode_context_parallel_size
from llm_operator.api.errors import SpecError, SpecErrors
from llm_operator.api.models import parse_llmservice
from llm_operator.health.status import plan_message, plan_summary
from llm_operator.inpod.tuner.search import Space
from llm_operator.knowledge.modelfacts import facts_from_hf_config
from llm_operator.planning import engine_argv, make_plan
from llm_operator.tuning.fingerprint import fingerprint_inputs

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "model_configs"


def _facts(stem: str) -> Any:
    name = stem.replace("--", "/")
    return facts_from_hf_config(json.loads((CORPUS / f"{stem}_config.json").read_text()), name)


def _service(name: str, concurrency: int, inp: int = 2048, out: int = 512,
             **engine: Any) -> Any:
    return parse_llmservice({"metadata": {"name": "svc", "namespace": "ml"}, "spec": {
        "model": {"name": name}, "gpus": {"product": "H200", "perNode": 8},
        "cache": {"claimName": "models"}, "engine": engine,
        "workload": {"inputTokens": inp, "outputTokens": out, "concurrency": concurrency}}})


def _plan(stem: str, concurrency: int, **engine: Any) -> Any:
    facts = _facts(stem)
    return make_plan(_service(facts.name, concurrency, **engine).spec, facts=facts)


def _explained(plan: Any, name: str) -> Any:
    return next(e for e in plan.explanations if e.name == name)


DSV3 = "deepseek-ai--DeepSeek-V3"


def test_a_latent_cache_that_holds_the_workload_is_not_split() -> None:
    plan = _plan(DSV3, 16)
    assert (plan.tensor_parallel_size, plan.decode_context_parallel_size) == (8, 1)
    assert "--decode-context-parallel-size" not in engine_argv(
        _service(plan.model_name, 16).spec, plan)
    e = _explained(plan, "decodeContextParallelSize")
    assert e.value == 1 and e.inputs["validSizes"] == [1, 2, 4, 8]
    assert "decodeContextParallelSize" not in plan_summary(plan)


def test_the_smallest_split_that_holds_the_workload_doubles_the_tokens_on_the_same_gpus(
        ) -> None:
    one = _plan(DSV3, 512, decodeContextParallelSize=1)
    plan = _plan(DSV3, 512)
    # Without the split the 8 GPUs hold 268 of the 512 requests and the planner warns.
    assert one.memory_max_num_seqs < 512
    assert any("vLLM will queue or preempt" in w for w in one.warnings)
    # With it: the same GPUs and weights, twice the tokens, every request held.
    assert plan.gpus_per_replica == one.gpus_per_replica == 8
    assert plan.weight_bytes_per_gpu == one.weight_bytes_per_gpu
    assert plan.decode_context_parallel_size == 2
    assert plan.kv_token_capacity == 2 * one.kv_token_capacity
    assert plan.kv_bytes_per_token * 2 == one.kv_bytes_per_token
    assert plan.block_size == 32
    assert plan.memory_max_num_seqs >= 512 and plan.max_num_seqs >= 512
    assert not any("vLLM will queue or preempt" in w for w in plan.warnings)
    e = _explained(plan, "decodeContextParallelSize")
    assert e.source == "planned" and e.inputs["heldSequencesWithoutDcp"] < 512
    assert e.inputs["heldSequences"] == 512
    argv = engine_argv(_service(plan.model_name, 512).spec, plan)
    i = argv.index("--decode-context-parallel-size")
    assert argv[i + 1] == "2"
    assert plan_summary(plan)["decodeContextParallelSize"] == 2
    assert "decode-context-parallel 2" in plan_message(plan)


def test_a_workload_no_split_holds_gets_the_largest_and_the_warning() -> None:
    plan = _plan(DSV3, 8192)
    assert plan.decode_context_parallel_size == 8
    assert any("vLLM will queue or preempt" in w for w in plan.warnings)


def test_kv_heads_fewer_than_ranks_are_split_up_to_tp_over_kv_heads() -> None:
    # Qwen3-235B-A22B: 4 KV heads; at TP 8 each is on two ranks, so DCP 2 at most.
    plan = _plan("Qwen--Qwen3-235B-A22B", 500, inp=4096, out=1024)
    assert (plan.tensor_parallel_size, plan.decode_context_parallel_size) == (8, 2)
    assert _explained(plan, "decodeContextParallelSize").inputs["validSizes"] == [1, 2]


def test_a_model_whose_kv_heads_cover_the_ranks_is_never_split() -> None:
    # Llama-3.1-70B: 8 KV heads, at most 8 GPUs a node: nothing is replicated.
    s = _service("meta-llama/Llama-3.1-70B-Instruct", 512).spec
    plan = make_plan(s)
    assert plan.decode_context_parallel_size == 1
    assert not any(e.name == "decodeContextParallelSize" for e in plan.explanations)
    pinned = _service("meta-llama/Llama-3.1-70B-Instruct", 512,
                      decodeContextParallelSize=2).spec
    with pytest.raises((SpecError, SpecErrors)) as err:
        make_plan(pinned)
    assert "spec.engine.decodeContextParallelSize" in str(err.value)
    assert "TP=8: [1]" in str(err.value)


def test_hybrid_layers_are_not_split_by_the_planner_but_a_pin_is_taken() -> None:
    # Qwen3.5: gated-DeltaNet layers (a state, no per-token KV) and full layers of 2 KV
    # heads, so at TP 8 each full layer's heads are on four ranks.
    facts = _facts("Qwen--Qwen3.5-35B-A3B")
    auto = make_plan(_service(facts.name, 4096, tensorParallelSize=8).spec, facts=facts)
    assert auto.decode_context_parallel_size == 1
    e = _explained(auto, "decodeContextParallelSize")
    assert "linear-attention" in e.formula and e.inputs["validSizes"] == [1, 2, 4]
    pinned = make_plan(_service(facts.name, 4096, tensorParallelSize=8,
                                decodeContextParallelSize=4).spec, facts=facts)
    assert pinned.decode_context_parallel_size == 4
    assert _explained(pinned, "decodeContextParallelSize").source == "pinned"
    assert pinned.kv_token_capacity > auto.kv_token_capacity


def test_the_flag_in_extra_args_names_the_field() -> None:
    s = _service(DSV3.replace("--", "/"), 16, extraArgs=["-dcp", "2"]).spec
    with pytest.raises((SpecError, SpecErrors)) as err:
        make_plan(s, facts=_facts(DSV3))
    assert "set spec.engine.decodeContextParallelSize" in str(err.value)


def test_adaptation_counts_the_tokens_of_every_rank() -> None:
    # vLLM's cache_config_info: one rank's blocks of 16 tokens (1,000 blocks).
    obs = Observation(namespace="ml", name="svc", evaluated_at=0, window_seconds=60,
                      kv_capacity_tokens=16_000, kv_block_size=16,
                      mean_prompt_tokens=1000, mean_generation_tokens=500)
    assert decode_context_parallel_size({"plan": {"decodeContextParallelSize": 4}}) == 4
    assert decode_context_parallel_size({"plan": {}}) == 1
    split = with_decode_context_parallel(obs, 4)
    assert split is not None
    assert (split.kv_capacity_tokens, split.kv_block_size) == (64_000, 64)
    assert with_decode_context_parallel(obs, 1) is obs
    plain, scaled = _kv_fit(obs, DEFAULT_POLICY), _kv_fit(split, DEFAULT_POLICY)
    assert plain is not None and scaled is not None
    assert scaled[0] >= 3 * plain[0]


def test_the_tuner_counts_the_tokens_of_every_rank() -> None:
    assert Space(server_args=("--decode-context-parallel-size", "4")).kv_token_factor == 4
    assert Space(server_args=("--tensor-parallel-size", "8")).kv_token_factor == 1


def test_the_tuning_fingerprint_changes_only_with_a_split() -> None:
    one, two = _plan(DSV3, 16), _plan(DSV3, 512)
    svc = _service(one.model_name, 16)
    assert "decodeContextParallelSize" not in fingerprint_inputs(svc, one)
    assert fingerprint_inputs(_service(two.model_name, 512), two)[
        "decodeContextParallelSize"] == 2

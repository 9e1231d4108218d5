"""The planner on hand-computed cases, its bad inputs, and its explanation.

Numbers worked by hand in the comments use these facts:
- Llama 3.1 8B: 8,030,261,248 params, 32 layers, 32 heads, 8 KV heads, head_dim 128.
- Llama 3.1 70B: 70,553,706,496 params, 80 layers, 64 heads, 8 KV heads, head_dim 128,
  vocab 128,256, hidden 8,192 (untied: embeddings + LM head = 2,101,346,304 params).
- L4: 23,034 MiB = 24,152,899,584 bytes; H100 SXM: 81,559 MiB = 85,520,809,984 bytes.
- Usable per GPU = int(memory x 0.9) - 3 GiB (3,221,225,472 bytes of overhead).
- vLLM allocates KV in blocks of 16 tokens.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from llm_operator import cli
from llm_operator.api.errors import SpecError, SpecErrors
from llm_operator.api.models import LLMServiceSpec, Quantization, parse_llmservice
from llm_operator.cli.tables import plan_table
from llm_operator.knowledge.catalog import architecture_from_hf_config, lookup_gpu, lookup_model
from llm_operator.knowledge.extra_args import MANAGED_FLAGS
from llm_operator.planning import (
    BLOCK_SIZE,
    NULL_BLOCKS,
    OVERHEAD_BYTES_PER_GPU,
    Plan,
    kv_bytes_per_token,
    kv_request_tokens,
    kv_token_capacity,
    make_plan,
    valid_tensor_parallel_sizes,
    vllm_default_max_num_seqs,
    weight_bytes,
)

L8B = "meta-llama/Llama-3.1-8B-Instruct"
L70B = "meta-llama/Llama-3.1-70B-Instruct"
L405B = "meta-llama/Llama-3.1-405B-Instruct"
GIB = 2**30
L4_BYTES = 23034 * 2**20  # 24,152,899,584
H100_BYTES = 81559 * 2**20  # 85,520,809,984


def spec(name: str = L8B, product: str | None = "NVIDIA-L4", **sections: Any) -> LLMServiceSpec:
    """An LLMService spec through the real parser; sections are dicts by camelCase name."""
    body: dict[str, Any] = {"model": {"name": name}, "gpus": {}}
    if product is not None:
        body["gpus"]["product"] = product
    for name, values in sections.items():
        body.setdefault(name, {}).update(values)
    return parse_llmservice({"metadata": {"name": "svc", "namespace": "ml"}, "spec": body}).spec


def errors_of(exc: SpecError | SpecErrors) -> list[SpecError]:
    return exc.errors if isinstance(exc, SpecErrors) else [exc]


def plan_error(s: LLMServiceSpec, field: str) -> SpecError:
    """The one error about ``field`` that planning ``s`` raises."""
    with pytest.raises((SpecError, SpecErrors)) as info:
        make_plan(s)
    exc = info.value
    assert isinstance(exc, SpecError | SpecErrors)
    found = [e for e in errors_of(exc) if e.field == field]
    assert found, f"no error for {field}: {info.value}"
    assert found[0].fix, "every error says how to fix it"
    return found[0]


def explained(plan: Plan, name: str) -> Any:
    return next(e for e in plan.explanations if e.name == name)


# --------------------------------------------------------------------------- formulas

def test_kv_bytes_per_token_by_hand() -> None:
    facts = lookup_model(L8B)
    assert facts is not None
    assert kv_bytes_per_token(facts, tp=1, pp=1, kv_dtype_bytes=2) == 2 * 32 * 8 * 128 * 2 == 131072
    # TP2: each GPU holds ceil(8/2) = 4 KV heads.
    assert kv_bytes_per_token(facts, tp=2, pp=1, kv_dtype_bytes=2) == 2 * 32 * 4 * 128 * 2 == 65536
    # TP8: one KV head per GPU.
    assert kv_bytes_per_token(facts, tp=8, pp=1, kv_dtype_bytes=2) == 2 * 32 * 1 * 128 * 2 == 16384
    # fp8 KV cache: one byte per element.
    assert kv_bytes_per_token(facts, tp=1, pp=1, kv_dtype_bytes=1) == 65536
    big = lookup_model(L70B)
    assert big is not None
    # TP16 > 8 KV heads: vLLM replicates, still ceil(8/16) = 1 head per GPU.
    assert kv_bytes_per_token(big, tp=16, pp=1, kv_dtype_bytes=2) == 2 * 80 * 1 * 128 * 2 == 40960
    # PP2: each stage holds 40 of the 80 layers.
    assert kv_bytes_per_token(big, tp=8, pp=2, kv_dtype_bytes=2) == 2 * 40 * 1 * 128 * 2 == 20480
    # Gemma 2 9B: head_dim 256, 42 layers, 8 KV heads -> 2*42*8*256*2 = 344,064.
    gemma = lookup_model("google/gemma-2-9b-it")
    assert gemma is not None
    assert kv_bytes_per_token(gemma, tp=1, pp=1, kv_dtype_bytes=2) == 344064


def test_kv_capacity_of_the_tiny_cpu_model_matches_vllm() -> None:
    # docs/TESTING.md: vLLM CPU with --kv-cache-memory-bytes 2097152 gives the tiny Llama a
    # 4,096-token KV cache. Tiny Llama: 2 layers, 2 KV heads, head_dim 128/4 = 32, bf16:
    # 2 * 2 * 2 * 32 * 2 = 512 bytes/token; 2,097,152 / 512 = 4,096 tokens (256 blocks).
    tiny = architecture_from_hf_config({
        "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
        "max_position_embeddings": 4096, "torch_dtype": "bfloat16"})
    per_token = kv_bytes_per_token(tiny, tp=1, pp=1, kv_dtype_bytes=2)
    assert per_token == 512
    assert kv_token_capacity(2_097_152, per_token) == 4096


def test_kv_capacity_against_vllm_logs_measured_here() -> None:
    # Measured with vLLM 0.32.0 (CPU) on that tiny model:
    # --kv-cache-memory-bytes 3000000 --block-size 16 logged "CPU KV cache size: 5,856
    # tokens": 3,000,000 // (16 x 512) = 366 blocks x 16.
    assert kv_token_capacity(3_000_000, 512) == 5856
    # Its default CPU block of 128 tokens: 3,000,000 // 65,536 = 45 blocks -> 5,760 logged.
    assert kv_token_capacity(3_000_000, 512, block_size=128) == 5760
    # 2,097,152 bytes with --max-model-len 4096 is refused: "the estimated maximum model
    # length is 3968" = (32 blocks - 1 null block) x 128.
    assert NULL_BLOCKS == 1
    assert kv_request_tokens(2_097_152, 512, block_size=128) == 3968


def test_kv_capacity_counts_whole_blocks() -> None:
    # 10,000 bytes at 512 bytes/token = 19.5 tokens -> one whole 16-token block.
    assert kv_token_capacity(10_000, 512) == 16
    assert kv_token_capacity(16 * 512 - 1, 512) == 0
    assert kv_token_capacity(-5, 512) == 0


def test_weight_bytes_by_dtype_and_quantization() -> None:
    facts = lookup_model(L70B)
    assert facts is not None
    assert weight_bytes(facts, 2, Quantization.NONE) == 70_553_706_496 * 2 == 141_107_412_992
    # fp8: linear layers 1 byte, embeddings + LM head (2 x 128,256 x 8,192) stay bf16.
    embed = 2 * 128_256 * 8_192  # 2,101,346,304
    assert weight_bytes(facts, 2, Quantization.FP8) == (70_553_706_496 - embed) + 2 * embed
    # AWQ 4-bit with a 16-bit scale and 4-bit zero per 128 weights: ~0.52 bytes/param,
    # ~39.8 GB in all (published AWQ checkpoints of Llama 3.1 70B are ~40 GB).
    awq = weight_bytes(facts, 2, Quantization.AWQ)
    assert awq == math.ceil((70_553_706_496 - embed) * (0.5 + 2.5 / 128) + 2 * embed)
    assert 39e9 < awq < 41e9


def test_valid_tensor_parallel_sizes_follow_vllm() -> None:
    qwen7 = lookup_model("Qwen/Qwen2.5-7B-Instruct")  # 28 heads, 4 KV heads
    llama3b = lookup_model("meta-llama/Llama-3.2-3B-Instruct")  # 24 heads, 8 KV heads
    assert qwen7 is not None and llama3b is not None
    # 7 divides 28 heads but neither 7 | 4 nor 4 | 7; 8 does not divide 28.
    assert valid_tensor_parallel_sizes(qwen7, 8) == [1, 2, 4]
    # 3 and 6 divide 24 heads but not the 8 KV heads (nor they 3 or 6).
    assert valid_tensor_parallel_sizes(llama3b, 8) == [1, 2, 4, 8]


def test_vllm_default_cap_rule() -> None:
    # vllm/engine/arg_utils.py get_batch_defaults: 1024 on >= 70 GiB GPUs that are not
    # A100s (and on >= 160 GiB), else 256.
    cases = {"H100": 1024, "H200": 1024, "H100-PCIe": 1024, "A100-80GB": 256, "L40S": 256,
             "L4": 256, "A10G": 256}
    for product, cap in cases.items():
        gpu = lookup_gpu(product)
        assert gpu is not None
        assert vllm_default_max_num_seqs(gpu) == cap, product


# --------------------------------------------------------------------------- choices

def test_8b_on_l4_needs_tp2_for_the_default_workload() -> None:
    # usable = int(24,152,899,584 x 0.9) - 3,221,225,472 = 18,516,384,153 bytes.
    # TP1: weights 16,060,522,496 -> KV budget 2,455,861,657 / (16 x 131,072) = 1,171
    #   blocks = 18,736 tokens (18,720 for requests: vLLM keeps one null block) < 32
    #   requests x 768 tokens = 24,576 wanted.
    # TP2: weights/GPU 8,030,261,248 -> budget 10,486,122,905 / (16 x 65,536) = 10,000
    #   blocks = 160,000 tokens; max-num-seqs = 9,999 blocks / 48 blocks per request = 208.
    plan = make_plan(spec(L8B, "NVIDIA-L4"))
    assert plan.usable_bytes_per_gpu == int(L4_BYTES * 0.9) - 3 * GIB == 18_516_384_153
    assert (plan.tensor_parallel_size, plan.pipeline_parallel_size) == (2, 1)
    assert plan.gpus_per_replica == 2 and plan.nodes_per_replica == 1
    assert plan.kv_bytes_per_token == 65536
    assert plan.kv_token_capacity == 160_000
    assert plan.max_num_seqs == 208
    assert plan.max_model_len == 131072  # the full context fits: no warning
    assert not plan.warnings
    passed_over = explained(plan, "tensorParallelSize").inputs["passedOver"]
    assert any("TP=1" in line and "18,720" in line for line in passed_over)


def test_8b_on_l4_with_light_workload_stays_on_one_gpu_and_shortens_context() -> None:
    # 16 requests x 768 = 12,288 tokens fit TP1's 18,720; the model's 131,072-token
    # context does not, so maxModelLen is lowered, with a warning, to 90% of what requests
    # can use (a margin: the capacity is predicted, and vLLM refuses to start when
    # maxModelLen exceeds what it finds), in whole 16-token blocks.
    plan = make_plan(spec(L8B, "NVIDIA-L4", workload={"concurrency": 16}))
    assert plan.tensor_parallel_size == 1
    assert plan.kv_token_capacity == 18_736
    assert plan.max_model_len == int((18_736 - 16) * 0.9) // 16 * 16 == 16_848
    assert plan.max_model_len < plan.kv_token_capacity - 16
    assert "90%" in explained(plan, "maxModelLen").formula
    assert plan.max_num_seqs == (1171 - 1) // 48 == 24
    assert any("maxModelLen lowered" in w and "131,072" in w for w in plan.warnings)


def test_70b_on_h100_needs_tp_above_1_and_says_why() -> None:
    # usable = int(85,520,809,984 x 0.9) - 3 GiB = 73,747,503,513; weights 141.1 GB.
    plan = make_plan(spec(L70B, "NVIDIA-H100-80GB-HBM3"))
    assert plan.weight_bytes == 141_107_412_992 > plan.usable_bytes_per_gpu == 73_747_503_513
    assert plan.tensor_parallel_size >= 2
    # TP2: 70,553,706,496 weights/GPU leave 3,193,797,017 bytes / (16 x 163,840) = 1,218
    # blocks = 19,488 tokens (19,472 for requests) < 32 x 768 = 24,576 -> TP4.
    assert plan.tensor_parallel_size == 4
    assert plan.kv_bytes_per_token == 2 * 80 * 2 * 128 * 2 == 81920
    why = explained(plan, "tensorParallelSize").inputs["passedOver"]
    assert "TP=1: weights 141.1 GB" in why[0] and "> usable 73.7 GB" in why[0]
    assert "TP=2" in why[1] and "19,472" in why[1]


def test_405b_on_h100_pipelines_across_nodes() -> None:
    # 811.7 GB of bf16 weights; 8 H100s give 8 x 73.7 GB = 590 GB < 811.7 GB, so
    # TP8 x PP2 on two nodes: 50.7 GB weights per GPU; KV 2 x 63 x 1 x 128 x 2 = 32,256.
    plan = make_plan(spec(L405B, "H100"))
    assert (plan.tensor_parallel_size, plan.pipeline_parallel_size) == (8, 2)
    assert plan.gpus_per_replica == 16 and plan.nodes_per_replica == 2
    assert plan.kv_bytes_per_token == 32256
    assert plan.weight_bytes_per_gpu == math.ceil(405_853_388_800 * 2 / 16)


def test_the_operators_gpus_per_node_applies_where_the_spec_leaves_it_unset() -> None:
    """On 4-GPU nodes (LLMOP_GPUS_PER_NODE=4) no pod asks for 8 GPUs; a spec that says
    perNode itself wins over the operator's setting."""
    workload = {"inputTokens": 512, "outputTokens": 256, "concurrency": 8}
    unset = spec(L70B, "A100-40GB", workload=workload)
    assert make_plan(unset).tensor_parallel_size == 8  # 8-GPU nodes: one node, TP 8
    small = make_plan(unset, gpus_per_node=4)
    assert small.tensor_parallel_size <= 4 and small.gpus_per_replica // \
        small.nodes_per_replica <= 4
    nodes = explained(small, "nodesPerReplica")
    assert nodes.inputs["gpusPerNode"] == 4
    assert nodes.inputs["gpusPerNodeFrom"] == "LLMOP_GPUS_PER_NODE"
    pinned = make_plan(spec(L70B, "A100-40GB", workload=workload, gpus={"perNode": 8}),
                       gpus_per_node=4)
    assert pinned.tensor_parallel_size == 8
    assert explained(pinned, "nodesPerReplica").inputs["gpusPerNodeFrom"] == \
        "spec.gpus.perNode"


def test_405b_fp8_fits_one_h100_node() -> None:
    plan = make_plan(spec(L405B, "H100", model={"quantization": "fp8"}))
    assert (plan.tensor_parallel_size, plan.pipeline_parallel_size) == (8, 1)


def test_fp8_kv_cache_doubles_capacity() -> None:
    base = make_plan(spec(L8B, "H100"))
    fp8 = make_plan(spec(L8B, "H100", engine={"kvCacheDtype": "fp8"}))
    assert fp8.kv_bytes_per_token * 2 == base.kv_bytes_per_token
    assert fp8.kv_token_capacity == pytest.approx(2 * base.kv_token_capacity, abs=16)


def test_cap_comes_from_vllm_default_when_memory_allows_more() -> None:
    # 32-token requests: memory supports thousands; vLLM's own default caps it.
    short = {"inputTokens": 16, "outputTokens": 16}
    h100 = make_plan(spec(L8B, "H100", workload=short))
    a100 = make_plan(spec(L8B, "A100-80GB", workload=short))
    assert h100.memory_max_num_seqs > 1024 and h100.max_num_seqs == 1024
    assert a100.memory_max_num_seqs > 256 and a100.max_num_seqs == 256
    assert "arg_utils.py" in explained(h100, "maxNumSeqs").inputs["capSource"]


@pytest.mark.parametrize(
    ("model", "product", "workload"),
    [
        (L8B, "NVIDIA-L4", {}),
        (L8B, "NVIDIA-L4", {"concurrency": 16}),
        (L8B, "H100", {}),
        (L70B, "H100", {"inputTokens": 2000, "outputTokens": 500}),
        ("google/gemma-2-27b-it", "L40S", {}),
        ("Qwen/Qwen2.5-72B-Instruct", "NVIDIA-L4", {}),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "A100-80GB", {"inputTokens": 4000}),
    ],
)
def test_seeds_vram_rule(model: str, product: str, workload: dict[str, int]) -> None:
    """batch x (weights share + KV per sequence) <= usable: weights/GPU + max-num-seqs x
    KV per request (+ vLLM's one null block) <= usable memory per GPU, and one more
    request would not fit."""
    plan = make_plan(spec(model, product, workload=workload))
    gpu = lookup_gpu(product)
    assert gpu is not None
    usable = int(gpu.memory_bytes * 0.9) - OVERHEAD_BYTES_PER_GPU  # recomputed here
    # vLLM hands out whole blocks: a request of N tokens holds ceil(N/16) blocks.
    per_request = math.ceil(plan.tokens_per_request / BLOCK_SIZE) * BLOCK_SIZE
    kv_per_seq = per_request * plan.kv_bytes_per_token
    n = plan.max_num_seqs
    null_block = BLOCK_SIZE * plan.kv_bytes_per_token
    assert plan.weight_bytes_per_gpu + n * kv_per_seq + null_block <= usable
    if n < plan.max_num_seqs_cap:  # memory-bound, not capped by vLLM's default
        assert plan.weight_bytes_per_gpu + (n + 1) * kv_per_seq + null_block > usable


# --------------------------------------------------------------------------- pins win

def test_pins_win_and_are_marked_pinned() -> None:
    plan = make_plan(spec(L8B, "H100", engine={
        "tensorParallelSize": 2, "maxModelLen": 8192, "maxNumSeqs": 7,
        "gpuMemoryUtilization": 0.8}))
    assert (plan.tensor_parallel_size, plan.max_model_len, plan.max_num_seqs) == (2, 8192, 7)
    assert plan.gpus_per_replica == 2
    for name in ("tensorParallelSize", "maxModelLen", "maxNumSeqs"):
        assert explained(plan, name).source == "pinned"
    assert explained(plan, "gpus.count").source == "planned"
    assert plan.usable_bytes_per_gpu == int(H100_BYTES * 0.8) - 3 * GIB
    usable = explained(plan, "usableBytesPerGpu").inputs
    assert usable["gpuMemoryUtilizationSource"] == "pinned"


def test_pinned_gpu_count_picks_parallelism_that_uses_it() -> None:
    plan = make_plan(spec(L70B, "H100", gpus={"count": 8}))
    assert (plan.tensor_parallel_size, plan.pipeline_parallel_size) == (8, 1)
    assert explained(plan, "gpus.count").source == "pinned"
    plan = make_plan(spec(L70B, "H100", gpus={"count": 4}, engine={"tensorParallelSize": 2}))
    assert (plan.tensor_parallel_size, plan.pipeline_parallel_size) == (2, 2)


def test_pinned_max_num_seqs_beyond_memory_warns() -> None:
    plan = make_plan(spec(L8B, "NVIDIA-L4", workload={"concurrency": 16},
                          engine={"maxNumSeqs": 100, "maxModelLen": 4096}))
    assert plan.max_num_seqs == 100
    assert any("expect preemptions" in w for w in plan.warnings)


def test_pinned_batched_tokens_caps_planned_max_num_seqs() -> None:
    plan = make_plan(spec(L8B, "H100", engine={"maxNumBatchedTokens": 256}))
    assert plan.max_num_batched_tokens == 256
    assert plan.max_num_seqs == 256  # vLLM refuses max_num_batched_tokens < max_num_seqs


def test_architecture_in_spec_and_memory_only_gpu() -> None:
    # A model the catalog does not know, on a GPU given only by memory: the tiny CPU
    # model's facts with 1 GiB. head_dim left out = 128 / 4 = 32.
    s = spec("local/tiny", None, gpus={"memoryGib": 8},
             model={"architecture": {"parameters": 551552, "numLayers": 2, "hiddenSize": 128,
                                     "numAttentionHeads": 4, "numKeyValueHeads": 2,
                                     "maxContext": 4096}},
             workload={"inputTokens": 128, "outputTokens": 256, "concurrency": 48})
    plan = make_plan(s)
    assert plan.kv_bytes_per_token == 512
    assert plan.tensor_parallel_size == 1 and plan.max_model_len == 4096
    assert plan.gpu_memory_bytes == 8 * GIB
    assert explained(plan, "gpuMemoryBytes").source == "pinned"


def test_memory_gib_overrides_the_table() -> None:
    plan = make_plan(spec(L8B, "H100", gpus={"memoryGib": 40}))
    assert plan.gpu_memory_bytes == 40 * GIB
    assert plan.gpu_product == "NVIDIA-H100-80GB-HBM3"


# --------------------------------------------------------------------------- bad input

def test_unknown_model_without_architecture() -> None:
    err = plan_error(spec("acme/mystery-13b", "H100"), "spec.model.architecture")
    assert "acme/mystery-13b" in err.problem
    assert "config.json" in err.fix and L70B in err.fix


def test_tp_that_does_not_divide_the_heads() -> None:
    err = plan_error(spec(L70B, "H100", engine={"tensorParallelSize": 3}),
                     "spec.engine.tensorParallelSize")
    assert "64 attention heads" in err.problem
    assert "1, 2, 4, 8" in err.fix


def test_pinned_tp_times_pp_not_the_gpu_count() -> None:
    err = plan_error(spec(L70B, "H100", gpus={"count": 2},
                          engine={"tensorParallelSize": 2, "pipelineParallelSize": 2}),
                     "spec.gpus.count")
    assert "2 x 2 = 4" in err.problem and "4" in err.fix


def test_gpus_too_small_at_the_pinned_count_says_what_fits() -> None:
    # 141.1 GB of weights on 2 L4s (18.5 GB usable each): 8 L4s would hold 17.6 GB each.
    err = plan_error(spec(L70B, "NVIDIA-L4", gpus={"count": 2}), "spec.gpus.count")
    assert "too small" in err.problem and "141.1 GB" in err.problem
    assert "8 GPUs of this product" in err.fix
    assert "NVIDIA-H100-80GB-HBM3" in err.fix  # two H100s would hold it


def test_gpus_too_small_within_one_node() -> None:
    # One GPU per node and PP pinned to 1: no TP can hold 141 GB on one H100.
    err = plan_error(spec(L70B, "H100", gpus={"perNode": 1}, engine={"pipelineParallelSize": 1}),
                     "spec.engine.pipelineParallelSize")
    assert "too small" in err.problem
    assert "2 GPUs of this product" in err.fix
    # Not even an H200 holds 141 GB at 0.9 utilization (132.5 GB usable); the Blackwell
    # GPUs of 180 GB and more do, and are offered.
    assert "larger GPU: NVIDIA-B200, NVIDIA-B300-SXM6-AC, NVIDIA-GB200, NVIDIA-GB300;" \
        in err.fix
    assert "NVIDIA-H200" not in err.fix


def test_max_model_len_beyond_the_context() -> None:
    err = plan_error(spec(L70B, "H100", engine={"maxModelLen": 200_000}),
                     "spec.engine.maxModelLen")
    assert "131,072" in err.problem and "131072" in err.fix


def test_max_model_len_shorter_than_a_request() -> None:
    err = plan_error(spec(L8B, "H100", engine={"maxModelLen": 512}), "spec.engine.maxModelLen")
    assert "768" in err.problem


def test_pinned_max_model_len_that_does_not_fit_memory() -> None:
    # One L4 cannot hold a 131,072-token sequence (17.2 GB of KV) next to 16 GB of
    # weights (2.5 GB left = 18,736 tokens), and TP x PP is pinned to 1 x 1.
    err = plan_error(spec(L8B, "NVIDIA-L4", engine={"tensorParallelSize": 1,
                                                    "pipelineParallelSize": 1,
                                                    "maxModelLen": 131072}),
                     "spec.engine.maxModelLen")
    assert "131,072 tokens" in err.problem
    assert "at most 18720" in err.fix and "2 GPUs of this product" in err.fix


def test_pinned_tp_with_long_context_adds_pipeline_stages() -> None:
    # TP pinned to 1 but PP left auto: a second stage halves the weights per GPU.
    plan = make_plan(spec(L8B, "NVIDIA-L4", engine={"tensorParallelSize": 1,
                                                    "maxModelLen": 131072}))
    assert (plan.tensor_parallel_size, plan.pipeline_parallel_size) == (1, 2)
    assert plan.max_model_len == 131072


def test_unknown_gpu_product_without_memory() -> None:
    err = plan_error(spec(L8B, "NVIDIA-GeForce-RTX-9090"), "spec.gpus.product")
    assert "NVIDIA-GeForce-RTX-9090" in err.problem
    assert err.fix.startswith("set spec.gpus.memoryGib or use one of:")
    assert "NVIDIA-H100-80GB-HBM3" in err.fix


def test_no_gpu_given_at_all() -> None:
    err = plan_error(spec(L8B, None), "spec.gpus.product")
    assert "memoryGib" in err.fix


def test_several_problems_are_reported_together() -> None:
    s = spec(L70B, "H100", engine={"tensorParallelSize": 3, "maxModelLen": 10**6,
                                   "extraArgs": ["--port", "9000"]})
    with pytest.raises(SpecErrors) as info:
        make_plan(s)
    fields = {e.field for e in info.value.errors}
    assert fields == {"spec.engine.tensorParallelSize", "spec.engine.maxModelLen",
                      "spec.engine.extraArgs[0]"}


@pytest.mark.parametrize(
    ("args", "field_fix"),
    [
        (["--max-num-seqs", "64"], "set spec.engine.maxNumSeqs instead"),
        (["--max-num-seqs=64"], "set spec.engine.maxNumSeqs instead"),
        (["--max_num_seqs=64"], "set spec.engine.maxNumSeqs instead"),
        (["--tensor-parallel-size", "2"], "set spec.engine.tensorParallelSize instead"),
        (["-tp", "2"], "set spec.engine.tensorParallelSize instead"),
        (["--pipeline-parallel-size=2"], "set spec.engine.pipelineParallelSize instead"),
        (["--max-model-len", "4096"], "set spec.engine.maxModelLen instead"),
        (["--gpu-memory-utilization=0.8"], "set spec.engine.gpuMemoryUtilization instead"),
        (["--max-num-batched-tokens", "8192"], "set spec.engine.maxNumBatchedTokens instead"),
        (["--dtype", "half"], "set spec.engine.dtype instead"),
        (["--kv-cache-dtype=fp8"], "set spec.engine.kvCacheDtype instead"),
        (["--model", "other/model"], "remove it"),
        (["--port", "9000"], "remove it"),
        (["--host=127.0.0.1"], "remove it"),
        (["--served-model-name", "x"], "remove it"),
    ],
)
def test_extra_args_that_set_managed_flags(args: list[str], field_fix: str) -> None:
    s = spec(L8B, "H100", engine={"extraArgs": ["--enforce-eager", *args]})
    err = plan_error(s, "spec.engine.extraArgs[1]")
    assert field_fix in err.fix
    assert args[0].split("=")[0].replace("_", "-") in err.problem


def test_managed_flag_rejected_even_when_the_field_is_pinned() -> None:
    # Two copies of --max-num-seqs would reach vLLM (argparse keeps the last one).
    s = spec(L8B, "H100", engine={"maxNumSeqs": 8, "extraArgs": ["--max-num-seqs=16"]})
    plan_error(s, "spec.engine.extraArgs[0]")


def test_unmanaged_extra_args_pass() -> None:
    plan = make_plan(spec(L8B, "H100", engine={"extraArgs": [
        "--enforce-eager", "--max-logprobs", "5", "--enable-log-requests"]}))
    assert plan.tensor_parallel_size == 1


def test_managed_flags_list_covers_the_brief() -> None:
    for flag in ("--max-num-seqs", "--tensor-parallel-size", "--pipeline-parallel-size",
                 "--max-model-len", "--gpu-memory-utilization", "--max-num-batched-tokens",
                 "--dtype", "--kv-cache-dtype", "--model", "--port", "--host",
                 "--served-model-name"):
        assert flag in MANAGED_FLAGS


def test_batched_tokens_below_pinned_max_num_seqs() -> None:
    err = plan_error(spec(L8B, "H100", engine={"maxNumSeqs": 64, "maxNumBatchedTokens": 32}),
                     "spec.engine.maxNumBatchedTokens")
    assert "64" in err.fix


def test_batched_tokens_below_max_model_len_without_chunked_prefill() -> None:
    err = plan_error(spec(L8B, "H100", engine={"maxNumBatchedTokens": 2048,
                                               "enableChunkedPrefill": False,
                                               "maxModelLen": 8192}),
                     "spec.engine.maxNumBatchedTokens")
    assert "8192" in err.fix


# --------------------------------------------------------------------------- display

def test_plan_table_explains_every_number() -> None:
    s = spec(L70B, "NVIDIA-H100-80GB-HBM3")
    svc = parse_llmservice({"metadata": {"name": "llama", "namespace": "ml"},
                            "spec": s.model_dump(by_alias=True, exclude_none=True)})
    plan = make_plan(svc.spec)
    console = Console(width=200, record=True)
    console.print(plan_table(svc, plan))
    text = console.export_text()
    for name in ("tensorParallelSize", "kvBytesPerToken", "kvTokenCapacity", "maxNumSeqs",
                 "maxModelLen", "weightBytes", "gpus.count"):
        assert name in text
    assert "141.1 GB" in text and "TP=1: weights 141.1 GB" in text
    assert "2 x ceil(layers / PP) x ceil(kv_heads / TP)" in text


def test_cli_plan_for_llama_70b_on_h100(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = tmp_path / "llama70b.yaml"
    manifest.write_text(
        "apiVersion: llmops.dev/v1alpha1\nkind: LLMService\n"
        "metadata: {name: llama-70b, namespace: ml}\n"
        "spec:\n  model: {name: meta-llama/Llama-3.1-70B-Instruct}\n"
        "  gpus: {product: NVIDIA-H100-80GB-HBM3}\n")
    monkeypatch.setenv("COLUMNS", "220")
    assert cli.main(["plan", str(manifest)]) == 0
    out = capsys.readouterr().out
    assert "TP=4" in out
    assert "TP=1: weights 141.1 GB" in out and "> usable 73.7 GB" in out


def test_cli_plan_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(
        "apiVersion: llmops.dev/v1alpha1\nkind: LLMService\nmetadata: {name: bad}\n"
        "spec:\n  model: {name: acme/mystery}\n  gpus: {product: H100}\n")
    monkeypatch.setenv("COLUMNS", "220")
    assert cli.main(["plan", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "spec.model.architecture" in err and "fix:" in err


# --- implausible values name their cause --------------------------------------------


def test_a_tiny_gpu_memory_utilization_is_named_as_the_cause_not_a_call_for_gpus() -> None:
    err = plan_error(spec(L8B, "H100", engine={"gpuMemoryUtilization": 0.05}),
                     "spec.engine.gpuMemoryUtilization")
    assert "needs 16 GPUs where the default 0.9 needs 1" in err.problem
    assert "raise it" in err.fix and "spec.gpus.count: 16" in err.fix
    # Pinning the count, as the fix says, accepts it.
    plan = make_plan(spec(L8B, "H100", engine={"gpuMemoryUtilization": 0.05},
                          gpus={"count": 16}))
    assert plan.gpus_per_replica == 16
    # A moderate reduction that costs one more GPU is a warning only.
    plan = make_plan(spec(L8B, "H100", engine={"gpuMemoryUtilization": 0.2}))
    assert plan.gpus_per_replica == 2
    assert any("where the default 0.9 needs 1" in w for w in plan.warnings)


def test_a_utilization_below_vllms_own_overhead_is_refused() -> None:
    err = plan_error(spec(L8B, "NVIDIA-L4", engine={"gpuMemoryUtilization": 0.03}),
                     "spec.engine.gpuMemoryUtilization")
    assert "runtime overhead" in err.problem


# --------------------------------------------------------------------------- no cliff
FP8_70B_L40S = {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "quantization": "fp8"},
                "gpus": {"product": "L40S"}, "engine": {"kvCacheDtype": "fp8"},
                "workload": {"inputTokens": 512, "outputTokens": 256, "concurrency": 64}}


def test_a_small_kv_shortfall_does_not_double_the_gpus() -> None:
    """70B in fp8 with an fp8 KV cache on L40S: TP=2 holds 62 of the 64 declared
    sequences (97%). Holding the last two took TP=4, twice the GPUs; now TP=2 is chosen,
    because the queue wait of the two, bounded by the SLO (2/62 x 256 tokens x 100 ms =
    0.8 s), is within the 2 s TTFT objective, and the plan says what TP=4 would buy."""
    plan = make_plan(LLMServiceSpec.model_validate(FP8_70B_L40S))
    assert plan.tensor_parallel_size == 2 and plan.gpus_per_replica == 2
    short = explained(plan, "kvShortfall")
    assert short.value == "62 of 64" and short.inputs["heldSequences"] == 62
    assert "TP=4 (4 GPUs) holds 64 of the 64" in short.inputs["alternative"]
    assert short.inputs["queueWaitBoundSeconds"] <= 2.0
    assert any("62 of the 64" in w and "tensorParallelSize: 4" in w for w in plan.warnings)
    assert plan.max_num_seqs == 62


def test_the_slo_decides_when_the_shortfall_is_too_slow_to_wait_out() -> None:
    """The same service under a TTFT objective the queue wait would break gets TP=4,
    and the plan names the cheaper option it passed over and why."""
    tight = {**FP8_70B_L40S, "workload": {**FP8_70B_L40S["workload"],
                                          "slo": {"ttftP95Ms": 500, "itlP95Ms": 100}}}
    plan = make_plan(LLMServiceSpec.model_validate(tight))
    assert plan.tensor_parallel_size == 4
    cheaper = explained(plan, "cheaperOption")
    assert "TP=2 (2 GPUs) holds 62 of the 64" in cheaper.inputs["option"]
    assert "TTFT objective" in cheaper.inputs["notChosen"]


def test_a_large_shortfall_still_adds_gpus_and_names_the_cheaper_option() -> None:
    # 8B on L4, 32 requests: TP=1 holds 24 (75%), below the 90% floor.
    plan = make_plan(spec(L8B, "NVIDIA-L4"))
    assert plan.tensor_parallel_size == 2
    cheaper = explained(plan, "cheaperOption")
    assert cheaper.value == "24 of 32" and "90% floor" in cheaper.inputs["notChosen"]


def test_pinned_tp_that_needs_pipeline_stages_on_one_node_says_why() -> None:
    plan = make_plan(spec(L70B, "H100", engine={"tensorParallelSize": 2}))
    assert (plan.tensor_parallel_size, plan.pipeline_parallel_size) == (2, 2)
    assert plan.nodes_per_replica == 1
    pp = explained(plan, "pipelineParallelSize")
    assert "tensorParallelSize is pinned" in pp.formula
    assert any("pipeline stages" in w and "one node" in w and "TP=4" in w
               for w in plan.warnings)


def test_the_performance_model_predicts_both_tp_options_at_the_workload() -> None:
    """`llm-operator plan` shows the option not taken as the performance model sees it:
    with 2 of the 64 sequences queued, TP=2's TTFT is the higher one."""
    from llm_operator.planning.perfmodel import tp_alternative

    s = LLMServiceSpec.model_validate(FP8_70B_L40S)
    (chosen, at_2), (other, at_4) = tp_alternative(s, make_plan(s))
    assert (chosen.tensor_parallel_size, other.tensor_parallel_size) == (2, 4)
    assert at_2.queued > at_4.queued and at_2.ttft_s > at_4.ttft_s
    assert tp_alternative(spec(L405B, "H100"), make_plan(spec(L405B, "H100"))) == []

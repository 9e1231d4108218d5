"""Bytes (pure): weights, KV bytes per token by layer type, the KV token capacity vLLM
counts, usable memory per GPU; the constants they rest on.
"""

from __future__ import annotations

import math

from ..api.constants import GIB
from ..api.models import (
    EngineSpec,
    Quantization,
)
from ..knowledge.catalog import (
    GPUFacts,
    ModelFacts,
)
from ..knowledge.modelfacts import DTYPE_UNSTATED, estimated_weight_bytes

# --------------------------------------------------------------------------- constants

BLOCK_SIZE = 16  # vLLM's default KV block (CacheConfig.DEFAULT_BLOCK_SIZE)
# vLLM's BlockPool holds one "null" block back for good; requests use the rest
# (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory, vLLM 0.32.0).
NULL_BLOCKS = 1

# What vLLM's memory profile finds on each GPU besides the weights and the KV cache:
# activation peak at the default max-num-batched-tokens, CUDA graphs, NCCL and cuBLAS
# workspaces. vLLM logs 1-4 GiB for 1B-70B models; 3 GiB is a middle estimate.
OVERHEAD_BYTES_PER_GPU = 3 * GIB

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2,
}

# Quantized linear weights, bytes per parameter. AWQ/GPTQ 4-bit: half a byte plus, per
# group of 128 weights, a 16-bit scale and a 4-bit zero point (2.5 bytes / 128).
QUANT_BYTES_PER_PARAM: dict[Quantization, float] = {
    Quantization.FP8: 1.0,
    Quantization.AWQ: 0.5 + 2.5 / 128,
    Quantization.GPTQ: 0.5 + 2.5 / 128,
}


# --------------------------------------------------------------------------- pure formulas

def kv_token_capacity(kv_budget_bytes: float, kv_bytes_per_token: float,
                      block_size: int = BLOCK_SIZE) -> int:
    """Tokens of KV cache that fit a byte budget, in whole blocks as vLLM allocates them.

    ``floor(budget / (block_size x bytes_per_token)) x block_size``; this is the
    "KV cache size: N tokens" vLLM logs (for a maxModelLen that is a multiple of the
    block size). Example: the tiny test Llama (2 layers, 2 KV heads, head_dim 32, bf16:
    512 bytes/token) with ``--kv-cache-memory-bytes 2097152`` holds 4,096 tokens.
    The one copy of the formula: the performance model's estimates
    (:func:`llm_operator.planning.perfmodel.kv_capacity_from_bytes`) call it too.
    """
    if kv_budget_bytes <= 0 or kv_bytes_per_token <= 0:
        return 0
    return int(kv_budget_bytes // (block_size * kv_bytes_per_token)) * block_size


def kv_request_tokens(kv_budget_bytes: int, kv_bytes_per_token: int,
                      block_size: int = BLOCK_SIZE) -> int:
    """Tokens requests can actually use: the capacity less vLLM's null block.

    This bounds the longest sequence (vLLM refuses a maxModelLen above it) and the
    number of concurrent requests. The tiny test Llama with 2,097,152 bytes in 128-token
    CPU blocks: 32 blocks, 31 usable = 3,968 tokens, the "estimated maximum model length"
    vLLM reports when asked for 4,096.
    """
    capacity = kv_token_capacity(kv_budget_bytes, kv_bytes_per_token, block_size)
    return max(0, capacity - NULL_BLOCKS * block_size)


def kv_bytes_per_token(facts: ModelFacts, tp: int, pp: int, kv_dtype_bytes: int,
                       tokens: int = 0, state_dtype_bytes: int = 2,
                       conv_dtype_bytes: int | None = None, dcp: int = 1) -> int:
    """KV bytes one token takes on one GPU.

    Full-attention layers: 2 x ceil(layers / PP) x ceil(kv_heads / TP) x head_dim x
    kv_dtype_bytes. MLA layers: ceil(layers / PP) x (kv_lora_rank + qk_rope_head_dim) x
    kv_dtype_bytes, not divided by TP (vLLM's MLAAttentionSpec: one latent "head",
    replicated on every rank). With ``tokens`` (a sequence's length), the per-sequence
    bytes of sliding-window and linear-attention/Mamba layers
    (:func:`kv_bytes_per_sequence`) are spread over those tokens (rounded up); without,
    sliding-window layers count as full attention (the conservative bound).

    ``dcp`` (decode context parallel): the attention layers' per-token bytes over ``dcp``
    ranks, rounded up (vLLM's AttentionSpec is dcp_sharded: each rank keeps every
    dcp-th token, vllm/v1/kv_cache_interface.py); Mamba states and DeepSeek-V4's
    compressed caches are not divided (not AttentionSpecs; the bound).
    """
    if facts.mla_kv_dim is not None:
        layers = math.ceil((facts.kv_layers + (facts.sliding_window_layers if tokens <= 0
                                               else 0)) / pp)
        per_token = layers * facts.mla_kv_dim * kv_dtype_bytes
    else:
        # K and V: head_size + head_size_v per KV head (vLLM's AttentionSpec).
        full = (math.ceil(facts.kv_layers / pp) * math.ceil(facts.full_kv_heads / tp)
                * facts.full_kv_width * kv_dtype_bytes)
        # Without a length, sliding-window layers as full ones (their own heads).
        extra = (math.ceil(facts.sliding_window_layers / pp)
                 * math.ceil(facts.num_key_value_heads / tp) * facts.kv_width
                 * kv_dtype_bytes) if tokens <= 0 else 0
        per_token = full + extra
    per_token = math.ceil(per_token / dcp)
    # DeepSeek-V4: its compressed caches a token, replicated over TP, split by PP (and its
    # window caches as if never freed, without a length).
    per_token += math.ceil((facts.compressed_kv_bytes_per_token + (
        facts.window_kv_bytes_per_token if tokens <= 0 else 0)) / pp)
    if tokens <= 0 or not (facts.sliding_window_layers or facts.state_layers
                           or facts.window_kv_bytes_per_sequence):
        return per_token
    per_seq = kv_bytes_per_sequence(facts, tp, pp, kv_dtype_bytes, tokens, state_dtype_bytes,
                                    conv_dtype_bytes, dcp)
    return per_token + math.ceil(per_seq / tokens)


def kv_bytes_per_sequence(facts: ModelFacts, tp: int, pp: int, kv_dtype_bytes: int,
                          tokens: int, state_dtype_bytes: int = 2,
                          conv_dtype_bytes: int | None = None, dcp: int = 1) -> int:
    """Bytes one sequence of ``tokens`` takes on one GPU in the layers that do not pay per
    token: sliding-window layers hold min(tokens, window + one block) tokens of K and V
    (vLLM's SlidingWindowSpec frees the blocks that leave the window); linear-attention
    and Mamba layers hold a fixed state (vLLM's MambaSpec): the conv state,
    ceil(conv elements / TP) in the model's dtype (``conv_dtype_bytes``; None: as the
    temporal state), and the temporal (SSM / delta-rule) state, ceil(elements / TP) x
    ``state_dtype_bytes`` (config.json's mamba_ssm_cache_dtype, Qwen3.5's
    mamba_ssm_dtype, where set: vLLM's MambaStateDtypeCalculator._mamba_state_dtype)."""
    sliding = 0
    if facts.sliding_window_layers and facts.sliding_window:
        held = min(tokens, facts.sliding_window + BLOCK_SIZE)
        sliding = math.ceil(math.ceil(facts.sliding_window_layers / pp)
                            * math.ceil(facts.num_key_value_heads / tp) * facts.kv_width
                            * kv_dtype_bytes * held / dcp)
    sliding += math.ceil(facts.window_kv_bytes_per_sequence / pp)  # DeepSeek-V4's windows
    conv = facts.state_conv_elements_per_layer
    conv_bytes = state_dtype_bytes if conv_dtype_bytes is None else conv_dtype_bytes
    state = math.ceil(facts.state_layers / pp) * (
        math.ceil(conv / tp) * conv_bytes
        + math.ceil((facts.state_elements_per_layer - conv) / tp) * state_dtype_bytes)
    return sliding + state


def serving_dtype(facts: ModelFacts, engine: EngineSpec) -> str:
    """The dtype vLLM computes in: the pinned one, else the checkpoint's, with float32
    checkpoints served in bfloat16 as vLLM does under ``--dtype auto``."""
    if engine.dtype != "auto":
        return str(engine.dtype)
    return "bfloat16" if facts.dtype in ("float32", "float") else facts.dtype


def kv_dtype_bytes(engine: EngineSpec, dtype_bytes: int) -> int:
    """Bytes per KV element: 1 for an fp8 KV cache, else the serving dtype's."""
    return 1 if str(engine.kv_cache_dtype).startswith("fp8") else dtype_bytes


def weight_bytes(facts: ModelFacts, dtype_bytes: int, quantization: Quantization) -> int:
    """Bytes of the whole model's weights. A checkpoint quantized by its publisher
    (config.json's quantization_config): the safetensors index's total_size, else
    estimated from its parameter groups
    (:func:`~llm_operator.knowledge.modelfacts.estimated_weight_bytes`).
    Unquantized: the index's total_size where there is one (:func:`index_weight_bytes`),
    else parameters x dtype bytes. Quantized on load or by spec.model.quantization: linear
    layers at the quantized size, embeddings and LM head kept in the serving dtype (as
    vLLM loads them)."""
    if facts.quantization is not None:
        if facts.weight_bytes:
            return facts.weight_bytes
        return estimated_weight_bytes(facts, dtype_bytes)
    if quantization == Quantization.NONE:
        if facts.weight_bytes:
            return index_weight_bytes(facts, dtype_bytes)
        return math.ceil(facts.parameters * dtype_bytes)
    embed = min(facts.embedding_parameters, int(facts.parameters))
    linear = facts.parameters - embed
    return math.ceil(linear * QUANT_BYTES_PER_PARAM[quantization] + embed * dtype_bytes)


def index_weight_bytes(facts: ModelFacts, dtype_bytes: int) -> int:
    """An unquantized checkpoint's bytes in the dtype vLLM serves, from the safetensors
    index's total_size (what the checkpoint holds, whatever the parameter count says):
    as written when stored in that dtype or when config.json names no dtype (the
    checkpoint's own size, the upper bound), else scaled by serving / stored bytes (a
    float32 checkpoint served in bfloat16 takes half)."""
    assert facts.weight_bytes
    stored = DTYPE_BYTES.get(facts.dtype) if facts.source_of("dtype") != DTYPE_UNSTATED \
        else None
    if not stored or stored == dtype_bytes:
        return facts.weight_bytes
    return math.ceil(facts.weight_bytes * dtype_bytes / stored)


def usable_bytes_per_gpu(gpu: GPUFacts, utilization: float) -> int:
    """memory x gpuMemoryUtilization - :data:`OVERHEAD_BYTES_PER_GPU`."""
    return int(gpu.memory_bytes * utilization) - OVERHEAD_BYTES_PER_GPU


def download_bytes(facts: ModelFacts, dtype_bytes: int, quantization: Quantization) -> int:
    """Bytes of the checkpoint on disk: the weights, except for fp8 quantized on load,
    whose checkpoint may hold the unquantized weights (parameters x dtype bytes)."""
    if quantization == Quantization.FP8:
        return weight_bytes(facts, dtype_bytes, Quantization.NONE)
    return weight_bytes(facts, dtype_bytes, quantization)


# --------------------------------------------------------------------------- display

def human_bytes(n: float) -> str:
    """Bytes for people: decimal GB (as model sizes are quoted) and binary GiB."""
    if abs(n) >= 1e9:
        return f"{n / 1e9:.1f} GB ({n / GIB:.1f} GiB)"
    if abs(n) >= 1e6:
        return f"{n / 1e6:.1f} MB"
    return f"{int(n):,} B"

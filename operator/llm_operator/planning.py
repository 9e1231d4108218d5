"""Plan (pure): model facts + GPU facts + the spec give parallelism and batch limits.

Every number carries the formula and inputs that produced it, so
``llm-operator plan`` can explain itself.

How the plan is reached (one replica):

1. **Facts.** The model from :mod:`~llm_operator.catalog` (or ``spec.model.architecture``),
   the GPU from the product table (or ``spec.gpus.memoryGib``, which wins).
2. **Bytes.** Weights = parameters x bytes per parameter (dtype; fp8 = 1 byte, AWQ/GPTQ
   4-bit = 0.5 byte + group scales; embeddings stay in the activation dtype).
   KV bytes per token per GPU = 2 (K and V) x ceil(layers / PP) x ceil(kv_heads / TP) x
   head_dim x kv_bytes: vLLM shards KV heads over TP ranks and replicates them when TP
   exceeds the KV heads; each pipeline stage holds only its layers.
3. **Usable memory per GPU** = memory x gpuMemoryUtilization - a fixed overhead
   (:data:`OVERHEAD_BYTES_PER_GPU`) for what vLLM's startup profile finds besides the
   weights: activation peak, CUDA graphs, NCCL and cuBLAS buffers.
4. **Parallelism.** Candidates (TP, PP) in order of GPUs: TP divides the attention heads
   and (vLLM's rule) the KV heads divide TP or TP divides the KV heads; TP at most
   ``spec.gpus.perNode``; beyond one node, pipeline stages across nodes. A candidate
   *fits* when weights/(TP x PP) leave room for one full sequence of KV (the pinned
   maxModelLen, else one request of the workload); it is *ideal* when the room holds the
   workload's concurrency (per replica) x (input + output) tokens. The first ideal
   candidate on no more nodes than the first fitting one wins, else the first fitting;
   but a cheaper fitting candidate (fewer GPUs) wins over the ideal one when it holds
   the workload closely enough (:func:`_tolerated`, no cliff at 100%): at least
   :data:`KV_SHORTFALL_FLOOR` of the concurrent sequences, and the queue wait the
   others see stays within the TTFT objective. The plan names the option not taken
   and what it would serve.
5. **Capacity.** KV token capacity = whole 16-token blocks in (usable - weights per GPU),
   as vLLM counts it; requests use all but one (vLLM's null block). max-num-seqs =
   those blocks / blocks per request, capped by vLLM's own
   default (see :func:`vllm_default_max_num_seqs`); maxModelLen = the model's context,
   lowered (with a warning) to :data:`MODEL_LEN_MARGIN` of what requests can use when
   one such sequence would not fit with that margin.

KV by layer type (facts read from a model's config.json, :mod:`~llm_operator.modelfacts`):
full-attention layers pay K and V for every token; multi-head latent attention (MLA)
pays one latent of ``kv_lora_rank + qk_rope_head_dim`` elements per token and layer, the
same on every TP rank (vLLM replicates the latent cache: no KV-head split, so no
KV-head divisibility rule for TP); sliding-window layers pay at most window + one block
of tokens per sequence; linear-attention and Mamba layers pay a fixed state per
sequence. The per-sequence parts are spread over the workload's request length, so
"KV bytes per token" is an effective figure (estimated) for such models. Catalog and
``spec.model.architecture`` models count every layer as full attention (conservative
for Gemma 2 and Mistral v0.1). User pins always win, but are validated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .catalog import (
    GPUFacts,
    ModelFacts,
    facts_from_architecture,
    featured_models,
    gpu_products,
    lookup_gpu,
    lookup_model,
    model_names,
)
from .constants import DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_GPUS_PER_NODE, GIB
from .dtype_support import compute_path, dtype_errors
from .engine_rules import (
    VLLM_VERSION,
    Defaults,
    EngineSettings,
    ModelShape,
    flag_words,
    refusals,
)
from .errors import SpecError, SpecErrors
from .extra_args import MANAGED_FLAGS, check_extra_args, flag_table
from .modelfacts import CATALOG, CONFIG_JSON, QUANT_BYTES_PER_WEIGHT, estimated_weight_bytes
from .models import (
    AdaptationMode,
    EngineSpec,
    LLMServiceSpec,
    Quantization,
    TuningPlacement,
    parse_quantity,
)
from .startup import StartupBudget, startup_budget

# --------------------------------------------------------------------------- constants

BLOCK_SIZE = 16  # vLLM's default KV block (CacheConfig.DEFAULT_BLOCK_SIZE)
# vLLM's BlockPool holds one "null" block back for good; requests use the rest
# (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory, vLLM 0.32.0).
NULL_BLOCKS = 1

# What vLLM's memory profile finds on each GPU besides the weights and the KV cache:
# activation peak at the default max-num-batched-tokens, CUDA graphs, NCCL and cuBLAS
# workspaces. vLLM logs 1-4 GiB for 1B-70B models; 3 GiB is a middle estimate.
OVERHEAD_BYTES_PER_GPU = 3 * GIB

# The TP choice has no cliff at 100% of the workload (issue: an fp8 KV cache holding 95%
# of it on TP=2 got TP=4, twice the GPUs). A candidate with fewer GPUs wins when its KV
# cache holds at least this fraction of the concurrent sequences, AND the queue wait the
# rest see is within the TTFT objective, bounded by Little's law with every output token
# at the ITL objective (the slowest the SLO allows): wait <= (C - held) / held x
# outputTokens x itlP95. The floor holds whatever the SLO allows: the declared workload
# is itself an estimate.
KV_SHORTFALL_FLOOR = 0.9

# maxModelLen is planned with a margin below the predicted KV space for requests: the
# capacity is a prediction (the overhead estimate above is a middle value of 1-4 GiB),
# and vLLM refuses to start when maxModelLen exceeds what its memory profile finds.
MODEL_LEN_MARGIN = 0.9

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


VLLM_BATCH_DEFAULTS_SOURCE = (
    "vLLM EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py, read in vLLM 0.32.0): "
    "OpenAI server default max_num_seqs = 1024 on GPUs with >= 160 GiB, or >= 70 GiB "
    "and not an A100; 256 otherwise"
)


# --------------------------------------------------------------------------- types

class Explained(BaseModel):
    """One planned number with how it was reached."""

    model_config = ConfigDict(frozen=True)
    name: str  # e.g. "tensorParallelSize"
    value: float | int | str
    formula: str  # human-readable, e.g. "2 x layers x ceil(kv_heads/TP) x head_dim x bytes"
    inputs: dict[str, Any] = Field(default_factory=dict)
    source: str = "planned"  # "planned" | "pinned" (user) | "tuned" | "adapted"
    unit: str = ""  # "bytes", "tokens", "GPUs", ... (for display)


class Plan(BaseModel):
    """The capacity and parallelism plan for one replica of an LLMService."""

    model_config = ConfigDict(frozen=True)
    model_name: str
    gpu_product: str
    gpu_memory_bytes: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpus_per_replica: int  # = TP x PP
    nodes_per_replica: int
    max_model_len: int
    dtype: str  # vLLM --dtype value actually passed ("auto" or pinned)
    weight_bytes: int  # whole model
    weight_bytes_per_gpu: int
    kv_bytes_per_token: int  # per GPU, after TP sharding of KV heads
    kv_token_capacity: int  # per replica
    max_num_seqs: int  # the largest the memory supports for the workload (or pinned)
    max_num_batched_tokens: int | None  # None: leave vLLM's default
    explanations: list[Explained]
    warnings: list[str] = Field(default_factory=list)
    # Added by the planner (all additive, with defaults):
    kv_cache_dtype: str = "auto"  # vLLM --kv-cache-dtype value
    usable_bytes_per_gpu: int = 0  # memory x utilization - overhead
    kv_budget_bytes_per_gpu: int = 0  # usable - weights per GPU
    block_size: int = BLOCK_SIZE
    tokens_per_request: int = 0  # workload input + output
    memory_max_num_seqs: int = 0  # what memory supports, before vLLM's cap
    max_num_seqs_cap: int = 0  # vLLM's own default max_num_seqs for this GPU
    # Bytes the checkpoint takes on disk (what is downloaded); 0: weight_bytes (a plan
    # written by hand). Differs from weight_bytes for fp8 quantized on load.
    download_bytes: int = 0
    # Engine settings the planner set otherwise than the spec or vLLM's default would, so
    # that vLLM starts: what and why (status.plan.adjustments, an Event).
    adjustments: list[str] = Field(default_factory=list)
    # Where each model fact came from: {"architecture": "config.json", "weightBytes":
    # "model.safetensors.index.json", ...}: catalog, config.json, the safetensors index,
    # or spec.model.architecture (status.plan.factSources).
    fact_sources: dict[str, str] = Field(default_factory=dict)
    # Seconds the startup probe (and the tuner, per server start) allows vLLM to load, and
    # the load bandwidth it follows from (llm_operator.startup); 0: a plan written by hand
    # (the renderer then uses the built-in default).
    startup_budget_seconds: int = 0
    load_bytes_per_second: int = 0
    # vLLM's --decode-context-parallel-size: the KV cache split by tokens over this many of
    # the TP ranks (1: not split). With it block_size is 16 x this (vLLM's KV manager
    # counts a block of every rank's 16 tokens) and kv_bytes_per_token the average bytes a
    # token takes on one GPU.
    decode_context_parallel_size: int = 1


# --------------------------------------------------------------------------- pure formulas

def kv_token_capacity(kv_budget_bytes: float, kv_bytes_per_token: float,
                      block_size: int = BLOCK_SIZE) -> int:
    """Tokens of KV cache that fit a byte budget, in whole blocks as vLLM allocates them.

    ``floor(budget / (block_size x bytes_per_token)) x block_size``; this is the
    "KV cache size: N tokens" vLLM logs (for a maxModelLen that is a multiple of the
    block size). Example: the tiny test Llama (2 layers, 2 KV heads, head_dim 32, bf16:
    512 bytes/token) with ``--kv-cache-memory-bytes 2097152`` holds 4,096 tokens.
    The one copy of the formula: the performance model's estimates
    (:func:`llm_operator.perfmodel.kv_capacity_from_bytes`) call it too.
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
    estimated from its parameter groups (:func:`~llm_operator.modelfacts.estimated_weight_bytes`).
    Quantized on load or by spec.model.quantization: linear layers at the quantized size,
    embeddings and LM head kept in the serving dtype (as vLLM loads them)."""
    if facts.quantization is not None:
        if facts.weight_bytes:
            return facts.weight_bytes
        return estimated_weight_bytes(facts, dtype_bytes)
    if quantization == Quantization.NONE:
        if facts.weight_bytes and DTYPE_BYTES.get(facts.dtype) == dtype_bytes:
            return facts.weight_bytes  # the index's bytes, in the dtype vLLM serves
        return math.ceil(facts.parameters * dtype_bytes)
    embed = min(facts.embedding_parameters, int(facts.parameters))
    linear = facts.parameters - embed
    return math.ceil(linear * QUANT_BYTES_PER_PARAM[quantization] + embed * dtype_bytes)


def valid_tensor_parallel_sizes(facts: ModelFacts, limit: int) -> list[int]:
    """TP sizes vLLM accepts for this model, up to ``limit``: TP divides the attention
    heads, and the KV heads divide TP or TP divides the KV heads."""
    heads = facts.num_attention_heads
    if facts.is_mla:  # one latent KV "head", replicated on every rank: heads % TP only
        return [t for t in range(1, limit + 1) if heads % t == 0]
    kvs = {facts.num_key_value_heads, facts.full_kv_heads}  # Gemma 4: two KV head counts
    return [t for t in range(1, limit + 1)
            if heads % t == 0 and all(kv % t == 0 or t % kv == 0 for kv in kvs)]


def decode_context_parallel_sizes(facts: ModelFacts, tp: int) -> list[int]:
    """``--decode-context-parallel-size`` values vLLM 0.32 accepts for this model at
    tensor-parallel size ``tp``, ascending (always 1). They divide TP (the DCP ranks are
    TP ranks: vllm/config/parallel.py ParallelConfig, "must be divisible by dcp_size");
    for a model of KV heads (not MLA) TP must exceed the KV heads, DCP is at most TP / KV
    heads and divides the query heads per KV head (vllm/config/model.py
    ModelConfig.verify_with_parallel_config). An MLA model's one latent "head" is on every
    rank, so any divisor of TP (docs/serving/context_parallel_deployment.md: DeepSeek-R1 at
    -tp 8 -dcp 8). Every NVIDIA attention backend vLLM picks for these (FlashAttention,
    FlashInfer, FlashMLA, CUTLASS and Triton MLA) has supports_dcp."""
    divisors = [d for d in range(1, tp + 1) if tp % d == 0]
    if facts.is_mla:
        return divisors
    kv, heads = facts.num_key_value_heads, facts.num_attention_heads
    if tp <= kv or kv <= 0:
        return [1]
    return [d for d in divisors if d <= tp // kv and (heads // kv) % d == 0]


def dcp_plannable(facts: ModelFacts) -> bool:
    """Whether the planner sets decode context parallelism on its own for this model:
    attention of one kind, full or latent, in every layer holding a cache. Sliding-window,
    linear-attention/Mamba and DeepSeek-V4's compressed layers are left at 1 (a pin is
    still taken, and vLLM's rules judge it): their caches split otherwise or not at all,
    and nothing here has measured them."""
    return not (facts.sliding_window_layers or facts.state_layers
                or facts.compressed_kv_bytes_per_token or facts.window_kv_bytes_per_sequence)


def vllm_default_max_num_seqs(gpu: GPUFacts) -> int:
    """vLLM's own default ``--max-num-seqs`` for the OpenAI server on this GPU (see
    :data:`VLLM_BATCH_DEFAULTS_SOURCE`): the planner never goes above it."""
    name = f"{gpu.product} {gpu.name}".lower()
    if gpu.memory_bytes >= 160 * GIB or (gpu.memory_bytes >= 70 * GIB and "a100" not in name):
        return 1024
    return 256


def vllm_default_max_num_batched_tokens(gpu: GPUFacts) -> int:
    """vLLM's own default ``--max-num-batched-tokens`` for the OpenAI server on this GPU
    (see :data:`VLLM_BATCH_DEFAULTS_SOURCE`; before the raise to maxModelLen that vLLM
    applies when chunked prefill is off)."""
    name = f"{gpu.product} {gpu.name}".lower()
    if gpu.memory_bytes >= 160 * GIB:
        return 16384
    if gpu.memory_bytes >= 70 * GIB and "a100" not in name:
        return 8192
    return 2048


def usable_bytes_per_gpu(gpu: GPUFacts, utilization: float) -> int:
    """memory x gpuMemoryUtilization - :data:`OVERHEAD_BYTES_PER_GPU`."""
    return int(gpu.memory_bytes * utilization) - OVERHEAD_BYTES_PER_GPU


def managed_flag_errors(spec: LLMServiceSpec) -> list[SpecError]:
    """One :class:`SpecError` per ``spec.engine.extraArgs`` item that vLLM would read as a
    flag the operator manages or one that invalidates the plan, or would refuse at start
    (see :mod:`llm_operator.extra_args`: items are resolved as vLLM's parser resolves
    them, prefixes and ``=`` forms included).

    A managed flag is rejected whether or not the matching field is pinned: the renderer
    passes the field's value itself, and a second copy of the flag (argparse keeps the
    last) would silently defeat the plan, a pin, tuning or adaptation.
    """
    return check_extra_args(spec)[0]


# --------------------------------------------------------------------------- facts

def model_facts(spec: LLMServiceSpec, read: ModelFacts | None = None) -> ModelFacts:
    """The model's facts: ``spec.model.architecture`` if given (the user's override),
    else ``read`` (the model's own config.json, read at an edge: the command line's
    ``--model-config``), else the catalog."""
    if spec.model.architecture is not None:
        return facts_from_architecture(spec.model.architecture, spec.model.name)
    if read is not None:
        return read
    facts = lookup_model(spec.model.name)
    if facts is None:
        raise SpecError(
            "spec.model.architecture",
            f"is required: model {spec.model.name!r} is not in the built-in catalog",
            "set spec.model.architecture (parameters, numLayers, hiddenSize, "
            "numAttentionHeads, numKeyValueHeads, headDim, maxContext) from the model's "
            "config.json, or use a catalog model such as " + ", ".join(featured_models())
            + f" ({len(model_names())} ids in all, base and instruct)",
        )
    return facts


# spec.gpus.memoryGib may lower a known product's memory (a MIG slice, memory kept for
# something else), not raise it; 10% over is let through for a GB/GiB slip (80 for an
# 80 GB card is 74.5 GiB: 7% over).
MEMORY_GIB_SLACK = 1.10


def gpu_facts(spec: LLMServiceSpec) -> GPUFacts:
    """The GPU's facts: the product table, with ``spec.gpus.memoryGib`` winning for
    memory; a product the table does not know needs memoryGib."""
    gpus = spec.gpus
    known = lookup_gpu(gpus.product) if gpus.product else None
    if gpus.memory_gib is not None:
        memory = int(gpus.memory_gib * GIB)
        if known is not None and memory > known.memory_bytes * MEMORY_GIB_SLACK:
            raise SpecError(
                "spec.gpus.memoryGib",
                f"{gpus.memory_gib:g} GiB is more than the {known.memory_bytes / GIB:.1f} GiB "
                f"of spec.gpus.product {gpus.product!r} ({known.name}): the plan (GPU count, "
                "KV capacity, batch) would count memory the GPUs do not have",
                "remove spec.gpus.memoryGib (the GPU table knows the product), or name the "
                "GPU you have in spec.gpus.product")
        if known is not None:
            return replace(known, memory_bytes=memory)
        product = gpus.product or f"custom-{gpus.memory_gib:g}GiB"
        return GPUFacts(product, product, memory)
    if known is not None:
        return known
    if gpus.product:
        raise SpecError("spec.gpus.product",
                        f"GPU product {gpus.product!r} is not in the built-in table",
                        "set spec.gpus.memoryGib or use one of: " + ", ".join(gpu_products()))
    raise SpecError("spec.gpus.product", "neither a GPU product nor its memory is given",
                    "set spec.gpus.product (the nodes' nvidia.com/gpu.product label), one of: "
                    + ", ".join(gpu_products()) + "; or set spec.gpus.memoryGib")


# --------------------------------------------------------------------------- fitting

@dataclass(frozen=True)
class _Need:
    """What one replica must hold, and what it should."""

    facts: ModelFacts
    weights: int  # whole model, bytes
    kv_bytes: int  # per element
    usable: int  # per GPU
    hard_tokens: int  # one full sequence
    ideal_tokens: int  # the workload's concurrent requests, in whole blocks
    per_node: int
    concurrency: int = 0  # the workload's concurrent requests per replica (0: none given)
    request_blocks: int = 1  # KV blocks one request of the workload takes
    output_tokens: int = 0
    ttft_s: float = 0.0  # the SLO: TTFT and ITL p95 objectives, seconds
    itl_s: float = 0.0
    # The sequence length over which per-sequence KV (sliding windows, linear-attention
    # and Mamba state) is spread, and the state's dtype bytes.
    seq_tokens: int = 0
    state_bytes: int = 2
    conv_bytes: int = 2  # a Mamba / linear-attention layer's conv state: the model's dtype
    dcp_pin: int | None = None  # spec.engine.decodeContextParallelSize when pinned


@dataclass(frozen=True)
class _Fit:
    tp: int
    pp: int
    weights_per_gpu: int
    kv_per_token: int
    kv_budget: int
    capacity: int  # tokens, as vLLM logs it
    usable_tokens: int  # what requests can use (capacity less the null block)
    dcp: int = 1  # decode context parallel size
    kv_per_token_whole: int = 0  # KV bytes per token on one GPU without DCP (0: as above)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def block(self) -> int:
        """Tokens of one KV block as vLLM's KV manager counts them (16 on each DCP rank)."""
        return BLOCK_SIZE * self.dcp

    @property
    def label(self) -> str:
        return (f"TP={self.tp}" + (f" PP={self.pp}" if self.pp > 1 else "")
                + (f" DCP={self.dcp}" if self.dcp > 1 else ""))


def _fit_at(need: _Need, tp: int, pp: int, dcp: int) -> _Fit:
    per_gpu = math.ceil(need.weights / (tp * pp))
    kv_tok = kv_bytes_per_token(need.facts, tp, pp, need.kv_bytes, need.seq_tokens,
                                need.state_bytes, need.conv_bytes, dcp)
    whole = kv_tok if dcp == 1 else kv_bytes_per_token(
        need.facts, tp, pp, need.kv_bytes, need.seq_tokens, need.state_bytes, need.conv_bytes)
    budget = need.usable - per_gpu
    block = BLOCK_SIZE * dcp
    return _Fit(tp, pp, per_gpu, kv_tok, budget, kv_token_capacity(budget, kv_tok, block),
                kv_request_tokens(budget, kv_tok, block), dcp, whole)


def _holds(need: _Need, fit: _Fit) -> bool:
    """Whether a candidate holds the workload: one sequence of the hard length, and the
    concurrent requests in whole blocks."""
    if fit.usable_tokens < need.hard_tokens:
        return False
    if need.concurrency <= 0:
        return fit.usable_tokens >= need.ideal_tokens
    return held_sequences(need, fit) >= need.concurrency


def _evaluate(need: _Need, tp: int, pp: int) -> _Fit:
    """The candidate at (TP, PP), with its decode context parallel size: the pinned one,
    else (:func:`dcp_plannable` models) the smallest vLLM accepts whose KV cache holds the
    workload, or the largest when none does (the most of it); else 1."""
    if need.dcp_pin is not None:
        return _fit_at(need, tp, pp, need.dcp_pin)
    sizes = decode_context_parallel_sizes(need.facts, tp) if dcp_plannable(need.facts) else [1]
    fit = _fit_at(need, tp, pp, 1)
    for d in sizes[1:]:
        if _holds(need, fit) or fit.kv_budget <= 0:  # held, or the weights do not fit
            break
        fit = _fit_at(need, tp, pp, d)
    return fit


def _nodes(fit: _Fit, per_node: int) -> int:
    return math.ceil(fit.gpus / per_node)


def _choose(need: _Need, cands: Iterable[tuple[int, int]]) -> tuple[_Fit | None, bool, list[str]]:
    """First ideal candidate on no more nodes than the first that fits, else the first
    that fits; a cheaper one within the tolerance (:func:`_tolerated`) before an ideal
    one; with one line per candidate passed over (why)."""
    choice = _choose_detail(need, cands)
    return choice.fit, choice.ideal, choice.rejected


@dataclass(frozen=True)
class _Choice:
    fit: _Fit | None
    ideal: bool
    rejected: list[str]
    tolerated_over: _Fit | None = None  # the ideal candidate a tolerated one was chosen over
    cheaper: _Fit | None = None  # a fitting candidate with fewer GPUs, outside the tolerance


def _choose_detail(need: _Need, cands: Iterable[tuple[int, int]]) -> _Choice:
    fits = [_evaluate(need, tp, pp) for tp, pp in cands]
    first = next((i for i, f in enumerate(fits) if f.usable_tokens >= need.hard_tokens), None)
    if first is None:
        return _Choice(None, False, [_why_not(need, f) for f in fits])
    limit = _nodes(fits[first], need.per_node)
    for i, f in enumerate(fits):
        if _nodes(f, need.per_node) > limit:
            break
        if _holds(need, f):
            cheaper = [j for j in range(first, i) if fits[j].gpus < f.gpus]
            for j in cheaper:
                if _tolerated(need, fits[j]):
                    return _Choice(fits[j], False, [_why_not(need, x) for x in fits[:j]],
                                   tolerated_over=f)
            return _Choice(f, True, [_why_not(need, x) for x in fits[:i]],
                           cheaper=fits[cheaper[-1]] if cheaper else None)
    return _Choice(fits[first], False, [_why_not(need, x) for x in fits[:first]])


def held_sequences(need: _Need, fit: _Fit) -> int:
    """Requests of the workload the candidate's KV cache holds at once, in whole blocks
    as vLLM allocates them (its null block excluded)."""
    per_request = math.ceil(need.request_blocks * BLOCK_SIZE / fit.block)
    return (fit.usable_tokens // fit.block) // max(1, per_request)


def queue_wait_bound_s(need: _Need, held: int) -> float:
    """The longest mean queue wait the SLO allows for the requests a cache of ``held``
    sequences cannot run: by Little's law ``(C - held) / held`` request times, each at
    most ``outputTokens x itlP95`` (every token at the ITL objective)."""
    if held <= 0:
        return math.inf
    return max(0, need.concurrency - held) / held * need.output_tokens * need.itl_s


def _tolerated(need: _Need, fit: _Fit) -> bool:
    """Whether a candidate that does not hold the whole workload is close enough: at
    least :data:`KV_SHORTFALL_FLOOR` of the concurrent sequences, and a queue wait
    bound within the TTFT objective."""
    if need.concurrency <= 0 or fit.usable_tokens < need.hard_tokens:
        return False
    held = held_sequences(need, fit)
    return (held >= math.ceil(KV_SHORTFALL_FLOOR * need.concurrency)
            and queue_wait_bound_s(need, held) <= need.ttft_s)


def _serves(need: _Need, fit: _Fit) -> str:
    """What a candidate would serve, for people: ``TP=2 (2 GPUs) holds 30 of the 32
    concurrent sequences (94%) at 768 tokens``."""
    held = min(held_sequences(need, fit), need.concurrency)
    label = fit.label
    pct = 100 * held / need.concurrency if need.concurrency else 0
    return (f"{label} ({fit.gpus} GPU{'s' if fit.gpus > 1 else ''}) holds {held} of the "
            f"{need.concurrency} concurrent sequences ({pct:.0f}%) at "
            f"{need.request_blocks * BLOCK_SIZE:,} tokens each")


def _why_not(need: _Need, f: _Fit) -> str:
    label = f.label
    if f.kv_budget <= 0:
        whole = f" (of {human_bytes(need.weights)})" if f.gpus > 1 else ""
        return (f"{label}: weights {human_bytes(f.weights_per_gpu)} per GPU{whole} "
                f"> usable {human_bytes(need.usable)}")
    want = need.hard_tokens if f.usable_tokens < need.hard_tokens else need.ideal_tokens
    return (f"{label}: weights {human_bytes(f.weights_per_gpu)} per GPU leave "
            f"{human_bytes(f.kv_budget)} = {f.usable_tokens:,} KV tokens < {want:,} wanted")


def _pinned(value: int | str) -> int | None:
    return value if isinstance(value, int) else None


def _candidates(need: _Need, facts: ModelFacts, engine: EngineSpec,
                count: int | None) -> list[tuple[int, int]]:
    """(TP, PP) pairs to try, in order of GPUs, honouring pins (already validated)."""
    tp_pin = _pinned(engine.tensor_parallel_size)
    pp_pin = _pinned(engine.pipeline_parallel_size)
    tps = valid_tensor_parallel_sizes(facts, need.per_node)
    pps = range(1, facts.num_layers + 1)
    if tp_pin and pp_pin:
        return [(tp_pin, pp_pin)]
    if count is not None:
        if tp_pin:
            return [(tp_pin, count // tp_pin)]
        if pp_pin:
            return [(count // pp_pin, pp_pin)]
        return [(t, count // t) for t in reversed(tps) if count % t == 0
                and count // t <= facts.num_layers]
    if tp_pin:
        return [(tp_pin, p) for p in pps]
    if pp_pin:
        return [(t, pp_pin) for t in tps]
    return [(t, 1) for t in tps] + [(tps[-1], p) for p in pps if p > 1]


# --------------------------------------------------------------------------- validation

# Extended-resource domains of other GPU vendors' device plugins: a pod asking for them
# never lands on the NVIDIA GPUs spec.gpus.product names.
OTHER_VENDOR_RESOURCES = {"amd.com": "AMD", "gpu.intel.com": "Intel", "habana.ai": "Intel Gaudi"}


def contradictions(spec: LLMServiceSpec) -> list[SpecError]:
    """Settings that each make sense alone and contradict each other (pure)."""
    errors: list[SpecError] = []
    tuning, adaptation, engine = spec.tuning, spec.adaptation, spec.engine
    if (tuning.priority_class_name is not None
            and tuning.placement is TuningPlacement.BORROW_REPLICA):
        errors.append(SpecError(
            "spec.tuning.priorityClassName",
            f"{tuning.priority_class_name!r} is never used with spec.tuning.placement "
            "BorrowReplica: the Job runs on the GPUs a replica lends it, at the service's "
            "own priority (spec.scheduling.priorityClassName)",
            "remove it, or set spec.tuning.placement: Spare (extra GPUs at that priority)"))
    pinned = engine.max_num_seqs if isinstance(engine.max_num_seqs, int) else None
    if pinned is not None and adaptation.mode is not AdaptationMode.DISABLED:
        if adaptation.min_max_num_seqs > pinned:
            errors.append(SpecError(
                "spec.adaptation.minMaxNumSeqs",
                f"{adaptation.min_max_num_seqs} is above the pinned spec.engine.maxNumSeqs "
                f"{pinned}: a pin is never moved, so the bound can never hold",
                "remove spec.engine.maxNumSeqs to let the adaptation move the cap within "
                "its bounds, or lower spec.adaptation.minMaxNumSeqs"))
        if isinstance(adaptation.max_max_num_seqs, int) and adaptation.max_max_num_seqs < pinned:
            errors.append(SpecError(
                "spec.adaptation.maxMaxNumSeqs",
                f"{adaptation.max_max_num_seqs} is below the pinned spec.engine.maxNumSeqs "
                f"{pinned}: a pin is never moved, so the bound can never hold",
                "remove spec.engine.maxNumSeqs to let the adaptation move the cap within "
                "its bounds, or raise spec.adaptation.maxMaxNumSeqs"))
    batched = engine.max_num_batched_tokens
    if (pinned is None and isinstance(batched, int)
            and adaptation.mode is AdaptationMode.APPLY
            and adaptation.min_max_num_seqs > batched):
        errors.append(SpecError(
            "spec.adaptation.minMaxNumSeqs",
            f"{adaptation.min_max_num_seqs} is above the pinned "
            f"spec.engine.maxNumBatchedTokens {batched}: vLLM refuses to start with more "
            "sequences than batched tokens, and the adaptation would set at least that many",
            f"lower it to at most {batched}, or raise spec.engine.maxNumBatchedTokens"))
    if spec.model.revision is not None and spec.model.volume is not None:
        errors.append(SpecError(
            "spec.model.revision",
            f"{spec.model.revision!r} picks a revision to download from the hub, and the "
            "model is read from spec.model.volume, as the volume holds it: the revision "
            "would be ignored", "remove spec.model.revision, or remove spec.model.volume to "
            "download that revision"))
    namespace_bound = {"system-node-critical", "system-cluster-critical"}
    for field, name in (("spec.scheduling.priorityClassName",
                         spec.scheduling.priority_class_name),
                        ("spec.tuning.priorityClassName", tuning.priority_class_name)):
        if name in namespace_bound:
            errors.append(SpecError(
                field, f"{name!r} is for the cluster's own components: the API server admits "
                "pods with it only in kube-system (by default), so no pod would be created",
                "use a PriorityClass of your own (kubectl get priorityclasses)"))
    resource = spec.gpus.resource_name or ""
    vendor = OTHER_VENDOR_RESOURCES.get(resource.partition("/")[0])
    if vendor and spec.gpus.product and lookup_gpu(spec.gpus.product) is not None:
        errors.append(SpecError(
            "spec.gpus.resourceName",
            f"{resource!r} requests {vendor} GPUs, while spec.gpus.product "
            f"{spec.gpus.product!r} is an NVIDIA GPU: no node offers both, and the plan "
            "is for the NVIDIA one", "remove spec.gpus.resourceName (the GPU class gives "
            "nvidia.com/gpu), or describe the GPU you have with spec.gpus.memoryGib "
            "instead of spec.gpus.product"))
    return errors


# spec.model.quantization values that name the method a checkpoint was quantized with
# (vLLM refuses a --quantization that differs from the checkpoint's quantization_config).
_SPEC_QUANT_MATCHES: dict[Quantization, tuple[str, ...]] = {
    Quantization.FP8: ("fp8",),
    Quantization.AWQ: ("awq", "awq_marlin"),
    Quantization.GPTQ: ("gptq", "gptq_marlin"),
}


def _checkpoint_quantization_errors(spec: LLMServiceSpec, facts: ModelFacts) -> list[SpecError]:
    """spec.model.quantization against a checkpoint its publisher quantized (config.json's
    quantization_config): vLLM refuses a different method at start."""
    quant = spec.model.quantization
    if (facts.quantization is None and facts.source == CONFIG_JSON
            and quant in (Quantization.AWQ, Quantization.GPTQ)):
        return [SpecError(
            "spec.model.quantization",
            f"{quant.value} needs a checkpoint quantized with it, and {spec.model.name}'s "
            "config.json has no quantization_config: vLLM refuses to start",
            "name the quantized checkpoint (e.g. an ...-AWQ repository), or use fp8, which "
            "vLLM applies to an unquantized checkpoint as it loads it")]
    if facts.quantization is None or quant == Quantization.NONE:
        return []
    method = (facts.quantization_method or "").lower()
    if method in _SPEC_QUANT_MATCHES.get(quant, ()) or (
            quant == Quantization.FP8 and facts.quantization == "fp8"):
        return []
    return [SpecError(
        "spec.model.quantization",
        f"{quant.value} differs from the checkpoint's own quantization "
        f"({facts.quantization_method}, {facts.quantization} weights, from "
        f"{facts.source_of('quantization')}): vLLM refuses a --quantization other than the "
        "checkpoint's", "remove spec.model.quantization (vLLM reads the checkpoint's), or "
        "name an unquantized checkpoint")]


def _pin_errors(spec: LLMServiceSpec, facts: ModelFacts,
                tokens_per_request: int, per_node: int) -> list[SpecError]:
    """Pins that cannot be served, whatever the GPUs."""
    engine, errors = spec.engine, managed_flag_errors(spec)
    errors += _checkpoint_quantization_errors(spec, facts)
    if (spec.model.quantization in (Quantization.AWQ, Quantization.GPTQ)
            and facts.source == CATALOG and spec.model.volume is None):
        # The catalog's ids are the publishers' unquantized checkpoints: vLLM finds no
        # quantization config in them and exits at start.
        errors.append(SpecError(
            "spec.model.quantization",
            f"{spec.model.quantization.value} needs a checkpoint quantized with it, and "
            f"{spec.model.name} (from the built-in catalog) is not one: vLLM refuses to "
            "start", "name the quantized checkpoint (e.g. an ...-AWQ repository) with "
            "spec.model.architecture from its config.json, or use fp8, which vLLM applies "
            "to an unquantized checkpoint as it loads it"))
    tp, pp, count = (engine.tensor_parallel_size, engine.pipeline_parallel_size, spec.gpus.count)
    valid = valid_tensor_parallel_sizes(facts, facts.num_attention_heads)
    if isinstance(tp, int) and tp not in valid:
        errors.append(SpecError(
            "spec.engine.tensorParallelSize",
            f"{tp} does not divide the model's {facts.num_attention_heads} attention heads"
            + (" (multi-head latent attention: the latent KV cache is replicated on every "
               "rank, so only the heads constrain TP)" if facts.is_mla else
               f" (with {facts.num_key_value_heads} KV heads, which vLLM needs to divide TP "
               "or be divided by it)"),
            "use one of: " + ", ".join(map(str, valid)) + ", or leave it auto"))
    if isinstance(pp, int) and pp > facts.num_layers:
        errors.append(SpecError(
            "spec.engine.pipelineParallelSize",
            f"{pp} stages exceed the model's {facts.num_layers} layers",
            f"use at most {facts.num_layers}, or leave it auto"))
    if isinstance(count, int):
        if isinstance(tp, int) and isinstance(pp, int) and tp * pp != count:
            errors.append(SpecError(
                "spec.gpus.count", f"{count} GPUs but tensorParallelSize x pipelineParallelSize "
                f"= {tp} x {pp} = {tp * pp}",
                f"set spec.gpus.count to {tp * pp} or auto (auto = TP x PP)"))
        elif isinstance(tp, int) and count % tp:
            errors.append(SpecError(
                "spec.gpus.count", f"{count} GPUs is not a multiple of tensorParallelSize {tp}",
                f"set spec.gpus.count to a multiple of {tp}, or auto"))
        elif isinstance(pp, int) and (count % pp or count // pp not in valid):
            errors.append(SpecError(
                "spec.gpus.count",
                f"{count} GPUs over {pp} pipeline stages gives no valid tensor-parallel size",
                f"set spec.gpus.count to {pp} x one of {valid}, or auto"))
        elif not isinstance(tp, int) and not isinstance(pp, int) and not any(
                count % t == 0 and count // t <= facts.num_layers
                for t in valid_tensor_parallel_sizes(facts, per_node)):
            errors.append(SpecError(
                "spec.gpus.count",
                f"{count} GPUs cannot be split into TP x PP for this model (TP in "
                f"{valid_tensor_parallel_sizes(facts, per_node)}, PP at most "
                f"{facts.num_layers} layers)",
                "set spec.gpus.count to TP x PP with such sizes, or auto"))
    if isinstance(engine.max_model_len, int):
        if engine.max_model_len > facts.max_context:
            errors.append(SpecError(
                "spec.engine.maxModelLen",
                f"{engine.max_model_len:,} is beyond the model's context of "
                f"{facts.max_context:,} tokens",
                f"set it to at most {facts.max_context}, or leave it auto"))
        elif engine.max_model_len < tokens_per_request:
            errors.append(SpecError(
                "spec.engine.maxModelLen",
                f"{engine.max_model_len:,} is shorter than one request of the workload "
                f"({tokens_per_request:,} = inputTokens + outputTokens)",
                f"raise it to at least {tokens_per_request}, or lower "
                "spec.workload.inputTokens/outputTokens"))
    elif tokens_per_request > facts.max_context:
        errors.append(SpecError(
            "spec.workload.inputTokens",
            f"inputTokens + outputTokens = {tokens_per_request:,} exceeds the model's context "
            f"of {facts.max_context:,} tokens",
            f"lower spec.workload.inputTokens/outputTokens to at most {facts.max_context} "
            "together"))
    return errors


def _raise(errors: list[SpecError]) -> None:
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)


def _too_small(spec: LLMServiceSpec, need: _Need, gpu: GPUFacts,
               cands: list[tuple[int, int]], rejected: list[str]) -> SpecError:
    """The error for GPUs that cannot hold the weights plus one sequence, with what would."""
    engine = spec.engine
    auto_need = _Need(need.facts, need.weights, need.kv_bytes, need.usable, need.hard_tokens,
                      need.hard_tokens, need.per_node, seq_tokens=need.seq_tokens,
                      state_bytes=need.state_bytes, conv_bytes=need.conv_bytes)
    tps = valid_tensor_parallel_sizes(need.facts, need.per_node)
    auto = _choose(auto_need, [(t, 1) for t in tps] + [(tps[-1], p) for p in
                                                        range(2, need.facts.num_layers + 1)])[0]
    gpus_hint = (f"{auto.gpus} GPUs of this product (TP={auto.tp}, PP={auto.pp})"
                 if auto else "no count of this product")
    bigger = []
    for product in gpu_products():
        other = lookup_gpu(product)
        if other is None or other.memory_bytes <= gpu.memory_bytes:
            continue
        trial = _Need(need.facts, need.weights, need.kv_bytes,
                      usable_bytes_per_gpu(other, engine.gpu_memory_utilization),
                      need.hard_tokens, need.hard_tokens, need.per_node,
                      seq_tokens=need.seq_tokens, state_bytes=need.state_bytes,
                      conv_bytes=need.conv_bytes)
        if _choose(trial, cands)[0] is not None:
            bigger.append(product)
    fits = [_evaluate(need, tp, pp) for tp, pp in cands]
    best = max(fits, key=lambda f: f.usable_tokens, default=None)
    if isinstance(engine.max_model_len, int) and best is not None and best.usable_tokens > 0:
        return SpecError(
            "spec.engine.maxModelLen",
            f"one sequence of {need.hard_tokens:,} tokens needs "
            f"{human_bytes(need.hard_tokens * best.kv_per_token)} of KV cache per GPU, but "
            f"{human_bytes(best.kv_budget)} is left after the weights (TP={best.tp}, PP={best.pp})",
            f"lower it to at most {best.usable_tokens}, or use {gpus_hint}"
            + (" or a larger GPU: " + ", ".join(bigger) if bigger else ""))
    if isinstance(spec.gpus.count, int):
        field = "spec.gpus.count"
    elif isinstance(engine.tensor_parallel_size, int):
        field = "spec.engine.tensorParallelSize"
    elif isinstance(engine.pipeline_parallel_size, int):
        field = "spec.engine.pipelineParallelSize"
    else:
        field = "spec.gpus.memoryGib" if spec.gpus.memory_gib else "spec.gpus.product"
    largest = max(cands, key=lambda c: c[0] * c[1]) if cands else (1, 1)
    problem = (f"{gpu.name} GPUs are too small: weights {human_bytes(need.weights)} plus KV "
               f"for one sequence of {need.hard_tokens:,} tokens do not fit even on "
               f"{largest[0] * largest[1]} GPU(s) (usable {human_bytes(need.usable)} each: "
               + "; ".join(rejected[-2:]) + ")")
    fix = f"use {gpus_hint}"
    if bigger:
        fix += " or a larger GPU: " + ", ".join(bigger)
    fix += "; or quantize (spec.model.quantization) or lower spec.engine.maxModelLen"
    return SpecError(field, problem, fix)


# --------------------------------------------------------------------------- the plan

def make_plan(spec: LLMServiceSpec, *, gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
              engine_rules: bool = True, facts: ModelFacts | None = None,
              load_bandwidth: str | None = None) -> Plan:
    """Plan one replica of ``spec``; raise :class:`~llm_operator.errors.SpecError` on
    a spec that cannot be served (naming the field and the fix), including one whose
    engine arguments, as the renderer renders them (:func:`engine_flags` and
    ``spec.engine.extraArgs``), break a start-up rule of vLLM
    (:func:`engine_rule_errors`).

    ``gpus_per_node``: the GPUs of one node where ``spec.gpus.perNode`` is unset (the
    operator's ``LLMOP_GPUS_PER_NODE``). ``engine_rules=False`` skips vLLM's start-up
    rules (the vLLM tier gives vLLM itself what the operator would have rendered).
    ``facts``: the model's facts read from its config.json at an edge (see
    :func:`model_facts`; ``spec.model.architecture`` still wins). ``load_bandwidth``: the
    operator's ``LLMOP_MODEL_LOAD_BANDWIDTH`` where ``spec.model.loadBandwidth`` is unset
    (the startup budget, :mod:`llm_operator.startup`)."""
    plan = _make_plan(spec, gpus_per_node, facts, load_bandwidth)
    if engine_rules:
        _raise(engine_rule_errors(spec, plan, facts=facts))
    return plan


def _make_plan(spec: LLMServiceSpec, gpus_per_node: int,
               read: ModelFacts | None = None, load_bandwidth: str | None = None) -> Plan:
    per_node = spec.gpus.per_node or gpus_per_node
    errors: list[SpecError] = []
    facts: ModelFacts | None = None
    gpu: GPUFacts | None = None
    try:
        facts = model_facts(spec, read)
    except SpecError as exc:
        errors.append(exc)
    try:
        gpu = gpu_facts(spec)
    except SpecError as exc:
        errors.append(exc)
    wl, engine = spec.workload, spec.engine
    tokens_per_request = wl.input_tokens + wl.output_tokens
    if gpu is not None and usable_bytes_per_gpu(gpu, engine.gpu_memory_utilization) <= 0:
        errors.append(SpecError(
            "spec.engine.gpuMemoryUtilization",
            f"{engine.gpu_memory_utilization:g} of {human_bytes(gpu.memory_bytes)} does not "
            f"even cover vLLM's {human_bytes(OVERHEAD_BYTES_PER_GPU)} of runtime overhead per "
            "GPU", f"raise it (default {DEFAULT_GPU_MEMORY_UTILIZATION:g})"))
    if facts is not None:
        errors += _pin_errors(spec, facts, tokens_per_request, per_node)
        if gpu is not None:
            errors += dtype_errors(spec, facts, gpu)
    else:
        errors += managed_flag_errors(spec)
    errors += contradictions(spec)
    _raise(errors)
    assert facts is not None and gpu is not None

    dtype = serving_dtype(facts, engine)
    dbytes = DTYPE_BYTES.get(dtype, 2)
    kvb = kv_dtype_bytes(engine, dbytes)
    weights = weight_bytes(facts, dbytes, spec.model.quantization)
    usable = usable_bytes_per_gpu(gpu, engine.gpu_memory_utilization)
    blocks_per_request = math.ceil(tokens_per_request / BLOCK_SIZE)
    concurrency = math.ceil(wl.concurrency / max(spec.replicas, 1))
    pinned_len = engine.max_model_len if isinstance(engine.max_model_len, int) else None
    hard = pinned_len or tokens_per_request
    need = _Need(facts, weights, kvb, usable, hard,
                 max(hard, concurrency * blocks_per_request * BLOCK_SIZE), per_node,
                 concurrency=concurrency, request_blocks=blocks_per_request,
                 output_tokens=wl.output_tokens, ttft_s=wl.slo.ttft_p95_ms / 1000,
                 itl_s=wl.slo.itl_p95_ms / 1000, seq_tokens=tokens_per_request,
                 state_bytes=DTYPE_BYTES.get(facts.state_dtype or dtype, dbytes),
                 conv_bytes=dbytes, dcp_pin=_pinned(engine.decode_context_parallel_size))
    count = spec.gpus.count if isinstance(spec.gpus.count, int) else None
    cands = _candidates(need, facts, engine, count)
    if need.dcp_pin is not None and not isinstance(engine.tensor_parallel_size, int):
        # With TP pinned too, vLLM's own rules judge the pair (engine_rules).
        cands = _dcp_candidates(spec, facts, cands, need.dcp_pin)
    choice = _choose_detail(need, cands)
    fit, ideal, rejected = choice.fit, choice.ideal, choice.rejected
    if fit is None:
        raise _too_small(spec, need, gpu, cands, rejected)

    warnings: list[str] = check_extra_args(spec)[1]
    ex: list[Explained] = []
    _explain_facts(ex, spec, facts, gpu, dtype, dbytes, kvb, weights, usable)
    _explain_parallelism(ex, warnings, spec, need, fit, ideal, rejected, concurrency)
    _explain_dcp(ex, spec, need, fit)
    _explain_alternatives(ex, warnings, spec, need, choice)
    _explain_rollout(ex, spec, fit.gpus)
    startup = _explain_startup(ex, spec, weights, load_bandwidth)

    capacity = fit.capacity
    ex.append(Explained(
        name="kvTokenCapacity", value=capacity, unit="tokens",
        formula=(f"floor((usable - weights per GPU) / ({fit.block}-token block x KV bytes per "
                 f"token)) x {fit.block}"
                 + (f" (a block: {BLOCK_SIZE} tokens on each of {fit.dcp} decode context "
                    "parallel ranks)" if fit.dcp > 1 else "")),
        inputs={"usableBytesPerGpu": usable, "weightBytesPerGpu": fit.weights_per_gpu,
                "kvBudgetBytesPerGpu": fit.kv_budget, "kvBytesPerToken": fit.kv_per_token,
                "blockSize": BLOCK_SIZE}))
    max_model_len = _plan_max_model_len(ex, warnings, facts, pinned_len, fit,
                                        tokens_per_request)
    adjusted: list[str] = []
    seqs, mem_seqs, cap = _plan_max_num_seqs(ex, warnings, adjusted, spec, gpu, fit,
                                             concurrency, tokens_per_request)
    batched = _plan_batched_tokens(ex, adjusted, spec, seqs, max_model_len)
    if spec.engine.enable_chunked_prefill is False:
        # vLLM 0.32 starts, with a warning: vllm/engine/arg_utils.py EngineArgs.
        # _set_default_chunked_prefill_and_prefix_caching_args (every generate model but
        # encoder-decoder ones has is_chunked_prefill_supported).
        warnings.append(
            "spec.engine.enableChunkedPrefill is false: vLLM 0.32 does not officially "
            "support switching chunked prefill off for generate models (\"may cause the "
            "engine to crash or produce incorrect outputs\"), and needs "
            "maxNumBatchedTokens >= maxModelLen without it; the tuner never switches it off. "
            "Fix: remove the field (vLLM's default, on) unless you have measured the gain")
    if not ideal and not _holds(need, fit) and choice.tolerated_over is None:
        warnings.append(
            f"KV cache holds {fit.usable_tokens:,} tokens for requests, less than the "
            f"workload's {concurrency} concurrent requests x {tokens_per_request:,} tokens "
            f"= {need.ideal_tokens:,}: "
            "vLLM will queue or preempt requests; add replicas or GPUs")
    if spec.scheduling.group_topology_key and _nodes(fit, per_node) == 1:
        warnings.append(
            f"spec.scheduling.groupTopologyKey ({spec.scheduling.group_topology_key}) places "
            "the groups of a replica spread over nodes (a LeaderWorkerSet), but a replica "
            "here fits one node and runs as a Deployment: it has no effect. Fix: remove it, "
            "or use spec.scheduling.affinity for a single-node replica")

    plan = Plan(
        model_name=facts.name, gpu_product=gpu.product, gpu_memory_bytes=gpu.memory_bytes,
        tensor_parallel_size=fit.tp, pipeline_parallel_size=fit.pp, gpus_per_replica=fit.gpus,
        nodes_per_replica=_nodes(fit, per_node), max_model_len=max_model_len,
        dtype=str(engine.dtype), weight_bytes=weights, weight_bytes_per_gpu=fit.weights_per_gpu,
        kv_bytes_per_token=fit.kv_per_token, kv_token_capacity=capacity, max_num_seqs=seqs,
        max_num_batched_tokens=batched, explanations=ex, warnings=warnings,
        kv_cache_dtype=str(engine.kv_cache_dtype), usable_bytes_per_gpu=usable,
        kv_budget_bytes_per_gpu=fit.kv_budget, tokens_per_request=tokens_per_request,
        memory_max_num_seqs=mem_seqs, max_num_seqs_cap=cap,
        download_bytes=download_bytes(facts, dbytes, spec.model.quantization),
        adjustments=adjusted, fact_sources=fact_sources(spec, facts),
        startup_budget_seconds=startup.seconds,
        load_bytes_per_second=startup.load_bytes_per_second,
        decode_context_parallel_size=fit.dcp, block_size=fit.block,
    )
    sized = with_pod_sizing(spec, _check_utilization(spec, plan, gpus_per_node, read))
    _raise(_pod_memory_errors(spec, sized) + _host_buffer_errors(spec, sized))
    return sized


def fact_sources(spec: LLMServiceSpec, facts: ModelFacts) -> dict[str, str]:
    """Where each fact the plan used came from, for status.plan.factSources."""
    sources = {"architecture": facts.source,
               "parameters": facts.source_of("parameters"),
               "gpu": "spec.gpus.memoryGib" if spec.gpus.memory_gib else "GPU table"}
    if facts.quantization is not None:
        sources["quantization"] = facts.source_of("quantization")
    if facts.weight_bytes:
        sources["weightBytes"] = facts.source_of("weight_bytes")
    if facts.full_attention_layers is not None:
        sources["layerTypes"] = facts.source
    return sources


def _pod_memory_errors(spec: LLMServiceSpec, plan: Plan) -> list[SpecError]:
    """A pinned pod memory below what vLLM's processes take before any weight is
    loaded (:data:`HOST_BASE_BYTES` + :data:`HOST_BYTES_PER_GPU` per GPU): the pod would
    be OOM-killed at start, over and over."""
    if spec.resources.memory is None:
        return []
    floor = HOST_BASE_BYTES + HOST_BYTES_PER_GPU * gpus_in_pod(plan)
    if parse_quantity(spec.resources.memory) >= floor:
        return []
    return [SpecError(
        "spec.resources.memory",
        f"{spec.resources.memory} is below the {floor // GIB} GiB vLLM's processes take "
        f"before loading weights ({gpus_in_pod(plan)} GPU(s) in the pod): the pod would be "
        "OOM-killed at start", f"raise it (the plan would request "
        f"{pod_memory_bytes(spec, plan) // GIB}Gi), "
        "or leave it unset")]


# Host bytes vLLM's engine allocates per sequence slot and token of context at start
# (v1/worker/gpu_input_batch.py: token_ids_cpu, int32, and is_token_ids, bool, both
# max_num_seqs x max_model_len).
INPUT_BATCH_BYTES_PER_TOKEN = 5


def _host_buffer_errors(spec: LLMServiceSpec, plan: Plan) -> list[SpecError]:
    """A max-num-seqs (pinned, or the adaptation's lower bound it would apply) so large
    that the buffers vLLM sizes by it at start (max-num-seqs x max-model-len x 5 bytes)
    exceed the whole pod's memory: the engine could never start."""
    pinned = spec.engine.max_num_seqs if isinstance(spec.engine.max_num_seqs, int) else None
    field, seqs = "spec.engine.maxNumSeqs", pinned or 0
    if (pinned is None and spec.adaptation.mode is AdaptationMode.APPLY
            and spec.adaptation.min_max_num_seqs > plan.max_num_seqs):
        field, seqs = "spec.adaptation.minMaxNumSeqs", spec.adaptation.min_max_num_seqs
    need = seqs * plan.max_model_len * INPUT_BATCH_BYTES_PER_TOKEN
    memory = parse_quantity(pod_memory(spec, plan))
    if need <= memory:
        return []
    most = int(memory // (plan.max_model_len * INPUT_BATCH_BYTES_PER_TOKEN))
    return [SpecError(
        field, f"{seqs:,} sequences x maxModelLen {plan.max_model_len:,} need "
        f"{human_bytes(need)} of host buffers in vLLM's engine at start, more than the "
        f"pod's {pod_memory(spec, plan)} of memory: the engine could never start",
        f"lower it to at most {most:,} (the KV cache holds {plan.memory_max_num_seqs:,} "
        "requests of the workload at once), "
        "or lower spec.engine.maxModelLen")]


def _explain_rollout(ex: list[Explained], spec: LLMServiceSpec, gpus: int) -> None:
    """How a rollout replaces the pods (``spec.rollout``), and what one replica replaced in
    place costs: it serves nothing while its replacement starts."""
    surge = spec.rollout.max_surge
    if surge:
        value = f"surge {surge}"
        formula = (f"spec.rollout.maxSurge {surge}: {surge} replacement replica(s) start first "
                   f"(needing {surge * gpus} spare GPUs) and no replica stops before its "
                   "replacement serves")
    elif spec.replicas == 1:
        value = "in place (an outage)"
        formula = ("spec.replicas 1 and spec.rollout.maxSurge 0: every rollout (a tuning "
                   "result, an edit of the spec, a max-num-seqs change without the live "
                   "admission cap) stops serving until the new pod has downloaded and loaded "
                   f"the model; set spec.rollout.maxSurge: 1 if the cluster has {gpus} spare "
                   "GPUs for the replacement, or spec.replicas: 2")
    else:
        value = "in place, one replica at a time"
        formula = "spec.rollout.maxSurge 0: the other replicas serve while one is replaced"
    ex.append(Explained(name="rolloutStrategy", value=value, formula=formula,
                        source="pinned" if "max_surge" in spec.rollout.model_fields_set
                        else "planned",
                        inputs={"replicas": spec.replicas, "maxSurge": surge,
                                "drainSeconds": spec.rollout.drain_seconds}))


def _explain_startup(ex: list[Explained], spec: LLMServiceSpec, weights: int,
                     setting: str | None) -> StartupBudget:
    """The startup budget (:mod:`llm_operator.startup`), explained."""
    budget = startup_budget(weights, spec.model.load_bandwidth, setting)
    ex.append(Explained(
        name="startupBudgetSeconds", value=budget.seconds, unit="seconds",
        formula=(f"{budget.base_seconds} s (engine start, CUDA graphs or torch.compile, KV "
                 f"allocation) + ceil(weight bytes / load bandwidth) = {budget.base_seconds} + "
                 f"{budget.load_seconds}: the startup probe's budget and the tuner's per "
                 "server start; set spec.model.loadBandwidth to the sustained read rate of "
                 "the storage the weights are on"),
        inputs={"weightBytes": weights, "loadBytesPerSecond": budget.load_bytes_per_second,
                "loadBandwidthFrom": budget.source},
        source="pinned" if budget.source == "spec.model.loadBandwidth" else "planned"))
    return budget


def _check_utilization(spec: LLMServiceSpec, plan: Plan, gpus_per_node: int,
                       read: ModelFacts | None = None) -> Plan:
    """A gpuMemoryUtilization below the default that multiplies the GPUs: say so, and
    refuse more than twice the GPUs unless the user pinned the count (a typo such as
    0.09 for 0.9 must not silently turn one GPU into sixteen)."""
    utilization = spec.engine.gpu_memory_utilization
    if utilization >= DEFAULT_GPU_MEMORY_UTILIZATION:
        return plan
    default_spec = spec.model_copy(update={"engine": spec.engine.model_copy(
        update={"gpu_memory_utilization": DEFAULT_GPU_MEMORY_UTILIZATION})})
    try:
        default_gpus = _make_plan(default_spec, gpus_per_node, read).gpus_per_replica
    except SpecError:
        return plan
    if plan.gpus_per_replica <= default_gpus:
        return plan
    said = (f"{utilization:g} leaves {human_bytes(plan.usable_bytes_per_gpu)} per GPU for "
            f"weights and KV cache: the replica needs {plan.gpus_per_replica} GPUs where the "
            f"default {DEFAULT_GPU_MEMORY_UTILIZATION:g} needs {default_gpus}")
    if plan.gpus_per_replica > 2 * default_gpus and not isinstance(spec.gpus.count, int):
        raise SpecError("spec.engine.gpuMemoryUtilization", said,
                        f"raise it (default {DEFAULT_GPU_MEMORY_UTILIZATION:g}), or pin "
                        f"spec.gpus.count: {plan.gpus_per_replica} to accept this")
    return plan.model_copy(update={"warnings": [*plan.warnings,
                                                f"gpuMemoryUtilization {said}"]})


def _explain_facts(ex: list[Explained], spec: LLMServiceSpec, facts: ModelFacts,
                   gpu: GPUFacts, dtype: str, dbytes: int, kvb: int, weights: int,
                   usable: int) -> None:
    engine = spec.engine
    ex.append(Explained(
        name="gpuMemoryBytes", value=gpu.memory_bytes, unit="bytes",
        formula="spec.gpus.memoryGib x 2^30" if spec.gpus.memory_gib else
        f"GPU table: {gpu.name} (nvidia-smi total)",
        inputs={"product": gpu.product}, source="pinned" if spec.gpus.memory_gib else "planned"))
    util_pinned = "gpu_memory_utilization" in engine.model_fields_set
    ex.append(Explained(
        name="usableBytesPerGpu", value=usable, unit="bytes",
        formula="memory x gpuMemoryUtilization - overhead (activations, CUDA graphs, NCCL)",
        inputs={"gpuMemoryBytes": gpu.memory_bytes,
                "gpuMemoryUtilization": engine.gpu_memory_utilization,
                "gpuMemoryUtilizationSource": "pinned" if util_pinned else "default",
                "overheadBytes": OVERHEAD_BYTES_PER_GPU}))
    quant = spec.model.quantization
    if facts.quantization is not None:
        if facts.weight_bytes:
            formula = ("the checkpoint's bytes: model.safetensors.index.json metadata.total_size "
                       f"({facts.quantization} weights, quantized by its publisher)")
        else:
            formula = ("estimated: the groups the checkpoint quantizes x its bytes per weight "
                       "+ the rest x dtype bytes (no safetensors index read)")
        inputs: dict[str, Any] = {
            "parameters": facts.parameters, "quantization": facts.quantization,
            "quantMethod": facts.quantization_method,
            "bytesPerQuantizedWeight": QUANT_BYTES_PER_WEIGHT[facts.quantization],
            "quantizedGroups": list(facts.quantized_groups), "dtype": dtype,
            "dtypeBytes": dbytes}
    elif quant == Quantization.NONE and facts.weight_bytes and weights == facts.weight_bytes:
        formula = ("the checkpoint's bytes: model.safetensors.index.json metadata.total_size "
                   "(stored in the dtype vLLM serves)")
        inputs = {"parameters": facts.parameters, "dtype": dtype, "dtypeBytes": dbytes}
    elif quant == Quantization.NONE:
        formula = "parameters x dtype bytes"
        inputs = {"parameters": facts.parameters, "dtype": dtype, "dtypeBytes": dbytes}
    else:
        formula = ("(parameters - embeddings) x quantized bytes/param + embeddings x "
                   "dtype bytes")
        inputs = {"parameters": facts.parameters, "embeddings": facts.embedding_parameters,
                  "quantization": str(quant), "bytesPerParam": QUANT_BYTES_PER_PARAM[quant],
                  "dtype": dtype, "dtypeBytes": dbytes}
    inputs["modelFacts"] = facts.source
    ex.append(Explained(name="weightBytes", value=weights, unit="bytes", formula=formula,
                        inputs=inputs))
    ex.append(Explained(
        name="kvCacheDtypeBytes", value=kvb, unit="bytes",
        formula="1 for an fp8 KV cache, else the serving dtype's bytes",
        inputs={"kvCacheDtype": str(engine.kv_cache_dtype), "dtype": dtype},
        source="pinned" if engine.kv_cache_dtype != "auto" else "planned"))
    path = compute_path(facts, quant, gpu)
    ex.append(Explained(
        name="computeFlops", value=path.flops if path.flops is not None else "unknown",
        unit="FLOP/s", formula=f"the GPU's dense {path.dtype} tensor-core FLOP/s: {path.why}",
        inputs={"gpu": gpu.product, "computeDtype": path.dtype,
                "computeCapability": gpu.compute_capability,
                "weights": facts.quantization or str(quant),
                "activations": facts.activation_quantization if facts.quantization
                else ("fp8" if quant == Quantization.FP8 else None),
                "bf16Flops": gpu.bf16_flops, "fp8Flops": gpu.fp8_flops,
                "fp4Flops": gpu.fp4_flops, "source": gpu.source or "spec.gpus.memoryGib"}))


def _explain_parallelism(ex: list[Explained], warnings: list[str], spec: LLMServiceSpec,
                         need: _Need, fit: _Fit, ideal: bool, rejected: list[str],
                         concurrency: int) -> None:
    engine, facts = spec.engine, need.facts
    tp_pinned = isinstance(engine.tensor_parallel_size, int)
    pp_pinned = isinstance(engine.pipeline_parallel_size, int)
    count_pinned = isinstance(spec.gpus.count, int)
    aim = (f"holds the workload ({concurrency} requests, {need.ideal_tokens:,} KV tokens)"
           if ideal else f"holds one sequence of {need.hard_tokens:,} tokens")
    if not ideal and _tolerated(need, fit):
        aim = (f"holds {held_sequences(need, fit)} of the workload's {concurrency} requests, "
               "within the tolerance (see kvShortfall)")
    ex.append(Explained(
        name="tensorParallelSize", value=fit.tp, source="pinned" if tp_pinned else "planned",
        formula="pinned by the user" if tp_pinned else
        f"smallest TP dividing the {facts.num_attention_heads} attention heads "
        + ("(multi-head latent attention: one latent KV cache replicated on every rank, so "
           "no KV-head rule)" if facts.is_mla else f"({facts.num_key_value_heads} KV heads)")
        + f", at most {need.per_node} per node, "
        f"whose weights/(TP x PP) + KV reserve fit the usable memory: {aim}",
        inputs={"weightBytes": need.weights, "usableBytesPerGpu": need.usable,
                "reserveTokens": need.ideal_tokens if ideal else need.hard_tokens,
                "validSizes": valid_tensor_parallel_sizes(facts, need.per_node),
                "passedOver": rejected}))
    pp_formula = ("pinned by the user" if pp_pinned else
                  "1 when one node's GPUs hold the model; else the fewest stages (across "
                  "nodes) that do")
    if tp_pinned and not pp_pinned and fit.pp > 1:
        # With TP pinned, more memory can only come as pipeline stages, even on one node.
        pp_formula = ("tensorParallelSize is pinned, so more GPUs come as pipeline stages: "
                      "the fewest stages whose weights/(TP x PP) + KV reserve fit")
        if _nodes(fit, need.per_node) == 1:
            bigger = [t for t in valid_tensor_parallel_sizes(facts, need.per_node)
                      if t >= fit.gpus]
            alt = (f" (auto would consider TP={bigger[0]})" if bigger else "")
            warnings.append(
                f"tensorParallelSize is pinned at {fit.tp}, so the planner adds pipeline "
                f"stages for memory: {fit.pp} stages on one node ({fit.gpus} of its "
                f"{need.per_node} GPUs). Within a node a larger tensor-parallel size is "
                "usually faster (no pipeline bubbles, all-reduce over NVLink): leave "
                f"spec.engine.tensorParallelSize auto{alt}, or pin "
                "spec.engine.pipelineParallelSize if the stages are wanted")
    ex.append(Explained(
        name="pipelineParallelSize", value=fit.pp, source="pinned" if pp_pinned else "planned",
        formula=pp_formula,
        inputs={"numLayers": facts.num_layers, "gpusPerNode": need.per_node}))
    ex.append(Explained(
        name="gpus.count", value=fit.gpus, unit="GPUs",
        source="pinned" if count_pinned else "planned", formula="TP x PP",
        inputs={"tensorParallelSize": fit.tp, "pipelineParallelSize": fit.pp}))
    ex.append(Explained(
        name="nodesPerReplica", value=_nodes(fit, need.per_node),
        formula="ceil(TP x PP / gpus per node)",
        inputs={"gpus": fit.gpus, "gpusPerNode": need.per_node,
                "gpusPerNodeFrom": "spec.gpus.perNode" if spec.gpus.per_node
                else "LLMOP_GPUS_PER_NODE"}))
    if fit.tp > need.per_node:
        warnings.append(f"tensorParallelSize {fit.tp} spans nodes ({need.per_node} GPUs each): "
                        "tensor parallelism over the network is slow; prefer pipeline stages")
    ex.append(Explained(
        name="weightBytesPerGpu", value=fit.weights_per_gpu, unit="bytes",
        formula="weights / (TP x PP)",
        inputs={"weightBytes": need.weights, "tensorParallelSize": fit.tp,
                "pipelineParallelSize": fit.pp}))
    ex.append(_explain_kv(need, fit))


def _explain_kv(need: _Need, fit: _Fit) -> Explained:
    """kvBytesPerToken, with the formula of the model's layer types."""
    facts = need.facts
    inputs: dict[str, Any] = {"numLayers": facts.num_layers, "pipelineParallelSize": fit.pp,
                              "tensorParallelSize": fit.tp, "kvBytes": need.kv_bytes}
    if facts.mla_kv_dim is not None:
        formula = ("multi-head latent attention: ceil(layers / PP) x (kv_lora_rank + "
                   "qk_rope_head_dim) x kv bytes per GPU; the latent cache is replicated on "
                   "every TP rank (vLLM's MLAAttentionSpec), so TP does not divide it")
        inputs["mlaKvDim"] = facts.mla_kv_dim
    else:
        formula = "2 x ceil(layers / PP) x ceil(kv_heads / TP) x head_dim x kv bytes (per GPU)"
        inputs.update(numKeyValueHeads=facts.num_key_value_heads, headDim=facts.head_dim)
        if facts.v_head_dim:  # MiMo-V2: K and V of different head sizes
            formula = ("ceil(layers / PP) x ceil(kv_heads / TP) x (head_dim + v_head_dim) x "
                       "kv bytes (per GPU)")
            inputs["vHeadDim"] = facts.v_head_dim
    if facts.full_attention_head_dim or facts.full_attention_kv_heads:
        inputs.update(fullAttentionHeadDim=facts.full_head_dim,
                      fullAttentionKeyValueHeads=facts.full_kv_heads)
    if facts.full_attention_layers is not None:
        inputs["fullAttentionLayers"] = facts.full_attention_layers
        formula = formula.replace("layers", "full-attention layers", 1)
    if facts.sliding_window_layers or facts.state_layers:
        per_seq = kv_bytes_per_sequence(facts, fit.tp, fit.pp, need.kv_bytes, need.seq_tokens,
                                        need.state_bytes, need.conv_bytes)
        formula += (" + (estimated) per-sequence bytes over the request's tokens: "
                    "sliding-window layers hold min(tokens, window + 16), linear-attention "
                    "and Mamba layers a fixed state / TP")
        inputs.update(slidingWindowLayers=facts.sliding_window_layers,
                      slidingWindow=facts.sliding_window, stateLayers=facts.state_layers,
                      stateKind=facts.state_kind, stateBytes=need.state_bytes,
                      stateElementsPerLayer=facts.state_elements_per_layer,
                      sequenceTokens=need.seq_tokens, bytesPerSequence=per_seq)
    if facts.compressed_kv_bytes_per_token or facts.window_kv_bytes_per_sequence:
        formula = ("DeepSeek-V4 compressed attention (vLLM's fp8_ds_mla caches, the same on "
                   "every TP rank): compressed and indexer caches a token / PP + window "
                   "caches (sliding window, compressor states) a sequence / PP over the "
                   "request's tokens")
        inputs.update(compressedBytesPerToken=facts.compressed_kv_bytes_per_token,
                      windowBytesPerSequence=facts.window_kv_bytes_per_sequence,
                      sequenceTokens=need.seq_tokens)
    if fit.dcp > 1:
        formula += (f"; split by tokens over {fit.dcp} decode context parallel ranks (each "
                    f"keeps one token in {fit.dcp}; vLLM's dcp_sharded AttentionSpec)")
        inputs.update(decodeContextParallelSize=fit.dcp,
                      kvBytesPerTokenWithoutDcp=fit.kv_per_token_whole)
    inputs["modelFacts"] = facts.source
    return Explained(name="kvBytesPerToken", value=fit.kv_per_token, unit="bytes",
                     formula=formula, inputs=inputs)


def _dcp_candidates(spec: LLMServiceSpec, facts: ModelFacts, cands: list[tuple[int, int]],
                    dcp: int) -> list[tuple[int, int]]:
    """The (TP, PP) candidates at which vLLM takes a pinned decode context parallel size;
    none: the error names the field, the sizes vLLM takes and the TP they need."""
    kept = [(t, p) for t, p in cands if dcp in decode_context_parallel_sizes(facts, t)]
    if kept:
        return kept
    tps = sorted({t for t, _ in cands})
    ok = {t: decode_context_parallel_sizes(facts, t) for t in tps}
    rule = ("a divisor of tensorParallelSize (multi-head latent attention)" if facts.is_mla
            else f"a divisor of tensorParallelSize, at most tensorParallelSize / "
                 f"{facts.num_key_value_heads} KV heads (so TP above the KV heads), dividing "
                 f"the {facts.num_attention_heads // max(1, facts.num_key_value_heads)} query "
                 "heads per KV head")
    raise SpecError(
        "spec.engine.decodeContextParallelSize",
        f"{dcp} is not a size vLLM 0.32 takes for {facts.name} at the tensor-parallel sizes "
        f"this plan can use ({', '.join(f'TP={t}: {ok[t]}' for t in tps)}): it must be "
        f"{rule} (vllm/config/model.py ModelConfig.verify_with_parallel_config)",
        "set it to one of those sizes, or auto")


def _explain_dcp(ex: list[Explained], spec: LLMServiceSpec, need: _Need, fit: _Fit) -> None:
    """decodeContextParallelSize, where it is not 1 or vLLM would take another size."""
    sizes = decode_context_parallel_sizes(need.facts, fit.tp)
    pinned = isinstance(spec.engine.decode_context_parallel_size, int)
    if fit.dcp == 1 and len(sizes) == 1 and not pinned:
        return
    one = _fit_at(need, fit.tp, fit.pp, 1)
    if pinned:
        formula = "pinned by the user"
    elif not dcp_plannable(need.facts):
        formula = ("1: the planner splits only caches of full or latent attention in every "
                   "layer (this model has sliding-window, linear-attention/Mamba or "
                   "compressed layers); pin it to use another size vLLM takes")
    elif fit.dcp == 1:
        formula = ("1: one copy of the KV cache on every TP rank holds the workload (vLLM's "
                   "advice: add decode context parallelism to reduce that duplication where "
                   "the KV cache is short; it costs communication in every decode step)")
    else:
        formula = (f"the smallest size vLLM takes at TP={fit.tp} ({sizes}) whose KV cache "
                   "holds the workload, else the largest: each TP rank would otherwise hold "
                   "a copy of every token's KV"
                   + (" (multi-head latent attention: one latent head)" if need.facts.is_mla
                      else f" ({need.facts.num_key_value_heads} KV heads on {fit.tp} ranks)"))
    ex.append(Explained(
        name="decodeContextParallelSize", value=fit.dcp,
        source="pinned" if pinned else "planned", formula=formula,
        inputs={"validSizes": sizes, "tensorParallelSize": fit.tp,
                "kvTokensWithoutDcp": one.capacity, "kvTokens": fit.capacity,
                "heldSequencesWithoutDcp": min(held_sequences(need, one), need.concurrency),
                "heldSequences": min(held_sequences(need, fit), need.concurrency),
                "concurrency": need.concurrency,
                "source": "vllm/config/model.py ModelConfig.verify_with_parallel_config; "
                          "docs/serving/context_parallel_deployment.md"}))


def _plan_max_model_len(ex: list[Explained], warnings: list[str], facts: ModelFacts,
                        pinned: int | None, fit: _Fit, tokens_per_request: int = 0) -> int:
    inputs = {"maxContext": facts.max_context, "kvTokenCapacity": fit.capacity,
              "nullBlockTokens": NULL_BLOCKS * fit.block, "requestTokens": fit.usable_tokens,
              "margin": MODEL_LEN_MARGIN}
    if pinned is not None:
        ex.append(Explained(name="maxModelLen", value=pinned, unit="tokens", source="pinned",
                            formula="pinned by the user (<= model context, fits the KV cache)",
                            inputs=inputs))
        return pinned
    room = int(fit.usable_tokens * MODEL_LEN_MARGIN) // BLOCK_SIZE * BLOCK_SIZE
    value = min(facts.max_context, max(room, min(tokens_per_request, fit.usable_tokens)))
    ex.append(Explained(
        name="maxModelLen", value=value, unit="tokens",
        formula=f"min(model context, {MODEL_LEN_MARGIN:.0%} of (KV token capacity - vLLM's "
        "null block) in whole 16-token blocks): the margin covers the error of the predicted "
        "capacity (vLLM refuses to start when maxModelLen exceeds what its profile finds)",
        inputs=inputs))
    if value < facts.max_context:
        warnings.append(
            f"maxModelLen lowered from the model's context {facts.max_context:,} to "
            f"{value:,} ({MODEL_LEN_MARGIN:.0%} of the {fit.usable_tokens:,} KV tokens "
            "predicted for requests, a margin for the prediction): one sequence of the full "
            f"context needs {human_bytes(facts.max_context * fit.kv_per_token)} of KV cache "
            f"per GPU, {human_bytes(fit.kv_budget)} is left after the weights; pin "
            "spec.engine.maxModelLen to accept this, or give the replica more GPUs "
            "(spec.gpus.count) or a larger spec.gpus.product for the full context")
    return value


def _explain_alternatives(ex: list[Explained], warnings: list[str], spec: LLMServiceSpec,
                          need: _Need, choice: _Choice) -> None:
    """The TP option not taken and what it would serve (see :data:`KV_SHORTFALL_FLOOR`)."""
    fit = choice.fit
    if fit is None or need.concurrency <= 0:
        return
    rule = (f"fewer GPUs win when their KV cache holds >= {KV_SHORTFALL_FLOOR:.0%} of the "
            "concurrent sequences and the queue wait of the rest, bounded by (C - held) / "
            "held x outputTokens x itlP95 objective, is within the ttftP95 objective")
    wl = spec.workload
    if choice.tolerated_over is not None:
        held = held_sequences(need, fit)
        wait = queue_wait_bound_s(need, held)
        big = choice.tolerated_over
        text = (f"{_serves(need, fit)}: chosen over TP={big.tp}"
                + (f" PP={big.pp}" if big.pp > 1 else "")
                + f" ({big.gpus} GPUs, all {need.concurrency}); at peak "
                f"{need.concurrency - held} request(s) wait for a running one, at most "
                f"~{wait:.1f} s by the SLO ({wl.slo.itl_p95_ms:g} ms ITL x "
                f"{wl.output_tokens} tokens), within the {wl.slo.ttft_p95_ms:g} ms TTFT "
                "objective")
        ex.append(Explained(name="kvShortfall", value=f"{held} of {need.concurrency}",
                            unit="sequences", formula=rule,
                            inputs={"heldSequences": held, "concurrency": need.concurrency,
                                    "queueWaitBoundSeconds": round(wait, 3),
                                    "ttftObjectiveSeconds": need.ttft_s,
                                    "floor": KV_SHORTFALL_FLOOR, "chosen": text,
                                    "alternative": _serves(need, big),
                                    "alternativeTensorParallelSize": big.tp,
                                    "alternativePipelineParallelSize": big.pp}))
        pin = ("spec.engine.tensorParallelSize" if big.pp == 1 else "spec.gpus.count")
        value = big.tp if big.pp == 1 else big.gpus
        warnings.append(f"{text}; to hold every sequence set {pin}: {value}")
    elif choice.cheaper is not None:
        small = choice.cheaper
        held = held_sequences(need, small)
        wait = queue_wait_bound_s(need, held)
        why = (f"below the {KV_SHORTFALL_FLOOR:.0%} floor"
               if held < math.ceil(KV_SHORTFALL_FLOOR * need.concurrency) else
               f"its queue wait bound ~{wait:.1f} s exceeds the {wl.slo.ttft_p95_ms:g} ms "
               "TTFT objective")
        ex.append(Explained(name="cheaperOption", value=f"{min(held, need.concurrency)} of "
                            f"{need.concurrency}", unit="sequences", formula=rule,
                            inputs={"option": _serves(need, small), "heldSequences": held,
                                    "concurrency": need.concurrency, "notChosen": why,
                                    "queueWaitBoundSeconds": round(min(wait, 1e9), 3),
                                    "alternativeTensorParallelSize": small.tp,
                                    "alternativePipelineParallelSize": small.pp}))


def _plan_max_num_seqs(ex: list[Explained], warnings: list[str], adjusted: list[str],
                       spec: LLMServiceSpec, gpu: GPUFacts, fit: _Fit, concurrency: int,
                       tokens_per_request: int) -> tuple[int, int, int]:
    engine = spec.engine
    blocks = fit.usable_tokens // fit.block
    blocks_per_request = math.ceil(tokens_per_request / fit.block)
    mem_seqs = max(1, blocks // blocks_per_request)
    cap = vllm_default_max_num_seqs(gpu)
    inputs: dict[str, Any] = {
        "kvBlocksForRequests": blocks, "blocksPerRequest": blocks_per_request,
        "tokensPerRequest": tokens_per_request, "memorySupports": mem_seqs,
        "vllmDefaultCap": cap, "capSource": VLLM_BATCH_DEFAULTS_SOURCE,
        "workloadConcurrencyPerReplica": concurrency}
    if isinstance(engine.max_num_seqs, int):
        if engine.max_num_seqs > mem_seqs:
            warnings.append(
                f"pinned maxNumSeqs {engine.max_num_seqs} exceeds the {mem_seqs} requests of "
                f"{tokens_per_request:,} tokens the KV cache holds: expect preemptions")
        ex.append(Explained(name="maxNumSeqs", value=engine.max_num_seqs, source="pinned",
                            formula="pinned by the user", inputs=inputs))
        return engine.max_num_seqs, mem_seqs, cap
    value = min(mem_seqs, cap)
    formula = (f"min(max(1, floor((KV blocks - null block) / ceil((input + output) / "
               f"{fit.block}))), vLLM default cap)")
    if fit.dcp > 1:
        formula += (f"; a block is {BLOCK_SIZE} tokens on each of the {fit.dcp} decode "
                    "context parallel ranks")
    batched = engine.max_num_batched_tokens
    if isinstance(batched, int) and batched < value:
        adjusted.append(
            f"maxNumSeqs planned at {batched}, the pinned spec.engine.maxNumBatchedTokens, "
            f"instead of {value}: vLLM refuses to start with more sequences than batched "
            "tokens (SchedulerConfig.verify_max_model_len); raise maxNumBatchedTokens for "
            "more concurrent sequences")
        value = batched
        formula += ", at most the pinned maxNumBatchedTokens"
        inputs["maxNumBatchedTokens"] = batched
    ex.append(Explained(name="maxNumSeqs", value=value, formula=formula, inputs=inputs))
    return value, mem_seqs, cap


def _plan_batched_tokens(ex: list[Explained], adjusted: list[str], spec: LLMServiceSpec,
                         seqs: int, max_model_len: int) -> int | None:
    engine = spec.engine
    batched = engine.max_num_batched_tokens
    if not isinstance(batched, int):
        default = vllm_default_max_num_batched_tokens(gpu_facts(spec))
        if engine.enable_chunked_prefill is False:
            default = max(default, max_model_len)
        inputs: dict[str, Any] = {"vllmDefault": default, "maxNumSeqs": seqs,
                                  "source": "vllm/engine/arg_utils.py get_batch_defaults"}
        if seqs > default:
            # vLLM refuses max_num_batched_tokens < max_num_seqs at start, and its default
            # does not follow a large max_num_seqs: left alone, the engine would exit.
            adjusted.append(
                f"maxNumBatchedTokens set to {seqs} (maxNumSeqs) instead of vLLM's default "
                f"{default} for this GPU: vLLM refuses to start with fewer batched tokens "
                "than sequences (SchedulerConfig.verify_max_model_len); pin "
                "spec.engine.maxNumBatchedTokens to choose another value")
            ex.append(Explained(name="maxNumBatchedTokens", value=seqs, inputs=inputs,
                                formula="raised to maxNumSeqs: vLLM's default here is "
                                f"{default}, and vLLM refuses fewer batched tokens than "
                                "sequences"))
            return seqs
        ex.append(Explained(name="maxNumBatchedTokens", value="vLLM default", inputs=inputs,
                            formula=f"left to vLLM ({default} here: 2048, 8192 on >= 70 GiB "
                            "GPUs other than A100, 16384 on >= 160 GiB; raised to maxModelLen "
                            "without chunked prefill)"))
        return None
    # Whether vLLM takes it with the rest (at least maxNumSeqs; at least maxModelLen
    # without chunked prefill) is checked with every other start-up rule (engine_rules).
    ex.append(Explained(name="maxNumBatchedTokens", value=batched, source="pinned",
                        formula="pinned by the user (>= maxNumSeqs)",
                        inputs={"maxNumSeqs": seqs}))
    return batched


# --------------------------------------------------------------------------- pod sizing
# What the pods need besides GPUs: the model cache on disk, CPU and host memory. Pure
# functions of the spec and the plan, shared by the planner (which explains them and
# refuses what cannot work) and the renderer (which renders them).

# The emptyDir cache holds the checkpoint plus 10% and 5 GiB: tokenizer and config files,
# the hub's metadata, a file vLLM fetches that the prefetch did not (a newer vLLM may
# choose other weight files), rounded up to whole GiB.
CACHE_MARGIN_FRACTION = 0.10
CACHE_EXTRA_BYTES = 5 * GIB
# Above this an emptyDir cache is refused unless the user sizes it explicitly: every new
# pod (restart, rollout, rescheduling, each replica and each node of a replica)
# downloads it again (300 GiB is ~27 min at 200 MB/s), and common GPU node boot disks
# (GKE's 100 GB default, EKS AMIs' 20-100 GB) hold less, so the pod would stay Pending on
# ephemeral storage. It admits 70B-class models in bf16 (Llama 3.1 70B: 131 GiB ->
# 150 GiB with the margin) and refuses 405B (756 GiB in bf16).
EMPTYDIR_CACHE_MAX_BYTES = 300 * GIB
# Host memory of one vLLM pod = the weights its GPUs load (safetensors are read through
# the page cache, which counts against the pod's memory) + 4 GiB for the API server and
# engine-core processes (Python, tokenizer, scheduler) + 2 GiB per GPU worker process
# (CUDA context, torch and NCCL host buffers) + /dev/shm (a memory emptyDir: its pages
# count against the pod's memory).
HOST_BASE_BYTES = 4 * GIB
HOST_BYTES_PER_GPU = 2 * GIB
# CPU: vLLM (V1) runs an API-server process, an engine-core process that busy-loops the
# scheduler, and one worker process per GPU: one core each, 2 + GPUs of the pod. A request
# only (no limit: a CPU limit throttles the tokenizer and scheduler threads).
CPU_BASE = 2


def download_bytes(facts: ModelFacts, dtype_bytes: int, quantization: Quantization) -> int:
    """Bytes of the checkpoint on disk: the weights, except for fp8 quantized on load,
    whose checkpoint may hold the unquantized weights (parameters x dtype bytes)."""
    if quantization == Quantization.FP8:
        return weight_bytes(facts, dtype_bytes, Quantization.NONE)
    return weight_bytes(facts, dtype_bytes, quantization)


def checkpoint_bytes(plan: Plan) -> int:
    """The bytes a pod downloads into its cache (see :attr:`Plan.download_bytes`)."""
    return plan.download_bytes or plan.weight_bytes


def gpus_in_pod(plan: Plan) -> int:
    """GPUs one pod holds: the replica's, shared over its nodes (one pod per node)."""
    return math.ceil(plan.gpus_per_replica / max(plan.nodes_per_replica, 1))


def model_cache_bytes(spec: LLMServiceSpec, plan: Plan) -> int:
    """The emptyDir cache the plan needs: ``checkpoint x 1.1 + 5 GiB`` in whole GiB; only
    the 5 GiB for a model on a volume (nothing is downloaded)."""
    if spec.model.volume is not None:
        return CACHE_EXTRA_BYTES
    need = checkpoint_bytes(plan) * (1 + CACHE_MARGIN_FRACTION) + CACHE_EXTRA_BYTES
    return math.ceil(need / GIB) * GIB


def cache_size_limit(spec: LLMServiceSpec, plan: Plan) -> str | None:
    """The ``sizeLimit`` of the emptyDir cache (None: the cache is ``spec.cache.claimName``).

    The user's ``spec.cache.sizeLimit`` when set, else :func:`model_cache_bytes`.
    Raises :class:`SpecError` when the user's size cannot hold the checkpoint (the kubelet
    would evict the pod mid-download, again and again), and when the plan's size exceeds
    :data:`EMPTYDIR_CACHE_MAX_BYTES` (give a PersistentVolumeClaim instead)."""
    if spec.cache.claim_name:
        return None
    need = model_cache_bytes(spec, plan)
    if spec.cache.size_limit is not None:
        if spec.model.volume is None and parse_quantity(spec.cache.size_limit) < (
                checkpoint_bytes(plan)):
            raise SpecError(
                "spec.cache.sizeLimit",
                f"{spec.cache.size_limit} cannot hold the model's checkpoint "
                f"({human_bytes(checkpoint_bytes(plan))}): the kubelet would evict the pod "
                "in the middle of the download, and again after every restart",
                f"set it to at least {need // GIB}Gi, remove it (the operator sizes the "
                "cache from the plan), or give a PersistentVolumeClaim in "
                "spec.cache.claimName")
        return spec.cache.size_limit
    if need > EMPTYDIR_CACHE_MAX_BYTES:
        raise SpecError(
            "spec.cache.claimName",
            f"is not set, and the model's checkpoint ({human_bytes(checkpoint_bytes(plan))}) "
            f"needs a {need // GIB}Gi cache, more than the {EMPTYDIR_CACHE_MAX_BYTES // GIB}Gi "
            "the operator puts in an emptyDir (every new pod would download it again, onto "
            "the node's boot disk)",
            f"give a PersistentVolumeClaim of at least {need // GIB}Gi in "
            "spec.cache.claimName (ReadWriteMany when replicas > 1 or one replica spans "
            f"nodes), or set spec.cache.sizeLimit to {need // GIB}Gi if your GPU nodes have "
            "that much local disk for ephemeral storage")
    return f"{need // GIB}Gi"


def pod_cpu(spec: LLMServiceSpec, plan: Plan) -> str:
    """The CPU request of one vLLM pod: ``spec.resources.cpu``, else 2 + its GPUs."""
    return spec.resources.cpu or str(CPU_BASE + gpus_in_pod(plan))


def pod_memory_bytes(spec: LLMServiceSpec, plan: Plan) -> int:
    """Host memory one vLLM pod needs, in whole GiB (see :data:`HOST_BASE_BYTES`): the
    weights of its GPUs + 4 GiB + 2 GiB per GPU + ``spec.resources.shmSize``."""
    gpus = gpus_in_pod(plan)
    need = (plan.weight_bytes_per_gpu * gpus + HOST_BASE_BYTES + HOST_BYTES_PER_GPU * gpus
            + parse_quantity(spec.resources.shm_size))
    return math.ceil(need / GIB) * GIB


def pod_memory(spec: LLMServiceSpec, plan: Plan) -> str:
    """The memory request of one vLLM pod: ``spec.resources.memory``, else
    :func:`pod_memory_bytes` in Gi."""
    return spec.resources.memory or f"{pod_memory_bytes(spec, plan) // GIB}Gi"


def with_pod_sizing(spec: LLMServiceSpec, plan: Plan) -> Plan:
    """``plan`` with the pods' cache, CPU and memory explained, and warnings about them
    (a cache :func:`cache_size_limit` refuses is a warning here: the renderer refuses it,
    which reports the spec invalid; the plan of GPUs and batch stays useful)."""
    ex = list(plan.explanations)
    warnings = list(plan.warnings)
    gpus = gpus_in_pod(plan)
    pods = "each pod of a replica" if plan.nodes_per_replica > 1 else "each pod"
    try:
        size = cache_size_limit(spec, plan)
    except SpecError as exc:
        # The renderer refuses it (an invalid spec); the plan itself still holds.
        size = "refused"
        warnings.append(f"the pods cannot be rendered: {exc}")
        ex.append(Explained(
            name="modelCacheSize", value=size, formula=exc.problem,
            inputs={"checkpointBytes": checkpoint_bytes(plan),
                    "emptyDirMaxBytes": EMPTYDIR_CACHE_MAX_BYTES}))
    if size == "refused":
        pass
    elif size is None:
        ex.append(Explained(
            name="modelCache", value=f"PersistentVolumeClaim {spec.cache.claim_name}",
            source="pinned", formula="spec.cache.claimName",
            inputs={"checkpointBytes": checkpoint_bytes(plan)}))
        if spec.cache.size_limit is not None:
            warnings.append(
                f"spec.cache.sizeLimit {spec.cache.size_limit} is not used: it sizes an "
                f"emptyDir cache, and the cache is the claim {spec.cache.claim_name!r} "
                "(its own size applies); remove one of them")
        if spec.replicas > 1 or plan.nodes_per_replica > 1:
            warnings.append(
                f"spec.cache.claimName {spec.cache.claim_name!r} is mounted by "
                f"{'every replica' if spec.replicas > 1 else 'every node of a replica'}, "
                "on different nodes: the claim must be ReadWriteMany (e.g. NFS, Filestore, "
                "EFS, Azure Files); a ReadWriteOnce claim attaches to one node, and the pods "
                "on other nodes stay in ContainerCreating (FailedAttachVolume: Multi-Attach "
                "error)")
    elif spec.cache.size_limit is not None:
        ex.append(Explained(
            name="modelCacheSize", value=size, source="pinned",
            formula=f"spec.cache.sizeLimit (an emptyDir per pod; {pods} downloads the model)",
            inputs={"checkpointBytes": checkpoint_bytes(plan)}))
        if spec.model.volume is None and parse_quantity(size) < model_cache_bytes(spec, plan):
            warnings.append(
                f"spec.cache.sizeLimit {size} leaves little room beside the checkpoint "
                f"({human_bytes(checkpoint_bytes(plan))}); the operator would size it "
                f"{model_cache_bytes(spec, plan) // GIB}Gi")
    else:
        formula = ("5 GiB (the model is on a volume: nothing is downloaded)"
                   if spec.model.volume is not None else
                   "ceil_GiB(checkpoint bytes x 1.1 + 5 GiB) (an emptyDir per pod; "
                   f"{pods} downloads the model)")
        ex.append(Explained(
            name="modelCacheSize", value=size, formula=formula,
            inputs={"checkpointBytes": checkpoint_bytes(plan),
                    "emptyDirMaxBytes": EMPTYDIR_CACHE_MAX_BYTES}))
    ex.append(Explained(
        name="cpuRequest", value=pod_cpu(spec, plan),
        source="pinned" if spec.resources.cpu else "planned",
        formula=("spec.resources.cpu" if spec.resources.cpu else
                 "2 (API server, engine core) + 1 per GPU worker of the pod; no limit"),
        inputs={"gpusPerPod": gpus}))
    ex.append(Explained(
        name="memoryRequest", value=pod_memory(spec, plan),
        source="pinned" if spec.resources.memory else "planned",
        formula=("spec.resources.memory (request = limit)" if spec.resources.memory else
                 "ceil_GiB(weights per GPU x GPUs of the pod + 4 GiB + 2 GiB per GPU "
                 "+ shmSize); request only, no limit"),
        inputs={"weightBytesPerGpu": plan.weight_bytes_per_gpu, "gpusPerPod": gpus,
                "shmSize": spec.resources.shm_size}))
    return plan.model_copy(update={"explanations": ex, "warnings": warnings})


# --------------------------------------------------------------------------- engine
# The flags of ``vllm serve`` that the spec and the plan decide, in the renderer's order
# (rendering.vllm_args.build_vllm_flags puts the endpoint flags before them and the drain flag and
# spec.engine.extraArgs after), and vLLM's start-up rules checked on them with the
# extraArgs: one list, so what is checked is what the pod runs.

# Engine settings that tuning and adaptation move, by their spec name.
# They apply only where the user left the field to "auto": a pin always wins.
OVERRIDABLE: dict[str, str] = {
    "maxNumSeqs": "max_num_seqs",
    "maxNumBatchedTokens": "max_num_batched_tokens",
}

# A replica over several nodes runs on vLLM's own multiprocessing executor across nodes
# (vLLM's docs/serving/parallelism_scaling.md, "Running vLLM with MultiProcessing"; no
# Ray in the image, and the same on vLLM's CPU build, which refuses Ray): every node runs
# ``vllm serve`` with the same arguments plus these, then its rank (0 serves the API, the
# others run --headless) and the leader's address, which only the pod knows
# (rendering.leaderworkerset).


def multi_node_flags(plan: Plan) -> tuple[str, ...]:
    """What every node of a multi-node replica adds after every other argument."""
    return ("--distributed-executor-backend", "mp", "--nnodes", str(plan.nodes_per_replica))


def effective_engine_value(
    engine: EngineSpec, key: str, planned: int | None, overrides: Mapping[str, int] | None
) -> tuple[int | None, str]:
    """The value of an overridable engine setting and where it came from.

    Precedence: the user's pin (``pinned``), then a tuned/adapted override
    (``override``), then the plan (``planned``; None leaves vLLM's default).
    """
    pinned = getattr(engine, OVERRIDABLE[key])
    if isinstance(pinned, int):
        return pinned, "pinned"
    if overrides and key in overrides:
        return int(overrides[key]), "override"
    return planned, "planned"


@dataclass(frozen=True)
class EngineFlag:
    """One flag of ``vllm serve`` with its value, the spec field that owns it, and where
    the value came from: ``pinned`` (the field), ``planned``, ``override`` (tuned or
    adapted), ``adjusted`` (``why`` says how) or ``operator``."""

    items: tuple[str, ...]
    field: str
    source: str
    why: str = ""


def _pinned_or_planned(value: object) -> str:
    return "pinned" if isinstance(value, int) else "planned"


def engine_flags(spec: LLMServiceSpec, plan: Plan,
                 overrides: Mapping[str, int] | None = None) -> list[EngineFlag]:
    """The engine flags the spec and the plan decide, as the pods get them:
    parallelism, memory, batching, numerics, then the switches the user set.
    ``overrides`` (tuned or adapted values) apply where the field is ``auto``."""
    engine = spec.engine
    flags = [EngineFlag(("--tensor-parallel-size", str(plan.tensor_parallel_size)),
                        "spec.engine.tensorParallelSize",
                        _pinned_or_planned(engine.tensor_parallel_size))]
    if plan.pipeline_parallel_size > 1:
        flags.append(EngineFlag(("--pipeline-parallel-size", str(plan.pipeline_parallel_size)),
                                "spec.engine.pipelineParallelSize",
                                _pinned_or_planned(engine.pipeline_parallel_size)))
    if plan.decode_context_parallel_size > 1 or isinstance(
            engine.decode_context_parallel_size, int):
        flags.append(EngineFlag(
            ("--decode-context-parallel-size", str(plan.decode_context_parallel_size)),
            "spec.engine.decodeContextParallelSize",
            _pinned_or_planned(engine.decode_context_parallel_size)))
    flags += [
        EngineFlag(("--max-model-len", str(plan.max_model_len)), "spec.engine.maxModelLen",
                   _pinned_or_planned(engine.max_model_len)),
        EngineFlag(("--gpu-memory-utilization", f"{engine.gpu_memory_utilization:g}"),
                   "spec.engine.gpuMemoryUtilization", "pinned"),
    ]
    seqs, seqs_from = effective_engine_value(engine, "maxNumSeqs", plan.max_num_seqs, overrides)
    flags.append(EngineFlag(("--max-num-seqs", str(seqs)), "spec.engine.maxNumSeqs", seqs_from))
    batched, source = effective_engine_value(
        engine, "maxNumBatchedTokens", plan.max_num_batched_tokens, overrides)
    why = ""
    if source != "pinned" and seqs is not None and seqs > (
            batched or vllm_default_max_num_batched_tokens(
                GPUFacts(plan.gpu_product, plan.gpu_product, plan.gpu_memory_bytes))):
        # An adapted or tuned cap above the batch (the adaptation's lower bound may exceed
        # the plan): vLLM refuses fewer batched tokens than sequences, so raise the batch
        # with it as the planner does (a pinned batch is checked by the rules instead).
        batched, source = seqs, "adjusted"
        why = "raised to max-num-seqs, which vLLM refuses to exceed"
    if batched is not None:
        flags.append(EngineFlag(("--max-num-batched-tokens", str(batched)),
                                "spec.engine.maxNumBatchedTokens", source, why))
    if engine.dtype != "auto":
        flags.append(EngineFlag(("--dtype", str(engine.dtype)), "spec.engine.dtype", "pinned"))
    if engine.kv_cache_dtype != "auto":
        flags.append(EngineFlag(("--kv-cache-dtype", str(engine.kv_cache_dtype)),
                                "spec.engine.kvCacheDtype", "pinned"))
    # fp8 weights are quantized on load when the checkpoint is not already fp8; AWQ and
    # GPTQ checkpoints carry their quantization_config and vLLM detects it.
    if spec.model.quantization == Quantization.FP8:
        flags.append(EngineFlag(("--quantization", "fp8"), "spec.model.quantization",
                                "pinned"))
    if engine.enable_chunked_prefill is not None:
        flags.append(EngineFlag(
            ("--enable-chunked-prefill" if engine.enable_chunked_prefill
             else "--no-enable-chunked-prefill",), "spec.engine.enableChunkedPrefill", "pinned"))
    if engine.enable_prefix_caching is not None:
        flags.append(EngineFlag(
            ("--enable-prefix-caching" if engine.enable_prefix_caching
             else "--no-enable-prefix-caching",), "spec.engine.enablePrefixCaching", "pinned"))
    return flags


def _model_shape(spec: LLMServiceSpec, read: ModelFacts | None = None) -> ModelShape:
    """What the rules know of the model: heads and context from the catalog or
    spec.model.architecture; whether it has experts only where that is known (the
    catalog records experts; an architecture says so with activeParameters, and says
    nothing when it leaves them out); ``read``: facts from config.json (see
    :func:`model_facts`), whose experts are known either way."""
    try:
        facts = model_facts(spec, read)
    except SpecError:  # a plan written by hand for a model the catalog does not know
        return ModelShape()
    moe = facts.num_experts is not None or facts.active_parameters is not None
    return ModelShape(attention_heads=facts.num_attention_heads,
                      kv_heads=facts.num_key_value_heads, max_context=facts.max_context,
                      is_moe=moe if moe or facts.source in (CATALOG, CONFIG_JSON) else None)


def _engine_argv(spec: LLMServiceSpec, plan: Plan, overrides: Mapping[str, int] | None
                 ) -> tuple[list[str], list[EngineFlag | int]]:
    """The engine's arguments (:func:`engine_flags`, then ``spec.engine.extraArgs``,
    then what a multi-node leader adds) and, item by item, what set each one: its
    :class:`EngineFlag`, or the index of the extraArgs item."""
    owners: list[EngineFlag | int] = []
    argv: list[str] = []
    for flag in engine_flags(spec, plan, overrides):
        argv += flag.items
        owners += [flag] * len(flag.items)
    for k, item in enumerate(spec.engine.extra_args):
        argv.append(item)
        owners.append(k)
    if plan.nodes_per_replica > 1:
        items = multi_node_flags(plan)
        nodes = EngineFlag(items, "spec.gpus", "operator",
                           "a replica over several nodes runs vLLM's mp executor on each")
        argv += items
        owners += [nodes] * len(items)
    return argv, owners


def engine_argv(spec: LLMServiceSpec, plan: Plan,
                overrides: Mapping[str, int] | None = None) -> list[str]:
    """The engine's arguments as the pods get them, without the endpoint and drain flags:
    what :func:`engine_rule_errors` checks."""
    return _engine_argv(spec, plan, overrides)[0]


def engine_settings(spec: LLMServiceSpec, plan: Plan,
                    overrides: Mapping[str, int] | None = None, *,
                    facts: ModelFacts | None = None) -> EngineSettings:
    """The settings the pods' ``vllm serve`` starts with (:func:`_engine_argv`), each
    named in messages by the spec field that sets it; ``facts``: as :func:`make_plan`'s."""
    argv, owners = _engine_argv(spec, plan, overrides)
    table = flag_table()
    managed = {table.options[f].dest: field for f, field in MANAGED_FLAGS.items()
               if f in table.options}

    def owner(s: EngineSettings, dest: str) -> EngineFlag | int | None:
        at = s.read.at.get(s.source_of(dest))
        return None if at is None else owners[at]

    def where(s: EngineSettings, dest: str) -> str:
        found = owner(s, dest)
        if isinstance(found, int):
            return f"spec.engine.extraArgs[{found}]"
        if found is not None:
            return found.field
        return managed.get(dest, "spec.engine.extraArgs").split(" ")[0]

    def describe(s: EngineSettings, dest: str) -> str:
        found, words = owner(s, dest), flag_words(s, dest)
        if isinstance(found, int):
            return f"{words} (spec.engine.extraArgs[{found}])"
        if found is None:
            return (f"{words[:-1]}; set by {where(s, dest)})" if dest in managed else words)
        value = " ".join(found.items[1:]) or ("true" if s.on(dest) else "false")
        if found.source == "pinned":
            return f"{found.field} {value}"
        said = {"planned": f"planned: {found.field} is auto",
                "override": f"tuned or adapted: {found.field} is auto"}
        return f"{found.items[0]} {value} ({said.get(found.source, found.why)})"

    gpu = GPUFacts(plan.gpu_product, plan.gpu_product, plan.gpu_memory_bytes)
    return EngineSettings.of(
        argv, defaults=Defaults(vllm_default_max_num_batched_tokens(gpu),
                                vllm_default_max_num_seqs(gpu)),
        model=_model_shape(spec, facts), describe=describe, locate=where, table=table)


def engine_rule_errors(spec: LLMServiceSpec, plan: Plan,
                       overrides: Mapping[str, int] | None = None, *,
                       overridden_only: bool = False,
                       facts: ModelFacts | None = None) -> list[SpecError]:
    """One :class:`SpecError` per start-up rule of vLLM (:mod:`llm_operator.engine_rules`)
    that the pods' engine arguments break: the field to change first (``field``), the
    others involved and each setting's value in the problem, where vLLM makes the rule,
    and the fix. ``overridden_only``: only the rules a tuned or adapted value takes part
    in (the renderer's check: the planner has checked the rest). ``facts``: the model's
    facts read from its config.json, as given to :func:`make_plan`."""
    settings = engine_settings(spec, plan, overrides, facts=facts)
    _, owners = _engine_argv(spec, plan, overrides)

    def moved(dest: str) -> bool:
        at = settings.read.at.get(settings.source_of(dest))
        owner = None if at is None else owners[at]
        return isinstance(owner, EngineFlag) and owner.source in ("override", "adjusted")

    errors = []
    for refusal in refusals(settings):
        found = refusal.finding
        if overridden_only and not any(moved(d) for d in found.dests):
            continue
        fields = list(dict.fromkeys(settings.where(d) for d in found.dests))
        also = f" (with {', '.join(fields[1:])})" if len(fields) > 1 else ""
        errors.append(SpecError(
            fields[0], f"{found.problem}{also}, and vLLM {VLLM_VERSION} refuses to start "
            f"with that ({refusal.rule.source})", found.fix))
    return errors


# --------------------------------------------------------------------------- display

def human_bytes(n: float) -> str:
    """Bytes for people: decimal GB (as model sizes are quoted) and binary GiB."""
    if abs(n) >= 1e9:
        return f"{n / 1e9:.1f} GB ({n / GIB:.1f} GiB)"
    if abs(n) >= 1e6:
        return f"{n / 1e6:.1f} MB"
    return f"{int(n):,} B"

"""Plan (pure): model facts + GPU facts + the spec give parallelism and batch limits.

Every number carries the formula and inputs that produced it, so
``llm-operator plan`` can explain itself.

How the plan is reached (one replica):

1. **Facts.** The model from :mod:`~llm_operator.knowledge.catalog` (or
   ``spec.model.architecture``), the GPU from the product table (or
   ``spec.gpus.memoryGib``, which wins).
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

KV by layer type (facts read from a model's config.json, :mod:`~llm_operator.knowledge.modelfacts`):
full-attention layers pay K and V for every token; multi-head latent attention (MLA)
pays one latent of ``kv_lora_rank + qk_rope_head_dim`` elements per token and layer, the
same on every TP rank (vLLM replicates the latent cache: no KV-head split, so no
KV-head divisibility rule for TP); sliding-window layers pay at most window + one block
of tokens per sequence; linear-attention and Mamba layers pay a fixed state per
sequence. The per-sequence parts are spread over the workload's request length, so
"KV bytes per token" is an effective figure (estimated) for such models. Catalog and
``spec.model.architecture`` models count every layer as full attention (conservative
for Gemma 2 and Mistral v0.1). User pins always win, but are validated.

The package, one module per concern, each pure: :mod:`.facts` (the model's and the
GPU's facts), :mod:`.memory` (bytes: weights, KV per token, capacity), :mod:`.parallelism`
(TP, PP and decode context parallelism; the fit of each candidate), :mod:`.engine`
(max-model-len, max-num-seqs, batched tokens; the ``vllm serve`` flags), :mod:`.pod`
(cache, CPU, host memory), :mod:`.validation` (what is refused, with the field and the
fix), :mod:`.plan` (:func:`make_plan`, with the explanations beside the numbers), and
:mod:`.types`. Everything public is importable from ``llm_operator.planning``.
"""

from __future__ import annotations

from .engine import (
    MODEL_LEN_MARGIN,
    OVERRIDABLE,
    VLLM_BATCH_DEFAULTS_SOURCE,
    EngineFlag,
    effective_engine_value,
    engine_argv,
    engine_flags,
    engine_rule_errors,
    engine_settings,
    multi_node_flags,
    runner_capacity,
    vllm_default_max_num_batched_tokens,
    vllm_default_max_num_seqs,
)
from .facts import (
    MEMORY_GIB_SLACK,
    fact_sources,
    gpu_facts,
    model_facts,
)
from .memory import (
    BLOCK_SIZE,
    DTYPE_BYTES,
    NULL_BLOCKS,
    OVERHEAD_BYTES_PER_GPU,
    QUANT_BYTES_PER_PARAM,
    download_bytes,
    human_bytes,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_dtype_bytes,
    kv_request_tokens,
    kv_token_capacity,
    serving_dtype,
    usable_bytes_per_gpu,
    weight_bytes,
)
from .parallelism import (
    KV_SHORTFALL_FLOOR,
    dcp_plannable,
    decode_context_parallel_sizes,
    held_sequences,
    layout_label,
    queue_wait_bound_s,
    valid_tensor_parallel_sizes,
)
from .plan import (
    make_plan,
)
from .pod import (
    CACHE_EXTRA_BYTES,
    CACHE_MARGIN_FRACTION,
    CPU_BASE,
    EMPTYDIR_CACHE_MAX_BYTES,
    HOST_BASE_BYTES,
    HOST_BYTES_PER_GPU,
    INPUT_BATCH_BYTES_PER_TOKEN,
    cache_size_limit,
    checkpoint_bytes,
    gpus_in_pod,
    model_cache_bytes,
    pod_cpu,
    pod_memory,
    pod_memory_bytes,
    with_pod_sizing,
)
from .types import (
    Explained,
    Plan,
)
from .validation import (
    OTHER_VENDOR_RESOURCES,
    contradictions,
    managed_flag_errors,
)

__all__ = [
    "layout_label",
    "BLOCK_SIZE",
    "CACHE_EXTRA_BYTES",
    "CACHE_MARGIN_FRACTION",
    "CPU_BASE",
    "DTYPE_BYTES",
    "EMPTYDIR_CACHE_MAX_BYTES",
    "EngineFlag",
    "Explained",
    "HOST_BASE_BYTES",
    "HOST_BYTES_PER_GPU",
    "INPUT_BATCH_BYTES_PER_TOKEN",
    "KV_SHORTFALL_FLOOR",
    "MEMORY_GIB_SLACK",
    "MODEL_LEN_MARGIN",
    "NULL_BLOCKS",
    "OTHER_VENDOR_RESOURCES",
    "OVERHEAD_BYTES_PER_GPU",
    "OVERRIDABLE",
    "Plan",
    "QUANT_BYTES_PER_PARAM",
    "VLLM_BATCH_DEFAULTS_SOURCE",
    "cache_size_limit",
    "checkpoint_bytes",
    "contradictions",
    "dcp_plannable",
    "decode_context_parallel_sizes",
    "download_bytes",
    "effective_engine_value",
    "engine_argv",
    "engine_flags",
    "engine_rule_errors",
    "engine_settings",
    "fact_sources",
    "gpu_facts",
    "gpus_in_pod",
    "held_sequences",
    "human_bytes",
    "kv_bytes_per_sequence",
    "kv_bytes_per_token",
    "kv_dtype_bytes",
    "kv_request_tokens",
    "kv_token_capacity",
    "make_plan",
    "managed_flag_errors",
    "model_cache_bytes",
    "model_facts",
    "multi_node_flags",
    "runner_capacity",
    "pod_cpu",
    "pod_memory",
    "pod_memory_bytes",
    "queue_wait_bound_s",
    "serving_dtype",
    "usable_bytes_per_gpu",
    "valid_tensor_parallel_sizes",
    "vllm_default_max_num_batched_tokens",
    "vllm_default_max_num_seqs",
    "weight_bytes",
    "with_pod_sizing",
]

"""What the planner knows of a model (pure): :class:`ModelFacts`, where each fact came
from, and the bytes of a quantized checkpoint's weights.

:class:`ModelFacts` is the one shape the planner reads, whichever way the facts came: the
built-in catalog, ``spec.model.architecture``, or the model's own ``config.json``
(:func:`~.parse.facts_from_hf_config`). Each fact says where it came from
(:meth:`ModelFacts.source_of`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Where a fact came from (status.plan and `llm-operator plan` show it).
CATALOG = "catalog"
SPEC = "spec.model.architecture"
CONFIG_JSON = "config.json"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# The source of a dtype config.json does not name (transformers' float32 default).
DTYPE_UNSTATED = "default: config.json names no torch_dtype"
# The longest context vLLM assumes where config.json names no length key, and that
# fact's source (Bloom, the Mamba models).
VLLM_DEFAULT_MAX_LEN = 2048
MAX_CONTEXT_UNSTATED = ("default: config.json names no length (max_position_embeddings "
                        "...); vLLM assumes 2048 and warns; set spec.engine.maxModelLen "
                        "to plan another")

# Bytes per weight of each checkpoint quantization, scales included (estimated where the
# safetensors index gives no total_size):
# fp8: 1 byte (block or channel scales are < 0.1%); NVFP4: 4 bits + one fp8 scale per 16;
# MXFP4: 4 bits + one 8-bit scale per 32; int4 (AWQ/GPTQ/compressed-tensors w4a16):
# 4 bits + a 16-bit scale and a 4-bit zero per group of 128; int8: 1 byte.
QUANT_BYTES_PER_WEIGHT: dict[str, float] = {
    "fp8": 1.0,
    "nvfp4": 0.5 + 1 / 16,
    "mxfp4": 0.5 + 1 / 32,
    "int4": 0.5 + 2.5 / 128,
    "int8": 1.0,
}


@dataclass(frozen=True)
class ModelFacts:
    """Architecture facts of one model, as the planner needs them."""

    name: str  # Hugging Face id (canonical spelling) or the served name
    parameters: float  # total, all experts included
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_context: int  # what vLLM derives as the longest --max-model-len
    vocab_size: int | None
    dtype: str = "bfloat16"  # the checkpoint's dtype (config.json torch_dtype)
    active_parameters: float | None = None  # per token; None = parameters (dense)
    num_experts: int | None = None  # mixture of experts: routed experts per layer
    num_experts_per_token: int | None = None
    tie_word_embeddings: bool = False
    source: str = CATALOG  # catalog | spec.model.architecture | config.json
    # --- what config.json adds (defaults: a dense model of full-attention layers)
    # Layers holding K and V for every token; None: all num_layers.
    full_attention_layers: int | None = None
    # Gemma 4: the full-attention layers' own head size and KV heads (None: as the rest).
    full_attention_head_dim: int | None = None
    full_attention_kv_heads: int | None = None
    # V's head size where it differs from K's (MiMo-V2: K 192, V 128); None: head_dim.
    # vLLM's AttentionSpec.head_size_v: a token's K and V take head_size + head_size_v.
    v_head_dim: int | None = None
    sliding_window_layers: int = 0  # layers keeping at most sliding_window tokens
    sliding_window: int | None = None
    state_layers: int = 0  # linear-attention / Mamba layers: a fixed state per sequence
    state_elements_per_layer: int = 0  # that state's elements per sequence, all ranks
    state_conv_elements_per_layer: int = 0  # of which the conv state (the model's dtype)
    # "linear_attention" (gated DeltaNet) | "lightning" | "kda" | "mamba2" | "mamba1"
    state_kind: str | None = None
    # The temporal state's dtype: mamba_ssm_cache_dtype (Nemotron-H) or mamba_ssm_dtype
    # (Qwen3.5) where set; KDA's float32 (vLLM's MambaStateDtypeCalculator.
    # kda_state_dtype under the default mamba_ssm_cache_dtype auto); None: the model's.
    state_dtype: str | None = None
    mla_kv_dim: int | None = None  # MLA: kv_lora_rank + qk_rope_head_dim per token, layer
    # DeepSeek-V4's compressed attention (all layers, one GPU of a TP group: its caches
    # are replicated over TP; the layout is fixed, whatever the KV dtype): bytes per token
    # of its compressed and indexer caches, bytes per sequence of its window caches
    # (sliding window and compressor states), and those windows' bytes per token were
    # they not freed (the bound without a length).
    compressed_kv_bytes_per_token: float = 0.0
    window_kv_bytes_per_sequence: int = 0
    window_kv_bytes_per_token: float = 0.0
    shared_experts: int = 0
    moe_intermediate_size: int | None = None
    quantization: str | None = None  # the checkpoint's: fp8, nvfp4, mxfp4, int4, int8
    quantization_method: str | None = None  # config.json's quant_method as written
    # What the checkpoint quantizes matmul inputs to (fp8, nvfp4, mxfp4, int8), None for
    # weight-only methods: which tensor cores vLLM can use (dtype_support).
    activation_quantization: str | None = None
    weight_bytes: int | None = None  # the checkpoint's bytes (safetensors index)
    # Bytes per group of parameters, estimated (None: not derived), for a checkpoint
    # without an index: {"embeddings": n, "attention": n, ...}.
    parameter_groups: tuple[tuple[str, int], ...] = ()
    quantized_groups: tuple[str, ...] = ()  # the groups the checkpoint quantizes
    vision_parameters: int = 0  # a vision tower's (estimated from vision_config)
    # (fact, source) pairs where a fact's source differs from `source`.
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def active(self) -> float:
        """Parameters used per token (all of them for a dense model)."""
        return self.active_parameters if self.active_parameters is not None else self.parameters

    @property
    def embedding_parameters(self) -> int:
        """Input embedding plus LM head (one matrix when tied); 0 when vocab is unknown."""
        if not self.vocab_size:
            return 0
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def kv_layers(self) -> int:
        """Layers holding K and V (or MLA's latent) for every token."""
        if self.full_attention_layers is None:
            return self.num_layers
        return self.full_attention_layers

    @property
    def full_head_dim(self) -> int:
        return self.full_attention_head_dim or self.head_dim

    @property
    def full_kv_heads(self) -> int:
        return self.full_attention_kv_heads or self.num_key_value_heads

    @property
    def full_kv_width(self) -> int:
        """K plus V elements per KV head of a full-attention layer."""
        return self.full_head_dim + (self.v_head_dim or self.full_head_dim)

    @property
    def kv_width(self) -> int:
        """K plus V elements per KV head of a sliding-window layer."""
        return self.head_dim + (self.v_head_dim or self.head_dim)

    @property
    def is_mla(self) -> bool:
        return self.mla_kv_dim is not None

    def source_of(self, fact: str) -> str:
        """Where ``fact`` (a field name) came from."""
        return dict(self.sources).get(fact, self.source)


def estimated_weight_bytes(facts: ModelFacts, dtype_bytes: float) -> int:
    """A quantized checkpoint's weight bytes from its parameter groups: the quantized
    groups at :data:`QUANT_BYTES_PER_WEIGHT`, the rest (embeddings, norms, router, and
    what the method leaves out) at ``dtype_bytes``."""
    assert facts.quantization is not None
    per = QUANT_BYTES_PER_WEIGHT[facts.quantization]
    groups = dict(facts.parameter_groups)
    quantized = sum(groups.get(k, 0) for k in facts.quantized_groups)
    rest = facts.parameters - quantized
    return math.ceil(quantized * per + rest * dtype_bytes)

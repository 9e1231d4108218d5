"""A model's facts (pure): what the planner knows of a model, and how a Hugging Face
``config.json`` (with its ``model.safetensors.index.json``) turns into them.

:class:`ModelFacts` is the one shape the planner reads, whichever way the facts came:
the built-in catalog, ``spec.model.architecture``, or the model's own ``config.json``
(:func:`facts_from_hf_config`). Each fact says where it came from
(:meth:`ModelFacts.source_of`).

What ``config.json`` says beyond heads and layers, and how each is read (the field names
are those of the model families named; the rule's source is named where vLLM has one):

- **Multi-head latent attention** (DeepSeek-V3/R1, Kimi-K2, GLM-5: ``kv_lora_rank``,
  ``qk_rope_head_dim``): one latent vector of ``kv_lora_rank + qk_rope_head_dim``
  elements per token per layer, no separate K and V, the same on every tensor-parallel
  rank (vLLM's ``MLAAttentionSpec``: one KV head of that size, replicated over TP).
- **Per-layer attention types**: ``layer_types`` (gpt-oss, Qwen3.5, Gemma 3:
  ``full_attention``, ``sliding_attention``, ``linear_attention``), Gemma 2's alternation
  (even layers slide), Gemma 3's ``sliding_window_pattern``, Qwen3-Next's
  ``full_attention_interval``, Nemotron-H's ``hybrid_override_pattern`` (``*`` attention,
  ``M`` Mamba-2, ``-`` MLP, ``E`` experts), Jamba's ``attn_layer_period`` /
  ``attn_layer_offset`` (the rest Mamba-1) and Bamba's ``attn_layer_indices`` (the rest
  Mamba-2), MiniMax-Text-01's ``attn_type_list``, Kimi-Linear's
  ``linear_attn_config.kda_layers``, the Bailing hybrid's ``layer_group_size``; Falcon-H1
  runs attention and Mamba-2 in every layer. A sliding-window layer keeps at most the
  window of tokens per sequence; a linear-attention or Mamba layer keeps a fixed state per
  sequence and nothing per token: gated DeltaNet, lightning attention, Kimi delta
  attention, Mamba-2 or Mamba-1, each shaped as vLLM's ``MambaStateShapeCalculator``.
- **Chunked attention** (Llama 4: ``attention_chunk_size``, its NoPE layers from
  ``no_rope_layers`` full attention): a chunked layer holds at most the chunk of tokens
  per sequence, planned as a sliding window of that size.
- **Experts**: ``num_local_experts`` / ``num_experts`` / ``n_routed_experts`` /
  ``moe_num_experts`` (none where ``is_moe`` is false), experts per token
  (``num_experts_per_tok`` / ``experts_per_token`` / ``moe_k`` ...),
  ``moe_intermediate_size`` (one, one per layer, or ERNIE-4.5-VL's text and vision pair),
  shared experts (``n_shared_experts``, ``moe_num_shared_experts``,
  ``shared_expert_intermediate_size``) and dense layers (``first_k_dense_replace``,
  ERNIE's ``moe_layer_start_index``, Jamba's ``expert_layer_period``): total and active
  parameters.
- **MLPs**: gate, up and down, but up and down only in the families whose code builds
  two matrices (:data:`_TWO_MATRIX_MLPS`: GPT-2, Falcon, GPT-NeoX, OPT, Phi, StarCoder2 ...).
- **Field names**: the GPT-2 generation's (``n_embd``, ``n_layer``, ``d_model`` ...) as
  transformers' ``attribute_map`` reads them (:data:`_ATTRIBUTE_MAPS`). A field of a
  shape the planner does not read is refused by name, never a crash.
- **Quantization** (``quantization_config``): fp8, modelopt FP8/NVFP4, MXFP4, AWQ/GPTQ,
  compressed-tensors; weight bytes are the safetensors index's ``total_size`` where it is
  given, else estimated from the parameter groups at the method's bytes per weight.
- **Vision tower** (``vision_config``): noted, its parameters estimated from its shapes.
- A multimodal wrapper's ``text_config`` holds the language model's facts.

Where each part lives: :mod:`.facts` (:class:`ModelFacts`, the sources, the quantized
weight bytes), :mod:`.parse` (:func:`facts_from_hf_config`, which puts the rest
together), :mod:`.fields` (the field names and their checks), :mod:`.layers` (what each
layer does, the state shapes), :mod:`.params` (the parameter count and quantization) and
:mod:`.families` (the layouts of one family each). This package re-exports what the rest
of the operator imports.
"""

from __future__ import annotations

from .facts import (
    CATALOG,
    CONFIG_JSON,
    DTYPE_UNSTATED,
    MAX_CONTEXT_UNSTATED,
    QUANT_BYTES_PER_WEIGHT,
    SAFETENSORS_INDEX,
    SPEC,
    VLLM_DEFAULT_MAX_LEN,
    ModelFacts,
    estimated_weight_bytes,
)
from .fields import _TIED_BY_DEFAULT, max_context
from .parse import facts_from_hf_config

__all__ = [
    "CATALOG",
    "CONFIG_JSON",
    "DTYPE_UNSTATED",
    "MAX_CONTEXT_UNSTATED",
    "QUANT_BYTES_PER_WEIGHT",
    "SAFETENSORS_INDEX",
    "SPEC",
    "VLLM_DEFAULT_MAX_LEN",
    "_TIED_BY_DEFAULT",
    "ModelFacts",
    "estimated_weight_bytes",
    "facts_from_hf_config",
    "max_context",
]

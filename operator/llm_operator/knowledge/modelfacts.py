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
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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


# --------------------------------------------------------------------------- config.json

def _first(config: Mapping[str, Any], keys: Iterable[str]) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _refusal(c: Mapping[str, Any], key: str, problem: str) -> ValueError:
    """A config.json field of a shape the planner does not read, refused by name with the
    model type and the fix (never an exception the caller did not expect)."""
    return ValueError(f"config.json {key} {problem} (model_type {c.get('model_type')!r}), "
                      "a shape the planner does not read: give spec.model.architecture")


# The fields the planner reads as one number, each checked before it is read: a list, a
# string, a mapping or a boolean there is refused by name. intermediate_size and
# moe_intermediate_size may also be lists (_per_layer, _expert_groups), and ERNIE-4.5-VL's
# moe_num_experts and MoE layer range (text, vision) pairs (_expert_counts, _moe_layers).
_NUMBER_FIELDS = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size", "num_local_experts", "num_experts", "n_routed_experts",
    "num_experts_per_tok", "experts_per_token", "moe_topk", "moe_k", "moe_top_k",
    "top_k_experts", "n_shared_experts", "num_shared_experts", "moe_num_shared_experts",
    "moe_layer_interval", "shared_expert_intermediate_size",
    "moe_shared_expert_intermediate_size", "shared_intermediate_size", "share_expert_dim",
    "dense_intermediate_size", "intermediate_size_mlp", "moe_latent_size",
    "first_k_dense_replace", "decoder_sparse_step", "interleave_moe_layer_step",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "global_head_dim", "num_global_key_value_heads", "full_attention_interval",
    "sliding_window", "sliding_window_pattern", "sliding_window_size", "swa_num_key_value_heads",
    "swa_num_attention_heads", "swa_head_dim", "swa_v_head_dim",
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim", "linear_conv_kernel_dim", "mamba_num_heads", "mamba_head_dim",
    "ssm_state_size", "mamba_d_state", "n_groups", "mamba_n_groups", "conv_kernel",
    "mamba_d_conv", "index_head_dim", "index_n_heads", "o_lora_rank", "o_groups",
    "hc_mult", "num_hash_layers", "attn_layer_period", "attn_layer_offset",
    "expert_layer_period", "expert_layer_offset", "mamba_n_heads", "mamba_expand",
    "num_experts_per_token", "layer_group_size", "attention_chunk_size",
    "num_kv_heads_for_linear_attn", "linear_num_heads", "linear_head_dim", "mamba_d_ssm",
    "vocab_size_per_layer_input", "hidden_size_per_layer_input", "altup_num_inputs",
    "laurel_rank", "num_kv_shared_layers",
)
_LIST_OR_NUMBER_FIELDS = ("intermediate_size", "moe_intermediate_size",
                          "expert_intermediate_size", "moe_num_experts",
                          "moe_layer_start_index", "moe_layer_end_index")


def _check_shapes(c: Mapping[str, Any]) -> None:
    """Refuse, by name, a field the planner reads as a number that is not one."""
    for key in _NUMBER_FIELDS + _LIST_OR_NUMBER_FIELDS:
        value = c.get(key)
        if value is None or _is_number(value) or (
                key in _LIST_OR_NUMBER_FIELDS and isinstance(value, list)):
            continue
        shown = json.dumps(value) if not isinstance(value, Mapping | list) else \
            f"a {'mapping' if isinstance(value, Mapping) else 'list'}"
        raise _refusal(c, key, f"is {shown[:40]}, not a number")


_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                "max_sequence_length", "model_max_length")


def max_context(config: Mapping[str, Any]) -> int:
    """Longest context as vLLM derives it (``_get_and_verify_max_len``): the smallest
    length key, times the rope scaling factor except for rope types that already state
    the length; YaRN from its ``original_max_position_embeddings``."""
    lengths = [int(config[k]) for k in _LENGTH_KEYS if isinstance(config.get(k), int | float)]
    if not lengths:
        # Bloom (ALiBi) and the Mamba models name no length: vLLM assumes 2048 and warns
        # (config/model.py, _get_and_verify_max_len: default_max_len); the fact's source
        # says so (MAX_CONTEXT_UNSTATED).
        return VLLM_DEFAULT_MAX_LEN
    length = min(lengths)
    scaling = config.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type", scaling.get("type"))
    if scaling.get("factor") and rope_type not in (None, "default", "su", "longrope", "llama3"):
        length = int(scaling.get("original_max_position_embeddings", length) * scaling["factor"])
    return length


def _text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's config: a multimodal wrapper's ``text_config`` (or
    ``llm_config``), with the wrapper's dtype, quantization and tying where the inner one
    does not say."""
    for key in ("text_config", "llm_config", "language_config"):
        inner = config.get(key)
        if "num_hidden_layers" not in config and isinstance(inner, Mapping):
            merged = dict(inner)
            for outer in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
                if outer in config and outer not in merged:
                    merged[outer] = config[outer]
            return merged
    return dict(config)


# transformers' attribute_map of the config classes that name the standard fields their
# own way (src/transformers/models/<type>/configuration_<type>.py, transformers 4.57 and
# 5): config.hidden_size and the rest read these keys. transformers is not a dependency
# of the operator (its image stays small), hence this table of the types vLLM serves.
_GPT2_NAMES = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
               "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"}
_ATTRIBUTE_MAPS: dict[str, dict[str, str]] = {
    "gpt2": _GPT2_NAMES,  # GPT2Config
    "gpt_bigcode": _GPT2_NAMES,  # GPTBigCodeConfig (StarCoder)
    "gptj": _GPT2_NAMES,  # GPTJConfig
    "mpt": {"num_attention_heads": "n_heads", "hidden_size": "d_model",  # MptConfig
            "num_hidden_layers": "n_layers"},
    "dbrx": {"num_attention_heads": "n_heads", "hidden_size": "d_model",  # DbrxConfig
             "num_hidden_layers": "n_layers", "max_position_embeddings": "max_seq_len"},
    # BloomConfig; its __init__ also takes n_embed for hidden_size.
    "bloom": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head",
              "hidden_size": "n_embed"},
}

# The attention-free families vLLM serves (model type -> (the Mamba its model builds,
# the Jamba / Nemotron-H names the state rules read, from the family's own)), as vLLM
# 0.32's model reads each config: mamba.py (MambaForCausalLM, also FalconMamba's):
# MambaMixer of hf_config.intermediate_size (MambaConfig: expand x hidden_size),
# state_size, conv_kernel, time_step_rank ("auto": ceil(hidden / 16)); mamba2.py
# (Mamba2ForCausalLM): MambaMixer2 of expand x hidden_size, num_heads, head_dim,
# state_size, n_groups, conv_kernel. Every layer a Mamba mixer and one RMSNorm, no
# attention, no MLP.
_MAMBA1_NAMES = {"mamba_expand": "expand", "mamba_d_state": "state_size",
                 "mamba_d_conv": "conv_kernel", "mamba_dt_rank": "time_step_rank"}
_MAMBA_ONLY: dict[str, tuple[str, dict[str, str]]] = {
    "mamba": ("mamba1", _MAMBA1_NAMES),
    "falcon_mamba": ("mamba1", _MAMBA1_NAMES),
    "mamba2": ("mamba2", {"mamba_expand": "expand", "mamba_num_heads": "num_heads",
                          "mamba_head_dim": "head_dim", "ssm_state_size": "state_size"}),
}

# The model types whose transformers config class ties the LM head to the input
# embedding when config.json does not write tie_word_embeddings (the class default
# True; every other class's is False), as vLLM reads the loaded config's
# tie_word_embeddings. Generated from transformers 5.19.0 for the model types (and their
# text configs) the corpus of vLLM's served types holds (tests/support/vllm_corpus.py
# writes the classes' defaults; tests/vllm/test_corpus_from_installed.py fails if this
# set differs from the installed transformers').
_TIED_BY_DEFAULT = frozenset({
    "bloom", "cohere", "cohere2", "cohere2_moe", "cohere2_vision", "cohere_compass_text",
    "diffusion_gemma", "diffusion_gemma_text", "ernie4_5", "ernie4_5_moe",
    "ernie4_5_vl_moe", "ernie4_5_vl_moe_text", "falcon", "falcon_mamba", "gemma",
    "gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "gemma4",
    "gemma4_text", "gemma4_unified", "gemma4_unified_text", "gpt2", "gpt_bigcode",
    "granite_swa", "hunyuan_vl", "hunyuan_vl_text", "internvl", "lfm2", "lfm2_moe",
    "lfm2_vl", "mamba", "minicpm3", "mistral3", "opt", "paddleocr_vl",
    "paddleocr_vl_text", "paligemma", "qwen3_vl_moe_text", "shieldgemma2", "smollm3",
    "starcoder2", "vaultgemma", "zamba2",
})


def _tied(c: Mapping[str, Any], outer_type: Any = None) -> bool:
    """Whether the LM head is the input embedding: config.json's tie_word_embeddings
    where written (the text config's, else the wrapper's), else the config class's
    default (:data:`_TIED_BY_DEFAULT`, by the text config's model type, else the
    wrapper's)."""
    if c.get("tie_word_embeddings") is not None:
        return bool(c["tie_word_embeddings"])
    return str(c.get("model_type") or outer_type) in _TIED_BY_DEFAULT


# The families whose MLP is two matrices, up and down with the activation between and no
# gate, as each model's code builds it: vLLM 0.32's own model file where it has one,
# else transformers' modeling_<type>.py (vLLM serves those through its Transformers
# backend, or served them until the version named in its registry). Every other MLP is
# gated: gate, up and down (Nemotron-H's squared-ReLU layers are read from its pattern).
_TWO_MATRIX_MLPS = frozenset({
    "gpt2",  # vLLM gpt2.py, GPT2MLP: c_fc, c_proj
    "gpt_bigcode",  # transformers GPTBigCodeMLP: c_fc, c_proj
    "gptj",  # vLLM gpt_j.py, GPTJMLP: fc_in, fc_out
    "mpt",  # transformers MptMLP: up_proj, down_proj (vLLM's mpt.py until 0.28)
    "bloom",  # vLLM bloom.py, BloomMLP: dense_h_to_4h, dense_4h_to_h
    "falcon",  # vLLM falcon.py, FalconMLP: dense_h_to_4h, dense_4h_to_h
    "gpt_neox",  # transformers GPTNeoXMLP: dense_h_to_4h, dense_4h_to_h
    "opt",  # vLLM opt.py, OPTDecoderLayer: fc1, fc2
    "phi",  # transformers PhiMLP: fc1, fc2
    "starcoder2",  # transformers Starcoder2MLP: c_fc, c_proj
    "persimmon",  # transformers PersimmonMLP: dense_h_to_4h, dense_4h_to_h (vLLM until 0.25)
    "nemotron",  # vLLM nemotron.py, NemotronMLP: up_proj, down_proj (relu2)
})


def _standard_names(c: dict[str, Any]) -> dict[str, Any]:
    """``c`` with the standard field names its config class maps (a name the config
    writes itself wins), and what those classes and vLLM's models derive the same way:

    - GPT-2, GPT-BigCode, GPT-J: the MLP is ``n_inner``, or 4 x ``n_embd`` where null;
      GPT-BigCode's ``multi_query`` (its default: true) is one KV head (vLLM's
      gpt_bigcode.py, GPTBigCodeAttention: ``num_kv_heads = 1 if multi_query``).
    - MPT: the MLP is ``expansion_ratio`` x ``d_model``; MPT and DBRX give their KV heads
      as ``attn_config.kv_n_heads`` (DbrxConfig sets num_key_value_heads from it; vLLM's
      mpt.py reads it, all heads where absent).
    - DBRX: ``ffn_config`` holds the experts: ``moe_num_experts``, ``moe_top_k``,
      ``ffn_hidden_size`` each (DbrxFFNConfig; vLLM's dbrx.py).
    - OPT: the MLP is ``ffn_dim`` (vLLM's opt.py, OPTDecoderLayer's fc1).
    - Falcon: KV heads as vLLM's falcon.py (FalconAttention) reads them:
      ``num_kv_heads`` under ``new_decoder_architecture`` (Falcon-40B/180B), else one
      where ``multi_query`` (Falcon-7B; FalconConfig's default: true), else all heads;
      its embeddings tied unless ``tie_word_embeddings`` says otherwise
      (FalconForCausalLM: the first Falcons' configs do not write it)."""
    mt = str(c.get("model_type"))
    if mt == "falcon_h1":  # its layers_block_type is "hybrid" for every layer
        return {k: v for k, v in c.items() if k != "layers_block_type"}
    if mt in _MAMBA_ONLY:
        out = dict(c)
        for standard, own in _MAMBA_ONLY[mt][1].items():
            if out.get(standard) is None and out.get(own) is not None:
                out[standard] = out[own]
        return out
    if mt == "longcat_flash":
        return _longcat_flash_names(c)
    if mt not in _ATTRIBUTE_MAPS and mt not in ("opt", "falcon"):
        return c
    out = dict(c)
    for standard, own in _ATTRIBUTE_MAPS.get(mt, {}).items():
        if out.get(standard) is None and out.get(own) is not None:
            out[standard] = out[own]
    if mt == "opt" and out.get("intermediate_size") is None:
        out["intermediate_size"] = out.get("ffn_dim")
    if mt == "falcon" and out.get("num_key_value_heads") is None:
        if out.get("new_decoder_architecture"):
            out["num_key_value_heads"] = out.get("num_kv_heads")
        elif out.get("multi_query", True):
            out["num_key_value_heads"] = 1
    if mt == "falcon" and out.get("tie_word_embeddings") is None:
        out["tie_word_embeddings"] = True  # vLLM's falcon.py: "True by default"
    if mt in ("gpt2", "gpt_bigcode", "gptj") and out.get("intermediate_size") is None:
        out["intermediate_size"] = out.get("n_inner")  # None: 4 x hidden, the default
    if mt == "gpt_bigcode" and out.get("multi_query", True) and \
            out.get("num_key_value_heads") is None:
        out["num_key_value_heads"] = 1
    if mt == "mpt" and out.get("intermediate_size") is None and _is_number(out.get("d_model")):
        out["intermediate_size"] = int(out.get("expansion_ratio") or 4) * int(out["d_model"])
    attn = out.get("attn_config")
    if isinstance(attn, Mapping) and out.get("num_key_value_heads") is None:
        out["num_key_value_heads"] = attn.get("kv_n_heads")
    ffn = out.get("ffn_config")
    if mt == "dbrx" and isinstance(ffn, Mapping):
        for standard, own in (("num_local_experts", "moe_num_experts"),
                              ("num_experts_per_tok", "moe_top_k"),
                              ("moe_intermediate_size", "ffn_hidden_size")):
            if out.get(standard) is None:
                out[standard] = ffn.get(own)
    return out


def _longcat_flash_names(c: dict[str, Any]) -> dict[str, Any]:
    """LongCat-Flash as transformers' LongcatFlashConfig reads it: ``num_layers``
    decoder layers, each of two sublayers (``num_hidden_layers`` is always 2 x
    ``num_layers``), ``ffn_hidden_size`` and ``expert_ffn_hidden_size`` through its
    attribute_map. vLLM's longcat_flash.py (FlashDecoderLayer) builds in each decoder
    layer two MLA attentions (self_attn[0], [1]: two caches), two dense MLPs
    (mlps[0], [1]) and one MoE of n_routed_experts (its zero_expert_num identity experts
    hold no weights); :func:`_moe_layers` puts the MoE in every first sublayer."""
    out = dict(c)
    if out.get("num_hidden_layers") is None and _is_number(out.get("num_layers")):
        out["num_hidden_layers"] = 2 * int(out["num_layers"])
    for standard, own in (("intermediate_size", "ffn_hidden_size"),
                          ("moe_intermediate_size", "expert_ffn_hidden_size")):
        if out.get(standard) is None:
            out[standard] = out.get(own)
    return out


def _is_pattern(c: Mapping[str, Any]) -> bool:
    return bool(c.get("hybrid_override_pattern") or c.get("layers_block_type"))


@dataclass(frozen=True)
class _Layers:
    full: int
    sliding: int
    window: int | None
    state: int
    state_kind: str | None
    attention: int  # layers with attention weights (full + sliding)
    moe: int  # layers with experts
    mlp: int  # layers with a dense MLP
    # Which layers those are (0-based), where known: per-layer widths are summed over them.
    moe_at: tuple[int, ...] = ()
    mlp_at: tuple[int, ...] = ()


def _layer_plan(c: Mapping[str, Any], layers: int, experts: int | None) -> _Layers:
    """Per-layer types from whichever field the family uses."""
    window = c.get("sliding_window") if isinstance(c.get("sliding_window"), int) else None
    if c.get("model_type") == "falcon_h1":
        # Falcon-H1: every layer runs attention and a Mamba-2 mixer side by side, then an
        # MLP (vLLM's falcon_h1.py, FalconH1ParallelHybrid; FalconH1Config's
        # layers_block_type is "hybrid" for each).
        return _Layers(layers, 0, None, layers, "mamba2", layers, 0, layers, (),
                       tuple(range(layers)))
    pattern = c.get("hybrid_override_pattern")
    blocks = c.get("layers_block_type")
    if isinstance(blocks, list) and blocks and not pattern:  # Nemotron-H, newer configs
        pattern = "".join(_BLOCK_LETTERS.get(str(b), "?") for b in blocks)
        if "?" in pattern:
            odd = next(str(b) for b in blocks if str(b) not in _BLOCK_LETTERS)
            raise ValueError(f"config.json layers_block_type has {odd!r}, a block the "
                             "planner does not model (it knows " + ", ".join(_BLOCK_LETTERS)
                             + "): give spec.model.architecture")
    if isinstance(pattern, str) and pattern:  # Nemotron-H: one character per layer
        attn, mamba = pattern.count("*"), pattern.count("M")
        moe_at = tuple(i for i, ch in enumerate(pattern) if ch == "E")
        mlp_at = tuple(i for i, ch in enumerate(pattern) if ch == "-")
        return _Layers(attn, 0, None, mamba, "mamba2" if mamba else None, attn, len(moe_at),
                       len(mlp_at), moe_at, mlp_at)
    types = c.get("layer_types")
    hybrid = c.get("hybrid_layer_pattern")
    if isinstance(hybrid, list) and len(hybrid) == layers and not isinstance(types, list):
        # MiMo-V2 (vLLM model_executor/models/mimo_v2.py, MiMoV2FlashDecoderLayer.
        # is_compressed_softmax_layer): 1 = a sliding layer of sliding_window_size.
        window = int(c.get("sliding_window_size") or window or 0) or None
        types = ["sliding_attention" if h == 1 else "full_attention" for h in hybrid]
    if not isinstance(types, list) or len(types) != layers:
        types = _linear_layer_types(c, layers)
    if types is None:
        interval = c.get("full_attention_interval")
        mt = str(c.get("model_type", ""))
        indices, period = c.get("attn_layer_indices"), c.get("attn_layer_period")
        chunk, nope = c.get("attention_chunk_size"), c.get("no_rope_layers")
        if chunk and (mt.startswith("llama4") or isinstance(nope, list) and nope):
            # Llama 4: RoPE layers attend within chunks, NoPE layers (no_rope_layers 0)
            # to everything (vLLM's llama4.py: ChunkedLocalAttention unless nope);
            # transformers' Llama4TextConfig fills an empty list with every
            # no_rope_layer_interval-th (4th) layer NoPE.
            if not (isinstance(nope, list) and len(nope) == layers):
                every = int(c.get("no_rope_layer_interval") or 4)
                nope = [int((i + 1) % every != 0) for i in range(layers)]
            types = ["chunked_attention" if n else "full_attention" for n in nope]
        elif isinstance(indices, list):  # Bamba: these attention, the rest Mamba-2
            types = ["full_attention" if i in indices else "mamba" for i in range(layers)]
        elif isinstance(period, int) and period > 0:  # Jamba: 1 in attn_layer_period
            offset = int(c.get("attn_layer_offset") or 0)
            types = ["full_attention" if i % period == offset else "mamba"
                     for i in range(layers)]
        elif isinstance(interval, int) and interval > 0:  # Qwen3-Next: 3 linear, 1 full
            types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                     for i in range(layers)]
        elif mt == "gemma2" and window:  # Gemma 2: even layers slide
            types = ["sliding_attention" if i % 2 == 0 else "full_attention"
                     for i in range(layers)]
        elif mt.startswith("gemma3") and window:  # Gemma 3: 5 sliding, then 1 full
            every = int(c.get("sliding_window_pattern") or 6)
            types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
                     for i in range(layers)]
        elif window and c.get("use_sliding_window", True) is not False:
            # Mistral v0.1: every layer slides (Qwen2/3 say use_sliding_window false).
            max_len = _first(c, ("max_position_embeddings",)) or 0
            if window < max_len:
                types = ["sliding_attention"] * layers
    if types is None:
        types = ["full_attention"] * layers
    kinds = [str(t) for t in types]
    unknown = sorted({k for k in kinds if k not in _LAYER_KINDS})
    if unknown:
        raise ValueError(f"config.json layer_types has {unknown[0]!r}, a layer type the "
                         "planner does not model (it knows " + ", ".join(sorted(_LAYER_KINDS))
                         + "): give spec.model.architecture")
    sliding = sum(_LAYER_KINDS[k] == "sliding" for k in kinds)
    window = _chunk_window(c, kinds, window)
    state = sum(_LAYER_KINDS[k] == "state" for k in kinds)
    full = layers - sliding - state
    if sliding and not window:
        raise ValueError("config.json has sliding-window layers in layer_types but no "
                         "sliding_window size: give spec.model.architecture")
    kind = (_mamba_kind(c) if any(k == "mamba" for k in kinds) else _linear_kind(c)) \
        if state else None
    moe_at = _moe_layers(c, layers) if experts else ()
    mlp_at = tuple(i for i in range(layers) if i not in frozenset(moe_at))
    if c.get("model_type") == "longcat_flash":  # a dense MLP in every sublayer too
        mlp_at = tuple(range(layers))
    return _Layers(full, sliding, window if sliding else None, state, kind,
                   full + sliding, len(moe_at), len(mlp_at), moe_at, mlp_at)


# deepseek_sparse_attention (GLM-5.2+): MLA layers whose lightning indexer's small key
# cache (index_head_dim fp8) is not counted.
# Nemotron-H's layers_block_type labels, as hybrid_override_pattern letters: the older
# configs' "mamba" / "attention", and transformers 5's NemotronHConfig
# ("linear_attention" for the Mamba-2 layers, "full_attention": its _pattern_to_list;
# vLLM's nemotron_h.py reads the pattern back through the class's
# hybrid_override_pattern property).
_BLOCK_LETTERS = {"mamba": "M", "linear_attention": "M", "attention": "*",
                  "full_attention": "*", "mlp": "-", "moe": "E"}
_LAYER_KINDS = {"full_attention": "full", "attention": "full", "global": "full",
                "deepseek_sparse_attention": "full",
                "sliding_attention": "sliding", "chunked_attention": "sliding",
                "local": "sliding", "linear_attention": "state", "mamba": "state"}


def _moe_layers(c: Mapping[str, Any], layers: int) -> tuple[int, ...]:
    """Layers with experts (0-based): all but DeepSeek's ``first_k_dense_replace`` dense
    ones, every ``moe_layer_freq`` / ``decoder_sparse_step`` / Llama-4's
    ``interleave_moe_layer_step``-th, none of Qwen's ``mlp_only_layers``; Jamba's every
    ``expert_layer_period``-th from ``expert_layer_offset``. ERNIE-4.5 as
    vLLM's ernie45_moe.py (Ernie4_5_MoeDecoderLayer) builds it: layers
    ``moe_layer_start_index`` to ``moe_layer_end_index`` (-1: the last, as transformers'
    Ernie4_5_MoeConfig reads it) whose ``(i + 1) % moe_layer_interval == 0``; for
    ERNIE-4.5-VL's (text, vision) pairs, the widest range (Ernie4_5_VLMoeDecoderLayer);
    transformers 5 writes ERNIE-4.5-VL's as ``mlp_layer_types`` (``sparse``)."""
    if c.get("model_type") == "longcat_flash":  # one MoE per two sublayers
        return tuple(range(0, layers, 2))
    period = c.get("expert_layer_period")
    if isinstance(period, int) and period > 0:  # Jamba (JambaConfig.layers_num_experts)
        offset = int(c.get("expert_layer_offset") or 0)
        return tuple(i for i in range(layers) if i % period == offset)
    kinds = c.get("mlp_layer_types")
    if isinstance(kinds, list) and len(kinds) == layers:
        return tuple(i for i, k in enumerate(kinds) if str(k) in ("sparse", "moe"))
    if c.get("moe_layer_start_index") is not None or c.get("moe_layer_end_index") is not None:
        start = min(int(v) for v in _listed(c.get("moe_layer_start_index") or 0))
        end_raw = c.get("moe_layer_end_index")
        ends = [int(v) for v in _listed(-1 if end_raw is None else end_raw)]
        end = max(layers - 1 if e < 0 else e for e in ends)
        every = int(c.get("moe_layer_interval") or 1)
        return tuple(i for i in range(start, min(end, layers - 1) + 1) if (i + 1) % every == 0)
    first = int(c.get("first_k_dense_replace") or 0)
    freq = c.get("moe_layer_freq")
    if isinstance(freq, list):  # MiniMax-M3, MiMo-V2: 1 for a layer with experts
        return tuple(i for i, f in enumerate(freq[:layers]) if f)
    step = int(_first(c, ("moe_layer_freq", "decoder_sparse_step",
                          "interleave_moe_layer_step")) or 1)
    only_mlp = set(c.get("mlp_only_layers") or [])
    return tuple(i for i in range(first, layers)
                 if (step <= 1 or (i + 1) % step == 0) and i not in only_mlp)


def _state_elements(c: Mapping[str, Any], kind: str | None) -> tuple[int, int]:
    """A linear-attention or Mamba layer's state per sequence, elements, and of them the
    conv state's (vLLM's ``MambaStateShapeCalculator``: conv state (kernel - 1) x conv
    channels, plus the recurrent state)."""
    if kind == "mamba2":  # Nemotron-H, Bamba, Granite-4.0-H, Falcon-H1
        heads, head_dim, state, groups, kernel = _mamba2_shape(c)
        conv = (kernel - 1) * (_mamba2_inner(c, heads, head_dim) + 2 * groups * state)
        return conv + heads * head_dim * state, conv
    if kind == "lightning":  # linear_attention_state_shape: heads x head x head, no conv
        heads, head_dim = _lightning_shape(c)
        return heads * head_dim * head_dim, 0
    if kind == "kda":  # kda_state_shape: conv (kernel - 1) x 3 x proj; heads x head x head
        heads, head_dim, kernel = _kda_shape(c)
        conv = (kernel - 1) * 3 * heads * head_dim
        return conv + heads * head_dim * head_dim, conv
    if kind == "mamba1":  # Jamba: MambaStateShapeCalculator.mamba1_state_shape
        inner, state, kernel, _rank = _mamba1_shape(c)
        conv = (kernel - 1) * inner
        return conv + inner * state, conv
    if kind == "linear_attention":  # Qwen3-Next / 3.5 gated DeltaNet
        k_heads = int(c.get("linear_num_key_heads") or 0)
        v_heads = int(c.get("linear_num_value_heads") or 0)
        k_dim = int(c.get("linear_key_head_dim") or 0)
        v_dim = int(c.get("linear_value_head_dim") or 0)
        kernel = int(c.get("linear_conv_kernel_dim") or 4)
        conv = (kernel - 1) * (2 * k_heads * k_dim + v_heads * v_dim)
        return conv + v_heads * k_dim * v_dim, conv
    return 0, 0


def _chunk_window(c: Mapping[str, Any], kinds: list[str], window: int | None) -> int | None:
    """The window of the sliding layers, chunked ones included: a chunked-attention layer
    (Llama 4) holds at most ``attention_chunk_size`` tokens of K and V per sequence, plus
    the tokens in flight (vLLM's ChunkedLocalAttentionSpec.
    max_admission_blocks_per_request: cdiv(chunk + in-flight, block), the bound a
    sliding window of that size has), so it is planned as one. Both kinds with other
    sizes are refused by name."""
    if "chunked_attention" not in kinds:
        return window
    chunk = c.get("attention_chunk_size")
    if not isinstance(chunk, int) or chunk <= 0:
        raise ValueError("config.json has chunked-attention layers in layer_types but no "
                         "attention_chunk_size: give spec.model.architecture")
    if window and window != chunk and any(k != "chunked_attention" and
                                          _LAYER_KINDS[k] == "sliding" for k in kinds):
        raise ValueError(f"config.json has sliding-window layers of {window} tokens and "
                         f"chunked-attention layers of {chunk}: two windows the planner does "
                         "not model; give spec.model.architecture")
    return chunk


def _linear_layer_types(c: Mapping[str, Any], layers: int) -> list[str] | None:
    """Per-layer types of the linear-attention hybrids that do not write ``layer_types``
    (their published configs; transformers 5 writes ``layer_types`` for each):
    MiniMax-Text-01's ``attn_type_list`` (0 lightning, 1 softmax: vLLM 0.23's
    minimax_text_01.py), Kimi-Linear's ``linear_attn_config.kda_layers`` (1-based:
    vLLM's transformers_utils/configs/kimi_linear.py, KimiLinearConfig.is_kda_layer)
    and the Bailing hybrid's ``layer_group_size`` (every group's last layer full
    attention, the others lightning: vLLM's bailing_moe_linear.py, is_linear_layer)."""
    kinds = c.get("attn_type_list")
    if isinstance(kinds, list) and len(kinds) == layers:
        return ["linear_attention" if k == 0 else "full_attention" for k in kinds]
    linear = c.get("linear_attn_config")
    if isinstance(linear, Mapping) and isinstance(linear.get("kda_layers"), list):
        kda = {int(i) for i in linear["kda_layers"]}
        return ["linear_attention" if i + 1 in kda else "full_attention"
                for i in range(layers)]
    group = c.get("layer_group_size")
    if isinstance(group, int) and group > 0:
        return ["full_attention" if (i + 1) % group == 0 else "linear_attention"
                for i in range(layers)]
    return None


# The families whose linear attention is lightning attention (a decayed linear state,
# no convolution): MiniMax-Text-01 and the Bailing hybrid (Ling/Ring 2.5+).
_LIGHTNING = frozenset({"minimax", "minimax_text_01", "bailing_hybrid", "bailing_moe_linear"})


def _linear_kind(c: Mapping[str, Any]) -> str:
    """What a config's ``linear_attention`` layers are, as each family's vLLM model builds
    them: Granite-4.0-H's are Mamba-2 (granitemoehybrid.py maps "linear_attention" to
    GraniteMoeHybridMambaDecoderLayer), Kimi-Linear's Kimi delta attention ("kda":
    kimi_gdn_linear_attn.py), MiniMax-Text-01's and the Bailing hybrid's lightning
    attention ("lightning"), the rest gated DeltaNet (Qwen3-Next, Qwen3.5)."""
    mt = str(c.get("model_type"))
    if _first(c, ("mamba_n_heads", "mamba_num_heads")) is not None \
            and c.get("linear_num_value_heads") is None:
        return "mamba2"
    if mt == "kimi_linear" or isinstance(c.get("linear_attn_config"), Mapping):
        return "kda"
    if mt in _LIGHTNING or c.get("attn_type_list") is not None \
            or c.get("layer_group_size") is not None:
        return "lightning"
    return "linear_attention"


def _lightning_shape(c: Mapping[str, Any]) -> tuple[int, int]:
    """(heads, head size) of a lightning-attention layer: MiniMax-Text-01
    num_attention_heads of head_dim (vLLM 0.23's MiniMaxText01LinearAttention); the
    Bailing hybrid num_kv_heads_for_linear_attn (else num_attention_heads) of
    hidden_size / heads (transformers' BailingHybridLightningAttention; vLLM's
    BailingMoELinearAttention reads head_dim, which the published configs give as that,
    while transformers 5's BailingHybridConfig sets head_dim to MLA's qk_rope_head_dim)."""
    hidden = int(c["hidden_size"])
    if str(c.get("model_type")).startswith("bailing") or c.get("layer_group_size"):
        heads = int(c.get("num_kv_heads_for_linear_attn") or c["num_attention_heads"])
        return heads, hidden // heads
    heads = int(c["num_attention_heads"])
    return heads, int(c.get("head_dim") or hidden // heads)


def _kda_shape(c: Mapping[str, Any]) -> tuple[int, int, int]:
    """(heads, head size, conv kernel) of Kimi delta attention: the published config's
    ``linear_attn_config`` (num_heads, head_dim, short_conv_kernel_size, as vLLM reads
    them), or transformers 5's KimiLinearConfig linear_num_heads, linear_head_dim,
    linear_conv_kernel_dim (defaults 32, 128, 4)."""
    linear = c.get("linear_attn_config")
    own = linear if isinstance(linear, Mapping) else {}
    heads = _first(own, ("num_heads",)) or c.get("linear_num_heads") or 32
    head_dim = _first(own, ("head_dim",)) or c.get("linear_head_dim") or 128
    kernel = _first(own, ("short_conv_kernel_size",)) or c.get("linear_conv_kernel_dim") or 4
    return int(heads), int(head_dim), int(kernel)


def _mamba_kind(c: Mapping[str, Any]) -> str:
    """Which Mamba a config's Mamba layers are: Jamba's are Mamba-1 (vLLM's jamba.py builds
    MambaMixer), the others' Mamba-2 (MambaMixer2: Nemotron-H, Bamba, Granite-4.0-H)."""
    return "mamba1" if str(c.get("model_type")) == "jamba" else "mamba2"


def _auto(value: Any, default: int) -> int:
    """A size config.json may write as ``"auto"`` (the config class computes it)."""
    return default if value in (None, "auto") else int(value)


def _mamba2_shape(c: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """(heads, head size, state size, groups, conv kernel) of a Mamba-2 layer under each
    family's keys: Nemotron-H mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups,
    conv_kernel; Bamba and Granite-4.0-H (BambaConfig, GraniteMoeHybridConfig)
    mamba_n_heads, mamba_d_head ("auto": mamba_expand x hidden / heads), mamba_d_state,
    mamba_n_groups, mamba_d_conv."""
    heads = int(_first(c, ("mamba_num_heads", "mamba_n_heads")) or 0)
    inner = int(c.get("mamba_expand") or 2) * int(c["hidden_size"])
    if c.get("model_type") == "falcon_h1" and _is_number(c.get("mamba_d_ssm")):
        inner = int(c["mamba_d_ssm"])  # FalconH1Config: "auto" = mamba_d_ssm / heads
    head_dim = _auto(_first(c, ("mamba_head_dim", "mamba_d_head")),
                     inner // heads if heads else 0)
    state = int(_first(c, ("ssm_state_size", "mamba_d_state")) or 0)
    groups = int(_first(c, ("n_groups", "mamba_n_groups")) or 1)
    kernel = int(_first(c, ("conv_kernel", "mamba_d_conv")) or 4)
    return heads, head_dim, state, groups, kernel


def _mamba2_inner(c: Mapping[str, Any], heads: int, head_dim: int) -> int:
    """A Mamba-2 mixer's intermediate size (its conv channels, less B and C): Falcon-H1's
    ``mamba_d_ssm`` where set (vLLM's falcon_h1.py, FalconH1SSMDecoderLayer), else heads x
    head size (mamba_expand x hidden in the configs that pass the classes' checks)."""
    if c.get("model_type") == "falcon_h1" and _is_number(c.get("mamba_d_ssm")):
        return int(c["mamba_d_ssm"])
    return heads * head_dim


def _gemma3n_extras(c: Mapping[str, Any], g: dict[str, int], kv_heads: int,
                    head_dim: int) -> None:
    """Gemma-3n's weights beyond a decoder's, as vLLM 0.32's gemma3n.py builds them (added
    to ``g``): the per-layer embeddings (Gemma3nTextModel.embed_tokens_per_layer:
    vocab_size_per_layer_input x num_hidden_layers x hidden_size_per_layer_input) and
    their projection from the hidden state (per_layer_model_projection); AltUp's
    altup_num_inputs - 1 projections in and out (hidden x hidden each); per layer the
    per-layer input gate and projection (hidden x hidden_size_per_layer_input each),
    LAuReL's two laurel_rank matrices and AltUp's router and coefficients; less the K
    and V projections of the num_kv_shared_layers last layers (Gemma3nAttention: those
    read another layer's cache and build q_proj only). Norms are not counted."""
    hidden, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    per_layer = int(c["hidden_size_per_layer_input"])
    n = int(c.get("altup_num_inputs") or 4)
    rank = int(c.get("laurel_rank") or 0)
    shared = min(int(c.get("num_kv_shared_layers") or 0), layers)
    g["embeddings"] += int(c["vocab_size_per_layer_input"]) * layers * per_layer
    g["embeddings"] += hidden * layers * per_layer + 2 * (n - 1) * hidden * hidden
    g["attention"] -= shared * hidden * kv_heads * 2 * head_dim
    g["mlp"] += layers * (2 * hidden * per_layer + 2 * hidden * rank
                          + n * n + n ** 3 + hidden * n)


def _mamba_tp_units(c: Mapping[str, Any], kind: str) -> tuple[int, int]:
    """What tensor parallelism splits in an attention-free Mamba model, as the planner's
    (heads, head size): Mamba-2's heads of head_dim (MambaMixer2 asserts num_heads %
    TP == 0); Mamba-1's channels, expand x hidden of size 1 (MambaMixer's column-
    parallel in_proj: intermediate_size % TP == 0)."""
    if kind == "mamba2":
        heads, head_dim = _mamba2_shape(c)[:2]
        return heads, head_dim
    return _mamba1_shape(c)[0], 1


def _mamba_group_units(c: Mapping[str, Any], kind: str, heads: int) -> int:
    """The planner's KV heads of a Mamba-only model (TP must divide them or be divided by
    them): Mamba-2's n_groups (MambaMixer2 asserts n_groups % TP == 0 or n_groups == 1;
    a TP above n_groups and a multiple of it passes here and not there: at most 8 GPUs a
    node, and n_groups is 8 where it is not 1), Mamba-1's channels."""
    return _mamba2_shape(c)[3] if kind == "mamba2" else heads


def _mamba1_shape(c: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(inner size, state size, conv kernel, dt rank) of a Mamba-1 layer (JambaConfig:
    mamba_expand x hidden, mamba_d_state, mamba_d_conv, mamba_dt_rank "auto" = hidden /
    16 rounded up)."""
    hidden = int(c["hidden_size"])
    return (int(c.get("mamba_expand") or 2) * hidden, int(c.get("mamba_d_state") or 16),
            int(c.get("mamba_d_conv") or 4), _auto(c.get("mamba_dt_rank"), -(-hidden // 16)))


def _state_dtype(c: Mapping[str, Any]) -> str | None:
    """The temporal state's dtype where config.json sets it, as vLLM 0.32 reads it
    (model_executor/models/config.py: NemotronHForCausalLMConfig.
    update_mamba_ssm_cache_dtype reads ``mamba_ssm_cache_dtype``,
    Qwen3_5ForConditionalGenerationConfig ``mamba_ssm_dtype``); None: the model's."""
    value = c.get("mamba_ssm_cache_dtype")
    if value in (None, "auto") and str(c.get("model_type", "")).startswith("qwen3_5"):
        value = c.get("mamba_ssm_dtype")
    return None if value in (None, "auto") else str(value)


def _quantization(c: Mapping[str, Any], hf_quant: Mapping[str, Any] | None = None
                  ) -> tuple[str | None, str | None, bool, str | None]:
    """(bytes class, quant_method as written, attention quantized?, activations) of the
    checkpoint: config.json's ``quantization_config``, else modelopt's
    ``hf_quant_config.json``. Activations: what the checkpoint quantizes its matmul
    inputs to (``fp8``, ``nvfp4``, ``mxfp4``, ``int8``), None for weight-only methods
    (AWQ, GPTQ, NVFP4A16, gpt-oss's MXFP4): it decides which tensor cores the matmuls
    can use (:mod:`llm_operator.knowledge.dtype_support`)."""
    q = c.get("quantization_config")
    if not isinstance(q, Mapping) and isinstance(hf_quant, Mapping):
        inner = hf_quant.get("quantization")
        if isinstance(inner, Mapping):
            q = {"quant_method": "modelopt", **inner}
    if not isinstance(q, Mapping):
        return None, None, False, None
    method = str(q.get("quant_method") or q.get("quant_algo") or "").lower()
    skipped = " ".join(str(m) for key in ("modules_to_not_convert", "ignore",
                                          "exclude_modules", "ignored_layers")
                       for m in (q.get(key) or []))
    attention = "attn" not in skipped
    if method in ("fp8", "fbgemm_fp8"):
        # vLLM's Fp8Config and FBGEMM quantize activations to fp8 (dynamic or static).
        return "fp8", method, attention, "fp8"
    if method == "mxfp4":
        # gpt-oss: only the experts are MXFP4, and vLLM 0.32.0 runs them with bf16
        # activations by default (fused_moe/oracle/mxfp4.py, _get_priority_backends_for_
        # gpt_oss: FLASHINFER_TRTLLM_MXFP4_BF16 first, then Triton and Marlin).
        return "mxfp4", method, False, None
    if method == "fp_quant":  # FP-Quant (QuTLASS): weights and activations in forward_dtype
        fmt = "nvfp4" if "nv" in str(q.get("forward_dtype") or "mxfp4").lower() else "mxfp4"
        return fmt, method, attention, fmt
    if method in ("modelopt", "modelopt_fp4", "nvfp4"):
        algo = str(q.get("quant_algo") or method).upper()
        if algo == "MIXED_PRECISION":  # NVFP4 MLPs/experts, fp8 attention (estimated)
            algos = " ".join(str(v.get("quant_algo", "")) for v in
                             (q.get("quantized_layers") or {}).values() if isinstance(v, Mapping))
            algo = "NVFP4" if "FP4" in algos.upper() else "FP8"
        kind = "nvfp4" if "FP4" in algo else "fp8"
        return kind, method, attention, ("fp8" if "W4A8" in algo else kind)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        return ("int4" if bits == 4 else "int8"), method, attention, None
    if method == "compressed-tensors":
        fmt = str(q.get("format") or "")
        groups = q.get("config_groups") or {}
        # Mixed groups (fp8 attention, 4-bit MLPs): the narrowest, as MLPs dominate.
        members = [g for g in groups.values() if isinstance(g, Mapping)] \
            if isinstance(groups, Mapping) else []
        group = min(members, key=lambda g: int((g.get("weights") or {}).get("num_bits") or 8),
                    default={})
        weights = group.get("weights") or {}
        bits = int(weights.get("num_bits") or 8)
        act = _activations(group.get("input_activations"))
        if "nvfp4" in fmt or (bits == 4 and weights.get("type") == "float"):
            kind = "mxfp4" if "mxfp4" in fmt or weights.get("group_size") == 32 else "nvfp4"
            return kind, method, attention, act
        if bits == 4:
            return "int4", method, attention, act
        return ("fp8" if weights.get("type") == "float" or "float" in fmt else "int8"), \
            method, attention, act
    raise ValueError(
        f"config.json quantization_config.quant_method {method or '(none)'!r} is not one "
        "the planner knows (fp8, modelopt FP8/NVFP4, mxfp4, fp_quant, awq, gptq, "
        "compressed-tensors): give spec.model.architecture and spec.model.quantization")


def _activations(args: Any) -> str | None:
    """A compressed-tensors group's ``input_activations`` as a dtype name (None: the
    group quantizes weights only)."""
    if not isinstance(args, Mapping):
        return None
    bits = int(args.get("num_bits") or 8)
    if args.get("type") == "float":
        if bits == 4:
            return "mxfp4" if args.get("group_size") == 32 else "nvfp4"
        return "fp8"
    return "int8" if bits == 8 else f"int{bits}"


def _mla_params(c: Mapping[str, Any], hidden: int, heads: int) -> tuple[int, int]:
    """MLA attention weights per layer, and the latent KV size per token."""
    rank = int(c["kv_lora_rank"])
    rope = int(c.get("qk_rope_head_dim") or 64)
    nope = int(c.get("qk_nope_head_dim") or 128)
    v_dim = int(c.get("v_head_dim") or nope)
    q_rank = c.get("q_lora_rank")
    if q_rank:
        q = hidden * int(q_rank) + int(q_rank) + int(q_rank) * heads * (nope + rope)
    else:
        q = hidden * heads * (nope + rope)
    kv = hidden * (rank + rope) + rank + rank * heads * (nope + v_dim)
    return q + kv + heads * v_dim * hidden, rank + rope


def _state_params(c: Mapping[str, Any], kind: str | None, hidden: int) -> int:
    """A linear-attention or Mamba layer's weights (in and out projections), estimated;
    Mamba-1 as vLLM's MambaMixer holds them (in_proj, conv1d, x_proj, dt_proj, A, D,
    out_proj)."""
    if kind == "mamba2":
        heads, head_dim, state, groups, _kernel = _mamba2_shape(c)
        inner = _mamba2_inner(c, heads, head_dim)
        return hidden * (2 * inner + 2 * groups * state + heads) + inner * hidden
    if kind == "lightning":  # q, k, v, output gate, out (MiniMax-Text-01, Bailing)
        heads, head_dim = _lightning_shape(c)
        return 5 * hidden * heads * head_dim
    if kind == "kda":
        # kimi_gdn_linear_attn.py: in_proj q, k, v, beta, f_a; f_b; g_a, g_b; o_proj;
        # the q/k/v conv; dt_bias, A_log.
        heads, head_dim, kernel = _kda_shape(c)
        proj = heads * head_dim
        return hidden * (4 * proj + heads + 2 * head_dim) + 2 * head_dim * proj \
            + 3 * proj * kernel + proj + heads
    if kind == "mamba1":
        inner, state, kernel, rank = _mamba1_shape(c)
        return hidden * 2 * inner + inner * (kernel + 1) + inner * (rank + 2 * state) \
            + rank * inner + inner + inner * state + inner + inner * hidden
    k = int(c.get("linear_num_key_heads") or 0) * int(c.get("linear_key_head_dim") or 0)
    v = int(c.get("linear_num_value_heads") or 0) * int(c.get("linear_value_head_dim") or 0)
    return hidden * (2 * k + 2 * v) + v * hidden


def _caches_heads_not_latent(config: Mapping[str, Any], c: Mapping[str, Any]) -> bool:
    """A model with MLA's projections whose vLLM module caches full heads (MiniCPM3)."""
    archs = " ".join(str(a) for a in config.get("architectures") or [])
    return c.get("model_type") == "minicpm3" or "MiniCPM3" in archs


def _vision_parameters(config: Mapping[str, Any]) -> int:
    """A vision tower's weights from ``vision_config``, estimated: per block attention
    4 h^2 and an MLP 2 h x intermediate."""
    v = config.get("vision_config")
    if not isinstance(v, Mapping):
        return 0
    h = int(_first(v, ("hidden_size", "embed_dim", "width")) or 0)
    depth = int(_first(v, ("depth", "num_hidden_layers", "layers")) or 0)
    inter = int(_first(v, ("intermediate_size", "mlp_dim")) or 4 * h)
    return depth * (4 * h * h + 2 * h * inter)


def _attention_params(c: Mapping[str, Any], hidden: int, heads: int, kv_heads: int,
                      head_dim: int, v_dim: int) -> int:
    """One attention layer's weights: q, k, v, o (and the q, k, v biases)."""
    attn = hidden * heads * head_dim + hidden * kv_heads * (head_dim + v_dim) \
        + heads * v_dim * hidden
    if c.get("attention_bias") or c.get("model_type") == "qwen2":
        attn += heads * head_dim + kv_heads * (head_dim + v_dim)
    return attn


# Each family's name for its routed experts per MoE layer (transformers' attribute_map
# maps them all to num_experts): Mixtral, gpt-oss, Jamba num_local_experts; Qwen-MoE,
# OLMoE num_experts; DeepSeek, GLM n_routed_experts; ERNIE-4.5, Aria moe_num_experts.
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


# Shared experts (each of the routed experts' width): DeepSeek n_shared_experts, others
# num_shared_experts, ERNIE-4.5 and Aria moe_num_shared_experts.
_SHARED_KEYS = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")


def _expert_counts(c: Mapping[str, Any]) -> list[int]:
    """Routed experts per MoE layer: one count, or ERNIE-4.5-VL's (text, vision) pair;
    none where the config says the model has none (``is_moe`` / ``use_moe`` false, as
    vLLM's ernie45_moe.py reads ``use_moe``) whatever count it carries."""
    if c.get("is_moe") is False or c.get("use_moe") is False:
        return []
    key = next((k for k in _EXPERT_KEYS if c.get(k) is not None), None)
    if key is None:
        return []
    counts = [int(v) for v in _listed(c[key]) if _is_number(v)]
    if len(counts) != len(_listed(c[key])) or len(counts) not in (1, 2):
        raise _refusal(c, key, "is a list, not one count nor a (text, vision) pair")
    return counts if counts[0] else []


def _per_layer(c: Mapping[str, Any], key: str, layers: int) -> list[int] | None:
    """``key``'s value for each layer: one number for all, or a list of one per layer
    (Gemma-3n's ``intermediate_size``: transformers' Gemma3nTextConfig writes one per
    layer, and vLLM's Gemma3nDecoderLayer reads ``intermediate_size[layer_idx]``); None
    where absent. Any other shape is refused by name."""
    value = c.get(key)
    if isinstance(value, list):
        if len(value) != layers or not all(_is_number(v) for v in value):
            raise _refusal(c, key, f"is a list of {len(value)} for {layers} layers, not one "
                           "number per layer")
        return [int(v) for v in value]
    return [int(value)] * layers if value else None


def _expert_groups(c: Mapping[str, Any], layers: int, counts: list[int],
                   inter_at: list[int]) -> tuple[list[int], list[list[int]]]:
    """The routed experts of a MoE layer as groups, and each group's width per layer.

    One group for most families, of ``moe_intermediate_size`` (or the MLP's width) per
    expert, that number one per layer where it is a list of one per layer. ERNIE-4.5-VL
    has two (vLLM's ernie45_vl_moe.py, Ernie4_5_VLMoeMoE; transformers'
    Ernie4_5_VLMoeTextConfig): ``moe_intermediate_size`` ``[text, vision]``
    (``[1536, 512]``) and ``moe_num_experts`` one count for both or ``[text, vision]``;
    a text token routes to the first group only."""
    key = "moe_intermediate_size" if c.get("moe_intermediate_size") is not None \
        else "expert_intermediate_size"
    raw = c.get(key)
    if isinstance(raw, list) and len(raw) != layers:
        if len(raw) != 2 or not all(_is_number(v) for v in raw):
            raise _refusal(c, key, f"is a list of {len(raw)} for {layers} layers: neither "
                           "one width per layer nor a (text, vision) pair as ERNIE-4.5-VL's")
        widths = [int(v) for v in raw]
        return (counts * 2 if len(counts) == 1 else counts), [widths] * layers
    if len(counts) != 1:
        raise _refusal(c, "moe_num_experts", f"is a list of {len(counts)} but "
                       f"{key} gives one width: expert groups the planner does not model")
    per_layer = _per_layer(c, key, layers) if raw else None
    return counts, [[w] for w in (per_layer or inter_at)]


def _sum_at(widths: list[int], at: tuple[int, ...], count: int) -> int:
    """The sum of per-layer ``widths`` over the layers ``at`` (where unknown: ``count``
    layers of the widest, the upper bound)."""
    if at:
        return sum(widths[i] for i in at)
    return count * max(widths)


def _groups(c: Mapping[str, Any], layers: _Layers, heads: int, kv_heads: int, head_dim: int,
            experts: int | None, top_k: int | None,
            sliding_kv_heads: int | None = None) -> dict[str, int]:
    """Parameters by group (total, and the routed experts a token uses as "active")."""
    hidden = int(c["hidden_size"])
    n_layers = int(c["num_hidden_layers"])
    # intermediate_size: one for all layers, or one per layer (Gemma-3n).
    inter_at = _per_layer(c, "intermediate_size", n_layers) or [4 * hidden] * n_layers
    vocab = int(c.get("vocab_size") or 0)
    v_dim = int(c.get("v_head_dim") or head_dim)
    if c.get("kv_lora_rank"):
        attn = layers.attention * _mla_params(c, hidden, heads)[0]
    else:  # MiMo-V2's sliding layers have their own KV heads
        attn = (layers.attention - layers.sliding) * _attention_params(
            c, hidden, heads, kv_heads, head_dim, v_dim) + layers.sliding * _attention_params(
            c, hidden, heads, sliding_kv_heads or kv_heads, head_dim, v_dim)
    norms = (4 if c.get("model_type") in ("gemma2", "gemma3_text") else 2) * hidden
    # Dense layers of a MoE model (DeepSeek's first_k_dense_replace, Llama-4 Maverick's
    # interleaved ones) may have their own width.
    dense = _first(c, ("dense_intermediate_size", "intermediate_size_mlp"))
    dense_at = [int(dense)] * n_layers if experts and dense else inter_at
    # Gated MLPs have gate, up and down; Nemotron-H's squared-ReLU MLPs and the
    # _TWO_MATRIX_MLPS families' up and down.
    mats = 2 if c.get("mlp_hidden_act") == "relu2" or _is_pattern(c) \
        or c.get("model_type") in _TWO_MATRIX_MLPS else 3
    # Nemotron-3's latent experts work in moe_latent_size, with one down and one up
    # projection between it and the hidden size per MoE layer.
    latent = int(c.get("moe_latent_size") or 0)
    # Routed experts per MoE layer: (experts, width) groups, the first the one a text
    # token routes to; widths per layer where moe_intermediate_size is a list of them.
    counts = _expert_counts(c) if experts else [0]
    moe_groups, width_at = _expert_groups(c, n_layers, counts, inter_at)
    moe_at = layers.moe_at or range(layers.moe)
    expert_elems = sum(n * width_at[i][g] for i in moe_at for g, n in enumerate(moe_groups))
    active_elems = sum((top_k or 1) * width_at[i][0] for i in moe_at)
    shared_inter = int(_first(c, ("shared_expert_intermediate_size",
                                  "moe_shared_expert_intermediate_size",
                                  "shared_intermediate_size", "share_expert_dim")) or 0)
    n_shared = int(_first(c, _SHARED_KEYS) or (
        1 if str(c.get("model_type")).startswith("llama4") else 0))  # Llama-4: one, always
    shared = (layers.moe * mats * hidden * shared_inter if shared_inter
              else n_shared * mats * hidden * sum(
                  width_at[i][0] for i in moe_at))
    tied = _tied(c)
    g = {
        "embeddings": vocab * hidden * (1 if tied else 2) + hidden,
        "attention": attn,
        "state": layers.state * _state_params(c, layers.state_kind, hidden),
        "mlp": mats * hidden * _sum_at(dense_at, layers.mlp_at, layers.mlp),
        "experts": mats * (latent or hidden) * expert_elems if experts else 0,
        "active_experts": mats * (latent or hidden) * active_elems if experts else 0,
        "shared_experts": shared,
        "router": layers.moe * (hidden * sum(moe_groups) + 2 * hidden * latent),
        "norms": int(c["num_hidden_layers"]) * norms,
    }
    return g


@dataclass(frozen=True)
class _NasBlocks:
    attention: int  # layers with attention (the others' attention is a no-op)
    kv_heads: int
    mlp_layers: int
    mlp_parameters: int


def _nas_blocks(blocks: list[Any], layers: int, heads: int, hidden: int) -> _NasBlocks:
    """Nemotron NAS (DeciLM, Llama-3.3-Nemotron-Super) ``block_configs``, one per layer, as
    vLLM 0.32 builds them (model_executor/models/nemotron_nas.py, DeciLMDecoderLayer):
    ``attention.no_op`` drops a layer's attention (and its KV cache: config/model.py,
    ``get_num_layers_by_block_type`` counts ``not attention.no_op``), its KV heads are
    ``num_attention_heads // n_heads_in_group``; the MLP is ``ffn.intermediate_size`` or
    ``_ffn_mult_to_intermediate_size``: ``int(2 x ffn_mult x hidden / 3)`` rounded up to
    a multiple of 256, or none when ``ffn.no_op``. What vLLM's DeciLM does not build
    (a linear layer in place of attention or MLP, windows, sinks) is refused by name."""
    if len(blocks) != layers:
        raise ValueError(f"config.json block_configs has {len(blocks)} entries for "
                         f"num_hidden_layers {layers}: give spec.model.architecture")
    attention, mlp_layers, mlp_params, kv = 0, 0, 0, set()
    for i, block in enumerate(blocks):
        attn = block.get("attention") or {}
        ffn = block.get("ffn") or {}
        for part, name in ((attn, "attention"), (ffn, "ffn")):
            for key in ("replace_with_linear", "sparsify", "window_length", "num_sink_tokens"):
                if part.get(key):
                    raise ValueError(
                        f"config.json block_configs[{i}].{name}.{key} is set: a Nemotron "
                        "NAS block the planner does not model (vLLM's DeciLM builds "
                        "attention and MLPs or no-ops only): give spec.model.architecture")
        if not attn.get("no_op"):
            attention += 1
            kv.add(heads // int(attn.get("n_heads_in_group") or 1))
        if not ffn.get("no_op"):
            if ffn.get("ffn_mult") is not None:
                inter = int(2 * float(ffn["ffn_mult"]) * hidden / 3)
                inter += -inter % 256
            else:
                inter = int(ffn.get("intermediate_size") or 0)
            mlp_layers += 1
            mlp_params += 3 * hidden * inter
    if len(kv) > 1:
        raise ValueError(
            "config.json block_configs has attention layers with different KV heads "
            f"({', '.join(str(k) for k in sorted(kv))}): the planner models one KV head "
            "count per layer kind; give spec.model.architecture")
    return _NasBlocks(attention, kv.pop() if kv else heads, mlp_layers, mlp_params)


def _mimo_sliding_kv_heads(c: Mapping[str, Any], heads: int, head_dim: int) -> int | None:
    """MiMo-V2's sliding layers' own KV heads (``swa_num_key_value_heads``), as vLLM 0.32
    builds them (model_executor/models/mimo_v2.py, MiMoV2FlashDecoderLayer: sliding
    layers take ``swa_num_attention_heads``, ``swa_num_key_value_heads``,
    ``swa_head_dim``, ``swa_v_head_dim``). The planner models the sliding layers' own KV
    heads; sliding layers of other query heads or head sizes are refused by name."""
    if c.get("swa_num_key_value_heads") is None:
        return None
    same = {"swa_num_attention_heads": heads, "swa_head_dim": head_dim,
            "swa_v_head_dim": int(c.get("v_head_dim") or head_dim)}
    for key, value in same.items():
        if c.get(key) is not None and int(c[key]) != value:
            raise ValueError(
                f"config.json {key} is {c[key]}, not {value} as in the full-attention "
                "layers: sliding layers of another shape are not modelled; give "
                "spec.model.architecture")
    return int(c["swa_num_key_value_heads"])


# DeepSeek-V4 as vLLM 0.32 caches it on its default GPU path (FlashMLA sparse, every CUDA
# GPU but SM 12.x, which defaults to FlashInfer's plain rows; also vLLM's CPU build):
# models/deepseek_v4/attention.py, DeepseekV4Attention.get_kv_cache_spec (fp8_ds_mla: a
# 584-byte state, 448 NoPE + 128 RoPE + 8 scale bytes, pages aligned to 576 bytes;
# _resolve_dsv4_kv_cache_dtype forces fp8) and DeepseekV4Indexer (an fp8 key of
# index_head_dim + 4 bytes of scale per 128); the compressed and indexer caches in
# blocks of 256 tokens (sparse_mla.py, get_supported_kernel_block_sizes); the sliding-
# window cache in blocks of 64 (v1/attention/backends/mla/sparse_swa.py); compressor
# states (models/deepseek_v4/compressor.py: coff = 2 for ratio 4, else 1; a window of
# coff x ratio tokens in blocks of 4 (ratio 4) or 8, 2 x coff x head fp32 values a token).
_DSV4_STATE_BYTES = 584
_DSV4_ALIGN = 576
_DSV4_BLOCK = 256
_DSV4_SWA_BLOCK = 64


def _dsv4_page(raw: int) -> int:
    return -(-raw // _DSV4_ALIGN) * _DSV4_ALIGN


def _dsv4_window(window: int, block: int, token_bytes: int) -> int:
    """Bytes a decoding sequence holds in a window cache: ``cdiv(window, block) + 1``
    pages (v1/kv_cache_interface.py, SlidingWindowSpec.max_admission_blocks_per_request
    with one token in flight)."""
    return (-(-window // block) + 1) * _dsv4_page(block * token_bytes)


@dataclass(frozen=True)
class _Dsv4:
    per_token: float
    window_per_sequence: int
    window_per_token: float
    attention_parameters: int  # attention, compressors and indexers, all layers
    hyper_connection_parameters: int
    hash_router_parameters: int


def _deepseek_v4(c: Mapping[str, Any], layers: int, hidden: int, heads: int) -> _Dsv4:
    """DeepSeek-V4's caches and its attention weights (see the constants above; the
    weights from vLLM's module shapes: models/deepseek_v4/attention.py, compressor.py,
    nvidia/model.py)."""
    ratios = [max(1, int(r)) for r in (c.get("compress_ratios") or [])[:layers]]
    odd = sorted({r for r in ratios} - {1, 4, 128})
    if len(ratios) != layers or odd:
        raise ValueError(
            "config.json compress_ratios must give each of num_hidden_layers layers a ratio "
            f"of 0, 4 or 128 (vLLM's DeepSeek-V4), not {odd or len(ratios)}: give "
            "spec.model.architecture")
    head = int(c.get("head_dim") or 512)
    window = int(c.get("sliding_window") or 128)
    q_rank = int(c.get("q_lora_rank") or 0)
    o_rank, o_groups = int(c.get("o_lora_rank") or 0), int(c.get("o_groups") or 1)
    index_dim, index_heads = int(c.get("index_head_dim") or 128), int(c.get("index_n_heads") or 0)
    index_key = index_dim + index_dim // 128 * 4
    swa = _dsv4_window(window, _DSV4_SWA_BLOCK, _DSV4_STATE_BYTES)
    per_token, per_seq = 0.0, layers * swa
    window_tok = layers * _dsv4_page(_DSV4_SWA_BLOCK * _DSV4_STATE_BYTES) / _DSV4_SWA_BLOCK
    # Per layer: fused q_a + kv (hidden x (q_rank + head)), q_b, output LoRA in groups,
    # q and kv norms, the attention sink.
    attn = hidden * (q_rank + head) + q_rank * heads * head + o_rank * heads * head \
        + hidden * o_groups * o_rank + q_rank + head + heads
    attention = layers * attn
    for ratio in ratios:
        if ratio == 1:
            continue
        coff = 2 if ratio == 4 else 1
        block = 4 if ratio == 4 else 8
        per_token += _dsv4_page(_DSV4_BLOCK // ratio * _DSV4_STATE_BYTES) / _DSV4_BLOCK
        per_seq += _dsv4_window(coff * ratio, block, 2 * coff * head * 4)
        # compressor: ape (ratio x coff*head), kv + gate (hidden x 2*coff*head), norm
        attention += ratio * coff * head + hidden * 2 * coff * head + head
        if ratio == 4:  # the lightning indexer, with its own compressor
            per_token += _dsv4_page(_DSV4_BLOCK // ratio * index_key) / _DSV4_BLOCK
            per_seq += _dsv4_window(coff * ratio, block, 2 * coff * index_dim * 4)
            attention += index_heads * index_dim * q_rank + hidden * index_heads \
                + ratio * coff * index_dim + hidden * 2 * coff * index_dim + index_dim
    hc = int(c.get("hc_mult") or 1)
    mix = (2 + hc) * hc  # hyper-connections: per layer, attention and FFN
    hyper = layers * 2 * (mix * hc * hidden + mix + 3) + hc * hc * hidden + hc + 1
    hashed = int(c.get("num_hash_layers") or 0) * int(c.get("vocab_size") or 0) * int(
        c.get("num_experts_per_tok") or 1)
    return _Dsv4(per_token, per_seq, window_tok, attention, hyper, hashed)


def facts_from_hf_config(config: Mapping[str, Any], name: str | None = None,
                         index: Mapping[str, Any] | None = None,
                         hf_quant_config: Mapping[str, Any] | None = None) -> ModelFacts:
    """Turn a Hugging Face ``config.json`` (a dict), and optionally its
    ``model.safetensors.index.json``, into :class:`ModelFacts`.

    Handles a missing ``head_dim`` (= hidden / heads), a missing ``num_key_value_heads``
    (= heads), MLA, per-layer attention types, experts (shared and routed), a checkpoint's
    quantization, a vision tower and a nested ``text_config``. The parameter count is
    computed from the shapes; the index's ``metadata.total_size`` gives the weight bytes
    (and its ``total_parameters``, where written, the count). Raises ``ValueError`` naming
    the key that is missing or that the planner does not model.
    """
    try:
        return _facts_from_config(config, name, index, hf_quant_config)
    except (TypeError, AttributeError, KeyError, IndexError, ZeroDivisionError,
            OverflowError) as exc:
        # A shape no check above foresaw: still a refusal naming the fix, never a crash.
        inner = _text_config(config) if isinstance(config, Mapping) else {}
        raise ValueError(
            f"config.json (model_type {inner.get('model_type')!r}) has a field of a shape "
            f"the planner does not read ({type(exc).__name__}: {exc}): give "
            "spec.model.architecture") from exc


def _facts_from_config(config: Mapping[str, Any], name: str | None,
                       index: Mapping[str, Any] | None,
                       hf_quant_config: Mapping[str, Any] | None) -> ModelFacts:
    c = _standard_names(_text_config(config))
    if c.get("tie_word_embeddings") is None:  # the class default (see _tied)
        c["tie_word_embeddings"] = _tied(c, config.get("model_type"))
    if not c.get("num_hidden_layers") and isinstance(c.get("layers_block_type"), list):
        c["num_hidden_layers"] = len(c["layers_block_type"])
    mamba_only = _MAMBA_ONLY.get(str(c.get("model_type")), (None, {}))[0]
    required = ("hidden_size", "num_hidden_layers") + (
        ("mamba_expand",) if mamba_only else ("num_attention_heads",))
    for key in required:
        if not c.get(key):
            what = f"a {c.get('model_type')} (Mamba) model" if mamba_only else \
                "a decoder transformer"
            raise ValueError(f"config.json has no {key}: not {what} the planner can read; "
                             "give spec.model.architecture")
    _check_shapes(c)
    hidden = int(c["hidden_size"])
    layers_n = int(c["num_hidden_layers"])
    if mamba_only:
        heads, head_dim = _mamba_tp_units(c, mamba_only)
        kv_heads = _mamba_group_units(c, mamba_only, heads)
    else:
        heads = int(c["num_attention_heads"])
        kv_heads = int(c.get("num_key_value_heads") or heads)
        head_dim = int(c.get("head_dim") or hidden // heads)
    counts = _expert_counts(c)
    experts = counts[0] if counts else None
    top_k_raw = _first(c, ("num_experts_per_tok", "experts_per_token", "moe_topk", "moe_k",
                           "moe_top_k", "top_k_experts", "num_experts_per_token"))
    top_k = int(top_k_raw) if experts and top_k_raw else None
    sliding_kv_heads = _mimo_sliding_kv_heads(c, heads, head_dim)
    if mamba_only:  # every layer a Mamba mixer and its norm, nothing per token
        layers = _Layers(0, 0, None, layers_n, mamba_only, 0, 0, 0)
        g = _groups(c, layers, heads, kv_heads, head_dim, None, None)
        g["norms"] = layers_n * hidden
    elif isinstance(c.get("block_configs"), list):  # Nemotron NAS (DeciLM)
        nas = _nas_blocks(c["block_configs"], layers_n, heads, hidden)
        kv_heads = nas.kv_heads
        layers = _Layers(nas.attention, 0, None, 0, None, nas.attention, 0, nas.mlp_layers)
        g = _groups(c, layers, heads, kv_heads, head_dim, experts, top_k)
        g["mlp"] = nas.mlp_parameters
    else:
        layers = _layer_plan(c, layers_n, experts)
        g = _groups(c, layers, heads, kv_heads, head_dim, experts, top_k, sliding_kv_heads)
    dsv4 = None
    if c.get("compress_ratios") is not None:
        # vLLM picks the model by architectures (DeepseekV4ForCausalLM; sgl-project's
        # FP8 copies say model_type deepseek_ref).
        archs = " ".join(str(a) for a in config.get("architectures") or [])
        if not (str(c.get("model_type", "")).startswith("deepseek_v4") or "DeepseekV4" in archs):
            raise ValueError("config.json has compress_ratios outside DeepSeek-V4 "
                             f"(model_type {c.get('model_type')!r}): compressed attention the "
                             "planner does not model; give spec.model.architecture")
        dsv4 = _deepseek_v4(c, layers_n, hidden, heads)
        layers = _Layers(0, 0, None, 0, None, layers_n, layers_n, 0, tuple(range(layers_n)))
        g = _groups(c, layers, heads, kv_heads, head_dim, experts, top_k)
        g["attention"] = dsv4.attention_parameters
        g["norms"] += dsv4.hyper_connection_parameters
        g["router"] += dsv4.hash_router_parameters
    if c.get("vocab_size_per_layer_input") and c.get("hidden_size_per_layer_input"):
        _gemma3n_extras(c, g, kv_heads, head_dim)
    vision = _vision_parameters(config)
    common = g["embeddings"] + g["attention"] + g["state"] + g["mlp"] + g["shared_experts"] \
        + g["router"] + g["norms"]
    total = common + g["experts"] + vision
    active = common + g["active_experts"] + vision
    sources: list[tuple[str, str]] = []
    if not (c.get("torch_dtype") or c.get("dtype")):
        sources.append(("dtype", DTYPE_UNSTATED))
    if not any(_is_number(c.get(k)) for k in _LENGTH_KEYS):
        sources.append(("max_context", MAX_CONTEXT_UNSTATED))
    quant, method, attn_quantized, activations = _quantization(c, hf_quant_config)
    meta = (index or {}).get("metadata") or {}
    if isinstance(meta.get("total_parameters"), int):
        total = int(meta["total_parameters"])
        sources.append(("parameters", SAFETENSORS_INDEX))
    weight_bytes = int(meta["total_size"]) if isinstance(meta.get("total_size"), int) else None
    if weight_bytes is not None:
        sources.append(("weight_bytes", SAFETENSORS_INDEX))
    quantized: tuple[str, ...] = ()
    if quant == "mxfp4" or (dsv4 and c.get("expert_dtype") == "fp4" and quant == "fp8"):
        # DeepSeek-V4 with expert_dtype fp4: MXFP4 experts, the rest fp8 (vLLM's
        # models/deepseek_v4/quant_config.py, DeepseekV4FP8Config); counted as MXFP4
        # experts and the rest in the model's dtype, the upper bound.
        quant, quantized = "mxfp4", ("experts",)
    elif quant:
        quantized = ("experts", "shared_experts", "mlp", "state") + (
            ("attention",) if attn_quantized else ())
    state = _state_elements(c, layers.state_kind)
    mla_dim = None
    if c.get("kv_lora_rank"):
        mla_dim = int(c["kv_lora_rank"]) + int(c.get("qk_rope_head_dim") or 64)
    heads_cached = mla_dim is not None and _caches_heads_not_latent(config, c)
    if heads_cached:
        # MiniCPM3: the latent projections (counted in the weights above), but vLLM
        # caches every head's K and V, qk_nope + qk_rope wide, V padded to it (vLLM
        # minicpm3.py, MiniCPM3Attention: Attention(num_heads, qk_head_dim,
        # num_kv_heads=num_heads)); no latent cache.
        mla_dim = None
        kv_heads = heads
        head_dim = int(c.get("qk_nope_head_dim") or 64) + int(c.get("qk_rope_head_dim") or 32)
    groups = tuple((k, v) for k, v in g.items() if k != "active_experts" and v) + (
        (("vision", vision),) if vision else ())
    return ModelFacts(
        name=name or str(config.get("_name_or_path") or "local-model"),
        parameters=total,
        active_parameters=active if experts else None,
        num_experts=experts,
        num_experts_per_token=top_k,
        num_layers=layers_n,
        hidden_size=hidden,
        num_attention_heads=heads,
        # As config.json says (MLA configs give as many as heads); the planner's MLA rules
        # read mla_kv_dim, as vLLM's one latent "head".
        num_key_value_heads=sliding_kv_heads or kv_heads,
        head_dim=head_dim,
        max_context=max_context(c),
        vocab_size=int(c["vocab_size"]) if c.get("vocab_size") else None,
        dtype=str(c.get("torch_dtype") or c.get("dtype") or "float32").removeprefix("torch."),
        tie_word_embeddings=_tied(c),
        source=CONFIG_JSON,
        full_attention_layers=layers.full,
        # Gemma 4's global layers (attention_k_eq_v shares K and V there: counted as two,
        # the conservative bound).
        full_attention_head_dim=int(c["global_head_dim"]) if c.get("global_head_dim") else None,
        full_attention_kv_heads=int(c["num_global_key_value_heads"])
        if c.get("num_global_key_value_heads") else (kv_heads if sliding_kv_heads else None),
        v_head_dim=int(c["v_head_dim"]) if c.get("v_head_dim") and not mla_dim
        and not heads_cached and int(c["v_head_dim"]) != head_dim else None,
        sliding_window_layers=layers.sliding,
        sliding_window=layers.window,
        state_layers=layers.state,
        state_elements_per_layer=state[0],
        state_conv_elements_per_layer=state[1],
        state_kind=layers.state_kind,
        state_dtype=(_state_dtype(c) or ("float32" if layers.state_kind == "kda" else None))
        if layers.state else None,
        mla_kv_dim=mla_dim,
        compressed_kv_bytes_per_token=dsv4.per_token if dsv4 else 0.0,
        window_kv_bytes_per_sequence=dsv4.window_per_sequence if dsv4 else 0,
        window_kv_bytes_per_token=dsv4.window_per_token if dsv4 else 0.0,
        shared_experts=int(_first(c, _SHARED_KEYS) or (
            1 if c.get("shared_expert_intermediate_size") else 0)) if experts else 0,
        # A list's first: ERNIE-4.5-VL's text experts, or the first layer's.
        moe_intermediate_size=int(_listed(c["moe_intermediate_size"])[0])
        if experts and c.get("moe_intermediate_size") else None,
        quantization=quant,
        quantization_method=method,
        activation_quantization=activations,
        weight_bytes=weight_bytes,
        parameter_groups=groups,
        quantized_groups=quantized,
        vision_parameters=vision,
        sources=tuple(sources),
    )


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

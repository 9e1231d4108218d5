"""A ``config.json``'s fields as the planner reads them (pure): the checks on their
shapes, the other names families give the standard fields (transformers' attribute maps),
the longest context, the nested ``text_config``, tied embeddings and two-matrix MLPs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from .facts import VLLM_DEFAULT_MAX_LEN


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

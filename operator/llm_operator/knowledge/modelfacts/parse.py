"""How a Hugging Face ``config.json`` (with its ``model.safetensors.index.json``) turns
into :class:`~.facts.ModelFacts` (pure): :func:`facts_from_hf_config`, which puts the
field names, the layer plan, the parameter count and the family layouts together, and
refuses what it cannot read by name, never with a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .facts import CONFIG_JSON, DTYPE_UNSTATED, MAX_CONTEXT_UNSTATED, SAFETENSORS_INDEX, ModelFacts
from .families import _deepseek_v4, _mimo_sliding_kv_heads, _nas_blocks
from .fields import (
    _LENGTH_KEYS,
    _MAMBA_ONLY,
    _check_shapes,
    _first,
    _is_number,
    _listed,
    _standard_names,
    _text_config,
    _tied,
    max_context,
)
from .layers import (
    _gemma3n_extras,
    _layer_plan,
    _Layers,
    _mamba_group_units,
    _mamba_tp_units,
    _state_dtype,
    _state_elements,
)
from .params import (
    _SHARED_KEYS,
    _caches_heads_not_latent,
    _expert_counts,
    _groups,
    _quantization,
    _vision_parameters,
)


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

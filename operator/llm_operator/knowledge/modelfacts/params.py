"""A model's parameters from its shapes (pure): the checkpoint's quantization, attention,
MLA, state layers, experts (routed, shared, per layer), the vision tower, and the
parameter groups a quantized checkpoint's bytes are estimated from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .fields import _TWO_MATRIX_MLPS, _first, _is_number, _is_pattern, _listed, _refusal, _tied
from .layers import (
    _kda_shape,
    _Layers,
    _lightning_shape,
    _mamba1_shape,
    _mamba2_inner,
    _mamba2_shape,
)


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

"""Which layers of a model do what (pure): full, sliding-window, chunked, linear-attention
and Mamba layers, where the experts are, and the fixed state a linear-attention or Mamba
layer keeps per sequence (each shaped as vLLM's ``MambaStateShapeCalculator``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .fields import _first, _is_number, _listed


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

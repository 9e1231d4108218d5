"""Layouts of one family each (pure), read from their own fields: Nemotron-NAS's
per-block configuration, MiMo-V2's sliding layers of their own shape, and DeepSeek-V4's
compressed attention as vLLM caches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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

"""Model facts from a model's own config.json (issue 33), and the planner's KV and weight
bytes from them.

The configs below are small dicts written for these tests with the real field names of
the public model families they mirror (named in each); values are those families'
published ones where the test checks a figure. The whole public corpus (the 117
config.json files of 89 models that NVIDIA AIConfigurator 0.12.0 ships, committed
unchanged under tests/fixtures/model_configs/ with their NOTICE.md) is checked by
``test_model_config_corpus``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from llm_operator.api.errors import SpecError
from llm_operator.api.models import parse_llmservice
from llm_operator.health.status import plan_summary
from llm_operator.knowledge.modelfacts import (
    CONFIG_JSON,
    QUANT_BYTES_PER_WEIGHT,
    SAFETENSORS_INDEX,
    ModelFacts,
    facts_from_hf_config,
)
from llm_operator.planning import (
    BLOCK_SIZE,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    make_plan,
    valid_tensor_parallel_sizes,
    weight_bytes,
)
from llm_operator.planning.perfmodel import suggest_for

pytestmark = pytest.mark.unit

# The corpus: 117 public config.json files of 89 models, copied unchanged from NVIDIA
# AIConfigurator 0.12.0 (PyPI aiconfigurator-core, Apache-2.0); see its NOTICE.md.
CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "model_configs"

# Mirrors deepseek-ai/DeepSeek-V3 (and R1, V3.1: the same shapes): MLA, 256 routed + 1
# shared expert, 3 dense first layers, block fp8.
DEEPSEEK_V3: dict[str, Any] = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128, "v_head_dim": 128, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "vocab_size": 129280,
    "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                            "weight_block_size": [128, 128]},
}
# openai/gpt-oss-120b as published: 128-token windows on every other layer, MXFP4 experts.
GPT_OSS_120B: dict[str, Any] = json.loads(
    (CORPUS / "openai--gpt-oss-120b_config.json").read_text())
# Mirrors Qwen/Qwen3-Next-80B-A3B: 3 gated-DeltaNet (linear attention) layers, then 1 full.
QWEN3_NEXT: dict[str, Any] = {
    "model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48,
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "intermediate_size": 5120,
    "vocab_size": 151936, "max_position_embeddings": 262144, "torch_dtype": "bfloat16",
}
# Mirrors nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B (a 12-layer cut of its pattern):
# M = Mamba-2, E = experts, * = attention.
NEMOTRON_H: dict[str, Any] = {
    "model_type": "nemotron_h", "hidden_size": 2688, "num_hidden_layers": 12,
    "hybrid_override_pattern": "MEMEM*EMEM*E", "num_attention_heads": 32,
    "num_key_value_heads": 2, "head_dim": 128, "mamba_num_heads": 64, "mamba_head_dim": 64,
    "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "mlp_hidden_act": "relu2",
    "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
    "moe_shared_expert_intermediate_size": 3712, "intermediate_size": 1856,
    "vocab_size": 131072, "max_position_embeddings": 262144, "torch_dtype": "bfloat16",
}


def spec(name: str, product: str = "NVIDIA-H200", **sections: Any) -> Any:
    body: dict[str, Any] = {"model": {"name": name}, "gpus": {"product": product}}
    for key, values in sections.items():
        body.setdefault(key, {}).update(values)
    return parse_llmservice({"metadata": {"name": "svc", "namespace": "ml"}, "spec": body}).spec


def test_mla_latent_kv_is_rank_plus_rope_per_layer_and_not_split_by_tp() -> None:
    facts = facts_from_hf_config(DEEPSEEK_V3, name="deepseek-ai/DeepSeek-V3")
    assert facts.mla_kv_dim == 512 + 64 and facts.is_mla
    assert facts.max_context == 4096 * 40 == 163840
    # 61 layers x 576 elements x 2 bytes (bf16 KV), on every TP rank alike.
    assert kv_bytes_per_token(facts, 1, 1, 2) == 61 * 576 * 2 == 70_272
    assert kv_bytes_per_token(facts, 8, 1, 2) == 70_272
    # The heads formula (K and V of 128 heads of 192 = nope + rope) would give 85x.
    naive = 2 * 61 * 128 * (128 + 64) * 2
    assert round(naive / 70_272) == 85
    # TP need only divide the 128 attention heads (no KV-head rule).
    assert valid_tensor_parallel_sizes(facts, 16) == [1, 2, 4, 8, 16]


def test_deepseek_v3_parameters_experts_and_fp8_weights() -> None:
    facts = facts_from_hf_config(DEEPSEEK_V3)
    # 671B in all (the model card's 671B without the 14B multi-token-prediction layer),
    # 37B active per token.
    assert round(facts.parameters / 1e9) == 671
    assert round(facts.active / 1e9, 1) == 37.6
    assert (facts.num_experts, facts.num_experts_per_token, facts.shared_experts) == (256, 8, 1)
    assert facts.quantization == "fp8" and facts.quantization_method == "fp8"
    # No index read: estimated, every linear group at 1 byte, the rest (embeddings,
    # norms, router) at 2: between 1 and 1.01 bytes per parameter.
    est = weight_bytes(facts, 2, facts_quant_none())
    assert facts.parameters < est < 1.01 * facts.parameters
    # With the index, its total_size is the weight bytes, and says so.
    indexed = facts_from_hf_config(DEEPSEEK_V3, index={"metadata": {"total_size": 688_586_727_753}})
    assert weight_bytes(indexed, 2, facts_quant_none()) == 688_586_727_753
    assert indexed.source_of("weight_bytes") == SAFETENSORS_INDEX
    assert indexed.source_of("num_layers") == CONFIG_JSON


def facts_quant_none() -> Any:
    from llm_operator.api.models import Quantization
    return Quantization.NONE


def test_gpt_oss_sliding_layers_pay_at_most_the_window() -> None:
    facts = facts_from_hf_config(GPT_OSS_120B)
    assert (facts.full_attention_layers, facts.sliding_window_layers, facts.sliding_window) \
        == (18, 18, 128)
    assert (facts.num_experts, facts.num_experts_per_token) == (128, 4)
    # Full layers per token: 2 x 18 x 8 x 64 x 2 = 36,864. Sliding layers hold
    # min(2048, 128 + 16) = 144 tokens a sequence: 36,864 x 144 = 5,308,416 bytes,
    # spread over 2,048 tokens = 2,592 a token.
    assert kv_bytes_per_sequence(facts, 1, 1, 2, 2048) == 36_864 * 144
    assert kv_bytes_per_token(facts, 1, 1, 2, tokens=2048) == 36_864 + 2_592
    # Without a length, sliding layers count as full (the conservative bound).
    assert kv_bytes_per_token(facts, 1, 1, 2) == 2 * 36 * 8 * 64 * 2
    # MXFP4 only on the experts: 4.25 bits a weight there, the rest in bf16.
    assert facts.quantization == "mxfp4" and facts.quantized_groups == ("experts",)
    groups = dict(facts.parameter_groups)
    expected = math.ceil(groups["experts"] * QUANT_BYTES_PER_WEIGHT["mxfp4"]
                         + (facts.parameters - groups["experts"]) * 2)
    assert weight_bytes(facts, 2, facts_quant_none()) == expected
    assert 60e9 < expected < 66e9  # the checkpoint's ~61 GiB (65 GB)
    assert round(facts.parameters / 1e9, 1) == 116.8  # the model card's 117B


def test_linear_attention_layers_hold_a_state_not_tokens() -> None:
    facts = facts_from_hf_config(QWEN3_NEXT)
    assert (facts.full_attention_layers, facts.state_layers, facts.state_kind) == \
        (12, 36, "linear_attention")
    # conv (4 - 1) x (2 x 16 x 128 + 32 x 128) + recurrent 32 x 128 x 128
    assert facts.state_elements_per_layer == 3 * (4096 + 4096) + 32 * 128 * 128 == 548_864
    # Full: 2 x 12 x 2 x 256 x 2 = 24,576 a token; state 36 x 548,864 x 2 bytes a
    # sequence = 39,518,208, over 4,096 tokens = 9,648 a token.
    assert kv_bytes_per_sequence(facts, 1, 1, 2, 4096) == 39_518_208
    assert kv_bytes_per_token(facts, 1, 1, 2, tokens=4096) == 24_576 + 9_648
    # Computed from the shapes (estimated: the attention's output gate and the DeltaNet's
    # small projections are not counted): the model card's 80B, 3B active.
    assert 78e9 < facts.parameters < 82e9
    assert 3e9 < facts.active < 4e9


def test_nemotron_h_pattern_counts_mamba_attention_and_expert_layers() -> None:
    facts = facts_from_hf_config(NEMOTRON_H)
    assert (facts.full_attention_layers, facts.state_layers, facts.state_kind) == (2, 5, "mamba2")
    # conv (4 - 1) x (64 x 64 + 2 x 8 x 128) + SSM 64 x 64 x 128
    assert facts.state_elements_per_layer == 3 * (4096 + 2048) + 64 * 64 * 128 == 542_720
    assert kv_bytes_per_token(facts, 1, 1, 2) == 2 * 2 * 2 * 128 * 2


def test_nemotron_block_list_latent_experts_and_fp32_state() -> None:
    # Mirrors nvidia/NVIDIA-Nemotron-3-Super-120B-A12B (newer configs list the blocks by
    # name; latent experts of width moe_latent_size; the SSM state kept in float32).
    cut = {k: v for k, v in NEMOTRON_H.items() if k not in ("hybrid_override_pattern",
                                                           "num_hidden_layers")}
    blocks = ["mamba", "moe", "mamba", "moe", "mamba", "attention", "moe", "mamba", "moe",
              "mamba", "attention", "moe"]
    facts = facts_from_hf_config({**cut, "layers_block_type": blocks, "moe_latent_size": 1024,
                                  "mamba_ssm_cache_dtype": "float32"})
    assert facts.num_layers == 12 and facts.state_dtype == "float32"
    assert (facts.full_attention_layers, facts.state_layers) == (2, 5)
    plain = facts_from_hf_config(NEMOTRON_H)
    # 5 MoE layers x 128 experts x 2 x (2688 - 1024) x 1856 fewer expert weights, plus
    # the 2 x 2688 x 1024 projections of each MoE layer.
    assert plain.parameters - facts.parameters == (
        5 * 128 * 2 * (2688 - 1024) * 1856 - 5 * 2 * 2688 * 1024)
    with pytest.raises(ValueError, match="layers_block_type has 'retention'"):
        facts_from_hf_config({**cut, "layers_block_type": ["retention"]})


def test_gemma4_global_layers_have_their_own_heads() -> None:
    # Mirrors google/gemma-4-26B-A4B's text_config: 1024-token windows on 5 of 6 layers,
    # global layers of 2 KV heads of 512.
    facts = facts_from_hf_config({"text_config": {
        "model_type": "gemma4_text", "hidden_size": 2816, "num_hidden_layers": 30,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
        "global_head_dim": 512, "num_global_key_value_heads": 2, "sliding_window": 1024,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5,
        "num_experts": 128, "top_k_experts": 8, "moe_intermediate_size": 704,
        "intermediate_size": 2112, "vocab_size": 262144, "tie_word_embeddings": True,
        "max_position_embeddings": 262144}, "torch_dtype": "bfloat16"})
    assert (facts.full_attention_layers, facts.sliding_window_layers) == (5, 25)
    assert (facts.full_kv_heads, facts.full_head_dim) == (2, 512)
    # Full: 2 x 5 x 2 x 512 x 2 = 20,480 a token; sliding at 4,096 tokens: 2 x 25 x 8 x
    # 256 x 2 x 1,040 tokens a sequence = 212,992,000 / 4,096 = 52,000 a token.
    assert kv_bytes_per_token(facts, 1, 1, 2, tokens=4096) == 20_480 + 52_000
    assert valid_tensor_parallel_sizes(facts, 8) == [1, 2, 4, 8]


@pytest.mark.parametrize(("config", "named"), [
    ({**DEEPSEEK_V3, "compress_ratios": [4] * 61}, "compress_ratios outside DeepSeek-V4"),
    ({**DEEPSEEK_V3, "model_type": "deepseek_v4", "compress_ratios": [4] * 60},
     "compress_ratios must give each"),
    ({**DEEPSEEK_V3, "model_type": "deepseek_v4", "compress_ratios": [8] * 61},
     "compress_ratios must give each"),
])
def test_compressed_attention_vllm_does_not_build_is_refused_by_name(
        config: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named) as exc:
        facts_from_hf_config(config)
    assert "spec.model.architecture" in str(exc.value)


def test_deepseek_v4_caches_are_replicated_over_tp_and_split_by_pp() -> None:
    facts = corpus_facts("deepseek-ai--DeepSeek-V4-Pro")
    assert (facts.kv_layers, facts.quantization, facts.quantization_method) == (0, "mxfp4",
                                                                                "fp8")
    assert facts.active == pytest.approx(49e9, rel=0.02)  # card: 49B active
    one = kv_bytes_per_token(facts, 1, 1, 2, tokens=2560)
    assert kv_bytes_per_token(facts, 8, 1, 2, tokens=2560) == one
    assert kv_bytes_per_token(facts, 1, 2, 2, tokens=2560) == pytest.approx(one / 2, abs=2)
    # Without a length the windows count as if never freed: the upper bound.
    assert kv_bytes_per_token(facts, 1, 1, 2) > one
    plan = make_plan(spec(facts.name, gpus={"perNode": 8}, workload={
        "concurrency": 16, "inputTokens": 2048, "outputTokens": 512}), facts=facts)
    kv = next(e for e in plan.explanations if e.name == "kvBytesPerToken")
    assert kv.formula.startswith("DeepSeek-V4 compressed attention")
    assert kv.inputs["windowBytesPerSequence"] == facts.window_kv_bytes_per_sequence


def _nas_block(no_op: bool = False, group: int | None = 8, mult: float = 5.25,
               **attention: Any) -> dict[str, Any]:
    return {"attention": {"no_op": no_op, "n_heads_in_group": None if no_op else group,
                          "replace_with_linear": False, **attention},
            "ffn": {"no_op": False, "ffn_mult": mult, "replace_with_linear": False}}


# Mirrors nvidia/Llama-3_3-Nemotron-Super-49B-v1 (DeciLM): a Llama-3.3-70B shape whose
# NAS search dropped attention from some layers and narrowed MLPs.
NAS: dict[str, Any] = {
    "model_type": "nemotron-nas", "hidden_size": 8192, "num_hidden_layers": 4,
    "num_attention_heads": 64, "num_key_value_heads": None, "intermediate_size": None,
    "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    "block_configs": [_nas_block(), _nas_block(no_op=True, mult=1.0), _nas_block(),
                      _nas_block(no_op=True, mult=0.5)]}


def test_nemotron_nas_blocks_without_attention_hold_no_kv() -> None:
    facts = facts_from_hf_config(NAS)
    # 2 attention layers of 64 / 8 = 8 KV heads of 128: 2 x 2 x 8 x 128 x 2 bytes.
    assert (facts.kv_layers, facts.num_key_value_heads) == (2, 8)
    assert kv_bytes_per_token(facts, 1, 1, 2) == 8_192
    # MLP widths as vLLM's DeciLM derives them: int(2 x mult x 8192 / 3) rounded up to
    # 256: 28,672 (5.25), 5,632 (1.0), 2,816 (0.5).
    assert dict(facts.parameter_groups)["mlp"] == 3 * 8192 * (2 * 28_672 + 5_632 + 2_816)


@pytest.mark.parametrize(("blocks", "named"), [
    ([_nas_block(replace_with_linear=True)] * 4, "block_configs[0].attention."
                                                 "replace_with_linear"),
    ([_nas_block(), _nas_block(group=4)] * 2, "different KV heads"),
    ([_nas_block()] * 3, "3 entries"),
])
def test_nas_blocks_vllm_does_not_build_are_refused_by_name(blocks: list[Any],
                                                            named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)) as exc:
        facts_from_hf_config({**NAS, "block_configs": blocks})
    assert "spec.model.architecture" in str(exc.value)


def test_mimo_sliding_layers_of_another_head_size_are_refused() -> None:
    mimo = json.loads((CORPUS / "XiaomiMiMo--MiMo-V2-Flash_config.json").read_text())
    with pytest.raises(ValueError, match="swa_head_dim is 128, not 192"):
        facts_from_hf_config({**mimo, "swa_head_dim": 128})


def test_quantization_methods_and_their_bytes() -> None:
    base = {k: v for k, v in DEEPSEEK_V3.items() if k != "quantization_config"}
    modelopt = facts_from_hf_config(base, hf_quant_config={
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": "NVFP4", "exclude_modules": ["*self_attn*", "lm_head"]}})
    assert (modelopt.quantization, modelopt.quantization_method) == ("nvfp4", "modelopt")
    assert "attention" not in modelopt.quantized_groups
    awq = facts_from_hf_config({**base, "quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128}})
    assert awq.quantization == "int4"
    ct = facts_from_hf_config({**base, "quantization_config": {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}}}})
    assert ct.quantization == "int4"
    with pytest.raises(ValueError, match="quant_method 'bitsandbytes'"):
        facts_from_hf_config({**base, "quantization_config": {"quant_method": "bitsandbytes"}})
    # fp8 < unquantized; NVFP4 < fp8.
    none = facts_quant_none()
    assert weight_bytes(modelopt, 2, none) < weight_bytes(facts_from_hf_config(DEEPSEEK_V3), 2,
                                                          none)


def test_text_config_and_vision_tower() -> None:
    # Mirrors Qwen/Qwen3-VL-8B-Instruct: the language model under text_config, a 27-block
    # vision tower of width 1152.
    wrapped = {"model_type": "qwen3_vl", "torch_dtype": "bfloat16",
               "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304},
               "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 4096,
                               "num_hidden_layers": 36, "num_attention_heads": 32,
                               "num_key_value_heads": 8, "head_dim": 128,
                               "intermediate_size": 12288, "vocab_size": 151936,
                               "max_position_embeddings": 262144}}
    facts = facts_from_hf_config(wrapped)
    assert facts.num_layers == 36 and facts.dtype == "bfloat16"
    assert facts.vision_parameters == 27 * (4 * 1152**2 + 2 * 1152 * 4304)
    assert dict(facts.parameter_groups)["vision"] == facts.vision_parameters


def test_unknown_layer_type_names_the_field() -> None:
    with pytest.raises(ValueError, match="layer_types has 'retention'"):
        facts_from_hf_config({**GPT_OSS_120B, "layer_types": ["retention"] * 36})


def test_plan_of_an_mla_moe_model_from_its_config() -> None:
    facts = facts_from_hf_config(DEEPSEEK_V3, name="deepseek-ai/DeepSeek-V3",
                                 index={"metadata": {"total_size": 688_586_727_753}})
    s = spec("deepseek-ai/DeepSeek-V3", workload={"concurrency": 16, "inputTokens": 2048,
                                                  "outputTokens": 512})
    plan = make_plan(s, facts=facts)
    assert plan.tensor_parallel_size == 8  # 641 GiB of weights: 8 of 141 GB
    assert plan.weight_bytes == 688_586_727_753
    assert plan.kv_bytes_per_token == 70_272  # replicated per rank, not divided by 8
    kv = next(e for e in plan.explanations if e.name == "kvBytesPerToken")
    assert "replicated on every TP rank" in kv.formula
    tp = next(e for e in plan.explanations if e.name == "tensorParallelSize")
    assert "latent" in tp.formula
    summary = plan_summary(plan)
    assert summary["factSources"]["architecture"] == "config.json"
    assert summary["factSources"]["weightBytes"] == SAFETENSORS_INDEX


def test_engine_rules_see_the_read_facts() -> None:
    from llm_operator.planning import engine_settings

    facts = facts_from_hf_config(DEEPSEEK_V3, name="deepseek-ai/DeepSeek-V3")
    s = spec("deepseek-ai/DeepSeek-V3")
    plan = make_plan(s, facts=facts)
    model = engine_settings(s, plan, facts=facts).model
    # MLA configs give as many KV heads as heads, as vLLM's GQA rules expect of them.
    assert (model.attention_heads, model.kv_heads, model.is_moe) == (128, 128, True)


def test_unquantized_checkpoint_bytes_from_the_index() -> None:
    # Mirrors Qwen/Qwen3-32B: bf16, 65,524,246,528 bytes in its index.
    qwen = {"model_type": "qwen3", "hidden_size": 5120, "num_hidden_layers": 64,
            "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
            "intermediate_size": 25600, "vocab_size": 151936,
            "max_position_embeddings": 40960, "torch_dtype": "bfloat16"}
    none = facts_quant_none()
    facts = facts_from_hf_config(qwen, index={"metadata": {"total_size": 65_524_246_528}})
    assert weight_bytes(facts, 2, none) == 65_524_246_528
    # Stored in float32, served in bf16: the index's bytes x 2 / 4 (issue 56: the index
    # whenever there is one, not the estimated parameters x 2).
    f32 = facts_from_hf_config({**qwen, "torch_dtype": "float32"},
                               index={"metadata": {"total_size": 131_048_493_056}})
    assert weight_bytes(f32, 2, none) == 131_048_493_056 // 2


def test_status_names_the_catalog_and_the_spec_as_sources() -> None:
    catalog = plan_summary(make_plan(spec("meta-llama/Llama-3.1-8B-Instruct")))
    assert catalog["factSources"] == {"architecture": "catalog", "parameters": "catalog",
                                      "gpu": "GPU table"}
    typed = make_plan(spec("my/model", model={"architecture": {
        "parameters": 8.03e9, "numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 32,
        "numKeyValueHeads": 8, "maxContext": 8192}}, gpus={"memoryGib": 80}))
    assert typed.fact_sources["architecture"] == "spec.model.architecture"
    assert typed.fact_sources["gpu"] == "spec.gpus.memoryGib"


def test_plan_without_facts_still_refuses_an_unknown_model() -> None:
    with pytest.raises(SpecError, match="not in the built-in catalog"):
        make_plan(spec("deepseek-ai/DeepSeek-V3"))


def test_spec_quantization_other_than_the_checkpoints_is_refused() -> None:
    facts = facts_from_hf_config(GPT_OSS_120B, name="openai/gpt-oss-120b")
    with pytest.raises(SpecError) as exc:
        make_plan(spec("openai/gpt-oss-120b", model={"quantization": "awq"}), facts=facts)
    assert exc.value.field == "spec.model.quantization"
    assert "mxfp4" in exc.value.problem


def test_awq_on_an_unquantized_config_is_refused_and_fp8_matches_fp8() -> None:
    base = {k: v for k, v in DEEPSEEK_V3.items() if k != "quantization_config"}
    plain = facts_from_hf_config(base, name="deepseek-ai/DeepSeek-V3-bf16")
    with pytest.raises(SpecError) as exc:
        make_plan(spec("deepseek-ai/DeepSeek-V3-bf16", model={"quantization": "awq"}),
                  facts=plain)
    assert exc.value.field == "spec.model.quantization"
    assert "no quantization_config" in exc.value.problem
    fp8 = facts_from_hf_config(DEEPSEEK_V3, name="deepseek-ai/DeepSeek-V3")
    plan = make_plan(spec("deepseek-ai/DeepSeek-V3", model={"quantization": "fp8"}), facts=fp8)
    assert plan.weight_bytes == weight_bytes(fp8, 2, facts_quant_none())


def test_gpt_oss_plan_spreads_the_window_over_the_request() -> None:
    facts = facts_from_hf_config(GPT_OSS_120B, name="openai/gpt-oss-120b")
    s = spec("openai/gpt-oss-120b", workload={"concurrency": 64, "inputTokens": 1536,
                                              "outputTokens": 512})
    plan = make_plan(s, facts=facts)
    assert plan.tensor_parallel_size == 1
    assert plan.kv_bytes_per_token == kv_bytes_per_token(facts, 1, 1, 2, tokens=2048) == 39_456
    kv = next(e for e in plan.explanations if e.name == "kvBytesPerToken")
    assert kv.inputs["slidingWindow"] == 128 and kv.inputs["sequenceTokens"] == 2048
    assert BLOCK_SIZE == 16


def corpus_facts(stem: str) -> ModelFacts:
    """One corpus model's facts, from its config.json (and modelopt's hf_quant_config)."""
    quant = CORPUS / f"{stem}_hf_quant_config.json"
    return facts_from_hf_config(
        json.loads((CORPUS / f"{stem}_config.json").read_text()), name=stem.replace("--", "/"),
        hf_quant_config=json.loads(quant.read_text()) if quant.exists() else None)


# The corpus models the planner refuses, and the one feature each lacks: none now.
CORPUS_REFUSED: dict[str, str] = {}


def test_model_config_corpus() -> None:
    """Every corpus model is planned (on H200s, 8 a node, for 16 requests of 2,048 + 512
    tokens) or refused naming the one feature it lacks, and the performance model
    predicts a start for each planned one from the same facts."""
    stems = sorted(p.name.removesuffix("_config.json") for p in CORPUS.glob("*_config.json")
                   if not p.name.endswith("_hf_quant_config.json"))
    assert len(stems) == 89
    planned, refused = [], {}
    for stem in stems:
        try:
            facts = corpus_facts(stem)
        except ValueError as exc:
            refused[stem] = str(exc)
            continue
        svc_spec = spec(facts.name, gpus={"perNode": 8}, workload={
            "concurrency": 16, "inputTokens": 2048, "outputTokens": 512})
        plan = make_plan(svc_spec, facts=facts)
        assert plan.kv_bytes_per_token > 0 and plan.weight_bytes > 0, stem
        # KV as the planner's formula gives it at the workload's length, and weights
        # no larger than the model's parameters in bf16 (+ 1% for scales).
        assert plan.kv_bytes_per_token == kv_bytes_per_token(
            facts, plan.tensor_parallel_size, plan.pipeline_parallel_size, 2, tokens=2560,
            state_dtype_bytes={"float32": 4}.get(facts.state_dtype or "", 2),
            conv_dtype_bytes=2), stem
        assert plan.weight_bytes <= facts.parameters * 2 * 1.01, stem
        # The performance model predicts from the same facts (plan's curve, the tuning
        # Job's start): a starting max-num-seqs within the plan's limit.
        start = suggest_for(svc_spec, plan, facts=facts)
        assert 1 <= start.max_num_seqs <= plan.max_num_seqs, stem
        assert start.point.output_tps > 0 and start.point.ttft_s > 0, stem
        planned.append(stem)
    assert refused.keys() == CORPUS_REFUSED.keys(), refused
    for stem, why in refused.items():
        assert CORPUS_REFUSED[stem] in why and "spec.model.architecture" in why, why
    assert len(planned) == 89


# Representative corpus models, their KV bytes per token derived by hand from the
# config.json's numbers (bf16 KV, TP=1, at `tokens` a sequence; state in its dtype),
# and their parameters against the publisher's model card (within 2%).
CORPUS_HAND = [
    # MLA: 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes = 70,272,
    # the same at any TP. Card: 671B.
    ("deepseek-ai--DeepSeek-V3", 2560, 61 * 576 * 2, 671e9),
    # gpt-oss: 18 full layers x 8 KV heads x (64 + 64) x 2 = 36,864 a token; 18 sliding
    # layers hold min(2,048, 128 + 16) = 144 tokens: 18 x 8 x 128 x 2 x 144 = 5,308,416
    # a sequence / 2,048 = 2,592. Card: 117B.
    ("openai--gpt-oss-120b", 2048, 36_864 + 2_592, 117e9),
    # Qwen3.5 (Qwen3-Next's gated DeltaNet): 10 full layers x 2 KV heads x (256 + 256)
    # x 2 = 20,480 a token; 30 linear layers of a conv state (4 - 1) x (2 x 16 x 128 +
    # 32 x 128) = 24,576 bf16 elements and a delta-rule state 32 x 128 x 128 = 524,288
    # float32 (mamba_ssm_dtype) elements: 30 x (49,152 + 2,097,152) = 64,389,120 bytes
    # a sequence / 2,560 = 25,152. Card: 35B.
    ("Qwen--Qwen3.5-35B-A3B", 2560, 20_480 + 25_152, 35e9),
    # Nemotron-H (Nemotron-3 Nano): 6 attention layers x 2 KV heads x 256 x 2 = 6,144;
    # 23 Mamba-2 layers of a conv state 3 x (64 x 64 + 2 x 8 x 128) = 18,432 bf16 and
    # an SSM state 64 x 64 x 128 = 524,288 float32 (mamba_ssm_cache_dtype): 23 x
    # (36,864 + 2,097,152) = 49,082,368 / 2,560 = 19,173 (rounded up). Card: 31.6B.
    ("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 2560, 6_144 + 19_173, 31.6e9),
    # MiMo-V2: 9 full layers x 4 KV heads x (K 192 + V 128) x 2 = 23,040; 39 sliding
    # layers of 128-token windows with their own 8 KV heads: 39 x 8 x 320 x 2 x 144 =
    # 28,753,920 / 2,560 = 11,232. Card: 309B.
    ("XiaomiMiMo--MiMo-V2-Flash", 2560, 23_040 + 11_232, 309e9),
    # Nemotron NAS: 49 of 80 layers have attention, 8 KV heads of 128: 49 x 8 x 256 x 2
    # = 200,704. Card: 49B (49.9B).
    ("nvidia--Llama-3_3-Nemotron-Super-49B-v1", 2560, 49 * 8 * 256 * 2, 49.9e9),
    # DeepSeek-V4-Flash (vLLM's fp8_ds_mla layout: 584-byte states, pages rounded up to
    # 576 bytes). A token: 21 layers of ratio 4, a compressed cache of 64 states in
    # 256 tokens (37,376 -> 37,440 bytes) and an indexer of 64 x 132 (8,448 -> 8,640):
    # 21 x 180 = 3,780; 20 of ratio 128, 2 states (1,168 -> 1,728 a page): 20 x 6.75 =
    # 135. A sequence: all 43 layers' 128-token windows, 3 pages of 64 x 584 (37,440):
    # 4,829,760; ratio-4 compressor windows of 8 tokens, 3 pages of 4 x 2,048 fp32
    # (32,832) and 3 of the indexer's 4 x 512 fp32 (8,640): 21 x 124,416 = 2,612,736;
    # ratio-128 windows of 128 tokens, 17 pages of 8 x 1,024 fp32 (32,832): 20 x
    # 558,144 = 11,162,880; 18,605,376 / 2,560 = 7,268. Card: 284B.
    ("deepseek-ai--DeepSeek-V4-Flash", 2560, 3_780 + 135 + 7_268, 284e9),
]


@pytest.mark.parametrize(("stem", "tokens", "kv", "card_parameters"), CORPUS_HAND)
def test_corpus_kv_bytes_match_the_hand_derivation(stem: str, tokens: int, kv: int,
                                                   card_parameters: float) -> None:
    facts = corpus_facts(stem)
    state = {"float32": 4}.get(facts.state_dtype or "", 2)
    assert kv_bytes_per_token(facts, 1, 1, 2, tokens=tokens, state_dtype_bytes=state,
                              conv_dtype_bytes=2) == kv
    assert facts.parameters == pytest.approx(card_parameters, rel=0.02)


def test_mimo_plan_explains_its_k_and_v_head_sizes_and_splits_both_head_counts() -> None:
    facts = corpus_facts("XiaomiMiMo--MiMo-V2-Flash")
    # Full layers: 4 KV heads; sliding layers: 8. TP must suit both (and 64 heads).
    assert (facts.full_kv_heads, facts.num_key_value_heads, facts.v_head_dim) == (4, 8, 128)
    assert valid_tensor_parallel_sizes(facts, 8) == [1, 2, 4, 8]
    plan = make_plan(spec(facts.name, gpus={"perNode": 8}, workload={
        "concurrency": 16, "inputTokens": 2048, "outputTokens": 512}), facts=facts)
    kv = next(e for e in plan.explanations if e.name == "kvBytesPerToken")
    assert "head_dim + v_head_dim" in kv.formula and kv.inputs["vHeadDim"] == 128
    # At TP=2: full 9 x 2 x 320 x 2 = 11,520; sliding 39 x 4 x 320 x 2 x 144 / 2,560.
    assert kv_bytes_per_token(facts, 2, 1, 2, tokens=2560) == 11_520 + 5_616

"""The built-in catalog: model and GPU facts, and config.json parsing.

The catalog's parameter counts were written from the models' safetensors indexes; here
they are checked against counts computed independently from each model's config.json
shapes, so a wrong layer count, head count or head size in either place fails.
"""

from __future__ import annotations

import pytest

from llm_operator.knowledge.catalog import (
    architecture_from_hf_config,
    gpu_products,
    lookup_gpu,
    lookup_model,
    model_names,
)

# config.json values as published on the Hugging Face hub (the keys that matter).
LLAMA31_8B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3",
                     "original_max_position_embeddings": 8192},
}
CONFIGS = {
    "meta-llama/Llama-3.1-8B-Instruct": LLAMA31_8B,
    "meta-llama/Llama-3.1-70B-Instruct": {
        **LLAMA31_8B, "hidden_size": 8192, "intermediate_size": 28672,
        "num_hidden_layers": 80, "num_attention_heads": 64},
    "meta-llama/Llama-3.1-405B-Instruct": {
        **LLAMA31_8B, "hidden_size": 16384, "intermediate_size": 53248,
        "num_hidden_layers": 126, "num_attention_heads": 128},
    "meta-llama/Llama-3.2-1B-Instruct": {
        **LLAMA31_8B, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "head_dim": 64, "tie_word_embeddings": True},
    "meta-llama/Llama-3.2-3B-Instruct": {
        **LLAMA31_8B, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
        "num_attention_heads": 24, "head_dim": 128, "tie_word_embeddings": True},
    "Qwen/Qwen2.5-7B-Instruct": {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "vocab_size": 152064, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"},
    "Qwen/Qwen2.5-72B-Instruct": {
        "model_type": "qwen2", "hidden_size": 8192, "intermediate_size": 29568,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "vocab_size": 152064, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"},
    "mistralai/Mistral-7B-Instruct-v0.3": {
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 32768, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"},
    "mistralai/Mixtral-8x7B-Instruct-v0.1": {
        "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 32000, "max_position_embeddings": 32768, "num_local_experts": 8,
        "num_experts_per_tok": 2, "torch_dtype": "bfloat16"},
    "google/gemma-2-9b-it": {
        "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
        "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16"},
    "google/gemma-2-27b-it": {
        "model_type": "gemma2", "hidden_size": 4608, "intermediate_size": 36864,
        "num_hidden_layers": 46, "num_attention_heads": 32, "num_key_value_heads": 16,
        "head_dim": 128, "vocab_size": 256000, "max_position_embeddings": 8192,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16"},
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_catalog_agrees_with_config_json(name: str) -> None:
    facts = lookup_model(name)
    parsed = architecture_from_hf_config(CONFIGS[name], name=name)
    assert facts is not None
    for attr in ("num_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                 "head_dim", "max_context", "vocab_size", "tie_word_embeddings", "num_experts"):
        assert getattr(facts, attr) == getattr(parsed, attr), attr
    # Parameter counts: the catalog's (from the safetensors index) equal the count
    # computed from the shapes, exactly.
    assert facts.parameters == parsed.parameters
    assert facts.active == parsed.active


def test_required_models_are_present() -> None:
    for name in ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B",
                 "meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.2-1B",
                 "meta-llama/Llama-3.2-3B", "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-72B",
                 "mistralai/Mistral-7B-v0.3", "mistralai/Mixtral-8x7B-v0.1",
                 "google/gemma-2-9b", "google/gemma-2-27b",
                 "deepseek-ai/DeepSeek-R1-Distill-Llama-70B"):
        assert lookup_model(name) is not None, name
    assert len(model_names()) >= 12


def test_known_architecture_numbers() -> None:
    gemma9 = lookup_model("google/gemma-2-9b-it")
    gemma27 = lookup_model("google/gemma-2-27b-it")
    qwen72 = lookup_model("Qwen/Qwen2.5-72B-Instruct")
    mixtral = lookup_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert gemma9 is not None and gemma27 is not None and qwen72 is not None
    assert mixtral is not None
    # Gemma 2: head_dim is not hidden/heads (3584/16 = 224, 4608/32 = 144).
    assert (gemma9.head_dim, gemma9.num_attention_heads, gemma9.num_key_value_heads) == (256, 16, 8)
    assert (gemma27.head_dim, gemma27.num_attention_heads, gemma27.num_key_value_heads) == (
        128, 32, 16)
    assert (qwen72.num_attention_heads, qwen72.num_key_value_heads, qwen72.num_layers) == (
        64, 8, 80)
    # Mixtral: all 8 experts are weights, 2 run per token (~12.9B of ~46.7B).
    assert 12.8e9 < mixtral.active < 13.0e9 < 46e9 < mixtral.parameters < 47e9


def test_lookup_is_case_insensitive_and_instruct_shares_facts() -> None:
    base = lookup_model("meta-llama/Llama-3.1-8B")
    instruct = lookup_model("META-LLAMA/llama-3.1-8b-instruct")
    old_name = lookup_model(" meta-llama/Meta-Llama-3.1-8B-Instruct ")
    assert base is not None and instruct is not None and old_name is not None
    assert (base.parameters, base.num_layers) == (instruct.parameters, instruct.num_layers)
    assert old_name.head_dim == instruct.head_dim == 128
    assert instruct.name == "meta-llama/Llama-3.1-8B-Instruct"  # canonical spelling kept


def test_qwen_instruct_context_is_what_its_config_says() -> None:
    instruct = lookup_model("Qwen/Qwen2.5-7B-Instruct")
    base = lookup_model("Qwen/Qwen2.5-7B")
    assert instruct is not None and base is not None
    assert (instruct.max_context, base.max_context) == (32768, 131072)


def test_unknown_names_return_none() -> None:
    assert lookup_model("acme/unheard-of-13B") is None
    assert lookup_gpu("NVIDIA-GeForce-RTX-9090") is None


@pytest.mark.parametrize(
    ("label", "product"),
    [
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("nvidia-h100-80gb-hbm3", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA-H100-80GB-HBM3-SHARED", "NVIDIA-H100-80GB-HBM3"),  # time-slicing suffix
        ("H100", "NVIDIA-H100-80GB-HBM3"),
        ("H100 SXM 80GB", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA-H100-PCIe", "NVIDIA-H100-PCIe"),
        ("H200", "NVIDIA-H200"),
        ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("A100-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("L40S", "NVIDIA-L40S"),
        ("NVIDIA-L4", "NVIDIA-L4"),
        ("a10g", "NVIDIA-A10G"),
    ],
)
def test_gpu_lookup_by_label_or_alias(label: str, product: str) -> None:
    gpu = lookup_gpu(label)
    assert gpu is not None and gpu.product == product


def test_gpu_facts_are_sane() -> None:
    for product in gpu_products():
        gpu = lookup_gpu(product)
        assert gpu is not None
        assert gpu.memory_bandwidth and gpu.bf16_flops
        # Memory near the marketed size (nvidia-smi reports a little under 2^30 x GB).
        assert 24e9 < gpu.memory_bytes < 310e9, product
        if gpu.fp8_flops is not None:
            assert gpu.fp8_flops == pytest.approx(2 * gpu.bf16_flops, rel=0.02)
        # FP4 tensor cores: Blackwell only (compute capability 10.0 and up), at 2-6x FP8
        # (B300/GB300's Blackwell Ultra raised FP4 alone).
        assert gpu.compute_capability is not None, product
        if gpu.fp4_flops is not None:
            assert gpu.compute_capability >= 100 and gpu.fp8_flops, product
            assert 2 * gpu.fp8_flops <= gpu.fp4_flops * 1.02 <= 6 * gpu.fp8_flops, product
        else:
            assert gpu.compute_capability < 100, product
        assert gpu.source, product  # every figure names its datasheet
    h100, a100 = lookup_gpu("H100"), lookup_gpu("A100-80GB")
    assert h100 is not None and a100 is not None
    assert h100.memory_bytes == 81559 * 2**20  # nvidia-smi: 81559MiB
    assert a100.fp8_flops is None  # Ampere has no FP8 tensor cores


def test_hf_config_defaults_head_dim_and_kv_heads() -> None:
    # GPT-style multi-head attention: no head_dim, no num_key_value_heads.
    facts = architecture_from_hf_config({
        "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
        "intermediate_size": 8192, "vocab_size": 50000, "max_position_embeddings": 2048,
        "torch_dtype": "float16"}, name="local/mha")
    assert facts.head_dim == 2048 // 16 == 128
    assert facts.num_key_value_heads == 16
    assert facts.dtype == "float16" and facts.name == "local/mha"
    assert facts.source == "config.json"


def test_hf_config_tiny_llama_of_the_test_suite() -> None:
    # LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
    # num_attention_heads=4, num_key_value_heads=2), vocab 1000: see tests/support.
    facts = architecture_from_hf_config({
        "model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 1000, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"})
    assert (facts.head_dim, facts.num_key_value_heads, facts.num_layers) == (32, 2, 2)
    # Parameters: per layer q,o 128x128 each + k,v 128x64 each = 49,152; MLP 3x128x256 =
    # 98,304; 2 norms 256 -> 147,712 x 2 layers = 295,424; embed + lm_head 2x1000x128 =
    # 256,000; final norm 128 -> 551,552.
    assert facts.parameters == 551_552


def test_hf_config_moe_nested_text_config_and_rope_scaling() -> None:
    wrapped = {"architectures": ["SomethingForConditionalGeneration"],
               "torch_dtype": "bfloat16",
               "text_config": {**CONFIGS["mistralai/Mixtral-8x7B-Instruct-v0.1"],
                               "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                "original_max_position_embeddings": 32768}}}
    facts = architecture_from_hf_config(wrapped)
    assert facts.num_experts == 8 and facts.num_experts_per_token == 2
    assert facts.active < facts.parameters
    assert facts.max_context == 4 * 32768  # YaRN extends the context, as vLLM derives it
    # llama3 rope scaling does not: max_position_embeddings already states the length.
    assert architecture_from_hf_config(LLAMA31_8B).max_context == 131072


def test_hf_config_without_the_essentials_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="num_attention_heads"):
        architecture_from_hf_config({"hidden_size": 64, "num_hidden_layers": 2})

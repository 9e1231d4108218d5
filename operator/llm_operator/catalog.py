"""Built-in facts (pure data): popular open models and the GPUs they run on.

Model facts come from each model's ``config.json`` on the Hugging Face hub (layers,
hidden size, heads, KV heads, head size, context, vocabulary, dtype) and from the
safetensors index (parameter counts). GPU facts are keyed by the value of the
``nvidia.com/gpu.product`` node label that NVIDIA's GPU feature discovery sets (the
device name with spaces replaced by dashes); memory is the total that ``nvidia-smi``
reports, bandwidth and dense (no sparsity) FLOP/s are from NVIDIA's datasheets.

Lookups are case-insensitive and return ``None`` for names they do not know; the
planner turns that into a :class:`~llm_operator.errors.SpecError` naming the field.
A model the catalog does not know can be described in the spec
(``spec.model.architecture``) or read from its ``config.json`` with
:func:`architecture_from_hf_config`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .modelfacts import SPEC, ModelFacts, facts_from_hf_config
from .models import Architecture

__all__ = ["GPUFacts", "ModelFacts", "architecture_from_hf_config", "facts_from_architecture",
           "lookup_gpu", "lookup_model"]

MIB = 1024**2


@dataclass(frozen=True)
class GPUFacts:
    """Facts of one GPU model. ``None`` means unknown (a GPU given only by its memory)."""

    product: str  # the nvidia.com/gpu.product label value
    name: str  # friendly name
    memory_bytes: int
    memory_bandwidth: float | None = None  # bytes/s
    bf16_flops: float | None = None  # dense tensor-core FLOP/s
    fp8_flops: float | None = None  # dense; None where the GPU has no FP8 tensor cores


# --------------------------------------------------------------------------- models

_LLAMA31_8B = ModelFacts(
    name="meta-llama/Llama-3.1-8B-Instruct",
    parameters=8_030_261_248,
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_context=131072,
    vocab_size=128256,
)
_LLAMA31_70B = ModelFacts(
    name="meta-llama/Llama-3.1-70B-Instruct",
    parameters=70_553_706_496,
    num_layers=80,
    hidden_size=8192,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=128,
    max_context=131072,
    vocab_size=128256,
)
_LLAMA31_405B = ModelFacts(
    name="meta-llama/Llama-3.1-405B-Instruct",
    parameters=405_853_388_800,
    num_layers=126,
    hidden_size=16384,
    num_attention_heads=128,
    num_key_value_heads=8,
    head_dim=128,
    max_context=131072,
    vocab_size=128256,
)
_LLAMA32_1B = ModelFacts(
    name="meta-llama/Llama-3.2-1B-Instruct",
    parameters=1_235_814_400,
    num_layers=16,
    hidden_size=2048,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    max_context=131072,
    vocab_size=128256,
    tie_word_embeddings=True,
)
_LLAMA32_3B = ModelFacts(
    name="meta-llama/Llama-3.2-3B-Instruct",
    parameters=3_212_749_824,
    num_layers=28,
    hidden_size=3072,
    num_attention_heads=24,
    num_key_value_heads=8,
    head_dim=128,
    max_context=131072,
    vocab_size=128256,
    tie_word_embeddings=True,
)
# Qwen2.5 Instruct configs say max_position_embeddings 32768 (128K needs YaRN rope
# scaling added by the user); the base models' configs say 131072.
_QWEN25_7B = ModelFacts(
    name="Qwen/Qwen2.5-7B-Instruct",
    parameters=7_615_616_512,
    num_layers=28,
    hidden_size=3584,
    num_attention_heads=28,
    num_key_value_heads=4,
    head_dim=128,
    max_context=32768,
    vocab_size=152064,
)
_QWEN25_14B = ModelFacts(
    name="Qwen/Qwen2.5-14B-Instruct",
    parameters=14_770_033_664,
    num_layers=48,
    hidden_size=5120,
    num_attention_heads=40,
    num_key_value_heads=8,
    head_dim=128,
    max_context=32768,
    vocab_size=152064,
)
_QWEN25_32B = ModelFacts(
    name="Qwen/Qwen2.5-32B-Instruct",
    parameters=32_763_876_352,
    num_layers=64,
    hidden_size=5120,
    num_attention_heads=40,
    num_key_value_heads=8,
    head_dim=128,
    max_context=32768,
    vocab_size=152064,
)
_QWEN25_72B = ModelFacts(
    name="Qwen/Qwen2.5-72B-Instruct",
    parameters=72_706_203_648,
    num_layers=80,
    hidden_size=8192,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=128,
    max_context=32768,
    vocab_size=152064,
)
# Qwen3 14B (one checkpoint, thinking and non-thinking): config.json's 40 layers of
# hidden 5120 and MLP 17408, untied LM head; 14.8B parameters (13.2B non-embedding), as
# the model card says and the shapes sum to.
_QWEN3_14B = ModelFacts(
    name="Qwen/Qwen3-14B",
    parameters=14_768_307_200,
    num_layers=40,
    hidden_size=5120,
    num_attention_heads=40,
    num_key_value_heads=8,
    head_dim=128,
    max_context=40960,
    vocab_size=151936,
)
_MISTRAL_7B_V01 = ModelFacts(
    name="mistralai/Mistral-7B-Instruct-v0.1",
    parameters=7_241_732_096,
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_context=32768,
    vocab_size=32000,
)
_MISTRAL_7B_V03 = replace(
    _MISTRAL_7B_V01,
    name="mistralai/Mistral-7B-Instruct-v0.3",
    parameters=7_248_023_552,
    vocab_size=32768,
)
_MIXTRAL_8X7B = ModelFacts(
    name="mistralai/Mixtral-8x7B-Instruct-v0.1",
    parameters=46_702_792_704,
    active_parameters=12_879_925_248,  # attention + 2 of 8 experts per layer + embeddings
    num_experts=8,
    num_experts_per_token=2,
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_context=32768,
    vocab_size=32000,
)
# Gemma 2: head_dim is NOT hidden/heads (9B: 256 x 16 heads = 4096 != 3584;
# 27B: 128 x 32 = 4096 != 4608). Base checkpoints ship float32, which vLLM serves
# in bfloat16 under --dtype auto; the -it checkpoints are bfloat16.
_GEMMA2_9B = ModelFacts(
    name="google/gemma-2-9b-it",
    parameters=9_241_705_984,
    num_layers=42,
    hidden_size=3584,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=256,
    max_context=8192,
    vocab_size=256000,
    tie_word_embeddings=True,
)
_GEMMA2_27B = ModelFacts(
    name="google/gemma-2-27b-it",
    parameters=27_227_128_320,
    num_layers=46,
    hidden_size=4608,
    num_attention_heads=32,
    num_key_value_heads=16,
    head_dim=128,
    max_context=8192,
    vocab_size=256000,
    tie_word_embeddings=True,
)


def _aliases(facts: ModelFacts, *names: str, **overrides: Any) -> list[tuple[str, ModelFacts]]:
    """Several hub ids for one set of facts (base and instruct share the architecture)."""
    return [(n, replace(facts, name=n, **overrides)) for n in names]


_MODEL_ROWS: list[tuple[str, ModelFacts]] = [
    *_aliases(_LLAMA31_8B, "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct",
              "meta-llama/Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B-Instruct",
              "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"),
    *_aliases(_LLAMA31_70B, "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-70B-Instruct",
              "meta-llama/Meta-Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B-Instruct",
              "meta-llama/Llama-3.3-70B-Instruct", "deepseek-ai/DeepSeek-R1-Distill-Llama-70B"),
    *_aliases(_LLAMA31_405B, "meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.1-405B-Instruct",
              "meta-llama/Meta-Llama-3.1-405B", "meta-llama/Meta-Llama-3.1-405B-Instruct"),
    *_aliases(_LLAMA32_1B, "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-1B-Instruct"),
    *_aliases(_LLAMA32_3B, "meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.2-3B-Instruct"),
    *_aliases(_QWEN25_7B, "Qwen/Qwen2.5-7B-Instruct"),
    *_aliases(_QWEN25_7B, "Qwen/Qwen2.5-7B", max_context=131072),
    *_aliases(_QWEN25_14B, "Qwen/Qwen2.5-14B-Instruct"),
    *_aliases(_QWEN25_14B, "Qwen/Qwen2.5-14B", max_context=131072),
    *_aliases(_QWEN25_32B, "Qwen/Qwen2.5-32B-Instruct"),
    *_aliases(_QWEN25_32B, "Qwen/Qwen2.5-32B", max_context=131072),
    *_aliases(_QWEN25_72B, "Qwen/Qwen2.5-72B-Instruct"),
    *_aliases(_QWEN25_72B, "Qwen/Qwen2.5-72B", max_context=131072),
    *_aliases(_QWEN3_14B, "Qwen/Qwen3-14B"),
    *_aliases(_MISTRAL_7B_V01, "mistralai/Mistral-7B-v0.1", "mistralai/Mistral-7B-Instruct-v0.1",
              "mistralai/Mistral-7B-Instruct-v0.2"),
    *_aliases(_MISTRAL_7B_V03, "mistralai/Mistral-7B-v0.3", "mistralai/Mistral-7B-Instruct-v0.3"),
    *_aliases(_MIXTRAL_8X7B, "mistralai/Mixtral-8x7B-v0.1",
              "mistralai/Mixtral-8x7B-Instruct-v0.1"),
    *_aliases(_GEMMA2_9B, "google/gemma-2-9b", "google/gemma-2-9b-it"),
    *_aliases(_GEMMA2_27B, "google/gemma-2-27b", "google/gemma-2-27b-it"),
]

MODELS: dict[str, ModelFacts] = {name.lower(): facts for name, facts in _MODEL_ROWS}


def lookup_model(name: str) -> ModelFacts | None:
    """Facts of a model by Hugging Face id (case-insensitive), or ``None`` if unknown."""
    return MODELS.get(name.strip().lower())


def featured_models() -> list[str]:
    """One id per model the catalog knows (the instruct variant), for messages."""
    return [f.name for f in (_LLAMA31_8B, _LLAMA31_70B, _LLAMA31_405B, _LLAMA32_1B, _LLAMA32_3B,
                             _QWEN25_7B, _QWEN25_14B, _QWEN25_32B, _QWEN25_72B, _QWEN3_14B,
                             _MISTRAL_7B_V03, _MIXTRAL_8X7B, _GEMMA2_9B, _GEMMA2_27B)]


def model_names() -> list[str]:
    """Every model id the catalog knows, in its canonical spelling."""
    return [name for name, _ in _MODEL_ROWS]


# --------------------------------------------------------------------------- GPUs

_GPU_ROWS: list[tuple[GPUFacts, tuple[str, ...]]] = [
    (GPUFacts("NVIDIA-H100-80GB-HBM3", "H100 SXM 80GB", 81559 * MIB, 3.35e12, 989.4e12, 1978.9e12),
     ("H100", "H100-SXM", "H100-SXM5", "H100-80GB", "H100-SXM-80GB")),
    (GPUFacts("NVIDIA-H100-PCIe", "H100 PCIe 80GB", 81559 * MIB, 2.0e12, 756.0e12, 1513.0e12),
     ("H100-PCIe", "H100-PCIe-80GB")),
    (GPUFacts("NVIDIA-H100-NVL", "H100 NVL 94GB", 95830 * MIB, 3.9e12, 835.0e12, 1671.0e12),
     ("H100-NVL",)),
    (GPUFacts("NVIDIA-H200", "H200 141GB", 143771 * MIB, 4.8e12, 989.4e12, 1978.9e12),
     ("H200", "H200-SXM", "H200-141GB")),
    (GPUFacts("NVIDIA-A100-SXM4-80GB", "A100 SXM 80GB", 81920 * MIB, 2.039e12, 312.0e12, None),
     ("A100-80GB", "A100-SXM-80GB", "A100-SXM4-80GB")),
    (GPUFacts("NVIDIA-A100-80GB-PCIe", "A100 PCIe 80GB", 81920 * MIB, 1.935e12, 312.0e12, None),
     ("A100-PCIe-80GB",)),
    (GPUFacts("NVIDIA-A100-SXM4-40GB", "A100 SXM 40GB", 40960 * MIB, 1.555e12, 312.0e12, None),
     ("A100", "A100-40GB", "A100-SXM-40GB")),
    (GPUFacts("NVIDIA-A100-PCIE-40GB", "A100 PCIe 40GB", 40960 * MIB, 1.555e12, 312.0e12, None),
     ("A100-PCIe-40GB",)),
    (GPUFacts("NVIDIA-L40S", "L40S 48GB", 46068 * MIB, 864e9, 362.05e12, 733.0e12),
     ("L40S",)),
    (GPUFacts("NVIDIA-L4", "L4 24GB", 23034 * MIB, 300e9, 121.0e12, 242.5e12),
     ("L4",)),
    # AWS's A10G: NVIDIA publishes no datasheet; ~70 TFLOP/s bf16 dense is the figure
    # commonly quoted (lower clocks than the A10's 125), same 600 GB/s GDDR6.
    (GPUFacts("NVIDIA-A10G", "A10G 24GB", 23028 * MIB, 600e9, 70.0e12, None),
     ("A10G",)),
    (GPUFacts("NVIDIA-A10", "A10 24GB", 23028 * MIB, 600e9, 125.0e12, None),
     ("A10",)),
]


def _gpu_key(name: str) -> str:
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    # GPU feature discovery appends -SHARED under time-slicing; the GPU is the same.
    return key.removesuffix("-shared")


GPUS: dict[str, GPUFacts] = {}
for _facts, _extra in _GPU_ROWS:
    for _n in (_facts.product, _facts.name, *_extra):
        GPUS[_gpu_key(_n)] = _facts
        if not _gpu_key(_n).startswith("nvidia-"):
            GPUS["nvidia-" + _gpu_key(_n)] = _facts


def lookup_gpu(product: str) -> GPUFacts | None:
    """Facts of a GPU by ``nvidia.com/gpu.product`` label value or alias (case-insensitive)."""
    return GPUS.get(_gpu_key(product))


def gpu_products() -> list[str]:
    """Every GPU product label value the table knows."""
    return [facts.product for facts, _ in _GPU_ROWS]


# --------------------------------------------------------------------------- config.json

def architecture_from_hf_config(config: Mapping[str, Any], name: str | None = None,
                                index: Mapping[str, Any] | None = None) -> ModelFacts:
    """Turn a Hugging Face ``config.json`` (as a dict), and optionally its safetensors
    index, into :class:`ModelFacts`: see :func:`llm_operator.modelfacts.facts_from_hf_config`
    (MLA, per-layer attention types, experts, quantization, vision towers, a nested
    ``text_config``). Raises ``ValueError`` naming the key that is missing or not modelled.
    """
    return facts_from_hf_config(config, name=name, index=index)


def facts_from_architecture(arch: Architecture, name: str) -> ModelFacts:
    """Facts from ``spec.model.architecture`` (the spec states no dtype: bfloat16 assumed,
    the checkpoint dtype of nearly every current open model)."""
    return ModelFacts(
        name=name,
        parameters=arch.parameters,
        active_parameters=arch.active_parameters,
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        head_dim=arch.head_dim or math.ceil(arch.hidden_size / arch.num_attention_heads),
        max_context=arch.max_context,
        vocab_size=arch.vocab_size,
        source=SPEC,
    )

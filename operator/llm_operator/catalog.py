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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .models import Architecture

MIB = 1024**2


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
    num_experts: int | None = None  # mixture of experts: experts per layer
    num_experts_per_token: int | None = None
    tie_word_embeddings: bool = False
    source: str = "catalog"  # catalog | spec.model.architecture | config.json

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

def _first(config: Mapping[str, Any], keys: Iterable[str]) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def _max_context(config: Mapping[str, Any]) -> int:
    """Longest context as vLLM derives it: the smallest length key, times rope scaling."""
    keys = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
            "max_sequence_length", "model_max_length")
    lengths = [int(config[k]) for k in keys if isinstance(config.get(k), int | float)]
    if not lengths:
        raise ValueError("config.json has no max_position_embeddings")
    length = min(lengths)
    scaling = config.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type", scaling.get("type"))
    # vLLM multiplies by the factor except for rope types that already state the length.
    if scaling.get("factor") and rope_type not in (None, "default", "su", "longrope", "llama3"):
        length = int(scaling.get("original_max_position_embeddings", length) * scaling["factor"])
    return length


def _parameters(config: Mapping[str, Any], heads: int, kv_heads: int, head_dim: int,
                experts: int | None, top_k: int | None) -> tuple[int, int]:
    """Total and active parameter counts of a decoder-only transformer with gated MLP."""
    hidden = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    inter = int(config.get("intermediate_size") or 4 * hidden)
    vocab = int(config.get("vocab_size") or 0)
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o, k, v
    if config.get("attention_bias") or config.get("model_type") == "qwen2":
        attn += (heads + 2 * kv_heads) * head_dim  # q, k, v biases
    expert = 3 * hidden * inter  # gate, up, down
    # Gemma 2 normalises before and after both attention and MLP: four norms a layer.
    norms = (4 if config.get("model_type") in ("gemma2", "gemma3_text") else 2) * hidden
    n_exp = experts or 1
    router = hidden * experts if experts else 0
    per_layer = attn + n_exp * expert + router + norms
    per_layer_active = attn + (top_k or 1) * expert + router + norms if experts else per_layer
    tied = bool(config.get("tie_word_embeddings", False))
    embed = vocab * hidden * (1 if tied else 2) + hidden  # + final norm
    return layers * per_layer + embed, layers * per_layer_active + embed


def architecture_from_hf_config(config: Mapping[str, Any], name: str | None = None) -> ModelFacts:
    """Turn a Hugging Face ``config.json`` (as a dict) into :class:`ModelFacts`.

    Handles a missing ``head_dim`` (= hidden / heads), a missing ``num_key_value_heads``
    (= heads, plain multi-head attention), mixture of experts (``num_local_experts``
    and ``num_experts_per_tok``), a nested ``text_config`` (multimodal wrappers) and
    rope scaling of the context. The parameter count is computed from the shapes
    (attention, gated MLP per expert, norms, embeddings; tied or not). Raises
    ``ValueError`` naming the missing key when the config is not a decoder transformer.
    """
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), Mapping):
        config = {**config["text_config"], **{k: v for k, v in config.items()
                                              if k in ("torch_dtype", "dtype")}}
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
        if not config.get(key):
            raise ValueError(f"config.json has no {key}")
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    experts = config.get("num_local_experts") or config.get("num_experts")
    top_k = config.get("num_experts_per_tok")
    total, active = _parameters(config, heads, kv_heads, head_dim, experts, top_k)
    return ModelFacts(
        name=name or str(config.get("_name_or_path") or "local-model"),
        parameters=total,
        active_parameters=active if experts else None,
        num_experts=int(experts) if experts else None,
        num_experts_per_token=int(top_k) if experts and top_k else None,
        num_layers=int(config["num_hidden_layers"]),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_context=_max_context(config),
        vocab_size=int(config["vocab_size"]) if config.get("vocab_size") else None,
        dtype=str(config.get("torch_dtype") or config.get("dtype") or "float32"),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        source="config.json",
    )


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
        source="spec.model.architecture",
    )

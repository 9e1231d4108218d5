"""Built-in facts (pure data): popular open models and the GPUs they run on.

Model facts come from each model's ``config.json`` on the Hugging Face hub (layers,
hidden size, heads, KV heads, head size, context, vocabulary, dtype) and from the
safetensors index (parameter counts). GPU facts are keyed by the value of the
``nvidia.com/gpu.product`` node label that NVIDIA's GPU feature discovery sets (the
device name with spaces replaced by dashes); memory is the total that ``nvidia-smi``
reports, bandwidth and dense (no sparsity) FLOP/s are from NVIDIA's datasheets.

Lookups are case-insensitive and return ``None`` for names they do not know; the
planner turns that into a :class:`~llm_operator.api.errors.SpecError` naming the field.
A model the catalog does not know can be described in the spec
(``spec.model.architecture``) or read from its ``config.json`` with
:func:`architecture_from_hf_config`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..api.models import Architecture
from .modelfacts import SPEC, ModelFacts, facts_from_hf_config

__all__ = ["GPUFacts", "ModelFacts", "architecture_from_hf_config", "facts_from_architecture",
           "lookup_gpu", "lookup_model"]

MIB = 1024**2


@dataclass(frozen=True)
class GPUFacts:
    """Facts of one GPU model. ``None`` means unknown (a GPU given only by its memory).

    FLOP/s are DENSE tensor-core peaks (no 2:4 sparsity; NVIDIA's datasheets print the
    sparse figure first for Hopper and Blackwell, twice the dense one), per GPU.
    """

    product: str  # the nvidia.com/gpu.product label value
    name: str  # friendly name
    memory_bytes: int
    memory_bandwidth: float | None = None  # bytes/s
    bf16_flops: float | None = None  # dense tensor-core FLOP/s
    fp8_flops: float | None = None  # dense; None where the GPU has no FP8 tensor cores
    fp4_flops: float | None = None  # dense NVFP4/MXFP4; None where no FP4 tensor cores
    # CUDA compute capability as vLLM compares it (DeviceCapability.to_int(): 9.0 -> 90).
    compute_capability: int | None = None
    gke_accelerator: str | None = None  # GKE's cloud.google.com/gke-accelerator value
    karpenter_gpu_name: str | None = None  # EKS Karpenter's instance-gpu-name value
    source: str = ""  # where the figures come from (datasheet)

    @property
    def architecture(self) -> str:
        """The GPU generation by compute capability (for messages)."""
        return _ARCHITECTURES.get(self.compute_capability or 0, "unknown architecture")


_ARCHITECTURES = {80: "Ampere", 86: "Ampere", 89: "Ada Lovelace", 90: "Hopper",
                  100: "Blackwell", 103: "Blackwell Ultra", 120: "Blackwell (RTX)"}


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

# Memory: what `nvidia-smi --query-gpu=memory.total` reports (MiB), as seen on such GPUs
# (for the 2026 GPUs: public logs of that query, e.g. "NVIDIA B200, 183359 MiB").
# Bandwidth and FLOP/s: the datasheet named in each row's source; DENSE figures (the
# datasheets of Hopper and Blackwell print FP8/FP4/BF16 "with sparsity": halved here).
# Compute capability: NVIDIA's CUDA GPUs list (sm_80 A100 ... sm_120 RTX Blackwell).
# GKE values: GKE's "Run GPUs in GKE Standard node pools" and the accelerator types of
# Google's Compute API (nvidia-b200 on A4, nvidia-gb200 on A4X, nvidia-gb300 on A4X Max,
# nvidia-rtx-pro-6000 on G4); Karpenter values: the EC2 GPU name, lower case (p6-b200:
# b200). None: no such node label known for that GPU (GPUs a cloud does not offer, or a
# value not confirmed: B300 on GKE, GB200/GB300/B300/RTX PRO on EKS).
_HOPPER_DS = "NVIDIA H100 Tensor Core GPU datasheet"
_GPU_ROWS: list[tuple[GPUFacts, tuple[str, ...]]] = [
    (GPUFacts("NVIDIA-H100-80GB-HBM3", "H100 SXM 80GB", 81559 * MIB, 3.35e12, 989.4e12,
              1978.9e12, compute_capability=90, gke_accelerator="nvidia-h100-80gb",
              karpenter_gpu_name="h100", source=f"{_HOPPER_DS} (H100 SXM)"),
     ("H100", "H100-SXM", "H100-SXM5", "H100-80GB", "H100-SXM-80GB")),
    (GPUFacts("NVIDIA-H100-PCIe", "H100 PCIe 80GB", 81559 * MIB, 2.0e12, 756.0e12, 1513.0e12,
              compute_capability=90, source=f"{_HOPPER_DS} (H100 PCIe)"),
     ("H100-PCIe", "H100-PCIe-80GB")),
    (GPUFacts("NVIDIA-H100-NVL", "H100 NVL 94GB", 95830 * MIB, 3.9e12, 835.0e12, 1671.0e12,
              compute_capability=90, source=f"{_HOPPER_DS} (H100 NVL)"),
     ("H100-NVL",)),
    (GPUFacts("NVIDIA-H200", "H200 141GB", 143771 * MIB, 4.8e12, 989.4e12, 1978.9e12,
              compute_capability=90, gke_accelerator="nvidia-h200-141gb",
              karpenter_gpu_name="h200", source="NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
     ("H200", "H200-SXM", "H200-141GB")),
    (GPUFacts("NVIDIA-A100-SXM4-80GB", "A100 SXM 80GB", 81920 * MIB, 2.039e12, 312.0e12, None,
              compute_capability=80, gke_accelerator="nvidia-a100-80gb",
              source="NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)"),
     ("A100-80GB", "A100-SXM-80GB", "A100-SXM4-80GB")),
    (GPUFacts("NVIDIA-A100-80GB-PCIe", "A100 PCIe 80GB", 81920 * MIB, 1.935e12, 312.0e12, None,
              compute_capability=80, source="NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe)"),
     ("A100-PCIe-80GB",)),
    (GPUFacts("NVIDIA-A100-SXM4-40GB", "A100 SXM 40GB", 40960 * MIB, 1.555e12, 312.0e12, None,
              compute_capability=80, gke_accelerator="nvidia-tesla-a100",
              karpenter_gpu_name="a100", source="NVIDIA A100 Tensor Core GPU datasheet (40GB)"),
     ("A100", "A100-40GB", "A100-SXM-40GB")),
    (GPUFacts("NVIDIA-A100-PCIE-40GB", "A100 PCIe 40GB", 40960 * MIB, 1.555e12, 312.0e12, None,
              compute_capability=80, source="NVIDIA A100 Tensor Core GPU datasheet (40GB)"),
     ("A100-PCIe-40GB",)),
    (GPUFacts("NVIDIA-L40S", "L40S 48GB", 46068 * MIB, 864e9, 362.05e12, 733.0e12,
              compute_capability=89, karpenter_gpu_name="l40s",
              source="NVIDIA L40S datasheet"),
     ("L40S",)),
    (GPUFacts("NVIDIA-L4", "L4 24GB", 23034 * MIB, 300e9, 121.0e12, 242.5e12,
              compute_capability=89, gke_accelerator="nvidia-l4", karpenter_gpu_name="l4",
              source="NVIDIA L4 datasheet"),
     ("L4",)),
    # AWS's A10G: NVIDIA publishes no datasheet; ~70 TFLOP/s bf16 dense is the figure
    # commonly quoted (lower clocks than the A10's 125), same 600 GB/s GDDR6.
    (GPUFacts("NVIDIA-A10G", "A10G 24GB", 23028 * MIB, 600e9, 70.0e12, None,
              compute_capability=86, karpenter_gpu_name="a10g",
              source="no NVIDIA datasheet (AWS's A10G): commonly quoted figures"),
     ("A10G",)),
    (GPUFacts("NVIDIA-A10", "A10 24GB", 23028 * MIB, 600e9, 125.0e12, None,
              compute_capability=86, source="NVIDIA A10 datasheet"),
     ("A10",)),
    # ---- the GPUs of 2026 (issue 33 item 4)
    # H200 NVL (PCIe card, 600 W): FP8 3,341 and BF16 1,671 TFLOPS with sparsity.
    (GPUFacts("NVIDIA-H200-NVL", "H200 NVL 141GB", 143771 * MIB, 4.8e12, 835.5e12, 1670.5e12,
              compute_capability=90,
              source="NVIDIA H200 Tensor Core GPU datasheet (H200 NVL column)"),
     ("H200-NVL", "H200-NVL-141GB")),
    # H20 (Hopper for China): NVIDIA publishes no datasheet page for it; 96 GB HBM3,
    # 4.0 TB/s, FP8 296 and BF16 148 TFLOPS dense are the figures of its product brief as
    # widely reported (not checked against an NVIDIA document: treat as approximate).
    (GPUFacts("NVIDIA-H20", "H20 96GB", 97871 * MIB, 4.0e12, 148.0e12, 296.0e12,
              compute_capability=90,
              source="NVIDIA H20 product brief as reported (no public datasheet; approximate)"),
     ("H20", "H20-96GB")),
    # HGX B200 (8 GPUs): FP4 144, FP8/FP6 72, BF16 36 PFLOPS with sparsity, 64 TB/s HBM3e.
    (GPUFacts("NVIDIA-B200", "B200 180GB", 183359 * MIB, 8.0e12, 2.25e15, 4.5e15, 9.0e15,
              compute_capability=100, gke_accelerator="nvidia-b200", karpenter_gpu_name="b200",
              source="NVIDIA HGX B200 datasheet (per GPU: the 8-GPU figures / 8, halved)"),
     ("B200", "B200-SXM", "B200-180GB", "HGX-B200")),
    # HGX B300 (Blackwell Ultra, 8 GPUs): FP4 144 sparse / 105 dense PFLOPS (13.1 per GPU;
    # NVIDIA's keynote figure for the chip is ~15 dense: the HGX one is used), FP8 72 and
    # BF16 36 PFLOPS with sparsity, as B200; 288 GB HBM3e, 8 TB/s. The FP4 figure was read
    # from a secondary copy of the datasheet: approximate.
    (GPUFacts("NVIDIA-B300-SXM6-AC", "B300 288GB", 275040 * MIB, 8.0e12, 2.25e15, 4.5e15,
              13.125e15, compute_capability=103,
              source="NVIDIA HGX B300 datasheet (per GPU; FP4 dense approximate)"),
     ("B300", "B300-SXM6", "B300-SXM6-AC", "B300-288GB", "HGX-B300")),
    # GB200 NVL72: per GB200 superchip (1 Grace + 2 GPUs) FP4 40, FP8/FP6 20, BF16 10
    # PFLOPS with sparsity, 372 GB HBM3e at 16 TB/s; higher clocks than HGX B200.
    (GPUFacts("NVIDIA-GB200", "GB200 186GB", 189471 * MIB, 8.0e12, 2.5e15, 5.0e15, 10.0e15,
              compute_capability=100, gke_accelerator="nvidia-gb200",
              source="NVIDIA GB200 NVL72 datasheet (per GPU: a superchip's figures / 2, "
                     "halved)"),
     ("GB200",)),
    # GB300 NVL72 (72 GPUs): FP4 1,440 sparse / 1,080 dense PFLOPS (15 per GPU), FP8/FP6
    # 720 and BF16 360 PFLOPS with sparsity (the BF16/FP8 split per GPU is read from the
    # rack figures: approximate), 576 TB/s HBM3e.
    (GPUFacts("NVIDIA-GB300", "GB300 288GB", 284208 * MIB, 8.0e12, 2.5e15, 5.0e15, 15.0e15,
              compute_capability=103, gke_accelerator="nvidia-gb300",
              source="NVIDIA GB300 NVL72 datasheet (per GPU: the rack's figures / 72; "
                     "BF16/FP8 approximate)"),
     ("GB300",)),
    # RTX PRO 6000 Blackwell Server Edition: 96 GB GDDR7 at 1,597 GB/s; the datasheet gives
    # only "4 PFLOPS FP4" (with sparsity): 2 dense. FP8 and BF16 are ESTIMATED at 1/2 and
    # 1/4 of that (Blackwell's tensor-core ratios), 1.0 and 0.5 PFLOPS.
    (GPUFacts("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "RTX PRO 6000 Blackwell 96GB",
              97887 * MIB, 1.597e12, 0.5e15, 1.0e15, 2.0e15, compute_capability=120,
              gke_accelerator="nvidia-rtx-pro-6000",
              source="NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet (FP4 with "
                     "sparsity halved; FP8/BF16 estimated)"),
     ("RTX-PRO-6000", "RTX-PRO-6000-Blackwell", "RTX-PRO-6000-Server",
      "RTX-PRO-6000-Blackwell-Server")),
]


def _gpu_key(name: str) -> str:
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    # GPU feature discovery appends -SHARED under time-slicing; the GPU is the same.
    return key.removesuffix("-shared")


GPUS: dict[str, GPUFacts] = {}
for _facts, _extra in _GPU_ROWS:
    # The GKE value names one product too: selectable by it (nvidia-b200).
    for _n in (_facts.product, _facts.name, *_extra, *filter(None, [_facts.gke_accelerator])):
        GPUS[_gpu_key(_n)] = _facts
        if not _gpu_key(_n).startswith("nvidia-"):
            GPUS["nvidia-" + _gpu_key(_n)] = _facts


def lookup_gpu(product: str) -> GPUFacts | None:
    """Facts of a GPU by ``nvidia.com/gpu.product`` label value or alias (case-insensitive)."""
    return GPUS.get(_gpu_key(product))


def gpu_products() -> list[str]:
    """Every GPU product label value the table knows."""
    return [facts.product for facts, _ in _GPU_ROWS]


def gpu_table() -> list[GPUFacts]:
    """Every GPU of the table, in its order."""
    return [facts for facts, _ in _GPU_ROWS]


# --------------------------------------------------------------------------- config.json

def architecture_from_hf_config(config: Mapping[str, Any], name: str | None = None,
                                index: Mapping[str, Any] | None = None) -> ModelFacts:
    """Turn a Hugging Face ``config.json`` (as a dict), and optionally its safetensors
    index, into :class:`ModelFacts`: see
    :func:`llm_operator.knowledge.modelfacts.facts_from_hf_config` (MLA, per-layer
    attention types, experts, quantization, vision towers, a nested ``text_config``).
    Raises ``ValueError`` naming the key that is missing or not modelled.
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

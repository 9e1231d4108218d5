"""Performance model (pure): throughput and latency of a vLLM replica against concurrency.

What it predicts, for a model on a GPU (or this machine's CPU), a tensor-parallel
size, a workload (input and output tokens per request, offered concurrency) and the
engine's batch settings (``--max-num-seqs``, ``--max-num-batched-tokens``, the KV
token capacity): total and per-user output tokens/s, TTFT, inter-token latency
(typical and the chunked-prefill spike), the knee of the curve and the goodput
under an SLO. ``llm-operator plan`` prints the curve; the tuner starts its search at
:func:`suggest_start`; simulated traces for the adaptation controller run on it.

How (every formula is in one function below, with its inputs):

* **One engine step** (:func:`step_time`) follows the roofline: the larger of bytes
  moved over achieved memory bandwidth (weights once per step, divided by TP, plus
  the KV cache every running sequence reads) and FLOPs over achieved compute, plus
  the tensor-parallel all-reduces and a fixed per-step and per-sequence overhead
  (scheduler, sampling, detokenisation: the CPU side of the engine). On a GPU the
  per-sequence part runs beside the GPU's work (vLLM V1's async output processing): the
  step takes the longer of the two (``Efficiency.overlap_seq_overhead``).
* **Chunked prefill**: a prompt enters as a chunk of up to ``max-num-batched-tokens``
  minus the decode tokens of that step, in the same step as the running sequences'
  decode tokens. That step is longer (compute-bound), which is the inter-token
  latency spike users see when new requests arrive. A new request's TTFT is its own
  prefill plus the prompts of ``share x (running - 1) ** exponent`` of the other running
  requests ahead of it (``Efficiency.prefill_queue_share`` and ``prefill_queue_exponent``:
  closed loops of equal lengths arrive in clumps and vLLM prefills first come, first
  served), each costing the mixed steps its tokens fill (``prefill_queue_unit``).
* **KV capacity** bounds the running batch: vLLM admits requests while their prompt
  fits in free KV blocks, so the cache fills to about ``capacity / (input + output/2)``
  sequences; beyond ``capacity / (input + output)`` the growing sequences run out of
  blocks and vLLM preempts (recompute). Requests beyond the running batch queue.
* **Closed loop** (each of N clients sends its next request when the previous one
  ends, as ``vllm bench serve --max-concurrency N`` does): steady state over one
  "cycle" in which every running slot turns over once; Little's law
  ``N = X x (time in engine + time outside + queue wait)`` gives the request rate X
  and the queue wait.

The efficiency factors (achieved fraction of bandwidth and peak FLOP/s, overheads)
are calibrated against named public measurements (see :data:`GPU_EFFICIENCY`). The
reference points it is checked against (published GPU figures, and this machine's CPU
with its fitted efficiency) are test and benchmark data, kept in
``tests/support/perf_reference.py``; the comparison tables live in
``benchmarks/RESULTS.md``.

The model is steady-state and deterministic: it gives means, and p95 estimates only
where the shape of the schedule sets them (the chunked-prefill spike). It does not
model prefix caching hits, speculative decoding, or request length variance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..api.models import LLMServiceSpec, Quantization
from ..inpod.tuner.space import SLO
from ..knowledge.catalog import GPUFacts, ModelFacts
from ..knowledge.dtype_support import compute_path
from . import BLOCK_SIZE, Plan, gpu_facts, kv_token_capacity, model_facts, weight_bytes

GIB = 1024**3

# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a model the performance model needs (plain inputs).

    ``bytes_per_param`` is the stored weight size (2 for bf16/fp16, 1 for fp8, about
    0.53 for 4-bit AWQ/GPTQ with scales); ``kv_bytes`` the size of one cached K or V
    element (2, or 1 with an fp8 KV cache).
    """

    name: str
    parameters: float
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    active_parameters: float | None = None  # mixture of experts: per token
    vocab_size: int | None = None
    tie_word_embeddings: bool = False
    num_experts: int | None = None
    experts_per_token: int | None = None
    bytes_per_param: float = 2.0
    kv_bytes: float = 2.0

    def __post_init__(self) -> None:
        for name in ("parameters", "num_layers", "hidden_size", "num_attention_heads",
                     "num_kv_heads", "head_dim", "bytes_per_param", "kv_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ModelShape.{name} must be positive, got {getattr(self, name)}")

    @property
    def active(self) -> float:
        """Parameters used per token (all of them for a dense model)."""
        return self.active_parameters or self.parameters

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights (whole model, before TP sharding)."""
        return self.parameters * self.bytes_per_param

    def kv_bytes_per_token(self, tp: int = 1) -> float:
        """KV cache bytes one token takes on one GPU:
        2 (K and V) x layers x ceil(kv_heads / TP) x head_dim x kv_bytes.

        KV heads are sharded over TP; with fewer KV heads than GPUs they are replicated.
        """
        kv_heads = math.ceil(self.num_kv_heads / tp)
        return 2 * self.num_layers * kv_heads * self.head_dim * self.kv_bytes

    @property
    def embedding_parameters(self) -> float:
        """Input embedding (a lookup, no FLOPs) and LM head."""
        if not self.vocab_size:
            return 0.0
        return float(self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2))

    def weight_bytes_read(self, tokens: float) -> float:
        """Weight bytes one step reads for ``tokens`` tokens (whole model, before TP).

        Dense: all weights. Mixture of experts: the shared part plus the experts at least
        one token routes to; with uniform routing a given expert is missed by all tokens
        with probability ``(1 - k/E) ** tokens``.
        """
        per_expert = self.expert_parameters
        if not (per_expert and self.num_experts and self.experts_per_token):
            return self.weight_bytes
        e, k = self.num_experts, self.experts_per_token
        shared = self.parameters - e * per_expert
        touched = e * (1 - (1 - k / e) ** max(tokens, 1.0))
        return (shared + touched * per_expert) * self.bytes_per_param

    @property
    def expert_parameters(self) -> float:
        """One routed expert's parameters (all layers): ``(parameters - active) / (experts
        - top_k)``; 0 for a model without experts."""
        if not (self.num_experts and self.experts_per_token and self.active_parameters):
            return 0.0
        return ((self.parameters - self.active_parameters)
                / max(1, self.num_experts - self.experts_per_token))

    @property
    def routed_parameters(self) -> float:
        """Parameters of the routed experts one token runs through (top_k experts); 0 for
        a model without experts."""
        return (self.experts_per_token or 0) * self.expert_parameters

    @classmethod
    def from_facts(cls, facts: ModelFacts, quantization: str = "none",
                   kv_cache_dtype: str = "auto") -> ModelShape:
        """From a catalog entry (:class:`llm_operator.knowledge.catalog.ModelFacts`).

        ``quantization`` is ``spec.model.quantization`` (none, fp8, awq, gptq);
        ``kv_cache_dtype`` is ``spec.engine.kvCacheDtype`` (auto or an fp8 variant).
        """
        dtype_bytes = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}
        # Served as bf16 under --dtype auto when the checkpoint is fp32 (vLLM downcasts).
        base = min(dtype_bytes.get(str(facts.dtype).removeprefix("torch."), 2.0), 2.0)
        per_param = {"none": base, "fp8": 1.0, "awq": 0.53, "gptq": 0.53}.get(quantization)
        if per_param is None:
            raise ValueError(f"unknown quantization {quantization!r} (none, fp8, awq, gptq)")
        if facts.quantization is not None:
            # A checkpoint its publisher quantized (config.json): its own bytes, as the
            # planner counts them (the index's total, else the estimate per group).
            per_param = weight_bytes(facts, int(base), Quantization.NONE) / facts.parameters
        kv = 1.0 if kv_cache_dtype.startswith("fp8") else base
        return cls(
            name=facts.name, parameters=facts.parameters, num_layers=facts.num_layers,
            hidden_size=facts.hidden_size, num_attention_heads=facts.num_attention_heads,
            num_kv_heads=facts.num_key_value_heads, head_dim=facts.head_dim,
            active_parameters=facts.active_parameters, vocab_size=facts.vocab_size,
            tie_word_embeddings=facts.tie_word_embeddings, num_experts=facts.num_experts,
            experts_per_token=facts.num_experts_per_token, bytes_per_param=per_param,
            kv_bytes=kv,
        )


@dataclass(frozen=True)
class Efficiency:
    """What an engine achieves of a device's physical limits, and what it adds.

    ``source`` names the measurements the numbers were calibrated against.
    """

    bandwidth: float  # achieved fraction of memory bandwidth in decode steps
    compute: float  # achieved fraction of dense peak FLOP/s (prefill, large batches)
    step_overhead_s: float  # fixed per engine step (scheduling, launch, sampling)
    per_seq_overhead_s: float  # per sequence in a step (sampling, output processing)
    per_token_overhead_s: float = 0.0  # per prompt token in a step beyond the roofline (CPU)
    request_overhead_s: float = 0.0  # per request outside the engine (HTTP, tokenise)
    interconnect: float = 0.7  # achieved fraction of NVLink/PCIe bandwidth in all-reduce
    allreduce_latency_s: float = 8e-6  # per all-reduce (2 per layer per step)
    source: str = ""
    # TTFT: a new request waits, besides its own prompt, for the prompts of
    # share x (running - 1) ** exponent other running requests (FCFS prefill, arrivals in
    # clumps); share 0: it waits only for its own.
    prefill_queue_share: float = 0.0
    prefill_queue_exponent: float = 1.0
    # What each prompt waited for costs: "prompt", its prefill alone; "mixed_step", a mixed
    # step of the cycle (its chunk beside the running batch's decodes): while a request
    # waits behind other prompts the engine runs whole steps, decodes included;
    # "mixed_step_per_chunk", as many mixed steps as the prompt takes (its tokens over the
    # mean prompt tokens a mixed step carries; a fraction of one where prompts share it).
    prefill_queue_unit: Literal["prompt", "mixed_step", "mixed_step_per_chunk"] = "prompt"
    # Whether the wait is kept within the cycle: the engine's TTFT at most the cycle less
    # one decode step for each of the request's other output tokens (the wait moves time
    # from TPOT to TTFT; it cannot take more than the cycle has).
    prefill_queue_within_cycle: bool = False
    # Whether the per-sequence CPU work of a step runs beside the GPU's (vLLM V1's async
    # output processing and scheduling on a GPU): the step then takes the longer of the
    # two, not their sum. False on the CPU engine, where both share the same cores.
    overlap_seq_overhead: bool = False
    # Fixed time per mixture-of-experts layer per step on each GPU (routing, alignment and
    # launch of the fused MoE kernel), beyond its roofline; 0 for models without experts.
    moe_layer_overhead_s: float = 0.0
    # Achieved fraction of dense peak FLOP/s for the routed experts' FLOPs of a model with
    # quantized weights (vLLM's fp8, mxfp4 and int4 fused MoE kernels); None, or bf16
    # weights: ``compute``, as for every other FLOP.
    moe_compute: float | None = None
    # GPU time per sequence per layer in each step, beyond the roofline (the attention
    # kernels' fixed work per sequence: its block table, its split of the KV, the
    # reduction), whatever its context and the TP; added to the step, not overlapped.
    attention_seq_layer_s: float = 0.0


# Calibrated GPU efficiency of vLLM (V1 engine, CUDA graphs, bf16), FITTED to these
# public measurements (so within +-25% of them is a fit, not a prediction:
# tests/unit/test_perfmodel.py tests the fit and, apart, the held-out points of
# tests/support/perf_reference.py, all added after these constants were set; Lambda's
# single-GPU points were already there when they were, and count as in sample):
#
# * J. Musgrave, "vLLM throughput-latency sweep on NVIDIA A100" (johnmusgrave.com,
#   vLLM 0.23, Llama-3.1-8B-Instruct bf16, 1x A100 40GB, 1024 in / 128 out): decode
#   at concurrency 1 "about 75 tokens/sec, roughly 77% of the memory-bandwidth
#   ceiling"; 6.6x that at concurrency 8. -> bandwidth 0.80 with 0.35 ms per step.
# * InferenceBench "Recipe: concurrency sweep" (yobitelcomm.github.io/bench, vLLM
#   0.21, Llama-3.1-8B-Instruct fp16, 1x H100-80GB-HBM3, workload chatbot-short):
#   122 / 580 / 1,384 tok/s at concurrency 1 / 4 / 16, TPOT p50 6.48 / 6.59 / 10.94 ms,
#   TTFT p50 14 / 23 / 42 ms. TPOT 6.48 ms at batch 1 is 16.06 GB / 6.1 ms = 2.6 TB/s,
#   ~79% of 3.35 TB/s once the fixed step overhead is taken off: the same factor.
#   The TPOT growth from 4 to 16 set the per-sequence overhead (~0.12 ms; 35 us since
#   aic-silicon-11, below).
# * Prefill efficiency 0.6 of dense bf16 peak: from memory, the range vLLM and
#   TensorRT-LLM benchmark reports show for 8B-70B prefill at 1-8K tokens (H100 ~
#   50-65% MFU, A100 ~60-70%); consistent with the TTFT and concurrency-8 points above.
# * TP all-reduce: ~8 us per all-reduce with vLLM's custom all-reduce on NVLink, as
#   published in the vLLM custom all-reduce PR discussion (figure from memory), and
#   ~70% of NVLink bus bandwidth (NCCL busbw as published in nccl-tests results).
#
# Issue 34 (NVIDIA's measured vLLM points in AIConfigurator 0.12.0's silicon_sample.csv,
# benchmarks/perfmodel_vs_silicon.py): three changes, each FITTED only to the subset
# declared before fitting in benchmarks/configs/aic_silicon.yaml (Qwen3-32B bf16 on
# H100 at TP 2, 30 rows, vLLM 0.12); the other 249 rows are predictions:
# * overlap_seq_overhead: the per-sequence CPU work (sampling, output processing) runs
#   beside the GPU's step in vLLM V1 (async output processing and scheduling), so a step
#   takes the longer of the two, not their sum. Summed, 0.12 ms x 100+ sequences made
#   large batches of small models twice as slow as measured (Llama-3.1-8B fp8 on H200:
#   TPOT +110% at 16-128 clients) while it was fitted at 4-16 clients. Structural, no
#   constant changed.
# * allreduce_latency_s 8 -> 28 us: least squares of TPOT and tok/s on the fit subset
#   (TP 2). TP 8, not in the fit, went from 62% to 94% of TPOT within +-25%; the older
#   held-out TP points (Lambda, InferenceBench) were all slower than the model too.
# * prefill_queue_share 0.10: TTFT waits, besides its own prefill, for the prompts of a
#   tenth of the other running requests (closed loops of equal lengths arrive in clumps:
#   requests that started together finish together, and vLLM prefills FCFS). The model
#   had no such wait and was 67% low (median) on TTFT; least squares of log TTFT on the
#   fit subset. It moves time from TPOT to TTFT within the same cycle: throughput is
#   unchanged.
# * prefill_queue_share 0.10 -> 0.38 and prefill_queue_exponent 0.65 (aic-silicon-5,
#   benchmarks/configs/aic_silicon_5.yaml, registered before the fit): the prompts waited
#   for grow as share x (running - 1) ** exponent, not in proportion to the running
#   requests. aic-silicon-2's held-out TTFT was 22-26% low at 4-16 clients and 28-42%
#   high at 64-128 (seen, for the structure); both constants are the least squares of log
#   TTFT over a stated grid on the SAME fit subset only (sum 2.80 -> 1.63;
#   benchmarks/data/perfmodel_ttft_fit.json). Throughput is again unchanged.
# * per_seq_overhead_s 0.12 ms -> 35 us (aic-silicon-11/12, benchmarks/configs/
#   aic_silicon_11.yaml, registered before the change): overlapping the step, the cost
#   caps one engine at 1 / cost output tok/s (0.12 ms: 8,333, whatever the model or
#   GPU), and 48 of NVIDIA's measured rows exceed that, up to 28,525 tok/s (gpt-oss-120b
#   mxfp4, H100, TP 8, vLLM 0.11.2). A bound, not a fit: the largest cost no measured row
#   contradicts, 1 / the highest measured output rate, rounded down to the microsecond
#   (benchmarks.perfmodel_vs_silicon.per_seq_bound; tests/unit/test_perfmodel_silicon.py).
# * attention_seq_layer_s 0.76 us (aic-silicon-13, benchmarks/configs/aic_silicon_13.yaml,
#   registered before the fit): GPU time per sequence per layer in each step, added to
#   the step. The measured TPOT of Qwen3-32B on H100 grows from 8 to 128 clients by
#   0.05-0.06 ms per added sequence more than the roofline's, alike at TP 2, 4 and 8 and
#   at 1,024 or 4,096-token prompts (seen, for the structure). The constant is the least
#   squares of log TPOT over a stated grid on the fit subset ONLY (sum 0.260 -> 0.111;
#   benchmarks/data/perfmodel_seq_layer_fit.json). Per layer is an assumption (one model
#   in the fit subset cannot tell per layer from per model).
# * prefill_queue_unit "mixed_step", share 0.38 -> 0.42 and exponent 0.65 -> 0.60
#   (aic-silicon-15, benchmarks/configs/aic_silicon_15.yaml, registered before the change
#   and the fit): each prompt a new request waits for costs a mixed step of the cycle
#   (its chunk beside the running batch's decodes), not its prefill alone. The unit was
#   CHOSEN with the dense held-out rows in view (12 variants compared; said in the
#   config), so its dense held-out figure is a selected result; the MoE rows were not
#   looked at. Share and exponent: least squares of log TTFT over aic-silicon-5's grid on
#   the fit subset ONLY (sum 1.68; aic-silicon-5's constants in prompts: 1.59 on the same
#   rows: the fit subset alone did not ask for the change; benchmarks/data/
#   perfmodel_ttft_fit_15.json). Throughput is unchanged.
# * prefill_queue_unit "mixed_step_per_chunk" and prefill_queue_within_cycle (aic-silicon-17,
#   benchmarks/configs/aic_silicon_17.yaml, registered before the fixes): two defects of
#   aic-silicon-15's wait, found after its run. A prompt waited for costs the mixed steps
#   its tokens fill (one step each had made smaller chunks shorten the TTFT), and the wait
#   is kept within the cycle (it had taken all of it at 1,000 clients with 4-token
#   outputs: TPOT 0). Re-fitted on the same subset: 0.42 and 0.60 again (no fit-subset row
#   moved; benchmarks/data/perfmodel_ttft_fit_17.json).
# * prefill_queue_within_cycle withdrawn (aic-silicon-19, benchmarks/configs/
#   aic_silicon_19.yaml, registered before the change): the cap bound at 2-16 clients with
#   short prompts (the TTFT fell as clients were added) and in no measured dense row, and
#   the per-chunk pricing alone keeps the 1,000-client bursts above TPOT 0. Re-fitted on
#   the same subset: 0.42 and 0.60 (benchmarks/data/perfmodel_ttft_fit_19.json).
#
# Checked, not fitted (benchmarks/gpu_kernels.py, section gpu-kernels of RESULTS.md):
# PyTorch's own GEMMs at these models' layer shapes, MEASURED on one H100 SXM and one
# H200 lent to this project (not vLLM): bf16 decode GEMMs (M <= 128) stream weights at
# 71-82% of the datasheet's HBM bandwidth (per-tensor fp8 through torch._scaled_mm
# 64-80%), prefill GEMMs (M >= 1024) reach 63-73% of dense peak. The factors below sit
# inside those ceilings (tests/unit/test_gpu_kernels.py).
# * moe_layer_overhead_s 30.3 us (aic-silicon-7, benchmarks/configs/aic_silicon_7.yaml):
#   FITTED ONLY to NVIDIA's measured vLLM fused-MoE kernel latencies (AIConfigurator's H100,
#   H200 and B200 tables, vLLM 0.24): the median, over the 63 one-token rows of the kernels
#   the MoE checkpoints run (fp8 block, mxfp4, int4 weight-only), of the measured time
#   minus this model's roofline for the same experts
#   (benchmarks/moe_kernels.fit_moe_layer_overhead_1token; tests/unit/test_moe_kernels.py).
#   It replaced aic-silicon-4's 3.9 us, fitted to the bf16 kernel (which no MoE serving
#   row runs) pooled over 1-128 tokens. The MoE serving rows are predictions.
# * moe_compute 0.18 (aic-silicon-8, benchmarks/configs/aic_silicon_8.yaml): the routed
#   experts' FLOPs at their own achieved fraction of dense peak, FITTED ONLY to the same
#   kernels' measured latencies at 1,024-8,192 tokens (prefill chunks; 252 rows, H100,
#   H200, B200): the median of FLOPs / (latency x the peak the model uses for that dtype)
#   (benchmarks/moe_kernels.fit_moe_compute). The model had priced them at 0.60 like
#   every other FLOP. The MoE serving rows are predictions. Applied to quantized weights
#   only (what it was fitted on, and every serving row): vLLM's bf16 fused MoE reaches
#   0.24-0.69 of bf16 peak at these sizes in the same tables (Mixtral-8x7B on an H200:
#   0.67-0.69), so bf16 experts keep 0.60, unfitted.
#
# Routed experts (section gpu-kernels-moe): vLLM 0.24's fused MoE kernel, measured by
# NVIDIA on an H200 (AIConfigurator's kernel tables), reads a layer's experts at 72-85% of
# HBM where all are touched; the same 0.80 applies to them (tests/unit/test_moe_kernels.py).
GPU_EFFICIENCY = Efficiency(
    bandwidth=0.80,
    compute=0.60,
    step_overhead_s=0.35e-3,
    per_seq_overhead_s=35e-6,
    request_overhead_s=3e-3,
    interconnect=0.7,
    allreduce_latency_s=28e-6,
    prefill_queue_share=0.42,
    prefill_queue_exponent=0.60,
    prefill_queue_unit="mixed_step_per_chunk",
    overlap_seq_overhead=True,
    moe_layer_overhead_s=30.3e-6,
    moe_compute=0.18,
    attention_seq_layer_s=0.76e-6,
    source="A100 sweep (johnmusgrave.com, vLLM 0.23); H100 sweep (InferenceBench, vLLM 0.21); "
           "AIConfigurator silicon_sample.csv, Qwen3-32B H100 TP 2 (vLLM 0.12)",
)

# Per-GPU all-reduce bandwidth (bytes/s, one direction) by GPU product: NVLink for SXM
# and NVL parts (NVIDIA datasheets: H100 SXM 900 GB/s, A100 SXM 600 GB/s, H100 NVL
# 600 GB/s, bidirectional), PCIe otherwise (Gen5 x16 ~64 GB/s, Gen4 x16 ~32 GB/s).
# Blackwell (NVLink 5, 1.8 TB/s per GPU: HGX B200/B300, GB200/GB300 NVL72 datasheets);
# H200 NVL and H20: 900 GB/s NVLink (H200 datasheet; H20 as reported); RTX PRO 6000
# Blackwell Server Edition: PCIe Gen5 x16, no NVLink.
_INTERCONNECT: dict[str, float] = {
    "NVIDIA-H100-80GB-HBM3": 450e9, "NVIDIA-H200": 450e9, "NVIDIA-H100-NVL": 300e9,
    "NVIDIA-H200-NVL": 450e9, "NVIDIA-H20": 450e9, "NVIDIA-B200": 900e9,
    "NVIDIA-B300-SXM6-AC": 900e9, "NVIDIA-GB200": 900e9, "NVIDIA-GB300": 900e9,
    "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition": 64e9,
    "NVIDIA-A100-SXM4-80GB": 300e9, "NVIDIA-A100-SXM4-40GB": 300e9,
    "NVIDIA-H100-PCIe": 64e9, "NVIDIA-A100-80GB-PCIe": 32e9, "NVIDIA-A100-PCIE-40GB": 32e9,
}
_PCIE_GEN4 = 32e9


@dataclass(frozen=True)
class Accuracy:
    """How often the model's figures fell within +-25% of vLLM measured on GPUs by NVIDIA
    (AIConfigurator 0.12.0's silicon_sample.csv), on rows it was not fitted to: one run of
    ``benchmarks/perfmodel_vs_silicon.py`` (dense) or ``perfmodel_vs_silicon_moe.py``."""

    run: str
    rows: int
    tpot: float
    output_tps: float
    ttft: float

    def note(self, kind: str) -> str:
        return (f"against vLLM measured on GPUs by NVIDIA ({kind}, {self.rows} rows it was not "
                f"fitted to, {self.run}), within +-25%: TPOT {self.tpot:.0%}, output tok/s "
                f"{self.output_tps:.0%}, TTFT {self.ttft:.0%}")


# The current runs (benchmarks/RESULTS.md, sections aic-silicon and aic-silicon-20);
# tests/unit/test_perfmodel_accuracy.py keeps them equal to the stored comparisons.
MEASURED_ACCURACY = {
    "dense": Accuracy("aic-silicon-19", 249, tpot=0.88, output_tps=0.88, ttft=0.55),
    "moe": Accuracy("aic-silicon-20", 630, tpot=0.75, output_tps=0.76, ttft=0.50),
}


def accuracy_caption(experts: bool) -> str:
    """What a predicted curve is, and how far to trust it: the measured accuracy for
    the kind of model (mixture-of-experts or dense)."""
    acc = MEASURED_ACCURACY["moe" if experts else "dense"]
    return ("predicted by llm_operator.planning.perfmodel (steady state, an estimate); "
            + acc.note("mixture-of-experts models" if experts else "dense models"))


class NoPrediction(ValueError):
    """The model lacks a figure it needs to predict speed (e.g. a GPU known only by its
    memory size): the plan stands, the curve cannot be drawn."""


@dataclass(frozen=True)
class Hardware:
    """One accelerator (per GPU figures) and the efficiency an engine achieves on it."""

    name: str
    memory_bytes: float
    bandwidth: float  # bytes/s
    flops: float  # dense FLOP/s at the compute dtype
    interconnect_bandwidth: float = _PCIE_GEN4  # bytes/s per GPU, for TP all-reduce
    efficiency: Efficiency = GPU_EFFICIENCY
    block_size: int = 16  # vLLM's KV block size on this device (GPU 16, CPU 128)

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "bandwidth", "flops", "interconnect_bandwidth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Hardware.{name} must be positive, got {getattr(self, name)}")

    @classmethod
    def from_facts(cls, gpu: GPUFacts, fp8: bool = False,
                   efficiency: Efficiency = GPU_EFFICIENCY,
                   flops: float | None = None) -> Hardware:
        """From a catalog entry (:class:`llm_operator.knowledge.catalog.GPUFacts`); ``fp8`` uses the
        FP8 tensor-core peak (for fp8-quantized weights on GPUs that have it); ``flops``,
        where given, is the figure to use (:func:`llm_operator.knowledge.dtype_support.compute_path`
        says which dtype's tensor cores the matmuls run on)."""
        if gpu.memory_bandwidth is None or gpu.bf16_flops is None:
            raise NoPrediction(f"the GPU table has no memory bandwidth or FLOP/s figure for "
                               f"{gpu.product!r} (a GPU given by spec.gpus.memoryGib); "
                               "the plan stands, only the speed cannot be predicted")
        if flops is None:
            flops = gpu.fp8_flops if fp8 and gpu.fp8_flops else gpu.bf16_flops
        return cls(name=gpu.name, memory_bytes=gpu.memory_bytes, bandwidth=gpu.memory_bandwidth,
                   flops=flops, interconnect_bandwidth=_INTERCONNECT.get(gpu.product, _PCIE_GEN4),
                   efficiency=efficiency)


@dataclass(frozen=True)
class Workload:
    """What clients send: fixed input and output lengths; ``concurrency`` is the number
    of clients in the closed loop the service is sized for (None: unknown)."""

    input_tokens: int
    output_tokens: int
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.input_tokens < 1 or self.output_tokens < 1:
            raise ValueError("Workload input_tokens and output_tokens must be at least 1")


@dataclass(frozen=True)
class EngineSettings:
    """vLLM's batch settings. ``kv_token_capacity`` None: estimated from memory here
    (pass the planner's figure when there is one)."""

    max_num_seqs: int = 256  # vLLM's default on GPUs
    max_num_batched_tokens: int = 8192  # vLLM V1's default for the API server on GPUs
    kv_token_capacity: int | None = None
    gpu_memory_utilization: float = 0.9
    chunked_prefill: bool = True

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be at least 1")


# --------------------------------------------------------------------------- one step


@dataclass(frozen=True)
class StepTime:
    """One engine step and what bounds it."""

    seconds: float
    memory_s: float  # bytes / achieved bandwidth
    compute_s: float  # FLOPs / achieved FLOP/s
    comm_s: float  # TP all-reduces
    overhead_s: float
    bytes_moved: float  # per GPU
    flops: float  # per GPU

    @property
    def bound(self) -> str:
        """'memory', 'compute' or 'overhead': the largest term."""
        terms = {"memory": self.memory_s, "compute": self.compute_s,
                 "overhead": self.overhead_s + self.comm_s}
        return max(terms, key=lambda k: terms[k])


def step_time(model: ModelShape, hw: Hardware, tp: int, decode_seqs: float,
              decode_context: float, prefill_tokens: float = 0.0,
              prefill_context: float = 0.0, prefill_seqs: float | None = None,
              efficiency: Efficiency | None = None) -> StepTime:
    """Time of one engine step on one GPU of a TP group.

    ``decode_seqs`` sequences each add one token and read ``decode_context`` cached
    tokens; a prefill chunk adds ``prefill_tokens`` tokens that attend to
    ``prefill_context`` earlier tokens on average. Bytes: weights read (/TP) + KV read
    + KV written. FLOPs: 2 x active linear parameters x tokens (/TP) + LM head for the
    sampled tokens + attention 4 x layers x heads x head_dim x attended tokens (/TP), at
    ``compute`` of peak, but the routed experts' share of a quantized MoE model's at
    ``moe_compute``. With ``efficiency`` = :func:`physical` the result is the hardware's
    limit.
    """
    eff = efficiency or hw.efficiency
    if tp < 1:
        raise ValueError("tp must be at least 1")
    tokens = decode_seqs + prefill_tokens
    if prefill_seqs is None:
        prefill_seqs = 1.0 if prefill_tokens > 0 else 0.0
    kv_tok = model.kv_bytes_per_token(tp)
    # Weights once per step; each decoding sequence reads its cached context; each
    # prefilling sequence reads its cached prefix once; every new token's K and V is written.
    bytes_moved = (model.weight_bytes_read(tokens) / tp
                   + decode_seqs * decode_context * kv_tok
                   + (prefill_seqs * prefill_context * kv_tok if prefill_tokens else 0.0)
                   + tokens * kv_tok)
    linear = model.active - model.embedding_parameters
    head = (model.vocab_size or 0) * model.hidden_size
    per_prompt = prefill_tokens / max(1.0, prefill_seqs)
    attended = (decode_seqs * decode_context
                + prefill_tokens * (prefill_context + per_prompt / 2))
    flops = (2 * linear * tokens + 2 * head * (decode_seqs + prefill_seqs)
             + 4 * model.num_layers * model.num_attention_heads * model.head_dim * attended) / tp
    memory_s = bytes_moved / (hw.bandwidth * eff.bandwidth)
    # The routed experts' FLOPs at their own rate where one is set (fused MoE kernels), for
    # quantized weights only: the rate was fitted on vLLM's fp8, mxfp4 and int4 MoE kernels;
    # its bf16 kernel reaches far more of its peak (NVIDIA's tables: 0.24-0.69 at prefill
    # sizes), so bf16 experts keep ``compute``.
    compute_s = flops / (hw.flops * eff.compute)
    if eff.moe_compute and model.bytes_per_param < 2.0:
        routed = 2 * model.routed_parameters * tokens / tp
        compute_s += routed / hw.flops * (1 / eff.moe_compute - 1 / eff.compute)
    comm_s = 0.0
    if tp > 1:
        # Two all-reduces per layer (after attention and after the MLP) of the step's
        # activations; a ring moves 2 (TP-1)/TP of the buffer through each GPU's link.
        buf = tokens * model.hidden_size * 2.0
        per = eff.allreduce_latency_s + 2 * (tp - 1) / tp * buf / (
            hw.interconnect_bandwidth * eff.interconnect)
        comm_s = 2 * model.num_layers * per
    seq_s = eff.per_seq_overhead_s * (decode_seqs + prefill_seqs)
    moe_s = eff.moe_layer_overhead_s * model.num_layers if model.num_experts else 0.0
    attn_seq_s = eff.attention_seq_layer_s * model.num_layers * (decode_seqs + prefill_seqs)
    overhead_s = (eff.step_overhead_s + seq_s + eff.per_token_overhead_s * prefill_tokens
                  + moe_s + attn_seq_s)
    seconds = max(memory_s, compute_s) + comm_s + overhead_s
    if eff.overlap_seq_overhead:
        seconds = max(max(memory_s, compute_s) + comm_s, seq_s) + overhead_s - seq_s
    return StepTime(seconds=seconds, memory_s=memory_s,
                    compute_s=compute_s, comm_s=comm_s, overhead_s=overhead_s,
                    bytes_moved=bytes_moved, flops=flops)


def physical() -> Efficiency:
    """The physical limit: 100% of bandwidth and peak FLOP/s, no overheads."""
    return Efficiency(bandwidth=1.0, compute=1.0, step_overhead_s=0.0, per_seq_overhead_s=0.0,
                      interconnect=1.0, allreduce_latency_s=0.0, source="physical limit")


def prefill_time(model: ModelShape, hw: Hardware, tp: int, tokens: int,
                 max_num_batched_tokens: int = 8192) -> float:
    """Seconds to prefill one prompt of ``tokens`` alone, in chunks of at most
    ``max_num_batched_tokens`` (compute-bound for all but short prompts)."""
    total, done = 0.0, 0
    while done < tokens:
        chunk = min(max_num_batched_tokens, tokens - done)
        total += step_time(model, hw, tp, 0, 0, chunk, done).seconds
        done += chunk
    return total


# --------------------------------------------------------------------------- KV cache


def kv_capacity_from_bytes(model: ModelShape, kv_cache_bytes: float, tp: int = 1,
                           block_size: int = BLOCK_SIZE) -> int:
    """Tokens a KV cache of ``kv_cache_bytes`` per GPU holds: the planner's formula
    (:func:`llm_operator.planning.kv_token_capacity`, whole blocks of ``block_size``
    tokens) with this model's KV bytes per token at ``tp``; 0 for no bytes.

    This is what vLLM logs as "KV cache size: N tokens" (and what
    ``--kv-cache-memory-bytes`` gives directly).
    """
    return kv_token_capacity(kv_cache_bytes, model.kv_bytes_per_token(tp), block_size)


def kv_cache_bytes_estimate(model: ModelShape, hw: Hardware, tp: int,
                            gpu_memory_utilization: float = 0.9,
                            max_num_batched_tokens: int = 8192) -> float:
    """Per-GPU bytes vLLM leaves for the KV cache: memory x utilization - weights/TP -
    activation peak of a profile run with max-num-batched-tokens - ~1 GiB of CUDA
    graphs, NCCL and allocator slack (an estimate; the planner's figure wins)."""
    activations = max_num_batched_tokens * (model.hidden_size * 2 + 4 * model.hidden_size) * 2.0
    logits = 256 * (model.vocab_size or 32000) * 4.0
    reserve = 1.0 * GIB
    return (hw.memory_bytes * gpu_memory_utilization - model.weight_bytes / tp - activations
            - logits - reserve)


def kv_capacity_tokens(model: ModelShape, hw: Hardware, tp: int,
                       engine: EngineSettings | None = None) -> int:
    """KV token capacity of one replica: the engine's figure if given, else estimated."""
    engine = engine or EngineSettings()
    if engine.kv_token_capacity is not None:
        return engine.kv_token_capacity
    free = kv_cache_bytes_estimate(model, hw, tp, engine.gpu_memory_utilization,
                                   engine.max_num_batched_tokens)
    return kv_capacity_from_bytes(model, free, tp, hw.block_size)


def _blocks(tokens: float, block_size: int) -> float:
    return math.ceil(tokens / block_size) * block_size


@dataclass(frozen=True)
class BatchLimit:
    """How many sequences can run at once, and why."""

    running: int  # the running batch the engine sustains
    no_preemption: int  # the largest batch whose sequences never outgrow the cache
    reason: str  # "max-num-seqs" | "kv-cache"


def batch_limit(workload: Workload, engine: EngineSettings, kv_tokens: int,
                block_size: int) -> BatchLimit:
    """The running batch: max-num-seqs, or the KV cache filled with sequences at their
    mean length (input + output/2, whole blocks), whichever is smaller."""
    mean_ctx = _blocks(workload.input_tokens + workload.output_tokens / 2, block_size)
    peak_ctx = _blocks(workload.input_tokens + workload.output_tokens, block_size)
    by_kv = max(1, int(kv_tokens // mean_ctx))
    safe = max(1, int(kv_tokens // peak_ctx))
    if engine.max_num_seqs <= by_kv:
        return BatchLimit(engine.max_num_seqs, safe, "max-num-seqs")
    return BatchLimit(by_kv, safe, "kv-cache")


# --------------------------------------------------------------------------- steady state


@dataclass(frozen=True)
class Point:
    """The predicted steady state at one client concurrency."""

    concurrency: int
    running: float  # mean sequences in the engine's running batch
    queued: float  # mean requests waiting for a slot
    limit: str  # what caps the batch: "clients" | "max-num-seqs" | "kv-cache"
    preempting: bool  # sequences outgrow the KV cache: vLLM preempts (recompute)
    output_tps: float  # total output tokens/s
    user_tps: float  # output tokens/s each client sees (output / end-to-end latency)
    requests_per_s: float
    ttft_s: float
    tpot_s: float  # mean time per output token after the first
    itl_s: float  # typical inter-token latency (a decode step)
    itl_p95_s: float  # with chunked-prefill spikes when they are frequent enough
    e2e_s: float
    decode_step: StepTime
    mixed_step: StepTime | None  # a step that also carries a prefill chunk
    bound: str  # what bounds a decode step: memory | compute | overhead

    def meets(self, slo: SLO) -> bool:
        """Whether the point meets the SLO's TTFT and inter-token latency (p95)."""
        return self.ttft_s * 1e3 <= slo.ttft_ms and self.itl_p95_s * 1e3 <= slo.itl_ms

    def goodput(self, slo: SLO) -> float:
        """Output tokens/s that meet the SLO (all or nothing: every request of a fixed
        workload sees the same latencies in this model)."""
        return self.output_tps if self.meets(slo) else 0.0


def _cycle(model: ModelShape, hw: Hardware, tp: int, wl: Workload, engine: EngineSettings,
           running: float, recompute: float
           ) -> tuple[float, float, StepTime, StepTime, float, float]:
    """One cycle in which every running slot turns over once.

    Returns (cycle seconds, engine TTFT, decode step, mixed step, steps, mixed steps).
    """
    i, o = wl.input_tokens, wl.output_tokens
    budget_total = engine.max_num_batched_tokens if engine.chunked_prefill else max(
        engine.max_num_batched_tokens, i)
    prefill_total = running * i * (1 + recompute)
    # At least one step per output token; more if the token budget cannot carry both the
    # decode tokens and the prompts.
    steps = max(float(o), (running * o + prefill_total) / budget_total)
    decode = running * o / steps
    ctx = i + o / 2
    budget = max(1.0, budget_total - decode) if engine.chunked_prefill else float(budget_total)
    chunks = math.ceil(i / budget)
    mixed_steps = min(steps, running * (1 + recompute) * chunks)
    chunk = prefill_total / mixed_steps if mixed_steps else 0.0
    t_dec = step_time(model, hw, tp, decode, ctx)
    if not engine.chunked_prefill:
        # Without chunked prefill vLLM runs prompts in their own steps.
        t_mix = step_time(model, hw, tp, 0, 0, chunk, 0)
        cycle = steps * t_dec.seconds + mixed_steps * t_mix.seconds
    else:
        t_mix = step_time(model, hw, tp, decode, ctx, chunk, i / 2 if chunks > 1 else 0.0,
                          prefill_seqs=max(1.0, chunk / i))
        cycle = (steps - mixed_steps) * t_dec.seconds + mixed_steps * t_mix.seconds
    mean_step = cycle / steps
    own = 0.5 * mean_step + chunks * t_mix.seconds
    ttft_engine = own
    eff = hw.efficiency
    if eff.prefill_queue_share and running > 1:
        # Each prompt waited for, priced once: as if prefilled alone (aic-silicon-9: it was
        # min(prompt, budget) x the chunks a prompt takes beside the decodes, which counted
        # an 8,192-token prompt twice at 8,192 batched tokens), as one mixed step of this
        # cycle (aic-silicon-15), or as the mixed steps its tokens fill (aic-silicon-17).
        if eff.prefill_queue_unit == "mixed_step_per_chunk":
            unit = t_mix.seconds * i / chunk if chunk else 0.0
        elif eff.prefill_queue_unit == "mixed_step":
            unit = t_mix.seconds
        else:
            unit = prefill_time(model, hw, tp, i, budget_total)
        wait = eff.prefill_queue_share * (running - 1) ** eff.prefill_queue_exponent * unit
        if eff.prefill_queue_within_cycle:
            wait = min(wait, max(0.0, cycle - (o - 1) * t_dec.seconds - own))
        ttft_engine += wait
    return cycle, ttft_engine, t_dec, t_mix, steps, mixed_steps


def predict_point(model: ModelShape, hw: Hardware, tp: int, workload: Workload,
                  engine: EngineSettings, concurrency: int) -> Point:
    """Steady state with ``concurrency`` clients in a closed loop (see module docstring)."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    eff = hw.efficiency
    kv_tokens = kv_capacity_tokens(model, hw, tp, engine)
    if kv_tokens < workload.input_tokens + workload.output_tokens:
        raise ValueError(f"KV cache of {kv_tokens} tokens cannot hold one request of "
                         f"{workload.input_tokens + workload.output_tokens} tokens")
    lim = batch_limit(workload, engine, kv_tokens, hw.block_size)
    cap = lim.running
    z = eff.request_overhead_s
    # Below the cap, clients spend part of each round trip outside the engine (request
    # overhead), so fewer than N are running: N = X (R_engine + z), running = X R_engine.
    running = float(min(concurrency, cap))
    for _ in range(30):
        pre = _preempt_fraction(workload, kv_tokens, running, lim, hw.block_size)
        cycle, ttft_e, t_dec, t_mix, steps, mixed = _cycle(model, hw, tp, workload, engine,
                                                           running, pre)
        want = min(float(cap), concurrency * cycle / (cycle + z))
        if abs(want - running) < 1e-6:
            break
        running = 0.5 * (running + want)
    pre = _preempt_fraction(workload, kv_tokens, running, lim, hw.block_size)
    x = running / cycle  # requests per second
    wait = max(0.0, concurrency / x - cycle - z)  # Little's law: the rest is queueing
    queued = x * wait
    o = workload.output_tokens
    ttft = z / 2 + wait + ttft_e
    e2e = wait + cycle + z
    tpot = max(0.0, (e2e - ttft) / (o - 1)) if o > 1 else 0.0
    spike_share = mixed / steps if steps else 0.0
    itl = t_mix.seconds if spike_share > 0.5 else t_dec.seconds
    itl_p95 = t_mix.seconds if spike_share > 0.05 else t_dec.seconds
    limit = "clients" if concurrency <= cap else lim.reason
    return Point(
        concurrency=concurrency, running=running, queued=queued, limit=limit,
        preempting=pre > 0, output_tps=x * o, user_tps=o / e2e, requests_per_s=x,
        ttft_s=ttft, tpot_s=tpot, itl_s=itl, itl_p95_s=itl_p95, e2e_s=e2e,
        decode_step=t_dec, mixed_step=t_mix if mixed else None, bound=t_dec.bound,
    )


def _preempt_fraction(wl: Workload, kv_tokens: int, running: float, lim: BatchLimit,
                      block_size: int) -> float:
    """Extra prefill work, as a fraction of the prompt tokens, when the running
    sequences outgrow the cache: the share of the batch's peak KV demand the cache lacks
    is preempted once per request, and each preempted sequence recomputes its prompt and
    (on average) half its output."""
    if running <= lim.no_preemption:
        return 0.0
    peak = running * _blocks(wl.input_tokens + wl.output_tokens, block_size)
    share = max(0.0, (peak - kv_tokens) / peak)
    return share * (wl.input_tokens + wl.output_tokens / 2) / wl.input_tokens


DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def predict_curve(model: ModelShape, hw: Hardware, tp: int, workload: Workload,
                  engine: EngineSettings,
                  concurrencies: Iterable[int] = DEFAULT_CONCURRENCIES) -> list[Point]:
    """:func:`predict_point` at each concurrency (sorted, duplicates dropped)."""
    return [predict_point(model, hw, tp, workload, engine, c) for c in sorted(set(concurrencies))]


def knee(points: Sequence[Point]) -> Point:
    """The knee of a curve: the point with the largest "power" (total throughput x
    per-user speed, Kleinrock's throughput/delay). Below it, more concurrency buys
    throughput almost for free; beyond it, mostly latency."""
    if not points:
        raise ValueError("knee of an empty curve")
    return max(points, key=lambda p: (p.output_tps * p.user_tps, -p.concurrency))


@dataclass(frozen=True)
class Suggestion:
    """A starting point for the tuner."""

    max_num_seqs: int
    point: Point  # predicted at the workload's concurrency with that max-num-seqs
    slo_max: int  # the largest max-num-seqs that still meets the SLO (search bracket)
    meets_slo: bool
    reason: str


def suggest_start(model: ModelShape, hw: Hardware, tp: int, workload: Workload,
                  engine: EngineSettings, slo: SLO, upper: int | None = None) -> Suggestion:
    """The max-num-seqs to start tuning from: the knee under the SLO.

    Candidate values 1..``upper`` (default: what the KV cache supports, at most 1024)
    are predicted at the workload's concurrency (or, when unknown, at as many clients
    as the candidate allows). The suggestion is the smallest candidate within 2% of the
    best goodput under the SLO; when nothing meets the SLO, the candidate with the
    lowest latencies relative to the SLO, flagged ``meets_slo=False``.
    """
    kv_tokens = kv_capacity_tokens(model, hw, tp, engine)
    ceiling = batch_limit(workload, replace(engine, max_num_seqs=10**6), kv_tokens,
                          hw.block_size).running
    top = max(1, min(upper or 1024, ceiling))
    cands = sorted({c for c in (*_pow2_grid(top), top) if c <= top})
    scored: list[tuple[int, Point]] = []
    for c in cands:
        conc = workload.concurrency or c
        scored.append((c, predict_point(model, hw, tp, workload,
                                        replace(engine, max_num_seqs=c), conc)))
    ok = [(c, p) for c, p in scored if p.meets(slo)]
    if ok:
        best = max(p.goodput(slo) for _, p in ok)
        c, p = next((c, p) for c, p in ok if p.goodput(slo) >= 0.98 * best)
        return Suggestion(c, p, max(c2 for c2, _ in ok), True,
                          f"knee under the SLO: {p.output_tps:,.0f} output tok/s, TTFT "
                          f"{p.ttft_s * 1e3:,.0f} ms, ITL p95 {p.itl_p95_s * 1e3:,.1f} ms")
    c, p = min(scored, key=lambda cp: max(cp[1].ttft_s * 1e3 / slo.ttft_ms,
                                          cp[1].itl_p95_s * 1e3 / slo.itl_ms))
    return Suggestion(c, p, c, False,
                      f"no max-num-seqs meets the SLO (TTFT {slo.ttft_ms:,.0f} ms, ITL "
                      f"{slo.itl_ms:,.0f} ms); closest: TTFT {p.ttft_s * 1e3:,.0f} ms, "
                      f"ITL p95 {p.itl_p95_s * 1e3:,.1f} ms")


def _pow2_grid(top: int) -> list[int]:
    out, c = [], 1
    while c <= top:
        out.extend([c, c + c // 2] if c >= 4 else [c])
        c *= 2
    return out


# --------------------------------------------------------------------------- output


def point_dict(p: Point) -> dict[str, Any]:
    """A point as plain numbers (for JSON, status fields and reports)."""
    return {
        "concurrency": p.concurrency, "running": round(p.running, 2), "queued": round(p.queued, 2),
        "limit": p.limit, "preempting": p.preempting,
        "outputTokensPerSecond": round(p.output_tps, 1),
        "userTokensPerSecond": round(p.user_tps, 2), "ttftMs": round(p.ttft_s * 1e3, 2),
        "tpotMs": round(p.tpot_s * 1e3, 3), "itlMs": round(p.itl_s * 1e3, 3),
        "itlP95Ms": round(p.itl_p95_s * 1e3, 3), "bound": p.bound,
    }


# --------------------------------------------------------------------------- from a plan


@dataclass(frozen=True)
class PlanInputs:
    """The performance model's inputs for one planned LLMService."""

    model: ModelShape
    hardware: Hardware
    tp: int
    workload: Workload
    engine: EngineSettings
    slo: SLO


def inputs_for(spec: LLMServiceSpec, plan: Plan, facts: ModelFacts | None = None
               ) -> PlanInputs:
    """Build the model's inputs from a spec and its plan (facts from the planner's catalog,
    or ``facts`` read from config.json; batch limits and KV capacity from the plan: the
    max-num-seqs the pods start with, ``Plan.start_seqs``). The workload's concurrency is
    one replica's, ``ceil(concurrency / replicas)``, as the planner sizes the KV cache. The
    FLOP/s are those of the dtype the matmuls run in on this GPU (fp8 or fp4 tensor cores
    where weights and activations are in it and the GPU has them, else bf16's: see
    :func:`llm_operator.knowledge.dtype_support.compute_path`)."""
    quant = spec.model.quantization.value
    per_replica = max(1, math.ceil(spec.workload.concurrency / max(spec.replicas, 1)))
    model = model_facts(spec, facts)
    gpu = gpu_facts(spec)
    return PlanInputs(
        model=ModelShape.from_facts(model, quantization=quant,
                                    kv_cache_dtype=spec.engine.kv_cache_dtype.value),
        hardware=Hardware.from_facts(
            gpu, flops=compute_path(model, spec.model.quantization, gpu).flops),
        tp=plan.tensor_parallel_size,
        workload=Workload(spec.workload.input_tokens, spec.workload.output_tokens,
                          per_replica),
        engine=EngineSettings(max_num_seqs=plan.start_seqs,
                              max_num_batched_tokens=plan.max_num_batched_tokens or 8192,
                              kv_token_capacity=plan.kv_token_capacity),
        slo=SLO(ttft_ms=spec.workload.slo.ttft_p95_ms, itl_ms=spec.workload.slo.itl_p95_ms),
    )


def curve_for(spec: LLMServiceSpec, plan: Plan,
              concurrencies: Iterable[int] = DEFAULT_CONCURRENCIES,
              facts: ModelFacts | None = None) -> tuple[list[Point], SLO]:
    """The predicted curve of one planned replica, and the SLO to judge it by."""
    i = inputs_for(spec, plan, facts)
    wanted = sorted({*concurrencies, i.workload.concurrency or 1})
    return predict_curve(i.model, i.hardware, i.tp, i.workload, i.engine, wanted), i.slo


def suggest_for(spec: LLMServiceSpec, plan: Plan,
                facts: ModelFacts | None = None) -> Suggestion:
    """The tuner's starting max-num-seqs for a planned replica (at most the plan's cap)."""
    i = inputs_for(spec, plan, facts)
    return suggest_start(i.model, i.hardware, i.tp, i.workload, i.engine, i.slo,
                         upper=plan.max_num_seqs)


def tp_alternative(spec: LLMServiceSpec, plan: Plan, *, gpus_per_node: int | None = None,
                   facts: ModelFacts | None = None) -> list[tuple[Plan, Point]]:
    """The planned replica and the tensor-parallel option the planner did not take (the
    ``kvShortfall`` or ``cheaperOption`` explanation), each predicted at the workload's
    concurrency: what the SLO rule of the planner (a worst-case bound) looks like to the
    performance model. Empty when there is no such option, or it spans pipeline stages."""
    from . import make_plan

    other = next((e for e in plan.explanations if e.name in ("kvShortfall", "cheaperOption")),
                 None)
    if other is None or other.inputs.get("alternativePipelineParallelSize", 1) != 1:
        return []
    tp = int(other.inputs["alternativeTensorParallelSize"])
    engine = spec.engine.model_copy(update={"tensor_parallel_size": tp})
    alt_spec = spec.model_copy(update={"engine": engine})
    out: list[tuple[Plan, Point]] = []
    alt_plan = (make_plan(alt_spec, facts=facts) if gpus_per_node is None
                else make_plan(alt_spec, gpus_per_node=gpus_per_node, facts=facts))
    for s, p in ((spec, plan), (alt_spec, alt_plan)):
        i = inputs_for(s, p, facts)
        out.append((p, predict_point(i.model, i.hardware, i.tp, i.workload, i.engine,
                                     i.workload.concurrency or 1)))
    return out

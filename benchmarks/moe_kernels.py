"""Routed-expert GEMMs on one H200, against the performance model (issues 33 and 34): is
its 0.80 of HBM bandwidth right for a mixture-of-experts layer, whose experts get a few
tokens each at decode? Not a unit test.

Two measurements of the same shapes, side by side:

* ``gpu-kernels-moe-1``: PyTorch's grouped GEMM (``torch._grouped_mm``, bf16) measured on
  one H200 lent to this project, sweep fixed before the run in
  ``benchmarks/configs/gpu_kernels_moe.yaml`` (``benchmarks/gpu_kernels.py --run``),
  stored in ``benchmarks/data/gpu_kernels_moe_h200.json``. Not vLLM.
* vLLM's own fused MoE (its Triton experts kernel, unquantized bf16, vLLM 0.24.0)
  **measured by NVIDIA** on an H200 and shipped in AIConfigurator 0.12.0's kernel tables
  (``systems/data/h200_sxm/moe/vllm/0.24.0/moe_perf.parquet``, balanced routing), read at
  the same shapes and token counts. This pairing was added after the PyTorch run, once
  the tables were found: exploratory, said so in the section.

    .venv-aic/bin/python -m benchmarks.moe_kernels --record   # extract NVIDIA's rows
    .venv/bin/python -m benchmarks.moe_kernels --write        # the RESULTS.md section

The performance model's fixed time per MoE layer is fitted here, to kernel rows only:
aic-silicon-4 on the bf16 rows above (``fit_moe_layer_overhead``), aic-silicon-7 on the
one-token rows of the quantized kernels the MoE checkpoints run, on three GPUs
(``fit_moe_layer_overhead_1token``; rows extracted by ``--record-1token``, in
AIConfigurator's environment, as ``benchmarks/configs/aic_silicon_7.yaml`` registers).
The routed experts' achieved fraction of peak at prefill sizes (``moe_compute``,
aic-silicon-8) is fitted on the same kernels at 1,024-8,192 tokens
(``fit_moe_compute``; rows by ``--record-prefill``, ``configs/aic_silicon_8.yaml``).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from benchmarks.results_md import markers, record_or_write

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "gpu_kernels_moe.yaml"
MEASURED = ROOT / "benchmarks" / "data" / "gpu_kernels_moe_h200.json"
DATA = ROOT / "benchmarks" / "data" / "moe_kernels_aic_h200.json"
# The rows the performance model's fixed cost per MoE layer is fitted to (aic-silicon-4):
# every bf16 shape of the same table, balanced routing, one GPU, <= FIT_MAX_TOKENS tokens.
FIT_DATA = ROOT / "benchmarks" / "data" / "moe_kernels_aic_h200_fit.json"
FIT_MAX_TOKENS = 128
# aic-silicon-7's fit rows: one token, the quantized kernels, H100 / H200 / B200.
FIT_1TOKEN_CONFIG = ROOT / "benchmarks" / "configs" / "aic_silicon_7.yaml"
FIT_1TOKEN_DATA = ROOT / "benchmarks" / "data" / "moe_kernels_aic_1token_fit.json"
# aic-silicon-8's fit rows: prefill token counts, the same kernels and GPUs.
FIT_PREFILL_CONFIG = ROOT / "benchmarks" / "configs" / "aic_silicon_8.yaml"
FIT_PREFILL_DATA = ROOT / "benchmarks" / "data" / "moe_kernels_aic_prefill_fit.json"
# AIConfigurator's system directories and the project's GPU table names for them.
AIC_GPUS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200"}
SECTION = "gpu-kernels-moe"
KERNEL = "vllm_unquantizedfusedmoe_triton_tritonexperts"
TABLE = "systems/data/h200_sxm/moe/vllm/0.24.0/moe_perf.parquet"


def record(path: Path = DATA) -> dict[str, Any]:
    """NVIDIA's measured vLLM fused-MoE latencies at the sweep's shapes (AIConfigurator's
    environment: needs pandas and the package's parquet tables)."""
    import aiconfigurator_core
    import pandas as pd

    config = dict(yaml.safe_load(CONFIG.read_text()))
    df = pd.read_parquet(Path(aiconfigurator_core.__file__).parent / TABLE)
    rows = []
    for layer in config["layers"]:
        ep = int(layer["experts"]) // int(layer["local"])
        q = df[(df.kernel_source == KERNEL) & (df.moe_dtype == "bfloat16")
               & (df.distribution == "balanced") & (df.moe_tp_size == 1)
               & (df.moe_ep_size == ep) & (df.hidden_size == int(layer["hidden"]))
               & (df.inter_size == int(layer["intermediate"]))
               & (df.topk == int(layer["top_k"])) & (df.num_experts == int(layer["experts"]))
               & (df.num_tokens.isin([int(m) for m in config["tokens"]]))]
        for r in q.sort_values("num_tokens").itertuples():
            rows.append({"layer": layer["name"], "tokens": int(r.num_tokens),
                         "ms": round(float(r.latency), 4), "vllm": str(r.version),
                         "device": str(r.device)})
    data = {"source": f"AIConfigurator 0.12.0 aiconfigurator_core/{TABLE}",
            "kernel": KERNEL, "dtype": "bfloat16", "distribution": "balanced",
            "measured_by": "NVIDIA", "rows": rows}
    path.write_text(json.dumps(data, indent=1) + "\n")
    fit = df[(df.kernel_source == KERNEL) & (df.moe_dtype == "bfloat16")
             & (df.distribution == "balanced") & (df.moe_tp_size == 1) & (df.moe_ep_size == 1)
             & (df.num_tokens <= FIT_MAX_TOKENS)]
    fit_rows = [{"hidden": int(r.hidden_size), "intermediate": int(r.inter_size),
                 "top_k": int(r.topk), "experts": int(r.num_experts),
                 "tokens": int(r.num_tokens), "ms": round(float(r.latency), 4)}
                for r in fit.sort_values(["hidden_size", "inter_size", "topk", "num_experts",
                                          "num_tokens"]).itertuples()]
    FIT_DATA.write_text(json.dumps({**{k: data[k] for k in ("source", "kernel", "dtype",
                                                             "distribution", "measured_by")},
                                    "device": "NVIDIA H200", "rows": fit_rows}, indent=1) + "\n")
    return data


def fit_moe_layer_overhead(fit: dict[str, Any]) -> tuple[float, list[float]]:
    """The performance model's fixed time per MoE layer per step (aic-silicon-4's fit):
    the median over NVIDIA's measured fused-MoE latencies (``fit``, one H200) of the
    measured time minus the model's roofline for the same experts; with every residual."""
    from llm_operator.knowledge.catalog import lookup_gpu
    from llm_operator.planning.perfmodel import GPU_EFFICIENCY

    gpu = lookup_gpu("H200")
    assert gpu is not None and gpu.memory_bandwidth and gpu.bf16_flops
    residuals = []
    for r in fit["rows"]:
        layer = {**r, "local": r["experts"]}
        model_t, _ = model_seconds(layer, int(r["tokens"]), gpu.memory_bandwidth,
                                   gpu.bf16_flops, GPU_EFFICIENCY.bandwidth,
                                   GPU_EFFICIENCY.compute)
        residuals.append(r["ms"] / 1e3 - model_t)
    return statistics.median(residuals), residuals


def record_fit_rows(config_path: Path, path: Path) -> dict[str, Any]:
    """A registered kernel fit's rows from NVIDIA's tables (AIConfigurator's environment):
    every kernel of the config's dtypes, every shape, balanced routing, one GPU (no TP or
    EP slicing), at its token count(s), on each of its GPUs (aic-silicon-7: one token;
    aic-silicon-8: prefill sizes)."""
    import aiconfigurator_core
    import pandas as pd

    fit = dict(yaml.safe_load(config_path.read_text()))["fit"]
    tokens = [int(t) for t in (fit["tokens"] if isinstance(fit["tokens"], list)
                               else [fit["tokens"]])]
    rows = []
    for system in fit["gpus"]:
        table = f"systems/data/{system}/moe/vllm/0.24.0/moe_perf.parquet"
        df = pd.read_parquet(Path(aiconfigurator_core.__file__).parent / table)
        q = df[df.moe_dtype.isin(list(fit["moeDtypes"])) & (df.distribution == "balanced")
               & (df.moe_tp_size == 1) & (df.moe_ep_size == 1)
               & (df.num_tokens.isin(tokens))]
        for r in q.sort_values(["moe_dtype", "kernel_source", "hidden_size", "inter_size",
                                "topk", "num_experts", "num_tokens"]).itertuples():
            rows.append({"gpu": system, "kernel": str(r.kernel_source),
                         "dtype": str(r.moe_dtype), "hidden": int(r.hidden_size),
                         "intermediate": int(r.inter_size), "top_k": int(r.topk),
                         "experts": int(r.num_experts), "tokens": int(r.num_tokens),
                         "ms": round(float(r.latency), 5)})
    data = {"source": "AIConfigurator 0.12.0 aiconfigurator_core/systems/data/"
                      "{" + ",".join(fit["gpus"]) + "}/moe/vllm/0.24.0/moe_perf.parquet",
            "config": str(config_path.relative_to(ROOT)), "distribution": "balanced",
            "measured_by": "NVIDIA", "rows": rows}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def fit_moe_layer_overhead_1token(fit: dict[str, Any], config_path: Path = FIT_1TOKEN_CONFIG
                                  ) -> tuple[float, list[float]]:
    """aic-silicon-7's fit: the median over the stored one-token rows (``fit``) of NVIDIA's
    measured latency minus the model's roofline for the same experts on that GPU (the
    top_k experts' weights at the dtype's registered bytes per weight, read at the
    model's share of HBM); with every residual."""
    from llm_operator.knowledge.catalog import lookup_gpu
    from llm_operator.planning.perfmodel import GPU_EFFICIENCY

    registered = dict(yaml.safe_load(config_path.read_text()))["fit"]
    bytes_per = {k: float(v) for k, v in registered["moeDtypes"].items()}
    residuals = []
    for r in fit["rows"]:
        gpu = lookup_gpu(AIC_GPUS[r["gpu"]])
        assert gpu is not None and gpu.memory_bandwidth and gpu.bf16_flops
        roofline, _ = model_seconds({**r, "local": r["experts"]}, int(r["tokens"]),
                                    gpu.memory_bandwidth, gpu.bf16_flops,
                                    GPU_EFFICIENCY.bandwidth, GPU_EFFICIENCY.compute,
                                    bytes_per[r["dtype"]])
        residuals.append(r["ms"] / 1e3 - roofline)
    return statistics.median(residuals), residuals


def fit_moe_compute(fit: dict[str, Any], config_path: Path = FIT_PREFILL_CONFIG
                    ) -> tuple[float, list[float]]:
    """aic-silicon-8's fit: the median over the stored prefill-size rows (``fit``) of the
    routed experts' achieved fraction of the peak the model uses for that dtype on that
    GPU (FP8 for the registered fp8 dtypes, else BF16); with every fraction."""
    from llm_operator.knowledge.catalog import lookup_gpu

    registered = dict(yaml.safe_load(config_path.read_text()))["fit"]
    fp8 = set(registered["fp8Peak"])
    fractions = []
    for r in fit["rows"]:
        gpu = lookup_gpu(AIC_GPUS[r["gpu"]])
        assert gpu is not None and gpu.bf16_flops and gpu.fp8_flops
        peak = gpu.fp8_flops if r["dtype"] in fp8 else gpu.bf16_flops
        flops = 2 * int(r["tokens"]) * int(r["top_k"]) * 3 * int(r["hidden"]) * int(
            r["intermediate"])
        fractions.append(flops / (r["ms"] / 1e3) / peak)
    return statistics.median(fractions), fractions


def model_seconds(layer: dict[str, Any], tokens: int, bandwidth: float, flops: float,
                  eff_bw: float, eff_compute: float, bytes_per_weight: float = 2.0
                  ) -> tuple[float, float]:
    """The performance model's time for one layer's routed experts on this GPU and the
    local experts it expects touched: uniform routing, as ``ModelShape.weight_bytes``
    counts them (an expert is missed by every token with probability (1 - k/E)^tokens),
    weights (gate_up and down) of ``bytes_per_weight`` (bf16: 2), FLOPs of the rows
    routed here."""
    e, local, k = int(layer["experts"]), int(layer["local"]), int(layer["top_k"])
    h, inter = int(layer["hidden"]), int(layer["intermediate"])
    touched = local * (1 - (1 - k / e) ** max(tokens, 1))
    rows = tokens * k * local / e
    t = max(touched * 3 * h * inter * bytes_per_weight / (bandwidth * eff_bw),
            2 * rows * 3 * h * inter / (flops * eff_compute))
    return t, touched


def summarise(measured: dict[str, Any], aic: dict[str, Any]) -> list[dict[str, Any]]:
    """Per layer and token count: PyTorch's median time, NVIDIA's vLLM time, the model's."""
    from llm_operator.knowledge.catalog import lookup_gpu
    from llm_operator.planning.perfmodel import GPU_EFFICIENCY

    gpu = lookup_gpu(measured["device"]["name"])
    if gpu is None or gpu.memory_bandwidth is None or gpu.bf16_flops is None:
        raise SystemExit(f"the GPU table has no figures for {measured['device']['name']!r}")
    layers = {layer["name"]: layer for layer in measured["config"]["layers"]}
    vllm = {(r["layer"], r["tokens"]): r["ms"] / 1e3 for r in aic["rows"]}
    out = []
    for name, layer in layers.items():
        for m in measured["config"]["tokens"]:
            pts = [p for p in measured["moe"] if p["layer"] == name and p["tokens"] == m]
            if not pts or not pts[0]["rows"]:
                continue
            secs = [p["seconds"] for p in pts]
            t = statistics.median(secs)
            model_t, touched = model_seconds(layer, int(m), gpu.memory_bandwidth,
                                             gpu.bf16_flops, GPU_EFFICIENCY.bandwidth,
                                             GPU_EFFICIENCY.compute)
            v = vllm.get((name, int(m)))
            full = pts[0]["touched"] == int(layer["local"])
            weights = (int(layer["local"]) * 3 * int(layer["hidden"])
                       * int(layer["intermediate"]) * 2)
            out.append({
                "layer": name, "tokens": int(m), "touched": pts[0]["touched"],
                "model_touched": touched, "torch_us": t * 1e6,
                "spread": max(secs) / min(secs) - 1, "vllm_us": v * 1e6 if v else None,
                "model_us": model_t * 1e6,
                "torch_hbm": weights / t / gpu.memory_bandwidth if full else None,
                "vllm_hbm": weights / v / gpu.memory_bandwidth if (full and v) else None,
                "model_over_vllm": model_t / v if v else None,
                "model_over_torch": model_t / t})
    return out


def section(measured: dict[str, Any], aic: dict[str, Any]) -> str:
    """The RESULTS.md section from the two stored files."""
    from llm_operator.planning.perfmodel import GPU_EFFICIENCY

    begin, end = markers(SECTION)
    rows = summarise(measured, aic)
    paired = [r for r in rows if r["model_over_vllm"] is not None]
    dec = [r for r in paired if r["tokens"] <= 128]
    full_v = [r["vllm_hbm"] for r in rows if r["vllm_hbm"] is not None and r["tokens"] <= 512]
    full_t = [r["torch_hbm"] for r in rows if r["torch_hbm"] is not None and r["tokens"] <= 512]
    unpaired = sorted({r["layer"] for r in rows if r["vllm_us"] is None})
    eff = GPU_EFFICIENCY.bandwidth

    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f}" if xs else "n/a"

    lines = [begin, "## Routed experts on one H200: PyTorch's grouped GEMM and vLLM's fused "
             f"MoE against the performance model ({measured['label']})", "",
             "Two measurements of one MoE layer's routed experts (gate_up and down, bf16 "
             "weights, random data): **measured in this workplace** with PyTorch's "
             f"`torch._grouped_mm` on one H200 (PyTorch {measured['device']['torch']}; config "
             "`benchmarks/configs/gpu_kernels_moe.yaml`, committed before the run; seeded "
             "uniform top-k routing; 4 distinct copies of the layer chained so weights "
             f"stream from HBM; CUDA-graph replay; {measured['config']['repeats']} repeats, "
             "median), **not vLLM**; and vLLM's own fused MoE (its Triton experts kernel, "
             f"vLLM {aic['rows'][0]['vllm'] if aic['rows'] else '?'}) **measured by NVIDIA** "
             "on an H200, from AIConfigurator 0.12.0's kernel tables (balanced routing). The "
             "second was paired with the first after the run, once those tables were found: "
             "an exploratory comparison. The model's time is its roofline for the same "
             f"experts: max(touched expert weights / (HBM x {eff}), FLOPs / (peak x "
             f"{GPU_EFFICIENCY.compute})), with the touched count it expects from uniform "
             "routing; its step overheads are left out. Data: "
             "`benchmarks/data/gpu_kernels_moe_h200.json`, "
             "`benchmarks/data/moe_kernels_aic_h200.json`; "
             "`.venv/bin/python -m benchmarks.moe_kernels --write` regenerates this.", "",
             f"- Where every local expert is read (HBM share of the layer's weights, <= 512 "
             f"tokens): vLLM's fused MoE {min(full_v):.0%}-{max(full_v):.0%}, PyTorch's grouped "
             f"GEMM {min(full_t):.0%}-{max(full_t):.0%}; the model assumes {eff:.0%}."
             if full_v and full_t else "- No point read every local expert.",
             "- Model time over vLLM's measured time: median "
             f"{med([r['model_over_vllm'] for r in paired])} "
             f"over {len(paired)} points, {med([r['model_over_vllm'] for r in dec])} at decode "
             "(<= 128 tokens); below 1 the model is faster than vLLM's kernel.",
             "- At one token vLLM's kernel takes " + ", ".join(
                 f"{r['vllm_us']:.0f} us for {r['touched']} experts of {r['layer']} "
                 f"({r['model_over_vllm']:.2f} of it in the model)" for r in paired
                 if r["tokens"] == 1) + ": a fixed cost per MoE layer that the model's "
             "per-step overhead does not carry, so its batch-1 decode of an MoE model is "
             "optimistic.",
             f"- Largest spread between the two PyTorch repeats: "
             f"{max(r['spread'] for r in rows):.1%}.",
             ]
    if unpaired:
        lines.append(f"- No bf16 row in NVIDIA's tables for {', '.join(unpaired)} "
                     "(gpt-oss ships mxfp4, DeepSeek-V3 fp8 block): PyTorch only.")
    lines += ["", "| layer | tokens | experts read (model) | PyTorch us | vLLM us (NVIDIA) | "
              "model us | model / vLLM | model / PyTorch |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        v = f"{r['vllm_us']:.0f}" if r["vllm_us"] is not None else "-"
        mv = f"{r['model_over_vllm']:.2f}" if r["model_over_vllm"] is not None else "-"
        lines.append(f"| {r['layer']} | {r['tokens']} | {r['touched']} ({r['model_touched']:.0f}) "
                     f"| {r['torch_us']:.0f} | {v} | {r['model_us']:.0f} | {mv} | "
                     f"{r['model_over_torch']:.2f} |")
    lines += ["", end]
    return "\n".join(lines) + "\n"


def render() -> str:
    return section(json.loads(MEASURED.read_text()), json.loads(DATA.read_text()))


# The registered kernel fits this module records: flag -> (config, rows, fit, what).
FITS = {"--record-1token": (FIT_1TOKEN_CONFIG, FIT_1TOKEN_DATA,
                            fit_moe_layer_overhead_1token, "median residual, s"),
        "--record-prefill": (FIT_PREFILL_CONFIG, FIT_PREFILL_DATA,
                             fit_moe_compute, "median fraction of peak")}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 1 and args[0] in FITS:
        config_path, path, fit, what = FITS[args[0]]
        median, values = fit(record_fit_rows(config_path, path))
        sys.stdout.write(f"{len(values)} rows; {what} {median:.6g}\n")
        return 0
    return record_or_write(__doc__, SECTION, record, render, args)


if __name__ == "__main__":
    sys.exit(main())

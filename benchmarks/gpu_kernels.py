"""PyTorch kernels at the shapes of vLLM's decode and prefill steps, on one NVIDIA GPU,
against the performance model's efficiency factors (issue 34: GPU-shaped evidence).

vLLM cannot be installed on the device machine this project is sometimes lent (its
wheel needs a newer torch than the machine has), so this measures what a vLLM step is
made of, with the machine's own PyTorch: one layer's linear GEMMs per TP shard (bf16
through cuBLAS, fp8 through ``torch._scaled_mm``) at decode batches and prefill chunks,
HBM copy and read bandwidth, and decode attention through SDPA. It is NOT a vLLM
measurement: no paged KV, no sampling, no scheduler; a lower bound on the time of the
GEMMs inside a vLLM step, an upper bound on the efficiency vLLM can reach on them.

    # on the GPU machine (needs only torch and pyyaml):
    python3 benchmarks/gpu_kernels.py --run --out "$OUT"
    # here, from the stored JSON:
    .venv/bin/python -m benchmarks.gpu_kernels            # print the section
    .venv/bin/python -m benchmarks.gpu_kernels --write    # and replace it in RESULTS.md

The sweep is fixed in ``benchmarks/configs/gpu_kernels.yaml`` (committed before the run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "gpu_kernels.yaml"
DATA = ROOT / "benchmarks" / "data"  # gpu_kernels_<gpu>.json, one per GPU measured
SECTION = "gpu-kernels"


# --- on the GPU machine -------------------------------------------------------------

def gemm_shapes(shard: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(name, K, N) of one layer's linear GEMMs on one GPU of a TP group."""
    tp = int(shard["tp"])
    h, d = int(shard["hidden"]), int(shard["head_dim"])
    q, kv = int(shard["heads"]) * d // tp, int(shard["kv_heads"]) * d // tp
    inter = int(shard["intermediate"]) // tp
    return [("qkv", h, q + 2 * kv), ("o", q, h), ("gate_up", h, 2 * inter), ("down", inter, h)]


def _smi() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,"
             "clocks.mem,power.draw,temperature.gpu", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi failed: {e}"


def seconds_per_call(fn: Any, iters: int, graph: bool, cuda: bool = True) -> float:
    """Seconds per call of ``fn``: 3 warm-ups, then ``iters`` calls (replays of one CUDA
    graph of it when ``graph``) between CUDA events; on the CPU (``cuda`` False, only to
    smoke-test a sweep), between wall-clock readings."""
    import torch

    for _ in range(3):
        fn()
    if not cuda:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters
    torch.cuda.synchronize()
    call = fn
    if graph:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            fn()
        call = g.replay
        call()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(iters):
        call()
    t1.record()
    torch.cuda.synchronize()
    return t0.elapsed_time(t1) / 1e3 / iters


def run(config: dict[str, Any], out: Path, budget_s: float) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    start = time.monotonic()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    record: dict[str, Any] = {
        "label": config["label"], "config": config,
        "device": {"name": props.name, "sms": props.multi_processor_count,
                   "memory_bytes": props.total_memory, "torch": torch.__version__,
                   "cuda": torch.version.cuda, "smi_before": _smi()},
        "bandwidth": [], "gemm": [], "attention": [], "errors": [],
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_kernels.json"

    def save() -> None:
        record["elapsed_s"] = round(time.monotonic() - start, 1)
        path.write_text(json.dumps(record, indent=1))

    iters = int(config["iterations"])

    def timed(fn: Any, graph: bool) -> float:
        return seconds_per_call(fn, iters, graph)

    fp8 = getattr(torch, "float8_e4m3fn", None)
    one = torch.ones((), device=dev, dtype=torch.float32)
    for rep in range(int(config["repeats"])):
        # HBM: a device copy (read + write counted) and a read-only sum.
        n = int(config["bandwidth"]["bytes"]) // 2
        a = torch.randn(n, device=dev, dtype=torch.bfloat16)
        b = torch.empty_like(a)
        t = timed(lambda a=a, b=b: b.copy_(a), graph=False)
        record["bandwidth"].append({"rep": rep, "kind": "copy", "bytes": 4 * n, "seconds": t})
        t = timed(lambda a=a: a.sum(dtype=torch.float32), graph=False)
        record["bandwidth"].append({"rep": rep, "kind": "read", "bytes": 2 * n, "seconds": t})
        del a, b
        torch.cuda.empty_cache()
        save()
        for shard in config["shards"]:
            shapes = gemm_shapes(shard)
            for dtype in config["dtypes"]:
                if time.monotonic() - start > budget_s:
                    record["errors"].append(
                        f"budget {budget_s} s spent before {shard['name']} {dtype}")
                    save()
                    return record
                if dtype == "fp8" and fp8 is None:
                    record["errors"].append("this torch has no float8_e4m3fn")
                    continue
                layers = []
                for _ in range(int(config["rotateLayers"])):
                    ws = []
                    for _name, k, nn in shapes:
                        w = torch.randn(nn, k, device=dev, dtype=torch.bfloat16) * 0.02
                        ws.append(w.to(fp8) if dtype == "fp8" else w)
                    layers.append(ws)
                wbytes = 1 if dtype == "fp8" else 2
                for m in config["tokens"]:
                    xs = []
                    for _name, k, _n in shapes:
                        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                        xs.append(x.to(fp8) if dtype == "fp8" else x)

                    if dtype == "fp8":
                        def chain(layers: list[Any] = layers, xs: list[Any] = xs) -> None:
                            for ws in layers:
                                for x, w in zip(xs, ws, strict=True):
                                    torch._scaled_mm(x, w.t(), one, one, out_dtype=torch.bfloat16,
                                                     use_fast_accum=True)
                    else:
                        def chain(layers: list[Any] = layers, xs: list[Any] = xs) -> None:
                            for ws in layers:
                                for x, w in zip(xs, ws, strict=True):
                                    F.linear(x, w)
                    flops = sum(2 * m * k * nn for _name, k, nn in shapes)
                    moved = sum(nn * k * wbytes + m * k * wbytes + m * nn * 2
                                for _name, k, nn in shapes)
                    modes = ["graph"] if config.get("graphs", True) else []
                    if m in config.get("eagerTokens", []):
                        modes.append("eager")
                    for mode in modes:
                        try:
                            t = timed(chain, graph=(mode == "graph")) / len(layers)
                        except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
                            record["errors"].append(f"{shard['name']} {dtype} M={m} {mode}: "
                                                    f"{type(e).__name__}: {e}"[:300])
                            continue
                        record["gemm"].append({
                            "rep": rep, "shard": shard["name"], "tp": shard["tp"], "dtype": dtype,
                            "tokens": m, "mode": mode, "seconds_per_layer": t,
                            "flops_per_layer": flops, "bytes_per_layer": moved,
                            "weight_bytes_per_layer": sum(nn * k * wbytes for _n, k, nn in shapes)})
                    del xs
                del layers
                torch.cuda.empty_cache()
                save()
        att = config["attention"]
        h, kvh, d = int(att["heads"]), int(att["kv_heads"]), int(att["head_dim"])
        for bsz in att["batches"]:
            for ctx in att["contexts"]:
                try:
                    q = torch.randn(bsz, h, 1, d, device=dev, dtype=torch.bfloat16)
                    k = torch.randn(bsz, kvh, ctx, d, device=dev, dtype=torch.bfloat16)
                    v = torch.randn_like(k)
                    t = timed(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(
                        q, k, v, enable_gqa=True), graph=True)
                    record["attention"].append({"rep": rep, "batch": bsz, "context": ctx,
                                                "kv_bytes": 2 * k.numel() * 2, "seconds": t})
                    del q, k, v
                except Exception as e:  # noqa: BLE001
                    record["errors"].append(
                        f"attention B={bsz} ctx={ctx}: {type(e).__name__}: {e}"[:300])
        torch.cuda.empty_cache()
        save()
    record["device"]["smi_after"] = _smi()
    save()
    return record


def moe_assignment(tokens: int, experts: int, local: int, top_k: int,
                   seed: int) -> list[int]:
    """Rows per local expert (the first ``local`` of ``experts``) when each of ``tokens``
    tokens picks ``top_k`` distinct experts uniformly (a seeded stand-in for a router)."""
    import random

    rng = random.Random(seed * 1_000_003 + tokens)
    counts = [0] * local
    for _ in range(tokens):
        for e in rng.sample(range(experts), top_k):
            if e < local:
                counts[e] += 1
    return counts


def run_moe(config: dict[str, Any], out: Path, budget_s: float, device: str = "cuda"
            ) -> dict[str, Any]:
    """One MoE layer's routed experts (gate_up then down, each one grouped GEMM over the
    local experts) at each token count; weights [experts, N, K] bf16, passed transposed."""
    import torch

    start = time.monotonic()
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    props = torch.cuda.get_device_properties(dev) if cuda else None
    record: dict[str, Any] = {
        "label": config["label"], "config": config,
        "device": {"name": props.name if props else "cpu", "torch": torch.__version__,
                   "cuda": torch.version.cuda, "smi_before": _smi() if cuda else ""},
        "moe": [], "errors": []}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_kernels_moe.json"

    def save() -> None:
        record["elapsed_s"] = round(time.monotonic() - start, 1)
        path.write_text(json.dumps(record, indent=1))

    iters = int(config["iterations"])

    def timed(fn: Any) -> float:
        return seconds_per_call(fn, iters, graph=cuda, cuda=cuda)

    for rep in range(int(config["repeats"])):
        for layer in config["layers"]:
            if time.monotonic() - start > budget_s:
                record["errors"].append(f"budget {budget_s} s spent before {layer['name']}")
                save()
                return record
            e, h, inter = int(layer["local"]), int(layer["hidden"]), int(layer["intermediate"])
            copies = []
            for _ in range(int(config["rotateLayers"])):
                gu = torch.randn(e, 2 * inter, h, device=dev, dtype=torch.bfloat16) * 0.02
                dn = torch.randn(e, h, inter, device=dev, dtype=torch.bfloat16) * 0.02
                copies.append((gu, dn))
            for m in config["tokens"]:
                counts = moe_assignment(int(m), int(layer["experts"]), e, int(layer["top_k"]),
                                        int(config.get("seed", 0)))
                rows = sum(counts)
                touched = sum(1 for c in counts if c)
                if rows == 0:
                    record["moe"].append({"rep": rep, "layer": layer["name"], "tokens": m,
                                          "rows": 0, "touched": 0, "seconds": 0.0,
                                          "bytes": 0, "flops": 0})
                    continue
                offs = torch.tensor(list(itertools_accumulate(counts)), device=dev,
                                    dtype=torch.int32)
                x = torch.randn(rows, h, device=dev, dtype=torch.bfloat16)
                y = torch.randn(rows, inter, device=dev, dtype=torch.bfloat16)

                def chain(x: Any = x, y: Any = y, offs: Any = offs,
                          copies: list[Any] = copies) -> None:
                    for gu, dn in copies:
                        torch._grouped_mm(x, gu.transpose(-2, -1), offs=offs)
                        torch._grouped_mm(y, dn.transpose(-2, -1), offs=offs)
                try:
                    t = timed(chain) / len(copies)
                except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
                    record["errors"].append(f"{layer['name']} M={m}: {type(exc).__name__}: "
                                            f"{exc}"[:300])
                    continue
                weights = touched * 3 * h * inter * 2
                moved = weights + rows * (h + 2 * inter) * 2 + rows * (2 * inter + h) * 2
                record["moe"].append({
                    "rep": rep, "layer": layer["name"], "tokens": m, "rows": rows,
                    "touched": touched, "seconds": t, "bytes": moved,
                    "weight_bytes": weights, "flops": 2 * rows * 3 * h * inter})
            del copies
            if cuda:
                torch.cuda.empty_cache()
            save()
    if cuda:
        record["device"]["smi_after"] = _smi()
    save()
    return record


def itertools_accumulate(values: list[int]) -> list[int]:
    """Cumulative sums: the grouped GEMM's end offset of each expert's rows."""
    import itertools

    return list(itertools.accumulate(values))


# --- here: the analysis -------------------------------------------------------------

def data_files() -> list[Path]:
    """The stored runs, one file per GPU, in name order."""
    return sorted(f for f in DATA.glob("gpu_kernels_*.json") if "_moe_" not in f.name)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summarise(data: dict[str, Any]) -> dict[str, Any]:
    """Per point, the median over repeats and the achieved fractions of the GPU's
    datasheet peaks; beside them, the performance model's time for the same GEMMs
    (max(bytes / (bandwidth x eff), flops / (peak x eff)), no overheads)."""
    from llm_operator.knowledge.catalog import lookup_gpu
    from llm_operator.planning.perfmodel import GPU_EFFICIENCY

    gpu = lookup_gpu(data["device"]["name"])
    if gpu is None or gpu.memory_bandwidth is None or gpu.bf16_flops is None:
        raise SystemExit(f"the GPU table has no figures for {data['device']['name']!r}")
    bw, peaks = gpu.memory_bandwidth, {"bf16": gpu.bf16_flops, "fp8": gpu.fp8_flops}
    eff = GPU_EFFICIENCY
    points: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for g in data["gemm"]:
        points.setdefault((g["shard"], g["dtype"], g["tokens"], g["mode"]), []).append(g)
    rows = []
    for (shard, dtype, m, mode), gs in points.items():
        t = _median([g["seconds_per_layer"] for g in gs])
        spread = (max(g["seconds_per_layer"] for g in gs) / min(g["seconds_per_layer"] for g in gs)
                  - 1) if len(gs) > 1 else 0.0
        g = gs[0]
        model_t = max(g["bytes_per_layer"] / (bw * eff.bandwidth),
                      g["flops_per_layer"] / (peaks[dtype] * eff.compute))
        rows.append({"shard": shard, "dtype": dtype, "tokens": m, "mode": mode,
                     "us_per_layer": t * 1e6, "spread": spread,
                     "bandwidth_fraction": g["bytes_per_layer"] / t / bw,
                     "compute_fraction": g["flops_per_layer"] / t / peaks[dtype],
                     "model_over_measured": model_t / t})
    bwrows = {}
    for b in data["bandwidth"]:
        bwrows.setdefault(b["kind"], []).append(b["bytes"] / b["seconds"] / bw)
    att = {}
    for a in data["attention"]:
        att.setdefault((a["batch"], a["context"]), []).append(a["kv_bytes"] / a["seconds"] / bw)
    return {"gpu": gpu.name, "bandwidth": bw, "peaks": peaks, "rows": rows,
            "hbm": {k: _median(v) for k, v in bwrows.items()},
            "attention": {k: _median(v) for k, v in att.items()},
            "efficiency": {"bandwidth": eff.bandwidth, "compute": eff.compute}}


def render(files: list[Path]) -> str:
    """The section: per GPU, the model's time over the measured time of each shard's GEMMs
    at each M (CUDA graphs), and the ranges that bound the model's efficiency factors."""
    from benchmarks.results_md import markers

    begin, end = markers(SECTION)
    datas = [json.loads(f.read_text()) for f in files]
    first = datas[0]
    eff = summarise(first)["efficiency"]
    ms = list(first["config"]["tokens"])
    lines = [begin, "## GPU kernels at the shapes of vLLM's steps, against the performance "
             f"model ({first['label']})", "",
             "**Measured on GPUs in this workplace** (one device machine lent to one session, "
             "PyTorch's own kernels), config `benchmarks/configs/gpu_kernels.yaml`, committed "
             "before the runs; data in `benchmarks/data/gpu_kernels_*.json`. **Not vLLM**: "
             "vLLM cannot be installed on that machine, so these are the GEMMs and copies a "
             "vLLM step is made of (one layer's qkv, o, gate_up and down per TP shard; bf16 "
             "through cuBLAS, fp8 e4m3 per-tensor through `torch._scaled_mm`; random data; "
             "8 distinct copies of the layer chained so weights stream from HBM; CUDA-graph "
             f"replay; {first['config']['repeats']} repeats of the whole sweep, median). "
             "Fractions are of the datasheet figures in the operator's GPU table. A cell is "
             "the performance model's time for the same GEMMs "
             f"(max(bytes / (bandwidth x {eff['bandwidth']}), FLOPs / (peak x "
             f"{eff['compute']})), its overheads left out) over the measured time: below 1 "
             "the model is faster than the GEMMs alone can be, above 1 it leaves room for "
             "what a vLLM step adds (attention, norms, sampling).", ""]
    for data in datas:
        s = summarise(data)
        dev = data["device"]
        rows = s["rows"]
        graph = [r for r in rows if r["mode"] == "graph"]
        dec = [r for r in graph if r["tokens"] <= 128]
        pre = [r for r in graph if r["tokens"] >= 1024]

        def rng(rs: list[dict[str, Any]], dtype: str, key: str) -> str:
            vals = [r[key] for r in rs if r["dtype"] == dtype]
            return f"{min(vals):.0%}-{max(vals):.0%}" if vals else "n/a"

        eager = []
        for r in rows:
            if r["mode"] != "eager":
                continue
            g = next((x for x in graph if (x["shard"], x["dtype"], x["tokens"])
                      == (r["shard"], r["dtype"], r["tokens"])), None)
            if g:
                eager.append(r["us_per_layer"] - g["us_per_layer"])
        spread = max(r["spread"] for r in graph)
        lines += [f"### {dev['name']} ({s['gpu']}: {s['bandwidth'] / 1e12:.2f} TB/s, "
                  f"{s['peaks']['bf16'] / 1e12:.0f} / {s['peaks']['fp8'] / 1e12:.0f} TFLOP/s "
                  f"bf16 / fp8 dense; PyTorch {dev['torch']})", "",
                  "- HBM: " + ", ".join(f"{k} {v:.0%}" for k, v in sorted(s["hbm"].items()))
                  + " of the datasheet (a copy counts bytes read and written).",
                  f"- Decode GEMMs (M <= 128): {rng(dec, 'bf16', 'bandwidth_fraction')} of HBM "
                  f"bandwidth in bf16, {rng(dec, 'fp8', 'bandwidth_fraction')} in fp8; the "
                  f"model assumes {eff['bandwidth']:.0%}.",
                  f"- Prefill GEMMs (M >= 1024): {rng(pre, 'bf16', 'compute_fraction')} of dense "
                  f"peak in bf16, {rng(pre, 'fp8', 'compute_fraction')} in fp8; the model "
                  f"assumes {eff['compute']:.0%}.",
                  f"- Eager launches instead of a CUDA graph add up to {max(eager):.0f} us per "
                  "layer (4 GEMMs) at M = 1 and 64 (fp8's `_scaled_mm` the most)."
                  if eager else "- No eager points.",
                  f"- Largest spread between the two repeats of one graph point: {spread:.1%}; "
                  f"nvidia-smi before / after: {dev.get('smi_before')} / {dev.get('smi_after')}.",
                  "",
                  "| shard | dtype | " + " | ".join(f"M={m}" for m in ms) + " |",
                  "|---|---|" + "---|" * len(ms)]
        by = {(r["shard"], r["dtype"], r["tokens"]): r for r in graph}
        for shard in dict.fromkeys(r["shard"] for r in graph):
            for dtype in data["config"]["dtypes"]:
                cells = [f"{by[(shard, dtype, m)]['model_over_measured']:.2f}"
                         if (shard, dtype, m) in by else "-" for m in ms]
                lines.append(f"| {shard} | {dtype} | " + " | ".join(cells) + " |")
        if s["attention"]:
            lines += ["", "Decode attention through SDPA (bf16 KV, 64 query and 8 KV heads "
                      "of 128; not vLLM's paged kernels), KV bytes read per second as a share "
                      "of HBM: " + ", ".join(f"B={b} ctx={c}: {v:.0%}" for (b, c), v
                                             in sorted(s["attention"].items())) + "."]
        if data.get("errors"):
            lines += ["", "Not measured: " + "; ".join(data["errors"])]
        lines.append("")
    lines.append(end)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="measure (on a GPU machine)")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to smoke-test the MoE sweep")
    ap.add_argument("--write", action="store_true", help="replace the section where it lives")
    args = ap.parse_args(argv)
    config = dict(yaml.safe_load(args.config.read_text()))
    if args.run:
        if config.get("kind") == "moe":
            rec = run_moe(config, args.out, args.budget_s, args.device)
            points = len(rec["moe"])
        else:
            rec = run(config, args.out, args.budget_s)
            points = len(rec["gemm"])
        sys.stdout.write(json.dumps({k: rec[k] for k in ("device", "errors")}, indent=1)
                         + f"\n{points} points, {rec.get('elapsed_s')} s\n")
        return 0
    from benchmarks.results_md import emit

    text = render(data_files())
    return emit(SECTION, text, write=args.write)


if __name__ == "__main__":
    sys.exit(main())

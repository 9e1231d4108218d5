"""Tuner vs exhaustive grid vs vLLM defaults, on the real vLLM CPU engine.

A KV-constrained workload on a generated Llama of tens of millions of parameters (large
enough that a decode step is compute-bound on the CPU, unlike the 1 MB test model):

1. the exhaustive grid over the search space (one server start per cell, each cell
   measured like a tuner trial: ``--repeats`` runs at the workload concurrency),
2. the tuner over the same space (``--tuner-runs`` independent runs, for spread),
3. vLLM's defaults: the grid's first cell and every tuner run's baseline (measured the
   same way).

Reports goodput and wall time of each, and the goals: tuner >= 0.95 x grid-best goodput,
tuner wall time <= 0.30 x grid's, tuner >= 1.5 x defaults. Each server holds the
machine-wide vLLM lock (/tmp/llmop-vllm.lock); the time a run spends waiting for other
users of that lock is not counted (``wall_s`` is the search's own clock minus lock waits;
``busy_s`` the sum of its trials, server start to stop).

Usage (from the repository root; the vLLM venv must exist)::

    .venv/bin/python -m benchmarks.tune_benchmark --out benchmarks/data/tune_benchmark.json

Prints a Markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.tiny_model import ensure_tiny_llama

from llm_operator.cli.tune import tuner_command

ROOT = Path(__file__).resolve().parents[1]

VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))

# ~39 M parameters: 6 layers of hidden 768 (12 heads, 4 KV heads of 64), MLP 2048.
MODEL = {"hidden": 768, "layers": 6, "heads": 12, "kv_heads": 4, "intermediate": 2048}
# KV per token: 2 x 6 layers x 4 KV heads x 64 x 2 bytes = 6 KiB.
KV_BYTES_PER_TOKEN = 2 * 6 * 4 * 64 * 2


def run_tuner(model: Path, common: list[str], extra: list[str], out: Path) -> dict[str, Any]:
    """One tuner (or grid) run; returns its full result JSON plus the measured wall time."""
    argv = [*common, *extra, "--output", str(out), "--log-dir", str(out.with_suffix(""))]
    cmd, env = tuner_command(str(VLLM_PYTHON), ["--model", str(model), *argv])
    env["LLMOP_TERMINATION_LOG"] = str(out.with_suffix(".msg"))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    out.with_suffix(".log").write_text(proc.stderr + "\n" + proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"tuner failed ({proc.returncode}): {proc.stderr[-2000:]}")
    data: dict[str, Any] = json.loads(out.read_text())
    data["process_wall_s"] = wall
    return data


def _summary(data: dict[str, Any]) -> dict[str, Any]:
    res = data["result"]
    trials = data["trials"]
    base = trials[0]
    best = max((t for t in trials if t["error"] is None and t["runs"]), key=lambda t: t["score"])
    return {
        "starts": len(trials),
        "wall_s": res["wallSeconds"],  # the search's clock, lock waits excluded
        "busy_s": sum(t["wall_s"] for t in trials),  # server lifetimes: no lock waiting
        "best": best["config"], "best_goodput": best["score"], "best_spread": best["spread"],
        "baseline_goodput": base["score"], "baseline_spread": base["spread"],
        "baseline_preemptions": statistics.mean(m["preemptions"] for m in base["runs"]),
        "best_preemptions": statistics.mean(m["preemptions"] for m in best["runs"]),
        "table": [(t["config"], round(t["score"], 1), round(t["spread"], 3)) for t in trials],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "data" / "tune_benchmark.json")
    p.add_argument("--work", type=Path, default=Path("/tmp/llmop-tune-bench"))
    p.add_argument("--kv-tokens", type=int, default=6144)
    p.add_argument("--input-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--slo-ttft-ms", type=float, default=20000)
    p.add_argument("--slo-itl-ms", type=float, default=20)
    p.add_argument("--mns-levels", default="4,8,12,16,24")
    p.add_argument("--mnbt-levels", default="512,2048")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--waves", type=float, default=2.0)
    p.add_argument("--tuner-runs", type=int, default=2)
    p.add_argument("--reuse", action="store_true",
                   help="reuse grid.json and tuner-*.json from --work instead of re-running")
    p.add_argument("--final-repeats", type=int, default=3,
                   help="head-to-head: repeats of defaults, grid best and tuner best, back to back")
    a = p.parse_args()

    a.work.mkdir(parents=True, exist_ok=True)
    model = ensure_tiny_llama(a.work / "models", VLLM_PYTHON, **MODEL)
    kv_bytes = a.kv_tokens * KV_BYTES_PER_TOKEN
    common = [
        "--input-tokens", str(a.input_tokens), "--output-tokens", str(a.output_tokens),
        "--concurrency", str(a.concurrency),
        "--slo-ttft-ms", f"{a.slo_ttft_ms:g}", "--slo-itl-ms", f"{a.slo_itl_ms:g}",
        f"--server-args=--kv-cache-memory-bytes {kv_bytes} --max-model-len 1024",
        "--waves", str(a.waves),
        "--max-trials", "100", "--max-seconds", "100000", "--progress", "log",
    ]  # fmt: skip
    space = ["--max-num-seqs-levels", a.mns_levels, "--max-num-batched-tokens-levels",
             a.mnbt_levels, "--repeats", str(a.repeats)]
    report: dict[str, Any] = {"setup": vars(a) | {"out": str(a.out), "work": str(a.work),
                                                  "model": MODEL, "kv_bytes": kv_bytes}}
    grid_json = a.work / "grid.json"
    if not (a.reuse and grid_json.exists()):
        run_tuner(model, common, [*space, "--grid"], grid_json)
    report["grid"] = _summary(json.loads(grid_json.read_text()))
    a.out.write_text(json.dumps(report, indent=1, default=str))
    report["tuner"] = []
    for i in range(a.tuner_runs):
        tj = a.work / f"tuner-{i}.json"
        if not (a.reuse and tj.exists()):
            run_tuner(model, common, [*space, "--seed", str(i)], tj)
        report["tuner"].append(_summary(json.loads(tj.read_text())))
        a.out.write_text(json.dumps(report, indent=1, default=str))

    # Head to head: this machine is shared, so runs minutes apart see different loads.
    # The winners are measured again back to back (one grid run over exactly them: the
    # defaults first, then each cell), under the same conditions.
    cells = {(c["max_num_seqs"], c["max_num_batched_tokens"])
             for c in [report["grid"]["best"], *(t["best"] for t in report["tuner"])]}
    cells.discard((None, None))
    mns = sorted({m for m, _ in cells if m is not None})
    # A cell that left max-num-batched-tokens to vLLM gets vLLM's CPU default (2048),
    # the same server, so that the product of levels contains it.
    mnbt = sorted({b if b is not None else 2048 for _, b in cells} if any(
        b is not None for _, b in cells) else set())
    h2h_args = ["--grid", "--repeats", str(a.final_repeats)]
    if mns:
        h2h_args += ["--max-num-seqs-levels", ",".join(map(str, mns))]
    if mnbt:
        h2h_args += ["--max-num-batched-tokens-levels", ",".join(map(str, mnbt))]
    h2h = run_tuner(model, common, h2h_args, a.work / "final.json")
    report["final"] = [
        {"config": t["config"], "goodput": t["score"], "median": t["median"],
         "spread": t["spread"], "runs": [round(m["goodput_tps"], 1) for m in t["runs"]],
         "itl_p95_ms": statistics.mean(m["itl_p95_ms"] for m in t["runs"]),
         "preemptions": statistics.mean(m["preemptions"] for m in t["runs"])}
        for t in h2h["trials"] if t["runs"]
    ]
    a.out.write_text(json.dumps(report, indent=1, default=str))

    lines = ["| run | server starts | busy s | best config | best goodput tok/s (spread) | "
             "defaults goodput tok/s (spread) | preemptions/run best vs defaults |",
             "|---|---|---|---|---|---|---|"]
    rows = ([("grid", report["grid"])] if "grid" in report else []) + [
        (f"tuner #{i + 1}", s) for i, s in enumerate(report["tuner"])]
    for name, s in rows:
        lines.append(
            f"| {name} | {s['starts']} | {s['busy_s']:.0f} | {s['best']} | "
            f"{s['best_goodput']:.0f} ({s['best_spread']:.0%}) | {s['baseline_goodput']:.0f} "
            f"({s['baseline_spread']:.0%}) | {s['best_preemptions']:.0f} vs "
            f"{s['baseline_preemptions']:.0f} |")
    def final_of(cfg: dict[str, Any]) -> dict[str, Any] | None:
        want = (cfg["max_num_seqs"], cfg["max_num_batched_tokens"] or 2048)
        for f in report["final"]:
            got = (f["config"]["max_num_seqs"], f["config"]["max_num_batched_tokens"] or 2048)
            if got == want or (cfg["max_num_seqs"] is None and f["config"]["max_num_seqs"]
                               is None):
                return f
        return None

    g = report["grid"]
    default_f = final_of({"max_num_seqs": None, "max_num_batched_tokens": None})
    grid_f = final_of(g["best"])
    lines += ["", "Head to head, back to back (goodput tok/s, median of "
              f"{a.final_repeats} runs, runs in brackets):", ""]
    for f in report["final"]:
        lines.append(f"- {f['config']}: {f['median']:.0f} {f['runs']}, ITL p95 "
                     f"{f['itl_p95_ms']:.1f} ms, preemptions/run {f['preemptions']:.0f}")
    goals: dict[str, Any] = {
        "tuner_vs_grid_busy_time": [t["busy_s"] / g["busy_s"] for t in report["tuner"]],
        "tuner_vs_grid_starts": [t["starts"] / g["starts"] for t in report["tuner"]],
    }
    if grid_f and default_f:
        tb = [final_of(t["best"]) for t in report["tuner"]]
        goals["tuner_vs_grid_best"] = [f["median"] / grid_f["median"] if f and grid_f[
            "median"] else None for f in tb]
        goals["tuner_vs_defaults"] = [f["median"] / default_f["median"] if f and default_f[
            "median"] else None for f in tb]
    report["goals"] = goals
    lines += ["", "Goals: " + json.dumps({k: [round(x, 2) if x is not None else None
                                                for x in v] for k, v in goals.items()})]
    a.out.write_text(json.dumps(report, indent=1, default=str))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

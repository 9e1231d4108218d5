"""Run NVIDIA AIConfigurator's estimator over the committed grid of
``benchmarks/configs/aic_estimator.yaml`` and store its figures (issue 34): runs in the
AIConfigurator environment, not the project's.

    .venv-aic/bin/python -m benchmarks.aic_estimate                 # the grid and KV bisection
    .venv-aic/bin/python -m benchmarks.aic_estimate --batches 6 12  # add batch sizes
    .venv-aic/bin/python -m benchmarks.aic_estimate --brief         # the brief's 8B figures
    .venv-aic/bin/python -m benchmarks.aic_estimate --schedule      # add the step schedules

Stores ``benchmarks/data/aic_estimator.json``: for each (model, GPU, TP, workload) the
estimate at each batch size (TTFT and TPOT in ms, output tok/s, or "OOM"), and the
largest batch the estimator accepts without OOM with its memory breakdown, and each
estimate's step schedule (:func:`schedule_of`: the mix and generation-only steps of its
aggregated mode, their latencies and counts; the landscape's ITL p95 is read from it,
aic_estimator_3.yaml). Every figure
is **estimated** (AIConfigurator's estimator, its vLLM kernel tables), not measured.
The project's side (planner, performance model) is in ``benchmarks/planner_vs_aic.py``,
which reads this file in the project's environment. Reruns keep what is stored and add
what is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "aic_estimator.yaml"
DATA = ROOT / "benchmarks" / "data" / "aic_estimator.json"
BRIEF = ROOT / "benchmarks" / "data" / "aic_brief.json"


def estimate(aic_model: str, system: str, tp: int, isl: int, osl: int,
             batch: int) -> dict[str, Any]:
    """One estimate, or {"oom": message}."""
    from aiconfigurator.cli.api import cli_estimate

    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            r = cli_estimate(aic_model, system, backend_name="vllm", mode="agg", isl=isl,
                             osl=osl, batch_size=batch, tp_size=tp)
    except RuntimeError as e:
        if "OOM" in str(e):
            return {"oom": str(e).splitlines()[0][:200]}
        raise
    out = {"ttftMs": round(float(r.ttft), 3), "tpotMs": round(float(r.tpot), 3),
           "outputTps": round(float(r.raw["tokens/s"]), 1),
           "memoryGiB": round(float(r.raw["memory"]), 3), "version": r.backend_version}
    out["schedule"] = schedule_of(r.per_ops_data)
    with contextlib.suppress(Exception):
        mem = r.summary.get_memory()
        out["memory"] = {k: round(float(v), 3) for k, v in dict(mem).items()
                         if isinstance(v, (int, float))}
    return out


def schedule_of(per_ops: dict[str, Any] | None) -> dict[str, float]:
    """The estimate's step schedule: mix steps (one prompt's tokens plus the decodes) and
    generation-only steps, their counts and latencies (ms), and the decode iterations."""
    s = (per_ops or {})["scheduling"]
    return {"mixSteps": float(s["num_mix_steps"]), "genonlySteps": float(s["num_genonly_steps"]),
            "mixStepMs": round(float(s["mix_step_latency_ms"]), 4),
            "genonlyStepMs": round(float(s["genonly_step_latency_ms"]), 4),
            "decodeIterations": float(s["decode_iterations"])}


def add_schedules(data: dict[str, Any], only: str = "") -> int:
    """Estimate again every stored point that lacks its schedule and add it; the TTFT and
    TPOT must come back as stored (the estimator is deterministic), else stop. Returns
    how many were added."""
    added = 0
    for k, c in data["cells"].items():
        if only not in k:
            continue
        points = list(c["batches"].items())
        at = c.get("kv", {}).get("at")
        if at:
            points.append((str(c["kv"]["largestBatch"]), at))
        for b, v in points:
            if "oom" in v or "schedule" in v:
                continue
            e = estimate(c["aic"], c["system"], c["tp"], c["input"], c["output"], int(b))
            for f in ("ttftMs", "tpotMs"):
                if abs(e[f] - v[f]) > 1e-3 * max(1.0, abs(v[f])):
                    raise SystemExit(f"{k} batch {b}: {f} {e[f]} now, {v[f]} stored: the "
                                     "estimator is not the one that made the store")
            v["schedule"] = e["schedule"]
            added += 1
        sys.stderr.write(f"{k}: schedules added\n")
    return added


def key(model: str, gpu: str, tp: int, wl: dict[str, Any]) -> str:
    return f"{model}|{gpu}|tp{tp}|{wl['input']}/{wl['output']}"


def largest_batch(aic_model: str, system: str, tp: int, isl: int, osl: int
                  ) -> dict[str, Any]:
    """Bisection for the largest batch (1..4096) without OOM."""
    if "oom" in estimate(aic_model, system, tp, isl, osl, 1):
        return {"largestBatch": 0}
    lo, hi = 1, 4096
    if "oom" not in estimate(aic_model, system, tp, isl, osl, hi):
        return {"largestBatch": hi, "atLeast": True}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if "oom" in estimate(aic_model, system, tp, isl, osl, mid):
            hi = mid
        else:
            lo = mid
    return {"largestBatch": lo, "at": estimate(aic_model, system, tp, isl, osl, lo)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--batches", type=int, nargs="*", default=[])
    ap.add_argument("--only", default="", help="substring of the keys to run")
    ap.add_argument("--at", nargs="*", default=[], metavar="KEY=BATCH",
                    help="one more batch size for one stored cell (the planner's picks: "
                    "benchmarks/planner_vs_aic.py --missing prints them)")
    ap.add_argument("--schedule", action="store_true",
                    help="add each stored estimate's step schedule (estimated again; its "
                    "TTFT and TPOT must equal the stored ones)")
    ap.add_argument("--brief", action="store_true",
                    help="Llama-3.1-8B on A100/H100 at batch 1/8/32 (the seed's figures)")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    if args.brief:
        pts = {}
        for system in ("a100_sxm", "h100_sxm"):
            for b in (1, 8, 32):
                e = estimate("meta-llama/Meta-Llama-3.1-8B", system, 1, 512, 256, b)
                pts[f"{system}|{b}"] = {"outputTps": e["outputTps"], "ttftMs": e["ttftMs"],
                                        "tpotMs": e["tpotMs"], "vllmTables": e["version"]}
        BRIEF.write_text(json.dumps({
            "label": "estimated (AIConfigurator estimator, vLLM kernel tables 0.24 for H100, "
                     "0.14 for A100)",
            "source": "NVIDIA AIConfigurator 0.12.0 (PyPI aiconfigurator, Apache-2.0), "
                      "cli_estimate('meta-llama/Meta-Llama-3.1-8B', system, backend_name="
                      "'vllm', mode='agg', isl=512, osl=256, batch_size=b, tp_size=1)",
            "regenerate": ".venv-aic/bin/python -m benchmarks.aic_estimate --brief",
            "points": pts}, indent=1) + "\n")
        return 0
    cfg = yaml.safe_load(args.config.read_text())
    data: dict[str, Any] = json.loads(DATA.read_text()) if DATA.exists() else {}
    data.setdefault("label", cfg["label"])
    data.setdefault("estimator", cfg["estimator"]["label"])
    data.setdefault("package", cfg["estimator"]["package"])
    cells = data.setdefault("cells", {})
    if args.schedule:
        n = add_schedules(data, args.only)
        DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        sys.stderr.write(f"{n} schedules added\n")
        return 0
    if args.at:
        for item in args.at:
            k, b = item.rsplit("=", 1)
            c = cells[k]
            c["batches"][b] = estimate(c["aic"], c["system"], c["tp"], c["input"], c["output"],
                                       int(b))
        DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        return 0
    for model, m in cfg["models"].items():
        for gpu, system in cfg["gpus"].items():
            for tp in m["tp"]:
                for wl in cfg["workloads"]:
                    k = key(model, gpu, tp, wl)
                    if args.only not in k:
                        continue
                    cell = cells.setdefault(k, {"model": model, "aic": m["aic"], "gpu": gpu,
                                                "system": system, "tp": tp,
                                                "input": wl["input"], "output": wl["output"],
                                                "batches": {}})
                    for b in sorted({*cfg["batchGrid"], *args.batches}):
                        if str(b) not in cell["batches"]:
                            cell["batches"][str(b)] = estimate(m["aic"], system, tp, wl["input"],
                                                               wl["output"], b)
                    if "kv" not in cell:
                        cell["kv"] = largest_batch(m["aic"], system, tp, wl["input"],
                                                   wl["output"])
                    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
                    sys.stderr.write(f"{k}: done\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

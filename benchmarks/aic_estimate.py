"""Run NVIDIA AIConfigurator's estimator over the committed grid of
``benchmarks/configs/aic_estimator.yaml`` and store its figures (issue 34): runs in the
AIConfigurator environment, not the project's.

    .venv-aic/bin/python -m benchmarks.aic_estimate                 # the grid and KV bisection
    .venv-aic/bin/python -m benchmarks.aic_estimate --batches 6 12  # add batch sizes
    .venv-aic/bin/python -m benchmarks.aic_estimate --brief         # the brief's 8B figures

Stores ``benchmarks/data/aic_estimator.json``: for each (model, GPU, TP, workload) the
estimate at each batch size (TTFT and TPOT in ms, output tok/s, or "OOM"), and the
largest batch the estimator accepts without OOM with its memory breakdown. Every figure
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
    with contextlib.suppress(Exception):
        mem = r.summary.get_memory()
        out["memory"] = {k: round(float(v), 3) for k, v in dict(mem).items()
                         if isinstance(v, (int, float))}
    return out


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

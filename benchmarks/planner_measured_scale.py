"""The planner's start against AIConfigurator's landscape scaled by how far the estimator
is from measured vLLM (issue 34 item 2; a sensitivity, not a goal): the picks, scenarios
and stored estimates of aic-estimator-9, with each estimate's TTFT and TPOT (and ITL p95)
divided by aic-vs-silicon-1's median estimate/measured ratio for its batch's concurrency
band. Pre-registered in ``benchmarks/configs/planner_measured_scale_1.yaml``.

    .venv/bin/python -m benchmarks.planner_measured_scale [--write]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import yaml

from benchmarks import aic_vs_silicon, planner_vs_aic
from benchmarks.planner_vs_aic import itl_of, load, scenarios
from benchmarks.results_md import emit, markers

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "planner_measured_scale_1.yaml"
SECTION = "planner-measured-scale-1"
READING = (
    "Six of aic-estimator-9's nine scenarios below 0.9 have the pick as the scaled "
    "landscape's best: scaled to measured, the estimator's TTFT or ITL p95 at the larger "
    "batches it favoured (48-256) no longer meets the SLO, as aic-vs-silicon-1 warned "
    "(the unscaled yardstick rewards large batches more than measured vLLM does). Three "
    "scenarios get worse: the pick misses the ITL objective by up to 2 ms on the scaled "
    "landscape (Llama-3.1-8B H100 TP 1 512/256 tight at 192, TP 2 2048/512 relaxed at "
    "256; Qwen3-32B H200 TP 1 2048/512 tight at 24), so the model's picks are not "
    "uniformly conservative. The two KV-bound scenarios (Qwen3-32B on one H100, "
    "Llama-3.1-70B on two) and Llama-3.1-70B H200 TP 2 tight stay below 0.9. Neither "
    "landscape is measured vLLM for these models; the goal stays aic-estimator-9's, not "
    "met.")


def band_ratios(rows: list[dict[str, Any]], bands: list[list[int]]
                ) -> dict[tuple[int, int], dict[str, float]]:
    """Per concurrency band [lo, hi], the median estimate/measured TTFT and TPOT over the
    stored rows the estimator priced (an OOM row has no ratio)."""
    out = {}
    for lo, hi in bands:
        inside = [r["ratio"] for r in rows if "ratio" in r and lo <= r["concurrency"] <= hi]
        if not inside:
            raise ValueError(f"concurrency band {lo}-{hi}: no stored row to take a ratio from")
        out[(lo, hi)] = {k: statistics.median(x[k] for x in inside) for k in ("ttft", "tpot")}
    return out


def ratio_at(b: int, ratios: dict[tuple[int, int], dict[str, float]]) -> dict[str, float]:
    """The ratios of the band batch ``b`` falls in (the top band is open: batches beyond
    every measured row, above ``extrapolateAbove``, take its ratios)."""
    return next(r for (lo, hi), r in ratios.items() if lo <= b <= hi)


def scaled(data: dict[str, Any], ratios: dict[tuple[int, int], dict[str, float]],
           itl: str) -> dict[str, Any]:
    """The stored estimates with every priced batch's TTFT divided by its band's TTFT
    ratio and its TPOT and per-token figure the SLO judges (``itl``) by the TPOT ratio;
    OOM batches as they are. ``data`` is not changed."""
    cells = {}
    for key, cell in data["cells"].items():
        batches = {}
        for b, est in cell["batches"].items():
            if "oom" in est:
                batches[b] = est
                continue
            r = ratio_at(int(b), ratios)
            per_token = itl_of(est, int(b), itl)[0]
            batches[b] = {"ttftMs": est["ttftMs"] / r["ttft"],
                          "tpotMs": est["tpotMs"] / r["tpot"],
                          "itlP95Ms": per_token / r["tpot"]}
        cells[key] = {**cell, "batches": batches}
    return {**data, "cells": cells}


def compare(cfg_path: Path = CONFIG) -> dict[str, Any]:
    """Both landscapes' rows for the registered scenarios, and the band ratios."""
    cfg = load(cfg_path)
    cfg["config"] = str(cfg_path.resolve().relative_to(ROOT))
    vs_cfg = yaml.safe_load((ROOT / cfg["scaledBy"]).read_text())
    vs_data = json.loads(aic_vs_silicon.DATA.read_text())
    ratios = band_ratios(vs_data["rows"], vs_cfg["concurrencyBands"])
    data = json.loads(planner_vs_aic.DATA.read_text())
    itl = str(cfg.get("itl", "tpot-mean"))
    return {"cfg": cfg, "ratios": ratios, "before": scenarios(cfg, data),
            "after": scenarios(cfg, scaled(data, ratios, itl))}


def _ratio(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "-"


def section(found: dict[str, Any]) -> str:
    cfg, ratios = found["cfg"], found["ratios"]
    before = [r for r in found["before"] if not r.get("missing")]
    after = {(r["key"], r["slo"]): r for r in found["after"] if not r.get("missing")}
    rated = [r for r in after.values() if r["ratio"] is not None]
    share = [r["ratio"] for r in rated]
    was = [r["ratio"] for r in before if r["ratio"] is not None]
    miss = [r for r in rated if r["got"] == 0]
    begin, end = markers(SECTION)
    lines = [
        begin,
        "## The planner's start on AIConfigurator's landscape scaled to measured vLLM "
        f"({cfg['label']})", "",
        "**AIConfigurator's estimate (a model), scaled by its error against measured, real "
        "vLLM on a GPU (AIConfigurator's silicon data)**: a sensitivity, not a goal; the "
        "goal stays judged on aic-estimator-9's unscaled landscape. Pre-registered in "
        f"`{cfg['config']}`. The picks, the 48 scenarios and the stored estimates are "
        "aic-estimator-9's; each estimate's TTFT is divided by aic-vs-silicon-1's median "
        "estimate/measured TTFT of its batch's concurrency band, its TPOT and ITL p95 by "
        "the band's TPOT ratio, and goodput judged as aic-estimator-9 judges it. The "
        "ratios come from one model on one GPU (NVIDIA's measured Qwen3-32B bf16 rows on "
        "H100, TP 2-8, 8-128 clients); applying them to Llama-3.1-8B/70B and to the H200 "
        f"is an assumption, and batches above {cfg['extrapolateAbove']} (beyond every "
        "measured row) take the last band's: an extrapolation. Regenerate: "
        "`.venv/bin/python -m benchmarks.planner_measured_scale --write`.", "",
        "| concurrency band | estimate/measured TTFT (median) | estimate/measured TPOT "
        "(median) |", "|---|---|---|",
        *(f"| {aic_vs_silicon.band_name(lo, hi)} | {r['ttft']:.2f} | {r['tpot']:.2f} |"
          for (lo, hi), r in ratios.items()), "",
        f"Our pick's goodput / the scaled landscape's best: median "
        f"{statistics.median(share):.2f}, minimum {min(share):.2f}, >= 0.9 in "
        f"{sum(x >= 0.9 for x in share)} of {len(share)} scenarios where something meets "
        f"the SLO (on the unscaled landscape, aic-estimator-9: {sum(x >= 0.9 for x in was)} "
        f"of {len(was)}); {len(after) - len(rated)} scenarios where nothing on the grid "
        "meets it.", "",
        f"Scenarios where the pick misses the SLO on the scaled landscape: {len(miss)}"
        + (": " + "; ".join(f"{r['key']} {r['slo']} (pick {r['pick']}: {r['why']})"
                            for r in miss) if miss else "."), "",
        "Every scenario below 0.9 on either landscape:", "",
        "| model, GPU, TP, tokens | SLO | pick | unscaled: best (batch), ratio | scaled: "
        "goodput at pick | scaled: best (batch), ratio |", "|---|---|---|---|---|---|",
    ]
    for r in before:
        s = after[(r["key"], r["slo"])]
        low = [x for x in (r["ratio"], s["ratio"]) if x is not None and x < 0.9]
        if not low:
            continue
        lines.append(
            f"| {r['key']} | {r['slo']} | {r['pick']} | {r['best']:,.0f} ({r['bestBatch']}), "
            f"{_ratio(r['ratio'])} | {s['got']:,.0f} ({s['why']}) | {s['best']:,.0f} "
            f"({s['bestBatch']}), {_ratio(s['ratio'])} |")
    lines += ["", f"Reading (written after the run): {READING}", "", end]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="replace the section where it lives")
    return emit(SECTION, section(compare()), ap.parse_args(argv).write)


if __name__ == "__main__":
    raise SystemExit(main())

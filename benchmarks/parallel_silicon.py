"""Expert parallelism and data-parallel attention against tensor-parallel experts, in the
vLLM serving points NVIDIA measured on GPUs (AIConfigurator 0.12.0's
``silicon_sample.csv``; issue 33: "plan them only if vLLM's rules and the GPUs allow").
Not a unit test.

    .venv/bin/python -m benchmarks.parallel_silicon            # print the section
    .venv/bin/python -m benchmarks.parallel_silicon --record   # store the pairs (needs .venv-aic)
    .venv/bin/python -m benchmarks.parallel_silicon --write    # and replace it in RESULTS.md

A pair is two measured rows of the same model, GPU, precision, input and output lengths
and batch on the same number of GPUs (TP x attention DP), vLLM, aggregated serving, one
pipeline stage, that differ in how the experts are placed:

- ``TP experts``: attention and experts both tensor-parallel (moe_tp = TP, moe_ep = 1):
  what the planner renders;
- ``EP``: attention tensor-parallel, experts expert-parallel (moe_ep = TP, moe_tp = 1):
  ``--enable-expert-parallel``;
- ``DP attention + EP``: attention data-parallel over ``attention_dp`` groups of TP,
  experts over all of them (moe_ep = TP x attention_dp): ``--data-parallel-size
  --enable-expert-parallel``.

Rows whose expert split does not use every GPU once (moe_tp x moe_ep != TP x attention
DP, some Qwen3-235B rows) are counted and left out. The pairing was written after a
first look at the rows (exploratory, not pre-registered); every pair found is stored.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.support.aic import AIC_SOURCE, silicon_csv

from benchmarks.results_md import markers, record_or_write

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "parallel_silicon.json"
SECTION = "parallel-silicon"
TP, EP, DPA = "TP experts", "EP", "DP attention + EP"


def placement(row: dict[str, str]) -> tuple[str, int] | None:
    """(how the experts are placed, GPUs) of a row; None for a split that does not use
    every GPU once."""
    tp, adp = int(row["tp_size"] or 1), int(row["attention_dp_size"] or 1)
    moe_tp, moe_ep = int(row["moe_tp_size"] or 0), int(row["moe_ep_size"] or 0)
    gpus = tp * adp
    if moe_tp * moe_ep != gpus or int(row["pp_size"] or 1) != 1:
        return None
    if adp == 1 and moe_ep == 1:
        return TP, gpus
    if adp == 1 and moe_tp == 1:
        return EP, gpus
    if adp > 1 and moe_tp == 1:
        return DPA, gpus
    return None


def pairs(csv_path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every (TP experts, other placement) pair at the same point, and the rows left out."""
    points: dict[tuple[Any, ...], dict[str, dict[str, str]]] = defaultdict(dict)
    left_out = 0
    with csv_path.open() as f:
        for row in csv.DictReader(f):
            if row["backend"] != "vllm" or row["mode"] != "agg":
                continue
            where = placement(row)
            if where is None:
                left_out += 1
                continue
            kind, gpus = where
            # AIConfigurator's batch is per attention-DP rank (its base_backend:
            # concurrency = batch x attention_dp): pairs are at equal concurrency.
            concurrency = int(row["batch_size"]) * int(row["attention_dp_size"] or 1)
            key = (row["model_path"], row["system"], row["precision"], gpus,
                   int(row["isl"]), int(row["osl"]), concurrency)
            points[key].setdefault(kind, row)
    out = []
    for key, by_kind in sorted(points.items()):
        if TP not in by_kind:
            continue
        base = by_kind[TP]
        for kind in (EP, DPA):
            other = by_kind.get(kind)
            if other is None:
                continue
            model, system, precision, gpus, isl, osl, concurrency = key
            out.append({
                "model": model, "system": system, "precision": precision, "gpus": gpus,
                "isl": isl, "osl": osl, "concurrency": concurrency, "placement": kind,
                "tpOther": int(other["tp_size"]), "attentionDp": int(
                    other["attention_dp_size"] or 1),
                "vllm": sorted({base["backend_version"], other["backend_version"]}),
                "tpotTp": float(base["silicon_tpot_ms"]),
                "tpotOther": float(other["silicon_tpot_ms"]),
                "ttftTp": float(base["silicon_ttft_ms"]),
                "ttftOther": float(other["silicon_ttft_ms"]),
            })
    return out, left_out


def record(path: Path = DATA) -> dict[str, Any]:
    csv_path = silicon_csv()
    if csv_path is None:
        raise SystemExit("AIConfigurator is not installed: bash tools/setup.sh --aic")
    found, left_out = pairs(csv_path)
    data = {"source": AIC_SOURCE, "file": "aiconfigurator_core/systems/silicon_sample.csv",
            "rowsLeftOut": left_out, "pairs": found}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def groups(data: dict[str, Any]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """The pairs by (placement, model, GPU, precision, GPUs, attention DP x TP)."""
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for p in data["pairs"]:
        out[(p["placement"], p["model"], p["system"], p["precision"], p["gpus"],
             p["attentionDp"], p["tpOther"])].append(p)
    return out


def _span(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def section(data: dict[str, Any]) -> str:
    begin, end = markers(SECTION)
    rows = []
    ratios: dict[str, list[float]] = defaultdict(list)
    for (kind, model, system, precision, gpus, adp, tp), ps in sorted(groups(data).items()):
        tpot = [p["tpotOther"] / p["tpotTp"] for p in ps]
        ttft = [p["ttftOther"] / p["ttftTp"] for p in ps]
        ratios[kind] += tpot
        shape = f"TP {tp} x DP {adp}" if kind == DPA else f"TP {tp}"
        batches = sorted({p["concurrency"] for p in ps})
        lengths = sorted({f"{p['isl']}/{p['osl']}" for p in ps})
        versions = sorted({v for p in ps for v in p["vllm"]})
        rows.append(f"| {kind} ({shape}) | {model} | {system.removesuffix('_sxm').upper()} "
                    f"{precision} | {gpus} | {', '.join(lengths)} | {batches[0]}-{batches[-1]} "
                    f"| {len(ps)} | {_span(tpot)} | {_span(ttft)} | {', '.join(versions)} |")
    faster = {k: [p for p in data["pairs"] if p["placement"] == k
                  and p["tpotOther"] < 0.95 * p["tpotTp"]] for k in ratios}

    def said(kind: str) -> str:
        quick = faster[kind]
        text = (f"{kind}: {len(ratios[kind])} pairs, TPOT ratio median "
                f"{statistics.median(ratios[kind]):.2f}, {len(quick)} with a TPOT 5% or "
                "more below TP experts'")
        return text + "".join(
            f" ({p['system'].removesuffix('_sxm').upper()} {p['precision']}, "
            f"{p['isl']:,}/{p['osl']:,} at {p['concurrency']} requests: TPOT "
            f"{p['tpotOther'] / p['tpotTp']:.2f}x with TTFT {p['ttftOther'] / p['ttftTp']:.1f}x)"
            for p in quick)

    lines = [
        begin,
        "## Expert parallelism and DP attention against tensor-parallel experts "
        "(parallel-silicon)",
        "",
        "**Measured, real vLLM on a GPU (AIConfigurator's silicon data)**: "
        f"{data['source']}; nothing here ran on this machine. Each pair is two rows of the "
        "same model, GPU, precision, input/output length and concurrent requests on the "
        "same number of GPUs that differ only in where the experts go: the planner's "
        "rendering (attention and experts tensor-parallel) against `--enable-expert-parallel`"
        " (EP: experts whole on ranks, attention tensor-parallel) or data-parallel "
        "attention with EP (`--data-parallel-size`). AIConfigurator's batch is per "
        "attention-DP rank (its `base_backend`: concurrency = batch x attention DP), so a "
        "DP-attention row of batch b is paired with TP experts at b x DP requests. Ratio = "
        "the other placement's figure / TP experts' (TPOT and TTFT: below 1 is faster; "
        "at equal concurrency output tok/s goes as 1 / TPOT). Exploratory: the pairing was "
        "written after a first look at the rows; every pair found is listed. "
        f"{data['rowsLeftOut']} vLLM rows whose expert split does not use every GPU once "
        "are left out. Regenerate: `bash tools/setup.sh --aic`, then "
        "`.venv/bin/python -m benchmarks.parallel_silicon --record --write`.",
        "",
        "| placement | model | GPU, precision | GPUs | input/output | concurrent | pairs | "
        "TPOT ratio, median (range) | TTFT ratio, median (range) | vLLM |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "; ".join(said(k) for k in (EP, DPA) if k in ratios) + ". "
        "So the planner renders neither: in NVIDIA's measured vLLM points experts placed "
        "whole (EP) decoded at the same speed as TP-sliced experts on the same GPUs or "
        "slower, and data-parallel attention with EP slower still, but where a request "
        "queue formed in front of it. The rows cover MiniMax-M2.5 (GQA) and Kimi-K2.5 "
        "(latent attention) on B200 and B300 (vLLM 0.17-0.19) and two Qwen3-235B-A22B "
        "points on H200 (vLLM 0.12); none on H100, and no DP-attention pair for a "
        "latent-attention model, whose KV-capacity gain the planner takes with decode "
        "context parallelism instead (docs/production/model-facts.md). "
        "`--enable-expert-parallel` stays available in `spec.engine.extraArgs`.",
        "",
        end,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return record_or_write(__doc__, SECTION, record,
                           lambda: section(json.loads(DATA.read_text())), argv)


if __name__ == "__main__":
    sys.exit(main())

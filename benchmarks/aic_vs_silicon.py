"""NVIDIA AIConfigurator's estimator (a model) against NVIDIA's measured vLLM points from
the same package (issue 34): how far the yardstick of ``aic-estimator-2`` and the
``tune-landscape`` runs is from measured vLLM. Not a unit test.

    .venv-aic/bin/python -m benchmarks.aic_vs_silicon --record   # call the estimator, store
    .venv/bin/python -m benchmarks.aic_vs_silicon --write        # the RESULTS.md section

Fixed before the first call in ``benchmarks/configs/aic_vs_silicon.yaml``: the measured
rows (a group of ``benchmarks/data/perfmodel_vs_silicon.json``), the estimator call at
each row's setting (batch = the row's concurrency), the figures and the band. Stored in
``benchmarks/data/aic_vs_silicon.json``; the section renders from that file in the
project's environment, without AIConfigurator.
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
CONFIG = ROOT / "benchmarks" / "configs" / "aic_vs_silicon.yaml"
ROWS = ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon.json"
DATA = ROOT / "benchmarks" / "data" / "aic_vs_silicon.json"
SECTION = "aic-vs-silicon"
LABELS = {"tpot": "TPOT", "ttft": "TTFT", "tps": "output tok/s"}


def measured_rows(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The config's group of the stored measured rows."""
    data = json.loads(ROWS.read_text())
    rows = data["rows"] if isinstance(data, dict) else data
    return [r for r in rows if isinstance(r, dict) and r["group"] == config["group"]]


def record(config_path: Path = CONFIG, path: Path = DATA) -> dict[str, Any]:
    """Call the estimator at every selected row (AIConfigurator's environment)."""
    from benchmarks.aic_estimate import estimate

    config = dict(yaml.safe_load(config_path.read_text()))
    est = config["estimator"]
    out = []
    for r in measured_rows(config):
        e = estimate(est["model"], est["system"], int(r["tp"]), int(r["isl"]), int(r["osl"]),
                     int(r["concurrency"]))
        row = {"id": r["id"], "tp": r["tp"], "isl": r["isl"], "osl": r["osl"],
               "concurrency": r["concurrency"], "vllm": r["vllm"], "measured": r["measured"]}
        if "oom" in e:
            row["estimate"] = {"oom": e["oom"]}
        else:
            row["estimate"] = {"tpot": e["tpotMs"], "ttft": e["ttftMs"], "tps": e["outputTps"],
                               "vllmTables": e["version"]}
            row["ratio"] = {k: round(row["estimate"][k] / r["measured"][k], 4)
                            for k in config["figures"] if r["measured"].get(k)}
        out.append(row)
    data = {"label": config["label"], "group": config["group"],
            "source": "NVIDIA AIConfigurator 0.12.0 (PyPI aiconfigurator, Apache-2.0): "
                      "cli_estimate(backend_name='vllm', mode='agg') against the "
                      "silicon_sample.csv rows measured by NVIDIA",
            "rows": out}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def band_name(lo: int, hi: int) -> str:
    """A concurrency band as the section names it (the open top band: ``>= lo``)."""
    return f"{lo}-{hi}" if hi < 100000 else f">= {lo}"


def _band(c: int, bands: list[list[int]]) -> str:
    lo, hi = next(b for b in bands if b[0] <= c <= b[1])
    return band_name(lo, hi)


def section(data: dict[str, Any], config: dict[str, Any]) -> str:
    begin, end = markers(SECTION)
    band = float(config["band"])
    rows = [r for r in data["rows"] if "ratio" in r]
    oom = len(data["rows"]) - len(rows)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_band(int(r["concurrency"]), config["concurrencyBands"]),
                          []).append(r)
    groups["all"] = rows
    table = ["| concurrent requests | rows | " + " | ".join(
        f"{LABELS[k]}: within +-{band:.0%} / median estimate/measured (range)"
        for k in config["figures"]) + " |", "|---|---|" + "---|" * len(config["figures"])]
    for name, rs in groups.items():
        cells = []
        for k in config["figures"]:
            ratios = [r["ratio"][k] for r in rs if k in r["ratio"]]
            within = sum(abs(x - 1) <= band for x in ratios)
            cells.append(f"{within} of {len(ratios)} / {statistics.median(ratios):.2f} "
                         f"({min(ratios):.2f}-{max(ratios):.2f})")
        table.append(f"| {name} | {len(rs)} | " + " | ".join(cells) + " |")
    def median(k: str, keep: Any) -> float:
        return statistics.median(r["ratio"][k] for r in rows if keep(int(r["concurrency"])))

    def low(c: int) -> bool:
        return c <= 16

    def high(c: int) -> bool:
        return c >= 64

    tables = sorted({r["estimate"]["vllmTables"] for r in rows})
    lines = [
        begin,
        f"## AIConfigurator's estimator against NVIDIA's measured vLLM points "
        f"({data['label']})",
        "",
        "**AIConfigurator's estimate (a model) against measured, real vLLM on a GPU "
        "(AIConfigurator's silicon data)**: nothing here ran on this machine. "
        f"{data['source']}. Rows: the {len(data['rows'])} measured rows of "
        f"{data['group']} (vLLM 0.12, TP 2, 4 and 8, 1,024 or 4,096 input and 128-1,024 "
        "output tokens, 8-128 concurrent requests); the estimator at each row's setting "
        f"(batch = the row's concurrency; its vLLM kernel tables: {', '.join(tables)}). "
        f"Fixed before the first call in `benchmarks/configs/aic_vs_silicon.yaml`. "
        f"{oom} rows the estimator called OOM. Regenerate: "
        "`.venv-aic/bin/python -m benchmarks.aic_vs_silicon --record`, then "
        "`.venv/bin/python -m benchmarks.aic_vs_silicon --write`.",
        "",
        *table,
        "",
        "What it says: the estimator's output tok/s is a median "
        f"{median('tps', low):.2f}x the measured at 8-16 requests and "
        f"{median('tps', high):.2f}x at 64-128, its TPOT {median('tpot', low):.2f}x and "
        f"{median('tpot', high):.2f}x, and its TTFT {median('ttft', low):.2f}x and "
        f"{median('ttft', high):.2f}x: the more requests, the more optimistic, most of all "
        "in TTFT. The landscape the planner's start and the tuner are judged on "
        "(aic-estimator-2, tune-landscape) therefore admits under a TTFT objective "
        "batches whose measured TTFT is several times higher, and rewards large batches "
        "more than measured vLLM does: a pick below the landscape's best batch is not by "
        "itself a miss on a GPU. The landscape stays the pre-registered yardstick; this "
        "says how far to trust it.",
        "",
        end,
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return record_or_write(
        __doc__, SECTION, record,
        lambda: section(json.loads(DATA.read_text()), dict(yaml.safe_load(CONFIG.read_text()))),
        argv)


if __name__ == "__main__":
    sys.exit(main())

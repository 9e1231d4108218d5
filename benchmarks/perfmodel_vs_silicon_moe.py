"""The performance model against NVIDIA's measured vLLM points for the mixture-of-experts
models the planner plans (issue 34 section 1, widened by issue 33): run aic-silicon-3, a
held-out set for the model as aic-silicon-2 fitted it. Not a unit test.

    .venv/bin/python -m benchmarks.perfmodel_vs_silicon_moe --record --write  # needs .venv-aic
    .venv/bin/python -m benchmarks.perfmodel_vs_silicon_moe --write           # from stored data

Everything it compares is fixed in ``benchmarks/configs/aic_silicon_3.yaml`` (committed
before the run): the groups (TP-sliced experts only), each group's checkpoint and compute
dtype, the figures and the band. Stored in
``benchmarks/data/perfmodel_vs_silicon_3.json``; the row selection and the model call
are :mod:`benchmarks.perfmodel_vs_silicon`'s.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.perfmodel_vs_silicon import FIGURES, LABELS, _cell, record, summarise
from benchmarks.results_md import markers, record_or_write

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "aic_silicon_3.yaml"
DATA = ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon_3.json"
SECTION = "aic-silicon-3"
GOALS = {"tpot": 0.90, "tps": 0.90, "ttft": 0.75}
BANDS = ((1, 16, "<= 16"), (17, 64, "17-64"), (65, 10**9, "> 64"))
# Noticed after the run, read from the CSV (the stored rows do not keep these columns):
# the registered filter let through rows whose experts span more GPUs than attention.
AFTER_THE_RUN = (
    "Noticed after the run: 19 Qwen3-235B-A22B rows have `moe_tp_size` above `tp_size` (2 "
    "or 4 at TP 1, 13 rows; 4 at TP 2, 6 rows) with `attention_dp_size` left empty: "
    "data-parallel attention in effect, which the registered filter did not catch. The "
    "model prices them at `tp_size` GPUs and finds no KV cache for the 13 at TP 1 (the "
    "rows not predicted). They stay in this run as registered; a next run should also "
    "require `moe_tp_size` = `tp_size`.")


def section(data: dict[str, Any]) -> str:
    rows, band = data["rows"], data["band"]
    begin, end = markers(SECTION)
    versions = sorted({r["vllm"] for r in rows})
    lines = [begin, "## Performance model against NVIDIA's measured vLLM points: "
             f"mixture-of-experts models ({data['label']})", "",
             "**Measured on GPUs by NVIDIA, not by this project**: "
             f"{data['source']}; vLLM versions in these rows: {', '.join(versions)}. The "
             "model's figures are **estimated** (`llm_operator.perfmodel`, exactly as "
             "aic-silicon-2 fitted it on Qwen3-32B bf16 H100 TP 2: **every row here is held "
             "out**, nothing was fitted) at each row's model, GPU, TP, input and output "
             "length and concurrency, with vLLM's default batch settings for the GPU. Only "
             "rows with experts sliced by TP (no expert parallelism, no data-parallel "
             "attention: the placement the operator renders). Each model's facts and weight "
             "bytes come from its checkpoint's config.json; fp8 checkpoints compute in fp8, "
             "the 4-bit weight-only ones (gpt-oss's mxfp4 experts, which the CSV labels "
             "nvfp4, and Kimi-K2.5's int4) in bf16. Output tok/s is derived from each row's "
             "TTFT and TPOT. Pre-registered in "
             f"`{data['config']}`; stored in `benchmarks/data/perfmodel_vs_silicon_3.json`. "
             "Regenerate: `.venv/bin/python -m benchmarks.perfmodel_vs_silicon_moe --record "
             "--write` (needs `.venv-aic`).", "",
             f"Share of rows within +-{band * 100:.0f}% (median error, predicted / measured "
             "- 1):", "",
             "| rows | n | TPOT | output tok/s | TTFT | vLLM |", "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["group"] for r in rows):
        g = [r for r in rows if r["group"] == name]
        s = summarise(g, band)
        lines.append(f"| {name} | {s['predicted']} of {s['rows']} | {_cell(s, 'tpot')} | "
                     f"{_cell(s, 'tps')} | {_cell(s, 'ttft')} | "
                     f"{', '.join(sorted({r['vllm'] for r in g}))} |")
    s = summarise(rows, band)
    lines.append(f"| **all rows (held out)** | {s['predicted']} of {s['rows']} | "
                 f"{_cell(s, 'tpot')} | {_cell(s, 'tps')} | {_cell(s, 'ttft')} | |")
    lines += ["", "By concurrency:", "", "| clients | n | TPOT | output tok/s | TTFT |",
              "|---|---|---|---|---|"]
    for lo, hi, label in BANDS:
        g = [r for r in rows if lo <= r["concurrency"] <= hi]
        if g:
            b = summarise(g, band)
            lines.append(f"| {label} | {b['predicted']} | {_cell(b, 'tpot')} | "
                         f"{_cell(b, 'tps')} | {_cell(b, 'ttft')} |")
    unpredicted = [r for r in rows if r["error"] is None]
    if unpredicted:
        notes = sorted({r.get("note") or "" for r in unpredicted})
        lines += ["", f"Not predicted: {len(unpredicted)} rows ({'; '.join(notes)})."]
    lines += ["", AFTER_THE_RUN]
    worst = {k: max((r for r in rows if r["error"] is not None),
                    key=lambda r, k=k: abs(r["error"][k]), default=None) for k in FIGURES}
    lines += ["", "Worst row per figure: " + "; ".join(
        f"{LABELS[k]} {w['error'][k] * 100:+.0f}% ({w['group']}, TP {w['tp']}, "
        f"{w['isl']}/{w['osl']} tokens, {w['concurrency']} clients)"
        for k, w in worst.items() if w is not None) + "."]
    lines += ["", "Goals on held-out rows (aic_silicon_3.yaml), share within +-25%: " + "; ".join(
        f"{LABELS[k]} >= {v:.0%}: {s[k]['within']:.0%} "
        + ("(met)" if s[k]["within"] is not None and s[k]["within"] >= v else "(**not met**)")
        for k, v in GOALS.items())]
    med = statistics.median
    errs = [r["error"]["tpot"] for r in rows if r["error"] is not None]
    if errs:
        lines += ["", f"Median TPOT error over all rows: {med(errs) * 100:+.0f}%."]
    lines += ["", end]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return record_or_write(__doc__, SECTION, lambda: record(CONFIG, DATA),
                           lambda: section(json.loads(DATA.read_text())), argv)


if __name__ == "__main__":
    sys.exit(main())

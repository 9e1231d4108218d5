"""The performance model against NVIDIA's measured vLLM points for the mixture-of-experts
models the planner plans (issue 34 section 1, widened by issue 33). Not a unit test.

- ``aic-silicon-3`` (``configs/aic_silicon_3.yaml``): the model as aic-silicon-2 fitted it;
- ``aic-silicon-4`` (``configs/aic_silicon_4.yaml``): plus a fixed cost per MoE layer per
  step, fitted only to NVIDIA's measured fused-MoE kernel table
  (:func:`benchmarks.moe_kernels.fit_moe_layer_overhead`), and the rows whose experts
  span exactly the attention's GPUs;
- ``aic-silicon-6`` (``configs/aic_silicon_6.yaml``): the same rows with aic-silicon-5's
  TTFT queue (fitted on the dense fit subset only);
- ``aic-silicon-7`` (``configs/aic_silicon_7.yaml``): the fixed cost per MoE layer re-fitted
  at one token on the quantized kernels these checkpoints run
  (:func:`benchmarks.moe_kernels.fit_moe_layer_overhead_1token`);
- ``aic-silicon-8`` (``configs/aic_silicon_8.yaml``): the routed experts' FLOPs at their own
  achieved fraction of peak, fitted on the same kernels at prefill sizes
  (:func:`benchmarks.moe_kernels.fit_moe_compute`);
- ``aic-silicon-10`` (``configs/aic_silicon_10.yaml``): the TTFT queue's prompt priced once
  (aic-silicon-9's bug fix), nothing re-fitted;
- ``aic-silicon-12`` and ``-14``: aic-silicon-11's per-sequence CPU cost and
  aic-silicon-13's GPU cost per sequence per layer;
- ``aic-silicon-16`` (``configs/aic_silicon_16.yaml``): aic-silicon-15's TTFT wait priced in
  mixed steps, re-fitted on the dense fit subset only;
- ``aic-silicon-18`` (``configs/aic_silicon_18.yaml``): aic-silicon-17's two fixes to it;
- ``aic-silicon-20`` (``configs/aic_silicon_20.yaml``): aic-silicon-19's, the second
  withdrawn.

    .venv/bin/python -m benchmarks.perfmodel_vs_silicon_moe --run aic-silicon-10 --record --write
    .venv/bin/python -m benchmarks.perfmodel_vs_silicon_moe --write   # all, from stored data

Each run is fixed in its config (committed before it ran): the groups (TP-sliced experts
only), each group's checkpoint and compute dtype, the figures and the band. Stored in
``benchmarks/data/perfmodel_vs_silicon_<n>.json``; the row selection and the model call
are :mod:`benchmarks.perfmodel_vs_silicon`'s. Recording a run uses the model as it is
now: only the latest run can be re-recorded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.perfmodel_vs_silicon import DATA as PVS_DATA
from benchmarks.perfmodel_vs_silicon import FIGURES, LABELS, _cell, per_seq_bound, summarise
from benchmarks.perfmodel_vs_silicon import record as pvs_record
from benchmarks.results_md import emit, markers

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "benchmarks" / "configs"
STORED = ROOT / "benchmarks" / "data"
RUNS = {"aic-silicon-3": (CONFIGS / "aic_silicon_3.yaml", STORED / "perfmodel_vs_silicon_3.json"),
        "aic-silicon-4": (CONFIGS / "aic_silicon_4.yaml", STORED / "perfmodel_vs_silicon_4.json"),
        "aic-silicon-6": (CONFIGS / "aic_silicon_6.yaml", STORED / "perfmodel_vs_silicon_6.json"),
        "aic-silicon-7": (CONFIGS / "aic_silicon_7.yaml", STORED / "perfmodel_vs_silicon_7.json"),
        "aic-silicon-8": (CONFIGS / "aic_silicon_8.yaml", STORED / "perfmodel_vs_silicon_8.json"),
        "aic-silicon-10": (CONFIGS / "aic_silicon_10.yaml",
                           STORED / "perfmodel_vs_silicon_10.json"),
        "aic-silicon-12": (CONFIGS / "aic_silicon_12.yaml",
                           STORED / "perfmodel_vs_silicon_12.json"),
        "aic-silicon-14": (CONFIGS / "aic_silicon_14.yaml",
                           STORED / "perfmodel_vs_silicon_14.json"),
        "aic-silicon-16": (CONFIGS / "aic_silicon_16.yaml",
                           STORED / "perfmodel_vs_silicon_16.json"),
        "aic-silicon-18": (CONFIGS / "aic_silicon_18.yaml",
                           STORED / "perfmodel_vs_silicon_18.json"),
        "aic-silicon-20": (CONFIGS / "aic_silicon_20.yaml",
                           STORED / "perfmodel_vs_silicon_20.json")}
LATEST = "aic-silicon-20"
CONFIG, DATA = RUNS[LATEST]
# What the model was in each run (its configs say the same, in more words).
MODEL = {
    "aic-silicon-3": "exactly as aic-silicon-2 fitted it on Qwen3-32B bf16 H100 TP 2",
    "aic-silicon-4": "aic-silicon-2's, plus a fixed {us:.1f} us per MoE layer per step, fitted "
                     "only to NVIDIA's measured vLLM fused-MoE kernel latencies (H200, 176 "
                     "rows; RESULTS gpu-kernels-moe)",
    "aic-silicon-6": "aic-silicon-4's, with aic-silicon-5's TTFT queue (a new request waits for "
                     "the prompts of {share:.2f} x (running - 1) ^ {exponent:.2f} others, fitted "
                     "on the dense fit subset only)",
    "aic-silicon-7": "aic-silicon-6's, with only the fixed time per MoE layer re-fitted: {us:.1f} "
                     "us, the median at one token of NVIDIA's measured latencies of the "
                     "quantized fused-MoE kernels these checkpoints run (fp8 block, mxfp4, int4; "
                     "H100, H200, B200 tables, vLLM 0.24), less the model's roofline",
    "aic-silicon-8": "aic-silicon-7's, with the routed experts' FLOPs at {moe_compute:.2f} of "
                     "peak (the other FLOPs at 0.60): the median achieved fraction of the "
                     "same kernels at 1,024-8,192 tokens, NVIDIA's measurements",
    "aic-silicon-10": "aic-silicon-8's, with the prompt a new request waits for in the TTFT "
                      "queue priced once (a bug fix, aic-silicon-9's; no constant changed)",
    "aic-silicon-12": "aic-silicon-10's, with the per-sequence CPU cost per step 35 us (was "
                      "0.12 ms): the largest no measured row contradicts, set by one of these "
                      "rows (aic-silicon-11's rule)",
    "aic-silicon-14": "aic-silicon-12's, plus a GPU cost of {seq_layer_us:.2f} us per sequence "
                      "per layer in each step, fitted only on the dense fit subset (Qwen3-32B "
                      "bf16 H100 TP 2; aic-silicon-13)",
    "aic-silicon-16": "aic-silicon-14's, with the prompts a new request waits for priced as "
                      "mixed steps of the cycle (their chunk beside the running batch's "
                      "decodes), not as the prompt alone: {share:.2f} x (running - 1) ^ "
                      "{exponent:.2f} of them, re-fitted only on the dense fit subset "
                      "(aic-silicon-15)",
    "aic-silicon-18": "aic-silicon-16's, with aic-silicon-17's two fixes to the wait (a "
                      "prompt waited for costs the mixed steps its tokens fill, not one; "
                      "the wait kept within the cycle), {share:.2f} x (running - 1) ^ "
                      "{exponent:.2f} prompts, re-fitted only on the dense fit subset",
    "aic-silicon-20": "aic-silicon-18's without aic-silicon-17's cap on the wait (aic-silicon-19: "
                      "it bound at 2-16 clients with short prompts): {share:.2f} x (running "
                      "- 1) ^ {exponent:.2f} prompts waited for, each the mixed steps its "
                      "tokens fill, re-fitted only on the dense fit subset",
}
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


def fit_note() -> str:
    """How the fixed cost per MoE layer came out of the kernel table (the fit as
    registered), and what its residuals look like at one token (looked at afterwards)."""
    from benchmarks.moe_kernels import FIT_DATA, fit_moe_layer_overhead

    fit = json.loads(FIT_DATA.read_text())
    median, residuals = fit_moe_layer_overhead(fit)
    q1, _, q3 = statistics.quantiles(residuals, n=4)
    one = [x for r, x in zip(fit["rows"], residuals, strict=True) if r["tokens"] == 1]
    return (f"The fit, as registered: the median of {len(residuals)} residuals (NVIDIA's "
            f"measured fused-MoE latency minus the model's roofline for the same experts, "
            f"1-{max(r['tokens'] for r in fit['rows'])} tokens) is {median * 1e6:.1f} us "
            f"(quartiles {q1 * 1e6:.0f} and {q3 * 1e6:+.0f} us). Looked at afterwards: at one "
            f"token alone the {len(one)} residuals run from {min(one) * 1e6:.0f} to "
            f"{max(one) * 1e6:+.0f} us (median {statistics.median(one) * 1e6:.0f} us); at "
            "8-128 tokens the larger shapes run faster than the model's roofline for them, "
            "which pulls the pooled median down. A fixed cost of the size the serving rows "
            "would want (about 40 us a layer) is not what the kernel table shows: most of the "
            "MoE gap lies elsewhere.")


def _kernel_fit(path: Path, fit: Callable[[dict[str, Any]], tuple[float, list[float]]],
                fmt: Callable[[float], str]) -> tuple[int, float, float, float, str]:
    """A stored kernel fit, as registered: rows, median, quartiles, and ``H200 fp8_block
    <median> (<rows>)`` for each GPU and dtype."""
    data = json.loads(path.read_text())
    median, values = fit(data)
    q1, _, q3 = statistics.quantiles(values, n=4)
    groups: dict[tuple[str, str], list[float]] = {}
    for r, x in zip(data["rows"], values, strict=True):
        groups.setdefault((r["gpu"], r["dtype"]), []).append(x)
    parts = ", ".join(f"{gpu.split('_')[0].upper()} {dtype} {fmt(statistics.median(xs))} "
                      f"({len(xs)})" for (gpu, dtype), xs in sorted(groups.items()))
    return len(values), median, q1, q3, parts


def fit_note_1token() -> str:
    """aic-silicon-7's fit as registered, from its stored kernel rows: the constant, its
    spread, and the residuals by GPU and dtype."""
    from benchmarks.moe_kernels import FIT_1TOKEN_DATA, fit_moe_layer_overhead_1token

    n, median, q1, q3, parts = _kernel_fit(FIT_1TOKEN_DATA, fit_moe_layer_overhead_1token,
                                           lambda x: f"{x * 1e6:.0f} us")
    return (f"The fit, as registered: the median of {n} residuals (NVIDIA's "
            "measured fused-MoE latency at one token minus the model's roofline for the "
            f"same top-k experts) is {median * 1e6:.1f} us (quartiles {q1 * 1e6:.0f} and "
            f"{q3 * 1e6:.0f} us); by GPU and dtype, median (rows): {parts}. "
            "Stored in `benchmarks/data/moe_kernels_aic_1token_fit.json`.")


def fit_note_prefill() -> str:
    """aic-silicon-8's fit as registered, from its stored kernel rows."""
    from benchmarks.moe_kernels import FIT_PREFILL_DATA, fit_moe_compute

    n, median, q1, q3, parts = _kernel_fit(FIT_PREFILL_DATA, fit_moe_compute,
                                           lambda x: f"{x:.2f}")
    return (f"The fit, as registered: the median of {n} achieved fractions of "
            "peak (the routed experts' FLOPs over NVIDIA's measured fused-MoE latency at "
            "1,024-8,192 tokens, over the FP8 peak for fp8_block and the BF16 peak for the "
            f"4-bit dtypes) is {median:.3f} (quartiles {q1:.2f} and {q3:.2f}); by GPU and "
            f"dtype, median (rows): {parts}. Stored in "
            "`benchmarks/data/moe_kernels_aic_prefill_fit.json`.")


# The run whose constant was fitted to kernel rows shows its fit below its table.
FIT_NOTES: dict[str, Callable[[], str]] = {"aic-silicon-4": fit_note,
                                           "aic-silicon-7": fit_note_1token,
                                           "aic-silicon-8": fit_note_prefill}


def section(data: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """A run's section; ``before``: the previous run's stored data, compared on the rows
    both have."""
    from llm_operator.planning.perfmodel import GPU_EFFICIENCY

    rows, band = data["rows"], data["band"]
    label = data["label"]
    begin, end = markers(label)
    queue = data.get("prefillQueue") or {}
    model = MODEL[label].format(us=data.get("moeLayerOverheadUs",
                                            GPU_EFFICIENCY.moe_layer_overhead_s * 1e6),
                                share=queue.get("share", 0.0),
                                exponent=queue.get("exponent", 1.0),
                                moe_compute=data.get("moeCompute") or 0.0,
                                seq_layer_us=data.get("attentionSeqLayerUs") or 0.0)
    versions = sorted({r["vllm"] for r in rows})
    lines = [begin, "## Performance model against NVIDIA's measured vLLM points: "
             f"mixture-of-experts models ({data['label']})", "",
             "**Measured on GPUs by NVIDIA, not by this project**: "
             f"{data['source']}; vLLM versions in these rows: {', '.join(versions)}. The "
             f"model's figures are **estimated** (`llm_operator.planning.perfmodel`, {model}: "
             "**every row here is held out**, no serving row was fitted to) at each row's "
             "model, GPU, TP, input and output "
             "length and concurrency, with vLLM's default batch settings for the GPU. Only "
             "rows with experts sliced by TP (no expert parallelism, no data-parallel "
             "attention: the placement the operator renders"
             + ("; and experts over exactly the attention's GPUs" if data.get("matchTp")
                else "") + "). Each model's facts and weight "
             "bytes come from its checkpoint's config.json; fp8 checkpoints compute in fp8, "
             "the 4-bit weight-only ones (gpt-oss's mxfp4 experts, which the CSV labels "
             "nvfp4, and Kimi-K2.5's int4) in bf16. Output tok/s is derived from each row's "
             "TTFT and TPOT. Pre-registered in "
             f"`{data['config']}`; stored in `benchmarks/data/{RUNS[label][1].name}`. "
             f"Regenerate: `.venv/bin/python -m benchmarks.perfmodel_vs_silicon_moe --run {label} "
             "--record --write` (needs `.venv-aic`; the latest run only).", "",
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
    if data.get("perSeqBoundRow") in {r["id"] for r in rows}:
        # aic-silicon-11's rule set the per-sequence cost from one of these rows
        o = summarise([r for r in rows if r["id"] != data["perSeqBoundRow"]], band)
        lines.append(f"| **all but the row that set the per-sequence cost** | "
                     f"{o['predicted']} of {o['rows']} | {_cell(o, 'tpot')} | "
                     f"{_cell(o, 'tps')} | {_cell(o, 'ttft')} | |")
    lines += ["", "By concurrency:", "", "| clients | n | TPOT | output tok/s | TTFT |",
              "|---|---|---|---|---|"]
    for lo, hi, band_label in BANDS:
        g = [r for r in rows if lo <= r["concurrency"] <= hi]
        if g:
            b = summarise(g, band)
            lines.append(f"| {band_label} | {b['predicted']} | {_cell(b, 'tpot')} | "
                         f"{_cell(b, 'tps')} | {_cell(b, 'ttft')} |")
    unpredicted = [r for r in rows if r["error"] is None]
    if unpredicted:
        notes = sorted({r.get("note") or "" for r in unpredicted})
        lines += ["", f"Not predicted: {len(unpredicted)} rows ({'; '.join(notes)})."]
    if label == "aic-silicon-3":
        lines += ["", AFTER_THE_RUN]
    if label in FIT_NOTES:
        lines += ["", FIT_NOTES[label]()]
    if before is not None:
        ids = {r["id"] for r in rows}
        old = [r for r in before["rows"] if r["id"] in ids]
        lines += ["", f"Against {before['label']} on the same {len(old)} rows:", "",
                  "| run | TPOT | output tok/s | TTFT |", "|---|---|---|---|"]
        for d, g in ((before, old), (data, rows)):
            b = summarise(g, band)
            lines.append(f"| {d['label']} | {_cell(b, 'tpot')} | {_cell(b, 'tps')} | "
                         f"{_cell(b, 'ttft')} |")
    worst = {k: max((r for r in rows if r["error"] is not None),
                    key=lambda r, k=k: abs(r["error"][k]), default=None) for k in FIGURES}
    lines += ["", "Worst row per figure: " + "; ".join(
        f"{LABELS[k]} {w['error'][k] * 100:+.0f}% ({w['group']}, TP {w['tp']}, "
        f"{w['isl']}/{w['osl']} tokens, {w['concurrency']} clients)"
        for k, w in worst.items() if w is not None) + "."]
    cfg_name = RUNS[label][0].name
    lines += ["", f"Goals on held-out rows ({cfg_name}), share within +-25%: " + "; ".join(
        f"{LABELS[k]} >= {v:.0%}: {s[k]['within']:.0%} "
        + ("(met)" if s[k]["within"] is not None and s[k]["within"] >= v else "(**not met**)")
        for k, v in GOALS.items())]
    med = statistics.median
    errs = [r["error"]["tpot"] for r in rows if r["error"] is not None]
    if errs:
        lines += ["", f"Median TPOT error over all rows: {med(errs) * 100:+.0f}%."]
    lines += ["", end]
    return "\n".join(lines) + "\n"


def record(label: str = LATEST) -> dict[str, Any]:
    """Re-run the model on the CSV for run ``label`` and store it (the model as it is now:
    only the latest run means what its config says)."""
    from llm_operator.planning.perfmodel import GPU_EFFICIENCY

    config_path, path = RUNS[label]
    config = yaml.safe_load(config_path.read_text())
    # The constants the run's section names (the model as it is now).
    extra: dict[str, Any] = {
        "matchTp": bool(config.get("expertsMatchAttentionTp")),
        "prefillQueue": {"share": GPU_EFFICIENCY.prefill_queue_share,
                         "exponent": GPU_EFFICIENCY.prefill_queue_exponent,
                         **({"unit": GPU_EFFICIENCY.prefill_queue_unit}
                            if GPU_EFFICIENCY.prefill_queue_unit != "prompt" else {}),
                         **({"withinCycle": True}
                            if GPU_EFFICIENCY.prefill_queue_within_cycle else {})},
        "moeLayerOverheadUs": round(GPU_EFFICIENCY.moe_layer_overhead_s * 1e6, 2),
        "moeCompute": GPU_EFFICIENCY.moe_compute,
        "perSeqOverheadUs": round(GPU_EFFICIENCY.per_seq_overhead_s * 1e6, 2),
        "attentionSeqLayerUs": round(GPU_EFFICIENCY.attention_seq_layer_s * 1e6, 3)}
    # the row aic-silicon-11's rule took
    if label in ("aic-silicon-12", "aic-silicon-14", "aic-silicon-16", "aic-silicon-18",
                 "aic-silicon-20"):
        extra["perSeqBoundRow"] = per_seq_bound(
            [PVS_DATA, RUNS["aic-silicon-10"][1]])[1]
    return pvs_record(config_path, path, extra)


def render(label: str) -> str:
    labels = list(RUNS)
    i = labels.index(label)
    before = json.loads(RUNS[labels[i - 1]][1].read_text()) if i > 0 else None
    return section(json.loads(RUNS[label][1].read_text()), before)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", choices=list(RUNS), help="one run (default: every stored one)")
    ap.add_argument("--record", action="store_true", help="re-run the model on the CSV")
    ap.add_argument("--write", action="store_true", help="replace the section where it lives")
    args = ap.parse_args(argv)
    if args.record:
        record(args.run or LATEST)
    for label in [args.run] if args.run else list(RUNS):
        emit(label, render(label), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The performance model against the vLLM serving points NVIDIA measured on GPUs and
ships in AIConfigurator 0.12.0 (issue 34, section 1). Not a unit test.

    .venv/bin/python -m benchmarks.perfmodel_vs_silicon            # print the section
    .venv/bin/python -m benchmarks.perfmodel_vs_silicon --record   # store the comparison
    .venv/bin/python -m benchmarks.perfmodel_vs_silicon --write    # and replace it in RESULTS.md

Everything it compares is fixed in ``benchmarks/configs/aic_silicon.yaml`` (committed
before the first run): the rows (vLLM, aggregated serving, one pipeline stage, the
groups the config names), the figures (TPOT, TTFT, and output tok/s derived from them),
the +-25% band, and the fit subset a re-fit may use. ``--record`` needs the CSV, from
the AIConfigurator install in ``.venv-aic`` (``bash tools/setup.sh --aic``), and stores
each row's measured and predicted figures in ``benchmarks/data/perfmodel_vs_silicon.json``
(a derived table with its attribution); the section is rendered from that file.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Iterable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import yaml
from tests.support.aic import AIC_SOURCE, gpu_facts, hardware, model, read_rows, silicon_csv

from benchmarks.results_md import emit, markers
from llm_operator.planning import vllm_default_max_num_batched_tokens, vllm_default_max_num_seqs
from llm_operator.planning.perfmodel import (
    EngineSettings,
    Hardware,
    ModelShape,
    Point,
    Workload,
    predict_point,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "aic_silicon_19.yaml"  # the current run
CONFIG_15 = ROOT / "benchmarks" / "configs" / "aic_silicon_15.yaml"
DATA = ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon.json"
# Earlier runs of the same rows, stored as they were: aic-silicon-1 (configs/aic_silicon.yaml,
# the model before any re-fit), aic-silicon-2 (configs/aic_silicon_2.yaml, re-fitted on
# the fit subset; its TTFT queue a fixed share of the running requests) and aic-silicon-5
# (configs/aic_silicon_5.yaml, the queue's share and exponent fitted on the same subset)
# aic-silicon-9 (configs/aic_silicon_9.yaml, the queue's prompt priced once) and
# aic-silicon-11 (configs/aic_silicon_11.yaml, the per-sequence CPU cost 35 us) and
# aic-silicon-13 (configs/aic_silicon_13.yaml, a GPU cost per sequence per layer) and
# aic-silicon-15 (configs/aic_silicon_15.yaml, the TTFT wait priced in mixed steps) and
# aic-silicon-17 (configs/aic_silicon_17.yaml, two fixes to that wait).
BEFORE = ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon_1.json"
EARLIER = (BEFORE, ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon_2.json",
           ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon_5.json",
           ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon_9.json",
           ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon_11.json",
           ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon_13.json",
           ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon_15.json",
           ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon_17.json")
RUN_NOTES = {"aic-silicon-1": "the model fitted to none of these rows",
             "aic-silicon-2": "re-fitted on the declared subset only",
             "aic-silicon-5": "its TTFT queue re-fitted on the same subset only",
             "aic-silicon-9": "aic-silicon-5's, the queue's prompt priced once (a bug fix)",
             "aic-silicon-11": "aic-silicon-9's, the per-sequence CPU cost 35 us (the largest "
                               "no measured row contradicts)",
             "aic-silicon-13": "aic-silicon-11's, plus a GPU cost per sequence per layer "
                               "fitted on the same subset only",
             "aic-silicon-15": "aic-silicon-13's, the prompts a request waits for priced as "
                               "mixed steps, the queue re-fitted on the same subset only",
             "aic-silicon-17": "aic-silicon-15's with two fixes (a prompt waited for costs "
                               "the mixed steps it fills; the wait kept within the cycle), "
                               "the queue re-fitted on the same subset only",
             "aic-silicon-19": "aic-silicon-17's without its cap on the wait (it bound at "
                               "2-16 clients with short prompts), re-fitted on the same "
                               "subset only"}
# The runs whose constants are aic-silicon-5's TTFT fit (shown under them).
TTFT_FIT_RUNS = ("aic-silicon-5", "aic-silicon-9", "aic-silicon-11", "aic-silicon-13")
# The fits of the TTFT queue (share, exponent), each on the fit subset only: aic-silicon-5's
# (the prompts waited for priced alone), -15's (one mixed step each), -17's (the mixed
# steps each fills, the wait capped at the cycle) and -19's (the cap withdrawn), by the
# kind of fit their config registers (:func:`fit_kind`).
TTFT_FIT = ROOT / "benchmarks" / "data" / "perfmodel_ttft_fit.json"
TTFT_FIT_15 = ROOT / "benchmarks" / "data" / "perfmodel_ttft_fit_15.json"
TTFT_FIT_17 = ROOT / "benchmarks" / "data" / "perfmodel_ttft_fit_17.json"
TTFT_FIT_19 = ROOT / "benchmarks" / "data" / "perfmodel_ttft_fit_19.json"
TTFT_FITS = {"prompt": TTFT_FIT, "mixed_step": TTFT_FIT_15,
             "mixed_step_per_chunk": TTFT_FIT_17, "mixed_step_per_chunk_uncapped": TTFT_FIT_19}
_8192_ROWS = ("aic-silicon-15's gain had been almost all the 35 Llama-3.1-70B rows with "
              "8,192-token prompts on H100 and H200 (1 -> 32 within +-25%; 1 again in "
              "aic-silicon-17 and -19, where the 31 that left the band are +28% to +74%): "
              "there a prompt takes two chunks of the 8,192-token budget beside the "
              "decodes, and one mixed step (half the prompt) is what the measured wait "
              "behind it looks like; the whole prompt's steps are twice that.")
# The TTFT fits since aic-silicon-15, by the run whose constants they are: the stored fit,
# what the wait was, and what was found after the run.
MIXED_STEP_FITS: dict[str, tuple[Path, str, str]] = {
    "aic-silicon-15": (
        TTFT_FIT_15, "the prompts a new request waits for priced as one mixed step each",
        "The fit subset alone did not ask for the change: the unit was chosen with the "
        "held-out rows in view, as the config says, and the held-out TTFT figure of this "
        "run is a selected result."),
    "aic-silicon-17": (
        TTFT_FIT_17, "aic-silicon-15's wait with two fixes (a prompt waited for costs the "
        "mixed steps its tokens fill, not one; the wait kept within the cycle)",
        "The fixes move no fit-subset row. " + _8192_ROWS),
    "aic-silicon-19": (
        TTFT_FIT_19, "aic-silicon-17's wait without its cap (which bound at 2-16 clients "
        "with short prompts, and in no row here)",
        "Every row's figures are aic-silicon-17's, as the config said they would be. "
        + _8192_ROWS),
}
# aic-silicon-13's fit of the cost per sequence per layer, on the fit subset only.
SEQ_LAYER_FIT = ROOT / "benchmarks" / "data" / "perfmodel_seq_layer_fit.json"
SECTION = "aic-silicon"
FIGURES = ("tpot", "tps", "ttft")
LABELS = {"tpot": "TPOT", "tps": "output tok/s", "ttft": "TTFT"}


def load_config(path: Path = CONFIG) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def in_fit(row: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether a row is in the config's declared fit subset."""
    fit = config.get("fitSubset") or {}
    return bool(fit) and row["group"] == fit.get("group") and row["tp"] == fit.get("tp")


def compute_dtype(group: dict[str, Any]) -> str:
    """The dtype a group's matmuls run in: fp8 for fp8 weights unless the group says
    otherwise (``compute``: a checkpoint quantized by its publisher names it), else bf16."""
    return str(group.get("compute", "fp8" if group["quantization"] == "fp8" else "bf16"))


def _setting(group: dict[str, Any], config: dict[str, Any]
             ) -> tuple[ModelShape, Hardware, EngineSettings]:
    """The model, GPU and vLLM's default batch settings for a group's rows."""
    fp8 = compute_dtype(group) == "fp8"
    shape = ModelShape.from_facts(model(group["model"]), quantization=group["quantization"],
                                  kv_cache_dtype=config["engine"]["kvCacheDtype"])
    facts = gpu_facts(group["gpu"])
    engine = EngineSettings(max_num_seqs=vllm_default_max_num_seqs(facts),
                            max_num_batched_tokens=vllm_default_max_num_batched_tokens(facts),
                            gpu_memory_utilization=float(config["engine"]["gpuMemoryUtilization"]))
    return shape, hardware(group["gpu"], fp8=fp8), engine


def predict_rows(config: dict[str, Any], csv_path: Path) -> list[dict[str, Any]]:
    """Each selected row with the model's figures at the same setting."""
    groups = {g["name"]: g for g in config["groups"]}
    out = []
    for r in read_rows(csv_path, config["groups"], bool(config.get("tpExpertsOnly")),
                       bool(config.get("expertsMatchAttentionTp"))):
        shape, hw, engine = _setting(groups[r.group], config)
        row = asdict(r)
        row["measured"] = {"tpot": r.tpot_ms, "ttft": r.ttft_ms, "tps": r.measured_tps}
        try:
            p = predict_point(shape, hw, r.tp, Workload(r.isl, r.osl), engine, r.concurrency)
        except ValueError as e:  # the model finds no room for one request
            row["predicted"], row["error"], row["note"] = None, None, str(e)
        else:
            pred = {"tpot": p.tpot_s * 1e3, "ttft": p.ttft_s * 1e3, "tps": p.output_tps}
            row["predicted"] = {k: round(v, 3) for k, v in pred.items()}
            row["error"] = {k: round(pred[k] / row["measured"][k] - 1, 4) for k in FIGURES}
            row["limit"] = p.limit
        row["measured"] = {k: round(v, 3) for k, v in row["measured"].items()}
        row["fit"] = in_fit(row, config)
        out.append(row)
    return out


def _steps(spec: dict[str, float], digits: int = 6) -> list[float]:
    n = round((spec["to"] - spec["from"]) / spec["step"])
    return [round(spec["from"] + i * spec["step"], digits) for i in range(n + 1)]


Setting = tuple[dict[str, Any], ModelShape, Hardware, EngineSettings]


def settings_of(config: dict[str, Any], rows: list[dict[str, Any]]) -> list[Setting]:
    """Each row with the model, GPU and vLLM settings its group gives (:func:`_setting`)."""
    groups = {g["name"]: g for g in config["groups"]}
    return [(r, *_setting(groups[r["group"]], config)) for r in rows]


def predict_at(setting: Setting, **constants: Any) -> Point:
    """The model's point at one row's setting, with ``constants`` of its Efficiency
    replaced (a fit's trial value, or the constants an earlier run had)."""
    r, shape, hw, engine = setting
    hw = replace(hw, efficiency=replace(hw.efficiency, **constants))
    return predict_point(shape, hw, r["tp"], Workload(r["isl"], r["osl"]), engine,
                         r["concurrency"])


def _sse(settings: list[Setting], figure: str, **constants: Any) -> float:
    """Sum of squared ln(predicted / measured) of ``figure`` (ttft or tpot) over rows."""
    attr = {"ttft": "ttft_s", "tpot": "tpot_s"}[figure]
    return round(sum(math.log(getattr(predict_at(st, **constants), attr) * 1e3
                              / st[0]["measured"][figure]) ** 2 for st in settings), 9)


# The TTFT wait as each run that changed it left it (Efficiency's fields), for re-running
# what was fitted or run on it: aic-silicon-5's (to -13; the prompts waited for priced
# alone), -15's (one mixed step each), -17's (the mixed steps each fills, capped at the
# cycle). aic-silicon-19's is GPU_EFFICIENCY's.
WAIT: dict[str, dict[str, Any]] = {
    "aic-silicon-5": {"prefill_queue_share": 0.38, "prefill_queue_exponent": 0.65,
                      "prefill_queue_unit": "prompt", "prefill_queue_within_cycle": False},
    "aic-silicon-15": {"prefill_queue_share": 0.42, "prefill_queue_exponent": 0.60,
                       "prefill_queue_unit": "mixed_step", "prefill_queue_within_cycle": False},
    "aic-silicon-17": {"prefill_queue_share": 0.42, "prefill_queue_exponent": 0.60,
                       "prefill_queue_unit": "mixed_step_per_chunk",
                       "prefill_queue_within_cycle": True},
}
# The model aic-silicon-13's fit ran on: aic-silicon-5's wait (the wait moves time from
# TPOT to TTFT, so it moves the TPOT the fit reads).
SEQ_LAYER_FIT_MODEL = WAIT["aic-silicon-5"]


def _how(run: str) -> dict[str, Any]:
    """A run's wait without its share and exponent (how each prompt is priced)."""
    return {k: v for k, v in WAIT[run].items()
            if k not in ("prefill_queue_share", "prefill_queue_exponent")}


def _before(run: str) -> dict[str, Any]:
    """A run's wait as a fit's "before" (the constants the fit replaced)."""
    return {"share": WAIT[run]["prefill_queue_share"],
            "exponent": WAIT[run]["prefill_queue_exponent"], **_how(run)}


# The registered TTFT fits, by the kind their config's ttftFit names (:func:`fit_kind`):
# aic-silicon-5's (no unit; configs aic_silicon_5 to _13 carry its grid), -15's, -17's
# and -19's (-17's cap withdrawn). The model each ran on: aic-silicon-5's, the terms added
# since as they were then (aic-silicon-13's cost per sequence per layer did not exist;
# aic-silicon-11's per-sequence cost moved no fit-subset row); the later ones, the model
# as it is but for the wait. And the constants each replaced (its "before"):
# aic-silicon-2's, -5's, -15's and -17's.
TTFT_FIT_MODEL: dict[str, dict[str, Any]] = {
    "prompt": {"attention_seq_layer_s": 0.0, **_how("aic-silicon-5")},
    "mixed_step": _how("aic-silicon-15"),
    "mixed_step_per_chunk": _how("aic-silicon-17"),
    "mixed_step_per_chunk_uncapped": {**_how("aic-silicon-17"),
                                      "prefill_queue_within_cycle": False},
}
TTFT_FIT_BEFORE: dict[str, dict[str, Any]] = {
    "prompt": {"share": 0.10, "exponent": 1.0},
    "mixed_step": _before("aic-silicon-5"),
    "mixed_step_per_chunk": _before("aic-silicon-15"),
    "mixed_step_per_chunk_uncapped": _before("aic-silicon-17"),
}


def fit_kind(grid: dict[str, Any]) -> str:
    """Which registered TTFT fit a config's ttftFit is (a key of :data:`TTFT_FIT_MODEL`):
    its unit, and for aic-silicon-19's, the cap withdrawn."""
    unit = str(grid.get("unit", "prompt"))
    return unit + ("_uncapped" if grid.get("withinCycle") is False else "")


def fit_ttft_queue(config: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The TTFT fit a config registers (aic-silicon-5's, -15's, -17's, -19's): over the grid
    of (share, exponent), the least sum of squared ln(predicted / measured) TTFT over the
    fit subset's rows ONLY (``rows`` may hold others: they are not read), the model as that
    fit ran (:data:`TTFT_FIT_MODEL`); a tie goes to the smaller exponent, then the smaller
    share."""
    fit_rows = [r for r in rows if in_fit(r, config)]
    settings = settings_of(config, fit_rows)
    grid = config["ttftFit"]
    unit_of_fit = fit_kind(grid)
    at = TTFT_FIT_MODEL[unit_of_fit]

    def sse(share: float, exponent: float, **more: Any) -> float:
        return _sse(settings, "ttft", **{**at, "prefill_queue_share": share,
                                         "prefill_queue_exponent": exponent, **more})

    best = min((sse(share, exponent), exponent, share)
               for exponent in _steps(grid["exponent"]) for share in _steps(grid["share"]))
    before = TTFT_FIT_BEFORE[unit_of_fit]
    unit = {k: v for k, v in before.items() if k not in ("share", "exponent")}
    # configs aic_silicon_5 to _13 all carry aic-silicon-5's fit: it is that fit's label
    label = "aic-silicon-5" if unit_of_fit == "prompt" else config["label"]
    return {"label": label, "rows": len(settings),
            "rowIds": [r["id"] for r in fit_rows], "share": best[2], "exponent": best[1],
            "sumSquaredLogError": best[0],
            "before": {**before, "sumSquaredLogError": sse(before["share"], before["exponent"],
                                                           **unit)},
            "grid": grid}


def fit_seq_layer(config: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """aic-silicon-13's fit, as its config registers it: over the grid of
    ``attention_seq_layer_s``, the least sum of squared ln(predicted / measured) TPOT over
    the fit subset's rows ONLY (``rows`` may hold others: they are not read), every other
    constant as it is; a tie goes to the smaller value."""
    fit_rows = [r for r in rows if in_fit(r, config)]
    settings = settings_of(config, fit_rows)
    grid = config["seqLayerFit"]
    at = SEQ_LAYER_FIT_MODEL
    best = min((_sse(settings, "tpot", attention_seq_layer_s=x, **at), x)
               for x in _steps(grid["seconds"], digits=12))
    return {"label": "aic-silicon-13", "rows": len(settings),
            "rowIds": [r["id"] for r in fit_rows], "attentionSeqLayerSeconds": best[1],
            "sumSquaredLogError": best[0],
            "before": {"attentionSeqLayerSeconds": 0.0,
                       "sumSquaredLogError": _sse(settings, "tpot", attention_seq_layer_s=0.0,
                                                  **at)},
            "grid": grid}


def record(config_path: Path = CONFIG, path: Path = DATA,
           extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Predict every selected row and store them at ``path`` (with ``extra`` keys)."""
    csv_path = silicon_csv()
    if csv_path is None:
        sys.exit("silicon_sample.csv not found: install AIConfigurator in .venv-aic "
                 "(bash tools/setup.sh --aic) or set LLMOP_AIC_CSV")
    config_path = config_path.resolve()
    config = load_config(config_path)
    data = {"label": config["label"], "config": str(config_path.relative_to(ROOT)),
            "source": AIC_SOURCE, "model": "llm_operator.planning.perfmodel GPU_EFFICIENCY",
            "band": config["band"], "fitted": bool(config.get("fittedToSubset", False)),
            "rows": predict_rows(config, csv_path), **(extra or {})}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def per_seq_bound(paths: Iterable[Path]) -> tuple[float, str]:
    """aic-silicon-11's rule (configs/aic_silicon_11.yaml) for the per-sequence CPU cost,
    which overlaps the GPU's step and so caps one engine at 1 / cost output tok/s: the
    largest cost no measured row contradicts, 1 / the highest measured output tok/s over
    the stored rows of ``paths``, rounded down to the microsecond. Returns it (seconds)
    and the id of the row that sets it."""
    rows = [r for p in paths for r in json.loads(p.read_text())["rows"]]
    top = max(rows, key=lambda r: r["measured"]["tps"])
    return math.floor(1e6 / top["measured"]["tps"]) / 1e6, top["id"]


def summarise(rows: list[dict[str, Any]], band: float) -> dict[str, Any]:
    """Share within the band, median and worst error of each figure."""
    ok = [r for r in rows if r["error"] is not None]
    out: dict[str, Any] = {"rows": len(rows), "predicted": len(ok)}
    for k in FIGURES:
        errs = [r["error"][k] for r in ok]
        out[k] = {"within": (sum(abs(e) <= band for e in errs) / len(errs)) if errs else None,
                  "median": statistics.median(errs) if errs else None,
                  "worst": max(errs, key=abs) if errs else None}
    return out


def _cell(s: dict[str, Any], k: str) -> str:
    f = s[k]
    if f["within"] is None:
        return "-"
    return f"{f['within'] * 100:.0f}% (median {f['median'] * 100:+.0f}%)"


def section(data: dict[str, Any]) -> str:
    rows, band = data["rows"], data["band"]
    begin, end = markers(SECTION)
    versions = sorted({r["vllm"] for r in rows})
    fit = [r for r in rows if r["fit"]]
    held = [r for r in rows if not r["fit"]]
    lines = [begin, f"## Performance model against NVIDIA's measured vLLM points ({data['label']})",
             "",
             "**Measured on GPUs by NVIDIA, not by this project** (this project has run no GPU): "
             f"{data['source']}; vLLM versions in these rows: {', '.join(versions)} (the "
             "Llama-3.1-70B rows do not state theirs). The model's figures are **estimated** "
             "(`llm_operator.planning.perfmodel`) at each row's model, GPU, TP, precision, "
             "input and output length and concurrency, with vLLM's default batch settings for "
             "the GPU. "
             "Output tok/s is derived from each row's TTFT and TPOT (c x OSL / (TTFT + (OSL - 1) "
             "TPOT)); the CSV has no throughput column. Pre-registered in "
             f"`{data['config']}` (groups, figures, the +-{band * 100:.0f}% band, the fit "
             "subset); stored in `benchmarks/data/perfmodel_vs_silicon.json`. Regenerate: "
             "`.venv/bin/python -m benchmarks.perfmodel_vs_silicon --record --write` (needs "
             "`.venv-aic`).", "",
             f"Share of rows within +-{band * 100:.0f}% (median error, predicted / measured - 1):",
             "",
             "| rows | n | TPOT | output tok/s | TTFT | vLLM |",
             "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["group"] for r in rows):
        g = [r for r in rows if r["group"] == name]
        s = summarise(g, band)
        tag = " (TP 2 rows: the declared fit subset)" if any(r["fit"] for r in g) else ""
        lines.append(f"| {name}{tag} | {s['predicted']} of {s['rows']} | {_cell(s, 'tpot')} | "
                     f"{_cell(s, 'tps')} | {_cell(s, 'ttft')} | "
                     f"{', '.join(sorted({r['vllm'] for r in g}))} |")
    fit_label = ("fit subset (declared, Qwen3-32B bf16 H100 TP 2): the model was fitted to it"
                 if data.get("fitted") else "declared fit subset (Qwen3-32B bf16 H100 TP 2): "
                 "not used for fitting in this run")
    for label, g in (("all rows", rows), (fit_label, fit),
                     ("held out (every other row)", held)):
        if not g:
            continue
        s = summarise(g, band)
        lines.append(f"| **{label}** | {s['predicted']} of {s['rows']} | {_cell(s, 'tpot')} | "
                     f"{_cell(s, 'tps')} | {_cell(s, 'ttft')} | |")
    runs = [json.loads(p.read_text()) for p in EARLIER if p.exists()]
    runs = [d for d in runs if d["label"] != data["label"]] + [data]
    if len(runs) > 1:
        lines += ["", "Run by run (" + "; ".join(
            f"{d['label']}: {RUN_NOTES.get(d['label'], 'the model as it was')}"
            for d in runs) + "):", "",
                  "| rows | run | TPOT | output tok/s | TTFT |", "|---|---|---|---|---|"]
        for label, pick in (("held out", lambda r: not r["fit"]),
                            ("fit subset", lambda r: r["fit"])):
            for d in runs:
                s = summarise([r for r in d["rows"] if pick(r)], band)
                lines.append(f"| {label} | {d['label']} | {_cell(s, 'tpot')} | "
                             f"{_cell(s, 'tps')} | {_cell(s, 'ttft')} |")
        if TTFT_FIT.exists() and data["label"] in TTFT_FIT_RUNS:
            f = json.loads(TTFT_FIT.read_text())
            lines += ["", f"The fit ({f['label']}'s, as registered in "
                      f"`benchmarks/configs/aic_silicon_5.yaml`): over {f['rows']} rows "
                      "of the fit subset only, the TTFT queue's share and exponent with the "
                      f"least squared log TTFT error are {f['share']:.2f} and "
                      f"{f['exponent']:.2f} (sum {f['before']['sumSquaredLogError']:.2f} at "
                      f"aic-silicon-2's {f['before']['share']:.2f} and "
                      f"{f['before']['exponent']:.0f}, {f['sumSquaredLogError']:.2f} at "
                      "the fit; stored in `benchmarks/data/perfmodel_ttft_fit.json`)."]
        if data["label"] in MIXED_STEP_FITS:
            path, what, after = MIXED_STEP_FITS[data["label"]]
            f = json.loads(path.read_text())
            n = data["label"].rsplit("-", 1)[1]
            lines += ["", f"The fit ({f['label']}'s, as registered in "
                      f"`benchmarks/configs/aic_silicon_{n}.yaml`): {what}; over {f['rows']} "
                      "rows of the fit subset only, the share and exponent with the least "
                      f"squared log TTFT error are {f['share']:.2f} and {f['exponent']:.2f} "
                      f"(sum {f['sumSquaredLogError']:.2f}; the wait it replaced, "
                      f"{f['before']['share']:.2f} and {f['before']['exponent']:.2f}: "
                      f"{f['before']['sumSquaredLogError']:.2f} on the same rows; stored in "
                      f"`benchmarks/data/{path.name}`). {after}"]
        g = [r for r in data["rows"] if not r["fit"]]
        s = summarise(g, band)
        want = {"tpot": 0.90, "tps": 0.90, "ttft": 0.75}
        goals = "Goals on held-out rows (aic_silicon.yaml), share within +-25%: " + "; ".join(
            f"{LABELS[k]} >= {v:.0%}: {s[k]['within']:.0%} "
            + ("(met)" if s[k]["within"] >= v else "(**not met**)") for k, v in want.items())
        lines += ["", goals]
    lines += ["", "By concurrency (held out):", "",
              "| clients | n | TPOT | output tok/s | TTFT |", "|---|---|---|---|---|"]
    for c in sorted({r["concurrency"] for r in held}):
        g = [r for r in held if r["concurrency"] == c]
        s = summarise(g, band)
        lines.append(f"| {c} | {s['predicted']} | {_cell(s, 'tpot')} | {_cell(s, 'tps')} | "
                     f"{_cell(s, 'ttft')} |")
    lines += ["", end]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help="re-run the model on the CSV")
    ap.add_argument("--write", action="store_true", help="replace the section where it lives")
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--fit", action="store_true",
                    help="the config's TTFT fit (aic-silicon-5's, -15's, -17's, -19's) on "
                         "the fit subset of the stored rows")
    ap.add_argument("--fit-ttft-steps", action="store_true",
                    help="aic-silicon-15's TTFT fit (configs/aic_silicon_15.yaml)")
    ap.add_argument("--fit-seq-layer", action="store_true",
                    help="aic-silicon-13's fit of the cost per sequence per layer, on the "
                         "fit subset of the stored rows")
    args = ap.parse_args(argv)
    if args.fit_seq_layer:
        fit = fit_seq_layer(load_config(args.config), json.loads(DATA.read_text())["rows"])
        SEQ_LAYER_FIT.write_text(json.dumps(fit, indent=1) + "\n")
        sys.stdout.write(json.dumps({k: v for k, v in fit.items() if k != "rowIds"},
                                    indent=1) + "\n")
        return 0
    if args.fit or args.fit_ttft_steps:
        config = load_config(CONFIG_15 if args.fit_ttft_steps else args.config)
        fit = fit_ttft_queue(config, json.loads(DATA.read_text())["rows"])
        path = TTFT_FITS[fit_kind(config["ttftFit"])]
        path.write_text(json.dumps(fit, indent=1) + "\n")
        shown = {k: v for k, v in fit.items() if k != "rowIds"}
        sys.stdout.write(json.dumps(shown, indent=1) + "\n")
        return 0
    data = record(args.config) if args.record else json.loads(DATA.read_text())
    return emit(SECTION, section(data), args.write)


if __name__ == "__main__":
    raise SystemExit(main())

"""The run-to-run spread of real vLLM on GPUs, from the configurations NVIDIA measured more
than once (same setting, same vLLM image, another day) in AIConfigurator 0.12.0's
``silicon_sample.csv`` (issue 34, item 3: the noise of the tuner's landscape runs). A
diagnostic with no goal. Not a unit test.

    .venv/bin/python -m benchmarks.gpu_noise            # print the section
    .venv/bin/python -m benchmarks.gpu_noise --record   # re-read the CSV, store the extract
    .venv/bin/python -m benchmarks.gpu_noise --write    # replace the RESULTS.md section

Fixed in ``benchmarks/configs/gpu_noise_1.yaml`` (committed before this code and its run):
the rows, what a configuration and a measurement are, the figure (the pooled
within-configuration log-sd of output tok/s, the estimator of the CPU engine's 0.32). The
extract (every counted measurement, attributed) is stored in
``benchmarks/data/gpu_noise_1.json``; the section and the tuner runs that take its figure
(tune-landscape-78, -79) read that file, so neither needs the CSV.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from tests.support.aic import AIC_SOURCE, silicon_csv

from benchmarks.results_md import markers, record_or_write

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "gpu_noise_1.yaml"
DATA = ROOT / "benchmarks" / "data" / "gpu_noise_1.json"
SECTION = "gpu-noise-1"
# The columns of the setting (the configuration's key, with the concurrency and the image).
SETTING = ("backend_version", "model_path", "system", "gemm_quant_mode", "moe_quant_mode",
           "isl", "osl", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
           "moe_ep_size")
FIGURES = ("tps", "ttft", "tpot")
LABELS = {"tps": "output tok/s", "ttft": "TTFT", "tpot": "TPOT"}
# What the figures say, written after seeing them.
READING = (
    "The median configuration moves 0.6% in output tok/s from one day to another (TTFT "
    "3.4%): real vLLM on these GPUs repeats closely. The pooled log-sd, 0.119, is one "
    "configuration's: Kimi-K2.5 int4 on 8 H200s, 1,024/8,192 tokens, 16 clients, "
    "measured at 250 output tok/s on 2026-03-02 and 998 on 2026-03-27 (4.0x) with the "
    "same image; without it the other 70 give 0.027 (computed after the run; the config "
    "has no outlier rule, so the tuner runs take 0.12, the harder case). The figure is "
    "day to day and from B200, B300 and H200 only (no H100 configuration was measured on "
    "two dates with one image); TTFT "
    "moves more than TPOT (0.097 against 0.026 without that configuration), which the "
    "landscape's single speed factor does not model.")
_DATE = re.compile(r"measured=(\d{4}-\d{2}-\d{2})")
_IMAGE = re.compile(r"(vllm/vllm-openai:[^\s;]+)")
_CONC = re.compile(r"silicon_concurrency=(\d+)")


def measurement_of(row: Mapping[str, str]) -> dict[str, Any] | None:
    """A CSV row as a measurement (its configuration's key, date, image and figures), or
    None where the config leaves it out: another backend or mode, a latency missing, or
    no date or image in its source (a copy could not be told from a repeat)."""
    if row.get("backend") != "vllm" or row.get("mode") != "agg":
        return None
    src = row.get("silicon_data_source") or ""
    date, image = _DATE.search(src), _IMAGE.search(src)
    try:
        ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
    except (KeyError, ValueError):
        return None
    if date is None or image is None:
        return None
    conc = _CONC.search(src)
    c = int(conc.group(1)) if conc else int(row["batch_size"])
    osl = int(row["osl"])
    key = "|".join([*(row.get(k, "") for k in SETTING), f"c{c}", image.group(1)])
    return {"key": key, "date": date.group(1), "id": row["id"], "concurrency": c,
            "ttft": round(ttft, 3), "tpot": round(tpot, 4),
            "tps": round(c * osl / (ttft + (osl - 1) * tpot) * 1e3, 3)}


def extract(rows: Iterable[Mapping[str, str]], min_dates: int = 2) -> list[dict[str, Any]]:
    """The configurations measured on at least ``min_dates`` dates: one measurement per
    (configuration, date), the first in the rows' order."""
    by: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        m = measurement_of(row)
        if m is not None:
            by[m["key"]].setdefault(m["date"], m)
    return [{"key": k, "measurements": [{x: v for x, v in m.items() if x != "key"}
                                         for m in sorted(d.values(), key=lambda m: m["date"])]}
            for k, d in sorted(by.items()) if len(d) >= min_dates]


def pooled_log_sd(groups: Iterable[list[float]]) -> tuple[float | None, int]:
    """The pooled within-group log-sd of positive values, and its degrees of freedom."""
    ss, dof = 0.0, 0
    for vals in groups:
        logs = [math.log(v) for v in vals]
        mu = statistics.fmean(logs)
        ss += sum((x - mu) ** 2 for x in logs)
        dof += len(logs) - 1
    return (math.sqrt(ss / dof) if dof else None), dof


def summarise(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's pooled log-sd and median range (max / min - 1) over ``configs``."""
    out: dict[str, Any] = {"configurations": len(configs),
                           "measurements": sum(len(c["measurements"]) for c in configs)}
    for f in FIGURES:
        groups = [[m[f] for m in c["measurements"]] for c in configs]
        sd, dof = pooled_log_sd(groups)
        out[f] = {"logSd": None if sd is None else round(sd, 4), "dof": dof,
                  "medianRange": round(statistics.median(max(g) / min(g) - 1 for g in groups), 4)
                  if groups else None}
    return out


def _part(key: str, i: int) -> str:
    return key.split("|")[i]


def breakdown(configs: list[dict[str, Any]], index: int) -> dict[str, dict[str, Any]]:
    """:func:`summarise` by one field of the configuration's key (its index in it)."""
    parts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in configs:
        parts[_part(c["key"], index)].append(c)
    return {k: summarise(v) for k, v in sorted(parts.items())}


def figure(data: Mapping[str, Any]) -> float:
    """The figure the tuner runs take, from a stored extract: the pooled log-sd of output
    tok/s, rounded as its config says (``round``)."""
    cfg = yaml.safe_load((ROOT / data["config"]).read_text())
    sd = summarise(data["configurations"])["tps"]["logSd"]
    if sd is None:
        raise ValueError(f"{data['label']}: no configuration measured on two dates")
    return round(float(sd), int(cfg["round"]))


def noise_of(path: Path = DATA) -> float:
    """:func:`figure` of the extract stored at ``path``."""
    return figure(json.loads(path.read_text()))


def record(config_path: Path = CONFIG, path: Path = DATA) -> dict[str, Any]:
    """Read the CSV and store the extract."""
    csv_path = silicon_csv()
    if csv_path is None:
        raise SystemExit("silicon_sample.csv not found: install AIConfigurator in .venv-aic "
                         "(bash tools/setup.sh --aic) or set LLMOP_AIC_CSV")
    cfg = yaml.safe_load(config_path.read_text())
    with csv_path.open(newline="") as fh:
        configs = extract(csv.DictReader(fh), int(cfg["minDates"]))
    data = {"label": cfg["label"], "config": str(config_path.resolve().relative_to(ROOT)),
            "source": AIC_SOURCE, "file": cfg["source"]["file"],
            "measuredBy": cfg["source"]["measuredBy"],
            "keyFields": [*SETTING, "concurrency", "image"], "configurations": configs}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _fmt(s: Mapping[str, Any], f: str) -> str:
    x = s[f]
    if x["logSd"] is None:
        return "-"
    return f"{x['logSd']:.3f} ({x['medianRange']:.1%})"


def render(path: Path = DATA) -> str:
    """The RESULTS.md section, from the stored extract."""
    data = json.loads(path.read_text())
    configs = data["configurations"]
    s = summarise(configs)
    begin, end = markers(SECTION)
    lines = [
        begin,
        f"## The run-to-run spread of real vLLM on GPUs ({SECTION})",
        "",
        f"**Measured on GPUs by NVIDIA, not by this project**: {data['source']}, "
        f"`{data['file']}`: the vLLM configurations (aggregated serving; the same model, "
        "GPU, precision, lengths, parallelism, concurrency and vLLM image) that NVIDIA "
        "measured on two or more dates, one measurement per date. Day to day, not within "
        "one run: whatever changed between the days (the node, the driver, the harness's "
        "run) is in it, so it bounds from above the spread between the back-to-back runs "
        "of one tuning Job. Output tok/s is derived per row (c x OSL / (TTFT + (OSL - 1) "
        "x TPOT)). Pre-registered in `benchmarks/configs/gpu_noise_1.yaml`; the extract is "
        "stored in `benchmarks/data/gpu_noise_1.json`. Regenerate: `.venv/bin/python -m "
        "benchmarks.gpu_noise --record --write` (needs `.venv-aic`).",
        "",
        f"{s['configurations']} configurations, {s['measurements']} measurements. Pooled "
        "within-configuration log-sd (median range, max / min - 1), the estimator of the "
        "CPU engine's 0.32 (tune-noisy-1):",
        "",
        "| rows | configurations | measurements | output tok/s | TTFT | TPOT |",
        "|---|---|---|---|---|---|",
    ]
    for name, index in (("GPU", 2), ("model", 1)):
        for k, b in breakdown(configs, index).items():
            lines.append(f"| {name} {k} | {b['configurations']} | {b['measurements']} | "
                         f"{_fmt(b, 'tps')} | {_fmt(b, 'ttft')} | {_fmt(b, 'tpot')} |")
    lines.append(f"| **all** | {s['configurations']} | {s['measurements']} | "
                 f"{_fmt(s, 'tps')} | {_fmt(s, 'ttft')} | {_fmt(s, 'tpot')} |")
    lines += ["", f"The tuner's landscape runs tune-landscape-78 and -79 take "
              f"{figure(data):.2f} (output tok/s, rounded as the config says) as their "
              "noise's log-sd, against the CPU engine's 0.32.", "",
              f"Reading (written after the run): {READING}", "", end]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return record_or_write(__doc__ or "", SECTION, record, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""The tuning-trials plot of a stored paired tuning benchmark (``benchmarks/data/tune_*.json``
written by :mod:`benchmarks.tune_paired`), drawn by :func:`llm_operator.cli.plots.tuning_figure`.

The record's rotation measured every configuration of the space (vLLM's defaults, every
grid cell, the tuner's choice) the same number of times on one live-cap server: each point
is the median over its rounds (goodput, output throughput, TTFT p95, ITL p95), the star
the tuner's choice. Run (the image in docs/using.md)::

    .venv/bin/python -m benchmarks.tune_plot benchmarks/data/tune_wide_1.json \\
        docs/images/tuning-trials.png
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llm_operator.cli.plots import PlotInputError, TrialPoint, TuningTrials


def trials_from_paired(doc: Mapping[str, Any], source: str) -> TuningTrials:
    """The rotation's configurations as :class:`TuningTrials` (medians over rounds)."""
    cfg = doc.get("config") or {}
    engine = cfg.get("engine") or {}
    measurements = (doc.get("rotation") or {}).get("measurements") or []
    if not measurements:
        raise PlotInputError(source, "the record has no rotation measurements",
                             "pass a finished benchmarks/data/tune_*.json")
    default_mnbt = engine.get("defaultMaxNumBatchedTokens")
    groups: dict[tuple[int | None, int | None], list[Mapping[str, Any]]] = {}
    for m in measurements:
        c = m.get("config") or {}
        groups.setdefault((c.get("maxNumSeqs"), c.get("maxNumBatchedTokens")), []).append(m)

    def med(ms: list[Mapping[str, Any]], key: str) -> float | None:
        vals = [float(m[key]) for m in ms if isinstance(m.get(key), int | float)]
        return statistics.median(vals) if vals else None

    points = [TrialPoint(max_num_seqs=k[0], max_num_batched_tokens=k[1],
                         goodput=med(ms, "goodput_tps"), throughput=med(ms, "output_tps"),
                         ttft_p95_ms=med(ms, "ttft_p95_ms"), itl_p95_ms=med(ms, "itl_p95_ms"),
                         phase="rotation") for k, ms in groups.items()]
    tuner = doc.get("tuner") or {}
    choice = tuner.get("choice") or {}
    chosen = (choice.get("maxNumSeqs"), choice.get("maxNumBatchedTokens") or
              (default_mnbt if choice.get("maxNumSeqs") else None), None)
    slo = cfg.get("slo") or {}
    rounds = max((m.get("round", 0) for m in measurements), default=0) + 1
    return TuningTrials(
        source=f"{cfg.get('label', source)} ({doc.get('engine', 'vLLM')}, {doc.get('cpus')} "
               f"CPUs, {doc.get('started', '')})",
        points=points, slo_ttft_ms=slo.get("ttftMs"), slo_itl_ms=slo.get("itlMs"),
        chosen=chosen, default_max_num_seqs=engine.get("defaultMaxNumSeqs"),
        concurrency=(cfg.get("workload") or {}).get("concurrency"),
        note=f"each point: median of {rounds} rounds of the rotation ({source}); the tuner "
             f"measured {tuner.get('trials')} configurations in {tuner.get('wallSeconds')} s")


def main(argv: list[str] | None = None) -> int:
    from llm_operator.cli.plot import write_tuning_png

    p = argparse.ArgumentParser(prog="python -m benchmarks.tune_plot")
    p.add_argument("record", type=Path)
    p.add_argument("png", type=Path)
    args = p.parse_args(argv)
    trials = trials_from_paired(json.loads(args.record.read_text()), str(args.record))
    print(write_tuning_png(trials, args.png))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

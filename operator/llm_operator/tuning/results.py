"""A tuning result as ``status.tuning`` shows it (pure): the scores, the trial table,
the settings it applies and the sentence that says so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..inpod.tuner.result import TABLE_COLUMNS, Score, TuningResult, slo_ms
from ..inpod.tuner.space import TIME_BUDGET
from .status import JSON


def score_summary(score: Score | None) -> JSON | None:
    """One configuration's evidence for ``status.tuning`` (settings absent = vLLM's
    default)."""
    if score is None:
        return None
    out: JSON = {}
    if score.settings.max_num_seqs is not None:
        out["maxNumSeqs"] = score.settings.max_num_seqs
    if score.settings.max_num_batched_tokens is not None:
        out["maxNumBatchedTokens"] = score.settings.max_num_batched_tokens
    if score.settings.enable_chunked_prefill is not None:
        out["enableChunkedPrefill"] = score.settings.enable_chunked_prefill
    out.update(goodput=score.goodput, spread=score.spread, repeats=score.repeats,
               throughput=score.throughput, ttftP95Ms=score.ttft_p95_ms,
               itlP95Ms=score.itl_p95_ms, preemptions=score.preemptions)
    if score.met_runs is not None:
        out["metRuns"] = score.met_runs
    return out


def trial_table(rows: Sequence[Sequence[Any]]) -> list[JSON]:
    """The result's compact trial rows as readable records (a setting absent: vLLM's
    default; ``goodput`` absent: the trial failed, ``error`` says why)."""
    return [{col: value for col, value in zip(TABLE_COLUMNS, row, strict=False)
             if value is not None} for row in rows]


def applied_settings(result: TuningResult, tunable: Sequence[str]) -> JSON:
    """What the Deployment should run with: the best configuration's tunable settings,
    or nothing when the best is the baseline or does not beat it (then vLLM's defaults
    were as good as anything tried, and the service keeps its planned values). A result
    with a paired interval against the defaults (``versusDefaults``) already is the
    decision; an older one without it is judged by its medians."""
    best, base = result.best, result.baseline
    if best is None:
        return {}
    if base is not None and best.settings == base.settings:
        return {}
    if result.versus_defaults is None and base is not None and best.goodput <= base.goodput:
        return {}
    if best.settings.enable_chunked_prefill is False:
        # Measured with chunked prefill off, which the operator does not switch (vLLM
        # 0.32 does not officially support it for generate models): its other values
        # alone were not measured, so nothing is applied.
        return {}
    values = {"maxNumSeqs": best.settings.max_num_seqs,
              "maxNumBatchedTokens": best.settings.max_num_batched_tokens}
    return {k: v for k, v in values.items() if k in tunable and isinstance(v, int) and v > 0}


def accepted_message(result: TuningResult, applied: Mapping[str, int], source: str) -> str:
    """One line on what a result changed and why (condition message and Event)."""
    best, base = result.best, result.baseline
    where = "reused the cached result" if source == "cache" else (
        f"{result.trials} trial(s) in {result.wall_seconds:.0f} s")
    partial = "" if result.state == "Succeeded" else (
        f" (partial, {result.trials} trial(s): {result.reason or 'the budget ran out'})")
    evidence = ""
    if result.decision:
        evidence = result.decision
    elif best is not None:
        evidence = f"best goodput {best.goodput:g} tok/s"
        if base is not None:
            ratio = f"{result.improvement:g}x " if result.improvement is not None else ""
            evidence += f", {ratio}vLLM's defaults ({base.goodput:g} tok/s)"
    if applied:
        change = "running with " + ", ".join(f"{_flag(k)} {v}" for k, v in applied.items())
    elif result.trials <= 1 and result.reason.startswith(TIME_BUDGET):
        change = ("settings unchanged: the time budget held only vLLM's defaults' runs, and "
                  "nothing was compared with them: raise spec.tuning.maxDurationMinutes")
    elif base is not None and base.goodput <= 0 and (best is None or best.goodput <= 0):
        change = ("settings unchanged, but vLLM's defaults met the SLO"
                  f"{_slo_text(result.slo)} for no request {_where_unmet(base)} and no "
                  "configuration tried beat them: relax spec.workload.slo, or give the "
                  "service more or larger GPUs (spec.gpus)")
    elif base is not None and _misses(base, result.slo):
        change = ("settings unchanged, but vLLM's defaults missed the SLO"
                  f"{_slo_text(result.slo)} in the tuning runs (TTFT p95 "
                  f"{base.ttft_p95_ms:g} ms, ITL p95 {base.itl_p95_ms:g} ms, mean of "
                  f"{base.repeats}) and no configuration tried was shown to meet it: relax "
                  "spec.workload.slo, or give the service more or larger GPUs (spec.gpus)")
    else:
        change = "the defaults were best: settings unchanged"
    return f"Tuned{partial}: {change}; {evidence}; {where}"


def _where_unmet(score: Score) -> str:
    """Where a score without goodput (the median of its runs) met the SLO for no request:
    in every tuning run only where none had goodput (``metRuns`` 0); else in the typical
    run, with how many runs met it for some (a result without ``metRuns``: unknown)."""
    if score.met_runs == 0:
        return "in the tuning runs"
    if score.met_runs is None:
        return "in their typical tuning run"
    return (f"in their typical tuning run (some did in {score.met_runs} of "
            f"{score.repeats} runs)")


def _misses(score: Score, slo: Mapping[str, float]) -> bool:
    """Whether a score's mean p95 latencies (what ``status.tuning`` shows) miss the SLO."""
    ttft, itl = slo_ms(slo)
    return bool((ttft is not None and score.ttft_p95_ms > ttft)
                or (itl is not None and score.itl_p95_ms > itl))


def _slo_text(slo: Mapping[str, float]) -> str:
    """The result's SLO as the spec states it, e.g. `` (TTFT p95 <= 2000 ms, ...)``."""
    parts = [f"{name} <= {value:g} ms" for name, value in zip(
        ("TTFT p95", "ITL p95"), slo_ms(slo), strict=True) if value is not None]
    return f" ({', '.join(parts)})" if parts else ""


def _flag(key: str) -> str:
    return {"maxNumSeqs": "--max-num-seqs",
            "maxNumBatchedTokens": "--max-num-batched-tokens"}.get(key, key)

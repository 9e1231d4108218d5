"""The tuning result: a compact JSON for the Job's termination message (< 4 KiB, read by
the operator without extra permissions), and the full trial table for people.

Standard library and pydantic only (both the operator's image and the vLLM image have
them). ``parse_result`` is what the operator calls on a finished Job's
``state.terminated.message``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .records import Outcome, Trial

TERMINATION_LIMIT = 4096  # bytes the kubelet keeps of a termination message
RESULT_KIND = "llmops.dev/tuning-result"
RESULT_VERSION = 1


class _M(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class TrialSettings(_M):
    """Engine settings of one configuration; ``None`` = vLLM's default."""

    max_num_seqs: int | None = Field(None, alias="maxNumSeqs")
    max_num_batched_tokens: int | None = Field(None, alias="maxNumBatchedTokens")
    # None: vLLM's default (on); False only from a run that searched it (the tuner's
    # --search-chunked-prefill, which the operator's Job does not pass).
    enable_chunked_prefill: bool | None = Field(None, alias="enableChunkedPrefill")


class Score(_M):
    """A configuration and what it achieved at the workload concurrency."""

    settings: TrialSettings
    goodput: float  # output tokens/s of requests meeting the SLO (median of repeats)
    spread: float = 0.0  # (max - min) / median over the repeats
    repeats: int = 0
    throughput: float = 0.0  # all output tokens/s (mean of repeats)
    ttft_p95_ms: float = Field(0.0, alias="ttftP95Ms")
    itl_p95_ms: float = Field(0.0, alias="itlP95Ms")
    preemptions: float = 0.0  # per run, mean
    # Repeats in which some request met the SLO (goodput above 0); None in a result
    # written before the field was added. The goodput above is their median: 0 there
    # does not mean no run met it.
    met_runs: int | None = Field(None, alias="metRuns")


class Interval(_M):
    """A configuration's goodput against vLLM's defaults, measured in pairs: the typical
    ratio and its interval at ``confidence`` (:mod:`.compare`). ``None`` for a ratio or
    an end means more than 100x (the defaults had no goodput)."""

    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    confidence: float = 0.0  # what the interval achieves
    pairs: int = 0
    interleaved: bool = True  # both arms measured back to back on one server


class Prediction(_M):
    """The cap the one-server concurrency sweep predicts best, and its goodput."""

    max_num_seqs: int = Field(alias="maxNumSeqs")
    goodput: float


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite int or float (not a bool), else None: how
    a result's or a status summary's figures are read back."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def slo_ms(slo: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """(TTFT, ITL p95) in ms from a result's ``slo`` (the tuner writes ``ttftMs`` and
    ``itlP95Ms``; ``ttftP95Ms`` and ``itlMs`` are read too); None where absent or not a
    finite number."""
    return (finite_number(slo.get("ttftMs", slo.get("ttftP95Ms"))),
            finite_number(slo.get("itlP95Ms", slo.get("itlMs"))))


class TuningResult(_M):
    """What a tuning run found; the operator records it in ``status.tuning``."""

    kind: str = RESULT_KIND
    version: int = RESULT_VERSION
    state: Literal["Succeeded", "Partial", "Failed"]
    reason: str = ""
    fingerprint: str | None = None
    best: Score | None = None
    baseline: Score | None = None
    improvement: float | None = None  # best / baseline goodput (the interval's ratio)
    # The kept configuration against vLLM's defaults (absent when the defaults were kept).
    versus_defaults: Interval | None = Field(None, alias="versusDefaults")
    # One sentence: the figure with its interval and what was kept (status, the Event).
    decision: str = ""
    predicted: Prediction | None = None  # the sweep's best cap (--url mode: unverified)
    trials: int = 0  # measured configurations (server starts unless swept live)
    # The vLLM servers the run started (None: --url mode, none started) and how
    # max-num-seqs was measured: swept live on one server, or why one start per value.
    server_starts: int | None = Field(None, alias="serverStarts")
    sweep: str | None = None
    wall_seconds: float = Field(0.0, alias="wallSeconds")
    slo: dict[str, float] = Field(default_factory=dict)
    workload: dict[str, int] = Field(default_factory=dict)
    table: list[list[Any]] = Field(default_factory=list)  # compact rows, dropped if too big

    def to_message(self, limit: int = TERMINATION_LIMIT) -> str:
        """Compact JSON that fits in ``limit`` bytes (the trial table is shortened, then
        dropped, then the reason clipped, until it does)."""
        data = self.model_dump(by_alias=True, exclude_none=True)
        rows = list(data.get("table", []))
        while True:
            text = json.dumps(data, separators=(",", ":"))
            if len(text.encode()) <= limit:
                return text
            if rows:
                rows = rows[:-1]
                data["table"] = rows
            elif data.get("reason"):
                data["reason"] = data["reason"][: max(0, len(data["reason"]) // 2 - 1)]
            else:
                data.pop("table", None)
                return json.dumps(data, separators=(",", ":"))[:limit]


TABLE_COLUMNS = ("trial", "phase", "maxNumSeqs", "maxNumBatchedTokens", "goodput", "spread",
                 "ttftP95Ms", "itlP95Ms", "preemptions", "startupS", "error", "against",
                 "ratio", "low", "high", "pairs", "chunkedPrefill")


def _score(trial: Trial) -> Score:
    return Score(
        settings=TrialSettings(max_num_seqs=trial.config.max_num_seqs,
                               max_num_batched_tokens=trial.config.max_num_batched_tokens,
                               enable_chunked_prefill=trial.config.chunked_prefill),
        goodput=round(trial.score, 1),
        spread=round(trial.spread, 3),
        repeats=len(trial.runs),
        throughput=round(trial.mean_of("output_tps"), 1),
        ttft_p95_ms=round(trial.mean_of("ttft_p95_ms"), 1),
        itl_p95_ms=round(trial.mean_of("itl_p95_ms"), 2),
        preemptions=round(trial.mean_of("preemptions"), 1),
        met_runs=sum(1 for m in trial.runs if m.goodput_tps > 0),
    )


def table_rows(outcome: Outcome) -> list[list[Any]]:
    """One compact row per trial, columns :data:`TABLE_COLUMNS`; the last one,
    ``chunkedPrefill``, only on a row that sets it (a run that searched it)."""
    rows: list[list[Any]] = []
    for t in outcome.trials:
        rows.append([
            t.index, t.phase, t.config.max_num_seqs, t.config.max_num_batched_tokens,
            round(t.score, 1) if t.ok else None, round(t.spread, 3),
            round(t.mean_of("ttft_p95_ms"), 1), round(t.mean_of("itl_p95_ms"), 2),
            round(t.mean_of("preemptions"), 1), round(t.startup_s, 1),
            (t.error or "")[:80] or None, *_comparison_cells(t),
            *([t.config.chunked_prefill] if t.config.chunked_prefill is not None else []),
        ])
    return rows


def _comparison_cells(t: Trial) -> list[Any]:
    """``against, ratio, low, high, pairs`` of a trial compared with another (Nones for
    the baseline)."""
    cmp = t.comparison
    if cmp is None or not cmp.pairs:
        return [t.against, None, None, None, None]
    d = cmp.to_dict()
    return [t.against, d["ratio"], d["low"], d["high"], d["pairs"]]


def interval_of(outcome: Outcome) -> Interval | None:
    """The kept configuration against vLLM's defaults, as the result carries it."""
    cmp = outcome.versus_defaults
    if cmp is None:
        return None
    d = cmp.to_dict()
    return Interval(ratio=d["ratio"], low=d["low"], high=d["high"],
                    confidence=float(d["confidence"] or 0.0), pairs=int(d["pairs"] or 0),
                    interleaved=bool(d["interleaved"]))


def result_from_outcome(outcome: Outcome, slo: dict[str, float], workload: dict[str, int],
                        fingerprint: str | None = None, server_starts: int | None = None,
                        sweep: str | None = None) -> TuningResult:
    """The :class:`TuningResult` of a search outcome (``server_starts`` and ``sweep``: what
    the evaluator says of the vLLM servers it started)."""
    if outcome.best is None or outcome.baseline is None or not outcome.baseline.ok:
        state: Literal["Succeeded", "Partial", "Failed"] = "Failed"
    elif outcome.complete:
        state = "Succeeded"
    else:
        state = "Partial"
    imp = outcome.improvement
    pb = outcome.predicted_best
    return TuningResult(
        state=state,
        reason=outcome.stop_reason,
        fingerprint=fingerprint,
        best=_score(outcome.best) if outcome.best is not None else None,
        baseline=_score(outcome.baseline) if outcome.baseline and outcome.baseline.ok else None,
        improvement=round(imp, 3) if imp is not None and imp != float("inf") else None,
        versus_defaults=interval_of(outcome),
        decision=outcome.decision() if outcome.baseline is not None else "",
        predicted=Prediction(max_num_seqs=pb[0], goodput=round(pb[1], 1)) if pb else None,
        trials=len(outcome.trials),
        server_starts=server_starts,
        sweep=sweep,
        wall_seconds=round(outcome.wall_s, 1),
        slo=slo,
        workload=workload,
        table=table_rows(outcome),
    )


def failed_result(reason: str, fingerprint: str | None = None) -> TuningResult:
    """A result for a run that could not even start (bad arguments, no vLLM)."""
    return TuningResult(state="Failed", reason=reason, fingerprint=fingerprint)


class ResultParseError(ValueError):
    """A termination message that is not a tuning result."""


def parse_result(termination_message: str) -> TuningResult:
    """Parse a tuning Job's termination message into a :class:`TuningResult`.

    With ``terminationMessagePolicy: FallbackToLogsOnError`` a crashed tuner leaves the
    tail of its log instead: that raises :class:`ResultParseError` carrying the text's
    last line, which the operator shows in its condition.
    """
    text = (termination_message or "").strip()
    last = text.splitlines()[-1][:300] if text else "empty termination message"
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # The JSON may be the last line of a log fallback.
        try:
            data = json.loads(text.splitlines()[-1]) if text else None
        except json.JSONDecodeError:
            data = None
    if not isinstance(data, dict) or data.get("kind") != RESULT_KIND:
        raise ResultParseError(f"not a tuning result: {last}")
    try:
        return TuningResult.model_validate(data)
    except ValidationError as exc:
        raise ResultParseError(f"malformed tuning result: {exc.errors()[0]['msg']}") from None

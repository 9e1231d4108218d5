"""Plots of a tuning run and of a service's adaptation timeline (pure: data in, Figure out).

Two kinds of input, each a plain pydantic model the command line fills from its sources
(:mod:`llm_operator.cli.plot` does the I/O):

- :class:`TuningTrials`: the trials of one tuning run, read from the tuner's result in any
  of the forms it is kept (:func:`trials_from_document`): the compact result (the Job's
  termination message, the last line ``llm-operator tune`` prints, the result cache), the
  full result ``llm-operator tune --output`` writes, or ``status.tuning`` of an
  LLMService. :func:`tuning_figure` draws goodput and throughput, TTFT p95 and ITL p95
  against max-num-seqs (one line per max-num-batched-tokens level searched), the SLO
  lines, the choice and vLLM's defaults.
- :class:`Timeline`: one service over time, read back from Prometheus with the adaptation
  loop's own queries (:func:`llm_operator.adaptation.prometheus.fetch_timeline`) and
  turned into series by :func:`timeline_from_matrices`. :func:`timeline_figure` draws the
  cap in force, requests running and waiting, the decisions (raise, lower, hold), KV-cache
  usage and preemptions.

matplotlib is an optional extra (``pip install 'llm-operator[plots]'``): this module
imports it only inside the drawing functions, and :func:`require_matplotlib` says how to
get it. Figures are built with ``matplotlib.figure.Figure`` (no pyplot, no GUI backend),
so they render with Agg.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from ..inpod.tuner.result import (
    RESULT_KIND,
    TABLE_COLUMNS,
    TuningResult,
    finite_number,
    slo_ms,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

INSTALL_HINT = "pip install 'llm-operator[plots]'"


class PlotInputError(ValueError):
    """The data cannot be drawn: ``what`` names what is missing, ``fix`` what to do."""

    def __init__(self, source: str, problem: str, fix: str) -> None:
        self.source = source
        self.problem = problem
        self.fix = fix
        super().__init__(f"{source}: {problem}. Fix: {fix}")


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed (the message says how to install it)."""


def require_matplotlib() -> None:
    """Raise :class:`PlotsUnavailable` naming the extra when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotsUnavailable(
            f"plots need matplotlib, an optional extra of llm-operator: {INSTALL_HINT}"
        ) from None


class _M(BaseModel):
    model_config = ConfigDict(frozen=True)


# ------------------------------------------------------------------------ tuning trials
class TrialPoint(_M):
    """One measured configuration. ``None`` settings are vLLM's defaults; ``goodput`` None:
    the trial failed (``error``)."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    chunked_prefill: bool | None = None  # None: vLLM's default (on); set where searched
    goodput: float | None = None  # output tokens/s of requests within the SLO
    throughput: float | None = None  # all output tokens/s
    ttft_p95_ms: float | None = None
    itl_p95_ms: float | None = None
    phase: str = ""
    error: str | None = None


class TuningTrials(_M):
    """A tuning run, as :func:`tuning_figure` draws it."""

    source: str
    points: list[TrialPoint]
    slo_ttft_ms: float | None = None
    slo_itl_ms: float | None = None
    # (maxNumSeqs, maxNumBatchedTokens, chunked prefill)
    chosen: tuple[int | None, int | None, bool | None] | None = None
    default_max_num_seqs: int | None = None  # where vLLM's default sits on the x axis
    concurrency: int | None = None
    note: str = ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _settings_of(record: Mapping[str, Any] | None) -> tuple[int | None, int | None] | None:
    """(maxNumSeqs, maxNumBatchedTokens) of a Score dump or a status summary."""
    if not record:
        return None
    s = record.get("settings", record)
    return (_int(s.get("maxNumSeqs", s.get("max_num_seqs"))),
            _int(s.get("maxNumBatchedTokens", s.get("max_num_batched_tokens"))))


def _chunked_of(record: Mapping[str, Any] | None) -> bool | None:
    """Chunked prefill of a trial record, Score dump or status summary (None: default)."""
    s = (record or {}).get("settings", record or {})
    value = s.get("chunkedPrefill", s.get("enableChunkedPrefill", s.get("chunked_prefill")))
    return value if isinstance(value, bool) else None


def _throughputs(*scores: Mapping[str, Any] | None) -> dict[tuple[int | None, int | None], float]:
    out: dict[tuple[int | None, int | None], float] = {}
    for score in scores:
        key = _settings_of(score)
        value = finite_number((score or {}).get("throughput"))
        if key is not None and value:
            out[key] = value
    return out


def _points_from_records(records: Sequence[Mapping[str, Any]],
                         throughput: Mapping[tuple[int | None, int | None], float]
                         ) -> list[TrialPoint]:
    points = []
    for r in records:
        key = (_int(r.get("maxNumSeqs")), _int(r.get("maxNumBatchedTokens")))
        points.append(TrialPoint(
            max_num_seqs=key[0], max_num_batched_tokens=key[1],
            chunked_prefill=_chunked_of(r), goodput=finite_number(r.get("goodput")),
            throughput=throughput.get(key), ttft_p95_ms=finite_number(r.get("ttftP95Ms")),
            itl_p95_ms=finite_number(r.get("itlP95Ms")), phase=str(r.get("phase") or ""),
            error=r.get("error") or None))
    return points


def trials_from_result(result: TuningResult, source: str) -> TuningTrials:
    """The trials of a compact result (its ``table`` rows, columns ``TABLE_COLUMNS``)."""
    data = result.model_dump(by_alias=True, mode="json")
    records = [dict(zip(TABLE_COLUMNS, row, strict=False)) for row in result.table]
    return _trials(source, records, data.get("best"), data.get("baseline"), data)


def _trials(source: str, records: Sequence[Mapping[str, Any]], best: Any, baseline: Any,
            doc: Mapping[str, Any], throughput: Mapping[Any, float] | None = None,
            default_mns: int | None = None, note: str = "") -> TuningTrials:
    if not records:
        state = doc.get("state", "?")
        raise PlotInputError(
            source, f"the tuning result has no trials (state {state}"
            + (f": {doc['reason']}" if doc.get("reason") else "") + ")",
            "plot a run that measured at least one configuration (the trial table is "
            "`table` in the result or status.tuning)")
    ttft, itl = slo_ms(doc.get("slo") or {})
    settings = _settings_of(best) if isinstance(best, Mapping) else None
    chosen = (*settings, _chunked_of(best)) if settings is not None else None
    return TuningTrials(
        source=source,
        points=_points_from_records(records, {**_throughputs(best, baseline),
                                              **(throughput or {})}),
        slo_ttft_ms=ttft, slo_itl_ms=itl, chosen=chosen, default_max_num_seqs=default_mns,
        concurrency=_int((doc.get("workload") or {}).get("concurrency")),
        # The decision with its paired interval (results since issue 32) is what a reader
        # needs beside the medians the points show.
        note="; ".join(x for x in (str(doc.get("decision") or ""), note) if x))


def trials_from_status(tuning: Mapping[str, Any], source: str) -> TuningTrials:
    """The trials of an LLMService's ``status.tuning`` (records keyed by ``TABLE_COLUMNS``,
    ``best``/``baseline`` summaries)."""
    return _trials(source, list(tuning.get("table") or []), tuning.get("best"),
                   tuning.get("baseline"), tuning)


def trials_from_tuner_output(full: Mapping[str, Any], source: str) -> TuningTrials:
    """The trials of ``llm-operator tune --output FILE`` (``result`` plus every trial's
    runs, from which each configuration's throughput is taken)."""
    result = full.get("result") or {}
    space = full.get("space") or {}
    records, throughput = [], {}
    for t in full.get("trials") or []:
        cfg = t.get("config") or {}
        runs = [r for r in t.get("runs") or [] if isinstance(r, Mapping)]

        def mean(key: str, runs: list[Mapping[str, Any]] = runs) -> float | None:
            vals = [v for r in runs if (v := finite_number(r.get(key))) is not None]
            return sum(vals) / len(vals) if vals else None

        key = (_int(cfg.get("max_num_seqs")), _int(cfg.get("max_num_batched_tokens")))
        ok = not t.get("error") and runs
        records.append({"maxNumSeqs": key[0], "maxNumBatchedTokens": key[1],
                        "chunkedPrefill": cfg.get("chunked_prefill"),
                        "goodput": t.get("score") if ok else None, "phase": t.get("phase"),
                        "ttftP95Ms": mean("ttft_p95_ms"), "itlP95Ms": mean("itl_p95_ms"),
                        "error": t.get("error")})
        if (tps := mean("output_tps")) is not None:
            throughput[key] = tps
    return _trials(source, records, result.get("best"), result.get("baseline"), result,
                   throughput=throughput, default_mns=_int(space.get("default_max_num_seqs")))


def trials_from_document(doc: Any, source: str) -> TuningTrials:
    """Whichever form of a tuning result ``doc`` is (see the module docstring)."""
    if not isinstance(doc, Mapping):
        raise PlotInputError(source, f"not a tuning result (a {type(doc).__name__})",
                             "pass the JSON the tuner wrote, or an LLMService with "
                             "status.tuning")
    if doc.get("kind") == RESULT_KIND:
        return trials_from_result(TuningResult.model_validate(doc), source)
    if isinstance(doc.get("result"), Mapping) and "trials" in doc:
        return trials_from_tuner_output(doc, source)
    if doc.get("kind") == "LLMService":
        tuning = (doc.get("status") or {}).get("tuning")
        name = (doc.get("metadata") or {}).get("name", "?")
        if not tuning:
            raise PlotInputError(source, f"LLMService {name} has no status.tuning",
                                 "wait for its tuning run (kubectl get llms shows Tuned), "
                                 "or check spec.tuning.mode")
        return trials_from_status(tuning, source)
    if "table" in doc and "state" in doc:  # status.tuning itself
        return trials_from_status(doc, source)
    raise PlotInputError(
        source, "not a tuning result: no `kind: llmops.dev/tuning-result`, no tuner "
        "`result`/`trials`, no LLMService status.tuning",
        "pass the compact result (the tuning Job's last log line), the file of "
        "`llm-operator tune --output`, or `kubectl get llms NAME -o json`")


_MARKERS = "osD^vP*X"


def tuning_figure(data: TuningTrials) -> Figure:
    """Goodput and throughput, TTFT p95 and ITL p95 against max-num-seqs."""
    require_matplotlib()
    from matplotlib.figure import Figure

    ok = [p for p in data.points if p.goodput is not None]
    if not ok:
        raise PlotInputError(data.source, "no trial of the run was measured (every one "
                             "failed: " + "; ".join(sorted({p.error or "?" for p in
                                                              data.points}))[:200] + ")",
                             "plot a run with at least one measured configuration")
    known = [p.max_num_seqs for p in ok if p.max_num_seqs]
    default_x = data.default_max_num_seqs or (max(known) * 2 if known else 1)

    def x_of(p: TrialPoint) -> int:
        return p.max_num_seqs or default_x

    fig = Figure(figsize=(11, 9), layout="constrained")
    ax_tps, ax_ttft, ax_itl = fig.subplots(3, 1, sharex=True)
    defaults = [p for p in ok if p.max_num_seqs is None and p.max_num_batched_tokens is None
                and p.chunked_prefill is None]
    searched = [p for p in ok if p not in defaults]
    # One series per server setting: batched tokens, and chunked prefill where searched.
    levels = sorted({(p.max_num_batched_tokens, p.chunked_prefill is False) for p in searched},
                    key=lambda v: (v[0] is None, v[0] or 0, v[1]))
    for i, (level, off) in enumerate(levels):
        pts = sorted((p for p in searched if (p.max_num_batched_tokens, p.chunked_prefill
                                              is False) == (level, off)), key=x_of)
        label = ("max-num-batched-tokens " + (str(level) if level else "default")
                 if len(levels) > 1 or level else "trials")
        label += ", chunked prefill off" if off else ""
        colour, marker = f"C{i % 10}", _MARKERS[i % len(_MARKERS)]
        xs = [x_of(p) for p in pts]
        ax_tps.plot(xs, [p.goodput for p in pts], marker=marker, color=colour, label=label)
        thr = [(x_of(p), p.throughput) for p in pts if p.throughput is not None]
        if thr:
            ax_tps.plot(*zip(*thr, strict=True), marker=marker, color=colour, linestyle=":",
                        alpha=0.6, markersize=4)
        for ax, key in ((ax_ttft, "ttft_p95_ms"), (ax_itl, "itl_p95_ms")):
            ys = [(x_of(p), getattr(p, key)) for p in pts if getattr(p, key) is not None]
            if ys:
                ax.plot(*zip(*ys, strict=True), marker=marker, color=colour)
    if any(p.throughput is not None for p in searched):
        ax_tps.plot([], [], color="grey", label="solid: goodput (within the SLO)")
        ax_tps.plot([], [], color="grey", linestyle=":", label="dotted: throughput (all)")
    for ax, slo, what in ((ax_ttft, data.slo_ttft_ms, "TTFT"),
                          (ax_itl, data.slo_itl_ms, "ITL p95")):
        if slo:
            ax.axhline(slo, color="crimson", linestyle="--", linewidth=1.2,
                       label=f"SLO: {what} ≤ {slo:g} ms")
    chosen = [p for p in ok if data.chosen is not None
              and (p.max_num_seqs, p.max_num_batched_tokens, p.chunked_prefill) == data.chosen]
    for ax, key in ((ax_tps, "goodput"), (ax_ttft, "ttft_p95_ms"), (ax_itl, "itl_p95_ms")):
        _ring(ax, [(x_of(p), getattr(p, key)) for p in defaults], "dimgrey", "s",
              "vLLM's defaults" if ax is ax_tps else None)
        _ring(ax, [(x_of(p), getattr(p, key)) for p in chosen[:1]], "black", "*",
              "the choice" if ax is ax_tps else None)
    failed = [p for p in data.points if p.goodput is None]
    ax_tps.set_ylabel("output tokens/s")
    ax_ttft.set_ylabel("TTFT p95 (ms)")
    ax_itl.set_ylabel("inter-token latency p95 (ms)")
    ax_itl.set_xlabel("max-num-seqs" + ("" if data.default_max_num_seqs or not defaults
                                        else "  (vLLM's default drawn at the right)"))
    ax_itl.set_xscale("log", base=2)
    ticks = sorted({x_of(p) for p in ok})
    ax_itl.set_xticks(ticks, [("default" if t == default_x and not data.default_max_num_seqs
                               else str(t)) for t in ticks])
    ax_itl.minorticks_off()
    for ax in (ax_tps, ax_ttft, ax_itl):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    choice = ("vLLM's defaults" if data.chosen in (None, (None, None, None)) else
              ", ".join(f"{k} {v}" for k, v in zip(("max-num-seqs", "max-num-batched-tokens"),
                                                   data.chosen[:2], strict=True) if v)
              + (", chunked prefill off" if data.chosen[2] is False else ""))
    sub = [f"{len(data.points)} trials", f"choice: {choice}"]
    if data.concurrency:
        sub.append(f"{data.concurrency} clients")
    if failed:
        sub.append(f"{len(failed)} failed")
    fig.suptitle(f"Tuning trials: {data.source}\n{'; '.join(sub)}", fontsize=11)
    if data.note:
        fig.supxlabel(data.note, fontsize=8, color="dimgrey")
    return fig


def _ring(ax: Axes, points: Sequence[tuple[float, float | None]], colour: str, marker: str,
          label: str | None) -> None:
    pts = [(x, y) for x, y in points if y is not None]
    if pts:
        xs, ys = zip(*pts, strict=True)
        ax.scatter(xs, ys, s=260 if marker == "*" else 90, marker=marker,
                   facecolors="gold" if marker == "*" else "lightgrey", edgecolors=colour,
                   linewidths=1.5, zorder=5, label=label)


# ----------------------------------------------------------------------------- timeline
class Series(_M):
    """A signal over time: unix seconds and values."""

    times: list[float]
    values: list[float]


class Decision(_M):
    """``count`` decisions of ``direction`` (raise, lower, hold) in the step ending at
    ``time``."""

    time: float
    direction: str
    count: int = 1


class Timeline(_M):
    """One service over a time range, as :func:`timeline_figure` draws it."""

    namespace: str
    name: str
    start: float
    end: float
    source: str = ""
    cap_in_force: Series | None = None  # the engines' llmop_admission_cap (max)
    cap_decided: Series | None = None  # the operator's llmop_adaptation_max_num_seqs
    running: Series | None = None
    waiting: Series | None = None
    kv_usage: Series | None = None  # fraction 0..1
    preemptions: Series | None = None  # per second
    decisions: list[Decision] = []


def _series(matrix: Sequence[Mapping[str, Any]]) -> Series | None:
    """The first series of a range result (already one per service), NaN dropped."""
    points = []
    for s in matrix[:1]:
        for pair in s.get("values") or []:
            try:
                t, v = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError):
                continue
            if math.isfinite(v):
                points.append((t, v))
    if not points:
        return None
    return Series(times=[t for t, _ in points], values=[v for _, v in points])


def decisions_from_counters(matrix: Sequence[Mapping[str, Any]], start: float,
                            step: float) -> list[Decision]:
    """Decisions from the raw counters by direction: each rise between samples is that
    many decisions; a series that appears after the range's first step counts its first
    value (a counter is created by its first decision); a drop is a restart (the new
    value counts)."""
    out: list[Decision] = []
    for s in matrix:
        direction = (s.get("metric") or {}).get("direction", "?")
        prev: float | None = None
        for pair in s.get("values") or []:
            try:
                t, v = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError):
                continue
            if prev is None:
                n = v if t > start + step * 1.5 else 0.0
            else:
                n = v - prev if v >= prev else v
            prev = v
            if n >= 0.5:
                out.append(Decision(time=t, direction=direction, count=round(n)))
    return sorted(out, key=lambda d: d.time)


def timeline_from_matrices(namespace: str, name: str, start: float, end: float, step: float,
                           matrices: Mapping[str, Sequence[Mapping[str, Any]]],
                           source: str = "") -> Timeline:
    """A :class:`Timeline` from :func:`llm_operator.adaptation.prometheus.fetch_timeline`'s
    result. Raises :class:`PlotInputError` when Prometheus had no vLLM series of the
    service in the range."""
    def get(key: str) -> Series | None:
        return _series(matrices.get(key) or [])

    tl = Timeline(namespace=namespace, name=name, start=start, end=end, source=source,
                  cap_in_force=get("cap_in_force_max"), cap_decided=get("cap_decided"),
                  running=get("running_mean"), waiting=get("waiting_mean"),
                  kv_usage=get("kv_usage_mean"), preemptions=get("preemption_rate"),
                  decisions=decisions_from_counters(matrices.get("decisions") or [], start,
                                                    step))
    if tl.running is None and tl.waiting is None and tl.kv_usage is None:
        raise PlotInputError(
            f"{namespace}/{name}",
            "Prometheus" + (f" at {source}" if source else "") + " has no vLLM series "
            "(vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc) "
            "for this service in the range asked",
            "check the service's namespace/name, widen --since (or --start/--end), and that "
            "Prometheus scrapes its pods (the rendered PodMonitor; labels "
            "LLMOP_PROMETHEUS_SERVICE_LABEL / LLMOP_PROMETHEUS_NAMESPACE_LABEL)")
    return tl


_DIRECTION_STYLE = {"raise": ("^", "green"), "lower": ("v", "darkorange"),
                    "hold": ("|", "grey")}


def timeline_figure(tl: Timeline) -> Figure:
    """Cap, running, waiting and decisions; KV-cache usage; preemptions, over time."""
    require_matplotlib()
    from matplotlib.figure import Figure

    def minutes(s: Series) -> list[float]:
        return [(t - tl.start) / 60 for t in s.times]

    fig = Figure(figsize=(12, 8), layout="constrained")
    ax_req, ax_kv, ax_pre = fig.subplots(3, 1, sharex=True,
                                         gridspec_kw={"height_ratios": [3, 1.4, 1.2]})
    if tl.running:
        ax_req.plot(minutes(tl.running), tl.running.values, color="C0",
                    label="requests running")
    if tl.waiting:
        ax_req.plot(minutes(tl.waiting), tl.waiting.values, color="C1",
                    label="requests waiting")
    if tl.cap_in_force:
        ax_req.step(minutes(tl.cap_in_force), tl.cap_in_force.values, where="post",
                    color="black", linewidth=2, label="cap in force (engines report)")
    if tl.cap_decided:
        ax_req.step(minutes(tl.cap_decided), tl.cap_decided.values, where="post",
                    color="purple", linestyle="--", linewidth=1.5,
                    label="max-num-seqs the operator set")
    ymax = max([1.0, *(max(s.values) for s in (tl.running, tl.waiting, tl.cap_in_force)
                       if s)])
    if tl.cap_decided:
        top = max(tl.cap_decided.values)
        if top <= 2 * ymax:  # else (e.g. the planned cap before tuning) it runs off the top
            ymax = max(ymax, top)
        else:
            ax_req.text(0.01, 0.9, f"the operator's max-num-seqs reaches {top:g}, above the "
                        "axis", transform=ax_req.transAxes, fontsize=8, color="purple")
    seen: set[str] = set()
    for d in tl.decisions:
        marker, colour = _DIRECTION_STYLE.get(d.direction, ("o", "red"))
        ax_req.scatter([(d.time - tl.start) / 60], [ymax * 1.1], marker=marker, color=colour,
                       s=90 if d.direction != "hold" else 50, zorder=5,
                       label=None if d.direction in seen else f"decision: {d.direction}")
        if d.direction != "hold":
            ax_req.axvline((d.time - tl.start) / 60, color=colour, alpha=0.25, linewidth=1)
        seen.add(d.direction)
    ax_req.set_ylim(0, ymax * 1.18)
    ax_req.set_ylabel("requests (per replica) / max-num-seqs")
    if not tl.decisions:
        ax_req.text(0.01, 0.97, "no decisions in Prometheus (the operator's "
                    "llmop_adaptation_decisions_total is not scraped, or none was taken)",
                    transform=ax_req.transAxes, fontsize=8, va="top", color="grey")
    if tl.kv_usage:
        ax_kv.plot(minutes(tl.kv_usage), [v * 100 for v in tl.kv_usage.values], color="C2",
                   label="KV-cache usage")
    ax_kv.set_ylim(0, 105)
    ax_kv.set_ylabel("KV cache (%)")
    if tl.preemptions:
        ax_pre.plot(minutes(tl.preemptions), tl.preemptions.values, color="C3",
                    label="preemptions")
    ax_pre.set_ylim(bottom=0)
    ax_pre.set_ylabel("preemptions / s")
    from datetime import UTC, datetime

    began = datetime.fromtimestamp(tl.start, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    ax_pre.set_xlabel(f"minutes since {began}")
    ax_pre.set_xlim(0, (tl.end - tl.start) / 60)
    for ax in (ax_req, ax_kv, ax_pre):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    counts = {k: sum(d.count for d in tl.decisions if d.direction == k)
              for k in ("raise", "lower", "hold")}
    fig.suptitle(f"Adaptation timeline: {tl.namespace}/{tl.name}"
                 + (f" (Prometheus {tl.source})" if tl.source else "")
                 + f"\ndecisions: {counts['raise']} raise, {counts['lower']} lower, "
                 f"{counts['hold']} hold", fontsize=11)
    return fig

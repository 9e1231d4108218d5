"""What a person sees: progress while the tuner runs, and the result as a table.

Log lines always (a pod's log); on a terminal, and only when ``rich`` is importable
(vLLM installs have it), a live progress bar as well. Standard library otherwise.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from .records import Outcome, Trial

log = logging.getLogger("llm_operator.inpod.tuner")


def _trial_line(t: Trial) -> str:
    if t.error:
        return f"Trial {t.index} ({t.phase}) {t.config.label()} failed: {t.error}"
    runs = ", ".join(f"{m.goodput_tps:.0f}" for m in t.runs)
    last = t.runs[-1] if t.runs else None
    extra = ""
    if last is not None:
        extra = (f"; ttft p95 {t.mean_of('ttft_p95_ms'):.0f} ms, itl p95 "
                 f"{t.mean_of('itl_p95_ms'):.1f} ms, preemptions/run "
                 f"{t.mean_of('preemptions'):.0f}, running max {last.running_max:.0f}")
    noisy = " NOISY" if t.noisy else ""
    cmp = t.comparison
    versus = (f"; against trial {t.against}: {cmp.text()}" if cmp is not None and cmp.pairs
              else "")
    return (f"Trial {t.index} ({t.phase}) {t.config.label()}: goodput {t.score:.0f} tok/s "
            f"(median) [runs {runs}; spread {t.spread:.0%}]{noisy}{versus}{extra}; startup "
            f"{t.startup_s:.0f} s, trial {t.wall_s:.0f} s")


class LogProgress:
    """Progress as log lines (and a rich progress bar on a terminal when available)."""

    def __init__(self, max_trials: int, use_rich: bool | None = None) -> None:
        self.max_trials = max_trials
        self._progress: Any = None
        self._task: Any = None
        if use_rich is None:
            use_rich = sys.stderr.isatty()
        if use_rich:
            try:
                from rich.progress import (
                    BarColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                )

                self._progress = Progress(
                    TextColumn("[bold]tuning[/]"), BarColumn(), TextColumn("{task.completed}/"
                    "{task.total} trials"), TimeElapsedColumn(),
                    TextColumn("{task.description}"), transient=True,
                )
                self._progress.start()
                self._task = self._progress.add_task("starting", total=max_trials)
            except ImportError:
                self._progress = None

    def _status(self, text: str, advance: int = 0) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=text, advance=advance)

    def __call__(self, event: str, **info: Any) -> None:
        """Report one search event."""
        trial: Trial | None = info.get("trial")
        if event == "trial-start" and trial is not None:
            log.info("Trial %d/%d (%s): starting vLLM with %s", trial.index, self.max_trials,
                     trial.phase, trial.config.label())
            self._status(f"trial {trial.index}: starting vLLM ({trial.config.label()})")
        elif event == "run" and trial is not None:
            m = trial.runs[-1]
            log.info("Trial %d run %d at concurrency %d: goodput %.0f tok/s, throughput %.0f "
                     "tok/s, ttft p95 %.0f ms, itl p95 %.1f ms, preemptions %.0f%s",
                     trial.index, len(trial.runs), m.concurrency, m.goodput_tps, m.output_tps,
                     m.ttft_p95_ms, m.itl_p95_ms, m.preemptions,
                     f" ({info['note']})" if info.get("note") else "")
            self._status(f"trial {trial.index}: measured {m.goodput_tps:.0f} tok/s")
        elif event == "probe" and trial is not None:
            m = trial.probes[-1]
            log.info("Trial %d probe at concurrency %d: goodput %.0f tok/s, %.2f req/s, "
                     "running max %.0f, preemptions %.0f", trial.index, m.concurrency,
                     m.goodput_tps, m.request_rate, m.running_max, m.preemptions)
            self._status(f"trial {trial.index}: sweep at concurrency {m.concurrency}")
        elif event == "trial-done" and trial is not None:
            log.info("%s", _trial_line(trial))
            self._status(f"trial {trial.index} done", advance=1)
        elif event == "done":
            self.close()

    def close(self) -> None:
        """Stop the progress bar (log lines stay)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


HEADERS = ("#", "phase", "max-num-seqs", "max-num-batched-tokens", "goodput tok/s", "spread",
           "vs (interval)", "throughput tok/s", "TTFT p95 ms", "ITL p95 ms", "preempt/run",
           "startup s", "note")


def table_headers(outcome: Outcome) -> tuple[str, ...]:
    """:data:`HEADERS`, with "chunked prefill" after the batched tokens where a trial set
    it (a run that searched it)."""
    if any(t.config.chunked_prefill is not None for t in outcome.trials):
        return (*HEADERS[:4], "chunked prefill", *HEADERS[4:])
    return HEADERS


def table_data(outcome: Outcome) -> list[list[str]]:
    """Rows of the trial table as strings (best and baseline marked)."""
    rows = []
    for t in outcome.trials:
        mark = []
        if outcome.best is t:
            mark.append("BEST")
        if outcome.baseline is t:
            mark.append("baseline")
        if t.noisy:
            mark.append("noisy")
        if t.error:
            mark.append(t.error[:60])
        rows.append([
            str(t.index), t.phase,
            "default" if t.config.max_num_seqs is None else str(t.config.max_num_seqs),
            "default" if t.config.max_num_batched_tokens is None
            else str(t.config.max_num_batched_tokens),
            f"{t.score:.0f}" if t.ok else "-", f"{t.spread:.0%}" if t.ok else "-",
            _versus(t),
            f"{t.mean_of('output_tps'):.0f}" if t.ok else "-",
            f"{t.mean_of('ttft_p95_ms'):.0f}" if t.ok else "-",
            f"{t.mean_of('itl_p95_ms'):.1f}" if t.ok else "-",
            f"{t.mean_of('preemptions'):.0f}" if t.ok else "-",
            f"{t.startup_s:.0f}", " ".join(mark),
        ])
    if any(t.config.chunked_prefill is not None for t in outcome.trials):
        for row, t in zip(rows, outcome.trials, strict=True):
            row.insert(4, {None: "default (on)", True: "on", False: "off"}[
                t.config.chunked_prefill])
    return rows


def _versus(t: Trial) -> str:
    """``#1: 1.22x (1.12-1.29x, 94% confidence, 5 pairs)``, or ``-`` for the baseline."""
    cmp = t.comparison
    if cmp is None or not cmp.pairs:
        return "-"
    return f"#{t.against}: {cmp.text()}"


def summary_lines(outcome: Outcome) -> list[str]:
    """The verdict in a few sentences: the decision with its interval first."""
    out = []
    b, base = outcome.best, outcome.baseline
    if b is not None and base is not None and base.ok:
        out.append(f"Decision: {outcome.decision()}")
        out.append(f"Kept {b.config.describe()}: median goodput {b.score:.0f} tok/s; vLLM's "
                   f"defaults {base.score:.0f} tok/s (medians of their runs; the decision "
                   "uses the paired interval)")
    pb = outcome.predicted_best
    if pb is not None:
        out.append(f"Sweep prediction: max-num-seqs {pb[0]} -> {pb[1]:.0f} tok/s")
    out.append(f"{len(outcome.trials)} trials in {outcome.wall_s:.0f} s; "
               f"{'complete' if outcome.complete else 'PARTIAL'}: {outcome.stop_reason}")
    out.extend(outcome.notes)
    return out


def sweep_rows(outcome: Outcome) -> list[list[str]]:
    """The baseline server's concurrency sweep with the prediction for each cap."""
    base = outcome.baseline
    if base is None:
        return []
    rows = []
    for m in [*base.runs[:1], *base.probes]:
        pred = outcome.predictions.get(m.concurrency)
        rows.append([str(m.concurrency), f"{m.goodput_tps:.0f}", f"{m.output_tps:.0f}",
                     f"{m.request_rate:.2f}", f"{m.ttft_p95_ms:.0f}", f"{m.itl_p95_ms:.1f}",
                     f"{m.running_max:.0f}", f"{m.preemptions:.0f}",
                     f"{pred:.0f}" if pred is not None else "-"])
    return rows


SWEEP_HEADERS = ("clients", "goodput", "throughput", "req/s", "TTFT p95 ms", "ITL p95 ms",
                 "running max", "preemptions", "predicted goodput as cap")


def render_text(outcome: Outcome) -> str:
    """The trial table (and sweep) as plain text."""

    def fmt(headers: tuple[str, ...], rows: list[list[str]]) -> list[str]:
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
                  for i, h in enumerate(headers)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        return lines

    lines = fmt(table_headers(outcome), table_data(outcome))
    sw = sweep_rows(outcome)
    if len(sw) > 1:
        lines += ["", "Concurrency sweep on the baseline server:"] + fmt(SWEEP_HEADERS, sw)
    lines += [""] + summary_lines(outcome)
    return "\n".join(lines)


def print_result(outcome: Outcome, stream: Any = None) -> None:
    """Print the result: a rich table on a terminal, plain text otherwise."""
    stream = stream or sys.stdout
    if stream.isatty():
        try:
            from rich.console import Console
            from rich.table import Table

            console = Console(file=stream)
            table = Table(title="Tuning trials")
            for h in table_headers(outcome):
                table.add_column(h)
            for r in table_data(outcome):
                table.add_row(*r, style="bold green" if "BEST" in r[-1] else None)
            console.print(table)
            sw = sweep_rows(outcome)
            if len(sw) > 1:
                st = Table(title="Concurrency sweep on the baseline server")
                for h in SWEEP_HEADERS:
                    st.add_column(h)
                for r in sw:
                    st.add_row(*r)
                console.print(st)
            for line in summary_lines(outcome):
                console.print(line)
            return
        except ImportError:
            pass
    stream.write(render_text(outcome) + "\n")
    stream.flush()

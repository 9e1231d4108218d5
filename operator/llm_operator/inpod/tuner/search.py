"""The search (pure): which engine settings to try next, and which one won.

Standard library only (and :mod:`llm_operator.knowledge.engine_rules`, vLLM's start-up rules,
which the tuning Job copies along). Nothing here starts a server or reads a clock: the
caller passes an :class:`~.measure.Evaluator` (real vLLM servers in :mod:`.runner`, a
synthetic response surface in the unit tests) and a ``clock``.

A grid restarts the server for every cell, and on GPUs each start costs minutes of model
loading; this search spends starts only where they pay. ``C`` is the workload's client
concurrency; the incumbent is the configuration in force (vLLM's defaults first). The
rules:

1. **Baseline and sweep, one server.** vLLM's defaults (plus the user's pins) are
   measured at ``C``, then on the same server at lower client concurrencies (``C/2``,
   ``C/4``, ..., the cap the KV cache fits and the planner's hint, at most
   ``sweep_points``). Each probe at ``c`` predicts the goodput of ``--max-num-seqs c``
   under ``C`` clients: its requests, each delayed by the queue's wait ``(C - c) / X(c)``
   (Little's law), counted as good only within ``predict_margin`` of the SLO, or at the
   SLO itself where that margin leaves no cap predicted to beat the defaults
   (:mod:`.sweep`).
2. **max-num-seqs.** The caps predicted to beat the defaults are verified against them,
   best first, until one wins (at most ``verify_points``). While none has won: the
   planner's hint is verified where the defaults' typical run misses the SLO (or none of
   their runs met it); then up to three caps walk the ladder from the last cap that lost
   toward the SLO, by the objective its typical run missed (TTFT: a larger cap, sized by
   Little's law; ITL: the next smaller one), stopping at a cap that misses both. Where a
   cap below the hint won, the hint is compared with the defaults too and kept if it
   wins and is no slower. Then the incumbent's neighbours on the ladder are tried, only
   those predicted within ``refine_margin`` of the best, while one wins.
3. **max-num-batched-tokens.** One ladder step at a time from the incumbent's budget, in
   the direction its misses call for (more ITL misses than TTFT misses: smaller; else
   larger), while each step wins. A larger budget is not tried when ``max-num-seqs x
   input tokens`` (the most a step can schedule) already fits the current one within
   ``min_gain``.
4. **Chunked prefill off**, only where the space searches it (the caller decides:
   :func:`~.space.chunked_prefill_searchable`): one more challenger, its batched tokens
   raised to ``--max-model-len`` where vLLM needs that many without chunking.
5. **A move is a paired win** (:mod:`.compare`, :mod:`.trials`). A candidate replaces
   the incumbent only when, in pairs (interleaved on one live-cap server; else the i-th
   runs of two servers, and the comparison says so), the exact Wilcoxon signed-rank
   interval of its typical goodput ratio at ``confidence`` lies above ``1 + min_gain``,
   pairs where neither arm had goodput left out; ``repeats`` pairs first, more up to
   ``max_pairs`` only while the interval straddles that line. Such a win does not count
   when the gain lies only in the reference's runs that missed the SLO: the candidate is
   slower (median output tokens/s below the reference's by more than ``min_gain``) and
   behind it in the pairs where the reference had goodput, or without goodput in its
   own typical pair (:func:`~.records.gain_only_where_missed`).
6. **Or a win on the SLO.** Where the reference's typical run misses the SLO (its runs'
   TTFT and ITL p95 over the objectives) with confidence, a candidate whose typical run
   meets it wins too, on as many runs as a goodput decision needs
   (:func:`~.compare.slo_verdict`). No arm is ever scored by its worst run.
7. **Keep what was confirmed against the defaults.** The last winner, when it won
   against another incumbent, is measured against vLLM's defaults directly, so the gain
   reported is always a paired interval against them; one not confirmed gives way to the
   winner before it, and at last to the defaults. When the budget (trials, wall time)
   runs out or a stop is requested, the best result so far is kept and marked partial.
   The baseline too stops within the budget: where its next run would overrun it, no
   other configuration could be compared after it either, so it ends there (at least one
   run), rather than spend the time the budget does not have on runs that decide nothing.

Pinned settings are never varied: a pinned knob has no levels in :class:`~.space.Space`
and is passed to every server as a fixed flag by the caller.

Where each part lives: :mod:`.space` (what is searched: workload, SLO, configurations,
levels, budget, options), :mod:`.measure` (what a run measures, and the evaluator the
caller provides), :mod:`.sweep` (rule 1's probes and predictions), :mod:`.trials` (the
budget, running trials, rules 5-7), :mod:`.phases` (rules 1-4), :mod:`.records` (the
trials and the outcome, with the sentence a person reads). This module runs them
(:func:`search`, and :func:`grid_search` for comparison) and re-exports the names callers
import from it.

Why each rule is as it is, measured: the runs of the tuner's search in
benchmarks/RESULTS.md (the current ones) and benchmarks/HISTORY.md (the superseded ones),
each naming the :data:`SEARCH_VERSION` that made it, and the git history of these files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .measure import (
    Evaluator,
    Interrupted,
    Measurement,
    Progress,
    RequestSample,
    Session,
    TrialFailed,
    gap_p95,
    good,
    goodput,
    percentile,
    summarize,
)
from .phases import Phases
from .records import Outcome, Trial, gain_only_where_missed, slower
from .space import (
    CHUNKED_FLAGS,
    CHUNKED_OFF_WARNING,
    DEFAULT_MNBT_LADDER,
    DEFAULT_MNS_LADDER,
    SLO,
    Budget,
    Config,
    Options,
    Space,
    Workload,
    chunked_prefill_searchable,
    ladder,
)
from .sweep import interpolate, predict_cap_goodput, snap, sweep_concurrencies

__all__ = [
    "CHUNKED_FLAGS",
    "CHUNKED_OFF_WARNING",
    "DEFAULT_MNBT_LADDER",
    "DEFAULT_MNS_LADDER",
    "SEARCH_VERSION",
    "SLO",
    "Budget",
    "Config",
    "Evaluator",
    "Interrupted",
    "Measurement",
    "Options",
    "Outcome",
    "Progress",
    "RequestSample",
    "Session",
    "Space",
    "Trial",
    "TrialFailed",
    "Workload",
    "chunked_prefill_searchable",
    "gain_only_where_missed",
    "gap_p95",
    "good",
    "goodput",
    "grid_search",
    "interpolate",
    "ladder",
    "percentile",
    "predict_cap_goodput",
    "search",
    "slower",
    "snap",
    "stopped_reason",
    "summarize",
    "sweep_concurrencies",
]

# The version of the rules above: bumped when, on the same measurements, the search may
# choose another configuration or spend other trials. Runs stored by a benchmark name
# the version that made them (``tunerVersion``); each run's section in
# benchmarks/RESULTS.md or benchmarks/HISTORY.md says what its version changed and what
# that did, and ``git log -G '^SEARCH_VERSION = '`` finds the commits.
SEARCH_VERSION = 13


def _no_progress(event: str, **info: object) -> None:
    return None


def stopped_reason(exc: Interrupted, trials: Sequence[Trial]) -> str:
    """Why a run stopped early, with how far it got (the result's ``reason``)."""
    done = sum(1 for t in trials if t.ok)
    return (f"stopped early ({exc}) after {len(trials)} trial(s), {done} measured: "
            "the result is the best so far")


def search(
    evaluator: Evaluator,
    space: Space,
    workload: Workload,
    slo: SLO,
    budget: Budget,
    opts: Options | None = None,
    clock: Callable[[], float] | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """Find the configuration in ``space`` with the most goodput under ``slo`` at
    ``workload``, spending as few server starts as it can (see the module docstring).

    Always returns: a failed or exhausted run keeps what it measured (``complete`` False).
    """
    import time

    run = Phases(evaluator, space, workload, slo, budget, opts or Options(),
               clock or time.monotonic, progress or _no_progress)
    complete = False
    base: Trial | None = None
    try:
        base = run.baseline()
        if not base.ok:
            run.stop_reason = f"baseline failed: {base.error}"
        elif not run.opts.can_restart:
            run.predictions = (dict(sorted(run.predict(base).items()))
                               if space.max_num_seqs else {})
            run.notes.append("one server given, no restarts: the best cap is predicted, "
                             "not verified")
            complete = True
            run.stop_reason = "measured the given server only"
        else:
            if space.max_num_seqs and not run.stop_reason:
                run.search_mns(base)
            if not run.stop_reason and space.max_num_batched_tokens:
                run.search_mnbt()
            if not run.stop_reason and space.chunked_prefill:
                run.search_chunked()
            if not run.stop_reason:
                complete = True
                run.stop_reason = "converged"
        best = run.confirm() if base.ok else None
    except Interrupted as exc:
        complete = False
        run.stop_reason = stopped_reason(exc, run.trials)
        base = run.trials[0] if run.trials else None  # the baseline is always trial 1
        # No time to confirm: keep the last challenger that won against the defaults.
        won = [t for t in run.chain if base is not None and t.against == base.index]
        best = won[-1] if won else (base if base is not None and base.ok else None)
    outcome = Outcome(trials=run.trials, baseline=base, best=best, complete=complete,
                      stop_reason=run.stop_reason, predictions=run.predictions,
                      wall_s=run.elapsed(), notes=run.notes, min_gain=run.opts.min_gain,
                      slo=slo)
    run.progress("done", outcome=outcome)
    return outcome


def grid_search(
    evaluator: Evaluator,
    space: Space,
    workload: Workload,
    slo: SLO,
    budget: Budget | None = None,
    opts: Options | None = None,
    clock: Callable[[], float] | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """The exhaustive grid over ``space``, measured the same way as :func:`search`, for
    comparison: one server start per cell, or per batched-token level with the live
    admission cap (:meth:`Space.grid`'s order). The first cell is vLLM's defaults."""
    import time

    budget = budget or Budget(max_trials=10_000, max_seconds=float("inf"))
    run = Phases(evaluator, space, workload, slo, budget, opts or Options(),
               clock or time.monotonic, progress or _no_progress)
    base: Trial | None = None
    complete = True
    try:
        base = run.run_trial(Config(), "baseline")
        for cfg in space.grid():
            if run.tried(cfg):
                continue
            if not run.can_afford(cfg):
                complete = False
                break
            run.run_trial(cfg, "grid")
    except Interrupted as exc:
        complete = False
        run.stop_reason = stopped_reason(exc, run.trials)
        base = run.trials[0] if run.trials else None
    ok = [t for t in run.trials if t.ok]
    # The grid is a reference for benchmarks: its best is the highest median, unpaired.
    outcome = Outcome(trials=run.trials, baseline=base,
                      best=max(ok, key=lambda t: t.score) if ok else None,
                      complete=complete, stop_reason=run.stop_reason or "grid done",
                      wall_s=run.elapsed(), min_gain=run.opts.min_gain)
    run.progress("done", outcome=outcome)
    return outcome

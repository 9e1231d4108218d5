"""Running trials and deciding between them (pure): the bookkeeping of one search.

:class:`Trials` holds one search's state and does what every phase needs: it accounts for
the budget (trials, wall time, less any time the evaluator waited for a shared machine),
runs one trial (a server start, its runs at the workload's concurrency, its probes),
measures a candidate against a reference in pairs (interleaved on one live-cap server,
else the i-th runs of two servers; more pairs only while undecided), calls the verdict
(the paired goodput interval of :mod:`.compare`, not where the gain lies only in the
reference's missed runs; or the SLO rule, :func:`~.compare.slo_verdict`), and confirms
the winner against vLLM's defaults. A failed trial is recorded and the search goes on; a
stop request (:class:`~.measure.Interrupted`) goes on up. Standard library only; the
clock is the caller's.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence

from .compare import Verdict, pairs_for, slo_verdict
from .measure import (
    Evaluator,
    Interrupted,
    Measurement,
    Progress,
    Session,
    TrialFailed,
)
from .records import Trial, gain_only_where_missed
from .space import SLO, TIME_BUDGET, Budget, Config, Options, Space, Workload


class Trials:
    """One search in progress: its budget, its trials, and the paired decisions
    between them (the state the phases share; :class:`.phases.Phases` adds the phases)."""

    def __init__(self, evaluator: Evaluator, space: Space, workload: Workload, slo: SLO,
                 budget: Budget, opts: Options, clock: Callable[[], float],
                 progress: Progress) -> None:
        self.ev = evaluator
        self.space = space
        self.wl = workload
        self.slo = slo
        self.budget = budget
        self.opts = opts
        self.clock = clock
        self.progress = progress
        self.t0 = clock()
        self.trials: list[Trial] = []
        self.stop_reason = ""
        self.notes: list[str] = []
        self.predictions: dict[int, float] = {}
        self.waited_s = 0.0
        self.base: Trial | None = None
        self.chain: list[Trial] = []  # accepted challengers, in order (after the baseline)

    # budget -----------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.clock() - self.t0 - self.waited_s

    def _per_run_s(self) -> float:
        """Seconds one measurement at ``C`` has taken at most so far (0 before any)."""
        return max((m.duration_s for t in self.trials for m in t.runs), default=0.0)

    def _est_trial_s(self, cfg: Config | None = None) -> float:
        done = [t for t in self.trials if t.wall_s > 0]
        if not done:
            return 0.0
        # Per measurement, from what the trials cost beyond their starts and probes.
        per_run = max(
            max(0.0, t.wall_s - t.startup_s - sum(p.duration_s for p in t.probes))
            / max(1, t.measured or len(t.runs)) for t in done)
        if cfg is not None and self.base is not None and self.interleavable(
                self.incumbent_config(), cfg):
            return 2 * self.opts.repeats * per_run  # both arms, no start
        start = max(t.startup_s for t in done) if self._starts_server(cfg) else 0.0
        return start + self.opts.repeats * per_run

    def _cut_baseline(self, base: Trial, runs: int) -> None:
        """Stop the search where the baseline's next run would overrun the time budget,
        saying what a comparison with vLLM's defaults would need."""
        done, run_s = len(base.runs), base.runs[-1].duration_s
        need_min = math.ceil(self._comparison_s(base, runs, run_s) / 60)
        self.stop_reason = (
            f"{TIME_BUDGET}: {self.elapsed():.0f} s used, the baseline's run {done + 1} of "
            f"{runs} needs ~{run_s:.0f} s of {self.budget.max_seconds:.0f} s; a comparison "
            f"with vLLM's defaults needs about {need_min} min")
        self.notes.append(f"the baseline cut short by the time budget after {done} of "
                          f"{runs} runs")

    def _comparison_s(self, base: Trial, runs: int, run_s: float) -> float:
        """About how long the baseline (its start and ``runs`` runs) and one paired
        comparison with it take: ``repeats`` pairs on the running server with the live cap,
        else another start and as many runs as the baseline's (the i-th runs of the two
        servers are paired). The sweep's probes are not counted."""
        whole_base = base.startup_s + runs * run_s
        if self.needs_start is not None:
            return whole_base + 2 * self.opts.repeats * run_s
        return 2 * whole_base

    def incumbent_config(self) -> Config:
        inc = self.incumbent()
        return inc.config if inc is not None else Config()

    @property
    def needs_start(self) -> Callable[[Config], bool] | None:
        """The evaluator's optional ``needs_start(config)``: an evaluator that sets a cap
        on a running server (the live admission cap) says with it which configurations
        still need a start; None for one that starts a server per trial."""
        found: Callable[[Config], bool] | None = getattr(self.ev, "needs_start", None)
        return found

    def _starts_server(self, cfg: Config | None) -> bool:
        """Whether the next trial (``cfg``, when known) pays a server start."""
        return cfg is None or self.needs_start is None or bool(self.needs_start(cfg))

    def can_afford(self, cfg: Config | None = None) -> bool:
        if len(self.trials) >= self.budget.max_trials:
            self.stop_reason = f"trial budget reached ({self.budget.max_trials} trials)"
            return False
        need = self._est_trial_s(cfg)
        if self.elapsed() + need > self.budget.max_seconds:
            self.stop_reason = (
                f"{TIME_BUDGET}: {self.elapsed():.0f} s used, next trial needs "
                f"~{need:.0f} s of {self.budget.max_seconds:.0f} s"
            )
            return False
        return True

    def time_left(self, needed_s: float) -> bool:
        return self.elapsed() + needed_s <= self.budget.max_seconds

    # one trial --------------------------------------------------------------------
    def tried(self, cfg: Config) -> Trial | None:
        key = (*self.space.effective(cfg), self.space.chunked(cfg))
        for t in self.trials:
            if t.config == cfg or (None not in key and (
                    *self.space.effective(t.config), self.space.chunked(t.config)) == key):
                return t
        return None

    def _new_trial(self, cfg: Config, phase: str) -> Trial:
        trial = Trial(index=len(self.trials) + 1, config=cfg, phase=phase,
                      noise_threshold=self.opts.noise_threshold,
                      confidence=self.opts.confidence)
        self.trials.append(trial)
        self.progress("trial-start", trial=trial)
        return trial

    def run_trial(self, cfg: Config, phase: str,
                  probe_plan: Callable[[Trial], list[int]] | None = None,
                  runs: int | None = None,
                  enough: Callable[[Trial], bool] | None = None) -> Trial:
        """One server (start) for ``cfg``: ``runs`` measurements at ``C`` (``repeats`` by
        default; fewer once ``enough(trial)`` says so, after ``repeats``), then the
        probes of ``probe_plan``."""
        trial = self._new_trial(cfg, phase)
        runs = runs or self.opts.repeats
        t_start = self.clock()
        session: Session | None = None
        try:
            with self._recording(trial, lambda: len(trial.runs)):
                session = self.ev.start(cfg)
                trial.startup_s = session.startup_s
                for i in range(runs):
                    out_of_time = i > 0 and not self.time_left(trial.runs[-1].duration_s)
                    if i >= self.opts.repeats and (
                            (enough is not None and enough(trial)) or out_of_time):
                        break
                    if out_of_time and phase == "baseline":
                        # Nothing could be compared after it either: stop within the budget.
                        self._cut_baseline(trial, runs)
                        break
                    trial.runs.append(session.measure(self.wl.concurrency))
                    trial.measured += 1
                    self.progress("run", trial=trial)
                if probe_plan is not None:
                    for c in probe_plan(trial):
                        if not self.time_left(2 * trial.runs[-1].duration_s):
                            self.notes.append("concurrency sweep cut short by the time budget")
                            break
                        trial.probes.append(session.measure(c))
                        self.progress("probe", trial=trial, concurrency=c)
        finally:
            waited = float(getattr(session, "waited_s", 0.0) or 0.0)
            if session is not None:
                session.close()
            # Waiting for another user of a shared machine is not the trial's cost.
            trial.wall_s = self.clock() - t_start - waited
            self.waited_s += waited
        self.progress("trial-done", trial=trial)
        return trial

    @contextlib.contextmanager
    def _recording(self, trial: Trial, evidence: Callable[[], int]) -> Iterator[None]:
        """A failed trial records why and the search goes on; a stop request (Interrupted)
        goes on up, and a trial cut short before ``repeats`` measurements (or pairs,
        ``evidence()``) is no evidence. One whose repeats finished (only its probes or
        extra pairs were cut) still counts."""
        try:
            yield
        except TrialFailed as exc:
            trial.error = str(exc) or type(exc).__name__
        except Interrupted as exc:
            if evidence() < self.opts.repeats:
                trial.error = f"interrupted: {exc}"
            raise

    def interleavable(self, ref: Config, cand: Config) -> bool:
        """Whether both arms run on the server that is up now, so their measurements can
        alternate without a start: an evaluator with the live cap (``needs_start``) and
        the same max-num-batched-tokens."""
        needs_start = self.needs_start
        if needs_start is None:
            return False
        same = (self.space.effective(ref)[1] == self.space.effective(cand)[1]
                and self.space.chunked(ref) == self.space.chunked(cand))
        return same and not needs_start(ref) and not needs_start(cand)

    def _decided(self, trial: Trial) -> bool:
        return trial.comparison is not None and self.verdict(trial) is not Verdict.UNDECIDED

    def _trial(self, index: int | None) -> Trial | None:
        return next((t for t in self.trials if t.index == index), None)

    def verdict(self, trial: Trial) -> Verdict:
        """The paired goodput interval's verdict (:meth:`goodput_win`: not where the gain
        lies only in the reference's runs that missed the SLO, the SLO's question); or,
        where the reference's typical run misses the SLO with confidence and ``trial``'s
        meets it, better
        (:func:`~.compare.slo_verdict`); undecided while either could still decide."""
        cmp = trial.comparison
        if cmp is None:
            return Verdict.NOT_BETTER
        by_goodput = cmp.verdict(self.opts.min_gain)
        ref = self._trial(trial.against)
        if ref is None:
            return by_goodput
        if by_goodput is Verdict.BETTER:
            if self.goodput_win(trial):
                return by_goodput
            by_goodput = Verdict.NOT_BETTER
        by_slo = slo_verdict(ref.attainment(self.slo), trial.attainment(self.slo),
                             pairs_for(self.opts.confidence))
        if by_slo is Verdict.BETTER:
            return by_slo
        if Verdict.UNDECIDED in (by_goodput, by_slo):
            return Verdict.UNDECIDED
        return Verdict.NOT_BETTER

    def goodput_win(self, trial: Trial) -> bool:
        """The paired goodput interval calls ``trial`` better, and not only through its
        reference's runs that missed the SLO (:func:`gain_only_where_missed`)."""
        cmp, ref = trial.comparison, self._trial(trial.against)
        return (cmp is not None and cmp.verdict(self.opts.min_gain) is Verdict.BETTER
                and (ref is None or not gain_only_where_missed(trial, ref,
                                                               self.opts.min_gain)))

    def challenge(self, cfg: Config, phase: str, ref: Trial) -> Trial:
        """Measure ``cfg`` against ``ref`` in pairs (see the module docstring): interleaved
        on one live-cap server, else the i-th runs of the two servers; pairs beyond
        ``repeats`` only while the comparison is undecided."""
        if self.interleavable(ref.config, cfg):
            return self._interleaved(cfg, phase, ref)
        n = min(max(self.opts.repeats, len(ref.runs)), self.opts.max_pairs)

        def enough(t: Trial) -> bool:
            t.pairs = [(a.goodput_tps, b.goodput_tps) for a, b in zip(ref.runs, t.runs,
                                                                      strict=False)]
            return self._decided(t)

        trial = self.run_trial(cfg, phase, runs=n, enough=enough)
        trial.against, trial.interleaved = ref.index, False
        enough(trial)
        return trial

    def _measure(self, cfg: Config, trial: Trial) -> Measurement:
        session = self.ev.start(cfg)
        waited = float(getattr(session, "waited_s", 0.0) or 0.0)
        self.waited_s += waited
        trial.startup_s += session.startup_s
        try:
            return session.measure(self.wl.concurrency)
        finally:
            session.close()

    def _interleaved(self, cfg: Config, phase: str, ref: Trial) -> Trial:
        trial = self._new_trial(cfg, phase)
        trial.against = ref.index
        t_start, waited0 = self.clock(), self.waited_s
        try:
            with self._recording(trial, lambda: len(trial.pairs)):
                while len(trial.pairs) < self.opts.max_pairs:
                    if len(trial.pairs) >= self.opts.repeats and (
                            self._decided(trial) or not self.time_left(2 * self._per_run_s())):
                        break
                    # Alternate the order (AB, BA, ...): a drift within a pair falls on both.
                    order = (ref, trial) if len(trial.pairs) % 2 == 0 else (trial, ref)
                    got: dict[int, float] = {}
                    for t in order:
                        m = self._measure(t.config, trial)
                        t.runs.append(m)
                        trial.measured += 1
                        got[t.index] = m.goodput_tps
                        self.progress("run", trial=t)
                    trial.pairs.append((got[ref.index], got[trial.index]))
        finally:
            trial.wall_s = self.clock() - t_start - (self.waited_s - waited0)
        self.progress("trial-done", trial=trial)
        return trial

    def incumbent(self) -> Trial | None:
        """The configuration in force: the last accepted challenger, else the baseline."""
        if self.chain:
            return self.chain[-1]
        return self.base if self.base is not None and self.base.ok else None

    def first_better(self, cfgs: Sequence[Config], phase: str, inc: Trial) -> bool:
        """Challenge ``inc`` with ``cfgs`` in order until one wins; False when none did or
        the budget ran out first."""
        for cfg in cfgs:
            if not self.can_afford(cfg):
                return False
            if self.beats(self.challenge(cfg, phase, inc)):
                self.chain.append(self.trials[-1])
                return True
        return False

    def beats(self, cand: Trial) -> bool:
        """Whether ``cand``'s comparison with its reference says it is better (by the paired
        goodput interval, or by the SLO where the reference misses it: :meth:`verdict`);
        records which in ``cand.won_by``."""
        cmp = cand.comparison
        if not cand.ok or cmp is None or self.verdict(cand) is not Verdict.BETTER:
            return False
        ref = self._trial(cand.against)
        if self.goodput_win(cand):
            cand.won_by = "goodput"
        else:
            cand.won_by = "slo"
            cand.reference_attainment = ref.attainment(self.slo) if ref else None
        return True

    def confirm(self) -> Trial | None:
        """The configuration to keep, with a measured comparison against vLLM's defaults:
        the last accepted challenger if it won against the baseline itself, else it is
        measured against the baseline now (and kept if it wins); one that is not confirmed
        gives way to the one accepted before it, and at last to the defaults."""
        base = self.base
        if base is None or not base.ok:
            return None
        for t in reversed(self.chain):
            if t.against == base.index:
                return t
            if not self.can_afford(t.config):
                self.notes.append(f"{t.config.label()} was not confirmed against vLLM's "
                                  f"defaults ({self.stop_reason}): not kept")
                continue
            again = self.challenge(t.config, "confirm", base)
            if self.beats(again):
                return again
            self.notes.append(f"{t.config.label()} beat {self._label_of(t.against)} but not "
                              "vLLM's defaults when measured against them: not kept")
        return base

    def _label_of(self, index: int | None) -> str:
        for t in self.trials:
            if t.index == index:
                return t.config.label()
        return "?"

"""The search's records (pure): each trial, the outcome, and the sentence that explains it.

A :class:`Trial` is one configuration measured (its runs at the workload's concurrency,
its probes, and its pairs against the reference it was compared with); an
:class:`Outcome` is what a search produced: every trial, the baseline, the kept one and
:meth:`Outcome.decision`, the one sentence a person reads. :func:`slower` and
:func:`gain_only_where_missed` say when a goodput gain lies only in the reference's runs
that missed the SLO (which the paired interval alone does not decide). Standard library
only.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .compare import DEFAULT_CONFIDENCE, Attainment, Comparison
from .measure import Measurement
from .space import SLO, Config


@dataclass
class Trial:
    """One server start: a configuration, its repeats at ``C``, and its probes."""

    index: int
    config: Config
    phase: str  # baseline | verify | walk | refine | batched-tokens | grid
    runs: list[Measurement] = field(default_factory=list)
    probes: list[Measurement] = field(default_factory=list)  # other concurrencies
    startup_s: float = 0.0
    wall_s: float = 0.0
    error: str | None = None
    noise_threshold: float = 0.15
    against: int | None = None  # the trial this one was compared with (its reference)
    pairs: list[tuple[float, float]] = field(default_factory=list)  # (reference, this)
    interleaved: bool = True  # the pairs measured back to back on one server
    confidence: float = DEFAULT_CONFIDENCE
    measured: int = 0  # measurements at C taken during this trial, the reference's too
    # How it beat its reference: "goodput" (the paired interval) or "slo" (it met the SLO
    # in its typical run where the reference missed it with confidence); None: it did not.
    won_by: str | None = None
    reference_attainment: Attainment | None = None  # the reference's, when won by "slo"

    @property
    def comparison(self) -> Comparison | None:
        """This trial against its reference (None for the baseline)."""
        if self.against is None:
            return None
        return Comparison(tuple(self.pairs), self.interleaved, self.confidence)

    @property
    def ok(self) -> bool:
        """Measured at least once without error."""
        return self.error is None and bool(self.runs)

    @property
    def median(self) -> float:
        """Median goodput of the repeats (tokens/s)."""
        return statistics.median(m.goodput_tps for m in self.runs) if self.runs else 0.0

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeats' goodput; 0 for a single run."""
        if len(self.runs) < 2:
            return 0.0
        vals = [m.goodput_tps for m in self.runs]
        med = statistics.median(vals)
        return (max(vals) - min(vals)) / med if med > 0 else (0.0 if max(vals) == 0 else 1.0)

    @property
    def noisy(self) -> bool:
        """Spread of its runs above the threshold (shown to a person; decisions use
        paired intervals, which account for noise themselves)."""
        return self.spread > self.noise_threshold

    @property
    def score(self) -> float:
        """The median goodput of its runs (-1 when it failed): what orders candidates
        and what tables show. Whether it beat another is :attr:`comparison`'s to say."""
        if not self.ok:
            return -1.0
        return self.median

    def attainment(self, slo: SLO) -> Attainment:
        """Its runs at ``C`` against the SLO (:class:`~.compare.Attainment`)."""
        return Attainment.of([(m.ttft_p95_ms, m.itl_p95_ms) for m in self.runs],
                             slo.ttft_ms, slo.itl_ms, self.confidence)

    def mean_of(self, attr: str) -> float:
        """Mean of one Measurement attribute over the repeats."""
        vals = [float(getattr(m, attr)) for m in self.runs]
        return sum(vals) / len(vals) if vals else 0.0


@dataclass
class Outcome:
    """What a search produced (partial when the budget ran out)."""

    trials: list[Trial]
    baseline: Trial | None
    best: Trial | None
    complete: bool
    stop_reason: str
    predictions: dict[int, float] = field(default_factory=dict)  # cap -> predicted goodput
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    min_gain: float = 0.05
    slo: SLO | None = None  # what the search judged by (the decision's text cites it)

    @property
    def predicted_best(self) -> tuple[int, float] | None:
        """The cap the concurrency sweep predicts best, with its predicted goodput."""
        if not self.predictions:
            return None
        cap = max(self.predictions, key=lambda k: (self.predictions[k], k))
        return cap, self.predictions[cap]

    @property
    def versus_defaults(self) -> Comparison | None:
        """The kept configuration against vLLM's defaults, measured in pairs (None when the
        defaults were kept or there is no baseline)."""
        if self.best is None or self.baseline is None or self.best is self.baseline:
            return None
        cmp = self.best.comparison
        return cmp if self.best.against == self.baseline.index else None

    @property
    def strongest_rejected(self) -> Trial | None:
        """Of the candidates compared directly with vLLM's defaults and not kept, the one
        with the highest median ratio (what a person asks about when the defaults stay)."""
        if self.baseline is None:
            return None
        cands = [t for t in self.trials if t is not self.best and t.ok and t.pairs
                 and t.against == self.baseline.index]

        def strength(t: Trial) -> tuple[bool, float]:
            # One with goodput in some pair first: a comparison where neither arm had any
            # has no ratio (compare.py).
            cmp = t.comparison
            has = cmp is not None and bool(cmp.ratios)
            return has, cmp.estimate if has else 0.0  # type: ignore[union-attr]

        return max(cands, key=strength) if cands else None

    @property
    def improvement(self) -> float | None:
        """Median paired ratio of the kept configuration's goodput to vLLM's defaults (1.0
        when the defaults were kept; None without a baseline)."""
        if self.baseline is None or not self.baseline.ok or self.best is None:
            return None
        cmp = self.versus_defaults
        if cmp is not None:
            return cmp.estimate
        if self.best is not self.baseline and self.best.against is None and \
                self.baseline.score > 0:  # the grid's best: medians, unpaired
            return self.best.score / self.baseline.score
        return 1.0

    def decision(self) -> str:
        """One sentence a person reads: the figure with its interval and what was kept,
        e.g. ``--max-num-seqs 4: 0.60x (0.55-0.66x, 94% confidence, 6 pairs) of vLLM's
        defaults; kept vLLM's defaults (interval not above 1.05x)``."""
        if self.baseline is None or not self.baseline.ok:
            return "no baseline measured: nothing to compare"
        line = f"{1 + self.min_gain:.2f}x"
        cmp = self.versus_defaults
        if cmp is not None and self.best is not None:
            what = self.best.config.describe()
            ref = self.best.reference_attainment
            if self.best.won_by == "slo" and ref is not None and self.slo is not None:
                mine = self.best.attainment(self.slo)
                return (f"{what}: met the SLO in its typical run ({mine.text()}) where "
                        f"vLLM's defaults missed it ({ref.text()}); goodput {cmp.text()} "
                        f"of vLLM's defaults; kept {what}")
            return (f"{what}: {cmp.text()} of vLLM's defaults; kept {what} (interval "
                    f"above {line})")
        if self.best is not None and self.best is not self.baseline:  # the grid: unpaired
            what = self.best.config.describe()
            return (f"{what}: median goodput {self.best.score:.0f} tok/s against vLLM's "
                    f"defaults' {self.baseline.score:.0f} (medians, not paired); kept {what}")
        other = self.strongest_rejected
        if other is None or other.comparison is None:
            return ("kept vLLM's defaults: no other configuration was compared with them"
                    + self._defaults_missed())
        if not other.comparison.ratios:
            return (f"{other.config.describe()} and vLLM's defaults: "
                    f"{other.comparison.text()}; kept vLLM's defaults"
                    + self._defaults_missed())
        lo, _hi, achieved = other.comparison.interval
        if (self.slo is not None and achieved >= other.comparison.confidence
                and lo > 1 + self.min_gain
                and gain_only_where_missed(other, self.baseline, self.min_gain)):
            # A goodput interval above the line, from a slower candidate
            # whose gain lies only in the defaults' missed runs (gain_only_where_missed).
            its_tps, their_tps = (statistics.median(m.output_tps for m in t.runs)
                                  for t in (other, self.baseline))
            met = [b / a for a, b in other.pairs if a > 0]
            with_any = sum(1 for _a, b in other.pairs if b > 0)
            where = (f"without goodput in its typical pair ({with_any} of "
                     f"{len(other.pairs)} with any)"
                     if statistics.median(b for _a, b in other.pairs) <= 0 else
                     f"behind them where they met the SLO ({statistics.median(met):.2f}x "
                     f"their goodput, {len(met)} pairs): a gain only in their runs that "
                     "missed it")
            mine = other.attainment(self.slo)
            why = (f"its own typical run ({mine.text()}) does not meet it"
                   if not mine.meets_typically() else
                   f"their typical run ({self.baseline.attainment(self.slo).text()}) does "
                   "not miss it with confidence")
            return (f"{other.config.describe()}: goodput {other.comparison.text()} of "
                    f"vLLM's defaults but slower ({its_tps:.0f} against their "
                    f"{their_tps:.0f} output tok/s) and {where}, and {why}; kept vLLM's "
                    "defaults")
        return (f"{other.config.describe()}: {other.comparison.text()} of vLLM's defaults; "
                f"kept vLLM's defaults (interval not above {line})" + self._defaults_missed())

    def _defaults_missed(self) -> str:
        """Where vLLM's defaults are kept though their typical run missed the SLO, the
        clause that says so (a kept configuration is not one that meets it)."""
        if self.slo is None or self.baseline is None or not self.baseline.runs:
            return ""
        att = self.baseline.attainment(self.slo)
        if att.meets_typically():
            return ""
        return f", though their typical run missed the SLO ({att.text()})"


def slower(trial: Trial, ref: Trial, margin: float = 0.0) -> bool:
    """Whether ``trial``'s median output tokens/s (every request, met or not) is below
    ``ref``'s by more than ``margin``: a candidate slower than its reference gains
    goodput on it only where the reference's requests missed the SLO. The margin is
    ``min_gain``: a candidate as fast as its reference within the noise of the medians is
    not slower."""
    if not trial.runs or not ref.runs:
        return False
    return (statistics.median(m.output_tps for m in trial.runs) * (1.0 + margin)
            < statistics.median(m.output_tps for m in ref.runs))


def gain_only_where_missed(trial: Trial, ref: Trial, margin: float) -> bool:
    """Whether ``trial``'s goodput gain on ``ref`` comes only from the runs where ``ref``
    missed the SLO: it is slower (:func:`slower`, by more than ``margin``) and, in the
    pairs where ``ref`` had goodput, behind it in the typical one (slower alone is not
    enough), or without goodput in its own typical pair.
    Where the reference had goodput in no pair, or the candidate led it there too, and the
    candidate had goodput in its typical pair, the gain is in every run: on a real engine
    goodput counts requests, and a smaller cap whose requests meet the SLO more often
    than the defaults' leads them in each pair though its tokens/s are lower
    (tests/vllm/test_tuner.py: 487 tok/s against 0 in all 6 pairs, 1,058 against 1,120
    output tok/s)."""
    if not slower(trial, ref, margin):
        return False
    if not trial.pairs or statistics.median(b for _a, b in trial.pairs) <= 0:
        # No goodput in its typical pair. The interval leaves out the pairs
        # where neither arm had any, so against defaults with none in any pair a cap
        # with goodput in 5 runs of 12 read >100x (tune-landscape-70).
        return True
    met = [b / a for a, b in trial.pairs if a > 0]
    return bool(met) and statistics.median(met) < 1.0


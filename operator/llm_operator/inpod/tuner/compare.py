"""Paired comparisons of two engine configurations (pure, standard library only).

How the tuner decides that a configuration beats another, and what it tells a person.

**Pairs.** Each pair is one measurement of the reference (vLLM's defaults, or the
incumbent) and one of the candidate, taken back to back: on one live-cap server the two
arms are interleaved (A B, B A, A B, ...), so that the machine's load and any drift fall
on both arms of a pair alike. Where the two arms need different servers (another
max-num-batched-tokens, or an engine without the live cap) the i-th run of one server is
paired with the i-th run of the other, and the comparison says it was not interleaved.

**Statistic.** Each pair gives a goodput ratio ``candidate / reference``. The typical
ratio is the Hodges-Lehmann estimate (the median of the pairwise averages of the log
ratios, a ratio and its inverse counting as equally far from 1), and its interval is the
exact Wilcoxon signed-rank interval at the stated confidence: it covers the true typical
ratio with the probability it states whatever the noise's distribution, provided the log
ratios are symmetric about it. The noise of a CPU engine under preemption is heavy-tailed
(the demo's defaults: 6,770 / 3,330 / 5,855 tok/s); ranks are not pulled by one wild run,
where a mean would be, and scoring an arm by its worst run throws the other runs away. A
decision at 90% needs at least 5 pairs (the widest interval of 5 covers 93.75%). The sign
test on the median would need no symmetry, but in seeded runs of the whole search
(tests/unit/test_tuner_decisions.py, 200 seeds, up to 12 pairs) it found a candidate
truly 20% better under 30% noise in 181 where this interval found it in 198.

**Pairs where neither arm met the SLO** are left out of the statistic (and counted
beside it). Goodput counts only requests that meet the SLO, so a run where every request
misses it has zero goodput, and a pair where both arms have zero says that both missed in
that run and nothing about how much one gives relative to the other: ``0 / 0`` is no ratio.
Counting it as a ratio of 1, as this module did until tune-landscape-2 (issue 34 item 3),
made a candidate that meets the SLO in most runs against defaults that meet it in few
lose: the both-zero pairs pulled the typical ratio to 1 (12 pairs: 8 at >100x, 3 both
zero, 1 where only the defaults met; interval above 1.00x, not above 1.05x). This is
Wilcoxon's own treatment of zero differences (dropped before ranking, scipy's
``zero_method="wilcox"``), restricted to the one kind of tie that carries no magnitude.
It does not weaken what a win needs: the interval is computed on the informative pairs
alone, and a decision at 90% still needs at least 5 of them; with none (both arms miss in
every pair) nothing is better.

**Where the reference misses the SLO** (search version 6). Goodput counts only what meets
the SLO, so where the reference's runs miss it in most runs and the candidate's meet it in
most, the pairs are mostly ``inf`` or both-zero, and the few where noise made the reference
meet (or the candidate miss) can keep the goodput interval from deciding in the pairs a
trial can afford (tune-landscape-35: 110 of the 232 runs that kept defaults missing the
SLO had compared a cap that meets it). :class:`Attainment` asks the SLO's own question of
each arm's runs: per run, the larger of its TTFT p95 and ITL p95 over their objectives
(1.0 is the SLO's edge), and the typical ratio with the same exact Wilcoxon interval.
:func:`slo_verdict` calls the candidate better when the reference misses the SLO with
confidence, by more than the margin (the interval's lower end above ``1 + margin``; the
search passes none since version 9, 5% before) and the candidate, measured at least as
often as a goodput decision needs (5 runs at 90%), meets it in its typical run (the
estimate at most 1). The reference's goodput is then nothing in a typical run, so no gain
is claimed over a configuration that meets the SLO. Since search version 9 it is also the
only way a slower candidate whose goodput gain lies only in the reference's missed runs
wins (``records.gain_only_where_missed``): on the SLO's edge the goodput pairs are ``inf``
whenever the reference's run happened to miss, about half of them, and their interval
then called caps with a quarter of the defaults' goodput better (tune-landscape-50).

**Decision.** The candidate wins only when the interval reaches the stated confidence and
its lower end clears ``1 + min_gain``; it loses at once when even the upper end does not
reach ``1 + min_gain`` or when the typical ratio is at most 1 (then more pairs would be
spent on a configuration that is no better in a typical pair); otherwise the comparison
is undecided, and the caller spends another pair while its budget allows. Undecided at
the end is a loss: the reference is kept, and the text says the difference was not
significant.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

DEFAULT_CONFIDENCE = 0.90
DEFAULT_MAX_PAIRS = 12


class Verdict(Enum):
    """What a comparison says so far."""

    BETTER = "better"  # the interval's lower end clears 1 + min_gain
    NOT_BETTER = "not better"  # it cannot, or the typical pair shows no gain
    UNDECIDED = "undecided"  # the interval straddles the line: more pairs may tell


def ratio(reference: float, candidate: float) -> float:
    """``candidate / reference`` of one pair; ``inf`` when only the reference had no
    goodput, 1 when neither had any."""
    if reference > 0:
        return candidate / reference
    return math.inf if candidate > 0 else 1.0


RATIO_CLIP = 100.0  # a ratio beyond 100x (a zero goodput) counts as 100x in the ranks


def _log_ratios(values: Sequence[float]) -> list[float]:
    lim = math.log(RATIO_CLIP)
    return [max(-lim, min(lim, math.log(v))) if v > 0 else -lim for v in values]


def _signed_rank_counts(n: int) -> list[int]:
    """How many of the 2**n sign patterns give each signed-rank sum W+ (0..n(n+1)/2)."""
    counts = [1]
    for r in range(1, n + 1):
        nxt = counts + [0] * r
        for w, c in enumerate(counts):
            nxt[w + r] += c
        counts = nxt
    return counts


def _lower_tail(n: int) -> list[float]:
    """P(W+ <= k) for k = 0..n(n+1)/2 under the null (no difference)."""
    counts = _signed_rank_counts(n)
    total, run, out = 2.0**n, 0, []
    for c in counts:
        run += c
        out.append(run / total)
    return out


def walsh_interval(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE,
                   ) -> tuple[float, float, float, float]:
    """The Hodges-Lehmann estimate of the typical ratio among ``values`` and its exact
    Wilcoxon signed-rank interval, computed on log ratios (a ratio and its inverse are
    equally far from 1): ``(estimate, low, high, achieved confidence)``. The narrowest
    interval of Walsh averages whose coverage is at least ``confidence``; with too few
    values for that, the widest one (smallest to largest) and the coverage it has."""
    d = _log_ratios(values)
    n = len(d)
    if n == 0:
        return math.nan, math.nan, math.nan, 0.0
    walsh = sorted((d[i] + d[j]) / 2 for i in range(n) for j in range(i, n))
    m = len(walsh)
    tail = _lower_tail(n)
    k = 1  # interval [w_(k), w_(m+1-k)], 1-based; coverage 1 - 2 P(W+ <= k-1)
    while k < m // 2 + 1 and 1.0 - 2.0 * tail[k] >= confidence:
        k += 1
    cover = 1.0 - 2.0 * tail[k - 1]
    est = statistics.median(walsh)
    return math.exp(est), math.exp(walsh[k - 1]), math.exp(walsh[m - k]), cover


def pairs_for(confidence: float = DEFAULT_CONFIDENCE) -> int:
    """The fewest pairs whose widest interval reaches ``confidence`` (5 for 90%)."""
    n = 1
    while 1.0 - 2.0 * _lower_tail(n)[0] < confidence:
        n += 1
    return n


@dataclass(frozen=True)
class Comparison:
    """A candidate against a reference, from paired goodput measurements."""

    pairs: tuple[tuple[float, float], ...]  # (reference goodput, candidate goodput)
    interleaved: bool = True
    confidence: float = DEFAULT_CONFIDENCE  # the confidence asked for

    @property
    def n(self) -> int:
        """Number of pairs."""
        return len(self.pairs)

    @property
    def both_zero(self) -> int:
        """Pairs where neither arm had any goodput (left out of the statistic)."""
        return sum(1 for a, b in self.pairs if a <= 0 and b <= 0)

    @property
    def ratios(self) -> list[float]:
        """The paired ratios candidate / reference of the pairs where at least one arm had
        goodput (a pair where neither had any carries no ratio; see the module)."""
        return [ratio(a, b) for a, b in self.pairs if a > 0 or b > 0]

    @property
    def _stats(self) -> tuple[float, float, float, float]:
        return walsh_interval(self.ratios, self.confidence)

    @property
    def estimate(self) -> float:
        """The typical ratio candidate / reference (Hodges-Lehmann; ``nan`` without
        pairs)."""
        return self._stats[0]

    @property
    def interval(self) -> tuple[float, float, float]:
        """``(low, high, achieved confidence)``, see :func:`walsh_interval`."""
        _est, lo, hi, achieved = self._stats
        return lo, hi, achieved

    def verdict(self, min_gain: float) -> Verdict:
        """Better, not better, or undecided against the line ``1 + min_gain``."""
        if not self.pairs:
            return Verdict.UNDECIDED
        if not self.ratios:  # neither arm met the SLO in any pair so far
            return Verdict.NOT_BETTER if self.n >= 3 else Verdict.UNDECIDED
        lo, hi, achieved = self.interval
        line = 1.0 + min_gain
        if achieved >= self.confidence and lo > line:
            return Verdict.BETTER
        if hi < line or (self.n >= 3 and self.estimate <= 1.0):
            return Verdict.NOT_BETTER
        return Verdict.UNDECIDED

    def text(self) -> str:
        """``0.60x (0.55-0.66, 94% confidence, 6 pairs)``: the typical ratio with its
        interval."""
        if not self.pairs:
            return "not measured"
        how = "" if self.interleaved else ", not interleaved"
        zero = self.both_zero
        if zero == self.n:
            return f"no goodput in either arm ({self.n} pairs{how})"
        if zero:
            how += f"; {zero} more where neither met the SLO, not counted"
        lo, hi, achieved = self.interval
        span = (f"above {fmt_ratio(lo)}" if math.isinf(hi) or hi >= RATIO_CLIP
                else f"{fmt_ratio(lo, '')}-{fmt_ratio(hi)}")
        return (f"{fmt_ratio(self.estimate)} ({span}, {achieved:.0%} confidence, "
                f"{len(self.ratios)} pairs{how})")

    def to_dict(self) -> dict[str, float | int | bool | None]:
        """The figures a result carries (JSON-safe: an infinite ratio becomes None);
        ``pairs``: those the interval rests on (both-zero pairs not counted)."""
        lo, hi, achieved = self.interval
        return {"ratio": _finite(self.estimate), "low": _finite(lo), "high": _finite(hi),
                "confidence": round(achieved, 4), "pairs": len(self.ratios),
                "interleaved": self.interleaved}


def fmt_ratio(value: float, suffix: str = "x") -> str:
    """A ratio for a person: ``1.23x``, ``>100x`` for an infinite or huge one."""
    if math.isnan(value):
        return "?"
    if math.isinf(value) or value >= 100:
        return f">100{suffix}"
    return f"{value:.2f}{suffix}"


def _finite(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


@dataclass(frozen=True)
class Attainment:
    """How far one arm's runs are from the SLO: per run, its TTFT p95 and ITL p95 each over
    its objective (1.0 is on the SLO's edge, above 1 a miss), and the larger of the two."""

    ttft: tuple[float, ...]
    itl: tuple[float, ...]
    confidence: float = DEFAULT_CONFIDENCE

    @classmethod
    def of(cls, runs: Sequence[tuple[float, float]], ttft_ms: float, itl_ms: float,
           confidence: float = DEFAULT_CONFIDENCE) -> Attainment:
        """From ``(ttft_p95_ms, itl_p95_ms)`` per run and the two objectives (ms)."""
        return cls(tuple(t / ttft_ms for t, _ in runs), tuple(i / itl_ms for _, i in runs),
                   confidence)

    @property
    def ratios(self) -> list[float]:
        """Per run, the binding one of the two ratios."""
        return [max(t, i) for t, i in zip(self.ttft, self.itl, strict=True)]

    @property
    def n(self) -> int:
        return len(self.ttft)

    @property
    def _stats(self) -> tuple[float, float, float, float]:
        return walsh_interval(self.ratios, self.confidence)  # a 0 counts as 0.01x (clip)

    @property
    def typical(self) -> float:
        """The typical run's ratio (Hodges-Lehmann); ``nan`` without runs."""
        return self._stats[0]

    @property
    def interval(self) -> tuple[float, float, float]:
        """``(low, high, achieved confidence)`` of the typical ratio."""
        _est, lo, hi, achieved = self._stats
        return lo, hi, achieved

    def misses(self, margin: float = 0.0) -> bool:
        """The typical run misses the SLO by more than ``margin`` (a fraction of the
        objective), with the stated confidence."""
        if not self.n:
            return False
        lo, _hi, achieved = self.interval
        return achieved >= self.confidence and lo > 1.0 + margin

    def meets_typically(self) -> bool:
        """The typical run meets the SLO (the estimate at most 1; no confidence asked)."""
        return bool(self.n) and self.typical <= 1.0

    def typical_of(self, which: str) -> float:
        """The typical ratio of one objective (``"TTFT"`` or ``"ITL"``)."""
        return walsh_interval(self.ttft if which == "TTFT" else self.itl, self.confidence)[0]

    def binding(self) -> str:
        """``"TTFT"`` or ``"ITL"``: the objective its typical run is nearer to missing."""
        return "TTFT" if self.typical_of("TTFT") >= self.typical_of("ITL") else "ITL"

    def text(self) -> str:
        """``1.40x the objective (1.25-1.60x, 94% confidence, 6 runs; ITL binds)``."""
        if not self.n:
            return "not measured"
        lo, hi, achieved = self.interval
        return (f"{fmt_ratio(self.typical)} the objective ({fmt_ratio(lo, '')}-"
                f"{fmt_ratio(hi)}, {achieved:.0%} confidence, {self.n} runs; "
                f"{self.binding()} binds)")


def slo_verdict(reference: Attainment, candidate: Attainment, min_runs: int,
                margin: float = 0.0) -> Verdict:
    """Better when the reference misses the SLO by more than ``margin`` with confidence and
    the candidate, with at least ``min_runs`` runs, meets it in its typical run; undecided
    only while that can still happen (the candidate's typical run meets and the
    reference's misses by more than ``margin``, but runs or confidence are short); else
    not better (see the module)."""
    if not candidate.n:
        return Verdict.UNDECIDED
    if not candidate.meets_typically() or not (
            reference.n and reference.typical > 1.0 + margin):
        return Verdict.NOT_BETTER
    if candidate.n >= min_runs and reference.misses(margin):
        return Verdict.BETTER
    return Verdict.UNDECIDED

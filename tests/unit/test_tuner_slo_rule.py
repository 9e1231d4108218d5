"""Search version 6: where vLLM's defaults miss the SLO, a cap that meets it wins.

Two layers. The pure rule (:func:`~llm_operator.inpod.tuner.compare.slo_verdict`): a
candidate is better when the reference misses the SLO in its typical run by more than the
margin, with confidence, and the candidate meets it in its typical run. The whole search,
on a seeded engine whose truth is known: each run's latencies are the truth times one
speed factor ``exp(sigma z)`` and its goodput is all or nothing at the SLO (as on
AIConfigurator's landscape, benchmarks/tune_on_landscape.py), so a cap near the SLO's
edge misses it in some runs and the defaults meet it in some.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from llm_operator.inpod.tuner.compare import Attainment, Verdict, slo_verdict
from llm_operator.inpod.tuner.search import (
    SLO,
    Budget,
    Config,
    Measurement,
    Options,
    Space,
    Trial,
    Workload,
    gain_only_where_missed,
    ladder,
    search,
)

pytestmark = pytest.mark.unit


def att(itl: list[float], ttft: float = 0.1) -> Attainment:
    """An arm whose runs had these ITL p95 ratios to the objective (TTFT well inside)."""
    return Attainment(tuple(ttft for _ in itl), tuple(itl))


def test_a_cap_that_meets_where_the_defaults_surely_miss_is_better() -> None:
    defaults = att([1.35, 1.5, 1.28, 1.42, 1.6, 1.31])
    cap = att([0.8, 1.1, 0.9])  # one noisy run missed: its typical run meets
    assert slo_verdict(defaults, cap, min_runs=3, margin=0.05) is Verdict.BETTER
    assert defaults.binding() == "ITL"
    assert "the objective" in defaults.text() and "6 runs" in defaults.text()


def test_defaults_on_the_edge_are_not_called_a_miss() -> None:
    # Half their runs meet: the typical run is on the edge, not a sure miss.
    edge = att([0.92, 1.12, 0.97, 1.08, 1.01, 0.95])
    assert slo_verdict(edge, att([0.6, 0.7, 0.65]), 3, 0.05) is not Verdict.BETTER


def test_a_miss_by_less_than_the_margin_is_not_enough() -> None:
    barely = att([1.03, 1.04, 1.02, 1.04, 1.03, 1.04])  # a sure miss, by 2-4%
    assert barely.misses() and not barely.misses(0.05)
    assert slo_verdict(barely, att([0.6, 0.7, 0.65]), 3, 0.05) is not Verdict.BETTER


def test_a_candidate_that_typically_misses_is_not_better() -> None:
    defaults = att([1.4, 1.5, 1.45, 1.6, 1.38, 1.5])
    assert slo_verdict(defaults, att([1.2, 0.9, 1.1]), 3, 0.05) is Verdict.NOT_BETTER


def test_too_few_runs_of_the_candidate_decide_nothing() -> None:
    defaults = att([1.4, 1.5, 1.45, 1.6, 1.38, 1.5])
    assert slo_verdict(defaults, att([0.7]), 3, 0.05) is Verdict.UNDECIDED


def test_the_binding_objective_is_the_one_nearer_a_miss() -> None:
    queued = Attainment((2.1, 1.8, 2.4), (0.5, 0.6, 0.55))
    assert queued.binding() == "TTFT"
    assert queued.typical_of("TTFT") == pytest.approx(2.1, rel=0.1)


# --- the whole search on a known landscape -------------------------------------------------

C = 64
WL = Workload(input_tokens=512, output_tokens=256, concurrency=C)
SLO_ = SLO(ttft_ms=30_000, itl_ms=25)
LEVELS = ladder(1, C)


@dataclass
class QueueEngine:
    """A live-cap engine: ``b = min(C, cap)`` sequences run; ITL grows with the batch; the
    clients beyond it queue for ``(C / b - 1)`` request times (Little's law)."""

    itl_ms: float  # at one sequence
    itl_per_seq_ms: float
    request_s: float  # one request's time, the queue's unit
    sigma: float
    seed: int
    clock: list[float] = field(default_factory=lambda: [0.0])
    started: bool = False

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def truth(self, cap: int | None, speed: float = 1.0) -> tuple[float, float, float]:
        """(goodput tok/s, TTFT ms, ITL ms) at ``C`` clients."""
        b = min(C, cap or 1024)
        itl = (self.itl_ms + self.itl_per_seq_ms * b) * speed
        ttft = (0.2 + (C / b - 1) * self.request_s) * 1000 * speed
        tps = b * WL.output_tokens / (self.request_s * speed)
        good = tps if itl <= SLO_.itl_ms and ttft <= SLO_.ttft_ms else 0.0
        return good, ttft, itl

    def needs_start(self, config: Config) -> bool:
        return not self.started

    def start(self, config: Config) -> Session:
        startup = 0.0 if self.started else 60.0
        self.started = True
        self.clock[0] += startup
        return Session(self, config.max_num_seqs, startup)


@dataclass
class Session:
    eng: QueueEngine
    cap: int | None
    startup_s: float

    def measure(self, concurrency: int) -> Measurement:
        e = self.eng
        speed = math.exp(e.sigma * e.rng.gauss(0.0, 1.0))
        cap = self.cap if concurrency >= C else min(self.cap or 1024, concurrency)
        b = min(concurrency, cap or 1024)
        good, ttft, itl = e.truth(b, speed)
        if concurrency < C:  # a probe below C: no queue at the server
            ttft = 200.0 * speed
            good = b * WL.output_tokens / (e.request_s * speed) if itl <= SLO_.itl_ms else 0.0
        tps = b * WL.output_tokens / (e.request_s * speed)
        duration = 2 * concurrency / (b / (e.request_s * speed))
        e.clock[0] += duration
        return Measurement(concurrency=concurrency, duration_s=duration, goodput_tps=good,
                           output_tps=tps, request_rate=b / (e.request_s * speed),
                           ttft_p95_ms=ttft, itl_p95_ms=itl, completed=2 * concurrency,
                           running_max=float(b), running_mean=float(b))

    def close(self) -> None:
        return None


def run(eng: QueueEngine, hint: int | None = None, sweep_points: int = 5):
    space = Space(max_num_seqs=LEVELS, default_max_num_seqs=1024,
                  default_max_num_batched_tokens=8192)
    opts = Options(hint_max_num_seqs=hint, sweep_points=sweep_points)
    return search(eng, space, WL, SLO_, Budget(max_trials=12, max_seconds=1e9), opts,
                  clock=lambda: eng.clock[0])


def chosen(hint: int, seeds: range) -> Iterator[tuple[int, QueueEngine, Any, int | None]]:
    """The whole search per seed where the defaults miss the ITL objective (10 ms + 0.4 ms
    a sequence against 25 ms): (seed, engine, outcome, the cap kept)."""
    for seed in seeds:
        eng = QueueEngine(itl_ms=10, itl_per_seq_ms=0.4, request_s=8.0, sigma=0.32,
                          seed=seed)
        out = run(eng, hint=hint)
        yield seed, eng, out, out.best.config.max_num_seqs if out.best else None


def test_where_the_defaults_miss_the_itl_objective_the_choice_meets_it() -> None:
    # Defaults (64 running): ITL 35.6 ms, 1.42x the 25 ms objective; caps 16-32 meet both
    # (16: TTFT 24 s of the 30 s objective; 32: ITL 22.8 ms).
    met = sum(eng.truth(cap)[0] > 0 for _seed, eng, _out, cap in chosen(16, range(20)))
    # Seeded, so the same every run: 19 of 20 seeds with search versions 6 to 8, 15 of 20 with
    # version 5 on these seeds.
    assert met >= 18


def test_a_win_on_the_slo_says_so_in_the_decision() -> None:
    for seed in range(20):
        eng = QueueEngine(itl_ms=10, itl_per_seq_ms=0.4, request_s=8.0, sigma=0.32,
                          seed=seed)
        out = run(eng, hint=16)
        if out.best is not None and out.best.won_by == "slo":
            text = out.decision()
            assert "met the SLO in its typical run" in text
            assert "where vLLM's defaults missed it" in text and "ITL binds" in text
            return
    pytest.fail("no seed won on the SLO rule")


def test_from_a_cap_too_small_for_the_queue_the_search_walks_up() -> None:
    # The hint (8) queues 56 of 64 clients for 56 s against a 30 s objective; with the
    # sweep probing only the hint, the walk is what reaches the caps that meet (16-32).
    for seed in range(5):
        eng = QueueEngine(itl_ms=10, itl_per_seq_ms=0.4, request_s=8.0, sigma=0.05,
                          seed=seed)
        out = run(eng, hint=8, sweep_points=1)
        phases = [(t.config.max_num_seqs, t.phase) for t in out.trials]
        assert (8, "verify") in phases, phases
        walked = [cap for cap, phase in phases if phase == "walk"]
        assert walked and walked[0] in (16, 20, 24), phases
        assert out.best is not None and eng.truth(out.best.config.max_num_seqs)[0] > 0


def test_defaults_inside_the_slo_are_seldom_traded_for_a_slower_cap() -> None:
    # Defaults at ITL 23.2 ms (0.93x the objective) and 21.5 ms (0.86x): they meet, but
    # with 0.32 log-sd per run they miss in 41% and 32% of runs, so the goodput pairs
    # against a smaller cap are often inf: a cap with a quarter of their goodput then won
    # on the goodput interval (version 8: 5 of these 80 seeds end below exp(-0.32) = 0.73
    # of the defaults' noise-free goodput, goal (c) of tune-landscape). Version 9 leaves a
    # slower cap's win to the SLO rule, whose per-run ratios to the objective tell a miss
    # from the edge better than all-or-nothing goodput: 2 of 80, both on the SLO rule.
    below = []
    for per_seq in (0.206, 0.18):
        for seed in range(40):
            eng = QueueEngine(itl_ms=10, itl_per_seq_ms=per_seq, request_s=8.0, sigma=0.32,
                              seed=seed)
            out = run(eng, hint=16)
            cap = out.best.config.max_num_seqs if out.best else None
            if eng.truth(cap)[0] < math.exp(-0.32) * eng.truth(None)[0]:
                below.append((per_seq, seed, cap, out.best.won_by if out.best else None))
    assert len(below) <= 2, below
    assert all(won == "slo" for *_x, won in below), below


def test_a_slower_cap_kept_out_on_goodput_says_why() -> None:
    # Seed 23, defaults at 0.93x: --max-num-seqs 32's goodput interval is far above 1.05x
    # (the defaults missed in most pairs), but it runs 1,075 against their 1,880 tok/s
    # and their 19 runs do not miss the SLO with confidence. Version 8 kept 32 (0.50 of
    # their noise-free goodput); the decision must say why the interval did not win.
    eng = QueueEngine(itl_ms=10, itl_per_seq_ms=0.206, request_s=8.0, sigma=0.32, seed=23)
    out = run(eng, hint=16)
    assert out.best is not None and out.best.config.max_num_seqs is None, out.decision()
    text = out.decision()
    assert "but slower" in text and "output tok/s" in text, text
    assert "does not miss it with confidence; kept vLLM's defaults" in text, text


def test_a_win_below_the_hint_does_not_stop_short_of_it() -> None:
    # ITL 10 ms + 0.4 ms a sequence against 25 ms: the best cap is 32 (the largest that
    # meets), the planner's hint. The sweep's noisy probes often rank 16 first, which
    # wins against the defaults (1.42x the ITL objective); a step of one or two levels
    # up is then too small a gain for the paired interval in 12 pairs. Version 11
    # compares the hint with the defaults too: 31 of 40 seeds end at 32 (version 10:
    # 24; 12 of its 40 kept 16, half the best goodput).
    at_best = 0
    for seed, _eng, out, cap in chosen(32, range(40)):
        at_best += cap == 32
        if seed == 3:
            steps = [(t.config.max_num_seqs, t.phase, t.won_by) for t in out.trials[:3]]
            assert steps == [(None, "baseline", None), (16, "verify", "slo"),
                             (32, "verify", "slo")], steps
            assert any("won below the planner's hint" in n for n in out.notes), out.notes
    assert at_best >= 30, at_best


def arm(index: int, tps: float, pairs: list[tuple[float, float]] = ()) -> Trial:
    """A trial whose runs ran at ``tps`` output tokens/s, with ``pairs`` against index 0."""
    runs = [Measurement(concurrency=C, duration_s=30.0, goodput_tps=0.0, output_tps=tps,
                        request_rate=1.0, ttft_p95_ms=1000.0, itl_p95_ms=30.0, completed=48)
            for _ in range(max(3, len(pairs)))]
    return Trial(index=index, config=Config(max_num_seqs=24 if index else None),
                 phase="verify" if index else "baseline", runs=runs,
                 against=0 if index else None, pairs=list(pairs))


def test_a_slower_cap_ahead_in_every_pair_keeps_its_goodput_win() -> None:
    # The real CPU engine (tests/vllm/test_tuner.py, CI): goodput counts requests, the
    # defaults had none in any of 6 pairs, --max-num-seqs 24 had 487 tok/s of it at 1,058
    # against their 1,120 output tok/s. Version 11 called that a gain only in the
    # defaults' missed runs and kept them; it is a gain in every run.
    defaults = arm(0, 1120.0)
    cap = arm(1, 1058.0, [(0.0, 487.0)] * 6)
    assert not gain_only_where_missed(cap, defaults, 0.05)
    # The landscape's edge (tune-landscape-50): the defaults met in some pairs, and there
    # the cap had a third of their goodput; the rest are inf.
    edge = arm(1, 960.0, [(2769.0, 962.0), (0.0, 962.0), (0.0, 962.0), (2700.0, 950.0),
                          (0.0, 962.0), (0.0, 970.0)])
    assert gain_only_where_missed(edge, arm(0, 2760.0), 0.05)
    # Defaults with no goodput in any pair, a cap with some in 5 of 12 (its typical pair
    # has none; the interval, leaving both-zero pairs out, read >100x: tune-landscape-70,
    # version 12 kept such caps, which miss the SLO).
    rare = arm(1, 1058.0, [(0.0, 487.0)] * 5 + [(0.0, 0.0)] * 7)
    assert gain_only_where_missed(rare, defaults, 0.05)
    # Not slower (within min-gain): no veto either way.
    assert not gain_only_where_missed(arm(1, 2700.0, edge.pairs), arm(0, 2760.0), 0.05)


def test_a_cap_that_misses_both_objectives_ends_the_walk() -> None:
    # ITL 33 ms at 8 sequences (25 ms objective) and a 56 s queue (30 s): a larger cap only
    # raises the ITL, a smaller one only lengthens the queue; nothing meets the SLO.
    for seed in range(5):
        eng = QueueEngine(itl_ms=30, itl_per_seq_ms=0.4, request_s=8.0, sigma=0.05,
                          seed=seed)
        out = run(eng, hint=8, sweep_points=1)
        assert [t.phase for t in out.trials if t.phase == "walk"] == [], out.notes
        assert any("missed both objectives" in n for n in out.notes), out.notes
        assert out.best is not None and out.best.config.max_num_seqs is None

"""The tuner's decisions against a seeded synthetic engine whose truth is known.

Each scenario runs the whole search (baseline, concurrency sweep, verification, final
confirmation) 20 times with different seeds against an engine with two settings that
matter: vLLM's defaults and ``--max-num-seqs 4``, each with a true goodput. Measurements
are that truth times two kinds of noise:

- the machine's load, shared by whatever runs at that moment: a slow random walk in log
  space (each measurement's load is 0.9 of the last one's deviation plus fresh noise),
  scaled so that one arm's runs spread by about the stated percentage;
- each run's own noise, independent of the other arm: small for a capped engine, large
  for the defaults under KV pressure (their preemption storms are their own).

What a platform team must be able to rely on (issue 32): defaults that are better but
noisy are kept; a candidate truly 20% better under 30% noise is found; equal arms keep the
defaults; and no reported gain is an interval that includes 1.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import pytest

from llm_operator.inpod.tuner.search import (
    SLO,
    Budget,
    Config,
    Measurement,
    Options,
    Space,
    Workload,
    search,
)

WL = Workload(input_tokens=128, output_tokens=256, concurrency=32)
SLO_ = SLO(ttft_ms=2000, itl_ms=100)
CAP = 4
SEEDS = range(20)
RUN_S = 20.0  # seconds one measurement takes


@dataclass
class ArmEngine:
    """A live-cap engine (one server, caps moved without a start) with known truth."""

    truth: dict[int | None, float]  # max-num-seqs -> true goodput (tok/s); None: defaults
    own_noise: dict[int | None, float]  # log-sd of each run's own noise, per arm
    load_sd: float  # stationary log-sd of the machine's load
    seed: int
    clock: list[float] = field(default_factory=lambda: [0.0])
    measured: list[tuple[int | None, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.load = self.rng.gauss(0, self.load_sd)
        self.started = False

    def needs_start(self, config: Config) -> bool:
        return not self.started

    def now(self) -> float:
        return self.clock[0]

    def start(self, config: Config) -> _Session:
        startup = 0.0 if self.started else 40.0
        self.clock[0] += startup
        self.started = True
        return _Session(self, config.max_num_seqs, startup)

    def goodput(self, cap: int | None, clients: int) -> float:
        # AR(1) load with correlation 0.9 and the stated stationary spread.
        self.load = 0.9 * self.load + self.rng.gauss(0, self.load_sd * math.sqrt(1 - 0.81))
        arm = cap if cap in self.truth else (None if cap is None or cap >= clients else CAP)
        noise = self.rng.gauss(0, self.own_noise[arm])
        g = self.truth[arm] * math.exp(self.load + noise)
        self.measured.append((arm, g))
        return g


@dataclass
class _Session:
    engine: ArmEngine
    cap: int | None
    startup_s: float

    def measure(self, concurrency: int) -> Measurement:
        cap = self.cap if self.cap is not None else concurrency if concurrency < WL.concurrency \
            else None
        g = self.engine.goodput(cap, concurrency)
        self.engine.clock[0] += RUN_S
        return Measurement(concurrency=concurrency, duration_s=RUN_S, goodput_tps=g,
                           output_tps=g, request_rate=g / WL.output_tokens,
                           ttft_p95_ms=50.0, itl_p95_ms=10.0, completed=64)

    def close(self) -> None:
        return None


def decide(engine: ArmEngine) -> tuple[int | None, object]:
    space = Space(max_num_seqs=(CAP,), default_max_num_seqs=256)
    out = search(engine, space, WL, SLO_, Budget(max_trials=12, max_seconds=3600),
                 Options(), clock=engine.now)
    assert out.best is not None
    cmp = out.versus_defaults
    if cmp is not None:  # a gain is only ever reported with its interval above 1 + gain
        lo, _hi, achieved = cmp.interval
        assert lo > 1.05 and achieved >= 0.9, out.decision()
    return out.best.config.max_num_seqs, out


def kept_defaults(truth: dict[int | None, float], own: dict[int | None, float],
                  load_sd: float) -> int:
    """Over :data:`SEEDS`, how many runs kept vLLM's defaults."""
    return sum(decide(ArmEngine(truth, own, load_sd, seed))[0] is None for seed in SEEDS)


def test_better_but_noisy_defaults_are_kept() -> None:
    # The demo (issue 32): defaults 6,770 / 3,330 / 5,855 tok/s at 32 clients (spread
    # 59%, their own preemption storms), --max-num-seqs 4 at 3,569 / 3,419. Scoring the
    # defaults by their worst run chose the cap and called it 1.05x.
    kept = kept_defaults({None: 5300.0, CAP: 3494.0}, {None: 0.30, CAP: 0.03}, load_sd=0.10)
    assert kept >= 19


def test_a_candidate_truly_20_percent_better_under_30_percent_noise_is_found() -> None:
    # load_sd 0.18: three runs of one arm spread by about 30% (1.69 sd); each run's own
    # noise 5%.
    kept = kept_defaults({None: 1000.0, CAP: 1200.0}, {None: 0.05, CAP: 0.05}, load_sd=0.18)
    assert len(SEEDS) - kept >= 19


def test_equal_arms_keep_the_defaults() -> None:
    kept = kept_defaults({None: 1000.0, CAP: 1000.0}, {None: 0.05, CAP: 0.05}, load_sd=0.18)
    assert kept >= 19


@pytest.mark.parametrize("truth", [1.0, 1.2, 0.66])
def test_what_a_person_reads_carries_the_interval_and_what_was_kept(truth: float) -> None:
    engine = ArmEngine({None: 1000.0, CAP: 1000.0 * truth}, {None: 0.05, CAP: 0.05},
                       load_sd=0.05, seed=3)
    best, out = decide(engine)
    text = out.decision()  # type: ignore[attr-defined]
    assert text.startswith("--max-num-seqs 4: ") and "confidence" in text and "pairs" in text
    if best is None:
        assert text.endswith("kept vLLM's defaults (interval not above 1.05x)")
    else:
        assert text.endswith("kept --max-num-seqs 4 (interval above 1.05x)")


def test_pairs_are_interleaved_in_alternating_order_on_one_server() -> None:
    engine = ArmEngine({None: 1000.0, CAP: 1200.0}, {None: 0.05, CAP: 0.05}, 0.05, seed=1)
    _best, out = decide(engine)
    verify = [t for t in out.trials if t.phase == "verify"][0]  # type: ignore[attr-defined]
    assert verify.interleaved and len(verify.pairs) >= 3
    # The arms' measurements alternate AB BA AB ...: after the baseline's own runs and
    # its probe, the order is defaults, cap, cap, defaults, defaults, cap, ...
    arms = [arm for arm, _g in engine.measured][4:4 + 6]
    assert arms == [None, CAP, CAP, None, None, CAP]

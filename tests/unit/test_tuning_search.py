"""The tuner's search logic on synthetic response surfaces (pure, no vLLM).

The surfaces model what the real CPU engine showed (tests/vllm): a KV cache that holds
``K`` tokens, so a running batch above ``K / (input + output)`` preempts and wastes
work; steps that get slower with the batch; and TTFT that grows with the queue in front
of a capped server. The search must find the grid's best region with a fraction of the
grid's server starts, never vary a pinned knob, keep partial results when the budget
runs out and treat noisy measurements with suspicion.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field

import pytest

from llm_operator.inpod.tuner.result import (
    TERMINATION_LIMIT,
    ResultParseError,
    parse_result,
    result_from_outcome,
)
from llm_operator.inpod.tuner.search import (
    SLO,
    Budget,
    Config,
    Interrupted,
    Measurement,
    Options,
    RequestSample,
    Space,
    TrialFailed,
    Workload,
    goodput,
    grid_search,
    interpolate,
    ladder,
    percentile,
    predict_cap_goodput,
    search,
    summarize,
    sweep_concurrencies,
)
from llm_operator.tuning.results import accepted_message

WL = Workload(input_tokens=128, output_tokens=256, concurrency=48)
SLO_ = SLO(ttft_ms=15000, itl_ms=100)
DEFAULT_MNS, DEFAULT_MNBT = 128, 2048


@dataclass
class Surface:
    """A closed-loop serving model with a KV limit (all times in seconds).

    The running batch is bounded by the cap and by what the KV cache admits (prompts
    plus half their output on average); above what fits for a whole request the engine
    preempts, and the recomputation wastes work. Clients beyond the running batch wait
    in the server's queue, which the TTFT shows.
    """

    kv_tokens: int = 4096
    step_base_s: float = 0.002
    step_per_seq_s: float = 0.0003
    prefill_s_per_token: float = 0.00002
    thrash: float = 1.5  # throughput x (fit / running) ** thrash above the fit
    mnbt_itl_gain: float = 0.0  # ITL growth per extra default-size of batched tokens
    noise: float = 0.02
    fail_configs: tuple[Config, ...] = ()

    def measure(self, cfg: Config, clients: int, rng: random.Random) -> Measurement:
        mns = cfg.max_num_seqs or DEFAULT_MNS
        mnbt = cfg.max_num_batched_tokens or DEFAULT_MNBT
        admitted = self.kv_tokens / (WL.input_tokens + WL.output_tokens / 2)
        fit = self.kv_tokens / (WL.input_tokens + WL.output_tokens)
        running = min(clients, mns, max(1, int(admitted)))
        step = self.step_base_s + self.step_per_seq_s * running
        step *= 1 + self.mnbt_itl_gain * max(0.0, (mnbt / DEFAULT_MNBT) - 1)
        eff = 1.0 if running <= fit else (fit / running) ** self.thrash
        tps = running / step * eff * (1 + rng.gauss(0, self.noise))
        req_rate = tps / WL.output_tokens
        queue_s = (clients - running) / req_rate
        ttft = WL.input_tokens * self.prefill_s_per_token * running * (
            DEFAULT_MNBT / mnbt) ** 0.5 + step + queue_s
        itl95 = step * 1.2
        n = max(8, 2 * clients)
        duration = n / req_rate
        reqs = [
            RequestSample(
                ttft_s=ttft * rng.uniform(0.8, 1.2),
                itl_p95_s=itl95 * rng.uniform(0.9, 1.1),
                output_tokens=WL.output_tokens,
            )
            for _ in range(n)
        ]
        return summarize(clients, reqs, duration, SLO_,
                         server={"running_max": running, "samples": 10,
                                 "preemptions": max(0, running - fit),
                                 "kv_tokens": self.kv_tokens})


@dataclass
class FakeSession:
    surface: Surface
    cfg: Config
    rng: random.Random
    clock: list[float]
    startup_s: float = 40.0

    def measure(self, concurrency: int) -> Measurement:
        m = self.surface.measure(self.cfg, concurrency, self.rng)
        self.clock[0] += m.duration_s
        return m

    def close(self) -> None:
        return None


@dataclass
class FakeEvaluator:
    surface: Surface
    seed: int = 1
    clock: list[float] = field(default_factory=lambda: [0.0])
    started: list[Config] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def start(self, config: Config) -> FakeSession:
        self.started.append(config)
        self.clock[0] += 40.0  # a server start
        if config in self.surface.fail_configs:
            raise TrialFailed("server did not start: out of memory")
        return FakeSession(self.surface, config, self.rng, self.clock)

    def now(self) -> float:
        return self.clock[0]


def kv_space() -> Space:
    return Space(
        max_num_seqs=ladder(1, WL.concurrency),
        max_num_batched_tokens=(512, 1024, 2048, 4096, 8192),
        default_max_num_seqs=DEFAULT_MNS,
        default_max_num_batched_tokens=DEFAULT_MNBT,
    )


def run(surface: Surface, space: Space | None = None, budget: Budget | None = None,
        opts: Options | None = None, seed: int = 1):
    ev = FakeEvaluator(surface, seed=seed)
    out = search(ev, space or kv_space(), WL, SLO_, budget or Budget(12, 1e9),
                 opts or Options(), clock=ev.now)
    return out, ev


def run_grid(surface: Surface, space: Space | None = None, seed: int = 1):
    ev = FakeEvaluator(surface, seed=seed)
    return grid_search(ev, space or kv_space(), WL, SLO_, opts=Options(), clock=ev.now), ev


# --- whole searches --------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_finds_the_grids_best_region_with_a_fraction_of_its_starts(seed: int) -> None:
    out, ev = run(Surface(), seed=seed)
    grid, gev = run_grid(Surface(), seed=seed)
    assert out.best is not None and grid.best is not None
    fit = 4096 // (WL.input_tokens + WL.output_tokens)  # 10 sequences fit the KV cache
    # The winner caps the batch near what the KV cache holds, far below the default.
    assert out.best.config.max_num_seqs is not None
    assert fit * 0.6 <= out.best.config.max_num_seqs <= fit * 1.6
    assert out.best.score >= 0.95 * grid.best.score
    assert out.improvement is not None and out.improvement > 1.5
    # The baseline's running batch never passed what the KV cache admits (16): a cap at or
    # above that cannot bind, so no start is spent on one.
    assert all(c.max_num_seqs is None or c.max_num_seqs <= 16 for c in ev.started)
    assert len(ev.started) <= 0.35 * len(gev.started)
    assert out.wall_s <= 0.35 * grid.wall_s
    assert out.complete


def test_pinned_max_num_seqs_is_never_varied() -> None:
    # 32 x 128-token prompts can fill 4,096 tokens a step: a larger budget is worth a try.
    space = Space(max_num_seqs=(), max_num_batched_tokens=(512, 1024, 2048, 4096),
                  default_max_num_seqs=32, default_max_num_batched_tokens=DEFAULT_MNBT)
    out, ev = run(Surface(mnbt_itl_gain=0.5), space=space)
    assert all(c.max_num_seqs is None for c in ev.started)
    assert any(c.max_num_batched_tokens is not None for c in ev.started)
    assert out.predictions == {}  # no concurrency sweep for a pinned cap
    assert out.baseline is not None and out.baseline.probes == []


@pytest.mark.parametrize(("mns", "input_tokens", "tries_larger"), [
    (16, 128, False),  # 16 prompts of 128 = 2,048: the default budget schedules every step
    (16, 130, False),  # 2,080 tokens: 1.6% more than the budget, below the 5% a move needs
    (16, 256, True),   # 4,096: half of a full step's prompts would wait for the next
])
def test_no_restart_for_a_batched_token_budget_the_batch_cannot_use(
        mns: int, input_tokens: int, tries_larger: bool) -> None:
    """Moving up, the search spends a server start on a larger max-num-batched-tokens only
    when max-num-seqs prompts can fill more than the current budget; otherwise it says why.
    (The synthetic surface rewards any larger budget, as a real engine would not.)"""
    space = Space(max_num_seqs=(), max_num_batched_tokens=(1024, 2048, 4096, 8192),
                  default_max_num_seqs=mns, default_max_num_batched_tokens=DEFAULT_MNBT)
    wl = Workload(input_tokens=input_tokens, output_tokens=256, concurrency=mns)
    ev = FakeEvaluator(Surface(kv_tokens=10**6))
    out = search(ev, space, wl, SLO_, Budget(12, 1e9), Options(), clock=ev.now)
    larger = [c for c in ev.started if (c.max_num_batched_tokens or 0) > DEFAULT_MNBT]
    assert bool(larger) == tries_larger, ev.started
    if not tries_larger:
        assert ev.started == [Config()]  # the baseline's server only
    said = [n for n in out.notes if "max-num-batched-tokens above 2048 not tried" in n]
    assert bool(said) != tries_larger
    if said:
        assert f"needs at most {mns * input_tokens} tokens" in said[0]


def test_batched_tokens_move_toward_the_binding_constraint() -> None:
    # ITL grows with bigger batched-token steps, so the search must not pick a larger one.
    space = Space(max_num_seqs=(), max_num_batched_tokens=(512, 1024, 2048, 4096, 8192),
                  default_max_num_seqs=8, default_max_num_batched_tokens=DEFAULT_MNBT)
    out, _ = run(Surface(mnbt_itl_gain=3.0, kv_tokens=10**6, step_base_s=0.03), space=space)
    assert out.best is not None
    best = out.best.config.max_num_batched_tokens or DEFAULT_MNBT
    assert best <= DEFAULT_MNBT


def test_trial_budget_keeps_the_best_so_far_and_says_partial() -> None:
    out, ev = run(Surface(), budget=Budget(max_trials=2, max_seconds=1e9))
    assert len(ev.started) == 2
    assert not out.complete and "trial budget" in out.stop_reason
    assert out.best is not None and out.baseline is not None
    assert out.best.score >= out.baseline.score
    res = result_from_outcome(out, {}, {})
    assert res.state == "Partial" and res.best is not None


@dataclass
class FakeLiveEvaluator(FakeEvaluator):
    """One server start per max-num-batched-tokens; a cap is set on the running server
    (the live admission cap), as runner.LiveCapEvaluator does."""

    batched: int | None = -1

    def needs_start(self, config: Config) -> bool:
        return config.max_num_batched_tokens != self.batched

    starts: int = 0

    def start(self, config: Config) -> FakeSession:
        if not self.needs_start(config):
            self.started.append(config)
            return FakeSession(self.surface, config, self.rng, self.clock, startup_s=0.0)
        self.batched = config.max_num_batched_tokens
        self.starts += 1
        return super().start(config)


def test_a_time_budget_buys_more_trials_when_the_cap_moves_on_a_running_server() -> None:
    # The budget holds one server start (40 s) and the baseline's runs and probes, with
    # 90 s more. A run takes about 18 s. With a start per trial the baseline takes 5 runs
    # (its runs pair with a candidate's), and a candidate would need a start and 3 runs
    # (95 s): the search stops after the baseline, saying why. With a live cap the
    # baseline takes 3 runs, and a candidate's 3 interleaved pairs need no start
    # (6 runs, 111 s, within the 2 runs saved plus 90 s): the search goes on.
    space = Space(max_num_seqs=ladder(1, WL.concurrency), max_num_batched_tokens=(),
                  default_max_num_seqs=DEFAULT_MNS, default_max_num_batched_tokens=DEFAULT_MNBT)
    base_ev = FakeEvaluator(Surface())
    search(base_ev, space, WL, SLO_, Budget(1, 1e9), Options(), clock=base_ev.now)
    budget_s = base_ev.now() + 90.0
    per_start = FakeEvaluator(Surface())
    out_start = search(per_start, space, WL, SLO_, Budget(12, budget_s), Options(),
                       clock=per_start.now)
    live = FakeLiveEvaluator(Surface())
    out_live = search(live, space, WL, SLO_, Budget(12, budget_s), Options(), clock=live.now)
    assert len(per_start.started) == 1 and "next trial needs" in out_start.stop_reason
    assert any(c.max_num_seqs for c in live.started)
    assert live.starts == 1  # the caps moved on the one running server
    assert out_live.best is not None and out_start.best is not None
    assert out_live.best.score >= out_start.best.score


@dataclass
class StoppedEvaluator(FakeEvaluator):
    """Raises :class:`Interrupted` (what the tuner's SIGTERM handler raises) during the
    ``at``-th server's measurements, as a terminated pod would."""

    at: int = 3

    def start(self, config: Config) -> FakeSession:
        session = super().start(config)
        if len(self.started) == self.at:
            def stop(concurrency: int) -> Measurement:
                raise Interrupted("terminated (SIGTERM)")
            session.measure = stop  # type: ignore[method-assign]
        return session


def test_a_stopped_search_keeps_the_best_so_far_and_says_how_far_it_got() -> None:
    ev = StoppedEvaluator(Surface(), at=3)
    out = search(ev, kv_space(), WL, SLO_, Budget(12, 1e9), Options(), clock=ev.now)
    assert not out.complete and len(out.trials) == 3
    assert "SIGTERM" in out.stop_reason and "3 trial(s)" in out.stop_reason
    assert out.baseline is not None and out.baseline.ok and out.best is not None
    assert out.trials[-1].error is not None and not out.trials[-1].ok  # cut: no evidence
    result = result_from_outcome(out, {}, {})
    assert result.state == "Partial" and result.trials == 3
    assert parse_result(result.to_message()).reason == out.stop_reason


def test_a_search_stopped_in_its_baseline_reports_failure_not_a_result() -> None:
    ev = StoppedEvaluator(Surface(), at=1)
    out = search(ev, kv_space(), WL, SLO_, Budget(12, 1e9), Options(), clock=ev.now)
    assert out.best is None and result_from_outcome(out, {}, {}).state == "Failed"
    grid = grid_search(StoppedEvaluator(Surface(), at=2), kv_space(), WL, SLO_)
    assert not grid.complete and "SIGTERM" in grid.stop_reason


def test_time_budget_stops_before_a_trial_that_would_overrun() -> None:
    full, _ = run(Surface())
    base_wall = full.trials[0].wall_s
    out, ev = run(Surface(), budget=Budget(max_trials=50, max_seconds=base_wall + 30))
    assert len(ev.started) == 1  # the next start (40 s + runs) would not fit
    assert not out.complete and "time budget" in out.stop_reason
    assert out.best is out.baseline


def test_a_baseline_that_would_overrun_the_budget_stops_within_it() -> None:
    """The demo's Job on real nodes (2026-12-06): a 180 s budget, a 65 s start and runs
    of about 70 s; the baseline ran its 3 runs to 282 s and compared nothing. Now it stops
    where its next run would overrun, says so, and keeps what it measured."""
    full, _ = run(Surface())
    run_s = max(m.duration_s for m in full.trials[0].runs)
    budget_s = 40.0 + 1.5 * run_s  # the start and one run fit, a second does not
    out, ev = run(Surface(), budget=Budget(max_trials=2, max_seconds=budget_s))
    assert len(ev.started) == 1 and len(out.baseline.runs) == 1
    assert ev.now() <= budget_s  # the Job's whole time, within the budget
    assert out.best is out.baseline and not out.complete
    assert "time budget" in out.stop_reason and "the baseline's run 2 of 5" in out.stop_reason
    # How much a decision needs: a start and the baseline's runs (5 without the live cap:
    # the pairs a decision needs), and another start and as many to pair with them.
    need_min = math.ceil(2 * (40.0 + 5 * run_s) / 60)
    assert f"a comparison with vLLM's defaults needs about {need_min} min" in out.stop_reason
    # What the LLMService says: nothing compared, and the field that buys a comparison.
    message = accepted_message(result_from_outcome(out, {}, {}), {}, "job")
    assert ("nothing was compared with them: raise spec.tuning.maxDurationMinutes"
            in message), message
    assert "the defaults were best" not in message
    assert any("baseline cut short by the time budget after 1 of 5 runs" in n
               for n in out.notes), out.notes
    # With room for three runs it measures them (more only where a run still fits).
    roomy, _ = run(Surface(), budget=Budget(max_trials=2, max_seconds=40.0 + 3.5 * run_s))
    assert len(roomy.baseline.runs) == 3
    # With the live cap the baseline plans 3 runs, and a comparison is 3 pairs on its server.
    live = FakeLiveEvaluator(Surface())
    cut = search(live, kv_space(), WL, SLO_, Budget(2, budget_s), Options(), clock=live.now)
    live_run_s = cut.baseline.runs[0].duration_s
    assert "the baseline's run 2 of 3" in cut.stop_reason, cut.stop_reason
    need_live = math.ceil((40.0 + 3 * live_run_s + 6 * live_run_s) / 60)
    assert f"needs about {need_live} min" in cut.stop_reason, cut.stop_reason


def test_a_config_that_cannot_start_is_recorded_and_the_search_goes_on() -> None:
    full, _ = run(Surface())
    assert full.best is not None
    bad = full.best.config  # make the would-be winner fail to start
    out, _ = run(Surface(fail_configs=(bad,)))
    failed = [t for t in out.trials if t.error]
    assert failed and "out of memory" in (failed[0].error or "")
    assert out.best is not None and out.best.config != bad
    assert out.best.score > out.baseline.score  # type: ignore[union-attr]


def test_noisy_trials_are_flagged_and_scored_by_their_median_never_their_worst_run(
) -> None:
    out, _ = run(Surface(noise=0.4), opts=Options(noise_threshold=0.1))
    noisy = [t for t in out.trials if t.noisy]
    assert noisy, "with 40% noise some trial must be flagged"
    for t in noisy:
        assert t.score == t.median > min(m.goodput_tps for m in t.runs)


def test_flat_surface_reports_no_big_win() -> None:
    # A KV cache large enough for every client: the default (no cap) is already best.
    out, _ = run(Surface(kv_tokens=10**6, noise=0.01))
    assert out.improvement is not None
    assert out.improvement < 1.1  # nothing to gain: do not claim a win
    assert len(out.trials) <= 4


def test_given_server_mode_predicts_without_restarts() -> None:
    out, ev = run(Surface(), opts=Options(can_restart=False))
    assert len(ev.started) == 1 and ev.started[0] == Config()
    assert out.predicted_best is not None
    cap, pred = out.predicted_best
    assert cap < WL.concurrency and pred > out.baseline.score  # type: ignore[union-attr]
    res = result_from_outcome(out, {}, {})
    assert res.predicted is not None and res.predicted.max_num_seqs == cap


# --- pieces ----------------------------------------------------------------------------


def test_predicted_goodput_adds_the_queue_wait_of_a_capped_server() -> None:
    # 8 clients, 2 req/s, each request TTFT 0.5 s: with 48 clients and cap 8, 40 queue
    # in the server and wait 40 / 2 = 20 s: nobody meets a 2 s TTFT objective.
    reqs = tuple(RequestSample(0.5, 0.02, 100) for _ in range(16))
    probe = Measurement(concurrency=8, duration_s=8.0, goodput_tps=200, output_tps=200,
                        request_rate=2.0, ttft_p95_ms=500, itl_p95_ms=20, completed=16,
                        requests=reqs)
    assert predict_cap_goodput(probe, 8, SLO(2000, 100)) == pytest.approx(200)
    assert predict_cap_goodput(probe, 48, SLO(2000, 100)) == 0
    assert predict_cap_goodput(probe, 48, SLO(25000, 100)) == pytest.approx(200)
    # 10 clients: 2 queue, 1 s wait: 1.5 s TTFT still meets 2 s.
    assert predict_cap_goodput(probe, 10, SLO(2000, 100)) == pytest.approx(200)


def test_goodput_counts_only_requests_within_both_objectives() -> None:
    reqs = [RequestSample(0.1, 0.05, 10), RequestSample(3.0, 0.05, 10),
            RequestSample(0.1, 0.2, 10), RequestSample(0.1, 0.05, 10, ok=False)]
    assert goodput(reqs, 1.0, SLO(2000, 100)) == 10
    m = summarize(4, reqs, 1.0, SLO(2000, 100))
    assert m.completed == 3 and m.failed == 1
    assert m.ttft_miss == 1 and m.itl_miss == 1
    assert m.good_fraction == 0.25


def test_sweep_covers_the_kv_cap_and_halvings_below_the_workload() -> None:
    levels = ladder(1, 48)
    pts = sweep_concurrencies(48, levels, Options(), kv_cap=10, cap_limit=128)
    assert 10 in pts and 24 in pts and 12 in pts
    assert all(p < 48 for p in pts) and pts == sorted(pts, reverse=True)
    assert len(pts) <= Options().sweep_points
    assert sweep_concurrencies(48, levels, Options(), kv_cap=None, cap_limit=16)[0] <= 16


def test_interpolate_and_percentile() -> None:
    assert interpolate({8: 100.0, 32: 200.0}, 16) == pytest.approx(150.0)
    assert interpolate({8: 100.0}, 4) is None
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([], 95) == 0.0


def test_grid_lists_only_valid_cells() -> None:
    space = Space(max_num_seqs=(8, 64, 512), max_num_batched_tokens=(256, 2048))
    assert Config(512, 256) not in space.grid()
    assert Config(8, 256) in space.grid()


def test_grid_changes_the_batched_token_level_once_per_level() -> None:
    """With the live cap only max-num-batched-tokens needs a server start: the grid runs
    every cap of a level before the next level, the defaults' level first (the baseline's
    server), so it starts one server per level, not one per cell."""
    space = Space(max_num_seqs=(2, 4, 8), max_num_batched_tokens=(512, 2048, 4096),
                  default_max_num_batched_tokens=2048)
    levels = [c.max_num_batched_tokens for c in space.grid()]
    assert levels == [2048] * 3 + [512] * 3 + [4096] * 3
    assert sum(1 for a, b in zip([None, *levels], levels, strict=False) if a != b) == 3


# --- the result ------------------------------------------------------------------------


def test_termination_message_fits_and_round_trips() -> None:
    out, _ = run(Surface(), budget=Budget(max_trials=60, max_seconds=1e9),
                 opts=Options(min_gain=-1.0))  # keep moving: many trials
    res = result_from_outcome(out, {"ttftMs": 2000, "itlP95Ms": 100},
                              {"inputTokens": 128, "outputTokens": 256, "concurrency": 48},
                              fingerprint="abc123")
    msg = res.to_message()
    assert len(msg.encode()) <= TERMINATION_LIMIT
    back = parse_result(msg)
    assert back.state == res.state and back.fingerprint == "abc123"
    assert back.best == res.best and back.improvement == res.improvement
    # A huge table is cut, never the verdict.
    big = res.model_copy(update={"table": res.table * 50})
    small = big.to_message(limit=1500)
    assert len(small.encode()) <= 1500
    assert parse_result(small).best == res.best


def test_parse_result_reads_a_log_fallback_and_rejects_garbage() -> None:
    out, _ = run(Surface(), budget=Budget(max_trials=2, max_seconds=1e9))
    msg = result_from_outcome(out, {}, {}).to_message()
    log = "INFO starting\nINFO trial 1\n" + msg  # FallbackToLogsOnError: log tail
    assert parse_result(log).state == "Partial"
    with pytest.raises(ResultParseError, match="Traceback|not a tuning result"):
        parse_result("Traceback (most recent call last):\n  RuntimeError: boom")
    with pytest.raises(ResultParseError):
        parse_result(json.dumps({"kind": "something-else"}))
    with pytest.raises(ResultParseError):
        parse_result("")


def test_a_given_server_is_measured_only_the_repeats_it_was_asked_for() -> None:
    # --url mode compares nothing: its baseline needs no runs for pairs.
    ev = FakeEvaluator(Surface())
    out = search(ev, kv_space(), WL, SLO_, Budget(12, 1e9),
                 Options(repeats=1, can_restart=False), clock=ev.now)
    assert out.baseline is not None and len(out.baseline.runs) == 1


# --- the search's path after tune-landscape-2 (issue 34 item 3) --------------------------


def test_sweep_probes_halvings_of_the_clients_not_three_quarters() -> None:
    # Search version 2 probed 3C/4 too; at the CPU engine's noise it cost trials and chose
    # below vLLM's defaults where they were best (tune-landscape-3, -4): left out in 3.
    pts = sweep_concurrencies(64, ladder(1, 64), Options(), kv_cap=None, cap_limit=1024)
    assert pts[:2] == [32, 16] and 48 not in pts and len(pts) <= Options().sweep_points


@dataclass
class _Edge:
    """A live-cap engine (one server, caps moved live) whose probe at 32 clients looks
    good but whose cap 32 misses the ITL objective at the workload's 64 clients; cap 16
    meets it. Deterministic: what each run gives is fixed."""

    meets_up_to: int = 16  # the largest cap that meets the ITL objective at 64 clients
    started: bool = False
    clock: list[float] = field(default_factory=lambda: [0.0])

    def needs_start(self, config: Config) -> bool:
        return not self.started

    def now(self) -> float:
        return self.clock[0]

    def start(self, config: Config) -> _EdgeSession:
        self.started = True
        return _EdgeSession(self, config.max_num_seqs)


@dataclass
class _EdgeSession:
    engine: _Edge
    cap: int | None
    startup_s: float = 0.0

    def measure(self, concurrency: int) -> Measurement:
        self.engine.clock[0] += 10.0
        batch = min(concurrency, self.cap or 1024)
        meets = self.engine.meets_up_to
        itl = 30.0 if (self.cap is None and 0 < meets and concurrency < 64) or \
            batch <= meets else 60.0
        tps = 100.0 * batch
        return Measurement(concurrency=concurrency, duration_s=10.0,
                           goodput_tps=tps if itl <= 50 else 0.0, output_tps=tps,
                           request_rate=batch / 5.0, ttft_p95_ms=100.0, itl_p95_ms=itl,
                           completed=2 * concurrency, running_max=batch, running_mean=batch)

    def close(self) -> None:
        return None


def test_when_the_best_predicted_cap_fails_the_next_predicted_one_is_verified() -> None:
    """tune-landscape-2: the hill-climb after a failed verification looked only next to the
    defaults' cap, so the other caps the sweep predicted to meet the SLO were never tried."""
    ev = _Edge()
    space = Space(max_num_seqs=ladder(1, 64), default_max_num_seqs=1024)
    out = search(ev, space, Workload(128, 256, 64), SLO(30000, 50), Budget(12, 1e9),
                 Options(), clock=ev.now)
    assert [(t.phase, t.config.max_num_seqs) for t in out.trials[:3]] == [
        ("baseline", None), ("verify", 32), ("verify", 16)]
    assert out.best is not None and out.best.config.max_num_seqs == 16
    lo, _hi, _conf = out.versus_defaults.interval  # type: ignore[union-attr]
    assert lo > 1.05


def test_where_nothing_meets_the_slo_the_defaults_stay_and_the_text_says_why() -> None:
    ev = _Edge(meets_up_to=0)
    space = Space(max_num_seqs=ladder(1, 64), default_max_num_seqs=1024)
    out = search(ev, space, Workload(128, 256, 64), SLO(30000, 50), Budget(12, 1e9),
                 Options(), clock=ev.now)
    assert out.best is out.baseline
    # Kept, and not called good: the clause says their typical run missed the SLO.
    assert out.decision() == ("--max-num-seqs 48 and vLLM's defaults: no goodput in either "
                              "arm (3 pairs); kept vLLM's defaults, though their typical "
                              "run missed the SLO (1.20x the objective (1.20-1.20x, 91% "
                              "confidence, 6 runs; ITL binds))")


# --- a cap on the SLO's edge (search version 4) ------------------------------------------------


@dataclass
class EdgeServer:
    """All-or-nothing runs (summary only, as the landscape harness's): the ITL p95 grows
    with the running batch (10 ms + 0.2 ms a sequence), and clients beyond the cap queue
    (Little's law). Under a 15.5 ms ITL and 5 s TTFT objective at 48 clients only a cap
    near 24 meets both, and only at the ITL's edge (14.8 ms: above 0.9 of the objective);
    the defaults (48 running) miss the ITL, a cap of 12 the TTFT (9.5 s of queue)."""

    started: list[Config] = field(default_factory=list)
    clock: list[float] = field(default_factory=lambda: [0.0])
    startup_s: float = 0.0
    slo: SLO = field(default_factory=lambda: EDGE_SLO)

    def start(self, config: Config) -> EdgeServer:
        self.started.append(config)
        self.cap = config.max_num_seqs or DEFAULT_MNS
        return self

    def measure(self, concurrency: int) -> Measurement:
        running = min(concurrency, self.cap)
        itl_ms = 10.0 + 0.2 * running
        tps = running / (itl_ms / 1e3)
        rate = tps / WL.output_tokens
        ttft_ms = 50.0 + (concurrency - running) / rate * 1e3
        ok = itl_ms <= self.slo.itl_ms and ttft_ms <= self.slo.ttft_ms
        self.clock[0] += 100 / rate
        return Measurement(concurrency=concurrency, duration_s=100 / rate,
                           goodput_tps=tps if ok else 0.0, output_tps=tps, request_rate=rate,
                           ttft_p95_ms=ttft_ms, itl_p95_ms=itl_ms, completed=100,
                           good_fraction=1.0 if ok else 0.0, running_max=float(running),
                           running_mean=float(running))

    def close(self) -> None:
        return None

    def now(self) -> float:
        return self.clock[0]


EDGE_SLO = SLO(ttft_ms=5000, itl_ms=15.5)


def test_a_cap_on_the_slos_edge_is_verified_rather_than_keeping_defaults_that_miss() -> None:
    ev = EdgeServer()
    space = Space(max_num_seqs=ladder(1, WL.concurrency), default_max_num_seqs=DEFAULT_MNS,
                  default_max_num_batched_tokens=DEFAULT_MNBT)
    out = search(ev, space, WL, EDGE_SLO, Budget(12, 1e9), Options(), clock=ev.now)
    assert out.baseline is not None and out.baseline.score == 0  # the defaults miss
    # Inside the 0.9 margin no probe beats them (24: ITL 14.8 ms > 13.95; 12: TTFT 9.5 s);
    # at the SLO itself the probe at 24 does, so it is verified and wins its pairs.
    assert out.best is not None and out.best.config.max_num_seqs == 24
    assert any("at the SLO itself are verified" in n for n in out.notes)
    assert "kept --max-num-seqs 24" in out.decision()
    assert ev.started[:2] == [Config(), Config(max_num_seqs=24)]  # one start for it


def test_no_edge_verification_where_a_probe_beats_the_defaults_inside_the_margin() -> None:
    # A 17 ms objective: the probe at 24 (14.8 ms) is inside 0.9 of it, the usual path.
    slo = SLO(ttft_ms=5000, itl_ms=17.0)
    ev = EdgeServer(slo=slo)
    space = Space(max_num_seqs=ladder(1, WL.concurrency), default_max_num_seqs=DEFAULT_MNS,
                  default_max_num_batched_tokens=DEFAULT_MNBT)
    out = search(ev, space, WL, slo, Budget(12, 1e9), Options(), clock=ev.now)
    assert not any("at the SLO itself" in n for n in out.notes)
    assert out.best is not None and out.best.config.max_num_seqs is not None


# --- the planner's hint where the defaults miss outright (search version 5) ---------------


@dataclass
class _OnlyAt(_Edge):
    """A live-cap engine where one cap alone meets the SLO at the workload's clients (a
    knife edge, as the landscape's TTFT <= 30 s scenarios have) and no probe of the
    defaults' server at fewer clients does: the sweep predicts nothing."""

    good_cap: int = 12

    def start(self, config: Config) -> _OnlySession:  # type: ignore[override]
        self.started = True
        return _OnlySession(self, config.max_num_seqs)


@dataclass
class _OnlySession(_EdgeSession):
    def measure(self, concurrency: int) -> Measurement:
        self.engine.clock[0] += 10.0
        batch = min(concurrency, self.cap or 1024)
        ok = self.cap == self.engine.good_cap  # type: ignore[attr-defined]
        tps = 100.0 * batch
        return Measurement(concurrency=concurrency, duration_s=10.0,
                           goodput_tps=tps if ok else 0.0, output_tps=tps,
                           request_rate=batch / 5.0, ttft_p95_ms=100.0,
                           itl_p95_ms=30.0 if ok else 60.0, completed=2 * concurrency,
                           running_max=batch, running_mean=batch)


@pytest.mark.parametrize("hint", [12, 11])
def test_defaults_that_miss_outright_get_the_planners_hint_verified(hint: int) -> None:
    """tune-landscape-30/31: the defaults met the SLO in no run, the sweep's verified cap
    had none either, and the search ended keeping the defaults while the planner's hint
    met the SLO. Version 5 verifies the hint (snapped to the ladder) before giving up."""
    space = Space(max_num_seqs=ladder(1, 64), default_max_num_seqs=1024)
    ev = _OnlyAt()
    out = search(ev, space, Workload(128, 256, 64), SLO(30000, 50), Budget(12, 1e9),
                 Options(hint_max_num_seqs=hint), clock=ev.now)
    assert out.baseline is not None and out.baseline.score == 0
    assert ("verify", 12) in [(t.phase, t.config.max_num_seqs) for t in out.trials]
    assert out.best is not None and out.best.config.max_num_seqs == 12
    assert "kept --max-num-seqs 12" in out.decision()
    assert any("planner's hint, --max-num-seqs 12, verified" in n for n in out.notes)
    # Without a hint the same search keeps the defaults, as version 4 did.
    ev = _OnlyAt()
    out = search(ev, space, Workload(128, 256, 64), SLO(30000, 50), Budget(12, 1e9),
                 Options(), clock=ev.now)
    assert out.best is out.baseline


def test_the_hint_is_not_forced_where_the_defaults_met_the_slo() -> None:
    """Where any baseline run had goodput, version 5 adds no trial: the search is
    version 4's, trial for trial."""
    with_hint, _ = run(Surface(), opts=Options(hint_max_num_seqs=4))
    without, _ = run(Surface())
    assert with_hint.baseline is not None and with_hint.baseline.score > 0
    assert not any("planner's hint" in n for n in with_hint.notes)
    assert [t.config for t in with_hint.trials] == [t.config for t in without.trials]

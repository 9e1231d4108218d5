"""The tuner's search on AIConfigurator's estimated landscape (issue 34 item 3,
benchmarks/tune_on_landscape.py): the stored runs (benchmarks/data/tune_landscape_*.json)
of the current search version are what the current search gives on the harness's
landscape, their summary is what benchmarks/RESULTS.md (HISTORY.md once superseded)
shows, and the harness's landscape follows its stated rules (interpolation in
log(batch), the queue's wait, vLLM's defaults per GPU, the noise)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from benchmarks.planner_vs_aic import goodput, itl_of
from benchmarks.results_md import published
from benchmarks.tune_on_landscape import (
    ROOT,
    Cell,
    LandscapeEvaluator,
    Scenario,
    best_of,
    load,
    measured_noise,
    out_path,
    scenarios,
    section,
    space_for,
    summarize,
    tuner_version,
)

from llm_operator.cli.aic import itl_p95_ms
from llm_operator.inpod.tuner.search import (
    SEARCH_VERSION,
    SLO,
    Budget,
    Config,
    Options,
    Workload,
    search,
)

CONFIGS = sorted((ROOT / "benchmarks" / "configs").glob("tune_landscape_*.yaml"))


def _stored(path: Path) -> dict[str, Any]:
    return json.loads(out_path(load(path)).read_text())


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_results_md_shows_the_stored_runs_summary(path: Path) -> None:
    """Else: .venv/bin/python -m benchmarks.tune_on_landscape --config PATH --section
    --write (the section is generated from the stored JSON)."""
    data = _stored(path)
    assert data["config"] == load(path), "the stored run is of another config"
    assert section(data) in published(), data["section"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_summary_counts_every_run(path: Path) -> None:
    data = _stored(path)
    s = summarize(data)
    runs = [(row, r) for row in data["scenarios"] for r in row["runs"]]
    assert len(runs) == len(data["scenarios"]) * data["config"]["seeds"]
    # (a), counted here independently of summarize()
    rated = [(row, r) for row, r in runs if best_of(row)[0] > 0]
    ok = sum(r["truth"] >= 0.95 * best_of(row)[0] and r["trials"] <= 0.3 * row["gridTrials"]
             for row, r in rated)
    assert (s["a"]["runs"], s["a"]["ok"]) == (len(rated), ok)
    assert s["a"]["met"] == (ok >= 0.9 * len(rated))
    # (b) and (c)
    b = [(row, r) for row, r in runs if row["defaults"] <= 0 < best_of(row)[0]]
    assert (s["b"]["runs"], s["b"]["ok"]) == (len(b), sum(r["truth"] > 0 for _, r in b))
    floor = math.exp(-data["config"]["noise"]["logSd"])
    assert s["c"]["ok"] == sum(r["truth"] >= row["defaults"] * floor for row, r in runs)


def test_the_noise_is_the_spread_measured_on_the_cpu_engine() -> None:
    cfg = load(CONFIGS[0])
    assert measured_noise(cfg["noise"]["source"]) == pytest.approx(cfg["noise"]["logSd"],
                                                                    abs=0.005)


def test_some_stored_run_is_of_the_current_search() -> None:
    """The re-run below has teeth only if a stored run was made by the current search
    version; every other stored run names an earlier one (runs stored before the field
    existed, tune-landscape-1 and -2, are version 1)."""
    versions = {path.stem: tuner_version(_stored(path)) for path in CONFIGS}
    assert SEARCH_VERSION in versions.values(), versions
    assert all(v <= SEARCH_VERSION for v in versions.values()), versions
    assert versions["tune_landscape_1"] == versions["tune_landscape_2"] == 1


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_stored_runs_are_what_the_current_search_gives(path: Path) -> None:
    """Runs stored by the current search version (``search.SEARCH_VERSION``, stored as
    ``tunerVersion``) are re-run and must come out the same. A failure means the search
    (or the harness) changed since: bump ``SEARCH_VERSION`` where the search's decisions
    changed, and store a new labelled, pre-registered run; the stored ones then describe
    the tuner at the commit their section names. Runs of an earlier version are not
    re-run: they differ from the current search by design."""
    cfg = load(path)
    data = _stored(path)
    if tuner_version(data) != SEARCH_VERSION:
        pytest.skip(f"stored by search version {tuner_version(data)} (commit "
                    f"{data['commit'][:10]}), the current one is {SEARCH_VERSION}")
    rows = {row["name"]: row for row in data["scenarios"]}
    t = cfg["tuner"]
    for sc in scenarios(cfg)[::12]:  # 8 of 96 scenarios, every seed: about a second
        row = rows[sc.name]
        wl = Workload(sc.cell.input_tokens, sc.cell.output_tokens, sc.concurrency)
        opts = Options(min_gain=t["minGain"], hint_max_num_seqs=row["hint"])
        for stored in row["runs"]:
            ev = LandscapeEvaluator(sc, cfg["noise"]["logSd"], stored["seed"],
                                    t["startupSeconds"], t["waves"], t["minPrompts"])
            out = search(ev, space_for(sc), wl, SLO(sc.ttft_ms, sc.tpot_ms),
                         Budget(t["maxTrials"], t["maxSeconds"]), opts, clock=ev.now)
            assert out.best is not None
            assert (out.best.config.max_num_seqs, len(out.trials)) == (
                stored["choice"], stored["trials"]), (sc.name, stored["seed"])


# --- the landscape's rules -----------------------------------------------------------------


def _cell(gpu: str = "H100") -> Cell:
    return Cell("m|H100|tp1|512/256", "meta-llama/Llama-3.1-8B-Instruct", gpu, 1, 512, 256,
                {1: (40.0, 6.0), 64: (70.0, 10.0), 96: (80.0, 14.0)}, 96)


def test_estimates_between_stored_batches_are_linear_in_log_batch() -> None:
    cell = _cell()
    assert cell.at(64) == (70.0, 10.0)
    mid = round(math.sqrt(64 * 96))  # 78: about halfway in log(batch)
    t = (math.log(mid) - math.log(64)) / (math.log(96) - math.log(64))
    assert cell.at(mid) == pytest.approx((70 + 10 * t, 10 + 4 * t))
    with pytest.raises(ValueError, match="outside the stored sizes"):
        cell.at(200)


def test_a_cap_below_the_clients_queues_them_and_the_wait_counts_in_ttft() -> None:
    sc = Scenario(_cell(), 128, "relaxed", 2000.0, 50.0)
    good, tps, ttft, tpot, b = sc.run(128, 64)
    r_ms = 70.0 + 255 * 10.0
    assert b == 64 and tpot == 10.0
    assert ttft == pytest.approx(70.0 + (128 / 64 - 1) * r_ms)  # one whole request's time
    assert tps == pytest.approx(64 * 256 / (r_ms / 1e3))
    assert good == 0.0  # 2.69 s of TTFT against 2 s
    assert (good, "TTFT 2,690 ms") == goodput({"ttftMs": 70.0, "tpotMs": 10.0}, 64,
                                              {"concurrency": 128, "output": 256},
                                              sc.slo)
    # vLLM's default cap (1024) runs what the KV cache holds: 96 here, the rest queue.
    assert sc.running(128, None) == 96 and sc.running(32, None) == 32


@pytest.mark.parametrize(("gpu", "mns", "mnbt"), [("H100", 1024, 8192), ("H200", 1024, 8192),
                                                  ("A100", 256, 2048),
                                                  ("A100-80GB", 256, 2048)])
def test_vllms_defaults_per_gpu(gpu: str, mns: int, mnbt: int) -> None:
    assert Scenario(_cell(gpu), 64, "x", 1.0, 1.0).defaults() == (mns, mnbt)


def test_one_runs_noise_slows_latencies_and_throughput_alike_and_is_seeded() -> None:
    sc = Scenario(_cell(), 64, "relaxed", 20000.0, 50.0)

    def runs(seed: int) -> list[tuple[float, float, float]]:
        ev = LandscapeEvaluator(sc, 0.32, seed, 300.0, 2.0, 24)
        s = ev.start(Config(max_num_seqs=64))
        return [(m.output_tps, m.ttft_p95_ms, m.itl_p95_ms) for m in
                (s.measure(64) for _ in range(40))]

    got = runs(1)
    assert got == runs(1) and got != runs(2)
    _g, tps0, ttft0, tpot0, _b = sc.run(64, 64)
    speeds = [tpot / tpot0 for _tps, _ttft, tpot in got]
    for (tps, ttft, _tpot), s in zip(got, speeds, strict=True):
        assert ttft == pytest.approx(ttft0 * s) and tps == pytest.approx(tps0 / s)
    logs = [math.log(s) for s in speeds]
    assert 0.2 < math.sqrt(sum(x * x for x in logs) / len(logs)) < 0.45


# --- the ITL p95 read from the estimator's step schedule (aic_estimator_3.yaml) ---------------


def _schedule(b: int, mix_ms: float = 36.0, gen_ms: float = 13.0, osl: int = 256
              ) -> dict[str, float]:
    """The estimator's schedule of one cycle: one mix step per request, OSL iterations."""
    return {"mixSteps": float(b), "genonlySteps": float(osl - b), "mixStepMs": mix_ms,
            "genonlyStepMs": gen_ms, "decodeIterations": float(osl)}


@pytest.mark.parametrize(("b", "p95"), [(1, 13.0), (13, 13.0), (14, 36.0), (64, 36.0)])
def test_the_p95_is_the_mix_step_once_other_prompts_pass_5_percent_of_the_steps(
        b: int, p95: float) -> None:
    # Of a request's 256 steps, the b - 1 other requests' prompt steps: 12 of 256 (4.7%)
    # at 13 sequences, 13 (5.1%) at 14; one sequence alone never sees another's prompt.
    assert itl_p95_ms(_schedule(b), b) == p95


def test_the_slo_judges_the_p95_where_the_config_says_and_the_mean_where_not() -> None:
    est = {"ttftMs": 150.0, "tpotMs": 19.0, "schedule": _schedule(64)}
    wl, slo = {"concurrency": 64, "output": 256}, {"ttftMs": 2000.0, "tpotMs": 25.0}
    mean, _ = goodput(est, 64, wl, slo, saturated=True)
    assert mean == pytest.approx(64 * 256 / ((150 + 255 * 19) / 1e3))
    assert goodput(est, 64, wl, slo, True, "p95-from-schedule") == (0.0, "ITL p95 36 ms")
    assert itl_of(est, 64, "p95-from-schedule") == (36.0, "ITL p95")
    with pytest.raises(ValueError, match="not one of tpot-mean, p95-from-schedule"):
        itl_of(est, 64, "p99")
    with pytest.raises(ValueError, match="aic_estimate --schedule"):
        itl_of({"ttftMs": 1.0, "tpotMs": 1.0}, 64, "p95-from-schedule")


def test_the_landscapes_p95_between_stored_batches_and_under_noise() -> None:
    base = _cell()
    cell = Cell(base.key, base.model, base.gpu, 1, 512, 256, base.points, 96,
                {1: _schedule(1, 30.0, 6.0), 64: _schedule(64, 36.0, 10.0),
                 96: _schedule(96, 40.0, 14.0)})
    assert cell.itl_p95(1) == 6.0 and cell.itl_p95(64) == 36.0
    t = (math.log(8) - math.log(1)) / (math.log(64) - math.log(1))
    # At 8, between the stored 1 and 64: every figure of the schedule is interpolated in
    # log(batch) as registered, mix steps too (1 + 63 t = 32.5, not 8), and the rule
    # applies to them: 32.5 x 7/8 of 256 steps is 11%, so the (interpolated) mix step.
    mix_steps = 1 + 63 * t
    assert mix_steps * (1 - 1 / 8) / 256 > 0.05
    assert cell.itl_p95(8) == pytest.approx(30.0 + 6.0 * t)
    sc = Scenario(cell, 64, "tight", 20000.0, 25.0, "p95-from-schedule")
    good, _tps, _ttft, itl, b = sc.run(64, 64, speed=1.5)
    assert (good, itl, b) == (0.0, pytest.approx(36.0 * 1.5), 64)
    # The mean (10 ms x 1.5) would have met the 25 ms objective.
    assert Scenario(cell, 64, "tight", 20000.0, 25.0).run(64, 64, 1.5)[0] > 0
    with pytest.raises(ValueError, match="no step schedule stored"):
        base.itl_p95(64)

"""The planner's start on AIConfigurator's landscape scaled to measured vLLM
(benchmarks/planner_measured_scale.py, planner-measured-scale-1, a sensitivity): the band
ratios are the stored comparison's medians, the scaling divides what it says and nothing
else, the picks are aic-estimator-9's, and RESULTS.md shows what the stored data give."""

from __future__ import annotations

import json

import pytest
from benchmarks import planner_measured_scale as pms
from benchmarks import planner_vs_aic
from benchmarks.results_md import current

pytestmark = pytest.mark.unit

BANDS = [[1, 16], [17, 64], [65, 100000]]


def _row(c: int, ttft: float, tpot: float) -> dict:
    return {"concurrency": c, "ratio": {"ttft": ttft, "tpot": tpot, "tps": 1.0}}


def test_band_ratios_are_medians_per_band_and_oom_rows_are_left_out() -> None:
    rows = [_row(8, 0.5, 0.9), _row(16, 0.7, 0.8), _row(12, 0.9, 1.0), _row(32, 0.4, 0.7),
            {"concurrency": 40}, _row(128, 0.3, 0.6)]
    got = pms.band_ratios(rows, BANDS)
    assert got == {(1, 16): {"ttft": 0.7, "tpot": 0.9}, (17, 64): {"ttft": 0.4, "tpot": 0.7},
                   (65, 100000): {"ttft": 0.3, "tpot": 0.6}}
    assert pms.ratio_at(16, got)["ttft"] == 0.7 and pms.ratio_at(17, got)["ttft"] == 0.4
    with pytest.raises(ValueError, match="17-64"):
        pms.band_ratios([_row(8, 0.5, 0.9)], BANDS)


def test_scaling_divides_ttft_and_per_token_figures_and_keeps_oom() -> None:
    ratios = {(1, 16): {"ttft": 0.5, "tpot": 0.8}, (17, 100000): {"ttft": 0.25, "tpot": 0.5}}
    data = {"cells": {"k": {"batches": {
        "8": {"ttftMs": 100.0, "tpotMs": 20.0, "itlP95Ms": 30.0},
        "64": {"ttftMs": 200.0, "tpotMs": 40.0, "itlP95Ms": 45.0},
        "512": {"oom": True}}}}}
    out = pms.scaled(data, ratios, "p95-from-schedule")
    b = out["cells"]["k"]["batches"]
    assert b["8"] == {"ttftMs": 200.0, "tpotMs": 25.0, "itlP95Ms": 37.5}
    assert b["64"] == {"ttftMs": 800.0, "tpotMs": 80.0, "itlP95Ms": 90.0}
    assert b["512"] == {"oom": True}
    assert data["cells"]["k"]["batches"]["8"]["ttftMs"] == 100.0  # the input is kept
    assert pms.scaled(data, ratios, "tpot-mean")["cells"]["k"]["batches"]["8"][
        "itlP95Ms"] == 25.0


def test_the_picks_are_aic_estimator_9s_and_results_md_shows_the_stored_data() -> None:
    found = pms.compare()
    base = planner_vs_aic.load(pms.CONFIG.with_name("aic_estimator_9.yaml"))
    rows = planner_vs_aic.scenarios(base, json.loads(planner_vs_aic.DATA.read_text()))
    assert [r["pick"] for r in found["before"]] == [r["pick"] for r in rows]
    assert [r["pick"] for r in found["after"]] == [r["pick"] for r in rows]
    # on the scaled landscape every estimate is slower, so no best goodput grows
    before = {(r["key"], r["slo"]): r["best"] for r in found["before"] if "best" in r}
    assert all(r["best"] <= before[(r["key"], r["slo"])] + 1e-9
               for r in found["after"] if "best" in r)
    assert pms.section(found) in current()

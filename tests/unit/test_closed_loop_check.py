"""The closed-loop check of NVIDIA's measured rows (benchmarks/closed_loop_check.py,
closed-loop-check-1): *need* is the prompts' GEMM time at the best measured rate over the
measured cycle, it uses nothing of the performance model, and the stored run is what the
check gives now."""

from __future__ import annotations

import json

import pytest
from benchmarks.closed_loop_check import (
    CONFIG,
    DATA,
    SECTION,
    best_gemm_fractions,
    need,
    record,
    render,
)
from benchmarks.perfmodel_vs_silicon import DATA as SILICON
from benchmarks.perfmodel_vs_silicon import summarise
from benchmarks.results_md import current, markers


def test_a_cycle_as_long_as_its_prompts_gemms_needs_exactly_one() -> None:
    """8 clients of 1,000-token prompts on a model of 1e9 linear parameters: 1.6e13 FLOPs a
    cycle; at half of a 1e15 FLOP/s peak that is 32 ms, so a measured cycle of 32 ms (TTFT
    2 ms + 30 x 1 ms) needs 1, twice the GPUs half, a rate twice as high half."""
    args = dict(clients=8, isl=1000, osl=31, linear_params=1e9, peak_flops=1e15,
                ttft_ms=2.0, tpot_ms=1.0)
    assert need(tp=1, fraction=0.5, **args) == pytest.approx(1.0, rel=1e-12)
    assert need(tp=2, fraction=0.5, **args) == pytest.approx(0.5, rel=1e-12)
    assert need(tp=1, fraction=1.0, **args) == pytest.approx(0.5, rel=1e-12)


def test_bad_inputs_fail_naming_what_is_wrong() -> None:
    base = dict(clients=8, isl=1000, osl=31, tp=1, linear_params=1e9, peak_flops=1e15,
                ttft_ms=2.0, tpot_ms=1.0)
    with pytest.raises(ValueError, match="fraction in"):
        need(**{**base, "fraction": 0.0})
    with pytest.raises(ValueError, match="clients, isl, osl and tp"):
        need(**{**base, "fraction": 0.5, "tp": 0})
    with pytest.raises(ValueError, match="cycle must be positive"):
        need(**{**base, "fraction": 0.5, "ttft_ms": 0.0, "tpot_ms": 0.0})


def test_the_best_rates_are_the_highest_prefill_gemms_measured_on_each_gpu() -> None:
    """gpu-kernels-1's RESULTS section says prefill GEMMs reached 63%-73% of dense peak on
    the H100 and H200: the stored fractions are the check's now, each GPU's and dtype's
    within that range, and the same GPUs and dtypes have decode-sized GEMMs too."""
    data = json.loads(DATA.read_text())
    cfg_files = [DATA.parent / f for f in ("gpu_kernels_h100.json", "gpu_kernels_h200.json")]
    best = best_gemm_fractions(cfg_files, 1024, "graph")
    assert {f"{g} {d}": round(v, 4) for (g, d), v in sorted(best.items())} \
        == data["bestFractions"]
    assert all(0.6 < v < 0.75 for v in best.values())
    assert best_gemm_fractions(cfg_files, 1, "graph").keys() == best.keys()


def test_stored_run_is_what_the_check_gives_and_results_md_shows_it(tmp_path) -> None:
    """Else: .venv/bin/python -m benchmarks.closed_loop_check --record --write."""
    fresh = tmp_path / "check.json"
    assert record(CONFIG, fresh) == json.loads(DATA.read_text())
    begin, end = markers(SECTION)
    text = current()
    assert render(fresh).strip() == text[text.index(begin):text.index(end) + len(end)].strip()


def test_the_goal_line_is_aic_silicon_19s_figures_on_every_held_out_row() -> None:
    """The check changes no figure: its held-out rows are aic-silicon-19's, with the same
    share within the band of each figure."""
    data = json.loads(DATA.read_text())
    held = [r for r in json.loads(SILICON.read_text())["rows"]
            if not r["fit"] and r["predicted"] is not None]
    s = summarise(held, data["band"])
    ours = [r for r in data["rows"] if not r["fit"]]
    assert len(ours) == len(held)
    for k in ("tpot", "tps", "ttft"):
        assert sum(abs(r["error"][k]) <= data["band"] for r in ours) / len(ours) \
            == pytest.approx(s[k]["within"])

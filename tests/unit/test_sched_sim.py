"""The step-level scheduler simulation (benchmarks/sched_sim.py, sched-sim-1): its steps
follow vLLM V1's chunked-prefill scheduling, its two arrival patterns bracket what a
closed loop can do, and the stored run is what the simulator gives now."""

from __future__ import annotations

import json

import pytest
from benchmarks.perfmodel_vs_silicon import load_config, predict_at, settings_of
from benchmarks.results_md import current, markers
from benchmarks.sched_sim import DATA, SECTION, first_arrivals, place, render, simulate

from llm_operator.knowledge.catalog import lookup_gpu, lookup_model
from llm_operator.planning.perfmodel import (
    EngineSettings,
    Hardware,
    ModelShape,
    Workload,
    step_time,
)

Z = 3e-3


def _setting() -> tuple[ModelShape, Hardware]:
    m, g = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("H100")
    assert m is not None and g is not None
    return ModelShape.from_facts(m), Hardware.from_facts(g)


def test_one_client_gets_its_prompt_in_one_step_and_one_token_a_step() -> None:
    """One client, a 1,024-token prompt within the budget: the first token comes at the
    end of one prefill step (plus half the request overhead), then one token per decode
    step; three requests in a row see the same."""
    m, h = _setting()
    res = simulate(m, h, 1, Workload(1024, 16), EngineSettings(), [Z / 2], 3, Z)
    assert res.requests == 3
    prefill = step_time(m, h, 1, 0, 0.0, 1024, 0.0, prefill_seqs=1.0).seconds
    assert res.ttft_s == pytest.approx(prefill + Z / 2, rel=1e-9)
    decode = [step_time(m, h, 1, 1, 1024 + k, 0).seconds for k in range(1, 16)]
    assert res.tpot_s == pytest.approx(sum(decode) / 15, rel=1e-9)


def test_prompts_arriving_together_wait_for_each_other_first_come_first_served() -> None:
    """Two clients at once whose prompts each fill the 2,048-token budget: the second
    prompt waits a whole step, so the mean TTFT is above one client's, and clients
    spread over a cycle do not wait; a cap of one running request queues the second
    behind the whole first request."""
    m, h = _setting()
    wl, engine = Workload(2048, 8), EngineSettings(max_num_batched_tokens=2048)
    alone = simulate(m, h, 1, wl, engine, [Z / 2], 1, Z).ttft_s
    together = simulate(m, h, 1, wl, engine, first_arrivals("lockstep", 2, 1.0, Z), 1, Z)
    spread = simulate(m, h, 1, wl, engine, first_arrivals("spread", 2, 1.0, Z), 1, Z)
    assert together.ttft_s > 1.4 * alone
    assert spread.ttft_s == pytest.approx(alone, rel=1e-9)
    one_at_a_time = simulate(m, h, 1, wl, EngineSettings(max_num_batched_tokens=2048,
                                                         max_num_seqs=1),
                             first_arrivals("lockstep", 2, 1.0, Z), 1, Z)
    assert one_at_a_time.ttft_s > together.ttft_s


def test_bad_inputs_fail_with_a_message() -> None:
    m, h = _setting()
    with pytest.raises(ValueError, match="at least one client"):
        simulate(m, h, 1, Workload(16, 4), EngineSettings(), [], 1, Z)
    with pytest.raises(ValueError, match="lockstep or spread"):
        first_arrivals("poisson", 4, 1.0, Z)


def test_place_is_zero_at_spread_one_in_lockstep() -> None:
    assert place(100.0, 100.0, 400.0) == 0.0
    assert place(400.0, 100.0, 400.0) == pytest.approx(1.0)
    assert place(200.0, 100.0, 400.0) == pytest.approx(0.5)
    assert place(200.0, 100.0, 104.0) is None


def test_stored_run_is_what_the_simulator_gives_and_results_md_shows_it() -> None:
    """Else: .venv/bin/python -m benchmarks.sched_sim --record --write. Re-simulates the
    rows with the shortest outputs (the whole run takes about a minute)."""
    data = json.loads(DATA.read_text())
    begin, end = markers(SECTION)
    text = current()
    assert render().strip() == text[text.index(begin):text.index(end) + len(end)].strip()
    stored = {r["id"]: r for r in data["rows"]}
    rows = [r for r in json.loads((DATA.parent / "perfmodel_vs_silicon.json").read_text())[
        "rows"] if r["id"] in stored and r["osl"] <= 128][:6]
    assert len(rows) == 6
    for st in settings_of(load_config(), rows):
        r, m, h, engine = st
        free = predict_at(st, prefill_queue_share=0.0)
        assert stored[r["id"]]["modelNoWaitTtft"] == round(free.ttft_s * 1e3, 3)
        for pattern in ("lockstep", "spread"):
            res = simulate(m, h, r["tp"], Workload(r["isl"], r["osl"]), engine,
                           first_arrivals(pattern, r["concurrency"], free.e2e_s, Z), 3, Z)
            assert stored[r["id"]][pattern] == {"ttft": round(res.ttft_s * 1e3, 3),
                                                "tpot": round(res.tpot_s * 1e3, 3)}


def test_the_measured_ttft_lies_between_the_two_patterns() -> None:
    """What the stored run says (a diagnostic, registered in sched_sim_1.yaml): spread
    arrivals give the model's queue-free TTFT (median ratio within 5%), lockstep ones 2-4x
    the measured, and the measured lies about half-way between on a log scale, in every
    group of more than 3 rows the KV cache does not limit."""
    rows = [r for r in json.loads(DATA.read_text())["rows"] if r["limit"] == "clients"]
    ratio = sorted(r["spread"]["ttft"] / r["modelNoWaitTtft"] for r in rows)
    assert 0.95 < ratio[len(ratio) // 2] < 1.05
    places = [r["place"] for r in rows if r["place"] is not None]
    assert 0.4 < sorted(places)[len(places) // 2] < 0.6
    for g in {r["group"] for r in rows}:
        ps = sorted(r["place"] for r in rows if r["group"] == g and r["place"] is not None)
        if len(ps) > 3:
            assert 0.2 < ps[len(ps) // 2] < 0.8, g

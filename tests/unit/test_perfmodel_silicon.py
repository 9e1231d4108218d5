"""The stored comparison of the performance model with NVIDIA's measured vLLM points
(benchmarks/data/perfmodel_vs_silicon.json, issue 34), without AIConfigurator installed:
the stored rows must be what the current model gives at their inputs, and the held-out
shares must not fall below what the re-fit reached (a regression guard, not the issue's
goals, which benchmarks/RESULTS.md reports as not met). tests/aic/test_silicon.py checks
the stored rows against the installed CSV."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks.perfmodel_vs_silicon import (
    BEFORE,
    CONFIG,
    DATA,
    EARLIER,
    SEQ_LAYER_FIT,
    TTFT_FIT,
    TTFT_FIT_15,
    TTFT_FIT_17,
    TTFT_FIT_19,
    fit_seq_layer,
    fit_ttft_queue,
    in_fit,
    load_config,
    predict_rows,
    summarise,
)

from llm_operator.planning.perfmodel import GPU_EFFICIENCY


def _rewrite_csv(rows: list[dict[str, object]], path: Path) -> None:
    """The stored rows as the CSV's columns, so that predict_rows reads them back."""
    import csv

    cols = ["id", "silicon_data_source", "backend", "backend_version", "model_path", "system",
            "mode", "gemm_quant_mode", "batch_size", "tp_size", "pp_size", "isl", "osl",
            "silicon_ttft_ms", "silicon_tpot_ms"]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            m = r["measured"]
            assert isinstance(m, dict)
            w.writerow({"id": r["id"], "silicon_data_source": r["source"], "backend": "vllm",
                        "backend_version": r["vllm"] if r["vllm"] != "not stated" else "",
                        "model_path": r["model_path"], "system": r["system"], "mode": "agg",
                        "gemm_quant_mode": r["quant"], "batch_size": r["concurrency"],
                        "tp_size": r["tp"], "pp_size": 1, "isl": r["isl"], "osl": r["osl"],
                        "silicon_ttft_ms": r["ttft_ms"], "silicon_tpot_ms": r["tpot_ms"]})


def test_stored_rows_are_what_the_model_gives_now(tmp_path: Path) -> None:
    """Else: .venv/bin/python -m benchmarks.perfmodel_vs_silicon --record --write."""
    data = json.loads(DATA.read_text())
    assert data["config"] == str(CONFIG.relative_to(CONFIG.parents[2]))
    path = tmp_path / "rows.csv"
    _rewrite_csv(data["rows"], path)
    fresh = json.loads(json.dumps(predict_rows(load_config(), path)))
    keys = ("id", "group", "tp", "isl", "osl", "concurrency", "predicted", "error", "fit")
    assert [{k: r[k] for k in keys} for r in fresh] == [
        {k: r[k] for k in keys} for r in data["rows"]]


def test_fit_subset_is_the_declared_one_and_run_1_fitted_nothing() -> None:
    data, before = json.loads(DATA.read_text()), json.loads(BEFORE.read_text())
    config = load_config()
    assert [r["id"] for r in data["rows"] if r["fit"]] == [
        r["id"] for r in data["rows"] if in_fit(r, config)]
    assert sum(r["fit"] for r in data["rows"]) == 30
    assert data["fitted"] and not before["fitted"]


def test_held_out_shares_stay_at_least_where_the_refit_put_them() -> None:
    rows = [r for r in json.loads(DATA.read_text())["rows"] if not r["fit"]]
    s = summarise(rows, 0.25)
    assert len(rows) == 249
    # aic-silicon-13 (219 and 220 of 249 within; aic-silicon-11 had 211 and 202, after
    # its per-sequence cost moved three Qwen3-32B rows at 128 clients out of the band).
    assert s["tpot"]["within"] >= 0.87
    assert s["tps"]["within"] >= 0.87
    # aic-silicon-17's wait, the mixed steps a waited prompt fills: 138 of 249 within
    # (aic-silicon-13: 136; aic-silicon-15's one step per prompt: 169).
    assert s["ttft"]["within"] >= 0.55
    # aic-silicon-5's TTFT queue lifted the held-out TTFT share above aic-silicon-2's
    # without moving TPOT or throughput (the wait moves time within the same cycle).
    old, five = ([r for r in json.loads(EARLIER[i].read_text())["rows"] if not r["fit"]]
                 for i in (1, 2))
    assert summarise(five, 0.25)["ttft"]["within"] > summarise(old, 0.25)["ttft"]["within"] + 0.05
    assert [r["predicted"]["tps"] for r in five] == pytest.approx(
        [r["predicted"]["tps"] for r in old], rel=1e-6)


def _changed_by_the_queue_fix(old: list[dict], new: list[dict], config: dict) -> set[str]:
    """Check run ``new`` against ``old`` (the same rows, the model before aic-silicon-9's
    fix): the rows that moved are exactly those whose prompt fills the GPU's whole default
    batched-token budget with other clients running (the prompt then takes two chunks
    beside the decodes, where the bug counted it twice); their TTFT fell; every other row
    is unchanged to the bit. Returns the moved rows' ids."""
    from benchmarks.perfmodel_vs_silicon import gpu_facts

    from llm_operator.planning import vllm_default_max_num_batched_tokens

    gpus = {g["name"]: g["gpu"] for g in config["groups"]}
    assert [r["id"] for r in old] == [r["id"] for r in new]
    moved = {b["id"] for a, b in zip(old, new, strict=True) if a["predicted"] != b["predicted"]}
    want = {r["id"] for r in old if r["error"] is not None and r["concurrency"] > 1
            and r["isl"] >= vllm_default_max_num_batched_tokens(gpu_facts(gpus[r["group"]]))}
    assert moved == want and moved
    for a, b in zip(old, new, strict=True):
        if b["id"] in moved:
            assert b["predicted"]["ttft"] < a["predicted"]["ttft"], b["id"]
    return moved


def test_aic_silicon_9_moves_only_the_prompts_the_bug_counted_twice() -> None:
    """aic-silicon-9 (the TTFT queue's prompt priced once) against aic-silicon-5: 35 rows
    (Llama-3.1-70B fp8, 8,192-token prompts on H100 and H200) moved, TTFT lower; the fit
    subset and every other row unchanged. None moved into the band (recorded: 55% of
    held-out TTFT within +-25% before and after; the 35 rows' median TTFT error went from
    +149% to +50%)."""
    five, data = (json.loads(EARLIER[i].read_text()) for i in (2, 3))
    assert (five["label"], data["label"]) == ("aic-silicon-5", "aic-silicon-9")
    moved = _changed_by_the_queue_fix(five["rows"], data["rows"], load_config())
    assert len(moved) == 35
    assert not any(r["fit"] for r in data["rows"] if r["id"] in moved)


def _grid(share: float, exponent: float) -> dict[str, dict[str, float]]:
    """A 3 x 3 grid of (share, exponent) around a point, in aic-silicon-5's steps."""
    return {"share": {"from": round(share - 0.02, 2), "to": round(share + 0.02, 2),
                      "step": 0.02},
            "exponent": {"from": round(exponent - 0.05, 2), "to": round(exponent + 0.05, 2),
                         "step": 0.05}}


def _outside_skewed(rows: list[dict], config: dict, figure: str) -> list[dict]:
    """The rows with ``figure`` measured as 1.0 outside the fit subset: a fit that reads
    only the subset comes out the same on them."""
    return [r if in_fit(r, config) else {**r, "measured": {**r["measured"], figure: 1.0}}
            for r in rows]


def test_the_ttft_queue_of_aic_silicon_5_is_its_registered_fit_on_the_fit_subset_only(
) -> None:
    """aic-silicon-5's stored fit (prompts waited for priced alone, the model as it was
    then) is the least squared log TTFT error among its grid neighbours on the fit
    subset's rows; rows outside the subset are not read (changing their measured TTFT
    changes nothing). The whole registered grid: .venv/bin/python -m
    benchmarks.perfmodel_vs_silicon --fit --config benchmarks/configs/aic_silicon_13.yaml
    (the configs up to aic-silicon-13 carry its grid)."""
    fit = json.loads(TTFT_FIT.read_text())
    config = load_config(EARLIER[5].parent.parent / "configs" / "aic_silicon_13.yaml")
    assert fit["label"] == "aic-silicon-5" and fit["grid"] == config["ttftFit"]
    rows = json.loads(DATA.read_text())["rows"]
    assert fit["rowIds"] == [r["id"] for r in rows if in_fit(r, config)]
    local = {**config, "ttftFit": _grid(fit["share"], fit["exponent"])}
    again = fit_ttft_queue(local, rows)
    assert (again["share"], again["exponent"]) == (fit["share"], fit["exponent"])
    assert again["sumSquaredLogError"] == pytest.approx(fit["sumSquaredLogError"], rel=1e-6)
    assert again["sumSquaredLogError"] < 0.7 * fit["before"]["sumSquaredLogError"]
    assert fit_ttft_queue(local, _outside_skewed(rows, config, "ttft")) == again


@pytest.mark.parametrize("label", ["aic-silicon-15", "aic-silicon-17", "aic-silicon-19"])
def test_the_ttft_fits_in_mixed_steps_are_the_registered_fits_on_the_fit_subset_only(
        label: str) -> None:
    """aic-silicon-15's and -17's stored fits are the least squared log TTFT error among
    their grid neighbours on the fit subset's rows, each with the wait it registered
    (one mixed step per prompt waited for; the mixed steps its tokens fill, kept within
    the cycle); rows outside the subset are not read. On those rows aic-silicon-15's is
    above aic-silicon-5's constants priced as prompts (1.68 against 1.59), as RESULTS.md
    and the model's comment say: the fit subset did not ask for the change; aic-silicon-17's
    fixes move no fit-subset row (the same constants and sum). The whole grid:
    .venv/bin/python -m benchmarks.perfmodel_vs_silicon --fit --config
    benchmarks/configs/aic_silicon_15.yaml (or _17)."""
    n = label.rsplit("-", 1)[1]
    fit = json.loads({"15": TTFT_FIT_15, "17": TTFT_FIT_17, "19": TTFT_FIT_19}[n].read_text())
    config = load_config(CONFIG.parent / f"aic_silicon_{n}.yaml")
    assert fit["label"] == config["label"] == label
    assert fit["grid"] == config["ttftFit"]
    rows = json.loads(DATA.read_text())["rows"]
    assert fit["rowIds"] == [r["id"] for r in rows if in_fit(r, config)]
    local = {**config, "ttftFit": {"unit": fit["grid"]["unit"],
                                   **_grid(fit["share"], fit["exponent"])}}
    again = fit_ttft_queue(local, rows)
    assert (again["share"], again["exponent"]) == (fit["share"], fit["exponent"])
    assert again["sumSquaredLogError"] == pytest.approx(fit["sumSquaredLogError"], rel=1e-6)
    assert again["before"]["sumSquaredLogError"] == pytest.approx(
        fit["before"]["sumSquaredLogError"], rel=1e-6)
    if label == "aic-silicon-15":
        assert fit["before"]["sumSquaredLogError"] < fit["sumSquaredLogError"] < 1.1 * fit[
            "before"]["sumSquaredLogError"]
    else:
        assert (fit["before"]["share"], fit["before"]["exponent"]) == (0.42, 0.60)
        assert fit["sumSquaredLogError"] == fit["before"]["sumSquaredLogError"]
    assert fit_ttft_queue(local, _outside_skewed(rows, config, "ttft")) == again


def test_the_ttft_queue_is_aic_silicon_19s() -> None:
    """GPU_EFFICIENCY prices each prompt waited for as the mixed steps its tokens fill,
    without aic-silicon-17's cap, with aic-silicon-19's stored share and exponent."""
    fit = json.loads(TTFT_FIT_19.read_text())
    eff = GPU_EFFICIENCY
    assert (eff.prefill_queue_share, eff.prefill_queue_exponent, eff.prefill_queue_unit,
            eff.prefill_queue_within_cycle) == (fit["share"], fit["exponent"],
                                                "mixed_step_per_chunk", False)
    assert load_config()["label"] == "aic-silicon-19"


def test_results_md_has_the_planner_against_the_stored_estimates() -> None:
    """The aic-estimator sections of benchmarks/RESULTS.md and HISTORY.md are what the
    current planner and performance model give against the stored estimator figures, the
    earlier runs with the model constants they had (MODEL_AT_RUN; else: .venv/bin/python
    -m benchmarks.planner_vs_aic [--config benchmarks/configs/aic_estimator_N.yaml]
    --write)."""
    from benchmarks.planner_vs_aic import CONFIG as EST_CONFIG
    from benchmarks.planner_vs_aic import DATA as EST_DATA
    from benchmarks.planner_vs_aic import load, scenarios, section
    from benchmarks.results_md import published

    text = published()
    root = EST_CONFIG.parents[2]
    for path, name in ((EST_CONFIG, "aic-estimator"),
                       (EST_CONFIG.with_name("aic_estimator_2.yaml"), "aic-estimator-2"),
                       (EST_CONFIG.with_name("aic_estimator_3.yaml"), "aic-estimator-3"),
                       (EST_CONFIG.with_name("aic_estimator_4.yaml"), "aic-estimator-4"),
                       (EST_CONFIG.with_name("aic_estimator_5.yaml"), "aic-estimator-5"),
                       (EST_CONFIG.with_name("aic_estimator_6.yaml"), "aic-estimator-6")):
        cfg = load(path)
        cfg["config"] = str(path.relative_to(root))
        rows = scenarios(cfg, json.loads(EST_DATA.read_text()))
        assert section(rows, cfg, name) in text, name



def _ceiling_bound(rows: list[dict], config: dict, per_seq_s: float, **then: float
                   ) -> tuple[set[str], set[str]]:
    """The rows whose predicted steady state, with the per-sequence cost ``per_seq_s``, has
    a step the per-sequence CPU work sets (it overlaps the GPU's step: the step then lasts
    exactly its fixed overheads, the GPU's part hidden under the CPU's). Returns them, and
    among them those where only the decode-only step is so set while more than half the
    steps carry a prompt and the mixed step is not (a step the cycle barely runs)."""
    from benchmarks.perfmodel_vs_silicon import predict_at, settings_of

    bound, decode_only = set(), set()
    for st in settings_of(config, [r for r in rows if r["error"] is not None]):
        p = predict_at(st, per_seq_overhead_s=per_seq_s, **then)
        cpu = [s is not None and s.seconds == pytest.approx(s.overhead_s, rel=1e-9)
               for s in (p.decode_step, p.mixed_step)]
        if any(cpu):
            bound.add(st[0]["id"])
        if cpu == [True, False] and p.mixed_step is not None and p.itl_s == p.mixed_step.seconds:
            decode_only.add(st[0]["id"])
    return bound, decode_only


def test_the_per_sequence_cost_is_the_largest_no_measured_row_contradicts() -> None:
    """aic-silicon-11's rule (configs/aic_silicon_11.yaml): overlapping the GPU's step, the
    per-sequence cost caps one engine at 1 / cost output tok/s; the model's cost is 1 / the
    highest output rate NVIDIA measured in either extract, rounded down to the microsecond,
    and the MoE run names the row that set it. The old 0.12 ms (8,333 tok/s) is below the
    rate of 48 measured rows whose TPOT is under 0.12 ms x their clients."""
    from benchmarks.perfmodel_vs_silicon import per_seq_bound
    from benchmarks.perfmodel_vs_silicon_moe import RUNS

    moe = RUNS["aic-silicon-12"][1]
    cost, row = per_seq_bound([DATA, moe])
    assert GPU_EFFICIENCY.per_seq_overhead_s == cost == 35e-6
    assert json.loads(moe.read_text())["perSeqBoundRow"] == row
    rows = [r for p in (DATA, moe) for r in json.loads(p.read_text())["rows"]]
    assert max(r["measured"]["tps"] for r in rows) * cost <= 1.0
    assert sum(r["measured"]["tpot"] < r["concurrency"] * 0.12 + 0.35 for r in rows) == 48


def test_aic_silicon_11_moves_only_the_rows_the_old_ceiling_bound() -> None:
    """aic-silicon-11 against aic-silicon-9 (the same rows, per-sequence cost 0.12 ms): every
    row that moved had a step the old cost set; the rows so set that did not move are
    those where only the decode-only step was, and a prompt rides more than half the
    steps (the mixed step sets their ITL); the fit subset did not move (its fit stands).
    Recorded: 17 rows moved, TPOT within +-25% 214 -> 211 of 249 held out."""
    nine, data = (json.loads(p.read_text()) for p in (EARLIER[3], EARLIER[4]))
    assert (nine["label"], data["label"]) == ("aic-silicon-9", "aic-silicon-11")
    assert [r["id"] for r in nine["rows"]] == [r["id"] for r in data["rows"]]
    moved = {b["id"] for a, b in zip(nine["rows"], data["rows"], strict=True)
             if a["predicted"] != b["predicted"]}
    bound, decode_only = _ceiling_bound(nine["rows"], load_config(), 0.12e-3,
                                        attention_seq_layer_s=0.0)
    assert moved <= bound
    assert bound - moved <= decode_only and len(bound - moved) == 2
    assert len(moved) == 17
    assert not any(r["fit"] for r in data["rows"] if r["id"] in moved)


def test_the_cost_per_sequence_per_layer_is_the_registered_fit_on_the_fit_subset_only(
) -> None:
    """aic-silicon-13: GPU_EFFICIENCY's cost per sequence per layer is the stored fit, and
    the stored fit is the least squared log TPOT error among its grid neighbours on the fit
    subset's rows; rows outside the subset are not read. The whole registered grid:
    .venv/bin/python -m benchmarks.perfmodel_vs_silicon --fit-seq-layer."""
    fit = json.loads(SEQ_LAYER_FIT.read_text())
    assert GPU_EFFICIENCY.attention_seq_layer_s == fit["attentionSeqLayerSeconds"] == 0.76e-6
    config = load_config()
    assert fit["grid"] == config["seqLayerFit"]
    rows = json.loads(DATA.read_text())["rows"]
    assert fit["rowIds"] == [r["id"] for r in rows if in_fit(r, config)]
    x, step = fit["attentionSeqLayerSeconds"], config["seqLayerFit"]["seconds"]["step"]
    local = {**config, "seqLayerFit": {**config["seqLayerFit"], "seconds": {
        "from": round(x - step, 12), "to": round(x + step, 12), "step": step}}}
    again = fit_seq_layer(local, rows)
    assert again["attentionSeqLayerSeconds"] == x
    assert again["sumSquaredLogError"] == pytest.approx(fit["sumSquaredLogError"], rel=1e-6)
    assert fit["sumSquaredLogError"] < 0.5 * fit["before"]["sumSquaredLogError"]
    assert fit_seq_layer(local, _outside_skewed(rows, config, "tpot")) == again


def test_aic_silicon_13_predicts_held_out_tpot_and_throughput_better_than_11() -> None:
    """The cost per sequence per layer, fitted on the 30 fit-subset rows, against the 249
    held-out rows (NVIDIA's measurements): TPOT within +-25% 211 -> 219, output tok/s 202
    -> 220; TTFT 138 -> 136 (the queue was not re-fitted). Goals (90% / 90% / 75%) not
    met: the Llama-3.1-8B fp8 rows of the other harness stay out."""
    eleven, data = (json.loads(p.read_text()) for p in (EARLIER[4], EARLIER[5]))
    assert (eleven["label"], data["label"]) == ("aic-silicon-11", "aic-silicon-13")

    def within(d: dict, k: str) -> int:
        return sum(abs(r["error"][k]) <= 0.25 for r in d["rows"] if not r["fit"])

    assert within(data, "tpot") - within(eleven, "tpot") == 8
    assert within(data, "tps") - within(eleven, "tps") == 18
    assert within(data, "ttft") - within(eleven, "ttft") == -2


def test_aic_silicon_15_moves_only_ttft_and_tpot_within_the_same_cycle() -> None:
    """The wait priced in mixed steps against aic-silicon-13, on the 249 held-out rows
    (NVIDIA's measurements): TTFT within +-25% 136 -> 169 (a selected result: the unit was
    chosen with these rows in view, aic_silicon_15.yaml says so); TPOT and output tok/s
    within the band unchanged (219, 220). The wait moves time from TPOT to TTFT within
    the same cycle, so every row's predicted throughput is the same to the bit."""
    thirteen, data = (json.loads(p.read_text()) for p in (EARLIER[5], EARLIER[6]))
    assert (thirteen["label"], data["label"]) == ("aic-silicon-13", "aic-silicon-15")
    assert [r["id"] for r in thirteen["rows"]] == [r["id"] for r in data["rows"]]

    def within(d: dict, k: str) -> int:
        return sum(abs(r["error"][k]) <= 0.25 for r in d["rows"] if not r["fit"])

    assert (within(thirteen, "ttft"), within(data, "ttft")) == (136, 169)
    assert within(data, "tpot") == within(thirteen, "tpot") == 219
    assert within(data, "tps") == within(thirteen, "tps") == 220
    assert [r["predicted"]["tps"] for r in data["rows"]] == [
        r["predicted"]["tps"] for r in thirteen["rows"]]
    # e2e = TTFT + (OSL - 1) TPOT is the same cycle: the TTFT gained is TPOT lost.
    for a, b in zip(thirteen["rows"], data["rows"], strict=True):
        e2e = [r["predicted"]["ttft"] + (r["osl"] - 1) * r["predicted"]["tpot"] for r in (a, b)]
        assert e2e[1] == pytest.approx(e2e[0], rel=1e-3, abs=0.05), b["id"]


def test_aic_silicon_17_moves_only_the_rows_its_fixes_touch() -> None:
    """aic-silicon-17 against aic-silicon-15 (the same rows and constants): the rows that
    moved are exactly those where a prompt does not fill exactly one mixed step (8,192-token
    prompts beside the decodes in an 8,192-token budget: two chunks; prompts sharing a
    step) or where the wait reached the cycle; their TTFT rose or fell with the prompt's
    steps, their throughput is the same to the bit. Held-out TTFT within +-25%: 169 -> 138
    (the 8,192-token Llama-3.1-70B rows on H100 and H200 leave the band); TPOT 219, output
    tok/s 220 as before."""
    from benchmarks.perfmodel_vs_silicon import predict_at, settings_of

    fifteen, data = (json.loads(p.read_text()) for p in (EARLIER[6], EARLIER[7]))
    assert (fifteen["label"], data["label"]) == ("aic-silicon-15", "aic-silicon-17")
    moved = {b["id"] for a, b in zip(fifteen["rows"], data["rows"], strict=True)
             if a["predicted"] != b["predicted"]}
    config = load_config()
    want = set()
    for st in settings_of(config, [r for r in data["rows"] if r["error"] is not None]):
        none = predict_at(st, prefill_queue_share=0.0).ttft_s

        def wait(unit: str, cap: bool, st: tuple = st, none: float = none) -> float:
            return predict_at(st, prefill_queue_unit=unit,
                              prefill_queue_within_cycle=cap).ttft_s - none

        per_chunk = wait("mixed_step_per_chunk", False)
        if (abs(per_chunk - wait("mixed_step", False)) > 1e-9
                or abs(wait("mixed_step_per_chunk", True) - per_chunk) > 1e-9):
            want.add(st[0]["id"])
    assert moved == want and len(moved) == 37
    assert not any(r["fit"] for r in data["rows"] if r["id"] in moved)
    assert [r["predicted"]["tps"] for r in data["rows"]] == [
        r["predicted"]["tps"] for r in fifteen["rows"]]

    def within(d: dict, k: str) -> int:
        return sum(abs(r["error"][k]) <= 0.25 for r in d["rows"] if not r["fit"])

    assert (within(fifteen, "ttft"), within(data, "ttft")) == (169, 138)
    assert (within(data, "tpot"), within(data, "tps")) == (219, 220)



def test_aic_silicon_19_gives_every_dense_row_aic_silicon_17s_figures() -> None:
    """aic-silicon-19 withdraws aic-silicon-17's cap on the wait, which bound in no dense
    row (its config said so before the run): every row's figures are the same."""
    seventeen, data = (json.loads(p.read_text()) for p in (EARLIER[7], DATA))
    assert (seventeen["label"], data["label"]) == ("aic-silicon-17", "aic-silicon-19")
    assert [r["predicted"] for r in data["rows"]] == [r["predicted"] for r in seventeen["rows"]]

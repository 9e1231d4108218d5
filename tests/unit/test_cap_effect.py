"""The demo's binding-cap comparison (sandbox/llm_operator_sandbox/cap_effect.py): the
registered config as the demo reads it, and what the rounds let it conclude."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llm_operator_sandbox.cap_effect import (
    ADAPTED,
    STATIC,
    Round,
    load_config,
    round_from,
    spread,
    summarize,
    verdict,
)

pytestmark = pytest.mark.unit


def test_the_registered_config_runs_both_arms_equally_and_interleaved() -> None:
    cfg = load_config()
    assert cfg.order.count(ADAPTED) == cfg.order.count(STATIC) >= 3
    # each arm runs in both halves of the order: neither sees only a warm or a cold engine
    half = len(cfg.order) // 2
    for arm in (ADAPTED, STATIC):
        assert arm in cfg.order[:half] and arm in cfg.order[half:]
    # the comparison's load is heavier than the KV cache holds (15 requests of 128+128)
    assert cfg.load.clients > 15 and cfg.heavy.clients > 15 > cfg.light.clients


def test_a_config_that_runs_one_arm_more_often_is_refused(tmp_path: Path) -> None:
    from llm_operator_sandbox.cap_effect import CONFIG

    raw = yaml.safe_load(CONFIG.read_text())
    raw["compare"]["order"] = [ADAPTED, STATIC, ADAPTED]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="equally often"):
        load_config(path)


def _round(arm: str, preempt: float, ttft: float, good: float) -> Round:
    return round_from(arm, 15 if arm == ADAPTED else 64,
                      {"completed": 128, "p95_ttft_ms": ttft, "request_goodput": good,
                       "output_throughput": 900.0}, preempt)


def test_separate_ranges_say_which_arm_is_better_and_by_how_much() -> None:
    rounds = [_round(ADAPTED, 0, 2000, 4.0), _round(STATIC, 300, 3000, 2.0),
              _round(STATIC, 280, 3100, 2.2), _round(ADAPTED, 2, 2100, 4.2),
              _round(STATIC, 310, 2900, 2.1), _round(ADAPTED, 1, 1900, 3.9)]
    rows = {r.metric: r for r in summarize(rounds)}
    pre = rows["preemptions per request"]
    assert pre.adapted.values == (0.0, 2 / 128, 1 / 128)
    assert pre.verdict.startswith("better with the adapted cap")
    assert rows["TTFT p95, ms"].verdict == "better with the adapted cap (0.67x)"
    assert rows["goodput, requests/s"].verdict.startswith("better with the adapted cap (1.9")
    # the same output rate in every round: the ranges overlap, nothing is claimed
    assert rows["output tokens/s"].verdict == "within the rounds' range: no difference shown"
    assert rows["TTFT p95, ms"].cell(rows["TTFT p95, ms"].adapted) == "2,000 [1,900, 2,100]"


def test_overlapping_ranges_claim_nothing_and_worse_is_said() -> None:
    a, s = spread([10, 20, 30]), spread([25, 35, 45])
    assert verdict(a, s, "lower") == "within the rounds' range: no difference shown"
    assert verdict(spread([50, 60]), spread([10, 20]), "lower").startswith(
        "worse with the adapted cap")
    assert verdict(spread([50, 60]), spread([10, 20]), "higher").startswith(
        "better with the adapted cap")


def test_no_table_unless_both_arms_ran() -> None:
    assert summarize([_round(ADAPTED, 0, 2000, 4.0)]) == []


def test_a_zero_mean_is_said_as_values_and_the_record_keeps_every_round() -> None:
    from llm_operator_sandbox.cap_effect import record

    assert verdict(spread([0, 0, 0]), spread([21, 26, 26]), "lower") == \
        "better with the adapted cap (0 vs 24.3)"
    rounds = [_round(ADAPTED, 0, 680, 42.7), _round(STATIC, 26, 684, 44.6)]
    rec = record(rounds, load_config(), 15, 256, "2026-12-06T05:27:00Z")
    assert rec["caps"] == {ADAPTED: 15, STATIC: 256} and rec["label"] == load_config().label
    assert [r["preemptions"] for r in rec["rounds"]] == [0, 26]
    assert rec["rounds"][1]["preemptions_per_request"] == 26 / 128
    assert {s["metric"] for s in rec["summary"]} == {
        "preemptions per request", "TTFT p95, ms", "goodput, requests/s", "output tokens/s"}


def test_the_results_page_holds_what_the_stored_runs_render_to() -> None:
    from benchmarks import demo_binding_cap as d
    from benchmarks.goals import blocks_of

    page = d.PAGE.read_text()
    for section, (_, config) in d.SECTIONS.items():
        stored = d.runs(section)
        assert stored, f"no stored run of the demo's comparison {section}"
        for _, rec in stored:
            assert rec["label"] == load_config(config).label  # the registered config's label
            assert [r["arm"] for r in rec["rounds"]] == list(load_config(config).order)
        assert blocks_of(page)[section] == d.render(stored, section)

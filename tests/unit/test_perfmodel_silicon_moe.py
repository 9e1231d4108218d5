"""The stored comparison of the performance model with NVIDIA's measured vLLM points for
mixture-of-experts models (aic-silicon-3, benchmarks/data/perfmodel_vs_silicon_3.json,
issue 34), without AIConfigurator installed: the stored rows are what the current model
gives at their inputs, RESULTS.md shows them, and every row is held out."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from benchmarks import perfmodel_vs_silicon_moe as moe
from benchmarks.perfmodel_vs_silicon import predict_rows
from benchmarks.results_md import RESULTS
from tests.unit.test_perfmodel_silicon import _rewrite_csv

DATA = json.loads(moe.DATA.read_text())


def test_stored_rows_are_what_the_model_gives_now(tmp_path: Path) -> None:
    """Else: .venv/bin/python -m benchmarks.perfmodel_vs_silicon_moe --record --write."""
    path = tmp_path / "rows.csv"
    _rewrite_csv(DATA["rows"], path)  # stored rows are TP-expert rows: EP/DP columns empty
    config = yaml.safe_load(moe.CONFIG.read_text())
    fresh = json.loads(json.dumps(predict_rows(config, path)))
    keys = ("id", "group", "tp", "isl", "osl", "concurrency", "predicted", "error", "fit")
    assert [{k: r[k] for k in keys} for r in fresh] == [
        {k: r[k] for k in keys} for r in DATA["rows"]]


def test_every_group_is_stored_and_every_row_is_held_out() -> None:
    config = yaml.safe_load(moe.CONFIG.read_text())
    assert {r["group"] for r in DATA["rows"]} == {g["name"] for g in config["groups"]}
    assert not any(r["fit"] for r in DATA["rows"]) and not DATA["fitted"]
    assert len(DATA["rows"]) >= 600


def test_results_md_shows_the_stored_rows() -> None:
    assert moe.section(DATA) in RESULTS.read_text()

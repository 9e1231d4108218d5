"""AIConfigurator's estimator against NVIDIA's measured vLLM points (issue 34): the
stored comparison is what benchmarks/RESULTS.md shows, and it is a faithful record.

``benchmarks/data/aic_vs_silicon.json`` holds, for every measured row the pre-registered
config selects, the estimator's figures at that row's setting; the section renders from
it. A row's ratio must be its stored estimate over its stored measurement, and the rows
must be exactly the config's selection of the measured rows, so an edited or partial
file fails here.
"""

from __future__ import annotations

import json

import pytest
import yaml
from benchmarks.aic_vs_silicon import CONFIG, DATA, SECTION, measured_rows, section
from benchmarks.results_md import current, markers


def _data() -> dict:
    return json.loads(DATA.read_text())


def _config() -> dict:
    return dict(yaml.safe_load(CONFIG.read_text()))


def test_the_results_section_is_the_stored_comparison() -> None:
    assert markers(SECTION)[0] in current()
    assert section(_data(), _config()) in current()


def test_the_stored_rows_are_the_configs_selection_with_their_own_ratios() -> None:
    data, config = _data(), _config()
    assert data["label"] == config["label"]
    wanted = {r["id"]: r for r in measured_rows(config)}
    assert {r["id"] for r in data["rows"]} == set(wanted)
    for row in data["rows"]:
        assert row["measured"] == wanted[row["id"]]["measured"]
        if "oom" in row["estimate"]:
            assert "ratio" not in row
            continue
        for k in config["figures"]:
            assert row["ratio"][k] == pytest.approx(
                row["estimate"][k] / row["measured"][k], rel=1e-3)

"""The performance model against NVIDIA's measured vLLM points, read from the installed
AIConfigurator (issue 34). Skipped unless AIConfigurator 0.12.0 is installed in
``.venv-aic`` (``bash tools/setup.sh --aic``; ``--tests`` installs it too): the unit
tier checks the stored extract (tests/unit/test_perfmodel_silicon.py) without it."""

from __future__ import annotations

import json

import pytest
from benchmarks.perfmodel_vs_silicon import DATA, load_config, predict_rows, summarise

from tests.support.aic import silicon_csv

CSV = silicon_csv()
pytestmark = pytest.mark.skipif(
    CSV is None, reason="AIConfigurator is not installed in .venv-aic (bash tools/setup.sh --aic)")


@pytest.fixture(scope="module")
def fresh() -> list[dict[str, object]]:
    assert CSV is not None
    return predict_rows(load_config(), CSV)


def test_stored_extract_is_what_the_installed_csv_gives(fresh: list[dict[str, object]]) -> None:
    """benchmarks/data/perfmodel_vs_silicon.json holds exactly the rows the config selects
    from the installed CSV, with the current model's figures (else re-record it)."""
    stored = json.loads(DATA.read_text())["rows"]
    assert stored == json.loads(json.dumps(fresh))


def test_qwen3_32b_h100_tpot_within_25_percent_for_90_percent(
        fresh: list[dict[str, object]]) -> None:
    """The agreed band on the measured Qwen3-32B bf16 H100 rows (vLLM 0.12), fit subset
    (TP 2) included: TPOT within +-25% for at least 90% of them."""
    rows = [r for r in fresh if r["group"] == "Qwen3-32B bf16 H100"]
    assert len(rows) == 90
    assert summarise(rows, 0.25)["tpot"]["within"] >= 0.90

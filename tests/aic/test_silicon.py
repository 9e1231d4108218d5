"""The performance model against NVIDIA's measured vLLM points, read from the installed
AIConfigurator (issue 34). Skipped unless AIConfigurator 0.12.0 is installed in
``.venv-aic`` (``bash tools/setup.sh --aic``; not in ``--tests`` nor CI): the unit
tier checks the stored extract (tests/unit/test_perfmodel_silicon.py) without it."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_stored_estimate_is_what_the_installed_estimator_gives() -> None:
    """One stored cell of benchmarks/data/aic_estimator.json against the installed
    estimator (run in .venv-aic: about 5 s)."""
    import subprocess

    from benchmarks.planner_vs_aic import DATA as EST_DATA

    from tests.support.aic import ROOT, aic_python

    cell = json.loads(EST_DATA.read_text())["cells"]["Qwen/Qwen3-32B|H100|tp2|512/256"]
    code = ("import json, logging; logging.disable(logging.WARNING); "
            "from benchmarks.aic_estimate import estimate; "
            "print(json.dumps(estimate('Qwen/Qwen3-32B', 'h100_sxm', 2, 512, 256, 64)))")
    out = subprocess.run([str(aic_python()), "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip().splitlines()[-1]
    assert json.loads(out) == cell["batches"]["64"]


def test_stored_moe_extract_is_what_the_installed_csv_gives() -> None:
    """The latest MoE run (benchmarks/data/perfmodel_vs_silicon_4.json) holds exactly the
    TP-expert MoE rows its config selects from the installed CSV, none with expert
    parallelism or data-parallel attention, with the current model's figures."""
    import yaml
    from benchmarks import perfmodel_vs_silicon_moe as moe

    assert CSV is not None
    config = yaml.safe_load(moe.CONFIG.read_text())
    fresh = json.loads(json.dumps(predict_rows(config, CSV)))
    assert json.loads(moe.DATA.read_text())["rows"] == fresh
    everything = predict_rows({**config, "tpExpertsOnly": False,
                               "expertsMatchAttentionTp": False}, CSV)
    assert len(everything) > len(fresh)  # the EP / DP-attention rows exist and are left out


def test_stored_gpu_noise_extract_is_what_the_installed_csv_gives(tmp_path: Path) -> None:
    """benchmarks/data/gpu_noise_1.json holds exactly the repeated configurations its config
    selects from the installed CSV (else re-record it)."""
    from benchmarks import gpu_noise as gn

    fresh = gn.record(path=tmp_path / "fresh.json")
    stored = json.loads(gn.DATA.read_text())
    assert stored["configurations"] == json.loads(json.dumps(fresh))["configurations"]

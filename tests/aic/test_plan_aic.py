"""``llm-operator plan --aic`` with the real AIConfigurator (issue 34 item 5): what it
prints is the estimator's own figure, the one benchmarks/data/aic_estimator.json stored
for the same model, GPU and lengths. Skipped unless AIConfigurator 0.12.0 is installed in
``.venv-aic`` (``bash tools/setup.sh --aic``); tests/unit/test_plan_aic.py checks the
wiring without it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llm_operator.cli import main
from tests.support.aic import aic_python, silicon_csv

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    silicon_csv() is None,
    reason="AIConfigurator is not installed in .venv-aic (bash tools/setup.sh --aic)")


def test_plan_aic_prints_the_estimators_own_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    svc = {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
           "metadata": {"name": "chat", "namespace": "ml"},
           "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                    "gpus": {"product": "NVIDIA-H100-80GB-HBM3"},
                    "engine": {"tensorParallelSize": 1},
                    "workload": {"inputTokens": 512, "outputTokens": 256, "concurrency": 64,
                                 "slo": {"ttftP95Ms": 2000, "itlP95Ms": 50}}}}
    path = tmp_path / "svc.yaml"
    path.write_text(json.dumps(svc))
    assert main(["plan", str(path), "--aic", str(aic_python()),
                 "--aic-model", "meta-llama/Meta-Llama-3.1-8B"]) == 0  # about 20 s
    out = capsys.readouterr().out
    assert "Predicted beside NVIDIA AIConfigurator 0.12.0" in out
    out = out.split("Predicted beside NVIDIA AIConfigurator", 1)[1]  # its table only
    stored = json.loads((ROOT / "benchmarks" / "data" / "aic_estimator.json").read_text())
    cell = stored["cells"]["meta-llama/Llama-3.1-8B-Instruct|H100|tp1|512/256"]["batches"]
    for b in (8, 64):
        row = next(ln for ln in out.splitlines() if re.match(rf"^│\s+{b} │", ln))
        cols = [c.strip() for c in row.strip("│").split("│")]
        assert cols[2] == f"{cell[str(b)]['outputTps']:,.0f}", row  # AIC tok/s
        assert cols[5] == f"{cell[str(b)]['ttftMs']:,.0f}", row  # AIC TTFT
        assert cols[8] == f"{cell[str(b)]['tpotMs']:,.1f}", row  # AIC TPOT

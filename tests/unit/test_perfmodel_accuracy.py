"""What `llm-operator plan` tells a user about how far to trust its predicted curve
(perfmodel.MEASURED_ACCURACY) is what the stored comparisons with NVIDIA's measured vLLM
points say now: a re-run that moves a figure fails here until the note follows."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from benchmarks.perfmodel_vs_silicon import CONFIG, DATA, summarise
from benchmarks.perfmodel_vs_silicon_moe import LATEST, RUNS

from llm_operator import cli
from llm_operator.planning.perfmodel import MEASURED_ACCURACY, Accuracy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _accuracy(run: str, rows: list[dict], band: float) -> Accuracy:
    s = summarise(rows, band)
    return Accuracy(run, len(rows), tpot=round(s["tpot"]["within"], 2),
                    output_tps=round(s["tps"]["within"], 2), ttft=round(s["ttft"]["within"], 2))


def test_the_dense_note_is_the_current_runs_held_out_figures() -> None:
    data = json.loads(DATA.read_text())
    label = yaml.safe_load(CONFIG.read_text())["label"]
    held = [r for r in data["rows"] if not r["fit"]]
    assert MEASURED_ACCURACY["dense"] == _accuracy(label, held, data["band"])


def test_the_moe_note_is_the_current_runs_figures() -> None:
    data = json.loads(RUNS[LATEST][1].read_text())
    assert MEASURED_ACCURACY["moe"] == _accuracy(LATEST, data["rows"], data["band"])


def test_plan_prints_the_note_for_the_kind_of_model(capsys, tmp_path: Path) -> None:
    """Under the curve: the dense figures for a dense model, the MoE ones for an MoE."""
    assert cli.main(["plan", str(EXAMPLES / "llama-3.1-70b-h100.yaml")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert MEASURED_ACCURACY["dense"].note("dense models") in out
    assert "mixture-of-experts" not in out
    moe = tmp_path / "mixtral.yaml"
    moe.write_text(yaml.safe_dump({
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": "mix", "namespace": "ml"},
        "spec": {"model": {"name": "mistralai/Mixtral-8x7B-Instruct-v0.1"},
                 "gpus": {"product": "NVIDIA-H100-80GB-HBM3"},
                 "workload": {"concurrency": 32, "inputTokens": 1024, "outputTokens": 256}}}))
    assert cli.main(["plan", str(moe)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert MEASURED_ACCURACY["moe"].note("mixture-of-experts models") in out


def test_the_docs_at_a_glance_table_quotes_the_current_figures() -> None:
    """docs/production/performance-model.md opens with a table a reader takes in at once;
    its dense and MoE rows are the current runs' (the note's) figures, named by run."""
    doc = (EXAMPLES.parent / "docs" / "production" / "performance-model.md").read_text()
    glance = doc.split("## At a glance", 1)[1].split("## Point by point", 1)[0]
    for kind in ("dense", "moe"):
        acc = MEASURED_ACCURACY[kind]
        row = next(line for line in glance.splitlines() if f"({acc.run})" in line)
        assert f"{acc.tpot:.0%} / {acc.output_tps:.0%} / {acc.ttft:.0%}" in row, row

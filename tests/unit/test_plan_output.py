"""``llm-operator plan`` where the table does not fit: on an 80-column terminal or a pipe
(``plan FILE | less``: rich assumes 80 columns) one block per number, and the plan as
data with ``-o yaml|json`` as kubectl offers (issue 35 item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from llm_operator import cli

MANIFEST = ("apiVersion: llmops.dev/v1alpha1\nkind: LLMService\n"
            "metadata: {name: llama-70b, namespace: ml}\n"
            "spec:\n  model: {name: meta-llama/Llama-3.1-70B-Instruct}\n"
            "  gpus: {product: NVIDIA-H100-80GB-HBM3}\n")
KV_FORMULA = "floor((usable - weights per GPU) / (16-token block x KV bytes per token)) x 16"


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "llama70b.yaml"
    path.write_text(MANIFEST)
    return path


def test_at_80_columns_each_formula_keeps_its_words_together(
        manifest: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["plan", str(manifest), "--no-curve"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    # The table squeezed to 80 columns broke this formula a word or two per line.
    text = " ".join(line.strip() for line in lines)
    assert KV_FORMULA in text
    assert "tensorParallelSize = 4" in text and "kvTokenCapacity = " in text
    # Few lines hold a single word: the blocks wrap at the terminal, not per cell.
    lone = [line for line in lines if len(line.split()) == 1]
    assert len(lone) < len(lines) / 10, lone


def test_a_wide_terminal_keeps_the_table(manifest: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")
    assert cli.main(["plan", str(manifest), "--no-curve"]) == 0
    out = capsys.readouterr().out
    assert "how (formula; inputs)" in out and KV_FORMULA in out


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_the_plan_as_data_holds_every_number_with_its_inputs(
        manifest: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(manifest), "-o", fmt]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out) if fmt == "json" else next(yaml.safe_load_all(out))
    assert (doc["namespace"], doc["name"]) == ("ml", "llama-70b")
    plan = doc["plan"]
    assert plan["tensorParallelSize"] == 4 and plan["gpuProduct"] == "NVIDIA-H100-80GB-HBM3"
    kv = next(e for e in plan["explanations"] if e["name"] == "kvTokenCapacity")
    assert kv["value"] == plan["kvTokenCapacity"] and kv["unit"] == "tokens"
    assert kv["formula"] == KV_FORMULA and kv["inputs"]["blockSize"] == 16
    # Data only: nothing of the human output (no predicted curve, no table).
    assert "Predicted" not in out and "how (formula" not in out

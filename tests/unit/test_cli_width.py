"""`llm-operator plan` at 80 and 120 columns, piped, loses nothing (issue 59 item 4).

Piped output has no terminal: rich takes the width from ``COLUMNS`` (80 without it). At
either width no header or value is cut (rich's "…"), no line is wider than the terminal,
and no Python ``None`` leaks out: an unknown figure says why it is unknown. Run in this
process (not a child), so that it is this checkout's code that prints.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from llm_operator.api.models import load_services
from llm_operator.cli import main
from llm_operator.cli.tables import curve_table
from llm_operator.planning.perfmodel import curve_for
from llm_operator.planning.sizing import plan_for_slo
from llm_operator.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "examples").glob("*.yaml")) + [ROOT / "demo" / "tiny-llama-local.yaml"]


def _plan_output(path: Path, columns: int, monkeypatch: pytest.MonkeyPatch,
                 capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.delenv("LINES", raising=False)
    assert main(["plan", str(path)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_plan_piped_cuts_nothing_and_prints_no_none(
        path: Path, columns: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = _plan_output(path, columns, monkeypatch, capsys)
    assert "…" not in out, "\n".join(line for line in out.splitlines() if "…" in line)
    assert not re.search(r"\bNone\b", out), re.findall(r".*\bNone\b.*", out)
    too_wide = [line for line in out.splitlines() if len(line) > columns]
    assert not too_wide, too_wide
    assert "tensorParallelSize = " in out  # one block per number at these widths


def test_unknown_figures_say_why(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    h100 = _plan_output(ROOT / "examples" / "llama-3.1-70b-h100.yaml", 80, monkeypatch,
                        capsys)
    assert "fp4Flops = none: no fp4 tensor cores" in h100
    assert "activations = not quantized" in h100
    custom = _plan_output(ROOT / "examples" / "custom-model-pvc.yaml", 80, monkeypatch,
                          capsys)
    assert "bf16Flops = unknown: spec.gpus.memoryGib gives memory only" in custom


@pytest.mark.parametrize("columns", [80, 120])
def test_every_value_of_the_curve_appears_whole(columns: int) -> None:
    [(_, svc)] = list(load_services([str(ROOT / "examples" / "llama-3.1-70b-h100.yaml")]))
    settings = Settings()
    plan = plan_for_slo(svc.spec, gpus_per_node=settings.gpus_per_node)
    points, slo = curve_for(svc.spec, plan)
    console = Console(width=columns, record=True, file=io.StringIO())
    console.print(curve_table(points, "curve", slo, "caption", width=columns))
    text = console.export_text()
    assert "…" not in text
    assert all(len(line) <= columns for line in text.splitlines())
    cells = re.findall(r"[\d,]+(?:\.\d+)?", text)
    for p in points:  # every row's TTFT and goodput, whole
        assert f"{p.ttft_s * 1e3:,.0f}" in cells and f"{p.goodput(slo):,.0f}" in cells
    if columns == 80:  # short headers, each explained under the table
        flat = " ".join(text.split())
        assert "N: clients" in flat and "good/s: goodput tok/s" in flat
    else:
        assert "goodput" in text and "clients" in text


def test_curve_table_keeps_every_column_where_it_fits() -> None:
    [(_, svc)] = list(load_services([str(ROOT / "examples" / "llama-3.1-8b-l4.yaml")]))
    plan = plan_for_slo(svc.spec)
    points, slo = curve_for(svc.spec, plan)
    wide = curve_table(points, "curve", slo, "caption", width=200)
    assert [str(c.header) for c in wide.columns] == [
        "clients", "running", "queued", "output tok/s", "tok/s per user", "TTFT ms",
        "ITL ms", "ITL p95 ms", "bound", "goodput tok/s"]

"""``llm-operator plan --aic``: NVIDIA AIConfigurator's estimate beside the predicted curve
(issue 34 item 5). AIConfigurator itself is not installed in the unit tier: a stand-in
"Python" (a script that answers the request as AIConfigurator's would, from figures it
stored) checks the wiring; tests/aic/test_plan_aic.py runs the real one."""

from __future__ import annotations

import io
import json
import stat
import sys
from pathlib import Path

import pytest
from rich.console import Console

from llm_operator.api.models import parse_llmservice
from llm_operator.cli import main
from llm_operator.cli.aic import (
    AICError,
    aic_system,
    comparable,
    comparison_table,
    find_python,
    itl_p95_ms,
    request_for,
)
from llm_operator.planning import make_plan
from llm_operator.planning.perfmodel import curve_for

pytestmark = pytest.mark.unit

SVC = {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
       "metadata": {"name": "chat", "namespace": "ml"},
       "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                "gpus": {"product": "NVIDIA-H100-80GB-HBM3"},
                "workload": {"inputTokens": 512, "outputTokens": 256, "concurrency": 64,
                             "slo": {"ttftP95Ms": 2000, "itlP95Ms": 50}}}}


def _spec(**model: object):
    body = json.loads(json.dumps(SVC))
    body["spec"]["model"].update(model)
    return parse_llmservice(body).spec


def _schedule(b: int, mix: float = 30.0, gen: float = 7.0) -> dict[str, float]:
    return {"mixSteps": float(b), "mixStepMs": mix, "genonlyStepMs": gen,
            "decodeIterations": 256.0}


def _answer(batches: list[int]) -> dict[str, object]:
    """What AIConfigurator answers: figures per batch, OOM from 128 sequences."""
    out: dict[str, object] = {}
    for b in batches:
        out[str(b)] = ({"oom": "OOM: the KV cache does not fit"} if b >= 128 else
                       {"ttftMs": 40.0 + b, "tpotMs": 6.0 + b / 16, "outputTps": 150.0 * b,
                        "schedule": _schedule(b)})
    return {"version": "0.12.0", "tables": "0.24.0", "batches": out}


def test_the_gpu_products_aiconfigurator_has_tables_for() -> None:
    assert aic_system("NVIDIA-H100-80GB-HBM3") == "h100_sxm"
    assert aic_system("NVIDIA-H200") == "h200_sxm"
    with pytest.raises(AICError, match="no tables for spec.gpus.product 'NVIDIA-A10G'"):
        aic_system("NVIDIA-A10G")


def test_the_request_is_the_services_lengths_at_the_plans_parallelism() -> None:
    spec = _spec(quantization="fp8")
    plan = make_plan(spec)
    req = request_for(spec, plan, "meta-llama/Meta-Llama-3.1-8B", [8, 1, 8, 64])
    assert req == {"model": "meta-llama/Meta-Llama-3.1-8B", "system": "h100_sxm",
                   "tp": plan.tensor_parallel_size, "pp": 1, "isl": 512, "osl": 256,
                   "quant": "fp8", "moeTp": None, "batches": [1, 8, 64]}
    assert request_for(_spec(), plan, "m", [1], experts=True)["quant"] is None
    assert request_for(_spec(), plan, "m", [1], experts=True)["moeTp"] == (
        plan.tensor_parallel_size)


def test_the_itl_p95_is_the_prompt_step_once_it_is_over_5_percent_of_the_steps() -> None:
    assert itl_p95_ms(_schedule(13), 13) == 7.0  # 12 of 256 steps carry other prompts
    assert itl_p95_ms(_schedule(14), 14) == 30.0  # 13 of 256: 5.1%


def test_the_table_sets_our_figures_beside_aiconfigurators() -> None:
    spec = _spec()
    plan = make_plan(spec)
    points, slo = curve_for(spec, plan)
    rows = comparable(points)
    assert rows and all(p.limit == "clients" for p in rows)
    table = comparison_table(points, _answer([p.concurrency for p in rows]), "h100_sxm", slo)
    out = io.StringIO()
    Console(file=out, width=200).print(table)
    text = out.getvalue()
    words = " ".join(text.split())  # the title wraps at the table's width
    assert "NVIDIA AIConfigurator 0.12.0 (vLLM kernel tables 0.24.0, h100_sxm)" in words
    assert "both estimates, neither measured" in words
    one = next(p for p in rows if p.concurrency == 8)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("│       8 │"))
    assert f"{one.output_tps:,.0f}" in line and "1,200" in line  # ours, then 150 x 8
    assert f"{one.output_tps / 1200:.2f}" in line
    assert "30.0" not in line and "7.0" in line  # 7 of 256 steps: the decode step's p95
    assert "OOM in AIC" in text  # 128 and above


def _fake_python(tmp_path: Path, answer: str) -> Path:
    """A stand-in for AIConfigurator's Python: it checks it is run as ``python -c SCRIPT``
    with the request on stdin, records the request, and prints ``answer`` (Python code
    that builds the reply from ``req``)."""
    script = tmp_path / "fake-python"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "assert sys.argv[1] == '-c' and 'cli_estimate' in sys.argv[2]\n"
        "req = json.load(sys.stdin)\n"
        f"open({str(tmp_path / 'request.json')!r}, 'w').write(json.dumps(req))\n"
        f"{answer}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_plan_aic_prints_the_estimate_beside_the_curve(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "svc.yaml"
    path.write_text(json.dumps(SVC))
    reply = ("sys.path.insert(0, " + repr(str(Path(__file__).parent)) + ")\n"
             "from test_plan_aic import _answer\n"
             "print(json.dumps(_answer(req['batches'])))")
    python = _fake_python(tmp_path, reply)
    assert main(["plan", str(path), "--aic", str(python),
                 "--aic-model", "meta-llama/Meta-Llama-3.1-8B"]) == 0
    out = capsys.readouterr().out
    assert "Predicted beside NVIDIA AIConfigurator 0.12.0" in out
    req = json.loads((tmp_path / "request.json").read_text())
    assert req["model"] == "meta-llama/Meta-Llama-3.1-8B" and req["system"] == "h100_sxm"
    assert req["batches"] and max(req["batches"]) <= 256


def test_plan_aic_says_why_when_aiconfigurator_cannot_answer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "svc.yaml"
    path.write_text(json.dumps(SVC))
    python = _fake_python(tmp_path, "print(json.dumps({'error': 'HuggingFaceDownloadError: "
                                    "Failed to download config.json'}))")
    assert main(["plan", str(path), "--aic", str(python)]) == 0  # the plan still prints
    out = capsys.readouterr().out
    assert "No AIConfigurator estimate: AIConfigurator: HuggingFaceDownloadError" in out
    assert "pass --aic-model" in out
    req = json.loads((tmp_path / "request.json").read_text())
    assert req["model"] == "meta-llama/Llama-3.1-8B-Instruct"  # spec.model.name by default
    # No AIConfigurator anywhere: the fix is said.
    monkeypatch.delenv("LLMOP_AIC_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(AICError, match=r"not found: install AIConfigurator .*--aic "):
        find_python("auto")
    with pytest.raises(AICError, match="--aic /nowhere/python: no such Python"):
        find_python("/nowhere/python")
    monkeypatch.setenv("LLMOP_AIC_PYTHON", str(python))
    assert find_python("auto") == str(python)

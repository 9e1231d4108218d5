"""An operator without a Prometheus URL (the chart's default) cannot adapt: a service
that asks for adaptation says so in ``MetricsAvailable`` with the fix, and its pods are
rendered without the live admission cap, which nothing would move (issue 35 items 2, 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llm_operator.api.models import parse_llmservice
from llm_operator.health import status as st

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


def spec(mode: str, **adaptation: object) -> object:
    return parse_llmservice({
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": "m", "namespace": "team"},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                 "gpus": {"product": "L4"}, "adaptation": {"mode": mode, **adaptation}}}).spec


@pytest.mark.parametrize(("mode", "what"), [
    ("Apply", "no admission cap is rendered"), ("Recommend", "no recommendation is made")])
def test_a_mode_that_needs_prometheus_says_why_it_cannot_run_and_the_fix(
        mode: str, what: str) -> None:
    s = spec(mode)
    out = st.with_no_prometheus({"conditions": []}, s, 3, NOW)
    cond = st.get_condition(out["conditions"], st.ConditionType.METRICS_AVAILABLE)
    assert cond is not None and cond["status"] == "False"
    assert cond["reason"] == "PrometheusNotConfigured" and cond["observedGeneration"] == 3
    msg = cond["message"]
    assert f"spec.adaptation.mode is {mode}" in msg and what in msg
    assert "settings.prometheusUrl" in msg and "kube-prometheus-prometheus" in msg
    assert "settings.podMonitorLabels" in msg and "Disabled" in msg


def test_disabled_adaptation_asks_for_nothing() -> None:
    before = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert st.with_no_prometheus(before, spec("Disabled"), 1, NOW) == before


def test_the_live_cap_needs_an_operator_that_can_move_it() -> None:
    s = spec("Apply")
    assert st.live_cap_in_use(s, {}) is True
    assert st.live_cap_in_use(s, {}, adaptation_runs=False) is False


def _render(example: str, prometheus_url: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LLMOP_PROMETHEUS_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "operator"), env.get("PYTHONPATH", "")])
    if prometheus_url:
        env["LLMOP_PROMETHEUS_URL"] = prometheus_url
    out = subprocess.run([sys.executable, "-m", "llm_operator.cli", "render",
                          str(ROOT / "examples" / example)], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    return next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")


def test_render_leaves_the_scheduler_class_out_without_prometheus() -> None:
    # The 70B example asks for adaptation in Apply mode.
    without = _render("llama-3.1-70b-h100.yaml", None)
    args = without["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--scheduler-cls") for a in args), args
    with_url = _render("llama-3.1-70b-h100.yaml", "http://prometheus:9090")
    args = with_url["spec"]["template"]["spec"]["containers"][0]["args"]
    assert any(a.startswith("--scheduler-cls") for a in args), args

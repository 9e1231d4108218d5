"""The alerts the chart ships (charts/llm-operator/files/prometheus-rules.yaml, rendered as a
PrometheusRule by templates/prometheusrule.yaml), checked by a real promtool.

What runs for real: helm renders the chart; promtool (Debian's prometheus package, which
``tools/setup.sh --tests`` installs) checks the rules and runs the unit tests of
tests/chart/data/alerts.test.yaml on the rules as the chart renders them, so a value that
changes a rule is tested in the form a Prometheus would load; the operator's own
``/metrics`` is served over HTTP by a real :class:`OperatorMetrics`. No Prometheus server,
no cluster.
"""

from __future__ import annotations

import re
import socket
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from llm_operator.adaptation import prometheus as vllm_queries
from llm_operator.adaptation.policy import DecisionCause
from llm_operator.api.models import parse_llmservice
from llm_operator.controller.metrics import OperatorMetrics
from tests.support.schemas import load_schema

from .conftest import CHART, NAMESPACE, ROOT, Render

RULES_FILE = CHART / "files" / "prometheus-rules.yaml"
PROMTOOL_TESTS = Path(__file__).parent / "data" / "alerts.test.yaml"
RUNBOOK = ROOT / "docs" / "production" / "alerts.md"
ENABLED = {"prometheusRule": {"enabled": True}}
ALERTS = [
    "LLMServiceNotAvailable", "LLMServiceMetricsMissing", "LLMServiceAdaptationAtBound",
    "LLMServicePreemptionsSustained", "LLMServiceSLOMissedAtFloor", "LLMServiceTuningFailed",
    "LLMOperatorDown", "LLMOperatorReconcileErrors",
]  # fmt: skip
METRIC_NAME = re.compile(r"\b((?:vllm:|llmop_)[a-zA-Z0-9_:]+)")


def file_rules() -> list[dict[str, Any]]:
    """Every rule of the plain rules file."""
    doc = yaml.safe_load(RULES_FILE.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def rendered_rule(render: Render, values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The PrometheusRule the chart renders with the alerts on (plus ``values``)."""
    merged: dict[str, Any] = {"prometheusRule": {"enabled": True}}
    for key, value in (values or {}).items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
    return render(merged).one("PrometheusRule")


def promtool_run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_the_plain_rules_file_passes_promtool_check(promtool: str) -> None:
    """files/prometheus-rules.yaml is a rules file Prometheus loads as it is."""
    proc = promtool_run(promtool, "check", "rules", str(RULES_FILE), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout


def test_the_chart_ships_the_rules_file_unchanged_by_default(render: Render) -> None:
    """With default values the PrometheusRule holds exactly the file's groups: the promtool
    tests of either are tests of both."""
    rule = rendered_rule(render)
    assert rule["spec"]["groups"] == yaml.safe_load(RULES_FILE.read_text())["groups"]
    assert [r["alert"] for r in file_rules()] == ALERTS


@pytest.mark.parametrize("values", [
    {},
    {"prometheusRule": {"runbookBaseUrl": "https://wiki.example.com/llm/alerts",
                        "alerts": {"LLMServiceNotAvailable": {"for": "15m"}}}},
], ids=["defaults", "own-runbooks"])
def test_every_alert_fires_and_stays_quiet_as_promtool_tests_say(
    promtool: str, render: Render, tmp_path: Path, values: dict[str, Any]
) -> None:
    """`promtool check rules` and `promtool test rules` on the rules as the chart renders
    them: for every alert, series that make it fire and series that must not."""
    rule = rendered_rule(render, values)
    (tmp_path / "prometheus-rules.yaml").write_text(
        yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    tests = yaml.safe_load(PROMTOOL_TESTS.read_text())
    base = values.get("prometheusRule", {}).get("runbookBaseUrl")
    if base:  # the same tests, expecting the user's runbook page
        default = "https://github.com/llmops-dev/llm-operator/blob/main/docs/production/alerts.md"
        for test in tests["tests"]:
            for case in test["alert_rule_test"]:
                for alert in case["exp_alerts"]:
                    ann = alert["exp_annotations"]
                    ann["runbook_url"] = ann["runbook_url"].replace(default, base)
    (tmp_path / "alerts.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    assert_rules_pass_promtool(promtool, tmp_path)


def assert_rules_pass_promtool(promtool: str, folder: Path) -> None:
    """``promtool check rules`` on ``folder/prometheus-rules.yaml``, then ``promtool test
    rules`` of ``folder/alerts.test.yaml`` (its ``rule_files`` names that file)."""
    check = promtool_run(promtool, "check", "rules", "prometheus-rules.yaml", cwd=folder)
    assert check.returncode == 0, check.stdout + check.stderr
    proc = promtool_run(promtool, "test", "rules", "alerts.test.yaml", cwd=folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_tests_cover_every_alert_firing_and_quiet() -> None:
    """Each alert has a case where it fires and one where it does not, and every firing
    alert's annotations are spelt out (promtool compares them exactly)."""
    tests = yaml.safe_load(PROMTOOL_TESTS.read_text())
    fired: set[str] = set()
    quiet: set[str] = set()
    for test in tests["tests"]:
        for case in test["alert_rule_test"]:
            (fired if case["exp_alerts"] else quiet).add(case["alertname"])
            for alert in case["exp_alerts"]:
                assert set(alert["exp_annotations"]) == {"summary", "description",
                                                         "runbook_url"}, alert
    assert fired == set(ALERTS), f"never firing in a test: {set(ALERTS) - fired}"
    assert quiet == set(ALERTS), f"never checked quiet: {set(ALERTS) - quiet}"


def test_alert_for_and_runbook_values_reach_the_rendered_rules(render: Render) -> None:
    """prometheusRule.alerts.<name>.for sets that alert's `for`, runbookBaseUrl the page
    every runbook_url points into (each keeping its section), labels and namespace the
    object's; the result still passes the PrometheusRule schema."""
    rule = rendered_rule(render, {"prometheusRule": {
        "alerts": {"LLMOperatorDown": {"for": "2m"}, "LLMServiceTuningFailed": {"for": "5m"}},
        "runbookBaseUrl": "https://wiki.example.com/llm/alerts/",
        "labels": {"release": "kps"}, "namespace": "monitoring"}})
    jsonschema.validate(rule, load_schema("prometheusrule"))
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["metadata"]["namespace"] == "monitoring"
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert rules["LLMOperatorDown"]["for"] == "2m"
    assert rules["LLMServiceTuningFailed"]["for"] == "5m"
    assert rules["LLMServiceNotAvailable"]["for"] == "15m"
    for name, r in rules.items():
        assert r["annotations"]["runbook_url"] == (
            f"https://wiki.example.com/llm/alerts#{name.lower()}")


def test_prometheus_rule_is_off_by_default_and_in_the_release_namespace(render: Render) -> None:
    """No Prometheus Operator is assumed; when on, the object lands in the release's
    namespace and validates against the Prometheus Operator's PrometheusRule schema."""
    assert render().of_kind("PrometheusRule") == []
    rule = rendered_rule(render)
    assert rule["metadata"]["namespace"] == NAMESPACE
    jsonschema.validate(rule, load_schema("prometheusrule"))


def test_the_schema_refuses_what_the_crd_refuses(render: Render) -> None:
    """The PrometheusRule schema is not a rubber stamp: a bad duration, a rule without an
    expression and a misspelt field each fail it."""
    schema = load_schema("prometheusrule")
    good = rendered_rule(render)
    for path, value in ((("spec", "groups", 0, "rules", 0, "for"), "15 minutes"),
                        (("spec", "groups", 0, "rules", 0, "expr"), None),
                        (("spec", "groups", 0, "rules", 0, "annotation"), {"a": "b"})):
        bad = yaml.safe_load(yaml.safe_dump(good))
        node = bad
        for key in path[:-1]:
            node = node[key]
        if value is None:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_non_default_vllm_labels_are_refused_with_the_fix(render: Render) -> None:
    """The expressions join on the labels the PodMonitor sets by default: other label
    settings are refused at render time, naming both settings and the fix."""
    result = render({**ENABLED, "settings": {"prometheusServiceLabel": "app"}}, check=False)
    assert result.returncode != 0
    assert "settings.prometheusServiceLabel=llmservice" in result.stderr
    assert "prometheusRule.enabled=false" in result.stderr


def test_unknown_alert_names_are_refused(render: Render) -> None:
    """A misspelt alert under prometheusRule.alerts is an error, not a silent no-op."""
    result = render({"prometheusRule": {"enabled": True,
                                        "alerts": {"LLMServiceDown": {"for": "1m"}}}},
                    check=False)
    assert result.returncode != 0
    assert "LLMServiceDown" in result.stderr


def test_the_service_monitor_gives_the_labels_the_alerts_select(render: Render) -> None:
    """The operator's series keep the LLMService's namespace (honorLabels) and its target
    gets the job the LLMOperatorDown alert selects, whatever the release is called."""
    sm = render({"metrics": {"serviceMonitor": {"enabled": True}}}).one("ServiceMonitor")
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True
    (relabel,) = [r for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
    down = next(r for r in file_rules() if r["alert"] == "LLMOperatorDown")
    assert f'up{{job="{relabel["replacement"]}"}}' in down["expr"]


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a page's headings (lowercase, punctuation dropped, spaces to -)."""
    heads = re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_every_alert_is_documented_and_links_its_runbook_section() -> None:
    """Each alert has a severity, a summary, a description naming the service (or the
    operator) and a runbook_url whose section exists in docs/production/alerts.md, where
    the section says what it means, how to check and how to fix."""
    page = RUNBOOK.read_text()
    anchors = _anchors(page)
    for rule in file_rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        ann = rule["annotations"]
        assert ann["summary"] and ann["description"], name
        if name.startswith("LLMService"):
            for text in (ann["summary"], ann["description"]):
                assert "{{ $labels.namespace }}/{{ $labels.llmservice }}" in text, name
        url = ann["runbook_url"]
        assert url.startswith("https://github.com/llmops-dev/llm-operator/blob/main/"
                              "docs/production/alerts.md#"), url
        anchor = url.rpartition("#")[2]
        assert anchor in anchors, f"{name}: no section #{anchor} in {RUNBOOK}"
        section = page.split(f"## {name}", 1)[1].split("\n## ", 1)[0]
        for part in ("**Means**", "**Check**", "**Fix**"):
            assert part in section, f"{name}'s runbook lacks {part}"


def test_alert_expressions_name_real_vllm_series() -> None:
    """Every vLLM series an alert reads is one the operator's own queries use
    (llm_operator.adaptation.prometheus): a rename there breaks this test."""
    known = {v for k, v in vars(vllm_queries).items()
             if k.startswith("VLLM_") and isinstance(v, str)}
    used = {m for r in file_rules() for m in METRIC_NAME.findall(r["expr"])
            if m.startswith("vllm:")}
    assert used, "no vLLM series in the alerts?"
    base = {re.sub(r"_(bucket|sum|count)$", "", m) for m in used}
    assert base <= known, f"unknown vLLM series: {sorted(base - known)}"


def test_alert_expressions_name_series_the_operator_serves() -> None:
    """The operator's real /metrics (an OperatorMetrics serving over HTTP) holds every
    llmop_ series the alerts read, once it has seen a service, a decision, a condition, a
    tuning failure and a failed reconciliation: a renamed operator metric breaks this."""
    metrics = OperatorMetrics()
    svc = parse_llmservice({
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": "llama", "namespace": "team-a"},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": {"product": "L4"},
                 "workload": {"slo": {"ttftP95Ms": 800}}}})
    metrics.service_spec("team-a", "llama", svc.spec)
    metrics.decision("team-a", "llama", "hold", "Apply", DecisionCause.AT_BOUND.value, 8)
    metrics.adaptation_limits("team-a", "llama", lower=1, upper=8, kv_fit=6)
    metrics.conditions("team-a", "llama", [{"type": "Available", "status": "True"}])
    metrics.tuning_event("team-a", "llama", "TuningFailed")
    with pytest.raises(RuntimeError), metrics.timed_reconcile("handler"):
        raise RuntimeError("apply failed")
    assert metrics.serve(0) is False  # 0 turns the server off; serve on a free port:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert metrics.serve(port, addr="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    finally:
        metrics.stop()
    served = set(re.findall(r"^(llmop_[a-zA-Z0-9_:]+)(?:\{| )", text, flags=re.M))
    used = {m for r in file_rules() for m in METRIC_NAME.findall(r["expr"])
            if m.startswith("llmop_")}
    assert used and used <= served, f"not served: {sorted(used - served)}"

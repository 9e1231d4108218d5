"""The chart beside kube-prometheus-stack, with the REAL Prometheus Operator on the REAL
control plane: ``helm install`` with docs/production/kube-prometheus-stack-values.yaml and
no other edit, and the operator's ServiceMonitor, the PodMonitor the operator renders for
an LLMService, and the alerts' PrometheusRule all reach the stack's Prometheus.

What is real: the control plane (its own, started for this module, so the Prometheus
Operator's CRDs do not change what the session's other tests see), the chart installed
by helm, our operator run with the chart's ServiceAccount token and settings, and the
Prometheus Operator v0.85.0 (built from the Go module proxy by ``tools/setup.sh --tests``)
with its release's CRDs. It writes the configuration and rule files a Prometheus would
load; that Prometheus is not started (its StatefulSet's pod needs an image), so the
generated files are checked with promtool: the rules as generated pass ``promtool test
rules`` with the chart tier's alert tests (every alert firing and quiet).

The Prometheus object has the selectors kube-prometheus-stack 88.5.3 renders with its
defaults for a release named ``kube-prometheus-stack`` (``release:
kube-prometheus-stack`` for ServiceMonitors, PodMonitors and PrometheusRules, every
namespace); a second Prometheus selecting another release is the control: it gets none of
ours. The dashboard's ConfigMap is checked for what the stack's Grafana sidecar watches
(label ``grafana_dashboard: "1"``, every namespace); Grafana itself is not run here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator_sandbox.cluster import Installed, LocalCluster, binaries_present, helm_install
from llm_operator_sandbox.podmonitor_sd import relabel_configs
from llm_operator_sandbox.prometheus_operator import (
    PrometheusOperator,
    generated_config,
    generated_rule_files,
    install_crds,
    operator_dir,
    operator_present,
)
from tests.chart.test_alerts import ALERTS, PROMTOOL_TESTS, assert_rules_pass_promtool
from tests.support.emulator import EXAMPLES_DIR, ROOT, OperatorProcess, kubectl_binary, wait_for

from .conftest import CHART, ClusterKubectl, helm_binary
from .test_control_plane import forbidden_lines

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

VALUES = ROOT / "docs" / "production" / "kube-prometheus-stack-values.yaml"
STACK_RELEASE = "kube-prometheus-stack"
MONITORING = "monitoring"
EXAMPLE = EXAMPLES_DIR / "llama-3.1-8b-l4.yaml"
DASHBOARD = CHART / "files" / "dashboard.json"


def stack_prometheus(name: str, release: str) -> dict[str, Any]:
    """A Prometheus with kube-prometheus-stack's default selectors for ``release``."""
    selector = {"matchLabels": {"release": release}}
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
        "metadata": {"name": name, "namespace": MONITORING},
        "spec": {
            "serviceMonitorSelector": selector, "serviceMonitorNamespaceSelector": {},
            "podMonitorSelector": selector, "podMonitorNamespaceSelector": {},
            "ruleSelector": selector, "ruleNamespaceSelector": {},
            "probeSelector": selector, "probeNamespaceSelector": {},
            "scrapeConfigSelector": selector, "scrapeConfigNamespaceSelector": {},
        },
    }


@dataclass
class Stack:
    cluster: LocalCluster
    admin: ClusterKubectl
    prometheus_operator: PrometheusOperator
    installed: Installed


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not binaries_present() or not operator_present():
        pytest.fail(f"the control plane or the Prometheus Operator is not built (see "
                    f"{operator_dir()}): run `bash tools/setup.sh --tests` and "
                    "`bash tools/setup.sh --controllers` (tools/test.sh does both)")
    workdir = tmp_path_factory.mktemp("kps-cluster")
    with LocalCluster(workdir, out=lambda line: sys.stderr.write(line + "\n")) as cluster:
        admin = ClusterKubectl(cluster.admin_kubeconfig, workdir / "kube-cache")
        install_crds(kubectl_binary(), cluster.admin_kubeconfig)
        with PrometheusOperator(cluster.admin_kubeconfig, workdir) as prometheus_operator:
            admin.run("create", "namespace", MONITORING)
            admin.apply_obj(stack_prometheus("kps", STACK_RELEASE))
            admin.apply_obj(stack_prometheus("other", "another-release"))
            # The documented values file as it is; only replicaCount: 0, since no image
            # runs here (the operator runs as a local process with the chart's token),
            # and cluster-wide, since each test has a namespace of its own.
            values = {**yaml.safe_load(VALUES.read_text()), "replicaCount": 0,
                      "clusterWide": True}
            installed = helm_install(cluster, helm_binary(), kubectl_binary(), CHART,
                                     values=values)
            yield Stack(cluster, admin, prometheus_operator, installed)


def config_of(stack: Stack, prometheus: str) -> dict[str, Any] | None:
    text = generated_config(kubectl_binary(), stack.cluster.admin_kubeconfig, MONITORING,
                            prometheus)
    return yaml.safe_load(text) if text else None


def jobs(config: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {j["job_name"]: j for j in (config or {}).get("scrape_configs") or []}


def test_the_stack_scrapes_the_operator_and_its_services_and_loads_the_alerts(
    stack: Stack, promtool: str, tmp_path: Path
) -> None:
    admin, installed = stack.admin, stack.installed
    operator = OperatorProcess(installed.kubeconfig, tmp_path / "operator.log", [],
                               env={**installed.env, "LLMOP_METRICS_PORT": "0"}).start()
    try:
        operator.wait_log("Initial authentication has finished", timeout=60)
        admin.run("create", "namespace", "serving")
        admin.apply(EXAMPLE, "serving")
        (svc,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
        name = svc["metadata"]["name"]
        podmonitor = wait_for(lambda: admin.get("podmonitors", name, "serving"), 90,
                              "the operator's PodMonitor")
    finally:
        operator.stop()
    assert not forbidden_lines(operator.log()), forbidden_lines(operator.log())
    # The chart's settings reached the operator: the PodMonitor carries the stack's label.
    assert podmonitor["metadata"]["labels"]["release"] == STACK_RELEASE

    # --- What the Prometheus Operator generated for the stack's Prometheus --------------
    pod_job = f"podMonitor/serving/{name}/0"
    (monitor,) = admin.items("servicemonitors", installed.namespace)
    service_job = f"serviceMonitor/{installed.namespace}/{monitor['metadata']['name']}/0"

    def both_jobs() -> dict[str, dict[str, Any]] | None:
        found = jobs(config_of(stack, "kps"))
        return found if {pod_job, service_job} <= found.keys() else None

    found = wait_for(both_jobs, 60, f"jobs {pod_job} and {service_job} in the generated "
                     f"configuration ({stack.prometheus_operator.log()[-2000:]})", interval=1)
    # The vLLM pods' job: the sandbox's stand-in for this generator (podmonitor_sd, which
    # the Prometheus-tier tests use) writes the same relabelling, rule for rule.
    # The one difference is the shard's number, which the Prometheus pod's config
    # reloader substitutes for `$(SHARD)` (0 with one shard), as the stand-in does.
    endpoint = podmonitor["spec"]["podMetricsEndpoints"][0]
    generated = json.loads(json.dumps(found[pod_job]["relabel_configs"]).replace(
        "$(SHARD)", "0"))
    assert generated == relabel_configs(podmonitor, endpoint), json.dumps(generated, indent=1)
    assert found[pod_job]["kubernetes_sd_configs"][0]["role"] == "pod"
    assert found[pod_job]["kubernetes_sd_configs"][0]["namespaces"]["names"] == ["serving"]
    assert found[pod_job]["metrics_path"] == endpoint.get("path", "/metrics")
    assert found[pod_job]["scrape_interval"] == endpoint["interval"]
    # The operator's own job keeps the labels the alerts select on (honorLabels).
    assert found[service_job]["honor_labels"] is True

    # --- The alerts, as the stack's Prometheus would load them -------------------------
    files = wait_for(lambda: generated_rule_files(
        kubectl_binary(), stack.cluster.admin_kubeconfig, MONITORING, "kps"), 60,
        "the generated rule files", interval=1)
    ours = [text for text in files.values() if "LLMOperatorDown" in text]
    assert len(ours) == 1, sorted(files)
    alerts = [rule["alert"] for group in yaml.safe_load(ours[0])["groups"]
              for rule in group["rules"]]
    assert sorted(alerts) == sorted(ALERTS)
    (tmp_path / "prometheus-rules.yaml").write_text(ours[0])
    (tmp_path / "alerts.test.yaml").write_text(PROMTOOL_TESTS.read_text())
    assert_rules_pass_promtool(promtool, tmp_path)

    # --- The control: a Prometheus selecting another release gets none of it -----------
    other = wait_for(lambda: config_of(stack, "other"), 60, "the other Prometheus' config")
    assert not [j for j in jobs(other) if name in j or installed.namespace in j], jobs(other)
    other_files = generated_rule_files(kubectl_binary(), stack.cluster.admin_kubeconfig,
                                       MONITORING, "other")
    assert not [t for t in other_files.values() if "LLMOperatorDown" in t]


def test_the_dashboard_is_where_the_stacks_grafana_sidecar_looks(stack: Stack) -> None:
    """kube-prometheus-stack's Grafana runs a sidecar that loads every ConfigMap labelled
    ``grafana_dashboard: "1"`` in any namespace (its values: sidecar.dashboards.label,
    labelValue, searchNamespace: ALL); the chart's default puts the dashboard there."""
    maps = stack.admin.items("configmaps", None, "grafana_dashboard=1")
    assert len(maps) == 1, [m["metadata"]["name"] for m in maps]
    (data,) = maps[0]["data"].values()
    assert json.loads(data) == json.loads(DASHBOARD.read_text())


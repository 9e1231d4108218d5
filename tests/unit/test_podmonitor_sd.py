"""The rendered PodMonitor translated into Prometheus file-based discovery
(:mod:`llm_operator_sandbox.podmonitor_sd`), checked against the operator's own renderer.

The relabel rules are run here by :func:`relabel`, a small re-implementation of
Prometheus' relabelling (keep, drop, replace, hashmod; full-match regexes; ``__``
labels removed at the end) so the unit tier can say which pods a job keeps and which
labels their series get. The prometheus tier (``tests/prometheus/test_podmonitor_sd.py``)
checks the same against a real Prometheus.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
from tests.support.podmonitor import pod_of, rendered

from llm_operator_sandbox import podmonitor_sd

# --- Prometheus' relabelling, for the assertions -----------------------------------------

def _expand(match: re.Match[str], replacement: str) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: match.group(int(m.group(1)))
                  if m.group(1).isdigit() else "", replacement)


def relabel(labels: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus' relabelling of one target (None: dropped)."""
    labels = dict(labels)
    for rule in rules:
        action = rule.get("action", "replace")
        value = rule.get("separator", ";").join(labels.get(s, "")
                                                for s in rule.get("source_labels", []))
        regex = re.compile(f"^(?:{rule.get('regex', '(.*)')})$")
        match = regex.match(value)
        if action == "keep" and not match:
            return None
        if action == "drop" and match:
            return None
        if action == "replace" and match:
            result = _expand(match, str(rule.get("replacement", "$1")))
            if result:
                labels[rule["target_label"]] = result
            else:
                labels.pop(rule["target_label"], None)
        if action == "hashmod":
            digest = hashlib.md5(value.encode()).digest()  # noqa: S324 - Prometheus' own
            labels[rule["target_label"]] = str(int.from_bytes(digest[8:], "big")
                                               % rule["modulus"])
    return labels


def scraped(job: dict[str, Any], groups: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The targets a job keeps, with their final labels (and ``__address__``)."""
    out = []
    for group in groups:
        for target in group["targets"]:
            start = {**group["labels"], "__address__": target, "job": job["job_name"],
                     "__metrics_path__": job.get("metrics_path", "/metrics")}
            final = relabel(start, job["relabel_configs"])
            if final is not None:
                out.append({k: v for k, v in final.items()
                            if not k.startswith("__") or k == "__address__"})
    return out


def pods_in(groups: list[dict[str, Any]]) -> set[str]:
    """The pod names of target groups."""
    return {g["labels"]["__meta_kubernetes_pod_name"] for g in groups}


# --- the translation ----------------------------------------------------------------------

def test_the_rendered_monitor_becomes_the_prometheus_operators_job() -> None:
    _, monitor = rendered()
    [job] = podmonitor_sd.scrape_configs(monitor, "/sd")
    assert job["job_name"] == "podMonitor/team-a/llama-3-1-8b/0"
    assert job["scrape_interval"] == "30s" and job["metrics_path"] == "/metrics"
    assert job["honor_labels"] is False
    assert job["file_sd_configs"] == [{"files": ["/sd/podMonitor_team-a_llama-3-1-8b_0.json"],
                                       "refresh_interval": "1s"}]
    rules = job["relabel_configs"]
    assert rules[0] == {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}
    assert rules[1] == {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
                        "regex": "(Failed|Succeeded)"}
    # keep on the selector, sorted by key, sanitised, with the labelpresent guard
    assert rules[2] == {"action": "keep", "regex": "(server);true", "source_labels": [
        "__meta_kubernetes_pod_label_llmops_dev_component",
        "__meta_kubernetes_pod_labelpresent_llmops_dev_component"]}
    assert rules[3]["regex"] == "(llama-3-1-8b);true"
    assert rules[4] == {"action": "keep", "regex": "http",
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"]}
    assert {"target_label": "job", "replacement": "team-a/llama-3-1-8b"} in rules
    assert {"target_label": "endpoint", "replacement": "http"} in rules
    # the operator's own relabelings come after the generated ones, before sharding
    own = [r for r in rules if r.get("target_label") == "llmservice"]
    assert own == [{"source_labels": ["__meta_kubernetes_pod_label_llmops_dev_llmservice"],
                    "target_label": "llmservice", "action": "replace"}]
    assert rules[-1]["action"] == "keep" and rules[-2]["action"] == "hashmod"


def test_a_pod_of_the_service_gets_the_labels_the_adaptation_queries_group_by() -> None:
    deployment, monitor = rendered()
    pod = pod_of(deployment)
    [job] = podmonitor_sd.scrape_configs(monitor, "/sd")
    files = podmonitor_sd.discovery_files([monitor], [pod])
    [target] = scraped(job, files["podMonitor_team-a_llama-3-1-8b_0.json"])
    assert target == {
        "__address__": "127.0.0.1:43123",  # the agent's local port, not 8000
        "job": "team-a/llama-3-1-8b", "namespace": "team-a", "pod": pod["metadata"]["name"],
        "container": "vllm", "endpoint": "http", "llmservice": "llama-3-1-8b",
    }


def test_pods_of_another_service_and_the_tuning_pod_are_discovered_then_dropped() -> None:
    deployment, monitor = rendered()
    other, _ = rendered("qwen")
    tuning = pod_of(deployment, "tune1")
    tuning["metadata"]["labels"]["llmops.dev/component"] = "tuning"
    [job] = podmonitor_sd.scrape_configs(monitor, "/sd")
    groups = podmonitor_sd.discovery_files([monitor], [pod_of(other, "o1"), tuning,
                                                       pod_of(deployment, "s1")])
    groups_of_job = groups["podMonitor_team-a_llama-3-1-8b_0.json"]
    # every pod of the namespace is discovered (each container a target) ...
    assert pods_in(groups_of_job) == {"qwen-7d9f-o1", "llama-3-1-8b-7d9f-tune1",
                                      "llama-3-1-8b-7d9f-s1"}
    kept = scraped(job, groups_of_job)
    assert [t["pod"] for t in kept] == ["llama-3-1-8b-7d9f-s1"]  # ... the selector keeps one


def test_only_the_monitors_namespaces_are_discovered() -> None:
    deployment, monitor = rendered()
    elsewhere, _ = rendered(namespace="team-b")
    pods = [pod_of(elsewhere), pod_of(deployment)]

    def namespaces() -> set[str]:
        groups = podmonitor_sd.discovery_files([monitor], pods)[
            "podMonitor_team-a_llama-3-1-8b_0.json"]
        return {g["labels"]["__meta_kubernetes_namespace"] for g in groups}

    assert namespaces() == {"team-a"}  # no namespaceSelector: the monitor's own
    monitor["spec"]["namespaceSelector"] = {"matchNames": ["team-b"]}
    assert namespaces() == {"team-b"}
    monitor["spec"]["namespaceSelector"] = {"any": True}
    assert namespaces() == {"team-a", "team-b"}


def test_failed_and_succeeded_pods_are_dropped_not_ready_ones_are_scraped() -> None:
    deployment, monitor = rendered()
    [job] = podmonitor_sd.scrape_configs(monitor, "/sd")
    for phase, kept in (("Running", 1), ("Pending", 1), ("Failed", 0), ("Succeeded", 0)):
        groups = podmonitor_sd.pod_target_groups(pod_of(deployment, ready=False, phase=phase))
        assert len(scraped(job, groups)) == kept, phase
        assert groups[0]["labels"]["__meta_kubernetes_pod_ready"] == "false"


def test_kubernetes_discovery_labels_of_a_pod() -> None:
    deployment, _ = rendered()
    pod = pod_of(deployment)
    groups = podmonitor_sd.pod_target_groups(pod)
    # one target per container port; the init container (no ports) at the pod's IP alone
    assert [g["targets"] for g in groups] == [["127.0.0.1:43123"], ["127.0.0.1"]]
    labels = groups[0]["labels"]
    assert labels["__meta_kubernetes_pod_container_port_number"] == "8000"
    assert labels["__meta_kubernetes_pod_container_port_protocol"] == "TCP"
    assert labels["__meta_kubernetes_pod_controller_kind"] == "ReplicaSet"
    assert labels["__meta_kubernetes_pod_label_app_kubernetes_io_name"] == "vllm"
    assert labels["__meta_kubernetes_pod_labelpresent_llmops_dev_llmservice"] == "true"
    assert labels["__meta_kubernetes_pod_annotationpresent_sandbox_llmops_dev_ports"] == "true"
    assert groups[1]["labels"]["__meta_kubernetes_pod_container_init"] == "true"
    # without the annotation the declared port stands (what a cluster scrapes)
    assert podmonitor_sd.pod_target_groups(pod_of(deployment, local_port=None))[0][
        "targets"] == ["127.0.0.1:8000"]
    # no IP yet: nothing to scrape
    pod["status"].pop("podIP")
    assert podmonitor_sd.pod_target_groups(pod) == []


def test_every_endpoint_field_the_prometheus_operator_reads() -> None:
    _, monitor = rendered()
    monitor["spec"].update({
        "jobLabel": "app.kubernetes.io/name", "podTargetLabels": ["app.kubernetes.io/part-of"],
        "selector": {"matchLabels": {"llmops.dev/llmservice": "llama-3-1-8b"},
                     "matchExpressions": [
                         {"key": "llmops.dev/component", "operator": "In", "values": ["server"]},
                         {"key": "canary", "operator": "DoesNotExist"},
                         {"key": "llmops.dev/role", "operator": "NotIn", "values": ["worker"]}]},
        "sampleLimit": 5000})
    monitor["spec"]["podMetricsEndpoints"][0].update({
        "scrapeTimeout": "10s", "honorLabels": True, "path": "/m",
        "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"],
                               "regex": "vllm:ignored.*"}]})
    [job] = podmonitor_sd.scrape_configs(monitor, "/sd")
    assert job["scrape_timeout"] == "10s" and job["honor_labels"] is True
    assert job["metrics_path"] == "/m" and job["sample_limit"] == 5000
    assert job["metric_relabel_configs"] == [{"source_labels": ["__name__"],
                                              "regex": "vllm:ignored.*", "action": "drop"}]
    deployment, _ = rendered()
    pod = pod_of(deployment)
    [target] = scraped(job, podmonitor_sd.pod_target_groups(pod))
    assert target["job"] == "vllm"  # jobLabel: the pod's app.kubernetes.io/name
    assert target["app_kubernetes_io_part_of"] == "llm-operator"
    pod["metadata"]["labels"]["canary"] = "yes"
    assert scraped(job, podmonitor_sd.pod_target_groups(pod)) == []
    pod["metadata"]["labels"].pop("canary")
    pod["metadata"]["labels"]["llmops.dev/role"] = "worker"
    assert scraped(job, podmonitor_sd.pod_target_groups(pod)) == []


@pytest.mark.parametrize(("where", "change", "field"), [
    ("endpoint", {"basicAuth": {"username": {"name": "s", "key": "u"}}},
     "spec.podMetricsEndpoints[0].basicAuth"),
    ("spec", {"attachMetadata": {"node": True}}, "spec.attachMetadata"),
    ("spec", {"selectorMechanism": "RoleSelector"}, "spec.selectorMechanism"),
    ("spec", {"podMetricsEndpoints": []}, "spec.podMetricsEndpoints"),
])
def test_what_cannot_be_translated_is_refused_with_its_field(
        where: str, change: dict[str, Any], field: str) -> None:
    _, monitor = rendered()
    target = monitor["spec"]["podMetricsEndpoints"][0] if where == "endpoint" else monitor["spec"]
    target.update(change)
    with pytest.raises(podmonitor_sd.UnsupportedMonitor) as err:
        podmonitor_sd.scrape_configs(monitor, "/sd")
    assert err.value.field == field and "team-a/llama-3-1-8b" in str(err.value)


def test_the_whole_config_lists_monitors_in_namespace_and_name_order() -> None:
    _, b = rendered("b-svc")
    _, a = rendered("a-svc")
    config = podmonitor_sd.prometheus_config([b, a], "/sd", scrape_interval="1s")
    assert [j["job_name"] for j in config["scrape_configs"]] == [
        "podMonitor/team-a/a-svc/0", "podMonitor/team-a/b-svc/0"]
    assert config["global"]["scrape_interval"] == "1s"

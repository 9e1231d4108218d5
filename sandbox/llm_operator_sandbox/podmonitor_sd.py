"""A PodMonitor as the Prometheus Operator would turn it into Prometheus configuration,
with file-based discovery standing in for Kubernetes discovery (sandbox only, pure).

On a cluster the Prometheus Operator reads each PodMonitor and writes one scrape job per
``podMetricsEndpoints`` item, discovering pods with ``kubernetes_sd_configs`` (role
``pod``) and choosing among them with ``relabel_configs``. Here Prometheus cannot reach
the emulated API server's pods through Kubernetes discovery, so:

- :func:`scrape_configs` writes the SAME job (name, interval, timeout, path, honor labels,
  and the relabel rules in the order the Prometheus Operator generates them, read from
  its ``pkg/prometheus/promcfg.go``: ``generatePodMonitorConfig``) with
  ``file_sd_configs`` in place of ``kubernetes_sd_configs``;
- :func:`pod_target_group` turns a Pod read from the API into the target group
  Kubernetes discovery gives (the ``__meta_kubernetes_*`` labels of role ``pod``: name,
  IP, phase, readiness, labels, annotations, controller, one target per container port);
- :func:`discovery_files` writes, per job, the target groups of every pod in the
  namespaces the PodMonitor's ``namespaceSelector`` names. Which pods are scraped is left
  to the relabel rules (``keep`` on the selector's labels and the port name), exactly as
  on a cluster: a pod of another service is discovered and then dropped.

The one substitution: a pod run by the sandbox's node agent listens on a local port, not
on its declared container port, so the target's ``__address__`` is ``podIP:<local port>``
from the pod's ``sandbox.llmops.dev/ports`` annotation (JSON: port name or number -> local
port). Every meta label, the port number included, stays what the pod declares.

What is not translated (raises :class:`UnsupportedMonitor` naming the field): TLS,
authentication and proxy settings, ``selectorMechanism: Role``, ``attachMetadata``. The
Prometheus-wide settings of the Prometheus Operator (enforced namespace label, scrape
classes, sharding over several Prometheus shards, ``overrideHonorLabels``) are taken at
their defaults: one shard, no enforcement.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

PORTS_ANNOTATION = "sandbox.llmops.dev/ports"
"""Pod annotation the node agent writes: JSON object, declared port (its name, and its
number as a string) -> the local TCP port the process listens on."""

# What the Prometheus Operator's generator accepts per endpoint and per monitor, and
# what this translation handles. Anything else present is refused with its field.
_ENDPOINT_FIELDS = frozenset({
    "port", "portNumber", "targetPort", "path", "interval", "scrapeTimeout", "honorLabels",
    "honorTimestamps", "trackTimestampsStaleness", "params", "scheme", "relabelings",
    "metricRelabelings", "filterRunning",
})
_MONITOR_FIELDS = frozenset({
    "selector", "namespaceSelector", "podMetricsEndpoints", "jobLabel", "podTargetLabels",
    "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit",
    "labelValueLengthLimit", "keepDroppedTargets", "selectorMechanism",
})
_LIMITS = {
    "sampleLimit": "sample_limit", "targetLimit": "target_limit",
    "labelLimit": "label_limit", "labelNameLengthLimit": "label_name_length_limit",
    "labelValueLengthLimit": "label_value_length_limit",
    "keepDroppedTargets": "keep_dropped_targets",
}
_RELABEL_KEYS = (
    ("sourceLabels", "source_labels"), ("separator", "separator"),
    ("targetLabel", "target_label"), ("regex", "regex"), ("modulus", "modulus"),
    ("replacement", "replacement"), ("action", "action"),
)
_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


class UnsupportedMonitor(ValueError):
    """A PodMonitor field this translation cannot reproduce: ``field`` is its path."""

    def __init__(self, monitor: str, field: str, problem: str, fix: str) -> None:
        self.field = field
        super().__init__(f"PodMonitor {monitor}: {field}: {problem}. Fix: {fix}")


def sanitize_label_name(name: str) -> str:
    """A Kubernetes label or annotation key as a Prometheus label name, as both Kubernetes
    discovery and the Prometheus Operator sanitize it (``llmops.dev/x`` -> ``llmops_dev_x``)."""
    return _INVALID_LABEL_CHARS.sub("_", name)


def _ident(monitor: Mapping[str, Any]) -> tuple[str, str]:
    meta = monitor.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta["name"])


def job_name(monitor: Mapping[str, Any], index: int) -> str:
    """``podMonitor/<namespace>/<name>/<endpoint index>``: the scrape job's name (what
    Prometheus' target page shows; the series' ``job`` label is relabelled, see
    :func:`relabel_configs`)."""
    namespace, name = _ident(monitor)
    return f"podMonitor/{namespace}/{name}/{index}"


def sd_file_name(monitor: Mapping[str, Any], index: int) -> str:
    """The file-discovery file of one job (a file name, no folder)."""
    namespace, name = _ident(monitor)
    return f"podMonitor_{namespace}_{name}_{index}.json"


def monitored_namespaces(monitor: Mapping[str, Any]) -> list[str] | None:
    """The namespaces whose pods the monitor's jobs discover: ``namespaceSelector.any``
    -> None (all), ``matchNames`` -> those, nothing -> the monitor's own namespace."""
    selector = (monitor.get("spec") or {}).get("namespaceSelector") or {}
    if selector.get("any"):
        return None
    names = selector.get("matchNames") or []
    return [str(n) for n in names] if names else [_ident(monitor)[0]]


def check_supported(monitor: Mapping[str, Any]) -> None:
    """Raise :class:`UnsupportedMonitor` for any field the translation would lose."""
    ident = "/".join(_ident(monitor))
    spec = monitor.get("spec") or {}
    for key in spec:
        if key not in _MONITOR_FIELDS:
            raise UnsupportedMonitor(ident, f"spec.{key}", "not translated to file-based "
                                     "discovery", "leave it out in the sandbox")
    if spec.get("selectorMechanism", "RelabelConfig") != "RelabelConfig":
        raise UnsupportedMonitor(ident, "spec.selectorMechanism", "only RelabelConfig "
                                 "selects pods without Kubernetes discovery",
                                 "use RelabelConfig (the default)")
    endpoints = spec.get("podMetricsEndpoints")
    if not endpoints:
        raise UnsupportedMonitor(ident, "spec.podMetricsEndpoints", "no endpoint",
                                 "give at least one endpoint")
    for i, ep in enumerate(endpoints):
        for key in ep:
            if key not in _ENDPOINT_FIELDS:
                raise UnsupportedMonitor(ident, f"spec.podMetricsEndpoints[{i}].{key}",
                                         "not translated to file-based discovery",
                                         "leave it out in the sandbox")
    for i, exp in enumerate((spec.get("selector") or {}).get("matchExpressions") or []):
        if exp.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise UnsupportedMonitor(ident, f"spec.selector.matchExpressions[{i}].operator",
                                     f"unknown operator {exp.get('operator')!r}",
                                     "use In, NotIn, Exists or DoesNotExist")


def _relabel(rules: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """PodMonitor relabelings (camelCase) as Prometheus relabel_configs, key by key as the
    Prometheus Operator writes them (action lower-cased)."""
    out = []
    for rule in rules:
        item: dict[str, Any] = {}
        for camel, snake in _RELABEL_KEYS:
            value = rule.get(camel)
            if value is None or value == "" or value == [] or (camel == "modulus" and not value):
                continue
            item[snake] = str(value).lower() if camel == "action" else value
        out.append(item)
    return out


def _selector_rules(selector: Mapping[str, Any]) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    labels = selector.get("matchLabels") or {}
    for key in sorted(labels):
        name = sanitize_label_name(key)
        rules.append({"action": "keep",
                      "source_labels": [f"__meta_kubernetes_pod_label_{name}",
                                        f"__meta_kubernetes_pod_labelpresent_{name}"],
                      "regex": f"({labels[key]});true"})
    for exp in selector.get("matchExpressions") or []:
        name = sanitize_label_name(str(exp["key"]))
        op = exp["operator"]
        if op in ("In", "NotIn"):
            rules.append({"action": "keep" if op == "In" else "drop",
                          "source_labels": [f"__meta_kubernetes_pod_label_{name}",
                                            f"__meta_kubernetes_pod_labelpresent_{name}"],
                          "regex": f"({'|'.join(str(v) for v in exp.get('values') or [])});true"})
        else:
            rules.append({"action": "keep" if op == "Exists" else "drop",
                          "source_labels": [f"__meta_kubernetes_pod_labelpresent_{name}"],
                          "regex": "true"})
    return rules


def relabel_configs(monitor: Mapping[str, Any], endpoint: Mapping[str, Any],
                    shard: int = 0) -> list[dict[str, Any]]:
    """The ``relabel_configs`` the Prometheus Operator generates for one endpoint, in its
    order: the job into ``__tmp_prometheus_job_name``; drop Failed/Succeeded pods (unless
    ``filterRunning: false``); keep on the selector; keep on the port; ``namespace``,
    ``container``, ``pod``; ``podTargetLabels``; ``job`` = ``<namespace>/<name>`` (or the
    ``jobLabel`` pod label); ``endpoint``; the endpoint's own ``relabelings``; then the
    sharding rules with ``$(SHARD)`` already substituted (one shard)."""
    namespace, name = _ident(monitor)
    spec = monitor.get("spec") or {}
    rules: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    if endpoint.get("filterRunning", True):
        rules.append({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
                      "regex": "(Failed|Succeeded)"})
    rules += _selector_rules(spec.get("selector") or {})
    port, number = endpoint.get("port"), endpoint.get("portNumber")
    target_port = endpoint.get("targetPort")
    if port:
        rules.append({"action": "keep",
                      "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                      "regex": port})
    elif number:
        rules.append({"action": "keep",
                      "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                      "regex": str(number)})
    elif target_port not in (None, "", 0):
        by_name = isinstance(target_port, str)
        rules.append({"action": "keep",
                      "source_labels": ["__meta_kubernetes_pod_container_port_"
                                        + ("name" if by_name else "number")],
                      "regex": str(target_port)})
    rules += [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"],
         "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]
    for label in spec.get("podTargetLabels") or []:
        name = sanitize_label_name(label)
        rules.append({"source_labels": [f"__meta_kubernetes_pod_label_{name}"],
                      "target_label": name,
                      "regex": "(.+)", "replacement": "${1}"})
    rules.append({"target_label": "job", "replacement": f"{namespace}/{name}"})
    if spec.get("jobLabel"):
        rules.append({"source_labels": [
            f"__meta_kubernetes_pod_label_{sanitize_label_name(spec['jobLabel'])}"],
            "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
    if port:
        rules.append({"target_label": "endpoint", "replacement": port})
    elif target_port not in (None, "", 0):
        rules.append({"target_label": "endpoint", "replacement": str(target_port)})
    rules += _relabel(endpoint.get("relabelings") or [])
    # Sharding over one Prometheus shard: the config reloader substitutes $(SHARD) = 0.
    rules += [
        {"source_labels": ["__address__", "__tmp_hash"], "target_label": "__tmp_hash",
         "regex": "(.+);", "replacement": "$1", "action": "replace"},
        {"source_labels": ["__tmp_hash"], "target_label": "__tmp_hash", "modulus": 1,
         "action": "hashmod"},
        {"source_labels": ["__tmp_hash", "__tmp_disable_sharding"],
         "regex": f"{shard};|.+;.+", "action": "keep"},
    ]
    return rules


def scrape_configs(monitor: Mapping[str, Any], sd_dir: str | PurePath,
                   refresh_interval: str = "1s") -> list[dict[str, Any]]:
    """One Prometheus scrape config per ``podMetricsEndpoints`` item, as the Prometheus
    Operator writes it, discovering targets from ``<sd_dir>/<sd_file_name>`` (refreshed
    every ``refresh_interval``). Raises :class:`UnsupportedMonitor`."""
    check_supported(monitor)
    spec = monitor["spec"]
    configs = []
    for i, ep in enumerate(spec["podMetricsEndpoints"]):
        cfg: dict[str, Any] = {"job_name": job_name(monitor, i),
                               "honor_labels": bool(ep.get("honorLabels", False))}
        if "honorTimestamps" in ep:
            cfg["honor_timestamps"] = bool(ep["honorTimestamps"])
        if "trackTimestampsStaleness" in ep:
            cfg["track_timestamps_staleness"] = bool(ep["trackTimestampsStaleness"])
        cfg["file_sd_configs"] = [{"files": [str(PurePath(sd_dir) / sd_file_name(monitor, i))],
                                   "refresh_interval": refresh_interval}]
        for key, target in (("interval", "scrape_interval"),
                            ("scrapeTimeout", "scrape_timeout"), ("path", "metrics_path"),
                            ("params", "params"), ("scheme", "scheme")):
            if ep.get(key):
                cfg[target] = ep[key]
        cfg["relabel_configs"] = relabel_configs(monitor, ep)
        for key, target in _LIMITS.items():
            if spec.get(key):
                cfg[target] = spec[key]
        if ep.get("metricRelabelings"):
            cfg["metric_relabel_configs"] = _relabel(ep["metricRelabelings"])
        configs.append(cfg)
    return configs


def _local_ports(pod: Mapping[str, Any]) -> dict[str, int]:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(PORTS_ANNOTATION)
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def _ready(pod: Mapping[str, Any]) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status", "Unknown")).lower()
    return "unknown"


def pod_target_group(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The target group Kubernetes discovery (role ``pod``) gives ``pod``, in file-SD form
    (``{"targets": [...], "labels": {...}}``), one target per container port. A file-SD
    group carries one label set, so a pod is one group PER TARGET here. None while the pod
    has no IP (Kubernetes discovery gives an empty group then)."""
    groups = pod_target_groups(pod)
    return groups[0] if groups else None


def pod_target_groups(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every target of ``pod`` as file-SD groups (one per container port; one per
    container without ports, at the pod's IP alone), labelled as Kubernetes discovery
    labels them; ``__address__`` uses the sandbox's local port where the pod's
    ``sandbox.llmops.dev/ports`` annotation maps the declared port."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    ip = status.get("podIP")
    if not ip:
        return []
    common: dict[str, str] = {
        "__meta_kubernetes_namespace": str(meta.get("namespace") or "default"),
        "__meta_kubernetes_pod_name": str(meta.get("name", "")),
        "__meta_kubernetes_pod_ip": str(ip),
        "__meta_kubernetes_pod_ready": _ready(pod),
        "__meta_kubernetes_pod_phase": str(status.get("phase", "")),
        "__meta_kubernetes_pod_node_name": str(spec.get("nodeName", "")),
        "__meta_kubernetes_pod_host_ip": str(status.get("hostIP", "")),
        "__meta_kubernetes_pod_uid": str(meta.get("uid", "")),
    }
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            if ref.get("kind"):
                common["__meta_kubernetes_pod_controller_kind"] = str(ref["kind"])
            if ref.get("name"):
                common["__meta_kubernetes_pod_controller_name"] = str(ref["name"])
            break
    for prefix, values in (("label", meta.get("labels")), ("annotation", meta.get("annotations"))):
        for key, value in (values or {}).items():
            name = sanitize_label_name(str(key))
            common[f"__meta_kubernetes_pod_{prefix}_{name}"] = str(value)
            common[f"__meta_kubernetes_pod_{prefix}present_{name}"] = "true"
    statuses = {s.get("name"): s for s in (status.get("containerStatuses") or [])
                + (status.get("initContainerStatuses") or [])}
    local = _local_ports(pod)
    groups = []
    containers = [(c, False) for c in spec.get("containers") or []] + \
                 [(c, True) for c in spec.get("initContainers") or []]
    for container, init in containers:
        cname = str(container.get("name", ""))
        labels = {**common,
                  "__meta_kubernetes_pod_container_name": cname,
                  "__meta_kubernetes_pod_container_image": str(container.get("image", "")),
                  "__meta_kubernetes_pod_container_init": "true" if init else "false"}
        cid = (statuses.get(cname) or {}).get("containerID")
        if cid:
            labels["__meta_kubernetes_pod_container_id"] = str(cid)
        ports = container.get("ports") or []
        if not ports:
            groups.append({"targets": [str(ip)], "labels": labels})
            continue
        for port in ports:
            number = str(port["containerPort"])
            actual = local.get(str(port.get("name") or "")) or local.get(number) or number
            groups.append({"targets": [f"{ip}:{actual}"], "labels": {
                **labels,
                "__meta_kubernetes_pod_container_port_name": str(port.get("name", "")),
                "__meta_kubernetes_pod_container_port_number": number,
                "__meta_kubernetes_pod_container_port_protocol": str(port.get("protocol", "TCP")),
            }})
    return groups


def discovery_files(monitors: Sequence[Mapping[str, Any]],
                    pods: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """File name -> target groups, for every job of every monitor: all pods of the
    namespaces the monitor watches (the relabel rules then choose among them)."""
    files: dict[str, list[dict[str, Any]]] = {}
    for monitor in monitors:
        namespaces = monitored_namespaces(monitor)
        chosen = [p for p in pods if namespaces is None
                  or (p.get("metadata") or {}).get("namespace", "default") in namespaces]
        groups = [g for p in sorted(chosen, key=_pod_key) for g in pod_target_groups(p)]
        for i, _ in enumerate((monitor.get("spec") or {}).get("podMetricsEndpoints") or []):
            files[sd_file_name(monitor, i)] = groups
    return files


def _pod_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def prometheus_config(monitors: Sequence[Mapping[str, Any]], sd_dir: str | PurePath,
                      scrape_interval: str = "30s", evaluation_interval: str = "30s",
                      refresh_interval: str = "1s") -> dict[str, Any]:
    """A whole prometheus.yml: the global defaults and every monitor's jobs, sorted by
    namespace and name as the Prometheus Operator sorts them."""
    jobs = [cfg for m in sorted(monitors, key=_ident)
            for cfg in scrape_configs(m, sd_dir, refresh_interval)]
    return {"global": {"scrape_interval": scrape_interval,
                       "evaluation_interval": evaluation_interval},
            "scrape_configs": jobs}

"""The PodMonitor (pure): Prometheus Operator scraping of the server pods, when wanted.
"""

from __future__ import annotations

from typing import Any

from ..api.constants import LABEL_SERVICE
from ..api.models import LLMService
from ..settings import Settings
from .identity import COMPONENT_SERVER, child_metadata, serving_selector, with_spec_hash
from .pod import METRICS_PATH, PORT_NAME


def prometheus_pod_label(label: str) -> str:
    """The meta label Prometheus' Kubernetes discovery gives a pod label
    (``llmops.dev/llmservice`` -> ``__meta_kubernetes_pod_label_llmops_dev_llmservice``)."""
    sanitized = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in label)
    return f"__meta_kubernetes_pod_label_{sanitized}"


def build_pod_monitor(
    svc: LLMService, settings: Settings, *, leaders_only: bool = False
) -> dict[str, Any]:
    """A PodMonitor (``monitoring.coreos.com/v1``) scraping ``/metrics`` on the server
    pods, relabelled so every vLLM series carries the service name and namespace under
    the labels the adaptation queries group by (``settings.prometheus_*_label``).
    ``leaders_only`` for a LeaderWorkerSet: its workers run ``vllm serve --headless``,
    no API server, and serve no ``/metrics`` (the leader's engine reports for the whole replica)."""
    metadata = child_metadata(svc, COMPONENT_SERVER)
    # The Prometheus selects PodMonitors by label (kube-prometheus-stack: release: <its
    # release>); the operator's own labels are kept (settings refuse keys in their domains).
    metadata["labels"] = {**settings.pod_monitor_labels, **metadata["labels"]}
    monitor: dict[str, Any] = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": serving_selector(svc, leaders_only)},
            "podMetricsEndpoints": [
                {
                    "port": PORT_NAME,
                    "path": METRICS_PATH,
                    # The adaptation's sample minimum follows this interval (see
                    # llm_operator.adaptation.policy.policy_for_scrape).
                    "interval": f"{settings.scrape_interval_seconds}s",
                    "relabelings": [
                        {
                            "action": "replace",
                            "sourceLabels": [prometheus_pod_label(LABEL_SERVICE)],
                            "targetLabel": settings.prometheus_service_label,
                        },
                        {
                            "action": "replace",
                            "sourceLabels": ["__meta_kubernetes_namespace"],
                            "targetLabel": settings.prometheus_namespace_label,
                        },
                    ],
                }
            ],
        },
    }
    return with_spec_hash(monitor)


def wants_pod_monitor(settings: Settings, discovered: bool | None) -> bool:
    """Whether to render a PodMonitor: ``LLMOP_POD_MONITOR=enabled`` / ``disabled`` decide;
    ``auto`` follows what the caller discovered (the cluster serves
    ``monitoring.coreos.com``); nothing discovered means no PodMonitor."""
    if settings.pod_monitor == "enabled":
        return True
    if settings.pod_monitor == "disabled":
        return False
    return bool(discovered)

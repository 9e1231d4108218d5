"""A throwaway real Prometheus (Debian's ``/usr/bin/prometheus``) for tests.

It listens on 127.0.0.1, keeps its TSDB in a temporary folder and scrapes static
targets every second. Each target carries the labels the rendered PodMonitor's
relabelling would give a vLLM pod (``llmservice``, ``namespace``), so queries written
for a cluster work unchanged. The process itself is :mod:`llm_operator_sandbox.prometheus`
(the demo runs it too, with discovery through the rendered PodMonitor).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from llm_operator_sandbox.prometheus import (  # noqa: F401 - re-exported for the tiers
    PROMETHEUS_BIN,
    PrometheusServer,
    prometheus_available,
    start_prometheus_with,
)


@dataclass(frozen=True)
class Target:
    """One scrape target: ``host:port`` and the labels put on its series."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)


def config_for(targets: Sequence[Target], scrape_interval: str = "1s") -> dict[str, object]:
    """The prometheus.yml for ``targets`` (pure)."""
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval,
                   "scrape_timeout": scrape_interval},
        "scrape_configs": [{
            "job_name": "vllm",
            "metrics_path": "/metrics",
            "static_configs": [{"targets": [t.address], "labels": dict(t.labels)}
                               for t in targets],
        }],
    }


def start_prometheus(targets: Sequence[Target], timeout_s: float = 30.0) -> PrometheusServer:
    """Start Prometheus scraping ``targets`` every second; wait until it is ready."""
    return start_prometheus_with(config_for(targets), timeout_s=timeout_s)


@contextlib.contextmanager
def running_prometheus(targets: Sequence[Target]) -> Iterator[PrometheusServer]:
    """Context manager around :func:`start_prometheus`."""
    server = start_prometheus(targets)
    try:
        yield server
    finally:
        server.stop()


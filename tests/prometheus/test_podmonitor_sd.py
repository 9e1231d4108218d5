"""A real Prometheus finds vLLM pods ONLY through the operator's rendered PodMonitor.

Real: Prometheus (Debian's binary) and its relabelling, the operator's renderer and its
adaptation queries (:mod:`llm_operator.adaptation.prometheus`). Emulated: the API server
(kmock, the project's emulator) holding the PodMonitors and Pods. Replayed: each pod's
``/metrics`` is a recorded real vLLM exposition (:mod:`tests.support.metrics_replay`);
the pods point at the replay servers by the node agent's ``sandbox.llmops.dev/ports``
annotation, the only substitution. Nothing tells Prometheus a target or a label: the
discovery (:class:`llm_operator_sandbox.prometheus.PodMonitorDiscovery`) reads the API
and writes the jobs the Prometheus Operator would write.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_operator.adaptation import prometheus as adaptation_prometheus
from llm_operator.settings import Settings
from llm_operator_sandbox.emulator import EmulatorThread
from llm_operator_sandbox.prometheus import (
    PodMonitorDiscovery,
    podmonitor_crd,
    prometheus_available,
)
from tests.support.metrics_replay import KV_PRESSURE, Recording, ReplayServer
from tests.support.podmonitor import pod_of, rendered

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(not prometheus_available(), reason="no /usr/bin/prometheus")]

NAMESPACE = "team-a"
SETTINGS = Settings(scrape_interval_seconds=1, adaptation_window_seconds=10)


def create(api: Any, obj: dict[str, Any]) -> None:
    """Create ``obj`` (a Pod or a PodMonitor) in the emulated API server."""
    from kubernetes import client

    namespace = obj["metadata"]["namespace"]
    if obj["kind"] == "Pod":
        # As the API server does, create ignores status: the kubelet (here the test, in
        # the node agent's place) writes it through the status subresource.
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(namespace, obj)
        core.patch_namespaced_pod_status(obj["metadata"]["name"], namespace,
                                         {"status": obj["status"]})
    else:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "monitoring.coreos.com", "v1", namespace, "podmonitors", obj)


@pytest.fixture
def replays() -> Iterator[list[ReplayServer]]:
    """Three replayed vLLM engines (service a, service b, a pod no monitor selects)."""
    servers = [ReplayServer(Recording.load(KV_PRESSURE)).start() for _ in range(3)]
    yield servers
    for s in servers:
        s.stop()


def port_of(server: ReplayServer) -> int:
    return int(server.address.rsplit(":", 1)[1])


def test_prometheus_scrapes_exactly_the_pods_the_rendered_monitors_select(
        tmp_path: Path, replays: list[ReplayServer]) -> None:
    from kubernetes import client, config

    dep_a, mon_a = rendered("svc-a", NAMESPACE, SETTINGS)
    dep_b, mon_b = rendered("svc-b", NAMESPACE, SETTINGS)
    dep_c, _ = rendered("svc-c", NAMESPACE, SETTINGS)  # no monitor for c
    pod_a = pod_of(dep_a, "a1", local_port=port_of(replays[0]))
    pod_b = pod_of(dep_b, "b1", local_port=port_of(replays[1]))
    pod_c = pod_of(dep_c, "c1", local_port=port_of(replays[2]))
    # a's tuning pod: same service label, other component, listening on a's replay too
    tuning = pod_of(dep_a, "tune1", local_port=port_of(replays[2]))
    tuning["metadata"]["labels"]["llmops.dev/component"] = "tuning"

    with EmulatorThread(manifests=[podmonitor_crd()], namespaces=[NAMESPACE]) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig.yaml", NAMESPACE)
        api = config.new_client_from_config(config_file=str(kubeconfig))
        for obj in (mon_a, mon_b, pod_a, pod_b, pod_c, tuning):
            # No ReplicaSet exists here: a pod owned by a missing one would be collected
            # by the emulator's garbage collector, as on a cluster.
            obj["metadata"].pop("ownerReferences", None)
            create(api, obj)
        discovery = PodMonitorDiscovery(kubeconfig, tmp_path / "prom", interval_s=0.5,
                                        scrape_interval="1s").start()
        try:
            prom = discovery.prometheus
            assert prom is not None
            prom.wait_for_series('vllm:num_requests_running{llmservice="svc-b"}', 30)
            prom.wait_for_series('vllm:num_requests_running{llmservice="svc-a"}', 10)
            # What Prometheus scrapes: one target per selected pod, under the Prometheus
            # Operator's job and labels; c's pod and a's tuning pod are not among them.
            targets = {(t["labels"]["job"], t["labels"]["pod"], t["scrapeUrl"])
                       for t in prom.targets()}
            assert targets == {
                ("team-a/svc-a", pod_a["metadata"]["name"], f"http://{replays[0].address}/metrics"),
                ("team-a/svc-b", pod_b["metadata"]["name"], f"http://{replays[1].address}/metrics"),
            }
            series = prom.query("count by (job, namespace, pod, container, endpoint, "
                                "llmservice) (vllm:num_requests_running)")
            assert sorted((s["metric"]["llmservice"], s["metric"]["pod"])  # type: ignore[index]
                          for s in series) == [("svc-a", pod_a["metadata"]["name"]),
                                               ("svc-b", pod_b["metadata"]["name"])]
            metric = series[0]["metric"]
            assert metric["container"] == "vllm" and metric["endpoint"] == "http"  # type: ignore[index]
            assert metric["namespace"] == NAMESPACE  # type: ignore[index]

            # The operator's own batched query finds a's and b's engines, nothing for c.
            prom.wait_for_series('count_over_time(vllm:num_requests_running'
                                 '{llmservice="svc-a"}[10s]) >= 5', 30)
            prom_client = adaptation_prometheus.connect(prom.url)
            keys = [(NAMESPACE, "svc-a"), (NAMESPACE, "svc-b"), (NAMESPACE, "svc-c")]
            observed = adaptation_prometheus.fetch_observations(
                prom_client, keys, time.time(), SETTINGS.adaptation_window_seconds)
            assert set(observed) == {(NAMESPACE, "svc-a"), (NAMESPACE, "svc-b")}
            obs = observed[(NAMESPACE, "svc-a")]
            assert obs.replicas == 1 and (obs.samples or 0) >= 5
            assert obs.running_max is not None and obs.running_max > 0
            assert obs.kv_capacity_tokens == 4096  # from vllm:cache_config_info's labels

            # The pod goes away: Prometheus stops scraping it (the file follows the API).
            client.CoreV1Api(api).delete_namespaced_pod(pod_b["metadata"]["name"], NAMESPACE)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and any(
                    t["labels"]["job"] == "team-a/svc-b" for t in prom.targets()):
                time.sleep(0.5)
            assert {t["labels"]["job"] for t in prom.targets()} == {"team-a/svc-a"}
        finally:
            discovery.stop()

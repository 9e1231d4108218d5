"""Nodes tier: pods in REAL containers. The real control plane of the cluster tier, plus
Kubernetes' own kubelet and kube-proxy v1.37.2 (built from the same Go module), containerd
1.6 and runc (Debian's packages), a CNI bridge, and an OCI registry that requires a login,
all on this machine (:mod:`llm_operator_sandbox.nodes`). The operator runs from the image
``tools/build_images.sh`` built from this repository's Dockerfile, installed by ``helm
install`` with the chart's ``image.*`` values and a pull secret, exactly as rendered.

Which kubelet ran these pods: **Kubernetes' kubelet with containerd** (node ``node-1``),
never the process kubelet of the cluster tier. It needs root (containerd, iptables); CI
runs as root.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llm_operator.inpod.tuner.server import vllm_lock as hold_vllm_lock
from llm_operator_sandbox.cluster import LocalCluster, binaries_present, cache_dir, helm_install
from llm_operator_sandbox.hub import LocalHub, folder_files
from llm_operator_sandbox.loop import WIDE_KV_MODEL
from llm_operator_sandbox.lws import LocalLWS, lws_present
from llm_operator_sandbox.nodes import (
    NodeNetwork,
    RealNodes,
    buildah,
    built_images,
    device_plugin_binary,
    registry_binary,
    run,
)
from llm_operator_sandbox.prometheus import PodMonitorDiscovery
from llm_operator_sandbox.prometheus_operator import install_crds, operator_present
from llm_operator_sandbox.tiny_model import ensure_tiny_llama
from tests.cluster.conftest import CHART, ClusterKubectl, helm_binary
from tests.support.emulator import kubectl_binary, wait_for
from tests.support.hub import GATED, TOKEN, gpt_oss_repos

RELEASE_NAMESPACE = "llm-operator"
OPERATOR_PODS = "app.kubernetes.io/instance=llm-operator"  # the chart's pods
ROOT = Path(__file__).resolve().parents[2]
MODEL_CACHE = Path(os.environ.get("LLMOP_TEST_MODELS", "/tmp/llmop-models"))
DEMO_MODEL = "llmops-demo/tiny-llama"  # the demo's served name (demo/tiny-llama-local.yaml)
WIDE_KV_NAME = "llmops-demo/tiny-llama-wide-kv"  # demo/tiny-llama-nodes.yaml's stand-in


@pytest.fixture(scope="session")
def real_nodes(tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[tuple[LocalCluster, RealNodes]]:
    if os.geteuid() != 0:
        pytest.fail("the nodes tier needs root (containerd, the kubelet, iptables); CI is root")
    if not binaries_present() or not (cache_dir() / "kubelet").exists():
        pytest.fail(f"the Kubernetes binaries are not in {cache_dir()}: run "
                    "`bash tools/setup.sh --cluster` (tools/test.sh does)")
    if not registry_binary().exists() or not device_plugin_binary().exists():
        pytest.fail("no images or registry built: run `bash tools/setup.sh --nodes` "
                    "(tools/test.sh does)")
    workdir = tmp_path_factory.mktemp("real-nodes")
    say = lambda line: sys.stderr.write(line + "\n")  # noqa: E731
    with NodeNetwork(roots=(workdir,)) as net, \
            LocalCluster(workdir / "control-plane", host=net.gateway, out=say) as cluster, \
            RealNodes(cluster, workdir / "nodes", out=say) as nodes:
        yield cluster, nodes


@pytest.fixture(scope="session")
def nodes(real_nodes: tuple[LocalCluster, RealNodes]) -> RealNodes:
    return real_nodes[1]


@pytest.fixture(scope="session")
def admin(real_nodes: tuple[LocalCluster, RealNodes],
          tmp_path_factory: pytest.TempPathFactory) -> ClusterKubectl:
    return ClusterKubectl(real_nodes[0].admin_kubeconfig, tmp_path_factory.mktemp("kube-cache"))


@dataclass(frozen=True)
class OperatorImage:
    local: str  # the name in buildah's store
    ref: str  # HOST/llm-operator:TAG@sha256:... in the registry
    registry: str
    repository: str
    tag: str
    digest: str


@pytest.fixture(scope="session")
def operator_image(nodes: RealNodes) -> OperatorImage:
    local = built_images()["operator"]
    t0 = time.monotonic()
    ref = nodes.registry.push(local, "llm-operator")
    sys.stderr.write(f"pushed {ref} in {time.monotonic() - t0:.1f} s\n")
    name, digest = ref.split("@")
    return OperatorImage(local, ref, nodes.registry.host, "llm-operator",
                         name.rsplit(":", 1)[1], digest)


@dataclass(frozen=True)
class VllmImage:
    local: str
    ref: str  # HOST/vllm-cpu:TAG@sha256:...
    digest: str


@pytest.fixture(scope="session")
def vllm_image(nodes: RealNodes) -> VllmImage:
    """The vLLM CPU image (``tools/build_images.sh --vllm``), pushed to the registry."""
    local = built_images().get("vllm")
    if local is None:
        pytest.fail("no vLLM CPU image built: run `bash tools/setup.sh --nodes` "
                    "(it runs tools/build_images.sh --vllm)")
    # Under the vLLM lock: pushing 6.7 GB slows the vLLM tier's timed runs in the other lane.
    with hold_vllm_lock(timeout_s=1200):
        t0 = time.monotonic()
        ref = nodes.registry.push(local, "vllm-cpu", compression="zstd")
    sys.stderr.write(f"pushed {ref} in {time.monotonic() - t0:.1f} s\n")
    if os.environ.get("LLMOP_LEAN_DISK") == "1":  # CI, a new machine: nothing reuses it
        run([*buildah(), "rmi", local])
        sys.stderr.write(f"removed {local} from buildah's store (LLMOP_LEAN_DISK=1)\n")
    return VllmImage(local, ref, ref.split("@")[1])


class HeldLock:
    """The machine-wide vLLM lock, held by one nodes test (``vllm_lock``)."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(hold_vllm_lock(timeout_s=1200))
        self.held = True

    def release(self) -> None:
        """Let the other lane's next vLLM server start before this test ends: call it only
        once this test's engine is up and nothing more starts one (what is left is waiting
        and a few 4-token requests; their effect on a timed run beside them was not
        measured apart, and both full runs with it passed)."""
        if self.held:
            self._stack.close()
            self.held = False


@pytest.fixture
def vllm_lock() -> Iterator[HeldLock]:
    """One vLLM server at a time on this machine: held from before the test's pod starts
    until after its namespace's pods are gone (ask for it before ``namespace``), or until
    the test releases it."""
    lock = HeldLock()
    yield lock
    if lock.held:
        lock.release()
        # Hand the lock over: a vLLM test in the other lane polls for it every second, and
        # the next nodes test would otherwise take it back within milliseconds. Without
        # this a lane-A test waited through two nodes tests in a row (7.4 min, CI here,
        # 2026-12-06) and ran out of its own timeout.
        time.sleep(3)


@pytest.fixture(scope="session")
def hub(real_nodes: tuple[LocalCluster, RealNodes]) -> Iterator[LocalHub]:
    """The Hub stand-in on the bridge, serving the demo's tiny Llama (generated by the
    CPU build's transformers), and the demo-on-nodes' wide-KV stand-in
    (``demo/tiny-llama-nodes.yaml``), where pods reach it as they would reach
    huggingface.co; and gpt-oss-20b's config under a public and a gated name (the gated one
    answers 401 without ``tests.support.hub.TOKEN``), for the facts Job."""
    python = ROOT / ".venv-vllm" / "bin" / "python"
    model = ensure_tiny_llama(MODEL_CACHE, python)
    wide = ensure_tiny_llama(MODEL_CACHE, python, **WIDE_KV_MODEL)
    with LocalHub({DEMO_MODEL: folder_files(model), WIDE_KV_NAME: folder_files(wide),
                   **gpt_oss_repos()}, host=real_nodes[0].host, gated=GATED,
                  token=TOKEN) as local:
        yield local


# Prometheus scrapes every second and the adaptation averages over 10 s (the chart's
# floor: 4 scrapes), so a decision follows a change within seconds, not minutes.
SCRAPE_SECONDS = 1
WINDOW_SECONDS = 10


@pytest.fixture(scope="session")
def prometheus(real_nodes: tuple[LocalCluster, RealNodes],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodMonitorDiscovery]:
    """A real Prometheus on the bridge's gateway (where the operator's pod reaches it), kept
    pointed at what the PodMonitors select: the Prometheus Operator release's own CRDs
    (``tools/setup.sh --controllers``) are served, the operator renders a PodMonitor per
    LLMService, and Prometheus scrapes the selected pods on their pod IPs."""
    cluster, _ = real_nodes
    if not operator_present():
        pytest.fail("the Prometheus Operator's CRDs are not built: run "
                    "`bash tools/setup.sh --controllers` (tools/test.sh does)")
    install_crds(kubectl_binary(), cluster.admin_kubeconfig)
    discovery = PodMonitorDiscovery(
        cluster.admin_kubeconfig, tmp_path_factory.mktemp("prometheus"), interval_s=1.0,
        scrape_interval=f"{SCRAPE_SECONDS}s", host=cluster.host).start()
    try:
        yield discovery
    finally:
        discovery.stop()


@pytest.fixture(scope="session")
def lws(real_nodes: tuple[LocalCluster, RealNodes],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalLWS]:
    """The real LeaderWorkerSet controller (its CRD, manager and webhooks), installed
    before the operator, as a cluster that serves groups over nodes has it. (Installed after
    the operator, once in four runs here the operator never saw the LeaderWorkerSet's
    status change, until its pod was restarted: not understood yet, so the tier does not
    depend on that order; see docs/production/multi-node.md.)"""
    if not lws_present():
        pytest.fail("the LeaderWorkerSet controller is not built: run "
                    "`bash tools/setup.sh --controllers` (tools/test.sh does)")
    with LocalLWS(real_nodes[0].admin_kubeconfig, tmp_path_factory.mktemp("lws"),
                  kubectl=kubectl_binary(),
                  out=lambda line: sys.stderr.write(line + "\n")) as running:
        yield running


@pytest.fixture(scope="session")
def installed(real_nodes: tuple[LocalCluster, RealNodes], admin: ClusterKubectl,
              operator_image: OperatorImage, hub: LocalHub,
              prometheus: PodMonitorDiscovery, lws: LocalLWS) -> dict[str, Any]:
    """``helm install`` as a user with a private registry would: the image from the
    registry by its digest, a pull secret; the operator runs in the chart's pod."""
    cluster, nodes = real_nodes
    assert prometheus.prometheus is not None
    admin.run("create", "namespace", RELEASE_NAMESPACE)
    admin.apply_obj(nodes.registry.pull_secret("regcred"), RELEASE_NAMESPACE)
    helm_install(cluster, helm_binary(), kubectl_binary(), CHART, namespace=RELEASE_NAMESPACE,
                 values={"image": {"registry": operator_image.registry,
                                   "repository": operator_image.repository,
                                   "digest": operator_image.digest},
                         "imagePullSecrets": [{"name": "regcred"}],
                         "clusterWide": True,  # each test has a namespace of its own
                         # LLMServices may run images from this private registry only
                         "admission": {"allowedImages": [f"{operator_image.registry}/"]},
                         "settings": {
                             # the facts Job reads config.json from the Hub stand-in
                             "hfEndpoint": hub.endpoint,
                             "prometheusUrl": prometheus.prometheus.url,
                             "scrapeIntervalSeconds": SCRAPE_SECONDS,
                             "adaptationWindowSeconds": WINDOW_SECONDS}})
    pods = admin.items("pods", RELEASE_NAMESPACE, "app.kubernetes.io/instance=llm-operator")
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


@pytest.fixture
def namespace(admin: ClusterKubectl, installed: dict[str, Any]) -> Iterator[str]:
    """A fresh namespace for one test. After it, its pods are gone before the next test
    starts: the node has 2 CPUs, and a pod stuck in a pull still holds its requests."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin.run("create", "namespace", name)
    yield name
    admin.run("delete", "llms", "--all", "-n", name, "--wait=false", check=False)
    # A vLLM pod's grace period is 140 s (its preStop and vLLM's --shutdown-timeout).
    wait_for(lambda: not admin.items("pods", name), 180, f"the pods of {name} to go",
             interval=1)
    admin.run("delete", "namespace", name, "--wait=false", check=False)


def pod_of(admin: ClusterKubectl, namespace: str, selector: str) -> dict[str, Any]:
    return wait_for(lambda: (admin.items("pods", namespace, selector) or [None])[0], 60,
                    f"a pod {selector} in {namespace}", interval=1)


def operator_pod(admin: ClusterKubectl, other_than: str | None = None) -> dict[str, Any]:
    """The chart's operator pod that is Ready now (one not named ``other_than``)."""
    return wait_for(lambda: next((p for p in admin.items("pods", RELEASE_NAMESPACE, OPERATOR_PODS)
                                  if ready(p) and p["metadata"]["name"] != other_than), None),
                    120, "the operator's pod Ready", interval=1)


def ready(pod: dict[str, Any]) -> bool:
    """Every container of the pod is ready (False while it has no container status)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") for s in statuses)


__all__ = ["HeldLock", "OperatorImage", "VllmImage", "operator_pod", "pod_of"]

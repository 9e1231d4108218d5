"""Cluster tier: the operator against a REAL Kubernetes control plane (etcd,
kube-apiserver, kube-controller-manager and kube-scheduler v1.37.2, built from Go modules
by ``bash tools/setup.sh --cluster``), installed by ``helm install`` of the chart and run
with the chart's ServiceAccount token, so RBAC, admission, the CRD's schema and CEL, the
Deployment/ReplicaSet/Job controllers, the garbage collector and the scheduler are
Kubernetes' own. The tests run with no kubelet at all: what they assert comes from the API
server, admission, the controllers or the scheduler, and no Node exists while they run
(checked before each one). Pods that run, in real containers on real nodes: the ``nodes``
tier (the last two tests that needed a process kubelet here, the two-node group and the
Multi-Attach error, moved there on 2026-12-07).

One control plane for the whole session (it starts in about 10 s); each test gets its own
namespace and operator process, and every wait is bounded.
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator_sandbox.cluster import (
    Installed,
    LocalCluster,
    binaries_present,
    cache_dir,
    helm_install,
)
from tests.support.emulator import ROOT, Kubectl, OperatorProcess, kubectl_binary, wait_for

CHART = ROOT / "charts" / "llm-operator"
TINY_MODEL_NAME = "llmops-demo/tiny-llama"
MODEL_CACHE = Path("/tmp/llmop-models")
# The session release's admission allow-lists: the chart's default image, plus the
# registries test_pod_failures (a pull that fails) and the bad-input corpus (accepted
# custom images, spec.pod.serviceAccountName llm-runner) use; those tests are about the
# CRD and the kubelet, the policy's own test (test_safe_defaults.py) about the policy.
SESSION_ADMISSION = {"enabled": True,
                     "allowedImages": ["docker.io/vllm/vllm-openai", "registry.invalid/",
                                       "registry.example.com/"],
                     "allowedServiceAccounts": {"*": ["llm-runner"]}}
# The session's release values: a `helm upgrade` of it gives the same, or RBAC shrinks to
# the release's namespace under the tests' feet.
SESSION_VALUES = {"replicaCount": 0, "clusterWide": True, "admission": SESSION_ADMISSION}


def helm_binary() -> str:
    """The project's helm (tools/install_helm.py puts it in .cache/bin)."""
    local = ROOT / ".cache" / "bin" / "helm"
    found = str(local) if local.exists() else shutil.which("helm")
    if not found:
        pytest.fail("no helm: run `python tools/install_helm.py` (tools/test.sh does)")
    return found


class ClusterKubectl(Kubectl):
    """kubectl as the cluster's admin; the real server validates, so ``apply`` does too."""

    def apply(self, path: Path | str, namespace: str | None = None) -> str:
        ns = ["-n", namespace] if namespace else []
        return self.run("apply", "--validate=strict", *ns, "-f", str(path)).stdout

    def apply_obj(self, obj: dict[str, Any], namespace: str | None = None,
                  check: bool = True) -> Any:
        ns = ["-n", namespace] if namespace else []
        return self.run("apply", "--validate=strict", *ns, "-f", "-",
                        stdin=yaml.safe_dump(obj), check=check)

    def items(self, kind: str, namespace: str | None = None,
              selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json"]
        args += ["-n", namespace] if namespace else ["-A"]
        args += ["-l", selector] if selector else []
        return list(json.loads(self.run(*args).stdout).get("items") or [])


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if not binaries_present():
        pytest.fail(f"the control-plane binaries are not in {cache_dir()}: run "
                    "`bash tools/setup.sh --cluster` (tools/test.sh does)")
    workdir = tmp_path_factory.mktemp("cluster")
    with LocalCluster(workdir, out=lambda line: sys.stderr.write(line + "\n")) as running:
        yield running
    assert not running.pids(), "a control-plane process outlived the cluster"


@pytest.fixture(scope="session")
def admin(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> ClusterKubectl:
    return ClusterKubectl(cluster.admin_kubeconfig, tmp_path_factory.mktemp("kube-cache"))


@pytest.fixture(autouse=True)
def _no_kubelet(request: pytest.FixtureRequest) -> None:
    """Every test of this tier runs with no kubelet: no Node is registered when it starts
    (pods that must run are the ``nodes`` tier's)."""
    if "cluster" not in request.fixturenames:
        return
    admin: ClusterKubectl = request.getfixturevalue("admin")
    names = [n["metadata"]["name"] for n in admin.items("nodes")]
    assert not names, (f"nodes {names} are registered before a test of the cluster tier, "
                       "which runs with no kubelet: the test that registered them must "
                       "delete them")


@pytest.fixture(scope="session")
def installed(cluster: LocalCluster) -> Installed:
    """``helm install`` of the chart (CRD, RBAC, ServiceAccount, PriorityClasses) with
    ``replicaCount: 0``: the operator runs as a local process with the ServiceAccount's
    token instead of in the chart's pod (the chart's pod runs in the ``nodes`` tier).
    ``clusterWide``: each test has a namespace of its own (the chart's default watches
    only its release's).
    The chart's admission policies are on, as by default, their allow-lists widened by
    :data:`SESSION_ADMISSION` for the images and ServiceAccount other tests name."""
    return helm_install(cluster, helm_binary(), kubectl_binary(), CHART,
                        values=SESSION_VALUES)


@pytest.fixture
def namespace(admin: ClusterKubectl, installed: Installed) -> Iterator[str]:
    """A fresh namespace for one test, deleted after it (the namespace controller)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin.run("create", "namespace", name)
    yield name
    admin.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def operator(installed: Installed, namespace: str, tmp_path: Path
             ) -> Iterator[OperatorProcess]:
    """``llm-operator run`` as the chart's ServiceAccount, cluster-wide as the chart runs it
    by default (watching one namespace needs the namespace-scoped install, which grants
    kopf the namespace list it then makes)."""
    proc = OperatorProcess(installed.kubeconfig, tmp_path / "operator.log", [],
                           env={**installed.env, "LLMOP_METRICS_PORT": "0"}).start()
    try:
        proc.wait_log("Initial authentication has finished", timeout=60)
        yield proc
    finally:
        proc.stop()


__all__ = ["ClusterKubectl", "wait_for"]

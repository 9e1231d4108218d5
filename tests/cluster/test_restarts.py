"""The control plane restarted under a running operator (REAL kube-apiserver and etcd):
kube-apiserver down for 10 s, then etcd down for 10 s; the operator, never restarted,
serves a service created after each outage and one whose spec changed meanwhile."""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_operator_sandbox.cluster import LocalCluster, helm_install
from tests.support.emulator import OperatorProcess, kubectl_binary, wait_for

from .conftest import CHART, ClusterKubectl, helm_binary
from .test_control_plane import tiny_service

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A control plane of this test's own (the session's must not go down)."""
    with LocalCluster(tmp_path / "cluster",
                      out=lambda line: sys.stderr.write(line + "\n")) as running:
        yield running


def pending(name: str) -> dict[str, Any]:
    svc = tiny_service(name)
    svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}  # no node: no vLLM
    return svc


def max_model_len(admin: ClusterKubectl, name: str, namespace: str) -> str | None:
    dep = admin.get("deployment", name, namespace) or {}
    args = ((dep.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "containers", [{}])[0].get("args") or []
    for i, a in enumerate(args):
        if a == "--max-model-len" and i + 1 < len(args):
            return str(args[i + 1])
    return None


def test_the_operator_rides_out_api_server_and_etcd_restarts(
        own_cluster: LocalCluster, tmp_path: Path) -> None:
    installed = helm_install(own_cluster, helm_binary(), kubectl_binary(), CHART,
                             values={"replicaCount": 0, "clusterWide": True})
    admin = ClusterKubectl(own_cluster.admin_kubeconfig, tmp_path / "kube-cache")
    admin.run("create", "namespace", "team-a")
    op = OperatorProcess(installed.kubeconfig, tmp_path / "operator.log",
                         env={**installed.env, "LLMOP_METRICS_PORT": "0"}).start()
    try:
        op.wait_log("Initial authentication has finished", timeout=60)
        before = pending("before")
        admin.apply_obj(before, "team-a")
        wait_for(lambda: admin.get("deployment", "before", "team-a"), 60, "a Deployment")

        for component in ("kube-apiserver", "etcd"):
            own_cluster.restart(component, down_seconds=10)
            assert op.proc is not None and op.proc.poll() is None, op.log()[-2000:]
            name = f"after-{component}"
            admin.apply_obj(pending(name), "team-a")
            wait_for(lambda n=name: admin.get("deployment", n, "team-a"), 120,
                     f"the Deployment of a service created after {component} came back",
                     interval=1)

        # A spec change after both outages reaches the Deployment made before them.
        changed = copy.deepcopy(before)
        changed["spec"]["engine"] = {**changed["spec"]["engine"], "maxModelLen": 512}
        admin.apply_obj(changed, "team-a")
        wait_for(lambda: max_model_len(admin, "before", "team-a") == "512", 120,
                 "the re-rendered Deployment (--max-model-len 512)", interval=1)
        assert op.proc is not None and op.proc.poll() is None
    finally:
        op.stop()

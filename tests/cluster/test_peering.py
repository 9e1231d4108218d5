"""Two operator replicas with real leader election (kopf peering through the chart's
ClusterKopfPeering on the REAL API server): one acts, the other stands by; when the
active one is SIGKILLed, the standby takes over and serves a new LLMService."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm_operator_sandbox.cluster import Installed, LocalCluster, helm_install
from tests.support.emulator import OperatorProcess, kubectl_binary, wait_for

from .conftest import CHART, ClusterKubectl, helm_binary
from .test_control_plane import tiny_service

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]
PEERING = "llm-operator"
RESUMED, PAUSED = "Resuming operations after the pause", "Pausing operations in favour of"


def active(op: OperatorProcess) -> bool:
    """The operator's last peering word was to resume (kopf starts paused)."""
    log = op.log()
    return log.rfind(RESUMED) > log.rfind(PAUSED)


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A control plane of this test's own: the chart goes in with peering enabled."""
    with LocalCluster(tmp_path / "cluster",
                      out=lambda line: sys.stderr.write(line + "\n")) as running:
        yield running


def test_the_standby_takes_over_when_the_active_operator_dies(
        own_cluster: LocalCluster, tmp_path: Path) -> None:
    installed: Installed = helm_install(
        own_cluster, helm_binary(), kubectl_binary(), CHART,
        values={"replicaCount": 0, "clusterWide": True,
                "peering": {"enabled": True, "name": PEERING}})
    admin = ClusterKubectl(own_cluster.admin_kubeconfig, tmp_path / "kube-cache")
    assert admin.get("clusterkopfpeering", PEERING) is not None
    env = {**installed.env, "LLMOP_METRICS_PORT": "0"}
    ops = [OperatorProcess(installed.kubeconfig, tmp_path / f"operator-{i}.log", env=env,
                           peering=PEERING).start() for i in range(2)]
    try:
        for op in ops:
            op.wait_log("Initial authentication has finished", timeout=60)
        # kopf starts paused until it has seen the peering object; each resumes when no
        # live peer has a higher (random, see run.py) priority and pauses when one turns up.
        wait_for(lambda: len((admin.get("clusterkopfpeering", PEERING) or {})
                             .get("status") or {}) == 2, 60,
                 "both operators registered in the peering object")

        def roles() -> tuple[OperatorProcess, OperatorProcess] | None:
            acting = [op for op in ops if active(op)]
            return (acting[0], ops[1 - ops.index(acting[0])]) if len(acting) == 1 else None

        def settled() -> tuple[OperatorProcess, OperatorProcess] | None:
            """One active operator, and still the same one 5 s later."""
            first = roles()
            if first is None:
                return None
            time.sleep(5)
            return first if roles() == first else None
        active_op, standby = wait_for(settled, 90, "exactly one operator active for 5 s")
        admin.run("create", "namespace", "team-a")
        first = tiny_service("first")
        first["spec"]["gpus"] = {**first["spec"]["gpus"], "product": "H100"}
        admin.apply_obj(first, "team-a")
        wait_for(lambda: admin.get("deployment", "first", "team-a"), 60, "first's Deployment")
        # The Deployment is written before the create's last handlers finish.
        active_op.wait_log("Creation is processed", timeout=30)
        assert "Creation is processed" not in standby.log()

        assert active_op.proc is not None
        active_op.proc.send_signal(signal.SIGKILL)
        active_op.proc.wait(10)
        second = tiny_service("second")
        second["spec"]["gpus"] = {**second["spec"]["gpus"], "product": "H100"}
        admin.apply_obj(second, "team-a")
        # The dead peer's entry expires (kopf's peering lifetime, 60 s), then the standby
        # resumes and handles what it missed.
        wait_for(lambda: admin.get("deployment", "second", "team-a"), 150,
                 "the standby to take over and render second's Deployment", interval=1)
        assert active(standby)
        standby.wait_log("Creation is processed", timeout=30)
    finally:
        for op in ops:
            op.stop()


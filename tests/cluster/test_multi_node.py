"""A replica over two nodes on the REAL control plane, with the REAL LeaderWorkerSet
controller (issue 36): ``kubectl apply`` of an LLMService pinned to pipeline-parallel 2 on
nodes of one GPU -> the operator's LeaderWorkerSet -> LWS's StatefulSets, headless
Service and pod webhook (``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE``,
``LWS_WORKER_INDEX``) -> the scheduler binds the leader and the worker to the two nodes
-> the local kubelet runs both as vLLM's CPU build, the leader waits for the worker, and
the group serves a completion; the LLMService says so. Then the worker's engine is
killed: LWS recreates the whole group (``RecreateGroupOnPodRestart``) and it serves again.
Then the LLMService is deleted: nothing it owned is left, no process runs.

What is local, and why: the kubelet runs pods as processes (its substitutions are listed
in docs/production/node-agent.md; here ``LWS_LEADER_ADDRESS`` becomes 127.0.0.1, since no
cluster DNS runs); the LWS manager runs as a process with the admin's kubeconfig, its
webhooks reached by URL (:mod:`llm_operator_sandbox.lws`). The two nodes are registered
for this test only (one GPU each, their own product label), so the scheduler has to use
both. The test holds the machine's vLLM lock while the group runs (one vLLM at a time).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from llm_operator.inpod.tuner.server import vllm_lock
from llm_operator_sandbox.cluster import Installed, LocalCluster
from llm_operator_sandbox.kubelet import GPU_TAINT, LocalKubelet, NodeSpec
from llm_operator_sandbox.loop import default_vllm_python
from llm_operator_sandbox.lws import LocalLWS, lws_present
from llm_operator_sandbox.node_agent import PORTS_ANNOTATION
from tests.support.emulator import ROOT, OperatorProcess, kubectl_binary, wait_for

from .conftest import TINY_MODEL_NAME, ClusterKubectl
from .test_control_plane import condition, forbidden_lines, owned_by

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]

PRODUCT = "NVIDIA-A10G"  # no other node of the session carries it
NAME = "duo"
LWS = f"{NAME}-lws"
# Both nodes' engines start in about 50 s on 2 quiet cores (tests/vllm measured 50-123 s,
# one worker late); a loaded CI machine may take several times that.
SERVE_S = 480


def two_node_service() -> dict[str, Any]:
    """The tiny Llama pinned to TP 1 x PP 2 on nodes of one GPU: one replica over two."""
    return {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
            "metadata": {"name": NAME},
            "spec": {"model": {"name": TINY_MODEL_NAME, "architecture": {
                "parameters": 550912, "numLayers": 2, "hiddenSize": 128,
                "numAttentionHeads": 4, "numKeyValueHeads": 2, "maxContext": 4096,
                "vocabSize": 1000}},
                "gpus": {"product": "A10G", "perNode": 1},
                "engine": {"tensorParallelSize": 1, "pipelineParallelSize": 2,
                           "maxModelLen": 512, "maxNumSeqs": 8},
                "workload": {"inputTokens": 64, "outputTokens": 16, "concurrency": 4},
                "tuning": {"mode": "Disabled"}, "adaptation": {"mode": "Disabled"}}}


def completion(port: int) -> dict[str, Any]:
    body = json.dumps({"model": TINY_MODEL_NAME, "prompt": "hello there", "max_tokens": 8,
                       "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return dict(json.loads(r.read()))


@pytest.mark.process_kubelet  # two nodes of its own, removed after
def test_a_two_node_group_serves_recovers_and_is_removed(
        cluster: LocalCluster, admin: ClusterKubectl, installed: Installed, namespace: str,
        tiny_model: Path, tmp_path: Path) -> None:
    if not lws_present():
        pytest.fail("the LeaderWorkerSet controller is not built: run "
                    "`bash tools/setup.sh --controllers` (tools/test.sh does)")
    nodes = [NodeSpec(f"duo-node-{i}", gpus=1, labels={"nvidia.com/gpu.product": PRODUCT},
                      taints=(GPU_TAINT,)) for i in (1, 2)]
    log = lambda line: sys.stderr.write(line + "\n")  # noqa: E731
    lws = LocalLWS(cluster.admin_kubeconfig, tmp_path / "lws", kubectl=kubectl_binary(),
                   out=log)
    kubelet = LocalKubelet(cluster.admin_kubeconfig, nodes, tmp_path / "kubelet",
                           vllm_python=default_vllm_python(ROOT),
                           models={TINY_MODEL_NAME: tiny_model}, out=log)
    op = OperatorProcess(installed.kubeconfig, tmp_path / "operator.log", [],
                         env={**installed.env, "LLMOP_METRICS_PORT": "0"})
    t0 = time.monotonic()
    try:
        with vllm_lock(), lws, kubelet:
            op.start().wait_log("Initial authentication has finished", timeout=60)
            try:
                _serve_recover_delete(admin, namespace, kubelet, t0)
                assert forbidden_lines(op.log()) == []
            finally:
                admin.run("delete", "llms", NAME, "-n", namespace, "--wait=false",
                          check=False)
                op.stop()
    finally:
        # The tests after it run with no node (tests/cluster/conftest.py checks).
        admin.run("delete", "node", *(n.name for n in nodes), "--wait=true", timeout=60,
                  check=False)


def _group_pods(admin: ClusterKubectl, namespace: str) -> dict[str, dict[str, Any]]:
    """The group's pods by name (leader ``duo-lws-0``, worker ``duo-lws-0-1``)."""
    return {p["metadata"]["name"]: p for p in admin.items(
        "pods", namespace, selector=f"leaderworkerset.sigs.k8s.io/name={LWS}")}


def _serving(admin: ClusterKubectl, namespace: str, what: str, timeout: float
             ) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = admin.get("llms", NAME, namespace)
        return obj if condition(obj, "Available").get("status") == "True" else None
    return wait_for(ready, timeout, what, interval=2)


def _serve_recover_delete(admin: ClusterKubectl, namespace: str, kubelet: LocalKubelet,
                          t0: float) -> None:
    admin.apply_obj(two_node_service(), namespace)
    llms = wait_for(lambda: admin.get("llms", NAME, namespace), 30, "the LLMService")
    uid = llms["metadata"]["uid"]
    obj = wait_for(lambda: admin.get("leaderworkerset", LWS, namespace), 60,
                   "the operator's LeaderWorkerSet")
    assert owned_by(obj, uid)
    assert obj["spec"]["leaderWorkerTemplate"]["size"] == 2

    # LWS's controllers and webhook made the group; the scheduler used both nodes.
    def bound() -> dict[str, dict[str, Any]] | None:
        pods = _group_pods(admin, namespace)
        ok = len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods.values())
        return pods if ok else None
    pods = wait_for(bound, 90, "the leader and the worker bound to nodes")
    leader, worker = pods[f"{LWS}-0"], pods[f"{LWS}-0-1"]
    assert {leader["spec"]["nodeName"], worker["spec"]["nodeName"]} == {"duo-node-1",
                                                                        "duo-node-2"}
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["LWS_LEADER_ADDRESS"] == f"{LWS}-0.{LWS}.{namespace}", env
    assert env["LWS_GROUP_SIZE"] == "2" and env["LWS_WORKER_INDEX"] == "1", env
    for sts in (LWS, f"{LWS}-0"):
        assert admin.get("statefulset", sts, namespace) is not None, sts

    obj = _serving(admin, namespace, "the LLMService Available (the two-node group "
                   "serving)", SERVE_S)
    served_s = time.monotonic() - t0
    port = _leader_port(admin, namespace)
    out = completion(port)
    assert out["usage"]["completion_tokens"] > 0, out
    table = admin.run("get", "llms", NAME, "-n", namespace).stdout
    sys.stderr.write(f"serving after {served_s:.0f} s:\n{table}\n")
    assert "True" in table.splitlines()[1], table
    assert obj["status"]["plan"]["nodesPerReplica"] == 2

    # Fault: the worker's engine dies. The kubelet restarts its container; LWS sees the
    # restart and recreates the whole group (the leader's rendezvous cannot be rejoined).
    leader_uid = _group_pods(admin, namespace)[f"{LWS}-0"]["metadata"]["uid"]
    pid = kubelet.container_pid(namespace, f"{LWS}-0-1", "vllm")
    assert pid is not None, "the kubelet runs no worker process"
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    killed = time.monotonic()

    def recreated() -> bool:
        lead = _group_pods(admin, namespace).get(f"{LWS}-0")
        return lead is not None and lead["metadata"]["uid"] != leader_uid
    wait_for(recreated, 120, "LWS to recreate the group's leader", interval=1)

    # The LLMService says the group is down, and why (LWS's Event on the LeaderWorkerSet).
    def said_why() -> dict[str, Any] | None:
        obj = admin.get("llms", NAME, namespace)
        ready = condition(obj, "Ready")
        return ready if (ready.get("status") == "False" and f"{LWS}-0-1 failed" in
                         ready.get("message", "")) else None
    ready = wait_for(said_why, 90, "Ready=False naming the recreated group", interval=1)
    assert "recreated a group" in ready["message"], ready
    sys.stderr.write(f"while the group restarts, Ready: {ready['message']}\n")
    _serving(admin, namespace, "the LLMService Available again after the group was "
             "recreated", SERVE_S)
    out = completion(_leader_port(admin, namespace))
    assert out["usage"]["completion_tokens"] > 0, out
    sys.stderr.write(f"serving again {time.monotonic() - killed:.0f} s after the kill\n")

    # Delete: the garbage collector removes the LWS, its StatefulSets, pods and Service.
    admin.run("delete", "llms", NAME, "-n", namespace, "--wait=true", timeout=120)

    def all_gone() -> bool:
        left = [o for o in admin.items("leaderworkersets,statefulsets,pods,services",
                                       namespace) if o["metadata"].get("ownerReferences")]
        return not left
    wait_for(all_gone, 120, "the garbage collector to remove the group", interval=1)
    wait_for(lambda: not kubelet.pids(), 60, "the kubelet to stop every process")


def _leader_port(admin: ClusterKubectl, namespace: str) -> int:
    leader = _group_pods(admin, namespace)[f"{LWS}-0"]
    ports = json.loads(leader["metadata"]["annotations"][PORTS_ANNOTATION])
    return int(ports["http"])

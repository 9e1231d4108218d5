"""Two REAL nodes, in containers: the tests that need a pod on a second node (on the
cluster tier's process kubelet until 2026-12-07).

A replica over two nodes (issue 36): ``kubectl apply`` of an LLMService pinned to pipeline-parallel
2 on nodes of one GPU -> the operator's LeaderWorkerSet -> the REAL LeaderWorkerSet
controller's StatefulSets, headless Service and pod webhook (``LWS_LEADER_ADDRESS``,
``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX``) -> the scheduler binds the leader and the worker
to two nodes -> each node's kubelet and containerd run its pod from the vLLM CPU image
exactly as rendered: the worker finds the leader by its DNS name (CoreDNS, the headless
Service), the two pipeline stages talk over gloo between the two nodes' pod subnets, and
the group serves a completion through the Service's cluster IP. Then the worker's engine is
killed in its container: LWS recreates the whole group (``RecreateGroupOnPodRestart``),
the LLMService says why, and the group serves again. Then the LLMService is deleted and
nothing it owned is left.

Two replicas on one ``ReadWriteOnce`` claim whose volume must be attached to a node
(a CSI driver with ``attachRequired``, :mod:`llm_operator_sandbox.csi`), the replicas kept
apart by anti-affinity: Kubernetes' attach-detach controller attaches the volume to the
first pod's node, the first pod mounts it and starts, and the second pod stays in
``ContainerCreating`` with the controller's ``FailedAttachVolume`` "Multi-Attach error",
which the LLMService names with the fix. (Kubernetes 1.37 words it "Waiting for detach for
volume ... Volume is already used by pod(s) ..."; earlier releases "Multi-Attach error for
volume ...". The process kubelet's stand-in used the old words, and the operator knew no
other until this test ran on two real nodes.)

Which kubelets ran these pods: **Kubernetes' kubelet with containerd** on ``node-1`` (the
tier's node) and on ``node-2``, joined for this test only
(:class:`llm_operator_sandbox.nodes.JoinedNode`: its own bridge and pod subnet,
containerd, kubelet, mount namespace and cgroup root on this machine) and removed after.
``node-1`` has 8 GPUs: in the group's test another team's pod holds 7 of them, so the
group's two pods of one GPU each have to go to the two nodes, as on nodes of one GPU.

What is local: the LWS manager (the tier's, installed before the operator), the CSI
driver's services and the CSI external-attacher run as processes with the admin's
kubeconfig (:mod:`llm_operator_sandbox.lws`,
:mod:`llm_operator_sandbox.csi`). Each test holds the machine's vLLM lock while its
vLLM containers run (one vLLM at a time, here two containers of one engine).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from llm_operator_sandbox.cluster import LocalCluster
from llm_operator_sandbox.csi import LocalCSI, csi_present
from llm_operator_sandbox.hub import LocalHub
from llm_operator_sandbox.lws import LocalLWS
from llm_operator_sandbox.nodes import GPU_RESOURCE, JoinedNode, RealNodes, RealNodeSpec
from tests.cluster.conftest import ClusterKubectl
from tests.cluster.test_control_plane import condition, owned_by
from tests.nodes.conftest import DEMO_MODEL, HeldLock, OperatorImage, VllmImage
from tests.nodes.test_real_containers import apply_until_false
from tests.nodes.test_vllm_in_containers import post, task_pid, vllm_service
from tests.support.emulator import wait_for

pytestmark = [pytest.mark.nodes]

NAME = "duo"
LWS = f"{NAME}-lws"
# Node-2's pull of the vLLM image (3.1 GB zstd) and both engines' start in containers of
# 1 CPU each on 2 shared cores. The group on the process kubelet served in about 50 s
# (tests/vllm measured 50-123 s, one worker late); the bound leaves room for a slow one.
SERVE_S = 900
L4 = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.present": "true"}
NODE_1_GPUS = 8  # RealNodeSpec's default, the tier's node


def two_node_service(image: VllmImage, hub_endpoint: str) -> dict[str, Any]:
    """The tiny Llama pinned to TP 1 x PP 2 on L4 nodes of one GPU: one replica over two
    nodes, each pod's vLLM container sized for a node of this 2-CPU machine."""
    return {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
            "metadata": {"name": NAME},
            "spec": {"model": {"name": DEMO_MODEL, "architecture": {
                "parameters": 550912, "numLayers": 2, "hiddenSize": 128,
                "numAttentionHeads": 4, "numKeyValueHeads": 2, "maxContext": 4096,
                "vocabSize": 1000}},
                "image": image.ref,
                "gpus": {"product": "L4", "perNode": 1},
                "engine": {"tensorParallelSize": 1, "pipelineParallelSize": 2,
                           "maxModelLen": 512, "maxNumSeqs": 8},
                "resources": {"cpu": "1", "memory": "6Gi", "shmSize": "256Mi"},
                "pod": {"imagePullSecrets": [{"name": "regcred"}],
                        "env": [{"name": "HF_ENDPOINT", "value": hub_endpoint},
                                {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}]},
                "workload": {"inputTokens": 64, "outputTokens": 16, "concurrency": 4},
                # A 10 s drain (a grace period of 30 s, not 140): a failed worker's
                # restarted engine ignores SIGTERM (below), so the group's recreation
                # waits for the whole grace period; 8-token requests need no longer.
                "rollout": {"drainSeconds": 10},
                "tuning": {"mode": "Disabled"}, "adaptation": {"mode": "Disabled"}}}


def holder(image: str, gpus: int) -> dict[str, Any]:
    """Another team's pod on node-1 holding ``gpus`` of its GPUs, running ``sleep``."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": "node-1"},
                     "imagePullSecrets": [{"name": "regcred"}],
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "hold", "image": image,
                                     "command": ["sleep", "3600"],
                                     "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}]}}


@contextmanager
def node_1_held(admin: ClusterKubectl, namespace: str, image: str) -> Iterator[None]:
    """All of node-1's GPUs but one held by the holder, running."""
    admin.apply_obj(holder(image, NODE_1_GPUS - 1), namespace)
    try:
        wait_for(lambda: (admin.get("pods", "holder", namespace) or {}).get(
            "status", {}).get("phase") == "Running", 90,
            f"the holder running with {NODE_1_GPUS - 1} GPUs of node-1", interval=1)
        yield
    finally:
        admin.run("delete", "pod", "holder", "-n", namespace, "--wait=false", check=False)


def log(line: str) -> None:
    sys.stderr.write(line + "\n")


@pytest.fixture(scope="module")
def node_2(real_nodes: tuple[LocalCluster, RealNodes]) -> Iterator[JoinedNode]:
    """``node-2``, one L4 GPU, joined for this module's tests and removed after (its
    containerd keeps the vLLM image it pulled for the next test)."""
    with JoinedNode(real_nodes[1], RealNodeSpec("node-2", gpus=1, labels=L4), index=1) as node:
        yield node


@pytest.mark.timeout(2400)
def test_a_two_node_group_serves_recovers_and_is_removed_in_containers(
        vllm_lock: HeldLock, real_nodes: tuple[LocalCluster, RealNodes],
        admin: ClusterKubectl, installed: dict[str, Any], namespace: str,
        operator_image: OperatorImage, vllm_image: VllmImage, hub: LocalHub,
        node_2: JoinedNode, lws: LocalLWS) -> None:
    _, nodes = real_nodes
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    t0 = time.monotonic()
    with node_1_held(admin, namespace, operator_image.ref):
        try:
            _serve_recover_delete(admin, namespace, vllm_image, hub, nodes, node_2, t0)
        finally:
            admin.run("delete", "llms", NAME, "-n", namespace, "--wait=false", check=False)


def _group_pods(admin: ClusterKubectl, namespace: str) -> dict[str, dict[str, Any]]:
    """The group's pods by name (leader ``duo-lws-0``, worker ``duo-lws-0-1``)."""
    return {p["metadata"]["name"]: p for p in admin.items(
        "pods", namespace, selector=f"leaderworkerset.sigs.k8s.io/name={LWS}")}


def _serving(admin: ClusterKubectl, namespace: str, what: str, timeout: float
             ) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = admin.get("llms", NAME, namespace)
        return obj if condition(obj, "Available").get("status") == "True" else None
    try:
        return wait_for(ready, timeout, what, interval=2)
    except AssertionError as e:  # what the user would look at next
        pods = [(p["metadata"]["name"], p["spec"].get("nodeName"), p.get("status"))
                for p in admin.items("pods", namespace)]
        raise AssertionError(f"{e}\nstatus: {admin.get('llms', NAME, namespace)}\n"
                             f"pods: {pods}") from e


def completion(admin: ClusterKubectl, namespace: str) -> dict[str, Any]:
    """A completion through the Service's cluster IP (kube-proxy), as a client in the
    cluster sends it."""
    service = admin.get("services", NAME, namespace) or {}
    ip, port = service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"]
    return post(f"http://{ip}:{port}/v1/completions", {
        "model": DEMO_MODEL, "prompt": "hello there", "max_tokens": 8, "temperature": 0},
        timeout=120)


def _serve_recover_delete(admin: ClusterKubectl, namespace: str, image: VllmImage,
                          hub: LocalHub, nodes: RealNodes, node_2: JoinedNode,
                          t0: float) -> None:
    admin.apply_obj(two_node_service(image, hub.endpoint), namespace)
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
    assert {leader["spec"]["nodeName"], worker["spec"]["nodeName"]} == {"node-1", "node-2"}
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["LWS_LEADER_ADDRESS"] == f"{LWS}-0.{LWS}.{namespace}", env
    assert env["LWS_GROUP_SIZE"] == "2" and env["LWS_WORKER_INDEX"] == "1", env
    for sts in (LWS, f"{LWS}-0"):
        assert admin.get("statefulset", sts, namespace) is not None, sts

    obj = _serving(admin, namespace, "the LLMService Available (the two-node group "
                   "serving)", SERVE_S)
    served_s = time.monotonic() - t0
    out = completion(admin, namespace)
    assert out["usage"]["completion_tokens"] > 0, out
    pods = _group_pods(admin, namespace)
    # Each pod in its node's container runtime, on its node's pod subnet.
    for pod in pods.values():
        node = pod["spec"]["nodeName"]
        status = pod["status"]
        subnet = "10.244.0." if node == "node-1" else f"10.244.{node_2.net.index}."
        assert status["podIP"].startswith(subnet), (node, status["podIP"])
        vllm = next(s for s in status["containerStatuses"] if s["name"] == "vllm")
        assert vllm["containerID"].startswith("containerd://"), vllm
        assert vllm["imageID"].endswith(image.digest), vllm
        sys.stderr.write(f"{pod['metadata']['name']} on {node}: {status['podIP']}, "
                         f"{vllm['containerID'][:25]}...\n")
    table = admin.run("get", "llms", NAME, "-n", namespace).stdout
    sys.stderr.write(f"serving after {served_s:.0f} s:\n{table}\n")
    assert "True" in table.splitlines()[1], table
    assert obj["status"]["plan"]["nodesPerReplica"] == 2

    # Fault: the worker's engine dies in its container. The kubelet restarts the
    # container; LWS sees the restart and recreates the whole group (the leader's
    # rendezvous cannot be rejoined): it deletes the leader pod, in the foreground.
    worker = pods[f"{LWS}-0-1"]
    leader_uid = pods[f"{LWS}-0"]["metadata"]["uid"]
    runs_it = nodes if worker["spec"]["nodeName"] == "node-1" else node_2
    vllm = next(s for s in worker["status"]["containerStatuses"] if s["name"] == "vllm")
    os.kill(task_pid(runs_it, vllm["containerID"]), signal.SIGKILL)
    killed = time.monotonic()

    # The LLMService says the group is down, and why (LWS's Event on the LeaderWorkerSet).
    def said_why() -> dict[str, Any] | None:
        obj = admin.get("llms", NAME, namespace)
        ready = condition(obj, "Ready")
        return ready if (ready.get("status") == "False" and f"{LWS}-0-1 failed" in
                         ready.get("message", "")) else None
    ready = wait_for(said_why, 90, "Ready=False naming the recreated group", interval=1)
    assert "recreated a group" in ready["message"], ready
    log(f"{time.monotonic() - killed:.0f} s after the kill, Ready: {ready['message']}")

    # The new leader comes once the old group's pods are gone. On a real kubelet that
    # takes the worker's grace period: its restarted engine waits in torch's rendezvous
    # for the deleted leader and does not end on SIGTERM (measured here: killed at the
    # 140 s grace's end with the default drain), so the foreground deletion of the
    # leader waits for it.
    grace = int(worker["spec"].get("terminationGracePeriodSeconds") or 30)
    assert grace == 30, f"spec.rollout.drainSeconds 10 rendered a grace period of {grace} s"

    def recreated() -> bool:
        lead = _group_pods(admin, namespace).get(f"{LWS}-0")
        return lead is not None and lead["metadata"]["uid"] != leader_uid
    wait_for(recreated, grace + 90, "LWS to recreate the group's leader", interval=1)
    log(f"the group's new leader {time.monotonic() - killed:.0f} s after the kill "
        f"(the worker's grace period {grace} s)")
    _serving(admin, namespace, "the LLMService Available again after the group was "
             "recreated", SERVE_S)
    out = completion(admin, namespace)
    assert out["usage"]["completion_tokens"] > 0, out
    sys.stderr.write(f"serving again {time.monotonic() - killed:.0f} s after the kill\n")

    # Delete: the garbage collector removes the LWS, its StatefulSets, pods and Service;
    # node-2's containerd runs nothing any more.
    admin.run("delete", "llms", NAME, "-n", namespace, "--wait=true", timeout=120)

    def all_gone() -> bool:
        left = [o for o in admin.items("leaderworkersets,statefulsets,pods,services",
                                       namespace) if o["metadata"].get("ownerReferences")]
        return not left
    wait_for(all_gone, 180, "the garbage collector to remove the group", interval=1)
    wait_for(lambda: not node_2.containerd.ctr("tasks", "ls", "-q").stdout.split(), 60,
             "node-2's containerd to run no container")


@pytest.mark.timeout(900)
def test_a_read_write_once_claim_on_two_nodes_gets_the_multi_attach_error(
        vllm_lock: HeldLock, real_nodes: tuple[LocalCluster, RealNodes],
        admin: ClusterKubectl, installed: dict[str, Any], namespace: str,
        vllm_image: VllmImage, hub: LocalHub, node_2: JoinedNode, tmp_path: Path) -> None:
    """replicas: 2 on one ReadWriteOnce claim of an attachable volume, on two nodes."""
    if not csi_present():
        pytest.fail("the CSI driver and attacher are not built: run "
                    "`bash tools/setup.sh --nodes` (tools/test.sh does)")
    cluster, nodes = real_nodes
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    pv = f"hf-cache-{namespace}"
    with LocalCSI(cluster, tmp_path / "csi", [("node-1", nodes.kubelet_root),
                                              ("node-2", node_2.kubelet_root)], out=log) as csi:
        admin.apply_obj(csi.persistent_volume(pv, claim=(namespace, "hf-cache")))
        try:
            admin.apply_obj({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "metadata": {"name": "hf-cache"},
                             "spec": {"accessModes": ["ReadWriteOnce"],
                                      "storageClassName": "manual", "volumeName": pv,
                                      "resources": {"requests": {"storage": "1Gi"}}}},
                            namespace)
            svc = vllm_service("shared", vllm_image, hub.endpoint)
            svc["spec"]["replicas"] = 2
            svc["spec"]["cache"] = {"claimName": "hf-cache"}
            svc["spec"]["scheduling"] = {"affinity": {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"llmops.dev/llmservice": "shared"}},
                    "topologyKey": "kubernetes.io/hostname"}]}}}
            cond = apply_until_false(admin, namespace, svc, "ContainersRunning",
                                     "Multi-Attach")
            try:
                assert cond["reason"] == "FailedAttachVolume", cond
                # Kubernetes 1.37's words (earlier releases: "Multi-Attach error for
                # volume ..."; the operator reads both).
                assert re.search(
                    r"1 of 2 server pods cannot start; pod shared-\S+: FailedAttachVolume: "
                    rf'Waiting for detach for volume "{pv}" Volume is already used by '
                    r"pod\(s\) shared-", cond["message"]), cond
                assert ("Fix: claim hf-cache is ReadWriteOnce and 2 replicas share it: use a "
                        "ReadWriteMany class or 1 replica") in cond["message"]
                log(f"ContainersRunning: {cond['message']}")
                # The controller attached the volume to one node, the first pod's, whose
                # kubelet mounted it: that pod's init container started.
                pods = {p["spec"]["nodeName"]: p for p in admin.items("pods", namespace)}
                attached = [a for a in csi.attachments()
                            if a["spec"]["source"].get("persistentVolumeName") == pv]
                assert len(attached) == 1 and attached[0]["status"]["attached"], attached
                first = pods[attached[0]["spec"]["nodeName"]]
                assert sorted(pods) == ["node-1", "node-2"], sorted(pods)

                def started() -> bool:
                    pod = admin.get("pods", first["metadata"]["name"], namespace) or {}
                    inits = (pod.get("status") or {}).get("initContainerStatuses") or []
                    return any(set(s.get("state") or {}) & {"running", "terminated"}
                               for s in inits)
                wait_for(started, 120, "the first pod's init container started on the "
                         "attached volume", interval=1)
            except AssertionError as e:
                raise AssertionError(f"{e}\n{csi.logs()}") from e
        finally:
            admin.run("delete", "llms", "shared", "-n", namespace, "--wait=false",
                      check=False)
            # The volume is detached while the driver still runs: the pods go first.
            wait_for(lambda: not admin.items("pods", namespace), 180,
                     "the shared pods to go", interval=1)
            wait_for(lambda: not [a for a in csi.attachments()
                                  if a["spec"]["source"].get("persistentVolumeName") == pv],
                     120, "the volume detached", interval=1)
            admin.run("delete", "pvc", "hf-cache", "-n", namespace, "--wait=false",
                      check=False)
            admin.run("delete", "pv", pv, "--wait=false", check=False)

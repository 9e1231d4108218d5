"""The chart's operator pod and the LLMService's pods in REAL containers (containerd and
runc under Kubernetes' own kubelet, node ``node-1``), from images built here and pulled
from a registry that requires a login; day-one failures produced for real by the kubelet
and containerd, and shown on the LLMService within two minutes with the fix.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from llm_operator_sandbox.nodes import GPU_RESOURCE, RealNodes
from tests.cluster.conftest import ClusterKubectl
from tests.cluster.test_control_plane import condition, tiny_service
from tests.cluster.test_pod_failures import assert_missing_token_secret, warnings
from tests.support.emulator import wait_for

from .conftest import RELEASE_NAMESPACE, OperatorImage, operator_pod, pod_of

pytestmark = [pytest.mark.nodes, pytest.mark.timeout(420)]

WITHIN_SECONDS = 120  # the promise: every pod-level failure on the LLMService in 2 minutes


def container_status(pod: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next(s for s in statuses if name is None or s["name"] == name)


def test_the_charts_operator_pod_runs_the_image_built_here(
        admin: ClusterKubectl, installed: dict[str, Any], operator_image: OperatorImage,
        nodes: RealNodes) -> None:
    """helm install with image.registry/repository/digest and imagePullSecrets: the pod
    runs in containerd from the pushed digest, as UID 65532 on a read-only root file
    system, and reaches the API server through the `kubernetes` Service (kube-proxy) with
    its ServiceAccount token: the operator's in-cluster configuration, for real."""
    # The chart's pod now: the loop test deletes the one the session installed.
    pod = operator_pod(admin)
    name = pod["metadata"]["name"]
    status = container_status(pod)
    assert pod["spec"]["nodeName"] == nodes.node.name
    assert status["containerID"].startswith("containerd://"), status
    assert status["imageID"] == f"{operator_image.registry}/llm-operator@{operator_image.digest}"
    assert status["ready"] is True and status["restartCount"] == 0, status
    exec_ = ["exec", "-n", RELEASE_NAMESPACE, name, "--"]
    assert admin.run(*exec_, "id", "-u").stdout.strip() == "65532"
    write = admin.run(*exec_, "touch", "/opt/venv/x", check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr, write
    # The operator logged in with its in-cluster configuration: kopf's first words after
    # authenticating through KUBERNETES_SERVICE_HOST (the Service's ClusterIP).
    env = admin.run(*exec_, "printenv", "KUBERNETES_SERVICE_HOST").stdout.strip()
    assert env == "10.96.0.1", env
    log = wait_for(lambda: (lambda out: out if "Initial authentication has finished" in out
                            else None)(admin.run("logs", "-n", RELEASE_NAMESPACE, name).stdout),
                   60, "the operator's log to say it authenticated", interval=1)
    assert "Traceback" not in log, log[-3000:]
    sys.stderr.write(f"operator pod {name}: {status['containerID'][:25]}..., image "
                     f"{status['imageID']}\n")


def test_the_kubelet_allocates_gpus_from_the_device_plugin(
        admin: ClusterKubectl, installed: dict[str, Any], namespace: str, nodes: RealNodes,
        operator_image: OperatorImage) -> None:
    """The device plugin (tools/device-plugin, the kubelet's device-plugin API) registered 8
    ``nvidia.com/gpu``: the node's capacity and allocatable come from the kubelet, not a
    patched status. A pod asking for 2 on the GPU feature discovery label runs with 2
    distinct devices named in its container (``NVIDIA_VISIBLE_DEVICES``, from the plugin's
    Allocate, which the kubelet called), and while it holds them a pod asking for 7 is
    not scheduled: the scheduler counts what the kubelet left allocatable."""
    node = admin.get("nodes", nodes.node.name) or {}
    assert node["status"]["capacity"].get(GPU_RESOURCE) == "8", node["status"]["capacity"]
    assert node["status"]["allocatable"].get(GPU_RESOURCE) == "8", node["status"]
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)

    try:
        line, said = two_then_seven(admin, namespace, nodes, operator_image.ref)
    finally:  # bare pods: no LLMService deletes them with the namespace's teardown
        admin.run("delete", "pod", "two-gpus", "seven-gpus", "-n", namespace, "--wait=false",
                  check=False)
    sys.stderr.write(f"devices allocated by the kubelet: {line}; 7 more: {said['message']}\n")


def gpu_pod(name: str, gpus: int, image: str) -> dict[str, Any]:
    """A pod on the GPU feature discovery label that prints the devices it was given."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "imagePullSecrets": [{"name": "regcred"}], "terminationGracePeriodSeconds": 1,
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
        "containers": [{"name": "main", "image": image,
                        "command": ["sh", "-c", "echo devices=$NVIDIA_VISIBLE_DEVICES; "
                                    "exec sleep 600"],
                        "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}]}}


def two_then_seven(admin: ClusterKubectl, namespace: str, nodes: RealNodes,
                   image: str) -> tuple[str, dict[str, Any]]:
    """A pod with 2 GPUs runs with 2 devices; then one asking for 7 is not scheduled."""
    admin.apply_obj(gpu_pod("two-gpus", 2, image), namespace)
    line = wait_for(lambda: next((ln for ln in admin.run(
        "logs", "two-gpus", "-n", namespace, check=False).stdout.splitlines()
        if ln.startswith("devices=")), None), 60, "the pod's devices in its log", interval=1)
    devices = line.removeprefix("devices=").split(",")
    assert len(set(devices)) == 2 and set(devices) <= {f"gpu-{i}" for i in range(8)}, line
    assert (admin.get("pod", "two-gpus", namespace) or {})["spec"]["nodeName"] == nodes.node.name

    admin.apply_obj(gpu_pod("seven-gpus", 7, image), namespace)

    def unschedulable() -> dict[str, Any] | None:
        c = condition(admin.get("pod", "seven-gpus", namespace), "PodScheduled")
        return c if c.get("reason") == "Unschedulable" else None
    said = wait_for(unschedulable, 60, "the scheduler to refuse the 7-GPU pod", interval=1)
    assert f"Insufficient {GPU_RESOURCE}" in said.get("message", ""), said
    return line, said


def small_service(name: str) -> dict[str, Any]:
    """The demo's tiny Llama, its vLLM container sized for this 2-CPU node."""
    svc = tiny_service(name)
    svc["spec"]["resources"] = {"cpu": "500m", "memory": "7Gi", "shmSize": "256Mi"}
    return svc


def apply_until_false(admin: ClusterKubectl, namespace: str, svc: dict[str, Any],
                      ctype: str, what: str) -> dict[str, Any]:
    name = svc["metadata"]["name"]
    started = time.monotonic()
    admin.apply_obj(svc, namespace)

    def probe() -> dict[str, Any] | None:
        c = condition(admin.get("llms", name, namespace), ctype)
        return c if c.get("status") == "False" and c.get("reason") != "Pending" else None
    try:
        cond = wait_for(probe, WITHIN_SECONDS, f"{ctype}=False on the LLMService ({what})",
                        interval=1)
    except AssertionError as e:  # what the user would look at next
        status = (admin.get("llms", name, namespace) or {}).get("status")
        pods = [(p["metadata"]["name"], p["spec"].get("nodeName"), p.get("status"))
                for p in admin.items("pods", namespace)]
        events = [(e["involvedObject"]["name"], e["reason"], e.get("message"))
                  for e in admin.items("events", namespace)]
        raise AssertionError(f"{e}\nstatus: {status}\npods: {pods}\nevents: {events}") from e
    sys.stderr.write(f"{ctype}=False ({what}) after {time.monotonic() - started:.1f} s: "
                     f"{cond['message']}\n")
    return cond


def test_an_image_missing_from_the_registry_is_image_pull_back_off(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes) -> None:
    """The Deployment the operator (in its pod) rendered is scheduled on the real node;
    containerd asks the registry for an image it does not hold and the kubelet backs off."""
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    image = f"{nodes.registry.host}/vllm/vllm-openai:v0.32.0"  # never pushed
    svc = small_service("missing")
    svc["spec"]["image"] = image
    svc["spec"]["pod"] = {"imagePullSecrets": [{"name": "regcred"}]}
    cond = apply_until_false(admin, namespace, svc, "ContainersRunning", "image not found")
    assert cond["reason"] == "ImagePullBackOff", cond
    # containerd's words (first pull) or the kubelet's (backing off, on a slow machine)
    assert re.search(rf"container download-model: (ErrImagePull: .*{re.escape(image)}: not "
                     r"found\.|ImagePullBackOff: Back-off pulling image)", cond["message"]), cond
    assert f"Fix: check that image {image} exists" in cond["message"], cond
    pod = pod_of(admin, namespace, "llmops.dev/llmservice=missing")
    assert pod["spec"]["nodeName"] == nodes.node.name


def test_a_pull_without_the_secret_is_refused_by_the_registry(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes,
        operator_image: OperatorImage) -> None:
    """The image exists, but the pod has no pull secret: the registry answers 401 and the
    LLMService says so, naming spec.pod.imagePullSecrets."""
    svc = small_service("nosecret")
    svc["spec"]["image"] = operator_image.ref
    cond = apply_until_false(admin, namespace, svc, "ContainersRunning", "no pull secret")
    assert cond["reason"] == "ImagePullBackOff", cond
    assert re.search(r"container download-model: (ErrImagePull: .*401 Unauthorized\.|"
                     r"ImagePullBackOff: Back-off pulling image)", cond["message"]), cond
    assert "a private registry needs spec.pod.imagePullSecrets" in cond["message"], cond


def test_a_missing_token_secret_is_create_container_config_error(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes,
        operator_image: OperatorImage) -> None:
    """The image is pulled (with the secret); the kubelet cannot build the download
    container's environment, since its HF_TOKEN Secret does not exist."""
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    svc = small_service("token")
    svc["spec"]["image"] = operator_image.ref
    svc["spec"]["pod"] = {"imagePullSecrets": [{"name": "regcred"}]}
    svc["spec"]["model"]["tokenSecretRef"] = {"name": "hf-token", "key": "token"}
    cond = apply_until_false(admin, namespace, svc, "ContainersRunning", "missing Secret")
    assert_missing_token_secret(cond, namespace)
    # One Warning Event, though the kubelet fails the container again at each pod sync.
    assert len(warnings(admin, namespace, "token", "CreateContainerConfigError")) == 1


@contextmanager
def stand_in_server_pod(admin: ClusterKubectl, namespace: str, image: str, service: str,
                        container: dict[str, Any]) -> Iterator[str]:
    """An LLMService ``service`` with no replicas of its own, and a pod with its server
    pods' labels (the operator watches server pods by label) running ``container`` (named
    ``vllm``) from ``image``: a failure a vLLM pod would take minutes to produce, in
    seconds. Yields the pod's name, and deletes the pod after (the namespace's teardown
    waits for its pods to go, and no LLMService owns this one)."""
    svc = small_service(service)
    svc["spec"]["replicas"] = 0  # the stand-in is its only server pod
    svc["spec"]["image"] = image
    admin.apply_obj(svc, namespace)
    wait_for(lambda: ((admin.get("llms", service, namespace) or {}).get("status") or {}).get(
        "conditions"), 60, "the operator to take up the LLMService", interval=1)
    name = f"{service}-stand-in"
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    admin.apply_obj({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "labels": {"app.kubernetes.io/managed-by": "llm-operator",
                                 "llmops.dev/component": "server",
                                 "llmops.dev/llmservice": service}},
        "spec": {"imagePullSecrets": [{"name": "regcred"}], "terminationGracePeriodSeconds": 2,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "vllm", "image": image,
                                 "securityContext": restricted, **container}]}}, namespace)
    try:
        yield name
    finally:
        admin.run("delete", "pod", name, "-n", namespace, "--wait=false", check=False)


def wait_for_reason(admin: ClusterKubectl, namespace: str, service: str, pod: str,
                    reason: str, started: float) -> dict[str, Any]:
    """``ContainersRunning`` once its reason is ``reason`` (within WITHIN_SECONDS), with
    what the user would look at next when it does not come."""
    def named() -> dict[str, Any] | None:
        c = condition(admin.get("llms", service, namespace), "ContainersRunning")
        return c if c.get("reason") == reason else None
    try:
        cond = wait_for(named, WITHIN_SECONDS, f"ContainersRunning {reason}", interval=1)
    except AssertionError as e:
        events = [(ev["reason"], ev.get("message"), ev.get("lastTimestamp"))
                  for ev in admin.items("events", namespace)]
        status = (admin.get("pod", pod, namespace) or {}).get("status")
        raise AssertionError(f"{e}\nLLMService: "
                             f"{(admin.get('llms', service, namespace) or {}).get('status')}"
                             f"\npod: {status}\nevents: {events}") from e
    sys.stderr.write(f"ContainersRunning {reason} after {time.monotonic() - started:.1f} s: "
                     f"{cond['message']}\n")
    assert cond["status"] == "False", cond
    return cond


def test_a_startup_probe_that_runs_out_is_named_with_its_budget(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes,
        operator_image: OperatorImage) -> None:
    """The kubelet kills a server container whose startup probe runs out and restarts it;
    its status says only how it exited. The operator reads the pod's Events and says
    StartupProbeFailed, the budget and the fix. A vLLM pod's budget is at least 600 s, so
    a stand-in has a 6 s one: its container sleeps, nothing answers /health."""
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    started = time.monotonic()
    with stand_in_server_pod(admin, namespace, operator_image.ref, "slow", {
            "command": ["sleep", "3600"],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
            "startupProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 2,
                             "failureThreshold": 3, "timeoutSeconds": 1}}) as pod:
        cond = wait_for_reason(admin, namespace, "slow", pod, "StartupProbeFailed", started)
        status = container_status(admin.get("pod", pod, namespace), "vllm")
    message = cond["message"]
    assert (f"pod {pod}, container vllm: StartupProbeFailed: the kubelet killed it when its "
            "startup probe on /health ran out (3 failures 2 s apart: 6 s)") in message
    # the kubelet's own Unhealthy words, from its prober against the pod's IP
    assert re.search(r'Startup probe failed: Get "http://[\d.]+:8000/health": dial tcp '
                     r"[\d.]+:8000: connect: connection refused", message), message
    assert "set spec.model.loadBandwidth" in message, message
    assert status["restartCount"] >= 1 and status.get("started") is not True, status


def test_a_container_over_its_memory_limit_is_oom_killed_by_the_kernel(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes,
        operator_image: OperatorImage) -> None:
    """The kernel's OOM killer, at the memory cgroup's limit the kubelet set from the
    pod's: the kubelet says OOMKilled and the operator names the limit and the fix. (vLLM's
    CPU build refuses a KV cache above its container's memory before it allocates, so a
    stand-in writes 256 MiB under a 64Mi limit.)"""
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    started = time.monotonic()
    with stand_in_server_pod(admin, namespace, operator_image.ref, "big", {
            "command": ["python3", "-c", "b = b'x' * (256 << 20); import time; time.sleep(60)"],
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                          "limits": {"memory": "64Mi"}}}) as pod:
        cond = wait_for_reason(admin, namespace, "big", pod, "CrashLoopBackOff", started)
        status = container_status(admin.get("pod", pod, namespace), "vllm")
    message = cond["message"]
    assert re.search(r"container vllm restarted \d+ times \(exit code 137, OOMKilled\): the "
                     r"kernel killed container vllm at its memory limit of 64Mi "
                     r"\(spec\.resources\.memory\)\. Fix: raise spec\.resources\.memory",
                     message), message
    assert status["lastState"]["terminated"]["reason"] == "OOMKilled", status

"""The LLMService's vLLM Deployment, exactly as rendered, in REAL containers (containerd and
runc under Kubernetes' own kubelet, node ``node-1``): the vLLM CPU image built here
(``tools/build_images.sh --vllm``: the CPU tiers' own vLLM on a Debian Python base) pulled
from the registry with the pod's pull secret; ``download-model`` downloads the demo's model
from a Hub stand-in on the bridge with the Hugging Face client the image ships; vLLM loads
it from the cache volume under ``HF_HUB_OFFLINE``; the startup probe, the Service through
kube-proxy and the pod's metrics port are the kubelet's and the kernel's, not the process
kubelet's. Nothing in the pod is substituted.

The only CPU-specific setting is the user's own ``spec.pod.env``: ``VLLM_CPU_KVCACHE_SPACE``
(GiB), because vLLM's CPU build sizes its KV cache from the machine's memory, not from a
GPU's, and ``HF_ENDPOINT`` (the Hub stand-in).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import ClusterKubectl
from tests.cluster.test_control_plane import condition
from tests.nodes.conftest import VllmImage, pod_of
from tests.nodes.test_real_containers import container_status, small_service
from tests.support.emulator import wait_for

pytestmark = [pytest.mark.nodes]

# Pull (about 6 GB from the local registry) plus vLLM's start on 2 shared cores: measured
# 95-140 s on this machine; the bound leaves room for a slower one.
READY_WITHIN_SECONDS = 900


def vllm_service(name: str, image: VllmImage, hub_endpoint: str,
                 memory: str = "6Gi") -> dict[str, Any]:
    svc = small_service(name)
    svc["spec"]["image"] = image.ref
    svc["spec"]["resources"] = {"cpu": "1", "memory": memory, "shmSize": "256Mi"}
    svc["spec"]["pod"] = {
        "imagePullSecrets": [{"name": "regcred"}],
        "env": [{"name": "HF_ENDPOINT", "value": hub_endpoint},
                {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}]}
    return svc


ENFORCE = "pod-security.kubernetes.io/enforce"
# A pod the `restricted` standard refuses (root, no seccomp profile), applied as a dry run.
ROOT_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
    "spec": {"containers": [{"name": "c", "image": "busybox",
                             "securityContext": {"runAsUser": 0}}]}}


def uid_of(nodes: Any, container_id: str) -> int:
    """The real user id of the container's first process (containerd's task, /proc)."""
    cid = container_id.removeprefix("containerd://")
    tasks = nodes.containerd.ctr("tasks", "ls").stdout.splitlines()[1:]
    (pid,) = [line.split()[1] for line in tasks if line.split()[0] == cid]
    status = Path(f"/proc/{pid}/status").read_text()
    (uid_line,) = [line for line in status.splitlines() if line.startswith("Uid:")]
    return int(uid_line.split()[1])


def post(url: str, payload: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (cluster IP)
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


@pytest.mark.timeout(2400)
def test_vllm_serves_the_model_in_a_container_as_rendered(
        vllm_lock: None, admin: ClusterKubectl, namespace: str, nodes: Any, vllm_image: VllmImage,
        hub: Any) -> None:
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    # The API server enforces the `restricted` Pod Security Standard on the namespace: a
    # pod that breaks it is never created (the ReplicaSet's FailedCreate). That the rule
    # is on, shown first on a root pod (a server-side dry run, refused).
    admin.run("label", "namespace", namespace, f"{ENFORCE}=restricted")
    refused = admin.run("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                        stdin=yaml.safe_dump(ROOT_POD), check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused
    svc = vllm_service("tiny", vllm_image, hub.endpoint)
    started = time.monotonic()
    admin.apply_obj(svc, namespace)

    def ready() -> dict[str, Any] | None:
        c = condition(admin.get("llms", "tiny", namespace), "Ready")
        return c if c.get("status") == "True" else None
    try:
        wait_for(ready, READY_WITHIN_SECONDS, "Ready=True on the LLMService", interval=2)
    except AssertionError as e:
        pods = [(p["metadata"]["name"], p.get("status")) for p in admin.items("pods", namespace)]
        raise AssertionError(f"{e}\nstatus: {admin.get('llms', 'tiny', namespace)}\n"
                             f"pods: {pods}") from e
    took = time.monotonic() - started
    pod = pod_of(admin, namespace, "llmops.dev/llmservice=tiny,llmops.dev/component=server")
    name = pod["metadata"]["name"]

    # The kubelet ran it in containerd, from the registry's image, on the real node.
    vllm = container_status(pod, "vllm")
    assert vllm["containerID"].startswith("containerd://"), vllm
    assert vllm["imageID"] == f"{nodes.registry.host}/vllm-cpu@{vllm_image.digest}", vllm
    assert pod["spec"]["nodeName"] == nodes.node.name
    init = {s["name"]: s for s in pod["status"]["initContainerStatuses"]}
    assert init["download-model"]["state"]["terminated"]["exitCode"] == 0, init
    log = admin.run("logs", name, "-n", namespace, "-c", "download-model").stdout
    assert "Downloaded llmops-demo/tiny-llama" in log, log
    assert any("/resolve/" in r and r.endswith("model.safetensors") for r in hub.requests), \
        hub.requests
    # Not root: vLLM's process runs as the pods' user (spec.pod.runAsUser, default 1000), as
    # the kernel sees it, and wrote the model cache as that user.
    assert uid_of(nodes, vllm["containerID"]) == 1000
    # The container's command is the rendered one, untouched: `vllm serve MODEL ...`.
    spec = next(c for c in pod["spec"]["containers"] if c["name"] == "vllm")
    assert spec["command"] == ["vllm", "serve"], spec["command"]
    assert spec["args"][0] == "llmops-demo/tiny-llama", spec["args"]

    # A completion through the Service's cluster IP: kube-proxy's rules, then the pod.
    service = admin.get("services", "tiny", namespace)
    ip = service["spec"]["clusterIP"]
    port = next(p["port"] for p in service["spec"]["ports"])
    answer = wait_for(lambda: post(f"http://{ip}:{port}/v1/completions", {
        "model": "llmops-demo/tiny-llama", "prompt": "hello", "max_tokens": 8}), 60,
        "a completion through the Service", interval=2)
    assert answer["model"] == "llmops-demo/tiny-llama", answer
    assert answer["usage"]["completion_tokens"] == 8, answer
    # vLLM's metrics on the pod's own IP and port, where the PodMonitor points Prometheus.
    pod_ip = pod["status"]["podIP"]
    assert pod_ip.startswith("10.244.0."), pod_ip
    with urllib.request.urlopen(f"http://{pod_ip}:8000/metrics", timeout=10) as resp:  # noqa: S310
        metrics = resp.read().decode()
    assert "vllm:num_requests_running" in metrics
    sys.stderr.write(f"vLLM pod {name} Ready {took:.0f} s after apply, "
                     f"{vllm['containerID'][:25]}..., {vllm['imageID']}; completion via "
                     f"{ip}:{port}\n")


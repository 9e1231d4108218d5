"""The LLMService's vLLM Deployment, exactly as rendered, in REAL containers (containerd and
runc under Kubernetes' own kubelet, node ``node-1``), from the vLLM CPU image built here
(``tools/build_images.sh --vllm``: the CPU tiers' own vLLM on a Debian Python base) pulled
from the registry with the pod's pull secret: the helpers the nodes tier's vLLM tests share,
and vLLM's CPU build refusing a KV cache larger than its container's memory. Serving,
the download, the Service through kube-proxy, tuning and the live cap are in
:mod:`tests.nodes.test_loop_in_containers`.

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

from tests.cluster.conftest import ClusterKubectl
from tests.cluster.test_control_plane import condition
from tests.nodes.conftest import HeldLock, VllmImage
from tests.nodes.test_real_containers import small_service
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


def ready_or_explain(admin: ClusterKubectl, namespace: str, name: str, timeout: float) -> None:
    """Wait for Ready=True on the LLMService; else fail with its status and its pods'."""
    def ready() -> dict[str, Any] | None:
        c = condition(admin.get("llms", name, namespace), "Ready")
        return c if c.get("status") == "True" else None
    try:
        wait_for(ready, timeout, f"Ready=True on the LLMService {name}", interval=2)
    except AssertionError as e:
        pods = [(p["metadata"]["name"], p.get("status")) for p in admin.items("pods", namespace)]
        raise AssertionError(f"{e}\nstatus: {admin.get('llms', name, namespace)}\n"
                             f"pods: {pods}") from e


ENFORCE = "pod-security.kubernetes.io/enforce"
# A pod the `restricted` standard refuses (root, no seccomp profile), applied as a dry run.
ROOT_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
    "spec": {"containers": [{"name": "c", "image": "busybox",
                             "securityContext": {"runAsUser": 0}}]}}


def task_pid(nodes: Any, container_id: str) -> int:
    """The host PID of the container's first process (containerd's task)."""
    cid = container_id.removeprefix("containerd://")
    tasks = nodes.containerd.ctr("tasks", "ls").stdout.splitlines()[1:]
    (pid,) = [line.split()[1] for line in tasks if line.split()[0] == cid]
    return int(pid)


def uid_of(nodes: Any, container_id: str) -> int:
    """The real user id of the container's first process (containerd's task, /proc)."""
    status = Path(f"/proc/{task_pid(nodes, container_id)}/status").read_text()
    (uid_line,) = [line for line in status.splitlines() if line.startswith("Uid:")]
    return int(uid_line.split()[1])


def post(url: str, payload: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (cluster IP)
        answer: dict[str, Any] = json.loads(resp.read())
    return answer




# The operator refuses less than the 6 GiB vLLM takes before loading weights.
MEMORY_LIMIT = "6Gi"
SAID_WITHIN_SECONDS = 120  # the promise: a pod-level failure on the LLMService in 2 minutes


def terminations(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The vLLM container's terminations the kubelet reports (now and its last state)."""
    vllm = next((s for s in (pod.get("status") or {}).get("containerStatuses") or []
                 if s["name"] == "vllm"), {})
    return [dict(t) for state in (vllm.get("state") or {}, vllm.get("lastState") or {})
            if (t := state.get("terminated"))]


def waiting_reason(pod: dict[str, Any]) -> str | None:
    """Why the kubelet keeps vLLM's container waiting, if it does."""
    vllm = next((s for s in (pod.get("status") or {}).get("containerStatuses") or []
                 if s["name"] == "vllm"), {})
    return ((vllm.get("state") or {}).get("waiting") or {}).get("reason")


@pytest.mark.timeout(1800)
def test_a_kv_cache_above_the_memory_limit_is_refused_by_vllm_and_explained(
        vllm_lock: HeldLock, admin: ClusterKubectl, namespace: str, nodes: Any,
        vllm_image: VllmImage, hub: Any) -> None:
    """vLLM's CPU build keeps its KV cache in host memory: 8 GiB of it
    (``VLLM_CPU_KVCACHE_SPACE``) in a 6 GiB container. Tried here: vLLM reads the
    container's free memory and refuses before it allocates (its worker's ValueError), so
    the kubelet reports exit code 1, ``Error``, not ``OOMKilled`` (with 4 GiB it serves).
    The API server's last line, all the termination message keeps of it, is "Engine core
    initialization failed. See root cause above."; the LLMService quotes it within two
    minutes of the kubelet's CrashLoopBackOff, with the command that shows the cause and the fix."""
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    svc = vllm_service("kvbig", vllm_image, hub.endpoint, memory=MEMORY_LIMIT)
    svc["spec"]["pod"]["env"] = [
        {"name": "HF_ENDPOINT", "value": hub.endpoint},
        {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "8"}]
    admin.apply_obj(svc, namespace)
    selector = "llmops.dev/llmservice=kvbig,llmops.dev/component=server"
    # The kubelet restarts a failed container at once, then backs off: its words are
    # CrashLoopBackOff from the second failure on (one more vLLM start, about a minute).
    backing_off = wait_for(lambda: next((p for p in admin.items("pods", namespace, selector)
                                         if waiting_reason(p) == "CrashLoopBackOff"), None),
                           READY_WITHIN_SECONDS, "the kubelet's CrashLoopBackOff", interval=1)
    seen = time.monotonic()
    ended = terminations(backing_off)[0]
    assert ended["reason"] == "Error" and ended["exitCode"] == 1, ended

    def reported() -> dict[str, Any] | None:
        c = condition(admin.get("llms", "kvbig", namespace), "ContainersRunning")
        return c if c.get("status") == "False" else None
    cond = wait_for(reported, SAID_WITHIN_SECONDS, "ContainersRunning=False", interval=1)
    took = time.monotonic() - seen
    assert cond["reason"] == "CrashLoopBackOff", cond
    message = cond["message"]
    pod = admin.items("pods", namespace, selector)[0]["metadata"]["name"]
    assert "Engine core initialization failed" in message, message
    assert f"`kubectl logs {pod} -c vllm --previous`" in message, message
    assert "lower VLLM_CPU_KVCACHE_SPACE in spec.pod.env or raise spec.resources.memory" \
        in message, message
    # The command the message gives shows vLLM's own cause, naming both sizes.
    log = admin.run("logs", pod, "-n", namespace, "-c", "vllm", "--previous").stdout
    cause = [line for line in log.splitlines() if "less than requested memory for kv" in line]
    assert cause and "(8.0 GiB)" in cause[0], log[-3000:]
    sys.stderr.write(f"vLLM refused its KV cache at {MEMORY_LIMIT} (exit code 1); on the "
                     f"LLMService {took:.1f} s after the kubelet's CrashLoopBackOff; vLLM's cause: "
                     f"{cause[0].split('ValueError: ')[-1][:200]}\n")

"""A node whose kubelet stops and comes back, for real (issue 55, day-one failures): the
LLMService's vLLM pod serves in a container under Kubernetes' own kubelet (node
``node-1``, containerd and runc); the test stops that kubelet as a dead kubelet service
would, and starts it again.

What a user sees, measured here:

- another pod reaches the service by the endpoint the LLMService reports
  (``status.endpoint``, ``http://NAME.NAMESPACE.svc:8000/v1``): CoreDNS resolves the
  name to the Service's cluster IP, kube-proxy routes it to the vLLM pod;

- containerd keeps the container running: the engine still answers on its pod IP while
  the kubelet is gone (a real runtime; the process kubelet of the other tiers owns its
  processes and cannot show this);
- the node lifecycle controller marks the pod not Ready after the node's heartbeats stop
  (its default grace, 50 s), and the LLMService says so within two minutes of the stop:
  ``ContainersRunning=False``, reason ``NodeNotReady``, naming the pod, the node, the
  eviction that follows (the pod's 300 s toleration of ``node.kubernetes.io/unreachable``)
  and the fix;
- the kubelet comes back before the eviction: the same pod and container, no restart,
  ``ContainersRunning`` and ``Ready`` True again, and the Service serves (by its name,
  from a pod).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest

from tests.cluster.conftest import ClusterKubectl
from tests.cluster.test_control_plane import condition
from tests.nodes.conftest import HeldLock, OperatorImage, VllmImage, pod_of
from tests.nodes.test_real_containers import container_status
from tests.nodes.test_vllm_in_containers import (
    READY_WITHIN_SECONDS,
    post,
    ready_or_explain,
    vllm_service,
)
from tests.support.emulator import wait_for

pytestmark = [pytest.mark.nodes]

NAME = "nodeloss"
SELECTOR = f"llmops.dev/llmservice={NAME},llmops.dev/component=server"
MODEL = "llmops-demo/tiny-llama"
# The promise: a pod-level failure on the LLMService within 2 minutes. Kubernetes itself
# takes the node controller's grace (50 s by default) before it marks the pod.
SAID_WITHIN_SECONDS = 120
BACK_WITHIN_SECONDS = 180  # the kubelet's start, its pod sync and vLLM's probes
# A client in another pod: resolves the endpoint's host, then asks for a completion.
CLIENT = """
import json, socket, sys, urllib.parse, urllib.request
url = sys.argv[1]
host = urllib.parse.urlparse(url).hostname
print(json.dumps({"resolved": socket.gethostbyname(host)}))
req = urllib.request.Request(url + "/completions", headers={"Content-Type": "application/json"},
    data=json.dumps({"model": sys.argv[2], "prompt": "hello", "max_tokens": 4}).encode())
for attempt in range(1, 4):  # the Service's route may lag the pod's Ready (kube-proxy)
    try:
        answer = json.loads(urllib.request.urlopen(req, timeout=30).read())
        break
    except OSError as e:
        print(json.dumps({"attempt": attempt, "error": repr(e)}), flush=True)
        if attempt == 3:
            raise
print(json.dumps(answer))
"""


def from_a_pod(admin: ClusterKubectl, namespace: str, name: str, image: str,
               endpoint: str) -> tuple[str, dict[str, Any]]:
    """Run :data:`CLIENT` in a pod of ``image`` (the operator's: it has Python) against
    ``endpoint``; the address the pod resolved its host to, and the completion."""
    admin.apply_obj({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "imagePullSecrets": [{"name": "regcred"}],
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "client", "image": image,
                                 "command": ["python3", "-c", CLIENT, endpoint, MODEL],
                                 "securityContext": {"allowPrivilegeEscalation": False,
                                                     "capabilities": {"drop": ["ALL"]}}}]}},
        namespace)
    done = wait_for(lambda: (p := admin.get("pods", name, namespace)) and p.get(
        "status", {}).get("phase") in ("Succeeded", "Failed") and p, 150,
        f"client pod {name} done", interval=1)
    log = admin.run("logs", name, "-n", namespace).stdout
    admin.run("delete", "pod", name, "-n", namespace, "--wait=false")
    assert done["status"]["phase"] == "Succeeded", (done["status"], log)
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    retried = [line for line in lines if "attempt" in line]
    if retried:
        sys.stderr.write(f"client pod {name}: {len(retried)} attempt(s) failed first: "
                         f"{retried}\n")
    return lines[0]["resolved"], lines[-1]


def complete(url: str) -> dict[str, Any]:
    return post(f"{url}/v1/completions", {"model": MODEL, "prompt": "hello", "max_tokens": 4},
                timeout=30)


@pytest.mark.timeout(1800)
def test_a_stopped_kubelet_is_said_and_the_pod_survives_its_return(
        vllm_lock: HeldLock, admin: ClusterKubectl, namespace: str, nodes: Any,
        vllm_image: VllmImage, operator_image: OperatorImage, hub: Any) -> None:
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    admin.apply_obj(vllm_service(NAME, vllm_image, hub.endpoint), namespace)
    ready_or_explain(admin, namespace, NAME, READY_WITHIN_SECONDS)
    # The engine is up and stays up (no restart is the point); what follows is waiting on
    # the node controller and a few 4-token completions: the other lane's vLLM may start.
    vllm_lock.release()
    pod = pod_of(admin, namespace, SELECTOR)
    before = container_status(pod, "vllm")
    pod_ip, uid = pod["status"]["podIP"], pod["metadata"]["uid"]
    service = admin.get("services", NAME, namespace) or {}
    service_url = (f"http://{service['spec']['clusterIP']}:"
                   f"{service['spec']['ports'][0]['port']}")
    assert complete(service_url)["usage"]["completion_tokens"] == 4
    # From another pod, by the endpoint the LLMService reports: CoreDNS, then kube-proxy.
    endpoint = admin.get("llms", NAME, namespace)["status"]["endpoint"]
    assert endpoint == f"http://{NAME}.{namespace}.svc:8000/v1", endpoint
    resolved, answer = from_a_pod(admin, namespace, "client-before", operator_image.ref,
                                  endpoint)
    assert resolved == service["spec"]["clusterIP"], (resolved, service["spec"])
    assert answer["usage"]["completion_tokens"] == 4, answer

    nodes.stop_kubelet()
    stopped = time.monotonic()
    try:
        def marked() -> dict[str, Any] | None:
            found = admin.items("pods", namespace, SELECTOR)
            return found[0] if found and condition(found[0], "Ready").get(
                "status") == "False" else None
        gone = wait_for(marked, SAID_WITHIN_SECONDS, "the node controller's mark", interval=1)
        marked_after = time.monotonic() - stopped
        # The kubelet never wrote this pair: only the node controller flips Ready alone.
        assert condition(gone, "ContainersReady").get("status") == "True", gone["status"]

        def said() -> dict[str, Any] | None:
            c = condition(admin.get("llms", NAME, namespace), "ContainersRunning")
            return c if c.get("reason") == "NodeNotReady" else None
        cond = wait_for(said, SAID_WITHIN_SECONDS - (time.monotonic() - stopped),
                        "ContainersRunning NodeNotReady", interval=1)
        said_after = time.monotonic() - stopped
        message = cond["message"]
        assert cond["status"] == "False", cond
        assert f"pod {pod['metadata']['name']} on node {nodes.node.name} was marked not " \
               "Ready" in message, message
        assert "evicts it 300 s after the node became unreachable" in message, message
        assert f"`kubectl describe node {nodes.node.name}`" in message, message
        ready = condition(admin.get("llms", NAME, namespace), "Ready")
        # containerd runs the container on: the engine answers on its pod IP.
        assert complete(f"http://{pod_ip}:8000")["usage"]["completion_tokens"] == 4
    finally:
        if not nodes.kubelet.alive():
            returned = time.monotonic()
            registered = nodes.plugin_registrations()
            nodes.start_kubelet()  # waits for the device plugin's next registration too
            assert nodes.plugin_registrations() == registered + 1

    def back() -> dict[str, Any] | None:
        svc = admin.get("llms", NAME, namespace)
        ok = all(condition(svc, t).get("status") == "True" for t in
                 ("ContainersRunning", "Ready"))
        return svc if ok else None
    wait_for(back, BACK_WITHIN_SECONDS, "ContainersRunning and Ready True again", interval=1)
    back_after = time.monotonic() - returned
    pod = pod_of(admin, namespace, SELECTOR)
    after = container_status(pod, "vllm")
    # The same pod, the same container, never restarted.
    assert pod["metadata"]["uid"] == uid
    assert after["containerID"] == before["containerID"], (before, after)
    assert after["restartCount"] == 0, after
    # The Service routes to it again: from a pod, by its name.
    _, answer = from_a_pod(admin, namespace, "client-after", operator_image.ref, endpoint)
    assert answer["usage"]["completion_tokens"] == 4, answer
    sys.stderr.write(
        f"a pod resolved {endpoint} to the Service's {resolved} (CoreDNS) and got its "
        f"completion; kubelet stopped: pod marked not Ready after {marked_after:.1f} s, on "
        f"the LLMService after {said_after:.1f} s (Ready then: {ready.get('status')} "
        f"{ready.get('reason')}: {ready.get('message', '')[:160]}); the engine served on its "
        f"pod IP meanwhile; kubelet back: ContainersRunning and Ready True after "
        f"{back_after:.1f} s, same container, 0 restarts\n")

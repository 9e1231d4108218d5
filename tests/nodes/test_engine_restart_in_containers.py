"""A killed engine in a REAL container (containerd and runc under Kubernetes' own kubelet,
node ``node-1``): the vLLM process, killed by SIGKILL from outside as the kernel or a
crash would end it, is restarted by the kubelet in the same pod, and the LLMService's
Ready condition follows it down and up again. vLLM serves the demo's tiny Llama from the
vLLM CPU image built here; the operator runs in the chart's pod.

This was the e2e tier's test on the emulated API server, where the node agent played the
kubelet.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import pytest

from tests.cluster.conftest import ClusterKubectl
from tests.cluster.test_control_plane import condition
from tests.nodes.conftest import DEMO_MODEL, HeldLock, VllmImage, pod_of
from tests.nodes.test_real_containers import container_status
from tests.nodes.test_vllm_in_containers import (
    READY_WITHIN_SECONDS,
    post,
    ready_or_explain,
    task_pid,
    vllm_service,
)
from tests.support.emulator import wait_for

pytestmark = [pytest.mark.nodes]

NAME = "restarted"
SERVER = f"llmops.dev/llmservice={NAME},llmops.dev/component=server"
# The kubelet restarts a container after a back-off (10 s the first time); vLLM then
# loads again on this 2-CPU node. Measured figures print; the bound leaves room.
BACK_WITHIN_SECONDS = 600


@pytest.mark.timeout(1800)
def test_a_killed_engine_is_restarted_by_the_kubelet_and_ready_follows(
        vllm_lock: HeldLock, admin: ClusterKubectl, namespace: str, nodes: Any,
        vllm_image: VllmImage, hub: Any) -> None:
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    admin.apply_obj(vllm_service(NAME, vllm_image, hub.endpoint), namespace)
    ready_or_explain(admin, namespace, NAME, READY_WITHIN_SECONDS)
    pod = pod_of(admin, namespace, SERVER)
    before = container_status(pod, "vllm")
    assert before["restartCount"] == 0 and before["containerID"].startswith("containerd://")

    killed = time.monotonic()
    os.kill(task_pid(nodes, before["containerID"]), signal.SIGKILL)

    def down() -> dict[str, Any] | None:
        c = condition(admin.get("llms", NAME, namespace), "Ready")
        return c if c.get("status") == "False" else None
    went_down = wait_for(down, 120, "Ready=False on the LLMService after the kill", interval=1)
    down_after = time.monotonic() - killed

    def restarted() -> dict[str, Any] | None:
        p = admin.get("pod", pod["metadata"]["name"], namespace) or {}
        s = container_status(p, "vllm") if (p.get("status") or {}).get(
            "containerStatuses") else {}
        return s if s.get("restartCount") == 1 and s.get("ready") else None
    after = wait_for(restarted, BACK_WITHIN_SECONDS, "the kubelet's restarted vLLM Ready",
                     interval=1)
    # The kubelet's own record of the kill: the first container ended by SIGKILL (137).
    assert after["lastState"]["terminated"]["exitCode"] == 137, after["lastState"]
    assert after["lastState"]["terminated"]["containerID"] == before["containerID"]
    assert after["containerID"] != before["containerID"]
    wait_for(lambda: condition(admin.get("llms", NAME, namespace), "Ready").get("status")
             == "True", 120, "Ready=True again on the LLMService", interval=1)
    up_after = time.monotonic() - killed
    # The same pod serves again (no new pod: the kubelet restarted the container in it).
    assert [p["metadata"]["name"] for p in admin.items("pods", namespace, SERVER)] == [
        pod["metadata"]["name"]]
    answer = post(f"http://{pod['status']['podIP']}:8000/v1/completions",
                  {"model": DEMO_MODEL,
                   "prompt": "hello world", "max_tokens": 4})
    assert answer["choices"][0]["text"] is not None
    sys.stderr.write(f"killed: Ready=False after {down_after:.1f} s ({went_down.get('reason')}: "
                     f"{went_down.get('message', '')[:160]}); Ready again {up_after:.1f} s "
                     "after the kill\n")

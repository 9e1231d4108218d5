"""A killed engine on one machine: the operator's Ready condition follows the container
down and up again (the loop, apply -> tune -> serve -> adapt -> delete, in real
containers is tests/nodes/test_loop_in_containers.py).

The operator is the real process and the API server the EMULATED one; the local node
agent plays the Deployment controller and the kubelet, running each rendered container
as a local process with the CPU build of vLLM (its substitutions:
docs/production/node-agent.md). The model is a generated tiny Llama mapped to the
served name; tuning is off, so one vLLM server runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator_sandbox.node_agent import PORTS_ANNOTATION, NodeAgent
from tests.conftest import vllm_python
from tests.integration.conftest import NAMESPACE
from tests.support.emulator import EmulatorProcess, Kubectl, OperatorProcess, wait_for
from tests.support.tiny_model import ensure_tiny_llama

NAME = "tiny"
VLLM_PYTHON = vllm_python()
MANIFEST: dict[str, Any] = {
    "apiVersion": "llmops.dev/v1alpha1",
    "kind": "LLMService",
    "metadata": {"name": NAME},
    "spec": {
        # The generated model (tests/support/tiny_model.py defaults) on a volume; the
        # agent maps the served name to the local folder.
        "model": {"name": NAME, "volume": {"claimName": "models"},
                  "architecture": {"parameters": 1.0e6, "numLayers": 2, "hiddenSize": 128,
                                   "numAttentionHeads": 4, "numKeyValueHeads": 2,
                                   "maxContext": 4096}},
        "gpus": {"count": 1, "product": "L4"},
        "engine": {"maxModelLen": 1024},
        "workload": {"inputTokens": 32, "outputTokens": 16, "concurrency": 4,
                     "slo": {"ttftP95Ms": 30000, "itlP95Ms": 2000}},
        # One trial bounds the run; the time budget is roomy because the tuner's deadline
        # also covers its wait for the machine-wide vLLM lock (other tests' servers).
        "tuning": {"mode": "OnRollout", "placement": "BeforeServing", "maxTrials": 1,
                   "maxDurationMinutes": 15, "maxRetries": 0},
    },
}

pytestmark = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture
def agent(api: EmulatorProcess, kubectl: Kubectl, tmp_path: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeAgent]:
    model = ensure_tiny_llama(tmp_path_factory.mktemp("models"), VLLM_PYTHON)
    with NodeAgent(api.kubeconfig, NAMESPACE, tmp_path / "agent", vllm_python=VLLM_PYTHON,
                   models={NAME: model}) as a:
        yield a
    assert a.pids() == [], "stop() left processes behind"


def condition(kubectl: Kubectl, ctype: str) -> dict[str, Any]:
    try:
        svc = kubectl.get("llms", NAME, NAMESPACE) or {}
    except subprocess.TimeoutExpired:  # a loaded machine (vLLM compiling): ask again
        return {}
    for cond in (svc.get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return dict(cond)
    return {}


def server_pod(kubectl: Kubectl) -> dict[str, Any] | None:
    try:
        out = kubectl.run("get", "pods", "-n", NAMESPACE, "-l",
                          f"llmops.dev/llmservice={NAME},llmops.dev/component=server",
                          "-o", "json").stdout
    except subprocess.TimeoutExpired:
        return None
    for p in json.loads(out)["items"]:
        conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
        if conds.get("Ready") == "True":
            return dict(p)
    return None


def pod_logs(agent: NodeAgent) -> str:
    """The containers' logs (their tails), for a failure message."""
    logs = sorted(agent.workdir.glob("pods/*/containers/*/log"))
    return "\n".join(f"== {p}\n{p.read_text(errors='replace')[-3000:]}" for p in logs)


def wait_or_show(agent: NodeAgent, probe: Any, timeout: float, what: str) -> Any:
    """``wait_for``, with the containers' logs in the failure."""
    try:
        return wait_for(probe, timeout, what, interval=1.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{pod_logs(agent)}") from None


def apply(kubectl: Kubectl, tmp_path: Path, manifest: dict[str, Any]) -> None:
    path = tmp_path / "llms.yaml"
    path.write_text(yaml.safe_dump(manifest))
    kubectl.apply(path, NAMESPACE)


def serve_and_answer(agent: NodeAgent, kubectl: Kubectl) -> dict[str, Any]:
    """Wait for a Ready server pod and the LLMService's Ready condition, then ask the
    engine for a completion on the pod's local port; the pod."""
    pod = wait_or_show(agent, lambda: server_pod(kubectl), 600, "a Ready server pod")
    ready = wait_for(lambda: (c := condition(kubectl, "Ready")).get("status") == "True" and c,
                     120, "the LLMService's Ready condition")
    assert ready["reason"] == "Serving", ready
    port = json.loads(pod["metadata"]["annotations"][PORTS_ANNOTATION])["http"]
    body = json.dumps({"model": NAME, "prompt": "hello world", "max_tokens": 4}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        answer = json.loads(r.read())
    assert answer["choices"][0]["text"] is not None
    return pod


def delete_leaves_nothing(agent: NodeAgent, kubectl: Kubectl) -> None:
    """Delete the LLMService: the emulator's garbage collector removes the Deployment,
    the agent stops the processes; nothing is left."""
    running = agent.pids()
    assert running
    kubectl.run("delete", "llms", NAME, "-n", NAMESPACE, timeout=60)
    wait_for(lambda: not agent.pids() and not any(alive(p) for p in running), 120,
             "every process to stop after the delete")


@pytest.mark.timeout(1500)
def test_killed_engine_restarts_and_ready_follows(agent: NodeAgent, kubectl: Kubectl,
                                                   operator: OperatorProcess,
                                                   tmp_path: Path) -> None:
    t0 = time.monotonic()
    manifest = json.loads(json.dumps(MANIFEST))
    manifest["spec"]["tuning"] = {"mode": "Disabled"}
    apply(kubectl, tmp_path, manifest)
    pod = serve_and_answer(agent, kubectl)
    t_ready = time.monotonic() - t0

    # Kill the engine: the agent (as the kubelet) restarts the container, and the
    # operator's Ready condition follows it down and up again.
    name = pod["metadata"]["name"]
    pid = agent.container_pid(name, "vllm")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    down = wait_for(lambda: (c := condition(kubectl, "Ready")).get("status") == "False" and c,
                    120, "Ready False after the engine was killed")
    assert down["reason"] == "WaitingForReplicas", down

    def restarted() -> dict[str, Any] | None:
        try:
            p = kubectl.get("pod", name, NAMESPACE) or {}
        except subprocess.TimeoutExpired:
            return None
        cs = (p.get("status", {}).get("containerStatuses") or [{}])[0]
        return cs if cs.get("restartCount") == 1 and cs.get("ready") else None
    cs = wait_or_show(agent, restarted, 600, "the restarted engine to be ready")
    assert cs["lastState"]["terminated"]["exitCode"] == 137
    wait_for(lambda: condition(kubectl, "Ready").get("status") == "True", 120,
             "Ready True again")
    t_again = time.monotonic() - t0

    delete_leaves_nothing(agent, kubectl)
    sys.stdout.write(f"\nReady after {t_ready:.0f} s, Ready again after the kill at "
                     f"{t_again:.0f} s, total {time.monotonic() - t0:.0f} s\n")

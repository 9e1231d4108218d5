"""The local node agent against the EMULATED API server (not a cluster), without vLLM:
small Python servers stand in for the engine, so that what the agent does as the
controllers and the kubelet (pods, probes, restarts, rollouts, delete, a container that
cannot run) is checked in seconds. The real engine and tuner run in real containers in
tests/nodes/.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator_sandbox.node_agent import PORTS_ANNOTATION, NodeAgent
from tests.integration.conftest import NAMESPACE
from tests.support.emulator import EmulatorProcess, Kubectl, wait_for

LABELS = {"app.kubernetes.io/managed-by": "llm-operator", "llmops.dev/llmservice": "fake",
          "llmops.dev/component": "server"}
# A stand-in server: /health answers 200; it says its version; `--port` as vLLM's.
SERVER = """
import http.server, os, sys
port = int(sys.argv[sys.argv.index('--port') + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = os.environ.get('VERSION', '?').encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
print('serving on', port, flush=True)
http.server.HTTPServer(('127.0.0.1', port), H).serve_forever()
"""


@pytest.fixture
def agent(api: EmulatorProcess, kubectl: Kubectl, tmp_path: Path) -> Iterator[NodeAgent]:
    lines: list[str] = []
    a = NodeAgent(api.kubeconfig, NAMESPACE, tmp_path / "agent",
                  vllm_python=Path(sys.executable), models={}, out=lines.append)
    a.lines = lines  # type: ignore[attr-defined]
    with a:
        yield a
        running = a.pids()
    assert not [p for p in running if alive(p)], "stop() left processes behind"


def deployment(version: str, command: list[str] | None = None) -> dict[str, Any]:
    container = {
        "name": "server", "image": "ghcr.io/example/tools:1",
        "command": command or ["python3", "-c", SERVER],
        "args": ["--port", "8000"],
        "env": [{"name": "VERSION", "value": version}],
        "ports": [{"name": "http", "containerPort": 8000}],
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10,
                         "failureThreshold": 6},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"},
                           "periodSeconds": 10, "failureThreshold": 3},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "fake", "namespace": NAMESPACE, "labels": LABELS},
            "spec": {"replicas": 1, "selector": {"matchLabels": LABELS},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                     "template": {"metadata": {"labels": LABELS},
                                  "spec": {"containers": [container],
                                           "terminationGracePeriodSeconds": 5}}}}


def apply(kubectl: Kubectl, tmp_path: Path, obj: dict[str, Any]) -> None:
    path = tmp_path / "obj.yaml"
    path.write_text(yaml.safe_dump(obj))
    kubectl.apply(path, NAMESPACE)


def pods(kubectl: Kubectl) -> list[dict[str, Any]]:
    return list((kubectl.get("pods", namespace=NAMESPACE) or {}).get("items", []))


def ready_pod(kubectl: Kubectl, version: str) -> dict[str, Any] | None:
    for p in pods(kubectl):
        env = p["spec"]["containers"][0].get("env") or []
        conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
        if conds.get("Ready") == "True" and any(e.get("value") == version for e in env):
            return p
    return None


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_deployment_pods_serve_restart_roll_and_stop(
        agent: NodeAgent, kubectl: Kubectl, tmp_path: Path) -> None:
    apply(kubectl, tmp_path, deployment("v1"))
    pod = wait_for(lambda: ready_pod(kubectl, "v1"), 60, "a Ready pod of v1")
    assert pod["status"]["podIP"] == "127.0.0.1"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    port = json.loads(pod["metadata"]["annotations"][PORTS_ANNOTATION])
    assert port["http"] == port["8000"] != 8000
    assert get(f"http://127.0.0.1:{port['http']}/") == "v1"
    dep = wait_for(lambda: (d := kubectl.get("deployment", "fake", NAMESPACE))
                   and d.get("status", {}).get("availableReplicas") == 1 and d, 30,
                   "the Deployment's status")
    st = dep["status"]
    assert (st["readyReplicas"], st["updatedReplicas"], st["observedGeneration"]) == (
        1, 1, dep["metadata"]["generation"])
    assert {c["type"]: c["status"] for c in st["conditions"]} == {
        "Available": "True", "Progressing": "True"}

    # Kill the process: the kubelet restarts it, and says so.
    (pid,) = [p for p in agent.pids() if alive(p)]
    os.kill(pid, signal.SIGKILL)
    name = pod["metadata"]["name"]

    def restarted() -> dict[str, Any] | None:
        p = kubectl.get("pod", name, NAMESPACE) or {}
        cs = (p.get("status", {}).get("containerStatuses") or [{}])[0]
        return cs if cs.get("restartCount") == 1 and cs.get("ready") else None
    cs = wait_for(restarted, 60, "the restarted container")
    assert cs["lastState"]["terminated"]["exitCode"] == 137

    # A template change rolls: the v1 pod goes, a v2 pod serves.
    apply(kubectl, tmp_path, deployment("v2"))
    pod2 = wait_for(lambda: ready_pod(kubectl, "v2"), 60, "a Ready pod of v2")
    assert pod2["metadata"]["name"] != name
    wait_for(lambda: all(p["metadata"]["name"] != name for p in pods(kubectl)), 30,
             "the v1 pod to go")
    port2 = json.loads(pod2["metadata"]["annotations"][PORTS_ANNOTATION])["http"]
    assert get(f"http://127.0.0.1:{port2}/") == "v2"

    # Delete: the processes stop.
    running = agent.pids()
    assert running
    kubectl.run("delete", "deployment", "fake", "-n", NAMESPACE)
    wait_for(lambda: not agent.pids() and not any(alive(p) for p in running), 30,
             "every process to stop")


def test_stop_leaves_no_process_and_config_map_volumes_follow_their_config_map(
        api: EmulatorProcess, kubectl: Kubectl, tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "cap", "namespace": NAMESPACE}, "data": {"value": "7"}}
    apply(kubectl, tmp_path, cm)
    dep = deployment("v1")
    pod_spec = dep["spec"]["template"]["spec"]
    pod_spec["volumes"] = [{"name": "cap", "configMap": {"name": "cap"}}]
    container = pod_spec["containers"][0]
    container["volumeMounts"] = [{"name": "cap", "mountPath": "/etc/cap", "readOnly": True}]
    # The stand-in answers with the file's content: VERSION is read from it per request.
    container["command"] = ["python3", "-c", SERVER.replace(
        "os.environ.get('VERSION', '?').encode()", "open(os.environ['CAP']).read().encode()")]
    container["env"] = [{"name": "CAP", "value": "/etc/cap/value"}]
    agent = NodeAgent(api.kubeconfig, NAMESPACE, tmp_path / "agent",
                      vllm_python=Path(sys.executable), models={}, out=lambda _: None)
    agent.start()
    try:
        apply(kubectl, tmp_path, dep)

        def serving() -> str | None:
            for p in pods(kubectl):
                if any(c["type"] == "Ready" and c["status"] == "True"
                       for c in p.get("status", {}).get("conditions", [])):
                    port = json.loads(p["metadata"]["annotations"][PORTS_ANNOTATION])["http"]
                    return get(f"http://127.0.0.1:{port}/")
            return None
        assert wait_for(serving, 60, "the pod to serve") == "7"
        cm["data"]["value"] = "9"
        apply(kubectl, tmp_path, cm)
        wait_for(lambda: serving() == "9", 30, "the new ConfigMap value in the volume")
        running = agent.pids()
        assert running
    finally:
        agent.stop()
    agent.stop()  # idempotent
    assert not [p for p in running if alive(p)]


def test_crash_loop_is_reported_with_the_last_log_line(
        agent: NodeAgent, kubectl: Kubectl, tmp_path: Path) -> None:
    crash = ["python3", "-c", "import sys; print('error: unrecognized arguments: --bogus');"
             " sys.exit(2)"]
    apply(kubectl, tmp_path, deployment("v1", command=crash))

    def looping() -> dict[str, Any] | None:
        for p in pods(kubectl):
            cs = (p.get("status", {}).get("containerStatuses") or [{}])[0]
            if cs.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff":
                return cs
        return None
    cs = wait_for(looping, 60, "CrashLoopBackOff")
    assert cs["restartCount"] >= 2
    last = cs["lastState"]["terminated"]
    assert last["exitCode"] == 2
    assert last["message"].strip().endswith("error: unrecognized arguments: --bogus")


def test_a_job_whose_executable_is_missing_fails_with_the_reason(
        agent: NodeAgent, kubectl: Kubectl, tmp_path: Path) -> None:
    labels = {**LABELS, "llmops.dev/component": "tuning"}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "fake-tune", "namespace": NAMESPACE, "labels": labels},
           "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": {
               "restartPolicy": "Never",
               "containers": [{"name": "tuner", "image": "vllm/vllm-openai:v0.32.0",
                               "command": ["no-such-tuner"], "args": ["--x"]}]}}}}
    start = time.monotonic()
    apply(kubectl, tmp_path, job)

    def failed() -> dict[str, Any] | None:
        j = kubectl.get("job", "fake-tune", NAMESPACE) or {}
        conds = {c["type"]: c for c in j.get("status", {}).get("conditions") or []}
        return j if conds.get("Failed", {}).get("status") == "True" else None
    j = wait_for(failed, 30, "the Job's Failed condition")
    assert time.monotonic() - start < 30
    assert j["status"]["failed"] == 1
    (pod,) = pods(kubectl)
    assert pod["status"]["phase"] == "Failed"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "StartError" and term["exitCode"] == 128
    assert 'exec: "no-such-tuner": executable file not found in $PATH' in term["message"]

"""The whole loop on one machine (the e2e tier): apply -> a Tuned condition from a real
tuner run -> the Deployment rolled onto the tuned settings -> under load the adaptation
changes the cap live -> a spec change re-plans -> delete stops every process.

On the REAL control plane (kube-apiserver, etcd, kube-controller-manager and
kube-scheduler v1.37.2 built from Go modules: llm_operator_sandbox.cluster), with the
chart installed by helm and the operator running under its ServiceAccount's token: the
Job, Deployment and ReplicaSet controllers, the scheduler and the garbage collector are
Kubernetes' own. Local: the kubelet (llm_operator_sandbox.kubelet runs each pod's
containers as local processes). Real too: kubectl, helm, the operator process, vLLM (CPU
build) serving a generated tiny Llama, the tuner in the tuning Job, vLLM's benchmark as
the load, and Prometheus finding the pod only through the rendered PodMonitor. Budget:
about 5 minutes on 2 cores (one vLLM at a time: the example tunes BeforeServing).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from llm_operator_sandbox.demo import kubectl_binary
from llm_operator_sandbox.loop import (
    LocalLoop,
    condition,
    default_vllm_python,
    missing_parts,
    ready_server,
    server_pods,
    serves_cap,
)
from llm_operator_sandbox.vllm_load import Load, LoadRun
from tests.cluster.conftest import helm_binary
from tests.support.emulator import ROOT

T = TypeVar("T")
# Bounds, not expectations: on an idle 2-core machine the test takes about 5 minutes; the
# bounds leave room for waiting on the machine-wide vLLM lock (LLMOP_VLLM_LOCK).
pytestmark = [pytest.mark.timeout(1500), pytest.mark.cluster]
VLLM_PYTHON = default_vllm_python(ROOT)
KUBECTL = kubectl_binary()
MISSING = missing_parts(ROOT, VLLM_PYTHON, KUBECTL)


def wait(what: str, probe: Callable[[], T | None], timeout: float, loop: LocalLoop) -> T:
    """Poll until ``probe`` gives something true; fail with the operator's log tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result:
            return result
        time.sleep(1.0)
    tail = loop.operator_log.read_text(errors="replace")[-3000:]
    status = {}
    for svc in loop.get("llms").get("items") or []:
        st = svc.get("status") or {}
        status[svc["metadata"]["name"]] = {
            "conditions": {c["type"]: f"{c['status']} {c.get('reason', '')}: "
                           f"{c.get('message', '')[:300]}" for c in st.get("conditions") or []},
            "tuning": {k: v for k, v in (st.get("tuning") or {}).items()
                       if k in ("state", "reason", "partialReason", "source", "trials")}}
    pytest.fail(f"gave up after {timeout:.0f} s waiting for {what}; services: "
                f"{json.dumps(status, indent=1)}\noperator log:\n{tail}")


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[LocalLoop]:
    if MISSING:
        pytest.skip("; ".join(MISSING))
    assert KUBECTL is not None
    lines: list[str] = []
    with LocalLoop(ROOT, tmp_path, KUBECTL, vllm_python=VLLM_PYTHON, say=lines.append,
                   backend="cluster", helm=helm_binary()) as running:
        yield running
    assert running.operator is not None and running.operator.poll() is not None


def test_the_whole_loop(loop: LocalLoop) -> None:
    example = loop.example()
    name = example["metadata"]["name"]
    # The e2e budget: one trial (vLLM's defaults, measured by the real tuner), no retry.
    example["spec"]["tuning"].update(maxTrials=1, maxRetries=0)
    loop.apply(example)

    def svc() -> dict[str, Any]:
        return loop.get("llms", name)

    # 1. A Tuned condition from a real tuner run (the tuning Job, before serving:
    # placement BeforeServing renders no Deployment until the Job has finished).
    jobs = wait("the tuning Job", lambda: loop.get("jobs").get("items"), 60, loop)
    assert jobs[0]["metadata"]["name"].startswith(f"{name}-tune-")
    if not any((j.get("status") or {}).get("succeeded") for j in jobs):
        assert not loop.get("deployment", name), "a Deployment before the tuning finished"
    # The operator SIGKILLed while the tuning pod runs, then started again: it adopts the
    # running Job (checked below: one Job, its result in status), it does not start a second.
    wait("the tuning pod running", lambda: any(
        (p.get("status") or {}).get("phase") == "Running"
        for p in loop.get("pods").get("items") or []
        if p["metadata"]["name"].startswith(f"{name}-tune-")), 120, loop)
    job_uid = loop.get("jobs")["items"][0]["metadata"]["uid"]
    assert loop.operator is not None
    loop.operator.kill()
    loop.operator.wait(10)
    loop.start_operator()
    # Every tuning Job seen until Tuned (the operator may delete a finished Job, so the
    # list at the end alone would not show a second one).
    seen_jobs: set[str] = {job_uid}

    def tuned_and_jobs_seen() -> dict[str, Any] | None:
        seen_jobs.update(j["metadata"]["uid"] for j in loop.get("jobs").get("items") or [])
        s = svc()
        return s if condition(s, "Tuned").get("status") == "True" else None

    tuned = wait("Tuned=True", tuned_and_jobs_seen, 900, loop)
    tuning = tuned["status"]["tuning"]
    assert tuning["state"] == "Succeeded" and tuning["trials"] >= 1, tuning
    assert any("goodput" in row for row in tuning.get("table") or []), tuning
    assert tuning["source"] == "job", tuning  # measured by the Job, not from the cache
    jobs = loop.get("jobs").get("items") or []
    assert len(jobs) <= 1 and all((j.get("status") or {}).get("succeeded") == 1 for j in jobs)
    assert seen_jobs == {job_uid}, seen_jobs  # adopted: the same Job, never a second one

    # 2. The Deployment rolled onto the tuned settings: a Ready pod running them.
    def on_tuned() -> dict[str, Any] | None:
        want = (svc()["status"].get("engine") or {}).get("maxNumSeqs")
        pod = ready_server(loop, name)
        return pod if pod is not None and serves_cap(loop, name, pod, want) else None

    pod = wait("a Ready pod on the tuned --max-num-seqs", on_tuned, 420, loop)
    wait("Ready=True", lambda: condition(svc(), "Ready").get("status") == "True", 60, loop)
    start_cap = svc()["status"]["engine"]["maxNumSeqs"]

    # 3. Under load the adaptation changes the cap, live: the same pod, no restart.
    url = loop.pod_url(pod)
    assert url is not None and loop.model_dir is not None
    run = LoadRun(loop.vllm_python, url, loop.model_name,
                  Load(concurrency=32, num_prompts=2000, input_len=128, output_len=128),
                  tokenizer=str(loop.model_dir))
    try:
        def changed() -> dict[str, Any] | None:
            # A new cap that the engine reports in force. Not "the last decision moved":
            # the tick after a move holds (cooldown) before the report arrives.
            adaptation = svc()["status"].get("adaptation") or {}
            cap = adaptation.get("maxNumSeqs")
            if isinstance(cap, int) and cap != start_cap and adaptation.get("capInForce") == cap:
                return adaptation
            return None

        adaptation = wait("the adaptation to change the cap and the engine to report it",
                          changed, 180, loop)
    finally:
        run.kill()
    assert adaptation["maxNumSeqs"] != start_cap
    assert condition(svc(), "MetricsAvailable").get("status") == "True"
    same = server_pods(loop, name)
    assert [p["metadata"]["name"] for p in same] == [pod["metadata"]["name"]]  # no rollout
    events = loop.kubectl("get", "events", "-n", loop.settings.namespace, "-o", "json")
    reasons = {e.get("reason") for e in json.loads(events)["items"]}
    assert reasons & {"MaxNumSeqsLowered", "MaxNumSeqsRaised"}, reasons

    # 4. A spec change re-plans (and re-renders the Deployment).
    changed_spec = copy.deepcopy(svc())
    generation = changed_spec["metadata"]["generation"]
    loop.kubectl("patch", "llms", name, "-n", loop.settings.namespace, "--type", "merge",
                 "-p", json.dumps({"spec": {"engine": {"maxModelLen": 512},
                                            "tuning": {"mode": "Manual"}}}))
    replanned = wait("a plan for the new generation", lambda: (s := svc()) and condition(
        s, "Planned").get("observedGeneration", 0) > generation and s, 60, loop)
    assert replanned["status"]["plan"]["maxModelLen"] == 512
    def rendered_512() -> bool:
        template = (loop.get("deployment", name).get("spec") or {}).get("template") or {}
        args = [a for c in (template.get("spec") or {}).get("containers") or []
                for a in c.get("args") or []]
        return any(args[i:i + 2] == ["--max-model-len", "512"] for i in range(len(args)))

    wait("the Deployment rendered with --max-model-len 512", rendered_512, 60, loop)

    # 5. Delete: every pod, child and process goes. The re-render rolls the pod (maxSurge
    # 0 by default: the old pod stops before the new one starts), so wait for the new
    # pod's processes first.
    pids = wait("the re-rendered pod's processes", lambda: loop.pids() or None, 120, loop)
    loop.kubectl("delete", "llms", name, "-n", loop.settings.namespace, "--wait=false")
    wait("every child and pod gone", lambda: not any(
        loop.get(kind).get("items") for kind in ("deployments", "jobs", "pods", "podmonitors")),
        120, loop)
    wait("every process the agent ran stopped",
         lambda: not loop.pids() and not any(alive(p) for p in pids), 60, loop)
    assert loop.discovery is not None and loop.discovery.prometheus is not None
    # Only the operator's own /metrics is scraped then (a static job, not a PodMonitor).
    wait("Prometheus scraping no pod", lambda: loop.discovery is not None
         and loop.discovery.prometheus is not None
         and {t["labels"].get("job") for t in loop.discovery.prometheus.targets()}
         <= {"llm-operator"}, 30, loop)
    # The chart's RBAC covered every call of the whole loop: no 403 in the operator's log.
    forbidden = [line for line in loop.operator_log.read_text(errors="replace").splitlines()
                 if "forbidden" in line.lower()]
    assert forbidden == [], forbidden[:5]

"""The adaptation under a real load, on one machine (the e2e tier): apply -> a Ready pod
on the plan's --max-num-seqs -> under load the operator lowers or raises the cap, live (the
same pod, no restart), and the engine reports it.

On the REAL control plane (kube-apiserver, etcd, kube-controller-manager and
kube-scheduler v1.37.2 built from Go modules: llm_operator_sandbox.cluster), with the
chart installed by helm and the operator running under its ServiceAccount's token: the
Deployment and ReplicaSet controllers, the scheduler and the garbage collector are
Kubernetes' own. Local: the kubelet (llm_operator_sandbox.kubelet runs each pod's
containers as local processes, with a 64 MiB KV cache substituted: the load's KV pressure).
Real too: kubectl, helm, the operator process, vLLM (CPU build) serving a generated tiny
Llama, vLLM's benchmark as the load, and Prometheus finding the pod only through the
rendered PodMonitor.

The rest of the loop runs in real containers under Kubernetes' own kubelet
(tests/nodes/test_loop_in_containers.py): the tuning Job and its adoption by a new
operator pod, the rollout onto the tuned cap, a live cap through the kubelet's ConfigMap
refresh, a re-plan and the delete. There vLLM's CPU build sizes its KV cache in whole GiB
(``VLLM_CPU_KVCACHE_SPACE``), which the tiny model never fills: the load-driven move stays
here, on the process kubelet.
"""

from __future__ import annotations

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


def test_under_load_the_cap_moves_live(loop: LocalLoop) -> None:
    example = loop.example()
    name = example["metadata"]["name"]
    # No tuning: the plan's cap (256 here) serves; tuning is the nodes tier's.
    example["spec"]["tuning"] = {"mode": "Manual"}
    loop.apply(example)

    def svc() -> dict[str, Any]:
        return loop.get("llms", name)

    # 1. A Ready pod on the plan's settings.
    def on_plan() -> dict[str, Any] | None:
        want = ((svc().get("status") or {}).get("engine") or {}).get("maxNumSeqs")
        pod = ready_server(loop, name) if want is not None else None
        return pod if pod is not None and serves_cap(loop, name, pod, want) else None

    pod = wait("a Ready pod on the planned --max-num-seqs", on_plan, 420, loop)
    wait("Ready=True", lambda: condition(svc(), "Ready").get("status") == "True", 60, loop)
    start_cap = svc()["status"]["engine"]["maxNumSeqs"]

    # 2. Under load the adaptation changes the cap, live: the same pod, no restart.
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

    # The chart's RBAC covered every call of the loop: no 403 in the operator's log.
    forbidden = [line for line in loop.operator_log.read_text(errors="replace").splitlines()
                 if "forbidden" in line.lower()]
    assert forbidden == [], forbidden[:5]

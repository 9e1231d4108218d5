"""The operator's decision reaches a live engine through the cluster's channel, and the
engine's report lands in status (real vLLM CPU engine, real Prometheus).

The chain, each step the code the cluster runs except the kubelet's file swap:
a decision (:func:`plan_update`) -> the status it writes -> the ConfigMap the renderer
makes of that status (:func:`render_all` with ``live_cap``) -> its key written to the
file the pod mounts (as the kubelet refreshes a ConfigMap volume) -> the engine module
inside vLLM (``--scheduler-cls``, copied by the init container's command) -> its
``llmop_admission_cap`` on the API server's /metrics -> a real Prometheus scraping it
with the PodMonitor's labels -> the operator's batched query
(:func:`prometheus.fetch_observations`) -> :func:`live_cap_progress` -> the status patch
with ``capInForce``. The engine's processes stay the same throughout.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_operator.adaptation import prometheus
from llm_operator.adaptation.policy import CapAction, CapDecision, DecisionCause
from llm_operator.adaptation.update import (
    current_state,
    live_cap_progress,
    parse_services,
    plan_update,
)
from llm_operator.api.models import parse_llmservice
from llm_operator.health import status as st
from llm_operator.inpod.tuner.server import VLLMServer
from llm_operator.planning import make_plan
from llm_operator.rendering import render_all
from llm_operator.rendering.admission import ADMISSION_KEY
from llm_operator.settings import Settings
from tests.conftest import vllm_python
from tests.prometheus.conftest import NAMESPACE
from tests.support.engine import LIVE_FLAGS, copy_engine_code, live_env, write_cap
from tests.support.prometheus import PrometheusServer, Target, start_prometheus

pytestmark = pytest.mark.vllm
NAME = "live"
WINDOW_S = 10.0
REPORT_S = 30.0  # file write -> Prometheus answers with the new cap (1 s scrapes)


def body(capacity: int, status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "uid-live", "generation": 1},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                 "gpus": {"product": "NVIDIA-L4"},
                 "adaptation": {"mode": "Apply", "maxMaxNumSeqs": capacity}},
        "status": status,
    }


def config_map_cap(b: dict[str, Any]) -> str:
    """The ConfigMap's key as the reconciliation renders it from ``b``'s status."""
    svc = parse_llmservice(b)
    status = b["status"]
    assert st.live_cap_in_use(svc.spec, status, 1)
    docs = render_all(svc, make_plan(svc.spec), Settings(), live_cap=True,
                      overrides=st.engine_overrides(status))
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    return str(cm["data"][ADMISSION_KEY])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path
          ) -> Iterator[tuple[VLLMServer, PrometheusServer, Path]]:
    base = tmp_path_factory.mktemp("live-report")
    code = copy_engine_code(base / "code")
    cap_file = base / ADMISSION_KEY
    write_cap(cap_file, "32")  # the ConfigMap exists before the pod starts
    server = VLLMServer(model=str(tiny_model), python=str(vllm_python()),
                        log_path=base / "vllm.log", start_timeout_s=300,
                        flags=["--max-num-seqs", "32", *LIVE_FLAGS,
                               "--kv-cache-memory-bytes", str(64 * 1024 * 1024)],
                        env=live_env(code, cap_file, base / "prom"))
    with server:
        prom = start_prometheus([Target(f"127.0.0.1:{server.port}",
                                        {"llmservice": NAME, "namespace": NAMESPACE})])
        try:
            prom.wait_for_series(f'llmop_admission_cap{{llmservice="{NAME}"}} == 32', 60)
            yield server, prom, cap_file
        finally:
            prom.stop()


def test_a_decision_reaches_the_engine_and_its_report_lands_in_status(
        stack: tuple[VLLMServer, PrometheusServer, Path]) -> None:
    server, prom, cap_file = stack
    assert server.proc is not None
    pid = server.proc.pid
    client = prometheus.connect(prom.url)
    b = body(32, {"plan": {"maxNumSeqs": 32}})

    # With PROMETHEUS_MULTIPROC_DIR, prometheus_client exports a "mostrecent" gauge only
    # once it was set: vLLM's request gauges appear with the first request served.
    body_ = json.dumps({"model": str(server.model), "prompt": "hi", "max_tokens": 4}).encode()
    req = urllib.request.Request(f"{server.url}/v1/completions", data=body_,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
    prom.wait_for_series(
        f'count_over_time(vllm:num_requests_running{{llmservice="{NAME}"}}[10s]) >= 2', 30)

    # 1. The engine reports the cap it started with; a decision lowers it to 12.
    now = time.time()
    obs = prometheus.fetch_observations(client, [(NAMESPACE, NAME)], now, WINDOW_S)
    seen = obs[(NAMESPACE, NAME)]
    assert seen.cap_in_force_min == seen.cap_in_force_max == 32 and seen.live_cap_min == 1
    # vLLM's own signals the policy reads are still there with PROMETHEUS_MULTIPROC_DIR set
    # (vLLM's gauges are "mostrecent": no pid label, one series per pod).
    assert seen.samples > 0 and seen.replicas == 1, seen
    assert seen.kv_capacity_tokens and seen.running_mean is not None, seen
    svc = parse_services([b])[(NAMESPACE, NAME)]
    state = current_state(svc.spec, svc.status)
    decision = CapDecision(namespace=NAMESPACE, name=NAME, action=CapAction.LOWER,
                           current=32, value=12, reason="lower 32 -> 12 (test)",
                           cause=DecisionCause.KV_USAGE, at=now)
    up = plan_update(svc, decision, seen, state, now,
                     progress=live_cap_progress({}, seen, now))
    assert up.adaptation["capRequested"] == 12 and up.adaptation["capInForce"] == 32
    b["status"] = {**b["status"], "adaptation": up.adaptation}

    # 2. The ConfigMap rendered from that status, as the kubelet puts it in the pod.
    t0 = time.monotonic()
    write_cap(cap_file, config_map_cap(b))

    # 3. Until the engine reports it, the loop holds; then the report lands in status.
    while True:
        now = time.time()
        seen = prometheus.fetch_observations(client, [(NAMESPACE, NAME)], now,
                                             WINDOW_S)[(NAMESPACE, NAME)]
        progress = live_cap_progress(b["status"]["adaptation"], seen, now)
        if progress.took_effect:
            break
        assert progress.wait and progress.fallback is None, progress
        assert time.monotonic() - t0 < REPORT_S, f"no report of 12 (saw {seen})"
        time.sleep(0.5)
    reported_s = time.monotonic() - t0
    svc = parse_services([b])[(NAMESPACE, NAME)]
    state = current_state(svc.spec, svc.status)
    assert state is not None and state.current == 12
    hold = CapDecision(namespace=NAMESPACE, name=NAME, action=CapAction.HOLD, current=12,
                       value=12, reason="hold (test)", cause=DecisionCause.APPLYING, at=now)
    done = plan_update(svc, hold, seen, state, now, progress=progress)
    assert done.adaptation["capInForce"] == 12 and "capRequested" not in done.adaptation
    cond = st.get_condition(done.status_patch["conditions"], st.ConditionType.LIVE_CAP)
    assert cond is not None and cond["reason"] == "EngineReportsCap", cond
    assert server.proc.poll() is None and server.proc.pid == pid  # no restart
    print(f"\nlive cap 32 -> 12: in status {reported_s:.1f} s after the file write "  # noqa: T201
          "(1 s scrapes)")

"""Online adaptation end to end: the real operator process (``llm-operator run``) against
the EMULATED API server (kmock with the project's fixes, not a cluster; driven by the real
kubectl), reading a REAL Prometheus (Debian's ``/usr/bin/prometheus``, throwaway TSDB).

The vLLM series Prometheus scrapes are a REPLAY of a recorded real engine: the
``/metrics`` expositions a real vLLM CPU engine served while 48 clients of vLLM's own
benchmark pushed it into KV pressure (a 4,096-token KV cache behind ``--max-num-seqs 64``;
it preempted), recorded by ``python -m tests.support.metrics_replay record`` into
``tests/integration/data/vllm_kv_pressure_metrics.json.gz`` (only the families the
operator reads) and served again, one recorded scrape per second, by a small HTTP server
(:mod:`tests.support.metrics_replay`). So no vLLM starts here: the numbers are real
engine output, their timing is replayed. The scrape target carries the labels the
rendered PodMonitor's relabelling gives a vLLM pod (``llmservice``, ``namespace``).

The operator's cap is its plan's value (Llama 3.1 8B on an L4), not the 64 the recorded
engine ran with; the policy's lowering target comes from the observed preemptions and
KV-cache fit, so a lower decision is expected either way. No kubelet or Deployment
controller runs: a rollout shows as the Deployment's new ``--max-num-seqs`` (and a new
resourceVersion), not as new pods; a test that needs the rollout to complete plays the
Deployment controller by writing the Deployment's status.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from llm_operator.inpod.tuner.server import free_port
from llm_operator_sandbox.loop import cap_arg
from tests.integration.conftest import NAMESPACE
from tests.support.emulator import Kubectl, OperatorProcess, wait_for
from tests.support.metrics_replay import KV_PRESSURE, Recording, ReplayServer
from tests.support.prometheus import (
    PrometheusServer,
    Target,
    prometheus_available,
    start_prometheus,
)

pytestmark = [pytest.mark.timeout(240)]
replayed = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not prometheus_available(), reason="no /usr/bin/prometheus (apt "
                       "install prometheus)"),
    pytest.mark.skipif(not KV_PRESSURE.exists(), reason=f"no recording at {KV_PRESSURE}"),
]


def with_replay(fn: Any) -> Any:
    """The marks of a test that needs the real Prometheus and the recorded engine."""
    for mark in replayed:
        fn = mark(fn)
    return fn

WINDOW_S = 20  # LLMOP_ADAPTATION_WINDOW_SECONDS: short, so the test stays short
INTERVAL_S = 5
SERVICES = ("kv-apply", "kv-recommend", "kv-live")


@pytest.fixture(scope="module")
def prom() -> Iterator[PrometheusServer]:
    """A real Prometheus scraping the replayed engine once per service name, with the
    labels the PodMonitor relabelling gives a vLLM pod."""
    replay = ReplayServer(Recording.load(KV_PRESSURE)).start()
    server = start_prometheus([Target(replay.address, {"llmservice": name,
                                                       "namespace": NAMESPACE})
                               for name in SERVICES])
    try:
        # The policy needs 5 samples of a window and preemptions in it: wait for both.
        for name in SERVICES:
            server.wait_for_series(
                f'count_over_time(vllm:num_requests_running{{llmservice="{name}"}}[{WINDOW_S}s])'
                " >= 6", 30)
            server.wait_for_series(
                f'rate(vllm:num_preemptions_total{{llmservice="{name}"}}[{WINDOW_S}s]) > 0', 30)
        yield server
    finally:
        server.stop()
        replay.stop()


def start_operator(kubectl: Kubectl, tmp_path: Path, prometheus_url: str,
                   metrics_port: int = 0) -> OperatorProcess:
    proc = OperatorProcess(
        Path(kubectl.env["KUBECONFIG"]), tmp_path / "operator.log", [NAMESPACE],
        env={"LLMOP_PROMETHEUS_URL": prometheus_url,
             "LLMOP_ADAPTATION_WINDOW_SECONDS": str(WINDOW_S),
             # The replayed series are scraped every second (tests/support/prometheus.py).
             "LLMOP_SCRAPE_INTERVAL_SECONDS": "1",
             "LLMOP_METRICS_PORT": str(metrics_port)}).start()
    proc.wait_log("Initial authentication has finished", timeout=60)
    return proc


@pytest.fixture
def operator_for(kubectl: Kubectl, tmp_path: Path) -> Iterator[Any]:
    """Start the operator with a Prometheus URL (and stop it after the test)."""
    started: list[OperatorProcess] = []

    def start(url: str, metrics_port: int = 0) -> OperatorProcess:
        proc = start_operator(kubectl, tmp_path, url, metrics_port)
        started.append(proc)
        return proc
    yield start
    for proc in started:
        proc.stop()


def service(name: str, mode: str, cooldown: int = 600, live_cap: bool | None = None) -> str:
    adapt: dict[str, Any] = {"mode": mode, "intervalSeconds": INTERVAL_S,
                             "cooldownSeconds": cooldown}
    if live_cap is not None:
        adapt["liveCap"] = live_cap
    return yaml.safe_dump({
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                 "gpus": {"product": "L4"},
                 "tuning": {"mode": "Disabled"},
                 "adaptation": adapt},
    })


def create(kubectl: Kubectl, name: str, mode: str, cooldown: int = 600,
           live_cap: bool | None = None) -> dict[str, Any]:
    kubectl.run("apply", "--validate=false", "-f", "-",
                stdin=service(name, mode, cooldown, live_cap))
    return wait_for(lambda: kubectl.get("deployment", name, NAMESPACE), 30,
                    f"Deployment {name}")


def adaptation(kubectl: Kubectl, name: str) -> dict[str, Any]:
    svc = kubectl.get("llms", name, NAMESPACE) or {}
    return dict((svc.get("status") or {}).get("adaptation") or {})


def condition(kubectl: Kubectl, name: str, ctype: str) -> dict[str, Any] | None:
    svc = kubectl.get("llms", name, NAMESPACE) or {}
    for cond in (svc.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def events(kubectl: Kubectl, name: str) -> list[dict[str, Any]]:
    items = (kubectl.get("events", namespace=NAMESPACE) or {}).get("items", [])
    return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]


def max_num_seqs(deployment: dict[str, Any]) -> int:
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    cap = cap_arg(args)
    assert cap is not None, args
    return cap


def write_deployment_status(kubectl: Kubectl, name: str) -> None:
    """Play the Deployment controller: every desired replica updated and available at the
    Deployment's latest generation."""
    dep = kubectl.get("deployment", name, NAMESPACE) or {}
    replicas = (dep.get("spec") or {}).get("replicas", 1)
    status = {"replicas": replicas, "updatedReplicas": replicas, "readyReplicas": replicas,
              "availableReplicas": replicas,
              "observedGeneration": dep.get("metadata", {}).get("generation", 1)}
    kubectl.run("patch", "deployment", name, "-n", NAMESPACE, "--subresource", "status",
                "--type", "merge", "-p", json.dumps({"status": status}))


@with_replay
def test_apply_lowers_the_cap_under_kv_pressure_then_respects_the_cooldown(
        kubectl: Kubectl, prom: PrometheusServer, operator_for: Any, tmp_path: Path) -> None:
    metrics_port = free_port()
    op = operator_for(prom.url, metrics_port)
    name = "kv-apply"
    # The rollout path (liveCap false); the live path is the next test.
    before = create(kubectl, name, "Apply", cooldown=600, live_cap=False)
    planned = max_num_seqs(before)

    def lowered() -> dict[str, Any] | None:
        dep = kubectl.get("deployment", name, NAMESPACE) or {}
        return dep if dep and max_num_seqs(dep) < planned else None
    after = wait_for(lowered, 45, "the Deployment's --max-num-seqs to be lowered")
    new_cap = max_num_seqs(after)
    assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]

    ad = adaptation(kubectl, name)
    assert ad["maxNumSeqs"] == ad["currentMaxNumSeqs"] == new_cap, ad
    assert ad["mode"] == "Apply"
    last = ad["lastDecision"]
    assert last["action"] == "lower" and last["from"] == planned and last["to"] == new_cap
    assert "preemptions" in last["reason"], last["reason"]
    assert ad["lastObservation"]["preemptions"] > 0 and ad["lastChangeTime"]
    changed = ad["lastChangeTime"]
    assert [(h["from"], h["to"]) for h in ad["history"]] == [(planned, new_cap)]
    cond = condition(kubectl, name, "MetricsAvailable")
    assert cond is not None and cond["status"] == "True", cond

    lowered_events = wait_for(lambda: [e for e in events(kubectl, name)
                                       if e["reason"] == "MaxNumSeqsLowered"], 10,
                              "a MaxNumSeqsLowered Event")
    assert len(lowered_events) == 1 and "preemptions" in lowered_events[0]["message"]

    # No Deployment controller runs: the rollout never completes, and the next decision
    # waits for it (the replayed engine still preempts, the policy would lower again).
    assert ad["rolloutRequested"] == new_cap and ad["actuation"] == "Rollout", ad

    def reason() -> str:
        return str((adaptation(kubectl, name).get("lastDecision") or {}).get("reason", ""))
    waiting = wait_for(lambda: "waiting for the rollout" in reason() and reason(),
                       4 * INTERVAL_S, "a hold that waits for the rollout")
    assert f"max-num-seqs {new_cap}" in waiting and "cooldown counts from its completion" \
        in waiting, waiting
    ad = adaptation(kubectl, name)
    assert ad["lastDecision"]["action"] == "hold" and ad["rolloutRequested"] == new_cap
    assert ad["lastChangeTime"] == changed  # the cooldown has not started yet

    # Play the Deployment controller: the new pods are updated and available. The
    # cooldown now counts from here, not from the decision.
    write_deployment_status(kubectl, name)
    rolled = wait_for(lambda: (a := adaptation(kubectl, name)) and
                      "rolloutRequested" not in a and a, 4 * INTERVAL_S,
                      "the operator to see the rollout complete")
    assert rolled["lastChangeTime"] > changed, rolled
    assert [e for e in events(kubectl, name) if e["reason"] == "MaxNumSeqsRolledOut"]

    # Cooldown: once the window holds only samples after the rollout, the replayed engine
    # still preempts, so the policy would lower again; the 600 s cooldown holds it.
    def cooled() -> dict[str, Any] | None:
        a = adaptation(kubectl, name)
        text = (a.get("lastDecision") or {}).get("reason", "")
        return a if "s cooldown (spec.adaptation.cooldownSeconds)" in text else None
    held = wait_for(cooled, WINDOW_S + 4 * INTERVAL_S, "a hold within the cooldown")
    assert held["lastDecision"]["action"] == "hold"
    assert held["lastChangeTime"] == rolled["lastChangeTime"]
    assert held["maxNumSeqs"] == new_cap and len(held["history"]) == 1
    dep = kubectl.get("deployment", name, NAMESPACE) or {}
    assert max_num_seqs(dep) == new_cap
    assert dep["spec"] == after["spec"]  # not rolled again (only its status was written)
    assert len([e for e in events(kubectl, name) if e["reason"] == "MaxNumSeqsLowered"]) == 1

    # The operator's own metrics count the decisions by direction and service.
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    decisions = [s for family in text_string_to_metric_families(text)
                 for s in family.samples if s.name == "llmop_adaptation_decisions_total"
                 and s.labels.get("llmservice") == name and s.labels.get("mode") == "Apply"
                 and s.labels.get("namespace") == NAMESPACE]
    lowered = [s for s in decisions if s.labels["direction"] == "lower" and s.value]
    assert [(s.labels["cause"], s.value) for s in lowered] in (
        [("preemptions", 1.0)], [("kv_usage", 1.0)]), decisions  # the KV pressure's cause
    assert any(s.labels["direction"] == "hold" for s in decisions)
    assert f'llmop_adaptation_max_num_seqs{{llmservice="{name}",namespace="{NAMESPACE}"}} ' \
           f'{float(new_cap)}' in text
    assert "Online adaptation started" in op.log()


@with_replay
def test_apply_live_writes_the_cap_to_the_config_map_and_waits_for_the_engine(
        kubectl: Kubectl, prom: PrometheusServer, operator_for: Any) -> None:
    """Live (the default): the decision changes the ConfigMap the pods mount, never the
    Deployment, and the next decision waits for the engines to report the cap. The
    replayed engine is a recording of a stock vLLM: it never reports
    ``llmop_admission_cap``, so the cap stays pending (the fallback after 300 s is
    covered by the unit tests)."""
    operator_for(prom.url)
    name = "kv-live"
    before = create(kubectl, name, "Apply", cooldown=600)
    args = before["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--scheduler-cls" in args
    capacity = max_num_seqs(before)
    config = wait_for(lambda: kubectl.get("configmap", f"{name}-admission-cap", NAMESPACE),
                      30, "the admission-cap ConfigMap")
    # The runner's capacity is the memory limit; the live cap starts on the plan's start.
    plan = (kubectl.get("llms", name, NAMESPACE) or {})["status"]["plan"]
    assert capacity == plan["maxNumSeqs"]
    start = plan.get("startMaxNumSeqs") or capacity
    assert int(config["data"]["maxNumActiveSeqs"]) == start

    def lowered() -> dict[str, Any] | None:
        cm = kubectl.get("configmap", f"{name}-admission-cap", NAMESPACE) or {}
        cap = int((cm.get("data") or {}).get("maxNumActiveSeqs", start))
        return cm if cap < start else None
    cm = wait_for(lowered, 45, "the ConfigMap's cap to be lowered")
    new_cap = int(cm["data"]["maxNumActiveSeqs"])
    ad = adaptation(kubectl, name)
    assert ad["capRequested"] == ad["maxNumSeqs"] == new_cap and ad["actuation"] == "Live", ad
    dep = kubectl.get("deployment", name, NAMESPACE) or {}
    assert dep["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert max_num_seqs(dep) == capacity  # the runner capacity: nothing rolled
    cond = condition(kubectl, name, "LiveCap")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "CapPending"

    def waiting() -> dict[str, Any] | None:
        a = adaptation(kubectl, name)
        reason = (a.get("lastDecision") or {}).get("reason", "")
        return a if "waiting for the engines to report" in reason else None
    held = wait_for(waiting, 4 * INTERVAL_S, "a hold that waits for the engines' report")
    assert held["lastDecision"]["action"] == "hold" and len(held["history"]) == 1
    lowered_events = [e for e in events(kubectl, name) if e["reason"] == "MaxNumSeqsLowered"]
    assert len(lowered_events) == 1 and "no restart" in lowered_events[0]["message"]


@with_replay
def test_recommend_reports_in_status_and_events_only(
        kubectl: Kubectl, prom: PrometheusServer, operator_for: Any) -> None:
    operator_for(prom.url)
    name = "kv-recommend"
    before = create(kubectl, name, "Recommend")
    planned = max_num_seqs(before)

    def recommended() -> dict[str, Any] | None:
        a = adaptation(kubectl, name)
        return a if a.get("recommendedMaxNumSeqs") else None
    ad = wait_for(recommended, 45, "a recommendation in status.adaptation")
    assert ad["recommendedMaxNumSeqs"] < planned
    assert "maxNumSeqs" not in ad and ad["currentMaxNumSeqs"] == planned
    assert ad["lastDecision"]["action"] == "lower" and ad["history"] == []
    assert ad["mode"] == "Recommend"
    wait_for(lambda: [e for e in events(kubectl, name)
                      if e["reason"] == "MaxNumSeqsLowerRecommended"], 10,
             "a MaxNumSeqsLowerRecommended Event")

    # Two more decisions later: still only a recommendation, the Deployment never written.
    first = ad["lastDecision"]["time"]
    wait_for(lambda: adaptation(kubectl, name)["lastDecision"]["time"] > first,
             3 * INTERVAL_S, "another decision")
    dep = kubectl.get("deployment", name, NAMESPACE) or {}
    assert dep["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert max_num_seqs(dep) == planned
    reasons = [e["reason"] for e in events(kubectl, name)]
    assert "MaxNumSeqsLowered" not in reasons and "DeploymentUpdated" not in reasons
    assert reasons.count("MaxNumSeqsLowerRecommended") == 1  # not repeated every tick


def test_prometheus_down_holds_with_a_condition_saying_why(
        kubectl: Kubectl, operator_for: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    operator_for(dead)
    name = "kv-apply"
    before = create(kubectl, name, "Apply", cooldown=0)

    def down() -> dict[str, Any] | None:
        cond = condition(kubectl, name, "MetricsAvailable")
        return cond if cond and cond["status"] == "False" else None
    cond = wait_for(down, 30, "MetricsAvailable=False")
    assert cond["reason"] == "PrometheusUnavailable", cond
    assert "unavailable" in cond["message"] and "holds" in cond["message"]
    ad = adaptation(kubectl, name)
    assert ad["lastDecision"]["action"] == "hold"
    assert "Prometheus is unavailable" in ad["lastDecision"]["reason"]
    assert "maxNumSeqs" not in ad and ad["lastObservation"]["error"]
    warnings = wait_for(lambda: [e for e in events(kubectl, name)
                                 if e["reason"] == "PrometheusUnavailable"], 10,
                        "a PrometheusUnavailable Warning")
    assert warnings[0]["type"] == "Warning"

    # Held on the next ticks too, and the Warning is not repeated every tick.
    first = ad["lastDecision"]["time"]
    wait_for(lambda: adaptation(kubectl, name)["lastDecision"]["time"] > first,
             3 * INTERVAL_S, "another decision")
    dep = kubectl.get("deployment", name, NAMESPACE) or {}
    assert dep["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert len([e for e in events(kubectl, name) if e["reason"] == "PrometheusUnavailable"]) == 1


@with_replay
def test_recording_is_a_real_engine_under_kv_pressure() -> None:
    """The replayed data is what it claims: a real vLLM that preempted with a full KV
    cache at its cap."""
    rec = Recording.load(KV_PRESSURE)
    assert "vllm" in rec.meta["source"] and rec.meta["vllmVersion"] not in ("", "unknown")
    first, last = rec.scrapes[0], rec.scrapes[-1]

    def value(text: str, metric: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(metric + "{") or line.startswith(metric + " "))
    assert value(last, "vllm:num_preemptions_total") > value(first, "vllm:num_preemptions_total")
    assert max(value(s, "vllm:kv_cache_usage_perc") for s in rec.scrapes) > 0.9
    assert max(value(s, "vllm:num_requests_waiting") for s in rec.scrapes) > 0
    # The replay keeps counters rising across its loop (no reset for rate()).
    n = len(rec.scrapes)
    gain = rec.loop_gain()
    looped = rec.exposition(n * rec.interval_s, gain)
    assert value(looped, "vllm:num_preemptions_total") >= value(last, "vllm:num_preemptions_total")
    assert json.dumps(rec.meta)  # the provenance travels with the data

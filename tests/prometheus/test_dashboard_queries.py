"""Every query of the shipped Grafana dashboard returns series from a real Prometheus
scraping a real vLLM CPU engine and the operator's own metrics.

The parts, each the real one: vLLM (CPU build, tiny model) with the server pod's engine
module (``--scheduler-cls``: the live admission cap and its ``llmop_admission_*`` gauges,
set up as the pod sets it up); the operator's :class:`OperatorMetrics` served over HTTP
(``OperatorMetrics.serve``, as ``llm-operator run`` serves it); one Prometheus scraping
both, the vLLM target with the labels the rendered PodMonitor gives a pod and the operator
with the labels and ``honor_labels`` of the chart's ServiceMonitor.

The operator's series come from the adaptation loop played by the test: every tick the
batched observation query against this Prometheus (:func:`prometheus.fetch_observations`,
timed into the query histogram), the pure policy's decision (:func:`decide`), recorded
with :meth:`OperatorMetrics.decision` and ``adaptation_limits``, and a changed cap written
to the engine's cap file (the ConfigMap channel). The service's SLO and conditions are
recorded as the reconciliation records them; reconciliations are timed around the real
plan and render; one query goes to a dead Prometheus (a real query error), one
reconciliation fails. No tuning Job runs here: the tuning counters stand at the 0 the
reconciliation starts them at, and the tuned value is the start cap, as the status of a
run that chose it would give it (:class:`CapLimits`).

The queries are read from ``charts/llm-operator/files/dashboard.json`` (what the chart
ships) with Grafana's variables filled in for this service; each must return at least
one series with a finite value. A renamed series on either side fails the test.
``LLMOP_DASHBOARD_PNG=path`` also plots the panels into that PNG (the README's picture).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from tools import dashboard

from llm_operator.adaptation import prometheus
from llm_operator.adaptation.policy import (
    AdaptationState,
    CapChange,
    CapLimits,
    bounds_for,
    decide,
    policy_for_scrape,
)
from llm_operator.api.models import LLMServiceSpec
from llm_operator.controller.metrics import OperatorMetrics
from llm_operator.inpod.tuner.server import VLLMServer, free_port
from llm_operator.planning import make_plan
from llm_operator.rendering import render_all
from llm_operator.rendering.admission import ADMISSION_KEY
from llm_operator.settings import Settings
from tests.conftest import vllm_python
from tests.prometheus.conftest import NAMESPACE
from tests.support.engine import LIVE_FLAGS, copy_engine_code, live_env, write_cap
from tests.support.prometheus import PrometheusServer, start_prometheus_with
from tests.support.vllm_load import Load, LoadRun

# The timeout includes waiting for the machine-wide vLLM lock (other servers may hold it).
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

NAME = "chat"
OPERATOR_NAMESPACE = "llm-system"
START_CAP = 32
SCRAPE_S = 1.0
WINDOW_S = 20.0
TICK_S = 5.0
STEP_S = 2.0
# A 4,096-token KV cache behind a cap of 32. First KV pressure as in test_kv_pressure (48
# clients of 128 + 256 tokens): the engine preempts and the policy lowers the cap. Then
# short requests (64 + 64 tokens) from 24 clients: the KV cache has room, requests queue at
# the lowered cap and the policy raises it again.
FLAGS = ["--max-num-seqs", str(START_CAP), *LIVE_FLAGS, "--kv-cache-memory-bytes", "2097152",
         "--max-model-len", "1024"]
PHASES = [(Load(concurrency=48, num_prompts=5000, input_len=128, output_len=256), 70.0),
          (Load(concurrency=24, num_prompts=5000, input_len=64, output_len=64), 70.0)]
SPEC = LLMServiceSpec.model_validate({
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": {"product": "NVIDIA-L4"},
    "workload": {"slo": {"ttftP95Ms": 2000, "itlP95Ms": 150}},
    "adaptation": {"mode": "Apply", "cooldownSeconds": 20, "intervalSeconds": 5,
                   "minMaxNumSeqs": 2, "maxMaxNumSeqs": START_CAP}})


def prometheus_config(vllm_port: int, operator_port: int) -> dict[str, Any]:
    """Two jobs: vLLM with the PodMonitor's labels, the operator with the ServiceMonitor's
    target labels (its own namespace) and ``honor_labels`` (the chart sets honorLabels)."""
    interval = f"{SCRAPE_S:g}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval,
                   "scrape_timeout": interval},
        "scrape_configs": [
            {"job_name": "vllm", "static_configs": [{
                "targets": [f"127.0.0.1:{vllm_port}"],
                "labels": {"llmservice": NAME, "namespace": NAMESPACE}}]},
            {"job_name": "llm-operator", "honor_labels": True, "static_configs": [{
                "targets": [f"127.0.0.1:{operator_port}"],
                "labels": {"namespace": OPERATOR_NAMESPACE, "service": "llmop-llm-operator"}}]},
        ],
    }


@dataclass
class Run:
    """What the module's run left: Prometheus (still up), the time range and decisions."""

    prom: PrometheusServer
    start: float
    end: float
    decisions: list[tuple[str, str, int | None]]


def reconcile_once(metrics: OperatorMetrics, fail: bool = False) -> None:
    """One timed reconciliation around the real plan and render of the service."""
    from llm_operator.api.models import parse_llmservice

    body = {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "uid-dash",
                         "generation": 1},
            "spec": SPEC.model_dump(by_alias=True, exclude_unset=True)}
    with metrics.timed_reconcile("handler") as run:
        svc = parse_llmservice(body)
        render_all(svc, make_plan(svc.spec), Settings(), live_cap=True)
        run.failed = fail


class Loop:
    """The adaptation loop of one service, played by the test (see the module docstring)."""

    def __init__(self, prom_url: str, cap_file: Path, metrics: OperatorMetrics) -> None:
        self.client = prometheus.connect(prom_url)
        self.cap_file = cap_file
        self.metrics = metrics
        self.settings = policy_for_scrape(WINDOW_S, SCRAPE_S)
        self.limits = CapLimits(tuned=START_CAP)  # as if a tuning run had chosen it
        self.bounds = bounds_for(SPEC, self.limits, self.settings)
        self.state = AdaptationState(current=START_CAP)
        self.decisions: list[tuple[str, str, int | None]] = []

    def tick(self) -> None:
        """Observe, decide, record; apply a change through the cap file, live."""
        now = time.time()
        t0 = time.perf_counter()
        try:
            observed = prometheus.fetch_observations(
                self.client, [(NAMESPACE, NAME)], now, WINDOW_S,
                on_error=self.metrics.query_error)
        finally:
            self.metrics.prometheus_seconds.observe(time.perf_counter() - t0)
        state = self.state
        d = decide(observed.get((NAMESPACE, NAME)), state, SPEC, now, namespace=NAMESPACE,
                   name=NAME, limits=self.limits, settings=self.settings)
        self.metrics.decision(NAMESPACE, NAME, d.action.value, SPEC.adaptation.mode.value,
                              d.cause.value, d.value if d.changed else state.current)
        fit = d.evidence.get("kvFit")
        self.metrics.adaptation_limits(NAMESPACE, NAME, lower=self.bounds.lower,
                                       upper=self.bounds.upper,
                                       kv_fit=fit if isinstance(fit, int) else None,
                                       tuned=self.limits.tuned)
        self.decisions.append((d.action.value, d.cause.value, d.value))
        if d.changed and d.value is not None:
            reconcile_once(self.metrics)  # the reconciliation that writes the ConfigMap
            write_cap(self.cap_file, str(d.value))  # its key as the pod's file, swapped live
            self.state = AdaptationState(
                current=d.value, last_change_at=now,
                history=(*state.history, CapChange(
                    at=now, from_value=state.current, to_value=d.value, reason=d.reason,
                    kv_fit=fit if isinstance(fit, int) else None)))

    def run_while(self, load: LoadRun, seconds: float) -> None:
        """Tick every TICK_S for ``seconds`` (or until the load ends)."""
        until = time.time() + seconds
        while load.running() and time.time() < until:
            time.sleep(TICK_S)
            self.tick()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Run]:
    base = tmp_path_factory.mktemp("dashboard")
    code = copy_engine_code(base / "code")
    cap_file = base / ADMISSION_KEY
    write_cap(cap_file, str(START_CAP))
    metrics = OperatorMetrics()
    operator_port = free_port()
    assert metrics.serve(operator_port, addr="127.0.0.1")
    server = VLLMServer(model=str(tiny_model), python=str(vllm_python()), flags=FLAGS,
                        log_path=base / "vllm.log", start_timeout_s=300,
                        env=live_env(code, cap_file, base / "prom"))
    try:
        with server:
            # What the reconciliation records for a planned, available service.
            metrics.service_spec(NAMESPACE, NAME, SPEC)  # SLO; tuning counters at 0
            metrics.conditions(NAMESPACE, NAME, [
                {"type": "Available", "status": "True"}, {"type": "Ready", "status": "True"},
                {"type": "MetricsAvailable", "status": "True"}])
            reconcile_once(metrics)
            prom = start_prometheus_with(prometheus_config(server.port, operator_port))
            try:
                prom.wait_for_series(
                    f'llmop_admission_cap{{llmservice="{NAME}"}} == {START_CAP}', 60)
                prom.wait_for_series('llmop_reconcile_in_flight{job="llm-operator"}', 30)
                start = time.time()
                loop = Loop(prom.url, cap_file, metrics)
                for i, (load_, seconds) in enumerate(PHASES):
                    load = LoadRun(vllm_python(), server.url, str(tiny_model), load_)
                    try:
                        prom.wait_for_series(
                            f'{prometheus.VLLM_RUNNING}{{llmservice="{NAME}"}} > 0', 120)
                        if i == 1:
                            # A query to a Prometheus that is not there (a real query
                            # error), and a reconciliation that fails.
                            prometheus.fetch_observations(
                                prometheus.connect(f"http://127.0.0.1:{free_port()}",
                                                   retries=0),
                                [(NAMESPACE, NAME)], time.time(), WINDOW_S,
                                on_error=metrics.query_error)
                            reconcile_once(metrics, fail=True)
                        loop.run_while(load, seconds)
                    finally:
                        load.kill()
                time.sleep(3 * SCRAPE_S)  # the last values scraped
                yield Run(prom, start, time.time(), loop.decisions)
            finally:
                prom.stop()
    finally:
        metrics.stop()


def test_every_panel_query_returns_series(run: Run) -> None:
    doc = json.loads(dashboard.CHART_JSON.read_text())
    # Grafana: $__rate_interval = max(step + scrape interval, 4 x scrape interval).
    rate = math.ceil(max(STEP_S + SCRAPE_S, 4 * SCRAPE_S))
    variables = dashboard.grafana_variables(NAMESPACE, NAME, rate_interval_s=rate,
                                            range_s=math.ceil(run.end - run.start))
    empty: list[str] = []
    report: list[str] = []
    for q in dashboard.panel_queries(doc):
        expr = dashboard.interpolate(q.expr, variables)
        series: list[dict[str, Any]]
        if q.instant:
            series = cast(list[dict[str, Any]], run.prom.query(expr))
            values = [float(s["value"][1]) for s in series]
        else:
            series = range_query(run.prom, expr, run.start, run.end, STEP_S)
            values = [float(v) for s in series for _, v in s["values"]]
        finite = [v for v in values if math.isfinite(v)]
        report.append(f"{q.panel} / {q.ref}: {len(series)} series, {len(finite)} values")
        if not finite:
            empty.append(f"{q.panel} ({q.ref}): {expr}")
    print("\n".join(report))  # noqa: T201 - the run's figures, for the report
    assert not empty, "panel queries without series:\n" + "\n".join(empty)

    if os.environ.get("LLMOP_DASHBOARD_PNG"):
        from tools.render_dashboard_png import render

        render(run.prom.url, NAMESPACE, NAME, run.start, run.end,
               Path(os.environ["LLMOP_DASHBOARD_PNG"]), step_s=STEP_S, scrape_interval_s=SCRAPE_S,
               doc=doc)


def test_variables_list_the_service(run: Run) -> None:
    doc = json.loads(dashboard.CHART_JSON.read_text())
    queries = dashboard.variable_queries(doc)
    found = cast(list[dict[str, Any]], run.prom.query(queries["namespace"]))
    # The operator's own namespace (llm-system) is not a choice: it has no vLLM.
    assert {s["metric"]["namespace"] for s in found} == {NAMESPACE}
    found = cast(list[dict[str, Any]], run.prom.query(
        dashboard.interpolate(queries["service"], {"namespace": NAMESPACE})))
    assert {s["metric"]["llmservice"] for s in found} == {NAME}


def test_the_played_loop_lowered_the_cap_under_kv_pressure(run: Run) -> None:
    """The decisions the panels show are the policy's under real KV pressure, and the
    engine's report of the cap in force followed them."""
    lowered = [d for d in run.decisions if d[0] == "lower"]
    assert lowered and {d[1] for d in lowered} & {"preemptions", "kv_usage"}, run.decisions
    span = f"{math.ceil(run.end - run.start)}s"
    (lowest,) = cast(list[dict[str, Any]], run.prom.query(
        f'min_over_time(llmop_admission_cap{{llmservice="{NAME}"}}[{span}])'))
    assert float(lowest["value"][1]) == min(d[2] for d in lowered if d[2]), run.decisions


def range_query(prom: PrometheusServer, expr: str, start: float, end: float,
                step_s: float) -> list[dict[str, Any]]:
    """A range query through Prometheus' HTTP API."""
    import urllib.parse
    import urllib.request

    data = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                   "step": f"{step_s:g}"}).encode()
    with urllib.request.urlopen(f"{prom.url}/api/v1/query_range", data=data, timeout=30) as r:
        body = json.loads(r.read())
    result: list[dict[str, Any]] = body["data"]["result"]
    return result

"""The operator's own Prometheus metrics (``prometheus_client``), served on
``LLMOP_METRICS_PORT`` (``/metrics``; 0 turns the server off).

One :class:`OperatorMetrics` is built at startup into the operator's context
(:class:`~llm_operator.controller.context.OperatorContext`) on its own registry, never at
import time, so tests build as many as they like and two operators in one process would
not collide.

Series (all prefixed ``llmop_``):

``adaptation_decisions_total{namespace, llmservice, direction, mode, cause}``
    decisions of the online controller: ``direction`` raise, lower or hold; ``mode``
    Apply or Recommend (a raise or lower in Recommend mode is a recommendation);
    ``cause`` the code of what the decision turned on, one of
    :class:`~llm_operator.adaptation.policy.DecisionCause` (``pinned``, ``disabled``,
    ``no_state``, ``no_data``, ``settling``, ``steady``, ``at_bound``, ``cooldown``,
    ``flap``, ``applying``, ``out_of_bounds``, ``preemptions``, ``kv_usage``,
    ``ttft_slo``, ``itl_slo``, ``queue``, ``below_kv_fit``; never free text).
``adaptation_max_num_seqs{namespace, llmservice}``
    the cap the service runs with after the latest decision.
``adaptation_kv_fit{namespace, llmservice}``
    the sequences of the observed request size the KV cache holds (the policy's KV
    fit), the latest one known; absent until the first decision that knew it.
``adaptation_bound{namespace, llmservice, bound}``
    ``bound`` ``min`` or ``max``: the caps adaptation may move between
    (``spec.adaptation.minMaxNumSeqs``; the smaller of the planner's memory limit and
    ``spec.adaptation.maxMaxNumSeqs``).
``adaptation_tuned_max_num_seqs{namespace, llmservice}``
    the tuning result (``status.tuning.best.maxNumSeqs``): where the cap started, not a
    bound; absent while no tuning run succeeded.
``service_slo_seconds{namespace, llmservice, objective}``
    ``objective`` ``ttft_p95`` or ``itl_p95``: the latency objectives the spec sets
    (``spec.workload.slo``; an objective left to its default has no series).
``service_spec_replicas{namespace, llmservice}``
    the replicas the spec asks for (0: scaled to zero on purpose, not unavailable).
``service_condition{namespace, llmservice, type, status}``
    one-hot, like kube-state-metrics' ``kube_deployment_status_condition``: for each
    condition of the LLMService's status (``type`` Available, Ready, ...), 1 on its
    current ``status`` (``true``, ``false``, ``unknown``) and 0 on the other two.
``prometheus_query_errors_total`` / ``prometheus_query_duration_seconds``
    the batched observation query (one per tick for all services).
``tuning_jobs_started_total`` / ``tuning_jobs_succeeded_total`` /
``tuning_jobs_failed_total`` ``{namespace, llmservice}``
    tuning Jobs, for the tuning wiring; 0 from the service's first reconciliation.
``tuning_gpu_seconds_total{namespace, llmservice}``
    what tuning cost: each ended attempt's pods' GPUs times the time they were on a node
    (:func:`~llm_operator.tuning.budget.pods_gpu_seconds`; divide by 60 for the
    GPU-minutes ``status.tuning.gpuMinutes`` and the Events show); 0 from the service's
    first reconciliation. ``sum(increase(llmop_tuning_gpu_seconds_total[30d])) by
    (namespace) / 3600`` is a team's GPU-hours of tuning over 30 days.
``tuning_gpus_held`` / ``tuning_gpu_budget``
    GPUs tuning Jobs on spare GPUs hold across the watched namespaces, as of the latest
    budget check (a run on spare GPUs about to start, or a queued one rechecked), and the
    budget (``LLMOP_TUNING_GPU_BUDGET``).
``reconcile_duration_seconds{trigger}`` / ``reconcile_errors_total{trigger}``
    one reconciliation (parse, plan, render, apply) and those that failed (raised, or
    ended with an error for kopf to raise: children not written, spec invalid);
    ``trigger`` says who ran it (``handler``, ``adaptation``, ``tuning``, ``resync``,
    ``workload``, ``facts``: a facts Job finished).
``reconcile_in_flight``
    reconciliations running now.

Every per-service series of a service is removed when the service is deleted
(:meth:`OperatorMetrics.forget_service`); the adaptation gauges also when it is no longer
adapted (:meth:`OperatorMetrics.forget`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..api.models import LLMServiceSpec, SLOSpec

log = logging.getLogger(__name__)

NAMESPACE = "llmop"
SERVICE_LABELS = ("namespace", "llmservice")
RECONCILE_TRIGGERS = ("handler", "adaptation", "tuning", "resync", "workload", "facts",
                      "pods")
"""Who runs a reconciliation (the ``trigger`` label); the error counters of each start at 0
so that ``increase()`` sees the first error."""
CONDITION_STATUSES = ("true", "false", "unknown")
"""The ``status`` values of ``llmop_service_condition`` (the condition's status, lowercased)."""


def slo_objectives(slo: SLOSpec) -> dict[str, float]:
    """``objective`` label -> seconds, for the objectives the spec sets (pure)."""
    return {objective: getattr(slo, field) / 1000.0
            for objective, field in (("ttft_p95", "ttft_p95_ms"), ("itl_p95", "itl_p95_ms"))
            if field in slo.model_fields_set}


def condition_states(conditions: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Condition type -> ``true``, ``false`` or ``unknown`` (pure); a status other than
    True or False counts as unknown."""
    states: dict[str, str] = {}
    for cond in conditions:
        ctype = cond.get("type")
        if isinstance(ctype, str) and ctype:
            status = str(cond.get("status", "")).lower()
            states[ctype] = status if status in ("true", "false") else "unknown"
    return states


class ConditionSeries(Collector):
    """``service_condition``, one-hot, made when scraped from each service's condition
    states. Not a labelled Gauge: that keeps a child metric (with two locks) per service,
    condition type and status, about 30 per service and 0.8 KB each (23 MiB at 1,000
    services, measured with tracemalloc); this keeps one small dict per service. Each
    service's dict is replaced, never changed in place, so a scrape in the server's
    thread reads a consistent one."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name, self.documentation = name, documentation
        self._states: dict[tuple[str, str], dict[str, str]] = {}

    def set(self, namespace: str, name: str, states: Mapping[str, str]) -> None:
        self._states[(namespace, name)] = dict(states)

    def forget(self, namespace: str, name: str) -> None:
        self._states.pop((namespace, name), None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation,
                                   labels=[*SERVICE_LABELS, "type", "status"])
        for (namespace, name), states in list(self._states.items()):
            for ctype, current in states.items():
                for status in CONDITION_STATUSES:
                    family.add_metric([namespace, name, ctype, status],
                                      1.0 if status == current else 0.0)
        yield family


@dataclass
class ReconcileRun:
    """What the code inside :meth:`OperatorMetrics.timed_reconcile` reports back: set
    ``failed`` for a reconciliation that ends with an error without raising it."""

    failed: bool = False


class OperatorMetrics:
    """Every metric of the operator, on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.decisions = Counter(
            "adaptation_decisions", "Online adaptation decisions by direction, cause and "
            "service", [*SERVICE_LABELS, "direction", "mode", "cause"], namespace=NAMESPACE,
            registry=reg)
        self.max_num_seqs = Gauge(
            "adaptation_max_num_seqs", "The max-num-seqs a service runs with after the latest "
            "adaptation decision", SERVICE_LABELS, namespace=NAMESPACE, registry=reg)
        self.kv_fit = Gauge(
            "adaptation_kv_fit", "Sequences of the observed request size the KV cache holds "
            "(the adaptation policy's KV fit)", SERVICE_LABELS, namespace=NAMESPACE,
            registry=reg)
        self.bound = Gauge(
            "adaptation_bound", "The lowest (bound=min) and highest (bound=max) max-num-seqs "
            "adaptation may set", [*SERVICE_LABELS, "bound"], namespace=NAMESPACE,
            registry=reg)
        self.tuned = Gauge(
            "adaptation_tuned_max_num_seqs", "The tuning result (status.tuning.best."
            "maxNumSeqs): where adaptation starts, not a bound", SERVICE_LABELS,
            namespace=NAMESPACE, registry=reg)
        self.slo_seconds = Gauge(
            "service_slo_seconds", "Latency objectives the LLMService's spec sets "
            "(spec.workload.slo)", [*SERVICE_LABELS, "objective"], namespace=NAMESPACE,
            registry=reg)
        self.spec_replicas = Gauge(
            "service_spec_replicas", "Replicas the LLMService asks for (spec.replicas; 0: "
            "scaled to zero on purpose)", SERVICE_LABELS, namespace=NAMESPACE, registry=reg)
        self.condition = ConditionSeries(
            f"{NAMESPACE}_service_condition", "The LLMService's status conditions, one-hot: "
            "1 on the current status of each condition type")
        reg.register(self.condition)
        self.prometheus_errors = Counter(
            "prometheus_query_errors", "Failed Prometheus queries of the adaptation loop",
            namespace=NAMESPACE, registry=reg)
        self.prometheus_seconds = Histogram(
            "prometheus_query_duration_seconds", "Duration of the batched observation query",
            namespace=NAMESPACE, registry=reg,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0))
        self.tuning_started = Counter(
            "tuning_jobs_started", "Tuning Jobs started", SERVICE_LABELS,
            namespace=NAMESPACE, registry=reg)
        self.tuning_succeeded = Counter(
            "tuning_jobs_succeeded", "Tuning Jobs whose result was accepted", SERVICE_LABELS,
            namespace=NAMESPACE, registry=reg)
        self.tuning_failed = Counter(
            "tuning_jobs_failed", "Tuning Jobs that failed", SERVICE_LABELS,
            namespace=NAMESPACE, registry=reg)
        self.tuning_gpu_seconds = Counter(
            "tuning_gpu_seconds", "GPU-seconds of ended tuning attempts (the pods' GPUs "
            "times their time on a node)", SERVICE_LABELS, namespace=NAMESPACE, registry=reg)
        self.tuning_gpus_held = Gauge(
            "tuning_gpus_held", "GPUs tuning Jobs on spare GPUs hold, as of the latest "
            "budget check", namespace=NAMESPACE, registry=reg)
        self.tuning_gpu_budget = Gauge(
            "tuning_gpu_budget", "GPUs tuning Jobs on spare GPUs may hold at once "
            "(LLMOP_TUNING_GPU_BUDGET)", namespace=NAMESPACE, registry=reg)
        self.reconcile_seconds = Histogram(
            "reconcile_duration_seconds", "Duration of one reconciliation of an LLMService",
            ["trigger"], namespace=NAMESPACE, registry=reg,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
        self.reconcile_errors = Counter(
            "reconcile_errors", "Reconciliations of an LLMService that failed", ["trigger"],
            namespace=NAMESPACE, registry=reg)
        for trigger in RECONCILE_TRIGGERS:
            self.reconcile_errors.labels(trigger)
        self.reconcile_in_flight = Gauge(
            "reconcile_in_flight", "Reconciliations of LLMServices running now",
            namespace=NAMESPACE, registry=reg)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # -- recording helpers ---------------------------------------------------------------
    def decision(self, namespace: str, name: str, direction: str, mode: str, cause: str,
                 cap: int | None) -> None:
        """Count one adaptation decision by its cause code and remember the resulting cap."""
        self.decisions.labels(namespace, name, direction, mode, cause).inc()
        if cap is not None:
            self.max_num_seqs.labels(namespace, name).set(cap)

    def adaptation_limits(self, namespace: str, name: str, *, lower: int, upper: int,
                          kv_fit: int | None, tuned: int | None = None) -> None:
        """The bounds adaptation moves the cap between, the KV fit when this decision
        knew it (None: the last one known stays, e.g. while a change is on its way) and
        the tuning result (None: no run succeeded, the series goes)."""
        self.bound.labels(namespace, name, "min").set(lower)
        self.bound.labels(namespace, name, "max").set(upper)
        if kv_fit is not None:
            self.kv_fit.labels(namespace, name).set(kv_fit)
        if tuned is not None:
            self.tuned.labels(namespace, name).set(tuned)
        else:
            self.tuned.remove_by_labels({"namespace": namespace, "llmservice": name})

    def service_spec(self, namespace: str, name: str, spec: LLMServiceSpec) -> None:
        """What a reconciliation read of the spec: the replicas asked for, the latency
        objectives it sets (:func:`slo_objectives`; the others go); and the service's
        tuning counters start at 0, so that ``increase()`` sees the first failure."""
        self.spec_replicas.labels(namespace, name).set(spec.replicas)
        for counter in (self.tuning_started, self.tuning_succeeded, self.tuning_failed,
                        self.tuning_gpu_seconds):
            counter.labels(namespace, name)
        wanted = slo_objectives(spec.workload.slo)
        for objective in ("ttft_p95", "itl_p95"):
            if objective in wanted:
                self.slo_seconds.labels(namespace, name, objective).set(wanted[objective])
            else:
                with contextlib.suppress(KeyError):
                    self.slo_seconds.remove(namespace, name, objective)

    def conditions(self, namespace: str, name: str,
                   conditions: Sequence[Mapping[str, Any]]) -> None:
        """The service's status conditions as the one-hot ``service_condition``; types no
        longer in the list go."""
        self.condition.set(namespace, name, condition_states(conditions))

    def tuning_event(self, namespace: str, name: str, reason: str) -> None:
        """Count a tuning milestone by its Event reason (TuningStarted, TuningSucceeded,
        TuningFailed); other reasons are not counted."""
        counter = {"TuningStarted": self.tuning_started, "TuningSucceeded": self.tuning_succeeded,
                   "TuningFailed": self.tuning_failed}.get(reason)
        if counter is not None:
            counter.labels(namespace=namespace, llmservice=name).inc()

    def tuning_cost(self, namespace: str, name: str, gpu_seconds: float) -> None:
        """Count one ended tuning attempt's GPU-seconds."""
        if gpu_seconds > 0:
            self.tuning_gpu_seconds.labels(namespace=namespace, llmservice=name).inc(
                gpu_seconds)

    def tuning_budget(self, held: int, budget: int) -> None:
        """The latest budget check: GPUs held by tuning on spare GPUs, and the budget."""
        self.tuning_gpus_held.set(held)
        self.tuning_gpu_budget.set(budget)

    def forget(self, namespace: str, name: str) -> None:
        """Drop the adaptation gauges of a service that is gone or no longer adapted."""
        labels = {"namespace": namespace, "llmservice": name}
        for gauge in (self.max_num_seqs, self.kv_fit, self.bound, self.tuned):
            gauge.remove_by_labels(labels)

    def forget_service(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted service (counters included)."""
        labels = {"namespace": namespace, "llmservice": name}
        for metric in (self.decisions, self.max_num_seqs, self.kv_fit, self.bound, self.tuned,
                       self.slo_seconds, self.spec_replicas, self.tuning_started,
                       self.tuning_succeeded, self.tuning_failed, self.tuning_gpu_seconds):
            metric.remove_by_labels(labels)
        self.condition.forget(namespace, name)

    def query_error(self, _exc: BaseException | None = None) -> None:
        """Count one failed Prometheus query (usable as ``on_error``)."""
        self.prometheus_errors.inc()

    @contextlib.contextmanager
    def timed_reconcile(self, trigger: str) -> Iterator[ReconcileRun]:
        """Time one reconciliation and count it in flight:
        ``with metrics.timed_reconcile("handler") as run: ...``. An exception out of the
        block (not a cancellation) or ``run.failed`` set counts it as an error."""
        t0 = time.perf_counter()
        run = ReconcileRun()
        self.reconcile_in_flight.inc()
        try:
            yield run
        except Exception:
            run.failed = True
            raise
        finally:
            self.reconcile_in_flight.dec()
            self.reconcile_seconds.labels(trigger).observe(time.perf_counter() - t0)
            if run.failed:
                self.reconcile_errors.labels(trigger).inc()

    # -- serving -------------------------------------------------------------------------
    def serve(self, port: int, addr: str = "0.0.0.0") -> bool:
        """Serve ``/metrics`` on ``port`` in a thread; False (logged) when the port is
        taken: the operator keeps working without its metrics rather than crash."""
        if port <= 0 or self._server is not None:
            return False
        try:
            self._server, self._thread = start_http_server(port, addr=addr,
                                                           registry=self.registry)
        except OSError as exc:
            log.warning("Could not serve the operator's metrics on port %d: %s", port, exc)
            return False
        log.info("Serving the operator's metrics on :%d/metrics", port)
        return True

    def stop(self) -> None:
        """Stop serving (if serving)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


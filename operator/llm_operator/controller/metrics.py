"""The operator's own Prometheus metrics (``prometheus_client``), served on
``LLMOP_METRICS_PORT`` (``/metrics``; 0 turns the server off).

One :class:`OperatorMetrics` is built at startup into the operator's context
(:class:`~llm_operator.controller.context.OperatorContext`) on its own registry, never at
import time, so tests build as many as they like and two operators in one process would
not collide.

Series (all prefixed ``llmop_``):

``adaptation_decisions_total{namespace, llmservice, direction, mode}``
    decisions of the online controller: ``direction`` raise, lower or hold; ``mode``
    Apply or Recommend (a raise or lower in Recommend mode is a recommendation).
``adaptation_max_num_seqs{namespace, llmservice}``
    the cap the service runs with after the latest decision.
``prometheus_query_errors_total`` / ``prometheus_query_duration_seconds``
    the batched observation query (one per tick for all services).
``tuning_jobs_started_total`` / ``tuning_jobs_succeeded_total`` /
``tuning_jobs_failed_total`` ``{namespace, llmservice}``
    tuning Jobs, for the tuning wiring.
``reconcile_duration_seconds{trigger}``
    one reconciliation (parse, plan, render, apply); ``trigger`` says who ran it
    (``handler``, ``adaptation``, ``tuning``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

NAMESPACE = "llmop"
SERVICE_LABELS = ("namespace", "llmservice")


class OperatorMetrics:
    """Every metric of the operator, on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.decisions = Counter(
            "adaptation_decisions", "Online adaptation decisions by direction and service",
            [*SERVICE_LABELS, "direction", "mode"], namespace=NAMESPACE, registry=reg)
        self.max_num_seqs = Gauge(
            "adaptation_max_num_seqs", "The max-num-seqs a service runs with after the latest "
            "adaptation decision", SERVICE_LABELS, namespace=NAMESPACE, registry=reg)
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
        self.reconcile_seconds = Histogram(
            "reconcile_duration_seconds", "Duration of one reconciliation of an LLMService",
            ["trigger"], namespace=NAMESPACE, registry=reg,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # -- recording helpers ---------------------------------------------------------------
    def decision(self, namespace: str, name: str, direction: str, mode: str,
                 cap: int | None) -> None:
        """Count one adaptation decision and remember the resulting cap."""
        self.decisions.labels(namespace, name, direction, mode).inc()
        if cap is not None:
            self.max_num_seqs.labels(namespace, name).set(cap)

    def tuning_event(self, namespace: str, name: str, reason: str) -> None:
        """Count a tuning milestone by its Event reason (TuningStarted, TuningSucceeded,
        TuningFailed); other reasons are not counted."""
        counter = {"TuningStarted": self.tuning_started, "TuningSucceeded": self.tuning_succeeded,
                   "TuningFailed": self.tuning_failed}.get(reason)
        if counter is not None:
            counter.labels(namespace=namespace, llmservice=name).inc()

    def forget(self, namespace: str, name: str) -> None:
        """Drop the per-service gauge of a service that is gone or no longer adapted."""
        with contextlib.suppress(KeyError):
            self.max_num_seqs.remove(namespace, name)

    def query_error(self, _exc: BaseException | None = None) -> None:
        """Count one failed Prometheus query (usable as ``on_error``)."""
        self.prometheus_errors.inc()

    @contextlib.contextmanager
    def timed_reconcile(self, trigger: str) -> Iterator[None]:
        """Time one reconciliation: ``with metrics.timed_reconcile("handler"): ...``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.reconcile_seconds.labels(trigger).observe(time.perf_counter() - t0)

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


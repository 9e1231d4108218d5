"""The operator's own series (``llm_operator.controller.metrics``) as a scrape shows them,
and where the controller records them: a reconciliation (spec, duration, errors, work in
flight), a status write (conditions) and a deleted service (every series gone)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import generate_latest

from llm_operator.api.models import SLOSpec, parse_llmservice
from llm_operator.controller.context import OperatorContext
from llm_operator.controller.metrics import (
    RECONCILE_TRIGGERS,
    OperatorMetrics,
    condition_states,
    slo_objectives,
)
from llm_operator.controller.reconcile import reconcile, write_status
from llm_operator.settings import Settings

NS, NAME = "team-a", "llama"
KEY = {"namespace": NS, "llmservice": NAME}


def body(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
            "metadata": {"name": NAME, "namespace": NS, "uid": "u-1", "generation": 1,
                         "resourceVersion": "1"},
            "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                     "gpus": {"product": "L4"}, **spec}}


def value(m: OperatorMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def scrape(m: OperatorMetrics) -> str:
    return generate_latest(m.registry).decode()


# --------------------------------------------------------------------------- pure parts
def test_slo_objectives_are_only_the_ones_the_spec_sets() -> None:
    assert slo_objectives(SLOSpec.model_validate({})) == {}
    assert slo_objectives(SLOSpec.model_validate({"ttftP95Ms": 800})) == {"ttft_p95": 0.8}
    assert slo_objectives(SLOSpec.model_validate({"ttftP95Ms": 800, "itlP95Ms": 50})) == {
        "ttft_p95": 0.8, "itl_p95": 0.05}


def test_condition_states_lowercase_and_unknown_for_anything_else() -> None:
    assert condition_states([{"type": "Available", "status": "True"},
                             {"type": "Ready", "status": "False"},
                             {"type": "Tuned", "status": "Unknown"},
                             {"type": "LiveCap"},  # no status
                             {"status": "True"}]) == {  # no type: skipped
        "Available": "true", "Ready": "false", "Tuned": "unknown", "LiveCap": "unknown"}


# --------------------------------------------------------------------------- each series
def test_decisions_count_by_cause_and_limits_are_gauges() -> None:
    m = OperatorMetrics()
    m.decision(NS, NAME, "hold", "Apply", "at_bound", 8)
    m.decision(NS, NAME, "hold", "Apply", "at_bound", 8)
    m.decision(NS, NAME, "lower", "Apply", "preemptions", 6)
    assert value(m, "llmop_adaptation_decisions_total", **KEY, direction="hold", mode="Apply",
                 cause="at_bound") == 2
    assert value(m, "llmop_adaptation_max_num_seqs", **KEY) == 6
    m.adaptation_limits(NS, NAME, lower=2, upper=8, kv_fit=6)
    assert value(m, "llmop_adaptation_bound", **KEY, bound="min") == 2
    assert value(m, "llmop_adaptation_bound", **KEY, bound="max") == 8
    assert value(m, "llmop_adaptation_kv_fit", **KEY) == 6
    m.adaptation_limits(NS, NAME, lower=2, upper=16, kv_fit=None)  # fit not known this time
    assert value(m, "llmop_adaptation_kv_fit", **KEY) == 6  # the latest known stays
    assert value(m, "llmop_adaptation_bound", **KEY, bound="max") == 16
    assert value(m, "llmop_adaptation_tuned_max_num_seqs", **KEY) is None  # no tuning run


def test_the_tuned_value_is_its_own_series_not_a_bound() -> None:
    # Issue 32 item 2: the tuning result is shown beside the bounds, not as one of them.
    m = OperatorMetrics()
    m.adaptation_limits(NS, NAME, lower=1, upper=256, kv_fit=15, tuned=4)
    assert value(m, "llmop_adaptation_tuned_max_num_seqs", **KEY) == 4
    assert value(m, "llmop_adaptation_bound", **KEY, bound="max") == 256
    m.adaptation_limits(NS, NAME, lower=1, upper=256, kv_fit=15, tuned=None)  # retune failed
    assert value(m, "llmop_adaptation_tuned_max_num_seqs", **KEY) is None


def test_service_spec_sets_replicas_slos_and_zero_tuning_counters() -> None:
    m = OperatorMetrics()
    svc = parse_llmservice(body(replicas=0, workload={"slo": {"ttftP95Ms": 800}}))
    m.service_spec(NS, NAME, svc.spec)
    assert value(m, "llmop_service_spec_replicas", **KEY) == 0
    assert value(m, "llmop_service_slo_seconds", **KEY, objective="ttft_p95") == 0.8
    assert value(m, "llmop_service_slo_seconds", **KEY, objective="itl_p95") is None
    assert value(m, "llmop_tuning_jobs_failed_total", **KEY) == 0  # increase() sees a first 1
    # The user drops the TTFT objective and sets the ITL one: the series follow.
    m.service_spec(NS, NAME, parse_llmservice(body(workload={"slo": {"itlP95Ms": 50}})).spec)
    assert value(m, "llmop_service_slo_seconds", **KEY, objective="ttft_p95") is None
    assert value(m, "llmop_service_slo_seconds", **KEY, objective="itl_p95") == 0.05


def test_conditions_are_one_hot_and_follow_the_status() -> None:
    m = OperatorMetrics()
    m.conditions(NS, NAME, [{"type": "Available", "status": "False"},
                            {"type": "Tuned", "status": "Unknown"}])

    def onehot(ctype: str) -> dict[str, float | None]:
        return {s: value(m, "llmop_service_condition", **KEY, type=ctype, status=s)
                for s in ("true", "false", "unknown")}

    assert onehot("Available") == {"true": 0, "false": 1, "unknown": 0}
    assert onehot("Tuned") == {"true": 0, "false": 0, "unknown": 1}
    m.conditions(NS, NAME, [{"type": "Available", "status": "True"}])  # Tuned removed
    assert onehot("Available") == {"true": 1, "false": 0, "unknown": 0}
    assert onehot("Tuned") == {"true": None, "false": None, "unknown": None}


def test_reconcile_errors_and_work_in_flight() -> None:
    m = OperatorMetrics()
    for trigger in RECONCILE_TRIGGERS:  # 0 from the start, so increase() sees the first
        assert value(m, "llmop_reconcile_errors_total", trigger=trigger) == 0
    with m.timed_reconcile("handler") as run:
        assert value(m, "llmop_reconcile_in_flight") == 1
        run.failed = True  # an outcome with an error, not raised
    with pytest.raises(RuntimeError), m.timed_reconcile("tuning"):
        raise RuntimeError("boom")
    with m.timed_reconcile("handler"):
        pass
    assert value(m, "llmop_reconcile_in_flight") == 0
    assert value(m, "llmop_reconcile_errors_total", trigger="handler") == 1
    assert value(m, "llmop_reconcile_errors_total", trigger="tuning") == 1
    assert value(m, "llmop_reconcile_duration_seconds_count", trigger="handler") == 2


def test_a_cancelled_reconciliation_is_no_error() -> None:
    m = OperatorMetrics()
    with pytest.raises(asyncio.CancelledError), m.timed_reconcile("adaptation"):
        raise asyncio.CancelledError
    assert value(m, "llmop_reconcile_errors_total", trigger="adaptation") == 0
    assert value(m, "llmop_reconcile_in_flight") == 0


def test_forget_drops_adaptation_gauges_and_forget_service_everything() -> None:
    m = OperatorMetrics()

    def record(name: str) -> None:
        m.service_spec(NS, name, parse_llmservice(
            body(workload={"slo": {"ttftP95Ms": 800}})).spec)
        m.decision(NS, name, "raise", "Apply", "queue", 12)
        m.adaptation_limits(NS, name, lower=1, upper=16, kv_fit=10, tuned=8)
        m.conditions(NS, name, [{"type": "Available", "status": "True"}])
        m.tuning_event(NS, name, "TuningFailed")

    record(NAME)
    record("other")
    m.forget(NS, NAME)  # no longer adapted (mode Disabled): its other series stay
    assert value(m, "llmop_adaptation_max_num_seqs", **KEY) is None
    assert value(m, "llmop_adaptation_kv_fit", **KEY) is None
    assert value(m, "llmop_adaptation_bound", **KEY, bound="min") is None
    assert value(m, "llmop_adaptation_bound", **KEY, bound="max") is None
    assert value(m, "llmop_adaptation_tuned_max_num_seqs", **KEY) is None
    assert value(m, "llmop_service_condition", **KEY, type="Available", status="true") == 1
    m.forget_service(NS, NAME)  # deleted: nothing of it is left
    assert f'llmservice="{NAME}"' not in scrape(m)
    assert 'llmservice="other"' in scrape(m)  # another service's series stay
    assert value(m, "llmop_tuning_jobs_failed_total", namespace=NS, llmservice="other") == 1


# --------------------------------------------------------------------------- wiring
class StatusKube:
    """Just enough of KubeClient for one reconciliation and its status write."""

    def __init__(self) -> None:
        self.stored: dict[str, Any] = {}

    async def served_groups(self) -> set[str]:
        return {"apps", "policy", "monitoring.coreos.com"}

    async def serves(self, api_version: str) -> bool:
        return True

    async def get(self, *_: Any) -> dict[str, Any] | None:
        return None

    async def apply(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        return obj, True

    async def post_event(self, obj: Any, **_: Any) -> None:
        return None

    async def update_status(self, api: str, kind: str, namespace: str, name: str,
                            patch_of: Callable[[dict[str, Any]], dict[str, Any]],
                            known: Any = None) -> dict[str, Any]:
        fresh = {**(known or {}), "status": self.stored}
        self.stored = {**self.stored, **patch_of(fresh)}
        return {**fresh, "status": self.stored}


def test_a_reconciliation_and_its_status_write_reach_the_metrics() -> None:
    kube = StatusKube()
    ctx = OperatorContext(settings=Settings(), kube=kube)  # type: ignore[arg-type]
    m = ctx.metrics
    b = body(replicas=2, workload={"slo": {"ttftP95Ms": 800}})

    async def go() -> None:
        outcome = await reconcile(b, ctx, logging.getLogger("test"), created=True,
                                  trigger="handler")
        assert outcome.error is None
        await write_status(ctx, b, outcome.status_patch)
        await asyncio.gather(*ctx.background)

    asyncio.run(go())
    assert value(m, "llmop_reconcile_duration_seconds_count", trigger="handler") == 1
    assert value(m, "llmop_reconcile_errors_total", trigger="handler") == 0
    assert value(m, "llmop_service_spec_replicas", **KEY) == 2
    assert value(m, "llmop_service_slo_seconds", **KEY, objective="ttft_p95") == 0.8
    # The status the reconciliation wrote: SpecValid True, Available False (no pods yet).
    assert value(m, "llmop_service_condition", **KEY, type="SpecValid", status="true") == 1
    assert value(m, "llmop_service_condition", **KEY, type="Available", status="false") == 1


def test_an_invalid_spec_counts_as_a_failed_reconciliation() -> None:
    ctx = OperatorContext(settings=Settings(), kube=StatusKube())  # type: ignore[arg-type]
    bad = body(replicas=-1)

    async def go() -> None:
        outcome = await reconcile(bad, ctx, logging.getLogger("test"), trigger="resync")
        assert outcome.error is not None
        await asyncio.gather(*ctx.background)

    asyncio.run(go())
    assert value(ctx.metrics, "llmop_reconcile_errors_total", trigger="resync") == 1
    assert value(ctx.metrics, "llmop_reconcile_in_flight") == 0


def test_the_deleted_event_handler_forgets_the_service() -> None:
    """kopf's DELETED event of an LLMService (no finalizer needed) drops its series."""
    import kopf

    from llm_operator.controller.context import CONTEXT_KEY
    from llm_operator.controller.handlers import _deleted, llmservice_gone

    ctx = OperatorContext(settings=Settings(), kube=StatusKube())  # type: ignore[arg-type]
    ctx.metrics.conditions(NS, NAME, [{"type": "Available", "status": "True"}])
    assert _deleted(type="DELETED") and not _deleted(type="MODIFIED")
    memo = kopf.Memo()
    memo[CONTEXT_KEY] = ctx
    asyncio.run(llmservice_gone(namespace=NS, name=NAME, memo=memo))
    assert f'llmservice="{NAME}"' not in scrape(ctx.metrics)

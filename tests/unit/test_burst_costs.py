"""The work per new service that a burst of creates multiplies (benchmarks/scale.py):
what kopf copies per event, what the first reconciliation reads, what the emulator parses.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from pathlib import Path
from typing import Any

import kopf
import pytest

from llm_operator.controller.context import OperatorContext
from llm_operator.controller.diffbase import SlimDiffBaseStorage
from llm_operator.controller.reconcile import reconcile
from llm_operator.settings import Settings
from llm_operator_sandbox import emulator


class NoCopy:
    """A value that must not be deep-copied (stands for a large status)."""

    def __deepcopy__(self, memo: Any) -> Any:
        raise AssertionError("the status was deep-copied")


def llmservice(status: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {
            "name": "llm", "namespace": "ml", "uid": "u-1", "resourceVersion": "7",
            "generation": 1, "creationTimestamp": "2026-11-23T00:00:00Z",
            "labels": {"team": "a"},
            "annotations": {"note": "kept",
                            "llmops.dev/last-handled-configuration": '{"spec": {}}',
                            "kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                 "gpus": {"product": "L4"}},
    }
    if status is not None:
        body["status"] = status
    return body


def stock() -> kopf.AnnotationsDiffBaseStorage:
    return kopf.AnnotationsDiffBaseStorage(prefix="llmops.dev",
                                           key="last-handled-configuration")


def slim() -> SlimDiffBaseStorage:
    return SlimDiffBaseStorage(prefix="llmops.dev", key="last-handled-configuration")


def test_diff_base_is_kopfs_essence_without_copying_the_status() -> None:
    status = {"conditions": [{"type": "Ready", "status": "True"}], "plan": {"tp": 1}}
    body = kopf.Body(llmservice(copy.deepcopy(status)))  # type: ignore[arg-type]
    assert slim().build(body=body) == stock().build(body=body)
    # Same essence, so the same stored annotation and the same diffs as kopf's own.
    assert "status" not in slim().build(body=body)

    heavy = kopf.Body(llmservice({"plan": NoCopy()}))  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="deep-copied"):
        stock().build(body=heavy)  # kopf copies the whole object first
    assert slim().build(body=heavy) == stock().build(body=body)


class RecordingKube:
    """Just enough of KubeClient for one reconciliation, recording every call."""

    def __init__(self, existing: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.existing = existing  # the children are there already (apply updates them)

    async def served_groups(self) -> set[str]:
        return {"apps", "policy", "leaderworkerset.x-k8s.io", "monitoring.coreos.com"}

    async def serves(self, api_version: str) -> bool:
        return True

    async def get(self, api_version: str, kind: str, namespace: str | None,
                  name: str) -> dict[str, Any] | None:
        self.calls.append(("get", kind))
        return None

    async def apply(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        self.calls.append(("apply", obj["kind"]))
        return obj, not self.existing

    async def post_event(self, obj: Any, **_: Any) -> None:
        self.calls.append(("event", _["reason"]))


def run_reconcile(body: dict[str, Any], existing: bool = False) -> list[tuple[str, str]]:
    kube = RecordingKube(existing)

    async def go() -> None:
        ctx = OperatorContext(settings=Settings(), kube=kube)  # type: ignore[arg-type]
        outcome = await reconcile(body, ctx, logging.getLogger("test"), created=True)
        assert outcome.error is None
        await asyncio.gather(*ctx.background)

    asyncio.run(go())
    return kube.calls


def test_first_pass_of_a_new_service_reads_no_child_it_does_not_want() -> None:
    calls = run_reconcile(llmservice())
    assert ("apply", "Deployment") in calls and ("apply", "Service") in calls
    # No GET at all: the children are applied blind, and those the plan does not want
    # (LeaderWorkerSet, PodMonitor, PodDisruptionBudget) cannot exist for a new uid.
    assert [c for c in calls if c[0] == "get"] == []


def test_a_retried_create_still_deletes_what_an_earlier_pass_left() -> None:
    # A create that failed once wrote its status: an earlier pass may have written a
    # child the plan no longer wants, so those are looked up (and deleted when owned).
    calls = run_reconcile(llmservice({"conditions": [{"type": "SpecValid",
                                                      "status": "True"}]}))
    assert {("get", "LeaderWorkerSet"), ("get", "PodDisruptionBudget")} <= set(calls)


def test_a_create_retried_after_its_status_write_failed_deletes_what_the_first_left() -> None:
    # The first attempt wrote the children (a PodDisruptionBudget for 2 replicas) and
    # failed on the status write; the user set replicas to 1 before the retry. No status,
    # but the children were there: the retry looks up the ones the plan no longer wants
    # (the churn under faults found the PDB left over).
    calls = run_reconcile(llmservice(), existing=True)
    assert {("get", "LeaderWorkerSet"), ("get", "PodDisruptionBudget")} <= set(calls)


def test_emulator_decodes_a_json_apply_body_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a: b"}}

    def no_yaml(*_: Any) -> Any:
        raise AssertionError("a JSON body went through the YAML parser")

    yaml_load = emulator.yaml.safe_load
    monkeypatch.setattr(emulator.yaml, "safe_load", no_yaml)
    assert emulator.apply_body(json.dumps(doc).encode()) == doc
    monkeypatch.setattr(emulator.yaml, "safe_load", yaml_load)
    assert emulator.apply_body(b"kind: Service\nmetadata:\n  name: x\n") == {
        "kind": "Service", "metadata": {"name": "x"}}
    assert emulator.apply_body(b"") is None


def scale_run(config: str, p99: float, load: float, rendered: int = 1000) -> dict[str, Any]:
    return {"started": f"2026-11-23T19:{int(load):02d}:00Z", "config": config, "n": 1000,
            "rate": None, "shards": 1, "operator_code": "abc", "rendered": rendered,
            "create_seconds": 1.0, "wall_seconds": 3.0, "p50": p99 / 2, "p99": p99,
            "max": p99, "mean": p99 / 2, "operator_peak_rss_mib": 100.0,
            "operator_cpu_seconds": 5.0, "operator_cpu_seconds_until_handled": 9.0,
            "emulator_cpu_seconds": 4.0, "load_average": load}


def test_scale_section_marks_the_goal_from_each_runs_own_figures(tmp_path: Any) -> None:
    from benchmarks import scale

    runs = [scale_run("before", 5.9, 2.5), scale_run("after", 1.8, 1.2),
            scale_run("after", 1.5, 9.0, rendered=990)]  # fast, but 10 never rendered
    for run in runs:
        scale.store(run, tmp_path)
    stored = scale.stored_runs(tmp_path)
    assert [r["p99"] for r in stored] == [1.8, 5.9, 1.5]  # oldest first
    assert "**Goal (p99 <= 2 s for a burst of 1,000, emulated API server): met** in 1 of 3" in (
        scale.goal_line(stored))
    summary = scale.summary(stored)
    assert "| after | 1 | 1,000 | burst | 2 | 1.50-1.80 s |" in summary
    assert "5.0-5.1 / 9.0-9.1 (2 runs) ms" in summary  # per rendered service
    assert summary.splitlines()[-1].endswith("| 0 of 1 |")
    assert "1 of 2" in summary
    assert not scale.goal_met(scale_run("x", 2.5, 1.0))
    assert scale.parse_config("old=/tmp/a:/tmp/b#2")[1:] == (
        Path("/tmp/a"), Path("/tmp/b"), 2)


def test_a_services_bookkeeping_waits_while_others_are_rendered() -> None:
    # Render first: in a burst, the status writes, Events and tuning step of one service
    # wait until no other service's workload is being rendered; alone, nothing waits.
    async def go() -> list[str]:
        ctx = OperatorContext(settings=Settings(), kube=None)  # type: ignore[arg-type]
        order: list[str] = []
        await asyncio.wait_for(ctx.after_renders(), 0.05)  # none in flight: at once

        async def render(name: str, seconds: float) -> None:
            with ctx.rendering():
                await asyncio.sleep(seconds)
            order.append(f"rendered {name}")

        async def bookkeeping() -> None:
            await ctx.after_renders()
            order.append("status written")

        await asyncio.gather(render("a", 0.1), render("b", 0.3), bookkeeping())
        # A render that starts within the quiet time after the others still comes first.
        tasks = [asyncio.ensure_future(render("c", 0.05))]
        await asyncio.sleep(0)
        waiter = asyncio.ensure_future(bookkeeping())
        await asyncio.sleep(0.06)
        tasks.append(asyncio.ensure_future(render("d", 0.05)))
        await asyncio.gather(waiter, *tasks)
        return order

    assert asyncio.run(go()) == ["rendered a", "rendered b", "status written",
                                 "rendered c", "rendered d", "status written"]

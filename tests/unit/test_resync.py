"""Which services the resync loop sets going again (controller/resync.py): only those
whose handling stalled, never one at steady state, never one kopf will retry itself, at
most a bounded number a round.

Bodies carry kopf's annotations as kopf writes them (its own diff-base and progress
storages, as configured by the operator), so "kopf's cycle is open" is read as kopf reads it.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import kopf
import pytest

from llm_operator.api.constants import PROGRESS_PREFIX
from llm_operator.controller.diffbase import SlimDiffBaseStorage
from llm_operator.controller.progress import GenerationProgressStorage
from llm_operator.controller.resync import Resync, ServiceView, resync_due, still_needing, view_of

PROGRESS = GenerationProgressStorage(prefix=PROGRESS_PREFIX)
DIFFBASE = SlimDiffBaseStorage(prefix=PROGRESS_PREFIX, key="last-handled-configuration")
NOW = datetime.datetime(2026, 11, 24, 1, 0, tzinfo=datetime.UTC)


def service(name: str = "s", *, generation: int = 2, observed: int | None = 2,
            handled_spec: dict[str, Any] | None = None,
            progress: dict[str, dict[str, Any]] | None = None, rv: str = "7",
            deleting: bool = False) -> dict[str, Any]:
    """An LLMService as the index holds it: ``handled_spec`` is the spec kopf recorded as
    handled (its diff base; None: never handled), ``progress`` kopf's open records."""
    spec = {"replicas": generation, "model": {"name": "m"}}
    body: dict[str, Any] = {
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": name, "namespace": "ns", "generation": generation,
                     "resourceVersion": rv, "annotations": {}},
        "spec": spec, "status": {} if observed is None else {"observedGeneration": observed}}
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-11-24T00:00:00Z"
    patch = kopf.Patch()
    if handled_spec is not None:
        handled = {**body, "spec": handled_spec}
        DIFFBASE.store(body=kopf.Body(body), patch=patch,
                       essence=DIFFBASE.build(body=kopf.Body(handled)))
    for key, record in (progress or {}).items():
        PROGRESS.store(key=key, record=record, body=kopf.Body(body), patch=patch)
    body["metadata"]["annotations"].update(
        {k: v for k, v in (patch.get("metadata") or {}).get("annotations", {}).items()
         if v is not None})
    return body


def view(body: dict[str, Any]) -> ServiceView | None:
    return view_of(("ns", body["metadata"]["name"]), body, PROGRESS, DIFFBASE)


def handled(body: dict[str, Any]) -> dict[str, Any]:
    return dict(body["spec"])


def test_steady_state_needs_nothing_and_costs_no_call() -> None:
    body = service()
    body = service(handled_spec=handled(body))
    v = view(body)
    assert v is not None and not v.needs_handling
    assert resync_due([v], {v.key: v.resource_version}, NOW.timestamp()) == []
    assert still_needing([v]) == {}  # nothing remembered either


def test_a_stalled_retry_is_touched_once_it_is_overdue_and_unchanged_for_a_round() -> None:
    """The churn's stall: reconcile failed temporarily and kopf's write of its retry was
    refused (a fault), so no event ever comes: kopf's cycle stays open."""
    delayed = (NOW - datetime.timedelta(seconds=60)).isoformat()
    retrying = {"started": delayed, "delayed": delayed, "purpose": "update", "retries": 1}
    body = service(observed=1, handled_spec={"replicas": 1, "model": {"name": "m"}},
                   progress={"reconcile": retrying})
    v = view(body)
    assert v is not None and v.kopf_open and v.lagging
    now = NOW.timestamp()
    # First seen this round: not yet (kopf may be on it).
    assert resync_due([v], {}, now) == []
    assert resync_due([v], still_needing([v]), now) == [(v.key, Resync.TOUCH)]
    # Written during the round (kopf, or anybody): somebody is on it.
    assert resync_due([v], {v.key: "6"}, now) == []
    # A retry kopf planned for later (or just now, within the grace): kopf's business.
    assert resync_due([v], still_needing([v]), v.retry_at - 1.0) == []  # type: ignore[operator]
    assert resync_due([v], still_needing([v]), v.retry_at + 5.0) == []  # type: ignore[operator]


def test_a_service_found_newer_on_the_server_waits_until_the_index_moves() -> None:
    """A standby's index is frozen (peering paused its watches): once a read found the
    service newer than the index shows, the loop leaves it until the index changes."""
    v = view(service(observed=1, handled_spec=None))
    assert v is not None and v.needs_handling
    now = NOW.timestamp()
    seen = still_needing([v])
    assert resync_due([v], seen, now, stale={v.key: v.resource_version}) == []
    assert resync_due([v], seen, now, stale={v.key: "6"}) == [(v.key, Resync.TOUCH)]


def test_a_spec_kopf_never_handled_is_touched_even_when_the_status_is_current() -> None:
    """kopf's patch failed on the first cycle of an update: no progress record, the diff
    base still the old spec; reconcile wrote the status, tuning's retry never comes."""
    body = service(handled_spec={"replicas": 1, "model": {"name": "m"}})
    v = view(body)
    assert v is not None and v.kopf_open and not v.lagging
    assert resync_due([v], still_needing([v]), NOW.timestamp()) == [(v.key, Resync.TOUCH)]
    new = view(service(observed=None))  # created, never handled: kopf owes it a create
    assert new is not None and new.kopf_open


def test_a_status_behind_with_kopf_done_is_reconciled_here() -> None:
    """kopf recorded the spec as handled but the status is behind (the lost update of an
    older operator, whose progress records had no generation)."""
    body = service(observed=1)
    body = service(observed=1, handled_spec=handled(body))
    v = view(body)
    assert v is not None and v.lagging and not v.kopf_open
    assert resync_due([v], still_needing([v]), NOW.timestamp()) == [(v.key, Resync.RECONCILE)]


def test_deleting_services_are_left_alone() -> None:
    assert view(service(observed=1, deleting=True)) is None


@pytest.mark.parametrize("limit", [1, 5])
def test_at_most_limit_a_round_in_order(limit: int) -> None:
    views = [ServiceView(("ns", f"s{i}"), "1", lagging=True, kopf_open=True)
             for i in range(10)]
    due = resync_due(views, still_needing(views), NOW.timestamp(), limit=limit)
    assert [k for k, _ in due] == [("ns", f"s{i}") for i in range(limit)]


def test_kopfs_progress_record_is_read_as_kopf_wrote_it() -> None:
    delayed = "2026-11-24T00:59:00.000000+00:00"
    body = service(progress={"tuning": {"started": delayed, "delayed": delayed, "retries": 2}})
    raw = json.loads(body["metadata"]["annotations"][f"{PROGRESS_PREFIX}/tuning"])
    assert raw["retries"] == 2 and raw["generation"] == 2
    v = view(body)
    assert v is not None and v.retry_at == datetime.datetime.fromisoformat(delayed).timestamp()

"""The I/O edge of a pod stuck in ContainerCreating: its Events are listed by field
selector, only its own (uid) count, and a loop looks again while it stays stuck (its
status does not change, so no pod event would come)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from llm_operator.controller import pods
from llm_operator.controller.context import OperatorContext
from llm_operator.health.podscheduling import PodScheduling
from llm_operator.settings import Settings

pytestmark = pytest.mark.unit
LOG = logging.getLogger("test")


class EventsKube:
    """Answers Event lists as the API server would, recording each query."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.queries: list[tuple[str, str | None, str]] = []

    async def list(self, api_version: str, kind: str, namespace: str | None,
                   label_selector: str = "", field_selector: str = "") -> list[dict[str, Any]]:
        self.queries.append((kind, namespace, field_selector))
        return self.events


def stuck(name: str, uid: str = "") -> PodScheduling:
    return PodScheduling(name, False, creating=True, uid=uid)


def event(pod: str, uid: str, reason: str = "FailedMount") -> dict[str, Any]:
    return {"involvedObject": {"kind": "Pod", "name": pod, "uid": uid}, "reason": reason,
            "type": "Warning", "message": "MountVolume.SetUp failed"}


def test_only_a_stuck_pods_own_events_are_read() -> None:
    kube = EventsKube([event("a", "uid-a"), event("a", "uid-old"), event("b", "uid-b")])
    ctx = OperatorContext(settings=Settings(), kube=kube)  # type: ignore[arg-type]
    found = asyncio.run(pods.pod_events(
        ctx, "ml", [stuck("a", "uid-a"), PodScheduling("c", False)]))
    assert kube.queries == [("Event", "ml", "involvedObject.kind=Pod,involvedObject.name=a")]
    assert found == {"a": [event("a", "uid-a")]}  # not the earlier pod of that name


def test_the_loop_looks_again_at_services_with_a_stuck_pod(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str]] = []

    async def changed(ctx: Any, key: tuple[str, str], *_: Any) -> None:
        seen.append(key)
        if len(seen) == 1:
            raise RuntimeError("one failed round is logged, not fatal")

    monkeypatch.setattr(pods, "pods_changed", changed)
    monkeypatch.setattr(pods, "CREATING_RECHECK_SECONDS", 0.01)
    index = {("ml", "stuck"): [stuck("stuck-1")],
             ("ml", "running"): [PodScheduling("running-1", False)]}

    async def scenario() -> None:
        task = asyncio.create_task(pods.creating_pods_loop(None, {}, index, LOG))  # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        task.cancel()

    asyncio.run(scenario())
    assert len(seen) >= 2 and set(seen) == {("ml", "stuck")}


def test_a_restarted_pods_events_are_read_until_it_starts() -> None:
    """A container restarted and not started since: its Events may hold a probe kill."""
    from llm_operator.health.podfailures import Restarted

    kube = EventsKube([event("r", "uid-r", reason="Killing")])
    ctx = OperatorContext(settings=Settings(), kube=kube)  # type: ignore[arg-type]
    restarted = PodScheduling("r", False, uid="uid-r", restarted=(Restarted("vllm", 1, None),))
    found = asyncio.run(pods.pod_events(ctx, "ml", [restarted, PodScheduling("s", False)]))
    assert [q[2] for q in kube.queries] == ["involvedObject.kind=Pod,involvedObject.name=r"]
    assert list(found) == ["r"]

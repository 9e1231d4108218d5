"""Whether this pod is the active one under kopf peering (controller/peering.py): kopf's
rule, read from its peering objects, which replaced the per-service kopf daemon (and the
finalizer kopf puts on every resource a daemon matches)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import kopf

from llm_operator.controller import handlers
from llm_operator.controller.peering import PeeringIdentity, outranked, peering_active

NOW = datetime.datetime(2026, 12, 5, 12, 0, tzinfo=datetime.UTC)


def peer(priority: int, seconds_ago: float, lifetime: int = 60) -> dict[str, Any]:
    seen = NOW - datetime.timedelta(seconds=seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


def test_a_live_peer_of_higher_priority_outranks() -> None:
    assert outranked({"a": peer(5, 10), "me": peer(3, 1)}, 3, NOW)


def test_a_dead_or_lower_peer_does_not() -> None:
    assert not outranked({"a": peer(5, 61), "b": peer(2, 1), "me": peer(3, 1)}, 3, NOW)
    assert not outranked(None, 3, NOW)
    assert not outranked({"bad": "x", "worse": {"priority": "high"}}, 3, NOW)


def test_kopf_timestamps_with_z_parse() -> None:
    assert outranked({"a": {"priority": 9, "lifetime": 60,
                            "lastseen": "2026-12-05T11:59:30Z"}}, 3, NOW)


class FakeKube:
    def __init__(self, objects: dict[tuple[str, str | None, str], dict[str, Any]]) -> None:
        self.objects = objects
        self.asked: list[tuple[str, str | None, str]] = []

    async def get(self, api_version: str, kind: str, namespace: str | None,
                  name: str) -> dict[str, Any] | None:
        self.asked.append((kind, namespace, name))
        return self.objects.get((kind, namespace, name))


def test_standalone_is_always_active_and_reads_nothing() -> None:
    kube = FakeKube({})
    assert asyncio.run(peering_active(kube, None, NOW))  # type: ignore[arg-type]
    assert kube.asked == []


def test_cluster_wide_reads_the_cluster_peering() -> None:
    kube = FakeKube({("ClusterKopfPeering", None, "llm-operator"):
                     {"status": {"other": peer(9, 5)}}})
    ident = PeeringIdentity("llm-operator", 3)
    assert not asyncio.run(peering_active(kube, ident, NOW))  # type: ignore[arg-type]
    assert asyncio.run(peering_active(  # type: ignore[arg-type]
        kube, PeeringIdentity("llm-operator", 10), NOW))


def test_namespaced_pauses_when_any_namespace_says_so() -> None:
    kube = FakeKube({("KopfPeering", "b", "p"): {"status": {"other": peer(9, 5)}}})
    ident = PeeringIdentity("p", 3, ("a", "b"))
    assert not asyncio.run(peering_active(kube, ident, NOW))  # type: ignore[arg-type]
    assert kube.asked == [("KopfPeering", "a", "p"), ("KopfPeering", "b", "p")]


def test_no_handler_of_the_operator_makes_kopf_add_a_finalizer() -> None:
    """kopf adds its finalizer for a daemon, a timer or a non-optional delete handler;
    the operator registers none, so no LLMService ever waits for the operator."""
    assert handlers.INDEX  # importing handlers registered everything
    registry = kopf.get_default_registry()
    spawning = [h for h in registry._spawning.get_all_handlers()]
    changing = [h for h in registry._changing.get_all_handlers()
                if getattr(h, "requires_finalizer", None)]
    assert spawning == [] and changing == []

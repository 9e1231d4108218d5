"""Whether this operator pod is the active one under kopf peering, read from kopf's own
peering objects: what the adaptation loop asks before it acts, instead of a kopf daemon.

A kopf daemon (or timer) per LLMService would tell the loop the same (kopf stops daemons
while peering pauses the operator), but kopf puts its finalizer on every resource a daemon
matches, and a finalizer left by an uninstalled or scaled-down operator blocks the
deletion of the LLMService, and so of its namespace, forever. kopf's maintainers keep
that finalizer on purpose (it is how kopf promises to stop a daemon), so the operator
runs no daemon.

kopf's rule (``kopf._core.engines.peering.process_peering_event``): each peer writes its
priority, lifetime and last-seen time under the peering object's ``status``; a peer is
dead once its last-seen time is older than its lifetime; an operator pauses while a live
peer other than itself has a higher priority (or, never the case here, the same one:
``llm-operator run --peering`` draws a random priority per pod). With several watched
namespaces, kopf keeps one ``KopfPeering`` per namespace and pauses when any of them says
so; cluster-wide, one ``ClusterKopfPeering``. Without peering (``--standalone``, the
chart's default) the pod is always active.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .kube import KubeClient

PEERING_API_VERSION = "kopf.dev/v1"
MEMO_KEY = "peering"


@dataclass(frozen=True)
class PeeringIdentity:
    """The peering object's name, this pod's priority and the watched namespaces (empty:
    cluster-wide, one ClusterKopfPeering)."""

    name: str
    priority: int
    namespaces: tuple[str, ...] = ()


def _parse(value: object) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def outranked(status: Mapping[str, Any] | None, priority: int,
              now: datetime.datetime) -> bool:
    """Whether a live peer in a peering object's ``status`` has a higher priority than
    ``priority`` (kopf's reason to pause). An entry kopf could not parse counts as live,
    as kopf counts one without ``lastseen``."""
    for info in (status or {}).values():
        if not isinstance(info, Mapping):
            continue
        try:
            peer_priority = int(info.get("priority", 0))
            lifetime = float(info.get("lifetime", 60))
        except (TypeError, ValueError):
            continue
        seen = _parse(info.get("lastseen")) or now
        if seen + datetime.timedelta(seconds=lifetime) <= now:
            continue  # dead: kopf ignores it (and cleans it up)
        if peer_priority > priority:
            return True
    return False


async def peering_active(kube: KubeClient, peering: PeeringIdentity | None,
                         now: datetime.datetime | None = None) -> bool:
    """Whether this pod acts now: always without peering; with it, when no peering object
    of the watched scope names a live peer of a higher priority. A peering object that is
    missing (kopf has not written it yet) does not pause; an API error propagates (the
    caller holds for this round)."""
    if peering is None:
        return True
    now = now or datetime.datetime.now(datetime.UTC)
    scopes: Sequence[str | None] = peering.namespaces or (None,)
    for namespace in scopes:
        kind = "KopfPeering" if namespace else "ClusterKopfPeering"
        body = await kube.get(PEERING_API_VERSION, kind, namespace, peering.name)
        if body is not None and outranked(body.get("status"), peering.priority, now):
            return False
    return True

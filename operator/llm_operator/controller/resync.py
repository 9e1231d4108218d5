"""The resync: services whose handling stalled, found in the index and set going again.

kopf runs a handler again only on an event of its object. When kopf's own write fails
(its annotations: the progress of a handler that failed temporarily, or the "touch" that
wakes it once a retry delay is over; an API fault, the API server unreachable for longer
than kopf retries), kopf logs the error and waits for the next event. A retry it had
planned never comes, and if nothing else writes the object (the faults are over, the
user is done), the service stays as it was: its status behind its generation, or its
tuning step never run again. (The other way a service stayed behind, a spec change kopf
recorded as handled without rendering it, is fixed at its root: :mod:`.progress`.)

Every :data:`RESYNC_INTERVAL_SECONDS`, :func:`resync_due` looks at each LLMService's
latest body (the ``llmservices_by_name`` index: no API call) and picks those that

- need handling: kopf has an open cycle (a progress record, or a spec it has not
  recorded as handled), or ``status.observedGeneration`` is behind ``metadata.generation``;
- have not changed since the previous round (same ``resourceVersion``: nobody, kopf
  included, wrote them for a whole interval);
- are not waiting for a retry kopf planned (``delayed`` over by :data:`RESYNC_GRACE_SECONDS`).

For each (at most :data:`RESYNC_MAX_PER_ROUND` a round, the longest-known first), the
loop either **touches** it (kopf's own dummy annotation; the event makes kopf run the
handlers it still owes, with its bookkeeping) when kopf's cycle is open, or, when kopf
considers it done but the status is behind, runs the reconciliation and the tuning step
itself (as the tuning step and the adaptation loop do), after reading it afresh.

The loop acts only on what the index shows: before it touches or reconciles, it reads the
service and goes on only if the server's ``resourceVersion`` is the index's. A newer one
means somebody wrote it and this pod's watch has not caught up; in a standby (peering
paused it, so kopf stopped its watches and its index froze) it always is. Such a service
is left, and not read again, until the index moves: a standby never touches, reconciles
or keeps reading services the active operator handles.

At steady state no service needs handling: the loop makes no API call. A loop, not a kopf
timer: kopf puts its finalizer on every resource a timer matches.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from ..adaptation.policy import ServiceKey
from ..api.constants import API_VERSION, KIND
from ..api.timestamps import parse_rfc3339
from .context import OperatorContext, clock
from .reconcile import reconcile_and_write
from .tuning import tuning_step

RESYNC_INTERVAL_SECONDS = 15.0
RESYNC_GRACE_SECONDS = 15.0
RESYNC_MAX_PER_ROUND = 20
# The changing handlers whose progress kopf keeps (handlers.py); a record of any of them
# means kopf's cycle on the object is not finished.
CHANGING_HANDLERS = ("reconcile", "tuning")


class Resync(enum.Enum):
    """What the loop does for a stalled service."""

    TOUCH = "touch"  # kopf's cycle is open: an event makes kopf finish it
    RECONCILE = "reconcile"  # kopf is done, the status is behind: reconcile here


@dataclass(frozen=True)
class ServiceView:
    """What the resync needs of one LLMService's latest body (see :func:`view_of`)."""

    key: ServiceKey
    resource_version: str
    lagging: bool  # status.observedGeneration is not metadata.generation
    kopf_open: bool  # kopf has not finished handling it
    retry_at: float | None = None  # the latest retry kopf planned (epoch seconds)

    @property
    def needs_handling(self) -> bool:
        return self.lagging or self.kopf_open


def _epoch(value: Any) -> float | None:
    try:
        return parse_rfc3339(value) if isinstance(value, str) else None
    except ValueError:
        return None


def view_of(key: ServiceKey, body: Mapping[str, Any], progress: kopf.ProgressStorage,
            diffbase: kopf.DiffBaseStorage,
            handlers: Iterable[str] = CHANGING_HANDLERS) -> ServiceView | None:
    """The view of ``body`` (None: being deleted, nothing to resync), read with kopf's
    own storages (``settings.persistence``), as kopf reads it to decide what to run."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    wrapped = kopf.Body(dict(body))  # type: ignore[arg-type]
    status = body.get("status") or {}
    lagging = status.get("observedGeneration") != meta.get("generation")
    handled = diffbase.fetch(body=wrapped)
    kopf_open = handled is None or (
        progress.clear(essence=handled) != progress.clear(essence=diffbase.build(body=wrapped)))
    retry_at: float | None = None
    for handler in handlers:
        record = progress.fetch(key=kopf.HandlerId(handler), body=wrapped)
        if record is None:
            continue
        kopf_open = True
        delayed = _epoch(record.get("delayed"))
        if delayed is not None:
            retry_at = delayed if retry_at is None else max(retry_at, delayed)
    return ServiceView(key, str(meta.get("resourceVersion") or ""), lagging, kopf_open,
                       retry_at)


def resync_due(
    views: Sequence[ServiceView], previous: Mapping[ServiceKey, str], now: float, *,
    stale: Mapping[ServiceKey, str] | None = None,
    grace: float = RESYNC_GRACE_SECONDS, limit: int = RESYNC_MAX_PER_ROUND,
) -> list[tuple[ServiceKey, Resync]]:
    """The services to resync this round, and how (see the module docstring).

    ``previous``: each service that needed handling in the previous round, with the
    ``resourceVersion`` it had then. ``stale``: services found changed on the API server
    while the index still shows this ``resourceVersion`` (this pod's watch is behind: a
    standby that peering paused); left alone until the index moves. At most ``limit``, in
    the order of ``views``."""
    stale = stale or {}
    due: list[tuple[ServiceKey, Resync]] = []
    for view in views:
        if not view.needs_handling or previous.get(view.key) != view.resource_version:
            continue  # fine, or it changed during the last interval: somebody is on it
        if stale.get(view.key) == view.resource_version:
            continue  # already found newer on the server: this pod's index is behind
        if view.retry_at is not None and view.retry_at + grace > now:
            continue  # kopf will retry it itself
        due.append((view.key, Resync.TOUCH if view.kopf_open else Resync.RECONCILE))
        if len(due) >= limit:
            break
    return due


def still_needing(views: Iterable[ServiceView]) -> dict[ServiceKey, str]:
    """What to remember for the next round: the services that need handling now."""
    return {v.key: v.resource_version for v in views if v.needs_handling}


async def resync_loop(ctx: OperatorContext, services: Mapping[ServiceKey, Any],
                      settings: kopf.OperatorSettings, logger: Any) -> None:
    """Every :data:`RESYNC_INTERVAL_SECONDS`, resync the stalled services (module
    docstring). Never raises: a resync that fails is logged and tried again later."""
    previous: dict[ServiceKey, str] = {}
    stale: dict[ServiceKey, str] = {}
    while True:
        await asyncio.sleep(RESYNC_INTERVAL_SECONDS)
        views: list[ServiceView] = []
        for key in sorted(services):
            found = list(services.get(key, []))
            view = view_of(key, found[-1], settings.persistence.progress_storage,
                           settings.persistence.diffbase_storage) if found else None
            if view is not None:
                views.append(view)
        due = resync_due(views, previous, clock(), stale=stale)
        previous = still_needing(views)
        stale = {k: v for k, v in stale.items() if previous.get(k) == v}
        for key, action in due:
            try:
                if not await _resync(ctx, key, previous[key], action, settings, logger):
                    stale[key] = previous[key]
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one service's failure must not stop the others
                logger.warning(f"Resync of {key[0]}/{key[1]} failed: {exc!r}")


async def _resync(ctx: OperatorContext, key: ServiceKey, seen: str, action: Resync,
                  settings: kopf.OperatorSettings, logger: Any) -> bool:
    """Resync one service; False when the server has a newer version than ``seen`` (the
    index's): somebody wrote it since, and this pod's watch has not caught up. That is
    how a standby looks (peering paused it: kopf stops its watches, its index freezes):
    it must not act on what it last saw, and the active operator is on the service."""
    namespace, name = key
    fresh = await ctx.kube.get(API_VERSION, KIND, namespace, name)
    if fresh is None or (fresh.get("metadata") or {}).get("deletionTimestamp"):
        return True
    if str((fresh.get("metadata") or {}).get("resourceVersion") or "") != seen:
        return False
    if action is Resync.TOUCH:
        patch = kopf.Patch()
        settings.persistence.progress_storage.touch(
            body=kopf.Body(fresh),  # type: ignore[arg-type]
            patch=patch, value=datetime.datetime.now(datetime.UTC).isoformat())
        if patch:
            logger.info(f"Resync: kopf's handling of {namespace}/{name} stalled (no event "
                        f"since its last retry was due): touched it")
            await ctx.kube.merge_patch(API_VERSION, KIND, namespace, name, dict(patch))
        return True
    meta, status = fresh.get("metadata") or {}, fresh.get("status") or {}
    if status.get("observedGeneration") == meta.get("generation"):
        return True  # written meanwhile
    logger.info(f"Resync: the status of {namespace}/{name} is behind generation "
                f"{meta.get('generation')} and kopf has nothing left to run: reconciling")
    outcome = await reconcile_and_write(ctx, fresh, logger, trigger="resync")
    await tuning_step(ctx, namespace, name, logger)
    if outcome.error is not None:
        logger.warning(f"Resync of {namespace}/{name}: {outcome.error}")
    return True

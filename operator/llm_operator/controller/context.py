"""What the operator's handlers share, typed: built once at startup, kept in kopf's memo.

Nothing is built at import time (no module-level clients); :func:`operator_context`
is the one way a handler reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from ..adaptation.evidence import ServiceKey
from ..settings import Settings
from .kube import KubeClient
from .metrics import OperatorMetrics
from .peering import PeeringIdentity

CONTEXT_KEY = "ctx"
# Render first (see OperatorContext.after_renders): the work that follows a service's
# workload waits while other services' workloads are being rendered, at most this long.
RENDER_PRIORITY_MAX_WAIT_SECONDS = 30.0
# Once none is in flight, this much longer: creations kopf has seen but not yet started
# (it batches each object's events for 0.1 s) are not counted yet.
RENDER_QUIET_SECONDS = 0.2


@dataclass
class OperatorContext:
    """Settings, the API client, the operator's metrics and its background work.

    ``tuning_locks``: one lock per service, so that a service's and its Job's events never
    act on the same tuning run at once. ``budget_lock``: held from a spare run's budget
    check to its Job's creation, so that two services' runs never both take the budget's
    last GPUs. ``adaptation_task``: the online adaptation loop (None when
    ``LLMOP_PROMETHEUS_URL`` is unset); ``peering``: the kopf peering this pod takes part in
    (None: standalone), which the loop reads before it acts (:mod:`.peering`).
    """

    settings: Settings
    kube: KubeClient
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    background: set[asyncio.Task[None]] = field(default_factory=set)
    tuning_locks: dict[ServiceKey, asyncio.Lock] = field(default_factory=dict)
    budget_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    adaptation_task: asyncio.Task[None] | None = None
    tuning_progress_task: asyncio.Task[None] | None = None
    resync_task: asyncio.Task[None] | None = None
    creating_pods_task: asyncio.Task[None] | None = None
    peering: PeeringIdentity | None = None
    retries: dict[Hashable, asyncio.Task[None]] = field(default_factory=dict)
    renders: int = 0
    _quiet: asyncio.Event | None = None

    @contextlib.contextmanager
    def rendering(self) -> Iterator[None]:
        """Count one reconciliation while it plans, renders and writes the children."""
        self.renders += 1
        if self._quiet is not None:
            self._quiet.clear()
        try:
            yield
        finally:
            self.renders -= 1
            if self.renders == 0 and self._quiet is not None:
                self._quiet.set()

    async def after_renders(self) -> None:
        """Return once no reconciliation renders (at once when none does; else when none
        has for :data:`RENDER_QUIET_SECONDS`, or after
        :data:`RENDER_PRIORITY_MAX_WAIT_SECONDS` at most).

        Render first: in a burst of new services, the work that follows a workload
        (status writes, Events, the tuning step) waits here, so that every service's
        Deployment is written before the bookkeeping of the others, instead of each
        waiting for a share of all of it (benchmarks/RESULTS.md, "Scale", "What was
        profiled and changed").
        """
        if self.renders == 0:
            return
        if self._quiet is None:
            self._quiet = asyncio.Event()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RENDER_PRIORITY_MAX_WAIT_SECONDS
        while loop.time() < deadline:
            if self.renders == 0:
                await asyncio.sleep(RENDER_QUIET_SECONDS)
                if self.renders == 0:
                    return
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), deadline - loop.time())

    def post_event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        """Post an Event in the background (a notice must not slow the reconciliation),
        after the renders in flight."""
        async def post() -> None:
            await self.after_renders()
            await self.kube.post_event(obj, type=type, reason=reason, message=message)

        task = asyncio.create_task(post())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def retry_in_background(self, key: Hashable, step: Callable[[], Awaitable[None]],
                            delays: Sequence[float], is_fault: Callable[[BaseException], bool],
                            logger: Any) -> None:
        """Run ``step`` again after each of ``delays`` until it succeeds, for an event
        handler whose step failed on an API fault (kopf retries change handlers, never
        event handlers: without this their result is lost until the next event). One
        retry task per ``key``: a step that reads the current state needs no second one.
        An error that is not a fault (``is_fault``) ends the retries, logged."""
        if key in self.retries:
            return

        async def retry() -> None:
            try:
                for attempt, delay in enumerate(delays, start=1):
                    await asyncio.sleep(delay)
                    try:
                        await step()
                        return
                    except Exception as exc:  # noqa: BLE001 - logged; the loop decides
                        if not is_fault(exc):
                            logger.error(f"Retry {attempt} of {key} failed, not retried: "
                                         f"{exc!r}")
                            return
                        logger.warning(f"Retry {attempt} of {len(delays)} of {key} failed: "
                                       f"{exc}")
                logger.error(f"Gave up on {key} after {len(delays)} retries")
            finally:
                self.retries.pop(key, None)

        task = asyncio.create_task(retry())
        self.retries[key] = task
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def tuning_lock(self, key: ServiceKey) -> asyncio.Lock:
        """The lock of one service's tuning steps."""
        return self.tuning_locks.setdefault(key, asyncio.Lock())


def operator_context(memo: Any) -> OperatorContext:
    """The context from kopf's ``memo``; a temporary error until startup has built it."""
    ctx = memo.get(CONTEXT_KEY)
    if not isinstance(ctx, OperatorContext):
        raise kopf.TemporaryError("the operator is not initialised yet", delay=1)
    return ctx


def clock() -> float:
    """The clock, read at the I/O edge only: pure deciders receive it."""
    return time.time()

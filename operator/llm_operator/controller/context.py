"""What the operator's handlers share, typed: built once at startup, kept in kopf's memo.

Nothing is built at import time (no module-level clients); :func:`operator_context`
is the one way a handler reaches it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from ..adaptation.policy import ServiceKey
from ..settings import Settings
from .kube import KubeClient
from .metrics import OperatorMetrics

CONTEXT_KEY = "ctx"


@dataclass
class OperatorContext:
    """Settings, the API client, the operator's metrics and its background work.

    ``tuning_locks``: one lock per service, so that a service's and its Job's events never
    act on the same tuning run at once. ``adaptation_task``: the online adaptation loop
    (None when ``LLMOP_PROMETHEUS_URL`` is unset); ``present``: the services this pod
    handles now (kept by a kopf daemon per service, which kopf stops on deletion and when
    peering pauses this pod), the only ones the loop acts on.
    """

    settings: Settings
    kube: KubeClient
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    background: set[asyncio.Task[None]] = field(default_factory=set)
    tuning_locks: dict[ServiceKey, asyncio.Lock] = field(default_factory=dict)
    adaptation_task: asyncio.Task[None] | None = None
    tuning_progress_task: asyncio.Task[None] | None = None
    resync_task: asyncio.Task[None] | None = None
    present: set[ServiceKey] = field(default_factory=set)

    def post_event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        """Post an Event in the background (a notice must not slow the reconciliation)."""
        task = asyncio.create_task(self.kube.post_event(obj, type=type, reason=reason,
                                                        message=message))
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

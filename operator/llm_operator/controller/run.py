"""Run the operator (``llm-operator run``): kopf's loop with every handler registered."""

from __future__ import annotations

import asyncio
import gc
import random

import kopf

from ..settings import load_settings
from . import handlers as _handlers  # noqa: F401  importing registers the kopf handlers
from .peering import MEMO_KEY as PEERING_MEMO_KEY
from .peering import PeeringIdentity

# Python's cyclic garbage collector, tuned for an operator that holds every service it
# watches: with the default thresholds (700, 10, 10) a burst of new services runs full
# collections often, each walking the whole heap, and the heap only grows while services
# arrive. Young collections every 50,000 allocations and a full one after 50 of the
# middle generation's (still only when the heap grew by a quarter, as CPython requires)
# trade some peak memory for less CPU per service (the figures: docs/production/scale.md,
# "Memory and Python's garbage collector", from benchmarks/RESULTS.md, "Scale"). Memory
# is still freed as before: most objects by reference counting at once, cycles at the
# next collection.
GC_THRESHOLDS = (50_000, 20, 50)


def tune_garbage_collector() -> None:
    """Freeze what start-up allocated (modules, classes: never garbage; no collection
    walks them again) and set :data:`GC_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run_operator(namespaces: list[str], standalone: bool, peering: str | None = None,
                 liveness: str | None = None) -> int:
    """Run the operator until interrupted (``llm-operator run``); returns the exit code.

    Watches ``namespaces`` (or ``LLMOP_NAMESPACES``; none: the whole cluster). The
    liveness endpoint listens on ``LLMOP_HEALTH_PORT`` (``/healthz``; 0 turns it off).
    """
    settings = load_settings()
    watched = list(namespaces) or list(settings.namespaces)
    kopf.configure(verbose=False, log_format=kopf.LogFormat.PLAIN)
    port = settings.health_port
    if liveness is None and port:
        liveness = f"http://0.0.0.0:{port}/healthz"
    memo = kopf.Memo(settings=settings)  # the context is built in operator_startup
    tune_garbage_collector()
    # With peering, every pod needs its own priority: with equal priorities kopf lets two
    # operators act at once. A random one makes one pod active and the others standby.
    priority = random.randint(1, 2**31 - 1) if peering else 0
    if peering:
        # The adaptation loop reads kopf's peering objects with it (.peering).
        memo[PEERING_MEMO_KEY] = PeeringIdentity(peering, priority, tuple(watched))
    # kopf's default lifecycle ("asap") runs one changing handler per processing cycle and
    # stores the progress of the others in annotations in between: with several handlers
    # on one object (reconcile, tuning) every create, update and resume would cost extra
    # writes of the LLMService, and a restarted operator would no longer write nothing
    # for an unchanged service. All at once: they run in one cycle, in registration order
    # (reconcile first), and a handler that failed is retried alone.
    asyncio.run(kopf.operator(
        lifecycle=kopf.lifecycles.all_at_once,
        clusterwide=not watched,
        namespaces=watched,
        standalone=standalone and not peering,
        peering_name=peering,
        priority=priority,
        liveness_endpoint=liveness,
        memo=memo,
    ))
    return 0

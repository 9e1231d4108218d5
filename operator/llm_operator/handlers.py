"""The kopf handlers: thin. Each parses what kopf hands over and calls one function.

- ``reconcile`` (create, update, resume: one pinned id): parse, plan, render, apply the
  children, write the status once if it changed. A spec that cannot be served sets
  ``SpecValid=False`` with the message and raises :class:`kopf.PermanentError` (kopf
  does not retry it; the next edit of the spec runs the handler again).
- ``cleanup`` (delete): deletes the children it owns, then kopf removes the finalizer.
- ``workload-status`` (events of the Deployments and LeaderWorkerSets the operator
  manages): moves Progressing, Available and Ready as the workload's status changes, and
  re-creates a workload somebody deleted.

kopf's bookkeeping lives under ``llmops.dev`` (finalizer ``llmops.dev/finalizer``,
progress and last-handled-configuration annotations ``llmops.dev/...``), configured in
the startup handler, which also builds the settings and the API client into ``memo``
(nothing is built at import time).

Status writers (these handlers, the tuning step, the adaptation loop) each own some keys
and some conditions of one ``status``; every write goes through :func:`write_status`,
which rebases the writer's patch onto the status stored now and sends it with the
``resourceVersion`` as a precondition, so that no writer undoes another's conditions.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from . import status as st
from .constants import (
    FINALIZER,
    GROUP,
    KIND,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PLURAL,
    PROGRESS_PREFIX,
    VERSION,
)
from .errors import SpecError, SpecErrors
from .kube import (
    MONITORING_GROUP,
    Action,
    ConflictError,
    KubeClient,
    MissingAPIError,
    apply_children,
    delete_children,
    owner_name,
)
from .metrics import metrics_of
from .models import parse_llmservice
from .planning import Plan, make_plan
from .rendering import LWS_API_VERSION, LWS_KIND, LWS_NAME_SUFFIX, render_all
from .settings import Settings

WORKLOAD_KINDS = {"Deployment", LWS_KIND}
CONFLICT_RETRY_SECONDS = 1
MISSING_API_RETRY_SECONDS = 60


@dataclass
class OperatorContext:
    """What the handlers share: built once at startup, kept in kopf's ``memo``."""

    settings: Settings
    kube: KubeClient
    background: set[asyncio.Task[None]] = field(default_factory=set)

    def post_event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        """Post an Event in the background (a notice must not slow the reconciliation)."""
        task = asyncio.create_task(self.kube.post_event(obj, type=type, reason=reason,
                                                        message=message))
        self.background.add(task)
        task.add_done_callback(self.background.discard)


def _ctx(memo: Any) -> OperatorContext:
    ctx = memo.get("ctx")
    if not isinstance(ctx, OperatorContext):
        raise kopf.TemporaryError("the operator is not initialised yet", delay=1)
    return ctx


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- startup
@kopf.on.startup()
async def operator_startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """kopf settings (bookkeeping under llmops.dev), our settings and the API client."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=PROGRESS_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PROGRESS_PREFIX, key="last-handled-configuration")
    # kopf's own Events only for warnings and errors (a failing handler); the milestones
    # (Planned, DeploymentCreated, ...) are posted by the handlers themselves.
    settings.posting.level = logging.WARNING
    # A permanent error stays permanent; temporary ones back off (kopf's default caps).
    settings.execution.max_workers = 20
    if "ctx" not in memo:
        own = memo.get("settings")
        memo["ctx"] = OperatorContext(settings=own if isinstance(own, Settings) else Settings(),
                                      kube=KubeClient.from_environment())


@kopf.on.cleanup()
async def operator_cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Release the API client's connections."""
    ctx = memo.get("ctx")
    if isinstance(ctx, OperatorContext):
        await ctx.kube.close()


# --------------------------------------------------------------------------- index
@kopf.index(GROUP, VERSION, PLURAL)
def llmservices_by_name(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """Each LLMService's latest body, so workload events need no API call to find it."""
    return {(namespace or "default", name): dict(body)}


# --------------------------------------------------------------------------- reconcile
@dataclass
class Outcome:
    """What one pass decided: the status patch and the error to raise (if any)."""

    status_patch: dict[str, Any]
    error: Exception | None = None


async def reconcile(
    body: Mapping[str, Any], ctx: OperatorContext, logger: Any, *, created: bool = False
) -> Outcome:
    """Parse, plan, render, apply, and compute the status of one LLMService
    (``created``: kopf saw it appear, so its children are most likely absent).

    Returns the status patch (empty when nothing changed) and, for a spec that cannot be
    served or a cluster that lacks a kind, the kopf error to raise after writing it.
    """
    meta = body.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace") or "default")
    generation = meta.get("generation")
    current = dict(body.get("status") or {})
    now = _now()
    try:
        svc = parse_llmservice(body)
        plan = make_plan(svc.spec)
        monitor = None
        if ctx.settings.pod_monitor == "auto":
            monitor = MONITORING_GROUP in await ctx.kube.served_groups()
        desired = render_all(svc, plan, ctx.settings, pod_monitor=monitor,
                             overrides=st.engine_overrides(current))
    except (SpecError, SpecErrors) as exc:
        errors = exc.errors if isinstance(exc, SpecErrors) else [exc]
        new = st.build_status(current, name=name, namespace=namespace, generation=generation,
                              now=now, errors=errors)
        known = st.get_condition(current.get("conditions") or [], st.ConditionType.SPEC_VALID)
        if not known or known.get("status") != "False" or (
                known.get("observedGeneration") != generation):
            # Once per generation: a resume after a restart does not repeat it.
            ctx.post_event(body, "Warning", "InvalidSpec", st.errors_message(errors))
        logger.warning(f"Invalid spec: {st.errors_message(errors)}")
        return Outcome(st.status_patch(current, new),
                       kopf.PermanentError(f"Invalid spec: {st.errors_message(errors)}"))

    try:
        applied = await apply_children(ctx.kube, desired, expect_absent=created)
    except MissingAPIError as exc:
        msg = f"{exc}; install it or change the spec so that its plan does not need it"
        new = st.build_status(current, name=name, namespace=namespace, generation=generation,
                              now=now, plan=plan, missing_api=msg)
        return Outcome(st.status_patch(current, new),
                       kopf.TemporaryError(msg, delay=MISSING_API_RETRY_SECONDS))
    except ConflictError as exc:
        return Outcome({}, kopf.TemporaryError(str(exc), delay=CONFLICT_RETRY_SECONDS))

    workload = desired[0]
    stale = _stale_workloads(name, workload["kind"], monitor_wanted=any(
        d["kind"] == "PodMonitor" for d in desired))
    for change in await delete_children(ctx.kube, body, stale):
        logger.info(f"Deleted {change.kind} {namespace}/{change.name}")

    if applied.changed:
        logger.info(", ".join(f"{c.action} {c.kind} {namespace}/{c.name}"
                              for c in applied.changed))
    for change in applied.changed:
        if change.kind in WORKLOAD_KINDS:
            verb = "Created" if change.action is Action.CREATED else "Updated"
            ctx.post_event(body, "Normal", f"{change.kind}{verb}",
                           f"{verb} {change.kind} {namespace}/{change.name}: "
                           f"{_args_summary(plan)}")
    state = st.WorkloadState.from_object(applied.observed.get(workload["kind"]),
                                         svc.spec.replicas)
    new = st.build_status(current, name=name, namespace=namespace, generation=generation,
                          now=now, plan=plan, workload=state, workload_kind=workload["kind"],
                          engine=st.engine_in_effect(svc.spec.engine, plan, current))
    if (current.get("plan") or {}) != new.get("plan"):
        ctx.post_event(body, "Normal", "Planned", st.plan_message(plan))
    return Outcome(st.status_patch(current, new))


async def write_status(
    ctx: OperatorContext, obj: Mapping[str, Any], patch: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Write a status ``patch`` computed from ``obj`` (an LLMService as some handler read
    it) over the status stored now: the conditions it changed go into the stored list,
    with ``resourceVersion`` as the precondition (see :func:`~llm_operator.status.rebase_patch`
    and :meth:`~llm_operator.kube.KubeClient.update_status`).
    Returns the LLMService as written (None when it is gone)."""
    if not patch:
        return dict(obj)
    meta = obj.get("metadata") or {}
    base = obj.get("status") or {}
    return await ctx.kube.update_status(
        f"{GROUP}/{VERSION}", KIND, str(meta.get("namespace") or "default"),
        str(meta.get("name")), lambda fresh: st.rebase_patch(patch, base, fresh.get("status")),
        known=obj)


def _args_summary(plan: Plan) -> str:
    return (f"{plan.gpus_per_replica} GPU(s) per replica, --tensor-parallel-size "
            f"{plan.tensor_parallel_size}, --max-num-seqs {plan.max_num_seqs}")


def _stale_workloads(
    name: str, workload_kind: str, monitor_wanted: bool
) -> list[tuple[str, str, str]]:
    """Children the current plan no longer wants: the other workload kind (a plan that
    moved between one node and several), the PodMonitor when monitoring went away."""
    stale = [("apps/v1", "Deployment", name)] if workload_kind != "Deployment" else [
        (LWS_API_VERSION, LWS_KIND, name + LWS_NAME_SUFFIX)]
    if not monitor_wanted:
        stale.append((f"{MONITORING_GROUP}/v1", "PodMonitor", name))
    return stale


def _children_of(name: str) -> list[tuple[str, str, str]]:
    return [
        ("apps/v1", "Deployment", name),
        (LWS_API_VERSION, LWS_KIND, name + LWS_NAME_SUFFIX),
        ("v1", "Service", name),
        (f"{MONITORING_GROUP}/v1", "PodMonitor", name),
    ]


@kopf.on.resume(GROUP, VERSION, PLURAL, id="reconcile")
@kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile")
@kopf.on.update(GROUP, VERSION, PLURAL, id="reconcile")
async def llmservice_reconcile(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, reason: str, **_: Any,
) -> None:
    """Create, update and resume: one reconciliation (idempotent)."""
    ctx = _ctx(memo)
    with metrics_of(memo).timed_reconcile("handler"):
        outcome = await reconcile(body, ctx, logger, created=reason == "create")
    # Written now, not staged in kopf's patch: kopf sends that without a precondition at
    # the end of the cycle, over whatever a workload event or the tuning step wrote since.
    await write_status(ctx, body, outcome.status_patch)
    if outcome.error is not None:
        raise outcome.error


@kopf.on.delete(GROUP, VERSION, PLURAL, id="cleanup")
async def llmservice_delete(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    """Delete the children (see :func:`~llm_operator.kube.delete_children` on why the
    garbage collector is not relied on alone)."""
    ctx = _ctx(memo)
    for change in await delete_children(ctx.kube, body, _children_of(body.meta.name or "")):
        logger.info(f"Deleted {change.kind} {body.meta.namespace}/{change.name}")


async def _workload_event(
    body: kopf.Body, type: str | None, memo: kopf.Memo, logger: kopf.Logger,
    llmservices_by_name: kopf.Index[tuple[str, str], dict[str, Any]],
) -> None:
    ctx = _ctx(memo)
    owner = owner_name(body)
    namespace = body.meta.namespace or "default"
    if owner is None:
        return
    found = list(llmservices_by_name.get((namespace, owner), []))
    if not found:
        return
    svc_body = found[-1]
    svc_meta = svc_body.get("metadata") or {}
    if svc_meta.get("deletionTimestamp"):
        return
    current = dict(svc_body.get("status") or {})
    if st.condition_status(current, st.ConditionType.SPEC_VALID) != "True":
        return  # nothing of ours should run; the reconcile handler owns this state
    if type == "DELETED":
        kind = body.get("kind")
        logger.info(f"{kind} {namespace}/{body.meta.name} was deleted: re-creating it")
        outcome = await reconcile(svc_body, ctx, logger)
    else:
        replicas = int((svc_body.get("spec") or {}).get("replicas", 1))
        state = st.WorkloadState.from_object(body, replicas)
        conds = st.workload_conditions(
            current.get("conditions") or [], state, kind=str(body.get("kind")), name=owner,
            generation=svc_meta.get("generation"), now=_now())
        outcome = Outcome(st.status_patch(current, {"conditions": conds}))
    await write_status(ctx, svc_body, outcome.status_patch)


def _changed_or_deleted(type: str, **_: Any) -> bool:
    # ADDED (our own create) and the initial listing (None) are skipped: the
    # reconciliation that made or resumed the workload writes that state's conditions.
    return type in ("MODIFIED", "DELETED")


@kopf.on.event("apps", "v1", "deployments", labels={LABEL_MANAGED_BY: MANAGED_BY},
               when=_changed_or_deleted, id="workload-status")
async def deployment_event(
    body: kopf.Body, type: str, memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any
) -> None:
    """A managed Deployment changed: update the owner's workload conditions."""
    await _workload_event(body, type, memo, logger, kwargs["llmservices_by_name"])


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets",
               labels={LABEL_MANAGED_BY: MANAGED_BY}, when=_changed_or_deleted,
               id="workload-status-lws")
async def leader_worker_set_event(
    body: kopf.Body, type: str, memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any
) -> None:
    """A managed LeaderWorkerSet changed (clusters that serve LWS only)."""
    await _workload_event(body, type, memo, logger, kwargs["llmservices_by_name"])


# --------------------------------------------------------------------------- running
def run_operator(namespaces: list[str], standalone: bool, peering: str | None = None,
                 liveness: str | None = None) -> int:
    """Run the operator until interrupted (``llm-operator run``); returns the exit code.

    Watches ``namespaces`` (or ``LLMOP_NAMESPACES``; none: the whole cluster). The
    liveness endpoint listens on ``LLMOP_HEALTH_PORT`` (``/healthz``; 0 turns it off).
    """
    settings = Settings()
    watched = list(namespaces) or list(settings.namespaces)
    kopf.configure(verbose=False, log_format=kopf.LogFormat.PLAIN)
    port = settings.health_port
    if liveness is None and port:
        liveness = f"http://0.0.0.0:{port}/healthz"
    memo = kopf.Memo(settings=settings)  # the API client is built in operator_startup
    # With peering, every pod needs its own priority: with equal priorities kopf lets two
    # operators act at once. A random one makes one pod active and the others standby.
    priority = random.randint(1, 2**31 - 1) if peering else 0
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

from . import adaptation_handlers as _adaptation_handlers  # noqa: E402,F401  registers handlers
from . import tuning_handlers as _tuning_handlers  # noqa: E402,F401  registers handlers

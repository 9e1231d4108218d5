"""Every kopf handler of the operator, registered here and only here.

Nothing imports this module but :mod:`.run` (importing it registers the handlers). Each
handler is thin: it takes what kopf hands over, calls one function of the controller and
carries its outcome out. Handler ids are pinned: they name kopf's progress annotations,
and renaming a function must not change them.

- login (``operator``): kopf's own credentials, by the operator's client's loaders.
- startup/cleanup (``operator``): kopf's bookkeeping under ``llmops.dev``, the typed
  :class:`~.context.OperatorContext` (settings, API client, metrics), the metrics server
  and the adaptation loop; released again on exit.
- index ``llmservices_by_name``: each LLMService's latest body, so that workload and Job
  events, and the adaptation loop, need no API call to find it.
- ``reconcile`` (create, update, resume): :func:`.reconcile.reconcile`, then one status
  write, which, like the ``tuning`` step and the Events, waits while other services'
  workloads are being rendered (render first, :meth:`.context.OperatorContext.after_renders`:
  in a burst of new services every Deployment comes before the bookkeeping); an
  unservable spec raises a permanent error. An API server failure (5xx, 429, a timeout)
  there or in ``tuning`` is retried after :data:`API_FAULT_RETRY_SECONDS`, doubling while
  it lasts.
- ``cleanup`` (delete, optional): the children it owns.
- ``workload-status``/``workload-status-lws``: a managed workload changed.
- ``tuning`` (create, update, resume; after ``reconcile``), ``tuning-job`` (a tuning Job
  finished or went away) and ``tuning-cleanup`` (delete): :mod:`.tuning`; the startup
  handler also starts the tuning-progress loop there (a pod that waits for GPUs).
- ``facts-job`` (a facts Job finished or went away): the reconciliation of its LLMService
  while it waits for its model's facts (:mod:`.facts`).
- index ``server_pods_by_service`` and ``pod-scheduling``: the server pods of each
  LLMService; a pod the scheduler cannot place sets ``PodsScheduled=False``, a container
  that crash-loops or cannot start ``ContainersRunning=False`` (:mod:`.pods`; the startup
  handler also starts its loop for pods stuck in ContainerCreating).
- the resync loop (started by the startup handler, :mod:`.resync`): a service whose
  handling stalled (a retry kopf planned never came because kopf's own write failed) is
  set going again; kopf's progress records carry the generation they handled
  (:mod:`.progress`), so a spec changed mid-cycle is rendered, not recorded as handled.
No finalizer, ever. kopf puts its finalizer on a resource that has a non-optional
``on.delete`` handler, a daemon or a timer; a finalizer whose operator is gone
(uninstalled, scaled to zero) blocks the deletion of the LLMService and so of its
namespace forever. The children need no handler: they carry owner references to the
LLMService, and the garbage collector deletes them with it. So both delete handlers are
``optional`` (they run when the operator sees a deletion that something else holds up,
and clean up promptly then), and there is no daemon or timer: the background loops
(adaptation, tuning progress, resync, pods) are asyncio tasks over the index, and the
adaptation loop learns whether peering paused this pod from kopf's peering objects
(:mod:`.peering`). kopf removes its finalizer from resources that no longer need it, so
one an older release put on a service goes on the first pass.

Watches are filtered on the server: kopf sends ``settings.watching.label_selectors`` as
the ``labelSelector`` of its list and watch requests, so the operator lists and watches
only the Deployments, LeaderWorkerSets, Jobs and pods labelled
``app.kubernetes.io/managed-by=llm-operator``, not every one of the cluster. (The
``labels=`` filters of the handlers are client-side only; they stay as a second check.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import kopf

from ..api.constants import (
    FINALIZER,
    GROUP,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PLURAL,
    PROGRESS_PREFIX,
    VERSION,
)
from ..facts.job import COMPONENT_FACTS
from ..health.podscheduling import PodScheduling
from ..rendering.identity import COMPONENT_SERVER, COMPONENT_TUNING
from ..settings import Settings
from ..tuning.observed import ObservedJob
from .adaptation import AdaptationLoop
from .context import CONTEXT_KEY, OperatorContext, operator_context
from .diffbase import SlimDiffBaseStorage
from .kube import ApiError, KubeClient, owner_name, without_managed_fields
from .peering import MEMO_KEY as PEERING_MEMO_KEY
from .peering import PeeringIdentity
from .pods import creating_pods_loop, pod_service_key, pods_changed
from .progress import GenerationProgressStorage
from .reconcile import (
    NotReconciledYet,
    delete_owned,
    facts_job_done,
    reconcile,
    workload_changed,
    write_status,
)
from .resync import resync_loop
from .tuning import delete_tuning_jobs, tuning_progress_loop, tuning_step

INDEX = "llmservices_by_name"
POD_INDEX = "server_pods_by_service"
SERVER_POD_LABELS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: COMPONENT_SERVER}
# The children the operator watches: listed and watched with a server-side label selector.
MANAGED_WATCHES = (("apps", "v1", "deployments"), ("leaderworkerset.x-k8s.io", "v1",
                                                   "leaderworkersets"), ("batch", "v1", "jobs"),
                   ("", "v1", "pods"))


# API server faults (a 5xx, 429, a timeout, a dropped connection) in a handler: retried
# soon (kopf's default for an unexpected error is a flat 60 s), every step being
# idempotent, backing off while they last (5, 10, 20, 40, 60 s ...): an overloaded
# server is not hammered by every service at once.
API_FAULT_RETRY_SECONDS = 5
API_FAULT_MAX_RETRY_SECONDS = 60
# An event handler's step that failed on an API fault is tried again after each of these
# (about 5 minutes in all: an API server or etcd restart is over well within it).
EVENT_RETRY_DELAYS_SECONDS = (2.0, 4.0, 8.0, 16.0, 30.0, 60.0, 60.0, 60.0, 60.0)


def api_fault(exc: BaseException) -> bool:
    """An API server failure worth retrying: a 5xx or 429 answer, no answer in time, or no
    connection (the answers :func:`_api_faults_retried` retries)."""
    if isinstance(exc, ApiError):
        return exc.status >= 500 or exc.status == 429
    return isinstance(exc, (TimeoutError, aiohttp.ClientError))


@contextlib.asynccontextmanager
async def _api_faults_retried(retry: int) -> AsyncIterator[None]:
    delay = min(API_FAULT_MAX_RETRY_SECONDS, API_FAULT_RETRY_SECONDS * 2 ** min(retry, 8))
    try:
        yield
    except ApiError as exc:
        if exc.status < 500 and exc.status != 429:
            raise
        raise kopf.TemporaryError(f"the API server failed: {exc}", delay=delay) from exc
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise kopf.TemporaryError(f"the API server did not answer: {exc!r}",
                                  delay=delay) from exc


# --------------------------------------------------------------------------- operator
@kopf.on.login(id="operator-login")
async def operator_login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own connection (its watches and patches), from the loaders the operator's
    client uses (kubernetes_asyncio: in-cluster, else the kubeconfig). Named, not left
    to kopf's pick: kopf prefers the blocking ``kubernetes`` package whenever it is
    installed, which the image does not carry but a development environment may."""
    return await kopf.login_via_async_client(**kwargs)


@kopf.on.startup(id="operator-startup")
async def operator_startup(settings: kopf.OperatorSettings, memo: kopf.Memo,
                           logger: kopf.Logger, **kwargs: Any) -> None:
    """kopf settings (bookkeeping under llmops.dev), the operator's context, its metrics
    server and, when ``LLMOP_PROMETHEUS_URL`` is set, the adaptation loop."""
    settings.persistence.finalizer = FINALIZER
    for resource in MANAGED_WATCHES:
        settings.watching.label_selectors[resource] = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
    # Each handler's outcome carries the generation it handled: a success for an older
    # spec does not count for a newer one (kopf would record the new spec as handled
    # without rendering it; see .progress).
    settings.persistence.progress_storage = GenerationProgressStorage(prefix=PROGRESS_PREFIX)
    # kopf's storage, built without copying the status first (the same essence; see
    # .diffbase): kopf's largest own cost per event in a burst of new services.
    settings.persistence.diffbase_storage = SlimDiffBaseStorage(
        prefix=PROGRESS_PREFIX, key="last-handled-configuration")
    # kopf's own Events only for warnings and errors (a failing handler); the milestones
    # (Planned, DeploymentCreated, ...) are posted by the handlers themselves.
    settings.posting.level = logging.WARNING
    # A permanent error stays permanent; temporary ones back off (kopf's default caps).
    settings.execution.max_workers = 20
    if isinstance(memo.get(CONTEXT_KEY), OperatorContext):
        return
    own = memo.get("settings")
    peering = memo.get(PEERING_MEMO_KEY)
    ctx = OperatorContext(settings=own if isinstance(own, Settings) else Settings(),
                          kube=await KubeClient.from_environment(),
                          peering=peering if isinstance(peering, PeeringIdentity) else None)
    memo[CONTEXT_KEY] = ctx
    ctx.metrics.tuning_gpu_budget.set(ctx.settings.tuning_gpu_budget)
    ctx.metrics.serve(ctx.settings.metrics_port)
    services = kwargs.get(INDEX)
    if services is not None:
        # Not a kopf timer: kopf puts a finalizer on every resource a timer matches, and a
        # finalizer left by an uninstalled operator blocks the deletion of the service.
        ctx.tuning_progress_task = asyncio.create_task(
            tuning_progress_loop(ctx, services, logger), name="llmop-tuning-progress")
        # Services whose handling stalled (a retry kopf planned never came: its own write
        # failed), set going again; only those, at a bounded rate (.resync).
        ctx.resync_task = asyncio.create_task(resync_loop(ctx, services, settings, logger),
                                              name="llmop-resync")
        pods = kwargs.get(POD_INDEX)
        if pods is not None:
            # Server pods stuck in ContainerCreating change no status: their volume Events
            # are read on a timer (.pods).
            ctx.creating_pods_task = asyncio.create_task(
                creating_pods_loop(ctx, services, pods, logger), name="llmop-creating-pods")
    if not ctx.settings.prometheus_url:
        logger.info("Online adaptation is off: LLMOP_PROMETHEUS_URL is not set")
        return
    index = kwargs.get(INDEX)
    if index is None:
        logger.warning(f"Online adaptation is off: the {INDEX} index is missing")
        return
    loop = AdaptationLoop(ctx, index)
    ctx.adaptation_task = asyncio.create_task(loop.run(), name="llmop-adaptation")


@kopf.on.cleanup(id="operator-cleanup")
async def operator_cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Cancel the adaptation loop, stop serving metrics, release the API client."""
    ctx = memo.get(CONTEXT_KEY)
    if not isinstance(ctx, OperatorContext):
        return
    for task in (ctx.adaptation_task, ctx.tuning_progress_task, ctx.resync_task,
                 ctx.creating_pods_task):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    ctx.metrics.stop()
    await ctx.kube.close()


# The indexes are coroutines: kopf runs a plain function in its thread pool, a thread
# hop on every event of every LLMService and server pod for a dictionary lookup.
@kopf.index(GROUP, VERSION, PLURAL)
async def llmservices_by_name(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """Each LLMService's latest body, so workload events need no API call to find it
    (without its managedFields: kept for the service's lifetime, never read)."""
    return {(namespace or "default", name): without_managed_fields(body)}


# --------------------------------------------------------------------------- reconcile
@kopf.on.resume(GROUP, VERSION, PLURAL, id="reconcile")
@kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile")
@kopf.on.update(GROUP, VERSION, PLURAL, id="reconcile")
async def llmservice_reconcile(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, reason: str, retry: int = 0,
    **_: Any,
) -> None:
    """Create, update and resume: one reconciliation (idempotent)."""
    ctx = operator_context(memo)
    async with _api_faults_retried(retry):
        outcome = await reconcile(body, ctx, logger, created=reason == "create",
                                  trigger="handler")
        # Render first: the status waits while other services' workloads are rendered.
        await ctx.after_renders()
        # Written now, not staged in kopf's patch: kopf sends that without a precondition
        # at the end of the cycle, over whatever a workload event or the tuning step wrote.
        await write_status(ctx, body, outcome.status_patch)
    if outcome.error is not None:
        raise outcome.error


@kopf.on.delete(GROUP, VERSION, PLURAL, id="cleanup", optional=True)
async def llmservice_delete(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    """Delete the children."""
    await delete_owned(operator_context(memo), body, logger)


def _deleted(type: str | None, **_: Any) -> bool:
    return type == "DELETED"


@kopf.on.event(GROUP, VERSION, PLURAL, when=_deleted, id="forget-metrics")
async def llmservice_gone(
    namespace: str | None, name: str | None, memo: kopf.Memo, **_: Any
) -> None:
    """The LLMService is gone: drop its series from the operator's metrics."""
    operator_context(memo).metrics.forget_service(namespace or "default", name or "")


def _changed_or_deleted(type: str, **_: Any) -> bool:
    # ADDED (our own create) and the initial listing (None) are skipped: the
    # reconciliation that made or resumed the workload writes that state's conditions.
    return type in ("MODIFIED", "DELETED")


@kopf.on.event("apps", "v1", "deployments", labels={LABEL_MANAGED_BY: MANAGED_BY},
               when=_changed_or_deleted, id="workload-status")
async def deployment_event(
    body: kopf.Body, type: str, memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any
) -> None:
    """A managed Deployment changed: update the owner's workload conditions. One that
    reports a failure to create pods before the owner's first status write is tried
    again in the background (no later event would bring it)."""
    ctx = operator_context(memo)

    async def step() -> None:
        await workload_changed(ctx, body, type, logger, kwargs[INDEX])
    try:
        await step()
    except NotReconciledYet:
        ctx.retry_in_background(("workload-status", body.meta.namespace, body.meta.name),
                                step, EVENT_RETRY_DELAYS_SECONDS,
                                lambda exc: isinstance(exc, NotReconciledYet) or api_fault(exc),
                                logger)


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets",
               labels={LABEL_MANAGED_BY: MANAGED_BY}, when=_changed_or_deleted,
               id="workload-status-lws")
async def leader_worker_set_event(
    body: kopf.Body, type: str, memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any
) -> None:
    """A managed LeaderWorkerSet changed (clusters that serve LWS only)."""
    await workload_changed(operator_context(memo), body, type, logger, kwargs[INDEX])


# --------------------------------------------------------------------------- pods
@kopf.index("", "v1", "pods", labels=SERVER_POD_LABELS)
async def server_pods_by_service(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], PodScheduling]:
    """Each server pod's scheduling state, by its LLMService."""
    key = pod_service_key(namespace, labels)
    return {} if key is None else {key: PodScheduling.from_pod(body)}


@kopf.on.event("", "v1", "pods", labels=SERVER_POD_LABELS, id="pod-scheduling")
async def server_pod_event(
    namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    """A server pod appeared, changed or went: set its LLMService's PodsScheduled. On an
    API fault the step is retried in the background (kopf ignores an event handler's
    error), reading the indexes as they are then."""
    key = pod_service_key(namespace, labels)
    if key is None:
        return
    ctx = operator_context(memo)

    async def step() -> None:
        await pods_changed(ctx, key, kwargs[INDEX], kwargs[POD_INDEX], logger)
    await _step_retried_in_background(ctx, ("pod-scheduling", key), step, logger,
                                      f"{key[0]}/{key[1]}: could not update PodsScheduled")


async def _step_retried_in_background(ctx: OperatorContext, key: tuple[Any, ...],
                                      step: Callable[[], Awaitable[None]], logger: Any,
                                      what: str) -> None:
    """Run an event handler's ``step``; on an API fault, again in the background (kopf
    never retries an event handler)."""
    try:
        await step()
    except Exception as exc:
        if not api_fault(exc):
            raise
        logger.warning(f"{what} ({exc}); retrying in the background")
        ctx.retry_in_background(key, step, EVENT_RETRY_DELAYS_SECONDS, api_fault, logger)


# --------------------------------------------------------------------------- tuning
@kopf.on.resume(GROUP, VERSION, PLURAL, id="tuning")
@kopf.on.create(GROUP, VERSION, PLURAL, id="tuning")
@kopf.on.update(GROUP, VERSION, PLURAL, id="tuning")
async def llmservice_tuning(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, retry: int = 0, **_: Any,
) -> None:
    """Create, update and resume: one tuning step (after the ``reconcile`` handler)."""
    if body.meta.get("deletionTimestamp"):
        return
    ctx = operator_context(memo)
    await ctx.after_renders()  # render first (after the other services' workloads)
    async with _api_faults_retried(retry):
        await tuning_step(ctx, body.meta.namespace or "default", body.meta.name or "", logger)


def _finished_or_gone(body: kopf.Body, type: str | None, **_: Any) -> bool:
    if type == "DELETED":
        return True
    return ObservedJob.from_object(body).finished


@kopf.on.event("batch", "v1", "jobs",
               labels={LABEL_COMPONENT: COMPONENT_TUNING, LABEL_MANAGED_BY: MANAGED_BY},
               when=_finished_or_gone, id="tuning-job")
async def tuning_job_event(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any
) -> None:
    """A tuning Job finished or went away: one tuning step for its LLMService."""
    namespace = body.meta.namespace or "default"
    owner = owner_name(body)
    if owner is None or not list(kwargs[INDEX].get((namespace, owner), [])):
        return
    await tuning_step(operator_context(memo), namespace, owner, logger)


@kopf.on.event("batch", "v1", "jobs",
               labels={LABEL_COMPONENT: COMPONENT_FACTS, LABEL_MANAGED_BY: MANAGED_BY},
               when=_finished_or_gone, id="facts-job")
async def facts_job_event(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any
) -> None:
    """A facts Job finished or went away (deleted once read, or by its TTL after a failed
    read: then it is read again): reconcile its LLMService, if that still waits for its
    model's facts, then one tuning step once it is planned. On an API fault the step is
    retried in the background."""
    namespace = body.meta.namespace or "default"
    owner = owner_name(body)
    if owner is None or not list(kwargs[INDEX].get((namespace, owner), [])):
        return
    ctx = operator_context(memo)

    async def step() -> None:
        if await facts_job_done(ctx, namespace, owner, logger):
            # Planned now: the tuning step kopf's handler ran before there was a plan.
            await tuning_step(ctx, namespace, owner, logger)
    await _step_retried_in_background(ctx, ("facts-job", namespace, owner), step, logger,
                                      f"{namespace}/{owner}: could not reconcile after its "
                                      "facts Job")


@kopf.on.delete(GROUP, VERSION, PLURAL, id="tuning-cleanup", optional=True)
async def llmservice_tuning_cleanup(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger,
                                    **_: Any) -> None:
    """Delete the service's tuning Jobs and forget its lock."""
    ctx = operator_context(memo)
    await delete_tuning_jobs(ctx, body, logger)
    ctx.tuning_locks.pop((body.meta.namespace or "default", body.meta.name or ""), None)



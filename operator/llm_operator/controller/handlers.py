"""Every kopf handler of the operator, registered here and only here.

Nothing imports this module but :mod:`.run` (importing it registers the handlers). Each
handler is thin: it takes what kopf hands over, calls one function of the controller and
carries its outcome out. Handler ids are pinned: they name kopf's progress annotations,
and renaming a function must not change them.

- startup/cleanup (``operator``): kopf's bookkeeping under ``llmops.dev``, the typed
  :class:`~.context.OperatorContext` (settings, API client, metrics), the metrics server
  and the adaptation loop; released again on exit.
- index ``llmservices_by_name``: each LLMService's latest body, so that workload and Job
  events, and the adaptation loop, need no API call to find it.
- ``reconcile`` (create, update, resume): :func:`.reconcile.reconcile`, then one status
  write; an unservable spec raises a permanent error.
- ``cleanup`` (delete): the children it owns.
- ``workload-status``/``workload-status-lws``: a managed workload changed.
- ``tuning`` (create, update, resume; after ``reconcile``), ``tuning-job`` (a tuning Job
  finished or went away), ``tuning-progress`` (a timer while a run is in flight: a pod
  that waits for GPUs) and ``tuning-cleanup`` (delete): :mod:`.tuning`.
- ``adaptation-presence``: a daemon per LLMService that marks it as handled by this pod
  for the adaptation loop (:mod:`.adaptation`); kopf stops it on deletion and when
  peering pauses this operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import kopf

from ..constants import (
    FINALIZER,
    GROUP,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PLURAL,
    PROGRESS_PREFIX,
    VERSION,
)
from ..rendering import COMPONENT_TUNING
from ..settings import Settings
from ..tuning.control import ObservedJob
from .adaptation import AdaptationLoop
from .context import CONTEXT_KEY, OperatorContext, operator_context
from .kube import KubeClient, owner_name
from .reconcile import delete_owned, reconcile, workload_changed, write_status
from .tuning import PROGRESS_INTERVAL_SECONDS, delete_tuning_jobs, tuning_step

INDEX = "llmservices_by_name"


# --------------------------------------------------------------------------- operator
@kopf.on.startup(id="operator-startup")
async def operator_startup(settings: kopf.OperatorSettings, memo: kopf.Memo,
                           logger: kopf.Logger, **kwargs: Any) -> None:
    """kopf settings (bookkeeping under llmops.dev), the operator's context, its metrics
    server and, when ``LLMOP_PROMETHEUS_URL`` is set, the adaptation loop."""
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
    if isinstance(memo.get(CONTEXT_KEY), OperatorContext):
        return
    own = memo.get("settings")
    ctx = OperatorContext(settings=own if isinstance(own, Settings) else Settings(),
                          kube=KubeClient.from_environment())
    memo[CONTEXT_KEY] = ctx
    ctx.metrics.serve(ctx.settings.metrics_port)
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
    if ctx.adaptation_task is not None:
        ctx.adaptation_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await ctx.adaptation_task
    ctx.metrics.stop()
    await ctx.kube.close()


@kopf.index(GROUP, VERSION, PLURAL)
def llmservices_by_name(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    """Each LLMService's latest body, so workload events need no API call to find it."""
    return {(namespace or "default", name): dict(body)}


# --------------------------------------------------------------------------- reconcile
@kopf.on.resume(GROUP, VERSION, PLURAL, id="reconcile")
@kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile")
@kopf.on.update(GROUP, VERSION, PLURAL, id="reconcile")
async def llmservice_reconcile(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, reason: str, **_: Any,
) -> None:
    """Create, update and resume: one reconciliation (idempotent)."""
    ctx = operator_context(memo)
    with ctx.metrics.timed_reconcile("handler"):
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
    """Delete the children."""
    await delete_owned(operator_context(memo), body, logger)


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
    await workload_changed(operator_context(memo), body, type, logger, kwargs[INDEX])


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets",
               labels={LABEL_MANAGED_BY: MANAGED_BY}, when=_changed_or_deleted,
               id="workload-status-lws")
async def leader_worker_set_event(
    body: kopf.Body, type: str, memo: kopf.Memo, logger: kopf.Logger, **kwargs: Any
) -> None:
    """A managed LeaderWorkerSet changed (clusters that serve LWS only)."""
    await workload_changed(operator_context(memo), body, type, logger, kwargs[INDEX])


# --------------------------------------------------------------------------- tuning
@kopf.on.resume(GROUP, VERSION, PLURAL, id="tuning")
@kopf.on.create(GROUP, VERSION, PLURAL, id="tuning")
@kopf.on.update(GROUP, VERSION, PLURAL, id="tuning")
async def llmservice_tuning(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any,
) -> None:
    """Create, update and resume: one tuning step (after the ``reconcile`` handler)."""
    if body.meta.get("deletionTimestamp"):
        return
    await tuning_step(operator_context(memo), body.meta.namespace or "default",
                      body.meta.name or "", logger)


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


def _tuning_in_flight(status: kopf.Status, **_: Any) -> bool:
    tuning: Any = dict(status or {}).get("tuning") or {}
    return isinstance(tuning, dict) and tuning.get("state") in ("Running", "Retrying")


@kopf.timer(GROUP, VERSION, PLURAL, id="tuning-progress", interval=PROGRESS_INTERVAL_SECONDS,
            when=_tuning_in_flight)
async def llmservice_tuning_progress(
    body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any,
) -> None:
    """While a run is in flight: one tuning step (a waiting pod is reported, and the
    run given up when it waited too long; the Job's own events do not tell that)."""
    if body.meta.get("deletionTimestamp"):
        return
    await tuning_step(operator_context(memo), body.meta.namespace or "default",
                      body.meta.name or "", logger)


@kopf.on.delete(GROUP, VERSION, PLURAL, id="tuning-cleanup")
async def llmservice_tuning_cleanup(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger,
                                    **_: Any) -> None:
    """Delete the service's tuning Jobs and forget its lock."""
    ctx = operator_context(memo)
    await delete_tuning_jobs(ctx, body, logger)
    ctx.tuning_locks.pop((body.meta.namespace or "default", body.meta.name or ""), None)


# --------------------------------------------------------------------------- adaptation
@kopf.daemon(GROUP, VERSION, PLURAL, id="adaptation-presence", cancellation_timeout=5)
async def llmservice_adaptation_presence(
    stopped: kopf.DaemonStopped, memo: kopf.Memo, namespace: str | None, name: str | None,
    **_: Any,
) -> None:
    """Mark the service as handled by this operator for as long as kopf keeps the daemon
    (stopped on deletion and when peering pauses this operator)."""
    ctx = memo.get(CONTEXT_KEY)
    if not isinstance(ctx, OperatorContext) or ctx.adaptation_task is None:
        return  # adaptation is off; the daemon ends (kopf does not restart it)
    key = (namespace or "default", name or "")
    ctx.present.add(key)
    try:
        await stopped.wait()
    finally:
        ctx.present.discard(key)

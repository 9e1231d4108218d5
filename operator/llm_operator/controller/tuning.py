"""Tuning on rollout, the operator's I/O edge: the steps kopf's handlers run.

Each step fetches what :func:`llm_operator.tuning.control.decide` (the pure decision, in
:mod:`llm_operator.tuning`) needs, calls it, and carries the decision out against the
API server. The tuner itself runs in the Job's pod (:mod:`llm_operator.inpod.tuner`).
The kopf handlers that call it are in :mod:`.handlers`:

- ``tuning`` (create, update, resume of an LLMService; runs after ``reconcile``): one
  tuning step for the service.
- ``tuning-job`` (events of the operator's tuning Jobs, ``llmops.dev/component=tuning``):
  when a Job finishes (``Complete`` or ``Failed`` condition) or disappears, one tuning
  step for its LLMService, found through the ``llmservices_by_name`` index.
- :func:`tuning_progress_loop` (a task the startup handler starts; every
  :data:`PROGRESS_INTERVAL_SECONDS`, for each service whose run is in flight): one
  tuning step, which reads the Job's pods and reports a pod that waits (unschedulable,
  image pull) in ``status.tuning.pending`` and the ``Tuned`` condition within a minute,
  and gives the run up once it waited ``spec.tuning.maxPendingMinutes``. A loop, not a
  kopf timer: kopf puts its finalizer on every resource a timer matches, so an operator
  uninstalled mid-run would block the deletion of the service (and its namespace). With
  peering, a standby operator's loop checks too; a step is safe to repeat (status writes
  carry the resourceVersion, a Job deleted twice is gone once).
- ``tuning-cleanup`` (delete of an LLMService): deletes its tuning Jobs (the garbage
  collector would on a real cluster; deleting them here is prompt and works where none
  runs, as on the emulated API server).

One step (:func:`tuning_step`), under a per-service lock so that the LLMService's and
its Job's events never act on the same run at once: read the LLMService afresh (a
status written by the previous step is seen, whatever the watch streams delivered so
far), the Job named after the fingerprint (so an operator restarted mid-run finds the
Job it started instead of creating a second one), the Job's pods' termination message
once it finished (the tuner's compact result; the message is on the Pod, not the Job),
and the cache entry for the fingerprint (ConfigMap ``llm-operator-tuning-cache`` in the
service's namespace, one key per fingerprint). Then, in this order, so that a crash
anywhere leaves a state the next step completes: cache the result, create the Job
(``409 AlreadyExists`` means it exists), delete the Jobs it supersedes (also when a step
adopts it: :attr:`~llm_operator.tuning.control.TuningDecision.supersedes`), write
``status.tuning`` with the ``Tuned`` condition, re-render the workload when the applied
settings changed (:func:`.reconcile.reconcile`), delete the finished Job, post the Event.

Why no watch on the Job's pods: the Job controller sets ``Complete`` only after the pod
terminated, so when the Job's event arrives the message is there to read; watching
every pod of the namespace (kopf filters labels client-side) would cost memory on large
clusters for nothing. ``ttlSecondsAfterFinished`` removes Jobs a stopped operator left.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any

from ..adaptation.policy import ServiceKey
from ..api.constants import (
    API_VERSION,
    KIND,
    LABEL_COMPONENT,
    LABEL_SERVICE,
)
from ..api.errors import SpecError, SpecErrors
from ..api.models import LLMService, parse_llmservice
from ..knowledge.catalog import ModelFacts
from ..planning import Plan
from ..planning.sizing import plan_for_slo
from ..rendering.identity import COMPONENT_TUNING
from ..rendering.pod import image_for
from ..tuning import budget as tb
from ..tuning import control as tc
from ..tuning import placement as tp
from ..tuning.fingerprint import tuning_fingerprint
from ..tuning.job import build_tuning_job, tuning_job_name
from .context import OperatorContext, clock
from .facts import cached_model_facts
from .kube import ApiError, ConflictError, owned_by, put_cache_entry
from .reconcile import reconcile_and_write, write_status

JSON = dict[str, Any]
JOB_API = "batch/v1"
PROGRESS_INTERVAL_SECONDS = 20  # a waiting tuning pod is reported within a minute


# --------------------------------------------------------------------------- cache I/O
async def read_cache(ctx: OperatorContext, namespace: str, fingerprint: str) -> JSON | None:
    """The cache entry for ``fingerprint`` in ``namespace`` (None when there is none)."""
    cm = await ctx.kube.get("v1", "ConfigMap", namespace, tc.CACHE_CONFIGMAP)
    return tc.parse_cache_value(((cm or {}).get("data") or {}).get(fingerprint))


async def write_cache(ctx: OperatorContext, namespace: str, fingerprint: str,
                      entry: Mapping[str, Any]) -> None:
    """Store ``entry`` under ``fingerprint`` (creating the ConfigMap, evicting the oldest
    entries beyond :data:`~llm_operator.tuning.control.CACHE_MAX_ENTRIES`)."""
    await put_cache_entry(ctx.kube, namespace, tc.CACHE_CONFIGMAP, "tuning-cache",
                          fingerprint, tc.cache_text(entry), tc.cache_evictions)


# --------------------------------------------------------------------------- one step
async def tuning_step(
    ctx: OperatorContext, namespace: str, name: str, logger: Any,
) -> tc.TuningDecision | None:
    """One tuning step for the LLMService ``namespace/name`` (see the module docstring).

    Returns the decision (None when the service is gone or its spec is invalid).
    """
    async with ctx.tuning_lock((namespace, name)):
        obj = await ctx.kube.get(API_VERSION, KIND, namespace, name)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return None
        try:
            svc = parse_llmservice(obj)
            # A model planned from its config.json: the facts the reconciliation cached.
            facts = await cached_model_facts(ctx, svc)
            plan = plan_for_slo(svc.spec, gpus_per_node=ctx.settings.gpus_per_node,
                             facts=facts, load_bandwidth=ctx.settings.model_load_bandwidth)
        except (SpecError, SpecErrors):
            return None  # the reconcile handler reports it
        status = dict(obj.get("status") or {})
        current = dict(status.get("tuning") or {})

        fingerprint = tuning_fingerprint(svc, plan, image_for(svc, ctx.settings))
        job_name = tuning_job_name(svc, fingerprint)
        job_obj = await ctx.kube.get(JOB_API, "Job", namespace, job_name)
        job = tc.ObservedJob.from_object(job_obj) if job_obj is not None else None
        message = None
        pending = None
        pods: list[JSON] | None = None
        now = clock()
        if job is not None and not job.deleting:
            pods = await ctx.kube.list("v1", "Pod", namespace, f"job-name={job_name}")
            if job.finished:
                message = tc.termination_message(pods)
                why = tc.pod_failure(pods) if job.phase is tc.JobPhase.FAILED else ""
                if why:  # evicted, OOM-killed: said in the failure, not only the Job's reason
                    job = dataclasses.replace(job, reason=f"{job.reason} ({why})")
            else:
                pending = tc.pending_pod(pods, job, now)
        cached = None
        if job is None and tc.cache_lookup_needed(svc, fingerprint, current):
            cached = await read_cache(ctx, namespace, fingerprint)
        held = tp.held_before_serving(svc, plan, status) is not None
        decision = tc.decide(svc, plan, fingerprint, job_name, current, job, message, cached,
                             now, pending=pending, held=held)
        # What the attempt that ends here cost (its pods as listed now).
        gpu_seconds = tb.pods_gpu_seconds(pods, now) if pods is not None else None
        decision = tc.with_cost(decision, gpu_seconds)
        spare_start = decision.create_job and tp.runs_on_spare(
            svc, held=bool((decision.tuning or {}).get("beforeServing")))
        try:
            # A start on spare GPUs: its budget check and its Job's creation under one
            # lock, so that two services never both take the budget's last GPUs.
            async with ctx.budget_lock if spare_start else contextlib.nullcontext():
                if spare_start:
                    decision = await within_budget(ctx, svc, plan, current, decision, now)
                if decision.action not in (tc.TuningAction.NONE, tc.TuningAction.WAIT) and (
                        decision.action is not tc.TuningAction.QUEUE
                        or tc.merge_patch(current, decision.status_after(current))):
                    logger.info(f"Tuning {namespace}/{name}: {decision.action}: "
                                f"{decision.why}")
                await _carry_out(ctx, obj, svc, plan, fingerprint, status, decision, job,
                                 now, logger, facts)
            if gpu_seconds is not None and tc.ends_attempt(decision):
                ctx.metrics.tuning_cost(namespace, name, gpu_seconds)
        except ApiError as exc:
            if not (exc.namespace_terminating or exc.namespace_missing):
                raise
            # Deleting the namespace deleted the Job's pod too: no retry can be created,
            # and none is wanted (seen on the real API server, tests/cluster: a 403 while
            # the namespace terminates, a 404 once it is gone and a retry still runs).
            logger.info(f"Tuning {namespace}/{name}: its namespace is being deleted, "
                        "so no Job is created")
            return None
        return decision


async def within_budget(ctx: OperatorContext, svc: LLMService, plan: Plan,
                        current: Mapping[str, Any], decision: tc.TuningDecision,
                        now: float) -> tc.TuningDecision:
    """``decision`` (a start on spare GPUs) against the tuning GPU budget: the tuning Jobs
    of every watched namespace (all of them in cluster mode) are read, and the run is
    queued when its Job would take what they hold over ``LLMOP_TUNING_GPU_BUDGET``
    (:func:`~llm_operator.tuning.control.gate_start`). The service's own other tuning Jobs
    are not counted: starting this run deletes them."""
    namespace, name = svc.metadata.namespace, svc.metadata.name
    selector = f"{LABEL_COMPONENT}={COMPONENT_TUNING}"
    jobs: list[JSON] = []
    scopes: list[str | None] = list(ctx.settings.namespaces) or [None]
    for ns in scopes:
        jobs += await ctx.kube.list(JOB_API, "Job", ns, selector)
    superseded = [tb.job_key(j) for j in jobs
                  if tb.job_key(j)[0] == namespace
                  and ((j.get("metadata") or {}).get("labels") or {}).get(LABEL_SERVICE) == name
                  and owned_by(j, svc.metadata.uid)]
    held = tb.gpus_held(jobs, exclude=superseded)
    budget = ctx.settings.tuning_gpu_budget
    ctx.metrics.tuning_budget(held, budget)
    return tc.gate_start(decision, current,
                         tb.BudgetCheck(held=held, need=plan.gpus_per_replica, budget=budget),
                         now)


async def _carry_out(
    ctx: OperatorContext, obj: JSON, svc: LLMService, plan: Plan, fingerprint: str,
    status: JSON, decision: tc.TuningDecision, job: tc.ObservedJob | None, now: float,
    logger: Any, facts: ModelFacts | None = None,
) -> None:
    namespace, name = svc.metadata.namespace, svc.metadata.name
    current = dict(status.get("tuning") or {})
    tuning = decision.status_after(current)

    if decision.cache_entry is not None:
        await write_cache(ctx, namespace, fingerprint, decision.cache_entry)
    if decision.create_job:
        job_body = build_tuning_job(svc, plan, ctx.settings, fingerprint,
                                    held=bool(tuning.get("beforeServing")), facts=facts)
        job_name = job_body["metadata"]["name"]
        try:
            created = await ctx.kube.create(job_body)
            logger.info(f"Created Job {namespace}/{job_name}")
        except ConflictError:  # it exists (a racing step, a restart): follow that one
            created = await ctx.kube.get(JOB_API, "Job", namespace, job_name) or {}
        tuning["jobUid"] = (created.get("metadata") or {}).get("uid")
    if decision.supersedes:
        await delete_tuning_jobs(ctx, obj, logger, keep=tuning_job_name(svc, fingerprint))

    # Status: status.tuning and the Tuned condition, written now so that the next step,
    # maybe for the Job's event, reads it.
    generation = (obj.get("metadata") or {}).get("generation")
    conditions = tc.with_tuned_condition(status.get("conditions") or [], tuning,
                                         generation=generation, now=now)
    patch: JSON = {}
    tuning_patch = tc.merge_patch(current, tuning)
    if tuning_patch:
        patch["tuning"] = tuning_patch
    if conditions != (status.get("conditions") or []):
        patch["conditions"] = conditions
    written = await write_status(ctx, obj, patch)
    if written is None:
        return  # deleted meanwhile

    if tc.overrides_changed(status, tuning) or tp.render_changed(svc, plan, status, tuning):
        # Roll the workload onto the new settings: the same reconciliation as the
        # handler's, with the new status.tuning.applied as render overrides (and, for
        # spec.tuning.placement, a replica lent or returned, a held server released).
        outcome = await reconcile_and_write(ctx, written, logger, trigger="tuning")
        if outcome.error is not None:
            logger.warning(f"Re-rendering {namespace}/{name} with the tuned settings failed: "
                           f"{outcome.error}")

    if decision.delete_job and job is not None:
        if await ctx.kube.delete(JOB_API, "Job", namespace, job.name):
            logger.info(f"Deleted Job {namespace}/{job.name}")
    if decision.event is not None:
        ctx.post_event(obj, decision.event.type, decision.event.reason, decision.event.message)
        ctx.metrics.tuning_event(namespace, name, decision.event.reason)


async def delete_tuning_jobs(ctx: OperatorContext, obj: Mapping[str, Any], logger: Any,
                             keep: str | None = None) -> None:
    """Delete the service's tuning Jobs except ``keep``: on deletion of the service, and
    on a new run, where a Job for a fingerprint the service no longer has (a rollout
    while it tuned) would hold GPUs for nothing."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace") or "default", meta.get("name")
    selector = f"{LABEL_SERVICE}={name},{LABEL_COMPONENT}={COMPONENT_TUNING}"
    for other in await ctx.kube.list(JOB_API, "Job", namespace, selector):
        other_name = str((other.get("metadata") or {}).get("name"))
        if other_name != keep and owned_by(other, meta.get("uid")) and (
                await ctx.kube.delete(JOB_API, "Job", namespace, other_name)):
            why = f": superseded by {keep}" if keep else ""
            logger.info(f"Deleted Job {namespace}/{other_name}{why}")


def _in_flight(body: Mapping[str, Any]) -> bool:
    tuning = (body.get("status") or {}).get("tuning") or {}
    return (isinstance(tuning, Mapping) and tuning.get("state") in tc.STEPPED
            and not (body.get("metadata") or {}).get("deletionTimestamp"))


async def tuning_progress_loop(ctx: OperatorContext,
                               services: Mapping[ServiceKey, Any], logger: Any) -> None:
    """Every :data:`PROGRESS_INTERVAL_SECONDS`: one tuning step for each service (from the
    ``llmservices_by_name`` index) whose tuning run is in flight. Never raises: a step
    that fails is logged and tried again next round."""
    while True:
        await asyncio.sleep(PROGRESS_INTERVAL_SECONDS)
        for key in sorted(services):
            found = list(services.get(key, []))
            if not found or not _in_flight(found[-1]):
                continue
            try:
                await tuning_step(ctx, key[0], key[1], logger)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one service's failure must not stop the others
                logger.warning(f"Tuning progress of {key[0]}/{key[1]}: {exc!r}")

"""A model's own facts for the plan, the operator's I/O edge (issue 33).

A service whose model is neither in the built-in catalog nor described by
``spec.model.architecture`` is planned from the model's ``config.json``. The operator does
not fetch it itself (a gated model needs the user's token, in a Secret the operator has no
verb to read): :func:`model_facts_step` reads the cache (ConfigMap
``llm-operator-model-facts`` in the service's namespace), else runs the facts Job
(:mod:`llm_operator.facts.job`) and reads its pod's termination message once it finished,
caches it, and deletes the Job. The decisions are pure (:func:`llm_operator.facts.control.
decide`); this module fetches what they need and carries them out.

The reconciliation (:mod:`.reconcile`) calls it before planning; while the Job runs it
writes ``Planned=False`` (``FetchingModelFacts``); the Job's end (the ``facts-job``
event handler, :func:`.reconcile.facts_job_done`) runs the reconciliation again, which
reads the result. A failed read becomes ``Planned=False`` (``ModelFactsFailed``) with
the fix; its Job stays until ``ttlSecondsAfterFinished``
(:data:`~llm_operator.facts.control.RETRY_SECONDS`), and its deletion starts the next
read. Nothing polls. The tuning step plans from the cache only
(:func:`cached_model_facts`): it runs after the reconciliation has read the facts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..api.models import LLMService
from ..api.timestamps import rfc3339
from ..facts import control as fc
from ..facts.job import FACTS_CONTAINER, build_facts_job, facts_job_name, facts_key
from ..knowledge.modelfacts import ModelFacts
from ..tuning import control as tc
from .context import OperatorContext, clock
from .kube import ConflictError, put_cache_entry

JOB_API = "batch/v1"


async def _cache_value(ctx: OperatorContext, namespace: str, key: str) -> str | None:
    cm = await ctx.kube.get("v1", "ConfigMap", namespace, fc.CACHE_CONFIGMAP)
    value = ((cm or {}).get("data") or {}).get(fc.cache_key(key))
    return str(value) if value else None


async def cached_model_facts(ctx: OperatorContext, svc: LLMService) -> ModelFacts | None:
    """The cached facts of ``svc``'s model, when it needs them and they were read (None
    otherwise: a catalog model, ``spec.model.architecture``, or not read yet)."""
    if not fc.needs_facts(svc.spec):
        return None
    key = facts_key(svc.spec)
    found = fc.cached_facts(await _cache_value(ctx, svc.metadata.namespace, key), key,
                            svc.spec.model.name)
    return found[0] if found is not None else None


async def write_cache(ctx: OperatorContext, namespace: str, key: str, message: str) -> None:
    """Store a facts Job's message under its source (creating the ConfigMap, evicting the
    oldest entries beyond :data:`~llm_operator.tuning.control.CACHE_MAX_ENTRIES`, by
    their ``at``, as the tuning cache does; each is at most ~4.5 KB)."""
    await put_cache_entry(ctx.kube, namespace, fc.CACHE_CONFIGMAP, "model-facts-cache",
                          fc.cache_key(key), fc.cache_entry(key, message, rfc3339(clock())),
                          tc.cache_evictions)


async def model_facts_step(ctx: OperatorContext, svc: LLMService,
                           logger: Any) -> fc.FactsDecision:
    """One look at ``svc``'s model facts (see the module docstring); the decision says
    whether to plan with them, wait, or report a failure."""
    namespace = svc.metadata.namespace
    key = facts_key(svc.spec)
    cached = await _cache_value(ctx, namespace, key)
    job_name = facts_job_name(svc)
    job_obj = None
    if fc.cached_facts(cached, key, svc.spec.model.name) is None:
        job_obj = await ctx.kube.get(JOB_API, "Job", namespace, job_name)
    job = tc.ObservedJob.from_object(job_obj) if job_obj is not None else None
    message, why, pending = None, "", None
    now = clock()
    if job is not None and not job.deleting:
        pods = await ctx.kube.list("v1", "Pod", namespace, f"job-name={job_name}")
        if job.finished:
            message = tc.termination_message(pods, FACTS_CONTAINER)
            if job.phase is tc.JobPhase.FAILED:
                why = tc.pod_failure(pods, FACTS_CONTAINER)
        else:
            pending = tc.pending_pod(pods, job, now)
    decision = fc.decide(svc, cached, job, message, why, pending, now,
                         fc.finished_at(job_obj) if job_obj is not None else None)
    if decision.cache is not None:
        await write_cache(ctx, namespace, key, decision.cache)
        logger.info(f"Read the facts of {key} (commit {decision.commit}) in Job "
                    f"{namespace}/{job_name}")
    if decision.create_job:
        try:
            await ctx.kube.create(build_facts_job(svc, ctx.settings))
            logger.info(f"Created Job {namespace}/{job_name} to read {key}")
        except ConflictError:
            pass  # a racing pass created it: follow that one
    if decision.delete_job and job is not None and await ctx.kube.delete(
            JOB_API, "Job", namespace, job.name):
        logger.info(f"Deleted Job {namespace}/{job.name}")
    if decision.failed:
        logger.warning(f"Model facts of {namespace}/{svc.metadata.name}: {decision.failed}")
    return dataclasses.replace(decision, cache=None)


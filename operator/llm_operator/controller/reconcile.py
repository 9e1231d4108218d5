"""Reconciliation of one LLMService, and the one way every writer writes its status.

- :func:`reconcile`: parse, plan, render, apply the children, compute the status; a spec
  that cannot be served yields ``SpecValid=False`` with the message and a
  :class:`kopf.PermanentError` (kopf does not retry it; the next edit of the spec runs the
  handler again). The kopf handler (:mod:`.handlers`), the tuning step, the adaptation
  loop and the end of a facts Job all call it. A model outside the catalog without
  ``spec.model.architecture`` is planned from its config.json, which a facts Job reads
  first (:mod:`.facts`).
- :func:`workload_changed`: a managed Deployment or LeaderWorkerSet changed: move
  Progressing, Available and Ready, and re-create a workload somebody deleted.
- :func:`delete_owned`: the children of a deleted LLMService (when the operator sees the
  deletion; the garbage collector removes them by their owner references anyway).

A pass that changes the workload kind (a plan that moved between one node and several:
Deployment <-> LeaderWorkerSet) is a multi-step switch: the new workload is applied
first, and the old one is deleted only once the new one is written, so a failing step
(a 403 for a verb the RBAC lacks, a 500) never leaves the service with no workload at
all. Each child is written on its own: one that fails (a PodMonitor the RBAC does not let
us patch) does not stop the others, nor the deletion of the old workload. What failed is
in the ``ChildrenApplied`` condition (``WorkloadSwitchIncomplete`` while the old workload
still holds its GPUs, ``ApplyFailed`` otherwise), and the pass ends in a
:class:`kopf.TemporaryError`, so kopf runs it again and the next pass completes the
switch (every step is idempotent).

Status writers (the reconciliation, the tuning step, the adaptation loop) each own some
keys and some conditions of one ``status``; every write goes through :func:`write_status`,
which rebases the writer's patch onto the status stored now and sends it with the
``resourceVersion`` as a precondition, so that no writer undoes another's conditions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from ..api.constants import API_VERSION, GROUP, KIND, VERSION
from ..api.errors import SpecError, SpecErrors
from ..api.models import LLMService, dropped_fields, dropped_message, parse_llmservice
from ..facts.control import FactsDecision, needs_facts
from ..health import status as st
from ..health.podfailures import replica_failure
from ..health.podscheduling import creation_condition
from ..planning import Plan
from ..planning.sizing import plan_for_slo
from ..rendering import render_all
from ..rendering.identity import serving_selector
from ..rendering.inferencepool import (
    INFERENCE_POOL_API_VERSION,
    INFERENCE_POOL_KIND,
    describe_pool,
)
from ..rendering.leaderworkerset import LWS_API_VERSION, LWS_KIND, LWS_NAME_SUFFIX, is_multi_node
from ..rendering.placement import with_placement
from ..tuning.placement import held_before_serving, serving_view
from .context import OperatorContext, clock
from .facts import model_facts_step
from .kube import (
    MONITORING_GROUP,
    ApiError,
    ChildFailure,
    ConflictError,
    MissingAPIError,
    WriteAction,
    apply_children,
    delete_children,
    owner_name,
)

WORKLOAD_KINDS = {"Deployment", LWS_KIND}
CONFLICT_RETRY_SECONDS = 1
MISSING_API_RETRY_SECONDS = 60
FAILED_STEP_RETRY_SECONDS = 15  # a child that could not be written or deleted (403, 500)


# --------------------------------------------------------------------------- reconcile
@dataclass
class ReconcileOutcome:
    """What one pass decided: the status patch and the error to raise (if any)."""

    status_patch: dict[str, Any]
    error: Exception | None = None


async def reconcile(
    body: Mapping[str, Any], ctx: OperatorContext, logger: Any, *, created: bool = False,
    trigger: str = "handler",
) -> ReconcileOutcome:
    """Parse, plan, render, apply, and compute the status of one LLMService
    (``created``: kopf saw it appear, so its children are most likely absent).

    Returns the status patch (empty when nothing changed) and, for a spec that cannot be
    served or a cluster that lacks a kind, the kopf error to raise after writing it.
    Counted as a render in flight (:meth:`~.context.OperatorContext.after_renders`), and
    in the operator's metrics by ``trigger`` (who runs it: ``handler``, ``adaptation``,
    ``tuning``, ``resync``, ``workload``).
    """
    with ctx.rendering(), ctx.metrics.timed_reconcile(trigger) as run:
        outcome = await _reconcile(body, ctx, logger, created=created)
        run.failed = outcome.error is not None
        return outcome


async def _reconcile(
    body: Mapping[str, Any], ctx: OperatorContext, logger: Any, *, created: bool
) -> ReconcileOutcome:
    meta = body.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace") or "default")
    generation = meta.get("generation")
    current = dict(body.get("status") or {})
    now = clock()
    try:
        svc = parse_llmservice(body)
        ctx.metrics.service_spec(namespace, name, svc.spec)
        # The conditions as stored, so a restarted operator reports them before it writes.
        ctx.metrics.conditions(namespace, name,
                               (body.get("status") or {}).get("conditions") or [])
        read = None
        if needs_facts(svc.spec):  # neither the catalog nor spec.model.architecture
            facts = await model_facts_step(ctx, svc, logger)
            if facts.facts is None:
                return _facts_outcome(ctx, body, current, facts, name, namespace, generation,
                                      now)
            read = facts.facts
        plan = with_placement(plan_for_slo(svc.spec, gpus_per_node=ctx.settings.gpus_per_node,
                                        facts=read,
                                        load_bandwidth=ctx.settings.model_load_bandwidth),
                              svc.spec, ctx.settings)
        dropped = dropped_fields(body)
        if dropped:  # the API server pruned them; the user's client may not have said so
            plan = plan.model_copy(update={"warnings": [*plan.warnings, dropped_message(dropped)]})
        monitor = None
        if ctx.settings.pod_monitor == "auto":
            monitor = MONITORING_GROUP in await ctx.kube.served_groups()
        # spec.tuning.placement: a replica lent to a tuning run, or a new service's
        # server held back until its first run ends (tuning/placement.py).
        serving = serving_view(svc, current)
        held = held_before_serving(svc, plan, current)
        desired = render_all(serving, plan, ctx.settings, pod_monitor=monitor,
                             overrides=st.engine_overrides(current),
                             live_cap=st.live_cap_in_use(
                                 svc.spec, current, generation,
                                 adaptation_runs=bool(ctx.settings.prometheus_url),
                                 default_image=ctx.settings.default_image))
        if held is not None:
            desired = [d for d in desired if d["kind"] not in WORKLOAD_KINDS]
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
        return ReconcileOutcome(st.status_patch(current, new),
                       kopf.PermanentError(f"Invalid spec: {st.errors_message(errors)}"))

    applied = await apply_children(ctx.kube, desired, expect_absent=created)
    failures = list(applied.failed)
    workload = desired[0]
    workload_written = not any(f.kind == workload["kind"] for f in failures)
    # A service kopf just saw created, with nothing written to its status yet, whose
    # children this pass all created (none was there), owns no others: no read of the
    # kinds its plan does not want (a GET each: LWS, PodMonitor, PDB). A child that was
    # there already means an earlier attempt of this create ran (its status write failed,
    # or the operator was killed), maybe for an older spec that wanted more children: a
    # PodDisruptionBudget for 2 replicas, edited to 1 before the retry (the churn found it).
    first_pass = created and not current and not failures and all(
        c.action is WriteAction.CREATED for c in applied.changed)
    stale = [] if first_pass else _stale_children(name, {d["kind"] for d in desired})
    if not workload_written or held is not None:
        # The old workload keeps serving until the new one is written: never delete first.
        # (A server held back for a first tuning run has no workload to delete.)
        stale = [c for c in stale if c[1] not in WORKLOAD_KINDS]
    for change in await delete_children(ctx.kube, body, stale, failures):
        logger.info(f"Deleted {change.kind} {namespace}/{change.name}")
    pool = _pool_state(name, desired, failures)
    # A missing InferencePool CRD does not stop serving: its own condition says so.
    missing = next((f.error for f in failures if isinstance(f.error, MissingAPIError)
                    and f.kind != INFERENCE_POOL_KIND), None)
    if missing is not None:
        msg = f"{missing}; install it or change the spec so that its plan does not need it"
        new = st.build_status(current, name=name, namespace=namespace, generation=generation,
                              now=now, plan=plan, missing_api=msg, inference_pool=pool)
        return ReconcileOutcome(st.status_patch(current, new),
                       kopf.TemporaryError(msg, delay=MISSING_API_RETRY_SECONDS))
    if failures and all(isinstance(f.error, ConflictError) for f in failures):
        return ReconcileOutcome({}, kopf.TemporaryError("; ".join(map(str, failures)),
                                                        delay=CONFLICT_RETRY_SECONDS))
    if held is not None:
        new = st.build_status(current, name=name, namespace=namespace, generation=generation,
                              now=now, plan=plan, held=held,
                              engine=st.engine_in_effect(svc.spec.engine, plan, current),
                              inference_pool=pool)
        _pool_event(ctx, body, current, new)
        new = _metrics_source(ctx, body, svc, current, new, generation, now)
        return ReconcileOutcome(st.status_patch(current, new))

    if applied.changed:
        logger.info(", ".join(f"{c.action} {c.kind} {namespace}/{c.name}"
                              for c in applied.changed))
    for change in applied.changed:
        if change.kind in WORKLOAD_KINDS:
            verb = "Created" if change.action is WriteAction.CREATED else "Updated"
            ctx.post_event(body, "Normal", f"{change.kind}{verb}",
                           f"{verb} {change.kind} {namespace}/{change.name}: "
                           f"{_args_summary(plan)}")
    state = st.WorkloadState.from_object(applied.observed.get(workload["kind"]),
                                         serving.spec.replicas)
    selector = ",".join(f"{k}={v}" for k, v in
                        serving_selector(svc, leaders_only=is_multi_node(plan)).items())
    switch = _switch_incomplete(workload, failures, namespace)
    new = st.build_status(current, name=name, namespace=namespace, generation=generation,
                          now=now, plan=plan, workload=state, workload_kind=workload["kind"],
                          engine=st.engine_in_effect(svc.spec.engine, plan, current,
                                                     workload),
                          selector=selector, apply_failures=[str(f) for f in failures],
                          switch_incomplete=switch, inference_pool=pool)
    new = _metrics_source(ctx, body, svc, current, new, generation, now)
    new = _live_cap_version(ctx, body, svc, current, new, generation, now)
    _pool_event(ctx, body, current, new)
    if (current.get("plan") or {}) != new.get("plan"):
        ctx.post_event(body, "Normal", "Planned", st.plan_message(plan))
        if plan.adjustments and (current.get("plan") or {}).get("adjustments") != (
                new.get("plan") or {}).get("adjustments"):
            # What the planner changed so that vLLM starts (also in status.plan).
            ctx.post_event(body, "Normal", "EngineSettingsAdjusted",
                           st.adjustments_message(plan))
        if dropped:
            ctx.post_event(body, "Warning", "UnknownFields", dropped_message(dropped))
    error: Exception | None = None
    if failures:
        msg = switch or "; ".join(map(str, failures))
        logger.warning(f"Not every child could be written: {msg}")
        # Only the InferencePool's CRD missing: retried as any missing API is.
        delay = MISSING_API_RETRY_SECONDS if pool.missing_crd and len(failures) == 1 else (
            FAILED_STEP_RETRY_SECONDS)
        error = kopf.TemporaryError(msg, delay=delay)
        # A 403 from a namespace being deleted is not the RBAC's: the service goes with it.
        forbidden = [f for f in failures
                     if isinstance(f.error, ApiError) and f.error.status == 403
                     and not f.error.namespace_terminating]
        before = st.get_condition((current or {}).get("conditions") or [],
                                  st.ConditionType.CHILDREN_APPLIED)
        after = st.get_condition(new.get("conditions") or [], st.ConditionType.CHILDREN_APPLIED)
        if forbidden and (before or {}).get("message") != (after or {}).get("message"):
            # Once per change, not on every retry: the RBAC the operator runs with lacks a
            # verb (the chart's role edited, or an older chart); a retry every
            # FAILED_STEP_RETRY_SECONDS picks the fix up without a restart.
            said = "; ".join(map(str, forbidden))
            ctx.post_event(body, "Warning", "ChildForbidden",
                           f"{said} (the operator's RBAC lacks this verb: the chart's role "
                           f"grants it; retrying every {FAILED_STEP_RETRY_SECONDS}s)")
        rejected = [f for f in failures if isinstance(f.error, ApiError) and f.error.status == 422]
        if rejected:
            # 422: the API server refuses the child as rendered; retrying cannot help, only
            # a change of the spec (kopf runs the handler again on the next edit).
            said = "; ".join(map(str, rejected))
            ctx.post_event(body, "Warning", "ChildRejected", f"{said} (the API server refuses "
                           "it as the operator renders it from this spec)")
            error = kopf.PermanentError(f"the API server refused a child: {said}")
    return ReconcileOutcome(st.status_patch(current, new), error)


def _pool_state(name: str, desired: list[dict[str, Any]], failures: list[ChildFailure]
                ) -> st.InferencePoolState:
    """What this pass did about the InferencePool (see
    :class:`~llm_operator.health.status.InferencePoolState`)."""
    want = next((d for d in desired if d["kind"] == INFERENCE_POOL_KIND), None)
    if want is None:
        return st.InferencePoolState(wanted=False, name=name)
    failed = next((f for f in failures if f.kind == INFERENCE_POOL_KIND and f.step == "apply"),
                  None)
    if failed is not None and isinstance(failed.error, MissingAPIError):
        return st.InferencePoolState(wanted=True, name=want["metadata"]["name"],
                                     missing_crd=True)
    return st.InferencePoolState(wanted=True, name=want["metadata"]["name"],
                                 summary=describe_pool(want),
                                 failure=None if failed is None else str(failed.error))


def _pool_event(ctx: OperatorContext, body: Mapping[str, Any], current: Mapping[str, Any],
                new: Mapping[str, Any]) -> None:
    """A Warning Event with each change of InferencePoolReady to a False that needs the
    user (the CRD missing, a write refused), not on every retry."""
    ctype = st.ConditionType.INFERENCE_POOL_READY
    after = st.get_condition(new.get("conditions") or [], ctype)
    before = st.get_condition(current.get("conditions") or [], ctype)
    if after is None or after.get("status") != "False" or (
            after.get("reason") == st.Reason.POOL_NOT_REQUESTED):
        return
    if (before or {}).get("message") != after.get("message"):
        ctx.post_event(body, "Warning", str(after.get("reason")), str(after.get("message")))


def _metrics_source(ctx: OperatorContext, body: Mapping[str, Any], svc: LLMService,
                    current: Mapping[str, Any], new: dict[str, Any], generation: int | None,
                    now: float) -> dict[str, Any]:
    """Without a Prometheus URL the adaptation loop does not run: a service that asks for
    adaptation says so in ``MetricsAvailable`` (with the fix), and one Warning Event goes
    with each change of that message."""
    if ctx.settings.prometheus_url:
        return new
    new = st.with_no_prometheus(new, svc.spec, generation, now)
    after = st.get_condition(new.get("conditions") or [], st.ConditionType.METRICS_AVAILABLE)
    before = st.get_condition(current.get("conditions") or [],
                              st.ConditionType.METRICS_AVAILABLE)
    if after is not None and after.get("reason") == st.PROMETHEUS_NOT_CONFIGURED and (
            (before or {}).get("message") != after.get("message")):
        ctx.post_event(body, "Warning", "AdaptationCannotRun", str(after.get("message")))
    return new


def _live_cap_version(ctx: OperatorContext, body: Mapping[str, Any], svc: LLMService,
                      current: Mapping[str, Any], new: dict[str, Any],
                      generation: int | None, now: float) -> dict[str, Any]:
    """A service whose image's vLLM the live cap does not work on is rendered without it:
    ``LiveCap`` False says so with the fix, and one Warning Event goes with each change
    of that message."""
    new = st.with_live_cap_version(new, svc.spec, generation, now,
                                   default_image=ctx.settings.default_image,
                                   adaptation_runs=bool(ctx.settings.prometheus_url))
    after = st.get_condition(new.get("conditions") or [], st.ConditionType.LIVE_CAP)
    before = st.get_condition(current.get("conditions") or [], st.ConditionType.LIVE_CAP)
    if after is not None and after.get("reason") == st.LiveCapReason.VERSION and (
            (before or {}).get("message") != after.get("message")):
        ctx.post_event(body, "Warning", "LiveCapUnsupportedVersion", str(after.get("message")))
    return new


def _facts_outcome(ctx: OperatorContext, body: Mapping[str, Any], current: dict[str, Any],
                   facts: FactsDecision, name: str, namespace: str, generation: Any,
                   now: float) -> ReconcileOutcome:
    """The model's config.json is being read, or could not be: Planned False with why,
    nothing rendered (a workload planned before serves on). No error for kopf: the facts
    Job's end (``facts-job`` in :mod:`.handlers`) runs the reconciliation again, and a failed
    read is tried again when its Job goes (``ttlSecondsAfterFinished``)."""
    reason = st.Reason.MODEL_FACTS_FAILED if facts.failed else st.Reason.FETCHING_MODEL_FACTS
    msg = facts.failed or facts.waiting or "reading the model's config.json"
    new = st.build_status(current, name=name, namespace=namespace, generation=generation,
                          now=now, facts=(reason, msg))
    before = st.get_condition(current.get("conditions") or [], st.ConditionType.PLANNED)
    if facts.failed and (before or {}).get("message") != msg:
        ctx.post_event(body, "Warning", str(reason), msg)  # once per change of the message
    return ReconcileOutcome(st.status_patch(current, new))


def _switch_incomplete(
    workload: Mapping[str, Any], failures: list[ChildFailure], namespace: str
) -> str | None:
    """What a half-done switch between workload kinds leaves running (None: none is)."""
    new = f"{workload['kind']} {namespace}/{workload['metadata']['name']}"
    for f in failures:
        if f.step == "delete" and f.kind in WORKLOAD_KINDS:
            return (f"{new} is written, but {f.kind} {namespace}/{f.name}, which the plan no "
                    f"longer uses, could not be deleted and keeps its GPUs: {f.error}; "
                    f"retrying every {FAILED_STEP_RETRY_SECONDS}s")
        if f.step == "apply" and f.kind == workload["kind"]:
            return None  # nothing switched yet: the old workload (if any) serves on
    return None


async def reconcile_and_write(ctx: OperatorContext, body: Mapping[str, Any],
                              logger: Any, *, trigger: str) -> ReconcileOutcome:
    """A reconciliation outside kopf's ``reconcile`` handler (the tuning step rolling onto
    tuned settings, the resync): reconcile ``body``, then write its status at once.
    The caller decides what an ``outcome.error`` means there."""
    outcome = await reconcile(body, ctx, logger, trigger=trigger)
    await write_status(ctx, body, outcome.status_patch)
    return outcome


async def write_status(
    ctx: OperatorContext, obj: Mapping[str, Any], patch: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Write a status ``patch`` computed from ``obj`` (an LLMService as some handler read
    it) over the status stored now: the conditions it changed go into the stored list,
    with ``resourceVersion`` as the precondition (see
    :func:`~llm_operator.health.status.rebase_patch` and
    :meth:`~llm_operator.controller.kube.KubeClient.update_status`).
    Returns the LLMService as written (None when it is gone); its conditions go to the
    operator's metrics (``llmop_service_condition``)."""
    if not patch:
        return dict(obj)
    meta = obj.get("metadata") or {}
    base = obj.get("status") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    written = await ctx.kube.update_status(
        f"{GROUP}/{VERSION}", KIND, namespace, name,
        lambda fresh: st.rebase_patch(patch, base, fresh.get("status")), known=obj)
    if written is not None:
        ctx.metrics.conditions(namespace, name,
                               (written.get("status") or {}).get("conditions") or [])
    return written


def _args_summary(plan: Plan) -> str:
    return (f"{plan.gpus_per_replica} GPU(s) per replica, --tensor-parallel-size "
            f"{plan.tensor_parallel_size}, --max-num-seqs {plan.start_seqs}")


def _stale_children(name: str, wanted_kinds: set[str]) -> list[tuple[str, str, str]]:
    """Children the current plan no longer wants: the other workload kind (a plan that
    moved between one node and several), the PodMonitor when monitoring went away, the
    PodDisruptionBudget when replicas dropped to one, the InferencePool when
    spec.routing.inferencePool was turned off."""
    return [child for child in _children_of(name) if child[1] not in wanted_kinds]


async def delete_owned(ctx: OperatorContext, body: kopf.Body, logger: Any) -> None:
    """Delete the children of a deleted LLMService (see
    :func:`~llm_operator.controller.kube.delete_children` on why the garbage collector is
    not relied on alone)."""
    for change in await delete_children(ctx.kube, body, _children_of(body.meta.name or "")):
        logger.info(f"Deleted {change.kind} {body.meta.namespace}/{change.name}")


def _children_of(name: str) -> list[tuple[str, str, str]]:
    return [
        ("apps/v1", "Deployment", name),
        (LWS_API_VERSION, LWS_KIND, name + LWS_NAME_SUFFIX),
        ("v1", "Service", name),
        (f"{MONITORING_GROUP}/v1", "PodMonitor", name),
        ("policy/v1", "PodDisruptionBudget", name),
        (INFERENCE_POOL_API_VERSION, INFERENCE_POOL_KIND, name),
    ]


class NotReconciledYet(Exception):
    """A workload event came before its owner's first status write: try again soon."""


async def workload_changed(
    ctx: OperatorContext, body: kopf.Body, type: str | None, logger: Any,
    llmservices_by_name: kopf.Index[tuple[str, str], dict[str, Any]],
) -> None:
    """A managed workload (``body``) changed or was deleted (``type``): update its
    owner's workload conditions, or re-create it."""
    owner = owner_name(body)
    namespace = body.meta.namespace or "default"
    if owner is None:
        return
    notice: st.Notice | None = None
    found = list(llmservices_by_name.get((namespace, owner), []))
    if not found:
        return
    svc_body = found[-1]
    svc_meta = svc_body.get("metadata") or {}
    if svc_meta.get("deletionTimestamp"):
        return
    current = dict(svc_body.get("status") or {})
    valid = st.condition_status(current, st.ConditionType.SPEC_VALID)
    if valid is None and type != "DELETED" and replica_failure(body.get("status") or {}):
        # The Deployment's controller answered before the first status write reached the
        # index, and a failure to create pods brings no later event: come back.
        raise NotReconciledYet(f"{namespace}/{owner} has no status yet")
    if valid != "True":
        return  # nothing of ours should run; the reconcile handler owns this state
    if type == "DELETED":
        # Read the owner afresh: the index may not have seen it go yet (the garbage
        # collector deletes the workload of a deleted LLMService), and re-creating a
        # workload for a gone owner would leave an orphan.
        fresh = await ctx.kube.get(f"{GROUP}/{VERSION}", KIND, namespace, owner)
        fresh_meta = (fresh or {}).get("metadata") or {}
        if fresh is None or fresh_meta.get("uid") != svc_meta.get("uid") or (
                fresh_meta.get("deletionTimestamp")):
            return
        kind = body.get("kind")
        logger.info(f"{kind} {namespace}/{body.meta.name} was deleted: re-creating it")
        outcome = await reconcile(fresh, ctx, logger, trigger="workload")
        svc_body = fresh
    else:
        replicas = int((svc_body.get("spec") or {}).get("replicas", 1))
        if (current.get("tuning") or {}).get("borrowedReplicas"):
            try:  # a replica lent to a tuning run is not missing
                replicas = serving_view(parse_llmservice(svc_body), current).spec.replicas
            except (SpecError, SpecErrors):
                pass
        state = st.WorkloadState.from_object(body, replicas)
        kind, now = str(body.get("kind")), clock()
        conds = st.workload_conditions(
            current.get("conditions") or [], state, kind=kind, name=owner,
            generation=svc_meta.get("generation"), now=now)
        if kind == "Deployment":  # its controller copies the ReplicaSet's ReplicaFailure
            conds, notice = creation_condition(
                conds, replica_failure(body.get("status") or {}), kind=kind,
                name=str(body.meta.name), namespace=namespace,
                generation=svc_meta.get("generation"), now=now)
        if kind == "LeaderWorkerSet" and state.available < state.desired:
            # LWS says in an Event on itself when it recreated a group after a pod restart.
            events = await ctx.kube.list(
                "v1", "Event", namespace,
                field_selector=f"involvedObject.kind={kind},involvedObject.name="
                               f"{body.meta.name},reason={st.GROUP_RECREATED_REASON}")
            conds = st.with_group_recreated(conds, st.group_recreated_note(events, now),
                                            generation=svc_meta.get("generation"), now=now)
        outcome = ReconcileOutcome(st.status_patch(
            current, {"conditions": conds, "replicas": state.replicas}))
    written = await write_status(ctx, svc_body, outcome.status_patch)
    if notice is not None and written is not None:
        logger.warning(f"{namespace}/{owner}: {notice.message}")
        ctx.post_event(written, notice.type, notice.reason, notice.message)


async def facts_job_done(ctx: OperatorContext, namespace: str, name: str, logger: Any) -> bool:
    """A facts Job of ``namespace/name`` finished or went away: reconcile the LLMService
    (read afresh) unless its spec as it is now is planned already (its Job was deleted
    once read) or invalid. ``Planned`` may not say ``FetchingModelFacts`` yet: the handler
    that created the Job writes that after the other services' renders, and a quick Job
    can end first. True when that reconciliation planned it (the caller then runs the
    tuning step, which kopf's ``tuning`` handler ran before there was a plan)."""
    obj = await ctx.kube.get(API_VERSION, KIND, namespace, name)
    if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return False
    planned = st.get_condition((obj.get("status") or {}).get("conditions") or [],
                               st.ConditionType.PLANNED) or {}
    generation = (obj.get("metadata") or {}).get("generation")
    if planned.get("observedGeneration") == generation and (
            planned.get("status") == "True" or planned.get("reason") == st.Reason.INVALID_SPEC):
        return False
    outcome = await reconcile_and_write(ctx, obj, logger, trigger="facts")
    if outcome.error is not None:
        logger.warning(f"Reconciling {namespace}/{name} after its facts Job: {outcome.error}")
    return outcome.status_patch.get("plan") is not None

"""Reconciliation of one LLMService, and the one way every writer writes its status.

- :func:`reconcile`: parse, plan, render, apply the children, compute the status; a spec
  that cannot be served yields ``SpecValid=False`` with the message and a
  :class:`kopf.PermanentError` (kopf does not retry it; the next edit of the spec runs the
  handler again). The kopf handler (:mod:`.handlers`), the tuning step and the adaptation
  loop all call it.
- :func:`workload_changed`: a managed Deployment or LeaderWorkerSet changed: move
  Progressing, Available and Ready, and re-create a workload somebody deleted.
- :func:`delete_owned`: the children of a deleted LLMService.

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

from .. import status as st
from ..constants import GROUP, KIND, VERSION
from ..errors import SpecError, SpecErrors
from ..models import parse_llmservice
from ..planning import Plan, make_plan
from ..rendering import LWS_API_VERSION, LWS_KIND, LWS_NAME_SUFFIX, render_all
from .context import OperatorContext, clock
from .kube import (
    MONITORING_GROUP,
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


# --------------------------------------------------------------------------- reconcile
@dataclass
class ReconcileOutcome:
    """What one pass decided: the status patch and the error to raise (if any)."""

    status_patch: dict[str, Any]
    error: Exception | None = None


async def reconcile(
    body: Mapping[str, Any], ctx: OperatorContext, logger: Any, *, created: bool = False
) -> ReconcileOutcome:
    """Parse, plan, render, apply, and compute the status of one LLMService
    (``created``: kopf saw it appear, so its children are most likely absent).

    Returns the status patch (empty when nothing changed) and, for a spec that cannot be
    served or a cluster that lacks a kind, the kopf error to raise after writing it.
    """
    meta = body.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace") or "default")
    generation = meta.get("generation")
    current = dict(body.get("status") or {})
    now = clock()
    try:
        svc = parse_llmservice(body)
        plan = make_plan(svc.spec, gpus_per_node=ctx.settings.gpus_per_node)
        monitor = None
        if ctx.settings.pod_monitor == "auto":
            monitor = MONITORING_GROUP in await ctx.kube.served_groups()
        desired = render_all(svc, plan, ctx.settings, pod_monitor=monitor,
                             overrides=st.engine_overrides(current),
                             live_cap=st.live_cap_in_use(svc.spec, current, generation))
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

    try:
        applied = await apply_children(ctx.kube, desired, expect_absent=created)
    except MissingAPIError as exc:
        msg = f"{exc}; install it or change the spec so that its plan does not need it"
        new = st.build_status(current, name=name, namespace=namespace, generation=generation,
                              now=now, plan=plan, missing_api=msg)
        return ReconcileOutcome(st.status_patch(current, new),
                       kopf.TemporaryError(msg, delay=MISSING_API_RETRY_SECONDS))
    except ConflictError as exc:
        return ReconcileOutcome({}, kopf.TemporaryError(str(exc), delay=CONFLICT_RETRY_SECONDS))

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
            verb = "Created" if change.action is WriteAction.CREATED else "Updated"
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
    return ReconcileOutcome(st.status_patch(current, new))


async def write_status(
    ctx: OperatorContext, obj: Mapping[str, Any], patch: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Write a status ``patch`` computed from ``obj`` (an LLMService as some handler read
    it) over the status stored now: the conditions it changed go into the stored list,
    with ``resourceVersion`` as the precondition (see :func:`~llm_operator.status.rebase_patch`
    and :meth:`~llm_operator.controller.kube.KubeClient.update_status`).
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
    ]


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
            generation=svc_meta.get("generation"), now=clock())
        outcome = ReconcileOutcome(st.status_patch(current, {"conditions": conds}))
    await write_status(ctx, svc_body, outcome.status_patch)

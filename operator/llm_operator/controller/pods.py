"""Server pods not placed or not starting: ``PodsScheduled``, ``ContainersRunning`` (I/O).

kopf keeps an index of the operator's server pods by LLMService (labels
``app.kubernetes.io/managed-by=llm-operator``, ``llmops.dev/component=server``); every
event of such a pod (the initial listing after a restart included) recomputes the
condition from the index with the pure
:func:`llm_operator.health.podscheduling.scheduling_condition` and writes it through
:func:`.reconcile.write_status`. The scheduler marks a pod Unschedulable on its first
attempt, so the condition follows within seconds, far inside a minute.

The same path sets ``ContainersRunning`` (a crash loop; a probe kill, from the pod's
Events while a restarted container has not started; an image the kubelet cannot pull
or parse; a missing Secret or key, from the containers' waiting state, which the kubelet
writes on the pod, so a pod event follows). A pod the kubelet cannot set up (a volume it
cannot mount or attach) stays in ``ContainerCreating`` and its status does not change:
the kubelet and the attach-detach controller say why in Events only. So for a server pod
that is bound and has no container yet, the pod's Events are listed (field selector on
the pod), on each of its events and every :data:`CREATING_RECHECK_SECONDS` by
:func:`creating_pods_loop` while it stays so: a FailedMount or FailedAttachVolume shows
on the LLMService within that interval of the Event; a FailedMount only once the pod has
been bound :data:`~llm_operator.health.podfailures.VOLUME_GRACE_SECONDS` (45 s: a volume still
attaching on a healthy start shows one too), so at most about 65 s after it was bound,
and a volume that a pod on another node uses (Multi-Attach) at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from ..adaptation.evidence import ServiceKey
from ..api.constants import LABEL_SERVICE
from ..health import status as st
from ..health.podscheduling import (
    PodScheduling,
    crash_condition,
    live_cap_fallback,
    placement_note,
    reads_events,
    scheduling_condition,
    with_events,
)
from .context import OperatorContext, clock
from .kube import JSON
from .reconcile import reconcile_and_write, write_status

# How often the Events of a server pod stuck in ContainerCreating are read again.
CREATING_RECHECK_SECONDS = 20.0


def pod_service_key(namespace: str | None, labels: Mapping[str, str]) -> ServiceKey | None:
    """``(namespace, LLMService name)`` a server pod belongs to, from its labels."""
    name = labels.get(LABEL_SERVICE)
    return (namespace or "default", name) if name else None


async def pods_changed(
    ctx: OperatorContext,
    key: ServiceKey,
    services: kopf.Index[ServiceKey, dict[str, Any]],
    pods: kopf.Index[ServiceKey, PodScheduling],
    logger: Any,
) -> None:
    """A server pod of the service ``key`` changed: set its ``PodsScheduled`` and
    ``ContainersRunning`` conditions (and post a Warning Event when one changes to False
    or to another reason)."""
    found = list(services.get(key, []))
    if not found:
        return
    svc_body = found[-1]
    meta = svc_body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return
    current = dict(svc_body.get("status") or {})
    listed = list(pods.get(key, []))
    events = await pod_events(ctx, key[0], listed)
    now, generation = clock(), meta.get("generation")
    found_pods = with_events(listed, events, now=now)
    conds, notice = scheduling_condition(
        current.get("conditions") or [], found_pods,
        placement=placement_note(current), generation=generation, now=now)
    conds, crash = crash_condition(conds, found_pods, generation=generation, now=now)
    fallback = live_cap_fallback(svc_body, current, found_pods)
    if fallback is not None:
        message = fallback["liveCapFallback"]["message"]
        conds = st.set_condition(
            conds, st.ConditionType.LIVE_CAP, False, st.LiveCapReason.SCHEDULER_FAILED,
            message, generation=generation, now=now)
    patch = st.status_patch(current, {"conditions": conds})
    if fallback is not None:
        patch["adaptation"] = fallback  # the adaptation loop's key, written for it here
    if not patch:
        return
    written = await write_status(ctx, svc_body, patch)
    said_all = [notice, crash]
    if fallback is not None:
        said_all.append(st.Notice("Warning", "LiveCapFallback", message))
    for said in said_all:
        if said is not None and written is not None:
            logger.warning(f"{key[0]}/{key[1]}: {said.message}")
            ctx.post_event(written, said.type, said.reason, said.message)
    if fallback is not None and written is not None:
        # Re-render at once: the Deployment rolls onto vLLM's own scheduler.
        await reconcile_and_write(ctx, written, logger, trigger="pods")


def _about(involved: Mapping[str, Any], pod: PodScheduling) -> bool:
    return (involved.get("kind") == "Pod" and involved.get("name") == pod.name
            and (not pod.uid or involved.get("uid") in (None, "", pod.uid)))


async def pod_events(ctx: OperatorContext, namespace: str,
                     pods: Sequence[PodScheduling]) -> dict[str, list[JSON]]:
    """The Events of each pod whose Events say more than its status
    (:func:`~llm_operator.health.podscheduling.reads_events`: still creating, or a
    container restarted and not started since), by pod name: only those of this very pod
    (its uid), not of an earlier namesake."""
    out: dict[str, list[JSON]] = {}
    for pod in pods:
        if not reads_events(pod):
            continue
        events = await ctx.kube.list(
            "v1", "Event", namespace,
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod.name}")
        out[pod.name] = [e for e in events if _about(e.get("involvedObject") or {}, pod)]
    return out


async def creating_pods_loop(
    ctx: OperatorContext, services: kopf.Index[ServiceKey, dict[str, Any]],
    pods: kopf.Index[ServiceKey, PodScheduling], logger: Any,
) -> None:
    """Every :data:`CREATING_RECHECK_SECONDS`: :func:`pods_changed` for each service with
    a server pod whose Events say more than its status (its status does not change while
    a volume fails, and the kubelet's Killing Event can come after the restart's pod
    event). Never raises: a failed round is logged and tried again."""
    while True:
        await asyncio.sleep(CREATING_RECHECK_SECONDS)
        for key in sorted(pods):
            if not any(reads_events(p) for p in pods.get(key, [])):
                continue
            try:
                await pods_changed(ctx, key, services, pods, logger)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one service's failure must not stop the others
                logger.warning(f"Pod check of {key[0]}/{key[1]}: {exc!r}")

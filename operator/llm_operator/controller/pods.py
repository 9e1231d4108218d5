"""Server pods the scheduler cannot place: the ``PodsScheduled`` condition (I/O edge).

kopf keeps an index of the operator's server pods by LLMService (labels
``app.kubernetes.io/managed-by=llm-operator``, ``llmops.dev/component=server``); every
event of such a pod (the initial listing after a restart included) recomputes the
condition from the index with the pure
:func:`llm_operator.podscheduling.scheduling_condition` and writes it through
:func:`.reconcile.write_status`. The scheduler marks a pod Unschedulable on its first
attempt, so the condition follows within seconds, far inside a minute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from .. import status as st
from ..adaptation.policy import ServiceKey
from ..constants import LABEL_SERVICE
from ..podscheduling import (
    PodScheduling,
    crash_condition,
    placement_note,
    scheduling_condition,
)
from .context import OperatorContext, clock
from .reconcile import write_status


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
    """A server pod of the service ``key`` changed: set its ``PodsScheduled`` condition
    (and post the Warning Event when it becomes False)."""
    found = list(services.get(key, []))
    if not found:
        return
    svc_body = found[-1]
    meta = svc_body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return
    current = dict(svc_body.get("status") or {})
    now, generation, found_pods = clock(), meta.get("generation"), list(pods.get(key, []))
    conds, notice = scheduling_condition(
        current.get("conditions") or [], found_pods,
        placement=placement_note(current), generation=generation, now=now)
    conds, crash = crash_condition(conds, found_pods, generation=generation, now=now)
    patch = st.status_patch(current, {"conditions": conds})
    if not patch:
        return
    written = await write_status(ctx, svc_body, patch)
    for said in (notice, crash):
        if said is not None and written is not None:
            logger.warning(f"{key[0]}/{key[1]}: {said.message}")
            ctx.post_event(written, said.type, said.reason, said.message)

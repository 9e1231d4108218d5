"""Server pods the scheduler cannot place (pure): the ``PodsScheduled`` condition.

A GPU pod whose node selector no node matches (a GPU class that does not fit the
cluster, a product no node has, a taint it does not tolerate, no free GPU) stays
``Pending`` and the scheduler says why on the pod: condition ``PodScheduled=False`` with
reason ``Unschedulable`` and a message such as "0/3 nodes are available: 3 node(s)
didn't match Pod's node affinity/selector". Nobody reads pods of a Deployment; the
LLMService is what users look at. So the operator watches its server pods
(:mod:`llm_operator.controller.pods`) and reports, on the LLMService:

- ``PodsScheduled=False``, reason ``Unschedulable``: at least one server pod is
  Unschedulable; the message names the pod, quotes the scheduler and says which GPU
  class and node label placed it (from ``status.plan``). A Warning Event
  ``Unschedulable`` goes with the change to False.
- ``PodsScheduled=True``, reason ``Scheduled``: no server pod waits for a node (the
  pods that exist are bound, or are still waiting for their first scheduling attempt).

No clock is read here: the caller passes ``now``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .status import JSON, ConditionType, Notice, get_condition, set_condition

REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULED = "Scheduled"
EVENT_UNSCHEDULABLE = "Unschedulable"


@dataclass(frozen=True)
class PodScheduling:
    """What one pod's status says about its scheduling, reduced."""

    name: str
    unschedulable: bool
    message: str = ""

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodScheduling:
        """Read a pod (pure). Unschedulable: ``PodScheduled`` is ``False`` with reason
        ``Unschedulable`` (the scheduler's verdict) and the pod is not bound to a node."""
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        bound = bool((pod.get("spec") or {}).get("nodeName"))
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled":
                stuck = (cond.get("status") == "False"
                         and cond.get("reason") == REASON_UNSCHEDULABLE and not bound
                         and not meta.get("deletionTimestamp"))
                return cls(str(meta.get("name") or ""), stuck, str(cond.get("message") or ""))
        return cls(str(meta.get("name") or ""), False)


def placement_note(status: Mapping[str, Any] | None) -> str | None:
    """The sentence of ``status.plan`` saying which GPU class and label placed the pods
    (the ``placement`` explanation), or None."""
    for item in ((status or {}).get("plan") or {}).get("explanations") or []:
        if item.get("name") == "placement":
            return str(item.get("formula") or "") or None
    return None


def scheduling_condition(
    conditions: Sequence[Mapping[str, Any]],
    pods: Sequence[PodScheduling],
    *,
    placement: str | None,
    generation: int | None,
    now: float,
) -> tuple[list[JSON], Notice | None]:
    """The conditions with ``PodsScheduled`` set from the server ``pods``, and the Event
    to post when it has just become False (None otherwise)."""
    stuck = sorted((p for p in pods if p.unschedulable), key=lambda p: p.name)
    before = get_condition(conditions, ConditionType.PODS_SCHEDULED)
    if not stuck:
        waiting = f"all {len(pods)} server pods have a node or await their first attempt"
        msg = waiting if pods else "no server pod waits for a node"
        return set_condition(conditions, ConditionType.PODS_SCHEDULED, True, REASON_SCHEDULED,
                             msg, generation=generation, now=now), None
    first = stuck[0]
    msg = (f"{len(stuck)} of {len(pods)} server pods cannot be scheduled; pod {first.name}: "
           f"{first.message or 'no message from the scheduler'}")
    if placement:
        msg += f" (placed by {placement}; check that the GPU nodes carry that label, or set "
        msg += "spec.scheduling.nodeSelector)"
    conds = set_condition(conditions, ConditionType.PODS_SCHEDULED, False,
                          REASON_UNSCHEDULABLE, msg, generation=generation, now=now)
    notice = None
    if before is None or before.get("status") != "False":
        notice = Notice("Warning", EVENT_UNSCHEDULABLE, msg)
    return conds, notice

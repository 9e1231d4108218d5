"""The tuning bill (pure): the GPUs tuning Jobs hold, the budget that bounds them, and
what each run cost.

The budget (``LLMOP_TUNING_GPU_BUDGET``, Helm value ``settings.tuningGpuBudget``) bounds
the GPUs that tuning Jobs on *spare* GPUs hold at once, across every namespace the
operator watches. Those are the GPUs tuning adds to the bill: a ``BorrowReplica`` run uses
a replica serving gave up, a ``BeforeServing`` run the GPUs of a server that waits for it,
so those runs neither wait for the budget nor count against it (the Job's
:data:`~llm_operator.api.constants.ANNOTATION_TUNING_ON_SPARE` annotation says which it is).

What "held" means (:func:`job_gpus_held`): a tuning Job that has not finished (no
``Complete`` or ``Failed`` condition) and is not suspended holds the GPUs its pod template
requests (:func:`pod_gpu_request`) times its ``parallelism``, whether its pod runs, waits
for a node, or terminates: a waiting pod is the one an autoscaler would buy a node for, a
Job being deleted still has a pod that holds its GPUs until it is gone. A Job without the
annotation (made by an older operator) counts, as on spare GPUs.

A run whose Job would take the held GPUs over the budget is not created: the service's
``status.tuning.state`` is ``Queued`` (``Tuned`` condition ``TuningQueued``, saying how
many GPUs tuning holds, the budget and the Helm value that raises it), and the operator
tries again every 20 s (:data:`llm_operator.controller.tuning.PROGRESS_INTERVAL_SECONDS`).

What a run cost (:func:`pods_gpu_seconds`): each of the Job's pods' GPUs from the time
the kubelet started it (``status.startTime``: it is on a node, its GPUs are allocated)
to the time its last container ended (or ``now`` while one still runs). A pod that never
left ``Pending`` for a node cost nothing. ``status.tuning.gpuMinutes`` is the run's total
over its attempts, the ``TuningSucceeded``/``TuningFailed``/``TuningCancelled`` Event
says it, and ``llmop_tuning_gpu_seconds_total`` counts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..api.constants import ANNOTATION_TUNING_ON_SPARE
from ..api.timestamps import parse_rfc3339_or_none

HELM_VALUE = "settings.tuningGpuBudget"
SETTING = "LLMOP_TUNING_GPU_BUDGET"
# Resources of the "kubernetes.io" domain are the core ones (cpu, memory, storage,
# hugepages-*) or quotas: never a device. Every other domain-qualified resource in a
# tuning pod is the GPU the renderer asked for (spec.gpus.resourceName or the GPU class's).
_CORE_DOMAINS = ("kubernetes.io", "requests.kubernetes.io")


def is_device_resource(name: str) -> bool:
    """Whether a resource name is an extended (device) resource: ``nvidia.com/gpu``,
    ``amd.com/gpu``, ``nvidia.com/mig-1g.10gb``; not ``cpu``, ``memory``,
    ``ephemeral-storage`` or ``hugepages-2Mi``."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and domain not in _CORE_DOMAINS


def _count(value: Any) -> int:
    """An extended resource's quantity (a whole number: Kubernetes refuses fractions)."""
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


def container_gpus(container: Mapping[str, Any]) -> int:
    """A container's device request: its ``requests`` (which for extended resources equal
    the limits), else its ``limits`` (a request defaults to the limit)."""
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    names = {n for n in (*requests, *limits) if is_device_resource(str(n))}
    return sum(_count(requests.get(n, limits.get(n))) for n in names)


def pod_gpu_request(pod_spec: Mapping[str, Any]) -> int:
    """The GPUs one pod of ``pod_spec`` holds, as the scheduler counts them: the larger of
    its containers' sum and its largest init container (init containers run one at a
    time, before the others)."""
    main = sum(container_gpus(c) for c in pod_spec.get("containers") or [])
    init = max((container_gpus(c) for c in pod_spec.get("initContainers") or []), default=0)
    return max(main, init)


def job_finished(job: Mapping[str, Any]) -> bool:
    """A ``Complete`` or ``Failed`` condition is True: its pods are done."""
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def job_on_spare(job: Mapping[str, Any]) -> bool:
    """The Job's annotation says it runs on spare GPUs (absent: counted as spare)."""
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_TUNING_ON_SPARE)
    return value != "false"


def job_gpus_held(job: Mapping[str, Any]) -> int:
    """GPUs a tuning Job on spare GPUs holds now (see the module docstring): 0 once
    finished, while suspended, or when it runs on GPUs serving lent it."""
    spec = job.get("spec") or {}
    if job_finished(job) or spec.get("suspend") or not job_on_spare(job):
        return 0
    parallelism = spec.get("parallelism")
    pods = 1 if parallelism is None else _count(parallelism)
    template = (spec.get("template") or {}).get("spec") or {}
    return pods * pod_gpu_request(template)


def job_key(job: Mapping[str, Any]) -> tuple[str, str]:
    meta = job.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def gpus_held(jobs: Iterable[Mapping[str, Any]],
              exclude: Iterable[tuple[str, str]] = ()) -> int:
    """GPUs all ``jobs`` hold (:func:`job_gpus_held`), less the Jobs named in ``exclude``
    (``(namespace, name)``: the starting service's own superseded Jobs, deleted as the new
    one is created)."""
    skip = set(exclude)
    return sum(job_gpus_held(j) for j in jobs if job_key(j) not in skip)


@dataclass(frozen=True)
class BudgetCheck:
    """Whether one run fits: ``held`` GPUs now, ``need`` for its Job, ``budget``."""

    held: int
    need: int
    budget: int

    @property
    def fits(self) -> bool:
        return self.held + self.need <= self.budget

    @property
    def never_fits(self) -> bool:
        """The run alone is larger than the whole budget."""
        return self.need > self.budget

    def message(self) -> str:
        """Why the run waits (the ``Tuned`` condition's message and the Event's)."""
        held = (f"tuning Jobs on spare GPUs hold {self.held} of the {self.budget}-GPU "
                f"tuning budget")
        raise_to = self.held + self.need if not self.never_fits else self.need
        if self.never_fits:
            return (f"this run needs {self.need} GPU(s), more than the whole tuning budget "
                    f"of {self.budget} (Helm value {HELM_VALUE}, {SETTING}), so it cannot "
                    f"start: raise {HELM_VALUE} to at least {self.need}, or set "
                    "spec.tuning.placement to BorrowReplica or BeforeServing, or "
                    "spec.tuning.mode to Disabled")
        return (f"{held} and this run needs "
                f"{self.need}; it starts when enough of them end, or raise Helm value "
                f"{HELM_VALUE} ({SETTING}) to {raise_to} or more")


def gpu_seconds_of_pod(pod: Mapping[str, Any], now: float) -> float:
    """One pod's GPU-seconds: its GPUs (:func:`pod_gpu_request`) from ``status.startTime``
    (on a node) to its last container's end (``now`` while one still runs)."""
    status = pod.get("status") or {}
    started = parse_rfc3339_or_none(status.get("startTime"))
    gpus = pod_gpu_request(pod.get("spec") or {})
    if started is None or gpus == 0:
        return 0.0
    ends: list[float] = []
    running = False
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        state = cs.get("state") or {}
        if "terminated" in state:
            end = parse_rfc3339_or_none(state["terminated"].get("finishedAt"))
            if end is not None:
                ends.append(end)
        elif "running" in state or "waiting" in state:
            running = True
    if status.get("phase") in ("Succeeded", "Failed") and ends:
        end = max(ends)
    elif running or not ends:
        end = now
    else:
        end = max(ends)
    return gpus * max(0.0, end - started)


def pods_gpu_seconds(pods: Sequence[Mapping[str, Any]], now: float) -> float:
    """GPU-seconds of all the Job's pods (:func:`gpu_seconds_of_pod`)."""
    return sum(gpu_seconds_of_pod(p, now) for p in pods)


def gpu_minutes(seconds: float) -> float:
    """GPU-seconds as the GPU-minutes ``status.tuning`` shows (one decimal)."""
    return round(seconds / 60.0, 1)

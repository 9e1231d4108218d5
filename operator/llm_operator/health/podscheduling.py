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

The same pod events report a container that keeps crashing (``ContainersRunning``):

- ``ContainersRunning=False``, reason ``CrashLoopBackOff``: a container of a server pod
  (the download init container included) waits in the kubelet's crash back-off; the
  message names the pod and container, the restarts, the last exit code and the last
  line the container wrote (the vLLM container's termination message falls back to
  its log tail: ``terminationMessagePolicy: FallbackToLogsOnError``), e.g. vLLM's
  "error: unrecognized arguments". A Warning Event ``CrashLoopBackOff`` goes with the
  change to False.
- ``ContainersRunning=False`` with the kubelet's reason when a server pod cannot start
  for a reason it will not get past by itself: ``ImagePullBackOff``,
  ``InvalidImageName``, ``CreateContainerConfigError`` (from the container's waiting
  state), ``FailedMount`` or ``FailedAttachVolume`` (a pod stuck in
  ``ContainerCreating``, from its Events); the message names the pod and container,
  quotes the kubelet or controller and says the fix (:mod:`llm_operator.health.podfailures`).
  A Warning Event goes with each change of the condition's status or reason.
- ``ContainersRunning=False``, reason ``StartupProbeFailed`` or ``LivenessProbeFailed``:
  the kubelet killed a container for a failed probe (the pod's ``Killing`` Event, read
  while a restarted container has not started since; :func:`with_events`). It replaces
  the crash loop such a kill causes, which names no cause.
- ``ContainersRunning=False``, reason ``NodeNotReady``: a server pod's node stopped
  reporting. The kubelet is then silent, so the pod is read for the node controller's
  mark: ``Ready=False`` while ``ContainersReady`` is still ``True`` (the kubelet sets both
  together; the node lifecycle controller flips only ``Ready``, 50 s after the node's
  last heartbeat by default). The message names the pod and node, says the containers may
  still run there, and when Kubernetes evicts the pod (its toleration of
  ``node.kubernetes.io/unreachable``, 300 s by default); no node is read (no RBAC on
  nodes). Tried for real in tests/nodes/test_node_loss_in_containers.py.
- ``ContainersRunning=True``, reason ``Running``: no server container crash-loops or
  is stuck.

``PodsCreated`` (from the Deployment, :func:`creation_condition`): False with reason
``FailedCreate`` while the ReplicaSet controller cannot create the pods (its
``ReplicaFailure`` condition, which the Deployment controller copies), with the fix.

No clock is read here: the caller passes ``now``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..api.errors import SpecError, SpecErrors
from ..api.models import parse_llmservice
from ..inpod.engine.cap import FAILURE_PREFIX
from .podfailures import (
    REASON_CREATED,
    REASON_FAILED_CREATE,
    VOLUME_GRACE_SECONDS,
    PodProblem,
    PodVolumes,
    Restarted,
    bound_time,
    creating,
    creation_fix,
    probe_problem,
    restarted_containers,
    scheduling_fix,
    volume_problem,
    waiting_problem,
)
from .status import (
    JSON,
    ConditionType,
    Notice,
    get_condition,
    live_cap_crash_fallback,
    set_condition,
)

REASON_UNSCHEDULABLE = "Unschedulable"
REASON_CRASH_LOOP = "CrashLoopBackOff"
REASON_RUNNING = "Running"
# The kubelet's waiting reasons for a container that exited and is being restarted.
_CRASH_REASONS = frozenset({"CrashLoopBackOff", "RunContainerError"})
REASON_SCHEDULED = "Scheduled"
REASON_NODE_NOT_READY = "NodeNotReady"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
EVENT_UNSCHEDULABLE = "Unschedulable"


@dataclass(frozen=True)
class PodScheduling:
    """What one pod's status says about its scheduling, reduced."""

    name: str
    unschedulable: bool
    message: str = ""
    crash: str | None = None  # a crash-looping container, said in one sentence
    # the admission scheduler's own failure line in that container's last termination
    # message (``llmop-live-cap: ...``, see :func:`live_cap_failure`), if any
    live_cap_failure: str | None = None
    problem: PodProblem | None = None  # a container that cannot start (podfailures)
    creating: bool = False  # bound, no container created yet: read its volume Events
    volumes: PodVolumes = field(default_factory=PodVolumes)
    uid: str = ""
    bound_at: float | None = None  # when it was bound to its node (epoch seconds)
    node_lost: str | None = None  # its node stopped reporting (:func:`node_lost_of`)
    # containers restarted and not started since: read its Events for a probe kill
    restarted: tuple[Restarted, ...] = ()

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodScheduling:
        """Read a pod (pure). Unschedulable: ``PodScheduled`` is ``False`` with reason
        ``Unschedulable`` (the scheduler's verdict) and the pod is not bound to a node."""
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        bound = bool((pod.get("spec") or {}).get("nodeName"))
        name = str(meta.get("name") or "")
        lost = node_lost_of(pod)
        # What the kubelet last said of a pod on a node that stopped reporting is stale.
        crash = None if lost else crash_of(status, pod.get("spec") or {}, name)
        volumes = PodVolumes.from_pod(pod)
        more: dict[str, Any] = {"live_cap_failure": None if lost else live_cap_failure(status),
                                "problem": None if lost else waiting_problem(pod, volumes),
                                "node_lost": lost,
                                "restarted": () if lost else restarted_containers(pod),
                                "creating": creating(pod), "volumes": volumes,
                                "uid": str(meta.get("uid") or ""), "bound_at": bound_time(pod)}
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled":
                stuck = (cond.get("status") == "False"
                         and cond.get("reason") == REASON_UNSCHEDULABLE and not bound
                         and not meta.get("deletionTimestamp"))
                return cls(name, stuck, str(cond.get("message") or ""), crash, **more)
        return cls(name, False, crash=crash, **more)


def node_lost_of(pod: Mapping[str, Any]) -> str | None:
    """The sentence for a server pod whose node stopped reporting, or None: the pod is
    bound and not deleted, has no readiness gates, and its ``Ready`` condition is
    ``False`` while ``ContainersReady`` is ``True``. The kubelet never writes that pair
    (it sets ``Ready`` from ``ContainersReady``); the node lifecycle controller does, when
    it marks the pods of a node that missed its heartbeats."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node or meta.get("deletionTimestamp") or spec.get("readinessGates"):
        return None
    conds = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    ready, containers = conds.get("Ready") or {}, conds.get("ContainersReady") or {}
    if not (ready.get("status") == "False" and containers.get("status") == "True"):
        return None
    toleration = next((t for t in spec.get("tolerations") or []
                       if t.get("key") == UNREACHABLE_TAINT and t.get("effect") == "NoExecute"),
                      None)
    seconds = (toleration or {}).get("tolerationSeconds")
    if toleration is None:
        evicted = (f"Kubernetes evicts it once the node is tainted {UNREACHABLE_TAINT} "
                   "(it has no toleration of it) and the controller replaces it")
    elif seconds is None:
        evicted = f"it tolerates {UNREACHABLE_TAINT} without a limit, so it is not evicted"
    else:
        evicted = (f"Kubernetes evicts it {seconds} s after the node became unreachable (its "
                   f"toleration of {UNREACHABLE_TAINT}) and the controller replaces it on "
                   "another node")
    since = ready.get("lastTransitionTime")
    return (f"pod {meta.get('name')} on node {node} was marked not Ready"
            + (f" at {since}" if since else "")
            + " while its containers last reported ready: the node controller does so when "
            f"the node's kubelet stops reporting. Its containers may still run there, "
            f"unseen. If the node reports again the pod is Ready again without a restart; "
            f"otherwise {evicted}. Fix: check the node (`kubectl describe node {node}`), "
            "its kubelet and its container runtime")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _crash_looping(status: Mapping[str, Any], keys: Sequence[str] = (
        "initContainerStatuses", "containerStatuses"),
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """``(container status, its last termination)`` of each container in ``keys`` that
    waits in a crash back-off, in order."""
    for key in keys:
        for cs in status.get(key) or []:
            if ((cs.get("state") or {}).get("waiting") or {}).get("reason") in _CRASH_REASONS:
                yield cs, (cs.get("lastState") or {}).get("terminated") or {}


def memory_limit_of(pod_spec: Mapping[str, Any], container: str) -> str | None:
    """The memory limit of the named container (or init container) of a pod spec."""
    for key in ("containers", "initContainers"):
        for c in pod_spec.get(key) or []:
            if c.get("name") == container:
                limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
                return str(limit) if limit else None
    return None


def oom_sentence(container: str, limit: str | None) -> str:
    """What an OOMKilled container means and its fix, naming its memory limit."""
    where = (f"at its memory limit of {limit} (spec.resources.memory)" if limit
             else "with no memory limit of its own (the node ran out of memory)")
    return (f"the kernel killed container {container} {where}. Fix: raise "
            "spec.resources.memory, or make vLLM hold less in host memory: vLLM's CPU build "
            "keeps its KV cache there (VLLM_CPU_KVCACHE_SPACE in spec.pod.env), a GPU "
            "build its swap space (--swap-space) and CPU offload (--cpu-offload-gb)")


# vLLM's API server's last line when its engine process failed to start (vLLM 0.32): the
# engine's own error is earlier in the log, beyond the 2,048 bytes of the termination
# message the kubelet keeps (FallbackToLogsOnError).
ENGINE_START_FAILED = "Engine core initialization failed"


def engine_start_hint(container: str, pod: str | None) -> str:
    """Where the engine's own error is when vLLM says it failed to start, and the usual
    cause on the CPU build."""
    logs = f"kubectl logs {pod or 'POD'} -c {container} --previous"
    return (f" (vLLM's engine process failed first; its own error is earlier in the "
            f"container's log: `{logs}`. On vLLM's CPU build a KV cache larger than the "
            "container's free memory fails here: lower VLLM_CPU_KVCACHE_SPACE in "
            "spec.pod.env or raise spec.resources.memory)")


def crash_of(status: Mapping[str, Any], pod_spec: Mapping[str, Any] | None = None,
             pod: str | None = None) -> str | None:
    """The first container of a pod status (init containers first) that waits in a
    crash back-off, as "container C restarted N times (exit code E, R): LAST LINE"; for
    one the kernel killed at its memory limit (OOMKilled), the limit and the fix instead
    of the last line."""
    for cs, last in _crash_looping(status):
        name = str(cs.get("name"))
        said = f"container {name} restarted {cs.get('restartCount', 0)} times"
        if last:
            said += f" (exit code {last.get('exitCode')}, {last.get('reason') or 'Error'})"
        if last.get("reason") == "OOMKilled":
            return f"{said}: {oom_sentence(name, memory_limit_of(pod_spec or {}, name))}"
        line = _last_line(str(last.get("message") or ""))
        if ENGINE_START_FAILED in line:
            line += engine_start_hint(name, pod)
        return f"{said}: {line}" if line else said
    return None


def live_cap_failure(status: Mapping[str, Any]) -> str | None:
    """The line the live admission cap's scheduler wrote about its own failure
    (:data:`~llm_operator.inpod.engine.cap.FAILURE_PREFIX`) in the last termination message
    of a container that waits in a crash back-off, or None. vLLM's own log tail (what
    ``FallbackToLogsOnError`` keeps) is not searched for the class name: vLLM prints its
    arguments, ``--scheduler-cls`` among them, on every start, failed or not."""
    for _, last in _crash_looping(status, ("containerStatuses",)):
        for line in str(last.get("message") or "").splitlines():
            if line.strip().startswith(FAILURE_PREFIX):
                return line.strip()[:1000]
    return None


def live_cap_fallback(body: Mapping[str, Any], status: Mapping[str, Any],
                      pods: Sequence[PodScheduling]) -> JSON | None:
    """The ``status.adaptation`` turning the live cap off when a server pod crash-loops
    on the admission scheduler's own failure (:func:`~.status.live_cap_crash_fallback`),
    else None."""
    failing = sorted((p for p in pods if p.live_cap_failure), key=lambda p: p.name)
    if not failing:
        return None
    try:
        svc = parse_llmservice(body)
    except (SpecError, SpecErrors):
        return None  # an invalid spec renders no server; nothing to turn off
    generation = (body.get("metadata") or {}).get("generation")
    return live_cap_crash_fallback(svc.spec, status, generation, failing[0].name,
                                   str(failing[0].live_cap_failure))


def placement_note(status: Mapping[str, Any] | None) -> str | None:
    """The sentence of ``status.plan`` saying which GPU class and label placed the pods
    (the ``placement`` explanation), or None."""
    for item in ((status or {}).get("plan") or {}).get("explanations") or []:
        if item.get("name") == "placement":
            return str(item.get("formula") or "") or None
    return None


def _set_false_or_true(
    conditions: Sequence[Mapping[str, Any]], ctype: ConditionType, *,
    bad: str | None, bad_reason: str, good: str, good_reason: str,
    generation: int | None, now: float,
) -> tuple[list[JSON], Notice | None]:
    """``ctype`` False with ``bad`` (and a Warning Event when it turns False or its reason
    changes: once per change, not per event), or True with ``good`` when ``bad`` is None."""
    if bad is None:
        return set_condition(conditions, ctype, True, good_reason, good,
                             generation=generation, now=now), None
    before = get_condition(conditions, ctype)
    conds = set_condition(conditions, ctype, False, bad_reason, bad,
                          generation=generation, now=now)
    turned = (before is None or before.get("status") != "False"
              or before.get("reason") != bad_reason)
    return conds, (Notice("Warning", bad_reason, bad) if turned else None)


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
    bad = None
    if stuck:
        bad = (f"{len(stuck)} of {len(pods)} server pods cannot be scheduled; pod "
               f"{stuck[0].name}: {stuck[0].message or 'no message from the scheduler'}")
        volume_fix = scheduling_fix(stuck[0].message, stuck[0].volumes.namespace)
        if volume_fix:
            bad += f" Fix: {volume_fix}"
        elif placement:
            bad += (f" (placed by {placement}; check that the GPU nodes carry that label, "
                    "or set spec.scheduling.nodeSelector)")
    good = (f"all {len(pods)} server pods have a node or await their first attempt" if pods
            else "no server pod waits for a node")
    return _set_false_or_true(conditions, ConditionType.PODS_SCHEDULED, bad=bad,
                              bad_reason=EVENT_UNSCHEDULABLE, good=good,
                              good_reason=REASON_SCHEDULED, generation=generation, now=now)


def crash_condition(
    conditions: Sequence[Mapping[str, Any]],
    pods: Sequence[PodScheduling],
    *,
    generation: int | None,
    now: float,
) -> tuple[list[JSON], Notice | None]:
    """The conditions with ``ContainersRunning`` set from the server ``pods``, and the
    Event to post when it has just become False or changed reason (None otherwise). A
    crash loop comes first; then a container that cannot start (its pod named first in
    name order); a pod on a node that stopped reporting comes before both (what the
    kubelet last said of it is stale)."""
    lost = sorted((p for p in pods if p.node_lost), key=lambda p: p.name)
    crashing = sorted((p for p in pods if p.crash), key=lambda p: p.name)
    if lost:
        bad: str | None = (f"{len(lost)} of {len(pods)} server pods are on a node that "
                           f"stopped reporting; {lost[0].node_lost}")
        reason = REASON_NODE_NOT_READY
    elif crashing:
        bad = (f"{len(crashing)} of {len(pods)} server pods crash-loop; pod "
               f"{crashing[0].name}: {crashing[0].crash}")
        reason = REASON_CRASH_LOOP
    else:
        stuck = sorted((p for p in pods if p.problem), key=lambda p: p.name)
        first = stuck[0].problem if stuck else None
        bad = None
        reason = first.reason if first else REASON_CRASH_LOOP
        if first:
            bad = f"{len(stuck)} of {len(pods)} server pods cannot start; {first.sentence()}"
    return _set_false_or_true(conditions, ConditionType.CONTAINERS_RUNNING, bad=bad,
                              bad_reason=reason,
                              good="no server container crash-loops or is stuck",
                              good_reason=REASON_RUNNING, generation=generation, now=now)


def reads_events(pod: PodScheduling) -> bool:
    """The pod's Events say what its status does not: it is still creating with no other
    problem (a volume), or a container was restarted and has not started since (a probe
    kill looks like any other exit in the status)."""
    return bool((pod.creating and pod.problem is None) or pod.restarted)


def with_events(pods: Sequence[PodScheduling],
                events: Mapping[str, Sequence[Mapping[str, Any]]], *,
                now: float) -> list[PodScheduling]:
    """The ``pods`` with the problem their Events show (``events``: pod name -> its
    Events): a probe kill of a restarted container (it replaces the crash loop it causes,
    which names no cause), a volume problem of a pod still creating with no other
    problem; a FailedMount only once the pod has been bound
    :data:`~.podfailures.VOLUME_GRACE_SECONDS` (a volume still attaching on a healthy
    start shows one too)."""
    out = []
    for pod in pods:
        if pod.restarted and pod.problem is None and events.get(pod.name):
            killed = probe_problem(pod.name, pod.volumes, pod.restarted, events[pod.name])
            pod = replace(pod, problem=killed, crash=None) if killed else pod
        if pod.creating and pod.problem is None and events.get(pod.name):
            claim = pod.volumes.claims[0] if pod.volumes.claims else None
            sharing = sum(1 for p in pods if claim in p.volumes.claims) if claim else 1
            settled = pod.bound_at is None or now - pod.bound_at >= VOLUME_GRACE_SECONDS
            found = volume_problem(pod.name, pod.volumes, events[pod.name], sharing,
                                   settled=settled)
            pod = replace(pod, problem=found) if found else pod
        out.append(pod)
    return out


def creation_condition(
    conditions: Sequence[Mapping[str, Any]], failure: str | None, *, kind: str, name: str,
    namespace: str, generation: int | None, now: float,
) -> tuple[list[JSON], Notice | None]:
    """``PodsCreated`` from the workload's ``ReplicaFailure`` message (``failure``; None:
    none), and the Event to post when it turns False or changes reason."""
    bad = (f"the ReplicaSet of {kind} {name} cannot create its pods: {REASON_FAILED_CREATE}: "
           f"{failure}. Fix: {creation_fix(failure, namespace)}") if failure else None
    return _set_false_or_true(conditions, ConditionType.PODS_CREATED, bad=bad,
                              bad_reason=REASON_FAILED_CREATE,
                              good=f"the controller of {kind} {name} creates its pods",
                              good_reason=REASON_CREATED, generation=generation, now=now)

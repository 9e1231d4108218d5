"""Why a server pod cannot start or cannot be created, with the fix (pure).

The kubelet and the controllers say what is wrong where nobody looks: in a container's
waiting state, in the pod's Events, in the ReplicaSet's. Each reading here turns one of
those into a :class:`PodProblem` (the pod and container, the kubelet's or controller's
own reason and message, and what to change), which :mod:`llm_operator.health.podscheduling`
puts on the LLMService as a condition:

``ContainersRunning=False`` (from the pod and its Events)

- reason ``ImagePullBackOff``: the kubelet's ``ErrImagePull`` or ``ImagePullBackOff``
  (one reason for both: the kubelet alternates them while it backs off, and the
  condition should not flap);
- reason ``InvalidImageName``: the image reference does not parse;
- reason ``CreateContainerConfigError``: an env or envFrom source is missing, e.g. the
  Hugging Face token's Secret (``secret "hf-token" not found``) or its key;
- reason ``FailedMount``: the pod is bound but its containers never start (waiting in
  ``ContainerCreating``/``PodInitializing``) and the kubelet posted ``FailedMount``
  Events (a missing Secret or claim);
- reason ``FailedAttachVolume``: the same, with the attach-detach controller's
  ``FailedAttachVolume`` Event, e.g. a ReadWriteOnce claim already attached to another
  node and used by a pod there, which two replicas sharing it on two nodes cause
  ("Waiting for detach for volume ... Volume is already used by pod(s) ..." from
  Kubernetes 1.37, as its controller said it there; "Multi-Attach error for volume ..."
  in earlier releases);
- reason ``StartupProbeFailed``: the kubelet killed a container whose startup probe ran
  out (its ``Killing`` Event, "Container vllm failed startup probe, will be restarted",
  during the container's last run), so vLLM never finished loading within the budget
  the operator planned; the message gives the budget (``failureThreshold`` x
  ``periodSeconds``) and the kubelet's last ``Unhealthy`` word, the fix names
  ``spec.model.loadBandwidth``. Without it the user saw a crash loop with exit code 0
  or 137 and a log that ends mid-load;
- reason ``LivenessProbeFailed``: the same for a liveness probe (an engine that stopped
  answering ``/health`` after it had started).

``PodsCreated=False`` (from the Deployment, which copies its ReplicaSet's
``ReplicaFailure`` condition): reason ``FailedCreate``, the ReplicaSet controller could
not create the pod, e.g. a PriorityClass that does not exist or a ResourceQuota with no
room left.

No clock and no client here: the controller reads pods, Events and the Deployment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..api.timestamps import parse_rfc3339_or_none

REASON_IMAGE_PULL = "ImagePullBackOff"
REASON_INVALID_IMAGE = "InvalidImageName"
REASON_CONFIG = "CreateContainerConfigError"
REASON_FAILED_MOUNT = "FailedMount"
REASON_FAILED_ATTACH = "FailedAttachVolume"
REASON_FAILED_CREATE = "FailedCreate"
REASON_CREATED = "Created"
REASON_STARTUP_PROBE = "StartupProbeFailed"
REASON_LIVENESS_PROBE = "LivenessProbeFailed"

# The kubelet's waiting reasons this module reads, and the condition reason of each.
_WAITING_REASONS = {
    "ErrImagePull": REASON_IMAGE_PULL,
    "ImagePullBackOff": REASON_IMAGE_PULL,
    "InvalidImageName": REASON_INVALID_IMAGE,
    "CreateContainerConfigError": REASON_CONFIG,
}
# Waiting reasons of a container that has not been created yet (volumes come first).
CREATING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
# Pod Events that keep a pod in ContainerCreating.
VOLUME_EVENT_REASONS = (REASON_FAILED_ATTACH, REASON_FAILED_MOUNT)
# A FailedMount or FailedAttachVolume often comes and goes while a volume attaches on a
# healthy start (a CSI driver still attaching): reported only once the pod has been bound
# this long without a container. A volume held by a pod on another node is said at once.
VOLUME_GRACE_SECONDS = 45.0
# The attach-detach controller's FailedAttachVolume for a ReadWriteOnce volume that pods
# on other nodes use (pkg/controller/volume/attachdetach/reconciler): "Multi-Attach error
# for volume V Volume is already used by pod(s) P" until Kubernetes renamed it "Waiting
# for detach for volume V Volume is already used by pod(s) P" (the wording of v1.37.2,
# read from its controller's Event on two real nodes here). Its other form, "...
# exclusively attached to one node, waiting on detach ...", names no pod: the volume is
# still detaching from a node whose pod is gone, which passes (a rollout to another node).
_HELD_BY_PODS = re.compile(r"(Multi-Attach error|Waiting for detach) for volume .*"
                           r"already used by pod\(s\)")

_NOT_FOUND = re.compile(r'(secrets?|configmaps?|persistentvolumeclaims?) "([^"]+)" not found',
                        re.IGNORECASE)
_MISSING_KEY = re.compile(r"couldn't find key (\S+) in (Secret|ConfigMap) ([^/\s]+)/([^\s,]+)")
# The kubelet's Killing Event for a probe (pkg/kubelet/kuberuntime, v1.37).
_PROBE_KILL = re.compile(r"^Container (\S+) failed (startup|liveness) probe")
_PRIORITY_CLASS = re.compile(r"no PriorityClass with name (\S+) was found")
_QUOTA = re.compile(r"exceeded quota: ([^,]+), requested: (.+?), used: (.+?), limited: (.+)$")


@dataclass(frozen=True)
class PodProblem:
    """One reason a server pod does not run, as the LLMService reports it."""

    reason: str  # the condition's reason
    pod: str
    container: str | None  # None: the pod as a whole (its volumes)
    said: str  # "<kubelet's or controller's reason>: <its message>"
    fix: str

    def sentence(self) -> str:
        where = f"pod {self.pod}" + (f", container {self.container}" if self.container else "")
        return f"{where}: {self.said}. Fix: {self.fix}"


@dataclass(frozen=True)
class Probe:
    """One probe of a container's spec, as a probe-kill message names it."""

    container: str
    kind: str  # "startup" | "liveness"
    period_s: int
    failures: int
    timeout_s: int
    path: str


@dataclass(frozen=True)
class PodVolumes:
    """What of a pod's spec the fixes name: its namespace, its claims, its images, its
    containers' startup and liveness probes."""

    namespace: str = "default"
    claims: tuple[str, ...] = ()
    images: tuple[tuple[str, str], ...] = ()  # (container, image)
    probes: tuple[Probe, ...] = ()

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodVolumes:
        spec = pod.get("spec") or {}
        claims = tuple(str((v.get("persistentVolumeClaim") or {}).get("claimName"))
                       for v in spec.get("volumes") or [] if v.get("persistentVolumeClaim"))
        images = tuple((str(c.get("name")), str(c.get("image") or ""))
                       for key in ("initContainers", "containers")
                       for c in spec.get(key) or [])
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        # the API server defaults periodSeconds 10, failureThreshold 3, timeoutSeconds 1
        probes = tuple(
            Probe(str(c.get("name")), kind, int(p.get("periodSeconds") or 10),
                  int(p.get("failureThreshold") or 3), int(p.get("timeoutSeconds") or 1),
                  str((p.get("httpGet") or {}).get("path") or ""))
            for c in spec.get("containers") or []
            for kind in ("startup", "liveness") if (p := c.get(f"{kind}Probe")))
        return cls(namespace, claims, images, probes)

    def image_of(self, container: str) -> str:
        return next((image for name, image in self.images if name == container), "")

    def probe_of(self, container: str, kind: str) -> Probe | None:
        return next((p for p in self.probes if (p.container, p.kind) == (container, kind)),
                    None)


@dataclass(frozen=True)
class Restarted:
    """A container the kubelet restarted that has not started (passed its startup probe)
    since: ``restarts`` so far, when its last run began (epoch seconds; None: unknown)."""

    container: str
    restarts: int
    last_run_at: float | None


def restarted_containers(pod: Mapping[str, Any]) -> tuple[Restarted, ...]:
    """The pod's (not init) containers restarted at least once and not started since:
    what a probe kill leaves, in a back-off or starting again."""
    out = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if int(cs.get("restartCount") or 0) < 1 or cs.get("started") is True:
            continue
        last = (cs.get("lastState") or {}).get("terminated") or {}
        out.append(Restarted(str(cs.get("name") or ""), int(cs.get("restartCount") or 0),
                             parse_rfc3339_or_none(last.get("startedAt"))))
    return tuple(out)


def _event_time(event: Mapping[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime")
               or (event.get("metadata") or {}).get("creationTimestamp") or "")


def _about_container(event: Mapping[str, Any], container: str) -> bool:
    """The Event names ``container`` in its fieldPath (``spec.containers{vllm}``), or no
    container at all."""
    path = str((event.get("involvedObject") or {}).get("fieldPath") or "")
    return not path or path.endswith(f"{{{container}}}")


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def probe_problem(pod: str, volumes: PodVolumes, restarted: Sequence[Restarted],
                  events: Sequence[Mapping[str, Any]]) -> PodProblem | None:
    """A restarted container whose last run the kubelet ended for a failed startup or
    liveness probe (its ``Killing`` Event, at or after that run began), or None."""
    for r in restarted:
        kills = []
        for e in events:
            found = _PROBE_KILL.match(str(e.get("message") or ""))
            at = parse_rfc3339_or_none(_event_time(e) or None)
            if (e.get("reason") == "Killing" and found and found.group(1) == r.container
                    and (r.last_run_at is None or at is None or at >= r.last_run_at)):
                kills.append((_event_time(e), found.group(2)))
        if not kills:
            continue
        kind = max(kills)[1]
        probe = volumes.probe_of(r.container, kind)
        unhealthy = [e for e in events if e.get("reason") == "Unhealthy"
                     and _about_container(e, r.container)
                     and str(e.get("message") or "").startswith(f"{kind.capitalize()} probe")]
        last = (" ".join(str(max(unhealthy, key=_event_time).get("message")).split())[:300]
                if unhealthy else "")
        last_word = f"; the kubelet's last: {last}" if last else ""
        where = f" on {probe.path}" if probe and probe.path else ""
        logs = f"`kubectl logs {pod} -c {r.container} --previous -n {volumes.namespace}`"
        if kind == "startup":
            budget = (f"{probe.failures} failures {probe.period_s} s apart: "
                      f"{probe.failures * probe.period_s} s" if probe else "its budget")
            said = (f"{REASON_STARTUP_PROBE}: the kubelet killed it when its startup probe"
                    f"{where} ran out ({budget}) and restarted it, {_times(r.restarts)} so far"
                    f"{last_word}")
            fix = ("vLLM did not finish starting (reading the weights, then the engine's "
                   "warm-up) within the startup budget the operator planned from the "
                   "weights' size and the load bandwidth (status.plan, startupBudgetSeconds): "
                   "set spec.model.loadBandwidth to the rate the model's volume really reads "
                   f"at, which lengthens the budget; {logs} shows how far the last start got")
            return PodProblem(REASON_STARTUP_PROBE, pod, r.container, said, fix)
        budget = (f"{probe.failures} failures {probe.period_s} s apart, {probe.timeout_s} s "
                  "each" if probe else "its threshold")
        said = (f"{REASON_LIVENESS_PROBE}: the kubelet killed it when its liveness probe"
                f"{where} failed ({budget}) and restarted it, {_times(r.restarts)} so far"
                f"{last_word}")
        fix = (f"the engine stopped answering after it had started: {logs} shows its last "
               "words (vLLM answers /health with 503 once its engine process is dead)")
        return PodProblem(REASON_LIVENESS_PROBE, pod, r.container, said, fix)
    return None


def _missing_object_fix(message: str, namespace: str) -> str | None:
    """The fix for a "<kind> "<name>" not found" or a missing key, or None."""
    key = _MISSING_KEY.search(message)
    if key:
        k, kind, ns, name = key.groups()
        if kind == "Secret":
            return (f"Secret {ns}/{name} has no key {k}: add it (`kubectl create secret generic "
                    f"{name} -n {ns} --from-literal={k}=... --dry-run=client -o yaml | kubectl "
                    "apply -f -`) or set spec.model.tokenSecretRef.key to a key it has")
        return f"ConfigMap {ns}/{name} has no key {k}: add it, or fix the reference in spec.pod.env"
    found = _NOT_FOUND.search(message)
    if not found:
        return None
    kind, name = found.group(1).lower().rstrip("s"), found.group(2)
    if kind == "secret":
        return (f"Secret {namespace}/{name} not found: create it with `kubectl create secret "
                f"generic {name} -n {namespace} --from-literal=token=...` (the key "
                "spec.model.tokenSecretRef.key names), or fix the name in the spec")
    if kind == "configmap":
        return (f"ConfigMap {namespace}/{name} not found: create it, or fix the reference in "
                "spec.pod.env")
    return (f"PersistentVolumeClaim {namespace}/{name} not found: create it, or fix "
            "spec.cache.claimName / spec.model.volume.claimName")


def scheduling_fix(message: str, namespace: str) -> str | None:
    """The fix for a scheduler's message about the pod's claims (the VolumeBinding
    plugin: a claim that does not exist, or that no volume is bound to), or None."""
    if "persistentvolumeclaim" in message.lower() and "not found" in message:
        return _missing_object_fix(message, namespace)
    if "unbound immediate PersistentVolumeClaims" in message:
        return ("a claim of the pod is not bound to a volume: check its StorageClass's "
                f"provisioner (`kubectl describe pvc -n {namespace}`), or create a "
                "PersistentVolume for it")
    return None


def waiting_problem(pod: Mapping[str, Any],
                    volumes: PodVolumes | None = None) -> PodProblem | None:
    """The first container (init containers first) that waits for a reason the kubelet
    will not get past by itself: an image it cannot pull or parse, a missing env source.
    ``volumes``: the pod's (:meth:`PodVolumes.from_pod`), when the caller has them."""
    name = str((pod.get("metadata") or {}).get("name") or "")
    status = pod.get("status") or {}
    if volumes is None:
        volumes = PodVolumes.from_pod(pod)
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            kubelet_reason = str(waiting.get("reason") or "")
            reason = _WAITING_REASONS.get(kubelet_reason)
            if reason is None:
                continue
            container = str(cs.get("name") or "")
            message = str(waiting.get("message") or "").strip()
            said = f"{kubelet_reason}: {message}" if message else kubelet_reason
            image = str(cs.get("image") or "") or volumes.image_of(container)
            if reason == REASON_IMAGE_PULL:
                fix = (f"check that image {image} exists (spec.image, or the operator's "
                       "LLMOP_DEFAULT_IMAGE when spec.image is unset) and that the nodes may "
                       "pull it: a private registry needs spec.pod.imagePullSecrets")
            elif reason == REASON_INVALID_IMAGE:
                fix = (f"{image!r} is not an image reference: set spec.image (or the "
                       "operator's LLMOP_DEFAULT_IMAGE) to [registry/]repository[:tag]"
                       "[@digest], e.g. vllm/vllm-openai:v0.10.1")
            else:
                fix = (_missing_object_fix(message, volumes.namespace)
                       or "create what the kubelet names, or fix the reference in the spec")
            return PodProblem(reason, name, container, said, fix)
    return None


def creating(pod: Mapping[str, Any]) -> bool:
    """The pod is bound and none of its containers has been created yet: the kubelet is
    still setting it up (volumes first), or cannot."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if not (pod.get("spec") or {}).get("nodeName") or meta.get("deletionTimestamp"):
        return False
    if status.get("phase") not in (None, "Pending"):
        return False
    statuses = [*(status.get("initContainerStatuses") or []),
                *(status.get("containerStatuses") or [])]
    return all(((cs.get("state") or {}).get("waiting") or {}).get("reason") in CREATING_REASONS
               for cs in statuses)


def bound_time(pod: Mapping[str, Any]) -> float | None:
    """When the pod was bound to its node (``PodScheduled=True``), else its start time,
    in seconds since the epoch; None when its status says neither."""
    status = pod.get("status") or {}
    when = next((c.get("lastTransitionTime") for c in status.get("conditions") or []
                 if c.get("type") == "PodScheduled" and c.get("status") == "True"), None)
    return parse_rfc3339_or_none(when or status.get("startTime"))


def _multi_attach(event: Mapping[str, Any]) -> bool:
    """A FailedAttachVolume for a volume that pods on another node use (either wording)."""
    return (event.get("reason") == REASON_FAILED_ATTACH
            and bool(_HELD_BY_PODS.search(str(event.get("message") or ""))))


def volume_problem(pod: str, volumes: PodVolumes, events: Sequence[Mapping[str, Any]],
                   sharing: int, *, settled: bool = True) -> PodProblem | None:
    """A FailedAttachVolume or FailedMount Event of a pod stuck in ContainerCreating (the
    latest of the first reason found), or None. ``sharing``: server pods that mount the
    pod's first claim. ``settled``: the pod has been stuck past
    :data:`VOLUME_GRACE_SECONDS` (before that only a Multi-Attach error counts)."""
    if not settled:
        events = [e for e in events if _multi_attach(e)]
    for reason in VOLUME_EVENT_REASONS:
        found = [e for e in events if e.get("reason") == reason and e.get("type") != "Normal"]
        if not found:
            continue
        latest = max(found, key=_event_time)
        message = " ".join(str(latest.get("message") or "").split())
        said = f"{reason}: {message}"
        claim = volumes.claims[0] if volumes.claims else None
        if reason == REASON_FAILED_ATTACH and _HELD_BY_PODS.search(message) and claim:
            fix = (f"claim {claim} is ReadWriteOnce and {sharing} replicas share it: use a "
                   "ReadWriteMany class or 1 replica (spec.replicas), or give spec.cache."
                   "claimName / spec.model.volume.claimName a claim per replica")
        elif reason == REASON_FAILED_ATTACH:
            fix = "check the volume's storage driver and that the claim can attach to this node"
        else:
            fix = (_missing_object_fix(message, volumes.namespace)
                   or "check the volumes the message names (spec.cache.claimName, "
                   "spec.model.volume.claimName)")
        return PodProblem(reason, pod, None, said, fix)
    return None


def replica_failure(deployment_status: Mapping[str, Any]) -> str | None:
    """The message of the Deployment's ``ReplicaFailure=True`` condition (the ReplicaSet
    controller could not create or delete pods), else None."""
    for cond in deployment_status.get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return str(cond.get("message") or cond.get("reason") or "the pods cannot be created")
    return None


def creation_fix(message: str, namespace: str) -> str:
    """What to change for a ReplicaSet's FailedCreate ``message``."""
    priority = _PRIORITY_CLASS.search(message)
    if priority:
        return (f"PriorityClass {priority.group(1)} does not exist: create it (`kubectl create "
                f"priorityclass {priority.group(1)} --value=1000000`) or remove "
                "spec.scheduling.priorityClassName")
    quota = _QUOTA.search(message)
    if quota:
        name, requested, used, limited = (g.strip() for g in quota.groups())
        return (f"ResourceQuota {namespace}/{name} has no room for another pod (requested "
                f"{requested}, used {used}, limited {limited}): raise its limits, free what the "
                "namespace uses, or lower spec.replicas")
    return ("fix what the ReplicaSet controller says (`kubectl describe replicaset -n "
            f"{namespace}` shows its FailedCreate Events)")

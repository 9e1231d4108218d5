"""The vLLM server pod (pure): its container, pod spec, probes, drain and rollout,
shared by the Deployment and the LeaderWorkerSet.

Every server drains on a rollout: ``--shutdown-timeout``, a preStop sleep and a grace
period that covers both (see :func:`termination_grace_seconds`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..api.constants import VLLM_PORT
from ..api.models import LLMService, LLMServiceSpec
from ..planning import Plan
from ..settings import Settings
from .download import build_download_container
from .identity import COMPONENT_SERVER, child_metadata
from .placement import scheduling_fields
from .pod import (
    CONTAINER_NAME,
    HEALTH_PATH,
    PORT_NAME,
    STARTUP_PERIOD_SECONDS,
    build_env,
    build_resources,
    build_volume_mounts,
    build_volumes,
    container_security_context,
    image_for,
    pod_identity_fields,
    pod_security_context,
    startup_budget_seconds,
)
from .vllm_args import VLLM_COMMAND, build_vllm_args

# Drain on a rollout (issue 12): vLLM 0.32 aborts in-flight requests on SIGTERM unless
# --shutdown-timeout is set (default 0); with it, vLLM finishes them (at most this long)
# and exits as soon as none is left. The preStop sleep first lets the endpoints
# controller and kube-proxy stop routing new requests to the pod; the grace period covers
# both with a margin, so the kubelet's SIGKILL never cuts a drain short.
# The drain is spec.rollout.drainSeconds (default 120).
PRESTOP_SLEEP_SECONDS = 5
GRACE_MARGIN_SECONDS = 15


def termination_grace_seconds(spec: LLMServiceSpec) -> int:
    """The pod's grace period: the preStop sleep, then vLLM's drain, then a margin."""
    return PRESTOP_SLEEP_SECONDS + spec.rollout.drain_seconds + GRACE_MARGIN_SECONDS


def rolling_update(spec: LLMServiceSpec) -> dict[str, int]:
    """maxSurge and maxUnavailable from ``spec.rollout.maxSurge``: 0 replaces one
    replica at a time in place (no spare GPUs; one replica is an outage), >= 1 starts
    that many replacements first and takes none down before its replacement serves."""
    surge = spec.rollout.max_surge
    return {"maxSurge": surge, "maxUnavailable": 0 if surge else 1}


def build_probes(plan: Plan, extra_startup_seconds: int = 0) -> dict[str, dict[str, Any]]:
    """startupProbe (budget grows with the weights, plus ``extra_startup_seconds`` for
    anything the container does before vLLM starts), readinessProbe and livenessProbe,
    all on vLLM's ``/health`` (503 once the engine is dead, so liveness restarts it)."""

    def http(period: int, timeout: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": HEALTH_PATH, "port": PORT_NAME},
            "periodSeconds": period,
            "timeoutSeconds": timeout,
            "failureThreshold": failures,
        }

    startup_seconds = startup_budget_seconds(plan) + extra_startup_seconds
    startup_failures = math.ceil(startup_seconds / STARTUP_PERIOD_SECONDS)
    return {
        "startupProbe": http(STARTUP_PERIOD_SECONDS, 5, startup_failures),
        "readinessProbe": http(10, 5, 3),
        # Generous: a busy engine can answer /health slowly; restart only after ~1 min.
        "livenessProbe": http(15, 10, 4),
    }


def build_server_container(
    svc: LLMService, plan: Plan, settings: Settings, overrides: Mapping[str, int] | None = None,
    *, active_cap_flag: bool = False,
) -> dict[str, Any]:
    """The vLLM container of the server pods: :data:`~.vllm_args.VLLM_COMMAND` with
    :func:`~.vllm_args.build_vllm_args` (the command is explicit: images differ in their
    entrypoint)."""
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image_for(svc, settings),
        "imagePullPolicy": "IfNotPresent",
        "command": list(VLLM_COMMAND),
        "args": build_vllm_args(svc, plan, overrides, active_cap_flag=active_cap_flag),
        "ports": [{"name": PORT_NAME, "containerPort": VLLM_PORT, "protocol": "TCP"}],
    }
    env = build_env(svc.spec, downloaded=True)
    if env:
        container["env"] = env
    container["resources"] = build_resources(svc.spec, plan)
    container["volumeMounts"] = build_volume_mounts(svc.spec)
    container.update(build_probes(plan))
    container["securityContext"] = container_security_context(svc.spec)
    container["lifecycle"] = build_drain_lifecycle()
    return container


def server_pod_spec(svc: LLMService, container: dict[str, Any], plan: Plan,
                     settings: Settings) -> dict[str, Any]:
    """The pod spec around one server container (Deployment pods, LWS leader and worker):
    the download init container first (a hub model), then the container."""
    pod_spec: dict[str, Any] = {}
    download = build_download_container(svc, plan, settings)
    if download is not None:
        pod_spec["initContainers"] = [download]
    pod_spec |= {
        "containers": [container],
        "volumes": build_volumes(svc.spec, plan),
        # vLLM reads VLLM_PORT etc. from its environment; service links would inject
        # VLLM_PORT=tcp://... for any Service named "vllm" in the namespace and crash it.
        "enableServiceLinks": False,
        # vLLM never calls the Kubernetes API.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": termination_grace_seconds(svc.spec),
        "securityContext": pod_security_context(svc.spec),
    }
    pod_spec.update(pod_identity_fields(svc.spec))
    pod_spec.update(scheduling_fields(svc.spec, settings))
    for c in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]:
        # A container that exits with an error and wrote no termination message gets its
        # log tail there, so the operator reports a crash loop's last line
        # (ContainersRunning) without reading logs.
        c.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    return pod_spec


def workload_metadata(svc: LLMService) -> dict[str, Any]:
    """The server workload's metadata: :func:`~.identity.child_metadata` plus ``spec.pod.labels`` (a
    queue label such as Kueue's ``kueue.x-k8s.io/queue-name`` is read from the workload)."""
    meta = child_metadata(svc, COMPONENT_SERVER)
    meta["labels"] = {**svc.spec.pod.labels, **meta["labels"]}
    return meta


def build_drain_lifecycle() -> dict[str, Any]:
    """The server container's preStop: wait :data:`PRESTOP_SLEEP_SECONDS` before the
    kubelet sends SIGTERM, so new requests stop arriving before vLLM starts draining
    (``--shutdown-timeout``). ``exec sleep``, not the ``sleep`` action, which needs
    Kubernetes 1.30."""
    return {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SLEEP_SECONDS)]}}}

"""The server LeaderWorkerSet (pure): instead of the Deployment when the plan spreads one
replica over several nodes (pipeline stages across nodes).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from ..api.constants import VLLM_PORT
from ..api.errors import SpecError, SpecErrors
from ..api.models import LLMService, LLMServiceSpec
from ..planning import Plan, multi_node_flags
from ..settings import Settings
from .download import download_budget_seconds
from .identity import (
    COMPONENT_SERVER,
    LABEL_ROLE,
    ROLE_LEADER,
    ROLE_WORKER,
    labels_for,
    with_spec_hash,
)
from .pod import (
    CONTAINER_NAME,
    PORT_NAME,
    build_env,
    build_resources,
    build_volume_mounts,
    container_security_context,
    image_for,
    pod_template_metadata,
)
from .server import build_probes, rolling_update, server_pod_spec, workload_metadata
from .vllm_args import VLLM_COMMAND, build_vllm_args

# --- multi-node replicas (LeaderWorkerSet) ---
# One replica on several nodes runs as one LeaderWorkerSet group on vLLM's own
# multiprocessing executor across nodes (vLLM's docs/serving/parallelism_scaling.md,
# "Running vLLM with MultiProcessing"): every pod runs ``vllm serve`` with the same
# arguments plus ``--distributed-executor-backend mp --nnodes N``
# (planning.multi_node_flags), its rank, and the leader's address; the leader (rank 0)
# serves the API, each worker runs ``--headless``. No Ray in the image, and the same
# commands run on vLLM's CPU build, which refuses Ray (tests/nodes/
# test_multi_node_in_containers.py runs them through the real LWS controller on two real
# nodes, in containers). Each node waits for the others in torch.distributed's rendezvous.
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
# The LeaderWorkerSet may not share the Service's name: LWS creates a headless Service
# named after the LeaderWorkerSet (pod DNS ``<lws>-<group>.<lws>.<namespace>``, the value
# of LWS_LEADER_ADDRESS) only if no Service of that name exists, so the ClusterIP Service
# named after the LLMService would silently take its place and workers could never
# resolve the leader.
LWS_NAME_SUFFIX = "-lws"
# StatefulSet pods carry ``controller-revision-hash: <statefulset>-<hash of <= 10
# chars>``, a label value of at most 63 characters; LWS names its worker StatefulSets
# ``<lws>-<group index>``, so that name must fit 52 characters.
STATEFULSET_NAME_MAX = 52
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# How long the leader's startup probe allows, on top of the loading budget, for every
# worker to join (:func:`join_timeout_seconds`). A worker joins once its pod is
# scheduled, its image pulled (the base) and its own download init container has fetched
# the model, which may take that container's whole budget on a node slower than the
# leader's. vLLM itself waits in torch.distributed's rendezvous (its default timeout).
JOIN_BASE_SECONDS = 600
# The LWS annotation that gives each group a topology domain of its own (one rack, zone
# or node pool per group): its value is the node label key naming the domain.
EXCLUSIVE_TOPOLOGY_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
# Only shell variables (``${VAR}``) and ``"$@"``: Kubernetes rewrites ``$(VAR)`` and
# ``$$`` in command and args, so neither may appear. LWS injects LWS_LEADER_ADDRESS,
# LWS_GROUP_SIZE and LWS_WORKER_INDEX into every container; the ``vllm serve`` arguments
# arrive as the positional parameters (``sh -c SCRIPT NAME ARGS...``), so no argument is
# ever re-parsed by the shell. The rank and address come last (argparse keeps the last).
# ``exec`` makes vllm PID 1, so it receives SIGTERM.
LEADER_SCRIPT = f"""exec {" ".join(VLLM_COMMAND)} "$@" --node-rank 0 \\
  --master-addr "${{LWS_LEADER_ADDRESS}}"
"""
WORKER_SCRIPT = f"""exec {" ".join(VLLM_COMMAND)} "$@" --node-rank "${{LWS_WORKER_INDEX}}" \\
  --master-addr "${{LWS_LEADER_ADDRESS}}" --headless
"""


def is_multi_node(plan: Plan) -> bool:
    """Whether one replica spans nodes (then it runs as a LeaderWorkerSet)."""
    return plan.nodes_per_replica > 1


def leader_worker_set_name(svc: LLMService) -> str:
    """The LeaderWorkerSet's name: not the Service's (see ``LWS_NAME_SUFFIX``)."""
    return f"{svc.metadata.name}{LWS_NAME_SUFFIX}"


def join_timeout_seconds(spec: LLMServiceSpec, plan: Plan) -> int:
    """How long the leader waits for its workers: :data:`JOIN_BASE_SECONDS` plus a
    worker's download budget (0 for a model on a volume), since a worker joins only after
    its own download init container, which may run that long (the 405B in bf16 from the
    Hub: 600 + 600 + 16,235 s)."""
    return JOIN_BASE_SECONDS + download_budget_seconds(spec, plan)


def gpus_per_pod(plan: Plan) -> int:
    """GPUs each pod of a multi-node replica requests: the replica's ``TP x PP`` GPUs
    shared over its nodes. Rounded up when they do not divide evenly (every pod of the
    group has the same size; the planner refuses a replica whose GPUs do not divide
    evenly over its nodes, which vLLM's --nnodes refuses)."""
    return math.ceil(plan.gpus_per_replica / plan.nodes_per_replica)



def _lws_name_errors(svc: LLMService) -> list[SpecError]:
    name = leader_worker_set_name(svc)
    last_group = f"-{max(svc.spec.replicas - 1, 0)}"
    longest = len(name) + len(last_group)
    if longest <= STATEFULSET_NAME_MAX:
        return []
    limit = len(svc.metadata.name) - (longest - STATEFULSET_NAME_MAX)
    return [
        SpecError(
            "metadata.name",
            f"is too long for a replica spread over nodes: it runs as LeaderWorkerSet "
            f"{name!r}, whose worker StatefulSets ({name}{last_group}) must fit "
            f"{STATEFULSET_NAME_MAX} characters",
            f"use a name of at most {limit} characters",
        )
    ]


def build_leader_worker_set(
    svc: LLMService, plan: Plan, settings: Settings, overrides: Mapping[str, int] | None = None,
    *, active_cap_flag: bool = False,
) -> dict[str, Any]:
    """The vLLM server of ``svc`` as a LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``),
    for a plan whose replica spans ``plan.nodes_per_replica`` nodes.

    One group per replica (``replicas`` = ``spec.replicas``, ``size`` = nodes per replica).
    Every pod runs ``vllm serve`` with the arguments of
    :func:`~.vllm_args.build_vllm_args` plus :func:`~llm_operator.planning.multi_node_flags`
    (vLLM's mp executor over ``size`` nodes), then its node rank and the leader's address
    (:data:`LEADER_SCRIPT`, :data:`WORKER_SCRIPT`): the leader is rank 0 and serves the
    API; each worker is rank ``$LWS_WORKER_INDEX`` and ``--headless``. The leader's startup
    probe allows :func:`join_timeout_seconds` for the workers to join. Every pod requests
    one node's share of the GPUs
    (:func:`gpus_per_pod`) and holds the same model source, cache and scheduling as a
    Deployment pod (each node loads its own pipeline stage's weights). Only the leader
    serves port 8000 and has probes; it carries ``llmops.dev/role: leader``, which the
    Service and the PodMonitor select.

    Raises :class:`SpecErrors` when ``metadata.name`` is too long for the names LWS
    derives from it, or (as :func:`~.vllm_args.build_vllm_args` does) for managed flags in
    extraArgs.
    """
    errors = _lws_name_errors(svc)
    if errors:
        raise SpecErrors(errors)
    spec = svc.spec
    image = image_for(svc, settings)
    per_pod = gpus_per_pod(plan)
    env = build_env(spec, downloaded=True)
    join_s = join_timeout_seconds(spec, plan)
    # After extraArgs, so that the executor and node count always win (argparse keeps
    # the last).
    args = [*build_vllm_args(svc, plan, overrides, active_cap_flag=active_cap_flag),
            *multi_node_flags(plan)]

    leader: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        # sh -c SCRIPT $0 "$@": the vLLM arguments stay a list, never re-split by a shell.
        "command": ["/bin/sh", "-c", LEADER_SCRIPT, "vllm-leader"],
        "args": args,
        "ports": [{"name": PORT_NAME, "containerPort": VLLM_PORT, "protocol": "TCP"}],
    }
    worker: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", WORKER_SCRIPT, "vllm-worker"],
        "args": list(args),
    }
    for container in (leader, worker):
        if env:
            container["env"] = copy.deepcopy(env)
        container["resources"] = build_resources(spec, plan, per_pod)
        container["volumeMounts"] = build_volume_mounts(spec)
    # The leader's startup includes waiting for the workers to join.
    leader.update(build_probes(plan, extra_startup_seconds=join_s))
    for container in (leader, worker):
        container["securityContext"] = container_security_context(spec)

    def template(role: str, container: dict[str, Any]) -> dict[str, Any]:
        labels = {**labels_for(svc, COMPONENT_SERVER), LABEL_ROLE: role}
        return {"metadata": pod_template_metadata(svc, labels),
                "spec": server_pod_spec(svc, container, plan, settings)}

    metadata = workload_metadata(svc)
    metadata["name"] = leader_worker_set_name(svc)
    if spec.scheduling.group_topology_key:
        # Each group in a topology domain of its own (LWS's pod webhook turns it into
        # affinity and anti-affinity on that node label).
        metadata.setdefault("annotations", {})[EXCLUSIVE_TOPOLOGY_ANNOTATION] = (
            spec.scheduling.group_topology_key)
    lws: dict[str, Any] = {
        "apiVersion": LWS_API_VERSION,
        "kind": LWS_KIND,
        "metadata": metadata,
        "spec": {
            "replicas": spec.replicas,
            # LeaderCreated: the workers start with the leader. LeaderReady would wait for
            # a leader that only becomes ready once the workers have joined: a deadlock.
            "startupPolicy": "LeaderCreated",
            # As for the Deployment: by default replace one group at a time in place,
            # never needing a spare group's worth of GPUs; spec.rollout.maxSurge surges.
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": rolling_update(spec),
            },
            "leaderWorkerTemplate": {
                "size": plan.nodes_per_replica,
                # vLLM's distributed group does not survive losing a member: if any pod or
                # container of the group restarts, recreate the whole group.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": template(ROLE_LEADER, leader),
                "workerTemplate": template(ROLE_WORKER, worker),
            },
        },
    }
    return with_spec_hash(lws)

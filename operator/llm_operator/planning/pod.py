"""Pod sizing (pure): what the pods need besides GPUs (the model cache on disk, CPU and
host memory), shared by the planner (which explains them and refuses what cannot work)
and the renderer (which renders them).
"""

from __future__ import annotations

import math

from ..api.constants import GIB
from ..api.errors import SpecError
from ..api.models import (
    AdaptationMode,
    LLMServiceSpec,
    parse_quantity,
)
from .memory import human_bytes
from .types import Explained, Plan

# The emptyDir cache holds the checkpoint plus 10% and 5 GiB: tokenizer and config files,
# the hub's metadata, a file vLLM fetches that the prefetch did not (a newer vLLM may
# choose other weight files), rounded up to whole GiB.
CACHE_MARGIN_FRACTION = 0.10
CACHE_EXTRA_BYTES = 5 * GIB
# Above this an emptyDir cache is refused unless the user sizes it explicitly: every new
# pod (restart, rollout, rescheduling, each replica and each node of a replica)
# downloads it again (300 GiB is ~27 min at 200 MB/s), and common GPU node boot disks
# (GKE's 100 GB default, EKS AMIs' 20-100 GB) hold less, so the pod would stay Pending on
# ephemeral storage. It admits 70B-class models in bf16 (Llama 3.1 70B: 131 GiB ->
# 150 GiB with the margin) and refuses 405B (756 GiB in bf16).
EMPTYDIR_CACHE_MAX_BYTES = 300 * GIB
# Host memory of one vLLM pod = the weights its GPUs load (safetensors are read through
# the page cache, which counts against the pod's memory) + 4 GiB for the API server and
# engine-core processes (Python, tokenizer, scheduler) + 2 GiB per GPU worker process
# (CUDA context, torch and NCCL host buffers) + /dev/shm (a memory emptyDir: its pages
# count against the pod's memory).
HOST_BASE_BYTES = 4 * GIB
HOST_BYTES_PER_GPU = 2 * GIB
# CPU: vLLM (V1) runs an API-server process, an engine-core process that busy-loops the
# scheduler, and one worker process per GPU: one core each, 2 + GPUs of the pod. A request
# only (no limit: a CPU limit throttles the tokenizer and scheduler threads).
CPU_BASE = 2


def checkpoint_bytes(plan: Plan) -> int:
    """The bytes a pod downloads into its cache (see :attr:`Plan.download_bytes`)."""
    return plan.download_bytes or plan.weight_bytes


def gpus_in_pod(plan: Plan) -> int:
    """GPUs one pod holds: the replica's, shared over its nodes (one pod per node)."""
    return math.ceil(plan.gpus_per_replica / max(plan.nodes_per_replica, 1))


def model_cache_bytes(spec: LLMServiceSpec, plan: Plan) -> int:
    """The emptyDir cache the plan needs: ``checkpoint x 1.1 + 5 GiB`` in whole GiB; only
    the 5 GiB for a model on a volume (nothing is downloaded)."""
    if spec.model.volume is not None:
        return CACHE_EXTRA_BYTES
    need = checkpoint_bytes(plan) * (1 + CACHE_MARGIN_FRACTION) + CACHE_EXTRA_BYTES
    return math.ceil(need / GIB) * GIB


def cache_size_limit(spec: LLMServiceSpec, plan: Plan) -> str | None:
    """The ``sizeLimit`` of the emptyDir cache (None: the cache is ``spec.cache.claimName``).

    The user's ``spec.cache.sizeLimit`` when set, else :func:`model_cache_bytes`.
    Raises :class:`SpecError` when the user's size cannot hold the checkpoint (the kubelet
    would evict the pod mid-download, again and again), and when the plan's size exceeds
    :data:`EMPTYDIR_CACHE_MAX_BYTES` (give a PersistentVolumeClaim instead)."""
    if spec.cache.claim_name:
        return None
    need = model_cache_bytes(spec, plan)
    if spec.cache.size_limit is not None:
        if spec.model.volume is None and parse_quantity(spec.cache.size_limit) < (
                checkpoint_bytes(plan)):
            raise SpecError(
                "spec.cache.sizeLimit",
                f"{spec.cache.size_limit} cannot hold the model's checkpoint "
                f"({human_bytes(checkpoint_bytes(plan))}): the kubelet would evict the pod "
                "in the middle of the download, and again after every restart",
                f"set it to at least {need // GIB}Gi, remove it (the operator sizes the "
                "cache from the plan), or give a PersistentVolumeClaim in "
                "spec.cache.claimName")
        return spec.cache.size_limit
    if need > EMPTYDIR_CACHE_MAX_BYTES:
        raise SpecError(
            "spec.cache.claimName",
            f"is not set, and the model's checkpoint ({human_bytes(checkpoint_bytes(plan))}) "
            f"needs a {need // GIB}Gi cache, more than the {EMPTYDIR_CACHE_MAX_BYTES // GIB}Gi "
            "the operator puts in an emptyDir (every new pod would download it again, onto "
            "the node's boot disk)",
            f"give a PersistentVolumeClaim of at least {need // GIB}Gi in "
            "spec.cache.claimName (ReadWriteMany when replicas > 1 or one replica spans "
            f"nodes), or set spec.cache.sizeLimit to {need // GIB}Gi if your GPU nodes have "
            "that much local disk for ephemeral storage")
    return f"{need // GIB}Gi"


def pod_cpu(spec: LLMServiceSpec, plan: Plan) -> str:
    """The CPU request of one vLLM pod: ``spec.resources.cpu``, else 2 + its GPUs."""
    return spec.resources.cpu or str(CPU_BASE + gpus_in_pod(plan))


def pod_memory_bytes(spec: LLMServiceSpec, plan: Plan) -> int:
    """Host memory one vLLM pod needs, in whole GiB (see :data:`HOST_BASE_BYTES`): the
    weights of its GPUs + 4 GiB + 2 GiB per GPU + ``spec.resources.shmSize``."""
    gpus = gpus_in_pod(plan)
    need = (plan.weight_bytes_per_gpu * gpus + HOST_BASE_BYTES + HOST_BYTES_PER_GPU * gpus
            + parse_quantity(spec.resources.shm_size))
    return math.ceil(need / GIB) * GIB


def pod_memory(spec: LLMServiceSpec, plan: Plan) -> str:
    """The memory request of one vLLM pod: ``spec.resources.memory``, else
    :func:`pod_memory_bytes` in Gi."""
    return spec.resources.memory or f"{pod_memory_bytes(spec, plan) // GIB}Gi"


def with_pod_sizing(spec: LLMServiceSpec, plan: Plan) -> Plan:
    """``plan`` with the pods' cache, CPU and memory explained, and warnings about them
    (a cache :func:`cache_size_limit` refuses is a warning here: the renderer refuses it,
    which reports the spec invalid; the plan of GPUs and batch stays useful)."""
    ex = list(plan.explanations)
    warnings = list(plan.warnings)
    gpus = gpus_in_pod(plan)
    pods = "each pod of a replica" if plan.nodes_per_replica > 1 else "each pod"
    try:
        size = cache_size_limit(spec, plan)
    except SpecError as exc:
        # The renderer refuses it (an invalid spec); the plan itself still holds.
        size = "refused"
        warnings.append(f"the pods cannot be rendered: {exc}")
        ex.append(Explained(
            name="modelCacheSize", value=size, formula=exc.problem,
            inputs={"checkpointBytes": checkpoint_bytes(plan),
                    "emptyDirMaxBytes": EMPTYDIR_CACHE_MAX_BYTES}))
    if size == "refused":
        pass
    elif size is None:
        ex.append(Explained(
            name="modelCache", value=f"PersistentVolumeClaim {spec.cache.claim_name}",
            source="pinned", formula="spec.cache.claimName",
            inputs={"checkpointBytes": checkpoint_bytes(plan)}))
        if spec.cache.size_limit is not None:
            warnings.append(
                f"spec.cache.sizeLimit {spec.cache.size_limit} is not used: it sizes an "
                f"emptyDir cache, and the cache is the claim {spec.cache.claim_name!r} "
                "(its own size applies); remove one of them")
        if spec.replicas > 1 or plan.nodes_per_replica > 1:
            warnings.append(
                f"spec.cache.claimName {spec.cache.claim_name!r} is mounted by "
                f"{'every replica' if spec.replicas > 1 else 'every node of a replica'}, "
                "on different nodes: the claim must be ReadWriteMany (e.g. NFS, Filestore, "
                "EFS, Azure Files); a ReadWriteOnce claim attaches to one node, and the pods "
                "on other nodes stay in ContainerCreating (FailedAttachVolume: Multi-Attach "
                "error)")
    elif spec.cache.size_limit is not None:
        ex.append(Explained(
            name="modelCacheSize", value=size, source="pinned",
            formula=f"spec.cache.sizeLimit (an emptyDir per pod; {pods} downloads the model)",
            inputs={"checkpointBytes": checkpoint_bytes(plan)}))
        if spec.model.volume is None and parse_quantity(size) < model_cache_bytes(spec, plan):
            warnings.append(
                f"spec.cache.sizeLimit {size} leaves little room beside the checkpoint "
                f"({human_bytes(checkpoint_bytes(plan))}); the operator would size it "
                f"{model_cache_bytes(spec, plan) // GIB}Gi")
    else:
        formula = ("5 GiB (the model is on a volume: nothing is downloaded)"
                   if spec.model.volume is not None else
                   "ceil_GiB(checkpoint bytes x 1.1 + 5 GiB) (an emptyDir per pod; "
                   f"{pods} downloads the model)")
        ex.append(Explained(
            name="modelCacheSize", value=size, formula=formula,
            inputs={"checkpointBytes": checkpoint_bytes(plan),
                    "emptyDirMaxBytes": EMPTYDIR_CACHE_MAX_BYTES}))
    ex.append(Explained(
        name="cpuRequest", value=pod_cpu(spec, plan),
        source="pinned" if spec.resources.cpu else "planned",
        formula=("spec.resources.cpu" if spec.resources.cpu else
                 "2 (API server, engine core) + 1 per GPU worker of the pod; no limit"),
        inputs={"gpusPerPod": gpus}))
    ex.append(Explained(
        name="memoryRequest", value=pod_memory(spec, plan),
        source="pinned" if spec.resources.memory else "planned",
        formula=("spec.resources.memory (request = limit)" if spec.resources.memory else
                 "ceil_GiB(weights per GPU x GPUs of the pod + 4 GiB + 2 GiB per GPU "
                 "+ shmSize); request only, no limit"),
        inputs={"weightBytesPerGpu": plan.weight_bytes_per_gpu, "gpusPerPod": gpus,
                "shmSize": spec.resources.shm_size}))
    memory, shm = spec.resources.memory, spec.resources.shm_size
    if memory is not None and parse_quantity(memory) < parse_quantity(shm):
        warnings.append(
            f"spec.resources.memory {memory} is below spec.resources.shmSize {shm}: /dev/shm "
            "is a memory emptyDir whose pages count against the container's memory limit "
            f"(request = limit = {memory}), so the kernel kills vLLM (OOMKilled) before "
            "/dev/shm fills, with nothing left for the process itself. Fix: set "
            f"spec.resources.memory to at least {pod_memory_bytes(spec, plan) // GIB}Gi (the "
            f"weights, the engine and the {shm} of /dev/shm), or remove it (planned), or "
            "lower spec.resources.shmSize well below it")
    return plan.model_copy(update={"explanations": ex, "warnings": warnings})


def _pod_memory_errors(spec: LLMServiceSpec, plan: Plan) -> list[SpecError]:
    """A pinned pod memory below what vLLM's processes take before any weight is
    loaded (:data:`HOST_BASE_BYTES` + :data:`HOST_BYTES_PER_GPU` per GPU): the pod would
    be OOM-killed at start, over and over."""
    if spec.resources.memory is None:
        return []
    floor = HOST_BASE_BYTES + HOST_BYTES_PER_GPU * gpus_in_pod(plan)
    if parse_quantity(spec.resources.memory) >= floor:
        return []
    return [SpecError(
        "spec.resources.memory",
        f"{spec.resources.memory} is below the {floor // GIB} GiB vLLM's processes take "
        f"before loading weights ({gpus_in_pod(plan)} GPU(s) in the pod): the pod would be "
        "OOM-killed at start", f"raise it (the plan would request "
        f"{pod_memory_bytes(spec, plan) // GIB}Gi), "
        "or leave it unset")]


# Host bytes vLLM's engine allocates per sequence slot and token of context at start
# (v1/worker/gpu_input_batch.py: token_ids_cpu, int32, and is_token_ids, bool, both
# max_num_seqs x max_model_len).
INPUT_BATCH_BYTES_PER_TOKEN = 5


def _host_buffer_errors(spec: LLMServiceSpec, plan: Plan) -> list[SpecError]:
    """A max-num-seqs (pinned, or the adaptation's lower bound it would apply) so large
    that the buffers vLLM sizes by it at start (max-num-seqs x max-model-len x 5 bytes)
    exceed the whole pod's memory: the engine could never start."""
    pinned = spec.engine.max_num_seqs if isinstance(spec.engine.max_num_seqs, int) else None
    field, seqs = "spec.engine.maxNumSeqs", pinned or 0
    if (pinned is None and spec.adaptation.mode is AdaptationMode.APPLY
            and spec.adaptation.min_max_num_seqs > plan.max_num_seqs):
        field, seqs = "spec.adaptation.minMaxNumSeqs", spec.adaptation.min_max_num_seqs
    need = seqs * plan.max_model_len * INPUT_BATCH_BYTES_PER_TOKEN
    memory = parse_quantity(pod_memory(spec, plan))
    if need <= memory:
        return []
    most = int(memory // (plan.max_model_len * INPUT_BATCH_BYTES_PER_TOKEN))
    return [SpecError(
        field, f"{seqs:,} sequences x maxModelLen {plan.max_model_len:,} need "
        f"{human_bytes(need)} of host buffers in vLLM's engine at start, more than the "
        f"pod's {pod_memory(spec, plan)} of memory: the engine could never start",
        f"lower it to at most {most:,} (the KV cache holds {plan.memory_max_num_seqs:,} "
        "requests of the workload at once), "
        "or lower spec.engine.maxModelLen")]

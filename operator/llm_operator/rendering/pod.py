"""Pod pieces (pure) shared by the server pods and the tuning Job: image, environment,
volumes, resources, probes' budget, security contexts, pod metadata and identity.

The tuning Job (:func:`llm_operator.tuning.job.build_tuning_job`) runs the same image on
the same GPUs with the same model source, so these are separate builders it reuses.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..api.constants import DEFAULT_GPU_RESOURCE, GROUP
from ..api.errors import SpecError, SpecErrors
from ..api.models import LLMService, LLMServiceSpec
from ..knowledge.extra_args import flag_set
from ..knowledge.gpuclass import GFD_PRODUCT_LABEL
from ..knowledge.startup import startup_budget
from ..planning import Plan, cache_size_limit, pod_cpu, pod_memory
from ..settings import Settings

CONTAINER_NAME = "vllm"
PORT_NAME = "http"
HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"

# Where volumes land inside the vLLM container.
# The model cache's mount, HF_HOME in every container that mounts it (not under /root: the
# pods run as spec.pod.runAsUser, not root, unless that is 0).
HF_CACHE_PATH = "/var/cache/huggingface"
# vLLM's own cache (VLLM_CACHE_ROOT: torch.compile's compiled model, Inductor's and
# Triton's kernels), on the model cache volume rather than in the container's writable
# layer: a container the kubelet restarts in the same pod (a crash, an OOM kill, a failed
# probe) finds what the first one compiled, and so does every pod that mounts the same
# spec.cache.claimName. vLLM keys each entry by its configuration, PyTorch's and the
# model code's source, writes its compiled model under a temporary name and renames it
# (vllm/compilation/decorators.py, 0.32), and compiles again when that does not load
# (vLLM 0.32's CPU build cannot load it: it compiles again with the cached kernels;
# benchmarks/results/engine-features.md).
VLLM_CACHE_PATH = f"{HF_CACHE_PATH}/vllm"
# HOME of a non-root container (vllm-openai's HOME, /root, is root's only): the image's own
# /tmp, writable by any user, where vLLM, Triton and torch.compile keep their caches.
NONROOT_HOME = "/tmp"
MODEL_MOUNT_PATH = "/mnt/models"  # a model from spec.model.volume
SHM_PATH = "/dev/shm"

GPU_PRODUCT_LABEL = GFD_PRODUCT_LABEL  # set on GPU nodes by GPU feature discovery

VOLUME_SHM = "dshm"
VOLUME_CACHE = "model-cache"
VOLUME_MODEL = "model"

# Startup budget: the startup probe must outlast model loading, or the kubelet kills
# vLLM in the middle of reading its weights and the pod never becomes ready. The plan
# computes it (llm_operator.knowledge.startup: 600 s + weight bytes / the storage's load bandwidth):
#   failureThreshold = ceil(budget_seconds / STARTUP_PERIOD_SECONDS)
STARTUP_PERIOD_SECONDS = 10

# --- pod customisation (spec.pod) ---
# Environment variables the operator sets in some container it renders (vLLM, the
# download, the tuner), and prefixes it or LeaderWorkerSet own: spec.pod.env may not set
# them (one owner per name; a duplicate name also breaks server-side apply).
USAGE_STATS_ENV = (("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"))
# HF_HUB_OFFLINE is reserved only for a model on a volume: with a hub model the operator
# sets it in the containers that start after the download (build_env), unless the user
# sets it (e.g. to 1 with a pre-filled cache claim: the download step then does nothing).
# vLLM flags that make vLLM fetch from the hub what the download step does not (another
# tokenizer, a draft model, LoRA adapters, another load format or directory): with one
# of them in spec.engine.extraArgs, vLLM stays online after the download.
HUB_FETCHING_FLAGS = ("--tokenizer", "--tokenizer-revision", "--code-revision",
                      "--hf-config-path", "--download-dir", "--load-format",
                      "--speculative-config", "--lora-modules")
RESERVED_ENV = frozenset({"HF_TOKEN", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK",
                          "PYTHONPATH", "PYTHONUNBUFFERED"})
RESERVED_ENV_PREFIXES = ("LLMOP_", "LWS_")
# Label and annotation keys the operator or the controllers of its children own.
RESERVED_KEY_PREFIXES = (f"{GROUP}/", "app.kubernetes.io/", "leaderworkerset.sigs.k8s.io/",
                         "batch.kubernetes.io/", "kopf.zalando.org/")
RESERVED_LABELS = frozenset({"pod-template-hash", "controller-uid", "job-name"})


def image_for(svc: LLMService, settings: Settings) -> str:
    """``spec.image`` when the user set it, else the operator's default vLLM image."""
    return svc.spec.image or settings.default_image


# Variables that choose which GPUs a process sees: the device plugin sets them per pod.
DEVICE_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})


def pod_spec_errors(spec: LLMServiceSpec) -> list[SpecError]:
    """What ``spec.pod`` may not set: environment names, labels and annotations the
    operator (or LeaderWorkerSet, the Job and Deployment controllers) owns, and an
    environment name given twice."""
    errors: list[SpecError] = []
    seen: set[str] = set()
    for i, var in enumerate(spec.pod.env):
        field = f"spec.pod.env[{i}].name"
        offline = var.name == "HF_HUB_OFFLINE" and spec.model.volume is not None
        if var.name in RESERVED_ENV or var.name.startswith(RESERVED_ENV_PREFIXES) or offline:
            what = {"HF_TOKEN": "spec.model.tokenSecretRef sets it",
                    "HF_HUB_OFFLINE": "the operator sets it for a model on a volume"}
            errors.append(SpecError(
                field, f"{var.name!r} is set by the operator "
                f"({what.get(var.name, 'it manages this variable')})",
                "remove it" + (" and use spec.model.tokenSecretRef"
                               if var.name == "HF_TOKEN" else "")))
        elif var.name in DEVICE_ENV:
            errors.append(SpecError(
                field, f"{var.name!r} would choose the pod's GPUs, which the device plugin "
                "does: vLLM could see fewer GPUs than the plan's tensorParallelSize x "
                "pipelineParallelSize, and refuse to start", "remove it: the pod sees "
                "exactly the GPUs it requests (spec.gpus)"))
        elif var.name in seen:
            errors.append(SpecError(field, f"{var.name!r} is given twice", "keep one"))
        elif (var.value is None) == (var.value_from is None):
            errors.append(SpecError(f"spec.pod.env[{i}]", "needs exactly one of value and "
                                    "valueFrom", "set value, or valueFrom"))
        seen.add(var.name)
    for kind, keys in (("labels", spec.pod.labels), ("annotations", spec.pod.annotations)):
        for key in keys:
            if key.startswith(RESERVED_KEY_PREFIXES) or key in RESERVED_LABELS:
                errors.append(SpecError(
                    f"spec.pod.{kind}[{key}]",
                    "is owned by the operator or the controller of its pods (prefixes "
                    f"{', '.join(RESERVED_KEY_PREFIXES)}; {', '.join(sorted(RESERVED_LABELS))})",
                    "use a key of your own domain"))
    return errors


def build_env(spec: LLMServiceSpec, *, downloaded: bool = False) -> list[dict[str, Any]]:
    """Container environment: vLLM's usage statistics off, the Hugging Face token from its
    Secret, offline mode for a model on a volume (nothing to download; fail fast instead
    of reaching the hub), then ``spec.pod.env`` as given. Raises :class:`SpecErrors` for a
    ``spec.pod`` that collides with what the operator sets (:func:`pod_spec_errors`).

    ``downloaded``: a container that starts after the download init container has put the
    model in the cache (vLLM's, the tuner's). It runs offline too, so that a restart reads
    the cache instead of asking the hub again (each restart otherwise resolves the
    revision on huggingface.co, and fails while the hub or the egress is down); a
    ``HF_HUB_OFFLINE`` the user gives in ``spec.pod.env`` wins. Not where
    ``spec.engine.extraArgs`` has vLLM fetch what the download does not
    (:data:`HUB_FETCHING_FLAGS`), and never for the download itself, which would then
    skip its work. Those containers also keep vLLM's compile cache on the model cache
    volume (``VLLM_CACHE_ROOT``, :data:`VLLM_CACHE_PATH`), unless ``spec.pod.env`` names
    another."""
    errors = pod_spec_errors(spec)
    if errors:
        raise SpecErrors(errors)
    # vLLM reports usage to its maintainers unless told not to (vllm/usage/usage_lib.py
    # reads both variables).
    env: list[dict[str, Any]] = [{"name": n, "value": v} for n, v in USAGE_STATS_ENV]
    ref = spec.model.token_secret_ref
    if ref is not None:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
            }
        )
    user_env = {var.name for var in spec.pod.env}
    # Where the model cache is mounted, and a writable HOME for a user the image does not
    # know; a value the user gives in spec.pod.env wins (their own cache layout or HOME).
    defaults = [("HF_HOME", HF_CACHE_PATH)]
    if downloaded:  # the containers that run vLLM: its compile cache on the same volume
        defaults.append(("VLLM_CACHE_ROOT", VLLM_CACHE_PATH))
    if spec.pod.run_as_user != 0:
        defaults.append(("HOME", NONROOT_HOME))
    env += [{"name": n, "value": v} for n, v in defaults if n not in user_env]
    user_offline = "HF_HUB_OFFLINE" in user_env
    fetches = flag_set(spec.engine.extra_args, HUB_FETCHING_FLAGS) is not None
    if spec.model.volume is not None or (downloaded and not user_offline and not fetches):
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    env += [var.rendered() for var in spec.pod.env]
    return env


def build_volumes(spec: LLMServiceSpec, plan: Plan) -> list[dict[str, Any]]:
    """Pod volumes: /dev/shm in memory (NCCL and vLLM's workers need more than the
    container runtime's 64 MiB), the model cache (``spec.cache.claimName``, else an
    emptyDir sized by :func:`~llm_operator.planning.cache_size_limit`, which raises
    :class:`SpecError` for a cache that cannot hold the model), and the model's PVC if any."""
    volumes: list[dict[str, Any]] = [
        {
            "name": VOLUME_SHM,
            "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shm_size},
        }
    ]
    if spec.cache.claim_name:
        volumes.append(
            {"name": VOLUME_CACHE, "persistentVolumeClaim": {"claimName": spec.cache.claim_name}}
        )
    else:
        size = cache_size_limit(spec, plan)
        volumes.append({"name": VOLUME_CACHE, "emptyDir": {"sizeLimit": size}})
    if spec.model.volume is not None:
        volumes.append(
            {
                "name": VOLUME_MODEL,
                "persistentVolumeClaim": {
                    "claimName": spec.model.volume.claim_name,
                    "readOnly": True,
                },
            }
        )
    return volumes


def build_volume_mounts(spec: LLMServiceSpec) -> list[dict[str, Any]]:
    """The vLLM container's mounts of :func:`build_volumes`."""
    mounts: list[dict[str, Any]] = [
        {"name": VOLUME_SHM, "mountPath": SHM_PATH},
        {"name": VOLUME_CACHE, "mountPath": HF_CACHE_PATH},
    ]
    if spec.model.volume is not None:
        mount: dict[str, Any] = {
            "name": VOLUME_MODEL,
            "mountPath": MODEL_MOUNT_PATH,
            "readOnly": True,
        }
        if spec.model.volume.sub_path:
            mount["subPath"] = spec.model.volume.sub_path
        mounts.append(mount)
    return mounts


def build_resources(
    spec: LLMServiceSpec, plan: Plan, gpus_per_pod: int | None = None
) -> dict[str, Any]:
    """Container resources: ``TP x PP`` GPUs of ``spec.gpus.resourceName`` (requests =
    limits, as extended resources require), CPU and memory, and the emptyDir cache as
    ``ephemeral-storage``. ``gpus_per_pod`` replaces ``TP x PP`` for a pod holding one
    node's share of a multi-node replica (see :func:`~.leaderworkerset.gpus_per_pod`).

    CPU: ``spec.resources.cpu``, else 2 + the pod's GPUs (:func:`~llm_operator.planning.
    pod_cpu`); a request only (a CPU limit throttles the tokenizer and scheduler threads).
    Memory: ``spec.resources.memory`` as request = limit; else the plan's estimate
    (:func:`~llm_operator.planning.pod_memory_bytes`, which counts /dev/shm: a memory
    emptyDir counts against the pod's memory) as a request only, so an estimate on the low
    side costs no OOM kill. Ephemeral storage: the emptyDir cache's size as a request (so
    the scheduler picks a node whose disk holds the model), no limit (vLLM's compile
    caches in the container's writable layer must not get the pod evicted).
    """
    gpus = str(plan.gpus_per_replica if gpus_per_pod is None else gpus_per_pod)
    sized = plan if gpus_per_pod is None else plan.model_copy(
        update={"gpus_per_replica": gpus_per_pod, "nodes_per_replica": 1})
    requests: dict[str, str] = {"cpu": pod_cpu(spec, sized), "memory": pod_memory(spec, sized)}
    limits: dict[str, str] = {}
    if spec.resources.memory:
        limits["memory"] = spec.resources.memory
    cache = cache_size_limit(spec, plan)
    if cache is not None:
        requests["ephemeral-storage"] = cache
    resource = spec.gpus.resource_name or DEFAULT_GPU_RESOURCE  # see with_gpu_class
    requests[resource] = gpus
    limits[resource] = gpus
    return {"requests": requests, "limits": limits}


def startup_budget_seconds(plan: Plan) -> int:
    """Seconds the startup probe allows for loading: the plan's (``startupBudgetSeconds``,
    :mod:`llm_operator.knowledge.startup`); for a plan written by hand, the default bandwidth's."""
    return plan.startup_budget_seconds or startup_budget(plan.weight_bytes, None).seconds


# What the pods' containers may do: the `restricted` Pod Security Standard, which the
# API server enforces where a namespace asks for it (pod-security.kubernetes.io/enforce).
# Every container: no privilege escalation, no capability; every pod: the runtime's default
# seccomp profile (what `docker run` applies), a user that is not root. vllm-openai has no
# USER (it would run as root), so the pods name one: spec.pod.runAsUser (default
# constants.DEFAULT_RUN_AS_USER); its group owns the pod's volumes (fsGroup: a cache claim written
# by root before is handed over once, OnRootMismatch). The image's Python and packages are
# readable by any user; what vLLM writes goes to HOME (NONROOT_HOME), /tmp, /dev/shm and
# the cache. Not set: readOnlyRootFilesystem (torch.compile and Triton write under /tmp).
# spec.pod.runAsUser 0 keeps the image's root, for images that need it: no runAsNonRoot,
# and of the runtime's default capabilities the three a root process needs for caches and
# volumes written by another user (CHOWN, DAC_OVERRIDE, FOWNER); such pods need a
# namespace that admits the `baseline` standard.
RESTRICTED_CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
ROOT_CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]},
}
SECCOMP_RUNTIME_DEFAULT: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context(spec: LLMServiceSpec) -> dict[str, Any]:
    """A container's securityContext in the server pods and the tuning Job's pod."""
    return copy.deepcopy(ROOT_CONTAINER_SECURITY_CONTEXT if spec.pod.run_as_user == 0
                         else RESTRICTED_CONTAINER_SECURITY_CONTEXT)


def pod_security_context(spec: LLMServiceSpec) -> dict[str, Any]:
    """The pod's securityContext: seccomp, and the user (``spec.pod.runAsUser``, not root
    unless it is 0), its group and the volumes' group."""
    ctx = copy.deepcopy(SECCOMP_RUNTIME_DEFAULT)
    uid = spec.pod.run_as_user
    if uid != 0:
        ctx |= {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid,
                "fsGroupChangePolicy": "OnRootMismatch"}
    return ctx


def pod_template_metadata(svc: LLMService, labels: Mapping[str, str]) -> dict[str, Any]:
    """A pod template's metadata: the operator's ``labels`` plus ``spec.pod.labels`` and
    ``spec.pod.annotations`` (colliding keys are refused by :func:`build_env`)."""
    meta: dict[str, Any] = {"labels": {**svc.spec.pod.labels, **labels}}
    if svc.spec.pod.annotations:
        meta["annotations"] = dict(svc.spec.pod.annotations)
    return meta


def pod_identity_fields(spec: LLMServiceSpec) -> dict[str, Any]:
    """Pod-spec fields from ``spec.pod``: serviceAccountName, imagePullSecrets."""
    fields: dict[str, Any] = {}
    if spec.pod.service_account_name:
        fields["serviceAccountName"] = spec.pod.service_account_name
    if spec.pod.image_pull_secrets:
        fields["imagePullSecrets"] = [{"name": s.name} for s in spec.pod.image_pull_secrets]
    return fields

"""Render (pure): an LLMService and its plan become the Kubernetes objects that serve it.

Every builder here is a pure function of its arguments (the parsed service, the plan,
the operator settings, tuned or adapted overrides): no API calls, no clock, no
globals. Labels, annotations and owner references are set inside, so what
``llm-operator render`` prints is exactly what the operator applies.

Children:

- :func:`build_deployment`: the vLLM server pods (command ``vllm serve``, set
  explicitly whatever the image's entrypoint; arguments from :func:`build_vllm_args`,
  the model first and positional), when one replica fits one node.
- :func:`build_leader_worker_set`: instead of the Deployment when the plan spreads one
  replica over several nodes (pipeline stages across nodes): a
  ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet whose group is one replica, a leader
  pod (Ray head + ``vllm serve``) and one worker pod (Ray worker) per further node.
- :func:`build_service`: ClusterIP on port 8000 named ``http`` (leader pods only for a
  LeaderWorkerSet: workers serve nothing).
- :func:`build_pod_monitor`: a ``monitoring.coreos.com/v1`` PodMonitor, only when the
  Prometheus Operator is there (see :func:`render_all`).
- :func:`build_pod_disruption_budget`: a ``policy/v1`` PodDisruptionBudget
  (``maxUnavailable: 1``), only for more than one replica.
- :func:`build_admission_config_map`: the ConfigMap ``<name>-admission-cap`` carrying the
  live admission cap, when the Deployment runs it (:func:`with_live_admission`).

Every server drains on a rollout: ``--shutdown-timeout``, a preStop sleep and a grace
period that covers both (see :func:`termination_grace_seconds`).

The tuning Job (:func:`llm_operator.tuning.job.build_tuning_job`) runs the same image on
the same GPUs with the same model source, so the pod-level pieces are separate builders
it reuses: :func:`model_source`, :func:`build_env`, :func:`build_volumes`,
:func:`build_volume_mounts`, :func:`build_resources`, :func:`scheduling_fields`, with
``labels_for(svc, COMPONENT_TUNING)``.

Every child carries ``llmops.dev/spec-hash``: a stable hash of the rendered object
itself, so the apply step can compare desired with observed by one annotation and
write nothing when nothing changed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from .constants import (
    ANNOTATION_SPEC_HASH,
    API_VERSION,
    APP_NAME,
    DEFAULT_GPU_RESOURCE,
    GROUP,
    KIND,
    LABEL_COMPONENT,
    LABEL_COMPONENT_K8S,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    LABEL_SERVICE,
    MANAGED_BY,
    VLLM_PORT,
)
from .errors import SpecError, SpecErrors
from .gpuclass import GFD_PRODUCT_LABEL, Placement, placement
from .models import LLMService, LLMServiceSpec
from .planning import (  # noqa: F401 - OVERRIDABLE, effective_engine_value re-exported
    MULTI_NODE_EXECUTOR,
    OVERRIDABLE,
    Explained,
    Plan,
    cache_size_limit,
    checkpoint_bytes,
    effective_engine_value,
    engine_flags,
    engine_rule_errors,
    managed_flag_errors,
    pod_cpu,
    pod_memory,
)
from .settings import Settings

COMPONENT_SERVER = "server"
COMPONENT_TUNING = "tuning"

CONTAINER_NAME = "vllm"
VLLM_COMMAND = ("vllm", "serve")  # the console script every vLLM image installs
PORT_NAME = "http"
HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"

# Where volumes land inside the vLLM container.
HF_CACHE_PATH = "/root/.cache/huggingface"  # HF_HOME of the vllm-openai image (runs as root)
MODEL_MOUNT_PATH = "/mnt/models"  # a model from spec.model.volume
SHM_PATH = "/dev/shm"

GPU_PRODUCT_LABEL = GFD_PRODUCT_LABEL  # set on GPU nodes by GPU feature discovery

VOLUME_SHM = "dshm"
VOLUME_CACHE = "model-cache"
VOLUME_MODEL = "model"

# Startup budget: the startup probe must outlast model loading, or the kubelet kills
# vLLM in the middle of reading its weights and the pod never becomes ready.
#   budget_seconds  = STARTUP_BASE_SECONDS + ceil(weight_bytes / LOAD_BYTES_PER_SECOND)
#   failureThreshold = ceil(budget_seconds / STARTUP_PERIOD_SECONDS)
# The base (10 min) covers engine start, CUDA graph capture / torch.compile warm-up and
# KV-cache allocation; the second term reads every weight byte at a conservative
# 200 MB/s (slow network storage: a cache or model PVC). The download from the hub is not
# in it: the init container DOWNLOAD_CONTAINER fetches the model before vLLM starts, within
# its own budget (below). Example: Llama 3.1 70B in bf16 (141 GB) -> 600 + 706 s = 1306 s
# -> failureThreshold 131.
STARTUP_BASE_SECONDS = 600
LOAD_BYTES_PER_SECOND = 200 * 10**6
STARTUP_PERIOD_SECONDS = 10
# Download budget: the init container gives up (exit 1) after
#   DOWNLOAD_BASE_SECONDS + ceil(checkpoint bytes / DOWNLOAD_BYTES_PER_SECOND),
# 10 min plus the checkpoint at 50 MB/s (a slow or throttled link), so a hung download
# shows as a failing init container instead of a pod Pending in Init forever. The kubelet
# restarts it with back-off and the hub client resumes the files already on disk.
# Llama 3.1 70B (141 GB): 600 + 2823 s = 57 min.
DOWNLOAD_BASE_SECONDS = 600
DOWNLOAD_BYTES_PER_SECOND = 50 * 10**6
# The Deployment reports ProgressDeadlineExceeded if a new pod is not available within
# the download and startup budgets plus this margin (image pull of a ~10 GB vLLM image,
# scheduling).
PROGRESS_MARGIN_SECONDS = 600
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

# --- multi-node replicas (LeaderWorkerSet) ---
# One replica on several nodes runs as one LeaderWorkerSet group, the way vLLM documents
# it (docs.vllm.ai deployment/frameworks/lws and examples/online_serving/
# multi-node-serving.sh): the leader starts a Ray head and, once every node of the group
# has joined, runs ``vllm serve`` with the Ray executor; each worker joins the head.
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
# Our own role label (the Service and the PodMonitor select the leader by it). LWS itself
# labels every pod ``leaderworkerset.sigs.k8s.io/worker-index`` ("0" on the leader), but
# only at admission, so it is not on the templates we render and check.
LABEL_ROLE = f"{GROUP}/role"
ROLE_LEADER = "leader"
ROLE_WORKER = "worker"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
RAY_PORT = 6379  # the Ray head's GCS port (Ray's default)
# How long the leader waits for every worker to join its Ray cluster before it gives up
# (the container exits, and LWS recreates the whole group); the leader's startup probe
# allows this on top of the loading budget. Workers may need an image pull on their node.
RAY_JOIN_TIMEOUT_SECONDS = 600
# Only shell variables (``${VAR}``) and ``"$@"``: Kubernetes rewrites ``$(VAR)`` and
# ``$$`` in command and args, so neither may appear. LWS injects LWS_LEADER_ADDRESS and
# LWS_GROUP_SIZE into every container; the leader's ``vllm serve`` arguments arrive as
# the positional parameters (``sh -c SCRIPT NAME ARGS...``), so no argument is ever
# re-parsed by the shell. ``exec`` makes vllm / ray PID 1, so they receive SIGTERM.
RAY_WAIT_FOR_NODES = f"""import os, sys, time
import ray
want = int(os.environ["LWS_GROUP_SIZE"])
ray.init(address="auto")
deadline = time.monotonic() + {RAY_JOIN_TIMEOUT_SECONDS}
while True:
    alive = sum(1 for node in ray.nodes() if node["Alive"])
    print(f"Ray nodes alive: {{alive}}/{{want}}", flush=True)
    if alive >= want:
        break
    if time.monotonic() > deadline:
        sys.exit(f"Gave up after {RAY_JOIN_TIMEOUT_SECONDS} s waiting for {{want}} Ray nodes")
    time.sleep(5)
"""
LEADER_SCRIPT = f"""set -e
ray start --head --port={RAY_PORT} --disable-usage-stats
python3 -c '{RAY_WAIT_FOR_NODES}'
exec {" ".join(VLLM_COMMAND)} "$@"
"""
WORKER_SCRIPT = f"""head="${{LWS_LEADER_ADDRESS}}:{RAY_PORT}"
until ray health-check --address="${{head}}" >/dev/null 2>&1; do
  echo "Waiting for the Ray head at ${{head}}"
  sleep 5
done
exec ray start --address="${{head}}" --block --disable-usage-stats
"""

# --- the model download (init container) ---
DOWNLOAD_CONTAINER = "download-model"
# Fetches what ``vllm serve`` would fetch, with the Hugging Face client the vLLM image
# ships (huggingface_hub; the pattern of KServe's storage initializer), into the cache
# volume, so that the startup probe counts loading only. The weight files are chosen as
# vLLM 0.32 chooses them (model_executor/model_loader: Mistral's consolidated*.safetensors
# if present, else the files of model.safetensors.index.json, else the first of
# *.safetensors, *.bin, *.pt at the top of the repository; never original/), plus the
# small files the tokenizer and config need. A file vLLM wants that this missed is still
# fetched by vLLM itself, only then inside the startup budget. Arguments: repository,
# revision ("" for the default branch), budget in seconds. No "$(" anywhere: Kubernetes
# would expand it in command and args.
DOWNLOAD_SCRIPT = """import fnmatch, json, os, sys, threading
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
repo, revision, budget = sys.argv[1], sys.argv[2] or None, int(sys.argv[3])
def give_up():
    print(f"Gave up downloading {repo} after {budget} s; the next attempt resumes", flush=True)
    os._exit(1)
timer = threading.Timer(budget, give_up)
timer.daemon = True
timer.start()
if constants.HF_HUB_OFFLINE:
    print("HF_HUB_OFFLINE is set: vLLM uses the cache as it is", flush=True)
    sys.exit(0)
top = [f for f in HfApi().list_repo_files(repo, revision=revision) if "/" not in f]
weights = fnmatch.filter(top, "consolidated*.safetensors")
if not weights and "model.safetensors.index.json" in top:
    index = hf_hub_download(repo, "model.safetensors.index.json", revision=revision)
    with open(index) as f:
        weights = sorted(set(json.load(f)["weight_map"].values()))
if not weights:
    weights = next(([p] for p in ("*.safetensors", "*.bin", "*.pt") if fnmatch.filter(top, p)), [])
small = ["*.json", "*.model", "*.tiktoken", "*.txt", "*.jinja", "*.py"]
print(f"Downloading {repo} ({revision or 'default branch'}): {weights}", flush=True)
path = snapshot_download(repo, revision=revision, allow_patterns=weights + small,
                         ignore_patterns=["original/**/*"])
print(f"Downloaded {repo} to {path}", flush=True)
"""

# --- pod customisation (spec.pod) ---
# Environment variables the operator sets in some container it renders (vLLM, the
# download, the tuner), and prefixes it or LeaderWorkerSet own: spec.pod.env may not set
# them (one owner per name; a duplicate name also breaks server-side apply).
USAGE_STATS_ENV = (("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"))
# HF_HUB_OFFLINE only where the operator sets it (a model on a volume): with a hub model
# and a pre-filled cache claim, the user may set it (the download step then does nothing).
RESERVED_ENV = frozenset({"HF_TOKEN", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK",
                          "PYTHONPATH", "PYTHONUNBUFFERED"})
RESERVED_ENV_PREFIXES = ("LLMOP_", "LWS_")
# Label and annotation keys the operator or the controllers of its children own.
RESERVED_KEY_PREFIXES = (f"{GROUP}/", "app.kubernetes.io/", "leaderworkerset.sigs.k8s.io/",
                         "batch.kubernetes.io/", "kopf.zalando.org/")
RESERVED_LABELS = frozenset({"pod-template-hash", "controller-uid", "job-name"})


# --- identity: labels, owner references, hashes -------------------------------------


def labels_for(svc: LLMService, component: str) -> dict[str, str]:
    """The labels of every child of ``svc`` for ``component`` (``server`` or ``tuning``).

    ``llmops.dev/llmservice`` names the service (it also groups Prometheus series),
    ``llmops.dev/component`` tells the server pods from a tuning Job's; the
    ``app.kubernetes.io/*`` set is the recommended one.
    """
    name = svc.metadata.name
    return {
        LABEL_SERVICE: name,
        LABEL_COMPONENT: component,
        LABEL_NAME: APP_NAME,
        LABEL_INSTANCE: name,
        LABEL_COMPONENT_K8S: component,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_PART_OF: MANAGED_BY,
    }


def selector_labels(svc: LLMService, component: str = COMPONENT_SERVER) -> dict[str, str]:
    """The labels that select the pods of one component (immutable on a Deployment)."""
    return {LABEL_SERVICE: svc.metadata.name, LABEL_COMPONENT: component}


def owner_reference(svc: LLMService) -> dict[str, Any] | None:
    """The controller owner reference to ``svc``, or None while its uid is unknown
    (``llm-operator render`` on a file that was never applied)."""
    if not svc.metadata.uid:
        return None
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": svc.metadata.name,
        "uid": svc.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def spec_hash(obj: Mapping[str, Any]) -> str:
    """A stable hash of a rendered object, ignoring its own spec-hash annotation.

    Stable across processes and dict orders (canonical JSON, sorted keys), so the same
    LLMService always renders to the same hash and the apply step can skip unchanged
    children.
    """
    # Copy only the path that changes (metadata.annotations): a deep copy of the whole
    # Deployment cost more than the rest of a reconciliation (benchmarks/scale.py).
    body = dict(obj)
    metadata = dict(body.get("metadata") or {})
    body["metadata"] = metadata
    annotations = metadata.get("annotations")
    if annotations is not None:
        annotations = {k: v for k, v in annotations.items() if k != ANNOTATION_SPEC_HASH}
        metadata["annotations"] = annotations
        if not annotations:
            del metadata["annotations"]  # absent and empty hash the same
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _metadata(svc: LLMService, component: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": svc.metadata.name,
        "namespace": svc.metadata.namespace,
        "labels": labels_for(svc, component),
    }
    owner = owner_reference(svc)
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


def _with_spec_hash(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"].setdefault("annotations", {})[ANNOTATION_SPEC_HASH] = spec_hash(obj)
    return obj


# --- vLLM arguments -------------------------------------------------------------------




def model_source(spec: LLMServiceSpec) -> tuple[str, bool]:
    """What vLLM's ``--model`` gets, and whether the model comes from a volume.

    A hub model is its id (downloaded into the cache volume); a model on a PVC is the
    path it is mounted at, served under ``spec.model.name``.
    """
    if spec.model.volume is not None:
        return MODEL_MOUNT_PATH, True
    return spec.model.name, False


def _check_overrides(overrides: Mapping[str, int]) -> None:
    for key, value in overrides.items():
        if key not in OVERRIDABLE:
            raise ValueError(
                f"override {key!r} is not an engine setting the operator tunes; "
                f"known: {', '.join(sorted(OVERRIDABLE))}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"override {key!r} must be a positive integer, got {value!r}")


def build_vllm_args(
    svc: LLMService, plan: Plan, overrides: Mapping[str, int] | None = None
) -> list[str]:
    """The arguments of :data:`VLLM_COMMAND` (``vllm serve``): the model, positional and
    first (``vllm serve`` rejected ``--model`` in 0.11 and deprecates it in 0.32), then
    :func:`build_vllm_flags`."""
    model, _ = model_source(svc.spec)
    return [model, *build_vllm_flags(svc, plan, overrides)]


def build_vllm_flags(
    svc: LLMService, plan: Plan, overrides: Mapping[str, int] | None = None
) -> list[str]:
    """The flags of ``vllm serve`` after the model.

    Order is fixed: endpoint, parallelism, memory, batching, numerics,
    switches the user set, revision, then ``spec.engine.extraArgs`` verbatim and last.
    ``overrides`` (e.g. ``{"maxNumSeqs": 48}`` from tuning) apply only where the user
    left the field to ``auto``. The engine's own flags come from
    :func:`~llm_operator.planning.engine_flags`, which the planner checks against vLLM's
    start-up rules (:mod:`llm_operator.engine_rules`); with overrides they are checked
    again here. Raises :class:`SpecErrors` when extraArgs set a flag the operator manages
    or an override breaks such a rule, and ``ValueError`` on an unknown override key.
    """
    spec = svc.spec
    errors = managed_flag_errors(spec)
    if errors:
        raise SpecErrors(errors)
    if overrides:
        _check_overrides(overrides)
        errors = engine_rule_errors(spec, plan, overrides, overridden_only=True)
        if errors:  # a tuned or adapted value the engine would refuse with the rest
            raise SpecErrors(errors)

    _, from_volume = model_source(spec)
    args = [
        "--served-model-name", spec.model.name,
        "--host", "0.0.0.0",
        "--port", str(VLLM_PORT),
    ]  # fmt: skip
    for flag in engine_flags(spec, plan, overrides):
        args += flag.items
    # A revision selects a hub commit; a model on a volume is whatever the volume holds.
    if spec.model.revision and not from_volume:
        args += ["--revision", spec.model.revision]
    args += ["--shutdown-timeout", str(spec.rollout.drain_seconds)]  # the drain
    args += list(spec.engine.extra_args)
    return args


# --- pod pieces (shared with the tuning Job) -------------------------------------------


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


def build_env(spec: LLMServiceSpec) -> list[dict[str, Any]]:
    """Container environment: vLLM's usage statistics off, the Hugging Face token from its
    Secret, offline mode for a model on a volume (nothing to download; fail fast instead
    of reaching the hub), then ``spec.pod.env`` as given. Raises :class:`SpecErrors` for a
    ``spec.pod`` that collides with what the operator sets (:func:`pod_spec_errors`)."""
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
    if spec.model.volume is not None:
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
    node's share of a multi-node replica (see :func:`gpus_per_pod`).

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


def gpu_placement(spec: LLMServiceSpec, settings: Settings) -> Placement:
    """Where the GPU pods of ``spec`` go under the operator's GPU class
    (``settings.gpu_class``; see :mod:`llm_operator.gpuclass`). Raises
    :class:`~llm_operator.errors.SpecError` for a product the class does not know."""
    return placement(spec, settings.gpu_class, settings.selected_gpu_class())


def gpu_product_label(spec: LLMServiceSpec, settings: Settings) -> str | None:
    """The node-label value that places ``spec.gpus.product`` under the operator's GPU
    class (see :func:`gpu_placement`).

    The spec may name a GPU by an alias (``H100-SXM``); the class translates it into its
    label's value (``NVIDIA-H100-80GB-HBM3`` for GPU feature discovery,
    ``nvidia-h100-80gb`` on GKE). None when no product is set or the class has no
    per-product label; a product the class does not know raises a ``SpecError``.
    """
    label = settings.selected_gpu_class().product_label
    if not spec.gpus.product or label is None:
        return None
    return gpu_placement(spec, settings).node_selector.get(label)


def scheduling_fields(spec: LLMServiceSpec, settings: Settings) -> dict[str, Any]:
    """Pod-spec fields that place the pod: nodeSelector (the user's, plus what the GPU
    class adds: the product label for ``spec.gpus.product`` where the user's selector
    does not name it already, see :func:`gpu_placement`), tolerations (the user's, plus
    the class's), affinity, priorityClassName."""
    fields: dict[str, Any] = {}
    placed = gpu_placement(spec, settings)
    if placed.node_selector:
        fields["nodeSelector"] = placed.node_selector
    if placed.tolerations:
        fields["tolerations"] = placed.tolerations
    if spec.scheduling.affinity:
        fields["affinity"] = copy.deepcopy(spec.scheduling.affinity)
    if spec.scheduling.priority_class_name:
        fields["priorityClassName"] = spec.scheduling.priority_class_name
    return fields


def with_placement(plan: Plan, spec: LLMServiceSpec, settings: Settings) -> Plan:
    """``plan`` with a ``placement`` explanation (which GPU class and node label place the
    pods; ``status.plan`` and ``llm-operator plan`` show it) and the class's warnings."""
    placed = gpu_placement(spec, settings)
    label = settings.selected_gpu_class().product_label
    value = (f"{label}={placed.node_selector[label]}"
             if label and label in placed.node_selector else "any GPU node of the class")
    explained = Explained(name="placement", value=value, formula=placed.explanation,
                          source=f"GPU class {placed.class_name!r}")
    return plan.model_copy(update={
        "explanations": [*plan.explanations, explained],
        "warnings": [*plan.warnings, *placed.warnings]})


def with_gpu_class(svc: LLMService, settings: Settings) -> LLMService:
    """``svc`` with ``spec.gpus.resourceName`` filled from the GPU class when the user
    left it out (a value the user set is kept)."""
    resource = gpu_placement(svc.spec, settings).resource_name
    if resource == svc.spec.gpus.resource_name:
        return svc
    gpus = svc.spec.gpus.model_copy(update={"resource_name": resource})
    return svc.model_copy(update={"spec": svc.spec.model_copy(update={"gpus": gpus})})


def startup_budget_seconds(plan: Plan) -> int:
    """Seconds the startup probe allows for loading: see ``STARTUP_BASE_SECONDS``."""
    return STARTUP_BASE_SECONDS + math.ceil(plan.weight_bytes / LOAD_BYTES_PER_SECOND)


def download_budget_seconds(spec: LLMServiceSpec, plan: Plan) -> int:
    """Seconds the download init container may take (see ``DOWNLOAD_BASE_SECONDS``);
    0 for a model on a volume (no download)."""
    if spec.model.volume is not None:
        return 0
    return DOWNLOAD_BASE_SECONDS + math.ceil(checkpoint_bytes(plan) / DOWNLOAD_BYTES_PER_SECOND)


# What the vLLM containers may do. The vllm-openai image runs as root, with HF_HOME under
# /root; what is safe without that changing: no privilege escalation (no setuid binary is
# needed), the runtime's default seccomp profile (what `docker run` applies, vLLM's
# documented way to run), and of the runtime's default capabilities only the three a root
# process needs to read and write caches and volumes written by another user (CHOWN,
# DAC_OVERRIDE, FOWNER); NET_RAW, MKNOD, SETUID/SETGID, KILL etc. are dropped. Not set:
# runAsNonRoot / runAsUser (the image's HF_HOME and caches are root's), and
# readOnlyRootFilesystem (vLLM, torch.compile and Triton write caches under /root/.cache
# and /tmp).
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]},
}
POD_SECURITY_CONTEXT: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}


def build_download_container(svc: LLMService, plan: Plan, settings: Settings,
                             ) -> dict[str, Any] | None:
    """The init container that downloads the model into the cache before vLLM starts
    (:data:`DOWNLOAD_SCRIPT`), or None for a model on a volume. Same image, environment
    (token, proxies from ``spec.pod.env``) and cache mount as the vLLM container."""
    spec = svc.spec
    if spec.model.volume is not None:
        return None
    container: dict[str, Any] = {
        "name": DOWNLOAD_CONTAINER,
        "image": image_for(svc, settings),
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", DOWNLOAD_SCRIPT],
        "args": [spec.model.name, spec.model.revision or "",
                 str(download_budget_seconds(spec, plan))],
        "env": build_env(spec),
        # The cache's disk is requested by the vLLM container; a download needs a core
        # and a little memory (the files stream to disk).
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        "volumeMounts": [{"name": VOLUME_CACHE, "mountPath": HF_CACHE_PATH}],
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
    }
    return container


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
    svc: LLMService, plan: Plan, settings: Settings, overrides: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """The vLLM container of the server pods: :data:`VLLM_COMMAND` with
    :func:`build_vllm_args` (the command is explicit: images differ in their entrypoint)."""
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image_for(svc, settings),
        "imagePullPolicy": "IfNotPresent",
        "command": list(VLLM_COMMAND),
        "args": build_vllm_args(svc, plan, overrides),
        "ports": [{"name": PORT_NAME, "containerPort": VLLM_PORT, "protocol": "TCP"}],
    }
    env = build_env(svc.spec)
    if env:
        container["env"] = env
    container["resources"] = build_resources(svc.spec, plan)
    container["volumeMounts"] = build_volume_mounts(svc.spec)
    container.update(build_probes(plan))
    container["securityContext"] = copy.deepcopy(CONTAINER_SECURITY_CONTEXT)
    container["lifecycle"] = build_drain_lifecycle()
    return container


def _server_pod_spec(svc: LLMService, container: dict[str, Any], plan: Plan,
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
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
    }
    pod_spec.update(pod_identity_fields(svc.spec))
    pod_spec.update(scheduling_fields(svc.spec, settings))
    for c in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]:
        # A container that exits with an error and wrote no termination message gets its
        # log tail there, so the operator reports a crash loop's last line
        # (ContainersRunning) without reading logs.
        c.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    return pod_spec


def _workload_metadata(svc: LLMService) -> dict[str, Any]:
    """The server workload's metadata: :func:`_metadata` plus ``spec.pod.labels`` (a
    queue label such as Kueue's ``kueue.x-k8s.io/queue-name`` is read from the workload)."""
    meta = _metadata(svc, COMPONENT_SERVER)
    meta["labels"] = {**svc.spec.pod.labels, **meta["labels"]}
    return meta


# --- children --------------------------------------------------------------------------


def build_deployment(
    svc: LLMService, plan: Plan, settings: Settings, overrides: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """The vLLM server Deployment of ``svc`` (``apps/v1``), with its spec-hash annotation."""
    labels = labels_for(svc, COMPONENT_SERVER)
    pod_spec = _server_pod_spec(svc, build_server_container(svc, plan, settings, overrides),
                                plan, settings)
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _workload_metadata(svc),
        "spec": {
            "replicas": svc.spec.replicas,
            "selector": {"matchLabels": selector_labels(svc)},
            # GPUs are scarce: with the default maxSurge (25%, at least 1) the new pod
            # waits Pending for a GPU that only the old pod frees, and the old pod is
            # never removed because the new one never becomes available: a deadlock.
            # maxSurge 0 / maxUnavailable 1 (the default) replaces one pod at a time in
            # place. For one replica this is equivalent to Recreate, an outage the plan
            # warns about; spec.rollout.maxSurge >= 1 surges instead, where the user has
            # spare GPUs (rolling_update). Using one strategy type for every replica count
            # means scaling 1 <-> 2 never has to switch the type (which a patch cannot do
            # while the other type's fields remain).
            "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling_update(svc.spec)},
            "progressDeadlineSeconds": (download_budget_seconds(svc.spec, plan)
                                        + startup_budget_seconds(plan)
                                        + PROGRESS_MARGIN_SECONDS),
            "template": {
                "metadata": pod_template_metadata(svc, labels),
                "spec": pod_spec,
            },
        },
    }
    return _with_spec_hash(deployment)


def is_multi_node(plan: Plan) -> bool:
    """Whether one replica spans nodes (then it runs as a LeaderWorkerSet)."""
    return plan.nodes_per_replica > 1


def leader_worker_set_name(svc: LLMService) -> str:
    """The LeaderWorkerSet's name: not the Service's (see ``LWS_NAME_SUFFIX``)."""
    return f"{svc.metadata.name}{LWS_NAME_SUFFIX}"


def gpus_per_pod(plan: Plan) -> int:
    """GPUs each pod of a multi-node replica requests: the replica's ``TP x PP`` GPUs
    shared over its nodes. Rounded up when they do not divide evenly (every pod of the
    group has the same size, so Ray then leaves a GPU or so of the last node idle)."""
    return math.ceil(plan.gpus_per_replica / plan.nodes_per_replica)


def serving_selector(svc: LLMService, leaders_only: bool = False) -> dict[str, str]:
    """The labels of the pods that serve HTTP on port 8000: every server pod of a
    Deployment; only the leaders of a LeaderWorkerSet (``leaders_only``)."""
    selector = selector_labels(svc)
    if leaders_only:
        selector[LABEL_ROLE] = ROLE_LEADER
    return selector


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
    svc: LLMService, plan: Plan, settings: Settings, overrides: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """The vLLM server of ``svc`` as a LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``),
    for a plan whose replica spans ``plan.nodes_per_replica`` nodes.

    One group per replica (``replicas`` = ``spec.replicas``, ``size`` = nodes per replica).
    The leader pod starts a Ray head, waits until all ``size`` nodes have joined (at most
    ``RAY_JOIN_TIMEOUT_SECONDS``) and then runs ``vllm serve`` with the arguments of
    :func:`build_vllm_args` plus ``--distributed-executor-backend ray``: vLLM places its
    TP x PP workers over the Ray cluster. Each worker pod joins the head at
    ``$LWS_LEADER_ADDRESS``. Every pod requests one node's share of the GPUs
    (:func:`gpus_per_pod`) and holds the same model source, cache and scheduling as a
    Deployment pod (each node loads its own pipeline stage's weights). Only the leader
    serves port 8000 and has probes; it carries ``llmops.dev/role: leader``, which the
    Service and the PodMonitor select.

    Raises :class:`SpecErrors` when ``metadata.name`` is too long for the names LWS
    derives from it, or (as :func:`build_vllm_args` does) for managed flags in extraArgs.
    """
    errors = _lws_name_errors(svc)
    if errors:
        raise SpecErrors(errors)
    spec = svc.spec
    image = image_for(svc, settings)
    per_pod = gpus_per_pod(plan)
    env = build_env(spec)

    leader: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        # sh -c SCRIPT $0 "$@": the vLLM arguments stay a list, never re-split by a shell.
        "command": ["/bin/sh", "-c", LEADER_SCRIPT, "vllm-leader"],
        # Appended after extraArgs so that the Ray executor always wins (argparse keeps
        # the last): the multiprocessing executor cannot reach other nodes.
        "args": [*build_vllm_args(svc, plan, overrides), *MULTI_NODE_EXECUTOR],
        "ports": [{"name": PORT_NAME, "containerPort": VLLM_PORT, "protocol": "TCP"}],
    }
    worker: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", WORKER_SCRIPT],
    }
    for container in (leader, worker):
        if env:
            container["env"] = copy.deepcopy(env)
        container["resources"] = build_resources(spec, plan, per_pod)
        container["volumeMounts"] = build_volume_mounts(spec)
    # The leader's startup includes waiting for the workers to join.
    leader.update(build_probes(plan, extra_startup_seconds=RAY_JOIN_TIMEOUT_SECONDS))
    for container in (leader, worker):
        container["securityContext"] = copy.deepcopy(CONTAINER_SECURITY_CONTEXT)

    def template(role: str, container: dict[str, Any]) -> dict[str, Any]:
        labels = {**labels_for(svc, COMPONENT_SERVER), LABEL_ROLE: role}
        return {"metadata": pod_template_metadata(svc, labels),
                "spec": _server_pod_spec(svc, container, plan, settings)}

    metadata = _workload_metadata(svc)
    metadata["name"] = leader_worker_set_name(svc)
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
                # A Ray cluster does not survive losing a member: if any pod or container
                # of the group restarts, recreate the whole group.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": template(ROLE_LEADER, leader),
                "workerTemplate": template(ROLE_WORKER, worker),
            },
        },
    }
    return _with_spec_hash(lws)


def build_service(svc: LLMService, *, leaders_only: bool = False) -> dict[str, Any]:
    """The ClusterIP Service in front of the server pods: port 8000 named ``http``.
    ``leaders_only`` for a LeaderWorkerSet: only its leaders serve (see
    :func:`serving_selector`)."""
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(svc, COMPONENT_SERVER),
        "spec": {
            "type": "ClusterIP",
            "selector": serving_selector(svc, leaders_only),
            "ports": [
                {
                    "name": PORT_NAME,
                    "port": VLLM_PORT,
                    "targetPort": PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }
    return _with_spec_hash(service)


def prometheus_pod_label(label: str) -> str:
    """The meta label Prometheus' Kubernetes discovery gives a pod label
    (``llmops.dev/llmservice`` -> ``__meta_kubernetes_pod_label_llmops_dev_llmservice``)."""
    sanitized = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in label)
    return f"__meta_kubernetes_pod_label_{sanitized}"


def build_pod_monitor(
    svc: LLMService, settings: Settings, *, leaders_only: bool = False
) -> dict[str, Any]:
    """A PodMonitor (``monitoring.coreos.com/v1``) scraping ``/metrics`` on the server
    pods, relabelled so every vLLM series carries the service name and namespace under
    the labels the adaptation queries group by (``settings.prometheus_*_label``).
    ``leaders_only`` for a LeaderWorkerSet: its workers run only Ray, no vLLM server,
    and serve no ``/metrics`` (the leader's engine reports for the whole replica)."""
    metadata = _metadata(svc, COMPONENT_SERVER)
    # The Prometheus selects PodMonitors by label (kube-prometheus-stack: release: <its
    # release>); the operator's own labels are kept (settings refuse keys in their domains).
    metadata["labels"] = {**settings.pod_monitor_labels, **metadata["labels"]}
    monitor: dict[str, Any] = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": serving_selector(svc, leaders_only)},
            "podMetricsEndpoints": [
                {
                    "port": PORT_NAME,
                    "path": METRICS_PATH,
                    # The adaptation's sample minimum follows this interval (see
                    # llm_operator.adaptation.policy.policy_for_scrape).
                    "interval": f"{settings.scrape_interval_seconds}s",
                    "relabelings": [
                        {
                            "action": "replace",
                            "sourceLabels": [prometheus_pod_label(LABEL_SERVICE)],
                            "targetLabel": settings.prometheus_service_label,
                        },
                        {
                            "action": "replace",
                            "sourceLabels": ["__meta_kubernetes_namespace"],
                            "targetLabel": settings.prometheus_namespace_label,
                        },
                    ],
                }
            ],
        },
    }
    return _with_spec_hash(monitor)


def build_pod_disruption_budget(svc: LLMService) -> dict[str, Any] | None:
    """A PodDisruptionBudget (``policy/v1``) for the server pods when there are several
    replicas: ``maxUnavailable: 1``, so a node drain evicts one serving pod at a time
    (for a LeaderWorkerSet: one pod of one group, which restarts that group). None for
    one replica (or none): a budget that allowed no eviction would block every drain of
    the node, and one that allows it protects nothing."""
    if svc.spec.replicas <= 1:
        return None
    pdb: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(svc, COMPONENT_SERVER),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(svc)},
        },
    }
    return _with_spec_hash(pdb)


def wants_pod_monitor(settings: Settings, discovered: bool | None) -> bool:
    """Whether to render a PodMonitor: ``LLMOP_POD_MONITOR=enabled`` / ``disabled`` decide;
    ``auto`` follows what the caller discovered (the cluster serves
    ``monitoring.coreos.com``); nothing discovered means no PodMonitor."""
    if settings.pod_monitor == "enabled":
        return True
    if settings.pod_monitor == "disabled":
        return False
    return bool(discovered)


def render_all(
    svc: LLMService,
    plan: Plan,
    settings: Settings,
    *,
    overrides: Mapping[str, int] | None = None,
    pod_monitor: bool | None = None,
    live_cap: bool = False,
) -> list[dict[str, Any]]:
    """Every child of ``svc``: the server workload (a Deployment, or a LeaderWorkerSet when
    one replica spans nodes: :func:`is_multi_node`), the Service and, when wanted (see
    :func:`wants_pod_monitor`; ``pod_monitor`` is the caller's discovery result), a
    PodMonitor. Pure and deterministic: the same inputs give the same objects.

    The workload kind follows the plan, so a plan that changes its node count switches
    kind: the apply step must then delete the other kind's object (its name differs).

    ``live_cap`` (see :func:`llm_operator.status.live_cap_in_use`): a Deployment gets the
    live admission cap (:func:`with_live_admission`) and its ConfigMap comes last.
    """
    svc = with_gpu_class(svc, settings)
    multi = is_multi_node(plan)
    workload = (
        build_leader_worker_set(svc, plan, settings, overrides)
        if multi
        else build_deployment(svc, plan, settings, overrides)
    )
    live = live_cap and not multi
    if live:
        workload = with_live_admission(workload, svc, plan, settings, overrides)
    children = [workload, build_service(svc, leaders_only=multi)]
    if wants_pod_monitor(settings, pod_monitor):
        children.append(build_pod_monitor(svc, settings, leaders_only=multi))
    pdb = build_pod_disruption_budget(svc)
    if pdb is not None:
        children.append(pdb)
    if live:
        cap, _ = live_admission_cap(svc, plan, overrides)
        children.append(build_admission_config_map(svc, cap))
    return children


# --- live admission cap (issue 12) ----------------------------------------------------
# The server pod runs :mod:`llm_operator.engine` inside vLLM as its ``--scheduler-cls``;
# an init container from the operator image copies it (as the tuning Job copies the
# tuner), and the cap reaches it through a ConfigMap mounted as a volume.

ENGINE_INIT_CONTAINER = "copy-engine"
ENGINE_CODE_VOLUME = "llmop-engine"
ENGINE_CODE_PATH = "/opt/llmop-engine"  # on the vLLM container's PYTHONPATH
ENGINE_SCHEDULER_CLS = "llm_operator.engine.scheduler.AdmissionCapScheduler"

# Copies ``llm_operator/engine/`` and the package's ``__init__.py`` (nothing else of the
# operator) from wherever the operator image installed it. No "$(" (Kubernetes expands it).
ENGINE_COPY_SCRIPT = (
    "import llm_operator, os, shutil; "
    "src = os.path.dirname(llm_operator.__file__); "
    f"dst = os.path.join('{ENGINE_CODE_PATH}', 'llm_operator'); "
    "shutil.copytree(os.path.join(src, 'engine'), os.path.join(dst, 'engine'), "
    "dirs_exist_ok=True, ignore=shutil.ignore_patterns('__pycache__', '*.pyc')); "
    "shutil.copyfile(os.path.join(src, '__init__.py'), os.path.join(dst, '__init__.py')); "
    "print('Copied the admission controller from', src, 'to', dst)"
)


def build_engine_init_container(operator_image: str) -> dict[str, Any]:
    """The init container that copies :mod:`llm_operator.engine` into the server pod."""
    return {
        "name": ENGINE_INIT_CONTAINER,
        "image": operator_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", ENGINE_COPY_SCRIPT],
        "volumeMounts": [{"name": ENGINE_CODE_VOLUME, "mountPath": ENGINE_CODE_PATH}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                      "limits": {"memory": "128Mi"}},
    }


ADMISSION_VOLUME = "llmop-admission"
ADMISSION_PATH = "/etc/llmop/admission"  # the ConfigMap volume (read-only)
ADMISSION_KEY = "maxNumActiveSeqs"  # the ConfigMap key: the cap, one integer
ADMISSION_CONFIG_MAP_SUFFIX = "-admission-cap"
METRICS_DIR_VOLUME = "llmop-metrics"
METRICS_DIR_PATH = "/tmp/llmop-prometheus"  # PROMETHEUS_MULTIPROC_DIR of the server
# The live-mode server container's command: empty the metrics directory, then run vLLM.
# prometheus_client's multiprocess collector serves the last value a dead process wrote
# to a "mostrecent" gauge until the new process sets it, and the emptyDir outlives a
# container restart inside the pod: without this, a restarted idle engine reports the
# crashed one's running and waiting requests (vLLM sets them only at its first step),
# and adaptation would act on them. A new process may also reuse the dead one's PID
# (PID 1 of a fresh PID namespace) and so its files: only emptying before start is safe.
METRICS_RESET_SCRIPT = f"""find "$PROMETHEUS_MULTIPROC_DIR" -mindepth 1 -delete
exec {" ".join(VLLM_COMMAND)} "$@"
"""
METRICS_RESET_NAME = "vllm-server"  # $0 of the script; the container's args follow
# The flags a user's own scheduler would set: live admission then cannot work (the
# operator falls back to rollouts; see status.live_cap_blocker).
LIVE_CAP_FLAGS = ("--scheduler-cls", "--max-num-active-seqs")


def admission_config_map_name(svc: LLMService) -> str:
    """The ConfigMap that carries the admission cap to the server pods."""
    return f"{svc.metadata.name}{ADMISSION_CONFIG_MAP_SUFFIX}"


def live_admission_cap(
    svc: LLMService, plan: Plan, overrides: Mapping[str, int] | None = None
) -> tuple[int, int]:
    """``(cap, capacity)`` in live mode: the runner capacity is the plan's memory bound,
    the cap what tuning or adaptation set (else the plan's value), at most the capacity."""
    capacity = plan.max_num_seqs
    cap, _ = effective_engine_value(svc.spec.engine, "maxNumSeqs", plan.max_num_seqs, overrides)
    return min(int(cap or capacity), capacity), capacity


def build_admission_config_map(svc: LLMService, cap: int) -> dict[str, Any]:
    """The per-service ConfigMap whose one key the engine reads as its admission cap.

    Mounted as a volume (not through env or subPath, which the kubelet never refreshes):
    a change reaches the running pods when the kubelet next syncs them, typically within
    60-90 s, without a restart. Only the operator writes it; clients of the model's API
    cannot reach it.
    """
    meta = _metadata(svc, COMPONENT_SERVER)
    meta["name"] = admission_config_map_name(svc)
    return _with_spec_hash({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {ADMISSION_KEY: str(cap)},
    })


def with_live_admission(
    deployment: Mapping[str, Any], svc: LLMService, plan: Plan, settings: Settings,
    overrides: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """``deployment`` (from :func:`build_deployment`) with the live admission cap wired in:
    ``--max-num-seqs`` = the runner capacity, ``--scheduler-cls`` = the engine module's
    scheduler, the init container that copies it, the cap's ConfigMap volume, and
    ``PROMETHEUS_MULTIPROC_DIR`` on an emptyDir so that the engine-core process's gauges
    (the cap in force) reach the API server's ``/metrics``, emptied by the container's
    command before vLLM starts (:data:`METRICS_RESET_SCRIPT`). The cap itself is not in the
    pod template: changing it changes the ConfigMap only, so nothing rolls."""
    out = copy.deepcopy(dict(deployment))
    _, capacity = live_admission_cap(svc, plan, overrides)
    pod = out["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["command"] = ["/bin/sh", "-c", METRICS_RESET_SCRIPT, METRICS_RESET_NAME]
    args = container["args"]
    at = args.index("--max-num-seqs")
    args[at + 1] = str(capacity)
    args[at + 2:at + 2] = ["--scheduler-cls", ENGINE_SCHEDULER_CLS]
    container.setdefault("env", []).extend([
        {"name": "PYTHONPATH", "value": ENGINE_CODE_PATH},
        {"name": "LLMOP_ADMISSION_CAP_FILE", "value": f"{ADMISSION_PATH}/{ADMISSION_KEY}"},
        {"name": "PROMETHEUS_MULTIPROC_DIR", "value": METRICS_DIR_PATH},
    ])
    container.setdefault("volumeMounts", []).extend([
        {"name": ENGINE_CODE_VOLUME, "mountPath": ENGINE_CODE_PATH, "readOnly": True},
        {"name": ADMISSION_VOLUME, "mountPath": ADMISSION_PATH, "readOnly": True},
        {"name": METRICS_DIR_VOLUME, "mountPath": METRICS_DIR_PATH},
    ])
    pod.setdefault("volumes", []).extend([
        {"name": ENGINE_CODE_VOLUME, "emptyDir": {"sizeLimit": "16Mi"}},
        {"name": ADMISSION_VOLUME,
         "configMap": {"name": admission_config_map_name(svc), "optional": False}},
        {"name": METRICS_DIR_VOLUME, "emptyDir": {"sizeLimit": "256Mi"}},
    ])
    pod["initContainers"] = [*pod.get("initContainers", []),
                             build_engine_init_container(settings.operator_image)]
    return _with_spec_hash(out)


def build_drain_lifecycle() -> dict[str, Any]:
    """The server container's preStop: wait :data:`PRESTOP_SLEEP_SECONDS` before the
    kubelet sends SIGTERM, so new requests stop arriving before vLLM starts draining
    (``--shutdown-timeout``). ``exec sleep``, not the ``sleep`` action, which needs
    Kubernetes 1.30."""
    return {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SLEEP_SECONDS)]}}}

"""The facts Job (pure builder): ``llm-operator facts`` in the operator's own image, in the
service's namespace, reading the model's ``config.json`` (with its safetensors index and
modelopt's ``hf_quant_config.json``) from the Hub or from the ``spec.model.volume`` claim
mounted read-only, and handing the files back as its termination message
(:mod:`.message`), as the tuning Job hands back its result.

Why a Job and not the operator itself: a gated model needs the user's token, which lives
in a Secret of the user's namespace (``spec.model.tokenSecretRef``). The kubelet puts it
into this pod's environment, as it does for the pods that download the weights; the
operator never reads a Secret, and its RBAC has no Secret verb. The Job needs no GPU, a
tenth of a core and a little memory, and ends within :data:`ACTIVE_DEADLINE_SECONDS`.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from ..api.constants import TERMINATION_LOG
from ..api.errors import SpecErrors
from ..api.models import LLMService, LLMServiceSpec
from ..rendering.identity import labels_for
from ..rendering.pod import (
    MODEL_MOUNT_PATH,
    RESTRICTED_CONTAINER_SECURITY_CONTEXT,
    SECCOMP_RUNTIME_DEFAULT,
    VOLUME_MODEL,
    pod_identity_fields,
    pod_spec_errors,
)
from ..settings import Settings
from ..tuning.job import job_metadata, template_metadata

COMPONENT_FACTS = "model-facts"
ANNOTATION_FACTS_KEY = "llmops.dev/model-facts-key"
FACTS_CONTAINER = "facts"
SCRATCH_VOLUME = "scratch"
SCRATCH_PATH = "/tmp"  # HF_HOME and huggingface_hub's downloads: three small files
JOB_NAME_MAX = 52  # pods are "<job>-<5 chars>" and carry job-name labels (<= 63)
# Three small files from the Hub (or a folder) and Python's start: seconds. The deadline
# leaves room for an image pull on a fresh node and a slow mirror.
ACTIVE_DEADLINE_SECONDS = 300
# A Job that read the facts is deleted by the operator at once; one that failed stays this
# long (its pod's log and message are there to read), and its deletion by the TTL
# controller makes the operator read again (facts.control.RETRY_SECONDS, the same).
TTL_SECONDS_AFTER_FINISHED = 300
RESOURCES: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"},
                             "limits": {"memory": "512Mi"}}


def facts_key(spec: LLMServiceSpec) -> str:
    """What the facts are read from, which the operator caches them by: the repository and
    revision (``hub:<repo>@<revision>``, ``main`` when unset), or the claim and folder of a
    model on a volume (``volume:<claim>/<subPath>``)."""
    if spec.model.volume is not None:
        return f"volume:{spec.model.volume.claim_name}/{spec.model.volume.sub_path}"
    return f"hub:{spec.model.name}@{spec.model.revision or 'main'}"


def facts_job_name(svc: LLMService) -> str:
    """``<service>-facts-<hash of the key>``, the service part shortened to fit: one Job
    per service and source, found again by a restarted operator."""
    digest = hashlib.sha256(facts_key(svc.spec).encode()).hexdigest()[:8]
    suffix = f"-facts-{digest}"
    return svc.metadata.name[: JOB_NAME_MAX - len(suffix)].rstrip("-.") + suffix


def facts_args(spec: LLMServiceSpec) -> list[str]:
    """The arguments of ``python3 -m llm_operator.cli``: ``facts`` for the spec's model."""
    args = ["facts", "--repo", spec.model.name,
            "--source", MODEL_MOUNT_PATH if spec.model.volume is not None else "hub",
            "--termination-log", TERMINATION_LOG]
    if spec.model.revision and spec.model.volume is None:
        args += ["--revision", spec.model.revision]
    return args


def facts_env(spec: LLMServiceSpec, settings: Settings) -> list[dict[str, Any]]:
    """The facts container's environment: the Hub mirror the operator is configured with
    (``LLMOP_HF_ENDPOINT``), a writable Hugging Face home, the token from
    ``spec.model.tokenSecretRef`` (``optional``: a Secret that is missing gives the Hub's
    401, which the condition names with the Secret, instead of a pod that never starts),
    then ``spec.pod.env`` as the server pods get it (proxies, a mirror of the user's own).
    Raises :class:`~llm_operator.api.errors.SpecErrors` for a ``spec.pod`` that collides with
    what the operator sets, as the server pods' renderer does."""
    errors = pod_spec_errors(spec)
    if errors:
        raise SpecErrors(errors)
    env: list[dict[str, Any]] = [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "HF_HOME", "value": f"{SCRATCH_PATH}/hf"},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
    ]
    if settings.hf_endpoint:
        env.append({"name": "HF_ENDPOINT", "value": settings.hf_endpoint})
    ref = spec.model.token_secret_ref
    if ref is not None and spec.model.volume is None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": ref.name, "key": ref.key, "optional": True}}})
    # Each name once (a name given twice breaks server-side apply): the user's value wins
    # (their own mirror in HF_ENDPOINT), but for HF_HOME, which in spec.pod.env is the vLLM
    # pods' cache: here the scratch folder is the only place this pod may write.
    user = [var.rendered() for var in spec.pod.env if var.name != "HF_HOME"]
    given = {e["name"] for e in user}
    return [e for e in env if e["name"] not in given] + user


def build_facts_job(svc: LLMService, settings: Settings) -> dict[str, Any]:
    """The ``batch/v1`` Job that reads ``svc``'s model facts (pure: no API calls, no clock).

    Labels ``llmops.dev/llmservice`` and ``llmops.dev/component=model-facts``; annotation
    ``llmops.dev/model-facts-key`` (:func:`facts_key`); owned by the LLMService; one pod,
    no retry (``backoffLimit: 0``: the operator decides when to try again), no GPU, no
    service-account token; a model on a volume is mounted read-only."""
    spec = svc.spec
    labels = labels_for(svc, COMPONENT_FACTS)
    annotations = {ANNOTATION_FACTS_KEY: facts_key(spec)}
    mounts: list[dict[str, Any]] = [{"name": SCRATCH_VOLUME, "mountPath": SCRATCH_PATH}]
    volumes: list[dict[str, Any]] = [{"name": SCRATCH_VOLUME,
                                      "emptyDir": {"sizeLimit": "64Mi"}}]
    if spec.model.volume is not None:
        mount: dict[str, Any] = {"name": VOLUME_MODEL, "mountPath": MODEL_MOUNT_PATH,
                                 "readOnly": True}
        if spec.model.volume.sub_path:
            mount["subPath"] = spec.model.volume.sub_path
        mounts.append(mount)
        volumes.append({"name": VOLUME_MODEL, "persistentVolumeClaim": {
            "claimName": spec.model.volume.claim_name, "readOnly": True}})
    container = {
        "name": FACTS_CONTAINER,
        "image": settings.operator_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-m", "llm_operator.cli"],
        "args": facts_args(spec),
        "env": facts_env(spec, settings),
        "resources": copy.deepcopy(RESOURCES),
        "volumeMounts": mounts,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": copy.deepcopy(RESTRICTED_CONTAINER_SECURITY_CONTEXT),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": job_metadata(svc, facts_job_name(svc), labels, annotations),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": ACTIVE_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
            "template": {
                "metadata": template_metadata(svc, labels, annotations),
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": volumes,
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    # The operator's image runs as its own user (65532), never root:
                    # `restricted`, whatever spec.pod.runAsUser says.
                    "securityContext": {**copy.deepcopy(SECCOMP_RUNTIME_DEFAULT),
                                        "runAsNonRoot": True},
                    **pod_identity_fields(spec),
                },
            },
        },
    }

"""The tuning Job (pure builder): the tuner on the same GPUs as one replica, in the vLLM
image, with this project's tuner code copied in by an init container.

Why this shape: the tuner must start vLLM servers with candidate settings on the very
GPUs a replica gets, so it runs in the vLLM image; it needs no custom image because an
init container from the operator's image copies the tuner (``llm_operator.inpod.tuner``, which
imports nothing of the operator) into a shared ``emptyDir`` that the tuner container puts
on ``PYTHONPATH`` (the tuner imports only the standard library and what vLLM installs).
Where the image may run it (as for the server pods), the tuner sweeps max-num-seqs on one
server per max-num-batched-tokens through the server pod's admission controller
(``llm_operator.inpod.engine``, copied alongside; see :func:`sweeps_caps_live`).
The result comes back as the container's termination message (compact JSON, read from
the pod status by the operator, no extra RBAC); the full trial table is the pod's log.

Operator side only (it reuses the renderer's pod pieces, so the Job serves the model
exactly as the Deployment would).
"""

from __future__ import annotations

import shlex
from typing import Any

from ..api.constants import (
    ANNOTATION_FINGERPRINT,
    ANNOTATION_TUNING_ON_SPARE,
    DEFAULT_IMAGE,
    TERMINATION_LOG,
)
from ..api.errors import SpecError
from ..api.models import LLMService
from ..health.status import live_cap_version
from ..knowledge.catalog import ModelFacts
from ..knowledge.extra_args import flag_set
from ..knowledge.vllm_version import LiveCapSupport
from ..planning import Plan
from ..rendering.admission import LIVE_CAP_FLAGS
from ..rendering.deployment import PROGRESS_MARGIN_SECONDS
from ..rendering.download import build_download_container, download_budget_seconds
from ..rendering.identity import COMPONENT_TUNING, labels_for, owner_reference
from ..rendering.leaderworkerset import is_multi_node
from ..rendering.placement import scheduling_fields, with_gpu_class
from ..rendering.pod import (
    build_env,
    build_resources,
    build_volume_mounts,
    build_volumes,
    container_security_context,
    image_for,
    pod_identity_fields,
    pod_security_context,
    pod_template_metadata,
    startup_budget_seconds,
)
from ..rendering.vllm_args import build_vllm_flags, model_source
from ..settings import Settings
from .placement import job_priority_class, runs_on_spare

CODE_VOLUME = "tuner-code"
CODE_PATH = "/opt/llmop"  # PYTHONPATH of the tuner container; holds llm_operator/inpod/
WORK_DIR = "/tmp/llmop-tuning"  # server logs, benchmark log, full result JSON
TUNER_CONTAINER = "tuner"
INIT_CONTAINER = "copy-tuner"
JOB_NAME_MAX = 52  # pods are "<job>-<5 chars>" and carry job-name labels (<= 63)
# SIGTERM to the kubelet's SIGKILL: the tuner stops its server (vLLM's shutdown takes a
# few seconds, the tuner waits up to 30 s) and writes the partial result in this time.
TUNER_GRACE_SECONDS = 90

# Copies the code that runs in pods, ``llm_operator/inpod/`` (the tuner and the server pod's
# admission controller, ``inpod/engine/``; both import only the standard library and vLLM,
# nothing of the operator) with the package's empty ``__init__.py``, and vLLM's start-up
# rules the tuner checks its candidates with (``knowledge/engine_rules.py``,
# ``knowledge/serve_args.py`` and the option table ``knowledge/data/vllm_serve_flags.json``,
# with ``knowledge/__init__.py``, which imports nothing) from wherever the operator image
# installed them (no assumption about its site-packages path). The engine is what the
# tuner's servers run as ``--scheduler-cls`` when it sweeps caps live
# (``--live-cap-engine``). No "$(" anywhere: Kubernetes would expand it in command/args.
COPY_SCRIPT = (
    "import llm_operator, os, shutil; "
    "src = os.path.dirname(llm_operator.__file__); "
    f"dst = os.path.join('{CODE_PATH}', 'llm_operator'); "
    "[shutil.copytree(os.path.join(src, d), os.path.join(dst, d), "
    "dirs_exist_ok=True, ignore=shutil.ignore_patterns('__pycache__', '*.pyc')) "
    "for d in ('inpod',)]; "
    "os.makedirs(os.path.join(dst, 'knowledge', 'data'), exist_ok=True); "
    "[shutil.copyfile(os.path.join(src, f), os.path.join(dst, f)) "
    "for f in ('__init__.py', 'knowledge/__init__.py', 'knowledge/engine_rules.py', "
    "'knowledge/serve_args.py', 'knowledge/data/vllm_serve_flags.json')]; "
    "print('Copied the tuner and the engine from', src, 'to', dst)"
)

# Flags the tuner sets itself for every server it starts (dropped from the Deployment's).
_OWN_FLAGS = {"--served-model-name", "--host", "--port"}
_SEARCHED = {"--max-num-seqs": "max_num_seqs",
             "--max-num-batched-tokens": "max_num_batched_tokens"}


def tuning_job_name(svc: LLMService, fingerprint: str) -> str:
    """``<service>-tune-<fingerprint[:8]>``, the service part shortened to fit."""
    suffix = f"-tune-{fingerprint[:8]}"
    return svc.metadata.name[: JOB_NAME_MAX - len(suffix)].rstrip("-.") + suffix


def fixed_server_args(svc: LLMService, plan: Plan) -> list[str]:
    """The vLLM flags every candidate server gets: the Deployment's arguments without
    the ones the tuner sets itself (model, name, host, port) and without the searched
    settings the user left to ``auto`` (a pinned one stays, so it is never varied)."""
    args = build_vllm_flags(svc, plan)
    out: list[str] = []
    skip_value = False
    for i, a in enumerate(args):
        if skip_value:
            skip_value = False
            continue
        flag = a.split("=", 1)[0]
        takes_value = "=" not in a and i + 1 < len(args) and not args[i + 1].startswith("--")
        if flag in _OWN_FLAGS:
            skip_value = takes_value
            continue
        if flag in _SEARCHED and not isinstance(
            getattr(svc.spec.engine, _SEARCHED[flag]), int
        ):
            skip_value = takes_value
            continue
        out.append(a)
    return out


def start_hint(svc: LLMService, plan: Plan, facts: ModelFacts | None = None) -> int:
    """Where the search starts: the SLO sizing's max-num-seqs (``Plan.start_max_num_seqs``,
    what the pods start with too), else the performance model's knee under the SLO for this
    plan (``perfmodel.suggest_for``), at most the planner's memory limit; ``facts``: the
    model's own config.json, for a model planned from it. The planner's limit itself
    when the model cannot say (a GPU or model it has no facts for)."""
    from ..planning.perfmodel import suggest_for  # operator side only: the pod never renders Jobs

    if plan.start_max_num_seqs:  # the SLO sizing's pair (llm_operator.planning.sizing): one number
        return max(1, min(plan.max_num_seqs, plan.start_max_num_seqs))
    try:
        return max(1, min(plan.max_num_seqs,
                          suggest_for(svc.spec, plan, facts=facts).max_num_seqs))
    except (SpecError, ValueError, ZeroDivisionError):
        return plan.max_num_seqs


def sweeps_caps_live(svc: LLMService, default_image: str = DEFAULT_IMAGE) -> bool:
    """Whether the tuner sweeps max-num-seqs on one server per max-num-batched-tokens
    through the live admission cap (``--live-cap-engine``) instead of one server start per
    value: max-num-seqs is searched (not pinned), ``spec.engine.extraArgs`` sets no
    scheduler of the user's own, and the image may run the operator's scheduler class by
    the rule the server pods follow (:func:`~llm_operator.health.status.live_cap_version`:
    ``spec.image``, else ``default_image``; only a tag naming a vLLM the live cap does not
    work on is refused, an unknown one is tried). The tuner checks the hook at run time
    (``llmop_admission_live``; a start the scheduler class stops) and falls back to one
    start per value, saying why in the result's notes. Not
    :func:`~llm_operator.health.status.live_cap_blocker` as a whole: its other reasons
    (``spec.adaptation.liveCap: false``, a serving pod's crash on the scheduler) are about
    the server pods, not about what the Job's own servers can run (and a replica over
    several nodes gets no Job)."""
    spec = svc.spec
    if isinstance(spec.engine.max_num_seqs, int):
        return False
    if live_cap_version(spec, default_image).support is LiveCapSupport.UNSUPPORTED:
        return False
    return flag_set(spec.engine.extra_args, LIVE_CAP_FLAGS) is None


def tuner_args(svc: LLMService, plan: Plan, fingerprint: str,
               facts: ModelFacts | None = None, default_image: str = DEFAULT_IMAGE
               ) -> list[str]:
    """The arguments of ``python3 -m llm_operator.inpod.tuner`` for ``svc`` (``facts``:
    the model's config.json, where the plan was made from it; ``default_image``: the
    operator's, for a service without ``spec.image``)."""
    spec = svc.spec
    wl = spec.workload
    model, _ = model_source(spec)
    args = [
        "--model", model,
        "--served-model-name", spec.model.name,
        "--input-tokens", str(wl.input_tokens),
        *(["--shared-prefix-tokens", str(wl.shared_prefix_tokens)]
          if wl.shared_prefix_tokens else []),
        "--output-tokens", str(wl.output_tokens),
        "--concurrency", str(wl.concurrency),
        "--slo-ttft-ms", f"{wl.slo.ttft_p95_ms:g}",
        "--slo-itl-ms", f"{wl.slo.itl_p95_ms:g}",
        "--max-trials", str(spec.tuning.max_trials),
        "--min-gain", f"{spec.tuning.min_gain_percent / 100:g}",
        "--max-seconds", str(spec.tuning.max_duration_minutes * 60),
        # One server start may take as long as the Deployment's startup probe allows
        # for this model's weights (a fixed 900 s cut 70B+ loads short).
        "--start-timeout", str(startup_budget_seconds(plan)),
        # Stop even mid-trial, and report the best so far, before the Job's deadline.
        "--deadline-seconds", str(tuner_deadline_seconds(svc, plan)),
        # "=": the value starts with "--", which argparse would take for an option.
        f"--server-args={shlex.join(fixed_server_args(svc, plan))}",
    ]  # fmt: skip
    if not isinstance(spec.engine.max_num_seqs, int):
        args += ["--hint-max-num-seqs", str(start_hint(svc, plan, facts))]
    if sweeps_caps_live(svc, default_image):
        # The init container copied llm_operator/inpod/engine next to the tuner.
        args += ["--live-cap-engine", CODE_PATH]
    args += [
        "--fingerprint", fingerprint,
        "--output", f"{WORK_DIR}/result.json",
        "--log-dir", WORK_DIR,
        "--progress", "log",
    ]  # fmt: skip
    return args


def tuner_deadline_seconds(svc: LLMService, plan: Plan) -> int:
    """The tuner's own hard stop (``--deadline-seconds``): its wall budget (it stops
    starting trials before that) plus one model load; past it, the running trial is cut
    and the best result so far is reported as partial."""
    return svc.spec.tuning.max_duration_minutes * 60 + startup_budget_seconds(plan)


def active_deadline_seconds(svc: LLMService, plan: Plan) -> int:
    """The Job's hard deadline: the tuner's own (:func:`tuner_deadline_seconds`) plus the
    model download (the init container's budget), the image-pull margin and the time the
    operator lets the pod wait for GPUs (``spec.tuning.maxPendingMinutes``), so the tuner
    reports before Kubernetes kills the pod (and its termination message with it)."""
    return (tuner_deadline_seconds(svc, plan) + download_budget_seconds(svc.spec, plan)
            + PROGRESS_MARGIN_SECONDS + svc.spec.tuning.max_pending_minutes * 60)


def build_tuning_job(
    svc: LLMService, plan: Plan, settings: Settings, fingerprint: str, *, held: bool = False,
    facts: ModelFacts | None = None,
) -> dict[str, Any]:
    """The ``batch/v1`` Job that tunes ``svc`` (pure: no API calls, no clock).

    Same GPUs as one replica (``plan.gpus_per_replica`` of ``spec.gpus.resourceName``), same
    placement, image, model source, cache, token and pins as the Deployment; labels
    ``llmops.dev/llmservice`` and ``llmops.dev/component=tuning``; annotation
    ``llmops.dev/tuning-fingerprint`` and, on the Job, ``llmops.dev/tuning-on-spare``
    (counted against the tuning GPU budget, :mod:`.budget`); owned by the LLMService. The
    priority follows ``spec.tuning.placement`` (:func:`~.placement.job_priority_class`;
    ``held``: the service's workload waits for this run, so its GPUs are the service's;
    ``facts``: the model's config.json, for a plan made from it, so the tuner's start hint
    is the performance model's, not the memory limit). Raises
    :class:`~llm_operator.api.errors.SpecError` for a plan whose replica spans several nodes
    (one pod cannot start such a server).
    """
    if is_multi_node(plan):
        raise SpecError(
            "spec.tuning.mode",
            f"tuning runs in one pod, but one replica spans {plan.nodes_per_replica} nodes",
            "set spec.tuning.mode to Disabled and pin spec.engine.maxNumSeqs",
        )
    svc = with_gpu_class(svc, settings)  # the resource name the GPU class gives
    spec = svc.spec
    labels = labels_for(svc, COMPONENT_TUNING)
    annotations = {ANNOTATION_FINGERPRINT: fingerprint}
    # Whether the Job counts against the tuning GPU budget (see tuning.budget).
    on_spare = "true" if runs_on_spare(svc, held=held) else "false"
    metadata = job_metadata(svc, tuning_job_name(svc, fingerprint), labels,
                            {**annotations, ANNOTATION_TUNING_ON_SPARE: on_spare})

    env: list[dict[str, Any]] = [
        {"name": "PYTHONPATH", "value": CODE_PATH},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        # Where the tuner writes its compact result: the kubelet's termination message.
        {"name": "LLMOP_TERMINATION_LOG", "value": TERMINATION_LOG},
        # Alone in its pod: no machine-wide lock between vLLM servers needed.
        {"name": "LLMOP_VLLM_LOCK", "value": ""},
        *build_env(spec, downloaded=True),
    ]
    code_mount = {"name": CODE_VOLUME, "mountPath": CODE_PATH}
    init = {
        "name": INIT_CONTAINER,
        "image": settings.operator_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", COPY_SCRIPT],
        "volumeMounts": [code_mount],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                      "limits": {"memory": "128Mi"}},
        "securityContext": container_security_context(spec),
    }
    tuner = {
        "name": TUNER_CONTAINER,
        "image": image_for(svc, settings),
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-m", "llm_operator.inpod.tuner"],
        "args": tuner_args(svc, plan, fingerprint, facts, settings.default_image),
        "env": env,
        "resources": build_resources(spec, plan),
        "volumeMounts": [*build_volume_mounts(spec), {**code_mount, "readOnly": True}],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security_context(spec),
    }
    # The model is downloaded before the tuner starts, as for the server pods.
    download = build_download_container(svc, plan, settings)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "initContainers": [init, *([download] if download is not None else [])],
        "containers": [tuner],
        "volumes": [*build_volumes(spec, plan), {"name": CODE_VOLUME, "emptyDir": {}}],
        # As for the server pods: a Service named "vllm" would inject VLLM_PORT=tcp://...
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": TUNER_GRACE_SECONDS,
        "securityContext": pod_security_context(spec),
        **pod_identity_fields(spec),
        **scheduling_fields(spec, settings),
    }
    priority = job_priority_class(svc, settings, held=held)
    if priority:
        pod_spec["priorityClassName"] = priority
    else:
        pod_spec.pop("priorityClassName", None)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": active_deadline_seconds(svc, plan),
            "ttlSecondsAfterFinished": settings.tuning_job_ttl_seconds,
            "template": {
                "metadata": template_metadata(svc, labels, annotations),
                "spec": pod_spec,
            },
        },
    }


def job_metadata(svc: LLMService, name: str, labels: dict[str, str],
                 annotations: dict[str, str]) -> dict[str, Any]:
    """A Job's metadata (the tuning Job's, the facts Job's): in the service's namespace,
    the operator's ``labels`` plus ``spec.pod.labels`` (a queue label, Kueue's, is read
    from the Job), ``annotations``, owned by the LLMService."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": svc.metadata.namespace,
        "labels": {**svc.spec.pod.labels, **labels},
        "annotations": annotations,
    }
    owner = owner_reference(svc)
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return metadata


def template_metadata(svc: LLMService, labels: dict[str, str],
                      annotations: dict[str, str]) -> dict[str, Any]:
    """A Job pod's metadata: the operator's labels and annotations plus
    ``spec.pod.labels`` and ``spec.pod.annotations`` (the renderer refuses colliding keys)."""
    meta = pod_template_metadata(svc, labels)
    meta["annotations"] = {**meta.get("annotations", {}), **annotations}
    return meta

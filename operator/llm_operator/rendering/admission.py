"""The live admission cap (pure): the ConfigMap that carries it, and the Deployment
wired to read it (issue 12).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..api.constants import TERMINATION_LOG
from ..api.models import LLMService, LLMServiceSpec
from ..inpod.engine.cap import FAILURE_PREFIX, TERMINATION_LOG_ENV
from ..knowledge.extra_args import flag_set
from ..knowledge.vllm_version import active_seqs_flag
from ..planning import Plan, effective_engine_value, runner_capacity
from ..settings import Settings
from .identity import COMPONENT_SERVER, child_metadata, with_spec_hash
from .pod import container_security_context
from .vllm_args import VLLM_COMMAND

# --- live admission cap (issue 12) ----------------------------------------------------
# The server pod runs :mod:`llm_operator.inpod.engine` inside vLLM as its
# ``--scheduler-cls``; an init container from the operator image copies it (as the tuning
# Job copies the tuner), and the cap reaches it through a ConfigMap mounted as a volume.

ENGINE_INIT_CONTAINER = "copy-engine"
ENGINE_CODE_VOLUME = "llmop-engine"
ENGINE_CODE_PATH = "/opt/llmop-engine"  # on the vLLM container's PYTHONPATH
ENGINE_MODULE = "llm_operator.inpod.engine.scheduler"
ENGINE_SCHEDULER_CLS = f"{ENGINE_MODULE}.AdmissionCapScheduler"

# Copies ``llm_operator/inpod/engine/`` and the two empty ``__init__.py`` above it (nothing
# else of the operator) from wherever the operator image installed it. No "$(" (Kubernetes
# expands it).
ENGINE_COPY_SCRIPT = (
    "import llm_operator, os, shutil; "
    "src = os.path.dirname(llm_operator.__file__); "
    f"dst = os.path.join('{ENGINE_CODE_PATH}', 'llm_operator'); "
    "shutil.copytree(os.path.join(src, 'inpod', 'engine'), "
    "os.path.join(dst, 'inpod', 'engine'), "
    "dirs_exist_ok=True, ignore=shutil.ignore_patterns('__pycache__', '*.pyc')); "
    "[shutil.copyfile(os.path.join(src, f), os.path.join(dst, f)) "
    "for f in ('__init__.py', os.path.join('inpod', '__init__.py'))]; "
    "print('Copied the admission controller from', src, 'to', dst)"
)


def build_engine_init_container(operator_image: str,
                                security_context: Mapping[str, Any]) -> dict[str, Any]:
    """The init container that copies :mod:`llm_operator.inpod.engine` into the server pod
    (as restricted as the pod's other containers: ``security_context``)."""
    return {
        "name": ENGINE_INIT_CONTAINER,
        "image": operator_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-c", ENGINE_COPY_SCRIPT],
        "volumeMounts": [{"name": ENGINE_CODE_VOLUME, "mountPath": ENGINE_CODE_PATH}],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                      "limits": {"memory": "128Mi"}},
        "securityContext": dict(security_context),
    }


ADMISSION_VOLUME = "llmop-admission"
ADMISSION_PATH = "/etc/llmop/admission"  # the ConfigMap volume (read-only)
ADMISSION_KEY = "maxNumActiveSeqs"  # the ConfigMap key: the cap, one integer
ADMISSION_CONFIG_MAP_SUFFIX = "-admission-cap"
METRICS_DIR_VOLUME = "llmop-metrics"
METRICS_DIR_PATH = "/tmp/llmop-prometheus"  # PROMETHEUS_MULTIPROC_DIR of the server
# The live-mode server container's command: empty the metrics directory, check that the
# admission scheduler's code is there (else say so in the termination message, see
# FAILURE_PREFIX, and exit: vLLM's own report of a scheduler class that does not import
# ends in "Engine core initialization failed. See root cause above", and the kubelet keeps
# only the last 2 KiB of the log, without the root cause), then run vLLM. Checking costs
# one Python start (about 50 ms), not an import of vLLM.
# prometheus_client's multiprocess collector serves the last value a dead process wrote
# to a "mostrecent" gauge until the new process sets it, and the emptyDir outlives a
# container restart inside the pod: without this, a restarted idle engine reports the
# crashed one's running and waiting requests (vLLM sets them only at its first step),
# and adaptation would act on them. A new process may also reuse the dead one's PID
# (PID 1 of a fresh PID namespace) and so its files: only emptying before start is safe.
_FIND_ENGINE = f'import importlib.util as u, sys; sys.exit(u.find_spec("{ENGINE_MODULE}") is None)'
_NO_ENGINE = (f"{FAILURE_PREFIX} the admission scheduler {ENGINE_MODULE} is not on PYTHONPATH "
              f"($PYTHONPATH): the init container {ENGINE_INIT_CONTAINER} did not copy it")
METRICS_RESET_SCRIPT = f"""find "$PROMETHEUS_MULTIPROC_DIR" -mindepth 1 -delete
if ! python3 -c '{_FIND_ENGINE}' 2>/dev/null; then
  echo "{_NO_ENGINE}" | tee "${TERMINATION_LOG_ENV}" >&2
  exit 1
fi
exec {" ".join(VLLM_COMMAND)} "$@"
"""
METRICS_RESET_NAME = "vllm-server"  # $0 of the script; the container's args follow
# The flags a user's own scheduler would set: live admission then cannot work (the
# operator falls back to rollouts; see status.live_cap_blocker).
LIVE_CAP_FLAGS = ("--scheduler-cls", "--max-num-active-seqs")


def uses_active_seqs_flag(spec: LLMServiceSpec, default_image: str, live_cap: bool) -> bool:
    """Whether the server's cap is rendered as ``--max-num-active-seqs`` (vLLM #56758)
    with ``--max-num-seqs`` at the runner's capacity
    (:func:`~llm_operator.planning.engine_flags`), so that a change of the cap by a rollout
    leaves the runner's buffers and CUDA graphs as they are: only where the live cap is
    not in use (``live_cap`` False: it sets the cap itself), the image's tag names a
    vLLM release whose ``vllm serve`` takes the flag
    (``spec.image``, else ``default_image``:
    :func:`llm_operator.knowledge.vllm_version.active_seqs_flag`; an unknown version
    keeps ``--max-num-seqs``) and ``spec.engine.extraArgs`` set neither that flag nor
    ``--scheduler-cls`` (:data:`LIVE_CAP_FLAGS`: the user's own admission, kept as it
    is). A pinned ``spec.engine.maxNumSeqs`` stays ``--max-num-seqs`` (engine_flags)."""
    if live_cap or flag_set(spec.engine.extra_args, LIVE_CAP_FLAGS) is not None:
        return False
    return active_seqs_flag(spec.image or default_image).present


def admission_config_map_name(svc: LLMService) -> str:
    """The ConfigMap that carries the admission cap to the server pods."""
    return f"{svc.metadata.name}{ADMISSION_CONFIG_MAP_SUFFIX}"


def live_admission_cap(
    svc: LLMService, plan: Plan, overrides: Mapping[str, int] | None = None
) -> tuple[int, int]:
    """``(cap, capacity)`` in live mode: the runner capacity (``--max-num-seqs``) is the
    plan's memory bound, at most the batch the pods render (a tuned, adapted or planned
    ``--max-num-batched-tokens``; vLLM refuses to start with fewer batched tokens than
    sequences: :func:`~llm_operator.planning.runner_capacity`); the cap what tuning or
    adaptation set (else the plan's start, ``Plan.start_seqs``), at most the capacity."""
    engine = svc.spec.engine
    seqs, _ = effective_engine_value(engine, "maxNumSeqs", plan.start_seqs, overrides)
    cap = min(int(seqs or plan.max_num_seqs), plan.max_num_seqs)
    batched, source = effective_engine_value(
        engine, "maxNumBatchedTokens", plan.max_num_batched_tokens, overrides)
    if batched is None:  # vLLM's default batch
        return cap, plan.max_num_seqs
    if source != "pinned":  # as engine_flags renders it: raised to the cap, never below
        batched = max(int(batched), cap)
    capacity = runner_capacity(plan, cap, int(batched))
    return min(cap, capacity), capacity


def build_admission_config_map(svc: LLMService, cap: int) -> dict[str, Any]:
    """The per-service ConfigMap whose one key the engine reads as its admission cap.

    Mounted as a volume (not through env or subPath, which the kubelet never refreshes):
    a change reaches the running pods when the kubelet next syncs them, typically within
    60-90 s, without a restart. Only the operator writes it; clients of the model's API
    cannot reach it.
    """
    meta = child_metadata(svc, COMPONENT_SERVER)
    meta["name"] = admission_config_map_name(svc)
    return with_spec_hash({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {ADMISSION_KEY: str(cap)},
    })


def with_live_admission(
    deployment: Mapping[str, Any], svc: LLMService, plan: Plan, settings: Settings,
    overrides: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """``deployment`` (from :func:`~.deployment.build_deployment`) with the live admission
    cap wired in: ``--max-num-seqs`` = the runner capacity, ``--scheduler-cls`` = the engine
    module's scheduler, the init container that copies it, the cap's ConfigMap volume, and
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
        # Where the scheduler says it failed (the kubelet copies the file into the pod).
        {"name": TERMINATION_LOG_ENV,
         "value": container.get("terminationMessagePath") or TERMINATION_LOG},
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
                             build_engine_init_container(
                                 settings.operator_image,
                                 container_security_context(svc.spec))]
    return with_spec_hash(out)

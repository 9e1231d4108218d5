"""Render (pure): an LLMService and its plan become the Kubernetes objects that serve it.

Every builder here is a pure function of its arguments (the parsed service, the plan,
the operator settings, tuned or adapted overrides): no API calls, no clock, no
globals. Labels, annotations and owner references are set inside, so what
``llm-operator render`` prints is exactly what the operator applies.

One module per child, plus the pieces they share:

- :mod:`.deployment`: the vLLM server pods as a Deployment (command ``vllm serve``, set
  explicitly whatever the image's entrypoint; arguments from :mod:`.vllm_args`, the
  model first and positional), when one replica fits one node.
- :mod:`.leaderworkerset`: instead of the Deployment when the plan spreads one replica
  over several nodes (pipeline stages across nodes): a ``leaderworkerset.x-k8s.io/v1``
  LeaderWorkerSet whose group is one replica, on vLLM's mp executor across nodes: a
  leader pod (``vllm serve``, node rank 0, the API) and one worker pod (``vllm serve
  --headless``) per further node.
- :mod:`.service`: ClusterIP on port 8000 named ``http`` (leader pods only for a
  LeaderWorkerSet: workers serve nothing).
- :mod:`.inferencepool`: an ``inference.networking.k8s.io/v1`` InferencePool (Gateway API
  Inference Extension) over the serving pods, when ``spec.routing.inferencePool`` (or the
  operator's default) asks for it.
- :mod:`.podmonitor`: a ``monitoring.coreos.com/v1`` PodMonitor, only when the
  Prometheus Operator is there (see :func:`render_all`).
- :mod:`.poddisruptionbudget`: a ``policy/v1`` PodDisruptionBudget
  (``maxUnavailable: 1``), only for more than one replica.
- :mod:`.admission`: the ConfigMap ``<name>-admission-cap`` carrying the live admission
  cap, and the Deployment wired to read it, when the Deployment runs it.

Shared: :mod:`.identity` (labels, selectors, owner reference, spec hash),
:mod:`.vllm_args` (the ``vllm serve`` command line), :mod:`.server` (the server
container and pod spec, probes, drain, rollout), :mod:`.pod` (pod pieces the tuning Job
reuses: image, environment, volumes, resources, security contexts), :mod:`.placement`
(the GPU class: node selector, tolerations, resource name) and :mod:`.download` (the
model download init container).

Every server drains on a rollout: ``--shutdown-timeout``, a preStop sleep and a grace
period that covers both (see :func:`.server.termination_grace_seconds`).

The tuning Job (:func:`llm_operator.tuning.job.build_tuning_job`) runs the same image on
the same GPUs with the same model source, so it reuses the pod-level builders of
:mod:`.pod`, :mod:`.placement`, :mod:`.download` and :mod:`.vllm_args`, with
``labels_for(svc, COMPONENT_TUNING)``.

Every child carries ``llmops.dev/spec-hash``: a stable hash of the rendered object
itself, so the apply step can compare desired with observed by one annotation and
write nothing when nothing changed.

Importers take :func:`render_all` from here and any other name from its module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api.models import LLMService
from ..planning import Plan
from ..settings import Settings
from .admission import (
    build_admission_config_map,
    live_admission_cap,
    uses_active_seqs_flag,
    with_live_admission,
)
from .deployment import build_deployment
from .inferencepool import build_inference_pool, wants_inference_pool
from .leaderworkerset import build_leader_worker_set, is_multi_node
from .placement import with_gpu_class
from .poddisruptionbudget import build_pod_disruption_budget
from .podmonitor import build_pod_monitor, wants_pod_monitor
from .service import build_service


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
    one replica spans nodes: :func:`is_multi_node`), the Service, an InferencePool when
    asked for (:func:`wants_inference_pool`) and, when wanted (see
    :func:`wants_pod_monitor`; ``pod_monitor`` is the caller's discovery result), a
    PodMonitor. Pure and deterministic: the same inputs give the same objects.

    The workload kind follows the plan, so a plan that changes its node count switches
    kind: the apply step must then delete the other kind's object (its name differs).

    ``live_cap`` (see :func:`llm_operator.health.status.live_cap_in_use`): a Deployment gets the
    live admission cap (:func:`with_live_admission`) and its ConfigMap comes last.
    """
    svc = with_gpu_class(svc, settings)
    multi = is_multi_node(plan)
    live = live_cap and not multi
    # Not live: the cap as --max-num-active-seqs where the image's vLLM takes it.
    active = uses_active_seqs_flag(svc.spec, settings.default_image, live)
    workload = (
        build_leader_worker_set(svc, plan, settings, overrides, active_cap_flag=active)
        if multi
        else build_deployment(svc, plan, settings, overrides, active_cap_flag=active)
    )
    if live:
        workload = with_live_admission(workload, svc, plan, settings, overrides)
    children = [workload, build_service(svc, leaders_only=multi)]
    if wants_inference_pool(svc, settings):
        children.append(build_inference_pool(svc, settings, leaders_only=multi))
    if wants_pod_monitor(settings, pod_monitor):
        children.append(build_pod_monitor(svc, settings, leaders_only=multi))
    pdb = build_pod_disruption_budget(svc)
    if pdb is not None:
        children.append(pdb)
    if live:
        cap, _ = live_admission_cap(svc, plan, overrides)
        children.append(build_admission_config_map(svc, cap))
    return children

"""The server Deployment (pure): the vLLM server pods when one replica fits one node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api.models import LLMService
from ..planning import Plan
from ..settings import Settings
from .download import download_budget_seconds
from .identity import COMPONENT_SERVER, labels_for, selector_labels, with_spec_hash
from .pod import pod_template_metadata, startup_budget_seconds
from .server import build_server_container, rolling_update, server_pod_spec, workload_metadata

# The Deployment reports ProgressDeadlineExceeded if a new pod is not available within
# the download and startup budgets plus this margin (image pull of a ~10 GB vLLM image,
# scheduling).
PROGRESS_MARGIN_SECONDS = 600


def build_deployment(
    svc: LLMService, plan: Plan, settings: Settings, overrides: Mapping[str, int] | None = None,
    *, active_cap_flag: bool = False,
) -> dict[str, Any]:
    """The vLLM server Deployment of ``svc`` (``apps/v1``), with its spec-hash annotation
    (``active_cap_flag``: see :func:`~.admission.uses_active_seqs_flag`)."""
    labels = labels_for(svc, COMPONENT_SERVER)
    pod_spec = server_pod_spec(
        svc, build_server_container(svc, plan, settings, overrides,
                                    active_cap_flag=active_cap_flag), plan, settings)
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": workload_metadata(svc),
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
    return with_spec_hash(deployment)

"""The PodDisruptionBudget of the server pods (pure), for more than one replica.
"""

from __future__ import annotations

from typing import Any

from ..api.models import LLMService
from .identity import COMPONENT_SERVER, child_metadata, selector_labels, with_spec_hash


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
        "metadata": child_metadata(svc, COMPONENT_SERVER),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(svc)},
        },
    }
    return with_spec_hash(pdb)

"""Identity of every child (pure): labels, selectors, owner reference, spec hash.

Every child carries ``llmops.dev/spec-hash``: a stable hash of the rendered object
itself, so the apply step can compare desired with observed by one annotation and
write nothing when nothing changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..api.constants import (
    ANNOTATION_SPEC_HASH,
    API_VERSION,
    APP_NAME,
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
)
from ..api.models import LLMService

COMPONENT_SERVER = "server"
COMPONENT_TUNING = "tuning"

# Our own role label (the Service and the PodMonitor select the leader by it). LWS itself
# labels every pod ``leaderworkerset.sigs.k8s.io/worker-index`` ("0" on the leader), but
# only at admission, so it is not on the templates we render and check.
LABEL_ROLE = f"{GROUP}/role"
ROLE_LEADER = "leader"
ROLE_WORKER = "worker"


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


def child_metadata(svc: LLMService, component: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": svc.metadata.name,
        "namespace": svc.metadata.namespace,
        "labels": labels_for(svc, component),
    }
    owner = owner_reference(svc)
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


def with_spec_hash(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"].setdefault("annotations", {})[ANNOTATION_SPEC_HASH] = spec_hash(obj)
    return obj



def serving_selector(svc: LLMService, leaders_only: bool = False) -> dict[str, str]:
    """The labels of the pods that serve HTTP on port 8000: every server pod of a
    Deployment; only the leaders of a LeaderWorkerSet (``leaders_only``)."""
    selector = selector_labels(svc)
    if leaders_only:
        selector[LABEL_ROLE] = ROLE_LEADER
    return selector

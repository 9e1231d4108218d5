"""The ClusterIP Service in front of the server pods (pure).
"""

from __future__ import annotations

from typing import Any

from ..api.constants import VLLM_PORT
from ..api.models import LLMService
from .identity import COMPONENT_SERVER, child_metadata, serving_selector, with_spec_hash
from .pod import PORT_NAME


def build_service(svc: LLMService, *, leaders_only: bool = False) -> dict[str, Any]:
    """The ClusterIP Service in front of the server pods: port 8000 named ``http``.
    ``leaders_only`` for a LeaderWorkerSet: only its leaders serve (see
    :func:`~.identity.serving_selector`)."""
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(svc, COMPONENT_SERVER),
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
    return with_spec_hash(service)

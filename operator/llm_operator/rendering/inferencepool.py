"""The InferencePool (pure): the server pods as a routing target of an Inference Gateway.

``inference.networking.k8s.io/v1`` InferencePool of the Gateway API Inference Extension
(kubernetes-sigs/gateway-api-inference-extension; fields as its v1.6.2 release's
``api/v1/inferencepool_types.go``): the pods it selects, the port they serve on, and the
endpoint picker (EPP) the gateway asks which pod takes each request. Rendered when
``spec.routing.inferencePool.enabled`` says so, or the operator's default
(``LLMOP_INFERENCE_POOL``) where the spec leaves it unset.

The v1 pool has no field for the model: a gateway routes a model to a pool by an
HTTPRoute (the extension's body-based router puts the request's ``model`` in the header
``X-Gateway-Model-Name``). The name the server answers to (``--served-model-name``,
``spec.model.name``) is in the annotation :data:`ANNOTATION_SERVED_MODEL`, for the route.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api.constants import GROUP, VLLM_PORT
from ..api.models import EndpointPickerRef, LLMService
from ..settings import Settings
from .identity import COMPONENT_SERVER, child_metadata, serving_selector, with_spec_hash

INFERENCE_POOL_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_API_VERSION = f"{INFERENCE_POOL_GROUP}/v1"
INFERENCE_POOL_KIND = "InferencePool"
ANNOTATION_SERVED_MODEL = f"{GROUP}/served-model-name"


def wants_inference_pool(svc: LLMService, settings: Settings) -> bool:
    """``spec.routing.inferencePool.enabled``, or the operator's default where unset."""
    enabled = svc.spec.routing.inference_pool.enabled
    return settings.inference_pool if enabled is None else enabled


def endpoint_picker(svc: LLMService, settings: Settings) -> EndpointPickerRef | None:
    """The spec's ``endpointPickerRef``, else the operator's default, else None."""
    return svc.spec.routing.inference_pool.endpoint_picker_ref or settings.endpoint_picker_ref


def build_inference_pool(
    svc: LLMService, settings: Settings, *, leaders_only: bool = False
) -> dict[str, Any]:
    """An InferencePool named as the service, owned by it: the serving pods' labels (only
    the leaders of a LeaderWorkerSet, ``leaders_only``: its workers serve no HTTP), target
    port 8000 and, when one is given, the endpoint picker exactly as given (unset fields
    are the CRD's defaults: kind Service, group "", failureMode FailClose)."""
    metadata = child_metadata(svc, COMPONENT_SERVER)
    metadata["annotations"] = {ANNOTATION_SERVED_MODEL: svc.spec.model.name}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": serving_selector(svc, leaders_only)},
        "targetPorts": [{"number": VLLM_PORT}],
    }
    picker = endpoint_picker(svc, settings)
    if picker is not None:
        spec["endpointPickerRef"] = picker.model_dump(by_alias=True, exclude_none=True,
                                                      mode="json")
    pool: dict[str, Any] = {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": INFERENCE_POOL_KIND,
        "metadata": metadata,
        "spec": spec,
    }
    return with_spec_hash(pool)


def describe_pool(pool: Mapping[str, Any]) -> str:
    """A rendered InferencePool in words (for the InferencePoolReady condition): the pods
    it selects, the port, the endpoint picker, the model name a route matches."""
    spec = pool["spec"]
    labels = ",".join(f"{k}={v}" for k, v in spec["selector"]["matchLabels"].items())
    ports = ",".join(str(p["number"]) for p in spec["targetPorts"])
    picker = spec.get("endpointPickerRef")
    if picker is None:
        said = ("no endpoint picker (none in the spec nor the operator's default: the "
                "gateway picks the pod itself, where its implementation allows that)")
    else:
        group = f".{picker['group']}" if picker.get("group") else ""
        port = f":{picker['port']['number']}" if picker.get("port") else ""
        said = (f"endpoint picker {picker.get('kind', 'Service')}{group} {picker['name']}"
                f"{port} ({picker.get('failureMode', 'FailClose')})")
    model = (pool["metadata"].get("annotations") or {}).get(ANNOTATION_SERVED_MODEL)
    return (f"pods {labels}, port {ports}, {said}; the server answers to model {model!r} "
            "(match it on the header X-Gateway-Model-Name)")

"""``spec.routing``: the InferencePool (Gateway API Inference Extension) and its
endpoint picker."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from .base import FieldProblem, _Model
from .formats import GROUP_PATTERN, KIND_PATTERN


# The Gateway API Inference Extension's EndpointPickerRef (inference.networking.k8s.io/v1,
# v1.6.2's api/v1/inferencepool_types.go): the same fields, patterns and bounds, so that
# what parses here the extension's CRD accepts.
class PortNumber(_Model):
    number: int = Field(ge=1, le=65535)


class EndpointPickerFailureMode(StrEnum):
    FAIL_OPEN = "FailOpen"
    FAIL_CLOSE = "FailClose"


class EndpointPickerRef(_Model):
    """The endpoint picker (EPP) an InferencePool calls out to, as the extension's
    ``spec.endpointPickerRef``. Unset fields are left to the extension's CRD defaults
    (group "", kind Service, failureMode FailClose); the operator writes only what is
    given."""

    group: str | None = Field(default=None, max_length=253, pattern=GROUP_PATTERN)
    kind: str | None = Field(default=None, min_length=1, max_length=63, pattern=KIND_PATTERN)
    name: str = Field(min_length=1, max_length=253)
    port: PortNumber | None = None
    failure_mode: EndpointPickerFailureMode | None = None

    @model_validator(mode="after")
    def _port_for_a_service(self) -> EndpointPickerRef:
        # The CRD's own rule: self.kind != 'Service' || has(self.port).
        if self.kind in (None, "Service") and self.port is None:
            raise FieldProblem(
                f"names the Service {self.name!r} without its port: the gateway cannot "
                "reach the endpoint picker (the extension's CRD refuses it too)",
                "add port: {number: 9002} (the picker Service's port, 9002 for the "
                "extension's own endpoint picker)", at=".port")
        return self


class InferencePoolSpec(_Model):
    """``spec.routing.inferencePool``: an InferencePool (Gateway API Inference Extension)
    over the server pods, for an Inference Gateway to route to."""

    # None: the operator's LLMOP_INFERENCE_POOL (Helm settings.inferencePool.enabled).
    enabled: bool | None = None
    # None: the operator's LLMOP_ENDPOINT_PICKER_REF (Helm
    # settings.inferencePool.endpointPickerRef); neither: the pool names no picker.
    endpoint_picker_ref: EndpointPickerRef | None = None


class RoutingSpec(_Model):
    inference_pool: InferencePoolSpec = Field(default_factory=InferencePoolSpec)

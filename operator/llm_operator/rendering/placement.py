"""Where the GPU pods go (pure): the operator's GPU class applied to ``spec.gpus`` and
``spec.scheduling``, for the server pods and the tuning Job.
"""

from __future__ import annotations

import copy
from typing import Any

from ..api.models import LLMService, LLMServiceSpec
from ..knowledge.gpuclass import Placement, placement
from ..planning import Explained, Plan
from ..settings import Settings


def gpu_placement(spec: LLMServiceSpec, settings: Settings) -> Placement:
    """Where the GPU pods of ``spec`` go under the operator's GPU class
    (``settings.gpu_class``; see :mod:`llm_operator.knowledge.gpuclass`). Raises
    :class:`~llm_operator.api.errors.SpecError` for a product the class does not know."""
    return placement(spec, settings.gpu_class, settings.selected_gpu_class())


def gpu_product_label(spec: LLMServiceSpec, settings: Settings) -> str | None:
    """The node-label value that places ``spec.gpus.product`` under the operator's GPU
    class (see :func:`gpu_placement`).

    The spec may name a GPU by an alias (``H100-SXM``); the class translates it into its
    label's value (``NVIDIA-H100-80GB-HBM3`` for GPU feature discovery,
    ``nvidia-h100-80gb`` on GKE). None when no product is set or the class has no
    per-product label; a product the class does not know raises a ``SpecError``.
    """
    label = settings.selected_gpu_class().product_label
    if not spec.gpus.product or label is None:
        return None
    return gpu_placement(spec, settings).node_selector.get(label)


def scheduling_fields(spec: LLMServiceSpec, settings: Settings) -> dict[str, Any]:
    """Pod-spec fields that place the pod: nodeSelector (the user's, plus what the GPU
    class adds: the product label for ``spec.gpus.product`` where the user's selector
    does not name it already, see :func:`gpu_placement`), tolerations (the user's, plus
    the class's), affinity, priorityClassName."""
    fields: dict[str, Any] = {}
    placed = gpu_placement(spec, settings)
    if placed.node_selector:
        fields["nodeSelector"] = placed.node_selector
    if placed.tolerations:
        fields["tolerations"] = placed.tolerations
    if spec.scheduling.affinity:
        fields["affinity"] = copy.deepcopy(spec.scheduling.affinity)
    if spec.scheduling.priority_class_name:
        fields["priorityClassName"] = spec.scheduling.priority_class_name
    return fields


def with_placement(plan: Plan, spec: LLMServiceSpec, settings: Settings) -> Plan:
    """``plan`` with a ``placement`` explanation (which GPU class and node label place the
    pods; ``status.plan`` and ``llm-operator plan`` show it) and the class's warnings."""
    placed = gpu_placement(spec, settings)
    label = settings.selected_gpu_class().product_label
    value = (f"{label}={placed.node_selector[label]}"
             if label and label in placed.node_selector else "any GPU node of the class")
    explained = Explained(name="placement", value=value, formula=placed.explanation,
                          source=f"GPU class {placed.class_name!r}")
    return plan.model_copy(update={
        "explanations": [*plan.explanations, explained],
        "warnings": [*plan.warnings, *placed.warnings]})


def with_gpu_class(svc: LLMService, settings: Settings) -> LLMService:
    """``svc`` with ``spec.gpus.resourceName`` filled from the GPU class when the user
    left it out (a value the user set is kept)."""
    resource = gpu_placement(svc.spec, settings).resource_name
    if resource == svc.spec.gpus.resource_name:
        return svc
    gpus = svc.spec.gpus.model_copy(update={"resource_name": resource})
    return svc.model_copy(update={"spec": svc.spec.model_copy(update={"gpus": gpus})})

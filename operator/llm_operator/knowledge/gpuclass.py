"""GPU classes (pure): how the nodes of one kind of cluster say which GPU they carry.

A pod that asks for ``spec.gpus.product`` must land on a node with that GPU, but the
label that names the GPU depends on who installed the driver: NVIDIA's GPU feature
discovery (the GPU Operator) sets ``nvidia.com/gpu.product``, GKE's own driver install
sets ``cloud.google.com/gke-accelerator``, Karpenter on EKS sets
``karpenter.k8s.aws/instance-gpu-name``, and AKS sets no per-product label at all. A
:class:`GPUClass` (the idea of KubeAI's "resource profiles": a named set of node
selector, tolerations and resource name, chosen by the administrator, not by each
service) says which label key and value place each GPU product, which tolerations GPU
pods need and which extended resource requests GPUs.

The administrator picks one class for the operator (``LLMOP_GPU_CLASS``: a preset of
:data:`PRESETS`, or a class of their own in ``LLMOP_GPU_CLASSES``).
:func:`placement` turns a service's spec and the class into the pod's scheduling
fields, and says in one sentence which class and label placed the pod. The user's own
``spec.scheduling.nodeSelector`` and ``tolerations`` always win and are never dropped.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from ..api.constants import DEFAULT_GPU_RESOURCE
from ..api.errors import SpecError
from ..api.models import LLMServiceSpec
from .catalog import gpu_products, gpu_table, lookup_gpu

# The label GPU feature discovery sets (the value is the product name nvidia-smi reports,
# spaces as dashes): https://github.com/NVIDIA/k8s-device-plugin (gpu-feature-discovery),
# "nvidia.com/gpu.product" in its README's label table.
GFD_PRODUCT_LABEL = "nvidia.com/gpu.product"
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
KARPENTER_GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
AKS_ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

# Tolerates the usual GPU-node taint whatever its value (GKE's nvidia.com/gpu=present, a
# NodePool's nvidia.com/gpu=true, ...). Harmless where nodes carry no such taint.
TOLERATE_NVIDIA_GPU_TAINT: dict[str, Any] = {
    "key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


class GPUClass(BaseModel):
    """One class of GPU nodes (camelCase keys in ``LLMOP_GPU_CLASSES``' JSON).

    ``productLabel``: the node label whose value names the GPU product (None: the nodes
    carry none, then no product selector is added and the plan warns). ``products``:
    GPU product (a value of the operator's GPU table, ``NVIDIA-H100-80GB-HBM3``, or one
    of its short names, ``H100``) -> that label's value on such nodes. ``nodeSelector``
    and ``tolerations``: added to every GPU pod of the class. ``resourceName``: the
    extended resource that requests GPUs when ``spec.gpus.resourceName`` is not set.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              extra="forbid", frozen=True)

    description: str = ""
    product_label: str | None = None
    products: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    resource_name: str = DEFAULT_GPU_RESOURCE

    @field_validator("product_label", "resource_name")
    @classmethod
    def _not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be empty")
        return v

    def label_value(self, product: str) -> str | None:
        """The ``product_label`` value of nodes with ``product`` (the GPU table's product,
        or any of its short names; case-insensitive), or None when the class does not
        know it."""
        wanted = _canonical(product)
        for key, value in self.products.items():
            if _canonical(key) == wanted:
                return value
        return None

    def known_products(self) -> list[str]:
        """The products the class can place, as the spec may name them."""
        return list(self.products)


def _canonical(product: str) -> str:
    facts = lookup_gpu(product)
    return (facts.product if facts is not None else product.strip()).lower()


# --------------------------------------------------------------------------- presets
# Sources (read 2026-11): GKE "Run GPUs in GKE Standard node pools" (cloud.google.com/
# kubernetes-engine/docs/how-to/gpus): nodes carry cloud.google.com/gke-accelerator=<the
# accelerator type>, e.g. nvidia-h100-80gb, nvidia-h100-mega-80gb, nvidia-h200-141gb,
# nvidia-a100-80gb, nvidia-tesla-a100 (40 GB), nvidia-l4; GPU nodes added beside other
# node pools are tainted nvidia.com/gpu=present:NoSchedule (GKE's
# ExtendedResourceToleration admission adds the toleration too; being explicit costs
# nothing). A3 Mega (nvidia-h100-mega-80gb) carries the same H100 SXM: a service that
# wants it sets spec.scheduling.nodeSelector itself.
_GKE = GPUClass(
    description="GKE with Google's driver install (label cloud.google.com/gke-accelerator)",
    product_label=GKE_ACCELERATOR_LABEL,
    # The GPU table's gke_accelerator values (catalog.GPUFacts): nvidia-h100-80gb,
    # nvidia-h200-141gb, nvidia-a100-80gb, nvidia-tesla-a100, nvidia-l4, nvidia-b200,
    # nvidia-gb200, nvidia-gb300, nvidia-rtx-pro-6000.
    products={g.product: g.gke_accelerator for g in gpu_table() if g.gke_accelerator},
    tolerations=[TOLERATE_NVIDIA_GPU_TAINT],
)

# Karpenter's AWS well-known labels (karpenter.sh docs, "Well-Known Labels";
# aws/karpenter-provider-aws hack/validation/labels.sh lists instance-gpu-name among them;
# the EKS best-practices guide "Compute and Autoscaling" selects
# karpenter.k8s.aws/instance-gpu-name: "l40s"): the lower-case GPU name of the instance
# type: h100 (p5), h200 (p5e/p5en), a100 (p4d 40 GB and p4de 80 GB alike), l40s (g6e),
# l4 (g6), a10g (g5), b200 (p6-b200; EKS Auto Mode's eks.amazonaws.com/instance-gpu-name
# takes the same values). The A100 sizes share one value; the class maps the 40 GB one only
# (p4d: the common instance) and a service that wants p4de says so in its own
# nodeSelector (karpenter.k8s.aws/instance-gpu-memory). GPU NodePools are commonly
# tainted nvidia.com/gpu:NoSchedule (the EKS and Karpenter GPU examples do).
_EKS = GPUClass(
    description="EKS with Karpenter (label karpenter.k8s.aws/instance-gpu-name)",
    product_label=KARPENTER_GPU_NAME_LABEL,
    # The GPU table's karpenter_gpu_name values: h100, h200, a100, l40s, l4, a10g, b200.
    products={g.product: g.karpenter_gpu_name for g in gpu_table() if g.karpenter_gpu_name},
    tolerations=[TOLERATE_NVIDIA_GPU_TAINT],
)

# AKS ("Use GPUs on AKS", learn.microsoft.com/azure/aks/use-nvidia-gpu): GPU node pools
# carry kubernetes.azure.com/accelerator=nvidia and the VM size in
# node.kubernetes.io/instance-type (Standard_NC24ads_A100_v4, Standard_ND96isr_H100_v5,
# ...), but no label naming the GPU product; AKS taints nothing by itself, its docs
# suggest --node-taints sku=gpu:NoSchedule. So: any NVIDIA GPU node, and a plan warning
# that says how to pin the VM size.
_AKS = GPUClass(
    description="AKS (no per-product label: any node with kubernetes.azure.com/accelerator"
                "=nvidia)",
    product_label=None,
    node_selector={AKS_ACCELERATOR_LABEL: "nvidia"},
    tolerations=[{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
                 TOLERATE_NVIDIA_GPU_TAINT],
)


def _nvidia() -> GPUClass:
    # GPU feature discovery writes the product name itself: the GPU table's products are
    # its label values (catalog.GPUFacts.product). The GPU Operator does not taint GPU
    # nodes, but many GPU node pools are tainted nvidia.com/gpu: a pod that requests GPUs
    # only fits GPU nodes anyway, so tolerating that taint never places it elsewhere.
    # Found on the real control plane: without it the pods of a service stayed Pending
    # on tainted GPU nodes ("2 node(s) had untolerated taint(s)").
    return GPUClass(
        description="NVIDIA GPU feature discovery / GPU Operator (label "
                    "nvidia.com/gpu.product)",
        product_label=GFD_PRODUCT_LABEL,
        products={p: p for p in gpu_products()},
        tolerations=[TOLERATE_NVIDIA_GPU_TAINT],
    )


DEFAULT_CLASS = "nvidia"
PRESETS: dict[str, GPUClass] = {"nvidia": _nvidia(), "gke": _GKE, "eks": _EKS, "aks": _AKS}


def resolve_class(name: str, custom: dict[str, GPUClass]) -> GPUClass:
    """The class called ``name``: the administrator's own first, then a preset. Raises
    ``ValueError`` naming the known classes."""
    if name in custom:
        return custom[name]
    if name in PRESETS:
        return PRESETS[name]
    known = sorted({*PRESETS, *custom})
    raise ValueError(f"unknown GPU class {name!r}: set LLMOP_GPU_CLASS to one of "
                     f"{', '.join(known)}, or define it in LLMOP_GPU_CLASSES")


# --------------------------------------------------------------------------- placement

@dataclass(frozen=True)
class Placement:
    """Where a service's GPU pods go: the scheduling fields (user's and class's merged),
    the resource name, one sentence for the plan saying which class and label placed
    the pod, and a warning when the class cannot tell products apart."""

    class_name: str
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]
    resource_name: str
    explanation: str
    warnings: list[str] = field(default_factory=list)


def placement(spec: LLMServiceSpec, class_name: str, gpu_class: GPUClass) -> Placement:
    """Merge the class into the user's scheduling (pure).

    - The user's ``nodeSelector`` is kept as is; the class adds its own keys and the
      product label only where the user did not set that key.
    - ``spec.gpus.product`` the class does not know: when the user set the class's
      product label in ``spec.scheduling.nodeSelector`` (or in a required node affinity
      term), the user's choice places the pod;
      otherwise a :class:`SpecError` names ``spec.gpus.product`` and the known values
      (a verbatim guess would leave the pod Pending with no hint).
    - Tolerations: the user's, then the class's that the user's do not already contain.
    - Resource: ``spec.gpus.resourceName`` when the user set it, else the class's.
    """
    sched = spec.scheduling
    selector = dict(sched.node_selector)
    label = gpu_class.product_label
    warnings: list[str] = []
    user_set_label = label is not None and label in sched.node_selector
    user_affinity = label is not None and label in _required_affinity_keys(sched.affinity)
    if spec.gpus.product and label is not None:
        conflict = product_conflict(spec, class_name, gpu_class)
        if conflict is not None:
            raise conflict
    if not spec.gpus.product:
        how = "no spec.gpus.product: no product selector"
    elif label is None:
        how = "the class has no per-product node label: any of its GPU nodes"
        if not _user_pins_product(sched.node_selector):
            warnings.append(
                f"GPU class {class_name!r} has no node label naming the GPU product, so the "
                f"pods may land on any GPU node, not only {spec.gpus.product}: pin the VM "
                f"size with spec.scheduling.nodeSelector {INSTANCE_TYPE_LABEL}")
    elif user_set_label:
        how = f"{label}={sched.node_selector[label]} from spec.scheduling.nodeSelector"
    elif user_affinity:
        how = f"{label} from spec.scheduling.affinity (required node affinity)"
    else:
        value = gpu_class.label_value(spec.gpus.product)
        if value is None:
            known = gpu_class.known_products()
            raise SpecError(
                "spec.gpus.product",
                f"GPU class {class_name!r} (the operator's LLMOP_GPU_CLASS) has no "
                f"{label} value for {spec.gpus.product!r}, so no node could be chosen",
                "use one of: " + (", ".join(known) if known else "(none)")
                + f"; or set spec.scheduling.nodeSelector {label}: <the value on your "
                "nodes>; or ask the administrator to add the product to the class "
                "(LLMOP_GPU_CLASSES)")
        selector[label] = value
        how = f"nodeSelector {label}={value}"
    for key, value in gpu_class.node_selector.items():
        selector.setdefault(key, value)
    tolerations = copy.deepcopy(sched.tolerations)
    for tol in gpu_class.tolerations:
        if tol not in tolerations:
            tolerations.append(copy.deepcopy(tol))
    resource = spec.gpus.resource_name or gpu_class.resource_name
    extra = ", ".join(f"{k}={v}" for k, v in sorted(gpu_class.node_selector.items()))
    explanation = f"GPU class {class_name!r}: {how}" + (f", plus {extra}" if extra else "")
    return Placement(class_name, dict(sorted(selector.items())), tolerations, resource,
                     explanation, warnings)


def product_conflict(spec: LLMServiceSpec, class_name: str,
                     gpu_class: GPUClass) -> SpecError | None:
    """The user's ``nodeSelector`` or required node affinity, on the class's product
    label, choosing nodes without ``spec.gpus.product``: the plan (GPU count, KV
    capacity, batch) would be for GPUs the pods never get, or the pods never schedule.
    Only values the class knows are judged (a value it does not know, such as GKE's
    ``nvidia-h100-mega-80gb``, may well carry the product)."""
    label = gpu_class.product_label
    product = spec.gpus.product
    wanted = gpu_class.label_value(product) if label and product else None
    if label is None or product is None or wanted is None:
        return None
    sched = spec.scheduling
    if label in sched.node_selector:
        given = sched.node_selector[label]
        named = _named_product(gpu_class, given, wanted)
        if named is None:
            return None
        other = next((p for p, v in gpu_class.products.items() if v == given), None)
        first = (f"set spec.gpus.product: {other} if those are the GPUs you want"
                 if other else f"write {label}: {wanted}")
        return SpecError(
            f"spec.scheduling.nodeSelector[{label}]",
            f"{label}: {given or chr(34) * 2} {named}, while spec.gpus.product is "
            f"{product!r} (nodes with "
            f"{label}={wanted}): " + ("the plan is for GPUs the pods would not get" if other
                                      else "the pods would stay Pending"),
            f"{first}; or remove {label} from spec.scheduling.nodeSelector (the operator "
            f"adds {label}: {wanted} itself)")
    terms = _required_terms(sched.affinity)
    if not terms or any(_term_allows(t, label, wanted, gpu_class) for t in terms):
        return None
    for i, term in enumerate(terms):
        for j, expr in enumerate(term.get("matchExpressions") or []):
            if expr.get("key") != label:
                continue
            values = [str(v) for v in expr.get("values") or []]
            said = [n for v in values if (n := _named_product(gpu_class, v, wanted))]
            what = ("; ".join(said) if said and expr.get("operator") == "In"
                    else f"{expr.get('operator')} {values} excludes {wanted}")
            return SpecError(
                "spec.scheduling.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuring"
                f"Execution.nodeSelectorTerms[{i}].matchExpressions[{j}]",
                f"the required node affinity on {label} ({what}) admits no node with "
                f"{label}={wanted}, while spec.gpus.product is {product!r}: the plan is for "
                "GPUs the pods would not get, or they never schedule",
                f"set spec.gpus.product to the GPU you want, or let the affinity admit "
                f"{label} {wanted} (or drop that expression: the operator selects it itself)")
    return None


def _named_product(gpu_class: GPUClass, value: str, wanted: str) -> str | None:
    """What a label value the user gave says, when it is not the product's: the other
    product the class places with it, or a case slip (label values are case-sensitive).
    None when it is the product's value, or a value the class does not know."""
    if value == wanted:
        return None
    if not value:
        return "is empty (no GPU node carries an empty product label)"
    if value.lower() == wanted.lower():
        return (f"differs from the nodes' value {wanted} only in case (label values are "
                "case-sensitive: no node matches)")
    others = [p for p, v in gpu_class.products.items() if v == value]
    return f"selects {others[0]} nodes" if others else None


def _required_terms(affinity: dict[str, Any] | None) -> list[dict[str, Any]]:
    required = (((affinity or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    return [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, dict)]


def _term_allows(term: dict[str, Any], label: str, value: str, gpu_class: GPUClass) -> bool:
    """Whether one node selector term admits nodes with ``label=value`` (as far as its
    expressions on ``label`` say; other keys are not judged). A term whose only
    expressions on the label name values the class does not know is given the benefit
    of the doubt (they may carry the product too)."""
    for expr in term.get("matchExpressions") or []:
        if not isinstance(expr, dict) or expr.get("key") != label:
            continue
        values = [str(v) for v in expr.get("values") or []]
        op = expr.get("operator")
        if op == "In" and value not in values and all(
                _named_product(gpu_class, v, value) for v in values):
            return False
        if op == "NotIn" and value in values:
            return False
        if op == "DoesNotExist":
            return False
    return True


def _required_affinity_keys(affinity: dict[str, Any] | None) -> set[str]:
    """Label keys the user's required node affinity constrains in every term (terms are
    alternatives: a key counts only when each of them names it)."""
    required = (((affinity or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    keys = [{str(e.get("key")) for e in (t.get("matchExpressions") or [])} for t in terms]
    return set.intersection(*keys) if keys else set()


def _user_pins_product(node_selector: dict[str, str]) -> bool:
    return any(k in node_selector for k in (INSTANCE_TYPE_LABEL, GFD_PRODUCT_LABEL,
                                             GKE_ACCELERATOR_LABEL, KARPENTER_GPU_NAME_LABEL))

"""``spec.scheduling``, with the pod spec's affinity types that check it."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .base import FieldProblem, _loc_to_path, _Model
from .formats import QUALIFIED_NAME, SUBDOMAIN_PATTERN, _check_keys


class _Strict(BaseModel):
    """A pod-spec type as Kubernetes spells it (camelCase), unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", frozen=True)


class _Requirement(_Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] | None = None

    @model_validator(mode="after")
    def _values_fit_operator(self) -> _Requirement:
        problem = requirement_problem(self.operator, self.values)
        if problem:
            raise ValueError(problem)
        return self


def requirement_problem(operator: str, values: list[str] | None) -> str | None:
    """The API server's rule for a node selector requirement's values
    (validation.ValidateNodeSelectorRequirement), or None when it holds."""
    if operator in ("In", "NotIn") and not values:
        return f"values must be given when operator is {operator}"
    if operator in ("Exists", "DoesNotExist") and values:
        return f"values must be empty when operator is {operator}"
    if operator in ("Gt", "Lt") and (
            len(values or []) != 1 or not re.fullmatch(r"-?[0-9]+", (values or [""])[0])):
        return f"operator {operator} takes exactly one value, an integer"
    return None


class _NodeSelectorTerm(_Strict):
    match_expressions: list[_Requirement] | None = None
    match_fields: list[_Requirement] | None = None


class _NodeSelector(_Strict):
    node_selector_terms: list[_NodeSelectorTerm] = Field(min_length=1)


class _PreferredSchedulingTerm(_Strict):
    weight: int = Field(ge=1, le=100)
    preference: _NodeSelectorTerm


class _NodeAffinity(_Strict):
    required_during_scheduling_ignored_during_execution: _NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[
        _PreferredSchedulingTerm] | None = None


class _LabelSelector(_Strict):
    match_labels: dict[str, str] | None = None
    match_expressions: list[_Requirement] | None = None


class _PodAffinityTerm(_Strict):
    label_selector: _LabelSelector | None = None
    namespace_selector: _LabelSelector | None = None
    namespaces: list[str] | None = None
    topology_key: str = Field(min_length=1)
    match_label_keys: list[str] | None = None
    mismatch_label_keys: list[str] | None = None


class _WeightedPodAffinityTerm(_Strict):
    weight: int = Field(ge=1, le=100)
    pod_affinity_term: _PodAffinityTerm


class _PodAffinity(_Strict):
    required_during_scheduling_ignored_during_execution: list[_PodAffinityTerm] | None = None
    preferred_during_scheduling_ignored_during_execution: list[
        _WeightedPodAffinityTerm] | None = None


class Affinity(_Strict):
    """The pod spec's affinity (core/v1 Affinity), to check ``spec.scheduling.affinity``,
    which the CRD keeps as given: a misspelt key or a wrong type is refused here rather
    than by the API server on the Deployment."""

    node_affinity: _NodeAffinity | None = None
    pod_affinity: _PodAffinity | None = None
    pod_anti_affinity: _PodAffinity | None = None


class SchedulingSpec(_Model):
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] | None = None
    priority_class_name: str | None = Field(default=None, max_length=253,
                                            pattern=SUBDOMAIN_PATTERN)
    # A replica spread over nodes (LeaderWorkerSet): the node label key whose values are
    # the topology domains (rack, zone, node pool) each group gets to itself.
    group_topology_key: str | None = Field(
        default=None, min_length=1, max_length=317,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_keys(v, "nodeSelector", check_values=True)

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, t in enumerate(v):
            if not isinstance(t, dict):
                continue  # the CRD's schema types it
            problem = None
            wrong_type = [k for k in ("key", "operator", "value", "effect")
                          if t.get(k) is not None and not isinstance(t[k], str)]
            if wrong_type:
                problem = f"{wrong_type[0]} {t[wrong_type[0]]!r} is not a string"
            elif t.get("operator", "Equal") not in ("Equal", "Exists"):
                problem = (f"operator {t.get('operator')!r} is not Equal or Exists (the "
                           "spelling is case-sensitive)")
            elif t.get("effect") not in (None, "", "NoSchedule", "PreferNoSchedule",
                                         "NoExecute"):
                problem = (f"effect {t.get('effect')!r} is not NoSchedule, PreferNoSchedule "
                           "or NoExecute (the spelling is case-sensitive)")
            elif t.get("operator") == "Exists" and t.get("value"):
                problem = "a toleration with operator Exists takes no value"
            elif t.get("tolerationSeconds") is not None and t.get("effect") != "NoExecute":
                problem = "tolerationSeconds needs effect NoExecute"
            elif t.get("key") and not QUALIFIED_NAME.match(str(t["key"])):
                problem = (f"key {t['key']!r} is not a Kubernetes label key ([prefix/]name, "
                           "name at most 63 alphanumerics, '-', '_', '.')")
            elif not t.get("key") and t.get("operator", "Equal") == "Equal":
                problem = "a toleration without a key needs operator Exists"
            if problem:
                raise FieldProblem(f"{problem} (the API server refuses the pods)",
                                   "correct the toleration as the pod spec's rules say",
                                   at=f"[{i}]")
        return v

    @field_validator("affinity")
    @classmethod
    def _affinity(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            try:
                Affinity.model_validate(v)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = _loc_to_path(tuple(err["loc"]))
                raise FieldProblem(f"{err['msg']} (the API server refuses the pods)",
                                   "write it as the pod spec's affinity (`kubectl explain "
                                   "pod.spec.affinity`)", at=f".{where}") from None
        return v

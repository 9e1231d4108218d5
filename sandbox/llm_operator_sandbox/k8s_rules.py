"""The name, label and resource-name rules a real API server enforces (pure).

The emulated API server (kmock) stores whatever it is given; a real one answers 422
Unprocessable Entity for an object whose name, labels or resource names break these
rules. :mod:`.emulator` applies them so that tests see the rejection a cluster would
give. Rules as in Kubernetes' apimachinery validation (``IsDNS1123Subdomain``,
``IsDNS1035Label``, ``IsQualifiedName``, ``IsValidLabelValue``) and the API server's
per-kind name validation (Services take RFC 1035 labels; Jobs at most 63 characters,
since the ``job-name`` label carries the name).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

SUBDOMAIN_MAX = 253
LABEL_MAX = 63

# kind -> (pattern, max length) of metadata.name, where it differs from a subdomain.
_NAME_RULES: dict[str, tuple[re.Pattern[str], int]] = {
    "Service": (DNS1035_LABEL, LABEL_MAX),
    "Job": (DNS1123_SUBDOMAIN, LABEL_MAX),
    "Namespace": (re.compile(rf"^{_DNS1123_LABEL}$"), LABEL_MAX),
}


def qualified_name_errors(key: str) -> list[str]:
    """Problems with a label or annotation key (``[prefix/]name``)."""
    prefix, _, name = key.rpartition("/")
    errors = []
    if prefix and (len(prefix) > SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.match(prefix)):
        errors.append(f"prefix {prefix!r} must be a DNS subdomain")
    if not name or len(name) > LABEL_MAX or not _QUALIFIED_NAME.match(name):
        errors.append(f"name part {name!r} must be at most {LABEL_MAX} characters of "
                      "alphanumerics, '-', '_' or '.', starting and ending alphanumeric")
    return errors


def _pod_templates(obj: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, {metadata, spec}) of the pod itself or every pod template in a workload."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        yield "", obj
    if isinstance(spec.get("template"), Mapping):
        yield "spec.template.", spec["template"]
    for role in ("leaderTemplate", "workerTemplate"):  # LeaderWorkerSet
        t = (spec.get("leaderWorkerTemplate") or {}).get(role)
        if isinstance(t, Mapping):
            yield f"spec.leaderWorkerTemplate.{role}.", t


def object_errors(obj: Mapping[str, Any]) -> list[str]:
    """Every rule ``obj`` breaks, each as ``field: problem`` the way the API server's
    422 message lists them; empty when a real API server would accept these parts."""
    errors: list[str] = []
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    pattern, limit = _NAME_RULES.get(str(obj.get("kind")), (DNS1123_SUBDOMAIN, SUBDOMAIN_MAX))
    if name and (len(name) > limit or not pattern.match(name)):
        errors.append(f"metadata.name: Invalid value: {name!r}: must be at most {limit} "
                      f"characters matching {pattern.pattern}")
    labels: list[tuple[str, Mapping[str, Any]]] = [("metadata.labels", meta.get("labels") or {})]
    templates = list(_pod_templates(obj))
    labels += [(f"{path}metadata.labels", (t.get("metadata") or {}).get("labels") or {})
               for path, t in templates if path]
    for path, mapping in labels:
        for key, value in mapping.items():
            errors += [f"{path}: Invalid value: {key!r}: {e}" for e in qualified_name_errors(key)]
            if len(str(value)) > LABEL_MAX or not _LABEL_VALUE.match(str(value)):
                errors.append(f"{path}: Invalid value: {value!r}: a label value must be at "
                              f"most {LABEL_MAX} characters, alphanumerics, '-', '_' or '.'")
    for key in meta.get("annotations") or {}:
        errors += [f"metadata.annotations: Invalid value: {key!r}: {e}"
                   for e in qualified_name_errors(key)]
    for path, template in templates:
        pod = template.get("spec") or {}
        for kind in ("initContainers", "containers"):
            for i, c in enumerate(pod.get(kind) or []):
                cname = c.get("name") or ""
                if len(cname) > LABEL_MAX or not re.match(rf"^{_DNS1123_LABEL}$", cname):
                    errors.append(f"{path}spec.{kind}[{i}].name: Invalid value: {cname!r}: must "
                                  "be a DNS label")
                for section in ("requests", "limits"):
                    for res in (c.get("resources") or {}).get(section) or {}:
                        if "/" in res or res in ("cpu", "memory", "ephemeral-storage") \
                                or res.startswith("hugepages-"):
                            errs = qualified_name_errors(res)
                        else:
                            errs = [f"{res!r} is not a standard resource and has no "
                                    "domain prefix (e.g. nvidia.com/gpu)"]
                        errors += [f"{path}spec.{kind}[{i}].resources.{section}[{res}]: "
                                   f"Invalid value: {e}" for e in errs]
        for i, tol in enumerate(pod.get("tolerations") or []):
            errors += [f"{path}spec.tolerations[{i}].{e}" for e in _toleration_errors(tol)]
        errors += [f"{path}spec.affinity.nodeAffinity.{e}"
                   for e in _node_affinity_errors(pod.get("affinity") or {})]
    return errors


def _node_affinity_errors(affinity: Mapping[str, Any]) -> list[str]:
    """The API server's node selector rules (validation.ValidateNodeSelector): at least
    one term when required, and values that fit each requirement's operator."""
    node = affinity.get("nodeAffinity") or {}
    errors: list[str] = []
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = [("requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", t)
             for t in (required or {}).get("nodeSelectorTerms") or []]
    if required is not None and not terms:
        errors.append("requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: "
                      "Required value: must have at least one node selector term")
    terms += [("preferredDuringSchedulingIgnoredDuringExecution.preference", p.get("preference"))
              for p in node.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    for where, term in terms:
        for j, req in enumerate((term or {}).get("matchExpressions") or []):
            op, values = req.get("operator"), req.get("values") or []
            if op in ("In", "NotIn") and not values:
                problem = "Required value: must be specified when `operator` is 'In' or 'NotIn'"
            elif op in ("Exists", "DoesNotExist") and values:
                problem = ("Forbidden: may not be specified when `operator` is 'Exists' or "
                           "'DoesNotExist'")
            elif op in ("Gt", "Lt") and (len(values) != 1 or not _INTEGER.match(str(values[0]))):
                problem = ("Required value: must be specified single value when `operator` "
                           "is 'Lt' or 'Gt', an integer")
            else:
                continue
            errors.append(f"{where}.matchExpressions[{j}].values: {problem}")
    return errors


_INTEGER = re.compile(r"^-?[0-9]+$")


def _toleration_errors(tol: Mapping[str, Any]) -> list[str]:
    """The API server's toleration rules (validation.ValidateTolerations): the operator
    and effect enums, case-sensitive."""
    errors = []
    if tol.get("operator", "Equal") not in ("Equal", "Exists"):
        errors.append(f"operator: Unsupported value: {tol.get('operator')!r}: supported "
                      "values: \"Equal\", \"Exists\"")
    if tol.get("key"):
        errors += [f"key: Invalid value: {tol['key']!r}: {e}"
                   for e in qualified_name_errors(str(tol["key"]))]
    if tol.get("effect") not in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"):
        errors.append(f"effect: Unsupported value: {tol.get('effect')!r}: supported values: "
                      "\"NoExecute\", \"NoSchedule\", \"PreferNoSchedule\"")
    return errors


def prune(schema: Mapping[str, Any], obj: Any) -> Any:
    """``obj`` as the API server stores it under a structural ``schema``
    (an openAPIV3Schema): every field the schema does not know is dropped, unless the
    schema preserves unknown fields there. ``metadata`` is the server's own and kept."""
    if isinstance(obj, Mapping):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return dict(obj)
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and isinstance(extra, Mapping):
            return {k: prune(extra, v) for k, v in obj.items()}
        if props is None:
            return dict(obj)
        out = {}
        for key, value in obj.items():
            if key == "metadata" and "metadata" in props and "apiVersion" in props:
                out[key] = value  # ObjectMeta at the root: not pruned by the CRD schema
            elif key in props:
                out[key] = prune(props[key], value)
        return out
    if isinstance(obj, list) and isinstance(schema.get("items"), Mapping):
        return [prune(schema["items"], v) for v in obj]
    return obj

"""Check custom resources against the LLMService CRD the way an API server would.

The emulated API server in the integration tier validates nothing, so the unit tier does
what kube-apiserver does on create, in the same order:

1. apply the schema's defaults (structural defaulting, recursing into defaulted objects),
2. validate against the openAPIV3Schema (``jsonschema``, draft 4 semantics such as the
   boolean ``exclusiveMinimum``, with ``x-kubernetes-int-or-string`` as integer-or-string
   and unknown fields rejected as ``kubectl apply``'s strict field validation does),
3. evaluate every ``x-kubernetes-validations`` CEL rule with ``celpy`` at its place in
   the object, with values typed by the schema (``number`` is a CEL double, as in
   Kubernetes).

Each problem is a :class:`Violation` naming the field by its path
(``spec.engine.maxNumSeqs``) and, for CEL, the rule that fired, so tests can check that
every rule is exercised. Also: a checker for the structural-schema rules of
apiextensions.k8s.io/v1.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml
from celpy import celtypes

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "llmservices.llmops.dev.yaml"
EXAMPLES_DIR = ROOT / "examples"
DEMO_DIR = ROOT / "demo"

Schema = Mapping[str, Any]

# The only form anyOf may take in a structural schema (besides value validations).
INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]


@dataclass(frozen=True)
class Violation:
    """One reason the API server would refuse an object."""

    field: str  # e.g. "spec.engine.maxNumSeqs"
    message: str
    source: str  # "schema" | "cel" | "cel-error"
    rule: str | None = None  # CEL rule id: "<schema path>#<index>"


@dataclass(frozen=True)
class CelRule:
    """One x-kubernetes-validations entry and where it sits in the schema."""

    rule_id: str  # "<schema path>#<index>", e.g. "spec.engine.extraArgs#1"
    schema_path: str
    rule: str
    message: str | None
    message_expression: str | None
    field_path: str | None


def load_crd(path: Path = CRD_PATH) -> dict[str, Any]:
    """Load the CRD manifest."""
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict)
    return doc


def crd_schema(crd: Mapping[str, Any], version: str = "v1alpha1") -> dict[str, Any]:
    """The openAPIV3Schema of one served version of the CRD."""
    for ver in crd["spec"]["versions"]:
        if ver["name"] == version:
            schema = ver["schema"]["openAPIV3Schema"]
            assert isinstance(schema, dict)
            return schema
    raise KeyError(version)


def load_examples(*directories: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every LLMService document under ``examples/`` and the local demo's ``demo/`` (or the
    folders given), with ``file#index`` ids."""
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(p for d in (directories or (EXAMPLES_DIR, DEMO_DIR))
                       for p in d.glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and doc.get("kind") == "LLMService":
                found.append((f"{path.name}#{i}", doc))
    return found


# --- schema walking -----------------------------------------------------------------


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def iter_schema_nodes(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Yield ``(path, node)`` for every schema node: properties by name, ``[]`` for
    array items and ``{}`` for map values."""
    yield path, schema
    for name, prop in (schema.get("properties") or {}).items():
        yield from iter_schema_nodes(prop, _join(path, name))
    if isinstance(schema.get("items"), Mapping):
        yield from iter_schema_nodes(schema["items"], path + "[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from iter_schema_nodes(schema["additionalProperties"], path + "{}")


def cel_rules(schema: Schema) -> list[CelRule]:
    """Every CEL rule in the schema, in document order."""
    rules: list[CelRule] = []
    for path, node in iter_schema_nodes(schema):
        for i, entry in enumerate(node.get("x-kubernetes-validations") or []):
            rules.append(
                CelRule(
                    rule_id=f"{path}#{i}",
                    schema_path=path,
                    rule=entry["rule"],
                    message=entry.get("message"),
                    message_expression=entry.get("messageExpression"),
                    field_path=entry.get("fieldPath"),
                )
            )
    return rules


# --- defaulting ---------------------------------------------------------------------


def apply_defaults(schema: Schema, obj: Any) -> Any:
    """Return a copy of ``obj`` with the schema's defaults filled in, as the API server
    does: a missing property with a ``default`` gets a copy of it, and defaulting then
    continues inside it (so ``gpus: {default: {}}`` fills ``gpus.count`` too)."""
    obj = copy.deepcopy(obj)
    _default_into(schema, obj)
    return obj


def _default_into(schema: Schema, obj: Any) -> None:
    if isinstance(obj, dict):
        for name, prop in (schema.get("properties") or {}).items():
            if name not in obj and "default" in prop:
                obj[name] = copy.deepcopy(prop["default"])
            if name in obj:
                _default_into(prop, obj[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key, value in obj.items():
                if key not in (schema.get("properties") or {}):
                    _default_into(extra, value)
    elif isinstance(obj, list) and isinstance(schema.get("items"), Mapping):
        for item in obj:
            _default_into(schema["items"], item)


# --- OpenAPI schema validation ------------------------------------------------------


def to_jsonschema(schema: Schema, *, strict: bool = True) -> dict[str, Any]:
    """Translate a Kubernetes openAPIV3Schema into draft-4 JSON Schema.

    ``x-kubernetes-int-or-string`` becomes integer-or-string; with ``strict`` an object
    with listed properties (and no preserve-unknown-fields) rejects other keys, as
    ``kubectl apply`` does with its default strict field validation. Kubernetes
    extensions jsonschema does not know are dropped.
    """
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in ("description", "default"):
            continue
        if key == "properties":
            # ObjectMeta is validated by the API server itself, not pruned by the CRD
            # schema (which may only restrict metadata.name and generateName).
            out[key] = {k: to_jsonschema(v, strict=strict and k != "metadata")
                        for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, Mapping):
            out[key] = to_jsonschema(value, strict=strict)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [to_jsonschema(v, strict=strict) for v in value]
        else:
            out[key] = copy.deepcopy(value)
    if schema.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = copy.deepcopy(INT_OR_STRING_ANY_OF)
    if (
        strict
        and "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _path_of(parts: Iterator[Any] | Any) -> str:
    path = ""
    for part in parts:
        path = f"{path}[{part}]" if isinstance(part, int) else _join(path, str(part))
    return path


def schema_violations(schema: Schema, obj: Any) -> list[Violation]:
    """OpenAPI schema problems of ``obj`` (types, enums, bounds, required, unknown fields)."""
    validator = jsonschema.Draft4Validator(to_jsonschema(schema))
    found = []
    for err in validator.iter_errors(obj):
        path = _path_of(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            # Name the unknown field itself, as the API server does.
            allowed = set(err.schema.get("properties") or {})
            extra = sorted(set(err.instance) - allowed)
            path = _join(path, extra[0]) if extra else path
        elif err.validator == "required" and isinstance(err.validator_value, list):
            missing = [k for k in err.validator_value if k not in (err.instance or {})]
            path = _join(path, missing[0]) if missing else path
        found.append(Violation(field=path, message=err.message, source="schema"))
    return found


# --- CEL ----------------------------------------------------------------------------

_ENV = celpy.Environment()


@cache
def _program(expr: str) -> celpy.Runner:
    return _ENV.program(_ENV.compile(expr))


def compile_rule(expr: str) -> celpy.Runner:
    """Compile one CEL expression (raises ``celpy.CELParseError`` when it is not CEL)."""
    return _program(expr)


def to_cel(schema: Schema, value: Any) -> Any:
    """Convert a JSON value to CEL, typed by the schema as Kubernetes does (an integer
    in a ``number`` field is a double; int-or-string stays int or string)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        return celtypes.MapType(
            {
                celtypes.StringType(k): to_cel(
                    props.get(k) or (extra if isinstance(extra, Mapping) else {}), v
                )
                for k, v in value.items()
            }
        )
    if isinstance(value, list):
        return celtypes.ListType([to_cel(schema.get("items") or {}, v) for v in value])
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if schema.get("type") == "number" and isinstance(value, int | float):
        return celtypes.DoubleType(float(value))
    return celpy.json_to_cel(value)


def _evaluate(expr: str, self_value: Any) -> Any:
    result = _program(expr).evaluate({"self": self_value})
    if isinstance(result, celpy.CELEvalError):
        raise result
    return result


def cel_violations(schema: Schema, obj: Any) -> list[Violation]:
    """Evaluate every CEL rule at each place in ``obj`` where the schema puts one."""
    found: list[Violation] = []
    _cel_walk(schema, obj, "", "", found)
    return found


def _cel_walk(schema: Schema, obj: Any, path: str, schema_path: str,
              found: list[Violation]) -> None:
    rules = schema.get("x-kubernetes-validations") or []
    if rules:
        self_value = to_cel(schema, obj)
        for i, entry in enumerate(rules):
            rule_id = f"{schema_path}#{i}"
            field = path + (entry.get("fieldPath") or "")
            try:
                ok = _evaluate(entry["rule"], self_value)
            except celpy.CELEvalError as exc:
                found.append(Violation(field, f"rule could not be evaluated: {exc.args[0]}",
                                       "cel-error", rule_id))
                continue
            if ok is not True and ok != celtypes.BoolType(True):
                found.append(Violation(field, _message(entry, self_value), "cel", rule_id))
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            if key in props:
                _cel_walk(props[key], value, _join(path, key), _join(schema_path, key), found)
            elif isinstance(extra, Mapping):
                _cel_walk(extra, value, _join(path, key), schema_path + "{}", found)
    elif isinstance(obj, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(obj):
            _cel_walk(schema["items"], item, f"{path}[{i}]", schema_path + "[]", found)


def _message(entry: Mapping[str, Any], self_value: Any) -> str:
    """The rule's message: messageExpression when it evaluates to a string (as the API
    server does, falling back to message), else message."""
    if entry.get("messageExpression"):
        try:
            return str(_evaluate(entry["messageExpression"], self_value))
        except celpy.CELEvalError:
            pass
    return str(entry.get("message") or f"failed rule: {entry['rule']}")


def validate_resource(crd: Mapping[str, Any], obj: Mapping[str, Any]) -> list[Violation]:
    """Everything the API server would say about creating ``obj``: defaults first, then
    schema and CEL (an empty list means it would be accepted)."""
    schema = crd_schema(crd)
    defaulted = apply_defaults(schema, dict(obj))
    return schema_violations(schema, defaulted) + cel_violations(schema, defaulted)


# --- structural schema --------------------------------------------------------------

_FORBIDDEN_IN_JUNCTORS = ("type", "description", "default", "nullable", "additionalProperties",
                          "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
                          "x-kubernetes-embedded-resource", "x-kubernetes-validations")


def structural_problems(schema: Schema, *, require_descriptions: bool = True) -> list[str]:
    """Problems that make a schema non-structural (apiextensions.k8s.io/v1 rules), plus
    properties without a description (``kubectl explain`` would show nothing).

    Checked: every node has a ``type`` unless it is int-or-string or preserves unknown
    fields; anyOf/allOf/oneOf/not hold value validations only, except int-or-string's
    exact ``anyOf: [{type: integer}, {type: string}]``; ``properties`` and
    ``additionalProperties`` are exclusive; arrays have a single ``items`` schema;
    metadata restricts nothing but name and generateName; every default validates
    against its node.
    """
    problems: list[str] = []
    for path, node in iter_schema_nodes(schema):
        where = path or "<root>"
        int_or_string = bool(node.get("x-kubernetes-int-or-string"))
        if int_or_string:
            if "type" in node:
                problems.append(f"{where}: int-or-string must not set type")
            if "anyOf" in node and node["anyOf"] != INT_OR_STRING_ANY_OF:
                problems.append(f"{where}: int-or-string anyOf must be exactly "
                                f"{INT_OR_STRING_ANY_OF}")
        elif "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{where}: no type")
        for junctor in ("anyOf", "allOf", "oneOf", "not"):
            if junctor not in node or (junctor == "anyOf" and int_or_string):
                continue
            branches = node[junctor] if isinstance(node[junctor], list) else [node[junctor]]
            for branch in branches:
                for key in _FORBIDDEN_IN_JUNCTORS:
                    if key in branch:
                        problems.append(f"{where}: {junctor} must not set {key}")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{where}: both properties and additionalProperties")
        if node.get("type") == "array" and not isinstance(node.get("items"), Mapping):
            problems.append(f"{where}: array without a single items schema")
        if path == "metadata" and set(node) - {"type", "properties"}:
            problems.append("metadata: only type and name/generateName may be set")
        if path == "metadata" and set(node.get("properties") or {}) - {"name", "generateName"}:
            problems.append("metadata: only name and generateName may be restricted")
        if "default" in node:
            errors = list(jsonschema.Draft4Validator(to_jsonschema(node)).iter_errors(
                apply_defaults(node, node["default"])))
            if errors:
                problems.append(f"{where}: default {node['default']!r} is invalid: "
                                f"{errors[0].message}")
        if require_descriptions and path and path != "metadata" and not path.endswith(
            ("[]", "{}")
        ) and not node.get("description"):
            problems.append(f"{where}: no description")
    return problems

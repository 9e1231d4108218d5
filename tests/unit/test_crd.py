"""The LLMService CRD: accepts the examples, rejects bad input by field, mirrors models.py.

The emulated API server validates nothing, so these tests do what kube-apiserver would:
defaults, the openAPIV3Schema (jsonschema) and every CEL rule (celpy), see
tests/support/crd.py. The CRD object itself is checked with kubernetes-validate.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from enum import Enum
from typing import Any

import kubernetes_validate
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from tests.support.crd import (
    apply_defaults,
    cel_rules,
    cel_violations,
    compile_rule,
    crd_schema,
    iter_schema_nodes,
    load_crd,
    load_examples,
    structural_problems,
    validate_resource,
)

from llm_operator.api import constants
from llm_operator.api.errors import SpecErrors
from llm_operator.api.models import LLMServiceSpec, parse_llmservice
from llm_operator.planning import make_plan
from llm_operator.rendering.pod import image_for
from llm_operator.settings import Settings

CRD = load_crd()
SCHEMA = crd_schema(CRD)
SPEC_SCHEMA = SCHEMA["properties"]["spec"]
EXAMPLES = load_examples()
KUBERNETES_VERSION = "1.37.0"  # the newest schemas kubernetes-validate 1.37.0 ships


def _service(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND,
            "metadata": {"name": "svc", "namespace": "default"}, "spec": spec}


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


BASE_SPEC: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}}
ARCH = {"parameters": 13.0e9, "numLayers": 40, "hiddenSize": 5120,
        "numAttentionHeads": 40, "numKeyValueHeads": 40, "maxContext": 4096}


# --- 1. the examples -------------------------------------------------------------------


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize(("name", "body"), EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_example_is_accepted_by_crd_and_model(name: str, body: dict[str, Any]) -> None:
    assert validate_resource(CRD, body) == []
    # The rules also hold on the object as written (before the API server defaults it).
    assert cel_violations(SCHEMA, body) == []
    assert parse_llmservice(body).metadata.name == body["metadata"]["name"]


@pytest.mark.parametrize(("name", "body"), EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_crd_defaults_mean_what_model_defaults_mean(name: str, body: dict[str, Any]) -> None:
    """The operator sees API-server-defaulted objects; they must parse to the same spec."""
    defaulted = apply_defaults(SCHEMA, body)
    assert defaulted != body  # the example leaves something to the defaults
    assert parse_llmservice(defaulted).spec == parse_llmservice(body).spec


def test_crd_defaults_fill_every_optional_section_like_the_model() -> None:
    spec = {"model": {"name": "m", "volume": {"claimName": "c"},
                      "tokenSecretRef": {"name": "s"}, "architecture": ARCH}}
    defaulted = apply_defaults(SCHEMA, _service(spec))
    assert validate_resource(CRD, defaulted) == []
    parsed = parse_llmservice(defaulted).spec
    assert parsed == parse_llmservice(_service(spec)).spec
    assert defaulted["spec"]["engine"]["maxNumSeqs"] == "auto"
    assert defaulted["spec"]["model"]["tokenSecretRef"]["key"] == parsed.model.token_secret_ref.key  # type: ignore[union-attr]


def test_the_operators_defaults_reach_a_service_the_api_server_defaulted() -> None:
    """A service that leaves spec.image and spec.gpus.perNode out gets the operator's
    settings (LLMOP_DEFAULT_IMAGE, LLMOP_GPUS_PER_NODE): the CRD fills neither in."""
    body = _service({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                     "gpus": {"product": "NVIDIA-L4"}})
    svc = parse_llmservice(apply_defaults(SCHEMA, body))
    settings = Settings(default_image="registry.local/vllm:1", gpus_per_node=4)
    assert image_for(svc, settings) == "registry.local/vllm:1"
    plan = make_plan(svc.spec, gpus_per_node=settings.gpus_per_node)
    nodes = next(e for e in plan.explanations if e.name == "nodesPerReplica")
    assert (nodes.inputs["gpusPerNode"], nodes.inputs["gpusPerNodeFrom"]) == (
        4, "LLMOP_GPUS_PER_NODE")


# --- 2. bad input ----------------------------------------------------------------------

# (id, change to BASE_SPEC, field the CRD names, text in its message, field the pydantic
# model names or None when only the CRD's cross-field rules can tell)
BAD_CASES: list[tuple[str, dict[str, Any], str, str, str | None]] = [
    ("negative-replicas", {"replicas": -1}, "spec.replicas", "minimum", "spec.replicas"),
    ("zero-max-num-seqs", {"engine": {"maxNumSeqs": 0}}, "spec.engine.maxNumSeqs",
     '"auto" or an integer of at least 1', "spec.engine.maxNumSeqs"),
    ("zero-gpus", {"gpus": {"count": 0}}, "spec.gpus.count", "at least 1", "spec.gpus.count"),
    ("negative-gpus", {"gpus": {"count": -2}}, "spec.gpus.count", "at least 1",
     "spec.gpus.count"),
    ("gpu-memory-utilization-above-1", {"engine": {"gpuMemoryUtilization": 1.5}},
     "spec.engine.gpuMemoryUtilization", "maximum", "spec.engine.gpuMemoryUtilization"),
    ("gpu-memory-utilization-zero", {"engine": {"gpuMemoryUtilization": 0}},
     "spec.engine.gpuMemoryUtilization", "minimum", "spec.engine.gpuMemoryUtilization"),
    ("bad-tuning-mode", {"tuning": {"mode": "Sometimes"}}, "spec.tuning.mode",
     "is not one of", "spec.tuning.mode"),
    ("lowercase-adaptation-mode", {"adaptation": {"mode": "apply"}}, "spec.adaptation.mode",
     "is not one of", "spec.adaptation.mode"),
    ("bad-dtype", {"engine": {"dtype": "bf16"}}, "spec.engine.dtype", "is not one of",
     "spec.engine.dtype"),
    ("bad-quantization", {"model": {"quantization": "int4"}}, "spec.model.quantization",
     "is not one of", "spec.model.quantization"),
    ("tp-garbage", {"engine": {"tensorParallelSize": "lots"}},
     "spec.engine.tensorParallelSize", '"auto" or an integer', "spec.engine.tensorParallelSize"),
    ("gpu-count-garbage", {"gpus": {"count": "two"}}, "spec.gpus.count", '"auto" or an integer',
     "spec.gpus.count"),
    ("pp-zero", {"engine": {"pipelineParallelSize": 0}}, "spec.engine.pipelineParallelSize",
     "at least 1", "spec.engine.pipelineParallelSize"),
    ("dcp-zero", {"engine": {"decodeContextParallelSize": 0}},
     "spec.engine.decodeContextParallelSize", "at least 1",
     "spec.engine.decodeContextParallelSize"),
    ("max-model-len-zero", {"engine": {"maxModelLen": 0}}, "spec.engine.maxModelLen",
     "at least 1", "spec.engine.maxModelLen"),
    ("max-model-len-fraction", {"engine": {"maxModelLen": 4.5}}, "spec.engine.maxModelLen",
     "is not valid under any", "spec.engine.maxModelLen"),
    ("batched-tokens-garbage", {"engine": {"maxNumBatchedTokens": "many"}},
     "spec.engine.maxNumBatchedTokens", '"auto" or an integer', "spec.engine.maxNumBatchedTokens"),
    ("zero-concurrency", {"workload": {"concurrency": 0}}, "spec.workload.concurrency",
     "minimum", "spec.workload.concurrency"),
    ("zero-ttft-slo", {"workload": {"slo": {"ttftP95Ms": 0}}}, "spec.workload.slo.ttftP95Ms",
     "minimum", "spec.workload.slo.ttftP95Ms"),
    ("too-many-trials", {"tuning": {"maxTrials": 101}}, "spec.tuning.maxTrials", "maximum",
     "spec.tuning.maxTrials"),
    ("zero-step", {"adaptation": {"maxStepPercent": 0}}, "spec.adaptation.maxStepPercent",
     "minimum", "spec.adaptation.maxStepPercent"),
    ("fast-interval", {"adaptation": {"intervalSeconds": 1}}, "spec.adaptation.intervalSeconds",
     "minimum", "spec.adaptation.intervalSeconds"),
    ("zero-max-max-num-seqs", {"adaptation": {"maxMaxNumSeqs": 0}},
     "spec.adaptation.maxMaxNumSeqs", "at least 1", "spec.adaptation.maxMaxNumSeqs"),
    ("adaptation-min-above-max", {"adaptation": {"minMaxNumSeqs": 64, "maxMaxNumSeqs": 32}},
     "spec.adaptation.minMaxNumSeqs", "must not exceed maxMaxNumSeqs", None),
    ("tp-times-pp-not-gpu-count",
     {"gpus": {"count": 8}, "engine": {"tensorParallelSize": 2, "pipelineParallelSize": 2}},
     # A static message: kube-apiserver 1.37 refused the CRD while this rule had a
     # messageExpression printing the values (its estimated CEL cost was over budget).
     "spec.gpus.count", "must equal gpus.count when all three are pinned", None),
    ("gpu-count-not-multiple-of-tp", {"gpus": {"count": 8}, "engine": {"tensorParallelSize": 3}},
     "spec.engine.tensorParallelSize", "multiple of engine.tensorParallelSize", None),
    ("gpu-count-not-multiple-of-pp", {"gpus": {"count": 4}, "engine": {"pipelineParallelSize": 3}},
     "spec.engine.pipelineParallelSize", "multiple of engine.pipelineParallelSize", None),
    ("tp-does-not-divide-heads",
     {"model": {"architecture": ARCH}, "engine": {"tensorParallelSize": 16}},
     "spec.engine.tensorParallelSize", "must divide model.architecture.numAttentionHeads", None),
    ("max-model-len-beyond-context",
     {"model": {"architecture": ARCH}, "engine": {"maxModelLen": 8192}},
     "spec.engine.maxModelLen", "must not exceed model.architecture.maxContext", None),
    ("kv-heads-do-not-divide-heads",
     {"model": {"architecture": {**ARCH, "numKeyValueHeads": 6}}},
     "spec.model.architecture.numKeyValueHeads", "must divide numAttentionHeads", None),
    ("active-above-total-parameters",
     {"model": {"architecture": {**ARCH, "activeParameters": 2e10}}},
     "spec.model.architecture.activeParameters", "cannot exceed", None),
    ("zero-parameters", {"model": {"architecture": {**ARCH, "parameters": 0}}},
     "spec.model.architecture.parameters", "minimum", "spec.model.architecture.parameters"),
    ("architecture-incomplete",
     {"model": {"architecture": {k: v for k, v in ARCH.items() if k != "numLayers"}}},
     "spec.model.architecture.numLayers", "required", "spec.model.architecture.numLayers"),
    ("extra-args-port", {"engine": {"extraArgs": ["--port", "9000"]}}, "spec.engine.extraArgs",
     "must not set --host, --port, --model or --served-model-name", None),
    ("extra-args-host", {"engine": {"extraArgs": ["--host=0.0.0.0"]}}, "spec.engine.extraArgs",
     "the operator sets them", None),
    ("extra-args-model", {"engine": {"extraArgs": ["--model=other/model"]}},
     "spec.engine.extraArgs", "come from spec.model.name", None),
    ("extra-args-served-name", {"engine": {"extraArgs": ["--served_model_name=chat"]}},
     "spec.engine.extraArgs", "the operator sets them", None),
    ("extra-args-max-num-seqs", {"engine": {"extraArgs": ["--max-num-seqs=64"]}},
     # Static too (a messageExpression naming the flag was over the CEL cost budget); the
     # operator's own check names the flag (test_extra_args.py).
     "spec.engine.extraArgs", "must not set a flag that a field owns", None),
    ("extra-args-underscore-spelling", {"engine": {"extraArgs": ["--max_num_seqs", "64"]}},
     "spec.engine.extraArgs", "must not set a flag that a field owns", None),
    ("extra-args-short-tp", {"engine": {"extraArgs": ["-tp", "2"]}}, "spec.engine.extraArgs",
     "must not set a flag that a field owns", None),
    ("extra-args-negated-switch", {"engine": {"extraArgs": ["--no-enable-prefix-caching"]}},
     "spec.engine.extraArgs", "enablePrefixCaching", None),
    ("extra-args-one-string", {"engine": {"extraArgs": ["--gpu-memory-utilization 0.5"]}},
     "spec.engine.extraArgs", "gpuMemoryUtilization", None),
    ("extra-args-line-break", {"engine": {"extraArgs": ["--enforce-eager\n--max-num-seqs=9"]}},
     "spec.engine.extraArgs", "no line breaks", None),
    ("extra-args-leading-space", {"engine": {"extraArgs": [" --enforce-eager"]}},
     "spec.engine.extraArgs", "no surrounding", None),
    ("too-many-extra-args", {"engine": {"extraArgs": ["--enforce-eager"] * 65}},
     "spec.engine.extraArgs", "is too long", None),
    ("batched-tokens-below-max-num-seqs",
     {"engine": {"maxNumSeqs": 256, "maxNumBatchedTokens": 128}},
     "spec.engine.maxNumBatchedTokens", "at least maxNumSeqs", None),
    ("no-chunked-prefill-short-batch",
     {"engine": {"enableChunkedPrefill": False, "maxModelLen": 8192,
                 "maxNumBatchedTokens": 4096}},
     "spec.engine.maxNumBatchedTokens", "at least maxModelLen", None),
    ("typo-field", {"engine": {"maxNumSeq": 64}}, "spec.engine.maxNumSeq",
     "Additional properties", "spec.engine.maxNumSeq"),
    ("empty-model-name", {"model": {"name": ""}}, "spec.model.name", "non-empty",
     "spec.model.name"),
    ("secret-ref-without-name", {"model": {"tokenSecretRef": {"key": "token"}}},
     "spec.model.tokenSecretRef.name", "required", "spec.model.tokenSecretRef.name"),
    ("negative-gpu-memory", {"gpus": {"memoryGib": -80}}, "spec.gpus.memoryGib", "minimum",
     "spec.gpus.memoryGib"),
    ("bad-quantity", {"resources": {"shmSize": "16 GB"}}, "spec.resources.shmSize",
     "does not match", None),
    ("node-selector-number", {"scheduling": {"nodeSelector": {"gpu": 1}}},
     "spec.scheduling.nodeSelector.gpu", "is not of type 'string'",
     "spec.scheduling.nodeSelector.gpu"),
    ("bad-toleration-operator", {"scheduling": {"tolerations": [{"operator": "Maybe"}]}},
     "spec.scheduling.tolerations[0].operator", "is not one of", None),
    ("env-value-and-value-from",
     {"pod": {"env": [{"name": "KEY", "value": "x",
                       "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}},
     "spec.pod.env[0]", "exactly one of value and valueFrom", None),
    ("env-two-sources", {"pod": {"env": [{"name": "K", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}, "fieldRef": {"fieldPath": "metadata.name"}}}]}},
     "spec.pod.env[0].valueFrom", "exactly one of secretKeyRef", "spec.pod.env[0].valueFrom"),
    ("env-without-name", {"pod": {"env": [{"value": "x"}]}}, "spec.pod.env[0].name",
     "required", "spec.pod.env[0].name"),
    ("bad-cache-size", {"cache": {"sizeLimit": "lots"}}, "spec.cache.sizeLimit",
     "does not match", "spec.cache.sizeLimit"),
    ("toleration-exists-with-value", {"scheduling": {"tolerations": [
        {"key": "gpu", "operator": "Exists", "value": "x"}]}},
     "spec.scheduling.tolerations[0]", "takes no value", "spec.scheduling.tolerations[0]"),
    ("toleration-seconds-without-no-execute", {"scheduling": {"tolerations": [
        {"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 5}]}},
     "spec.scheduling.tolerations[0]", "needs effect NoExecute",
     "spec.scheduling.tolerations[0]"),
    ("toleration-without-key-or-exists", {"scheduling": {"tolerations": [{"value": "x"}]}},
     "spec.scheduling.tolerations[0]", "needs operator Exists",
     "spec.scheduling.tolerations[0]"),
    ("gpu-resource-in-kubernetes-io", {"gpus": {"resourceName": "kubernetes.io/gpu"}},
     "spec.gpus.resourceName", "no extended resources", "spec.gpus.resourceName"),
    ("sub-path-out-of-the-claim", {"model": {"volume": {"claimName": "m", "subPath": "a/../.."}}},
     "spec.model.volume.subPath", "relative path", "spec.model.volume.subPath"),
    ("endpoint-picker-service-without-port",
     {"routing": {"inferencePool": {"enabled": True, "endpointPickerRef": {"name": "epp"}}}},
     "spec.routing.inferencePool.endpointPickerRef", "port is required",
     "spec.routing.inferencePool.endpointPickerRef.port"),
]


def _bad_service(change: dict[str, Any]) -> dict[str, Any]:
    return _service(_merge(BASE_SPEC, change))


@pytest.mark.parametrize(("change", "field", "text", "model_field"),
                         [c[1:] for c in BAD_CASES], ids=[c[0] for c in BAD_CASES])
def test_bad_input_is_rejected_naming_the_field(
    change: dict[str, Any], field: str, text: str, model_field: str | None
) -> None:
    violations = validate_resource(CRD, _bad_service(change))
    assert {v.field for v in violations} == {field}, violations
    assert all(v.source != "cel-error" for v in violations), violations
    assert any(text in v.message for v in violations), [v.message for v in violations]
    if model_field is not None:
        with pytest.raises(SpecErrors) as err:
            parse_llmservice(_bad_service(change))
        assert model_field in [e.field for e in err.value.errors]


def test_missing_model_is_rejected() -> None:
    body = _service({"replicas": 1})
    assert [v.field for v in validate_resource(CRD, body)] == ["spec.model"]
    with pytest.raises(SpecErrors) as err:
        parse_llmservice(body)
    assert [e.field for e in err.value.errors] == ["spec.model"]


def test_every_cel_rule_is_exercised_by_a_bad_case() -> None:
    fired = {v.rule for c in BAD_CASES for v in validate_resource(CRD, _bad_service(c[1]))}
    every_rule = {r.rule_id for r in cel_rules(SCHEMA)}
    assert every_rule - fired == set()


GOOD_EDGE_CASES: list[tuple[str, dict[str, Any]]] = [
    ("zero-replicas", {"replicas": 0}),
    ("full-gpu-memory", {"engine": {"gpuMemoryUtilization": 1}}),
    ("tp-times-pp-is-count",
     {"gpus": {"count": 8}, "engine": {"tensorParallelSize": 4, "pipelineParallelSize": 2}}),
    ("tp-pinned-count-auto", {"engine": {"tensorParallelSize": 2}}),
    ("count-pinned-tp-divides", {"gpus": {"count": 4}, "engine": {"tensorParallelSize": 2}}),
    ("tp-divides-heads", {"model": {"architecture": ARCH}, "engine": {"tensorParallelSize": 8}}),
    ("max-model-len-at-context", {"model": {"architecture": ARCH},
                                  "engine": {"maxModelLen": 4096}}),
    ("adaptation-min-equals-max", {"adaptation": {"minMaxNumSeqs": 32, "maxMaxNumSeqs": 32}}),
    ("adaptation-min-with-auto-max", {"adaptation": {"minMaxNumSeqs": 512}}),
    ("unmanaged-flags-that-look-alike", {"engine": {"extraArgs": [
        "--model-loader-extra-config={}", "--max-num-partial-prefills=2",
        "--kv-cache-memory-bytes=2097152", "--served-model-names=x", "--portal=x",
        "--max-logprobs", "5"]}}),
    ("chunked-prefill-on-small-batch", {"engine": {"enableChunkedPrefill": True,
                                                   "maxModelLen": 8192,
                                                   "maxNumBatchedTokens": 2048}}),
    ("integer-parameters", {"model": {"architecture": {**ARCH, "parameters": 13000000000,
                                                       "activeParameters": 2600000000}}}),
    ("affinity", {"scheduling": {"affinity": {"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "x"}}}}]}}}}),
    ("pod-customisation", {"pod": {
        "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        "imagePullSecrets": [{"name": "registry"}], "serviceAccountName": "vllm",
        "labels": {"kueue.x-k8s.io/queue-name": "gpu"},
        "annotations": {"example.com/team": "search"}}}),
]


@pytest.mark.parametrize("change", [c[1] for c in GOOD_EDGE_CASES],
                         ids=[c[0] for c in GOOD_EDGE_CASES])
def test_edge_cases_are_accepted(change: dict[str, Any]) -> None:
    body = _bad_service(change)
    assert validate_resource(CRD, body) == []
    parse_llmservice(body)


# --- 3. the CRD mirrors models.py ------------------------------------------------------

# Constraints the CRD adds on top of the model, each for a reason (anything else that
# differs is drift). Keys: (schema path, keyword).
CRD_ONLY_CONSTRAINTS = {
    ("spec.gpus.product", "minLength"): "an empty product names no GPU",
    ("spec.gpus.resourceName", "minLength"): "an empty resource name is not a resource",
    ("spec.cache.claimName", "minLength"): "an empty claim name is not a claim",
    ("spec.engine.extraArgs", "maxItems"): "bounds the CEL rules' cost in the API server",
    ("spec.engine.extraArgs[]", "maxLength"): "bounds the CEL rules' cost in the API server",
    ("spec.pod.env", "maxItems"): "bounds the CEL rules' cost in the API server",
    # kube-apiserver 1.37 refused the CRD without it (the toleration rules' estimated cost).
    ("spec.scheduling.tolerations", "maxItems"): "bounds the CEL rules' cost in the API server",
    ("spec.cache.sizeLimit", "pattern"): "must be a Kubernetes quantity",
    ("spec.resources.cpu", "pattern"): "must be a Kubernetes quantity",
    ("spec.resources.memory", "pattern"): "must be a Kubernetes quantity",
    ("spec.resources.shmSize", "pattern"): "must be a Kubernetes quantity",
    ("spec.model.loadBandwidth", "pattern"): "must be a Kubernetes quantity",
}
# Every free string has a maxLength in the CRD (a bound on what is stored in etcd and
# on CEL costs); the parser does not need to repeat it unless it says more.
CRD_ONLY_KEYWORDS = {"maxLength"}
_BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                   "minLength", "maxLength", "minItems", "maxItems", "pattern")
_POSITIVE_OR_AUTO = "type(self) == string ? self == 'auto' : self >= 1"


def _strip_optional(annotation: Any) -> tuple[Any, ...]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in args if a is not type(None))
    return (annotation,)


def _expected_bounds(info: FieldInfo, integer: bool) -> dict[str, Any]:
    """The CRD keywords that say what the field's pydantic constraints say (for an
    integer, ``gt=0`` is written ``minimum: 1``)."""
    bounds: dict[str, Any] = {}
    for meta in info.metadata:
        if getattr(meta, "gt", None) is not None:
            if integer:
                bounds["minimum"] = meta.gt + 1
            else:
                bounds.update(minimum=meta.gt, exclusiveMinimum=True)
        if getattr(meta, "ge", None) is not None:
            bounds["minimum"] = meta.ge
        if getattr(meta, "lt", None) is not None:
            bounds.update(maximum=meta.lt, exclusiveMaximum=True)
        if getattr(meta, "le", None) is not None:
            bounds["maximum"] = meta.le
        if getattr(meta, "min_length", None) is not None:
            bounds["minLength"] = meta.min_length
        if getattr(meta, "max_length", None) is not None:
            bounds["maxLength"] = meta.max_length
        if getattr(meta, "pattern", None) is not None:
            bounds["pattern"] = meta.pattern
    return bounds


def _compare(model: type[BaseModel], schema: dict[str, Any], path: str) -> list[str]:
    """Every way ``schema`` differs from the pydantic ``model``, recursively."""
    problems: list[str] = []
    props = schema.get("properties") or {}
    aliases = {info.alias or name: info for name, info in model.model_fields.items()}
    problems += [f"{path}.{k}: in the CRD, not in {model.__name__}" for k in props
                 if k not in aliases]
    problems += [f"{path}.{k}: in {model.__name__}, not in the CRD" for k in aliases
                 if k not in props]
    required = {k for k, info in aliases.items() if info.is_required()}
    if required != set(schema.get("required") or []):
        problems.append(f"{path}: required {sorted(required)} in the model, "
                        f"{sorted(schema.get('required') or [])} in the CRD")
    for key, info in aliases.items():
        if key in props:
            problems += _compare_field(info, props[key], f"{path}.{key}")
    return problems


def _compare_field(info: FieldInfo, prop: dict[str, Any], path: str) -> list[str]:
    problems: list[str] = []
    kinds = _strip_optional(info.annotation)
    # Type.
    if set(kinds) == {int, typing.Literal["auto"]}:
        if not prop.get("x-kubernetes-int-or-string"):
            problems.append(f"{path}: the model takes an integer or 'auto', the CRD does not")
        rules = [r["rule"] for r in prop.get("x-kubernetes-validations") or []]
        if _POSITIVE_OR_AUTO not in rules:
            problems.append(f"{path}: no CEL rule that the value is 'auto' or >= 1")
        kind: Any = "int-or-string"
    else:
        assert len(kinds) == 1, f"{path}: unexpected annotation {info.annotation}"
        kind = kinds[0]
    origin = typing.get_origin(kind) or kind
    expected_type: str | None
    if isinstance(origin, type) and issubclass(origin, BaseModel):
        expected_type = "object"
    elif isinstance(origin, type) and issubclass(origin, Enum):
        expected_type = "string"
        values = [m.value for m in origin]
        if prop.get("enum") != values:
            problems.append(f"{path}: enum {values} in the model, {prop.get('enum')} in the CRD")
    else:
        expected_type = {int: "integer", float: "number", str: "string", bool: "boolean",
                         dict: "object", list: "array", "int-or-string": None}[origin]
    if prop.get("type") != expected_type:
        problems.append(f"{path}: type {expected_type} in the model, {prop.get('type')} in CRD")
    # Default.
    if info.default_factory is not None:
        made = info.default_factory()  # type: ignore[call-arg]
        made = made.model_dump() if isinstance(made, BaseModel) else made
        if isinstance(made, dict) and isinstance(origin, type) and issubclass(origin, BaseModel):
            if prop.get("default") != {}:
                problems.append(f"{path}: the model defaults the section, the CRD lacks "
                                "default: {}")
        elif prop.get("default", made) != made:
            problems.append(f"{path}: default {made!r} in the model, {prop['default']!r} in CRD")
    elif info.default is PydanticUndefined or info.default is None:
        if "default" in prop:
            problems.append(f"{path}: no default in the model, {prop['default']!r} in the CRD")
    else:
        default = info.default.value if isinstance(info.default, Enum) else info.default
        same_type = isinstance(default, float) or type(prop.get("default")) is type(default)
        if prop.get("default") != default or not same_type:  # 1 == True, but not in a CRD
            problems.append(f"{path}: default {default!r} in the model, "
                            f"{prop.get('default')!r} in the CRD")
    # Bounds.
    expected = _expected_bounds(info, integer=expected_type == "integer")
    for keyword in _BOUND_KEYWORDS:
        if keyword in expected and prop.get(keyword) != expected[keyword]:
            problems.append(f"{path}: {keyword} {expected[keyword]!r} in the model, "
                            f"{prop.get(keyword)!r} in the CRD")
        if keyword not in expected and keyword in prop and keyword != "exclusiveMinimum" \
                and (path, keyword) not in CRD_ONLY_CONSTRAINTS \
                and keyword not in CRD_ONLY_KEYWORDS:
            problems.append(f"{path}: {keyword} {prop[keyword]!r} in the CRD, not in the model")
        if (keyword == "exclusiveMinimum" and prop.get(keyword)
                and not expected.get("exclusiveMinimum")):
            problems.append(f"{path}: exclusiveMinimum in the CRD, not in the model")
    items = prop.get("items") or {}
    for keyword in _BOUND_KEYWORDS:
        if keyword in items and (path + "[]", keyword) not in CRD_ONLY_CONSTRAINTS:
            problems.append(f"{path}[]: {keyword} in the CRD, not in the model")
    # Nested sections.
    if isinstance(origin, type) and issubclass(origin, BaseModel):
        problems += _compare(origin, prop, path)
    return problems


def test_crd_and_model_agree_on_fields_types_defaults_and_bounds() -> None:
    assert _compare(LLMServiceSpec, SPEC_SCHEMA, "spec") == []


def test_drift_check_notices_a_renamed_field() -> None:
    """The comparison can fail: rename one nested field and change one default."""
    drifted = copy.deepcopy(SPEC_SCHEMA)
    engine = drifted["properties"]["engine"]["properties"]
    engine["maxNumSeq"] = engine.pop("maxNumSeqs")
    drifted["properties"]["tuning"]["properties"]["maxTrials"]["default"] = 10
    problems = _compare(LLMServiceSpec, drifted, "spec")
    assert "spec.engine.maxNumSeq: in the CRD, not in EngineSpec" in problems
    assert "spec.engine.maxNumSeqs: in EngineSpec, not in the CRD" in problems
    assert "spec.tuning.maxTrials: default 12 in the model, 10 in the CRD" in problems


def test_crd_only_constraints_still_exist() -> None:
    nodes = dict(iter_schema_nodes(SCHEMA))
    assert [k for k in CRD_ONLY_CONSTRAINTS if k[1] not in nodes.get(k[0], {})] == []


# --- 4. the CRD object itself ----------------------------------------------------------


def test_crd_is_structural_and_every_field_is_described() -> None:
    assert structural_problems(SCHEMA) == []


def test_structural_checker_can_fail() -> None:
    broken = copy.deepcopy(SCHEMA)
    spec = broken["properties"]["spec"]["properties"]
    del spec["replicas"]["type"]
    del spec["image"]["description"]
    spec["gpus"]["properties"]["count"]["anyOf"] = [{"type": "integer", "minimum": 1},
                                                    {"type": "string"}]
    assert structural_problems(broken) == [
        "spec.image: no description",
        "spec.replicas: no type",
        "spec.gpus.count: int-or-string anyOf must be exactly "
        "[{'type': 'integer'}, {'type': 'string'}]",
    ]


def test_crd_passes_kubernetes_validate_strict() -> None:
    kubernetes_validate.validate(CRD, KUBERNETES_VERSION, strict=True)


def test_crd_names_match_the_constants() -> None:
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == constants.CRD_NAME
    assert spec["group"] == constants.GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == constants.KIND
    assert spec["names"]["plural"] == constants.PLURAL
    assert spec["names"]["singular"] == constants.SINGULAR
    assert spec["names"]["shortNames"] == list(constants.SHORT_NAMES)
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (
        constants.VERSION, True, True)
    # The scale subresource points at real fields (kubectl scale, HPA, KEDA).
    assert version["subresources"] == {"status": {}, "scale": {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}}
    props = version["schema"]["openAPIV3Schema"]["properties"]
    assert props["spec"]["properties"]["replicas"]["type"] == "integer"
    assert props["status"]["properties"]["replicas"]["type"] == "integer"
    assert props["status"]["properties"]["selector"]["type"] == "string"


def _schema_has_path(json_path: str) -> bool:
    """Whether a printer column's simple JSONPath names a field the schema declares."""
    node: Any = SCHEMA
    path = json_path.replace('[?(@.type=="Ready")]', "[]").lstrip(".")
    if path == "metadata.creationTimestamp":
        return True
    for part in path.split("."):
        many = part.endswith("[]")
        node = (node.get("properties") or {}).get(part.removesuffix("[]"))
        if node is None:
            return False
        if many:
            node = node["items"]
    return True


def test_printer_columns_show_what_was_chosen() -> None:
    columns = {c["name"]: c for c in CRD["spec"]["versions"][0]["additionalPrinterColumns"]}
    default_view = [n for n, c in columns.items() if not c.get("priority")]
    assert default_view == ["Model", "GPUs", "TP", "MaxNumSeqs", "Ready", "Age"]
    assert columns["Model"]["jsonPath"] == ".spec.model.name"
    assert columns["GPUs"]["jsonPath"] == ".status.plan.gpusPerReplica"
    assert columns["TP"]["jsonPath"] == ".status.plan.tensorParallelSize"
    assert columns["MaxNumSeqs"]["jsonPath"] == ".status.engine.maxNumSeqs"
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Age"] == {"name": "Age", "type": "date",
                              "jsonPath": ".metadata.creationTimestamp"}
    # -o wide: the tuning result apart from the upper bound (issue 32: it is not one).
    assert columns["Tuned"]["jsonPath"] == ".status.adaptation.tuned"
    assert columns["CapMax"]["jsonPath"] == ".status.adaptation.bounds.upper"
    for column in columns.values():
        assert _schema_has_path(column["jsonPath"]), column
        if column["type"] == "integer":
            node = SCHEMA
            for part in column["jsonPath"].lstrip(".").split("."):
                node = node["properties"][part]
            assert node["type"] == "integer", column


def test_cel_rules_compile_and_are_well_formed() -> None:
    nodes = dict(iter_schema_nodes(SCHEMA))
    rules = cel_rules(SCHEMA)
    assert len(rules) >= 15
    for rule in rules:
        compile_rule(rule.rule)
        if rule.message_expression:
            compile_rule(rule.message_expression)
        assert rule.message and "\n" not in rule.message, rule.rule_id
        if rule.field_path:
            target = rule.schema_path + rule.field_path
            assert target in nodes, f"{rule.rule_id}: fieldPath {rule.field_path} not in schema"


@pytest.mark.parametrize("name", ["a" * 64, "1st-model", "llama.3", "Llama", "llama-"])
def test_a_name_no_service_could_have_is_refused_by_the_crd_and_the_parser(name: str) -> None:
    # The name is also the Service's (an RFC 1035 label) and a label value (<= 63).
    body = {**_service(BASE_SPEC), "metadata": {"name": name}}
    assert [v.field for v in validate_resource(CRD, body)] == ["metadata.name"]
    with pytest.raises(SpecErrors) as err:
        parse_llmservice(body)
    (error,) = err.value.errors
    assert error.field == "metadata.name" and "at most 63 characters" in error.fix


def test_the_longest_allowed_name_renders_valid_children() -> None:
    from llm_operator.planning import make_plan
    from llm_operator.rendering import render_all
    from llm_operator.settings import Settings
    from llm_operator_sandbox.k8s_rules import object_errors

    svc = parse_llmservice({**_service({**BASE_SPEC, "gpus": {"product": "H100"}}),
                            "metadata": {"name": "a" * 63}})
    from llm_operator.tuning.job import build_tuning_job

    plan = make_plan(svc.spec)
    children = render_all(svc, plan, Settings(), pod_monitor=True)
    children.append(build_tuning_job(svc, plan, Settings(), "f" * 64))
    assert {c["kind"] for c in children} >= {"Deployment", "Service", "PodMonitor", "Job"}
    for child in children:
        assert object_errors(child) == [], child["kind"]


def test_every_free_string_in_the_crd_is_bounded() -> None:
    """No string a user can make arbitrarily large: each has a maxLength, an enum, or is
    an int-or-string whose CEL rule admits only "auto"."""
    unbounded = []

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "string" and not ({"maxLength", "enum"} & set(node)):
            unbounded.append(path)
        for key, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{key}")
        for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
            if isinstance(node.get(key), dict):
                walk(node[key], path + suffix)

    walk(SCHEMA["properties"]["spec"], "spec")
    assert unbounded == []


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"model": {"name": "https://huggingface.co/meta-llama/Llama-3.1-8B"}}, "spec.model.name",
     "not a Hugging Face model id"),
    ({"model": {"name": "meta llama/8b"}}, "spec.model.name", "not a Hugging Face model id"),
    ({"replicas": 100000}, "spec.replicas", "less than or equal to 1000"),
    ({"gpus": {"memoryGib": 80000}}, "spec.gpus.memoryGib", "less than or equal to 1024"),
])
def test_implausible_values_are_refused_by_the_crd_and_the_parser(
        change: dict[str, Any], field: str, words: str) -> None:
    body = _bad_service(change)
    assert [v.field for v in validate_resource(CRD, body)] == [field]
    with pytest.raises(SpecErrors) as err:
        parse_llmservice(body)
    (error,) = err.value.errors
    assert error.field == field and words in error.problem, error


def test_fields_the_api_server_dropped_are_found_from_the_last_applied_configuration() -> None:
    from llm_operator.api.models import LAST_APPLIED, dropped_fields
    from llm_operator_sandbox.k8s_rules import prune

    given = _service(_merge(BASE_SPEC, {
        "engine": {"maxNumSeq": 64},                       # a typo: pruned as unknown
        "scheduling": {"tolerations": [{"key": "gpu", "operator": "Exists", "efect": "x"}]},
        "replicas": 2}))
    stored = prune(SCHEMA, given)  # what the API server keeps of it
    stored["metadata"] = {"name": "svc", "annotations": {LAST_APPLIED: json.dumps(given)}}
    assert dropped_fields(stored) == ["spec.engine.maxNumSeq",
                                      "spec.scheduling.tolerations[0].efect"]
    # Nothing was dropped; and no annotation (Helm, server-side apply) says nothing.
    stored["metadata"]["annotations"][LAST_APPLIED] = json.dumps(stored)
    assert dropped_fields(stored) == []
    assert dropped_fields(given) == []

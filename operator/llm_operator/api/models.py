"""Typed models of the LLMService custom resource (parse at the boundary).

The field names mirror the CRD in ``crds/llmservices.llmops.dev.yaml`` through
camelCase aliases; a test keeps the two in step. Engine settings are either left
to the operator (``"auto"`` for numbers, absent for switches) or pinned by the
user, and a pinned value is never changed by tuning or adaptation.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from .constants import (
    API_VERSION,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_RUN_AS_USER,
)
from .errors import InputError, SpecError, SpecErrors

Auto = Literal["auto"]
AutoInt = int | Auto


class _Model(BaseModel):
    """Base: camelCase aliases, unknown fields rejected, populate by either name; no
    NaN or infinity (YAML's .nan and .inf, which no JSON client can send either)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )


class FieldProblem(ValueError):
    """A validator's refusal that carries its own fix (``parse_llmservice`` reports both)."""

    def __init__(self, problem: str, fix: str, at: str = "") -> None:
        self.problem = problem
        self.fix = fix
        self.at = at  # a path below the validated field, e.g. "[1].name"
        super().__init__(problem)


# Names and keys as the API server checks them where the pod spec refers to them
# (apimachinery IsDNS1123Subdomain, IsConfigMapKey), the same patterns as the CRD's.
SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# An extended resource: a domain prefix and a name (nvidia.com/gpu, amd.com/gpu).
RESOURCE_NAME_PATTERN = (r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
                         r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# A container image reference (the distribution/reference grammar kubelet parses): an
# optional registry host, lowercase path components, an optional tag and digest.
# Anything else fails at the pull (InvalidImageName) and the pod never starts.
_HOST = r"[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"{_HOST}(\.{_HOST})*(:[0-9]+)?"
_PATH = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
IMAGE_PATTERN = (rf"^({_DOMAIN}/)?{_PATH}(/{_PATH})*(:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                 r"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
REVISION_PATTERN = r"^[^\s]+$"
# An API group and a kind as the Gateway API Inference Extension's CRD checks them
# (spec.endpointPickerRef.group and .kind of an InferencePool).
GROUP_PATTERN = r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
KIND_PATTERN = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"
# What each pattern means, for the fix of a value that does not match it.
PATTERN_HELP = {
    SUBDOMAIN_PATTERN: "a Kubernetes object name: lowercase letters, digits, '-' and '.', "
                       "starting and ending with a letter or digit, e.g. hf-token",
    KEY_PATTERN: "a Secret or ConfigMap key: letters, digits, '-', '_' and '.', e.g. token",
    RESOURCE_NAME_PATTERN: "an extended resource with its domain, e.g. nvidia.com/gpu",
    IMAGE_PATTERN: "an image reference (registry/lowercase-path:tag), e.g. "
                   "vllm/vllm-openai:v0.11.0",
    REVISION_PATTERN: "a branch, tag or commit without spaces, e.g. main",
    GROUP_PATTERN: "an API group: empty for the core group (a Service), or a lowercase "
                   "DNS name, e.g. example.com",
    KIND_PATTERN: "a kind: letters, digits and '-', starting with a letter, e.g. Service",
}


class SecretKeyRef(_Model):
    name: str = Field(min_length=1, max_length=253, pattern=SUBDOMAIN_PATTERN)
    key: str = Field(default="token", min_length=1, max_length=253, pattern=KEY_PATTERN)

    @field_validator("key")
    @classmethod
    def _not_the_token(cls, v: str) -> str:
        if SECRET_TOKEN.search(v):
            raise FieldProblem(
                "is the access token itself, not the key of the Secret that holds it: it "
                "sits in clear text in the LLMService, and the pod finds no such key",
                "put the token in a Secret (kubectl create secret generic hf-token "
                "--from-literal=token=...) and give its name and key: {name: hf-token, "
                "key: token}")
        return v


class Architecture(_Model):
    """Facts about a model the built-in catalog does not know."""

    # Upper bounds far above any model (405B: 126 layers, 128 heads, 128k context) that
    # keep the planner's searches and arithmetic finite; the CRD says the same.
    parameters: float = Field(gt=0, le=1e14, description="Total parameters, e.g. 8.03e9")
    num_layers: int = Field(gt=0, le=1024)
    hidden_size: int = Field(gt=0, le=1_048_576)
    num_attention_heads: int = Field(gt=0, le=4096)
    num_key_value_heads: int = Field(gt=0, le=4096)
    head_dim: int | None = Field(default=None, gt=0, le=65536)
    max_context: int = Field(gt=0, le=100_000_000)
    vocab_size: int | None = Field(default=None, gt=0, le=100_000_000)
    active_parameters: float | None = Field(default=None, gt=0, le=1e14)  # mixture of experts

    @model_validator(mode="after")
    def _consistent(self) -> Architecture:
        """The CRD's CEL rules, for ``llm-operator plan`` too."""
        if self.num_attention_heads % self.num_key_value_heads:
            raise FieldProblem(
                f"numKeyValueHeads {self.num_key_value_heads} does not divide "
                f"numAttentionHeads {self.num_attention_heads} (grouped-query attention "
                "shares each KV head among whole groups)", "copy both from config.json",
                at=".numKeyValueHeads")
        if self.active_parameters is not None and self.active_parameters > self.parameters:
            raise FieldProblem(
                "activeParameters (per token, mixture of experts) exceeds parameters (total)",
                "swap them, or drop activeParameters", at=".activeParameters")
        return self


class ModelVolume(_Model):
    """A model already on a PersistentVolumeClaim instead of a hub download."""

    claim_name: str = Field(min_length=1, max_length=253, pattern=SUBDOMAIN_PATTERN)
    sub_path: str = Field(default="", max_length=1024)

    @field_validator("sub_path")
    @classmethod
    def _relative(cls, v: str) -> str:
        if v.startswith("/") or ".." in v.split("/"):
            raise FieldProblem(f"{v!r} is not a relative path inside the claim (the API "
                               "server refuses an absolute subPath or one with '..')",
                               "give the folder relative to the claim's root, e.g. models/llama")
        return v


class Quantization(StrEnum):
    NONE = "none"
    FP8 = "fp8"
    AWQ = "awq"
    GPTQ = "gptq"


# A Hugging Face repository id ("org/name" or a legacy "name"), as the CRD says too.
MODEL_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$"


class ModelSpec(_Model):
    name: str = Field(min_length=1, max_length=256, pattern=MODEL_ID_PATTERN,
                      description="Hugging Face id, or a served name with volume")
    revision: str | None = Field(default=None, max_length=256, pattern=REVISION_PATTERN)
    volume: ModelVolume | None = None
    token_secret_ref: SecretKeyRef | None = None
    architecture: Architecture | None = None
    quantization: Quantization = Quantization.NONE
    # Bytes per second vLLM reads the weights at from where they are stored (the cache
    # claim, the model volume or node disk): the startup probe's budget follows it.
    load_bandwidth: str | None = Field(default=None, max_length=64)

    @field_validator("load_bandwidth")
    @classmethod
    def _bandwidth(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            value = parse_quantity(v)
        except ValueError:
            raise FieldProblem(f"{v!r} is not a Kubernetes quantity (bytes per second)",
                               quantity_fix(v)) from None
        if value < MIN_LOAD_BANDWIDTH:
            raise FieldProblem(
                f"{v!r} per second is below 1Mi/s: the startup budget would run to days",
                "give the storage's sustained read rate, e.g. 125Mi (EBS gp3's baseline)")
        if value > QUANTITY_MAX:
            raise FieldProblem(f"{v!r} is more than Kubernetes can hold (2^63 - 1)",
                               "give a realistic rate, e.g. 2Gi")
        return v

    @model_validator(mode="after")
    def _hub_id(self) -> ModelSpec:
        """The Hugging Face hub's own rules for a repository id (huggingface_hub's
        validate_repo_id), for a model it downloads: no '--' or '..', no '.git' at the
        end, a name of at most 96 characters ending in a letter, digit or '_'."""
        if self.volume is not None:
            return self  # a served name only
        name = self.name.rpartition("/")[2]
        problem = None
        if "--" in self.name or ".." in self.name:
            problem = "has '--' or '..', which the hub does not allow in an id"
        elif self.name.endswith(".git"):
            problem = "ends with '.git', which the hub does not allow"
        elif len(name) > 96:
            problem = f"has a name of {len(name)} characters (the hub allows 96)"
        elif not (name[-1:].isalnum() or name.endswith("_")):
            problem = "ends with '-' or '.', which the hub does not allow"
        if problem:
            raise FieldProblem(f"{self.name!r} {problem}: vLLM could not download it",
                               "give the id as on huggingface.co, e.g. "
                               "meta-llama/Llama-3.1-8B-Instruct", at=".name")
        return self


class GPUSpec(_Model):
    count: AutoInt = "auto"
    product: str | None = None
    memory_gib: float | None = Field(default=None, gt=0, le=1024)
    # None: the operator's GPU class gives it (LLMOP_GPU_CLASS; nvidia.com/gpu for every
    # preset); the CRD sets no default, so that the class reaches every service.
    resource_name: str | None = Field(default=None, min_length=1, max_length=317,
                                      pattern=RESOURCE_NAME_PATTERN)

    @field_validator("resource_name")
    @classmethod
    def _extended(cls, v: str | None) -> str | None:
        if v is not None and "kubernetes.io/" in v:
            raise FieldProblem(f"{v!r} is in the kubernetes.io namespace, which holds no "
                               "extended resources (the API server refuses it in a pod)",
                               "use the device plugin's resource, e.g. nvidia.com/gpu")
        return v
    # None: the operator's LLMOP_GPUS_PER_NODE (the CRD sets no default, so that an
    # administrator's setting reaches every service that leaves it out).
    per_node: int | None = Field(default=None, ge=1)

    @field_validator("count")
    @classmethod
    def _positive(cls, v: AutoInt) -> AutoInt:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be at least 1 or 'auto'")
        return v


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


class Dtype(StrEnum):
    AUTO = "auto"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"


class KVCacheDtype(StrEnum):
    AUTO = "auto"
    FP8 = "fp8"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"


class EngineSpec(_Model):
    tensor_parallel_size: AutoInt = "auto"
    pipeline_parallel_size: AutoInt = "auto"
    # vLLM's --decode-context-parallel-size: the KV cache split by tokens over the
    # tensor-parallel ranks that would otherwise each hold a copy (MLA, or fewer KV heads
    # than ranks); no more GPUs. auto: planned only where one copy per rank would not
    # hold the workload (llm_operator.planning.decode_context_parallel_sizes).
    decode_context_parallel_size: AutoInt = "auto"
    max_model_len: AutoInt = "auto"
    gpu_memory_utilization: float = Field(default=DEFAULT_GPU_MEMORY_UTILIZATION, gt=0, le=1)
    max_num_seqs: AutoInt = "auto"
    max_num_batched_tokens: AutoInt = "auto"
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    dtype: Dtype = Dtype.AUTO
    kv_cache_dtype: KVCacheDtype = KVCacheDtype.AUTO
    extra_args: list[str] = Field(default_factory=list)

    @field_validator(
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "decode_context_parallel_size",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
    )
    @classmethod
    def _positive(cls, v: AutoInt) -> AutoInt:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be at least 1 or 'auto'")
        return v


class SLOSpec(_Model):
    """Latency objectives of the workload, p95, in milliseconds."""

    ttft_p95_ms: float = Field(default=2000, gt=0)
    itl_p95_ms: float = Field(default=100, gt=0)


class WorkloadSpec(_Model):
    input_tokens: int = Field(default=512, ge=1, le=10_000_000)
    output_tokens: int = Field(default=256, ge=1, le=10_000_000)
    concurrency: int = Field(default=32, ge=1, le=100_000)
    slo: SLOSpec = Field(default_factory=SLOSpec)
    # Tokens at the start of every prompt that are the same for all requests (a system
    # prompt): part of input_tokens. The tuner's load sends them; the adaptation checks
    # that vLLM's prefix cache hits them.
    shared_prefix_tokens: int = Field(default=0, ge=0, le=10_000_000)

    @model_validator(mode="after")
    def _prefix_within_prompt(self) -> WorkloadSpec:
        if self.shared_prefix_tokens >= self.input_tokens:
            raise FieldProblem(
                f"{self.shared_prefix_tokens} shared prefix tokens do not fit in prompts of "
                f"{self.input_tokens} tokens (the prefix is part of inputTokens)",
                "give the shared prefix's length, below inputTokens, or raise inputTokens",
                at=".sharedPrefixTokens")
        return self


class TuningMode(StrEnum):
    ON_ROLLOUT = "OnRollout"
    MANUAL = "Manual"
    DISABLED = "Disabled"


class TuningPlacement(StrEnum):
    """Where the tuning Job gets its GPUs (see the CRD's description of
    ``spec.tuning.placement`` and :mod:`llm_operator.tuning.placement`)."""

    SPARE = "Spare"  # extra GPUs at a lower priority that never preempts
    BORROW_REPLICA = "BorrowReplica"  # one serving replica stands down while tuning runs
    BEFORE_SERVING = "BeforeServing"  # a new service tunes before its server starts


class TuningSpec(_Model):
    mode: TuningMode = TuningMode.ON_ROLLOUT
    max_trials: int = Field(default=12, ge=1, le=100)
    # The lower end of a candidate's paired interval must clear 1 + this / 100 (issue 32).
    min_gain_percent: int = Field(default=5, ge=0, le=100)
    max_duration_minutes: int = Field(default=60, ge=1, le=24 * 60)
    max_retries: int = Field(default=2, ge=0, le=10)
    placement: TuningPlacement = TuningPlacement.SPARE
    # None: the operator's LLMOP_TUNING_PRIORITY_CLASS (Spare placement only).
    priority_class_name: str | None = Field(default=None, min_length=1, max_length=253,
                                            pattern=SUBDOMAIN_PATTERN)
    max_pending_minutes: int = Field(default=10, ge=1, le=240)


class AdaptationMode(StrEnum):
    APPLY = "Apply"
    RECOMMEND = "Recommend"
    DISABLED = "Disabled"


class PreemptionPolicy(StrEnum):
    AVOID = "Avoid"
    TOLERATE = "Tolerate"


class AdaptationSpec(_Model):
    mode: AdaptationMode = AdaptationMode.RECOMMEND
    preemptions: PreemptionPolicy = PreemptionPolicy.AVOID
    interval_seconds: int = Field(default=60, ge=5, le=86_400)
    cooldown_seconds: int = Field(default=600, ge=0, le=604_800)
    min_max_num_seqs: int = Field(default=1, ge=1)
    max_max_num_seqs: AutoInt = "auto"
    max_step_percent: int = Field(default=50, ge=1, le=100)
    # Apply changes the engine's admission cap in place (no rollout) where the engine
    # supports it; False: every change rolls the workload (--max-num-seqs).
    live_cap: bool = True

    @field_validator("max_max_num_seqs")
    @classmethod
    def _positive(cls, v: AutoInt) -> AutoInt:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be at least 1 or 'auto'")
        return v


class CacheSpec(_Model):
    """Where the model's files are cached between pod restarts.

    ``size_limit`` None: an emptyDir sized from the plan (the checkpoint plus a margin,
    see :func:`llm_operator.planning.model_cache_bytes`)."""

    claim_name: str | None = Field(default=None, min_length=1, max_length=253,
                                   pattern=SUBDOMAIN_PATTERN)
    size_limit: str | None = None

    @field_validator("size_limit")
    @classmethod
    def _quantity(cls, v: str | None) -> str | None:
        return _positive_quantity(v)


class ResourcesSpec(_Model):
    """CPU and memory of the vLLM container; unset: derived from the plan (see
    :func:`llm_operator.planning.pod_cpu` and :func:`~llm_operator.planning.pod_memory_bytes`)."""

    cpu: str | None = None
    memory: str | None = None
    shm_size: str = "16Gi"

    @field_validator("cpu", "memory", "shm_size")
    @classmethod
    def _quantity(cls, v: str | None) -> str | None:
        return _positive_quantity(v)


# The largest quantity Kubernetes holds in a resource (an int64 of base units).
QUANTITY_MAX = 2**63 - 1
# spec.model.loadBandwidth's floor (bytes per second).
MIN_LOAD_BANDWIDTH = 2**20


def _positive_quantity(v: str | None) -> str | None:
    if v is not None:
        try:
            value = parse_quantity(v)
        except ValueError:
            raise FieldProblem(f"{v!r} is not a Kubernetes quantity",
                               quantity_fix(v)) from None
        if value <= 0:
            raise FieldProblem(f"{v!r} is not more than 0", "give a positive size, e.g. 64Gi")
        if value > QUANTITY_MAX:
            raise FieldProblem(f"{v!r} is more than Kubernetes can hold (2^63 - 1)",
                               "give a realistic size, e.g. 64Gi")
    return v


# Kubernetes label keys, label values and annotation keys (apimachinery validation):
# a qualified name is an optional DNS-subdomain prefix and "/", then 1-63 characters of
# alphanumerics, "-", "_", "." that begin and end with an alphanumeric.
_NAME_PART = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
_PREFIX = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)"
QUALIFIED_NAME = re.compile(rf"^({_PREFIX}/)?{_NAME_PART}$")
LABEL_VALUE = re.compile(rf"^({_NAME_PART})?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")  # what the API server accepts


def _check_keys(values: dict[str, str], what: str, check_values: bool) -> dict[str, str]:
    for key, value in values.items():
        prefix = key.rpartition("/")[0]
        if not QUALIFIED_NAME.match(key) or len(prefix) > 253:
            raise FieldProblem(f"{what} key {key!r} is not a Kubernetes qualified name "
                               "([prefix/]name, name at most 63 alphanumerics, '-', '_', '.')",
                               "rename the key, e.g. example.com/team")
        if check_values and (len(value) > 63 or not LABEL_VALUE.match(value)):
            raise FieldProblem(f"label value {value!r} of {key!r} is not a valid label value "
                               "(at most 63 alphanumerics, '-', '_', '.')",
                               "use letters, digits, '-', '_' and '.', starting and ending "
                               "with a letter or digit")
    return values


class KeySelector(_Model):
    """A key of a Secret or ConfigMap in the service's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=SUBDOMAIN_PATTERN)
    key: str = Field(min_length=1, max_length=253, pattern=KEY_PATTERN)
    optional: bool | None = None


# What the API server accepts in an env var's fieldRef and resourceFieldRef.
FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
               "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
               "status.podIPs")
_FIELD_PATH_KEYED = re.compile(r"^metadata\.(labels|annotations)\['[^']+'\]$")
ENV_RESOURCES = ("limits.cpu", "limits.memory", "limits.ephemeral-storage", "requests.cpu",
                 "requests.memory", "requests.ephemeral-storage")
_DIVISORS = {"cpu": ("1m", "1"),
             "memory": ("1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti",
                        "1Pi", "1Ei")}


class ObjectFieldSelector(_Model):
    field_path: str = Field(min_length=1)
    api_version: str | None = None

    @model_validator(mode="after")
    def _supported(self) -> ObjectFieldSelector:
        if self.field_path not in FIELD_PATHS and not _FIELD_PATH_KEYED.match(self.field_path):
            raise FieldProblem(f"{self.field_path!r} is not a field the pod can expose (the "
                               "API server refuses it)", "use one of: " + ", ".join(FIELD_PATHS)
                               + ", metadata.labels['KEY'], metadata.annotations['KEY']",
                               at=".fieldPath")
        if self.api_version not in (None, "v1"):
            raise FieldProblem(f"{self.api_version!r} is not the pod's API version",
                               "leave it unset (v1)", at=".apiVersion")
        return self


class ResourceFieldSelector(_Model):
    resource: str = Field(min_length=1)
    container_name: str | None = None
    divisor: str | None = None

    @model_validator(mode="after")
    def _supported(self) -> ResourceFieldSelector:
        if self.resource not in ENV_RESOURCES and not self.resource.startswith(
                ("limits.hugepages-", "requests.hugepages-")):
            raise FieldProblem(f"{self.resource!r} is not a resource the pod can expose (the "
                               "API server refuses it)", "use one of: " + ", ".join(ENV_RESOURCES),
                               at=".resource")
        if self.container_name is not None:
            raise FieldProblem(f"names container {self.container_name!r}, and these variables "
                               "go into the vLLM, download and tuning containers, not all of "
                               "which are in every pod (the API server would refuse one)",
                               "leave it unset: it then means the container the variable "
                               "is in", at=".containerName")
        kind = self.resource.rpartition(".")[2]
        allowed = _DIVISORS.get("cpu" if kind == "cpu" else "memory")
        if self.divisor is not None and allowed and self.divisor not in allowed:
            raise FieldProblem(f"{self.divisor!r} is not a divisor the API server accepts for "
                               f"{self.resource}", "use one of: " + ", ".join(allowed),
                               at=".divisor")
        return self


class EnvVarSource(_Model):
    """Where an environment variable's value comes from (one source)."""

    secret_key_ref: KeySelector | None = None
    config_map_key_ref: KeySelector | None = None
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvVarSource:
        if sum(x is not None for x in (self.secret_key_ref, self.config_map_key_ref,
                                      self.field_ref, self.resource_field_ref)) != 1:
            raise ValueError("set exactly one of secretKeyRef, configMapKeyRef, fieldRef, "
                             "resourceFieldRef")
        return self


class EnvVar(_Model):
    """One environment variable, as in a container spec: a value or a valueFrom."""

    name: str = Field(min_length=1)
    value: str | None = None
    value_from: EnvVarSource | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not ENV_NAME.match(v):
            raise ValueError("must consist of letters, digits, '_', '-' or '.' and not "
                             "start with a digit")
        return v

    @field_validator("value")
    @classmethod
    def _no_token(cls, v: str | None) -> str | None:
        if v is not None and SECRET_TOKEN.search(v):
            raise FieldProblem(
                "holds what looks like an access token in clear text: anyone who can read "
                "the LLMService or its pods can read it",
                "keep it in a Secret and use valueFrom.secretKeyRef (for the Hugging Face "
                "token: spec.model.tokenSecretRef)")
        return v

    def rendered(self) -> dict[str, Any]:
        """The container-spec form (camelCase, only the fields set)."""
        out: dict[str, Any] = {"name": self.name}
        if self.value is not None:
            out["value"] = self.value
        if self.value_from is not None:
            out["valueFrom"] = self.value_from.model_dump(by_alias=True, exclude_none=True)
        return out


class LocalObjectReference(_Model):
    name: str = Field(min_length=1, max_length=253, pattern=SUBDOMAIN_PATTERN)


# Access tokens that must not sit in a spec in clear text: Hugging Face (hf_...).
SECRET_TOKEN = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")
# The API server's limit on the total size of an object's annotations (keys and values).
ANNOTATIONS_MAX_BYTES = 256 * 1024


class PodSpec(_Model):
    """What the vLLM pods (and the tuning Job's pod) carry besides what the operator
    sets: environment, pull secrets, service account, labels and annotations."""

    env: list[EnvVar] = Field(default_factory=list)
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list)
    service_account_name: str | None = Field(default=None, min_length=1, max_length=253,
                                             pattern=SUBDOMAIN_PATTERN)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    # The user the pods run as (vllm-openai names none, so it would be root): not root by
    # default, so that the pods pass the `restricted` Pod Security Standard; 0 = root.
    run_as_user: int = Field(default=DEFAULT_RUN_AS_USER, ge=0, le=2147483647)

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_keys(v, "label", check_values=True)

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, v: dict[str, str]) -> dict[str, str]:
        total = sum(len(k.encode()) + len(str(x).encode()) for k, x in v.items())
        # A margin for the annotations the operator adds to the pod template itself.
        if total > ANNOTATIONS_MAX_BYTES - 16 * 1024:
            raise FieldProblem(f"add up to {total:,} bytes, over the "
                               f"{(ANNOTATIONS_MAX_BYTES - 16 * 1024) // 1024} KiB the pod "
                               "template has room for (the API server allows 256 KiB in all)",
                               "keep large data in a ConfigMap and refer to it")
        return _check_keys(v, "annotation", check_values=False)


class RolloutSpec(_Model):
    """How the vLLM pods are replaced when their spec changes, and how each drains."""

    # 0: one pod at a time in place (no spare GPUs needed; one replica is an outage);
    # >= 1: that many extra replicas first, none taken down before its replacement serves.
    max_surge: int = Field(default=0, ge=0, le=1000)
    # vLLM's --shutdown-timeout: how long a replaced server may finish its requests.
    drain_seconds: int = Field(default=120, ge=0, le=3600)


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


class LLMServiceSpec(_Model):
    model: ModelSpec
    # None: the operator's LLMOP_DEFAULT_IMAGE (the CRD sets no default, so that the
    # administrator's choice reaches every service that leaves it out).
    image: str | None = Field(default=None, min_length=1, max_length=1024,
                              pattern=IMAGE_PATTERN)
    replicas: int = Field(default=1, ge=0, le=1000)
    gpus: GPUSpec = Field(default_factory=GPUSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    tuning: TuningSpec = Field(default_factory=TuningSpec)
    adaptation: AdaptationSpec = Field(default_factory=AdaptationSpec)
    cache: CacheSpec = Field(default_factory=CacheSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    pod: PodSpec = Field(default_factory=PodSpec)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    routing: RoutingSpec = Field(default_factory=RoutingSpec)


# metadata.name names the Service (an RFC 1035 label) and is a label value: the CRD's
# schema says the same (metadata.name's pattern and maxLength).
NAME_MAX = 63
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class ObjectMeta(BaseModel):
    """The part of metadata the logic needs; the rest is ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    name: str = Field(max_length=NAME_MAX, pattern=NAME_PATTERN)
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class LLMService(BaseModel):
    """One parsed LLMService: metadata plus the typed spec."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    metadata: ObjectMeta
    spec: LLMServiceSpec


# Kubernetes quantity suffixes (apimachinery resource.Quantity).
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
            "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18")}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                       r"((?:[KMGTPE]i)|[numkMGTPE]|(?:[eE][+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)))?$")


_UNIT_SLIPS = {"kb": "k", "mb": "M", "gb": "G", "tb": "T", "pb": "P", "kib": "Ki",
               "mib": "Mi", "gib": "Gi", "tib": "Ti", "pib": "Pi", "ki": "Ki", "mi": "Mi",
               "gi": "Gi", "ti": "Ti", "pi": "Pi", "g": "G", "t": "T", "cores": "",
               "core": "", "cpu": "", "cpus": "", "b": "", "bytes": ""}


def quantity_fix(text: str) -> str:
    """How to write ``text`` as a Kubernetes quantity: the likely intended spelling when
    the unit is a common slip (``64GB``, ``64gi``, ``8 cores``), and the units."""
    units = ("Kubernetes units: Ki, Mi, Gi, Ti (powers of 2) or k, M, G, T (powers of 10), "
             "m for thousandths; a bare number for cores or bytes")
    match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$", str(text))
    if match and match.group(2).lower() in _UNIT_SLIPS:
        unit = _UNIT_SLIPS[match.group(2).lower()]
        better = match.group(1) + unit
        alt = {"G": "Gi", "M": "Mi", "T": "Ti", "k": "Ki"}.get(unit)
        return (f"write {better!r}" + (f" (or {match.group(1) + alt!r} in powers of 2)"
                                       if alt else "") + f"; {units}")
    return f"give e.g. 64Gi or 8; {units}"


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes quantity (``100Gi``, ``1.5T``, ``500m``, ``1e9``) as a number of base
    units (bytes, cores). The grammar is the CRD's pattern; raises ``ValueError``."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 100Gi, 500G, 8, 500m)")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
        if suffix in _BINARY:
            return value * _BINARY[suffix]
        if suffix in _DECIMAL:
            return value * _DECIMAL[suffix]
        return value * (Decimal(10) ** Decimal(suffix[1:]))  # an exponent: 1e9
    except InvalidOperation as exc:
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from exc


def _loc_to_path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in ("int", "literal['auto']") or item.startswith(("literal[", "function-")):
            continue  # pydantic's union-branch markers: not part of the user's path
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def parse_llmservice(body: Mapping[str, Any]) -> LLMService:
    """Parse a custom resource body into a typed :class:`LLMService`.

    Raises :class:`SpecErrors` naming every invalid field by its path in the manifest
    (``spec.engine.maxNumSeqs``) with a fix.
    """
    too_big = list(ints_beyond_int64(body.get("spec"), "spec"))
    if too_big:
        raise SpecErrors([SpecError(path, f"{_shown(value)} is beyond a 64-bit integer, which "
                                    "is all the API server accepts", "give a realistic value")
                          for path, value in too_big])
    try:
        return LLMService.model_validate(
            {"metadata": body.get("metadata") or {}, "spec": body.get("spec") or {}}
        )
    except ValidationError as exc:
        errors: list[SpecError] = []
        seen: set[str] = set()
        for err in exc.errors():
            path = _loc_to_path(tuple(err["loc"]))
            if path in seen:  # a union reports one error per branch; say it once
                continue
            seen.add(path)
            if err["type"] == "extra_forbidden":
                errors.append(
                    SpecError(path, "unknown field", "remove it or check its spelling "
                              "(`kubectl explain llmservice.spec` lists the fields)")
                )
            elif err["type"] == "missing":
                errors.append(SpecError(path, "is required", "set it"))
            elif path == "spec.model.name" and err["type"] == "string_pattern_mismatch":
                errors.append(SpecError(
                    path, f"{err.get('input')!r} is not a Hugging Face model id",
                    "give the id as on huggingface.co, e.g. meta-llama/Llama-3.1-8B-Instruct "
                    "(letters, digits, '.', '_', '-', one '/')"))
            elif path == "metadata.name":
                errors.append(SpecError(
                    path, f"{err.get('input')!r} cannot name the service's Deployment, "
                    "Service and labels", f"rename it: at most {NAME_MAX} characters, "
                    "lowercase letters, digits and '-', starting with a letter and ending "
                    "with a letter or digit"))
            elif isinstance((err.get("ctx") or {}).get("error"), FieldProblem):
                problem = err["ctx"]["error"]
                errors.append(SpecError(path + problem.at, problem.problem, problem.fix))
            elif err["type"] == "string_pattern_mismatch" and \
                    (err.get("ctx") or {}).get("pattern") in PATTERN_HELP:
                errors.append(SpecError(path, f"{_shown(err.get('input'))} is not "
                                        + PATTERN_HELP[err["ctx"]["pattern"]].split(":")[0],
                                        "give " + PATTERN_HELP[err["ctx"]["pattern"]]))
            else:
                ctx = err.get("ctx") or {}
                bound = {"less_than_equal": f"give at most {ctx.get('le')}",
                         "less_than": f"give less than {ctx.get('lt')}",
                         "greater_than_equal": f"give at least {ctx.get('ge')}",
                         "greater_than": f"give more than {ctx.get('gt')}",
                         "string_too_long": f"shorten it to {ctx.get('max_length')} "
                                            "characters or fewer"}.get(err["type"])
                errors.append(
                    SpecError(path, f"{err['msg']} (got {_shown(err.get('input'))})",
                              bound or _number_fix(path, err.get("input"))
                              or "use a value the CRD describes for this field")
                )
        raise SpecErrors(errors) from None


def _number_fix(path: str, given: Any) -> str | None:
    """The fix for a number written as text with a unit (``"25%"``, ``"2m"``, ``"2s"``):
    the field's unit is in its name, and it takes a bare number."""
    if not isinstance(given, str):
        return None
    field = path.rpartition(".")[2]
    text = given.strip()
    if text.lower() == "auto":
        return f"write {field}: auto, in lower case (or a whole number)"
    if text.endswith("%"):
        return (f"give {field} as a count, e.g. 1, without quotes (percentages are not "
                "supported)")
    unit = next((u for suffix, u in (("Seconds", "seconds"), ("Minutes", "minutes"),
                                     ("Ms", "milliseconds")) if field.endswith(suffix)), None)
    if unit and re.match(r"^[0-9.]+\s*[a-z]+$", text):
        return f"give {field} as a bare number of {unit}, without quotes or a unit"
    return None


def ints_beyond_int64(value: Any, path: str) -> Iterator[tuple[str, int]]:
    """Integers in a body that no Kubernetes client can send (outside int64)."""
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        yield path, value
    elif isinstance(value, Mapping):
        for key, sub in value.items():
            yield from ints_beyond_int64(sub, f"{path}.{key}")
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from ints_beyond_int64(sub, f"{path}[{i}]")


def _shown(value: Any, limit: int = 80) -> str:
    """A user's value for a message: its repr, cut short when long."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise InputError(path, "no such file", "check the path") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory",
                         "give the YAML files in it, e.g. DIR/*.yaml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot be read ({exc.__class__.__name__}: {exc})",
                         "give a readable UTF-8 YAML file") from None


# The most values a document may expand to through YAML aliases (a "billion laughs"
# file of a few lines would otherwise take for ever to read).
YAML_MAX_VALUES = 1_000_000


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error (as in
    kubectl's YAML reader) instead of the last value silently winning, and a document
    that aliases expand past :data:`YAML_MAX_VALUES` values is an error."""

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        sizes: dict[int, int] = {}

        def size(n: yaml.Node) -> int:
            if id(n) not in sizes:
                sizes[id(n)] = 0  # a recursive alias counts once
                children: list[yaml.Node] = []
                if isinstance(n, yaml.MappingNode):
                    children = [x for pair in n.value for x in pair]
                elif isinstance(n, yaml.SequenceNode):
                    children = list(n.value)
                sizes[id(n)] = 1 + sum(size(c) for c in children)
            return sizes[id(n)]

        if node is not None and size(node) > YAML_MAX_VALUES:
            raise yaml.composer.ComposerError(
                None, None, f"aliases expand it to more than {YAML_MAX_VALUES:,} values",
                node.start_mark)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base class says so
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice in one mapping (the first "
                    "value would be lost)", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _documents(path: str, text: str) -> list[Any]:
    try:
        return list(yaml.load_all(text, Loader=_UniqueKeyLoader))  # noqa: S506 (a SafeLoader)
    except RecursionError:
        raise InputError(path, "nests mappings or lists too deeply to be a manifest",
                         "give an LLMService manifest (a few levels deep)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(path, f"is not valid YAML{where}: {problem}",
                         "correct the YAML (e.g. check indentation and brackets there)") from None


def load_services(paths: Sequence[str]) -> Iterator[tuple[str, LLMService]]:
    """Yield every LLMService document in the given YAML files (other kinds are skipped).

    Raises :class:`InputError` for a file that is missing, is not YAML or holds no
    LLMService at all (naming the kinds it does hold), and :class:`SpecErrors` with
    ``source`` set to the file for an LLMService that does not parse.
    """
    for path in paths:
        kinds: list[str] = []
        for doc in _documents(path, _read(path)):
            if isinstance(doc, list):
                raise InputError(path, "holds a YAML list, not an LLMService manifest",
                                 "remove the leading '- ' and give each LLMService as its own "
                                 "document, separated by '---'")
            if doc is not None and not isinstance(doc, dict):
                kinds.append(f"a {type(doc).__name__} value, not a manifest")
                continue
            if doc is None:
                continue
            kind = doc.get("kind")
            if kind != "LLMService":
                kinds.append(str(kind) if kind else "(no kind)")
                continue
            if doc.get("apiVersion") != API_VERSION:
                raise InputError(path, f"LLMService {(doc.get('metadata') or {}).get('name')!r} "
                                 f"has apiVersion {doc.get('apiVersion')!r}",
                                 f"set `apiVersion: {API_VERSION}`")
            try:
                svc = parse_llmservice(doc)
            except SpecErrors as exc:
                exc.source = path
                raise
            kinds.append("LLMService")
            yield path, svc
        if "LLMService" not in kinds:
            found = f"found: {', '.join(sorted(set(kinds)))}" if kinds else "the file is empty"
            raise InputError(path, f"holds no LLMService ({found})",
                             "give a manifest with `apiVersion: llmops.dev/v1alpha1` and "
                             "`kind: LLMService`")


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _missing(given: Any, stored: Any, path: str) -> Iterator[str]:
    if isinstance(given, Mapping) and isinstance(stored, Mapping):
        for key, value in given.items():
            sub = f"{path}.{key}"
            if key not in stored:
                yield sub
            else:
                yield from _missing(value, stored[key], sub)
    elif isinstance(given, list) and isinstance(stored, list) and len(given) == len(stored):
        for i, (g, s) in enumerate(zip(given, stored, strict=True)):
            yield from _missing(g, s, f"{path}[{i}]")


def dropped_fields(body: Mapping[str, Any]) -> list[str]:
    """Fields of the spec the user applied that the API server dropped (pruned as
    unknown, which clients without strict field validation do not report), found by
    comparing the stored spec with kubectl's last-applied configuration (set by
    ``kubectl apply`` and by tools that apply the same way, e.g. Argo CD's default).
    Empty when there is no such annotation: Helm and server-side apply keep none."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    try:
        last = json.loads(annotations.get(LAST_APPLIED) or "{}")
    except ValueError:
        return []
    if not isinstance(last, Mapping):
        return []
    return list(_missing(last.get("spec"), body.get("spec") or {}, "spec"))


def dropped_message(dropped: Sequence[str]) -> str:
    """One line for status and an Event: which applied fields the API server dropped."""
    return (f"the API server dropped unknown field(s) {', '.join(dropped)} of the applied "
            "spec (misspelt, or not in this CRD version): check the spelling against "
            "`kubectl explain llmservice.spec`, and apply with --validate=strict to be "
            "told at once")

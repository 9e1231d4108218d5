"""Typed models of the LLMService custom resource (parse at the boundary).

The field names mirror the CRD in ``crds/llmservices.llmops.dev.yaml`` through
camelCase aliases; a test keeps the two in step. Engine settings are either left
to the operator (``"auto"`` for numbers, absent for switches) or pinned by the
user, and a pinned value is never changed by tuning or adaptation.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from .constants import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_GPU_RESOURCE,
)
from .errors import SpecError, SpecErrors

Auto = Literal["auto"]
AutoInt = int | Auto


class _Model(BaseModel):
    """Base: camelCase aliases, unknown fields rejected, populate by either name."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


class SecretKeyRef(_Model):
    name: str = Field(min_length=1)
    key: str = Field(default="token", min_length=1)


class Architecture(_Model):
    """Facts about a model the built-in catalog does not know."""

    parameters: float = Field(gt=0, description="Total parameters, e.g. 8.03e9")
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    max_context: int = Field(gt=0)
    vocab_size: int | None = Field(default=None, gt=0)
    active_parameters: float | None = Field(default=None, gt=0)  # mixture of experts


class ModelVolume(_Model):
    """A model already on a PersistentVolumeClaim instead of a hub download."""

    claim_name: str = Field(min_length=1)
    sub_path: str = ""


class Quantization(StrEnum):
    NONE = "none"
    FP8 = "fp8"
    AWQ = "awq"
    GPTQ = "gptq"


class ModelSpec(_Model):
    name: str = Field(min_length=1, description="Hugging Face id, or a served name with volume")
    revision: str | None = None
    volume: ModelVolume | None = None
    token_secret_ref: SecretKeyRef | None = None
    architecture: Architecture | None = None
    quantization: Quantization = Quantization.NONE


class GPUSpec(_Model):
    count: AutoInt = "auto"
    product: str | None = None
    memory_gib: float | None = Field(default=None, gt=0)
    resource_name: str = DEFAULT_GPU_RESOURCE
    # None: the operator's LLMOP_GPUS_PER_NODE (the CRD sets no default, so that an
    # administrator's setting reaches every service that leaves it out).
    per_node: int | None = Field(default=None, ge=1)

    @field_validator("count")
    @classmethod
    def _positive(cls, v: AutoInt) -> AutoInt:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be at least 1 or 'auto'")
        return v


class SchedulingSpec(_Model):
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] | None = None
    priority_class_name: str | None = None


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
    input_tokens: int = Field(default=512, ge=1)
    output_tokens: int = Field(default=256, ge=1)
    concurrency: int = Field(default=32, ge=1)
    slo: SLOSpec = Field(default_factory=SLOSpec)


class TuningMode(StrEnum):
    ON_ROLLOUT = "OnRollout"
    MANUAL = "Manual"
    DISABLED = "Disabled"


class TuningSpec(_Model):
    mode: TuningMode = TuningMode.ON_ROLLOUT
    max_trials: int = Field(default=12, ge=1, le=100)
    max_duration_minutes: int = Field(default=60, ge=1, le=24 * 60)
    max_retries: int = Field(default=2, ge=0, le=10)


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
    interval_seconds: int = Field(default=60, ge=5)
    cooldown_seconds: int = Field(default=600, ge=0)
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
    """Where the model's files are cached between pod restarts."""

    claim_name: str | None = None
    size_limit: str = "100Gi"


class ResourcesSpec(_Model):
    cpu: str | None = None
    memory: str | None = None
    shm_size: str = "16Gi"


class LLMServiceSpec(_Model):
    model: ModelSpec
    # None: the operator's LLMOP_DEFAULT_IMAGE (the CRD sets no default, so that the
    # administrator's choice reaches every service that leaves it out).
    image: str | None = Field(default=None, min_length=1)
    replicas: int = Field(default=1, ge=0)
    gpus: GPUSpec = Field(default_factory=GPUSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    tuning: TuningSpec = Field(default_factory=TuningSpec)
    adaptation: AdaptationSpec = Field(default_factory=AdaptationSpec)
    cache: CacheSpec = Field(default_factory=CacheSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)


class ObjectMeta(BaseModel):
    """The part of metadata the logic needs; the rest is ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    name: str
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
            else:
                errors.append(
                    SpecError(path, f"{err['msg']} (got {err.get('input')!r})",
                              "use a value the CRD describes for this field")
                )
        raise SpecErrors(errors) from None


def load_services(paths: Sequence[str]) -> Iterator[tuple[str, LLMService]]:
    """Yield every LLMService document in the given YAML files (other kinds are skipped)."""
    for path in paths:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") == "LLMService":
                yield path, parse_llmservice(doc)

"""What is served and on what: ``spec.model``, ``spec.gpus`` and ``spec.engine``."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator, model_validator

from ..constants import DEFAULT_GPU_MEMORY_UTILIZATION
from .base import AutoInt, FieldProblem, _Model
from .formats import (
    KEY_PATTERN,
    RESOURCE_NAME_PATTERN,
    REVISION_PATTERN,
    SECRET_TOKEN,
    SUBDOMAIN_PATTERN,
)
from .quantities import QUANTITY_MAX, parse_quantity, quantity_fix


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


# spec.model.loadBandwidth's floor (bytes per second).
MIN_LOAD_BANDWIDTH = 2**20

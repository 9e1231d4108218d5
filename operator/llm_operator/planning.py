"""Plan (pure): model facts + GPU facts + the spec give parallelism and batch limits.

Every number carries the formula and inputs that produced it, so
``llm-operator plan`` can explain itself.

STUB: the interface is fixed here; the body is being written (issue 2).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .models import LLMServiceSpec


class Explained(BaseModel):
    """One planned number with how it was reached."""

    model_config = ConfigDict(frozen=True)
    name: str  # e.g. "tensorParallelSize"
    value: float | int | str
    formula: str  # human-readable, e.g. "2 x layers x ceil(kv_heads/TP) x head_dim x bytes"
    inputs: dict[str, Any] = Field(default_factory=dict)
    source: str = "planned"  # "planned" | "pinned" (user) | "tuned" | "adapted"


class Plan(BaseModel):
    """The capacity and parallelism plan for one replica of an LLMService."""

    model_config = ConfigDict(frozen=True)
    model_name: str
    gpu_product: str
    gpu_memory_bytes: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpus_per_replica: int  # = TP x PP
    nodes_per_replica: int
    max_model_len: int
    dtype: str  # vLLM --dtype value actually passed ("auto" or pinned)
    weight_bytes: int  # whole model
    weight_bytes_per_gpu: int
    kv_bytes_per_token: int  # per GPU, after TP sharding of KV heads
    kv_token_capacity: int  # per replica
    max_num_seqs: int  # the largest the memory supports for the workload (or pinned)
    max_num_batched_tokens: int | None  # None: leave vLLM's default
    explanations: list[Explained]
    warnings: list[str] = Field(default_factory=list)


def make_plan(spec: LLMServiceSpec) -> Plan:
    """Plan one replica of ``spec``; raise :class:`~llm_operator.errors.SpecError` on
    a spec that cannot be served (naming the field and the fix)."""
    raise NotImplementedError

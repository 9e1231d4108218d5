"""The plan's types: :class:`Plan` and :class:`Explained` (a number with how it was reached).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .memory import BLOCK_SIZE

# --------------------------------------------------------------------------- types

class Explained(BaseModel):
    """One planned number with how it was reached."""

    model_config = ConfigDict(frozen=True)
    name: str  # e.g. "tensorParallelSize"
    value: float | int | str
    formula: str  # human-readable, e.g. "2 x layers x ceil(kv_heads/TP) x head_dim x bytes"
    inputs: dict[str, Any] = Field(default_factory=dict)
    source: str = "planned"  # "planned" | "pinned" (user) | "tuned" | "adapted"
    unit: str = ""  # "bytes", "tokens", "GPUs", ... (for display)


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
    # Added by the planner (all additive, with defaults):
    kv_cache_dtype: str = "auto"  # vLLM --kv-cache-dtype value
    usable_bytes_per_gpu: int = 0  # memory x utilization - overhead
    kv_budget_bytes_per_gpu: int = 0  # usable - weights per GPU
    block_size: int = BLOCK_SIZE
    tokens_per_request: int = 0  # workload input + output
    memory_max_num_seqs: int = 0  # what memory supports, before vLLM's cap
    max_num_seqs_cap: int = 0  # vLLM's own default max_num_seqs for this GPU
    # Bytes the checkpoint takes on disk (what is downloaded); 0: weight_bytes (a plan
    # written by hand). Differs from weight_bytes for fp8 quantized on load.
    download_bytes: int = 0
    # Engine settings the planner set otherwise than the spec or vLLM's default would, so
    # that vLLM starts: what and why (status.plan.adjustments, an Event).
    adjustments: list[str] = Field(default_factory=list)
    # Where each model fact came from: {"architecture": "config.json", "weightBytes":
    # "model.safetensors.index.json", ...}: catalog, config.json, the safetensors index,
    # or spec.model.architecture (status.plan.factSources).
    fact_sources: dict[str, str] = Field(default_factory=dict)
    # Seconds the startup probe (and the tuner, per server start) allows vLLM to load, and
    # the load bandwidth it follows from (llm_operator.knowledge.startup); 0: a plan written by hand
    # (the renderer then uses the built-in default).
    startup_budget_seconds: int = 0
    load_bytes_per_second: int = 0
    # vLLM's --decode-context-parallel-size: the KV cache split by tokens over this many of
    # the TP ranks (1: not split). With it block_size is 16 x this (vLLM's KV manager
    # counts a block of every rank's 16 tokens) and kv_bytes_per_token the average bytes a
    # token takes on one GPU.
    decode_context_parallel_size: int = 1
    # The --max-num-seqs the pods start with where spec.engine.maxNumSeqs is auto and no
    # tuning or adaptation has set one (0: max_num_seqs, the memory's limit, which stays the
    # bound of tuning and adaptation): the setting the SLO sizing chose
    # (llm_operator.planning.sizing), the tuner's hint too.
    start_max_num_seqs: int = 0
    # The SLO sizing's verdict as status.plan.slo shows it (llm_operator.planning.sizing): the
    # objective, the per-replica concurrency, the choice and its predicted figures, what
    # memory alone chose, whether the SLO is attainable and, where not, the fixes and the
    # model's measured error band. Empty: not sized (no prediction possible).
    slo: dict[str, Any] = Field(default_factory=dict)

    @property
    def start_seqs(self) -> int:
        """The --max-num-seqs the pods start with when nothing overrides it."""
        return self.start_max_num_seqs or self.max_num_seqs

"""``spec.workload``: the requests the service is sized for, and their latency SLO."""

from __future__ import annotations

from pydantic import Field, model_validator

from .base import FieldProblem, _Model


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

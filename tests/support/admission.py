"""How many requests a real vLLM engine ran at once, read from the engine's own clock.

A round of ``n`` requests of equal length is sent at once. vLLM's histograms
``vllm:request_queue_time_seconds`` (queued to first scheduled) and
``vllm:request_inference_time_seconds`` (first scheduled to last token) are stamped by the
engine core, so they do not move when the API server or the client lag behind it (on 2
shared cores the client saw all six streams of a capped round end within 40 ms: CI,
2026-12-06). With a cap ``c`` the round runs in ``n / c`` waves of one request time ``T``
each: queue time sums to ``T * c * w * (w - 1) / 2`` for ``w = n / c`` waves and inference
time to ``n * T``, so ``c = n / (2 * queue / inference + 1)``. With no cap below ``n``
nothing queues and the estimate is ``n``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from llm_operator.inpod.tuner.server import engine_metrics

QUEUE = "vllm:request_queue_time_seconds"
INFERENCE = "vllm:request_inference_time_seconds"


@dataclass(frozen=True)
class Round:
    """The engine's sums over one round: requests finished, seconds queued, seconds run."""

    requests: float
    queued_s: float
    running_s: float

    def concurrency(self) -> float:
        """Requests the engine ran at once, estimated as the module says."""
        assert self.requests > 0 and self.running_s > 0, self
        return self.requests / (2 * self.queued_s / self.running_s + 1)


def sums(url: str) -> Round:
    """The engine's totals so far (before and after a round; :func:`between` subtracts)."""
    m = engine_metrics(url)
    return Round(m.get(f"{INFERENCE}_count", 0.0), m.get(f"{QUEUE}_sum", 0.0),
                 m.get(f"{INFERENCE}_sum", 0.0))


def between(before: Round, after: Round) -> Round:
    return Round(after.requests - before.requests, after.queued_s - before.queued_s,
                 after.running_s - before.running_s)


def after_round(url: str, before: Round, n: int, timeout_s: float = 60.0) -> Round:
    """The round's sums once the engine has recorded all ``n`` requests (its histograms
    are observed just after the last chunk is sent, so a client can finish first)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = between(before, sums(url))
        if got.requests >= n or time.monotonic() > deadline:
            assert got.requests == n, (f"the engine recorded {got.requests:g} of {n} requests "
                                       f"in {timeout_s:g} s", got)
            return got
        time.sleep(0.5)

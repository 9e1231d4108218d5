"""What one benchmark run measured (pure), and what the caller provides to take it.

:class:`Measurement` is one run at one client concurrency (built by :func:`summarize` from
per-request samples); :func:`goodput` counts the output tokens of the requests that met
the SLO. :class:`Evaluator` and :class:`Session` are what the search is given to start
servers and measure them (real vLLM in :mod:`.runner`, a synthetic surface in the unit
tests): nothing here starts a server or reads a clock. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .space import SLO, Config


@dataclass(frozen=True)
class RequestSample:
    """One request of a benchmark: TTFT, the p95 of its inter-token gaps, tokens out."""

    ttft_s: float
    itl_p95_s: float
    output_tokens: int
    ok: bool = True


@dataclass(frozen=True)
class Measurement:
    """One benchmark run at one client concurrency against one server."""

    concurrency: int
    duration_s: float
    goodput_tps: float  # output tokens/s of requests meeting the SLO
    output_tps: float  # all output tokens/s
    request_rate: float  # completed requests/s
    ttft_p95_ms: float
    itl_p95_ms: float
    completed: int
    failed: int = 0
    good_fraction: float = 1.0
    ttft_miss: int = 0  # requests over the TTFT objective
    itl_miss: int = 0  # requests over the ITL objective
    running_max: float = 0.0  # peak running batch: sampled, never below running_mean
    running_mean: float = 0.0  # over the run's window, from the engine's counters
    waiting_mean: float = 0.0  # likewise (time requests spent WAITING / the window)
    preemptions: float = 0.0
    kv_usage_max: float = 0.0
    kv_tokens: float | None = None  # KV cache capacity the server reported
    metric_samples: int = 0  # /metrics samples behind the sampled peaks
    engine_itl_p95_ms: float | None = None  # the engine's ITL histogram over the window
    engine_finished: float | None = None  # requests the engine counted as finished
    requests: tuple[RequestSample, ...] = ()


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default) of ``values``; 0 when empty."""
    if not values:
        return 0.0
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def gap_p95(gaps: Sequence[float]) -> float:
    """The p95 of inter-token gaps, never below their mean; 0 when empty (pure).

    vLLM's benchmark records one gap per streamed message, timed when the client reads
    it. A client that falls behind (on a loaded machine; the engine and the load share
    the cores here) reads several messages in one go: their gaps come out near zero and
    the wait lands on one gap, so more than 5% of near-zero gaps can make the p95 read
    0.0 ms. The mean gap, (end - first token) / (tokens - 1), is what was seen on average
    however the messages were read, and a p95 below it is such an artefact."""
    if not gaps:
        return 0.0
    return max(percentile(gaps, 95), sum(gaps) / len(gaps))


def good(req: RequestSample, slo: SLO, extra_wait_s: float = 0.0) -> bool:
    """Whether one request met the SLO (optionally after waiting ``extra_wait_s`` more)."""
    return (
        req.ok
        and (req.ttft_s + extra_wait_s) * 1000.0 <= slo.ttft_ms
        and req.itl_p95_s * 1000.0 <= slo.itl_ms
    )


def goodput(requests: Iterable[RequestSample], duration_s: float, slo: SLO,
            extra_wait_s: float = 0.0) -> float:
    """Output tokens per second of the requests that met the SLO."""
    if duration_s <= 0:
        return 0.0
    return sum(r.output_tokens for r in requests if good(r, slo, extra_wait_s)) / duration_s


def summarize(
    concurrency: int,
    requests: Sequence[RequestSample],
    duration_s: float,
    slo: SLO,
    itls_s: Sequence[float] = (),
    server: dict[str, float] | None = None,
) -> Measurement:
    """Build a :class:`Measurement` from per-request samples (and the server's gauges).

    The aggregate ITL p95 is the p95 of ``itls_s`` (all inter-token gaps of all requests),
    never below their mean, else of the per-request p95s; the engine's histogram p95
    (``server["itl_p95_s"]``) is kept beside it as ``engine_itl_p95_ms``.
    """
    server = server or {}
    done = [r for r in requests if r.ok]
    n_good = sum(1 for r in done if good(r, slo))
    out_tokens = sum(r.output_tokens for r in done)
    dur = max(duration_s, 1e-9)
    return Measurement(
        concurrency=concurrency,
        duration_s=duration_s,
        goodput_tps=goodput(done, dur, slo),
        output_tps=out_tokens / dur,
        request_rate=len(done) / dur,
        ttft_p95_ms=percentile([r.ttft_s for r in done], 95) * 1000.0,
        # The client's gaps (gap_p95). The engine's own histogram is kept beside it
        # (engine_itl_p95_ms), not used: its first bucket ends at 10 ms, so any p95 below
        # that reads 9.5 ms (tune-noisy-1 run 2).
        itl_p95_ms=(gap_p95(itls_s) if itls_s else
                    percentile([r.itl_p95_s for r in done], 95)) * 1000.0,
        completed=len(done),
        failed=len(requests) - len(done),
        good_fraction=n_good / len(requests) if requests else 0.0,
        ttft_miss=sum(1 for r in done if r.ttft_s * 1000.0 > slo.ttft_ms),
        itl_miss=sum(1 for r in done if r.itl_p95_s * 1000.0 > slo.itl_ms),
        running_max=server.get("running_max", 0.0),
        running_mean=server.get("running_mean", 0.0),
        waiting_mean=server.get("waiting_mean", 0.0),
        preemptions=server.get("preemptions", 0.0),
        kv_usage_max=server.get("kv_usage_max", 0.0),
        kv_tokens=server.get("kv_tokens"),
        metric_samples=int(server.get("samples", 0)),
        engine_itl_p95_ms=(server["itl_p95_s"] * 1000.0 if "itl_p95_s" in server else None),
        engine_finished=server.get("finished"),
        requests=tuple(requests),
    )


# --- the evaluator the caller provides ---------------------------------------------------


class Session(Protocol):
    """A running server with one configuration."""

    @property
    def startup_s(self) -> float:
        """Seconds the server took to become healthy."""
        ...

    def measure(self, concurrency: int) -> Measurement:
        """Run the workload at ``concurrency`` clients and return what was measured."""
        ...

    def close(self) -> None:
        """Stop the server."""
        ...


class Evaluator(Protocol):
    """Starts servers. ``start`` raises :class:`TrialFailed` when a config cannot run."""

    def start(self, config: Config) -> Session:
        """Start a server with ``config`` (plus the fixed flags the evaluator owns)."""
        ...


class TrialFailed(Exception):
    """A configuration could not be started or measured (the reason is the message)."""


class Interrupted(BaseException):  # noqa: N818 - a stop request, like KeyboardInterrupt
    """The run must stop now (SIGTERM, or the tuner's own deadline is near): the search
    keeps what it measured and returns a partial outcome. A ``BaseException`` so that no
    ``except Exception`` on the way (a failed trial, a failed benchmark) swallows it."""


class Progress(Protocol):
    """Where the search reports what it does (log lines, a progress bar)."""

    def __call__(self, event: str, **info: object) -> None:
        """``event``: trial-start, trial-done, probe, note, budget."""
        ...

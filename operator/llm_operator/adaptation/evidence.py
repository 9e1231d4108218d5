"""What the policy decides on: the :class:`Observation` of one service over a window,
and whether its data can carry a decision (:func:`data_quality`)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from .thresholds import DEFAULT_POLICY, PolicySettings

ServiceKey = tuple[str, str]
"""``(namespace, name)`` of one LLMService."""

Evidence = dict[str, float | int | str | None]


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class Observation(_Camel):
    """What Prometheus saw of one LLMService over a window (per replica where it matters).

    ``None`` means the signal had no series (for latencies: no request finished in the
    window). ``error`` set means Prometheus could not be read: every signal is then None.
    """

    namespace: str
    name: str
    evaluated_at: float = Field(description="Unix time the query was evaluated at")
    window_seconds: float
    samples: int = Field(0, description="Scraped samples of the running gauge in the window")
    last_sample_at: float | None = Field(None, description="Unix time of the newest sample")
    replicas: int | None = Field(None, description="Pods exporting vLLM series")
    running_mean: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    waiting_capacity_mean: float | None = Field(
        None, description="Mean waiting for scheduling capacity (vLLM's reason label)"
    )
    kv_usage_mean: float | None = Field(None, description="Fraction 0..1")
    kv_usage_max: float | None = None
    preemption_rate: float | None = Field(None, description="Preemptions per second, all pods")
    request_rate: float | None = Field(None, description="Finished requests per second")
    ttft_p95_seconds: float | None = None
    itl_p95_seconds: float | None = None
    mean_prompt_tokens: float | None = None
    mean_generation_tokens: float | None = None
    kv_capacity_tokens: int | None = Field(
        None, description="KV-cache size of one replica in tokens (blocks x block size)"
    )
    kv_block_size: int | None = Field(None, description="Tokens per KV block")
    # What the engine reports of its admission cap (llm_operator.inpod.engine; absent where the
    # pods do not run it): lowest and highest cap in force over the replicas, and the
    # lowest of llmop_admission_live (0: some replica cannot change it live).
    cap_in_force_min: float | None = None
    cap_in_force_max: float | None = None
    live_cap_min: float | None = None
    engine_vllm_versions: tuple[str, ...] | None = Field(
        None, description="The vLLM releases the engines report running "
        "(llmop_engine_vllm_info), sorted; None where none reports one")
    prefix_cache_hit_rate: float | None = Field(
        None, description="Share 0..1 of the prompt tokens looked up in vLLM's prefix cache "
        "that it held (None: nothing was looked up)")
    prefix_cache_query_rate: float | None = Field(
        None, description="Prompt tokens looked up in the prefix cache per second, all pods")
    error: str | None = None

    @property
    def key(self) -> ServiceKey:
        """``(namespace, name)``."""
        return (self.namespace, self.name)

    @property
    def preemptions(self) -> float | None:
        """Preemptions in the window (rate x window)."""
        if self.preemption_rate is None:
            return None
        return self.preemption_rate * self.window_seconds

    @property
    def finished_requests(self) -> float:
        """Requests finished in the window (rate x window; 0 when not known)."""
        return (self.request_rate or 0.0) * self.window_seconds

    def summary(self) -> Evidence:
        """The numbers a person reads (rounded), for status and Events."""
        ms = 1000.0
        return {
            "samples": self.samples,
            "runningMean": _r(self.running_mean),
            "runningMax": _r(self.running_max),
            "waitingMean": _r(self.waiting_mean),
            "kvUsageMean": _r(self.kv_usage_mean, 3),
            "kvUsageMax": _r(self.kv_usage_max, 3),
            "preemptions": _r(self.preemptions, 1),
            "ttftP95Ms": _r(None if self.ttft_p95_seconds is None else self.ttft_p95_seconds * ms),
            "itlP95Ms": _r(None if self.itl_p95_seconds is None else self.itl_p95_seconds * ms),
            "prefixCacheHitRate": _r(self.prefix_cache_hit_rate, 3),
            "windowSeconds": self.window_seconds,
        }


def unavailable(namespace: str, name: str, now: float, window: float, why: str) -> Observation:
    """An observation that says Prometheus could not be read (every signal missing)."""
    return Observation(
        namespace=namespace, name=name, evaluated_at=now, window_seconds=window, error=why
    )


class MetricsReason(StrEnum):
    """Whether Prometheus gave the signals the policy needs (reasons of the
    ``MetricsAvailable`` condition)."""

    OBSERVED = "SeriesObserved"
    UNAVAILABLE = "PrometheusUnavailable"
    NO_SERIES = "NoSeries"
    NO_SAMPLES = "NoSamples"
    # NoSeries, NoSamples or TooLittleData while the pods are new (update.py: not a
    # Warning; the first scrapes are still filling the window)
    WAITING = "WaitingForFirstSamples"
    TOO_LITTLE = "TooLittleData"
    STALE = "StaleData"
    MISSING = "MissingSeries"


def data_quality(
    obs: Observation | None, now: float, s: PolicySettings = DEFAULT_POLICY
) -> tuple[MetricsReason, str]:
    """The one check of an observation's data (pure): the reason and a sentence saying
    what was seen or, when the data cannot carry a decision, what is wrong and what to
    check. Decisions hold on anything but :attr:`MetricsReason.OBSERVED`; the
    ``MetricsAvailable`` condition reports the same reason."""
    window = f"{s.window_seconds:.0f} s" if obs is None else f"{obs.window_seconds:.0f} s"
    if obs is None:
        return MetricsReason.NO_SERIES, (
            "no vLLM series for this service in Prometheus: check that its pods are scraped "
            "(PodMonitor) and that the series carry the service label "
            "(LLMOP_PROMETHEUS_SERVICE_LABEL)")
    if obs.error is not None:
        return MetricsReason.UNAVAILABLE, f"Prometheus is unavailable ({obs.error})"
    if obs.samples and obs.running_mean is not None and obs.last_sample_at is None:
        # Samples in the window, none now: Prometheus marked the series stale (its target
        # stopped answering, or the pods went), so the window's figures are of the past.
        return MetricsReason.STALE, (
            f"stale data: vllm:num_requests_running has {obs.samples} samples in the last "
            f"{window} but none now (Prometheus marked the series stale): is the scrape "
            "failing or are the pods gone?")
    if obs.samples == 0 or obs.running_mean is None or obs.last_sample_at is None:
        return MetricsReason.NO_SAMPLES, (
            f"no samples of vllm:num_requests_running in the last {window}")
    if obs.samples < s.min_samples:
        return MetricsReason.TOO_LITTLE, (
            f"too little data: {obs.samples} samples in the last {window}, "
            f"{s.min_samples} needed")
    age = now - obs.last_sample_at
    if age > s.max_staleness_seconds:
        return MetricsReason.STALE, (
            f"stale data: the newest sample is {age:.0f} s old "
            f"(limit {s.max_staleness_seconds:.0f} s): is the scrape failing?")
    missing = [n for n, v in (("vllm:num_requests_waiting", obs.waiting_mean),
                              ("vllm:kv_cache_usage_perc", obs.kv_usage_mean)) if v is None]
    if missing:
        return MetricsReason.MISSING, "missing series: " + ", ".join(missing)
    return MetricsReason.OBSERVED, (
        f"{obs.samples} samples of every signal in the last {window}, newest {age:.0f} s old")


def with_decode_context_parallel(obs: Observation | None, dcp: int) -> Observation | None:
    """The observation with vLLM's KV figures as its scheduler counts them under decode
    context parallelism (``status.plan.decodeContextParallelSize``): ``cache_config_info``
    reports the blocks of one rank and cache_config's 16-token block size, while the KV
    manager's block holds 16 tokens on each of the ``dcp`` ranks (vllm/v1/core/
    single_type_kv_cache_manager.py, ``kv_cache_spec.block_size * dcp_world_size``): the
    cache holds ``dcp`` times the tokens the labels multiply to."""
    if obs is None or dcp <= 1 or not obs.kv_capacity_tokens:
        return obs
    return obs.model_copy(update={
        "kv_capacity_tokens": obs.kv_capacity_tokens * dcp,
        "kv_block_size": (obs.kv_block_size or 1) * dcp})


def _r(v: float | None, nd: int = 2) -> float | None:
    return None if v is None else round(v, nd)

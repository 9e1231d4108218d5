"""Prometheus I/O for online adaptation (the one module that talks to Prometheus).

Every tick reads the signals of ALL LLMServices in one PromQL request: each signal is a
query aggregated ``by (namespace, llmservice)`` and tagged with a ``llmop_signal`` label
through ``label_replace``; the tagged vectors are joined with ``or`` (their label sets
differ by the tag, so nothing is dropped). :func:`signal_queries` lists the parts, one
line each, so they can be read, tested and pasted into Prometheus' console.

Signals (vLLM V1 names, checked against vLLM 0.32's ``/metrics``; older names as
fallbacks joined with ``or``):

- ``vllm:num_requests_running`` / ``vllm:num_requests_waiting`` (gauges; mean per replica
  and max), ``vllm:num_requests_waiting_by_reason{reason="capacity"}``
- ``vllm:kv_cache_usage_perc`` (``vllm:gpu_cache_usage_perc`` before vLLM 0.10)
- ``vllm:num_preemptions_total`` (counter; rate over the window, summed over replicas)
- ``vllm:time_to_first_token_seconds`` and ``vllm:inter_token_latency_seconds``
  (``vllm:time_per_output_token_seconds`` before) histograms: p95 over the window
- ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens`` histograms: mean
  request size; ``vllm:cache_config_info`` labels ``num_gpu_blocks`` x ``block_size``: KV
  cache size in tokens. Together they say how many sequences the KV cache holds.

vLLM does not export its ``--max-num-seqs``: the current cap comes from the operator's
status (or ``--current`` in the CLI). Where the pods run the live admission cap
(:mod:`llm_operator.inpod.engine`), ``llmop_admission_cap`` is the cap in force as each engine
reports it and ``llmop_admission_live`` whether it can change it live.

The service and namespace label names are settings (``LLMOP_PROMETHEUS_SERVICE_LABEL``,
``LLMOP_PROMETHEUS_NAMESPACE_LABEL``) for clusters that relabel differently from the
rendered PodMonitor. prometheus-api-client is blocking: async callers run
:func:`fetch_observations` in a thread.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from ..inpod.engine.cap import METRIC_CAP, METRIC_LIVE, METRIC_VLLM_INFO, VERSION_LABEL
from .evidence import Observation, ServiceKey, unavailable

log = logging.getLogger(__name__)

SIGNAL_LABEL = "llmop_signal"

# vLLM's series (V1 names; the ``_OLD`` ones are the pre-V1 fallbacks). The dashboard
# (tools/dashboard.py) imports these, so a rename here reaches its panels too.
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
VLLM_KV_USAGE = "vllm:kv_cache_usage_perc"
VLLM_KV_USAGE_OLD = "vllm:gpu_cache_usage_perc"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_REQUEST_SUCCESS = "vllm:request_success_total"
VLLM_TTFT = "vllm:time_to_first_token_seconds"
VLLM_ITL = "vllm:inter_token_latency_seconds"
VLLM_ITL_OLD = "vllm:time_per_output_token_seconds"
VLLM_PROMPT_TOKENS = "vllm:request_prompt_tokens"
VLLM_GENERATION_TOKENS = "vllm:request_generation_tokens"
VLLM_CACHE_CONFIG = "vllm:cache_config_info"
# Prompt tokens looked up in, and found in, vLLM's prefix cache (counters; before vLLM
# 0.11 named vllm:gpu_prefix_cache_*).
VLLM_PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
VLLM_PREFIX_HITS = "vllm:prefix_cache_hits_total"
VLLM_PREFIX_QUERIES_OLD = "vllm:gpu_prefix_cache_queries_total"
VLLM_PREFIX_HITS_OLD = "vllm:gpu_prefix_cache_hits_total"

# Signal name -> Observation field for the plain numeric signals.
_FIELDS = {
    "running_mean": "running_mean",
    "running_max": "running_max",
    "waiting_mean": "waiting_mean",
    "waiting_max": "waiting_max",
    "waiting_capacity_mean": "waiting_capacity_mean",
    "kv_usage_mean": "kv_usage_mean",
    "kv_usage_max": "kv_usage_max",
    "preemption_rate": "preemption_rate",
    "request_rate": "request_rate",
    "ttft_p95": "ttft_p95_seconds",
    "itl_p95": "itl_p95_seconds",
    "mean_prompt_tokens": "mean_prompt_tokens",
    "mean_generation_tokens": "mean_generation_tokens",
    "last_sample_at": "last_sample_at",
    "cap_in_force_min": "cap_in_force_min",
    "cap_in_force_max": "cap_in_force_max",
    "live_cap_min": "live_cap_min",
    "prefix_hit_rate": "prefix_cache_hit_rate",
    "prefix_query_rate": "prefix_cache_query_rate",
}


class QueryClient(Protocol):
    """The part of ``prometheus_api_client.PrometheusConnect`` this module uses."""

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any: ...


def connect(url: str, timeout_seconds: float = 10.0, retries: int = 1, *,
            ca_file: str | None = None, bearer_token_file: str | None = None,
            insecure_skip_verify: bool = False) -> QueryClient:
    """A ``PrometheusConnect`` for ``url`` (no request is made yet).

    Queries go by POST (the batched expression is long), with a timeout and few retries:
    the timer must not hang on a dead Prometheus; the next tick retries anyway.

    TLS is verified: against ``ca_file`` when given (an in-cluster Prometheus behind a
    cluster CA), else the system's CAs. ``insecure_skip_verify`` turns verification off
    and must be asked for. ``bearer_token_file`` (e.g. the pod's projected
    ServiceAccount token, which the kubelet rotates) is read again on every request.
    """
    import requests
    from prometheus_api_client import PrometheusConnect
    from urllib3.util.retry import Retry

    session = requests.Session()
    session.verify = False if insecure_skip_verify else (ca_file or True)
    if bearer_token_file:
        session.auth = _BearerTokenFile(bearer_token_file)
    return PrometheusConnect(
        url=url,
        disable_ssl=insecure_skip_verify,
        session=session,
        timeout=timeout_seconds,
        method="POST",
        retry=Retry(total=retries, backoff_factor=0.2, status_forcelist=(502, 503, 504)),
    )


class _BearerTokenFile:
    """``requests`` auth: ``Authorization: Bearer <the file's content>``, read per request
    (a rotated token is picked up without a restart)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, request: Any) -> Any:
        with open(self.path, encoding="utf-8") as f:
            request.headers["Authorization"] = f"Bearer {f.read().strip()}"
        return request


def signal_queries(
    window_seconds: float, service_label: str = "llmservice", namespace_label: str = "namespace"
) -> dict[str, str]:
    """The PromQL of every signal, aggregated per service (namespace label, service label)."""
    w = f"{max(1, round(window_seconds))}s"
    by = f"{namespace_label}, {service_label}"
    sel = f'{{{service_label}!=""}}'

    def gauge(agg: str, inner: str, metric: str) -> str:
        return f"{agg} by ({by}) ({inner}_over_time({metric}{sel}[{w}]))"

    def p95(*metrics: str) -> str:
        parts = [
            f"histogram_quantile(0.95, sum by (le, {by}) (rate({m}_bucket{sel}[{w}])))"
            for m in metrics
        ]
        return " or ".join(parts)

    def mean_of(metric: str) -> str:
        return (f"sum by ({by}) (rate({metric}_sum{sel}[{w}])) / "
                f"sum by ({by}) (rate({metric}_count{sel}[{w}]))")

    kv_new, kv_old = VLLM_KV_USAGE, VLLM_KV_USAGE_OLD
    return {
        "samples": f"max by ({by}) (count_over_time({VLLM_RUNNING}{sel}[{w}]))",
        "last_sample_at": f"max by ({by}) (timestamp({VLLM_RUNNING}{sel}))",
        "replicas": f"count by ({by}) ({VLLM_RUNNING}{sel})",
        "running_mean": gauge("avg", "avg", VLLM_RUNNING),
        "running_max": gauge("max", "max", VLLM_RUNNING),
        "waiting_mean": gauge("avg", "avg", VLLM_WAITING),
        "waiting_max": gauge("max", "max", VLLM_WAITING),
        "waiting_capacity_mean": (
            f"avg by ({by}) (avg_over_time("
            f'{VLLM_WAITING_BY_REASON}{{{service_label}!="",reason="capacity"}}[{w}]))'
        ),
        "kv_usage_mean": f"avg by ({by}) (avg_over_time({kv_new}{sel}[{w}]) "
                         f"or avg_over_time({kv_old}{sel}[{w}]))",
        "kv_usage_max": f"max by ({by}) (max_over_time({kv_new}{sel}[{w}]) "
                        f"or max_over_time({kv_old}{sel}[{w}]))",
        "preemption_rate": f"sum by ({by}) (rate({VLLM_PREEMPTIONS}{sel}[{w}]))",
        "request_rate": f"sum by ({by}) (rate({VLLM_REQUEST_SUCCESS}{sel}[{w}]))",
        "ttft_p95": p95(VLLM_TTFT),
        "itl_p95": p95(VLLM_ITL, VLLM_ITL_OLD),
        "mean_prompt_tokens": mean_of(VLLM_PROMPT_TOKENS),
        "mean_generation_tokens": mean_of(VLLM_GENERATION_TOKENS),
        "kv_config": f"max by ({by}, num_gpu_blocks, block_size) ({VLLM_CACHE_CONFIG}{sel})",
        # Of the prompt tokens looked up in the prefix cache, the share it held (absent
        # when nothing was looked up: an idle window, or caching off).
        "prefix_hit_rate": (
            f"(sum by ({by}) (rate({VLLM_PREFIX_HITS}{sel}[{w}])) "
            f"or sum by ({by}) (rate({VLLM_PREFIX_HITS_OLD}{sel}[{w}]))) / "
            f"((sum by ({by}) (rate({VLLM_PREFIX_QUERIES}{sel}[{w}])) "
            f"or sum by ({by}) (rate({VLLM_PREFIX_QUERIES_OLD}{sel}[{w}]))) > 0)"),
        "prefix_query_rate": (
            f"sum by ({by}) (rate({VLLM_PREFIX_QUERIES}{sel}[{w}])) "
            f"or sum by ({by}) (rate({VLLM_PREFIX_QUERIES_OLD}{sel}[{w}]))"),
        # The live admission cap (llm_operator.inpod.engine), as the engines report it now.
        "cap_in_force_min": f"min by ({by}) ({METRIC_CAP}{sel})",
        "cap_in_force_max": f"max by ({by}) ({METRIC_CAP}{sel})",
        "live_cap_min": f"min by ({by}) ({METRIC_LIVE}{sel})",
        # The vLLM release each engine reports running (one series per release).
        "vllm_version": f"max by ({by}, {VERSION_LABEL}) ({METRIC_VLLM_INFO}{sel})",
    }


def batched_query(
    window_seconds: float, service_label: str = "llmservice", namespace_label: str = "namespace"
) -> str:
    """One PromQL expression returning every signal of every service, each series tagged
    with ``llmop_signal``."""
    parts = [
        f'label_replace({expr}, "{SIGNAL_LABEL}", "{name}", "", "")'
        for name, expr in signal_queries(window_seconds, service_label, namespace_label).items()
    ]
    return "\n  or ".join(parts)


def parse_result(
    result: Iterable[Mapping[str, Any]],
    evaluated_at: float,
    window_seconds: float,
    service_label: str = "llmservice",
    namespace_label: str = "namespace",
) -> dict[ServiceKey, Observation]:
    """Turn the batched query's instant vector into one :class:`Observation` per service
    (pure)."""
    values: dict[ServiceKey, dict[str, Any]] = {}
    for series in result:
        metric = series.get("metric", {})
        signal = metric.get(SIGNAL_LABEL)
        name = metric.get(service_label)
        if not signal or not name:
            continue
        key = (metric.get(namespace_label, ""), name)
        fields = values.setdefault(key, {})
        value = _number(series.get("value"))
        if signal == "kv_config":
            blocks, size = metric.get("num_gpu_blocks"), metric.get("block_size")
            if blocks and size and blocks.isdigit() and size.isdigit():
                fields["kv_capacity_tokens"] = int(blocks) * int(size)
                fields["kv_block_size"] = int(size)
        elif signal == "vllm_version":
            release = metric.get(VERSION_LABEL)
            if release and value == 1:
                fields["engine_vllm_versions"] = tuple(sorted(
                    {*fields.get("engine_vllm_versions", ()), release}))
        elif value is None:
            continue
        elif signal == "samples":
            fields["samples"] = int(value)
        elif signal == "replicas":
            fields["replicas"] = int(value)
        elif signal in _FIELDS and _FIELDS[signal] not in fields:
            fields[_FIELDS[signal]] = value
    return {
        key: Observation(namespace=key[0], name=key[1], evaluated_at=evaluated_at,
                         window_seconds=window_seconds, **fields)
        for key, fields in values.items()
    }


def fetch_observations(
    client: QueryClient,
    services: Iterable[ServiceKey],
    now: float,
    window_seconds: float,
    *,
    service_label: str = "llmservice",
    namespace_label: str = "namespace",
    on_error: Callable[[Exception], None] | None = None,
) -> dict[ServiceKey, Observation]:
    """Observe ``services`` in one Prometheus request evaluated at ``now`` (blocking).

    A failed request gives every service an "unavailable" observation (the policy then
    holds and says why) and calls ``on_error`` (e.g. to count query errors). A service
    with no series is absent from the result (the policy holds: "no vLLM series").
    """
    wanted = list(services)
    query = batched_query(window_seconds, service_label, namespace_label)
    try:
        result = client.custom_query(query, params={"time": f"{now:.3f}"})
        if not isinstance(result, list) or not all(isinstance(r, dict) for r in result):
            raise ValueError(f"not a Prometheus instant vector: {str(result)[:80]!r}")
        observed = parse_result(result, now, window_seconds, service_label, namespace_label)
    except Exception as exc:  # noqa: BLE001 - any failure of the client is "unavailable"
        why = _describe(exc)
        log.warning("Prometheus query failed: %s", why)
        if on_error is not None:
            on_error(exc)
        return {k: unavailable(k[0], k[1], now, window_seconds, why) for k in wanted}
    return {k: observed[k] for k in wanted if k in observed}


# --- the timeline (``llm-operator plot timeline``): the same signals as range queries ----
# The operator's own series (llm_operator.controller.metrics, served on LLMOP_METRICS_PORT).
OPERATOR_CAP_SERIES = "llmop_adaptation_max_num_seqs"
OPERATOR_DECISIONS_SERIES = "llmop_adaptation_decisions_total"
# The signals of :func:`signal_queries` a timeline shows, read back over a time range.
TIMELINE_SIGNALS = ("running_mean", "waiting_mean", "kv_usage_mean", "preemption_rate",
                    "cap_in_force_max")


class RangeQueryClient(Protocol):
    """The part of ``prometheus_api_client.PrometheusConnect`` the timeline uses."""

    def custom_query_range(self, query: str, start_time: Any, end_time: Any, step: str,
                           params: dict[str, Any] | None = None) -> Any: ...


def timeline_queries(namespace: str, name: str, window_seconds: float,
                     service_label: str = "llmservice",
                     namespace_label: str = "namespace") -> dict[str, str]:
    """The PromQL of a service's timeline: :data:`TIMELINE_SIGNALS` as the adaptation loop
    reads them (every service; the caller keeps ``namespace/name``'s series), the cap the
    operator set (``cap_decided``) and its decision counters by direction (``decisions``,
    raw: the caller takes the differences, so a counter's first decision is not lost)."""
    signals = signal_queries(window_seconds, service_label, namespace_label)
    by = f"{namespace_label}, {service_label}"
    sel = f'{{{namespace_label}="{namespace}",{service_label}="{name}"}}'
    return {
        **{k: signals[k] for k in TIMELINE_SIGNALS},
        "cap_decided": f"max by ({by}) ({OPERATOR_CAP_SERIES}{sel})",
        "decisions": f"sum by ({by}, direction) ({OPERATOR_DECISIONS_SERIES}{sel})",
    }


def fetch_timeline(client: RangeQueryClient, namespace: str, name: str, start: float,
                   end: float, step_seconds: float, window_seconds: float, *,
                   service_label: str = "llmservice", namespace_label: str = "namespace",
                   ) -> dict[str, list[dict[str, Any]]]:
    """Each query of :func:`timeline_queries` as a range query from ``start`` to ``end``
    (blocking): signal -> the matrix's series of ``namespace/name`` (``metric`` labels and
    ``values`` pairs, as Prometheus returns them). Errors propagate: the command line
    reports them."""
    from datetime import UTC, datetime

    t0, t1 = datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)
    step = f"{max(1, round(step_seconds))}s"
    out: dict[str, list[dict[str, Any]]] = {}
    for signal, query in timeline_queries(namespace, name, window_seconds, service_label,
                                          namespace_label).items():
        matrix = client.custom_query_range(query, start_time=t0, end_time=t1, step=step)
        if not isinstance(matrix, list):
            raise ValueError(f"not a Prometheus range vector: {str(matrix)[:80]!r}")
        out[signal] = [s for s in matrix if isinstance(s, dict)
                       and s.get("metric", {}).get(service_label) == name
                       and s.get("metric", {}).get(namespace_label, "") == namespace]
    return out


def _describe(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if "Connection refused" in str(exc) or name == "ConnectionError":
        return f"cannot connect ({name})"
    return f"{name}: {text[:200]}" if text else name


def _number(value: Any) -> float | None:
    """The float of a Prometheus ``[time, "value"]`` pair; None for NaN or Inf."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    try:
        v = float(value[1])
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None

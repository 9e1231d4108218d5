"""The concurrency sweep (pure): which client concurrencies to probe on the baseline
server, and what each probe predicts for a ``--max-num-seqs`` cap without a restart.

``max-num-seqs`` only bounds the running batch, so under the default (high) cap a probe at
client concurrency ``c < C`` runs what a server capped at ``c`` would run under ``C``
clients, except that ``C - c`` requests would wait in its queue: by Little's law each
waits ``(C - c) / X(c)`` (``X``: completed requests per second). Shifting every request's
TTFT by that wait predicts the cap's goodput (:func:`predict_cap_goodput`). Standard
library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .measure import Measurement, goodput
from .space import SLO, Options


def predict_cap_goodput(probe: Measurement, workload_concurrency: int, slo: SLO,
                        margin: float = 1.0) -> float:
    """Predicted goodput at ``workload_concurrency`` clients with ``--max-num-seqs`` equal to
    the probe's client concurrency: the probe's requests, each waiting ``(C - c) / X``
    more before its first token (Little's law for the server-side queue), judged
    against the SLO scaled by ``margin``."""
    slo = SLO(slo.ttft_ms * margin, slo.itl_ms * margin)
    c = probe.concurrency
    if c >= workload_concurrency or probe.request_rate <= 0:
        return goodput(probe.requests, probe.duration_s, slo) if probe.requests else (
            probe.goodput_tps)
    wait = (workload_concurrency - c) / probe.request_rate
    if not probe.requests:  # summary only: all-or-nothing on the p95s
        ok = probe.ttft_p95_ms + wait * 1000 <= slo.ttft_ms and probe.itl_p95_ms <= slo.itl_ms
        return probe.output_tps if ok else 0.0
    return goodput(probe.requests, probe.duration_s, slo, extra_wait_s=wait)


def interpolate(points: dict[int, float], x: int) -> float | None:
    """Piecewise-linear interpolation in log(x) of ``points``; None outside their range."""
    if x in points:
        return points[x]
    xs = sorted(points)
    if not xs or x < xs[0] or x > xs[-1]:
        return None
    for a, b in zip(xs, xs[1:], strict=False):
        if a < x < b:
            t = (math.log(x) - math.log(a)) / (math.log(b) - math.log(a))
            return points[a] + t * (points[b] - points[a])
    return None


def snap(levels: Sequence[int], value: float) -> int:
    """The level nearest to ``value`` in log scale."""
    return min(levels, key=lambda v: (abs(math.log(v) - math.log(max(value, 1e-9))), v))


def sweep_concurrencies(
    workload_concurrency: int,
    levels: Sequence[int],
    opts: Options,
    kv_cap: int | None,
    cap_limit: int | None,
) -> list[int]:
    """Client concurrencies to probe on the baseline server, highest first (without ``C``):
    halvings of ``C`` down to ``sweep_min_concurrency``, the KV-derived cap and the hint,
    each snapped to a ladder level, at most ``sweep_points``.

    Caps between ``C/2`` and ``C`` are predicted by interpolating toward ``C``, where the
    defaults may miss the SLO (a prediction of 0), so one there that would gain more than
    ``C/2`` is not tried (tune-landscape-2: 32 chosen of 64 clients where 40 and 48 would
    gain 11% and 23%). A probe at ``3C/4`` found them at low noise but, at the CPU
    engine's noise, cost trials and chose below vLLM's defaults where they were best
    (tune-landscape-3 and -4): left out."""
    C = workload_concurrency
    lo = max(1, opts.sweep_min_concurrency)
    picks: list[int] = []
    for special in (kv_cap, opts.hint_max_num_seqs):
        if special is not None and lo <= special < C:
            picks.append(snap(levels, special))
    c = C / 2
    while c >= lo:
        picks.append(snap(levels, c))
        c /= 2
    out: list[int] = []
    for p in picks:
        if p < C and p not in out and (cap_limit is None or p <= cap_limit):
            out.append(p)
    return sorted(out[: opts.sweep_points], reverse=True)


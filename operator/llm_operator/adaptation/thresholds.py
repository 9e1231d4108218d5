"""The adaptation policy's thresholds (:class:`PolicySettings`, each documented with its
default) and the sample minimum a scrape interval allows."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field


class PolicySettings(BaseModel):
    """Thresholds of the adaptation policy (every one documented; defaults in brackets)."""

    model_config = ConfigDict(frozen=True)

    window_seconds: float = Field(
        120.0, gt=0, description="Length of the observation window the signals average over [120]"
    )
    min_samples: int = Field(
        5, ge=1, description="Fewest scraped samples per window before any decision [5]"
    )
    max_staleness_seconds: float = Field(
        90.0, gt=0, description="Newest sample older than this: the data is stale, hold [90]"
    )
    kv_high_watermark: float = Field(
        0.90, gt=0, le=1, description="Mean KV-cache usage above this lowers the cap [0.90]"
    )
    kv_low_watermark: float = Field(
        0.70, ge=0, lt=1, description="Mean KV-cache usage must be below this to raise [0.70]"
    )
    kv_target: float = Field(
        0.80,
        gt=0,
        le=1,
        description="KV usage a new cap aims at (between the watermarks) when a move is sized "
        "from the observed usage [0.80]",
    )
    kv_fit_fraction: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Share of the KV cache that sequences at their FULL length (prompt + "
        "output, in whole blocks as vLLM allocates them) may fill: the cap that never "
        "preempts is this x usable blocks / blocks per sequence; usage averages well below "
        "(sequences are half-way on average) [1.0]",
    )
    itl_floor_kv_fit_fraction: float = Field(
        1.0,
        ge=0,
        le=1,
        description="An inter-token-latency miss lowers the cap no further than this x the "
        "KV fit (the sequences of the observed size the KV cache holds), and not at all when "
        "the cap is already there; with no KV exhaustion in the window the KV-usage trigger "
        "stops at the fit too. Below the fit a late token is not blamed on the batch: on a "
        "host whose CPU is contended, latency misses without preemptions drove the cap far "
        "below the fit, which cost goodput and could not be undone while the latency missed "
        "(tests/unit/test_adaptation_undershoot.py replays those decisions; figures in "
        "benchmarks/RESULTS.md, 'Adaptation'). 0 lets an ITL miss lower below the fit (the "
        "proportional target alone), where batch interference is known to dominate [1.0]",
    )
    min_preemptions: float = Field(
        1.0,
        gt=0,
        description="Preemptions in the window (rate x window) that count as KV exhaustion [1]",
    )
    min_preemption_share: float = Field(
        0.01,
        ge=0,
        le=1,
        description="Preemptions must also reach this share of the requests finished in the "
        "window to count as KV exhaustion: at the KV fit a prompt a few tokens longer than "
        "the mean can still preempt once, which is not worth a rollout [0.01]",
    )
    at_cap_fraction: float = Field(
        0.90,
        gt=0,
        le=1,
        description="Mean running >= this x cap: running sits at the cap (raise side). Below "
        "the KV fit the window's max running counts instead (a window that straddles a "
        "burst's start or a change of request mix has a low mean) [0.90]",
    )
    busy_fraction: float = Field(
        0.50,
        gt=0,
        le=1,
        description="Mean running >= this x cap: the batch is busy, so an ITL miss is blamed "
        "on batch interference (lower side) [0.50]",
    )
    min_waiting: float = Field(
        0.5, ge=0, description="Mean waiting requests above this count as queueing [0.5]"
    )
    flap_window_seconds: float = Field(
        3600.0,
        ge=0,
        description="A value left less than this long ago is not returned to without strong "
        "evidence [3600]",
    )
    strong_preemptions: float = Field(
        10.0,
        gt=0,
        description="Strong evidence to lower back: at least this many preemptions in the "
        "window [10]",
    )
    strong_itl_factor: float = Field(
        1.5,
        ge=1,
        description="Strong evidence to lower back: ITL p95 at least this x the SLO [1.5]",
    )
    strong_waiting_fraction: float = Field(
        0.5,
        gt=0,
        description="Strong evidence to raise back: mean waiting at least this x the cap, with "
        "KV usage (max, not mean) below the low watermark and no preemptions [0.5]",
    )
    history_length: int = Field(10, ge=1, description="Changes kept in the state's history [10]")
    default_upper_bound: int = Field(
        1024, ge=1, description="Upper bound when no plan or maxMaxNumSeqs is known [1024]"
    )


DEFAULT_POLICY = PolicySettings()

MIN_SCRAPES_PER_WINDOW = 4
"""A window shorter than this many scrape intervals is refused at start (the settings
check it); a decision needs at least :data:`MIN_SCRAPES_PER_WINDOW` - 1 samples."""


def min_samples_for_scrape(window_seconds: float, scrape_interval_seconds: float) -> int:
    """The sample minimum a window of ``window_seconds`` can meet when Prometheus scrapes
    every ``scrape_interval_seconds``: the scrapes the window surely holds
    (``floor(window / interval)``), less one for a missed scrape or a window edge that
    falls just after a scrape, at most the default minimum (5) and at least 2. At a 30 s
    scrape a 120 s window holds 4 or 5 samples: the minimum is 3 (a fixed 5 never acts)."""
    surely = math.floor(window_seconds / scrape_interval_seconds)
    return max(2, min(DEFAULT_POLICY.min_samples, surely - 1))


def policy_for_scrape(window_seconds: float, scrape_interval_seconds: float) -> PolicySettings:
    """:class:`PolicySettings` for an observation window and the scrape interval of the
    series (``LLMOP_ADAPTATION_WINDOW_SECONDS``, ``LLMOP_SCRAPE_INTERVAL_SECONDS``): the
    sample minimum from :func:`min_samples_for_scrape`. Raises ``ValueError`` naming both
    settings when the window holds fewer than :data:`MIN_SCRAPES_PER_WINDOW` scrapes."""
    if window_seconds < MIN_SCRAPES_PER_WINDOW * scrape_interval_seconds:
        raise ValueError(
            f"the adaptation window (LLMOP_ADAPTATION_WINDOW_SECONDS, {window_seconds:g} s) "
            f"must hold at least {MIN_SCRAPES_PER_WINDOW} scrapes of "
            f"LLMOP_SCRAPE_INTERVAL_SECONDS ({scrape_interval_seconds:g} s): set the window "
            f"to at least {MIN_SCRAPES_PER_WINDOW * scrape_interval_seconds:g} s or scrape "
            "more often")
    return PolicySettings(window_seconds=window_seconds,
                          min_samples=min_samples_for_scrape(window_seconds,
                                                             scrape_interval_seconds))

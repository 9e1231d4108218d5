"""The search (pure): which engine settings to try next, and which one won.

Standard library only (and :mod:`llm_operator.knowledge.engine_rules`, vLLM's start-up rules, which
the tuning Job copies along). Nothing here starts a server or reads a clock: the caller passes
an :class:`Evaluator` (real vLLM servers in :mod:`.runner`, a synthetic response surface
in the unit tests) and a ``clock``.

Why not a grid. A grid restarts the server for every cell, and on GPUs each start costs
minutes of model loading. This search spends restarts only where they pay:

1. **Baseline and knee, one start.** Start vLLM with its defaults (plus the user's pins)
   and measure at the workload's concurrency ``C``: that is the baseline. On the same
   server, measure again at lower client concurrencies ``c < C`` (``C/2``, ``C/4``, ...,
   plus the KV-derived cap ``kv_tokens // (input + output)`` and the planner's hint).
   ``max-num-seqs`` is only an upper bound on the running batch, so with the default
   (high) cap, running at client concurrency ``c`` is what the server would do with
   ``--max-num-seqs c`` under ``C`` clients, except that ``C - c`` requests would wait in
   the server's queue: by Little's law each waits ``(C - c) / X(c)`` (``X`` = completed
   requests per second). Shifting every request's TTFT by that wait predicts the goodput
   of each cap without restarting.
2. **Verify** the predicted best cap with one restart, measured at ``C``; when it does not
   win, the next cap the sweep predicts to beat the defaults (at most ``verify_points``).
   Predictions count a request as good only within ``predict_margin`` of the SLO, so the
   search does not aim at the SLO's edge; where that leaves no cap predicted to beat the
   defaults but the SLO itself does (as where the defaults miss it and only caps near its
   edge meet it), those caps are verified instead of keeping the defaults unchallenged.
   Where the defaults miss the SLO in their typical run (or met it in none of the
   baseline's runs) and nothing verified won, the planner's hint (the model's knee under
   the SLO) is verified too: the sweep's probes are single noisy runs, and a cap the
   model expects to meet the SLO is worth one trial before defaults that miss it are kept.
   Where a cap below the hint won, the hint is compared with the defaults too (version
   11) and kept if it wins and is no slower: a step of one ladder level up is too small
   a gain for the paired interval to call at a noisy engine.
   **Walk** (version 6): if that cap lost too, up to three caps follow it on the ladder
   toward the SLO, by the objective its typical run missed: the TTFT objective (the
   queue of clients beyond the cap) by a larger cap, sized by Little's law; the ITL
   objective by the next smaller one; it ends at a cap that misses both (version 7).
3. **Refine** only next to the incumbent on the level ladder, only where the prediction
   says it could win, and move only on a gain larger than the noise margin.
4. **max-num-batched-tokens** by coordinate steps from vLLM's default, only in the
   direction the binding SLO suggests (ITL-bound: smaller steps; TTFT-bound or neither:
   more prefill per step), and on only while each step gains. A larger budget is not
   tried (no restart spent) when the running batch cannot use it: at most ``max-num-seqs``
   sequences run, each needing at most its prompt's tokens in a step, so a budget of
   ``max-num-seqs x input`` tokens already schedules every step in full; when the current
   budget falls short of that by less than the gain a move must show, no larger one can
   win.
5. **Chunked prefill off**, only where the space searches it (the caller decides:
   ``runner.chunked_prefill_searchable``), as one more challenger of the incumbent: one
   server start, its batched tokens raised to --max-model-len where vLLM needs that many
   without chunking.

**Deciding.** A configuration replaces the incumbent (vLLM's defaults first) only on a
paired comparison (:mod:`.compare`): on one live-cap server the two arms are measured
interleaved at ``C`` (incumbent, candidate, candidate, incumbent, ...), each pair gives a
goodput ratio (a pair where neither arm had any goodput gives none and is left out), and
the candidate wins only when the exact Wilcoxon signed-rank interval of the typical
ratio, at ``confidence`` (90%), lies above ``1 + min_gain``. ``repeats`` pairs first;
more, up to ``max_pairs``, only while the interval straddles that line and the budget allows.
Where the reference misses the SLO in its typical run (each run's TTFT and ITL p95 over
their objectives: the statistic the spec's SLO states) with the same confidence, a
candidate whose typical run meets it wins too (version 6, :func:`.compare.slo_verdict`):
there the goodput pairs are mostly ``inf`` or both zero, and the few where noise let the
reference meet kept the interval from deciding. The decision then says so, with both
arms' figures. A candidate slower than its reference (its median output tokens/s over
every request, met or not, below the reference's by more than ``min_gain``) and behind it
in the pairs where the reference had goodput wins only that way (versions 9-12): its
goodput gain then comes only from the reference's runs that missed the SLO, and on the
SLO's edge, where the reference misses in about half its runs, the all-or-nothing pairs
let caps with a quarter of the goodput of defaults inside the SLO win over them
(tune-landscape-50), where the runs' ratios to the objective tell the edge from a miss.
Where the arms need separate servers (another max-num-batched-tokens, or no live cap) the
i-th runs of the two servers are paired, and the comparison says so. No arm is ever scored
by its worst run. The winner is then confirmed against vLLM's defaults directly (when it
won against another incumbent), so the gain reported is always a measured interval against
the defaults; a winner not confirmed falls back to the last one that was, or to the
defaults. When the budget (trials, wall time) runs out the best result so far is kept and
marked partial.

Pinned settings are never varied: a pinned knob has no levels in :class:`Space` and is
passed to every server as a fixed flag by the caller.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from ...knowledge.engine_rules import VLLM_VERSION, EngineSettings, refusals
from .compare import (
    DEFAULT_CONFIDENCE,
    DEFAULT_MAX_PAIRS,
    Attainment,
    Comparison,
    Verdict,
    pairs_for,
    slo_verdict,
)

# What the search decides changed (a new version) when, on the same measurements, it may
# choose another configuration or spend other trials; runs stored by a benchmark name the
# version that made them. 1: up to tune-landscape-2; 2: a sweep probe at 3C/4, the next
# predicted cap verified when the best one fails, both-zero pairs left out (issue 34 item 3;
# runs 3 and 4); 3: version 2 without the 3C/4 probe, which cost trials and, on run 1's
# setup, chose below the defaults in 13 runs (runs 5 and 6); 4: where the sweep predicts
# no probed cap beating the defaults inside the prediction margin, the caps predicted to
# beat them at the SLO itself are verified (runs 9, 10 and 12); 5: where the defaults met
# the SLO in none of the baseline's runs and the verify phase kept nothing, the planner's
# hint is verified against them before the hill-climb (runs 33 to 37); 6: a candidate also
# wins where the reference misses the SLO in its typical run by more than min_gain, with
# confidence, and the candidate meets it in its typical run (compare.slo_verdict); the
# hint is verified where the defaults' typical run misses, and from a cap that lost the
# search walks the ladder toward the SLO by the objective its typical run missed (runs 38
# to 42); 7: the walk stops at a cap whose typical run misses both objectives by more than
# min_gain (the queue's wait only grows below it and the ITL only above it), where version
# 6 walked on to the budget where nothing meets the SLO (runs 43 to 47); 8: a win on the
# SLO needs as many runs of the candidate as a goodput decision (pairs_for(confidence): 5
# at 90%, was repeats: 3), and the SLO side keeps a comparison going only while it can
# still win (runs 48 to 52); 9: a candidate slower than its reference (median output
# tok/s) does not win on the goodput interval, only on the SLO rule, whose reference must
# miss the SLO in its typical run with confidence (the interval above 1, was 1 + min_gain)
# (runs 53 to 57); 10: "slower" by more than min_gain (version 9: any amount, so a cap as
# fast as the defaults within the medians' noise lost a sure goodput win; runs 58 to 62);
# 11: where a cap below the planner's hint won against the defaults, the hint is compared
# with them too and kept if it wins and is no slower (runs 63 to 67); 12: a slower
# candidate's goodput win stands unless it is also behind the reference in the pairs where
# the reference had goodput (versions 9-11 vetoed every slower one, and on the real CPU
# engine kept defaults with no goodput in any pair over a cap with 487 tok/s of it; runs
# 68 to 72); 13: also left to the SLO rule, a slower candidate without goodput in its
# typical pair (runs 73 to 77).
SEARCH_VERSION = 13

# --- inputs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """The load the service is tuned for: a closed loop of ``concurrency`` clients."""

    input_tokens: int
    output_tokens: int
    concurrency: int


@dataclass(frozen=True)
class SLO:
    """Per-request latency objective: TTFT and the p95 of its inter-token latencies."""

    ttft_ms: float
    itl_ms: float


@dataclass(frozen=True)
class Config:
    """Engine settings under search; ``None`` leaves vLLM's default."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    chunked_prefill: bool | None = None  # None: vLLM's default (on for generate models)

    def flags(self) -> list[str]:
        """The vLLM command-line flags for this configuration."""
        out: list[str] = []
        if self.max_num_seqs is not None:
            out += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.max_num_batched_tokens is not None:
            out += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.chunked_prefill is not None:
            out += [CHUNKED_FLAGS[self.chunked_prefill]]
        return out

    def label(self) -> str:
        """Short human label, e.g. ``mns=16 mnbt=default`` (``chunked=off`` added when
        chunked prefill is switched off)."""
        mns = "default" if self.max_num_seqs is None else str(self.max_num_seqs)
        mnbt = "default" if self.max_num_batched_tokens is None else str(
            self.max_num_batched_tokens
        )
        cp = "" if self.chunked_prefill is None else (
            " chunked=on" if self.chunked_prefill else " chunked=off")
        return f"mns={mns} mnbt={mnbt}{cp}"

    def describe(self) -> str:
        """The flags a person would type, e.g. ``--max-num-seqs 4``; ``vLLM's defaults``
        when none is set."""
        return " ".join(self.flags()) or "vLLM's defaults"


CHUNKED_FLAGS = {True: "--enable-chunked-prefill", False: "--no-enable-chunked-prefill"}
DEFAULT_MNS_LADDER = (1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160,
                      192, 256, 384, 512, 768, 1024)
DEFAULT_MNBT_LADDER = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


@dataclass(frozen=True)
class Space:
    """The levels each searchable knob may take; an empty tuple means pinned (not searched).

    ``default_max_num_seqs`` / ``default_max_num_batched_tokens`` are the values vLLM uses
    when the flag is absent (the baseline's effective values), used to place the baseline
    on the ladders; ``None`` when unknown.
    """

    max_num_seqs: tuple[int, ...] = ()
    max_num_batched_tokens: tuple[int, ...] = ()
    default_max_num_seqs: int | None = None
    default_max_num_batched_tokens: int | None = None
    # (True, False) when chunked prefill is searched (main.py decides where: see
    # chunked_prefill_searchable), () when not; on is vLLM's default for generate models.
    chunked_prefill: tuple[bool, ...] = ()
    # --max-model-len of the servers: without chunked prefill vLLM needs at least that
    # many batched tokens, so switching it off raises the budget to it.
    max_model_len: int | None = None
    # The flags every server gets (the user's pins, max-model-len, extraArgs...): a
    # configuration is checked with them against vLLM's start-up rules.
    server_args: tuple[str, ...] = ()

    def refusals(self, cfg: Config) -> list[str]:
        """Why vLLM would refuse to start a server with ``cfg`` and the server args (its
        start-up rules, :mod:`llm_operator.knowledge.engine_rules`: at least as many batched tokens
        as sequences; at least max-model-len without chunked prefill; room for speculative
        tokens with LoRA; a pinned --max-num-active-seqs at most max-num-seqs...)."""
        mns, mnbt = self.effective(cfg)
        argv = [*self.server_args]
        argv += ["--max-num-seqs", str(mns)] if mns is not None else []
        argv += ["--max-num-batched-tokens", str(mnbt)] if mnbt is not None else []
        argv += [CHUNKED_FLAGS[cfg.chunked_prefill]] if cfg.chunked_prefill is not None else []
        return [str(r) for r in refusals(EngineSettings.of(argv))]

    @property
    def kv_token_factor(self) -> int:
        """What vLLM's ``cache_config_info`` (blocks x block size) is to be multiplied by
        for the tokens its KV cache holds: the decode context parallel size of the server
        args (it counts one rank's 16-token blocks, a block holding 16 tokens on each
        rank: vllm/v1/core/single_type_kv_cache_manager.py); 1 without."""
        dcp = EngineSettings.of(list(self.server_args)).number("decode_context_parallel_size")
        return dcp if dcp and dcp > 1 else 1

    def valid(self, cfg: Config) -> bool:
        """Whether vLLM starts with ``cfg`` (:meth:`refusals` finds nothing)."""
        return not self.refusals(cfg)

    def effective(self, cfg: Config) -> tuple[int | None, int | None]:
        """The values the server actually runs with (a default spelled out equals absent)."""
        return (
            cfg.max_num_seqs if cfg.max_num_seqs is not None else self.default_max_num_seqs,
            cfg.max_num_batched_tokens if cfg.max_num_batched_tokens is not None
            else self.default_max_num_batched_tokens,
        )

    def chunked(self, cfg: Config) -> bool:
        """Whether ``cfg``'s server runs with chunked prefill (vLLM's default: on)."""
        return cfg.chunked_prefill is not False

    def without_chunking(self, cfg: Config) -> Config:
        """``cfg`` with chunked prefill off, its batched tokens raised to --max-model-len
        where vLLM needs that many without chunking (``SchedulerConfig.verify_max_model_len``)."""
        out = replace(cfg, chunked_prefill=False)
        _, mnbt = self.effective(out)
        if self.max_model_len is not None and (mnbt is None or mnbt < self.max_model_len):
            out = replace(out, max_num_batched_tokens=self.max_model_len)
        return out

    def grid(self) -> list[Config]:
        """Every valid combination of levels (what an exhaustive grid would run), the
        batched-token level outermost: with the live admission cap only that knob needs
        a server start, so a grid in this order starts one server per level (the level
        vLLM's defaults run first, on the baseline's server), not one per cell."""
        mns_levels: Sequence[int | None] = self.max_num_seqs or (None,)
        mnbt_levels: Sequence[int | None] = self.max_num_batched_tokens or (None,)
        default = self.default_max_num_batched_tokens
        first = sorted(mnbt_levels, key=lambda b: b not in (None, default))  # stable
        cells = [Config(a, b) for b in first for a in mns_levels]
        if False in self.chunked_prefill:
            cells += [self.without_chunking(c) for c in cells]
            cells = list(dict.fromkeys(cells))
        return [c for c in cells if self.valid(c)]


# vLLM 0.32 on switching chunked prefill off for a generate model (it runs, with this
# warning): vllm/engine/arg_utils.py EngineArgs._set_default_chunked_prefill_and_prefix_
# caching_args, where ModelConfig.is_chunked_prefill_supported is True for every generate
# model but encoder-decoder ones.
CHUNKED_OFF_WARNING = ("This model does not officially support disabling chunked prefill. "
                       "Disabling this manually may cause the engine to crash or produce "
                       "incorrect outputs.")


def chunked_prefill_searchable(asked: bool, pinned: bool, input_tokens: int,
                               budget: int | None) -> tuple[bool, str]:
    """Whether the search tries chunked prefill off, and why (one sentence).

    Only when asked (``--search-chunked-prefill``): vLLM 0.32 warns that switching it off
    is not officially supported for generate models (:data:`CHUNKED_OFF_WARNING`), so the
    operator's tuning Job never asks. Never when the user pinned it. Only for prompts
    that fit one step of vLLM's batched-token ``budget``, where a step never splits them
    anyway and the setting only decides whether a prompt that does not fit the step's
    remaining budget waits for the next one ("chunked prefill slows short prompts: test
    both"); a longer prompt without chunking runs as a step of its own that stalls
    every decode behind it, which the ITL objective cannot gain from.
    """
    if pinned:
        return False, "chunked prefill is pinned by the user: not searched"
    if not asked:
        return False, ("chunked prefill not searched (on, vLLM's default): vLLM "
                       f"{VLLM_VERSION} does not officially support switching it off for "
                       "generate models")
    if budget is not None and input_tokens > budget:
        return False, (f"chunked prefill not searched: a {input_tokens}-token prompt does not "
                       f"fit one step of {budget} batched tokens, so without chunking each "
                       "prompt would stall the decodes behind it")
    return True, ("chunked prefill searched (on, off): the prompts fit one step; vLLM "
                  f"{VLLM_VERSION} warns that off is not officially supported for generate "
                  "models")


def ladder(lo: int, hi: int, base: Sequence[int] = DEFAULT_MNS_LADDER) -> tuple[int, ...]:
    """The levels of ``base`` within ``[lo, hi]``, always including ``hi``."""
    levels = sorted({v for v in base if lo <= v <= hi} | {hi})
    return tuple(levels)


@dataclass(frozen=True)
class Budget:
    """Bounds of one run: server starts (trials) and wall time."""

    max_trials: int = 12
    max_seconds: float = 3600.0


@dataclass(frozen=True)
class Options:
    """How carefully to measure."""

    repeats: int = 3  # pairs of a comparison first (and the baseline's runs at C)
    noise_threshold: float = 0.15  # (max - min) / median above which a trial is noisy
    min_gain: float = 0.05  # the interval's lower end must clear 1 + min_gain to move
    confidence: float = DEFAULT_CONFIDENCE  # of the paired interval a move must clear
    max_pairs: int = DEFAULT_MAX_PAIRS  # pairs at most while the interval straddles
    sweep_min_concurrency: int = 2
    sweep_points: int = 5  # client concurrencies below C on the baseline server, at most
    verify_points: int = 2  # caps the sweep predicts to beat the defaults, verified at most
    refine_margin: float = 0.85  # refine a neighbour only if predicted >= margin x best
    # Predictions come from one short probe each: a request counts as good in a
    # prediction only within this fraction of the SLO, so the search does not aim at a
    # cap that sits right on the SLO's edge (where a verification run flips either way).
    predict_margin: float = 0.9
    hint_max_num_seqs: int | None = None  # the planner's prediction, if any
    can_restart: bool = True  # False: one given server, so predict only (no verification)


# --- measurements -------------------------------------------------------------------------


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


def _no_progress(event: str, **info: object) -> None:
    return None


# --- the search's records -----------------------------------------------------------------


@dataclass
class Trial:
    """One server start: a configuration, its repeats at ``C``, and its probes."""

    index: int
    config: Config
    phase: str  # baseline | verify | walk | refine | batched-tokens | grid
    runs: list[Measurement] = field(default_factory=list)
    probes: list[Measurement] = field(default_factory=list)  # other concurrencies
    startup_s: float = 0.0
    wall_s: float = 0.0
    error: str | None = None
    noise_threshold: float = 0.15
    against: int | None = None  # the trial this one was compared with (its reference)
    pairs: list[tuple[float, float]] = field(default_factory=list)  # (reference, this)
    interleaved: bool = True  # the pairs measured back to back on one server
    confidence: float = DEFAULT_CONFIDENCE
    measured: int = 0  # measurements at C taken during this trial, the reference's too
    # How it beat its reference: "goodput" (the paired interval) or "slo" (it met the SLO
    # in its typical run where the reference missed it with confidence); None: it did not.
    won_by: str | None = None
    reference_attainment: Attainment | None = None  # the reference's, when won by "slo"

    @property
    def comparison(self) -> Comparison | None:
        """This trial against its reference (None for the baseline)."""
        if self.against is None:
            return None
        return Comparison(tuple(self.pairs), self.interleaved, self.confidence)

    @property
    def ok(self) -> bool:
        """Measured at least once without error."""
        return self.error is None and bool(self.runs)

    @property
    def median(self) -> float:
        """Median goodput of the repeats (tokens/s)."""
        return statistics.median(m.goodput_tps for m in self.runs) if self.runs else 0.0

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeats' goodput; 0 for a single run."""
        if len(self.runs) < 2:
            return 0.0
        vals = [m.goodput_tps for m in self.runs]
        med = statistics.median(vals)
        return (max(vals) - min(vals)) / med if med > 0 else (0.0 if max(vals) == 0 else 1.0)

    @property
    def noisy(self) -> bool:
        """Spread of its runs above the threshold (shown to a person; decisions use
        paired intervals, which account for noise themselves)."""
        return self.spread > self.noise_threshold

    @property
    def score(self) -> float:
        """The median goodput of its runs (-1 when it failed): what orders candidates
        and what tables show. Whether it beat another is :attr:`comparison`'s to say."""
        if not self.ok:
            return -1.0
        return self.median

    def attainment(self, slo: SLO) -> Attainment:
        """Its runs at ``C`` against the SLO (:class:`~.compare.Attainment`)."""
        return Attainment.of([(m.ttft_p95_ms, m.itl_p95_ms) for m in self.runs],
                             slo.ttft_ms, slo.itl_ms, self.confidence)

    def mean_of(self, attr: str) -> float:
        """Mean of one Measurement attribute over the repeats."""
        vals = [float(getattr(m, attr)) for m in self.runs]
        return sum(vals) / len(vals) if vals else 0.0


@dataclass
class Outcome:
    """What a search produced (partial when the budget ran out)."""

    trials: list[Trial]
    baseline: Trial | None
    best: Trial | None
    complete: bool
    stop_reason: str
    predictions: dict[int, float] = field(default_factory=dict)  # cap -> predicted goodput
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    min_gain: float = 0.05
    slo: SLO | None = None  # what the search judged by (the decision's text cites it)

    @property
    def predicted_best(self) -> tuple[int, float] | None:
        """The cap the concurrency sweep predicts best, with its predicted goodput."""
        if not self.predictions:
            return None
        cap = max(self.predictions, key=lambda k: (self.predictions[k], k))
        return cap, self.predictions[cap]

    @property
    def versus_defaults(self) -> Comparison | None:
        """The kept configuration against vLLM's defaults, measured in pairs (None when the
        defaults were kept or there is no baseline)."""
        if self.best is None or self.baseline is None or self.best is self.baseline:
            return None
        cmp = self.best.comparison
        return cmp if self.best.against == self.baseline.index else None

    @property
    def strongest_rejected(self) -> Trial | None:
        """Of the candidates compared directly with vLLM's defaults and not kept, the one
        with the highest median ratio (what a person asks about when the defaults stay)."""
        if self.baseline is None:
            return None
        cands = [t for t in self.trials if t is not self.best and t.ok and t.pairs
                 and t.against == self.baseline.index]

        def strength(t: Trial) -> tuple[bool, float]:
            # One with goodput in some pair first: a comparison where neither arm had any
            # has no ratio (compare.py).
            cmp = t.comparison
            has = cmp is not None and bool(cmp.ratios)
            return has, cmp.estimate if has else 0.0  # type: ignore[union-attr]

        return max(cands, key=strength) if cands else None

    @property
    def improvement(self) -> float | None:
        """Median paired ratio of the kept configuration's goodput to vLLM's defaults (1.0
        when the defaults were kept; None without a baseline)."""
        if self.baseline is None or not self.baseline.ok or self.best is None:
            return None
        cmp = self.versus_defaults
        if cmp is not None:
            return cmp.estimate
        if self.best is not self.baseline and self.best.against is None and \
                self.baseline.score > 0:  # the grid's best: medians, unpaired
            return self.best.score / self.baseline.score
        return 1.0

    def decision(self) -> str:
        """One sentence a person reads: the figure with its interval and what was kept,
        e.g. ``--max-num-seqs 4: 0.60x (0.55-0.66x, 94% confidence, 6 pairs) of vLLM's
        defaults; kept vLLM's defaults (interval not above 1.05x)``."""
        if self.baseline is None or not self.baseline.ok:
            return "no baseline measured: nothing to compare"
        line = f"{1 + self.min_gain:.2f}x"
        cmp = self.versus_defaults
        if cmp is not None and self.best is not None:
            what = self.best.config.describe()
            ref = self.best.reference_attainment
            if self.best.won_by == "slo" and ref is not None and self.slo is not None:
                mine = self.best.attainment(self.slo)
                return (f"{what}: met the SLO in its typical run ({mine.text()}) where "
                        f"vLLM's defaults missed it ({ref.text()}); goodput {cmp.text()} "
                        f"of vLLM's defaults; kept {what}")
            return (f"{what}: {cmp.text()} of vLLM's defaults; kept {what} (interval "
                    f"above {line})")
        if self.best is not None and self.best is not self.baseline:  # the grid: unpaired
            what = self.best.config.describe()
            return (f"{what}: median goodput {self.best.score:.0f} tok/s against vLLM's "
                    f"defaults' {self.baseline.score:.0f} (medians, not paired); kept {what}")
        other = self.strongest_rejected
        if other is None or other.comparison is None:
            return ("kept vLLM's defaults: no other configuration was compared with them"
                    + self._defaults_missed())
        if not other.comparison.ratios:
            return (f"{other.config.describe()} and vLLM's defaults: "
                    f"{other.comparison.text()}; kept vLLM's defaults"
                    + self._defaults_missed())
        lo, _hi, achieved = other.comparison.interval
        if (self.slo is not None and achieved >= other.comparison.confidence
                and lo > 1 + self.min_gain
                and gain_only_where_missed(other, self.baseline, self.min_gain)):
            # Versions 9-13: a goodput interval above the line, from a slower candidate
            # whose gain lies only in the defaults' missed runs (gain_only_where_missed).
            its_tps, their_tps = (statistics.median(m.output_tps for m in t.runs)
                                  for t in (other, self.baseline))
            met = [b / a for a, b in other.pairs if a > 0]
            with_any = sum(1 for _a, b in other.pairs if b > 0)
            where = (f"without goodput in its typical pair ({with_any} of "
                     f"{len(other.pairs)} with any)"
                     if statistics.median(b for _a, b in other.pairs) <= 0 else
                     f"behind them where they met the SLO ({statistics.median(met):.2f}x "
                     f"their goodput, {len(met)} pairs): a gain only in their runs that "
                     "missed it")
            mine = other.attainment(self.slo)
            why = (f"its own typical run ({mine.text()}) does not meet it"
                   if not mine.meets_typically() else
                   f"their typical run ({self.baseline.attainment(self.slo).text()}) does "
                   "not miss it with confidence")
            return (f"{other.config.describe()}: goodput {other.comparison.text()} of "
                    f"vLLM's defaults but slower ({its_tps:.0f} against their "
                    f"{their_tps:.0f} output tok/s) and {where}, and {why}; kept vLLM's "
                    "defaults")
        return (f"{other.config.describe()}: {other.comparison.text()} of vLLM's defaults; "
                f"kept vLLM's defaults (interval not above {line})" + self._defaults_missed())

    def _defaults_missed(self) -> str:
        """Where vLLM's defaults are kept though their typical run missed the SLO, the
        clause that says so (a kept configuration is not one that meets it)."""
        if self.slo is None or self.baseline is None or not self.baseline.runs:
            return ""
        att = self.baseline.attainment(self.slo)
        if att.meets_typically():
            return ""
        return f", though their typical run missed the SLO ({att.text()})"


# --- prediction (pure) --------------------------------------------------------------------


def slower(trial: Trial, ref: Trial, margin: float = 0.0) -> bool:
    """Whether ``trial``'s median output tokens/s (every request, met or not) is below
    ``ref``'s by more than ``margin``: a candidate slower than its reference gains
    goodput on it only where the reference's requests missed the SLO (version 9; version
    10 with the margin, ``min_gain``: a candidate as fast as its reference within the
    noise of the medians is not slower)."""
    if not trial.runs or not ref.runs:
        return False
    return (statistics.median(m.output_tps for m in trial.runs) * (1.0 + margin)
            < statistics.median(m.output_tps for m in ref.runs))


def gain_only_where_missed(trial: Trial, ref: Trial, margin: float) -> bool:
    """Whether ``trial``'s goodput gain on ``ref`` comes only from the runs where ``ref``
    missed the SLO: it is slower (:func:`slower`, by more than ``margin``) and, in the
    pairs where ``ref`` had goodput, behind it in the typical one (version 12; versions
    9-11 asked only the first), or without goodput in its own typical pair (version 13).
    Where the reference had goodput in no pair, or the candidate led it there too, and the
    candidate had goodput in its typical pair, the gain is in every run: on a real engine
    goodput counts requests, and a smaller cap whose requests meet the SLO more often
    than the defaults' leads them in each pair though its tokens/s are lower
    (tests/vllm/test_tuner.py: 487 tok/s against 0 in all 6 pairs, 1,058 against 1,120
    output tok/s)."""
    if not slower(trial, ref, margin):
        return False
    if not trial.pairs or statistics.median(b for _a, b in trial.pairs) <= 0:
        # Version 13: no goodput in its typical pair. The interval leaves out the pairs
        # where neither arm had any, so against defaults with none in any pair a cap
        # with goodput in 5 runs of 12 read >100x (tune-landscape-70).
        return True
    met = [b / a for a, b in trial.pairs if a > 0]
    return bool(met) and statistics.median(met) < 1.0


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
    (search version 2, tune-landscape-3 and -4): left out."""
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


# --- the search ---------------------------------------------------------------------------


class _Run:
    """One search in progress (state shared by the phases)."""

    def __init__(self, evaluator: Evaluator, space: Space, workload: Workload, slo: SLO,
                 budget: Budget, opts: Options, clock: Callable[[], float],
                 progress: Progress) -> None:
        self.ev = evaluator
        self.space = space
        self.wl = workload
        self.slo = slo
        self.budget = budget
        self.opts = opts
        self.clock = clock
        self.progress = progress
        self.t0 = clock()
        self.trials: list[Trial] = []
        self.stop_reason = ""
        self.notes: list[str] = []
        self.predictions: dict[int, float] = {}
        self.waited_s = 0.0
        self.base: Trial | None = None
        self.chain: list[Trial] = []  # accepted challengers, in order (after the baseline)

    # budget -----------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.clock() - self.t0 - self.waited_s

    def _per_run_s(self) -> float:
        """Seconds one measurement at ``C`` has taken at most so far (0 before any)."""
        return max((m.duration_s for t in self.trials for m in t.runs), default=0.0)

    def _est_trial_s(self, cfg: Config | None = None) -> float:
        done = [t for t in self.trials if t.wall_s > 0]
        if not done:
            return 0.0
        # Per measurement, from what the trials cost beyond their starts and probes.
        per_run = max(
            max(0.0, t.wall_s - t.startup_s - sum(p.duration_s for p in t.probes))
            / max(1, t.measured or len(t.runs)) for t in done)
        if cfg is not None and self.base is not None and self.interleavable(
                self.incumbent_config(), cfg):
            return 2 * self.opts.repeats * per_run  # both arms, no start
        start = max(t.startup_s for t in done) if self._starts_server(cfg) else 0.0
        return start + self.opts.repeats * per_run

    def incumbent_config(self) -> Config:
        inc = self.incumbent()
        return inc.config if inc is not None else Config()

    def _starts_server(self, cfg: Config | None) -> bool:
        """Whether the next trial (``cfg``, when known) pays a server start: an evaluator
        that sets a cap on a running server (the live admission cap) says so through an
        optional ``needs_start(config)``; any other evaluator starts one per trial."""
        needs_start = getattr(self.ev, "needs_start", None)
        return cfg is None or needs_start is None or bool(needs_start(cfg))

    def can_afford(self, cfg: Config | None = None) -> bool:
        if len(self.trials) >= self.budget.max_trials:
            self.stop_reason = f"trial budget reached ({self.budget.max_trials} trials)"
            return False
        need = self._est_trial_s(cfg)
        if self.elapsed() + need > self.budget.max_seconds:
            self.stop_reason = (
                f"time budget: {self.elapsed():.0f} s used, next trial needs "
                f"~{need:.0f} s of {self.budget.max_seconds:.0f} s"
            )
            return False
        return True

    def time_left(self, needed_s: float) -> bool:
        return self.elapsed() + needed_s <= self.budget.max_seconds

    # one trial --------------------------------------------------------------------
    def tried(self, cfg: Config) -> Trial | None:
        key = (*self.space.effective(cfg), self.space.chunked(cfg))
        for t in self.trials:
            if t.config == cfg or (None not in key and (
                    *self.space.effective(t.config), self.space.chunked(t.config)) == key):
                return t
        return None

    def _new_trial(self, cfg: Config, phase: str) -> Trial:
        trial = Trial(index=len(self.trials) + 1, config=cfg, phase=phase,
                      noise_threshold=self.opts.noise_threshold,
                      confidence=self.opts.confidence)
        self.trials.append(trial)
        self.progress("trial-start", trial=trial)
        return trial

    def run_trial(self, cfg: Config, phase: str,
                  probe_plan: Callable[[Trial], list[int]] | None = None,
                  runs: int | None = None,
                  enough: Callable[[Trial], bool] | None = None) -> Trial:
        """One server (start) for ``cfg``: ``runs`` measurements at ``C`` (``repeats`` by
        default; fewer once ``enough(trial)`` says so, after ``repeats``), then the
        probes of ``probe_plan``."""
        trial = self._new_trial(cfg, phase)
        runs = runs or self.opts.repeats
        t_start = self.clock()
        session: Session | None = None
        try:
            with self._recording(trial, lambda: len(trial.runs)):
                session = self.ev.start(cfg)
                trial.startup_s = session.startup_s
                for i in range(runs):
                    if i >= self.opts.repeats and (
                            (enough is not None and enough(trial))
                            or not self.time_left(trial.runs[-1].duration_s)):
                        break
                    trial.runs.append(session.measure(self.wl.concurrency))
                    trial.measured += 1
                    self.progress("run", trial=trial)
                if probe_plan is not None:
                    for c in probe_plan(trial):
                        if not self.time_left(2 * trial.runs[-1].duration_s):
                            self.notes.append("concurrency sweep cut short by the time budget")
                            break
                        trial.probes.append(session.measure(c))
                        self.progress("probe", trial=trial, concurrency=c)
        finally:
            waited = float(getattr(session, "waited_s", 0.0) or 0.0)
            if session is not None:
                session.close()
            # Waiting for another user of a shared machine is not the trial's cost.
            trial.wall_s = self.clock() - t_start - waited
            self.waited_s += waited
        self.progress("trial-done", trial=trial)
        return trial

    @contextlib.contextmanager
    def _recording(self, trial: Trial, evidence: Callable[[], int]) -> Iterator[None]:
        """A failed trial records why and the search goes on; a stop request (Interrupted)
        goes on up, and a trial cut short before ``repeats`` measurements (or pairs,
        ``evidence()``) is no evidence. One whose repeats finished (only its probes or
        extra pairs were cut) still counts."""
        try:
            yield
        except TrialFailed as exc:
            trial.error = str(exc) or type(exc).__name__
        except Interrupted as exc:
            if evidence() < self.opts.repeats:
                trial.error = f"interrupted: {exc}"
            raise

    def interleavable(self, ref: Config, cand: Config) -> bool:
        """Whether both arms run on the server that is up now, so their measurements can
        alternate without a start: an evaluator with the live cap (``needs_start``) and
        the same max-num-batched-tokens."""
        needs_start = getattr(self.ev, "needs_start", None)
        if needs_start is None:
            return False
        same = (self.space.effective(ref)[1] == self.space.effective(cand)[1]
                and self.space.chunked(ref) == self.space.chunked(cand))
        return same and not needs_start(ref) and not needs_start(cand)

    def _decided(self, trial: Trial) -> bool:
        return trial.comparison is not None and self.verdict(trial) is not Verdict.UNDECIDED

    def _trial(self, index: int | None) -> Trial | None:
        return next((t for t in self.trials if t.index == index), None)

    def verdict(self, trial: Trial) -> Verdict:
        """The paired goodput interval's verdict (:meth:`goodput_win`: not where the gain
        lies only in the reference's runs that missed the SLO, the SLO's question); or,
        where the reference's typical run misses the SLO with confidence and ``trial``'s
        meets it, better
        (:func:`~.compare.slo_verdict`); undecided while either could still decide."""
        cmp = trial.comparison
        if cmp is None:
            return Verdict.NOT_BETTER
        by_goodput = cmp.verdict(self.opts.min_gain)
        ref = self._trial(trial.against)
        if ref is None:
            return by_goodput
        if by_goodput is Verdict.BETTER:
            if self.goodput_win(trial):
                return by_goodput
            by_goodput = Verdict.NOT_BETTER
        by_slo = slo_verdict(ref.attainment(self.slo), trial.attainment(self.slo),
                             pairs_for(self.opts.confidence))
        if by_slo is Verdict.BETTER:
            return by_slo
        if Verdict.UNDECIDED in (by_goodput, by_slo):
            return Verdict.UNDECIDED
        return Verdict.NOT_BETTER

    def goodput_win(self, trial: Trial) -> bool:
        """The paired goodput interval calls ``trial`` better, and not only through its
        reference's runs that missed the SLO (:func:`gain_only_where_missed`)."""
        cmp, ref = trial.comparison, self._trial(trial.against)
        return (cmp is not None and cmp.verdict(self.opts.min_gain) is Verdict.BETTER
                and (ref is None or not gain_only_where_missed(trial, ref,
                                                               self.opts.min_gain)))

    def challenge(self, cfg: Config, phase: str, ref: Trial) -> Trial:
        """Measure ``cfg`` against ``ref`` in pairs (see the module docstring): interleaved
        on one live-cap server, else the i-th runs of the two servers; pairs beyond
        ``repeats`` only while the comparison is undecided."""
        if self.interleavable(ref.config, cfg):
            return self._interleaved(cfg, phase, ref)
        n = min(max(self.opts.repeats, len(ref.runs)), self.opts.max_pairs)

        def enough(t: Trial) -> bool:
            t.pairs = [(a.goodput_tps, b.goodput_tps) for a, b in zip(ref.runs, t.runs,
                                                                      strict=False)]
            return self._decided(t)

        trial = self.run_trial(cfg, phase, runs=n, enough=enough)
        trial.against, trial.interleaved = ref.index, False
        enough(trial)
        return trial

    def _measure(self, cfg: Config, trial: Trial) -> Measurement:
        session = self.ev.start(cfg)
        waited = float(getattr(session, "waited_s", 0.0) or 0.0)
        self.waited_s += waited
        trial.startup_s += session.startup_s
        try:
            return session.measure(self.wl.concurrency)
        finally:
            session.close()

    def _interleaved(self, cfg: Config, phase: str, ref: Trial) -> Trial:
        trial = self._new_trial(cfg, phase)
        trial.against = ref.index
        t_start, waited0 = self.clock(), self.waited_s
        try:
            with self._recording(trial, lambda: len(trial.pairs)):
                while len(trial.pairs) < self.opts.max_pairs:
                    if len(trial.pairs) >= self.opts.repeats and (
                            self._decided(trial) or not self.time_left(2 * self._per_run_s())):
                        break
                    # Alternate the order (AB, BA, ...): a drift within a pair falls on both.
                    order = (ref, trial) if len(trial.pairs) % 2 == 0 else (trial, ref)
                    got: dict[int, float] = {}
                    for t in order:
                        m = self._measure(t.config, trial)
                        t.runs.append(m)
                        trial.measured += 1
                        got[t.index] = m.goodput_tps
                        self.progress("run", trial=t)
                    trial.pairs.append((got[ref.index], got[trial.index]))
        finally:
            trial.wall_s = self.clock() - t_start - (self.waited_s - waited0)
        self.progress("trial-done", trial=trial)
        return trial

    def incumbent(self) -> Trial | None:
        """The configuration in force: the last accepted challenger, else the baseline."""
        if self.chain:
            return self.chain[-1]
        return self.base if self.base is not None and self.base.ok else None

    def first_better(self, cfgs: Sequence[Config], phase: str, inc: Trial) -> bool:
        """Challenge ``inc`` with ``cfgs`` in order until one wins; False when none did or
        the budget ran out first."""
        for cfg in cfgs:
            if not self.can_afford(cfg):
                return False
            if self.beats(self.challenge(cfg, phase, inc)):
                self.chain.append(self.trials[-1])
                return True
        return False

    def beats(self, cand: Trial) -> bool:
        """Whether ``cand``'s comparison with its reference says it is better (by the paired
        goodput interval, or by the SLO where the reference misses it: :meth:`verdict`);
        records which in ``cand.won_by``."""
        cmp = cand.comparison
        if not cand.ok or cmp is None or self.verdict(cand) is not Verdict.BETTER:
            return False
        ref = self._trial(cand.against)
        if self.goodput_win(cand):
            cand.won_by = "goodput"
        else:
            cand.won_by = "slo"
            cand.reference_attainment = ref.attainment(self.slo) if ref else None
        return True

    def confirm(self) -> Trial | None:
        """The configuration to keep, with a measured comparison against vLLM's defaults:
        the last accepted challenger if it won against the baseline itself, else it is
        measured against the baseline now (and kept if it wins); one that is not confirmed
        gives way to the one accepted before it, and at last to the defaults."""
        base = self.base
        if base is None or not base.ok:
            return None
        for t in reversed(self.chain):
            if t.against == base.index:
                return t
            if not self.can_afford(t.config):
                self.notes.append(f"{t.config.label()} was not confirmed against vLLM's "
                                  f"defaults ({self.stop_reason}): not kept")
                continue
            again = self.challenge(t.config, "confirm", base)
            if self.beats(again):
                return again
            self.notes.append(f"{t.config.label()} beat {self._label_of(t.against)} but not "
                              "vLLM's defaults when measured against them: not kept")
        return base

    def _label_of(self, index: int | None) -> str:
        for t in self.trials:
            if t.index == index:
                return t.config.label()
        return "?"

    # phases -----------------------------------------------------------------------
    def baseline(self) -> Trial:
        mns_levels = self.space.max_num_seqs

        def plan(trial: Trial) -> list[int]:
            if not mns_levels or not trial.runs:
                return []
            m = trial.runs[0]
            kv_cap = (int(m.kv_tokens * self.space.kv_token_factor
                          // (self.wl.input_tokens + self.wl.output_tokens))
                      if m.kv_tokens else None)
            limit = self.space.default_max_num_seqs
            return sweep_concurrencies(self.wl.concurrency, mns_levels, self.opts,
                                       kv_cap, limit)

        # Without the live cap every configuration has its own server, so a comparison
        # pairs the i-th runs of two servers: the baseline needs the runs a decision at
        # the stated confidence needs.
        runs = self.opts.repeats
        if self.opts.can_restart and getattr(self.ev, "needs_start", None) is None:
            runs = max(runs, min(pairs_for(self.opts.confidence), self.opts.max_pairs))
        self.base = self.run_trial(Config(), "baseline", plan, runs=runs)
        return self.base

    def predict(self, base: Trial) -> dict[int, float]:
        """Predicted goodput by cap, from the baseline's repeats and probes: inside the
        prediction margin; where that predicts no probed cap above the defaults but the
        SLO itself does, at the SLO (version 4: a cap on the SLO's edge is worth one
        verification when the alternative is keeping the defaults, which the sweep says
        do no better; the paired comparison still decides)."""
        C = self.wl.concurrency

        def at(margin: float) -> dict[int, float]:
            return {p.concurrency: predict_cap_goodput(p, C, self.slo, margin)
                    for p in base.probes}

        preds = at(self.opts.predict_margin)
        floor = max(base.score, 0.0)
        if preds and max(preds.values()) <= floor and self.opts.predict_margin < 1.0:
            edge = at(1.0)
            if max(edge.values()) > floor:
                self.notes.append(
                    f"no probed cap is predicted to beat vLLM's defaults within "
                    f"{self.opts.predict_margin:.0%} of the SLO; the caps predicted to beat "
                    "them at the SLO itself are verified")
                preds = edge
        # Caps that never bind behave like the baseline: those at or above C, and those
        # at or above the running batch the baseline actually reached (the KV cache, not
        # the cap, limited it).
        limit = self.never_binds_from(base)
        for lvl in self.space.max_num_seqs:
            if lvl >= limit:
                preds[lvl] = base.score
        return preds

    def never_binds_from(self, base: Trial) -> int:
        """The smallest cap that the baseline's load never reached (so it cannot bind)."""
        limit = self.wl.concurrency
        default = self.space.default_max_num_seqs
        if default is not None:
            limit = min(limit, default)
        # running_max is never below the window's mean from the engine's counters, so a
        # sampler that missed the busy part cannot make a cap look unreached.
        reached = max((m.running_max for m in base.runs), default=0.0)
        if 0 < reached < limit:
            limit = int(reached) + 1
        return limit

    def search_mns(self, base: Trial) -> None:
        levels = self.space.max_num_seqs
        preds = self.predict(base)
        self.predictions = dict(sorted(preds.items()))
        if not preds:
            return
        best_pred = max(preds.values())

        def predicted(lvl: int) -> float | None:
            return interpolate(preds, lvl)

        # Start from the best prediction; on ties prefer the larger cap (more headroom).
        ranked = sorted(preds, key=lambda k: (preds[k], k), reverse=True)
        limit = self.never_binds_from(base)
        if ranked[0] >= limit:
            self.notes.append("the sweep predicts no cap below the workload concurrency helps")
            # Caps >= C equal the default under this load: still verify the nearest one
            # below only if the prediction there is within the refine margin.
        else:
            # Verify the caps predicted to beat the defaults, best first, until one wins
            # (at most verify_points): one probe is one noisy run, so the best prediction
            # may be a lucky one, and the next best is the sweep's evidence, where the
            # hill-climb below would only look next to the defaults' cap (tune-landscape-2).
            verify = [Config(max_num_seqs=k) for k in ranked[:1] + [
                k for k in ranked[1:] if k < limit and preds[k] > base.score]]
            verify = verify[: max(1, self.opts.verify_points)]
            if not self.can_afford(verify[0]):
                return
            self.first_better(verify, "verify", base)
        if not self.chain and not self.verify_hint(base, limit):
            return
        if not self.chain and not self.walk_to_slo(base, limit):
            return
        if not self.hint_above(base, limit):
            return
        # Hill-climb on the ladder from the incumbent among mns levels.
        while True:
            inc = self.incumbent()
            if inc is None:
                return
            cur = inc.config.max_num_seqs
            if cur is None:  # the baseline leads: look just below where a cap binds
                cur = snap(levels, min(self.never_binds_from(base), max(levels)))
            i = levels.index(cur) if cur in levels else levels.index(snap(levels, cur))
            cands = []
            for j in (i - 1, i + 1):
                if 0 <= j < len(levels):
                    lvl = levels[j]
                    cfg = replace(inc.config, max_num_seqs=lvl)
                    if self.tried(cfg) or not self.space.valid(cfg):
                        continue
                    if lvl >= self.never_binds_from(base) and inc.config.max_num_seqs is None:
                        continue  # same as the baseline under this load
                    pr = predicted(lvl)
                    ref = predicted(cur)
                    if pr is not None and pr < self.opts.refine_margin * (
                            ref if ref is not None else best_pred):
                        continue
                    cands.append((pr if pr is not None else 0.0, lvl, cfg))
            if not cands:
                return
            cands.sort(key=lambda x: (-x[0], -x[1]))
            if not self.first_better([cfg for _pr, _lvl, cfg in cands], "refine", inc):
                return

    def verify_hint(self, base: Trial, limit: int) -> bool:
        """Version 5: where vLLM's defaults met the SLO in none of the baseline's runs
        (version 6: or their typical run misses it), the planner's hint (the model's knee
        under the SLO), when given, binding and not yet tried, is verified against them:
        the sweep's probes are single noisy runs, and with the defaults missing a cap the
        model expects to meet the SLO is worth one trial. False when the budget stopped
        the search."""
        hint = self.opts.hint_max_num_seqs
        levels = self.space.max_num_seqs
        # Version 6: also where some baseline run met the SLO but their typical run misses.
        missed = (not any(m.goodput_tps > 0 for m in base.runs)
                  or base.attainment(self.slo).typical > 1.0)
        if hint is None or not levels or not missed:
            return True
        cap = snap(levels, hint)
        cfg = Config(max_num_seqs=cap)
        if cap >= limit or self.tried(cfg) or not self.space.valid(cfg):
            return True
        if not self.can_afford(cfg):
            return False
        self.notes.append(f"vLLM's defaults missed the SLO in their typical run: the "
                          f"planner's hint, {cfg.describe()}, verified against them")
        self.first_better([cfg], "verify", base)
        return True

    def hint_above(self, base: Trial, limit: int) -> bool:
        """Version 11: where a cap below the planner's hint won against vLLM's defaults
        and the hint was not tried, the hint is compared with the defaults too, and kept
        if it wins and is no slower than that cap. The sweep ranks caps by single noisy
        probes, so the first cap verified is often one or two levels below the model's
        knee, and a one-level step up (1.2-1.3x) is too small for the paired interval to
        call in the pairs a trial affords at the CPU engine's noise. False when the
        budget stopped the search."""
        inc = self.incumbent()
        hint = self.opts.hint_max_num_seqs
        levels = self.space.max_num_seqs
        if (inc is None or inc is base or hint is None or not levels
                or inc.config.max_num_seqs is None):
            return True
        cap = snap(levels, hint)
        cfg = replace(inc.config, max_num_seqs=cap)
        if (cap <= inc.config.max_num_seqs or cap >= limit or self.tried(cfg)
                or not self.space.valid(cfg)):
            return True
        if not self.can_afford(cfg):
            return False
        self.notes.append(f"{inc.config.describe()} won below the planner's hint: "
                          f"{cfg.describe()} compared with vLLM's defaults too")
        trial = self.challenge(cfg, "verify", base)
        if self.beats(trial) and not slower(trial, inc, self.opts.min_gain):
            self.chain.append(trial)
        return True

    def walk_to_slo(self, base: Trial, limit: int, steps: int = 3) -> bool:
        """Version 6: where vLLM's defaults miss the SLO in their typical run and no cap has
        won, walk the ladder from the last cap compared with them that lost, toward the
        SLO: a cap whose typical run missed the TTFT objective (the queue of the clients
        beyond the cap) is followed by a larger one, sized by Little's law so that the
        wait shrinks to within the objective; one that missed the ITL objective by the
        next level down. At most ``steps`` caps; it stops at a cap already tried (the
        two objectives leave no level between them), at one whose typical run met the
        SLO and still lost (the defaults' misses are not sure enough to call), and
        (version 7) at one whose typical run missed both objectives by more than
        ``min_gain``: a larger cap only raises the ITL and a smaller one only lengthens
        the queue, so no cap meets the SLO. False when the budget stopped the search."""
        levels = self.space.max_num_seqs
        if not levels or base.attainment(self.slo).typical <= 1.0:
            return True
        C = self.wl.concurrency
        for _ in range(steps):
            lost = [t for t in self.trials if t.against == base.index and t.ok
                    and t.config.max_num_seqs is not None]
            if not lost:
                return True
            last = lost[-1]
            att = last.attainment(self.slo)
            if att.meets_typically():
                return True
            edge = 1.0 + self.opts.min_gain
            if att.typical_of("TTFT") > edge and att.typical_of("ITL") > edge:
                # The queue's wait only grows below this cap and the ITL only above it:
                # a cap that misses both in its typical run leaves none that meets both.
                self.notes.append(f"{last.config.describe()} missed both objectives in its "
                                  "typical run: no cap meets the SLO (not walked further)")
                return True
            cap = int(last.config.max_num_seqs or 1)
            i = levels.index(cap) if cap in levels else levels.index(snap(levels, cap))
            if att.binding() == "TTFT":
                # The wait of C - b clients behind b running ones grows as C / b - 1 (Little's
                # law); aim at 0.8 of the objective, and at least the next level up.
                ratio = att.typical_of("TTFT")
                want = C / (1.0 + (C / cap - 1.0) * 0.8 / ratio) if cap < C else cap
                nxt = min((lvl for lvl in levels if lvl > cap and lvl >= snap(levels, want)),
                          default=None)
            else:
                nxt = levels[i - 1] if i > 0 else None
            if nxt is None or nxt >= limit:
                return True
            cfg = replace(last.config, max_num_seqs=nxt)
            if self.tried(cfg) or not self.space.valid(cfg):
                return True
            if not self.can_afford(cfg):
                return False
            self.notes.append(f"{last.config.describe()} missed the {att.binding()} objective "
                              f"in its typical run: {cfg.describe()} tried next")
            if self.first_better([cfg], "walk", base):
                return True
        return True

    def search_mnbt(self) -> None:
        levels = self.space.max_num_batched_tokens
        if not levels:
            return
        while True:
            inc = self.incumbent()
            if inc is None:
                return
            cur = inc.config.max_num_batched_tokens or self.space.default_max_num_batched_tokens
            if cur is None:
                cur = levels[len(levels) // 2]
            i = levels.index(snap(levels, cur))
            # The binding constraint decides the direction, and only that one is tried:
            # ITL misses want smaller steps (less prefill mixed into each decode step);
            # TTFT misses, or none (then throughput decides), want more prefill per step.
            ttft_miss = inc.mean_of("ttft_miss")
            itl_miss = inc.mean_of("itl_miss")
            j = i + (-1 if itl_miss > ttft_miss else 1)
            if not 0 <= j < len(levels):
                return
            cfg = replace(inc.config, max_num_batched_tokens=levels[j])
            if self.tried(cfg) or not self.space.valid(cfg):
                return
            if j > i and self.larger_budget_unused(inc.config, cur):
                return
            if not self.first_better([cfg], "batched-tokens", inc):
                return

    def search_chunked(self) -> None:
        """Chunked prefill off against the incumbent (on), where the space searches it:
        one server start, decided by the same paired interval as every other move."""
        if False not in self.space.chunked_prefill:
            return
        inc = self.incumbent()
        if inc is None or not self.space.chunked(inc.config):
            return
        cfg = self.space.without_chunking(inc.config)
        if self.tried(cfg):
            return
        if not self.space.valid(cfg):
            self.notes.append(f"chunked prefill off not tried: {self.space.refusals(cfg)[0]}")
            return
        self.first_better([cfg], "chunked-prefill", inc)

    def larger_budget_unused(self, cfg: Config, budget: int) -> bool:
        """True (and a note says why) when no max-num-batched-tokens above ``budget`` can
        gain ``min_gain`` at ``cfg``: a step schedules at most one prompt's worth of tokens
        for each of at most ``max-num-seqs`` running sequences (a decoding one takes 1), so
        a larger budget adds at most ``max-num-seqs x input - budget`` tokens to a step."""
        mns, _ = self.space.effective(cfg)
        if mns is None:
            return False
        need = mns * self.wl.input_tokens
        if need > budget * (1 + self.opts.min_gain):
            return False
        self.notes.append(
            f"max-num-batched-tokens above {budget} not tried: at max-num-seqs {mns} a step "
            f"needs at most {need} tokens ({mns} prompts of {self.wl.input_tokens}), so a "
            f"larger budget cannot gain the {self.opts.min_gain:.0%} a move must show")
        return True


def stopped_reason(exc: Interrupted, trials: Sequence[Trial]) -> str:
    """Why a run stopped early, with how far it got (the result's ``reason``)."""
    done = sum(1 for t in trials if t.ok)
    return (f"stopped early ({exc}) after {len(trials)} trial(s), {done} measured: "
            "the result is the best so far")


def search(
    evaluator: Evaluator,
    space: Space,
    workload: Workload,
    slo: SLO,
    budget: Budget,
    opts: Options | None = None,
    clock: Callable[[], float] | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """Find the configuration in ``space`` with the most goodput under ``slo`` at
    ``workload``, spending as few server starts as it can (see the module docstring).

    Always returns: a failed or exhausted run keeps what it measured (``complete`` False).
    """
    import time

    run = _Run(evaluator, space, workload, slo, budget, opts or Options(),
               clock or time.monotonic, progress or _no_progress)
    complete = False
    base: Trial | None = None
    try:
        base = run.baseline()
        if not base.ok:
            run.stop_reason = f"baseline failed: {base.error}"
        elif not run.opts.can_restart:
            run.predictions = (dict(sorted(run.predict(base).items()))
                               if space.max_num_seqs else {})
            run.notes.append("one server given, no restarts: the best cap is predicted, "
                             "not verified")
            complete = True
            run.stop_reason = "measured the given server only"
        else:
            if space.max_num_seqs:
                run.search_mns(base)
            if not run.stop_reason and space.max_num_batched_tokens:
                run.search_mnbt()
            if not run.stop_reason and space.chunked_prefill:
                run.search_chunked()
            if not run.stop_reason:
                complete = True
                run.stop_reason = "converged"
        best = run.confirm() if base.ok else None
    except Interrupted as exc:
        complete = False
        run.stop_reason = stopped_reason(exc, run.trials)
        base = run.trials[0] if run.trials else None  # the baseline is always trial 1
        # No time to confirm: keep the last challenger that won against the defaults.
        won = [t for t in run.chain if base is not None and t.against == base.index]
        best = won[-1] if won else (base if base is not None and base.ok else None)
    outcome = Outcome(trials=run.trials, baseline=base, best=best, complete=complete,
                      stop_reason=run.stop_reason, predictions=run.predictions,
                      wall_s=run.elapsed(), notes=run.notes, min_gain=run.opts.min_gain,
                      slo=slo)
    run.progress("done", outcome=outcome)
    return outcome


def grid_search(
    evaluator: Evaluator,
    space: Space,
    workload: Workload,
    slo: SLO,
    budget: Budget | None = None,
    opts: Options | None = None,
    clock: Callable[[], float] | None = None,
    progress: Progress | None = None,
) -> Outcome:
    """The exhaustive grid over ``space``, measured the same way as :func:`search`, for
    comparison: one server start per cell, or per batched-token level with the live
    admission cap (:meth:`Space.grid`'s order). The first cell is vLLM's defaults."""
    import time

    budget = budget or Budget(max_trials=10_000, max_seconds=float("inf"))
    run = _Run(evaluator, space, workload, slo, budget, opts or Options(),
               clock or time.monotonic, progress or _no_progress)
    base: Trial | None = None
    complete = True
    try:
        base = run.run_trial(Config(), "baseline")
        for cfg in space.grid():
            if run.tried(cfg):
                continue
            if not run.can_afford(cfg):
                complete = False
                break
            run.run_trial(cfg, "grid")
    except Interrupted as exc:
        complete = False
        run.stop_reason = stopped_reason(exc, run.trials)
        base = run.trials[0] if run.trials else None
    ok = [t for t in run.trials if t.ok]
    # The grid is a reference for benchmarks: its best is the highest median, unpaired.
    outcome = Outcome(trials=run.trials, baseline=base,
                      best=max(ok, key=lambda t: t.score) if ok else None,
                      complete=complete, stop_reason=run.stop_reason or "grid done",
                      wall_s=run.elapsed(), min_gain=run.opts.min_gain)
    run.progress("done", outcome=outcome)
    return outcome

"""What the tuner searches (pure): the workload, the SLO, the engine settings and their levels.

A :class:`Config` is one candidate (the flags it sets, ``None`` leaving vLLM's default);
a :class:`Space` holds the levels each searchable knob may take and checks a candidate
against vLLM's start-up rules (:mod:`llm_operator.knowledge.engine_rules`, copied into the
tuning Job with this package); :class:`Budget` and :class:`Options` bound the search and
say how carefully it measures. Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ...knowledge.engine_rules import VLLM_VERSION, EngineSettings, refusals
from .compare import DEFAULT_CONFIDENCE, DEFAULT_MAX_PAIRS


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


# How a reason that the wall-time budget stopped the search begins (the operator reads it).
TIME_BUDGET = "time budget"


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

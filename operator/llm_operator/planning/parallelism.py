"""Parallelism (pure): the tensor-parallel sizes vLLM takes, decode context parallelism, and
the fit of each (TP, PP) candidate: whether weights plus a KV reserve fit, how much of
the workload it holds, and the queue wait of the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..api.errors import SpecError
from ..api.models import (
    EngineSpec,
    LLMServiceSpec,
)
from ..knowledge.catalog import (
    ModelFacts,
)
from .memory import (
    BLOCK_SIZE,
    human_bytes,
    kv_bytes_per_token,
    kv_request_tokens,
    kv_token_capacity,
)

# The TP choice has no cliff at 100% of the workload (issue: an fp8 KV cache holding 95%
# of it on TP=2 got TP=4, twice the GPUs). A candidate with fewer GPUs wins when its KV
# cache holds at least this fraction of the concurrent sequences, AND the queue wait the
# rest see is within the TTFT objective, bounded by Little's law with every output token
# at the ITL objective (the slowest the SLO allows): wait <= (C - held) / held x
# outputTokens x itlP95. The floor holds whatever the SLO allows: the declared workload
# is itself an estimate.
KV_SHORTFALL_FLOOR = 0.9


def valid_tensor_parallel_sizes(facts: ModelFacts, limit: int) -> list[int]:
    """TP sizes vLLM accepts for this model, up to ``limit``: TP divides the attention
    heads, and the KV heads divide TP or TP divides the KV heads."""
    heads = facts.num_attention_heads
    if facts.is_mla:  # one latent KV "head", replicated on every rank: heads % TP only
        return [t for t in range(1, limit + 1) if heads % t == 0]
    kvs = {facts.num_key_value_heads, facts.full_kv_heads}  # Gemma 4: two KV head counts
    return [t for t in range(1, limit + 1)
            if heads % t == 0 and all(kv % t == 0 or t % kv == 0 for kv in kvs)]


def decode_context_parallel_sizes(facts: ModelFacts, tp: int) -> list[int]:
    """``--decode-context-parallel-size`` values vLLM 0.32 accepts for this model at
    tensor-parallel size ``tp``, ascending (always 1). They divide TP (the DCP ranks are
    TP ranks: vllm/config/parallel.py ParallelConfig, "must be divisible by dcp_size");
    for a model of KV heads (not MLA) TP must exceed the KV heads, DCP is at most TP / KV
    heads and divides the query heads per KV head (vllm/config/model.py
    ModelConfig.verify_with_parallel_config). An MLA model's one latent "head" is on every
    rank, so any divisor of TP (docs/serving/context_parallel_deployment.md: DeepSeek-R1 at
    -tp 8 -dcp 8). Every NVIDIA attention backend vLLM picks for these (FlashAttention,
    FlashInfer, FlashMLA, CUTLASS and Triton MLA) has supports_dcp."""
    divisors = [d for d in range(1, tp + 1) if tp % d == 0]
    if facts.is_mla:
        return divisors
    kv, heads = facts.num_key_value_heads, facts.num_attention_heads
    if tp <= kv or kv <= 0:
        return [1]
    return [d for d in divisors if d <= tp // kv and (heads // kv) % d == 0]


def dcp_plannable(facts: ModelFacts) -> bool:
    """Whether the planner sets decode context parallelism on its own for this model:
    attention of one kind, full or latent, in every layer holding a cache. Sliding-window,
    linear-attention/Mamba and DeepSeek-V4's compressed layers are left at 1 (a pin is
    still taken, and vLLM's rules judge it): their caches split otherwise or not at all,
    and nothing here has measured them."""
    return not (facts.sliding_window_layers or facts.state_layers
                or facts.compressed_kv_bytes_per_token or facts.window_kv_bytes_per_sequence)


# --------------------------------------------------------------------------- fitting

@dataclass(frozen=True)
class _Need:
    """What one replica must hold, and what it should."""

    facts: ModelFacts
    weights: int  # whole model, bytes
    kv_bytes: int  # per element
    usable: int  # per GPU
    hard_tokens: int  # one full sequence
    ideal_tokens: int  # the workload's concurrent requests, in whole blocks
    per_node: int
    concurrency: int = 0  # the workload's concurrent requests per replica (0: none given)
    request_blocks: int = 1  # KV blocks one request of the workload takes
    output_tokens: int = 0
    ttft_s: float = 0.0  # the SLO: TTFT and ITL p95 objectives, seconds
    itl_s: float = 0.0
    # The sequence length over which per-sequence KV (sliding windows, linear-attention
    # and Mamba state) is spread, and the state's dtype bytes.
    seq_tokens: int = 0
    state_bytes: int = 2
    conv_bytes: int = 2  # a Mamba / linear-attention layer's conv state: the model's dtype
    dcp_pin: int | None = None  # spec.engine.decodeContextParallelSize when pinned



def layout_label(tp: int, pp: int = 1, dcp: int = 1) -> str:
    """A parallel layout as the plan says it: ``TP=4``, ``TP=4 PP=2``, ``TP=8 DCP=2``."""
    return (f"TP={tp}" + (f" PP={pp}" if pp > 1 else "")
            + (f" DCP={dcp}" if dcp > 1 else ""))


@dataclass(frozen=True)
class _Fit:
    tp: int
    pp: int
    weights_per_gpu: int
    kv_per_token: int
    kv_budget: int
    capacity: int  # tokens, as vLLM logs it
    usable_tokens: int  # what requests can use (capacity less the null block)
    dcp: int = 1  # decode context parallel size
    kv_per_token_whole: int = 0  # KV bytes per token on one GPU without DCP (0: as above)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def block(self) -> int:
        """Tokens of one KV block as vLLM's KV manager counts them (16 on each DCP rank)."""
        return BLOCK_SIZE * self.dcp

    @property
    def label(self) -> str:
        return layout_label(self.tp, self.pp, self.dcp)


def _fit_at(need: _Need, tp: int, pp: int, dcp: int) -> _Fit:
    per_gpu = math.ceil(need.weights / (tp * pp))
    kv_tok = kv_bytes_per_token(need.facts, tp, pp, need.kv_bytes, need.seq_tokens,
                                need.state_bytes, need.conv_bytes, dcp)
    whole = kv_tok if dcp == 1 else kv_bytes_per_token(
        need.facts, tp, pp, need.kv_bytes, need.seq_tokens, need.state_bytes, need.conv_bytes)
    budget = need.usable - per_gpu
    block = BLOCK_SIZE * dcp
    return _Fit(tp, pp, per_gpu, kv_tok, budget, kv_token_capacity(budget, kv_tok, block),
                kv_request_tokens(budget, kv_tok, block), dcp, whole)


def _holds(need: _Need, fit: _Fit) -> bool:
    """Whether a candidate holds the workload: one sequence of the hard length, and the
    concurrent requests in whole blocks."""
    if fit.usable_tokens < need.hard_tokens:
        return False
    if need.concurrency <= 0:
        return fit.usable_tokens >= need.ideal_tokens
    return held_sequences(need, fit) >= need.concurrency


def _evaluate(need: _Need, tp: int, pp: int) -> _Fit:
    """The candidate at (TP, PP), with its decode context parallel size: the pinned one,
    else (:func:`dcp_plannable` models) the smallest vLLM accepts whose KV cache holds the
    workload, or the largest when none does (the most of it); else 1."""
    if need.dcp_pin is not None:
        return _fit_at(need, tp, pp, need.dcp_pin)
    sizes = decode_context_parallel_sizes(need.facts, tp) if dcp_plannable(need.facts) else [1]
    fit = _fit_at(need, tp, pp, 1)
    for d in sizes[1:]:
        if _holds(need, fit) or fit.kv_budget <= 0:  # held, or the weights do not fit
            break
        fit = _fit_at(need, tp, pp, d)
    return fit


def _nodes(fit: _Fit, per_node: int) -> int:
    return math.ceil(fit.gpus / per_node)


def _choose(need: _Need, cands: Iterable[tuple[int, int]]) -> tuple[_Fit | None, bool, list[str]]:
    """First ideal candidate on no more nodes than the first that fits, else the first
    that fits; a cheaper one within the tolerance (:func:`_tolerated`) before an ideal
    one; with one line per candidate passed over (why)."""
    choice = _choose_detail(need, cands)
    return choice.fit, choice.ideal, choice.rejected


@dataclass(frozen=True)
class _Choice:
    fit: _Fit | None
    ideal: bool
    rejected: list[str]
    tolerated_over: _Fit | None = None  # the ideal candidate a tolerated one was chosen over
    cheaper: _Fit | None = None  # a fitting candidate with fewer GPUs, outside the tolerance


def _choose_detail(need: _Need, cands: Iterable[tuple[int, int]]) -> _Choice:
    fits = [_evaluate(need, tp, pp) for tp, pp in cands]
    first = next((i for i, f in enumerate(fits) if f.usable_tokens >= need.hard_tokens), None)
    if first is None:
        return _Choice(None, False, [_why_not(need, f) for f in fits])
    limit = _nodes(fits[first], need.per_node)
    for i, f in enumerate(fits):
        if _nodes(f, need.per_node) > limit:
            break
        if _holds(need, f):
            cheaper = [j for j in range(first, i) if fits[j].gpus < f.gpus]
            for j in cheaper:
                if _tolerated(need, fits[j]):
                    return _Choice(fits[j], False, [_why_not(need, x) for x in fits[:j]],
                                   tolerated_over=f)
            return _Choice(f, True, [_why_not(need, x) for x in fits[:i]],
                           cheaper=fits[cheaper[-1]] if cheaper else None)
    return _Choice(fits[first], False, [_why_not(need, x) for x in fits[:first]])


def held_sequences(need: _Need, fit: _Fit) -> int:
    """Requests of the workload the candidate's KV cache holds at once, in whole blocks
    as vLLM allocates them (its null block excluded)."""
    per_request = math.ceil(need.request_blocks * BLOCK_SIZE / fit.block)
    return (fit.usable_tokens // fit.block) // max(1, per_request)


def queue_wait_bound_s(need: _Need, held: int) -> float:
    """The longest mean queue wait the SLO allows for the requests a cache of ``held``
    sequences cannot run: by Little's law ``(C - held) / held`` request times, each at
    most ``outputTokens x itlP95`` (every token at the ITL objective)."""
    if held <= 0:
        return math.inf
    return max(0, need.concurrency - held) / held * need.output_tokens * need.itl_s


def _tolerated(need: _Need, fit: _Fit) -> bool:
    """Whether a candidate that does not hold the whole workload is close enough: at
    least :data:`KV_SHORTFALL_FLOOR` of the concurrent sequences, and a queue wait
    bound within the TTFT objective."""
    if need.concurrency <= 0 or fit.usable_tokens < need.hard_tokens:
        return False
    held = held_sequences(need, fit)
    return (held >= math.ceil(KV_SHORTFALL_FLOOR * need.concurrency)
            and queue_wait_bound_s(need, held) <= need.ttft_s)


def _serves(need: _Need, fit: _Fit) -> str:
    """What a candidate would serve, for people: ``TP=2 (2 GPUs) holds 30 of the 32
    concurrent sequences (94%) at 768 tokens``."""
    held = min(held_sequences(need, fit), need.concurrency)
    label = fit.label
    pct = 100 * held / need.concurrency if need.concurrency else 0
    return (f"{label} ({fit.gpus} GPU{'s' if fit.gpus > 1 else ''}) holds {held} of the "
            f"{need.concurrency} concurrent sequences ({pct:.0f}%) at "
            f"{need.request_blocks * BLOCK_SIZE:,} tokens each")


def _why_not(need: _Need, f: _Fit) -> str:
    label = f.label
    if f.kv_budget <= 0:
        whole = f" (of {human_bytes(need.weights)})" if f.gpus > 1 else ""
        return (f"{label}: weights {human_bytes(f.weights_per_gpu)} per GPU{whole} "
                f"> usable {human_bytes(need.usable)}")
    want = need.hard_tokens if f.usable_tokens < need.hard_tokens else need.ideal_tokens
    return (f"{label}: weights {human_bytes(f.weights_per_gpu)} per GPU leave "
            f"{human_bytes(f.kv_budget)} = {f.usable_tokens:,} KV tokens < {want:,} wanted")


def _pinned(value: int | str) -> int | None:
    return value if isinstance(value, int) else None


def _candidates(need: _Need, facts: ModelFacts, engine: EngineSpec,
                count: int | None) -> list[tuple[int, int]]:
    """(TP, PP) pairs to try, in order of GPUs, honouring pins (already validated)."""
    tp_pin = _pinned(engine.tensor_parallel_size)
    pp_pin = _pinned(engine.pipeline_parallel_size)
    tps = valid_tensor_parallel_sizes(facts, need.per_node)
    pps = range(1, facts.num_layers + 1)
    if tp_pin and pp_pin:
        return [(tp_pin, pp_pin)]
    if count is not None:
        if tp_pin:
            return [(tp_pin, count // tp_pin)]
        if pp_pin:
            return [(count // pp_pin, pp_pin)]
        return [(t, count // t) for t in reversed(tps) if count % t == 0
                and count // t <= facts.num_layers]
    if tp_pin:
        return [(tp_pin, p) for p in pps]
    if pp_pin:
        return [(t, pp_pin) for t in tps]
    return [(t, 1) for t in tps] + [(tps[-1], p) for p in pps if p > 1]


def _dcp_candidates(spec: LLMServiceSpec, facts: ModelFacts, cands: list[tuple[int, int]],
                    dcp: int) -> list[tuple[int, int]]:
    """The (TP, PP) candidates at which vLLM takes a pinned decode context parallel size;
    none: the error names the field, the sizes vLLM takes and the TP they need."""
    kept = [(t, p) for t, p in cands if dcp in decode_context_parallel_sizes(facts, t)]
    if kept:
        return kept
    tps = sorted({t for t, _ in cands})
    ok = {t: decode_context_parallel_sizes(facts, t) for t in tps}
    rule = ("a divisor of tensorParallelSize (multi-head latent attention)" if facts.is_mla
            else f"a divisor of tensorParallelSize, at most tensorParallelSize / "
                 f"{facts.num_key_value_heads} KV heads (so TP above the KV heads), dividing "
                 f"the {facts.num_attention_heads // max(1, facts.num_key_value_heads)} query "
                 "heads per KV head")
    raise SpecError(
        "spec.engine.decodeContextParallelSize",
        f"{dcp} is not a size vLLM 0.32 takes for {facts.name} at the tensor-parallel sizes "
        f"this plan can use ({', '.join(f'TP={t}: {ok[t]}' for t in tps)}): it must be "
        f"{rule} (vllm/config/model.py ModelConfig.verify_with_parallel_config)",
        "set it to one of those sizes, or auto")

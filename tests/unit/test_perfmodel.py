"""The performance model: physics (never beyond the roofline, monotonic where it must
be), public measurements and the real CPU engine's recorded figures. Tests named
``test_fit_*`` check points a constant was derived from (fit); ``test_predicts_held_out_*``
check points no constant was derived from (prediction)."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest
from tests.support.perf_reference import (
    CPU_EFFICIENCY,
    HELD_OUT,
    IN_SAMPLE,
    NO_HELD_OUT_SOURCE,
    PUBLISHED,
    THIS_CPU,
    PublishedPoint,
    predict_published,
    published_comparison,
)
from tests.support.tiny_model import tiny_shape

from llm_operator.cli.tables import curve_table
from llm_operator.inpod.tuner.search import SLO
from llm_operator.knowledge.catalog import lookup_gpu, lookup_model
from llm_operator.planning import kv_token_capacity
from llm_operator.planning.perfmodel import (
    GPU_EFFICIENCY,
    Efficiency,
    EngineSettings,
    Hardware,
    ModelShape,
    Workload,
    batch_limit,
    knee,
    kv_capacity_from_bytes,
    kv_capacity_tokens,
    physical,
    predict_curve,
    predict_point,
    prefill_time,
    step_time,
    suggest_start,
)

ROOT = Path(__file__).resolve().parents[2]
CPU_DATA = ROOT / "benchmarks" / "data" / "cpu_engine_profile.json"
GPU_DATA = ROOT / "benchmarks" / "data" / "perfmodel_points.json"
CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def shape(name: str) -> ModelShape:
    facts = lookup_model(name)
    assert facts is not None, name
    return ModelShape.from_facts(facts)


def gpu(name: str) -> Hardware:
    facts = lookup_gpu(name)
    assert facts is not None, name
    return Hardware.from_facts(facts)


L8 = "meta-llama/Llama-3.1-8B-Instruct"
L70 = "meta-llama/Llama-3.1-70B-Instruct"
MIXTRAL = "mistralai/Mixtral-8x7B-Instruct-v0.1"
CASES = [(L8, "H100", 1), (L8, "A100-40GB", 1), (L8, "L4", 1), (L70, "H100", 4),
         (L70, "A100-80GB", 8), (MIXTRAL, "H100", 2)]



# --------------------------------------------------------------------------- physics


@pytest.mark.parametrize(("model", "hw", "tp"), CASES)
@pytest.mark.parametrize("batch", [1, 8, 64, 256])
def test_a_step_is_never_faster_than_the_roofline(model: str, hw: str, tp: int,
                                                  batch: int) -> None:
    m, h = shape(model), gpu(hw)
    for prefill in (0, 512, 8192):
        got = step_time(m, h, tp, batch, 1500, prefill, 0)
        limit = step_time(m, h, tp, batch, 1500, prefill, 0, efficiency=physical())
        # The physical limit reads every weight byte and the KV once, at 100% bandwidth.
        assert limit.seconds >= m.weight_bytes_read(batch + prefill) / tp / h.bandwidth
        assert got.seconds > limit.seconds


@pytest.mark.parametrize(("model", "hw", "tp"), CASES)
def test_curve_never_beats_one_token_per_physical_step(model: str, hw: str, tp: int) -> None:
    m, h = shape(model), gpu(hw)
    wl = Workload(1024, 256)
    for p in predict_curve(m, h, tp, wl, EngineSettings(), CONCURRENCIES):
        fastest = step_time(m, h, tp, p.running, wl.input_tokens, efficiency=physical())
        # Each running sequence gets at most one token per step.
        assert p.output_tps <= p.running / fastest.seconds
        assert p.user_tps <= 1 / fastest.seconds
        assert p.ttft_s >= step_time(m, h, tp, 0, 0, wl.input_tokens, 0,
                                     efficiency=physical()).seconds


@pytest.mark.parametrize(("model", "hw", "tp"), CASES)
def test_more_clients_more_throughput_up_to_the_knee_and_slower_users(
        model: str, hw: str, tp: int) -> None:
    pts = predict_curve(shape(model), gpu(hw), tp, Workload(512, 256), EngineSettings(),
                        CONCURRENCIES)
    k = knee(pts)
    upto = [p for p in pts if p.concurrency <= k.concurrency]
    assert len(upto) >= 2, "the knee of a GPU curve is not at concurrency 1"
    assert all(b.output_tps > a.output_tps for a, b in zip(upto, upto[1:], strict=False))
    assert all(b.user_tps <= a.user_tps * 1.0001 for a, b in zip(pts, pts[1:], strict=False))
    assert all(b.ttft_s >= a.ttft_s * 0.9999 for a, b in zip(pts, pts[1:], strict=False))


def test_more_bandwidth_is_faster_and_more_flops_speeds_up_prefill() -> None:
    m, h = shape(L8), gpu("H100")
    wl = Workload(2048, 256)
    fast_mem = replace(h, bandwidth=h.bandwidth * 1.5)
    fast_compute = replace(h, flops=h.flops * 1.5)
    for c in (1, 16, 128):
        base = predict_point(m, h, 1, wl, EngineSettings(), c)
        assert predict_point(m, fast_mem, 1, wl, EngineSettings(), c).output_tps > base.output_tps
        assert predict_point(m, fast_compute, 1, wl, EngineSettings(), c).ttft_s < base.ttft_s
    # Decode at batch 1 is bandwidth-bound: 1.5x the bandwidth gives nearly 1.5x speed.
    one = step_time(m, h, 1, 1, 1000).seconds
    assert 1.3 < one / step_time(m, fast_mem, 1, 1, 1000).seconds < 1.5


def test_a_longer_context_costs_kv_reads() -> None:
    m, h = shape(L8), gpu("H100")
    short, long_ = step_time(m, h, 1, 64, 500), step_time(m, h, 1, 64, 8000)
    assert long_.bytes_moved - short.bytes_moved == pytest.approx(
        64 * 7500 * m.kv_bytes_per_token(1))
    assert long_.seconds > short.seconds


def test_each_sequence_costs_the_gpu_per_layer_whatever_its_context_and_the_tp() -> None:
    """aic-silicon-13's term: attention_seq_layer_s x layers x sequences in the step, added
    to the step (not hidden under the CPU's per-sequence work), the same at TP 1 and 4 and
    at 500 or 8,000 tokens of context; off, the step is as before."""
    m, h = shape(L70), gpu("H100")
    off = replace(h, efficiency=replace(h.efficiency, attention_seq_layer_s=0.0))
    cost = GPU_EFFICIENCY.attention_seq_layer_s
    assert cost > 0
    for tp in (1, 4):
        for context in (500, 8000):
            on_, off_ = step_time(m, h, tp, 64, context), step_time(m, off, tp, 64, context)
            assert on_.seconds - off_.seconds == pytest.approx(cost * m.num_layers * 64)
            assert on_.bytes_moved == off_.bytes_moved and on_.flops == off_.flops


def test_tensor_parallel_splits_the_work_but_pays_for_all_reduces() -> None:
    m, h = shape(L70), gpu("H100")
    t1 = step_time(m, h, 1, 8, 1000)
    t4 = step_time(m, h, 4, 8, 1000)
    assert t1.comm_s == 0 and t4.comm_s > 0
    assert t1.seconds / 4 < t4.seconds < t1.seconds
    # Over PCIe the same all-reduces cost more than over NVLink.
    pcie = replace(h, interconnect_bandwidth=32e9)
    assert step_time(m, pcie, 4, 256, 1000).comm_s > step_time(m, h, 4, 256, 1000).comm_s


def test_mixture_of_experts_reads_more_experts_as_the_batch_grows() -> None:
    m = shape(MIXTRAL)
    one, many = m.weight_bytes_read(1), m.weight_bytes_read(64)
    assert m.active * m.bytes_per_param == pytest.approx(one, rel=0.01)
    assert one < many <= m.weight_bytes
    assert many == pytest.approx(m.weight_bytes, rel=0.01)


def test_closed_loop_obeys_littles_law() -> None:
    m, h = shape(L8), gpu("H100")
    engine = EngineSettings(max_num_seqs=32)
    for c in (1, 8, 32, 100, 400):
        p = predict_point(m, h, 1, Workload(1024, 256), engine, c)
        assert c == pytest.approx(p.requests_per_s * p.e2e_s, rel=1e-3)
        assert p.running <= 32
        if c > 32:
            assert p.limit == "max-num-seqs" and p.queued > 0


# --------------------------------------------------------------------------- engine settings


def test_kv_capacity_bounds_the_batch_and_queues_the_rest() -> None:
    m, h = shape(L8), gpu("H100")
    wl = Workload(2048, 2048)
    engine = EngineSettings(kv_token_capacity=100_000)
    lim = batch_limit(wl, engine, 100_000, h.block_size)
    assert lim.reason == "kv-cache"
    assert lim.running == 100_000 // (2048 + 1024)
    assert lim.no_preemption == 100_000 // 4096
    p = predict_point(m, h, 1, wl, engine, 200)
    assert p.limit == "kv-cache" and p.running == pytest.approx(lim.running)
    assert p.preempting and p.queued > 150
    more_kv = predict_point(m, h, 1, wl, replace(engine, kv_token_capacity=400_000), 200)
    assert more_kv.output_tps > p.output_tps and more_kv.ttft_s < p.ttft_s


def test_kv_capacity_from_memory_shrinks_with_utilization_and_grows_with_tp() -> None:
    m, h = shape(L70), gpu("H100")
    base = kv_capacity_tokens(m, h, 4, EngineSettings())
    assert kv_capacity_tokens(m, h, 4, EngineSettings(gpu_memory_utilization=0.8)) < base
    assert kv_capacity_tokens(m, h, 8, EngineSettings()) > base
    # The pinned figure (the planner's) wins.
    assert kv_capacity_tokens(m, h, 4, EngineSettings(kv_token_capacity=1234)) == 1234


def test_chunked_prefill_spikes_the_inter_token_latency() -> None:
    m, h = shape(L8), gpu("H100")
    wl = Workload(4096, 256)
    big = predict_point(m, h, 1, wl, EngineSettings(max_num_batched_tokens=8192), 32)
    small = predict_point(m, h, 1, wl, EngineSettings(max_num_batched_tokens=512), 32)
    assert big.mixed_step is not None and big.itl_p95_s > 2 * big.itl_s
    # Smaller chunks: a smaller spike, but the prompt takes more steps to get in.
    assert small.itl_p95_s < big.itl_p95_s
    assert small.ttft_s > big.ttft_s


def test_the_ttft_queue_prices_each_prompt_waited_for_once() -> None:
    """aic-silicon-9's bug fix: with 8,192 batched tokens, an 8,192-token prompt takes two
    chunks beside the decodes, but a prompt waited for is one 8,192-token prefill, not
    two. The queue (TTFT with the fitted share less TTFT with none, the same cycle) is
    share x (running - 1) ** exponent prompts of exactly prefill_time each."""
    m, h = shape(L70), gpu("H100")
    wl, engine = Workload(8192, 1024), EngineSettings(max_num_batched_tokens=8192)
    eff = replace(h.efficiency, prefill_queue_unit="prompt")  # aic-silicon-5 to -13's
    h = replace(h, efficiency=eff)
    p = predict_point(m, h, 4, wl, engine, 4)
    none = predict_point(m, replace(h, efficiency=replace(eff, prefill_queue_share=0.0)),
                         4, wl, engine, 4)
    assert p.output_tps == pytest.approx(none.output_tps, rel=1e-9)
    alone = prefill_time(m, h, 4, 8192, 8192)
    prompts = eff.prefill_queue_share * (p.running - 1) ** eff.prefill_queue_exponent
    assert p.ttft_s - none.ttft_s == pytest.approx(prompts * alone, rel=1e-6)
    # The prompt takes two chunks beside the decodes (the case the bug doubled).
    assert p.mixed_step is not None and p.mixed_step.seconds < 0.6 * alone
    # A prompt that is one chunk: the same prefill as one step of its tokens.
    assert prefill_time(m, h, 4, 4096, 8192) == step_time(m, h, 4, 0, 0, 4096, 0).seconds


def test_the_ttft_queue_prices_each_prompt_waited_for_as_the_mixed_steps_it_fills(
) -> None:
    """aic-silicon-17, -19 (GPU_EFFICIENCY): each prompt waited for costs the mixed steps of
    the cycle its tokens fill (one where a mixed step carries one prompt; two for an 8,192-token
    prompt beside the decodes in an 8,192-token budget, which aic-silicon-15 priced as
    one); each step carries the running batch's decodes too, so it is longer than the
    prompt's share of prefill alone. The cycle, and so the throughput, is the same as
    with no wait."""
    m, h = shape(L70), gpu("H100")
    eff = h.efficiency
    assert eff.prefill_queue_unit == "mixed_step_per_chunk"
    assert not eff.prefill_queue_within_cycle  # aic-silicon-19 withdrew aic-silicon-17's cap
    engine = EngineSettings(max_num_batched_tokens=8192)
    for wl, clients, steps in ((Workload(1024, 1024), 32, 1), (Workload(2048, 256), 64, 1),
                               (Workload(8192, 1024), 8, 2)):
        p = predict_point(m, h, 8, wl, engine, clients)
        none = predict_point(m, replace(h, efficiency=replace(eff, prefill_queue_share=0.0)),
                             8, wl, engine, clients)
        assert p.output_tps == pytest.approx(none.output_tps, rel=1e-9)
        assert p.mixed_step is not None
        prompts = eff.prefill_queue_share * (p.running - 1) ** eff.prefill_queue_exponent
        assert p.ttft_s - none.ttft_s == pytest.approx(prompts * steps * p.mixed_step.seconds,
                                                       rel=1e-6)
        assert steps * p.mixed_step.seconds > prefill_time(m, h, 8, wl.input_tokens, 8192)


def test_prompts_sharing_a_step_keep_the_wait_within_the_cycle() -> None:
    """GPUStack's bursts (1,000 clients, 128-token prompts, 4-token outputs; vLLM's H100
    defaults): the prompts share steps, so each waited for costs a fraction of one, and
    the TTFT leaves room for the other tokens' decode steps. aic-silicon-15's one step
    per prompt took the whole cycle (TPOT 0); aic-silicon-17's cap on the wait is not
    needed for it (aic-silicon-19 withdrew it)."""
    m, h = shape(L8), gpu("H100")
    wl, engine = Workload(128, 4), EngineSettings(max_num_seqs=1024, max_num_batched_tokens=8192)
    p = predict_point(m, h, 1, wl, engine, 1000)
    one_step = predict_point(m, replace(h, efficiency=replace(
        h.efficiency, prefill_queue_unit="mixed_step")), 1, wl, engine, 1000)
    capped = predict_point(m, replace(h, efficiency=replace(
        h.efficiency, prefill_queue_within_cycle=True)), 1, wl, engine, 1000)
    assert one_step.tpot_s == 0.0
    assert p.tpot_s >= p.decode_step.seconds > 0
    assert capped.ttft_s == p.ttft_s
    assert p.output_tps == pytest.approx(one_step.output_tps, rel=1e-9)


def test_bad_inputs_fail_with_a_message() -> None:
    m, h = shape(L8), gpu("H100")
    with pytest.raises(ValueError, match="concurrency"):
        predict_point(m, h, 1, Workload(10, 10), EngineSettings(), 0)
    with pytest.raises(ValueError, match="cannot hold one request"):
        predict_point(m, h, 1, Workload(5000, 10), EngineSettings(kv_token_capacity=4096), 1)
    with pytest.raises(ValueError, match="num_kv_heads"):
        replace(m, num_kv_heads=0)
    with pytest.raises(ValueError, match="input_tokens"):
        Workload(0, 10)


# --------------------------------------------------------------------------- tuner and CLI


def test_suggest_start_is_the_knee_under_the_slo() -> None:
    m, h = shape(L8), gpu("H100")
    wl = Workload(1024, 256)  # saturated: as many clients as max-num-seqs admits
    loose = suggest_start(m, h, 1, wl, EngineSettings(), SLO(ttft_ms=5000, itl_ms=200))
    # ITL 25 ms: tight enough to bind on one H100 since a step overlaps its per-sequence
    # CPU work (issue 34; it was 45 ms when that work added to every step).
    tight = suggest_start(m, h, 1, wl, EngineSettings(), SLO(ttft_ms=5000, itl_ms=25))
    assert loose.meets_slo and tight.meets_slo
    assert tight.point.itl_p95_s <= 0.025 and tight.point.ttft_s <= 5.0
    assert tight.max_num_seqs < loose.max_num_seqs
    assert tight.max_num_seqs <= tight.slo_max
    # 256 clients with a tight ITL: no batch cap meets both (small caps queue past the
    # TTFT objective); the suggestion is the closest and says so.
    crowded = suggest_start(m, h, 1, replace(wl, concurrency=256), EngineSettings(),
                            SLO(ttft_ms=5000, itl_ms=25))
    assert not crowded.meets_slo and "no max-num-seqs meets" in crowded.reason
    # With fewer clients than the knee, the knee under the SLO is the client count.
    few = suggest_start(m, h, 1, replace(wl, concurrency=16), EngineSettings(),
                        SLO(ttft_ms=2000, itl_ms=100))
    assert few.meets_slo and few.max_num_seqs == 16


def test_curve_table_has_a_row_per_point_and_marks_the_knee() -> None:
    from rich.console import Console

    pts = predict_curve(shape(L8), gpu("H100"), 1, Workload(512, 256), EngineSettings(),
                        (1, 8, 64))
    table = curve_table(pts, "Llama 3.1 8B on H100", SLO(ttft_ms=2000, itl_ms=100))
    assert table.row_count == 3
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert "knee" in text and "goodput" in text


# --------------------------------------------------------------------------- public figures


IN_SAMPLE_POINTS = [p for p in PUBLISHED if p.sample == IN_SAMPLE]
HELD_OUT_POINTS = [p for p in PUBLISHED if p.sample == HELD_OUT]

# Held-out points the model misses by more than 25%: expected failures (strict, so a
# model that starts to meet them fails here until the mark is removed). Not widened,
# not dropped: the gap is reported in benchmarks/RESULTS.md.
KNOWN_MISSES = {
    # GPUStack's bursts of Qwen3-14B on one H100 (vLLM 0.11): every one misses, the
    # shorter prompts by more, so it is not the long context; the same runs on an A100
    # are within -5% to +11% in throughput. The H100 reached ~1/3 of its peak FLOP/s in
    # prefill, where the model assumes 60% (GPU_EFFICIENCY.compute, from memory).
    "H100-tp1-Qwen3-14B-closed-loop-c100-in32000": (
        "model +54% output tok/s, -39% TPOT on 32,000-token prompts (39.3 vs 25.5 tok/s): "
        "prefill faster than vLLM 0.11's in this burst of 100"),
    "H100-tp1-Qwen3-14B-closed-loop-c500-in4000": (
        "model +82% output tok/s, -42% TPOT on 4,000-token prompts (798 vs 439 tok/s): "
        "prefill faster than vLLM 0.11's in this burst of 500"),
    "H100-tp1-Qwen3-14B-closed-loop-c500-in2000": (
        "model +100% output tok/s, -42% TPOT on 2,000-token prompts (1,009 vs 506 tok/s): "
        "prefill faster than vLLM 0.11's in this burst of 500"),
    "H100-tp1-Qwen3-14B-closed-loop-c1000-in128": (
        "model +285% output tok/s, -57% TPOT on 128-token prompts, 4 output tokens, 1,000 "
        "at once (677 vs 176 tok/s, 44 requests/s measured): per-request cost under a "
        "burst, which the model's request overhead does not capture"),
    "A100-80GB-tp1-Qwen3-14B-closed-loop-c500-in2000": (
        "model +28% TPOT on 2,000-token prompts on an A100 (385 vs 302 ms; throughput +8%): "
        "the time between a request's tokens in a burst of 500, where the model spreads "
        "the prefill chunks over the decoding batch differently from vLLM 0.11"),
    "A100-80GB-tp1-Qwen3-14B-closed-loop-c1000-in128": (
        "model +43% output tok/s, +269% TPOT on 128-token prompts, 4 output tokens, 1,000 "
        "at once on an A100: per-request cost under a burst, as on the H100"),
}


def _param(point: PublishedPoint, misses: dict[str, str]) -> object:
    """A point as a test parameter, a strict expected failure when ``misses`` names it."""
    reason = misses.get(point.key)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(point, id=point.key, marks=marks)


def _check_within(point: PublishedPoint, rel: float) -> None:
    tps, tpot = predict_published(point, shape(point.model), gpu(point.gpu))
    if point.output_tps is not None:
        assert tps == pytest.approx(point.output_tps, rel=rel), point.source
    if point.tpot_ms is not None:
        assert tpot == pytest.approx(point.tpot_ms, rel=rel), point.source


# In-sample points the model no longer fits (strict expected failures, as above).
KNOWN_FIT_MISSES = {
    "H100-tp1-Llama-3.1-8B-Instruct-closed-loop-c16-in512": (
        "model +32% output tok/s, -25% TPOT at 16 clients (1,823 vs 1,384 tok/s; 8.2 vs "
        "10.9 ms): per_seq_overhead_s was derived from this point's TPOT growth from 4 to 16 "
        "clients as a cost added to every step; since issue 34 it overlaps the GPU's step "
        "(NVIDIA's measured 16-128-client points of AIConfigurator show that it does: summed, "
        "Llama-3.1-8B fp8 on H200 was +110% in TPOT), so at 16 sequences it is hidden and "
        "this vLLM 0.21 point, whose lengths are inferred, is no longer matched"),
}


@pytest.mark.parametrize("point", [_param(p, KNOWN_FIT_MISSES) for p in IN_SAMPLE_POINTS])
def test_fit_in_sample_published_points_within_25_percent(point: PublishedPoint) -> None:
    """Fit, not prediction: GPU_EFFICIENCY was derived from these points."""
    _check_within(point, 0.25)


@pytest.mark.parametrize("point", [_param(p, KNOWN_MISSES) for p in HELD_OUT_POINTS])
def test_predicts_held_out_published_points_within_25_percent(point: PublishedPoint) -> None:
    """Prediction: no constant was derived from these points (the issue's goal: +-25%)."""
    _check_within(point, 0.25)


def test_known_misses_name_held_out_points() -> None:
    keys = {p.key for p in HELD_OUT_POINTS}
    assert set(KNOWN_MISSES) <= keys, set(KNOWN_MISSES) - keys
    fitted = {p.key for p in IN_SAMPLE_POINTS}
    assert set(KNOWN_FIT_MISSES) <= fitted, set(KNOWN_FIT_MISSES) - fitted
    assert len({p.key for p in PUBLISHED}) == len(PUBLISHED), "point keys must be unique"


def test_published_points_name_their_source_and_whether_they_were_fitted() -> None:
    assert len(PUBLISHED) >= 8
    constants = {f.name for f in fields(Efficiency)}
    for p in PUBLISHED:
        assert p.source and p.url.startswith("https://") and p.measured, p.key
        assert p.output_tps is not None or p.tpot_ms is not None
        if p.sample == IN_SAMPLE:
            # "fitted" names at least one constant of GPU_EFFICIENCY it was derived from.
            assert any(c in p.fitted for c in constants), p.fitted
    with pytest.raises(ValueError, match="sample"):
        replace(PUBLISHED[0], sample="predicted")
    with pytest.raises(ValueError, match="fitted"):
        replace(HELD_OUT_POINTS[0], fitted="bandwidth")


def test_every_gpu_has_a_held_out_source_or_says_why_not() -> None:
    in_sample = {p.gpu for p in IN_SAMPLE_POINTS}
    held_out = {p.gpu for p in HELD_OUT_POINTS}
    assert in_sample - held_out == set(NO_HELD_OUT_SOURCE), (
        "a GPU with only in-sample points must be listed, with the reason, in NO_HELD_OUT_SOURCE")
    # No model of a source is both in sample and held out. Lambda's runs are on both
    # sides: its 7-8B points were in the model's first commit (4935e6b, seen when the
    # constants were set), its Llama 3 70B TP points came after (7aaa625, held out).
    assert not ({(p.source, p.model) for p in IN_SAMPLE_POINTS}
                & {(p.source, p.model) for p in HELD_OUT_POINTS})


def test_stored_comparison_matches_the_model_and_the_points() -> None:
    """benchmarks/RESULTS.md is rendered from benchmarks/data/perfmodel_points.json: it
    must be what the model and the reference points give now (else run
    ``python -m benchmarks.perfmodel_points --record --write``)."""
    stored = json.loads(GPU_DATA.read_text())["rows"]
    assert stored == published_comparison()


def test_held_out_points_include_tensor_parallel() -> None:
    tps = {(p.gpu, p.tp) for p in HELD_OUT_POINTS if p.tp > 1}
    assert {("H100", 4), ("H100", 8), ("A100-80GB", 4)} <= tps
    # The all-reduce term is a real part of those steps.
    p = next(p for p in HELD_OUT_POINTS if p.tp == 8)
    st = step_time(shape(p.model), gpu(p.gpu), p.tp, p.concurrency, p.context or 0)
    assert st.comm_s > 0.1 * st.seconds


# --------------------------------------------------------------------------- the real CPU engine


def cpu_data() -> dict:
    if not CPU_DATA.exists():
        pytest.skip(f"{CPU_DATA} not recorded (run python -m benchmarks.cpu_engine_profile)")
    return json.loads(CPU_DATA.read_text())


def test_kv_capacity_is_the_planners_formula() -> None:
    """One formula for the KV token capacity: the model's estimate calls the planner's."""
    m = tiny_shape()
    per_token = m.kv_bytes_per_token(1)
    assert per_token == 512
    for budget in (2_097_152, 3_000_000, 10_000, 0, -5):
        for block in (16, 128):
            assert kv_capacity_from_bytes(m, budget, 1, block) == kv_token_capacity(
                budget, per_token, block)
    # vLLM CPU with --kv-cache-memory-bytes 2097152 gives the tiny Llama 4,096 tokens.
    assert kv_capacity_from_bytes(m, 2_097_152, 1, 128) == 4096
    assert kv_capacity_from_bytes(m, -1.0) == 0  # no room is no tokens, not fewer


def test_kv_capacity_within_10_percent_of_what_vllm_logged() -> None:
    rows = cpu_data()["kv_capacity"]
    assert len(rows) >= 3
    for row in rows:
        m = tiny_shape(hidden=row["hidden"], layers=row["layers"], heads=row["heads"],
                       kv_heads=row["kv_heads"], intermediate=row["intermediate"])
        pred = kv_capacity_from_bytes(m, row["kv_cache_memory_bytes"], 1, THIS_CPU.block_size)
        assert pred == pytest.approx(row["logged_kv_tokens"], rel=0.10), row


def _cpu_predict(r: dict) -> float:
    engine = EngineSettings(max_num_seqs=r["max_num_seqs"], kv_token_capacity=r["kv_tokens"],
                            max_num_batched_tokens=2048)
    return predict_point(tiny_shape(), THIS_CPU, 1, Workload(r["input_len"], r["output_len"]),
                         engine, r["concurrency"]).output_tps


def test_fit_cpu_profile_on_the_ample_kv_sweep_it_was_fitted_to() -> None:
    """Fit, not prediction: CPU_EFFICIENCY was fitted to this sweep (--fit-cpu)."""
    rows = [r for r in cpu_data()["sweep"] if r["sweep"] == "ample-kv"]
    assert rows
    for r in rows:
        # Two shared cores: the measured figures are noisy; +-35% on throughput.
        assert _cpu_predict(r) == pytest.approx(r["output_throughput"], rel=0.35), r["concurrency"]
    assert CPU_EFFICIENCY.source


def test_predicts_held_out_cpu_scarce_kv_sweep_within_25_percent() -> None:
    """Prediction: the scarce-KV sweep (max-num-seqs 64, 4,096 KV tokens, 128 in / 256 out,
    preempting from 16 clients) was not used to fit CPU_EFFICIENCY."""
    rows = [r for r in cpu_data()["sweep"] if r["sweep"] == "scarce-kv"]
    assert len(rows) >= 3
    for r in rows:
        assert _cpu_predict(r) == pytest.approx(r["output_throughput"], rel=0.25), r["concurrency"]

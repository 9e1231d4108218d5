"""The planner's starting max-num-seqs and KV capacity against AIConfigurator's
estimator (issue 34), from the estimator's stored figures. Not a unit test.

    .venv/bin/python -m benchmarks.planner_vs_aic            # print the section
    .venv/bin/python -m benchmarks.planner_vs_aic --write    # and replace it in RESULTS.md
    .venv/bin/python -m benchmarks.planner_vs_aic --missing  # batch sizes still to estimate

Fixed before the run in ``benchmarks/configs/aic_estimator.yaml``: 48 scenarios (3
models x H100/H200 x 2 TP x 2 workloads x 2 SLOs), the landscape and goodput rule, what
is reported. The estimator's figures come from ``benchmarks/data/aic_estimator.json``
(``.venv-aic/bin/python -m benchmarks.aic_estimate``); the planner's side runs here, in
the project's environment, on the current planner and performance model. Every
throughput and latency figure is **estimated** (AIConfigurator's estimator, vLLM kernel
tables 0.24), not measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from tests.support.aic import QWEN3_32B

from benchmarks.perfmodel_vs_silicon import WAIT
from benchmarks.results_md import emit, markers
from llm_operator.api.models import LLMServiceSpec, parse_llmservice
from llm_operator.cli.aic import itl_p95_ms
from llm_operator.knowledge.catalog import lookup_gpu
from llm_operator.planning import Plan, make_plan
from llm_operator.planning.perfmodel import Point, inputs_for, suggest_start

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "aic_estimator.yaml"
DATA = ROOT / "benchmarks" / "data" / "aic_estimator.json"
SECTION = "aic-estimator"  # aic-estimator-2 writes "aic-estimator-2"
# What each run's figures say, written after seeing them, keyed by the config's label.
READINGS: dict[str, str] = {
    "aic-estimator-3": (
        "The yardstick changed, not the planner (chosen after aic-estimator-2's "
        "diagnostic, said in its config): judged by the p95 the spec states, the start "
        "reaches >= 0.9 of the estimator's best in 30 of 46 scenarios (aic-estimator-2, "
        "judged by the mean TPOT: 5), median 1.00. Goal not met. The 16 below 0.9: "
        "(1) 8 are Llama-3.1-8B at 512/256 tokens (0.72-0.86): the pick (96 or 128) is "
        "where the model's throughput stops growing (its 0.12 ms of CPU work per "
        "sequence), while the estimator's keeps rising to 256. Measured GPUs do not "
        "settle which is right: pooled over NVIDIA's held-out rows the model is "
        "optimistic at 64-128 clients (aic-silicon-2: TPOT a median 15-16% low) and the "
        "estimator more so (1.18x the measured tok/s, aic-vs-silicon, Qwen3-32B), but on "
        "the one small model measured, Llama-3.1-8B fp8 on an H200 with long outputs "
        "(1,000-2,000 tokens) at 64-128 clients, the model's TPOT is 10-38% high. The "
        "per-sequence cost (fitted at 4-16 clients, vLLM 0.21) is the suspect; re-fitting "
        "it needs a declared fit subset with a small model: not done. (2) 2 are "
        "Llama-3.1-8B at 2048/512 tokens, relaxed (0.63, "
        "0.67): the model's step carrying a 2048-token prompt is 51 ms against the 50 ms "
        "objective, the estimator's 45-47 ms (compute 0.60 of peak in the model), so the "
        "pick stays at 24, where fewer than 5% of a request's steps carry a prompt. (3) 2 "
        "are bound by the KV cache: the plan's cap (12, 7) is what vLLM's 0.9 memory "
        "share holds, the estimator's largest batch (24, 26) counts the whole card "
        "(Qwen3-32B H100 TP1 2048/512 0.60, Llama-3.1-70B H100 TP2 2048/512 0.37; the KV "
        "table above). (4) 2 miss the SLO by under 5%: the estimator's ITL p95 is 25.7 ms "
        "at the pick of 2 against 25 (Qwen3-32B H100 TP1, tight) and 51.4 ms at 256 "
        "against 50 (Qwen3-32B H100 TP2, relaxed). (5) 2 are one step of the ladder below "
        "the best: 96 for 128 (Llama-3.1-70B H100 TP4, 0.89) and 16 for 24 "
        "(Llama-3.1-70B H200 TP2 2048/512, tight, 0.76)."),
    "aic-estimator-4": (
        "The planner's model changed (aic-silicon-5's TTFT queue), the yardstick did not: "
        "every one of the 48 picks is the same as in aic-estimator-3, so every figure and "
        "the 16 below 0.9 are as read there. At the picks the model's TTFT is at most 0.89 "
        "of the objective (0.76 with aic-silicon-2's queue): on this grid (1-2 s "
        "objectives, as many clients as the batch) the ITL p95 or the throughput's knee "
        "sets the pick, not the TTFT."),
    "aic-estimator-5": (
        "The planner's model changed (the per-sequence CPU cost 0.12 ms -> 35 us, "
        "aic-silicon-11's bound from NVIDIA's measured rows), the yardstick did not. Exactly "
        "the 8 Llama-3.1-8B 512/256 scenarios moved (H100 and H200, TP 1 and 2, both SLOs): "
        "the pick went from 128 (TP 1) or 96 (TP 2) to 256, from 0.72-0.86 of the "
        "estimator's best to 1.00. At the old cost the model's throughput was flat from "
        "128 sequences (8,117-8,208 output tok/s at 128-256 on both GPUs: the 8,333 tok/s "
        "ceiling of 0.12 ms a sequence), so the smallest cap within 2% of its best was 96 "
        "or 128; now the GPU's step sets it and grows to 256, as the estimator's does. "
        "Every other pick is as in run 4, so the 8 below 0.9 left are the ones run 3's "
        "reading explains: 2 knife-edges of the 2048/512 mix step against 50 ms, 2 "
        "bound by the KV cache's 0.9 share, 2 that miss the SLO by under 5%, 2 one step of "
        "the ladder below the best. 38 of 46 (83%): the goal (90%) is not met."),
    "aic-estimator-6": (
        "The planner's model changed again (aic-silicon-13's GPU cost of 0.76 us per "
        "sequence per layer, fitted on NVIDIA's measured Qwen3-32B TP 2 rows), the "
        "yardstick did not. 9 picks moved, all down: the two that missed the SLO in the "
        "estimate now meet it (Qwen3-32B H100 TP 1 tight, 2 -> 1: 0.00 -> 1.00; TP 2 "
        "relaxed, 256 -> 128: 0.00 -> 0.87), and 7 gave up goodput: Llama-3.1-8B TP 1 "
        "512/256 tight on H100 and H200 256 -> 192 (0.94, 0.95), Qwen3-32B H200 TP 2 "
        "relaxed 256 -> 128 (1.00 -> 0.87), Llama-3.1-70B TP 4 512/256 relaxed 96 -> 64 "
        "(H100 0.89 -> 0.72, H200 0.90 -> 0.75), Llama-3.1-70B H200 TP 2 2048/512 tight "
        "16 -> 8 (0.76 -> 0.43). 37 of 46 (was 38); no pick misses the SLO in the "
        "estimate (was 2). The estimator has no cost per sequence: at 64-256 sequences "
        "its steps are faster than the model's now are, and faster than NVIDIA's measured "
        "Qwen3-32B rows (aic-vs-silicon: it is optimistic at 64-128 clients), so a start "
        "the measured rows would favour reads as low against it. Goal (90%) not met."),
    "aic-estimator-7": (
        "The planner's model changed (aic-silicon-15's TTFT wait priced in mixed steps, "
        "share 0.42, exponent 0.60, re-fitted on NVIDIA's measured Qwen3-32B TP 2 rows), "
        "the yardstick did not. No pick moved: all 48 are aic-estimator-6's, so every "
        "figure and the 9 below 0.9 are as read there (37 of 46; no pick misses the SLO "
        "in the estimate). On this grid (1-2 s TTFT objectives, as many clients as the "
        "batch) the ITL p95 or the throughput's knee sets the pick, not the TTFT, as in "
        "aic-estimator-4. Goal (90%) not met."),
    "aic-estimator-8": (
        "The planner's model changed (aic-silicon-17's two fixes to the TTFT wait: a "
        "prompt waited for costs the mixed steps it fills, the wait kept within the "
        "cycle), the yardstick did not. No pick moved: all 48 are aic-estimator-6's and "
        "-7's (37 of 46; no pick misses the SLO in the estimate). Goal (90%) not met."),
    "aic-estimator-9": (
        "The planner's model changed (aic-silicon-19 withdraws aic-silicon-17's cap on the "
        "TTFT wait), the yardstick did not. No pick moved: all 48 are aic-estimator-6's to "
        "-8's (37 of 46; no pick misses the SLO in the estimate). Goal (90%) not met."),
}


def spec_for(model: str, gpu: str, tp: int, wl: dict[str, Any], slo: dict[str, Any]
             ) -> LLMServiceSpec:
    """An LLMService for one scenario: TP pinned, one pipeline stage, bf16."""
    m: dict[str, Any] = {"name": model}
    if model == QWEN3_32B.name:  # not in the catalog: its config.json facts
        f = QWEN3_32B
        m["architecture"] = {
            "parameters": f.parameters, "numLayers": f.num_layers, "hiddenSize": f.hidden_size,
            "numAttentionHeads": f.num_attention_heads, "numKeyValueHeads": f.num_key_value_heads,
            "headDim": f.head_dim, "maxContext": f.max_context, "vocabSize": f.vocab_size}
    facts = lookup_gpu(gpu)
    assert facts is not None, gpu
    body = {"model": m, "gpus": {"product": facts.product},
            "engine": {"tensorParallelSize": tp, "pipelineParallelSize": 1},
            "workload": {"inputTokens": wl["input"], "outputTokens": wl["output"],
                         "concurrency": wl["concurrency"],
                         "slo": {"ttftP95Ms": slo["ttftMs"], "itlP95Ms": slo["tpotMs"]}}}
    return parse_llmservice({"metadata": {"name": "svc", "namespace": "ml"}, "spec": body}).spec


# What stands for the spec's ITL p95 on the estimator's landscape: its mean TPOT (runs
# aic-estimator-1/-2, tune-landscape-1..6, 13, 14), or the p95 read from its step schedule
# (aic_estimator_3.yaml, tune-landscape-7..12).
ITL_STATISTICS = ("tpot-mean", "p95-from-schedule")


def itl_of(est: dict[str, Any], b: float, itl: str = "tpot-mean") -> tuple[float, str]:
    """The per-token figure the SLO judges (ms) and its name, by the config's ``itl``."""
    if itl == "tpot-mean":
        return est["tpotMs"], "TPOT"
    if itl != "p95-from-schedule":
        raise ValueError(f"itl: {itl!r} is not one of {', '.join(ITL_STATISTICS)}")
    if "itlP95Ms" in est:
        return est["itlP95Ms"], "ITL p95"
    if "schedule" not in est:
        raise ValueError("the estimate has no step schedule: run "
                         ".venv-aic/bin/python -m benchmarks.aic_estimate --schedule")
    return itl_p95_ms(est["schedule"], b), "ITL p95"


def goodput(est: dict[str, Any] | None, b: int, wl: dict[str, Any], slo: dict[str, Any],
            saturated: bool = False, itl: str = "tpot-mean") -> tuple[float, str]:
    """Output tok/s at batch ``b`` under the SLO (the config's rule), and why it is 0.
    ``saturated``: b clients (aic-estimator-2), else the workload's, the rest queueing;
    ``itl``: what the SLO's per-token figure judges (:data:`ITL_STATISTICS`)."""
    if est is None:
        return 0.0, "not estimated"
    if "oom" in est:
        return 0.0, "OOM"
    c, osl = (b if saturated else wl["concurrency"]), wl["output"]
    r_ms = est["ttftMs"] + (osl - 1) * est["tpotMs"]
    wait = max(0.0, (c / b - 1)) * r_ms
    tps = b * osl / (r_ms / 1e3)
    per_token, what = itl_of(est, b, itl)
    if per_token > slo["tpotMs"]:
        return 0.0, f"{what} {per_token:.0f} ms"
    if est["ttftMs"] + wait > slo["ttftMs"]:
        return 0.0, f"TTFT {est['ttftMs'] + wait:,.0f} ms"
    return tps, "meets"


# The performance model's constants that changed after an earlier run was made, as that
# run had them (aic-silicon-11: the per-sequence CPU cost 0.12 ms -> 35 us; aic-silicon-13:
# a GPU cost per sequence per layer, 0 before; aic-silicon-15: the TTFT wait priced in
# mixed steps, share 0.38 -> 0.42, exponent 0.65 -> 0.60; aic-silicon-17: a prompt waited
# for costs the mixed steps it fills, the wait kept within the cycle; aic-silicon-19: that
# cap withdrawn): re-rendering one of them uses
# them, so that its section stays what was run. A run not named here uses the model as
# it is.
_BEFORE_19 = WAIT["aic-silicon-17"]
_BEFORE_17 = WAIT["aic-silicon-15"]
_BEFORE_15 = WAIT["aic-silicon-5"]
_BEFORE_13: dict[str, Any] = {"attention_seq_layer_s": 0.0, **_BEFORE_15}
MODEL_AT_RUN: dict[str, dict[str, Any]] = {
    **{label: {"per_seq_overhead_s": 0.12e-3, **_BEFORE_13} for label in (
        "aic-estimator-1", "aic-estimator-2", "aic-estimator-3", "aic-estimator-4")},
    "aic-estimator-5": _BEFORE_13,
    "aic-estimator-6": _BEFORE_15,
    "aic-estimator-7": _BEFORE_17,
    "aic-estimator-8": _BEFORE_19}


def pick_for(spec: LLMServiceSpec, plan: Plan, saturated: bool, top: int,
             model_at_run: dict[str, Any] | None = None) -> int:
    """The tuner's start for a planned replica; ``saturated``: with the client count
    unknown, at most ``top`` (aic-estimator-2); ``model_at_run``: the model's constants as
    an earlier run had them (:data:`MODEL_AT_RUN`)."""
    i = inputs_for(spec, plan)
    hw = replace(i.hardware, efficiency=replace(i.hardware.efficiency, **(model_at_run or {})))
    wl, upper = ((replace(i.workload, concurrency=None), min(plan.max_num_seqs, top))
                 if saturated else (i.workload, plan.max_num_seqs))
    return suggest_start(i.model, hw, i.tp, wl, i.engine, i.slo, upper=upper).max_num_seqs


def load(path: Path) -> dict[str, Any]:
    """A config; a later run's names its base (which may name its own) and overrides its
    fields, keeping its own ``base``. The landscape harness's configs load the same way."""
    cfg = dict(yaml.safe_load(path.read_text()))
    if "base" in cfg:
        cfg = {**load(ROOT / cfg["base"]), **cfg}
    return cfg


def scenarios(cfg: dict[str, Any], data: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    sat = bool(cfg.get("saturated"))
    itl = str(cfg.get("itl", "tpot-mean"))
    top = max(cfg["batchGrid"])
    for model, m in cfg["models"].items():
        for gpu in cfg["gpus"]:
            for tp in m["tp"]:
                for wl in cfg["workloads"]:
                    k = f"{model}|{gpu}|tp{tp}|{wl['input']}/{wl['output']}"
                    cell = data["cells"].get(k)
                    for slo in cfg["slos"]:
                        spec = spec_for(model, gpu, tp, wl, slo)
                        plan: Plan = make_plan(spec)
                        pick = pick_for(spec, plan, sat, top,
                                        MODEL_AT_RUN.get(cfg["label"]))
                        b = pick if sat else min(pick, wl["concurrency"])
                        row: dict[str, Any] = {
                            "key": k, "slo": slo["name"], "model": model, "gpu": gpu, "tp": tp,
                            "workload": wl["name"], "planMaxNumSeqs": plan.max_num_seqs,
                            "pick": pick, "kvTokens": plan.kv_token_capacity,
                            "kvGiB": plan.kv_budget_bytes_per_gpu / 2**30,
                            "ourLargestBatch": plan.memory_max_num_seqs}
                        if cell is None:
                            row["missing"] = True
                            out.append(row)
                            continue
                        batches = {int(x): v for x, v in cell["batches"].items()}
                        land = {x: goodput(v, x, wl, slo, sat, itl) for x, v in batches.items()
                                if x <= (top if sat else wl["concurrency"])}
                        best_b = max(land, key=lambda x: (land[x][0], -x))
                        got, why = goodput(batches.get(b), b, wl, slo, sat, itl)
                        row.update(best=land[best_b][0], bestBatch=best_b, got=got, why=why,
                                   ratio=(got / land[best_b][0]) if land[best_b][0] else None,
                                   missing=b not in batches, estBatch=b,
                                   theirLargestBatch=cell.get("kv", {}).get("largestBatch"),
                                   theirMemory=cell.get("kv", {}).get("at", {}).get("memory"))
                        out.append(row)
    return out


@contextlib.contextmanager
def _mean_tpot_slo() -> Iterator[None]:
    """Judge the performance model's points by mean TPOT instead of ITL p95 (a
    diagnostic: the estimator gives a mean, the spec's SLO is a p95)."""
    orig = Point.meets
    Point.meets = lambda self, slo: (  # type: ignore[method-assign]
        self.ttft_s * 1e3 <= slo.ttft_ms and self.tpot_s * 1e3 <= slo.itl_ms)
    try:
        yield
    finally:
        Point.meets = orig  # type: ignore[method-assign]


def diagnostic(cfg: dict[str, Any]) -> list[str]:
    """aic-estimator-2 only: the same comparison with the pick judged by mean TPOT."""
    if not cfg.get("saturated") or cfg.get("itl", "tpot-mean") != "tpot-mean":
        return []
    with _mean_tpot_slo():
        rows = scenarios(cfg, json.loads(DATA.read_text()))
    ratios = [r["ratio"] for r in rows if not r.get("missing") and r["ratio"] is not None]
    if not ratios:
        return []
    return ["", "Diagnostic, not the pre-registered figure: with the performance model's "
            "points judged by mean TPOT (what the estimator gives) instead of ITL p95 (what "
            "the spec's SLO is), the pick reaches a median "
            f"{statistics.median(ratios):.2f} of the best, >= 0.9 in "
            f"{sum(x >= 0.9 for x in ratios)} of {len(ratios)} scenarios. Most of the gap is "
            "the chunked-prefill spike: a step that carries a new prompt (38 ms more for 512 "
            "tokens of Qwen3-32B on an H200) is more than 5% of a request's steps from about "
            "16 sequences, so the model's ITL p95 passes the 50 ms objective long before the "
            "mean does. The rest: the pick is the smallest cap within 2% of the best goodput "
            "the model sees, and the model's throughput flattens sooner than the estimator's "
            "(its 0.12 ms per sequence floor: Llama-3.1-8B on an H100 peaks at 128, the "
            "estimator's at 256 or beyond). Not changed: the p95 is what the spec asks for, "
            "and the per-sequence cost would be re-fitted only on a declared subset."]


def section(rows: list[dict[str, Any]], cfg: dict[str, Any], name: str = SECTION) -> str:
    begin, end = markers(name)
    done = [r for r in rows if not r.get("missing")]
    rated = [r for r in done if r["ratio"] is not None]
    ratios = [r["ratio"] for r in rated]
    lines = [begin, f"## The planner's start and KV capacity against AIConfigurator's estimator "
             f"({cfg['label']})", "",
             f"**{cfg['estimator']['label']}**: every figure here is a model's, none measured. "
             "AIConfigurator 0.12.0's `cli_estimate` (vLLM backend, aggregated serving, bf16) at "
             "each batch size; stored in `benchmarks/data/aic_estimator.json`. Pre-registered "
             f"in `{cfg['config']}`: 48 scenarios (Llama-3.1-8B TP 1/2, "
             "Qwen3-32B TP 1/2, Llama-3.1-70B TP 2/4 x H100/H200 x 512/256 and 2048/512 tokens "
             + ("with as many clients as the batch (saturated, no queue) "
                if cfg.get("saturated") else "with 256 clients ")
             + "x SLO TTFT <= 2 s, TPOT <= 50 ms or TTFT <= 1 s, TPOT <= 25 ms). Goodput at "
             "batch b: the estimator's output tok/s when its "
             + ("ITL p95 (read from the estimator's own step schedule: the latency of its "
                "mix step, a prompt plus the decodes, when such steps carrying other "
                "requests' prompts are more than 5% of a request's steps, else of its "
                "generation-only step; the spec's itlP95Ms is what the pick is asked to "
                "meet) and its TTFT (a mean, standing for the spec's p95)"
                if cfg.get("itl") == "p95-from-schedule" else "TPOT and its TTFT")
             + ("" if cfg.get("saturated") else " plus the queue wait of the clients beyond b")
             + " meet the SLO, else 0. Our pick: the tuner's start (`suggest_start`: our "
             "performance model's knee under the SLO"
             + (", client count unknown" if cfg.get("saturated") else ", at 256 clients")
             + ") on the planner's plan. Regenerate: `.venv-aic/bin/python -m "
             "benchmarks.aic_estimate` (and `--at` for the picks `--missing` lists"
             + (", `--schedule` for the step schedules" if cfg.get("itl") == "p95-from-schedule"
                else "") + "), then "
             f"`.venv/bin/python -m benchmarks.planner_vs_aic --config {cfg['config']} "
             "--write`.", ""]
    if ratios:
        lines.append(
            f"Our pick's goodput / the landscape's best: median {statistics.median(ratios):.2f}, "
            f"minimum {min(ratios):.2f}, >= 0.9 in {sum(x >= 0.9 for x in ratios)} of "
            f"{len(ratios)} scenarios (goal: >= 0.9 in >= 90%); {len(done) - len(rated)} "
            f"scenarios where nothing on the grid meets the SLO; {len(rows) - len(done)} not "
            "estimated yet.")
    miss = [r for r in rated if r["got"] == 0]
    lines += ["", f"Scenarios where the pick misses the SLO or the KV cache in the estimate: "
              f"{len(miss)}" + (": " + "; ".join(f"{r['key']} {r['slo']} (pick {r['pick']}: "
                                                   f"{r['why']})" for r in miss) if miss else "."),
              "", "| model, GPU, TP, tokens | SLO | pick | plan's cap | goodput at pick | best "
              "(batch) | ratio |", "|---|---|---|---|---|---|---|"]
    for r in done:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        lines.append(f"| {r['key']} | {r['slo']} | {r['pick']} | {r['planMaxNumSeqs']} | "
                     f"{r['got']:,.0f} ({r['why']}) | {r['best']:,.0f} ({r['bestBatch']}) | "
                     f"{ratio} |")
    lines += ["", "KV capacity: the largest batch of the workload's requests (input + output "
              "tokens each) the memory holds, ours (the plan's KV capacity) against the "
              "estimator's (the largest batch it does not call OOM):", "",
              "| model, GPU, TP, tokens | ours | estimator's | ours / theirs | our KV GiB per "
              "GPU | estimator's memory at its largest batch (GiB per GPU) |",
              "|---|---|---|---|---|---|"]
    seen = set()
    for r in done:
        if r["key"] in seen:
            continue
        seen.add(r["key"])
        theirs = r["theirLargestBatch"]
        ratio = f"{r['ourLargestBatch'] / theirs:.2f}" if theirs else "-"
        mem = r["theirMemory"] or {}
        mem_s = ", ".join(f"{k} {v:.1f}" for k, v in mem.items()) if mem else "-"
        lines.append(f"| {r['key']} | {r['ourLargestBatch']} | {theirs} | {ratio} | "
                     f"{r['kvGiB']:.1f} | {mem_s} |")
    lines += ["", "Why they differ: the estimator's total at its largest batch is the whole card "
              "(80 GiB on an H100, 141 on an H200): weights + KV + 3.5 GiB of \"others\" + "
              "activations, without the gpu-memory-utilization share vLLM keeps back. vLLM, and "
              "the planner after it, give the KV cache gpu-memory-utilization (0.9) x the card "
              "less the weights and the profiled overhead (the planner's 3 GiB). Where the "
              "weights take most of the card (Qwen3-32B on one H100, Llama-3.1-70B on two) that "
              "10% is most of the KV cache, so the estimator's largest batch is 2x ours "
              "(Qwen3-32B on one H100) to 3.6x (Llama-3.1-70B on two H100s); where they do not, "
              "ours is 0.8-0.9 of theirs. The issue's \"ours 1.5-3x above\" is not reproduced: "
              "the planner is below the estimator everywhere. vLLM itself keeps 10% back "
              "(gpu-memory-utilization 0.9), so the estimator's figure is the optimistic one; "
              "the planner's 3 GiB overhead may be 1-1.5 GiB high for these models (no GPU here "
              "to read vLLM's log), which errs on the side of vLLM starting. Not changed.",
              *diagnostic(cfg)]
    if READINGS.get(cfg["label"]):
        lines += ["", f"Reading (written after the run): {READINGS[cfg['label']]}"]
    lines += ["", end]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--missing", action="store_true",
                    help="print the batch sizes the estimator still has to run")
    ap.add_argument("--json", type=Path, help="also store the rows here")
    args = ap.parse_args(argv)
    cfg = load(args.config)
    cfg["config"] = str(args.config.resolve().relative_to(ROOT))
    data = json.loads(DATA.read_text())
    rows = scenarios(cfg, data)
    if args.missing:
        need = sorted({f"{r['key']}={r['estBatch'] if 'estBatch' in r else r['pick']}" for r in rows
                       if r.get("missing") and r["key"] in data["cells"]})
        sys.stdout.write(" ".join(f"'{n}'" for n in need) + "\n")
        return 0
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    name = SECTION if cfg["label"] == "aic-estimator-1" else cfg["label"]
    return emit(name, section(rows, cfg, name), args.write)


if __name__ == "__main__":
    raise SystemExit(main())

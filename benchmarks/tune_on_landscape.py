"""The tuner's search, unchanged, on AIConfigurator's estimated landscape (issue 34 item
3). Not a unit test.

    .venv/bin/python -m benchmarks.tune_on_landscape --config CONFIG            # print
    .venv/bin/python -m benchmarks.tune_on_landscape --config CONFIG --write    # store, RESULTS.md
    .venv/bin/python -m benchmarks.tune_on_landscape --config CONFIG --section  # from the stored

CONFIG: a scenario file, e.g. ``benchmarks/configs/tune_landscape_1.yaml`` (the default).

Only the tuner's measurement is replaced: :class:`LandscapeEvaluator` is an
:class:`~llm_operator.inpod.tuner.search.Evaluator` (the live admission cap: one server,
caps moved live, as the operator runs the tuner) whose runs come from the estimator's
stored figures (``benchmarks/data/aic_estimator.json``) plus seeded noise of the spread
measured on the vLLM CPU engine. :func:`~llm_operator.inpod.tuner.search.search` and
:func:`~llm_operator.inpod.tuner.search.grid_search` run as they are. The scenarios, the
noise, the tuner's budget and the goals are a scenario file (``--config``), committed
before the run. Every throughput and latency figure is **estimated** (a model), the noise
**measured on the CPU engine**; no GPU ran anything.

The landscape: at ``c`` clients with ``--max-num-seqs m``, ``b = min(c, m, K)`` sequences
run (``K``: the estimator's largest batch without OOM); TTFT and TPOT at ``b`` are the
stored estimates, linearly interpolated in ``log(batch)`` between stored batch sizes; the
goodput is :func:`benchmarks.planner_vs_aic.goodput` (the ``c - b`` clients beyond the
batch queue and their wait is added to the TTFT, Little's law). One run's noise is a speed
factor ``s = exp(sigma z)``: latencies times ``s``, throughput divided by it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.gpu_noise import noise_of, pooled_log_sd
from benchmarks.planner_vs_aic import goodput, itl_of, spec_for
from benchmarks.planner_vs_aic import load as load_config
from benchmarks.results_md import emit, markers
from llm_operator.api.models import LLMService, ObjectMeta
from llm_operator.cli.aic import itl_p95_ms
from llm_operator.inpod.tuner.search import (
    SEARCH_VERSION,
    SLO,
    Budget,
    Config,
    Measurement,
    Options,
    Space,
    TrialFailed,
    Workload,
    grid_search,
    interpolate,
    ladder,
    search,
)
from llm_operator.knowledge.catalog import lookup_gpu
from llm_operator.planning import (
    make_plan,
    vllm_default_max_num_batched_tokens,
    vllm_default_max_num_seqs,
)
from llm_operator.tuning.job import start_hint

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "tune_landscape_1.yaml"
# What each run's figures say, written after seeing them (the figures themselves are
# computed from the stored JSON): keyed by the config's label.
READINGS: dict[str, str] = {
    "tune-landscape-1": (
        "on this landscape vLLM's defaults are the best configuration wherever anything "
        "meets the SLO, and wherever they miss it no max-num-seqs on the ladder meets it "
        "either, so goal (b) has nothing to test and (a) is met by keeping the defaults, "
        "which every run did. The reason is the closed loop at the workload's client count "
        "C: a cap b below C leaves C - b clients queueing, each for (C / b - 1) x a whole "
        "request's time (TTFT + (OSL - 1) x TPOT: 1.5-62 s here), so a queue of about a "
        "tenth of the clients already passes a 1-2 s TTFT objective; the 17 scenarios where "
        "a smaller cap meets the SLO at all (e.g. 192 of 256 clients for Llama-3.1-8B on "
        "one H100, relaxed) meet it with less throughput than the defaults. This run shows "
        "that the search does not lose against the defaults under the noise measured on "
        "the CPU engine (no run below them) and what it costs, not that it finds a better "
        "cap: tune-landscape-2 (SLOs whose TTFT objective admits a queue) is the run for "
        "that. The 76 runs the time budget stopped are all in 4 scenarios where nothing "
        "meets the SLO and the KV cache holds 24-26 of 256 long requests (Qwen3-32B on one "
        "H100, Llama-3.1-70B on two, 2048/512 tokens): a run at 256 clients takes about "
        "7 minutes of simulated time there, so the baseline's runs and probes used most "
        "of the 60 minutes; the defaults were kept, as the grid would have."),
    "tune-landscape-2": (
        "the goals are not met, for two weaknesses of the search and one property of this "
        "harness, and a third weakness that shows at smaller noise (the diagnostic "
        "below). Of the 479 runs below 0.95 of the best, 314 kept vLLM's defaults where "
        "they miss the SLO noise-free, 162 chose a cap that meets it with less goodput than "
        "the best, 3 a cap that misses it. Goal (b)'s 317 misses split into 164 runs where "
        "no cap that meets the SLO was ever compared and 153 where one was and lost. "
        "(1) The search's path: the concurrency sweep's probes are single noisy runs; the "
        "cap they predict best is verified, and when that verification fails the "
        "hill-climb restarts next to the baseline's cap (the top of the ladder, where the "
        "defaults miss the SLO), so the other caps the sweep predicted to meet are never "
        "tried. Llama-3.1-70B on two H200s, 512/256 tokens, 256 clients, queue-ok-50, seed "
        "1: the probe at 128 ran fast (TPOT 40 ms, 51 noise-free) and 128 was verified and "
        "lost, then only 192 (also missing); 64 and 96, which meet the SLO (64 predicted "
        "at 2,542 tok/s), were not tried. (2) The decision rule: a candidate wins on "
        "the typical paired ratio (a median). With goodput all or nothing per run, pairs "
        "where both arms miss give a ratio of exactly 1 and pairs where the defaults happen "
        "to meet give a ratio below 1 (their batch is larger), so a candidate that meets "
        "in most runs against defaults that meet in few is often not 5% better in a "
        "typical pair at 90%, though its mean goodput is many times theirs: seed 0 of the "
        "same scenario compared --max-num-seqs 64 in 12 pairs, 8 at >100x, 3 both zero, 1 "
        "where the defaults met; interval above 1.00x, not above 1.05x; defaults kept. "
        "(3) This harness makes both more frequent than a real engine would: the estimator "
        "gives one TTFT and TPOT per batch, so a run meets the SLO whole or not at all (a "
        "real engine's requests spread around it and its goodput falls gradually), and "
        "the noise is the CPU machine's 0.32 log-sd applied to latencies too, under which "
        "a cap 10% inside an objective still misses it in 37% of runs. The 162 runs below "
        "0.95 of the best with a cap that meets are mostly that: the best sits within 10% "
        "of an objective in 62% of them (median 0.93 of it), where the tuner's prediction "
        "margin (0.9 of the SLO) deliberately aims inside. The 3 runs below the defaults by "
        "more than the noise (goal (c)) are the same edge the other way: the defaults' "
        "TPOT is 0.90-0.98 of the objective, they met it in few noisy runs, and a smaller "
        "cap that met it in every run won its comparison. The 12 runs over 0.3 of the "
        "grid's trials took 5 of 16 (64 clients). A diagnostic after the run, not "
        "pre-registered (`--sigma 0.05`, a spread nobody measured): the same search then "
        "reaches (a) in 992 of 1380 runs (72%) and (b) in 335 of 440, so the noise explains "
        "most of (b)'s misses but not (a)'s; at that noise most (a) misses are a cap one or "
        "two ladder steps below the best (0.81-0.94 of it). The sweep probes halvings of "
        "the client count; between the probe at C/2, which meets the SLO, and C, where the "
        "defaults miss it, the prediction is interpolated toward zero, so the refinement "
        "(a neighbour only if predicted at 0.85 of the incumbent) rules out the steps above "
        "C/2 (Qwen3-32B on two H200s, 2048/512, 64 clients, queue-ok-25: 32 chosen, 40 "
        "would gain 11%, 48 23%); and the best itself often sits within 10% of an objective "
        "(TPOT 0.93-0.98 of it there), where the sweep's 0.9 margin predicts a miss. Not "
        "changed here: a "
        "change to the search or its rule needs its own pre-registered run."),
    "tune-landscape-3": (
        "the changed search (search version 2: the next cap the sweep predicts to beat "
        "the defaults verified when the best one fails; a sweep probe at 3C/4; pairs "
        "where neither arm had goodput left out of the interval) on tune-landscape-2's "
        "setup and seeds. Goal (b) rose from 123 to 196 of 440 runs; (a) and (c) did not "
        "improve, and the cost rose: 32 runs over 0.3 of the grid's trials (12 before), "
        "at most 0.50 of them (0.31), all 64-client scenarios (16 grid trials, so 5 "
        "trials already exceed 0.3). The goals are not met. Of (b)'s 244 misses, 228 kept "
        "the defaults and 16 chose a cap that misses the SLO noise-free (it met it in some "
        "noisy runs). What each change did, from diagnostics on these seeds after the run "
        "(not stored, each change undone alone by patching): the second verification is "
        "most of (b)'s gain (with one verification: 129 of 440); leaving both-zero pairs "
        "out adds about 20 (counted as 1: 174); the 3C/4 probe costs trials and (a) at this "
        "noise (without it: (a) 903, (b) 186, 17 runs over 0.3 of the grid's trials, 83 "
        "below the defaults) because a probe near C that ran fast makes a cap near C, which "
        "misses the SLO noise-free, look best; at a noise of 0.05 (`--sigma 0.05`, a spread "
        "nobody measured, nearer what a GPU shows than the CPU's 0.32) it is what lifts "
        "(a): 1042 of 1380 runs with it, 985 without, 992 for the old search, (b) 331-336 "
        "of 440 for all three. Leaving both-zero pairs out does not rescue a candidate "
        "against defaults that met the SLO in one pair: the clipped ratios 100x and 1/100x "
        "average to 1.00x, and with 9 pairs the interval's lower end is there (tune-"
        "landscape-2's seed 0 of Llama-3.1-70B on two H200s is such a case; "
        "tests/unit/test_tuner_compare.py). The 9 runs below the defaults by more than the "
        "noise are the edge tune-landscape-2 described: the defaults' TPOT at 0.85-0.99 of "
        "the objective, so they miss it in many noisy runs (5 of the 9 in seed 18). The "
        "changes were developed on seeds "
        "100-119 and 200-219 of this setup (commit message of the change), this run was "
        "made once after them."),
    "tune-landscape-4": (
        "the changed search (search version 2, see tune-landscape-3) on tune-landscape-1's "
        "setup and seeds, where vLLM's defaults are the best wherever anything meets the "
        "SLO: the goals are still met, but 13 runs (tune-landscape-1: none) chose a cap "
        "below the defaults, 0.85-0.95 of their goodput (3C/4 of the clients: 48 of 64, "
        "192 of 256), all in Llama-3.1-8B scenarios and all in seeds 15 and 18 (one seed's "
        "noise draws are the same in every scenario). These are false wins of the 90% "
        "interval: with 5 pairs its lower end is the smallest pair's ratio, and under this "
        "harness's noise, independent in each arm (0.45 log-sd on a ratio), 5 pairs out "
        "of 5 above 1.05x for a cap 5-15% worse happen in about 1 comparison of 150-300; the "
        "3C/4 probe made the cap near C a candidate in scenarios where the old search "
        "compared none (without the probe, a diagnostic after the run: no run below the "
        "defaults; at a noise of 0.05: none either way). The cost: median 0.09 of the "
        "grid's trials as before, at most 0.31 (0.19); 5 runs over 0.3."),
    "tune-landscape-5": (
        "Not a blind test. Its config was committed before the change to version 3 and "
        "before this run, but the tune-landscape-3 reading above had already published "
        "the same ablation (version 2 without the 3C/4 probe) on the same seeds 0-19, and "
        "this run reproduces it: (a) 903, (b) 186, 17 runs over 0.3 of the grid's trials, "
        "83 below the defaults. tune_landscape_5.yaml's header calls that ablation 'a "
        "diagnostic on other seeds': it was on these seeds (the config stays as committed). "
        "What it adds is the stored record of the search now in main. Against version 1 "
        "(run 2): (b) 186 of 440 (123), (a) 903 (901), (c) 1908 of 1920 (1917); its cost "
        "is in the table: more runs over 0.3 of the grid's trials and more below the "
        "defaults, false wins of the second verification's 90% interval."),
    "tune-landscape-6": (
        "Not a blind test either: the tune-landscape-4 reading had published that without "
        "the probe no run of this setup falls below the defaults, on these seeds. Every "
        "run chose as version 1 did (run 1): the defaults, wherever they are best."),
    "tune-landscape-7": (
        "Its config was written after aic-estimator-2's diagnostic (said there). Judged "
        "by the schedule's p95, fewer scenarios have anything that meets the SLO (26 of "
        "96, run 6: 44): the mix step of a 2048-token prompt (45-230 ms here) passes a 25 "
        "or 50 ms objective at every batch where more than 5% of a request's steps carry "
        "one. In the 26, vLLM's defaults are again the best level and meet the SLO, and "
        "every run kept them, as in run 6: goals (a)-(c) test nothing new here."),
    "tune-landscape-8": (
        "Its config was written after aic-estimator-2's diagnostic (said there). Judged "
        "by the schedule's p95 the defaults miss the SLO in 30 scenarios where a lower "
        "cap meets it (run 5: 22), and the search picks a cap in 418 of 1,120 runs (run "
        "5: 290 of 1,380); the goals stay unmet in the same way: (a) 69% of runs (run 5: "
        "65%), (b) 358 of 600 (run 5: 186 of 440), (c) 13 runs below the defaults by more "
        "than the noise (run 5: 12). As in run 5 the misses sit where the best cap's "
        "latency is within the noise (0.32 log-sd a run) of the objective, so that one "
        "run in three or four of the right cap misses it and the paired comparison "
        "against the defaults cannot separate them."),
    "tune-landscape-11": (
        "A sensitivity run: the noise is assumed, not measured. At a spread of 0.05 the "
        "same search (version 3) on run 8's setup reaches (a) in 933 of 1,120 runs (83%; "
        "at the CPU's 0.32: 69%) and (b) in 488 of 600 (358): the noise explains part of "
        "the misses. All 112 of (b)'s misses kept the defaults, and in 109 the cap "
        "the search compared with them misses the SLO too (a neighbour of the defaults' "
        "cap, tried when the sweep predicted no cap to beat them within 0.9 of the "
        "SLO). Version 4 (run 12) verifies, in that case, the caps the sweep predicts to "
        "beat the defaults at the SLO itself."),
    "tune-landscape-12": (
        "A sensitivity run (assumed noise). Version 4 verifies the caps predicted to "
        "beat the defaults at the SLO itself where none does within the 0.9 margin: (b) "
        "rises from 488 to 574 of 600 runs, (a) from 933 to 1,004 of 1,120 (89.6%: the 90% "
        "goal is missed by 4 runs), at no cost in trials (median 0.09 of the grid's, at "
        "most 0.32, as in run 11) and with the same runs below the defaults (goal "
        "(c): 11 below 1.00x, 9 below 0.95x, as in run 11). The misses left, (a) 116 runs "
        "in 13 scenarios and (b) 26 runs in 7 of them, are all where the best cap's "
        "latency is within 7% of an objective (9 of the 13 within 3.5%): one noisy run "
        "in a few of the right cap misses, and its pairs do not clear the interval."),
    "tune-landscape-9": (
        "Search version 4 at the CPU engine's noise (0.32): (a) 786 of 1,120 runs (run 8, "
        "version 3: 772), (b) 377 of 600 (358), (c) 1,907 of 1,920 (1,907); trials as in "
        "run 8. At this noise the edge verification rarely gets its chance: the "
        "defaults' own noisy runs meet the SLO often enough that the sweep's predictions "
        "do not beat their median, and a verified cap on the edge misses in one run of "
        "three or four, so its pairs do not clear the interval (run 12 at 0.05: (b) 574 "
        "of 600)."),
    "tune-landscape-10": (
        "Search version 4 on run 7's setup: every run chose as version 3 did (the "
        "defaults, wherever they are best), at the same trials."),
    "tune-landscape-13": (
        "Search version 4 on run 5's setup (the estimator's mean TPOT for the ITL): (a) "
        "906 of 1,380 runs (run 5: 903), (b) 203 of 440 (186), (c) 1,908 of 1,920 (1,908). "
        "The same small gain as run 9 at this noise."),
    "tune-landscape-14": (
        "Search version 4 on run 6's setup: every run chose as version 3 did (the "
        "defaults, wherever they are best), at the same trials."),
    **{f"tune-landscape-{n}": (
        f"Run {b} with the planner's hint from the model after aic-silicon-11 (the "
        "per-sequence cost 35 us): 8 of 96 hints moved (Llama-3.1-8B 512/256, 96-128 -> "
        "256). " + (
            "14 runs changed, all in the TP 2 scenarios of those (H100 and H200, both "
            "SLOs, seeds 2, 11, 14, 19): the same choice, vLLM's defaults (the best "
            "there), one trial fewer each; every goal figure is as in run "
            f"{b}." if n != 17 else
            "No run changed (choices and trials as in run 12): at this noise the search "
            "verifies the same caps from either start.")) for n, b in ((15, 13), (16, 9),
                                                                      (17, 12))},
    **{f"tune-landscape-{n}": (
        f"Run {b} with the planner's hint after aic-silicon-13 (the model's GPU cost of 0.76 "
        "us per sequence per layer): 2 of 96 hints moved (Llama-3.1-70B H200 TP 4 "
        "2048/512, 32 -> 48); no run changed.") for n, b in ((18, 14), (19, 10))},
    **{f"tune-landscape-{n}": (
        f"Run {b} with the planner's hint after aic-silicon-13 (the model's GPU cost of 0.76 "
        "us per sequence per layer): 7 of 96 hints moved (Qwen3-32B TP 2 512/256 256 -> "
        "128, Llama-3.1-70B TP 4 512/256 96 -> 64, Llama-3.1-8B TP 1 512/256 tight 256 -> "
        "192, Llama-3.1-70B H200 TP 4 2048/512 32 -> 48). " + text)
      for n, b, text in (
          (20, 15, "39 runs changed, in 4 scenarios (Llama-3.1-70B TP 4 and Llama-3.1-8B "
                   "TP 1 at 512/256): (a) 906 -> 905 of 1,380, (b) 203 -> 200 of 440, (c) "
                   "1,908 of 1,920 as before. From 64 instead of 96 the search settles as "
                   "often on 128 (the best) as on 64, and sometimes on the defaults where "
                   "they miss the SLO noise-free: no net gain at this noise."),
          (21, 16, "42 runs changed, in the same 4 scenarios: (a) 786 -> 784 of 1,120, "
                   "(b) 377 -> 374 of 600, (c) 1,907 -> 1,908 of 1,920. As run 20."),
          (22, 12, "34 runs changed, in 3 of them: (a) 1,004 -> 1,010 of 1,120 (90.2%: "
                   "the goal's 90%, by 2 runs, at a spread nobody measured), (b) 574 of "
                   "600 as before, (c) 1,911 -> 1,912 of 1,920. At this noise the lower "
                   "hint for Llama-3.1-70B TP 4 lets the search verify 128, the best, "
                   "more often."))},
    **{f"tune-landscape-{n}": (
        f"Run {n - 5} with the planner's hint after {after}: no hint of the 96 moved, so "
        f"every run chose as in run {n - 5}, at the same trials (the stored runs are "
        f"identical).{more}")
       for first, after, more in (
           (23, "aic-silicon-15 (the model's TTFT wait priced in mixed steps, re-fitted on "
                "NVIDIA's measured Qwen3-32B TP 2 rows)", ""),
           (28, "aic-silicon-17 (two fixes to the model's TTFT wait)",
            " After aic-silicon-19 (the second fix withdrawn) no hint moved either, so, as "
            "its config registered, this run stands as the current one."))
       for n in range(first, first + 5)},
    **{f"tune-landscape-{n}": (
        f"Run {n - 5}'s setup, hints and seeds with search version 5 (where the defaults "
        "met the SLO in no baseline run and nothing verified won, the planner's hint is "
        f"verified against them). {what} Where the defaults met the SLO every run is "
        "as before, trial for trial. The cost is where nothing on the landscape meets the "
        "SLO: the hint is one more trial there, and its comparison with the defaults "
        f"finds no goodput in either arm, so those runs take longer ({cost}) before "
        "keeping the defaults, and more runs end on the 3,600 s time budget (the table "
        "above).")
       for n, what, cost in (
           (33, "The 1-2 s TTFT objectives have no scenario where the defaults miss and "
                "something meets the SLO, so (a), (b) and (c) are run 28's.",
            "median simulated time 1,038 -> 1,050 s, mean 1,187 -> 1,357 s"),
           (34, "As in run 33: (a), (b) and (c) are run 29's.",
            "median simulated time 851 -> 856 s, mean 1,053 -> 1,184 s"),
           (35, "Goal (b) 200 -> 208 of 440 runs, (a) 905 -> 907 of 1,380: with the mean "
                "TPOT as the ITL, the hint meets the SLO noise-free in fewer of these "
                "scenarios (145 of run 30's 240 runs failing (b)).",
            "median simulated time 1,636 -> 2,451 s, 3 trials instead of 2"),
           (36, "Goal (b) 374 -> 434 of 600 runs and (a) 70.0% -> 74.6% (44 -> 48 of 56 "
                "scenarios by their median run): the rule's case, still short of both "
                "goals at the CPU engine's noise.",
            "median simulated time 1,393 -> 2,050 s, 3 trials instead of 2"),
           (37, "At the ASSUMED noise of 0.05, (a) 90.2% -> 91.6% and (b) 574 -> 590 of 600 "
                "runs.", "median simulated time 1,232 -> 1,906 s"))},
    **{f"tune-landscape-{n}": (
        f"Run {n - 5}'s setup, hints and seeds with search version 6 (a cap whose typical "
        "run meets the SLO beats a reference whose typical run misses it by more than 5% "
        "at 90% confidence; the hint verified where the defaults' typical run misses; a "
        "walk of up to 3 caps toward the SLO from a cap that lost), developed on seeds "
        f"100-119 only. {what}")
       for n, what in (
           (38, "The 1-2 s TTFT objectives have no scenario where the defaults miss and "
                "something meets the SLO: (a), (b) and (c) are run 33's, every run's "
                "choice the same."),
           (39, "As in run 38: (a), (b) and (c) are run 34's."),
           (40, "Goal (b) 208 -> 295 of 440 runs, (a) 907 -> 924 of 1,380 (47 -> 49 of 69 "
                "scenarios by their median run); (c) one run worse, 1,908 -> 1,907 of 1,920 "
                "(runs below the defaults 83 -> 85). The cost is where nothing on the "
                "landscape meets the SLO: the defaults miss there too, so the hint and the "
                "walk are tried (median simulated time 2,451 -> 2,812 s) and more runs end "
                "on the 3,600 s budget (192 -> 410) or spend more than 0.3 of the grid's "
                "trials (21 -> 56); where something meets, the median time fell, 670 -> "
                "660 s. Still short of (a) and (b) at the CPU engine's noise. By how far the "
                "defaults miss noise-free, runs failing (b), run 35 -> 40: within 1.2x of "
                "an objective 80 -> 73 of 140 (a miss the 5% margin rarely calls in the "
                "runs a trial affords), 1.2-1.5x 57 -> 23 of 120, 1.5x or more 95 -> 49 of "
                "180 (narrow windows between the TTFT and the ITL objective, e.g. 48-64 "
                "of 256 clients for Llama-3.1-70B on four H100s, tight)."),
           (41, "Goal (b) 434 -> 490 of 600 runs, (a) 836 -> 854 of 1,120 (76.2%; 48 -> "
                "50 of 56 scenarios by their median run), (c) unchanged (1,908). The cost, "
                "as in run 40, is where nothing meets the SLO: median simulated time 2,050 "
                "-> 2,782 s, 4 trials instead of 3, 188 -> 442 runs on the time budget, 14 "
                "-> 50 over 0.3 of the grid's trials. Runs failing (b), run 36 -> 41, by how "
                "far the defaults miss: within 1.2x 74 -> 62 of 100, 1.2-1.5x 40 -> 16 of "
                "120, 1.5x or more 52 -> 32 of 380."),
           (42, "At the ASSUMED noise of 0.05: (b) 590 -> 595 of 600, (a) and (c) "
                "unchanged (91.6%; 1,912 of 1,920)."))},
    **{f"tune-landscape-{n}": (
        f"Run {n - 5}'s setup, hints and seeds with search version 7 (the walk toward the "
        "SLO stops at a cap whose typical run misses both objectives by more than 5%: a "
        "larger cap only raises the ITL, a smaller one only lengthens the queue). "
        f"{what}")
       for n, what in (
           (43, "Every run's choice as run 38's."),
           (44, "Every run's choice as run 39's."),
           (45, "Goal (b) 295 -> 294 of 440 runs (one run lost), (a) and (c) unchanged "
                "(924 of 1,380; 1,907 of 1,920); 14 runs chose otherwise. Where nothing on "
                "the landscape meets the SLO, the median simulated tuning time 2,812 -> "
                "2,679 s; runs ending on the 3,600 s budget 410 -> 318, over 0.3 of the "
                "grid's trials 56 -> 35."),
           (46, "Goals unchanged ((a) 854 of 1,120, (b) 490 of 600, (c) 1,908 of 1,920); 25 "
                "runs chose otherwise, none across a goal's line. Where nothing meets the "
                "SLO, median simulated time 2,782 -> 2,277 s (run 36, search v5: 2,050 s); "
                "runs on the time budget 442 -> 247 (run 36: 188), over 0.3 of the grid's "
                "trials 50 -> 41."),
           (47, "At the ASSUMED noise of 0.05 every run's choice as run 42's; where nothing "
                "meets the SLO, median simulated time 2,604 -> 1,988 s, runs on the time "
                "budget 382 -> 219."))},
    **{f"tune-landscape-{n}": (
        f"Run {n - 5}'s setup, hints and seeds with search version 8 (a win on the SLO "
        "needs 5 runs of the candidate, as a goodput decision at 90% does; versions 6 and "
        f"7 decided on 3). {what}")
       for n, what in (
           (48, "Every run's choice as run 43's."),
           (49, "Goals as run 44's; 2 runs chose otherwise."),
           (50, "Goal (b) 294 -> 298 of 440 runs, (a) 924 -> 918 of 1,380, (c) unchanged "
                "(1,907); 57 runs chose otherwise; measurements a median 0.30 -> 0.33 of "
                "the grid's. Against search version 5 (run 35): (b) 208 -> 298, (a) 907 -> "
                "918, (c) 1,908 -> 1,907."),
           (51, "Goal (b) 490 -> 482 of 600 runs and (a) 854 -> 848 of 1,120: the price of "
                "the stronger evidence, where 3 runs of a cap on the SLO's edge had "
                "decided; (c) unchanged (1,908); measurements a median 0.30 -> 0.38 of the "
                "grid's. Against search version 5 (run 36): (b) 434 -> 482, (a) 836 -> 848 "
                "(74.6% -> 75.7%), (c) 1,908; where nothing meets the SLO the median "
                "simulated tuning time 2,050 -> 2,333 s and runs on the 3,600 s budget 188 "
                "-> 249."),
           (52, "At the ASSUMED noise of 0.05: (b) 595 of 600 as run 47, (a) 1,026 -> 1,027, "
                "(c) unchanged (1,912); against run 37 (version 5), (b) 590 -> 595."))},
    **{f"tune-landscape-{n}": (
        f"Run {n - 5}'s setup, hints and seeds with search version 9 (a candidate slower "
        "than its reference wins only on the SLO rule, whose reference must miss in its "
        f"typical run with confidence, no margin). {what} Superseded by run {n + 5} "
        "(version 10).")
       for n, what in (
           (53, "Every run's choice as run 48's."),
           (54, "Every run's choice as run 49's."),
           (55, "Goal (c) 1,907 -> 1,914 of 1,920 (below 1.00x 85 -> 70), (a) 918 -> 925 of "
                "1,380, (b) 298 -> 290 of 440."),
           (56, "Goal (c) 1,908 -> 1,913, (a) 848 -> 855 of 1,120, (b) 482 -> 480 of 600."),
           (57, "At the ASSUMED noise of 0.05: (c) 1,912 -> 1,919, (a) 1,027 -> 1,034, (b) 595 "
                "-> 588: --max-num-seqs 192, as fast as the defaults (4,925 against 4,922 "
                "tok/s), lost sure goodput wins on 'slower' by 3 tok/s."))},
    **{f"tune-landscape-{n}": (
        f"Run {n - 10}'s setup, hints and seeds with search version 10 (version 9, a "
        f"candidate 'slower' only by more than min-gain). Against run {n - 10} (version 8): "
        f"{what}")
       for n, what in (
           (58, "every run's choice as run 48's."),
           (59, "every run's choice as run 49's."),
           (60, "goal (c) 1,907 -> 1,913 of 1,920 (below 1.00x 85 -> 71, below 0.95x 77 -> "
                "64), (a) 918 -> 924 of 1,380, (b) 298 -> 291 of 440; 86 runs chose "
                "otherwise. The (c) misses left: defaults at 0.85-0.99 of the ITL objective "
                "whose runs' ratios, not only their goodput, looked like a sure miss."),
           (61, "goal (c) 1,908 -> 1,912 (below 1.00x 44 -> 40), (a) 848 -> 854 of 1,120 "
                "(76.2%), (b) 482 -> 480 of 600; 68 runs chose otherwise."),
           (62, "at the ASSUMED noise of 0.05, goal (c) 1,912 -> 1,917 (below 1.00x 10 -> 4), "
                "(a) 1,027 -> 1,033 (92.2%), (b) 595 -> 589 of 600: the 6 runs lost are "
                "defaults 1-2% over the ITL objective (typical run 1.01-1.02x, interval "
                "from 0.99-1.00x over 15-32 runs), which the goodput pairs had called and "
                "the SLO rule at 90% cannot; the decision now says so."))},
    **{f"tune-landscape-{n}": (
        f"Run {n - 15}'s setup, hints and seeds with search version 11 (version 10, and "
        "where a cap below the planner's hint won against the defaults, the hint compared "
        f"with them too). Against run {n - 5} (version 10): {what}")
       for n, what in (
           (63, "every run's choice as run 58's."),
           (64, "every run's choice as run 59's."),
           (65, "(a) 924 of 1,380 as before, (b) 291 -> 293 of 440, (c) 1,913 as before; 6 "
                "runs chose otherwise; runs over 0.3 of the grid's trials 26 -> 30. Judged "
                "by the mean TPOT the hint is within 0.95 of the best in 23 of 69 scenarios "
                "(run 60), so it has less to give here."),
           (66, "(a) 854 -> 907 of 1,120 (76.2% -> 81.0%; scenarios by their median run 49 "
                "-> 50 of 56), (b) 480 -> 487 of 600, (c) 1,912 -> 1,914; 61 runs chose "
                "otherwise. Against search version 8 (run 51): (a) 848 -> 907, (b) 482 -> "
                "487, (c) 1,908 -> 1,914."),
           (67, "at the ASSUMED noise of 0.05, 1 run chose otherwise; every goal's figure "
                "as run 62's."))},
    **{f"tune-landscape-{n}": (
        f"Run {n - 20}'s setup, hints and seeds with search version 12 (a slower "
        "candidate's goodput win left to the SLO rule only where it is also behind the "
        "defaults in the pairs where they had goodput). Against run "
        f"{n - 5} (version 11): {what} Superseded by run {n + 5} (version 13).")
       for n, what in (
           (68, "every run's choice as run 63's."),
           (69, "every run's choice as run 64's."),
           (70, "(b) 293 -> 285 of 440: 11 runs lost to caps with goodput in 5 of 12 pairs "
                "against defaults with none, read >100x by the interval, which leaves "
                "both-zero pairs out; (a), (c) as before."),
           (71, "(a) 907 -> 910 of 1,120, (b) 487 -> 491 of 600, (c) 1,914 as before."),
           (72, "at the ASSUMED noise of 0.05, (a) 1,033 -> 1,034, (b) 589 -> 590."))},
    **{f"tune-landscape-{n}": (
        f"Run {n - 25}'s setup, hints and seeds with search version 13 (version 12, and a "
        "slower candidate without goodput in its typical pair also left to the SLO rule). "
        f"{what}")
       for n, what in (
           (73, "Every run's choice as runs 48-68's."),
           (74, "Every run's choice as runs 49-69's."),
           (75, "Against run 70 (v12): (b) 285 -> 292 of 440, (a) 924 -> 923. Against run "
                "50 (v8): (a) 918 -> 923 of 1,380 (66.5% -> 66.9%), (b) 298 -> 292 of 440, "
                "(c) 1,907 -> 1,913 of 1,920 (below 1.00x 85 -> 75)."),
           (76, "Goals as run 71's (11 runs chose otherwise). Against run 51 (v8): (a) "
                "848 -> 910 of 1,120 (75.7% -> 81.2%), (b) 482 -> 491 of 600, (c) 1,908 -> "
                "1,914 of 1,920 (below 1.00x 44 -> 40)."),
           (77, "At the ASSUMED noise of 0.05, goals as run 72's (1 run chose otherwise). "
                "Against run "
                "52 (v8): (a) 1,027 -> 1,034 of 1,120, (b) 595 -> 590 of 600, (c) 1,912 -> "
                "1,917 (below 1.00x 10 -> 4)."))},
    "tune-landscape-78": (
        "A sensitivity run, not the goal's: run 76's setup, hints, seeds and search "
        "(version 13) at the spread of real vLLM on GPUs that NVIDIA's day-to-day repeats "
        "show (gpu-noise-1: 0.12, which one configuration of 71 carries; without it 0.027, "
        "computed after that run and not used). Against run 76 (the CPU engine's 0.32): (a) "
        "910 -> 1,028 of 1,120 (81.2% -> 91.8%, met), (b) 491 -> 569 of 600, (c) 1,914 -> "
        "1,916 of 1,920 (below 1.00x 40 -> 11); against run 77 (an ASSUMED 0.05): (a) "
        "1,034, (b) 590, (c) 1,917. Of the 91 runs below 0.95 x the best, 31 keep "
        "defaults that miss the SLO noise-free (near its edge, where one run's noise "
        "flips it) and 60 stop 1-6 ladder levels below the best (57 of them 1-4); 1 more "
        "run spent over 0.3 of the grid's trials. (b) and (c) stay short at this noise "
        "too."),
    "tune-landscape-79": (
        "A sensitivity run, not the goal's: run 75's setup (the estimator's mean TPOT as "
        "the ITL), hints, seeds and search at gpu-noise-1's 0.12. Against run 75 (0.32): (a) "
        "923 -> 1,029 of 1,380 (66.9% -> 74.6%), (b) 292 -> 399 of 440, (c) 1,913 -> 1,916 "
        "(below 1.00x 75 -> 15). Here the noise is not what keeps (a) short: of the 349 "
        "runs below 0.95 x the best, 257 stop 1-2 ladder levels below the best (178 two, "
        "79 one), at caps that meet the SLO with 0.64-0.95 of the best's goodput (median "
        "0.86). The mean TPOT grows smoothly "
        "with the cap, so the best is the largest cap under the ITL objective, and the "
        "search moves up only on a gain above min gain (5%) at 90% confidence: the next "
        "level up from these caps gains 2-31% (median 11%; near 10%, about 40 pairs at "
        "this noise); in the scenario traced (Llama-3.1-70B H200 TP 4, 512/256, 256 "
        "clients, tight SLO: 64 kept, 80 best) the baseline sweep's probes, interpolated "
        "across the cap where the ITL objective is missed, predict the next level below "
        "the refine margin, so it is not tried. Tried on seeds "
        "100-119 of runs 75, 76, 78 and 79 (never stored) and not kept: no interpolation "
        "across that edge (79: (a) +5 runs, 76: -3), also a neighbour two levels up ((a) "
        "79 +22, 76 -39, 78 -16), a wider predict margin 0.95-0.97 (79 +12-15, 78 +3-8)."),
}
# A run of a changed search is shown beside the run of the earlier search on the same
# setup (its label): both from their stored JSON.
BEFORE: dict[str, str] = {"tune-landscape-3": "tune-landscape-2",
                          "tune-landscape-4": "tune-landscape-1",
                          "tune-landscape-5": "tune-landscape-2",
                          "tune-landscape-6": "tune-landscape-1",
                          "tune-landscape-9": "tune-landscape-8",
                          "tune-landscape-10": "tune-landscape-7",
                          "tune-landscape-12": "tune-landscape-11",
                          "tune-landscape-13": "tune-landscape-5",
                          "tune-landscape-14": "tune-landscape-6",
                          "tune-landscape-15": "tune-landscape-13",
                          "tune-landscape-16": "tune-landscape-9",
                          "tune-landscape-17": "tune-landscape-12",
                          "tune-landscape-18": "tune-landscape-14",
                          "tune-landscape-19": "tune-landscape-10",
                          "tune-landscape-20": "tune-landscape-15",
                          "tune-landscape-21": "tune-landscape-16",
                          "tune-landscape-22": "tune-landscape-17",
                          **{f"tune-landscape-{n}": f"tune-landscape-{n - 5}"
                             for n in range(23, 58)},
                          **{f"tune-landscape-{n}": f"tune-landscape-{n - 10}"
                             for n in range(58, 63)},
                          **{f"tune-landscape-{n}": f"tune-landscape-{n - 5}"
                             for n in range(63, 73)},
                          **{f"tune-landscape-{n}": f"tune-landscape-{n - 25}"
                             for n in range(73, 78)},
                          # the same setup and search at the CPU engine's noise
                          "tune-landscape-78": "tune-landscape-76",
                          "tune-landscape-79": "tune-landscape-75"}
LABEL = ("estimated (AIConfigurator's estimator, a model) + noise measured on the CPU engine; "
         "the tuner's code unchanged")
# The tuner's code a stored run describes: the search and its paired comparison (and the
# start-up rules it checks configurations with).
TUNER_CODE = "operator/llm_operator/inpod/tuner"


def tuner_version(data: dict[str, Any]) -> int:
    """The search version (``search.SEARCH_VERSION``) that made a stored run: runs stored
    before the field existed (tune-landscape-1 and -2) were made by version 1."""
    return int(data.get("tunerVersion", 1))


def label_of(data: dict[str, Any]) -> str:
    """What a stored run's figures are, with the tuner's code they describe."""
    if tuner_version(data) == 1:
        return LABEL  # as tune-landscape-1 and -2 were published
    noise = ("ASSUMED noise (a sensitivity run)" if data["config"]["noise"].get("assumed")
             else "noise measured on GPUs by NVIDIA (day-to-day repeats, gpu-noise-1; a "
             "sensitivity run)" if gpu_measured(data["config"]["noise"])
             else "noise measured on the CPU engine")
    return (f"estimated (AIConfigurator's estimator, a model) + {noise}; the tuner's code as "
            f"of commit {data['commit'][:10]} (search version {tuner_version(data)})")


# --- the landscape (pure) -----------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One stored estimator cell: a model on a GPU at a TP, one workload's lengths."""

    key: str
    model: str
    gpu: str
    tp: int
    input_tokens: int
    output_tokens: int
    points: dict[int, tuple[float, float]]  # batch -> (TTFT ms, TPOT ms), none OOM
    largest_batch: int  # K: the largest batch the estimator does not call OOM
    # batch -> the estimator's step schedule (aic_estimate.schedule_of), where stored
    schedules: dict[int, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, key: str, cell: dict[str, Any]) -> Cell:
        stored = {int(b): v for b, v in cell["batches"].items() if "oom" not in v}
        kv = cell.get("kv", {})
        at = kv.get("at")
        if at and "oom" not in at:
            stored[int(kv["largestBatch"])] = at
        pts = {b: (float(v["ttftMs"]), float(v["tpotMs"])) for b, v in stored.items()}
        largest = int(kv.get("largestBatch") or max(pts, default=0))
        sched = {b: v["schedule"] for b, v in stored.items() if "schedule" in v}
        return cls(key, cell["model"], cell["gpu"], int(cell["tp"]), int(cell["input"]),
                   int(cell["output"]), dict(sorted(pts.items())), largest,
                   dict(sorted(sched.items())))

    def _between(self, series: dict[int, float], batch: int) -> float:
        """``series`` at ``batch``: the stored figure, else linear in log(batch) between
        the stored sizes around it (the tuner's own :func:`interpolate`)."""
        got = interpolate(series, batch)
        if got is None:
            xs = sorted(series)
            raise ValueError(f"{self.key}: batch {batch} outside the stored sizes "
                             f"{xs[0]}..{xs[-1]}")
        return got

    def at(self, batch: int) -> tuple[float, float]:
        """(TTFT, TPOT) in ms at ``batch`` running sequences: the stored figure, else
        linear in log(batch) between the stored sizes around it."""
        return (self._between({b: v[0] for b, v in self.points.items()}, batch),
                self._between({b: v[1] for b, v in self.points.items()}, batch))

    def itl_p95(self, batch: int) -> float:
        """The ITL p95 (ms) at ``batch`` from the estimator's step schedule
        (:func:`llm_operator.cli.aic.itl_p95_ms`): each of the schedule's figures
        linear in log(batch) between the stored sizes around it, the rule applied to
        them."""
        if not self.schedules:
            raise ValueError(f"{self.key}: no step schedule stored; run .venv-aic/bin/python "
                             "-m benchmarks.aic_estimate --schedule")
        fields = next(iter(self.schedules.values()))
        return itl_p95_ms({k: self._between({b: s[k] for b, s in self.schedules.items()},
                                            batch) for k in fields}, batch)


@dataclass(frozen=True)
class Scenario:
    """A cell under one client count and one SLO."""

    cell: Cell
    concurrency: int
    slo_name: str
    ttft_ms: float
    tpot_ms: float
    itl: str = "tpot-mean"  # what stands for the ITL p95 (planner_vs_aic.ITL_STATISTICS)

    @property
    def name(self) -> str:
        return f"{self.cell.key}|c{self.concurrency}|{self.slo_name}"

    @property
    def slo(self) -> dict[str, float]:
        return {"ttftMs": self.ttft_ms, "tpotMs": self.tpot_ms}

    def defaults(self) -> tuple[int, int]:
        """vLLM's max-num-seqs and max-num-batched-tokens on this GPU."""
        facts = lookup_gpu(self.cell.gpu)
        assert facts is not None, self.cell.gpu
        return vllm_default_max_num_seqs(facts), vllm_default_max_num_batched_tokens(facts)

    def running(self, clients: int, cap: int | None) -> int:
        """Sequences that run: at most the clients, the cap and the KV cache."""
        return max(1, min(clients, cap if cap is not None else self.defaults()[0],
                          self.cell.largest_batch))

    def run(self, clients: int, cap: int | None, speed: float = 1.0
            ) -> tuple[float, float, float, float, int]:
        """One run at ``clients`` with ``cap``, latencies x ``speed``: (goodput tok/s,
        output tok/s, TTFT seen ms, ITL ms (the config's statistic: mean TPOT or the
        schedule's p95), running batch)."""
        b = self.running(clients, cap)
        ttft, tpot = self.cell.at(b)
        est = {"ttftMs": ttft * speed, "tpotMs": tpot * speed}
        if self.itl == "p95-from-schedule":
            est["itlP95Ms"] = self.cell.itl_p95(b) * speed
        wl = {"concurrency": clients, "output": self.cell.output_tokens}
        good, _why = goodput(est, b, wl, self.slo, itl=self.itl)
        r_ms = est["ttftMs"] + (self.cell.output_tokens - 1) * est["tpotMs"]
        tps = b * self.cell.output_tokens / (r_ms / 1e3)
        wait = max(0.0, clients / b - 1) * r_ms
        return good, tps, est["ttftMs"] + wait, itl_of(est, b, self.itl)[0], b

    def truth(self, cap: int | None) -> float:
        """Noise-free goodput at the workload's concurrency with ``cap`` (None: vLLM's
        default)."""
        return self.run(self.concurrency, cap)[0]


# --- the evaluator (the tuner's measurement, replaced) --------------------------------------


@dataclass
class LandscapeEvaluator:
    """The live admission cap on one simulated server: the first trial pays a start, the
    others move the cap (``needs_start``, as :class:`~.runner.LiveCapEvaluator`)."""

    scenario: Scenario
    sigma: float
    seed: int
    startup_s: float
    waves: float
    min_prompts: int
    clock: list[float] = field(default_factory=lambda: [0.0])
    measurements: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.started = False

    def now(self) -> float:
        return self.clock[0]

    def needs_start(self, config: Config) -> bool:
        return not self.started

    def start(self, config: Config) -> LandscapeSession:
        if config.max_num_batched_tokens not in (None, self.scenario.defaults()[1]):
            raise TrialFailed("the landscape has no max-num-batched-tokens dimension")
        startup = 0.0 if self.started else self.startup_s
        self.started = True
        self.clock[0] += startup
        return LandscapeSession(self, config.max_num_seqs, startup)


@dataclass
class LandscapeSession:
    ev: LandscapeEvaluator
    cap: int | None
    startup_s: float

    def measure(self, concurrency: int) -> Measurement:
        ev, sc = self.ev, self.ev.scenario
        speed = math.exp(ev.sigma * ev.rng.gauss(0.0, 1.0))
        good, tps, ttft_ms, itl_ms, b = sc.run(concurrency, self.cap, speed)
        osl = sc.cell.output_tokens
        prompts = max(ev.min_prompts, int(ev.waves * concurrency))
        rate = tps / osl
        duration = prompts / rate
        ev.clock[0] += duration
        ev.measurements += 1
        ttft_miss = prompts if ttft_ms > sc.ttft_ms else 0
        itl_miss = prompts if itl_ms > sc.tpot_ms else 0
        return Measurement(
            concurrency=concurrency, duration_s=duration, goodput_tps=good, output_tps=tps,
            request_rate=rate, ttft_p95_ms=ttft_ms, itl_p95_ms=itl_ms, completed=prompts,
            good_fraction=1.0 if good > 0 else 0.0, ttft_miss=ttft_miss, itl_miss=itl_miss,
            running_max=float(b), running_mean=float(b),
            waiting_mean=float(concurrency - b),
            kv_tokens=float(sc.cell.largest_batch
                            * (sc.cell.input_tokens + sc.cell.output_tokens)))

    def close(self) -> None:
        return None


# --- one scenario -----------------------------------------------------------------------------


def hint_for(sc: Scenario) -> int:
    """What the operator passes as ``--hint-max-num-seqs`` (tuning.job.start_hint)."""
    wl = {"input": sc.cell.input_tokens, "output": sc.cell.output_tokens,
          "concurrency": sc.concurrency}
    spec = spec_for(sc.cell.model, sc.cell.gpu, sc.cell.tp, wl, sc.slo)
    svc = LLMService(metadata=ObjectMeta(name="svc", namespace="ml"), spec=spec)
    return start_hint(svc, make_plan(spec))


def space_for(sc: Scenario) -> Space:
    """The operator's space (inpod/tuner/main.py): max-num-seqs levels up to the client
    count (at most vLLM's default); max-num-batched-tokens not searched (config)."""
    d_mns, d_mnbt = sc.defaults()
    return Space(max_num_seqs=ladder(1, max(1, min(sc.concurrency, d_mns))),
                 default_max_num_seqs=d_mns, default_max_num_batched_tokens=d_mnbt,
                 server_args=("--tensor-parallel-size", str(sc.cell.tp)))


def run_scenario(sc: Scenario, cfg: dict[str, Any]) -> dict[str, Any]:
    """The grid's trial count, the landscape's truth, and one search per seed."""
    t = cfg["tuner"]
    sigma = float(cfg["noise"]["logSd"])
    space = space_for(sc)
    wl = Workload(sc.cell.input_tokens, sc.cell.output_tokens, sc.concurrency)
    slo = SLO(sc.ttft_ms, sc.tpot_ms)
    hint = hint_for(sc)
    opts = Options(min_gain=float(t["minGain"]), hint_max_num_seqs=hint)
    budget = Budget(max_trials=int(t["maxTrials"]), max_seconds=float(t["maxSeconds"]))

    def evaluator(seed: int) -> LandscapeEvaluator:
        return LandscapeEvaluator(sc, sigma, seed, float(t["startupSeconds"]),
                                  float(t["waves"]), int(t["minPrompts"]))

    g_ev = evaluator(10_000)
    grid = grid_search(g_ev, space, wl, slo, None, opts, clock=g_ev.now)
    truth = {str(lvl): sc.truth(lvl) for lvl in space.max_num_seqs}
    defaults = sc.truth(None)
    runs = []
    first = int(cfg.get("seedOffset", 0))  # a diagnostic's other seeds (never stored)
    for seed in range(first, first + int(cfg["seeds"])):
        ev = evaluator(seed)
        out = search(ev, space, wl, slo, budget, opts, clock=ev.now)
        best = out.best.config.max_num_seqs if out.best is not None else None
        runs.append({"seed": seed, "choice": best, "truth": sc.truth(best),
                     "trials": len(out.trials), "measurements": ev.measurements,
                     "simSeconds": round(out.wall_s, 1), "complete": out.complete,
                     "stop": out.stop_reason, "decision": out.decision()})
    return {"name": sc.name, "key": sc.cell.key, "model": sc.cell.model, "gpu": sc.cell.gpu,
            "tp": sc.cell.tp, "input": sc.cell.input_tokens, "output": sc.cell.output_tokens,
            "concurrency": sc.concurrency, "slo": sc.slo_name, "ttftMs": sc.ttft_ms,
            "tpotMs": sc.tpot_ms, "largestBatch": sc.cell.largest_batch, "hint": hint,
            "defaultMaxNumSeqs": sc.defaults()[0], "defaultsBatch":
            sc.running(sc.concurrency, None), "defaults": defaults, "levels": truth,
            "gridTrials": len(grid.trials), "gridMeasurements": g_ev.measurements,
            "gridChoice": grid.best.config.max_num_seqs if grid.best is not None else None,
            "runs": runs}


# --- config, noise, scenarios ------------------------------------------------------------------


def load(path: Path) -> dict[str, Any]:
    """A scenario file; one with ``base`` takes that file's fields (and, where that one
    names a base, its fields) and overrides them (:func:`benchmarks.planner_vs_aic.load`)."""
    cfg = load_config(path)
    for name in ("label", "landscape", "cells", "concurrencies", "slos", "seeds", "noise",
                 "tuner", "goals"):
        if name not in cfg:
            raise SystemExit(f"{path}: the field {name!r} is missing; see "
                             "benchmarks/configs/tune_landscape_1.yaml for each field")
    if "from" in cfg["noise"]:
        # A spread measured on GPUs by others (tune-landscape-78, -79): gpu-noise-1's stored
        # figure, rounded as its config says; recomputed from the stored extract.
        cfg["noise"] = {**cfg["noise"], "logSd": noise_of(ROOT / cfg["noise"]["from"])}
    return cfg


def gpu_measured(noise: dict[str, Any]) -> bool:
    """Whether a run's noise is a spread measured on GPUs by others (gpu-noise-1), not
    the CPU engine's nor an assumed one."""
    return "from" in noise


def measured_noise(paths: list[str] | None) -> float | None:
    """The pooled within-configuration log-sd of output tok/s over the rotation
    measurements of stored CPU runs (tune_paired.py's JSON); None without such runs (a
    noise measured on GPUs, :func:`gpu_measured`)."""
    if not paths:
        return None
    groups: list[list[float]] = []
    for p in paths:
        by: dict[str, list[float]] = {}
        for m in json.loads((ROOT / p).read_text())["rotation"]["measurements"]:
            by.setdefault(json.dumps(m["config"], sort_keys=True), []).append(m["output_tps"])
        groups.extend(by.values())
    return pooled_log_sd(groups)[0]


def scenarios(cfg: dict[str, Any]) -> list[Scenario]:
    data = json.loads((ROOT / cfg["landscape"]).read_text())
    keys = sorted(data["cells"]) if cfg["cells"] == "all" else list(cfg["cells"])
    out = []
    for k in keys:
        cell = Cell.of(k, data["cells"][k])
        for c in cfg["concurrencies"]:
            for slo in cfg["slos"]:
                out.append(Scenario(cell, int(c), slo["name"], float(slo["ttftMs"]),
                                    float(slo["tpotMs"]), str(cfg.get("itl", "tpot-mean"))))
    return out


# --- the summary (pure, from the stored JSON) ---------------------------------------------------


def best_of(row: dict[str, Any]) -> tuple[float, str]:
    """The landscape's best noise-free goodput over the space's levels and the defaults."""
    cands = {**row["levels"], "defaults": row["defaults"]}
    k = max(cands, key=lambda x: cands[x])
    return cands[k], k


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    """Each goal's figure, from the stored runs."""
    g = data["config"]["goals"]
    sigma = float(data["config"]["noise"]["logSd"])
    floor = math.exp(-sigma)
    a_runs = a_ok = 0
    a_scen = a_scen_ok = 0
    a_miss_best: list[str] = []
    a_miss_cost: list[str] = []
    b_scen, b_runs, b_ok = 0, 0, 0
    b_miss: list[str] = []
    c_runs = c_ok = below1 = below95 = 0
    c_miss: list[str] = []
    empty: list[str] = []
    budget_stops: list[str] = []
    trial_shares: list[float] = []
    meas_shares: list[float] = []
    for row in data["scenarios"]:
        best, _ = best_of(row)
        if best <= 0:
            empty.append(row["name"])
        ratios = []
        for r in row["runs"]:
            share = r["trials"] / row["gridTrials"]
            trial_shares.append(share)
            meas_shares.append(r["measurements"] / row["gridMeasurements"])
            tag = f"{row['name']} seed {r['seed']}"
            if not r["complete"]:
                budget_stops.append(tag)
            if best > 0:
                ratio = r["truth"] / best
                ratios.append(ratio)
                a_runs += 1
                good_best = ratio >= g["bestShare"]
                good_cost = share <= g["trialShare"]
                a_ok += good_best and good_cost
                if not good_best:
                    a_miss_best.append(tag)
                if not good_cost:
                    a_miss_cost.append(tag)
            c_runs += 1
            d = row["defaults"]
            c_ok += r["truth"] >= d * floor
            below1 += r["truth"] < d
            below95 += r["truth"] < 0.95 * d
            if r["truth"] < d * floor:
                c_miss.append(tag)
        if ratios:
            a_scen += 1
            a_scen_ok += statistics.median(ratios) >= g["bestShare"]
        if row["defaults"] <= 0 < best:
            b_scen += 1
            for r in row["runs"]:
                b_runs += 1
                b_ok += r["truth"] > 0
                if r["truth"] <= 0:
                    b_miss.append(f"{row['name']} seed {r['seed']}")
    return {
        "sigma": sigma, "scenarios": len(data["scenarios"]), "empty": empty,
        "budgetStops": budget_stops,
        "a": {"runs": a_runs, "ok": a_ok, "share": a_ok / a_runs if a_runs else None,
              "met": bool(a_runs) and a_ok / a_runs >= g["runsShare"],
              "scenarios": a_scen, "scenariosOk": a_scen_ok,
              "missBest": a_miss_best, "missCost": a_miss_cost},
        "b": {"scenarios": b_scen, "runs": b_runs, "ok": b_ok, "met": b_ok == b_runs,
              "miss": b_miss},
        "c": {"runs": c_runs, "ok": c_ok, "met": c_ok == c_runs, "floor": floor,
              "below1": below1, "below95": below95, "miss": c_miss},
        "trialShare": {"median": statistics.median(trial_shares), "max": max(trial_shares)},
        "measurementShare": {"median": statistics.median(meas_shares),
                             "max": max(meas_shares)},
    }


def _met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def _short(name: str) -> str:
    """``Llama-8B H100 TP1 512/256``: a scenario's name without table-breaking bars."""
    return (name.replace("meta-llama/", "").replace("-Instruct", "").replace("Qwen/", "")
            .replace("Llama-3.1-", "Llama-").replace("|tp", " TP").replace("|c", " c")
            .replace("|", " "))


def section(data: dict[str, Any]) -> str:
    """The RESULTS.md section, from the stored JSON alone."""
    cfg = data["config"]
    name = data["section"]
    s = summarize(data)
    begin, end = markers(name)
    a, b, c = s["a"], s["b"], s["c"]
    g = cfg["goals"]
    lines = [begin, f"## The tuner's search on AIConfigurator's estimated landscape "
             f"({cfg['label']})", "",
             f"**{label_of(data)}.** The tuner's `search` and `grid_search` "
             "(llm_operator/inpod/tuner/search.py) ran as they are; only the measurement "
             "was replaced: each run's "
             "goodput, TTFT and ITL at a max-num-seqs come from AIConfigurator 0.12.0's "
             "stored vLLM estimates (`benchmarks/data/aic_estimator.json`; TTFT and TPOT "
             "linearly interpolated in log(batch) between stored batch sizes; "
             + ("the ITL p95 the tuner judges read from the estimator's step schedule (the "
                "mix step's latency when steps carrying other requests' prompts are more "
                "than 5% of a request's steps, else the generation-only step's; "
                "aic_estimator_3.yaml), not its mean TPOT as in runs 1-6; "
                if cfg.get("itl") == "p95-from-schedule"
                else "the estimator's mean TPOT stands for the ITL p95 the tuner judges; ")
             + "the running "
             "batch is min(clients, cap, the estimator's largest batch without OOM)), with "
             "the clients beyond the running batch queueing and their Little's-law wait "
             "added to the TTFT, goodput by `benchmarks/planner_vs_aic.goodput` (all or "
             "nothing at the SLO), times seeded run-to-run noise: one speed factor "
             f"exp({s['sigma']:.2f} z) per run on latencies and throughput, {s['sigma']:.2f} "
             + (f"an ASSUMED spread ({cfg['noise']['assumed']}; the vLLM CPU engine's, "
                f"measured in tune-noisy-1 runs 1 and 2, is {data['noiseMeasured']:.3f})"
                if cfg["noise"].get("assumed") else
                "the run-to-run spread of real vLLM on GPUs MEASURED BY NVIDIA (gpu-noise-1: "
                "the pooled log-sd of output tok/s over its configurations measured on two "
                "or more dates with the same vLLM image, rounded; day to day, so an upper "
                "bound of the spread within one tuning Job), in place of the vLLM CPU "
                "engine's 0.32 (a sensitivity run: the goals ask for the CPU engine's)"
                if gpu_measured(cfg["noise"]) else
                "being the pooled log-sd of output tok/s measured on the vLLM CPU engine "
                f"(tune-noisy-1 runs 1 and 2, recomputed: {data['noiseMeasured']:.3f})")
             + ", independent run to run. The operator's tuner settings: the live admission "
             f"cap, the planner's hint, {cfg['tuner']['maxTrials']} trials, min gain "
             f"{cfg['tuner']['minGain']:.0%}; max-num-batched-tokens not searched (the "
             "estimator has no such dimension). vLLM's defaults: max-num-seqs 1024 / "
             "max-num-batched-tokens 8192 on H100 and H200. Pre-registered in "
             f"`{data['configFile']}` (git blob `{data['configGitBlob'][:10]}`), run at "
             f"commit `{data['commit'][:10]}`: {s['scenarios']} scenarios (every stored "
             f"cell x {'/'.join(str(x) for x in cfg['concurrencies'])} clients x "
             f"{len(cfg['slos'])} SLOs), {cfg['seeds']} seeds each; "
             f"{data['runtimeSeconds']:.0f} s on this machine's CPU for all of it. "
             f"Regenerate: `.venv/bin/python -m benchmarks.tune_on_landscape --config "
             f"{data['configFile']} --write`.", "",
             "| goal | figure | met |", "|---|---|---|",
             f"| (a) choice >= {g['bestShare']} x the landscape's best (noise-free) with <= "
             f"{g['trialShare']} x the grid's trials, in >= {g['runsShare']:.0%} of runs | "
             f"{a['ok']} of {a['runs']} runs ({a['share']:.1%}) in the {a['scenarios']} "
             f"scenarios where something meets the SLO; per scenario (median run): "
             f"{a['scenariosOk']} of {a['scenarios']} | {_met(a['met'])} |",
             f"| (b) where vLLM's defaults miss the SLO, the choice meets it | "
             f"{b['ok']} of {b['runs']} runs in {b['scenarios']} such scenarios | "
             f"{_met(b['met'])} |",
             f"| (c) choice never below the defaults by more than the noise (>= "
             f"{c['floor']:.2f} x, exp(-sigma)) | {c['ok']} of {c['runs']} runs; below "
             f"1.00x: {c['below1']}, below 0.95x: {c['below95']} | {_met(c['met'])} |",
             "",
             f"Trials (each a trial of the tuner's budget; with the live cap one server start "
             f"per run): median {s['trialShare']['median']:.2f}, at most "
             f"{s['trialShare']['max']:.2f} of the grid's; measurements (runs at the "
             f"workload's clients and probes): median {s['measurementShare']['median']:.2f},"
             f" at most {s['measurementShare']['max']:.2f} of the grid's. Scenarios where "
             f"nothing on the landscape meets the SLO (excluded from (a) and (b)): "
             f"{len(s['empty'])}. Runs the tuner's time budget "
             f"({cfg['tuner']['maxSeconds']:g} s, simulated clock) stopped before it "
             f"converged (it kept the best so far): {len(s['budgetStops'])}.", ""]
    lines += _misses(data, s)
    lines += _before_after(data, s)
    if READINGS.get(cfg["label"]):
        lines += ["", f"Reading (written after the run): {READINGS[cfg['label']]}"]
    lines += ["", "| model, GPU, TP, tokens | clients | SLO | defaults (batch): goodput | "
              "best level: goodput | hint | choices over seeds (count) | median choice / best "
              "| median trials / grid's |", "|---|---|---|---|---|---|---|---|---|"]
    for row in data["scenarios"]:
        best, where = best_of(row)
        counts: dict[str, int] = {}
        for r in row["runs"]:
            k = "defaults" if r["choice"] is None else str(r["choice"])
            counts[k] = counts.get(k, 0) + 1
        ch = ", ".join(f"{k} ({v})" for k, v in sorted(
            counts.items(), key=lambda kv: (-kv[1], kv[0])))
        ratio = (f"{statistics.median(r['truth'] / best for r in row['runs']):.2f}"
                 if best > 0 else "-")
        tr = statistics.median(r["trials"] for r in row["runs"])
        best_s = f"{where}: {best:,.0f}" if best > 0 else "none meets the SLO"
        lines.append(
            f"| {_short(row['key'])} | {row['concurrency']} | {row['slo']} | "
            f"({row['defaultsBatch']}): {row['defaults']:,.0f} | {best_s} | "
            f"{row['hint']} | {ch} | {ratio} | {tr:g} / {row['gridTrials']} |")
    lines += ["", end]
    return "\n".join(lines) + "\n"


def _before_after(data: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """The goals' figures beside those of the earlier search's run on the same setup."""
    label = BEFORE.get(data["config"]["label"])
    if label is None:
        return []
    old = json.loads(out_path({"label": label}).read_text())
    o = summarize(old)

    def over(d: dict[str, Any]) -> int:
        return sum(r["trials"] > d["config"]["goals"]["trialShare"] * row["gridTrials"]
                   for row in d["scenarios"] for r in row["runs"])

    def cells(x: dict[str, Any], d: dict[str, Any]) -> list[str]:
        a, b, c = x["a"], x["b"], x["c"]
        return [f"{a['ok']} of {a['runs']} ({a['share']:.1%})",
                f"{a['scenariosOk']} of {a['scenarios']}", f"{len(a['missBest'])}",
                f"{b['ok']} of {b['runs']}", f"{c['ok']} of {c['runs']}",
                f"{c['below1']} / {c['below95']}",
                f"{x['trialShare']['median']:.2f} / {x['trialShare']['max']:.2f}",
                f"{over(d)}",
                f"{x['measurementShare']['median']:.2f} / {x['measurementShare']['max']:.2f}",
                f"{len(x['budgetStops'])}"]

    rows = ("(a) runs", "(a) scenarios (median run)", "(a) runs below 0.95 x the best",
            "(b) runs", "(c) runs", "runs below the defaults: 1.00x / 0.95x",
            "trials / grid's: median / max", "runs over 0.3 x the grid's trials",
            "measurements / grid's: median / max", "runs stopped by the time budget")
    before, after = cells(o, old), cells(s, data)
    sd_old, sd_new = (float(d["config"]["noise"]["logSd"]) for d in (old, data))
    first, n_old, n_new = (("same setup, same seeds", "", "") if sd_old == sd_new else
                           ("same setup and seeds, another noise", f", noise {sd_old:.2f}",
                            f", noise {sd_new:.2f}"))
    head = (f"| {first} | {label} (search version {tuner_version(old)}{n_old}, "
            f"commit `{old['commit'][:10]}`) | {data['config']['label']} (search version "
            f"{tuner_version(data)}{n_new}, commit `{data['commit'][:10]}`) |")
    return ["", head, "|---|---|---|",
            *(f"| {r} | {x} | {y} |" for r, x, y in zip(rows, before, after, strict=True))]


def _misses(data: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """Each goal's misses, counted by scenario, with the stored explanation."""
    out = []
    for goal, key, what in (("a", "missBest", "choice below 0.95 x the best"),
                            ("a", "missCost", "more trials than 0.3 x the grid's"),
                            ("b", "miss", "defaults miss the SLO and so does the choice"),
                            ("c", "miss", "choice below the defaults by more than the noise")):
        tags = s[goal][key]
        if not tags:
            out.append(f"- ({goal}) {what}: none.")
            continue
        by: dict[str, int] = {}
        for t in tags:
            sc = t.rsplit(" seed ", 1)[0]
            by[sc] = by.get(sc, 0) + 1
        detail = "; ".join(f"{_short(k)} ({v} run{'s' if v > 1 else ''})"
                           for k, v in sorted(by.items()))
        out.append(f"- ({goal}) {what}: {len(tags)} runs in {len(by)} scenarios: {detail}.")
    return out


# --- main -------------------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def dumps(data: dict[str, Any]) -> str:
    """The stored JSON: one line per run (about 1,900 runs per config)."""
    head = json.dumps({k: v for k, v in data.items() if k != "scenarios"}, indent=1)
    rows = []
    for row in data["scenarios"]:
        meta = json.dumps({k: v for k, v in row.items() if k != "runs"})
        runs = ",\n   ".join(json.dumps(r) for r in row["runs"])
        rows.append(f'  {meta[:-1]}, "runs": [\n   {runs}]}}')
    return head[:-2] + ',\n "scenarios": [\n' + ",\n".join(rows) + "\n ]\n}\n"


def out_path(cfg: dict[str, Any]) -> Path:
    return ROOT / "benchmarks" / "data" / f"{cfg['label'].replace('-', '_')}.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--write", action="store_true",
                    help="store the runs (benchmarks/data/<label>.json) and replace the "
                    "section where it lives")
    ap.add_argument("--section", action="store_true",
                    help="no runs: print (with --write, replace) the section from the "
                    "stored JSON")
    ap.add_argument("--only", default="", help="substring of the scenario names to run "
                    "(a trial; never stored)")
    ap.add_argument("--sigma", type=float, help="another noise log-sd than the config's "
                    "(a diagnostic; never stored)")
    ap.add_argument("--seed-offset", type=int, default=0, help="run seeds N.. instead of "
                    "0.. (a diagnostic, e.g. to develop a change on seeds the "
                    "pre-registered run does not use; never stored)")
    args = ap.parse_args(argv)
    cfg = load(args.config)
    trial = bool(args.only) or args.sigma is not None or bool(args.seed_offset)
    if args.sigma is not None:
        cfg["noise"] = {**cfg["noise"], "logSd": args.sigma}
    if args.seed_offset:
        cfg["seedOffset"] = args.seed_offset
    path = out_path(cfg)
    if args.section:
        data = json.loads(path.read_text())
        return emit(data["section"], section(data), args.write)
    rel = str(args.config.resolve().relative_to(ROOT))
    dirty = _git("status", "--porcelain", "--", TUNER_CODE)
    if args.write and not trial and dirty:
        raise SystemExit(f"the tuner's code has uncommitted changes ({dirty.splitlines()[0]}"
                         "...): a stored run names the commit whose search it describes, "
                         "so commit them first")
    t0 = time.monotonic()
    rows = []
    for sc in scenarios(cfg):
        if args.only not in sc.name:
            continue
        rows.append(run_scenario(sc, cfg))
    data = {"label": LABEL, "config": cfg, "configFile": rel,
            "configGitBlob": _git("rev-parse", f"HEAD:{rel}"), "commit": _git("rev-parse", "HEAD"),
            "tunerVersion": SEARCH_VERSION,
            "section": cfg["label"], "noiseMeasured": measured_noise(cfg["noise"].get("source")),
            "runtimeSeconds": round(time.monotonic() - t0, 1), "scenarios": rows}
    data["label"] = label_of(data)
    if args.write and not trial:
        path.write_text(dumps(data))
    return emit(data["section"], section(data), args.write and not trial)


if __name__ == "__main__":
    raise SystemExit(main())

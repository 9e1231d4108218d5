"""RESULTS.md, generated from the benchmarks' sections: first the questions a user asks
(at most 15 rows, each with its current figure, its label and whether its goal is met),
then one section per benchmark with the goals of its current runs. Every figure is read
from the sections (never typed by hand, so it cannot disagree with them).

Each benchmark's current runs live in full on its own page, ``benchmarks/results/SLUG.md``
(:data:`BENCHMARKS` says which sections go where); :data:`SUPERSEDED` names every section a
later run replaced, which lives in HISTORY.md. A section in neither fails the unit test,
so a new benchmark cannot be left out silently. ``--write`` moves every superseded
section, verbatim, to the end of HISTORY.md, every current one to its benchmark's page (a
benchmark's own ``--write`` appends a new section to RESULTS.md, or replaces it where it
lives), and rewrites RESULTS.md's generated part.

    .venv/bin/python -m benchmarks.goals --write
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from benchmarks.results_md import HISTORY, PAGES, RESULTS, current, markers, pages

NAME = "goals"
BEGIN, END = markers(NAME)

# The labels of issue 34 item 4, and the two this project adds for its own machines.
GPU_SILICON = "measured, real vLLM on a GPU (AIConfigurator's silicon data), against our model"
GPU_PUBLISHED = "measured on GPUs by others (published sweeps), against our model"
AIC_ESTIMATE = "AIConfigurator's estimate (a model)"
AIC_LANDSCAPE = "AIConfigurator's estimate (a model) + noise measured on vLLM CPU"
AIC_ASSUMED_NOISE = ("AIConfigurator's estimate (a model) + ASSUMED noise (a sensitivity "
                     "run, not measured)")
AIC_GPU_NOISE = ("AIConfigurator's estimate (a model) + noise measured on GPUs by NVIDIA "
                 "(day-to-day repeats of real vLLM, gpu-noise-1; a sensitivity run)")
CPU = "measured on vLLM CPU (this machine, 2 shared cores)"
EMULATED = "emulated API server"
CLUSTER = "real control plane (local kube-apiserver, etcd, controllers; 2 cores)"


@dataclass(frozen=True)
class Config:
    """One committed benchmark config: the sections of its runs, oldest first."""

    title: str
    sections: tuple[str, ...]
    label: str


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its page ``results/SLUG.md``, what it measures, its configs with
    goals and its sections without goals (:data:`NO_GOALS`), in the order of the page."""

    slug: str
    title: str
    what: str
    configs: tuple[Config, ...] = ()
    others: tuple[str, ...] = ()


TUNE_LANDSCAPE = tuple(
    Config(f"TTFT <= {ttft}, {itl} (tune-landscape-{n}, search v13)",
           (f"tune-landscape-{n}",), where)
    for ttft, itl, n, where in (
        ("1-2 s", "ITL as mean TPOT", 73, AIC_LANDSCAPE),
        ("1-2 s", "ITL p95 from the schedule", 74, AIC_LANDSCAPE),
        ("30 s", "ITL as mean TPOT", 75, AIC_LANDSCAPE),
        ("30 s", "ITL p95 from the schedule", 76, AIC_LANDSCAPE),
        ("30 s", "ITL p95, ASSUMED GPU-like noise 0.05", 77, AIC_ASSUMED_NOISE),
        ("30 s", "ITL p95, GPU noise measured by NVIDIA", 78, AIC_GPU_NOISE),
        ("30 s", "ITL as mean TPOT, GPU noise measured by NVIDIA", 79, AIC_GPU_NOISE)))
TUNING = (
    Config("tune-paired-1", ("tuning", "tuning-2"), CPU),
    Config("tune-wide-1", ("tuning-wide", "tuning-wide-2"), CPU),
    Config("tune-wide-bound-1", ("tuning-wide-bound", "tuning-wide-bound-2"), CPU),
    Config("tune-noisy-1", ("tuning-noisy", "tuning-noisy-2"), CPU),
)

BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("perfmodel", "Performance model against published GPU figures",
              "The performance model's throughput and latency against published vLLM "
              "measurements on GPUs (in sample and held out) and against the real vLLM CPU "
              "engine.",
              (Config("Performance model vs published GPU sweeps", ("perfmodel",),
                      GPU_PUBLISHED),)),
    Benchmark("aic-silicon", "Performance model against NVIDIA's measured vLLM points",
              "The performance model against real vLLM on GPUs as NVIDIA measured it "
              "(AIConfigurator 0.12's `silicon_sample.csv`), the rows held out; what those "
              "rows say about expert parallelism, their TTFT and their run-to-run spread.",
              (Config("Dense models (aic-silicon-19)", ("aic-silicon",), GPU_SILICON),
               Config("Mixture-of-experts models (aic-silicon-20)", ("aic-silicon-20",),
                      GPU_SILICON)),
              ("parallel-silicon", "sched-sim-1", "closed-loop-check-1", "gpu-noise-1")),
    Benchmark("aic-estimator", "The planner's start against AIConfigurator's estimates",
              "How close the planner's starting batch size comes to the best on "
              "AIConfigurator's estimated landscape (a model, not a measurement), and how "
              "far that estimator is from NVIDIA's measured points.",
              (Config("ITL judged by its mean TPOT (aic-estimator-2)", ("aic-estimator-2",),
                      AIC_ESTIMATE),
               Config("ITL p95 from its step schedule (aic-estimator-9)",
                      ("aic-estimator-9",), AIC_ESTIMATE)),
              ("aic-vs-silicon", "planner-measured-scale-1")),
    Benchmark("tune-landscape", "The tuner's search on the estimated GPU landscape",
              "The tuner's search, run as it is, on AIConfigurator's estimated vLLM "
              "landscape of Llama-3.1-8B/70B and Qwen3-32B on H100 and H200, plus run-to-run "
              "noise (measured on the CPU engine, or on GPUs by NVIDIA; one run assumes "
              "it): 96 scenarios x 20 seeds per run.",
              TUNE_LANDSCAPE),
    Benchmark("tuning", "The tuner against a grid and vLLM's defaults",
              "The tuning Job's search against an exhaustive grid and against vLLM's "
              "defaults on the real vLLM CPU engine, each goal a paired interval; every "
              "config run twice.",
              TUNING),
    Benchmark("adaptation", "Adaptation: the live admission cap against static caps",
              "The restart-free adaptive controller against rollout-based adaptation and "
              "static caps on three traces (a step in load, an on/off burst, a shift from "
              "short chats to long documents) on the real vLLM CPU engine, the load never "
              "pausing and restart time counted; three runs of one committed config.",
              (Config("adapt-live-1", ("adaptation", "adaptation-2", "adaptation-3"), CPU),),
              ("client-keepalive", "demo-binding-cap", "demo-binding-cap-nodes")),
    Benchmark("engine-features", "Chunked prefill, the prefix cache and the compile cache",
              "vLLM's chunked prefill on and off, its prefix cache with the tuner's own "
              "load, and a server's start with and without its compile cache, measured on "
              "the CPU engine.",
              (Config("Prefix cache with the tuner's load (prefix-cache-1)", ("prefix-cache",),
                      CPU),
               Config("A server's start with its compile cache (compile-cache-1)",
                      ("compile-cache",), CPU)),
              ("chunked-prefill", "chunked-prefill-2")),
    Benchmark("gpu-kernels", "GPU kernels against the performance model",
              "PyTorch GEMMs at the shapes of vLLM's steps on an H100 and an H200 (the "
              "project's only GPU measurements: kernels, not vLLM), and routed experts on an "
              "H200 with vLLM's fused MoE kernel as NVIDIA measured it.",
              (), ("gpu-kernels", "gpu-kernels-moe")),
    Benchmark("scale", "Scale: many services, from create to Deployment",
              "Create-to-Deployment latency and the operator's memory for bursts of new "
              "services, on the emulated API server and on a real control plane (no GPU "
              "nodes: the pods stay Pending); an A/B of the operator's API client.",
              (Config("Burst of new services, emulated API server (scale)", ("scale",),
                      EMULATED),
               Config("Burst of new services on the real control plane (scale-cluster)",
                      ("scale-cluster",), CLUSTER)),
              ("client-ab",)),
    Benchmark("churn", "Churn under faults",
              "Services created, updated and deleted under injected faults, on the "
              "emulated API server and on the real control plane (kube-apiserver and etcd "
              "restarted, the operator killed): converged, nothing left.",
              (), ("churn", "churn-cluster")),
    Benchmark("bad-input", "Bad input",
              "Every bad spec tried, where it is refused and the message: the planner and "
              "the CRD's rules, and the real API server.",
              (), ("bad-input", "bad-input-real-server")),
)

# Every config with goals, in the order of the benchmarks.
CURRENT: tuple[Config, ...] = tuple(cfg for b in BENCHMARKS for cfg in b.configs)

# Sections that are not current, and why (moved to HISTORY.md by --write).
SUPERSEDED: dict[str, str] = {
    "aic-estimator": "aic-estimator-2 (36 of 48 scenarios had no feasible point)",
    "aic-silicon-3": "aic-silicon-4 (the same MoE rows less 19 with DP attention; a fixed "
                     "cost per MoE layer fitted to NVIDIA's kernel table)",
    "aic-silicon-4": "aic-silicon-6 (the same rows; the TTFT queue re-fitted on the dense fit "
                     "subset)",
    "aic-silicon-6": "aic-silicon-7 (the same rows; the fixed cost per MoE layer re-fitted at "
                     "one token on the kernels these checkpoints run)",
    "aic-silicon-7": "aic-silicon-8 (the same rows; the routed experts' FLOPs at their own "
                     "rate, fitted on the same kernels at prefill sizes)",
    "aic-silicon-8": "aic-silicon-10 (the same rows; the TTFT queue's prompt priced once, a "
                     "bug fix)",
    "aic-silicon-10": "aic-silicon-12 (the same rows; the per-sequence CPU cost 35 us, the "
                      "largest no measured row contradicts)",
    "aic-silicon-12": "aic-silicon-14 (the same rows; a GPU cost per sequence per layer, "
                      "fitted on the dense fit subset)",
    "aic-silicon-14": "aic-silicon-16 (the same rows; the TTFT wait priced in mixed steps, "
                      "re-fitted on the dense fit subset)",
    "aic-estimator-5": "aic-estimator-6 (the same scenarios; the model's GPU cost per "
                       "sequence per layer: 9 picks moved down)",
    "aic-estimator-6": "aic-estimator-7 (the same scenarios; the model's TTFT wait priced in "
                       "mixed steps: no pick moved)",
    "aic-estimator-7": "aic-estimator-8 (the same scenarios; two fixes to the model's TTFT "
                       "wait: no pick moved)",
    "aic-silicon-16": "aic-silicon-18 (the same rows; two fixes to the TTFT wait)",
    "aic-silicon-18": "aic-silicon-20 (the same rows; the second fix, a cap on the wait, "
                      "withdrawn)",
    "aic-estimator-8": "aic-estimator-9 (the same scenarios; the cap on the model's TTFT "
                       "wait withdrawn: no pick moved)",
    "aic-estimator-3": "aic-estimator-4 (the same scenarios; the model's TTFT queue re-fitted: "
                       "every pick as in run 3)",
    "aic-estimator-4": "aic-estimator-5 (the same scenarios; the model's per-sequence CPU cost "
                       "35 us: 8 picks moved)",
    "tune-landscape-1": "tune-landscape-14 (the same setup, search v4)",
    "tune-landscape-4": "tune-landscape-14 (the same setup, search v4)",
    "tune-landscape-2": "tune-landscape-13 (the same setup, search v4)",
    "tune-landscape-3": "tune-landscape-13 (the same setup, search v4)",
    "tune-landscape-5": "tune-landscape-13 (the same setup, search v4)",
    "tune-landscape-6": "tune-landscape-14 (the same setup, search v4)",
    "tune-landscape-7": "tune-landscape-10 (the same setup, search v4)",
    "tune-landscape-8": "tune-landscape-9 (the same setup, search v4)",
    "tune-landscape-11": "tune-landscape-12 (the same setup, search v4)",
    "tune-landscape-13": "tune-landscape-15 (the same setup and search, the planner's hint "
                         "after aic-silicon-11)",
    "tune-landscape-9": "tune-landscape-16 (the same setup and search, the planner's hint "
                        "after aic-silicon-11)",
    "tune-landscape-12": "tune-landscape-17 (the same setup and search, the planner's hint "
                         "after aic-silicon-11)",
    **{f"tune-landscape-{b}": f"tune-landscape-{n} (the same setup and search, the planner's "
                              "hint after aic-silicon-13)"
       for b, n in ((14, 18), (10, 19), (15, 20), (16, 21), (17, 22))},
    **{f"tune-landscape-{b}": f"tune-landscape-{b + 5} (the same setup and search, the "
                              "planner's hint after aic-silicon-15: no hint moved)"
       for b in range(18, 23)},
    **{f"tune-landscape-{b}": f"tune-landscape-{b + 5} (the same setup and search, the "
                              "planner's hint after aic-silicon-17: no hint moved)"
       for b in range(23, 28)},
    **{f"tune-landscape-{b}": f"tune-landscape-{b + 5} (the same setup, hints and seeds, "
                              "search v5: the planner's hint verified where the defaults "
                              "miss outright)"
       for b in range(28, 33)},
    **{f"tune-landscape-{b}": f"tune-landscape-{b + 5} (the same setup, hints and seeds, "
                              f"search {why})"
       for first, why in (
           (33, "v6: a cap that meets the SLO beats defaults that miss it in their typical "
                "run; the walk toward the SLO"),
           (38, "v7: the walk stops where no cap can meet the SLO"),
           (43, "v8: a win on the SLO needs the 5 runs a 90% decision needs"))
       for b in range(first, first + 5)},
    **{f"tune-landscape-{b}": f"tune-landscape-{58 + (b - first)} (the same setup, hints "
                              f"and seeds, search {why})"
       for first, why in (
           (48, "v10: a candidate slower than the defaults by more than min-gain wins only "
                "on the SLO rule"),
           (53, "v10: v9 with 'slower' by more than min-gain"))
       for b in range(first, first + 5)},
    **{f"tune-landscape-{b}": f"tune-landscape-{b + 5} (the same setup, hints and seeds, "
                              "search v11: a win below the planner's hint tries the hint too)"
       for b in range(58, 63)},
    **{f"tune-landscape-{b}": f"tune-landscape-{78 - (first + 5 - b)} (the same setup, "
                              f"hints and seeds, search {why})"
       for first, why in (
           (63, "v13: a slower cap's goodput win stands where it leads in every pair"),
           (68, "v13: v12, and a slower cap without goodput in its typical pair needs the "
                "SLO rule"))
       for b in range(first, first + 5)},
}
# Sections without goals (measurements reported as they are).
NO_GOALS: dict[str, str] = {
    "sched-sim-1": "a diagnostic: where the measured TTFT lies between two simulated "
                   "arrival patterns",
    "planner-measured-scale-1": "a sensitivity: the planner's start on the estimator's "
                                "landscape scaled by its measured error",
    "closed-loop-check-1": "a diagnostic: whether each measured row can be a no-gap closed "
                           "loop of uncached prompts",
    "gpu-noise-1": "the run-to-run spread of real vLLM on GPUs in NVIDIA's repeated "
                   "measurements: the noise of tune-landscape-78 and -79",
    "bad-input": "every bad input's error, listed",
    "bad-input-real-server": "every bad input's error from a real kube-apiserver",
    "churn": "converged or not, listed per run",
    "churn-cluster": "converged or not, listed per run",
    "client-ab": "an A/B of the operator's API client",
    "client-keepalive": "an A/B of the client's keep-alive",
    "demo-binding-cap": "the demo's adapted cap against the tuned static one, same load",
    "demo-binding-cap-nodes": "the same on real nodes (the engine in a container)",
    "gpu-kernels": "PyTorch GEMMs on an H100 and an H200 against the model's efficiency factors",
    "gpu-kernels-moe": "routed experts on an H200 (PyTorch measured here, vLLM's fused MoE "
                       "measured by NVIDIA) against the model's HBM factor",
    "chunked-prefill": "chunked prefill on and off measured, a verdict per workload",
    "chunked-prefill-2": "chunked prefill on and off measured, and the tuner's opt-in search",
    "parallel-silicon": "expert parallelism and DP attention against TP experts in NVIDIA's "
                        "measured vLLM points: why the planner renders neither",
    "aic-vs-silicon": "AIConfigurator's estimator against NVIDIA's measured vLLM points: "
                      "how far the landscape yardstick is from measured vLLM",
}


@dataclass(frozen=True)
class Goal:
    goal: str
    figure: str
    met: bool
    note: str = ""  # e.g. "within the noise"


# One marked section: its name, and its body without the markers.
SECTION_RE = re.compile(r"<!-- ([a-z0-9-]+):begin -->\n(.*?)<!-- \1:end -->", re.S)


def sections(text: str) -> dict[str, str]:
    """Every marked section of RESULTS.md by name, its body without the markers."""
    return {m.group(1): m.group(2) for m in SECTION_RE.finditer(text)}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _met(cell: str) -> tuple[bool, str]:
    text = cell.replace("*", "").strip()
    note = re.sub(r"^(not met|met)\s*", "", text).strip("() ")
    return text.startswith("met"), note


def table_goals(body: str) -> list[Goal]:
    """Rows of the section's goal tables (header ``| goal | ... | met |``), except the rows
    marked ``(bound, not a goal)`` or ``(not a goal)``."""
    goals: list[Goal] = []
    lines = body.splitlines()
    for i, line in enumerate(lines):
        head = _cells(line) if line.startswith("|") else []
        if len(head) < 3 or head[0] != "goal" or head[-1] != "met":
            continue
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            cells = _cells(row)
            if cells[0].startswith(("(bound", "(not a goal")) or len(cells) != len(head):
                continue
            met, note = _met(cells[-1])
            figure = " ± ".join(c for c in cells[1:-1] if c)
            # "(`burst`: KV fit 10)": the best static cap of that run goes to the figure,
            # so that the same goal lines up across runs.
            goal, detail = cells[0], ""
            m = re.search(r"\(`(\w+)`: ([^)]*)\)", goal)
            if m:
                goal, detail = goal.replace(m.group(0), f"(`{m.group(1)}`)"), m.group(2)
            goals.append(Goal(goal, f"{figure} (vs {detail})" if detail else figure, met,
                              note))
    return goals


def line_goals(body: str) -> list[Goal]:
    """The goals some sections state in one sentence instead of a table."""
    goals: list[Goal] = []
    m = re.search(r"^Goal \(held out within \+-25%\): \*\*(not met for \d+ of \d+ held-out "
                  r"figures|met)", body, re.M)
    if m:
        goals.append(Goal("every held-out published figure within +-25%", m.group(1),
                          m.group(1) == "met"))
    m = re.search(r"^Goals on held-out rows \(aic_silicon(?:_\d+)?\.yaml\), share within "
                  r"\+-25%: (.*)$", body, re.M)
    if m:
        for part in m.group(1).split("; "):
            what, rest = part.split(": ", 1)
            figure, verdict = rest.split(" (", 1)
            goals.append(Goal(f"{what} of held-out rows within +-25%", figure,
                              _met(verdict.rstrip(")"))[0]))
    m = re.search(r">= 0\.9 in (\d+) of (\d+) scenarios \(goal: >= 0\.9 in >= 90%\)", body)
    if m:
        k, n = int(m.group(1)), int(m.group(2))
        goals.append(Goal("the planner's start >= 0.9 of the landscape's best goodput in "
                          ">= 90% of scenarios", f"{k} of {n} scenarios ({k / n:.0%})",
                          k >= 0.9 * n))
    m = re.search(r"^\*\*Goal \((.*?)\): (met|not met)\*\* (in \d+ of \d+ stored runs)", body,
                  re.M)
    if m:
        goals.append(Goal(m.group(1), m.group(3), m.group(2) == "met"))
    m = re.search(r"^Memory goal \((.*?)\): (worst peak [\d.]+ MiB) \((met|not met)\)", body,
                  re.M)
    if m:
        goals.append(Goal(m.group(1), m.group(2), m.group(3) == "met"))
    m = re.search(r"^Worst p99 at N = (\d+): ([\d.]+) s \((met|not met)\)", body, re.M)
    if m:
        goals.append(Goal(f"p99 <= 2 s from create to Deployment, burst of {m.group(1)}",
                          f"worst p99 {m.group(2)} s", m.group(3) == "met"))
    return goals


def goals_of(body: str) -> list[Goal]:
    return table_goals(body) + line_goals(body)


def _esc(text: str) -> str:
    return text.replace("|", "\\|")


@dataclass(frozen=True)
class Row:
    """One goal of a config, with its result in each of the config's runs (None: a run
    that does not state it)."""

    goal: str
    runs: tuple[Goal | None, ...]

    @property
    def done(self) -> list[Goal]:
        return [g for g in self.runs if g is not None]

    def figure(self) -> str:
        if len(self.runs) == 1:
            return self.done[0].figure
        return "; ".join(f"run {i}: {g.figure}" for i, g in enumerate(self.runs, 1)
                         if g is not None)

    def verdict(self) -> str:
        done = self.done
        if len(self.runs) == 1:
            return ("**met**" if done[0].met else "**not met**") + (
                f" ({done[0].note})" if done[0].note else "")
        k = sum(g.met for g in done)
        return (f"**met** in {k} of {len(done)} runs" if k == len(done) else
                f"**not met** in {len(done) - k} of {len(done)} runs")


def rows(sections_: tuple[str, ...], found: dict[str, str]) -> list[Row]:
    """The goals of one config's runs (``sections_``), in the order they first appear."""
    runs = [goals_of(found.get(name, "")) for name in sections_]
    order: list[str] = []
    for run in runs:
        order += [g.goal for g in run if g.goal not in order]
    return [Row(goal, tuple(next((g for g in run if g.goal == goal), None) for run in runs))
            for goal in order]


# --- the questions a user asks: RESULTS.md's first screen -----------------------------


@dataclass(frozen=True)
class Pick:
    """One goal of one config, as a question's row shows it: the goal whose text starts
    with ``goal`` in the runs ``sections``, called ``short``."""

    sections: tuple[str, ...]
    goal: str
    short: str


@dataclass(frozen=True)
class Question:
    question: str
    where: str  # the benchmark (slug) whose section answers it
    label: str
    goal: str = ""  # what the figures are, and the goal
    picks: tuple[Pick, ...] = ()
    unanswered: str = ""  # said instead of a figure while no run answers it


Q_NVIDIA = ("measured on GPUs by NVIDIA (AIConfigurator 0.12's `silicon_sample.csv`), "
            "against the model's estimate")
Q_PUBLISHED = ("measured on GPUs by others (published sweeps, each source named), against "
               "the model's estimate")
Q_ESTIMATED = "estimated (AIConfigurator's estimator, a model)"
Q_CPU = "measured on the CPU engine (vLLM's CPU build, 2 shared cores)"
Q_LANDSCAPE = ("estimated (AIConfigurator) + run-to-run noise measured on GPUs by NVIDIA "
               "(gpu-noise-1)")
Q_CLUSTER = "measured on a real control plane (2 cores, no GPU nodes: the pods stay Pending)"
LANDSCAPE_GPU = ((("tune-landscape-78",), "ITL p95"), (("tune-landscape-79",), "ITL as mean TPOT"))


def _tuning(goal: str) -> tuple[Pick, ...]:
    return tuple(Pick(cfg.sections, goal, cfg.title) for cfg in TUNING)


QUESTIONS: tuple[Question, ...] = (
    Question("Does the plan match real GPUs?", "aic-silicon", Q_NVIDIA,
             "share of held-out rows within +-25% (goals: TPOT and output tok/s >= 90%, "
             "TTFT >= 75%)",
             (Pick(("aic-silicon",), "TPOT", "dense models: TPOT"),
              Pick(("aic-silicon",), "output tok/s", "output tok/s"),
              Pick(("aic-silicon",), "TTFT", "TTFT"),
              Pick(("aic-silicon-20",), "TPOT", "mixture of experts: TPOT"),
              Pick(("aic-silicon-20",), "output tok/s", "output tok/s"),
              Pick(("aic-silicon-20",), "TTFT", "TTFT"))),
    Question("Does the plan match published GPU benchmarks?", "perfmodel", Q_PUBLISHED,
             "held-out published figures within +-25% (goal: all)",
             (Pick(("perfmodel",), "every held-out", ""),)),
    Question("Does the planner start near the best batch size?", "aic-estimator",
             Q_ESTIMATED, "the start >= 0.9 x the landscape's best goodput (goal: in >= 90% "
             "of scenarios)",
             (Pick(("aic-estimator-9",), "the planner's start", ""),)),
    Question("Does tuning beat vLLM's defaults?", "tuning", Q_CPU,
             "the choice's goodput over vLLM's defaults (goal >= 1.5x), two runs each",
             _tuning("tuner's choice ≥ 1.5")),
    Question("Does the tuner find the best setting?", "tuning", Q_CPU,
             "the choice's goodput over the grid's best (goal >= 0.95x), two runs each",
             _tuning("tuner's choice ≥ 0.95")),
    Question("Does tuning cost less than a grid search?", "tuning", Q_CPU,
             "the tuner's busy time over the grid's (goal <= 0.30), two runs each",
             _tuning("tuner ≤ 0.30 x the grid's busy time")),
    Question("Does tuning ever make a service worse?", "tuning", Q_CPU,
             "on a noisy machine (tune-noisy-1), two runs",
             (Pick(("tuning-noisy", "tuning-noisy-2"), "tuner's choice not worse",
                   "not worse than vLLM's defaults:"),
              Pick(("tuning-noisy", "tuning-noisy-2"), "a gain the tuner reports",
                   "a gain claimed only as an interval above 1.05x:"))),
    Question("On GPUs, where vLLM's defaults miss the SLO, does tuning meet it?",
             "tune-landscape", Q_LANDSCAPE, "runs where the choice meets the SLO (goal: all)",
             tuple(Pick(s, "(b)", short) for s, short in LANDSCAPE_GPU)),
    Question("On GPUs, does the tuner come near the best in few trials?", "tune-landscape",
             Q_LANDSCAPE, "runs within 0.95 x the best with <= 0.3 x a grid's trials (goal: "
             ">= 90%)", tuple(Pick(s, "(a)", short) for s, short in LANDSCAPE_GPU)),
    Question("On GPUs, does tuning ever end below vLLM's defaults?", "tune-landscape",
             Q_LANDSCAPE, "runs never below the defaults by more than the noise (goal: all)",
             tuple(Pick(s, "(c)", short) for s, short in LANDSCAPE_GPU)),
    Question("Does the live admission cap cost anything?", "adaptation", "-",
             unanswered="**not measured yet**: no run serves the same load on a server with "
             "the live cap's scheduler class and on one without it"),
    Question("Does adaptation beat a static cap?", "adaptation", Q_CPU,
             "goodput over the best static cap in hindsight, three runs",
             (Pick(("adaptation", "adaptation-2", "adaptation-3"),
                   "live ≥ 0.95 x best static in hindsight (`step`)", "step (goal >= 0.95x)"),
              Pick(("adaptation", "adaptation-2", "adaptation-3"),
                   "live ≥ 0.95 x best static in hindsight (`burst`)",
                   "burst (goal >= 0.95x)"),
              Pick(("adaptation", "adaptation-2", "adaptation-3"),
                   "live ≥ 1.2 x best static in hindsight (`mix`)", "mix (goal >= 1.2x)"))),
    Question("Does live adaptation fail requests?", "adaptation", Q_CPU,
             "requests failed because of live adaptation (goal: 0), three runs",
             (Pick(("adaptation", "adaptation-2", "adaptation-3"), "0 requests failed", ""),)),
    Question("How much memory does one operator need for 1,000 services?", "scale",
             Q_CLUSTER, "peak RSS x 1.5 within the chart's limit of 1 GiB",
             (Pick(("scale-cluster",), "peak RSS", ""),)),
    Question("How fast does a burst of 1,000 new services get its Deployments?", "scale",
             f"{Q_CLUSTER}; and on the emulated API server",
             "create to Deployment, goal p99 <= 2 s",
             (Pick(("scale-cluster",), "p99 <= 2 s", "real control plane"),
              Pick(("scale",), "p99 <= 2 s", "emulated API server, goal"))),
)


def _point(figure: str) -> str:
    """A run's figure without its interval, spread and detail: what a question's row
    shows (the benchmark's section below has the whole figure)."""
    # The paired interval first, whole: compare.Comparison's text may add "; N more where
    # neither met the SLO, not counted" inside its parentheses.
    text = re.sub(r" \([^()]*, \d+% confidence, \d+ pairs[^()]*\)", "", figure)
    text = text.split("; ")[0]
    text = re.sub(r" ± \d+%| \(vs [^)]*\)", "", text)
    m = re.fullmatch(r"[\d.]+ / [\d.]+ = ([\d.]+)", text)
    return m.group(1) if m else text


def anchor(title: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _verdict(met: int, runs: int) -> str:
    return ("met" if met == runs else "not met" if met == 0 else
            f"met in {met} of {runs} runs")


def question_row(q: Question, found: dict[str, str]) -> str:
    """One row of the first screen's table."""
    title = next(b.title for b in BENCHMARKS if b.slug == q.where)
    cell = f"[{q.question}](#{anchor(title)})"
    if not q.picks:
        return f"| {cell} | {q.unanswered} | {q.label} | - |"
    parts, counts = [], []
    for pick in q.picks:
        row = next(r for r in rows(pick.sections, found) if r.goal.startswith(pick.goal))
        counts.append((sum(g.met for g in row.done), len(row.done)))
        parts.append(f"{pick.short} {', '.join(_point(g.figure) for g in row.done)}".strip())
    verdicts = [_verdict(*c) for c in counts]
    if len(set(verdicts)) > 1:
        parts = [f"{part} ({v})" for part, v in zip(parts, verdicts, strict=True)]
    met, runs = sum(k for k, _ in counts), sum(n for _, n in counts)
    overall = ("**met**" if met == runs else "**not met**" if met == 0 else
               f"**partly**: {met} of {runs}")
    return f"| {cell} | {_esc(q.goal)}: {_esc('; '.join(parts))} | {q.label} | {overall} |"


# --- RESULTS.md and the benchmarks' pages ----------------------------------------------


PREAMBLE = """# Benchmark results

What the benchmarks show today: first the questions a user asks, each with its current
figure, its label and whether its goal is met; then one section per benchmark with the
goals of its current runs. Every current run is in full on its benchmark's page in
[results/](results/), earlier runs in [HISTORY.md](HISTORY.md); what the stored data is
for: [README.md](README.md).

"""


def _benchmark_section(b: Benchmark, found: dict[str, str]) -> list[str]:
    lines = [f"## {b.title}", "",
             f"{b.what} Every current run in full: [results/{b.slug}.md](results/{b.slug}.md).",
             ""]
    if b.configs:
        labels = {cfg.label for cfg in b.configs}
        if len(labels) == 1:
            lines += [f"Label: {labels.pop()}.", ""]
        else:
            lines += ["Labels: " + "; ".join(f"{cfg.title}: {cfg.label}"
                                              for cfg in b.configs) + ".", ""]
        lines += ["| run | goal | figure | met |", "|---|---|---|---|"]
        for cfg in b.configs:
            where = f"{_esc(cfg.title)}: " + ", ".join(f"`{s}`" for s in cfg.sections)
            lines += [f"| {where if i == 0 else ''} | {_esc(r.goal)} | {_esc(r.figure())} "
                      f"| {r.verdict()} |" for i, r in enumerate(rows(cfg.sections, found))]
        lines.append("")
    if b.others:
        lines += ["Without a goal: " + "; ".join(f"`{name}` ({NO_GOALS[name]})"
                                                 for name in b.others) + ".", ""]
    return lines


def section(text: str) -> str:
    """RESULTS.md's generated part, from the current sections in ``text``."""
    found = sections(text)
    lines = [
        BEGIN,
        "## The questions a user asks",
        "",
        "| question | current figure | label | met |",
        "|---|---|---|---|",
        *(question_row(q, found) for q in QUESTIONS),
        "",
        "Labels: **measured on GPUs by someone else** (the source named), **measured on the "
        "CPU engine** (vLLM's CPU build on this 2-core machine, shared with other work), "
        "**measured on a real control plane** (kube-apiserver, etcd and controllers on this "
        "machine), **emulated** (the emulated API server), **estimated** (a model). No vLLM "
        "has run on a GPU here: the only GPU figures this project measured itself are "
        "PyTorch kernels ([GPU kernels](results/gpu-kernels.md)), not vLLM. Every figure is "
        "read from the sections by `.venv/bin/python -m benchmarks.goals --write`; each "
        "section says how it was measured and the config it was fixed in before the run.",
        "",
    ]
    for b in BENCHMARKS:
        lines += _benchmark_section(b, found)
    lines += ["## Superseded runs", "",
              "In [HISTORY.md](HISTORY.md), verbatim: " + "; ".join(
                  f"`{name}` (superseded by {why})" for name, why in SUPERSEDED.items())
              + ".", END]
    return "\n".join(lines)


def results_text(text: str) -> str:
    """All of RESULTS.md, from the current sections in ``text``."""
    return PREAMBLE + section(text) + "\n"


def page_path(b: Benchmark) -> Path:
    return PAGES / f"{b.slug}.md"


def page(b: Benchmark, blocks: dict[str, str]) -> str:
    """Benchmark ``b``'s page: what it measures, then its current sections (``blocks``:
    each section's whole text, markers included) in the order of :data:`BENCHMARKS`."""
    names = [s for cfg in b.configs for s in cfg.sections] + list(b.others)
    head = (f"# {b.title}\n\n{b.what}\n\nThe current runs of this benchmark, each section "
            "generated from its stored data by the command it names. Their goals, met or "
            f"not, are summed up in [RESULTS.md](../RESULTS.md#{anchor(b.title)}); earlier "
            "runs are in [HISTORY.md](../HISTORY.md).\n")
    return head + "".join(f"\n{blocks[n]}\n" for n in names if n in blocks)


def blocks_of(text: str) -> dict[str, str]:
    """Every marked section of ``text`` but the goals, whole (markers included)."""
    return {m.group(1): m.group(0) for m in SECTION_RE.finditer(text) if m.group(1) != NAME}


def unclassified(text: str) -> list[str]:
    """Sections that this module does not place (the unit test's check)."""
    placed = ({s for cfg in CURRENT for s in cfg.sections} | set(SUPERSEDED) |
              {s for b in BENCHMARKS for s in b.others})
    return sorted(set(sections(text)) - placed - {NAME})


ARCHIVE_HEAD = "## Superseded runs"
ARCHIVE_INTRO = (
    "Sections a later run of the same benchmark replaced, moved here verbatim from "
    "RESULTS.md by `.venv/bin/python -m benchmarks.goals --write` (RESULTS.md's goals table "
    "names what replaced each). Each is still generated from its stored data and committed "
    "config by the command it names, which now writes it here; the unit tests check that "
    "it still matches. In the order RESULTS.md had them.")


def archive(results: str, history: str, names: set[str]) -> tuple[str, str]:
    """Move the sections ``names`` from ``results`` to the end of ``history``, verbatim
    and in their order, under :data:`ARCHIVE_HEAD` (added once); one ``history`` already
    has is replaced there by the copy from ``results``. Returns both texts; a second call
    changes nothing."""
    moved = [m for m in SECTION_RE.finditer(results) if m.group(1) in names]
    for m in moved:
        results = results.replace(m.group(0), "", 1)
    results = re.sub(r"\n{3,}", "\n\n", results).rstrip("\n") + "\n"
    kept = {m.group(1): m for m in SECTION_RE.finditer(history)}
    fresh = []
    for m in moved:
        if m.group(1) in kept:
            history = history.replace(kept[m.group(1)].group(0), m.group(0), 1)
        else:
            fresh.append(m.group(0))
    if fresh:
        if ARCHIVE_HEAD not in history:
            history = history.rstrip("\n") + f"\n\n{ARCHIVE_HEAD}\n\n{ARCHIVE_INTRO}\n"
        history = history.rstrip("\n") + "\n\n" + "\n\n".join(fresh) + "\n"
    return results, history


def write() -> None:
    """Superseded sections to HISTORY.md, current ones to their benchmark's page, and
    RESULTS.md's generated part from them."""
    history = HISTORY.read_text()
    blocks: dict[str, str] = {}
    for path in (RESULTS, *pages()):
        text, history = archive(path.read_text(), history, set(SUPERSEDED))
        for name, block in blocks_of(text).items():
            if name in blocks:
                raise SystemExit(f"section {name} is in two files; keep one")
            blocks[name] = block
    PAGES.mkdir(exist_ok=True)
    for b in BENCHMARKS:
        page_path(b).write_text(page(b, blocks))
    RESULTS.write_text(results_text("\n".join(blocks.values())))
    HISTORY.write_text(history)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="write RESULTS.md, the benchmarks' pages and HISTORY.md")
    args = parser.parse_args()
    text = current()
    missing = unclassified(text)
    if missing:
        raise SystemExit(f"sections not placed in benchmarks/goals.py: {', '.join(missing)}")
    if args.write:
        write()
    else:
        print(section(text))  # noqa: T201 - the generated part, for a pipe
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

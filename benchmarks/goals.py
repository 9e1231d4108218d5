"""The goals table that opens benchmarks/RESULTS.md: every goal of the current runs, its
figure, met or not, and where it was measured, read from the sections below it (never
typed by hand, so it cannot disagree with them).

Which sections are current is said here, in :data:`CURRENT`: one entry per committed
config (its repeated runs together), and :data:`SUPERSEDED` names every other section and
what replaced it. A section in neither fails the unit test, so a new benchmark cannot be
left out of the table silently. ``--write`` also moves every superseded section, verbatim,
from RESULTS.md to the end of HISTORY.md, so RESULTS.md holds the current runs only.

    .venv/bin/python -m benchmarks.goals --write
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from benchmarks.results_md import HISTORY, RESULTS, markers, replace_section

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


CURRENT: tuple[Config, ...] = (
    Config("Performance model vs published GPU sweeps", ("perfmodel",), GPU_PUBLISHED),
    Config("Performance model vs NVIDIA's measured vLLM points (aic-silicon-19)",
           ("aic-silicon",), GPU_SILICON),
    Config("Performance model vs NVIDIA's measured vLLM points, MoE models (aic-silicon-20)",
           ("aic-silicon-20",), GPU_SILICON),
    Config("Planner's start vs AIConfigurator's landscape, ITL judged by its mean TPOT "
           "(aic-estimator-2)", ("aic-estimator-2",), AIC_ESTIMATE),
    Config("Planner's start vs AIConfigurator's landscape, ITL p95 from its step schedule "
           "(aic-estimator-9)", ("aic-estimator-9",), AIC_ESTIMATE),
    *(Config(f"Tuner's search on the landscape, TTFT <= {ttft}, {itl} "
             f"(tune-landscape-{n}, search v13)", (f"tune-landscape-{n}",), where)
      for ttft, itl, n, where in (
          ("1-2 s", "ITL as mean TPOT", 73, AIC_LANDSCAPE),
          ("1-2 s", "ITL p95 from the schedule", 74, AIC_LANDSCAPE),
          ("30 s", "ITL as mean TPOT", 75, AIC_LANDSCAPE),
          ("30 s", "ITL p95 from the schedule", 76, AIC_LANDSCAPE),
          ("30 s", "ITL p95, ASSUMED GPU-like noise 0.05", 77, AIC_ASSUMED_NOISE),
          ("30 s", "ITL p95, GPU noise measured by NVIDIA", 78, AIC_GPU_NOISE),
          ("30 s", "ITL as mean TPOT, GPU noise measured by NVIDIA", 79, AIC_GPU_NOISE))),
    Config("Tuner vs grid and defaults (tune-paired-1)", ("tuning", "tuning-2"), CPU),
    Config("Tuner vs grid and defaults (tune-wide-1)", ("tuning-wide", "tuning-wide-2"), CPU),
    Config("Tuner vs grid and defaults (tune-wide-bound-1)",
           ("tuning-wide-bound", "tuning-wide-bound-2"), CPU),
    Config("Tuner vs grid and defaults (tune-noisy-1)", ("tuning-noisy", "tuning-noisy-2"),
           CPU),
    Config("Live admission cap vs static caps (adapt-live-1)",
           ("adaptation", "adaptation-2", "adaptation-3"), CPU),
    Config("Prefix cache with the tuner's load (prefix-cache-1)", ("prefix-cache",), CPU),
    Config("Burst of new services (scale)", ("scale",), EMULATED),
    Config("Burst of new services on the real control plane (scale-cluster)",
           ("scale-cluster",), CLUSTER),
)

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
    "bad-input-real-server": "every bad input's error against a real vLLM server",
    "churn": "converged or not, listed per run",
    "churn-cluster": "converged or not, listed per run",
    "client-ab": "an A/B of the operator's API client",
    "client-keepalive": "an A/B of the client's keep-alive",
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


def section(text: str) -> str:
    """The goals table, from RESULTS.md's ``text``."""
    found = sections(text)
    lines = [
        BEGIN,
        "## Goals at a glance",
        "",
        "Every goal of the current runs, read from the sections below "
        "(`.venv/bin/python -m benchmarks.goals --write`; the sections say how each was "
        "measured and the config it was fixed in before the run). A config run more than "
        "once shows each run's figure. No goal here ran on a GPU: the only GPU figures this "
        "project measured itself are PyTorch kernels (`gpu-kernels`, `gpu-kernels-moe`, "
        "below), not vLLM.",
        "",
        "| benchmark | goal | figure | met | where |",
        "|---|---|---|---|---|",
    ]
    for cfg in CURRENT:
        runs = [goals_of(found.get(name, "")) for name in cfg.sections]
        order: list[str] = []
        for run in runs:
            order += [g.goal for g in run if g.goal not in order]
        for goal in order:
            per = [next((g for g in run if g.goal == goal), None) for run in runs]
            done = [g for g in per if g is not None]
            if len(cfg.sections) == 1:
                figure = done[0].figure
                verdict = "**met**" if done[0].met else "**not met**"
                if done[0].note:
                    verdict += f" ({done[0].note})"
            else:
                figure = "; ".join(f"run {i}: {g.figure}" for i, g in enumerate(per, 1)
                                   if g is not None)
                k = sum(g.met for g in done)
                verdict = (f"**met** in {k} of {len(done)} runs" if k == len(done) else
                           f"**not met** in {len(done) - k} of {len(done)} runs")
            where = ", ".join(f"`{s}`" for s in cfg.sections)
            lines.append(f"| {_esc(cfg.title)} | {_esc(goal)} | {_esc(figure)} | {verdict} "
                         f"| {cfg.label}; {where} |")
    lines += ["", "Not in the table (superseded runs are in [HISTORY.md](HISTORY.md), "
              "verbatim): " + "; ".join(
        f"`{name}` (superseded by {why})" for name, why in SUPERSEDED.items()) + "; " +
        "; ".join(f"`{name}` ({why})" for name, why in NO_GOALS.items()) + ".", END]
    return "\n".join(lines)


def unclassified(text: str) -> list[str]:
    """Sections of RESULTS.md that this module does not place (the unit test's check)."""
    placed = {s for cfg in CURRENT for s in cfg.sections} | set(SUPERSEDED) | set(NO_GOALS)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write it into RESULTS.md")
    args = parser.parse_args()
    text = RESULTS.read_text()
    missing = unclassified(text)
    if missing:
        raise SystemExit(f"sections not placed in benchmarks/goals.py: {', '.join(missing)}")
    if args.write:  # in place; the unit test checks the table opens the file
        replace_section(NAME, section(text), RESULTS)
        results, history = archive(RESULTS.read_text(), HISTORY.read_text(), set(SUPERSEDED))
        RESULTS.write_text(results)
        HISTORY.write_text(history)
    else:
        print(section(text))  # noqa: T201 - the table, for a pipe
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

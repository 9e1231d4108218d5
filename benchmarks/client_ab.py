"""client-ab: the operator's Kubernetes client before and after issue 26 item 3, on the
REAL control plane, each labelled run as pre-registered in its config
(``benchmarks/configs/client_ab.yaml`` for client-ab-1, ``client_ab_<k>.yaml`` after).

The runs themselves are ``benchmarks.scale_cluster`` and ``benchmarks.churn_cluster``,
each started from the git worktree of its arm (the arm is found from the file name,
``burst-<i>-<arm>-...json``); their JSON goes to ``benchmarks/data/client_ab_<k>/``. This
renders the RESULTS.md section from those files and the configs, nothing else::

    .venv/bin/python -m benchmarks.client_ab --write
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.results_md import markers, replace_section

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "benchmarks" / "configs"
DATA = ROOT / "benchmarks" / "data"
NAME = "client-ab"
# client-ab-1's config named its arms in comments only.
FIRST_ARMS = {"A": "A (own aiohttp transport)", "B": "B (kubernetes_asyncio)"}


@dataclass
class Run:
    """One labelled run: its rows in the order they ran (each with ``arm``), the
    objective and arm names of its config, and the reading written after it."""

    burst: list[dict[str, Any]]
    churn: list[dict[str, Any]]
    objective: str
    arms: dict[str, str]
    reading: str


def _order(path: Path) -> int:
    return int(path.name.split("-")[1])


def config_of(k: str) -> Path:
    return CONFIGS / ("client_ab.yaml" if k == "1" else f"client_ab_{k}.yaml")


def objective_of(config_text: str) -> str:
    """The objective as committed: the config's comment lines from "Objective:" on."""
    comment = config_text.split("# Objective:", 1)[1]
    comment = comment.split("\narms:", 1)[0].split("\nburst:", 1)[0]
    return "Objective: " + " ".join(line.lstrip("#").strip() for line in comment.splitlines())


def load(run_dir: Path) -> Run:
    """The burst and churn rows of one labelled run, in the order they ran (the number in
    the file name), its config's objective and arms, and ``reading.md`` (or "")."""
    k = run_dir.name.rsplit("_", 1)[1]
    text = config_of(k).read_text()
    config = yaml.safe_load(text) or {}
    arms = {a: v["label"] for a, v in (config.get("arms") or {}).items()} or FIRST_ARMS
    burst, churn = [], []
    for path in sorted(run_dir.glob("*.json"), key=_order):
        row = {**json.loads(path.read_text()), "arm": path.name.split("-")[2]}
        (burst if path.name.startswith("burst") else churn).append(row)
    reading = run_dir / "reading.md"
    return Run(burst, churn, objective_of(text), arms,
               reading.read_text().strip() if reading.exists() else "")


def medians(rows: list[dict[str, Any]], arm: str, key: str) -> tuple[float, float, float]:
    """Median, min and max of ``key`` over one arm's rows."""
    values = [float(r[key]) for r in rows if r["arm"] == arm]
    return statistics.median(values), min(values), max(values)


def _per_service_ms(cpu: float, n: int) -> str:
    return f"{1000 * cpu / n:.1f}"


def section(runs: dict[str, Run]) -> str:
    begin, end = markers(NAME)
    lines = [begin, "## The operator's Kubernetes client, A/B on the real control plane", "",
             "Issue 26 item 3: `controller/kube.py`'s own aiohttp transport (A) against "
             "kube.py on kubernetes_asyncio (B), both from their own worktree, interleaved "
             "as each run's config orders them (committed before its first run; "
             "`python -m benchmarks.client_ab --write`). kube-apiserver v1.37.2, etcd, "
             "controller-manager and scheduler on the same 2 cores as the operator.", ""]
    for label, run in runs.items():
        k = label.rsplit("-", 1)[1]
        lines += [f"### {label}", "",
                  f"`{config_of(k).relative_to(ROOT)}`; the objective, as committed:", "",
                  "> " + run.objective, "",
                  "| # | arm | load before | p50 s | p99 s | burst wall s "
                  "| operator CPU ms/service "
                  "until rendered / until handled | control plane CPU s (burst) |",
                  "|---|---|---|---|---|---|---|---|"]
        for i, r in enumerate(run.burst, 1):
            lines.append(
                f"| {i} | {run.arms.get(r['arm'], r['arm'])} "
                f"| {r['load_average_before'][0]:.1f} | {r['p50']:.1f} | {r['p99']:.1f} "
                f"| {r['wall_seconds']:.1f} "
                f"| {_per_service_ms(r['operator_cpu_seconds'], r['n'])} / "
                f"{_per_service_ms(r['operator_cpu_seconds_until_handled'], r['n'])} "
                f"| {r['control_plane_cpu_seconds']:.1f} |")
        arms = sorted({r["arm"] for r in run.burst})
        if all(sum(r["arm"] == a for r in run.burst) >= 3 for a in arms):
            lines += ["", "| arm | bursts | p99 s median (range) | operator CPU ms/service "
                      "until handled, median (range) |", "|---|---|---|---|"]
            for a in arms:
                p99 = medians(run.burst, a, "p99")
                n = run.burst[0]["n"]
                cpu = [1000 * v / n for v in
                       medians(run.burst, a, "operator_cpu_seconds_until_handled")]
                lines.append(f"| {run.arms.get(a, a)} "
                             f"| {sum(r['arm'] == a for r in run.burst)} "
                             f"| {p99[0]:.1f} ({p99[1]:.1f}-{p99[2]:.1f}) "
                             f"| {cpu[0]:.1f} ({cpu[1]:.1f}-{cpu[2]:.1f}) |")
        if run.churn:
            lines += ["", "| churn | arm | converged | seconds after the last fault | problems "
                      "left | operator tracebacks | handler failures logged with a traceback "
                      "| operator CPU s |",
                      "|---|---|---|---|---|---|---|---|"]
            for i, r in enumerate(run.churn, 1):
                by_handler = r.get("operator_errors_by_handler")
                failures = ("n/a" if by_handler is None else ", ".join(
                    f"{h.split(':')[0]} {c}" for h, c in by_handler.items()
                    if h.endswith(": exception")) or "0")
                lines.append(
                    f"| {i} | {run.arms.get(r['arm'], r['arm'])} | {r['converged']} "
                    f"| {r['converged_after_faults_seconds']:.1f} | {r['problems_left']} "
                    f"| {r['operator_tracebacks']} | {failures} "
                    f"| {r['operator_cpu_seconds']:.1f} |")
        lines += ["", run.reading, ""] if run.reading else [""]
    lines.append(end)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update the results section")
    args = parser.parse_args()
    runs = {f"client-ab-{d.name.rsplit('_', 1)[1]}": load(d)
            for d in sorted(DATA.glob("client_ab_*")) if d.is_dir() and any(d.glob("*.json"))}
    text = section(runs)
    if args.write:
        replace_section(NAME, text)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

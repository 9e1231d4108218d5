"""client-ab: the operator's Kubernetes client before and after issue 26 item 3, on the
REAL control plane, as pre-registered in ``benchmarks/configs/client_ab.yaml``.

The runs themselves are ``benchmarks.scale_cluster`` and ``benchmarks.churn_cluster``,
each started from the git worktree of its arm (the arm is the ``operator_code`` its JSON
records); their JSON goes to ``benchmarks/data/client_ab_<k>/``. This renders the
RESULTS.md section from those files, nothing else::

    .venv/bin/python -m benchmarks.client_ab --write
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.results_md import markers, replace_section

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "benchmarks" / "configs" / "client_ab.yaml"
DATA = ROOT / "benchmarks" / "data"
NAME = "client-ab"
ARMS = {"aa26583": "A (own aiohttp transport)", "9cf6dba": "B (kubernetes_asyncio)"}


Run = tuple[list[dict[str, Any]], list[dict[str, Any]], str]


def load(run_dir: Path) -> Run:
    """The burst and churn rows of one labelled run, in the order they ran, and the
    reading written after it (``reading.md``; empty when there is none)."""
    burst, churn = [], []
    for path in sorted(run_dir.glob("*.json")):
        row = json.loads(path.read_text())
        (burst if path.name.startswith("burst") else churn).append(row)
    reading = run_dir / "reading.md"
    return burst, churn, reading.read_text().strip() if reading.exists() else ""


def _per_service_ms(cpu: float, n: int) -> str:
    return f"{1000 * cpu / n:.1f}"


def section(runs: dict[str, Run], objective: str) -> str:
    begin, end = markers(NAME)
    lines = [begin, "## The operator's Kubernetes client, A/B on the real control plane", "",
             "Issue 26 item 3: `controller/kube.py`'s own aiohttp transport (A) against "
             "kube.py on kubernetes_asyncio (B), both from their own worktree, the bursts in "
             "the order A B B A, then one churn run each (`benchmarks/configs/client_ab.yaml`, "
             "committed before the first run; `python -m benchmarks.client_ab --write`). "
             "kube-apiserver v1.37.2, etcd, controller-manager and scheduler on the same 2 "
             "cores as the operator. The objective, as committed:", "",
             "> " + objective.replace("\n", " ").strip(), ""]
    for label, (burst, churn, reading) in runs.items():
        lines += [f"### {label}", "",
                  "| # | arm | load before | p50 s | p99 s | burst wall s "
                  "| operator CPU ms/service "
                  "until rendered / until handled | control plane CPU s (burst) |",
                  "|---|---|---|---|---|---|---|---|"]
        for i, r in enumerate(burst, 1):
            lines.append(
                f"| {i} | {ARMS.get(r['operator_code'], r['operator_code'])} "
                f"| {r['load_average_before'][0]:.1f} | {r['p50']:.1f} | {r['p99']:.1f} "
                f"| {r['wall_seconds']:.1f} "
                f"| {_per_service_ms(r['operator_cpu_seconds'], r['n'])} / "
                f"{_per_service_ms(r['operator_cpu_seconds_until_handled'], r['n'])} "
                f"| {r['control_plane_cpu_seconds']:.1f} |")
        if churn:
            lines += ["", "| churn | arm | converged | seconds after the last fault | problems "
                      "left | operator tracebacks | operator CPU s |",
                      "|---|---|---|---|---|---|---|"]
            for i, r in enumerate(churn, 1):
                lines.append(
                    f"| {i} | {ARMS.get(r['operator'], r['operator'])} | {r['converged']} "
                    f"| {r['converged_after_faults_seconds']:.1f} | {r['problems_left']} "
                    f"| {r['operator_tracebacks']} | {r['operator_cpu_seconds']:.1f} |")
        lines += ["", reading, ""] if reading else [""]
    lines.append(end)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update RESULTS.md")
    args = parser.parse_args()
    # The objective as committed: the config's comment lines from "Objective:" on.
    comment = CONFIG.read_text().split("# Objective:", 1)[1].split("\nburst:", 1)[0]
    objective = " ".join(line.lstrip("#").strip() for line in comment.splitlines())
    runs = {f"client-ab-{d.name.rsplit('_', 1)[1]}": load(d)
            for d in sorted(DATA.glob("client_ab_*")) if d.is_dir()}
    text = section(runs, "Objective: " + objective)
    if args.write:
        replace_section(NAME, text)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

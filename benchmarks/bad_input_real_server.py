"""The bad-input corpus against the REAL kube-apiserver (v1.37.2, built from Go modules:
``llm_operator_sandbox.cluster``), beside the project's own CRD evaluator: starts a local
control plane, installs the CRD, creates every case with ``dryRun=All`` and strict field
validation (what ``kubectl apply`` does), and writes ``benchmarks/data/
bad_input_real_server.json`` and its section of ``benchmarks/RESULTS.md``. The cluster
tier (``tests/cluster/test_bad_input_real.py``) replays it and fails when the stored
figures are not what the server says.

    .venv/bin/python -m benchmarks.bad_input_real_server --write
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support.emulator import CRD_PATH, kubectl_binary
from tests.support.real_server import replay, summary

from benchmarks.results_md import markers, replace_section
from llm_operator_sandbox.cluster import KUBERNETES_VERSION, LocalCluster

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "bad_input_real_server.json"
NAME = "bad-input-real-server"
BEGIN, END = markers(NAME)


def section(fig: dict[str, Any]) -> str:
    rows = []
    for kind, c in fig["kinds"].items():
        rows.append(f"| {kind} | {c.get('refusedByServer', 0)} | {c.get('refusedByOperator', 0)}"
                    f" | {c.get('accepted', 0)} | {c.get('notAnObject', 0)} | "
                    f"{c.get('sameAsEvaluator', 0)} |")
    diffs = fig["differences"]
    return "\n".join([
        BEGIN,
        "## Bad input on the real API server",
        "",
        "Every case of the bad-input corpus (and its accepted edge cases), created with",
        f"`dryRun=All` and strict field validation on a REAL kube-apiserver "
        f"{fig['kubernetes']} (the",
        "cluster tier's control plane, built from Go modules), beside the project's own",
        "CRD evaluator (`tests/support/crd.py`, which the unit tier uses). *operator*: the",
        "server admits it and the operator's planner refuses it. Stored:",
        "`benchmarks/data/bad_input_real_server.json`;",
        "`python -m benchmarks.bad_input_real_server --write`.",
        "",
        "| kind | refused by the real server | refused by the operator | accepted |"
        " not one object (kubectl refuses it) | same verdict as the evaluator |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"{fig['cases']} cases; {len(diffs)} where the real server and the evaluator differ"
        + ("." if not diffs else ": " + "; ".join(
            f"{d['id']} ({d['real']} vs {d['evaluator']}: {d['explained']})" for d in diffs)),
        END,
    ])


def measure() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="llmop-bad-input-") as tmp, \
            LocalCluster(Path(tmp) / "cluster") as cluster:
        env = {"KUBECONFIG": str(cluster.admin_kubeconfig), "PATH": "/usr/bin:/bin"}
        kubectl = kubectl_binary()
        subprocess.run([kubectl, "apply", "--server-side", "-f", str(CRD_PATH)], env=env,
                       check=True, capture_output=True)
        subprocess.run([kubectl, "wait", "--for=condition=Established", "--timeout=60s",
                        "crd/llmservices.llmops.dev"], env=env, check=True,
                       capture_output=True)
        subprocess.run([kubectl, "create", "namespace", "bad-input"], env=env, check=True,
                       capture_output=True)
        fig = summary(replay(cluster.admin_kubeconfig, "bad-input"))
    return {"kubernetes": KUBERNETES_VERSION, **fig}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the figures")
    args = parser.parse_args(argv)
    fig = measure()
    sys.stdout.write(json.dumps(fig, indent=1) + "\n")
    if args.write:
        DATA.write_text(json.dumps(fig, indent=1, sort_keys=True) + "\n")
        replace_section(NAME, section(fig))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

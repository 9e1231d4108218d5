"""Scale on the REAL control plane: N LLMServices created at once, time from create to
the operator's Deployment, against kube-apiserver, etcd, kube-controller-manager and
kube-scheduler v1.37.2 (``llm_operator_sandbox.cluster``), with the chart installed by
helm and the operator (``llm-operator run``, its own process) under the chart's
ServiceAccount token. Figures are stored apart from the emulator's
(``benchmarks/data/scale_cluster/``, their own RESULTS.md section); never merged.

The workload is the emulator benchmark's (``benchmarks/scale.py``): the same service
manifest, a burst of N creates from 8 client threads, one warm-up service first, latency
= the watch's ADDED event for the Deployment minus the moment the create was sent. What
differs, and is part of the result: every create goes through authentication, RBAC,
admission, the CRD's schema and CEL, and etcd; the Deployment controller makes a
ReplicaSet and a Pod for each Deployment and the scheduler tries to place each Pod
(there are no nodes: every pod stays Pending, as on a cluster with no free GPU), and the
operator sees those pods (its PodsScheduled condition). All of it on this machine's 2
cores: the CPU seconds of the operator and of the control plane are both recorded.

    .venv/bin/python -m benchmarks.scale_cluster --n 1000 --repeat 2 --store --write
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
import yaml

from benchmarks.results_md import markers, replace_section
from benchmarks.scale import (
    GOAL_N,
    GOAL_P99,
    NAMESPACE,
    code_version,
    cpu_seconds,
    peak_rss_mib,
    percentile,
    service,
)
from llm_operator.api.models import parse_quantity
from llm_operator_sandbox.cluster import KUBERNETES_VERSION, LocalCluster, helm_install
from llm_operator_sandbox.processes import stop as stop_process

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "scale_cluster"
CHART = ROOT / "charts" / "llm-operator"
NAME = "scale-cluster"
BEGIN, END = markers(NAME)
THREADS = 8


def _tools() -> tuple[str, str]:
    venv = Path(sys.executable).parent
    kubectl = venv / "kubectl"
    helm = ROOT / ".cache" / "bin" / "helm"
    return str(kubectl), str(helm)


def run_once(n: int, workdir: Path, timeout: float) -> dict[str, Any]:
    """One burst of ``n`` on a fresh control plane and operator."""
    kubectl, helm = _tools()
    with LocalCluster(workdir / f"cluster-{time.monotonic_ns()}") as cluster:
        subprocess.run([kubectl, "create", "namespace", NAMESPACE], check=True,
                       capture_output=True, env={**os.environ,
                                                 "KUBECONFIG": str(cluster.admin_kubeconfig)})
        installed = helm_install(cluster, helm, kubectl, CHART,
                                 values={"replicaCount": 0, "watchNamespaces": [NAMESPACE]})
        log_path = workdir / f"operator-{time.monotonic_ns()}.log"
        with log_path.open("wb") as log:
            op = subprocess.Popen(
                [sys.executable, "-m", "llm_operator.cli", "run", "--standalone", "-n",
                 NAMESPACE],
                env={**os.environ, "KUBECONFIG": str(installed.kubeconfig),
                     "LLMOP_HEALTH_PORT": "0", "LLMOP_METRICS_PORT": "0"},
                stdout=log, stderr=subprocess.STDOUT)
        try:
            return _measure(cluster, op, log_path, n, timeout)
        finally:
            stop_process(op, 20)


def _measure(cluster: LocalCluster, op: subprocess.Popen[bytes], log_path: Path, n: int,
             timeout: float) -> dict[str, Any]:
    pki = cluster.workdir / "pki"
    cert = (str(pki / "admin.crt"), str(pki / "admin.key"))
    verify = str(cluster.ca.cert)
    url = cluster.url
    arrived: dict[str, float] = {}
    done = threading.Event()

    def watch() -> None:
        with requests.get(f"{url}/apis/apps/v1/namespaces/{NAMESPACE}/deployments",
                          params={"watch": "true"}, stream=True, timeout=timeout, cert=cert,
                          verify=verify) as r:
            for line in r.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                if event["type"] == "ADDED":
                    arrived.setdefault(event["object"]["metadata"]["name"], time.time())
                    if len(arrived) >= n + 1:
                        done.set()
                        return

    deadline = time.monotonic() + 60
    while b"Initial authentication has finished" not in log_path.read_bytes():
        if time.monotonic() > deadline or op.poll() is not None:
            raise RuntimeError(f"the operator did not start: {log_path.read_text()}")
        time.sleep(0.1)
    threading.Thread(target=watch, daemon=True).start()
    time.sleep(0.3)
    session = requests.Session()
    session.cert, session.verify = cert, verify
    session.trust_env = False  # REQUESTS_CA_BUNDLE would replace the cluster CA
    session.mount("https://", requests.adapters.HTTPAdapter(pool_connections=THREADS,
                                                            pool_maxsize=THREADS))
    create_url = f"{url}/apis/llmops.dev/v1alpha1/namespaces/{NAMESPACE}/llmservices"
    warmup = service(0)
    warmup["metadata"].update(name="warmup", namespace=NAMESPACE)
    session.post(create_url, json=warmup, timeout=30).raise_for_status()
    deadline = time.monotonic() + 60
    while "warmup" not in arrived and time.monotonic() < deadline:
        time.sleep(0.05)
    control = [c.proc.pid for c in cluster.components.values() if c.proc is not None]
    op_before = cpu_seconds(op.pid)
    cp_before = sum(cpu_seconds(pid) for pid in control)
    sent: dict[str, float] = {}

    def create(i: int) -> None:
        body = service(i)
        body["metadata"]["namespace"] = NAMESPACE
        sent[body["metadata"]["name"]] = time.time()
        session.post(create_url, json=body, timeout=60).raise_for_status()

    load_before = os.getloadavg()
    start = time.time()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(create, range(n)))
    sent_all = time.time()
    done.wait(timeout)
    finished = time.time()
    load_after = os.getloadavg()
    latencies = [arrived[k] - sent[k] for k in sent if k in arrived]
    op_cpu = cpu_seconds(op.pid) - op_before
    cp_cpu = sum(cpu_seconds(pid) for pid in control) - cp_before
    handled_deadline = time.monotonic() + 300
    while log_path.read_bytes().count(b"Creation is processed") < n + 1 and (
            time.monotonic() < handled_deadline):
        time.sleep(0.2)
    handled = time.time()
    return {
        "n": n, "rate": None, "shards": 1, "api_server": f"kube-apiserver {KUBERNETES_VERSION}",
        "operator_code": code_version(ROOT),
        "rendered": len(latencies),
        "create_seconds": sent_all - start,
        "wall_seconds": finished - start,
        "p50": percentile(latencies, 50) if latencies else float("nan"),
        "p99": percentile(latencies, 99) if latencies else float("nan"),
        "max": max(latencies) if latencies else float("nan"),
        "mean": statistics.fmean(latencies) if latencies else float("nan"),
        "operator_peak_rss_mib": peak_rss_mib(op.pid),
        "operator_cpu_seconds": op_cpu,
        "operator_cpu_seconds_until_handled": cpu_seconds(op.pid) - op_before,
        "control_plane_cpu_seconds": cp_cpu,
        "control_plane_cpu_seconds_until_handled":
            sum(cpu_seconds(pid) for pid in control) - cp_before,
        "handled_after_seconds": handled - start,
        "load_average_before": list(load_before),
        "load_average_after": list(load_after),
        "machine_cpus": os.cpu_count(),
        # Adaptation on (the operator's LLMOP_PROMETHEUS_URL, from this environment): a kopf
        # daemon and a finalizer per service, and the loop's queries.
        "adaptation": bool(os.environ.get("LLMOP_PROMETHEUS_URL")),
    }


def stored_runs() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(DATA.glob("*.json"))]


def section(rows: list[dict[str, Any]]) -> str:
    lines = [
        BEGIN,
        "## Scale on the real control plane",
        "",
        "A burst of N LLMServices against a REAL kube-apiserver "
        f"{KUBERNETES_VERSION} with etcd, the",
        "controller-manager and the scheduler (`benchmarks/scale_cluster.py`; the workload of",
        "the emulator's `benchmarks/scale.py`, whose figures are in their own section and are",
        "not merged with these). The operator runs under the chart's ServiceAccount token;",
        "every Deployment gets a ReplicaSet and a Pod that stays Pending (no nodes). All on",
        "this machine's 2 cores. Latency: create sent -> the operator's Deployment in a watch.",
        f"Goal: p99 <= {GOAL_P99:g} s at N = {GOAL_N}.",
        "",
        "| run | N | rendered | p50 s | p99 s | max s | operator CPU s (per service, ms) |"
        " control plane CPU s | operator peak RSS MiB | load before/after | operator code |"
        " adaptation |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        per = 1000 * r["operator_cpu_seconds_until_handled"] / max(r["n"], 1)
        void = " (void)" if r.get("harness_defect") else ""
        lines.append(
            f"| {i}{void} | {r['n']} | {r['rendered']} | {r['p50']:.2f} | {r['p99']:.2f} | "
            f"{r['max']:.2f} | {r['operator_cpu_seconds_until_handled']:.1f} ({per:.0f}) | "
            f"{r['control_plane_cpu_seconds_until_handled']:.1f} | "
            f"{r['operator_peak_rss_mib']:.0f} | "
            f"{r['load_average_before'][0]:.1f}/{r['load_average_after'][0]:.1f} | "
            f"{r.get('operator_code', '')} | {'on' if r.get('adaptation') else 'off'} |")
    void = [i for i, r in enumerate(rows, 1) if r.get("harness_defect")]
    if void:
        lines += ["", f"Runs {', '.join(map(str, void))} are void (a defect of the local control "
                      f"plane, not of the operator): {rows[void[0] - 1]['harness_defect']}"]
    capped = [i for i, r in enumerate(rows, 1)
              if r["handled_after_seconds"] >= 300 and not r.get("harness_defect")]
    rows = [r for r in rows if not r.get("harness_defect")]
    if capped:
        lines += ["", f"Runs {', '.join(map(str, capped))}: the operator had not logged every "
                      "creation as processed 300 s after the last create (the wait's cap), so "
                      "their operator and control-plane CPU 'until handled' are lower bounds."]
    ratios = [r["control_plane_cpu_seconds_until_handled"] /
              max(r["operator_cpu_seconds_until_handled"], 1e-9) for r in rows]
    if ratios:
        lines += ["", "Against the emulator's figures: there, no controller, scheduler or etcd "
                      f"shares the 2 cores; here the control plane used {min(ratios):.1f}-"
                      f"{max(ratios):.1f}x the operator's CPU (a ReplicaSet, a Pod, a failed "
                      "scheduling attempt and Events per service), on the same cores. A "
                      "cluster runs its control plane on other machines."]
    curve = memory_curve(rows)
    if curve is not None:
        lines += memory_lines(rows, *curve)
    met = [r for r in rows if r["n"] >= GOAL_N]
    if met:
        worst = max(r["p99"] for r in met)
        lines += ["", f"Worst p99 at N = {GOAL_N}: {worst:.2f} s "
                      f"({'met' if worst <= GOAL_P99 else 'not met'})."]
    lines.append(END)
    return "\n".join(lines)


MEMORY_MARGIN = 1.5  # the chart's limit over the worst peak at GOAL_N (issue 35 item 6)


def chart_memory_limit_mib(chart: Path = CHART) -> float:
    """The operator container's memory limit in the chart's values, MiB."""
    value = yaml.safe_load((chart / "values.yaml").read_text())["resources"]["limits"]["memory"]
    return float(parse_quantity(str(value))) / 2**20


def memory_lines(rows: list[dict[str, Any]], base: float, per: float, code: str,
                 sizes: list[int]) -> list[str]:
    """The section's memory paragraphs: the line fitted to ``code``'s runs, that code's
    runs with adaptation on against it, and the goal at GOAL_N."""
    lines = ["", f"Memory against N (operator code {code}, runs of N = "
                 f"{', '.join(str(n) for n in sizes)}): peak RSS ~ {base:.0f} MiB + "
                 f"{per * 1024:.0f} KiB x N (least squares; "
                 f"{base + per * GOAL_N:.0f} MiB at N = {GOAL_N}, "
                 f"{base + per * 2 * GOAL_N:.0f} MiB at N = {2 * GOAL_N}, extrapolated). "
                 "The chart's memory limit is set from it (docs/production/scale.md, "
                 "\"Memory\")."]
    mine = [r for r in rows if r.get("operator_code") == code and not r.get("harness_defect")]
    adapted = [r for r in mine if r.get("adaptation")]
    if adapted:
        lines += ["", "With adaptation on (a kopf daemon and a finalizer per service; "
                      "LLMOP_PROMETHEUS_URL set, Prometheus not answering): " + "; ".join(
                          f"N = {r['n']}: {r['operator_peak_rss_mib']:.0f} MiB "
                          f"({r['operator_peak_rss_mib'] - base - per * r['n']:+.0f}"
                          " MiB against the line)" for r in adapted) + "."]
    at_goal = [r["operator_peak_rss_mib"] for r in mine
               if r["n"] == GOAL_N and not r.get("adaptation")]
    if at_goal:
        limit, worst = chart_memory_limit_mib(), max(at_goal)
        lines += ["", f"Memory goal (peak RSS at N = {GOAL_N} x {MEMORY_MARGIN:g} <= the chart's "
                      f"limit, {limit:.0f} MiB): worst peak {worst:.0f} MiB "
                      f"({'met' if worst * MEMORY_MARGIN <= limit else 'not met'})."]
    return lines


def memory_curve(rows: list[dict[str, Any]]
                 ) -> tuple[float, float, str, list[int]] | None:
    """Peak RSS (MiB) = base + per x N, least squares over the valid runs (adaptation
    off, the chart's default) of the newest operator code that ran at two or more sizes;
    None when no code did."""
    by_code: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if not r.get("harness_defect") and r.get("operator_code") and not r.get("adaptation"):
            by_code.setdefault(r["operator_code"], []).append(r)
    for code in reversed(list(by_code)):  # stored in time order: newest code last
        runs = by_code[code]
        if len({r["n"] for r in runs}) < 2:
            continue
        per, base = statistics.linear_regression([r["n"] for r in runs],
                                                 [r["operator_peak_rss_mib"] for r in runs])
        return base, per, code, sorted(r["n"] for r in runs)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=GOAL_N)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--store", action="store_true")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="llmop-scale-cluster-") as tmp:
        for _ in range(args.repeat):
            row = run_once(args.n, Path(tmp), args.timeout)
            sys.stdout.write(json.dumps(row, indent=1) + "\n")
            if args.store:
                DATA.mkdir(parents=True, exist_ok=True)
                stamp = time.strftime("%Y%m%dT%H%M%S")
                (DATA / f"{stamp}-n{row['n']}.json").write_text(
                    json.dumps(row, indent=1, sort_keys=True) + "\n")
    if args.write:
        replace_section(NAME, section(stored_runs()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Churn on the REAL control plane with its faults: N LLMServices created, updated and
deleted while kube-apiserver and then etcd are restarted and the operator is killed, then
a check that everything converged.

The workload and the checks are the emulator churn's (``benchmarks/churn.py``): the same
specs, 40% updated, 25% deleted, 8 client threads, and the same convergence check
(every surviving service has exactly its Deployment, Service and PodDisruptionBudget,
owned by it, at most one tuning Job, ``status.observedGeneration`` current, seven user
values in the rendered pod template; every deleted service's children gone, nothing
owned by a gone service), plus one check only a real cluster has: no ReplicaSet left
whose Deployment is gone (the garbage collector's work). What differs is where the
faults come from: no injected answers, but the processes themselves, as on a cluster
whose control plane is upgraded or fails over:

- at a third of the client's operations, kube-apiserver is stopped for ``--down``
  seconds and started again (every watch breaks, every request in flight fails);
- at half, the operator is killed with SIGKILL and started again;
- at two thirds, etcd is stopped for ``--down`` seconds and started again (the API
  server answers 5xx and its watch caches re-list).

The client retries what failed because of an outage (connection refused or reset, 429,
500, 503, 504, as kubectl or a GitOps tool would); a create retried after its first
attempt went through answers 409 AlreadyExists, which counts as done. The control plane
is the one the cluster tier runs (``llm_operator_sandbox.cluster``, v1.37.2, built from
Go modules), the chart installed by helm, the operator under its ServiceAccount token;
no nodes, so every pod stays Pending, as on a cluster with no free GPU. Figures are
stored apart from the emulator's (``benchmarks/data/churn_cluster.json``, their own
RESULTS.md section); never merged.

The run's objective and workload are fixed in ``benchmarks/configs/churn_cluster.yaml``
(committed before the first run):

    .venv/bin/python -m benchmarks.churn_cluster --write
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests
import yaml

from benchmarks.churn import (
    CHILDREN,
    LLMS,
    NAMESPACE,
    Client,
    churn,
    operator_commit,
    problems,
    start_operator_process,
)
from benchmarks.results_md import markers, replace_section
from benchmarks.scale import cpu_seconds
from llm_operator_sandbox.cluster import KUBERNETES_VERSION, LocalCluster, helm_install
from llm_operator_sandbox.processes import stop as stop_process

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "benchmarks" / "configs" / "churn_cluster.yaml"
DATA = ROOT / "benchmarks" / "data" / "churn_cluster.json"
CHART = ROOT / "charts" / "llm-operator"
NAME = "churn-cluster"
BEGIN, END = markers(NAME)
OUTAGE = (429, 500, 502, 503, 504)
REPLICASETS = f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets"


class ClusterClient(Client):
    """The churn's client against the real API server (the admin's certificate),
    retrying what an outage refused."""

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(cluster.url)
        pki = cluster.workdir / "pki"
        self.session.cert = (str(pki / "admin.crt"), str(pki / "admin.key"))
        self.session.verify = str(cluster.ca.cert)
        self.session.trust_env = False  # REQUESTS_CA_BUNDLE would replace the cluster CA
        self.session.mount("https://", requests.adapters.HTTPAdapter(pool_connections=8,
                                                                     pool_maxsize=8))
        self.outage_errors = 0

    def call(self, method: str, path: str, body: Any = None,
             content_type: str = "application/json") -> requests.Response:
        for attempt in range(600):  # 0.2 s apart: rides out two minutes of outage
            try:
                resp = self.session.request(
                    method, self.url + path, timeout=60,
                    data=None if body is None else json.dumps(body),
                    headers={"Content-Type": content_type})
            except (requests.ConnectionError, requests.Timeout):
                resp = None  # an outage, or an API server too busy to answer in 60 s
            if resp is not None and resp.status_code not in OUTAGE:
                if method == "POST" and resp.status_code == 409 and attempt:
                    resp.status_code = 201  # an earlier attempt created it
                return resp
            with self._lock:
                self.outage_errors += 1
            time.sleep(0.2)
        raise RuntimeError(f"{method} {path}: still failing after two minutes")


def orphan_replicasets(client: ClusterClient) -> list[str]:
    """ReplicaSets whose Deployment is gone: left for good if the garbage collector
    missed them."""
    deployments = {d["metadata"]["uid"] for d in client.items(CHILDREN["Deployment"])}
    left = []
    for rs in client.items(REPLICASETS):
        owners = [r["uid"] for r in rs["metadata"].get("ownerReferences") or []
                  if r.get("kind") == "Deployment"]
        if owners and not set(owners) & deployments:
            left.append(f"orphan ReplicaSet {rs['metadata']['name']} (Deployment gone)")
    return left


def run(config: dict[str, Any], workdir: Path) -> dict[str, Any]:
    n, seed, down = int(config["n"]), int(config["seed"]), float(config["down_seconds"])
    kubectl = str(Path(sys.executable).parent / "kubectl")
    helm = str(ROOT / ".cache" / "bin" / "helm")
    with LocalCluster(workdir / "cluster") as cluster:
        subprocess.run([kubectl, "create", "namespace", NAMESPACE], check=True,
                       capture_output=True,
                       env={**os.environ, "KUBECONFIG": str(cluster.admin_kubeconfig)})
        installed = helm_install(cluster, helm, kubectl, CHART,
                                 values={"replicaCount": 0, "watchNamespaces": [NAMESPACE]})
        log_path = workdir / "operator.log"
        env = {**os.environ, **installed.env, "KUBECONFIG": str(installed.kubeconfig),
               "LLMOP_HEALTH_PORT": "0", "LLMOP_METRICS_PORT": "0", "PYTHONUNBUFFERED": "1"}
        ops: list[subprocess.Popen[bytes]] = []
        op_cpu = [0.0]

        def start_operator() -> None:
            ops.append(start_operator_process(env, log_path, 120))

        faults: list[dict[str, Any]] = []
        fault_threads: list[threading.Thread] = []

        one_at_a_time = threading.Lock()  # a fault starts after the one before is over

        def fault(what: str) -> None:
            with one_at_a_time:
                t0 = time.monotonic()
                if what == "operator":
                    op_cpu[0] += cpu_seconds(ops[-1].pid)
                    ops[-1].send_signal(signal.SIGKILL)
                    ops[-1].wait(10)
                    start_operator()
                else:
                    cluster.restart(what, down_seconds=down, timeout=180)
                faults.append({"what": what, "at_seconds": round(t0 - start, 1),
                               "back_after_seconds": round(time.monotonic() - t0, 1)})

        plan = {float(f["at_fraction_of_operations"]): str(f["restart"])
                for f in config["faults"]}
        client = ClusterClient(cluster)
        try:
            start_operator()
            control = [c.proc.pid for c in cluster.components.values() if c.proc is not None]
            cp_before = sum(cpu_seconds(pid) for pid in control)
            start = time.monotonic()
            outcome = churn_with_faults(client, n, seed, plan, fault, fault_threads)
            churn_seconds = time.monotonic() - start
            for t in fault_threads:
                t.join(300)
            faults_done = time.monotonic()
            left: list[str] = []
            checked: dict[str, int] = {}
            converged_after = None
            while time.monotonic() - faults_done < float(config["timeout_seconds"]):
                left, checked = problems(client, outcome["survivors"], outcome["deleted"])
                left += orphan_replicasets(client)
                if not left:
                    converged_after = time.monotonic() - faults_done
                    break
                time.sleep(5)
            # The components restarted have new pids: their CPU is not summed here.
            control = [c.proc.pid for c in cluster.components.values() if c.proc is not None]
            log = log_path.read_text(errors="replace")
            return {
                "config": str(CONFIG.relative_to(ROOT)), "n": n, "seed": seed,
                "api_server": f"kube-apiserver {KUBERNETES_VERSION}",
                "operator": operator_commit(),
                "created": outcome["counts"]["create"], "updated": outcome["counts"]["update"],
                "deleted": outcome["counts"]["delete"], "survivors": len(outcome["survivors"]),
                "faults": faults, "down_seconds": down,
                "client_outage_retries": client.outage_errors,
                "churn_seconds": round(churn_seconds, 1),
                "converged": converged_after is not None,
                "converged_after_faults_seconds": None if converged_after is None
                else round(converged_after, 1),
                "problems_left": len(left), "problems_sample": left[:20],
                "checked": checked,
                "operator_tracebacks": log.count("Traceback"),
                "operator_errors_by_handler": errors_by_handler(log),
                "operator_cpu_seconds": round(op_cpu[0] + cpu_seconds(ops[-1].pid), 1),
                "control_plane_cpu_seconds_lower_bound":
                    round(sum(cpu_seconds(pid) for pid in control) - cp_before, 1),
                "load_average": round(os.getloadavg()[0], 1),
                "machine_cpus": os.cpu_count(),
            }
        finally:
            for proc in ops:
                stop_process(proc, 20)


def churn_with_faults(client: ClusterClient, n: int, seed: int,
                      plan: dict[float, str], fault: Any,
                      threads: list[threading.Thread]) -> dict[str, Any]:
    """``churn.churn`` with a progress hook: each fault of ``plan`` (fraction of the
    operations done -> what to restart) starts on its own thread when the client gets
    there, and the client keeps going through it."""
    total = n + n * 2 // 5 + n // 4
    marks = sorted(plan)
    done = [0]
    lock = threading.Lock()
    original = client.call

    def counting(method: str, path: str, body: Any = None,
                 content_type: str = "application/json") -> requests.Response:
        resp = original(method, path, body, content_type)
        if method in ("POST", "PATCH", "DELETE") and path.startswith(LLMS):
            with lock:
                done[0] += 1
                due = [m for m in marks if done[0] >= m * total]
                for m in due:
                    marks.remove(m)
            for m in due:
                t = threading.Thread(target=fault, args=(plan[m],), daemon=True)
                threads.append(t)
                t.start()
        return resp

    client.call = counting  # type: ignore[method-assign]
    try:
        return churn(client, n, random.Random(seed), lambda: None)
    finally:
        client.call = original  # type: ignore[method-assign]


def section(rows: list[dict[str, Any]]) -> str:
    lines = [
        BEGIN,
        "## Churn on the real control plane, with its faults",
        "",
        f"The emulator churn's workload and checks (`benchmarks/churn.py`) against a REAL "
        f"kube-apiserver {KUBERNETES_VERSION} with etcd, the controller-manager and the "
        "scheduler (`benchmarks/churn_cluster.py`, config "
        "`benchmarks/configs/churn_cluster.yaml`, committed before the first run), the "
        "operator under the chart's ServiceAccount token. The faults are the processes': "
        "kube-apiserver stopped and started again at a third of the client's operations, "
        "the operator SIGKILLed at half, etcd stopped and started at two thirds; the "
        "client retries what an outage refused. Converged = every check of the emulator "
        "churn passes and no ReplicaSet outlived its Deployment. Not merged with the "
        "emulator's figures (section above). All on this machine's 2 cores.",
        "",
        "| run | N | created / updated / deleted | faults (at s, back after s) | client retries "
        "in outages | churn took | converged after the last fault | problems left | "
        "user values checked | operator tracebacks | operator CPU s | operator code |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        faults = ", ".join(f"{f['what']} ({f['at_seconds']:.0f}, {f['back_after_seconds']:.0f})"
                           for f in r["faults"])
        conv = (f"{r['converged_after_faults_seconds']:.0f} s" if r["converged"]
                else "no (timeout)")
        lines.append(
            f"| {i} | {r['n']:,} | {r['created']:,} / {r['updated']:,} / {r['deleted']:,} | "
            f"{faults} | {r['client_outage_retries']:,} | {r['churn_seconds']:.0f} s | "
            f"{conv} | {r['problems_left']} | {r['checked'].get('user_values', 0):,} | "
            f"{r['operator_tracebacks']} | {r['operator_cpu_seconds']:.0f} | "
            f"{r['operator']} |")
    for i, r in enumerate(rows, 1):
        if r.get("harness_defect"):
            lines += ["", f"Run {i} is void (a defect of the local control plane, not of the "
                          f"operator): {r['harness_defect']}"]
        elif r.get("note"):
            lines += ["", f"Run {i}: {r['note']}."]
        if not r.get("harness_defect") and not r["converged"]:
            lines += ["", f"Not converged at N = {r['n']:,}: {r['problems_left']:,} checks "
                          "still failed when the wait ended; the first are in the data: "
                          + "; ".join(r["problems_sample"][:5])]
    lines.append(END)
    return "\n".join(lines)


_HANDLER_FAILED = re.compile(
    r"Handler '([^']+)' failed (with an exception|temporarily|permanently)")


def errors_by_handler(log: str) -> dict[str, int]:
    """How often kopf reported each handler failing, by handler and kind of failure
    (``pod-scheduling: exception`` is one kopf logged with a traceback and dropped)."""
    counts: dict[str, int] = {}
    for handler, how in _HANDLER_FAILED.findall(log):
        key = f"{handler}: {'exception' if how.startswith('with') else how}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--n", type=int, default=None,
                        help="override N (a smoke run; not the registered objective)")
    parser.add_argument("--write", action="store_true", help="update data/ and the results section")
    parser.add_argument("--keep-log", type=Path, default=None,
                        help="copy the operator's log here after the run")
    parser.add_argument("--regenerate", action="store_true",
                        help="rewrite the results section from the stored runs; no run")
    args = parser.parse_args()
    if args.regenerate:
        replace_section(NAME, section(json.loads(DATA.read_text())))
        return 0
    config = yaml.safe_load(args.config.read_text())
    if args.n is not None:
        config["n"] = args.n
    with tempfile.TemporaryDirectory(prefix="llmop-churn-cluster-") as tmp:
        try:
            row = run(config, Path(tmp))
        finally:
            if args.keep_log is not None and (Path(tmp) / "operator.log").exists():
                shutil.copy(Path(tmp) / "operator.log", args.keep_log)
    sys.stdout.write(json.dumps(row, indent=1) + "\n")
    if args.write:
        rows = [*json.loads(DATA.read_text()), row] if DATA.exists() else [row]
        DATA.write_text(json.dumps(rows, indent=1) + "\n")
        replace_section(NAME, section(rows))
    return 0 if row["converged"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

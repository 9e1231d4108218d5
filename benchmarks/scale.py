"""Scale: N LLMServices created at once, time from create to rendered Deployment.

Runs against the EMULATED API server (``python -m llm_operator.sandbox.emulator``, its
own process), with the operator as its own process (``llm-operator run``) and this
script as the client, all on this machine (2 cores shared by the three processes, and
by whatever else runs). Not a cluster result: a real API server adds etcd writes, a
real cluster adds admission, but no controllers compete here either.

For each service: latency = (the watch delivers the Deployment's ADDED event) minus
(the moment the client sent the create). All N are sent back to back (a burst, like a
``kubectl apply -f`` of a folder of N manifests or a GitOps sync), from 8 client
threads. The operator's peak RSS is its ``VmHWM`` from /proc.

    .venv/bin/python -m benchmarks.scale --n 100 --n 1000 --write
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
from llm_operator.sandbox.processes import stop as stop_process

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "crds" / "llmservices.llmops.dev.yaml"
NAMESPACE = "bench"
BEGIN, END = markers("scale")


def service(i: int) -> dict[str, Any]:
    """One small valid LLMService (Llama 3.1 8B on L4, everything else planned)."""
    return {
        "apiVersion": "llmops.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": f"svc-{i:04d}", "namespace": NAMESPACE},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                 "gpus": {"product": "L4"}},
    }


def peak_rss_mib(pid: int) -> float:
    """VmHWM (peak resident set) of a live process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def run_once(n: int, workdir: Path, timeout: float, rate: float | None = None) -> dict[str, Any]:
    """One measurement with a fresh emulator and operator: a burst (``rate`` None) or
    ``rate`` creates per second."""
    tag = f"{n}-{rate or 'burst'}-{time.monotonic_ns()}"
    kubeconfig = workdir / f"kubeconfig-{tag}.yaml"
    emu = subprocess.Popen(
        [sys.executable, "-m", "llm_operator.sandbox.emulator", "--kubeconfig", str(kubeconfig),
         "--namespace", NAMESPACE, "-f", str(CRD)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not kubeconfig.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    url = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    log_path = workdir / f"operator-{tag}.log"
    log = log_path.open("wb")
    profile = ["-m", "cProfile", "-o", os.environ["LLMOP_SCALE_PROFILE"]] if os.environ.get(
        "LLMOP_SCALE_PROFILE") else []
    op = subprocess.Popen(
        [sys.executable, *profile, "-m", "llm_operator.cli", "run", "--standalone",
         "-n", NAMESPACE],
        env={**os.environ, "KUBECONFIG": str(kubeconfig), "LLMOP_HEALTH_PORT": "0"},
        stdout=log, stderr=subprocess.STDOUT)
    arrived: dict[str, float] = {}
    done = threading.Event()

    def watch() -> None:
        path = f"{url}/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
        with requests.get(path, params={"watch": "true"}, stream=True, timeout=timeout) as r:
            for line in r.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                if event["type"] == "ADDED":
                    arrived.setdefault(event["object"]["metadata"]["name"], time.time())
                    if len(arrived) >= n + 1:  # and the warm-up service
                        done.set()
                        return

    try:
        deadline = time.monotonic() + 30
        while b"Initial authentication has finished" not in log_path.read_bytes():
            if time.monotonic() > deadline or op.poll() is not None:
                raise RuntimeError(f"the operator did not start: {log_path.read_text()}")
            time.sleep(0.1)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(0.3)
        sent: dict[str, float] = {}
        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=8, pool_maxsize=8)
        session.mount("http://", adapter)
        create_url = f"{url}/apis/llmops.dev/v1alpha1/namespaces/{NAMESPACE}/llmservices"
        # Warm-up: one service rendered end to end, so the measurement starts with kopf's
        # watch streams open (a start-up delay is not a per-service latency).
        warmup = service(0)
        warmup["metadata"]["name"] = "warmup"
        session.post(create_url, json=warmup, timeout=30).raise_for_status()
        deadline = time.monotonic() + 60
        while "warmup" not in arrived and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu_before = cpu_seconds(op.pid)

        def create(i: int) -> None:
            body = service(i)
            if rate:
                time.sleep(max(0.0, start + i / rate - time.time()))
            sent[body["metadata"]["name"]] = time.time()
            resp = session.post(create_url, json=body, timeout=30)
            resp.raise_for_status()

        load_before = os.getloadavg()[0]
        start = time.time()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(n)))
        sent_all = time.time()
        done.wait(timeout)
        finished = time.time()
        rss = peak_rss_mib(op.pid)
        emu_rss = peak_rss_mib(emu.pid)
        op_cpu, emu_cpu = cpu_seconds(op.pid) - cpu_before, cpu_seconds(emu.pid)
        latencies = [arrived[k] - sent[k] for k in sent if k in arrived and k != "warmup"]
        return {
            "n": n,
            "rate": rate,
            "rendered": len(latencies),
            "create_seconds": sent_all - start,
            "wall_seconds": finished - start,
            "p50": percentile(latencies, 50) if latencies else float("nan"),
            "p99": percentile(latencies, 99) if latencies else float("nan"),
            "max": max(latencies) if latencies else float("nan"),
            "mean": statistics.fmean(latencies) if latencies else float("nan"),
            "operator_peak_rss_mib": rss,
            "emulator_peak_rss_mib": emu_rss,
            "operator_cpu_seconds": op_cpu,
            "load_average": max(load_before, os.getloadavg()[0]),
            "emulator_cpu_seconds": emu_cpu,
        }
    finally:
        for proc in (op, emu):
            stop_process(proc, 20)
        log.close()


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| N | creates | rendered | creates sent in | all rendered after | p50 | p99 | max | "
        "operator peak RSS | operator CPU per service | machine load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mode = f"{r['rate']:.0f}/s" if r["rate"] else "burst"
        lines.append(
            f"| {r['n']:,} | {mode} | "
            f"{r['rendered']:,} | {r['create_seconds']:.1f} s | "
            f"{r['wall_seconds']:.1f} s | {r['p50']:.2f} s | {r['p99']:.2f} s | "
            f"{r['max']:.2f} s | {r['operator_peak_rss_mib']:.0f} MiB | "
            f"{1000 * r['operator_cpu_seconds'] / max(1, r['rendered']):.1f} ms | "
            f"{r['load_average']:.1f} |")
    return "\n".join(lines)


def write_results(rows: list[dict[str, Any]], notes: str) -> None:
    """Replace the scale section of benchmarks/RESULTS.md (other sections untouched)."""
    section = (
        f"{BEGIN}\n## Scale: create to Deployment\n\n"
        "N LLMServices created against the **emulated** API server (kmock with the "
        "project's fixes, in memory; not a cluster), with the operator (`llm-operator run`),"
        " the emulator and the client each in their own process on this 2-core machine, "
        "which other jobs shared (the load column). `burst`: all N sent back to back from 8 "
        "client threads (a `kubectl apply` of a folder, a GitOps sync); `50/s`: a steady "
        "rate. Latency: from the client sending the create to the watch delivering the "
        "rendered Deployment. Regenerate: `.venv/bin/python -m benchmarks.scale --n 100 "
        "--n 1000 --rate 0 --rate 50 --write`.\n\n"
        f"{table(rows)}\n\n{notes}\n{END}")
    replace_section("scale", section)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="services (repeatable)")
    parser.add_argument("--rate", type=float, action="append",
                        help="creates per second (repeatable; 0 = one burst, the default)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    parser.add_argument("--notes", default="", help="text under the table")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmop-scale-") as tmp:
        for rate in args.rate or [0.0]:
            for n in args.n or [100, 1000]:
                row = run_once(n, Path(tmp), args.timeout, rate or None)
                rows.append(row)
                print(json.dumps(row), flush=True)  # noqa: T201  # noqa: T201
    print(table(rows))  # noqa: T201
    if args.write:
        write_results(rows, args.notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Scale: N LLMServices created at once, time from create to rendered Deployment.

Runs against the EMULATED API server (``python -m llm_operator_sandbox.emulator``, its
own process), with the operator as its own process (``llm-operator run``) and this
script as the client, all on this machine (2 cores shared by the three processes, and
by whatever else runs). Not a cluster result: a real API server adds etcd writes, a
real cluster adds admission, but no controllers compete here either.

For each service: latency = (the watch delivers the Deployment's ADDED event) minus
(the moment the client sent the create). All N are sent back to back (a burst, like a
``kubectl apply -f`` of a folder of N manifests or a GitOps sync), from 8 client
threads. The operator's peak RSS is its ``VmHWM`` from /proc.

    .venv/bin/python -m benchmarks.scale --n 1000 --repeat 2 --store --write

Every run's figures are stored as one JSON file in ``benchmarks/data/scale/`` (``--store``),
with the machine's load average before and after, the operator's and the emulator's CPU
seconds (from /proc) and the code that ran; ``--write`` regenerates the RESULTS.md section
from all stored runs (``--write`` alone: without measuring). ``--config LABEL=DIR`` runs the
operator from another checkout (``DIR/operator``; e.g. the code before a change, from
``git archive``), repeatable: configurations run interleaved, in rotating order, the same
number of times (``--repeat``). ``--shards K`` spreads the services over K namespaces, each
watched by its own operator process (sharding by namespace).
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
from llm_operator_sandbox.processes import stop as stop_process

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "crds" / "llmservices.llmops.dev.yaml"
DATA = ROOT / "benchmarks" / "data" / "scale"
NOTES = DATA / "NOTES.md"
NAMESPACE = "bench"
BEGIN, END = markers("scale")
GOAL_N, GOAL_P99 = 1000, 2.0  # issue 16.3: p99 <= 2 s for a burst of 1,000


def namespace_of(i: int, shards: int) -> str:
    """The namespace of service ``i`` (round robin over the shards' namespaces)."""
    return NAMESPACE if shards <= 1 else f"{NAMESPACE}-{i % shards}"


def service(i: int, shards: int = 1) -> dict[str, Any]:
    """One small valid LLMService (Llama 3.1 8B on L4, everything else planned)."""
    return {
        "apiVersion": "llmops.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": f"svc-{i:04d}", "namespace": namespace_of(i, shards)},
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


def code_version(tree: Path) -> str:
    """The last commit that changed a checkout's ``operator/`` (with ``+changes`` when its
    ``operator/`` differs from it), or the directory's name when it is no git checkout (a
    ``git archive`` copy). Commits of docs or benchmarks alone do not change it, so runs of
    the same operator code carry the same label."""
    try:
        head = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h", "--",
                               "operator"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "-uno",
                                "--", "operator"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return tree.name
    return head + ("+changes" if dirty else "")


def run_once(n: int, workdir: Path, timeout: float, rate: float | None = None,
             operator_tree: Path = ROOT, shards: int = 1,
             emulator_tree: Path = ROOT) -> dict[str, Any]:
    """One measurement with a fresh emulator and operator(s): a burst (``rate`` None) or
    ``rate`` creates per second; the operator's code from ``operator_tree`` (the emulator
    and this client from this checkout, the emulator from ``emulator_tree``); ``shards``
    operator processes, each watching its own namespace."""
    tag = f"{n}-{rate or 'burst'}-{time.monotonic_ns()}"
    kubeconfig = workdir / f"kubeconfig-{tag}.yaml"
    namespaces = sorted({namespace_of(i, shards) for i in range(max(shards, 1))})
    emu_profile = ["-m", "cProfile", "-o", os.environ["LLMOP_SCALE_PROFILE_EMULATOR"]] if (
        os.environ.get("LLMOP_SCALE_PROFILE_EMULATOR")) else []
    emu = subprocess.Popen(
        [sys.executable, *emu_profile, "-m", "llm_operator_sandbox.emulator", "--kubeconfig",
         str(kubeconfig), *[a for ns in namespaces for a in ("--namespace", ns)], "-f", str(CRD)],
        env={**os.environ, "PYTHONPATH": str(emulator_tree / "operator")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not kubeconfig.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    url = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    log_paths = [workdir / f"operator-{tag}-{ns}.log" for ns in namespaces]
    logs = [path.open("wb") for path in log_paths]
    ops = []
    for k, (ns, log) in enumerate(zip(namespaces, logs, strict=True)):
        out = os.environ.get("LLMOP_SCALE_PROFILE")
        profile = ["-m", "cProfile", "-o", out + (f".{k}" if k else "")] if out else []
        ops.append(subprocess.Popen(
            [sys.executable, *profile, "-m", "llm_operator.cli", "run", "--standalone", "-n", ns],
            env={**os.environ, "KUBECONFIG": str(kubeconfig), "LLMOP_HEALTH_PORT": "0",
                 "PYTHONPATH": str(operator_tree / "operator")},
            stdout=log, stderr=subprocess.STDOUT))
    arrived: dict[str, float] = {}
    done = threading.Event()

    def watch() -> None:
        path = f"{url}/apis/apps/v1/deployments"  # every namespace
        with requests.get(path, params={"watch": "true"}, stream=True, timeout=timeout) as r:
            for line in r.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                if event["type"] == "ADDED":
                    arrived.setdefault(event["object"]["metadata"]["name"], time.time())
                    if len(arrived) >= n + len(namespaces):  # and the warm-up services
                        done.set()
                        return

    try:
        deadline = time.monotonic() + 60
        for op, log_path in zip(ops, log_paths, strict=True):
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
        def create_url(namespace: str) -> str:
            return f"{url}/apis/llmops.dev/v1alpha1/namespaces/{namespace}/llmservices"

        # Warm-up: one service per operator rendered end to end, so the measurement starts
        # with kopf's watch streams open (a start-up delay is not a per-service latency).
        warmups = []
        for ns in namespaces:
            warmup = service(0)
            warmup["metadata"].update(name=f"warmup-{ns}", namespace=ns)
            warmups.append(warmup["metadata"]["name"])
            session.post(create_url(ns), json=warmup, timeout=30).raise_for_status()
        deadline = time.monotonic() + 60
        while not set(warmups) <= set(arrived) and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu_before = [cpu_seconds(op.pid) for op in ops]
        emu_cpu_before = cpu_seconds(emu.pid)

        def create(i: int) -> None:
            body = service(i, shards)
            if rate:
                time.sleep(max(0.0, start + i / rate - time.time()))
            sent[body["metadata"]["name"]] = time.time()
            resp = session.post(create_url(body["metadata"]["namespace"]), json=body,
                                timeout=30)
            resp.raise_for_status()

        # LLMOP_SCALE_TRACE=FILE: each service's send and arrival times, and the
        # processes' CPU seconds every 0.25 s, as JSON (for a look at one run, not stored).
        trace_path = os.environ.get("LLMOP_SCALE_TRACE")
        samples: list[tuple[float, list[float], float]] = []

        def sample() -> None:
            while not done.is_set():
                samples.append((time.time(), [cpu_seconds(op.pid) for op in ops],
                                cpu_seconds(emu.pid)))
                time.sleep(0.25)

        if trace_path:
            threading.Thread(target=sample, daemon=True).start()
        load_before = os.getloadavg()
        start = time.time()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(n)))
        sent_all = time.time()
        done.wait(timeout)
        finished = time.time()
        if trace_path:
            Path(trace_path).write_text(json.dumps(
                {"start": start, "sent": sent, "arrived": arrived, "cpu": samples}))
        load_after = os.getloadavg()
        latencies = [arrived[k] - sent[k] for k in list(sent) if k in arrived]
        op_cpu = sum(cpu_seconds(op.pid) - before
                     for op, before in zip(ops, cpu_before, strict=True))
        emu_cpu = cpu_seconds(emu.pid) - emu_cpu_before
        # The work that follows the Deployment (status writes, Events, the tuning Job)
        # goes on after the last one arrived: the whole cost of the creations is counted
        # when kopf has logged every service's creation as processed. (Not "until the
        # processes go quiet": the tuning-progress loop checks every in-flight tuning run
        # every 20 s, and no tuning Job ever finishes on the emulated API server.)
        handled_deadline = time.monotonic() + 300
        while sum(p.read_bytes().count(b"Creation is processed") for p in log_paths) < (
                n + len(namespaces)) and time.monotonic() < handled_deadline:
            time.sleep(0.2)
        handled = time.time()
        op_cpu_total = sum(cpu_seconds(op.pid) - before
                           for op, before in zip(ops, cpu_before, strict=True))
        emu_cpu_total = cpu_seconds(emu.pid) - emu_cpu_before
        rss = max(peak_rss_mib(op.pid) for op in ops)
        emu_rss = peak_rss_mib(emu.pid)
        return {
            "n": n,
            "rate": rate,
            "shards": shards,
            "operator_code": code_version(operator_tree),
            "emulator_code": code_version(emulator_tree),
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
            "operator_cpu_seconds_until_handled": op_cpu_total,
            "emulator_cpu_seconds_until_handled": emu_cpu_total,
            "handled_after_seconds": handled - start,
            "load_average": max(load_before[0], load_after[0]),
            "load_average_before": list(load_before),
            "load_average_after": list(load_after),
            "emulator_cpu_seconds": emu_cpu,
            "machine_cpus": os.cpu_count(),
        }
    finally:
        for proc in (*ops, emu):
            stop_process(proc, 20)
        for log in logs:
            log.close()


def mode_of(r: dict[str, Any]) -> str:
    """``burst`` or the steady rate (``50/s``)."""
    return f"{r['rate']:.0f}/s" if r["rate"] else "burst"


def cpu_ms(r: dict[str, Any], key: str = "operator_cpu_seconds") -> float:
    """CPU milliseconds per rendered service."""
    return 1000 * float(r.get(key) or 0.0) / max(1, int(r["rendered"]))


def cpu_cell(r: dict[str, Any], process: str) -> str:
    """CPU per service until the last Deployment, and until kopf had processed every
    creation (all the work of the burst; stored by runs from 2026-11-23 19:50 on)."""
    full = r.get(f"{process}_cpu_seconds_until_handled")
    until = f"{cpu_ms(r, f'{process}_cpu_seconds'):.1f}"
    return until + (f" / {cpu_ms(r, f'{process}_cpu_seconds_until_handled'):.1f}"
                    if full is not None else " / -") + " ms"


def goal_met(r: dict[str, Any]) -> bool:
    """Whether one run meets the goal: every service rendered, p99 <= 2 s."""
    return bool(r["rendered"] == r["n"] and r["p99"] <= GOAL_P99)


def table(rows: list[dict[str, Any]]) -> str:
    """Every run as one line of a Markdown table."""
    lines = [
        "| run (UTC) | configuration | operator code | shards | N | creates | rendered | "
        "creates sent in | all rendered after | p50 | p99 | max | operator peak RSS | "
        "operator CPU per service: to last Deployment / until handled | emulator CPU per "
        "service: the same | load (1 min) before/after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        before, after = (r.get("load_average_before") or [r["load_average"]])[0], (
            r.get("load_average_after") or [r["load_average"]])[0]
        lines.append(
            f"| {r.get('started', '')} | {r.get('config', '')} | {r.get('operator_code', '')} | "
            f"{r.get('shards', 1)} | {r['n']:,} | {mode_of(r)} | "
            f"{r['rendered']:,} | {r['create_seconds']:.1f} s | "
            f"{r['wall_seconds']:.1f} s | {r['p50']:.2f} s | {r['p99']:.2f} s | "
            f"{r['max']:.2f} s | {r['operator_peak_rss_mib']:.0f} MiB | "
            f"{cpu_cell(r, 'operator')} | {cpu_cell(r, 'emulator')} | "
            f"{before:.1f} / {after:.1f} |")
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    """Per configuration, N and mode: the runs' spread (min-max) and the goal per run."""
    groups: dict[tuple[str, int, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        key = (str(r.get("config", "")), int(r.get("shards", 1)), int(r["n"]), mode_of(r))
        groups.setdefault(key, []).append(r)
    lines = [
        "| configuration | shards | N | creates | runs | p99 (min-max) | p50 (min-max) | "
        "operator CPU per service (min-max): to last Deployment / until handled | "
        "emulator CPU per service: the same | "
        "load (min-max) | goal p99 <= 2 s met in |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def spread(values: list[float], fmt: str) -> str:
        return f"{min(values):{fmt}}-{max(values):{fmt}}"

    def cpu_spread(runs: list[dict[str, Any]], process: str) -> str:
        full = [cpu_ms(r, f"{process}_cpu_seconds_until_handled") for r in runs
                if r.get(f"{process}_cpu_seconds_until_handled") is not None]
        return (spread([cpu_ms(r, f"{process}_cpu_seconds") for r in runs], ".1f") + " / "
                + (spread(full, ".1f") + f" ({len(full)} runs)" if full else "-") + " ms")

    for (config, shards, n, mode), runs in sorted(groups.items()):
        goal = (f"{sum(goal_met(r) for r in runs)} of {len(runs)}"
                if n == GOAL_N and mode == "burst" else "(not the goal's case)")
        lines.append(
            f"| {config} | {shards} | {n:,} | {mode} | {len(runs)} | "
            f"{spread([r['p99'] for r in runs], '.2f')} s | "
            f"{spread([r['p50'] for r in runs], '.2f')} s | "
            f"{cpu_spread(runs, 'operator')} | {cpu_spread(runs, 'emulator')} | "
            f"{spread([r['load_average'] for r in runs], '.1f')} | {goal} |")
    return "\n".join(lines)


def goal_line(rows: list[dict[str, Any]]) -> str:
    """The goal, met or not, from the stored runs' own figures."""
    runs = [r for r in rows if r["n"] == GOAL_N and not r["rate"]]
    if not runs:
        return f"**Goal (p99 <= {GOAL_P99:.0f} s for a burst of {GOAL_N:,}): not measured.**"
    met = [r for r in runs if goal_met(r)]
    best = min(runs, key=lambda r: r["p99"])
    loads = [r["load_average"] for r in runs]
    return (f"**Goal (p99 <= {GOAL_P99:.0f} s for a burst of {GOAL_N:,}, emulated API "
            f"server): {'met' if met else 'not met'}** in {len(met)} of {len(runs)} stored "
            f"runs ({min(loads):.1f}-{max(loads):.1f} machine load, 1 min, on 2 cores). Best "
            f"p99: {best['p99']:.2f} s ({best['config']}, {best.get('shards', 1)} operator "
            f"process(es), load {best['load_average']:.1f}).")


def stored_runs(data: Path = DATA) -> list[dict[str, Any]]:
    """Every stored run, oldest first."""
    rows = [json.loads(p.read_text()) for p in sorted(data.glob("*.json"))]
    return sorted(rows, key=lambda r: str(r.get("started", "")))


def store(row: dict[str, Any], data: Path = DATA) -> Path:
    """Store one run's figures as ``benchmarks/data/scale/<start>-<config>-<N>-<mode>.json``."""
    data.mkdir(parents=True, exist_ok=True)
    mode = "burst" if not row["rate"] else f"{row['rate']:.0f}ps"
    stamp = str(row["started"]).replace(":", "").replace("-", "")
    path = data / f"{stamp}-{row['config']}-s{row.get('shards', 1)}-{row['n']}-{mode}.json"
    path.write_text(json.dumps(row, indent=1, sort_keys=True) + "\n")
    return path


def write_results(rows: list[dict[str, Any]]) -> None:
    """Replace the scale section of benchmarks/RESULTS.md (other sections untouched) with
    the stored runs ``rows``, their spread, and the notes of ``benchmarks/data/scale/NOTES.md``."""
    notes = NOTES.read_text().strip() if NOTES.exists() else ""
    section = (
        f"{BEGIN}\n## Scale: create to Deployment\n\n"
        "N LLMServices created against the **emulated** API server (kmock with the "
        "project's fixes, in memory; not a cluster), with the operator (`llm-operator run`),"
        " the emulator and the client each in their own process on this 2-core machine, "
        "which other jobs shared (the load columns: `os.getloadavg()` before and after the "
        "run). `burst`: all N sent back to back from 8 client threads (a `kubectl apply` of a "
        "folder, a GitOps sync); `50/s`: a steady rate. Latency: from the client sending the "
        "create to the watch delivering the rendered Deployment. CPU per service: the "
        "process's user + system CPU seconds from /proc over the measurement (after a "
        "warm-up service), divided by N: until the last Deployment arrived (what the "
        "latency competed with), and until kopf had processed every creation (the whole "
        "work of the burst: status writes, Events and tuning Jobs follow the Deployment). "
        "Every run is stored in `benchmarks/data/scale/`; "
        "this section is generated from all of them: `.venv/bin/python -m benchmarks.scale "
        "--write` (measure and store more with `--n 1000 --repeat 2 --store`, see "
        "`--help`).\n\n"
        f"{goal_line(rows)}\n\n### Spread per configuration\n\n{summary(rows)}\n\n"
        f"### Every run\n\n{table(rows)}\n\n{notes}\n{END}")
    replace_section("scale", section)


def parse_config(text: str) -> tuple[str, Path, Path | None, int | None]:
    """``LABEL=DIR`` (a checkout whose ``operator/`` is run), ``LABEL=DIR:EMULATOR_DIR``
    (the emulator from another checkout too) or ``LABEL`` (this one); ``#K`` at the end:
    K operator processes (shards) for this configuration."""
    text, _, shards = text.partition("#")
    label, _, trees = text.partition("=")
    tree, _, emu = trees.partition(":")
    return (label, Path(tree).resolve() if tree else ROOT,
            Path(emu).resolve() if emu else None, int(shards) if shards else None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="services (repeatable)")
    parser.add_argument("--rate", type=float, action="append",
                        help="creates per second (repeatable; 0 = one burst, the default)")
    parser.add_argument("--config", action="append", type=parse_config,
                        help="LABEL=DIR[:EMULATOR_DIR]: run the operator (and the emulator) "
                             "of checkout DIR (repeatable; default: this checkout, 'current')")
    parser.add_argument("--shards", type=int, action="append",
                        help="operator processes, one namespace each (repeatable; default 1)")
    parser.add_argument("--emulator", type=Path, default=ROOT,
                        help="run the emulator of this checkout (default: this one)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds (rotating order)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--store", action="store_true",
                        help="store each run's JSON in benchmarks/data/scale/")
    parser.add_argument("--write", action="store_true",
                        help="regenerate benchmarks/RESULTS.md from every stored run")
    args = parser.parse_args()
    configs = args.config or [("current", ROOT, None, None)]
    cases = [(label, tree, emu or args.emulator.resolve(), shards, rate, n)
             for label, tree, emu, own_shards in configs
             for shards in ([own_shards] if own_shards else args.shards or [1])
             for rate in args.rate or [0.0] for n in args.n or [1000]]
    measure = bool(args.n or args.rate or args.config or args.shards) or not args.write
    rows = []
    # LLMOP_SCALE_LOGS=DIR keeps the operators' logs there (else a temporary directory).
    with tempfile.TemporaryDirectory(prefix="llmop-scale-") as tmp_dir:
        tmp = os.environ.get("LLMOP_SCALE_LOGS") or tmp_dir
        for round_ in range(args.repeat if measure else 0):
            shift = round_ % len(cases)
            for label, tree, emu, shards, rate, n in cases[shift:] + cases[:shift]:
                started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                row = {"started": started, "config": label,
                       **run_once(n, Path(tmp), args.timeout, rate or None, tree, shards, emu)}
                rows.append(row)
                if args.store:
                    store(row)
                print(json.dumps(row), flush=True)  # noqa: T201
    if rows:
        print(table(rows))  # noqa: T201
    if args.write:
        write_results(stored_runs())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

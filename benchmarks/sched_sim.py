"""A step-level simulation of vLLM's scheduler in a closed loop, against the TTFT NVIDIA
measured (issue 34, section 1; a diagnostic with no goal). Not a unit test.

    .venv/bin/python -m benchmarks.sched_sim             # print the section
    .venv/bin/python -m benchmarks.sched_sim --record    # simulate every row and store it
    .venv/bin/python -m benchmarks.sched_sim --write     # replace the section in RESULTS.md

Everything is fixed in ``benchmarks/configs/sched_sim_1.yaml`` (committed before the
run): the rows (the dense rows of ``benchmarks/data/perfmodel_vs_silicon.json``), the
two arrival patterns, the requests per client. The simulator has no constant of its own:
each step's time is :func:`llm_operator.planning.perfmodel.step_time`. The performance model's
TTFT wait is a fitted power of the running requests; this shows where the measured TTFT
lies between clients that stay in step (every prompt of a wave at once) and clients
spread evenly over a cycle (no two prompts at once).
"""

from __future__ import annotations

import heapq
import json
import math
import statistics
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.perfmodel_vs_silicon import load_config, predict_at, settings_of
from benchmarks.results_md import markers, record_or_write
from llm_operator.planning.perfmodel import (
    EngineSettings,
    Hardware,
    ModelShape,
    Workload,
    step_time,
)

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "sched_sim_1.yaml"
DATA = ROOT / "benchmarks" / "data" / "sched_sim_1.json"
SECTION = "sched-sim-1"
PATTERNS = ("lockstep", "spread")


@dataclass
class _Request:
    client: int
    arrival: float
    left: int  # prompt tokens not yet prefilled
    prefilled: int = 0
    generated: int = 0
    first_token: float | None = None


@dataclass(frozen=True)
class SimResult:
    ttft_s: float  # mean over every request, plus half the request overhead
    tpot_s: float  # mean over every request
    requests: int
    seconds: float  # simulated time to the last completion


def simulate(model: ModelShape, hw: Hardware, tp: int, wl: Workload, engine: EngineSettings,
             first_arrivals: list[float], per_client: int, overhead_s: float) -> SimResult:
    """A closed loop of ``len(first_arrivals)`` clients, each sending ``per_client``
    requests of fixed lengths, the next one ``overhead_s`` after the previous completes.
    Each step, as vLLM V1 schedules with chunked prefill: every decoding request adds a
    token, partially prefilled requests continue, waiting requests are admitted first
    come, first served while fewer than ``max_num_seqs`` run, each prompt taking what is
    left of the ``max_num_batched_tokens`` budget; the step's time is ``step_time``. A
    prompt's first token comes at the end of the step that completes it. The KV cache
    is not simulated."""
    if per_client < 1 or not first_arrivals:
        raise ValueError("need at least one client and one request per client")
    i, o = wl.input_tokens, wl.output_tokens
    arrivals = [(a, n, c) for n, (c, a) in enumerate(enumerate(first_arrivals))]
    heapq.heapify(arrivals)
    sent = [1] * len(first_arrivals)
    order = len(arrivals)
    waiting: deque[_Request] = deque()
    running: list[_Request] = []
    ttfts: list[float] = []
    tpots: list[float] = []
    t = 0.0
    while arrivals or waiting or running:
        while arrivals and arrivals[0][0] <= t:
            a, _, c = heapq.heappop(arrivals)
            waiting.append(_Request(c, a, i))
        if not waiting and not running:
            t = arrivals[0][0]
            continue
        budget = engine.max_num_batched_tokens
        decoding = [r for r in running if r.first_token is not None][:budget]
        budget -= len(decoding)
        chunks: list[tuple[_Request, int]] = []
        for r in running:
            if r.first_token is None and budget > 0:
                chunks.append((r, min(r.left, budget)))
                budget -= chunks[-1][1]
        while waiting and budget > 0 and len(running) < engine.max_num_seqs:
            r = waiting.popleft()
            running.append(r)
            chunks.append((r, min(r.left, budget)))
            budget -= chunks[-1][1]
        context = (sum(i + r.generated for r in decoding) / len(decoding)) if decoding else 0.0
        prefix = (sum(r.prefilled for r, _ in chunks) / len(chunks)) if chunks else 0.0
        t += step_time(model, hw, tp, len(decoding), context, sum(k for _, k in chunks),
                       prefix, prefill_seqs=float(len(chunks)) if chunks else None).seconds
        done = []
        for r in decoding:
            r.generated += 1
            if r.generated >= o:
                done.append(r)
        for r, k in chunks:
            r.left -= k
            r.prefilled += k
            if r.left == 0:
                r.first_token, r.generated = t, 1
                if r.generated >= o:
                    done.append(r)
        for r in done:
            running.remove(r)
            assert r.first_token is not None
            ttfts.append(r.first_token - r.arrival + overhead_s / 2)
            if o > 1:
                tpots.append((t - r.first_token) / (o - 1))
            if sent[r.client] < per_client:
                sent[r.client] += 1
                heapq.heappush(arrivals, (t + overhead_s, order, r.client))
                order += 1
    return SimResult(ttft_s=statistics.fmean(ttfts),
                     tpot_s=statistics.fmean(tpots) if tpots else 0.0,
                     requests=len(ttfts), seconds=t)


def first_arrivals(pattern: str, clients: int, cycle_s: float, overhead_s: float) -> list[float]:
    """``lockstep``: every client at once (after half the request overhead); ``spread``:
    evenly over one cycle."""
    if pattern == "lockstep":
        return [overhead_s / 2] * clients
    if pattern == "spread":
        return [overhead_s / 2 + k * cycle_s / clients for k in range(clients)]
    raise ValueError(f"unknown arrival pattern {pattern!r}: lockstep or spread")


def place(measured: float, spread: float, lockstep: float) -> float | None:
    """Where ``measured`` lies between the two patterns' TTFT, on a log scale: 0 as spread,
    1 in lockstep; None where the two are within 5% of each other."""
    if lockstep <= spread * 1.05:
        return None
    return math.log(measured / spread) / math.log(lockstep / spread)


def record(config_path: Path = CONFIG, path: Path = DATA) -> dict[str, Any]:
    cfg = dict(yaml.safe_load(config_path.read_text()))
    rows = [r for r in json.loads((ROOT / cfg["rows"]).read_text())["rows"]
            if r["predicted"] is not None]
    out = []
    for st in settings_of(load_config(), rows):
        r, shape, hw, engine = st
        free = predict_at(st, prefill_queue_share=0.0)
        z = hw.efficiency.request_overhead_s
        row: dict[str, Any] = {k: r[k] for k in ("id", "group", "tp", "isl", "osl",
                                                 "concurrency", "fit")}
        row.update(measured=r["measured"], model=r["predicted"], limit=r["limit"],
                   modelNoWaitTtft=round(free.ttft_s * 1e3, 3))
        for pattern in cfg["patterns"]:
            res = simulate(shape, hw, r["tp"], Workload(r["isl"], r["osl"]), engine,
                           first_arrivals(pattern, r["concurrency"], free.e2e_s, z),
                           int(cfg["requestsPerClient"]), z)
            row[pattern] = {"ttft": round(res.ttft_s * 1e3, 3), "tpot": round(res.tpot_s * 1e3, 3)}
        p = place(r["measured"]["ttft"], row["spread"]["ttft"], row["lockstep"]["ttft"])
        row["place"] = None if p is None else round(p, 4)
        out.append(row)
    data = {"label": cfg["label"], "config": str(config_path.relative_to(ROOT)),
            "rowsFrom": cfg["rows"], "band": cfg["band"], "rows": out}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _quartiles(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) < 4:
        return f"{statistics.median(xs):.2f}"
    q1, q2, q3 = statistics.quantiles(xs, n=4)
    return f"{q2:.2f} ({q1:.2f}-{q3:.2f})"


def section(data: dict[str, Any]) -> str:
    band = data["band"]
    begin, end = markers(SECTION)
    rows = data["rows"]
    kv = [r for r in rows if r["limit"] != "clients"]
    lines = [begin, f"## A step-level simulation of vLLM's scheduler against the measured "
             f"TTFT ({data['label']})", "",
             "**Measured on GPUs by NVIDIA** (the rows of `aic-silicon`, above); the "
             "simulation is **estimated**: each step's time is the performance model's "
             "`step_time`, nothing fitted. A diagnostic with no goal, pre-registered in "
             f"`{data['config']}`: closed loops of fixed lengths, 3 requests per client, "
             "vLLM V1's scheduling with chunked prefill, no KV cache limit. Two arrival "
             "patterns: **lockstep** (every client starts at once and, with fixed lengths, "
             "stays in step) and **spread** (first requests evenly over one cycle). "
             "*Place* is where the measured TTFT lies between them on a log scale (0: as "
             "spread, 1: in lockstep). Regenerate: `.venv/bin/python -m benchmarks.sched_sim "
             "--record --write`.", "",
             "| rows | n | place, median (quartiles) | lockstep / measured TTFT, median | "
             "spread / model's queue-free TTFT, median | model / measured TTFT, median | "
             f"TPOT within +-{band * 100:.0f}%: lockstep, spread, model |",
             "|---|---|---|---|---|---|---|"]

    def line(name: str, g: list[dict[str, Any]]) -> str:
        med = statistics.median

        def within(get: Any) -> str:
            return f"{sum(abs(get(r) / r['measured']['tpot'] - 1) <= band for r in g) / len(g):.0%}"

        return (f"| {name} | {len(g)} | "
                f"{_quartiles([r['place'] for r in g if r['place'] is not None])} | "
                f"{med(r['lockstep']['ttft'] / r['measured']['ttft'] for r in g):.2f} | "
                f"{med(r['spread']['ttft'] / r['modelNoWaitTtft'] for r in g):.2f} | "
                f"{med(r['model']['ttft'] / r['measured']['ttft'] for r in g):.2f} | "
                f"{within(lambda r: r['lockstep']['tpot'])}, "
                f"{within(lambda r: r['spread']['tpot'])}, "
                f"{within(lambda r: r['model']['tpot'])} |")

    free = [r for r in rows if r["limit"] == "clients"]
    for name in dict.fromkeys(r["group"] for r in free):
        lines.append(line(name, [r for r in free if r["group"] == name]))
    lines.append(line("**every row the KV cache does not limit**", free))
    if kv:
        lines.append(line("rows the model finds limited by the KV cache (not simulated)", kv))
    lines += ["", "By clients (rows the KV cache does not limit):", "",
              "| clients | n | place, median (quartiles) |", "|---|---|---|"]
    for c in sorted({r["concurrency"] for r in free}):
        g = [r["place"] for r in free if r["concurrency"] == c and r["place"] is not None]
        lines.append(f"| {c} | {len(g)} | {_quartiles(g)} |")
    lines += ["", end]
    return "\n".join(lines) + "\n"


def render() -> str:
    return section(json.loads(DATA.read_text()))


def main(argv: list[str] | None = None) -> int:
    return record_or_write(__doc__ or "", SECTION, record, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())

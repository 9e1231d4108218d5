"""Were the failed requests of the adaptation runs the load generator's? (issue 12)

Runs adapt-live-1 and -2 saw ServerDisconnectedError in every arm, the static caps
included. This runs the committed ``step`` and ``burst`` traces of
``benchmarks/configs/adapt.yaml`` (their client counts change) at vLLM's default cap, one
server, no adaptation, with three ways of using connections: aiohttp's default keep-alive
(15 s, as those runs), idle connections closed after 2 s (before the server's 5 s), and a
new connection per request; arms rotated each repeat, ``--repeats`` times; every failed
request's time, age, last streamed line and message are stored::

    .venv/bin/python -m benchmarks.client_keepalive --out benchmarks/data/client_keepalive.json
    .venv/bin/python -m benchmarks.client_keepalive --write-results
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from tests.support.engine import copy_engine_code
from tests.support.tiny_model import ensure_tiny_llama

from benchmarks.adapt_live import (
    CONFIG,
    VLLM_PY,
    Engine,
    Req,
    Trace,
    run_load,
    score,
)
from benchmarks.results_md import markers, replace_section
from llm_operator.inpod.tuner.server import free_port, vllm_lock

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "data" / "client_keepalive.json"
SECTION = "client-keepalive"
ARMS: dict[str, float | None] = {"aiohttp default (15 s)": None, "2 s": 2.0,
                                 "a new connection per request": 0}


def _access_log_text(doc: dict[str, Any]) -> str:
    log = doc.get("serverAccessLog")
    if not log:
        return ""
    return (f"(vLLM's access log has {log['responses']:,} responses for the "
            f"{log['requestsSent']:,} requests sent: the server never began a response for "
            "the failed ones). ")


def plan(repeats: int) -> list[tuple[int, str, str]]:
    """(repeat, trace, arm) in run order: every arm on both traces once per repeat, the
    arm order rotated by one each repeat."""
    arms = list(ARMS)
    out = []
    for rep in range(repeats):
        k = rep % len(arms)
        out += [(rep, trace, arm) for trace in ("step", "burst") for arm in arms[k:] + arms[:k]]
    return out


def measure_once(eng: Engine, cfg: dict[str, Any], model: str, rep: int, trace_name: str,
                 arm: str) -> dict[str, Any]:
    """One trace at the server's fixed cap, the clients using connections as ``arm``
    says; what failed, when and how."""
    eng.idle()
    trace = Trace(cfg["traces"][trace_name]["phases"])
    reqs: list[Req] = []
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    asyncio.run(run_load(eng.url, model, trace, cfg["load"]["retrySeconds"], rep, t0, reqs,
                         keepalive_s=ARMS[arm]))
    m = score(reqs, cfg["slo"], trace, time.monotonic() - t0, t0)
    return {"repeat": rep, "trace": trace_name, "arm": arm, "loadavgBefore": round(load, 2),
            "requests": m["requests"], "failed": m["failed"], "errors": m["errors"],
            "errorsAt": m["errorsAt"], "goodputTokS": m["goodputTokS"]}


def render_markdown(doc: dict[str, Any]) -> str:
    """RESULTS.md's section: failed requests per keep-alive, by kind and when."""
    begin, end = markers(SECTION)
    runs = doc["runs"]
    loads = [r["loadavgBefore"] for r in runs]
    lines = [begin, "## The load generator's connections: why requests failed in every "
             "adaptation arm", "",
             f"Run started {doc['started']}: the `step` and `burst` traces of "
             f"`{doc['config']}` at vLLM's default cap {doc['cap']}, one vLLM CPU server, no "
             "adaptation, the clients' connections reused with aiohttp's default "
             "keep-alive, closed after 2 s idle, or new for every request; rotated. "
             "Stored: `benchmarks/data/client_keepalive.json`; "
             "`python -m benchmarks.client_keepalive --write-results`. Machine load "
             f"(1 min) {min(loads, default=0):.1f}-{max(loads, default=0):.1f} on 2 cores.",
             "", "| clients' connections | runs | requests | failed | by kind | of them "
             "with no streamed byte | seconds from send to failure (min-max) |",
             "|---|---:|---:|---:|---|---:|---|"]
    for arm in dict.fromkeys(r["arm"] for r in runs):
        rs = [r for r in runs if r["arm"] == arm]
        kinds: dict[str, int] = {}
        for r in rs:
            for k, v in r["errors"].items():
                if k != "cut":
                    kinds[k] = kinds.get(k, 0) + v
        errs = [e for r in rs for e in r["errorsAt"]]
        ages = [e[3] for e in errs if len(e) > 3]
        silent = sum(1 for e in errs if len(e) > 4 and e[4] is None)
        lines.append(f"| {arm} | {len(rs)} | {sum(r['requests'] for r in rs)} | "
                     f"{sum(r['failed'] for r in rs)} | "
                     f"{', '.join(f'{k} {v}' for k, v in kinds.items()) or 'none'} | "
                     f"{silent} | "
                     + (f"{min(ages):.1f}-{max(ages):.1f}" if ages else "-") + " |")
    per_run = "; ".join(f"{r['trace']} {r['arm']} {r['failed']}" for r in runs)
    fresh = [r for r in runs if r["arm"] == "a new connection per request"]
    reused = [r for r in runs if r["arm"] != "a new connection per request"]
    lines += ["", f"Failed per run, in run order: {per_run}."]
    fresh_failed = sum(r["failed"] for r in fresh)
    if fresh and reused and fresh_failed == 0 and sum(r["failed"] for r in reused) > 0:
        lines += ["", f"Reading: with the cap fixed, {sum(r['failed'] for r in reused)} of "
                  f"{sum(r['requests'] for r in reused)} requests on reused connections "
                  f"failed and {fresh_failed} of "
                  f"{sum(r['requests'] for r in fresh)} on new ones: the failures of the "
                  "adaptation runs adapt-live-1 and -2 (in every arm) came from reusing "
                  "connections to vLLM's server on this loaded machine, not from a cap "
                  + _access_log_text(doc) + "From run adapt-live-3 on the "
                  "adaptation benchmark opens a new connection per request."]
    return "\n".join([*lines, end]) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--write-results", action="store_true",
                   help="only render the stored JSON into its results section")
    p.add_argument("--results", type=Path, default=None,
                   help="the file to write (default: where the section lives)")
    a = p.parse_args(argv)
    if a.write_results:
        replace_section(SECTION, render_markdown(json.loads(a.out.read_text())), a.results)
        return 0
    cfg = yaml.safe_load(CONFIG.read_text())
    cap = cfg["engine"]["defaultMaxNumSeqs"]
    logdir = Path("/tmp/llmop-keepalive")
    logdir.mkdir(exist_ok=True)
    model = ensure_tiny_llama(Path("/tmp/llmop-models"), VLLM_PY)
    eng = Engine(model, cfg, free_port(), copy_engine_code(logdir / f"code-{os.getpid()}"),
                 logdir / "admission-cap", logdir)
    doc: dict[str, Any] = {"config": str(CONFIG.relative_to(ROOT)), "cap": cap,
                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "runs": []}
    with vllm_lock():
        try:
            eng.start(cap)
            for rep, trace_name, arm in plan(a.repeats):
                run = measure_once(eng, cfg, str(model), rep, trace_name, arm)
                doc["runs"].append(run)
                sys.stderr.write(json.dumps({key: run[key] for key in (
                    "repeat", "trace", "arm", "requests", "failed", "loadavgBefore")}) + "\n")
                a.out.write_text(json.dumps(doc, indent=1) + "\n")
        finally:
            eng.stop()
    # The server's access log: one line per response begun (a request it never read has
    # none).
    log = logdir / f"server-{eng.starts:03d}.log"
    if log.exists():
        doc["serverAccessLog"] = {
            "responses": log.read_text(errors="replace").count(
                '"POST /v1/completions HTTP/1.1" 200'),
            "requestsSent": sum(r["requests"] for r in doc["runs"])}
        a.out.write_text(json.dumps(doc, indent=1) + "\n")
    replace_section(SECTION, render_markdown(doc), a.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

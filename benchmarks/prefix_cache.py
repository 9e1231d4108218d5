"""vLLM's prefix cache on the real CPU engine with the tuner's own load: the hit rate and
TTFT of a workload whose prompts share a prefix, of the same workload without one, and of
the shared one with the cache off (issue 37 item 2). Not a unit test.

Fixed in ``benchmarks/configs/prefix_cache.yaml`` before the run.

    .venv/bin/python -m benchmarks.prefix_cache --out benchmarks/data/prefix_cache_1.json
    .venv/bin/python -m benchmarks.prefix_cache --write      # the RESULTS.md section
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks import cpu_engine_run
from benchmarks.cpu_engine_run import VLLM_PY, say, start, vllm_env
from benchmarks.results_md import markers

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "benchmarks" / "configs" / "prefix_cache.yaml"
OUT = ROOT / "benchmarks" / "data" / "prefix_cache_1.json"
WORK = Path("/tmp/llmop-prefix-cache")
SECTION = "prefix-cache"

_PHASE = r"""
import json, os, sys, time
from dataclasses import asdict, replace
from pathlib import Path
from llm_operator.inpod.tuner.bench import BenchTarget
from llm_operator.inpod.tuner.runner import ServerEvaluator
from llm_operator.inpod.tuner.search import SLO, Config
from llm_operator.inpod.tuner.server import engine_metrics
spec = json.loads(sys.argv[1])
w = spec["workload"]
slo = SLO(ttft_ms=spec["slo"]["ttftMs"], itl_ms=spec["slo"]["itlMs"])
base = BenchTarget("", spec["model"], spec["model"], w["inputTokens"], w["outputTokens"], slo,
                   waves=spec["waves"], min_prompts=spec["minPrompts"])
ev = ServerEvaluator(spec["model"], base, spec["serverArgs"], python=sys.executable,
                     log_dir=Path(spec["logDir"]))
s = ev.start(Config())
HITS, QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
try:
    for r in range(spec["rounds"]):
        arms = spec["arms"] if r % 2 == 0 else spec["arms"][::-1]
        for arm in arms:
            shared = w["sharedPrefixTokens"] if arm == "shared" else 0
            s.target = replace(s.target, shared_prefix_tokens=shared)
            before = engine_metrics(s.server.url)
            load0 = os.getloadavg()
            m = asdict(s.measure(w["concurrency"]))
            after = engine_metrics(s.server.url)
            m.pop("requests", None)
            q = after.get(QUERIES, 0.0) - before.get(QUERIES, 0.0)
            h = after.get(HITS, 0.0) - before.get(HITS, 0.0)
            out = {"phase": spec["phase"], "round": r, "arm": arm, "queries": q, "hits": h,
                   "hitRate": (h / q) if q else None, "loadavgBefore": list(load0),
                   "startup_s": s.startup_s, **m}
            sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush()
finally:
    s.close()
"""



def server_args(cfg: dict[str, Any], caching: bool) -> list[str]:
    e = cfg["engine"]
    return ["--kv-cache-memory-bytes", str(e["kvCacheBytes"]),
            "--max-model-len", str(e["maxModelLen"]), "--max-num-seqs", str(e["maxNumSeqs"]),
            *([] if caching else ["--no-enable-prefix-caching"])]


def phase(cfg: dict[str, Any], model: Path, name: str, caching: bool, arms: list[str],
          doc: dict[str, Any], out: Path) -> None:
    spec = {"workload": cfg["workload"], "slo": cfg["slo"], "model": str(model),
            "waves": cfg["waves"], "minPrompts": cfg["minPrompts"],
            "serverArgs": server_args(cfg, caching), "logDir": str(WORK / name),
            "rounds": cfg["rounds"], "arms": arms, "phase": name}
    env = vllm_env()
    with open(WORK / f"{name}.log", "w") as log:
        proc = subprocess.Popen([str(VLLM_PY), "-c", _PHASE, json.dumps(spec)], env=env,
                                stdout=subprocess.PIPE, stderr=log, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            m = json.loads(line)
            doc["runs"].append(m)
            rate = "-" if m["hitRate"] is None else f"{m['hitRate']:.0%}"
            say(f"  {name} round {m['round']} {m['arm']}: hits {rate}, TTFT p95 "
                 f"{m['ttft_p95_ms']:.0f} ms, goodput {m['goodput_tps']:.0f} tok/s")
            out.write_text(json.dumps(doc, indent=1) + "\n")
        if proc.wait() != 0:
            raise RuntimeError(f"phase {name} failed ({proc.returncode}); see {WORK}")


def run(config: Path, out: Path) -> None:
    cfg = yaml.safe_load(config.read_text())
    model, doc = start(cfg, config, WORK, runs=[])
    t0 = time.monotonic()
    say("phase 1: prefix caching on")
    phase(cfg, model, "caching-on", True, ["shared", "unshared"], doc, out)
    say("phase 2: prefix caching off")
    phase(cfg, model, "caching-off", False, ["shared"], doc, out)
    doc["wallSeconds"] = round(time.monotonic() - t0)
    doc["partial"] = False
    out.write_text(json.dumps(doc, indent=1) + "\n")


def summary(doc: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for ph, arm in (("caching-on", "shared"), ("caching-on", "unshared"),
                    ("caching-off", "shared")):
        runs = [m for m in doc["runs"] if m["phase"] == ph and m["arm"] == arm]
        if not runs:
            continue
        rates = [m["hitRate"] for m in runs if m["hitRate"] is not None]
        rows.append({"phase": ph, "arm": arm, "runs": len(runs),
                     "hitRates": rates,
                     "ttftP95": statistics.median(m["ttft_p95_ms"] for m in runs),
                     "goodput": statistics.median(m["goodput_tps"] for m in runs)})
    return rows


def render(doc: dict[str, Any]) -> str:
    cfg = doc["config"]
    w = cfg["workload"]
    begin, end = markers(SECTION)
    lines = [begin, f"## Prefix caching on the CPU engine with the tuner's load ({cfg['label']})",
             "", f"**Measured on the vLLM CPU engine** ({doc['engine']}, {doc['cpus']} CPUs, "
             f"{doc['started']}), config `{doc['configFile']}`, committed before the run. "
             f"{w['inputTokens']} in / {w['outputTokens']} out at {w['concurrency']} "
             "clients; the shared arm's prompts open with one random "
             f"{w['sharedPrefixTokens']}-token prefix per run (`vllm bench serve "
             "--random-prefix-len`, what the tuning Job sends when "
             "`spec.workload.sharedPrefixTokens` is set), the unshared arm's are random "
             "throughout. Hit rate: the run's change of `vllm:prefix_cache_hits_total` over "
             "`vllm:prefix_cache_queries_total` (what the adaptation reads from Prometheus "
             f"as a rate). {cfg['rounds']} runs per arm; the cache-off phase ran on its own "
             "server after the cache-on phase (not interleaved).", "",
             "| server | prompts | runs | hit rate per run | TTFT p95 ms (median) | "
             "goodput tok/s (median) |", "|---|---|---|---|---|---|"]
    for r in summary(doc):
        rates = ", ".join(f"{x:.0%}" for x in r["hitRates"]) or "-"
        lines.append(f"| prefix caching {'on' if r['phase'] == 'caching-on' else 'off'} | "
                     f"{r['arm']} | {r['runs']} | {rates} | {r['ttftP95']:.0f} | "
                     f"{r['goodput']:.0f} |")
    shared = next((r for r in summary(doc) if (r["phase"], r["arm"]) ==
                   ("caching-on", "shared")), None)
    goal = cfg["goals"]["sharedHitRateAbove"]
    if shared and shared["hitRates"]:
        met = min(shared["hitRates"]) > goal
        lines += ["", "| goal | figure | met |", "|---|---|---|",
                  f"| the shared arm's hit rate above {goal:.0%} in every run | lowest "
                  f"{min(shared['hitRates']):.0%} of {len(shared['hitRates'])} runs | "
                  f"{'met' if met else 'not met'} |"]
    if doc.get("partial"):
        lines += ["", "**Partial run** (stopped before the end)."]
    lines.append(end)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return cpu_engine_run.main(argv, __doc__.split("\n")[0], CONFIG, OUT, SECTION, run, render)


if __name__ == "__main__":
    sys.exit(main())

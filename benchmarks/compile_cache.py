"""vLLM's compile cache on the real CPU engine: a server's start with an empty
``VLLM_CACHE_ROOT`` and with one an earlier start of the same configuration filled (what
a container the kubelet restarts in the same pod finds, now that the operator puts the
cache on the model cache volume). Not a unit test.

Fixed in ``benchmarks/configs/compile_cache.yaml`` before the run.

    .venv/bin/python -m benchmarks.compile_cache --out benchmarks/data/compile_cache_1.json
    .venv/bin/python -m benchmarks.compile_cache --write      # the section
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks import cpu_engine_run
from benchmarks.cpu_engine_run import VLLM_PY, say, start
from benchmarks.results_md import markers

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "benchmarks" / "configs" / "compile_cache.yaml"
OUT = ROOT / "benchmarks" / "data" / "compile_cache_1.json"
WORK = Path("/tmp/llmop-compile-cache")
SECTION = "compile-cache"
SAVED = "saved AOT compiled function to"
LOADED = "Directly load AOT compilation from path"
FAILED = re.compile(r"Compiling model again due to a load failure from \S+, reason: (.*)")
INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s")


def log_facts(text: str) -> dict[str, Any]:
    """What vLLM's log says of its compile cache: the compiled model saved, loaded, or a
    load that failed (and why: vLLM then compiles again, Inductor's kernels from the
    cache where they are there), and its own time to init the engine."""
    init = INIT.search(text)
    failed = FAILED.search(text)
    return {"initEngine_s": float(init.group(1)) if init else None,
            "saved": SAVED in text, "loaded": LOADED in text,
            "loadFailure": failed.group(1).strip() if failed else None}


def order(repeats: int) -> list[str]:
    """The arms in the order they run: empty first (it fills the shared directory), then
    alternating."""
    return [arm for _ in range(repeats) for arm in ("empty", "filled")]


def run(config: Path, out: Path) -> None:
    sys.path.insert(0, str(ROOT / "operator"))
    from llm_operator.inpod.tuner.server import VLLMServer

    cfg = yaml.safe_load(config.read_text())
    model, doc = start(cfg, config, WORK, runs=[])
    e = cfg["engine"]
    filled = WORK / "cache-filled"
    t0 = time.monotonic()
    for i, arm in enumerate(order(cfg["repeats"])):
        root = filled if i == 0 or arm == "filled" else WORK / f"cache-empty-{i}"
        if arm == "empty":
            assert not root.exists(), root
        log = WORK / f"start-{i}-{arm}.log"
        server = VLLMServer(model=str(model), python=str(VLLM_PY), log_path=log,
                            flags=["--kv-cache-memory-bytes", str(e["kvCacheBytes"]),
                                   "--max-model-len", str(e["maxModelLen"])],
                            env={"VLLM_CACHE_ROOT": str(root)}, start_timeout_s=600)
        load0 = os.getloadavg()
        with server:
            startup = server.startup_s
        m = {"index": i, "arm": arm, "startup_s": round(startup, 2), "log": log.name,
             **log_facts(log.read_text(errors="replace")), "loadavgBefore": list(load0)}
        doc["runs"].append(m)
        say(f"  start {i} ({arm} cache): /health after {startup:.1f} s; vLLM's init engine "
            f"{m['initEngine_s']} s; saved {m['saved']}, loaded {m['loaded']}, load "
            f"failure {m['loadFailure']}")
        out.write_text(json.dumps(doc, indent=1) + "\n")
    doc["wallSeconds"] = round(time.monotonic() - t0)
    doc["partial"] = False
    out.write_text(json.dumps(doc, indent=1) + "\n")


def summary(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = {}
    for arm in ("empty", "filled"):
        runs = [m for m in doc["runs"] if m["arm"] == arm]
        if runs:
            starts = [m["startup_s"] for m in runs]
            inits = [m["initEngine_s"] for m in runs if m["initEngine_s"] is not None]
            rows[arm] = {"runs": len(runs), "starts": starts,
                         "median": statistics.median(starts),
                         "initMedian": statistics.median(inits) if inits else None,
                         "saved": sum(m["saved"] for m in runs),
                         "loaded": sum(m["loaded"] for m in runs),
                         "failures": [m["loadFailure"] for m in runs if m.get("loadFailure")]}
    return rows


def pair_ratios(doc: dict[str, Any]) -> list[float]:
    """Each filled start's seconds over the empty start just before it (:func:`order`)."""
    runs = doc["runs"]
    return [b["startup_s"] / a["startup_s"] for a, b in zip(runs[::2], runs[1::2], strict=False)
            if (a["arm"], b["arm"]) == ("empty", "filled")]


def said(r: dict[str, Any]) -> str:
    """What vLLM's logs said of the cache, counted over an arm's starts."""
    n = r["runs"]
    parts = [f"saved the compiled model {r['saved']} of {n}"]
    if r["loaded"]:
        parts.append(f"loaded it {r['loaded']} of {n}")
    if r["failures"]:
        reasons = sorted(set(r["failures"]))
        parts.append(f"its load failed {len(r['failures'])} of {n} (\"{'; '.join(reasons)}\"), "
                     "then compiled again")
    return "; ".join(parts)


def render(doc: dict[str, Any]) -> str:
    cfg = doc["config"]
    begin, end = markers(SECTION)
    rows = summary(doc)
    lines = [begin, f"## vLLM's compile cache and a server's start ({cfg['label']})", "",
             f"**Measured on the vLLM CPU engine** ({doc['engine']}, {doc['cpus']} CPUs, "
             f"{doc['started']}), config `{doc['configFile']}`, committed before the run. "
             "Seconds from a server's start to `/health` answering 200, with "
             "`VLLM_CACHE_ROOT` an empty directory and with the directory the first start "
             "filled (the same model and flags), interleaved; what each start did with the "
             "cache as vLLM's own log says it. The operator sets `VLLM_CACHE_ROOT` on the "
             "model cache volume, so a container the kubelet restarts in the same pod "
             "starts with it filled. GPUs compile other kernels (and capture CUDA graphs, "
             "which are not cached): the seconds there differ, not measured here.", "",
             "| cache | starts | seconds to /health, each | median | vLLM's init engine, "
             "median s | vLLM's log |", "|---|---|---|---|---|---|"]
    for arm, r in rows.items():
        each = ", ".join(f"{s:.1f}" for s in r["starts"])
        init = "-" if r["initMedian"] is None else f"{r['initMedian']:.1f}"
        lines.append(f"| {arm} | {r['runs']} | {each} | {r['median']:.1f} | {init} | "
                     f"{said(r)} |")
    if rows.get("filled", {}).get("failures"):
        lines += ["", "The config expected a filled cache's start to load the compiled model. "
                  "On this CPU build that load fails and vLLM compiles again (its log, above); "
                  "what the filled directory still saves is the compile's own cache (Inductor's "
                  "C++ kernels, under `torch_compile_cache/.../inductor_cache`), which the "
                  "empty arm builds with the C++ compiler. A build whose load works would save "
                  "more; not measured here."]
    goal = cfg["goals"]["filledOverEmptyAtMost"]
    if "empty" in rows and "filled" in rows:
        ratio = rows["filled"]["median"] / rows["empty"]["median"]
        paired = pair_ratios(doc)
        spread = (f"; each interleaved pair {min(paired):.0%}-{max(paired):.0%}"
                  if paired else "")
        lines += ["", "| goal | figure | met |", "|---|---|---|",
                  f"| a filled cache's median start at most {goal:.0%} of an empty one's | "
                  f"{ratio:.0%} ({rows['filled']['median']:.1f} s against "
                  f"{rows['empty']['median']:.1f} s{spread}) | "
                  f"{'met' if ratio <= goal else 'not met'} |"]
    if doc.get("partial"):
        lines += ["", "**Partial run** (stopped before the end)."]
    lines.append(end)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return cpu_engine_run.main(argv, __doc__.split("\n")[0], CONFIG, OUT, SECTION, run, render)


if __name__ == "__main__":
    sys.exit(main())

"""Tuner against the exhaustive grid and vLLM's defaults, all measured in ONE run
(issue 16 section 1).

Everything is fixed in ``benchmarks/configs/tune.yaml`` before the run. Three steps, on
the real vLLM CPU engine (the larger generated Llama, a KV cache that holds 4 requests):

1. **tuner**: the operator's tuner (``python -m llm_operator.inpod.tuner``) as the tuning Job
   runs it, sweeping max-num-seqs live on one server (``--live-cap-engine``): its
   choice, wall time, busy time (server lifetimes) and server starts;
2. **rotation**: every cell the grid visits, the tuner's choice and vLLM's defaults,
   measured round-robin on one live-cap server (``rounds`` rounds, the order rotated by
   one each round, each configuration the same number of times), with the tuner's own
   measurement (``vllm.benchmarks.serve`` at the workload concurrency); the grid's best
   is picked from these measurements, and every comparison of goodput uses them;
3. **grid**: the tuner's ``--grid`` over the same space, also live, for its wall time,
   busy time and server starts (its own picks are recorded but not used for goodput).

``os.getloadavg()`` is recorded with every measurement; the JSON is rewritten after each
step and each measurement (``partial`` until the end). Run::

    .venv/bin/python -m benchmarks.tune_paired --out benchmarks/data/tune_paired.json
    .venv/bin/python -m benchmarks.tune_paired --write-results
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "benchmarks" / "configs" / "tune.yaml"
OUT = ROOT / "benchmarks" / "data" / "tune_paired.json"
VLLM_PY = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
WORK = Path("/tmp/llmop-tune-paired")
SECTION = "tuning"


def kv_bytes_per_token(model: dict[str, Any]) -> int:
    """bf16 K and V of every layer: 2 x layers x KV heads x head size x 2 bytes (6 KiB
    for the 39 M model of tune.yaml)."""
    return 2 * model["layers"] * model["kv_heads"] * (model["hidden"] // model["heads"]) * 2


def _say(text: str) -> None:
    sys.stderr.write(time.strftime("%H:%M:%S ") + text + "\n")
    sys.stderr.flush()


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False).stdout.strip()


def config_header(blob: str) -> str:
    """The opening comment of the config as committed (the git blob the run recorded):
    what the run was for, written before it. Empty when git cannot find the blob."""
    text = _git("cat-file", "-p", blob) if blob else ""
    head: list[str] = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        head.append(line.lstrip("#").strip())
    return " ".join(h for h in head if h)


def server_args(cfg: dict[str, Any]) -> str:
    e = cfg["engine"]
    kv_bytes = e["kvTokens"] * kv_bytes_per_token(cfg["model"])
    return " ".join([f"--kv-cache-memory-bytes {kv_bytes}",
                     f"--max-model-len {e['maxModelLen']}", *e.get("extraFlags", [])])


def tuner_argv(cfg: dict[str, Any], model: Path, code: Path, out: Path,
               grid: bool) -> list[str]:
    w, e, m = cfg["workload"], cfg["engine"], cfg["methods"]
    sp = cfg["space"]
    argv = [
        "--model", str(model), "--live-cap-engine", str(code),
        "--input-tokens", str(w["inputTokens"]), "--output-tokens", str(w["outputTokens"]),
        "--concurrency", str(w["concurrency"]), "--waves", str(w["waves"]),
        "--min-prompts", str(w["minPrompts"]),
        "--slo-ttft-ms", f"{cfg['slo']['ttftMs']:g}", "--slo-itl-ms", f"{cfg['slo']['itlMs']:g}",
        "--max-num-seqs-levels", ",".join(map(str, sp["maxNumSeqsLevels"])),
        "--max-num-batched-tokens-levels", ",".join(map(str, sp["maxNumBatchedTokensLevels"])),
        "--default-max-num-seqs", str(e["defaultMaxNumSeqs"]),
        "--default-max-num-batched-tokens", str(e["defaultMaxNumBatchedTokens"]),
        "--repeats", str(m["repeats"]), "--max-seconds", str(m["maxSeconds"]),
        "--max-trials", str(m["tunerMaxTrials"] if not grid else 100),
        f"--server-args={server_args(cfg)}",
        "--output", str(out), "--log-dir", str(out.with_suffix("")), "--progress", "log",
    ]  # fmt: skip
    return [*argv, "--grid"] if grid else argv


def run_method(cfg: dict[str, Any], model: Path, code: Path, name: str,
               grid: bool) -> dict[str, Any]:
    """One tuner (or grid) run as a child process under the vLLM interpreter."""
    out = WORK / f"{name}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator"), "HF_HUB_OFFLINE": "1",
           "LLMOP_TERMINATION_LOG": str(out.with_suffix(".msg"))}
    load0 = os.getloadavg()
    t0 = time.monotonic()
    proc = subprocess.run([str(VLLM_PY), "-m", "llm_operator.inpod.tuner",
                           *tuner_argv(cfg, model, code, out, grid)],
                          env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    out.with_suffix(".log").write_text(proc.stderr + "\n" + proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    data = json.loads(out.read_text())
    trials = data["trials"]
    best = data["result"].get("best") or {}
    settings = best.get("settings") or {}
    return {
        "choice": {"maxNumSeqs": settings.get("maxNumSeqs"),
                   "maxNumBatchedTokens": settings.get("maxNumBatchedTokens")},
        "choiceGoodputOwn": best.get("goodput"),
        # The tuner's own decision with its paired interval (tuners since issue 32).
        "decision": data["result"].get("decision"),
        "versusDefaults": data["result"].get("versusDefaults"),
        "state": data["result"]["state"],
        "trials": len(trials),
        "serverStarts": sum(1 for t in trials if t["startup_s"] > 0),
        "startupSeconds": round(sum(t["startup_s"] for t in trials), 1),
        "wallSeconds": round(data["result"]["wallSeconds"], 1),  # the search's clock
        "processWallSeconds": round(wall, 1),
        "busySeconds": round(sum(t["wall_s"] for t in trials), 1),
        "notes": data.get("notes", []),
        "table": [{"config": t["config"], "score": round(t["score"], 1),
                   "spread": round(t["spread"], 3), "startup_s": round(t["startup_s"], 1),
                   "wall_s": round(t["wall_s"], 1), "error": t["error"]} for t in trials],
        "loadavgBefore": [round(x, 2) for x in load0],
        "loadavgAfter": [round(x, 2) for x in os.getloadavg()],
    }


def rotation_configs(cfg: dict[str, Any], choice: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The grid's cells, vLLM's defaults and the tuner's choice (once each), as
    (maxNumSeqs, maxNumBatchedTokens) with None = vLLM's default."""
    e = cfg["engine"]
    cells = [{"maxNumSeqs": m, "maxNumBatchedTokens": b}
             for b in cfg["space"]["maxNumBatchedTokensLevels"]
             for m in cfg["space"]["maxNumSeqsLevels"]]
    out = [{"maxNumSeqs": None, "maxNumBatchedTokens": None}, *cells]
    if choice is not None:
        norm = {"maxNumSeqs": choice.get("maxNumSeqs") or e["defaultMaxNumSeqs"],
                "maxNumBatchedTokens": choice.get("maxNumBatchedTokens")
                or e["defaultMaxNumBatchedTokens"]}
        if norm["maxNumSeqs"] != e["defaultMaxNumSeqs"] and norm not in cells:
            out.append(norm)
    return out


# --- the rotation: runs under the vLLM interpreter ------------------------------------

_ROTATE = r"""
import json, os, sys, time
from dataclasses import asdict
from pathlib import Path
from llm_operator.inpod.tuner.bench import BenchTarget
from llm_operator.inpod.tuner.runner import LiveCapEvaluator
from llm_operator.inpod.tuner.search import SLO, Config
spec = json.loads(sys.argv[1])
slo = SLO(ttft_ms=spec["slo"]["ttftMs"], itl_ms=spec["slo"]["itlMs"])
w = spec["workload"]
t = BenchTarget("", spec["model"], spec["model"], w["inputTokens"], w["outputTokens"], slo,
                waves=w["waves"], min_prompts=w["minPrompts"])
ev = LiveCapEvaluator(spec["model"], t, spec["capacity"], spec["code"], spec["serverArgs"],
                      default_max_num_seqs=spec["defaultMaxNumSeqs"],
                      default_max_num_batched_tokens=spec["defaultMaxNumBatchedTokens"],
                      python=sys.executable, log_dir=Path(spec["logDir"]))
configs = spec["configs"]
try:
    for r in range(spec["rounds"]):
        k = r % len(configs)
        for c in configs[k:] + configs[:k]:
            load0 = os.getloadavg()
            t0 = time.monotonic()
            s = ev.start(Config(c["maxNumSeqs"], c["maxNumBatchedTokens"]))
            m = asdict(s.measure(w["concurrency"]))
            m.pop("requests", None)
            out = {"round": r, "config": c, "startup_s": s.startup_s,
                   "seconds": time.monotonic() - t0, "loadavgBefore": list(load0),
                   "loadavgAfter": list(os.getloadavg()), "starts": ev.starts, **m}
            sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush()
finally:
    ev.close()
"""


def rotate(cfg: dict[str, Any], model: Path, code: Path, configs: list[dict[str, Any]],
           doc: dict[str, Any], out: Path) -> None:
    e = cfg["engine"]
    spec = {"slo": cfg["slo"], "workload": cfg["workload"], "model": str(model),
            "capacity": e["capacity"], "code": str(code),
            "serverArgs": server_args(cfg).split(),
            "defaultMaxNumSeqs": e["defaultMaxNumSeqs"],
            "defaultMaxNumBatchedTokens": e["defaultMaxNumBatchedTokens"],
            "logDir": str(WORK / "rotation"), "configs": configs,
            "rounds": cfg["rotation"]["rounds"]}
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator"), "HF_HUB_OFFLINE": "1"}
    t0 = time.monotonic()
    with open(WORK / "rotation.log", "w") as log:
        proc = subprocess.Popen([str(VLLM_PY), "-c", _ROTATE, json.dumps(spec)], env=env,
                                stdout=subprocess.PIPE, stderr=log, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            m = json.loads(line)
            doc["rotation"]["measurements"].append(m)
            doc["rotation"]["wallSeconds"] = round(time.monotonic() - t0, 1)
            _say(f"  round {m['round']} {m['config']}: goodput {m['goodput_tps']:.0f} tok/s, "
                 f"preempt {m['preemptions']:.0f}, load {m['loadavgBefore'][0]:.1f}")
            out.write_text(json.dumps(doc, indent=1) + "\n")
        if proc.wait() != 0:
            raise RuntimeError(f"rotation failed ({proc.returncode}); see {WORK}/rotation.log")


def _model_and_engine(cfg: dict[str, Any]) -> tuple[Path, Path]:
    """The generated model of the config and a copy of the engine module, as the pod's
    init container makes it."""
    sys.path.insert(0, str(ROOT))
    from tests.support.engine import copy_engine_code
    from tests.support.tiny_model import ensure_tiny_llama

    WORK.mkdir(parents=True, exist_ok=True)
    return (ensure_tiny_llama(WORK / "models", VLLM_PY, **cfg["model"]),
            copy_engine_code(WORK / f"code-{os.getpid()}"))


def run(config: Path, out: Path, smoke_rounds: int | None, skip_grid: bool,
        note: str = "") -> None:
    cfg = yaml.safe_load(config.read_text())
    if smoke_rounds is not None:
        cfg["label"] += "-smoke"
        cfg["rotation"]["rounds"] = smoke_rounds
        cfg["methods"]["tunerMaxTrials"] = 3
        cfg["space"]["maxNumSeqsLevels"] = cfg["space"]["maxNumSeqsLevels"][:3]
    model, code = _model_and_engine(cfg)
    doc: dict[str, Any] = {
        "config": cfg, "configFile": str(config.resolve().relative_to(ROOT)),
        "configGitBlob": _git("hash-object", str(config)), "commit": _git("rev-parse", "HEAD"),
        "engine": "vLLM CPU 0.32, generated Llama ~39 M parameters", "cpus": os.cpu_count(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "partial": True,
        "rotation": {"measurements": []},
        "vllmLock": os.environ.get("LLMOP_VLLM_LOCK", "/tmp/llmop-vllm.lock") or "disabled",
        "note": note,
    }
    t0 = time.monotonic()
    _say("tuner (live cap)")
    doc["tuner"] = run_method(cfg, model, code, "tuner", grid=False)
    _say(f"  tuner chose {doc['tuner']['choice']} in {doc['tuner']['wallSeconds']} s, "
         f"{doc['tuner']['serverStarts']} start(s), {doc['tuner']['trials']} trials")
    out.write_text(json.dumps(doc, indent=1) + "\n")
    configs = rotation_configs(cfg, doc["tuner"]["choice"])
    doc["rotation"]["configs"] = configs
    _say(f"rotation: {len(configs)} configurations x {cfg['rotation']['rounds']} rounds")
    rotate(cfg, model, code, configs, doc, out)
    if not skip_grid:
        _say("grid (live cap)")
        doc["grid"] = run_method(cfg, model, code, "grid", grid=True)
    doc["wallSeconds"] = round(time.monotonic() - t0)
    doc["partial"] = False
    out.write_text(json.dumps(doc, indent=1) + "\n")


def grid_again(out: Path, why: str) -> None:
    """Run the grid of a stored run once more with the code now (its cost only; goodput
    comes from the rotation); the first grid stays in the JSON as ``gridFirst``."""
    doc = json.loads(out.read_text())
    cfg = doc["config"]
    model, code = _model_and_engine(cfg)
    if "grid" in doc and "gridFirst" not in doc:
        doc["gridFirst"] = {**doc["grid"], "commit": doc["commit"]}
    _say("grid again (live cap)")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc["grid"] = run_method(cfg, model, code, "grid", grid=True)
    doc["gridAgain"] = {"commit": _git("rev-parse", "HEAD"), "why": why, "started": started,
                        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out.write_text(json.dumps(doc, indent=1) + "\n")


# --- RESULTS.md ----------------------------------------------------------------------


def _label(c: dict[str, Any], cfg: dict[str, Any]) -> str:
    if c["maxNumSeqs"] is None:
        return (f"vLLM defaults (mns {cfg['engine']['defaultMaxNumSeqs']}, mnbt "
                f"{cfg['engine']['defaultMaxNumBatchedTokens']})")
    mnbt = c["maxNumBatchedTokens"]
    return (f"mns {c['maxNumSeqs']}, mnbt "
            f"{mnbt if mnbt else str(cfg['engine']['defaultMaxNumBatchedTokens']) + ' (default)'}")


def _same(a: dict[str, Any], b: dict[str, Any], cfg: dict[str, Any]) -> bool:
    e = cfg["engine"]

    def norm(c: dict[str, Any]) -> tuple[int, int]:
        return (c.get("maxNumSeqs") or e["defaultMaxNumSeqs"],
                c.get("maxNumBatchedTokens") or e["defaultMaxNumBatchedTokens"])
    return norm(a) == norm(b)


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    cfg = doc["config"]
    ms = doc["rotation"]["measurements"]
    rows = []
    for c in doc["rotation"].get("configs", []):
        g = [m["goodput_tps"] for m in ms if m["config"] == c]
        if not g:
            continue
        mine = [m for m in ms if m["config"] == c]
        rows.append({"config": c, "label": _label(c, cfg), "n": len(g),
                     "mean": statistics.mean(g),
                     "sd": statistics.stdev(g) if len(g) > 1 else 0.0, "each": g,
                     "preemptions": statistics.mean(m["preemptions"] for m in mine),
                     "outputTokS": statistics.mean(m["output_tps"] for m in mine),
                     "goodFraction": statistics.mean(m["good_fraction"] for m in mine),
                     "itlP95Ms": statistics.median(m["itl_p95_ms"] for m in mine),
                     "ttftP95Ms": statistics.median(m["ttft_p95_ms"] for m in mine),
                     "runningMax": max(m["running_max"] for m in mine)})
    # The grid visits vLLM's defaults (its baseline) and every cell.
    grid_cells = [r for r in rows if r["config"]["maxNumSeqs"] is None
                  or r["config"]["maxNumSeqs"] in cfg["space"]["maxNumSeqsLevels"]]
    grid_best = max(grid_cells, key=lambda r: r["mean"]) if grid_cells else None
    choice = (doc.get("tuner") or {}).get("choice")
    tuner_row = next((r for r in rows if choice and _same(r["config"], choice, cfg)), None)
    default_row = next((r for r in rows if r["config"]["maxNumSeqs"] is None), None)
    return {"rows": rows, "gridBest": grid_best, "tuner": tuner_row, "defaults": default_row}


def _engine_text(doc: dict[str, Any], cfg: dict[str, Any]) -> str:
    """The engine and the generated model's size, from the config's shape (the stored
    text named the 39 M model of tune.yaml whatever the config)."""
    m = cfg["model"]
    head = m["hidden"] // m["heads"]
    per_layer = (m["hidden"] * (2 * m["hidden"] + 2 * m["kv_heads"] * head)
                 + 3 * m["hidden"] * m["intermediate"])
    params = m["layers"] * per_layer + 2 * 1000 * m["hidden"]  # the generated ~1k vocab
    engine = doc["engine"].split(", generated")[0]
    return f"{engine}, generated Llama ~{params / 1e6:.2g} M parameters"


def _noisy_goals(doc: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """tune_noisy.yaml's own goals, as its comment states them before the run: the
    tuner's choice not worse than vLLM's defaults by the rotation's paired interval, and
    a gain it reports an interval above 1.05x."""
    t, d = s["tuner"], s["defaults"]
    rows = []
    if t and d and t is d:
        rows.append("| tuner's choice not worse than vLLM's defaults | the choice is vLLM's "
                    "defaults | **met** |")
    elif t and d:
        c = paired_by_round(doc, d["config"], t["config"])
        _lo, hi, _conf = c.interval
        rows.append(f"| tuner's choice not worse than vLLM's defaults (interval's upper end "
                    f"≥ 1) | {c.text()} | {'**met**' if hi >= 1 else '**not met**'} |")
    vs = (doc.get("tuner") or {}).get("versusDefaults")
    if vs is None:
        rows.append("| a gain the tuner reports is an interval above 1.05x | no gain "
                    "reported: vLLM's defaults kept | **met** |")
    else:
        low = vs.get("low")
        ok = low is None or low > 1.05  # None: above 100x
        rows.append(f"| a gain the tuner reports is an interval above 1.05x | "
                    f"{doc['tuner'].get('decision')} | {'**met**' if ok else '**not met**'} |")
    return rows


def _fit_text(cfg: dict[str, Any]) -> str:
    """How many requests the KV cache holds, in the engine's blocks (128 tokens on the
    CPU engine)."""
    w, block = cfg["workload"], 128
    blocks = -(-(w["inputTokens"] + w["outputTokens"]) // block)
    fit = cfg["engine"]["kvTokens"] // (blocks * block)
    return (f"a request holds {blocks} KV blocks of {block}: {fit} fit; a preempted request "
            f"recomputes its {w['inputTokens']}-token prompt")


def paired_by_round(doc: dict[str, Any], a: dict[str, Any], b: dict[str, Any]) -> Any:
    """``b`` against ``a`` from the rotation, paired by round (each round measured every
    configuration once, back to back): a :class:`~llm_operator.inpod.tuner.compare.
    Comparison`, the statistic the tuner decides with."""
    from llm_operator.inpod.tuner.compare import Comparison

    by: dict[int, dict[str, float]] = {}
    for m in doc["rotation"]["measurements"]:
        for key, c in (("a", a), ("b", b)):
            if m["config"] == c:
                by.setdefault(m["round"], {})[key] = m["goodput_tps"]
    pairs = tuple((v["a"], v["b"]) for _r, v in sorted(by.items()) if len(v) == 2)
    return Comparison(pairs)


def _goal(cmp: Any, goal: float) -> str:
    """met / not met / undecided against ``goal`` by the paired interval."""
    lo, hi, _conf = cmp.interval
    if lo >= goal:
        return "**met**"
    if hi < goal:
        return "**not met**"
    return f"**undecided** (the interval includes {goal:g})"


def render_markdown(doc: dict[str, Any], section: str = SECTION,
                    out: Path = OUT) -> str:
    from benchmarks.results_md import markers

    cfg = doc["config"]
    s = summarize(doc)
    begin, end = markers(section)
    again = section != SECTION  # a section beside the first run's
    # The same committed config measured again ("run N"), or a new labelled config.
    # ("tuning-2" is tune.yaml's run 2, "tuning-wide-2" tune_wide.yaml's; "tuning-wide" the
    # first run of another config.)
    first_config = doc["configFile"] == str(CONFIG.relative_to(ROOT))
    rerun = again and (first_config or section.rsplit("-", 1)[-1].isdigit())
    data = out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out
    w, slo = cfg["workload"], cfg["slo"]
    ms = doc["rotation"]["measurements"]
    loads = [m["loadavgBefore"][0] for m in ms]
    n_cfg = len(doc["rotation"].get("configs", []))
    planned = n_cfg * cfg["rotation"]["rounds"]
    partial = doc["partial"]
    digits = section.rsplit("-", 1)[-1]
    run_label = cfg["label"] + (f", run {digits}" if rerun and digits.isdigit() else
                                f" ({section})" if rerun else "")
    lines = [
        begin, "## Tuning: the tuner against an exhaustive grid and vLLM's defaults"
        + (f", {run_label} (the same committed config again)" if rerun else
           f", {run_label} (a new labelled config)" if again else ""), "",
        f"Run **{run_label}**"
        + (f" (PARTIAL: {len(ms)} of {planned} rotation measurements"
           + ("" if "grid" in doc else ", grid's cost not measured") + ")" if partial else "")
        + f", started {doc['started']} at commit `{doc['commit'][:10]}`; SLO, workload and "
        f"space are `{doc['configFile']}` (git blob `{doc['configGitBlob'][:10]}`), committed "
        f"before the run. Rendered from `{data}` by "
        "`.venv/bin/python -m benchmarks.tune_paired --write-results"
        + (f" --out {data} --section {section}" if again else "") + "`; harness "
        "`benchmarks/tune_paired.py`."
        + (" The earlier run (grid and tuner minutes apart, then a re-measurement) is in "
           "[HISTORY.md](../HISTORY.md)." if first_config else ""),
        "",
        *(["The config's opening comment, as committed before the run:", "", f"> {header}",
           ""] if (header := config_header(doc["configGitBlob"])) else []),
        f"**Measured** on {_engine_text(doc, cfg)} ({cfg['model']['layers']} layers, hidden "
        f"{cfg['model']['hidden']}), KV cache "
        f"{cfg['engine']['kvTokens']:,} tokens, {doc['cpus']} CPU cores (the machine's load "
        f"is given below). Workload: {w['concurrency']} clients, {w['inputTokens']} "
        f"tokens in / {w['outputTokens']} out ({_fit_text(cfg)}). SLO: TTFT ≤ "
        f"{slo['ttftMs']:g} ms and the request's p95 inter-token gap ≤ {slo['itlMs']:g} ms; "
        "goodput = output tokens/s of requests meeting it, measured by the tuner's own "
        "measurement (`vllm.benchmarks.serve`, "
        f"max({w['minPrompts']}, {w['waves']} x clients) prompts).",
        "",
        f"**One run**: the tuner ran first (its choice), then every grid cell, the tuner's "
        f"choice and vLLM's defaults were measured round-robin on one live-cap server, "
        f"{cfg['rotation']['rounds']} rounds, the order rotated by one each round, each "
        "configuration the same number of times; the grid's best is picked from these "
        "measurements; then the grid itself ran for its cost. vLLM's defaults are cap "
        f"{cfg['engine']['defaultMaxNumSeqs']} through the admission cap at the server's "
        f"capacity {cfg['engine']['capacity']} (the scheduler then admits as vLLM's own). "
        "Machine load (1-min loadavg before each measurement): "
        + (f"median {statistics.median(loads):.1f}, range {min(loads):.1f}-{max(loads):.1f} "
           "on 2 cores" if loads else "n/a") + "; interleaving spreads it over the "
        "configurations, it does not remove it." + (f" {doc['note']}" if doc.get("note") else "")
        + (f" Added after the run: {doc['noteAfterRun']}" if doc.get("noteAfterRun") else ""),
        "",
        "| configuration | goodput tok/s mean ± sd | per round | share of requests meeting "
        "the SLO | output tok/s (all requests) | preemptions per run | ITL p95 ms (median) | "
        "TTFT p95 ms (median) | peak running |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in s["rows"]:
        tags = [t for t, row in (("grid's best", s["gridBest"]), ("tuner's choice", s["tuner"]))
                if row is r]
        name = r["label"] + (f" (**{', '.join(tags)}**)" if tags else "")
        lines.append(f"| {name} | {r['mean']:.0f} ± {r['sd']:.0f} | "
                     f"{' / '.join(f'{x:.0f}' for x in r['each'])} | "
                     f"{r['goodFraction']:.0%} | {r['outputTokS']:.0f} | {r['preemptions']:.1f} | "
                     f"{r['itlP95Ms']:.1f} | {r['ttftP95Ms']:.0f} | {r['runningMax']:.0f} |")
    if s["rows"]:
        itl = [r["itlP95Ms"] for r in s["rows"]]
        shares = [r["goodFraction"] for r in s["rows"]]
        share = max(shares)
        lines += ["", f"Reading: every configuration's ITL p95 (median of its runs) was "
                  f"{min(itl):.0f}-{max(itl):.0f} ms against the {slo['itlMs']:g} ms objective "
                  f"and {min(shares):.0%}-{share:.0%} of each configuration's requests met "
                  "the SLO"
                  + (": on this machine at this load the engine cannot show a difference "
                     "between configurations above its noise (every sd is about as large as "
                     "its mean); the goals below are marked from these figures, not claimed."
                     if share < 0.5 else ": the goodputs differ by the throughput of the "
                     "requests that met it." if min(shares) >= 0.9 else
                     ": the goodputs differ by throughput and by the share meeting it; under "
                     "90% met it for " + ", ".join(
                         f"{r['label']} ({r['goodFraction']:.0%}, ITL p95 "
                         f"{r['itlP95Ms']:.0f} ms)"
                         for r in s["rows"] if r["goodFraction"] < 0.9) + ".")]
    decision = (doc.get("tuner") or {}).get("decision")
    if decision:
        lines += ["", f"The tuner's own decision (its paired interval, issue 32): {decision}."]
    lines += ["", "| method | wall s (search clock) | busy s (server lifetimes) | server "
              "starts | trials | choice |", "|---|---:|---:|---:|---:|---|"]
    again = doc.get("gridAgain")
    names = {"tuner": "tuner", "gridFirst": "grid, first (at the run's commit)",
             "grid": "grid" + (f" (again, at `{again['commit'][:10]}`)" if again else "")}
    for name in ("tuner", "gridFirst", "grid"):
        m = doc.get(name)
        if m:
            chose = _label(m["choice"], cfg) if m["choice"]["maxNumSeqs"] else "vLLM defaults"
            lines.append(f"| {names[name]} | {m['wallSeconds']:.0f} | {m['busySeconds']:.0f} | "
                         f"{m['serverStarts']} | {m['trials']} | {chose} |")
    if again:
        lines += ["", f"The grid ran twice: {again['why']} The goals below use the second."]
    cells = len(cfg["space"]["maxNumSeqsLevels"]) * len(cfg["space"]["maxNumBatchedTokensLevels"])
    lines += ["", f"Without the live cap a grid starts one server per cell: {cells + 1} starts "
              "(its cells and the defaults) for this space, against the live grid's above.", ""]
    lines += ["### Goals, from this run's own figures", "",
              "Goodput goals are the typical ratio of the rotation's measurements paired by "
              "round, with its exact Wilcoxon signed-rank interval (the statistic the tuner "
              "decides with; few rounds give a wide interval at a low confidence, stated).",
              "", "| goal | figure | met |", "|---|---|---|"]

    t, g, d = s["tuner"], s["gridBest"], s["defaults"]
    if t and g and not g["mean"]:
        lines.append("| tuner's choice ≥ 0.95 x grid's best goodput, ≥ 1.5 x vLLM's defaults | "
                     "no configuration met the SLO in any measurement (goodput 0 for all): "
                     "the run cannot tell them apart | **not shown** |")
        t = None
    if cfg["label"].startswith("tune-noisy"):
        lines += _noisy_goals(doc, s)
    # Goodput ratios as intervals (issue 32): the rotation's measurements paired by round,
    # the typical ratio and its exact signed-rank interval, as the tuner decides.
    if t and g:
        c = paired_by_round(doc, g["config"], t["config"])
        lines.append(f"| tuner's choice ≥ 0.95 x grid's best goodput | {c.text()} | "
                     f"{_goal(c, 0.95)} |")
    if t and d:
        c = paired_by_round(doc, d["config"], t["config"])
        lines.append(f"| tuner's choice ≥ 1.5 x vLLM's defaults | {c.text()} | "
                     f"{_goal(c, 1.5)} |")
    tu, gr = doc.get("tuner"), doc.get("grid")
    if tu and gr:
        for key, what in (("serverStarts", "server starts"), ("busySeconds", "busy time")):
            x = tu[key] / gr[key] if gr[key] else float("nan")
            lines.append(f"| tuner ≤ 0.30 x the grid's {what} | {tu[key]:g} / {gr[key]:g} "
                         f"= {x:.2f} | {'**met**' if x <= 0.30 else '**not met**'} |")
    else:
        lines.append("| tuner ≤ 0.30 x the grid's server starts and busy time | the grid's "
                     "cost was not measured in this run | not shown |")
    lines += ["", end]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--write-results", action="store_true")
    p.add_argument("--results", type=Path, default=None)
    p.add_argument("--smoke-rounds", type=int, default=None)
    p.add_argument("--skip-grid", action="store_true")
    p.add_argument("--grid-again", metavar="WHY", default=None,
                   help="run only the grid of the stored run --out again, saying why")
    p.add_argument("--note", default="", help="how the run was made, shown in RESULTS.md")
    p.add_argument("--section", default=SECTION,
                   help="RESULTS.md section (another run of the same config goes beside "
                        "the first, never over it)")
    a = p.parse_args(argv)
    if a.write_results:
        from benchmarks.results_md import replace_section

        replace_section(a.section, render_markdown(json.loads(a.out.read_text()), a.section,
                                                   a.out), a.results)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.grid_again is not None:
        grid_again(a.out, a.grid_again)
        return 0
    run(a.config, a.out, a.smoke_rounds, a.skip_grid, a.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())

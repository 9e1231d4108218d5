"""Chunked prefill on and off on the real vLLM CPU engine, and the tuner's opt-in search
of it (issue 37 item 1). Not a unit test.

Everything is fixed in ``benchmarks/configs/chunked_prefill.yaml`` before the run:

1. **rotation**: per workload, ``rounds`` rounds; each round starts one server per arm
   (chunked prefill on, vLLM's default, and off), both with the same batched-token budget,
   and measures once with the tuner's own measurement (``vllm bench serve`` at the
   workload's concurrency); the arms' order alternates by round. The i-th runs of the
   two arms are paired and the off/on goodput ratio gets the tuner's interval
   (:mod:`llm_operator.inpod.tuner.compare`).
2. **tuner**: ``python -m llm_operator.inpod.tuner --search-chunked-prefill`` on each
   workload with chunked prefill the only dimension: its decision and trial table.

    .venv/bin/python -m benchmarks.chunked_prefill --out benchmarks/data/chunked_prefill_1.json
    .venv/bin/python -m benchmarks.chunked_prefill --write      # the RESULTS.md section
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
CONFIG = ROOT / "benchmarks" / "configs" / "chunked_prefill.yaml"
OUT = ROOT / "benchmarks" / "data" / "chunked_prefill_1.json"
WORK = Path("/tmp/llmop-chunked-prefill")
SECTION = "chunked-prefill"
ARMS = {"on": None, "off": False}  # Config.chunked_prefill of each arm

_ROTATE = r"""
import json, os, sys, time
from dataclasses import asdict
from pathlib import Path
from llm_operator.inpod.tuner.bench import BenchTarget
from llm_operator.inpod.tuner.runner import ServerEvaluator
from llm_operator.inpod.tuner.search import SLO, Config
spec = json.loads(sys.argv[1])
slo = SLO(ttft_ms=spec["slo"]["ttftMs"], itl_ms=spec["slo"]["itlMs"])
w = spec["workload"]
t = BenchTarget("", spec["model"], spec["model"], w["inputTokens"], w["outputTokens"], slo,
                waves=spec["waves"], min_prompts=spec["minPrompts"])
ev = ServerEvaluator(spec["model"], t, spec["serverArgs"], python=sys.executable,
                     log_dir=Path(spec["logDir"]))
arms = spec["arms"]
for r in range(spec["rounds"]):
    for name in (arms if r % 2 == 0 else arms[::-1]):
        load0 = os.getloadavg()
        t0 = time.monotonic()
        s = ev.start(Config(chunked_prefill=spec["chunked"][name]))
        try:
            m = asdict(s.measure(w["concurrency"]))
        finally:
            s.close()
        m.pop("requests", None)
        out = {"workload": w["name"], "round": r, "arm": name, "startup_s": s.startup_s,
               "seconds": time.monotonic() - t0, "loadavgBefore": list(load0),
               "loadavgAfter": list(os.getloadavg()), **m}
        sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush()
"""



def server_args(cfg: dict[str, Any], wl: dict[str, Any], budget: bool = True) -> list[str]:
    """Both arms' fixed flags; ``budget`` False leaves the batched tokens to the tuner."""
    e = cfg["engine"]
    return ["--kv-cache-memory-bytes", str(e["kvCacheBytes"]),
            "--max-model-len", str(e["maxModelLen"]),
            "--max-num-seqs", str(wl["concurrency"]),
            *(["--max-num-batched-tokens", str(wl["maxNumBatchedTokens"])] if budget else []),
            *e.get("extraFlags", [])]



def rotate(cfg: dict[str, Any], model: Path, wl: dict[str, Any], doc: dict[str, Any],
           out: Path) -> None:
    spec = {"slo": cfg["slo"], "workload": wl, "model": str(model), "waves": cfg["waves"],
            "minPrompts": cfg["minPrompts"], "serverArgs": server_args(cfg, wl),
            "logDir": str(WORK / f"rotation-{wl['name']}"), "arms": list(ARMS),
            "chunked": ARMS, "rounds": cfg["rounds"]}
    with open(WORK / f"rotation-{wl['name']}.log", "w") as log:
        proc = subprocess.Popen([str(VLLM_PY), "-c", _ROTATE, json.dumps(spec)], env=vllm_env(),
                                stdout=subprocess.PIPE, stderr=log, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            m = json.loads(line)
            doc["rotation"].append(m)
            say(f"  {wl['name']} round {m['round']} {m['arm']}: goodput "
                 f"{m['goodput_tps']:.0f} tok/s, ITL p95 {m['itl_p95_ms']:.1f} ms, TTFT p95 "
                 f"{m['ttft_p95_ms']:.0f} ms, load {m['loadavgBefore'][0]:.1f}")
            out.write_text(json.dumps(doc, indent=1) + "\n")
        if proc.wait() != 0:
            raise RuntimeError(f"rotation failed ({proc.returncode}); see {WORK}")


def run_tuner(cfg: dict[str, Any], model: Path, wl: dict[str, Any]) -> dict[str, Any]:
    out = WORK / f"tuner-{wl['name']}.json"
    argv = [
        "--model", str(model), "--search-chunked-prefill",
        "--input-tokens", str(wl["inputTokens"]), "--output-tokens", str(wl["outputTokens"]),
        "--concurrency", str(wl["concurrency"]), "--waves", str(cfg["waves"]),
        "--min-prompts", str(cfg["minPrompts"]),
        "--slo-ttft-ms", f"{cfg['slo']['ttftMs']:g}", "--slo-itl-ms", f"{cfg['slo']['itlMs']:g}",
        "--default-max-num-seqs", str(wl["concurrency"]),
        # One level: the budget is not moved; the servers run vLLM's own default.
        "--max-num-batched-tokens-levels", str(wl["maxNumBatchedTokens"]),
        "--repeats", str(cfg["tuner"]["repeats"]),
        "--max-seconds", str(cfg["tuner"]["maxSeconds"]),
        # max-num-seqs pinned at the concurrency (not searched), so chunked prefill is
        # the only dimension.
        "--server-args=" + " ".join(server_args(cfg, wl, budget=False)),
        "--output", str(out), "--log-dir", str(out.with_suffix("")), "--progress", "log",
    ]  # fmt: skip
    env = {**vllm_env(), "LLMOP_TERMINATION_LOG": str(out.with_suffix(".msg"))}
    t0 = time.monotonic()
    proc = subprocess.run([str(VLLM_PY), "-m", "llm_operator.inpod.tuner", *argv], env=env,
                          capture_output=True, text=True, check=False)
    out.with_suffix(".log").write_text(proc.stderr + "\n" + proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"tuner on {wl['name']} failed ({proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    data = json.loads(out.read_text())
    return {"processWallSeconds": round(time.monotonic() - t0, 1),
            "decision": data["result"].get("decision"),
            "best": data["result"].get("best"), "versusDefaults":
                data["result"].get("versusDefaults"),
            "notes": data.get("notes", []), "table": data["result"].get("table"),
            "text": proc.stdout[-6000:]}


def run(config: Path, out: Path) -> None:
    cfg = yaml.safe_load(config.read_text())
    model, doc = start(cfg, config, WORK, rotation=[], tuner={})
    t0 = time.monotonic()
    names = [w["name"] for w in cfg["workloads"]]
    for wl in cfg["workloads"]:
        if wl["name"] not in cfg.get("rotate", names):
            continue
        say(f"rotation: {wl['name']}")
        rotate(cfg, model, wl, doc, out)
    for wl in cfg["workloads"]:
        if wl["name"] not in cfg.get("tune", names):
            continue
        say(f"tuner: {wl['name']}")
        doc["tuner"][wl["name"]] = run_tuner(cfg, model, wl)
        say(f"  {doc['tuner'][wl['name']]['decision']}")
        out.write_text(json.dumps(doc, indent=1) + "\n")
    doc["wallSeconds"] = round(time.monotonic() - t0)
    doc["partial"] = False
    out.write_text(json.dumps(doc, indent=1) + "\n")


# --- the section ------------------------------------------------------------------------

def paired(doc: dict[str, Any], workload: str) -> dict[str, Any]:
    """The arms' medians and the off/on ratio's interval from the i-th runs."""
    from llm_operator.inpod.tuner.compare import Comparison

    cfg = doc["config"]
    runs = [m for m in doc["rotation"] if m["workload"] == workload]
    by = {a: sorted((m for m in runs if m["arm"] == a), key=lambda m: m["round"]) for a in ARMS}
    pairs = tuple((a["goodput_tps"], b["goodput_tps"]) for a, b in zip(by["on"], by["off"],
                                                                      strict=False))
    cmp = Comparison(pairs=pairs, interleaved=False, confidence=cfg["confidence"])
    d = cmp.to_dict()
    gain = cfg["minGain"]
    if len(pairs) < 5:  # no interval reaches 90% with fewer (the widest of 5: 93.75%)
        verdict = f"cannot tell apart ({len(pairs)} pairs reach no 90% interval)"
    elif d["low"] is not None and d["low"] > 1 + gain:
        verdict = "off wins"
    elif d["high"] is not None and d["high"] < 1 - gain:
        verdict = "on wins"
    else:
        verdict = "cannot tell apart"

    def med(arm: str, key: str) -> float:
        return statistics.median(m[key] for m in by[arm]) if by[arm] else float("nan")

    return {"pairs": len(pairs), "ratio": d["ratio"], "low": d["low"], "high": d["high"],
            "confidence": d["confidence"], "verdict": verdict,
            "arms": {a: {k: med(a, k) for k in ("goodput_tps", "output_tps", "ttft_p95_ms",
                                                "itl_p95_ms", "startup_s")} for a in ARMS},
            "spread": {a: (max(m["goodput_tps"] for m in by[a]) / min(
                m["goodput_tps"] for m in by[a]) - 1) if by[a] and min(
                m["goodput_tps"] for m in by[a]) > 0 else None for a in ARMS}}


def section_name(cfg: dict[str, Any]) -> str:
    """``chunked-prefill`` for run 1's label, ``chunked-prefill-N`` for run N's."""
    n = cfg["label"].rsplit("-", 1)[-1]
    return SECTION if n == "1" else f"{SECTION}-{n}"


def render(doc: dict[str, Any]) -> str:
    cfg = doc["config"]
    begin, end = markers(section_name(cfg))
    lines = [begin, f"## Chunked prefill on and off on the CPU engine ({cfg['label']})", "",
             f"**Measured on the vLLM CPU engine** ({doc['engine']}, {doc['cpus']} CPUs, "
             f"{doc['started']}), config `{doc['configFile']}`, committed before the run. "
             "Per workload, each round starts one server per arm with the same "
             "--max-num-batched-tokens and measures once at the workload's concurrency "
             f"(`vllm bench serve`, the tuner's measurement); {cfg['rounds']} rounds, the "
             "order alternating; the off/on goodput ratio of the i-th runs gets the tuner's "
             f"Wilcoxon interval ({cfg['confidence']:.0%}); a setting wins when the "
             f"interval clears 1 +- {cfg['minGain']:.0%}. SLO TTFT <= "
             f"{cfg['slo']['ttftMs']:g} ms, ITL p95 <= {cfg['slo']['itlMs']:g} ms (loose: "
             "goodput is nearly throughput).", "",
             "| workload | arm | goodput tok/s | TTFT p95 ms | ITL p95 ms | spread | "
             "off / on (interval) | verdict |", "|---|---|---|---|---|---|---|---|"]
    for wl in cfg["workloads"]:
        p = paired(doc, wl["name"])
        if not p["pairs"]:
            continue
        ratio = (f"{p['ratio']:.3f} ({p['low']:.3f}-{p['high']:.3f} at "
                 f"{p['confidence']:.0%}, {p['pairs']} pairs)" if p["low"] is not None else "-")
        for a in ARMS:
            s = p["arms"][a]
            sp = p["spread"][a]
            lines.append(
                f"| {wl['name']} ({wl['inputTokens']} in / {wl['outputTokens']} out, "
                f"{wl['concurrency']} clients, {wl['maxNumBatchedTokens']} batched tokens) | "
                f"{a} | {s['goodput_tps']:.0f} | {s['ttft_p95_ms']:.0f} | "
                f"{s['itl_p95_ms']:.1f} | {'-' if sp is None else f'{sp:.0%}'} | "
                f"{ratio if a == 'off' else ''} | {p['verdict'] if a == 'off' else ''} |")
    if doc.get("tuner"):
        lines += ["", "The tuner with `--search-chunked-prefill` (chunked prefill the only "
                  "dimension):", ""]
        from llm_operator.inpod.tuner.result import TABLE_COLUMNS

        for name, t in doc["tuner"].items():
            lines += [f"- {name}: {t.get('decision')} ({t.get('processWallSeconds')} s)", "",
                      "| trial | phase | chunked prefill | batched tokens | goodput tok/s | "
                      "TTFT p95 ms | ITL p95 ms | vs (interval) |",
                      "|---|---|---|---|---|---|---|---|"]
            for row in t.get("table") or []:
                r = dict(zip(TABLE_COLUMNS, row, strict=False))
                vs = (f"#{r['against']}: {r['ratio']:.3f} ({r['low']:.3f}-{r['high']:.3f}, "
                      f"{r['pairs']} pairs)" if r.get("ratio") is not None
                      and r.get("low") is not None else "-")
                cp = {None: "default (on)", True: "on", False: "off"}[r.get("chunkedPrefill")]
                lines.append(f"| {r['trial']} | {r['phase']} | {cp} | "
                             f"{r.get('maxNumBatchedTokens') or 'default'} | "
                             f"{r.get('goodput') if r.get('goodput') is not None else '-'} | "
                             f"{r.get('ttftP95Ms')} | {r.get('itlP95Ms')} | {vs} |")
    if doc.get("partial"):
        lines += ["", "**Partial run**: " + doc.get("stoppedReason", "stopped before the end.")]
    lines.append(end)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return cpu_engine_run.main(argv, __doc__.split("\n")[0], CONFIG, OUT,
                               lambda doc: section_name(doc["config"]), run, render)


if __name__ == "__main__":
    sys.exit(main())

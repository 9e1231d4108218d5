"""Adaptation benchmark: the online controller against static caps on a step-load trace.

Two parts, reported in ``benchmarks/RESULTS.md`` ("Adaptation"; earlier runs, the JSON's
``earlier`` list, are in ``benchmarks/HISTORY.md``):

1. **Measured** on the real vLLM CPU engine (tiny generated Llama, a KV cache of 4,096
   tokens from ``--kv-cache-memory-bytes 2097152``), scraped every second by a real
   Prometheus, loaded by vLLM's own benchmark (``vllm.benchmarks.serve``) with a step
   trace of client concurrency (4 → 48 → 8; each phase a few bounded segments).
   Arms: vLLM's default cap (128 on the CPU), a few static caps, and the adaptive
   controller, which after every segment observes through Prometheus, decides with
   :func:`llm_operator.adaptation.policy.decide` and applies a change by restarting the server
   with the new ``--max-num-seqs`` (one rollout). "Best static in hindsight" is the
   static arm with the highest goodput over the whole trace.
2. **Simulated** on the project's performance model (:mod:`llm_operator.planning.perfmodel`): a
   day-long diurnal trace on a GPU model, one decision a minute: rollouts per day, flaps,
   minutes with preemptions, goodput against the best static cap.

The objective (``--slo-ttft-ms 20000 --slo-tpot-ms 15``): a streaming one. The peak
holds several times as many clients as the cache holds sequences, so every cap queues;
a 2 s first-token objective there sits on the median TTFT of every arm (2-3 s in a probe
at caps 10 and 128), which turns small changes of machine speed into large changes of
goodput. The queue is allowed; a request whose stream runs slower than 15 ms a token
(a preempted one stalls while it is recomputed) misses. The same requests are also
scored against the README's chat objective (TTFT 2 s, TPOT 100 ms) and shown beside.

Run (needs .venv-vllm and /usr/bin/prometheus; part 1 took 31 and 33 min for two
interleaved runs of six arms on two cores: ``wallSeconds`` in the JSON)::

    .venv/bin/python -m benchmarks.adapt_benchmark --out benchmarks/data/adapt_benchmark.json
    .venv/bin/python -m benchmarks.adapt_benchmark --simulate-only

Goodput: output tokens per second of requests that met the SLO (TTFT at most
``--slo-ttft-ms`` and time per output token at most ``--slo-tpot-ms``), over the time
the engine served load (restarts excluded; the restart downtime is reported apart: on a
cluster a surge rollout keeps the old pod serving meanwhile, here there is one CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.support.prometheus import Target, running_prometheus
from tests.support.tiny_model import ensure_tiny_llama
from tests.support.vllm_load import Load, engine_metric

from benchmarks.results_md import markers, replace_section
from llm_operator.adaptation import prometheus
from llm_operator.adaptation.policy import (
    AdaptationState,
    CapDecision,
    CapLimits,
    Observation,
    PolicySettings,
    decide,
    record,
)
from llm_operator.api.models import LLMServiceSpec
from llm_operator.inpod.tuner.server import VLLMServer, free_port, vllm_lock

ROOT = Path(__file__).resolve().parent.parent

VLLM_PY = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
KEY = ("bench", "chat")
BASE_FLAGS = ["--kv-cache-memory-bytes", "2097152", "--max-model-len", "1024"]
DEFAULT_CAP = 128  # vLLM's default --max-num-seqs for the OpenAI server on the CPU
# The README's chat objective (TTFT 2 s, 100 ms per token): every run scores it too, so
# the table shows what a tight first-token objective says of the same requests.
INTERACTIVE_SLO = (2.0, 0.1)

_WORKER = r"""
import contextlib, io, json, sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
KEEP = ("ttfts", "latencies", "output_lens", "errors")
for line in sys.stdin:
    argv = json.loads(line)
    p = FlexibleArgumentParser(); add_cli_args(p)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            r = main(p.parse_args(argv))
        out = {k: v for k, v in r.items() if isinstance(v, (int, float, str)) or v is None}
        out.update({k: r.get(k) for k in KEEP})
    except BaseException as exc:  # report, keep serving
        out = {"error": repr(exc)}
    sys.__stdout__.write(json.dumps(out) + "\n"); sys.__stdout__.flush()
"""


class BenchWorker:
    """vLLM's benchmark in one long-lived child (imports once, runs segments on demand)."""

    def __init__(self) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.proc = subprocess.Popen([str(VLLM_PY), "-c", _WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env)

    def run(self, argv: list[str]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the benchmark worker died")
        out: dict[str, Any] = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"vllm bench serve failed: {out['error']}")
        return out

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@dataclass(frozen=True)
class Phase:
    concurrency: int
    segments: int
    prompts: int  # per segment


@dataclass
class Segment:
    arm: str
    phase: int
    concurrency: int
    cap: int
    duration_s: float
    completed: int
    output_tokens: int
    good_tokens: int
    preemptions: float
    ttfts_s: list[float] = field(repr=False)
    tpots_s: list[float] = field(repr=False)
    good_tokens_interactive: int = 0  # under INTERACTIVE_SLO, for the second view
    decision: dict[str, Any] | None = None
    restart_s: float = 0.0


def _preemptions(url: str) -> float:
    return engine_metric(url, "vllm:num_preemptions_total")


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, math.ceil(0.95 * len(s)) - 1)]


@contextlib.contextmanager
def _server(model: Path, cap: int, port: int, log: Path) -> Iterator[VLLMServer]:
    server = VLLMServer(model=str(model), python=str(VLLM_PY), port=port, lock=False,
                        flags=[*BASE_FLAGS, "--max-num-seqs", str(cap)], log_path=log,
                        start_timeout_s=600)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def run_arm(name: str, initial_cap: int, adaptive: bool, phases: list[Phase], model: Path,
            worker: BenchWorker, slo: tuple[float, float], spec: LLMServiceSpec,
            policy: PolicySettings, logdir: Path) -> list[Segment]:
    """One arm of the trace; the adaptive arm decides after each segment."""
    port = free_port()
    segments: list[Segment] = []
    cap = initial_cap
    state = AdaptationState(current=cap)
    with running_prometheus([Target(f"127.0.0.1:{port}", {"llmservice": KEY[1],
                                                          "namespace": KEY[0]})]) as prom:
        client = prometheus.connect(prom.url)
        server_cm = _server(model, cap, port, logdir / f"{name}.log")
        server = server_cm.__enter__()
        try:
            for pi, phase in enumerate(phases):
                for _ in range(phase.segments):
                    load = Load(concurrency=phase.concurrency, num_prompts=phase.prompts,
                                seed=len(segments))
                    before = _preemptions(server.url)
                    res = worker.run([*load.argv(server.url, str(model)), "--save-detailed"])
                    end = time.time()
                    seg = _segment(name, pi, phase, cap, res, _preemptions(server.url) - before,
                                   slo)
                    segments.append(seg)
                    _say(f"{name}: phase {pi} c={phase.concurrency} cap={cap} "
                         f"{seg.duration_s:.1f}s good={seg.good_tokens / seg.duration_s:.0f} tok/s "
                         f"preempt={seg.preemptions:.0f}")
                    if not adaptive:
                        continue
                    window = max(10.0, seg.duration_s)
                    pol = policy.model_copy(update={"window_seconds": window})
                    obs = prometheus.fetch_observations(client, [KEY], end, window).get(KEY)
                    d = decide(obs, state, spec, end, limits=CapLimits(), settings=pol)
                    seg.decision = _decision_doc(d, obs)
                    _say(f"  decision: {d.reason}")
                    if d.changed and d.value is not None:
                        state = record(state, d, pol)
                        t0 = time.monotonic()
                        server_cm.__exit__(None, None, None)
                        cap = d.value
                        server_cm = _server(model, cap, port, logdir / f"{name}-{cap}.log")
                        server = server_cm.__enter__()
                        seg.restart_s = time.monotonic() - t0
        finally:
            server_cm.__exit__(None, None, None)
    return segments


def _segment(arm: str, pi: int, phase: Phase, cap: int, res: dict[str, Any], preempt: float,
             slo: tuple[float, float]) -> Segment:
    ttfts, tpots, good, good_i, out = [], [], 0, 0, 0
    for ttft, lat, n, err in zip(res["ttfts"], res["latencies"], res["output_lens"],
                                 res["errors"], strict=False):
        if err or not n:
            continue
        tpot = (lat - ttft) / (n - 1) if n > 1 else 0.0
        ttfts.append(ttft)
        tpots.append(tpot)
        out += n
        if ttft <= slo[0] and tpot <= slo[1]:
            good += n
        if ttft <= INTERACTIVE_SLO[0] and tpot <= INTERACTIVE_SLO[1]:
            good_i += n
    return Segment(arm=arm, phase=pi, concurrency=phase.concurrency, cap=cap,
                   duration_s=float(res["duration"]), completed=int(res["completed"]),
                   output_tokens=out, good_tokens=good, good_tokens_interactive=good_i,
                   preemptions=preempt, ttfts_s=ttfts,
                   tpots_s=tpots)


def _decision_doc(d: CapDecision, obs: Observation | None) -> dict[str, Any]:
    return {"action": d.action.value, "from": d.current, "to": d.value, "reason": d.reason,
            "observation": None if obs is None else obs.summary()}


def _with_downtime(m: dict[str, Any], arm: str) -> str:
    """``arm``'s goodput over the best static's when the seconds its restarts took count
    as seconds without goodput (what a user of one replica loses), from the stored rows."""
    rows = {r["arm"]: r for r in m["rows"]}

    def counted(r: dict[str, Any]) -> float:
        served = r.get("servingSeconds") or 0.0
        total = served + (r.get("restartSeconds") or 0.0)
        return r["goodputTokS"] * served / total if total else 0.0

    best = counted(rows[m["bestStatic"]])
    return f"{counted(rows[arm]) / best:.3f}" if best else "n/a"


def summarize(arm: str, segs: list[Segment], cooldown_s: float) -> dict[str, Any]:
    """One row of the results table."""
    t = sum(s.duration_s for s in segs)
    ttfts = [x for s in segs for x in s.ttfts_s]
    rollouts = sum(1 for s in segs if s.restart_s > 0)
    high = [s for s in segs if s.phase == 1]
    first_clean = next((i for i, s in enumerate(high) if s.preemptions == 0), None)
    return {
        "arm": arm,
        "goodputTokS": round(sum(s.good_tokens for s in segs) / t, 1),
        "goodputInteractiveTokS": round(sum(s.good_tokens_interactive for s in segs) / t, 1),
        "outputTokS": round(sum(s.output_tokens for s in segs) / t, 1),
        "preemptions": round(sum(s.preemptions for s in segs)),
        "ttftP95Ms": round((_p95(ttfts) or 0) * 1000),
        "tpotP95Ms": round((_p95([x for s in segs for x in s.tpots_s]) or 0) * 1000, 1),
        "rollouts": rollouts,
        "restartSeconds": round(sum(s.restart_s for s in segs), 1),
        "servingSeconds": round(t, 1),
        "highLoadSegmentsWithPreemptions": sum(1 for s in high if s.preemptions > 0),
        "firstCleanHighLoadSegment": first_clean,
        "caps": [s.cap for s in segs],
        "perPhase": [
            {"phase": p, "concurrency": ss[0].concurrency,
             "goodputTokS": round(sum(s.good_tokens for s in ss) /
                                  sum(s.duration_s for s in ss), 1),
             "preemptions": round(sum(s.preemptions for s in ss))}
            for p in sorted({s.phase for s in segs})
            for ss in [[s for s in segs if s.phase == p]]
        ],
        "cooldownSeconds": cooldown_s,
    }


def summarize_runs(arm: str, runs: list[list[Segment]], cooldown_s: float) -> dict[str, Any]:
    """One row over every repeat of an arm: totals over all of them, and each repeat's
    goodput and first clean high-load segment to show the spread."""
    row = summarize(arm, [s for segs in runs for s in segs], cooldown_s)
    each = [summarize(arm, segs, cooldown_s) for segs in runs]
    row["caps"] = each[0]["caps"] if len(each) == 1 else [r["caps"] for r in each]
    row["goodputPerRepeat"] = [r["goodputTokS"] for r in each]
    row["firstCleanHighLoadSegment"] = [r["firstCleanHighLoadSegment"] for r in each]
    return row


def flaps(history: list[tuple[float, int, int]], window_s: float) -> int:
    """A→B→A returns within ``window_s``: (time, from, to) changes."""
    n = 0
    for i, (t, a, _b) in enumerate(history):
        for t2, _a2, b2 in history[i + 1:]:
            if t2 - t <= window_s and b2 == a:
                n += 1
                break
    return n


# --- simulated diurnal day on the performance model -------------------------------------


def simulate_day(day_minutes: int = 24 * 60) -> dict[str, Any]:
    """A day of diurnal load on a GPU model (perfmodel), one decision a minute."""
    from llm_operator.inpod.tuner.search import SLO
    from llm_operator.planning import perfmodel as pm

    # Llama-3.1-8B-like shape on one A100 80 GB with a KV cache of 64k tokens (a
    # deliberately tight cache so the day crosses the preemption line at its peak).
    model = pm.ModelShape(name="Llama-3.1-8B (shape)", parameters=8.03e9, num_layers=32,
                          hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                          head_dim=128, vocab_size=128256)
    hw = pm.Hardware(name="A100-80GB", memory_bytes=80 * pm.GIB, bandwidth=2.039e12,
                     flops=312e12)
    wl = pm.Workload(input_tokens=1024, output_tokens=512)
    kv_tokens = 65536
    slo = SLO(ttft_ms=2000, itl_ms=100)
    spec = LLMServiceSpec.model_validate({
        "model": {"name": "sim"},
        "adaptation": {"mode": "Apply", "cooldownSeconds": 600, "maxStepPercent": 50,
                       "intervalSeconds": 60},
        "workload": {"slo": {"ttftP95Ms": 2000, "itlP95Ms": 100}},
    })

    def conc(minute: int) -> int:  # 8 at night, 160 at the afternoon peak
        return max(1, round(84 - 76 * math.cos(2 * math.pi * (minute - 180) / 1440)))

    cache: dict[tuple[int, int], Any] = {}

    def point(cap: int, c: int) -> Any:
        if (cap, c) not in cache:
            eng = pm.EngineSettings(max_num_seqs=cap, kv_token_capacity=kv_tokens)
            cache[(cap, c)] = pm.predict_point(model, hw, 1, wl, eng, c)
        return cache[(cap, c)]

    def observe(cap: int, c: int, t: float) -> Observation:
        p = point(cap, c)
        ctx = wl.input_tokens + wl.output_tokens / 2
        kv = min(1.0, p.running * ctx / kv_tokens)
        peak = p.running * (wl.input_tokens + wl.output_tokens)
        share = max(0.0, (peak - kv_tokens) / peak) if p.preempting else 0.0
        return Observation(
            namespace="sim", name="day", evaluated_at=t, window_seconds=60, samples=60,
            last_sample_at=t - 1, replicas=1, running_mean=p.running,
            running_max=min(cap, c), waiting_mean=p.queued, waiting_max=p.queued,
            kv_usage_mean=kv, kv_usage_max=min(1.0, kv * 1.1),
            preemption_rate=p.requests_per_s * share, request_rate=p.requests_per_s,
            ttft_p95_seconds=p.ttft_s, itl_p95_seconds=p.itl_p95_s,
            mean_prompt_tokens=float(wl.input_tokens),
            mean_generation_tokens=float(wl.output_tokens), kv_capacity_tokens=kv_tokens)

    minutes = range(day_minutes)
    static_caps = [16, 32, 48, 64, 96, 128, 256]
    static = {cap: sum(point(cap, conc(m)).goodput(slo) for m in minutes) / len(minutes)
              for cap in static_caps}
    best_cap = max(static, key=lambda k: static[k])
    pol = PolicySettings(window_seconds=60)
    adaptive: dict[str, Any] = {}
    for policy in ("Avoid", "Tolerate"):
        sp = LLMServiceSpec.model_validate({**spec.model_dump(by_alias=True), "adaptation": {
            **spec.adaptation.model_dump(by_alias=True), "preemptions": policy}})
        state = AdaptationState(current=256)  # vLLM's GPU default
        good, preempt_minutes, history = 0.0, 0, []
        for m in minutes:
            t = 1_800_000_000.0 + 60 * m
            c = conc(m)
            p = point(state.current, c)
            good += p.goodput(slo)
            preempt_minutes += int(p.preempting)
            d = decide(observe(state.current, c, t), state, sp, t, settings=pol)
            if d.changed:
                history.append((t, d.current or 0, d.value or 0))
                state = record(state, d, pol)
        adaptive[policy] = {
            "goodputTokS": round(good / len(minutes), 1),
            "ratioToBestStatic": round(good / len(minutes) / static[best_cap], 3),
            "rolloutsPerDay": len(history),
            "flaps": flaps(history, 3600),
            "minutesPreempting": preempt_minutes,
            "changes": [{"minute": round((t - 1_800_000_000.0) / 60), "from": a, "to": b}
                        for t, a, b in history],
        }
    return {
        "model": "Llama-3.1-8B shape, 1x A100-80GB, KV 65,536 tokens, 1024 in / 512 out",
        "trace": "diurnal: 8 → 160 → 8 clients over 24 h, one decision a minute",
        "staticGoodputTokS": {str(k): round(v, 1) for k, v in static.items()},
        "bestStaticCap": best_cap,
        "adaptive": adaptive,
    }


BEGIN, END = markers("adaptation-step-trace")


def render_markdown(doc: dict[str, Any]) -> str:
    """The "Adaptation" section of benchmarks/RESULTS.md from the benchmark's JSON: the
    current measured run and the simulated day (earlier runs are in HISTORY.md)."""
    lines = [BEGIN, "## Adaptation: the step trace (superseded by benchmarks.adapt_live)", ""]
    lines += [
        "The online controller (`llm_operator.adaptation.policy`, observations from a real "
        "Prometheus through `llm_operator.adaptation.prometheus`) against static "
        "`--max-num-seqs` values. Measure: `.venv/bin/python -m benchmarks.adapt_benchmark` "
        "(it starts vLLM once per arm and once per rollout, holding the machine's vLLM lock; "
        f"{_minutes(doc)}); render this section from its JSON: `--write-results`.", ""]
    # Only the current run: earlier ones (the JSON's "earlier" list) are kept, verbatim,
    # in benchmarks/HISTORY.md.
    m = doc.get("measured")
    if m:
        lines += _measured_lines(m, "### Measured: step load on the real vLLM CPU engine")
    s = doc.get("simulated")
    if s:
        lines += [
            "### Simulated: a diurnal day on the performance model", "",
            f"**Simulated** (`llm_operator.planning.perfmodel`, not measured): {s['model']}; "
            f"{s['trace']}. The policy sees observations the model predicts (running, "
            "queued, KV usage, preemptions, TTFT, ITL p95) and its changes take effect at "
            "once (cooldown 600 s, maxStepPercent 50, start at vLLM's GPU default 256).", "",
            "| cap | " + " | ".join(s["staticGoodputTokS"]) + " | adaptive Avoid | adaptive "
            "Tolerate |",
            "|---|" + "---:|" * (len(s["staticGoodputTokS"]) + 2),
            "| goodput tok/s (day mean) | " + " | ".join(
                f"{v:.0f}" for v in s["staticGoodputTokS"].values())
            + f" | {s['adaptive']['Avoid']['goodputTokS']:.0f} | "
            f"{s['adaptive']['Tolerate']['goodputTokS']:.0f} |", "",
            "| adaptive | / best static (cap " + str(s["bestStaticCap"]) + ") | rollouts per "
            "day | flaps | minutes preempting | changes (minute: from → to) |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for policy, ad in s["adaptive"].items():
            lines.append(
                f"| {policy} | **{ad['ratioToBestStatic']}** | {ad['rolloutsPerDay']} | "
                f"{ad['flaps']} | {ad['minutesPreempting']} | " + (", ".join(
                    f"{c['minute']}: {c['from']} → {c['to']}" for c in ad["changes"]) or "none")
                + " |")
        lines += [
            "",
            "The model counts moderate preemption as cheap (a recompute term), so a cap "
            "above the no-preemption fit serves the shoulders of the day within the SLO: "
            "Avoid settles at the fit and queues them; Tolerate keeps the larger batch, "
            "preempting for most of the day, which the model says costs no goodput. The "
            "model's preemption cost is an estimate, not a measurement (see the measured "
            "run above for the real engine).",
        ]
    lines.append(END)
    return "\n".join(lines) + "\n"



def _measured_lines(m: dict[str, Any], heading: str) -> list[str]:
    """One measured run: setup, table per arm and per phase, the adaptive arms' changes,
    the goals."""
    ph = " → ".join(f"{p['concurrency']}" for p in m["phases"])
    segs = ", ".join(f"{p['segments']} x {p['prompts']}" for p in m["phases"])
    lines = [
        heading, "",
        f"{m['engine']}; clients {ph} (segments x prompts per phase: {segs}); "
        f"SLO TTFT ≤ {m['slo']['ttftMs']:g} ms and TPOT ≤ {m['slo']['tpotMs']:g} ms per "
        "request; goodput = output tokens/s of requests meeting it, over the time the "
        "engine served (restarts excluded, their downtime listed apart). The adaptive "
        f"arm starts at vLLM's default cap and decides after every segment "
        f"(cooldown {m['policy']['cooldownSeconds']:g} s, maxStepPercent "
        f"{m['policy']['maxStepPercent']}); a change restarts the server (one rollout).",
        "",
        "| arm | goodput tok/s | output tok/s | preemptions | TTFT p95 ms | TPOT p95 ms "
        "| rollouts "
        "| restart downtime s | high-load segments preempting | caps per segment "
        "(repeats split by /) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in m["rows"]:
        lines.append(
            f"| {r['arm']} | {r['goodputTokS']:.0f} | {r['outputTokS']:.0f} | "
            f"{r['preemptions']} | {r['ttftP95Ms']} | {r.get('tpotP95Ms', 'n/a')} | "
            f"{r['rollouts']} | "
            f"{r['restartSeconds']:.0f} | {r['highLoadSegmentsWithPreemptions']} of "
            f"{m['phases'][1]['segments'] * m.get('repeats', 1)} | {_caps_text(r['caps'])} |")
    inter = m.get("interactiveSlo")
    if inter:
        best_i = max((r for r in m["rows"] if r["arm"] not in m["adaptiveArms"]),
                     key=lambda r: r["goodputInteractiveTokS"])
        lines += ["", f"The same requests scored against the chat objective (TTFT ≤ "
                  f"{inter['ttftMs']:g} ms, TPOT ≤ {inter['tpotMs']:g} ms), goodput tok/s: "
                  + "; ".join(f"{r['arm']} {r['goodputInteractiveTokS']:.0f}"
                              for r in m["rows"])
                  + f" (best static {best_i['arm']}; "
                  + ", ".join(f"{arm} / best static = "
                              f"{_ratio(m, arm, best_i, 'goodputInteractiveTokS')}"
                              for arm in m["adaptiveArms"]) + ")."]
    if m.get("repeats", 1) > 1:
        lines += ["", f"Each arm ran {m['repeats']} times, interleaved (every arm once, then "
                  "again); figures are over all runs. Goodput per run: " + "; ".join(
                      f"{r['arm']} " + " / ".join(f"{g:.0f}" for g in r["goodputPerRepeat"])
                      for r in m["rows"]) + "."]
    lines += ["", "Per phase (goodput tok/s / preemptions):", "",
              "| arm | " + " | ".join(f"{p['concurrency']} clients" for p in m["phases"])
              + " |", "|---|" + "---:|" * len(m["phases"])]
    for r in m["rows"]:
        lines.append(f"| {r['arm']} | " + " | ".join(
            f"{p['goodputTokS']:.0f} / {p['preemptions']}" for p in r["perPhase"]) + " |")
    lines += ["", f"Best static in hindsight: **{m['bestStatic']}**.", ""]
    for arm in m["adaptiveArms"]:
        ad = next(r for r in m["rows"] if r["arm"] == arm)
        decisions = [x["decision"] for x in m["segments"][arm] if x.get("decision")]
        # Each run makes its own moves: list the first run's (a single run is its own).
        changes = [x["decision"] for x in _repeats(m, arm)[0]
                   if x.get("decision") and x["decision"]["action"] != "hold"]
        lines += [f"**{arm}** (spec.adaptation.preemptions="
                  f"{'Tolerate' if 'Tolerate' in arm else 'Avoid'}): goodput / best static "
                  f"= **{m['ratioToBestStatic'][arm]}** with restarts excluded, "
                  f"**{_with_downtime(m, arm)}** with their downtime counted as time without "
                  f"goodput (goodput x serving s / (serving s + restart s)); rollouts "
                  f"{ad['rollouts']}; flaps "
                  f"(A→B→A) {m['adaptiveFlaps'][arm]}; first high-load segment without "
                  f"preemptions (0-based, one decision per segment): "
                  f"{ad['firstCleanHighLoadSegment']}. Changes"
                  f"{' (first run)' if m.get('repeats', 1) > 1 else ''}:", ""]
        lines += [f"- {d['from']} → {d['to']}: {d['reason']}" for d in changes] or [
            "- none"]
        last = decisions[-1]["reason"] if decisions else None
        if last and not changes:
            lines += [f"- last decision: {last}"]
        lines.append("")
    return lines + _goal_lines(m)

def _minutes(doc: dict[str, Any]) -> str:
    """How long the measured run took, from its own record."""
    m = doc.get("measured") or {}
    if "wallSeconds" not in m:
        return "its run time is in the JSON"
    return (f"the run below took {m['wallSeconds'] / 60:.0f} min for {m.get('repeats', 1)} "
            "interleaved run(s) of every arm on two cores")


def _repeats(m: dict[str, Any], arm: str) -> list[list[dict[str, Any]]]:
    """An arm's segments, one list per repeat (a run without repeats is one)."""
    segs = m["segments"][arm]
    return [[x for x in segs if x.get("repeat", 0) == r]
            for r in sorted({x.get("repeat", 0) for x in segs})]


def _ratio(m: dict[str, Any], arm: str, best: dict[str, Any], key: str) -> str:
    row = next(r for r in m["rows"] if r["arm"] == arm)
    return f"{row[key] / best[key]:.3f}" if best[key] else "n/a"


def _caps_text(caps: list[Any]) -> str:
    if caps and isinstance(caps[0], list):
        return " / ".join(" ".join(str(c) for c in run) for run in caps)
    return " ".join(str(c) for c in caps)


def _goal_lines(m: dict[str, Any]) -> list[str]:
    """The adaptive controller's goals against the measured numbers (one column per
    adaptive arm), and how to read them."""
    arms = m["adaptiveArms"]
    cool = m["policy"]["cooldownSeconds"]
    rows = {r["arm"]: r for r in m["rows"]}

    def gaps(arm: str) -> list[float]:
        out = []
        for segs in _repeats(m, arm):
            last = None
            for i, sg in enumerate(segs):
                if sg["restart_s"] > 0:
                    if last is not None:
                        out.append(sum(x["duration_s"] + x["restart_s"]
                                       for x in segs[last + 1:i + 1]))
                    last = i
        return out

    def late(arm: str) -> tuple[float, int]:
        """Preemptions and completed requests in the high-load segments after the second
        decision of KV pressure, over every run."""
        segs = [sg for run in _repeats(m, arm) for sg in [x for x in run if x["phase"] == 1][2:]]
        return sum(x["preemptions"] for x in segs), sum(x["completed"] for x in segs)

    def yes(ok: bool) -> str:
        return "yes" if ok else "no"

    cells: dict[str, list[str]] = {}
    for arm in arms:
        ad, ratio, g = rows[arm], m["ratioToBestStatic"][arm] or 0, gaps(arm)
        late_pre, late_req = late(arm)
        share = late_pre / late_req if late_req else 0.0
        roll = (f"{ad['rollouts']} rollouts, shortest gap {min(g):.0f} s: {yes(min(g) >= cool)}"
                if g else f"{ad['rollouts']} rollout(s): yes")
        cells[arm] = [f"{ratio} x: {yes(ratio >= 0.9)}",
                      f"{late_pre:.0f} preemption(s) in {late_req} requests after the second "
                      f"decision ({share:.1%}; the policy's line is "
                      f"{m['policy'].get('min_preemption_share', 0):.0%}): "
                      f"{yes(share <= m['policy'].get('min_preemption_share', 0))}", roll,
                      f"{m['adaptiveFlaps'][arm]}: {yes(m['adaptiveFlaps'][arm] == 0)}"]
    goals = ["goodput ≥ 0.90 x best static",
             "preemptions stop within 2 decision intervals of KV pressure (at most the "
             "policy's min_preemption_share of requests after them)",
             f"≤ 1 rollout per cooldown ({cool:g} s)", "no flaps"]
    lines = ["| goal of the adaptive controller | " + " | ".join(arms) + " |",
             "|---|" + "---|" * len(arms)]
    lines += [f"| {goal} | " + " | ".join(cells[a][i] for a in arms) + " |"
              for i, goal in enumerate(goals)]
    phase0 = [r["perPhase"][0]["goodputTokS"] for r in m["rows"]]
    best = rows[m["bestStatic"]]
    lowest = min((r for r in m["rows"] if r["arm"] not in arms),
                 key=lambda r: r["preemptions"])
    best_segs = [x["good_tokens"] / x["duration_s"] for x in m["segments"][m["bestStatic"]]
                 if x["phase"] == 1 and x["duration_s"]]
    seg_lo, seg_hi = min(best_segs), max(best_segs)
    lines += [
        "", "How to read this:", "",
        f"- **Noise.** The 4-client phase runs the same configuration in every arm until a "
        f"cap matters, yet its goodput ranges {min(phase0):.0f}-{max(phase0):.0f} tok/s; "
        f"the 48-client segments of {best['arm']} alone range {seg_lo:.0f}-{seg_hi:.0f} "
        "tok/s. The two cores are shared by the engine, its API server, the load "
        "generator, Prometheus and whatever else runs on the machine. Differences below "
        "~30% between arms are not significant here" + ("; one run per arm, no "
        "interleaving." if m.get("repeats", 1) == 1 else
        f"; {m['repeats']} interleaved runs per arm (their goodput above)."),
    ]
    return [*lines, *_reading_notes(m, best, lowest), ""]


def _reading_notes(m: dict[str, Any], best: dict[str, Any],
                   lowest: dict[str, Any]) -> list[str]:
    """What the run says about preemption and queueing, from its own figures."""
    ttft_slo = m["slo"]["ttftMs"]
    statics = [r for r in m["rows"] if r["arm"] not in m["adaptiveArms"]]
    clean = [r for r in statics if r["preemptions"] <= lowest["preemptions"] + 5]
    preempting = [r for r in statics if r not in clean]
    ttfts = [r["ttftP95Ms"] for r in m["rows"]]
    peak = m["phases"][1]["concurrency"]
    notes = []
    if clean and preempting:
        c = max(clean, key=lambda r: r["goodputTokS"])
        p = max(preempting, key=lambda r: r["goodputTokS"])
        pays = p["goodputTokS"] > c["goodputTokS"]
        notes.append(
            f"- **Preemption on this engine.** The best static cap that (almost) never "
            f"preempted, {c['arm']} ({c['preemptions']} preemptions), served "
            f"{c['goodputTokS']:.0f} tok/s of goodput at TPOT p95 {c.get('tpotP95Ms')} ms; "
            f"the best that preempted, {p['arm']} ({p['preemptions']}), "
            f"{p['goodputTokS']:.0f} tok/s at {p.get('tpotP95Ms')} ms. "
            + ("Recomputing a 128-token prompt on a 2-layer model costs little, so a batch "
               "above what the KV cache holds still pays here: the goals of stopping "
               "preemptions (Avoid) and of matching the best static goodput pull apart on "
               "this engine, and `spec.adaptation.preemptions: Tolerate` is the setting "
               "for engines like it." if pays else
               "Preempting did not pay here: the cap that fits the KV cache serves as "
               "much, without stalling streams."))
    notes.append(
        f"- **Queueing.** {peak} clients are several times what the KV cache holds at full "
        f"length, so requests queue at every cap: TTFT p95 {min(ttfts)}-{max(ttfts)} ms "
        f"across arms, against the {ttft_slo / 1000:g} s objective. The chat-objective "
        "line above scores the same requests against a 2 s first token.")
    return notes


HISTORY = ROOT / "benchmarks" / "HISTORY.md"


def write_results(doc: dict[str, Any], path: Path = HISTORY) -> None:
    """Replace (or append) this benchmark's section of HISTORY.md: it is superseded by
    :mod:`benchmarks.adapt_live`, which owns RESULTS.md's Adaptation section."""
    replace_section("adaptation-step-trace", render_markdown(doc), path)


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "data" / "adapt_benchmark.json"))
    p.add_argument("--simulate-only", action="store_true")
    p.add_argument("--static", default="8,10,16", help="static caps besides the default")
    p.add_argument("--scale", type=float, default=1.0, help="scale prompts per segment")
    p.add_argument("--slo-ttft-ms", type=float, default=20000)
    p.add_argument("--slo-tpot-ms", type=float, default=15)
    p.add_argument("--cooldown", type=float, default=30.0, help="adaptive arm cooldown (s)")
    p.add_argument("--max-step-percent", type=int, default=90)
    p.add_argument("--repeats", type=int, default=2,
                   help="interleaved runs of every arm (figures are over all of them)")
    p.add_argument("--write-results", action="store_true",
                   help="only render the JSON into its HISTORY.md section (superseded "
                   "by benchmarks.adapt_live, which writes RESULTS.md's Adaptation)")
    a = p.parse_args(argv)
    if a.write_results:
        write_results(json.loads(Path(a.out).read_text()))
        return 0

    out_path = Path(a.out)
    doc: dict[str, Any] = json.loads(out_path.read_text()) if out_path.exists() else {}
    doc["simulated"] = simulate_day()
    _say(json.dumps({k: v for k, v in doc["simulated"].items() if k != "changes"}))
    if not a.simulate_only:
        doc["measured"] = measure(a)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(doc, indent=1) + "\n")
    _say(f"wrote {out_path}")
    return 0


def measure(a: argparse.Namespace) -> dict[str, Any]:
    """Part 1: every arm on the real engine (holds the vLLM lock throughout)."""
    s = a.scale
    phases = [Phase(4, 2, round(60 * s)), Phase(48, 6, round(120 * s)),
              Phase(8, 2, round(80 * s))]
    slo = (a.slo_ttft_ms / 1000, a.slo_tpot_ms / 1000)
    def spec(preemptions: str) -> LLMServiceSpec:
        return LLMServiceSpec.model_validate({
            "model": {"name": "tiny"},
            "adaptation": {"mode": "Apply", "cooldownSeconds": int(a.cooldown),
                           "maxStepPercent": a.max_step_percent, "preemptions": preemptions},
            "workload": {"slo": {"ttftP95Ms": a.slo_ttft_ms, "itlP95Ms": a.slo_tpot_ms}},
        })
    policy = PolicySettings()
    model = ensure_tiny_llama(Path("/tmp/llmop-models"), VLLM_PY)
    logdir = Path("/tmp/llmop-adapt-bench")
    logdir.mkdir(exist_ok=True)
    arms: list[tuple[str, int, bool, str]] = [
        ("adaptive", DEFAULT_CAP, True, "Avoid"),
        ("adaptive Tolerate", DEFAULT_CAP, True, "Tolerate"),
        (f"default {DEFAULT_CAP}", DEFAULT_CAP, False, "Avoid")]
    arms += [(f"static {c}", int(c), False, "Avoid") for c in a.static.split(",") if c]
    runs: dict[str, list[list[Segment]]] = {name: [] for name, *_ in arms}
    t0 = time.monotonic()
    with vllm_lock():
        worker = BenchWorker()
        try:
            # Interleaved repeats (A B C .. A B C ..): a slow spell of the shared machine
            # falls on every arm instead of on one.
            for rep in range(a.repeats):
                for name, cap, adaptive, preemptions in arms:
                    _say(f"repeat {rep + 1} of {a.repeats}: {name}")
                    runs[name].append(run_arm(name, cap, adaptive, phases, model, worker, slo,
                                              spec(preemptions), policy, logdir))
        finally:
            worker.close()
    rows = [summarize_runs(name, runs[name], a.cooldown) for name, *_ in arms]
    segs_doc = {name: [{**{k: v for k, v in asdict(x).items()
                           if k not in ("ttfts_s", "tpots_s")}, "repeat": rep}
                       for rep, segs in enumerate(runs[name]) for x in segs]
                for name, *_ in arms}
    adaptive_arms = [name for name, _c, adaptive, _p in arms if adaptive]
    statics = [r for r in rows if r["arm"] not in adaptive_arms]
    best = max(statics, key=lambda r: r["goodputTokS"])

    def changes(arm: str) -> list[list[tuple[float, int, int]]]:
        """Each repeat's changes (segment index, from, to): flaps are counted per repeat."""
        return [[(float(i), d["decision"]["from"], d["decision"]["to"])
                 for i, d in enumerate(x for x in segs_doc[arm] if x["repeat"] == rep)
                 if d["decision"] and d["decision"]["action"] != "hold"]
                for rep in range(a.repeats)]
    return {
        "engine": "vLLM CPU 0.32, tiny Llama, KV 4,096 tokens, 128 in / 256 out",
        "phases": [asdict(ph) for ph in phases],
        "slo": {"ttftMs": a.slo_ttft_ms, "tpotMs": a.slo_tpot_ms},
        "interactiveSlo": {"ttftMs": INTERACTIVE_SLO[0] * 1000,
                           "tpotMs": INTERACTIVE_SLO[1] * 1000},
        "policy": {"cooldownSeconds": a.cooldown, "maxStepPercent": a.max_step_percent,
                   **policy.model_dump()},
        "rows": rows,
        "bestStatic": best["arm"],
        "adaptiveArms": adaptive_arms,
        "ratioToBestStatic": {
            arm: round(next(r for r in rows if r["arm"] == arm)["goodputTokS"]
                       / best["goodputTokS"], 3) if best["goodputTokS"] else None
            for arm in adaptive_arms},
        "adaptiveFlaps": {arm: sum(flaps(ch, 1e9) for ch in changes(arm))
                          for arm in adaptive_arms},
        "repeats": a.repeats,
        "segments": segs_doc,
        "wallSeconds": round(time.monotonic() - t0),
    }


if __name__ == "__main__":
    sys.exit(main())

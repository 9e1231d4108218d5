"""Restart-free adaptation against rollouts and static caps, the load never pausing
(issue 12 item 5).

Everything a run does is fixed in ``benchmarks/configs/adapt.yaml`` (SLO, traces, arms,
repeats) before it starts. Measured on the real vLLM CPU engine (tiny generated Llama, a
KV cache of 4,096 tokens), scraped every second by a real Prometheus. Arms, per trace:

- **live**: the operator's policy (:func:`llm_operator.adaptation.policy.decide`) every
  few seconds; a change is written to the admission-cap file the engine module
  (:mod:`llm_operator.inpod.engine`, ``--scheduler-cls``) re-reads, as the kubelet refreshes the
  ConfigMap volume; the next decision waits for the engine's report
  (``llmop_admission_cap``) and the cooldown counts from it. One server, never restarted.
- **rollout**: the same policy; a change stops the server and starts it again with the
  new cap in force from its first request (one replica: the rollout is an outage; the
  restarted server carries the engine module with the cap in its file, which schedules
  as ``--max-num-seqs cap`` does). The clients keep sending: a refused request, or one
  cut by the stop, is a miss; the restart is wall time like any other.
- **static caps**: vLLM's default (128) and the caps that fit the KV cache, held for the
  whole trace (set through the admission cap of the same server before the trace starts;
  with the cap at the capacity, 128, the scheduler admits as vLLM's own does).

Goodput = output tokens/s of requests meeting the SLO (TTFT and per-request TPOT) over
the trace's wall time, restarts included. Closed-loop clients, ``clients`` per phase;
each request's prompt is random token ids (prefix caching off). ``os.getloadavg()`` is
recorded before and after every measurement. The JSON is rewritten after every
measurement (``partial`` until the last), so a cut run is usable.

Run (needs .venv-vllm and /usr/bin/prometheus)::

    .venv/bin/python -m benchmarks.adapt_live --out benchmarks/data/adapt_live.json
    .venv/bin/python -m benchmarks.adapt_live --write-results   # RESULTS.md from the JSON

Another run of the same committed config (e.g. after a policy change) is stored beside
the first, under its own label and RESULTS.md section::

    .venv/bin/python -m benchmarks.adapt_live --label adapt-live-2 \\
        --out benchmarks/data/adapt_live_2.json --note "why this run"
    .venv/bin/python -m benchmarks.adapt_live --write-results \\
        --out benchmarks/data/adapt_live_2.json --section adaptation-2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from tests.support.engine import LIVE_FLAGS, copy_engine_code, live_env, write_cap
from tests.support.prometheus import Target, running_prometheus
from tests.support.tiny_model import ensure_tiny_llama
from tests.support.vllm_load import engine_metric

from benchmarks.results_md import markers, replace_section
from llm_operator.adaptation import prometheus
from llm_operator.adaptation.policy import (
    AdaptationState,
    CapLimits,
    decide,
    policy_for_scrape,
    record,
)
from llm_operator.api.models import LLMServiceSpec
from llm_operator.inpod.tuner.server import VLLMServer, free_port, vllm_lock

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "configs" / "adapt.yaml"
OUT = ROOT / "benchmarks" / "data" / "adapt_live.json"
VLLM_PY = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
KEY = ("bench", "chat")
VOCAB = (10, 990)  # token ids drawn for prompts (the tiny model's vocabulary is 1,000)
# How the clients reuse connections: 0 opens a new connection for every request (no
# keep-alive), None keeps idle ones aiohttp's default 15 s, a number that many seconds.
# Runs adapt-live-1 and -2 reused connections and saw ServerDisconnectedError in every
# arm, static caps included: requests sent on a reused connection that vLLM's server
# (uvicorn, keep-alive 5 s) closed 3-8 s later without a byte, on this loaded machine.
# With a new connection per request none failed (benchmarks/client_keepalive.py).
CLIENT_KEEPALIVE_S: float | None = 0
SECTION = "adaptation"


def _say(text: str) -> None:
    sys.stderr.write(time.strftime("%H:%M:%S ") + text + "\n")
    sys.stderr.flush()


# --- the load: closed-loop streaming clients on the wall clock -------------------------


@dataclass
class Req:
    phase: int
    start: float
    ttft: float | None = None
    end: float | None = None
    tokens: int = 0
    error: str | None = None
    failed_at: float | None = None  # when the error came (monotonic), not for "cut"
    detail: str = ""  # the exception's text
    last_byte_at: float | None = None  # when the last streamed line came (monotonic)


@dataclass
class Trace:
    phases: list[dict[str, Any]]

    @property
    def seconds(self) -> float:
        return float(sum(p["seconds"] for p in self.phases))

    def phase_at(self, t: float) -> int:
        acc = 0.0
        for i, p in enumerate(self.phases):
            acc += p["seconds"]
            if t < acc:
                return i
        return len(self.phases) - 1


async def _one(session: aiohttp.ClientSession, url: str, model: str, phase: dict[str, Any],
               r: Req, rng: random.Random) -> None:
    body = {"model": model, "prompt": [rng.randint(*VOCAB) for _ in range(phase["input"])],
            "max_tokens": phase["output"], "ignore_eos": True, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    try:
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            if resp.status != 200:
                r.error = f"HTTP {resp.status}"
                return
            async for line in resp.content:
                r.last_byte_at = time.monotonic()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    break
                obj = json.loads(data)
                if obj.get("choices") and r.ttft is None:
                    r.ttft = time.monotonic() - r.start
                if obj.get("usage"):
                    r.tokens = int(obj["usage"]["completion_tokens"])
        if r.tokens < phase["output"]:
            r.error = f"short: {r.tokens} of {phase['output']} tokens"
        else:
            r.end = time.monotonic()
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
        r.error = type(exc).__name__
        r.detail = str(exc)[:160]
    if r.error is not None:
        r.failed_at = time.monotonic()


async def run_load(url: str, model: str, trace: Trace, retry_s: float, seed: int,
                   t0: float, reqs: list[Req],
                   keepalive_s: float | None = CLIENT_KEEPALIVE_S) -> None:
    """Closed-loop clients until the trace's wall time is over; requests still running
    then are cut (recorded with error 'cut'). ``keepalive_s``: how long an idle
    connection is kept for reuse (None: aiohttp's default)."""
    end = t0 + trace.seconds
    n = max(p["clients"] for p in trace.phases)
    conn = (aiohttp.TCPConnector(limit=0) if keepalive_s is None
            else aiohttp.TCPConnector(limit=0, force_close=True) if keepalive_s == 0
            else aiohttp.TCPConnector(limit=0, keepalive_timeout=keepalive_s))
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

        async def client(i: int) -> None:
            rng = random.Random(seed * 1000 + i)
            while (now := time.monotonic()) < end:
                pi = trace.phase_at(now - t0)
                if i >= trace.phases[pi]["clients"]:
                    await asyncio.sleep(0.1)
                    continue
                r = Req(phase=pi, start=now)
                reqs.append(r)
                await _one(session, url, model, trace.phases[pi], r, rng)
                if r.error is not None:
                    await asyncio.sleep(retry_s)

        tasks = [asyncio.create_task(client(i)) for i in range(n)]
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for r in reqs:
        if r.end is None and r.error is None:
            r.error = "cut"


# --- servers -------------------------------------------------------------------------


@dataclass
class Engine:
    """The vLLM server of a run (one port for its whole life, so one Prometheus)."""

    model: Path
    cfg: dict[str, Any]
    port: int
    code: Path
    cap_file: Path
    logdir: Path
    server: VLLMServer | None = None
    starts: int = 0

    def base_flags(self) -> list[str]:
        e = self.cfg["engine"]
        return ["--kv-cache-memory-bytes", str(e["kvCacheBytes"]), "--max-model-len",
                str(e["maxModelLen"]), *e.get("extraFlags", [])]

    def start(self, cap: int) -> float:
        """(Re)start the server: the admission scheduler with the capacity as runner slots
        and ``cap`` in the cap file from its first request (a rollout of a new cap: stop,
        then start; behaves as ``--max-num-seqs cap``). The seconds it took."""
        t0 = time.monotonic()
        self.stop()
        self.starts += 1
        write_cap(self.cap_file, f"{cap}\n")
        flags = [*self.base_flags(), "--max-num-seqs", str(self.cfg["engine"]["capacity"]),
                 *LIVE_FLAGS]
        env = live_env(self.code, self.cap_file, self.logdir / f"prom-{self.starts}")
        self.server = VLLMServer(model=str(self.model), python=str(VLLM_PY), port=self.port,
                                 lock=False, flags=flags, env=env, start_timeout_s=600,
                                 log_path=self.logdir / f"server-{self.starts:03d}.log")
        self.server.start()
        return time.monotonic() - t0

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_cap(self, cap: int, timeout_s: float) -> float:
        """Write the cap and wait until the engine reports it; the seconds it took."""
        t0 = time.monotonic()
        write_cap(self.cap_file, f"{cap}\n")
        while time.monotonic() - t0 < timeout_s:
            with contextlib.suppress(OSError, ValueError):
                if engine_metric(self.url, "llmop_admission_cap") == cap:
                    return time.monotonic() - t0
            time.sleep(0.2)
        raise RuntimeError(f"the engine did not report cap {cap} within {timeout_s} s")

    def idle(self, timeout_s: float = 120) -> None:
        """Wait until nothing runs or waits (the previous trace's requests are gone)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            with contextlib.suppress(OSError, ValueError):
                if (engine_metric(self.url, "vllm:num_requests_running")
                        + engine_metric(self.url, "vllm:num_requests_waiting")) == 0:
                    return
            time.sleep(0.5)


# --- one measurement ---------------------------------------------------------------


def _spec(cfg: dict[str, Any]) -> LLMServiceSpec:
    c = cfg["controller"]
    return LLMServiceSpec.model_validate({
        "model": {"name": "tiny"},
        "adaptation": {"mode": "Apply", "cooldownSeconds": c["cooldownSeconds"],
                       "maxStepPercent": c["maxStepPercent"], "preemptions": c["preemptions"],
                       "intervalSeconds": c["intervalSeconds"]},
        "workload": {"slo": {"ttftP95Ms": cfg["slo"]["ttftMs"],
                             "itlP95Ms": cfg["slo"]["tpotMs"]}},
    })


async def _controller(eng: Engine, cfg: dict[str, Any], prom_url: str, mode: str,
                      t0: float, end: float, log: dict[str, Any]) -> None:
    """The operator's policy every interval; ``mode`` live (cap file) or rollout."""
    c = cfg["controller"]
    spec = _spec(cfg)
    settings = policy_for_scrape(c["windowSeconds"], 1.0)
    limits = CapLimits(plan_max_num_seqs=cfg["engine"]["capacity"])
    client = prometheus.connect(prom_url)
    cap = cfg["engine"]["defaultMaxNumSeqs"]
    state = AdaptationState(current=cap)
    while True:
        await asyncio.sleep(c["intervalSeconds"])
        if time.monotonic() >= end - 1:
            return
        now = time.time()
        found = await asyncio.to_thread(prometheus.fetch_observations, client, [KEY], now,
                                        c["windowSeconds"])
        obs = found.get(KEY)
        d = decide(obs, state, spec, now, limits=limits, settings=settings)
        entry: dict[str, Any] = {"t": round(time.monotonic() - t0, 1), "action": d.action.value,
                                 "from": d.current, "to": d.value, "reason": d.reason}
        log["decisions"].append(entry)
        if not (d.changed and d.value is not None):
            continue
        _say(f"    t={entry['t']}s {d.current} -> {d.value}: {d.reason[:100]}")
        state = record(state, d, settings)
        ts = time.monotonic()
        try:
            if mode == "live":
                entry["reportSeconds"] = round(await asyncio.to_thread(
                    eng.set_cap, d.value, c["reportTimeoutSeconds"]), 2)
            else:
                await asyncio.to_thread(eng.start, d.value)
                entry["restartSeconds"] = round(time.monotonic() - ts, 1)
                log["restarts"].append([round(ts - t0, 1), round(time.monotonic() - t0, 1)])
        except Exception as exc:  # noqa: BLE001 - recorded; the arm goes on at the old cap
            entry["error"] = repr(exc)
            continue
        # The cooldown counts from the report / the restart's completion.
        state = state.model_copy(update={"last_change_at": time.time()})
        log["caps"].append([round(time.monotonic() - t0, 1), d.value])


def measure(eng: Engine, cfg: dict[str, Any], prom_url: str, trace_name: str, arm: str,
            repeat: int, seed: int) -> dict[str, Any]:
    """One arm on one trace."""
    tcfg = cfg["traces"][trace_name]
    trace = Trace(tcfg["phases"])
    static = tcfg["static"].get(arm)
    default = cfg["engine"]["defaultMaxNumSeqs"]
    mode = "static" if static is not None else arm
    # Before the trace (not timed): the server as the arm starts it, idle.
    if eng.server is None:
        eng.start(default)
    eng.idle()
    eng.set_cap(static if static is not None else default,
                cfg["controller"]["reportTimeoutSeconds"])
    pre0 = engine_metric(eng.url, "vllm:num_preemptions_total")
    log: dict[str, Any] = {"decisions": [], "restarts": [],
                           "caps": [[0.0, static if static is not None else default]]}
    reqs: list[Req] = []
    load_before = os.getloadavg()
    t0 = time.monotonic()

    async def both() -> None:
        tasks = [run_load(eng.url, str(eng.model), trace, cfg["load"]["retrySeconds"], seed,
                          t0, reqs)]
        if mode in ("live", "rollout"):
            tasks.append(_controller(eng, cfg, prom_url, mode, t0, t0 + trace.seconds, log))
        await asyncio.gather(*tasks)

    asyncio.run(both())
    wall = time.monotonic() - t0
    # Preemptions counted on the server that ends the trace (a restart resets them).
    pre = engine_metric(eng.url, "vllm:num_preemptions_total") - (pre0 if not log["restarts"]
                                                                   else 0)
    doc = score(reqs, cfg["slo"], trace, wall, t0)
    doc.update({"trace": trace_name, "arm": arm, "repeat": repeat, "seed": seed,
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "loadavgBefore": [round(x, 2) for x in load_before],
                "loadavgAfter": [round(x, 2) for x in os.getloadavg()],
                "preemptions": round(pre), **log,
                "restartSeconds": round(sum(b - a for a, b in log["restarts"]), 1)})
    return doc


def score(reqs: list[Req], slo: dict[str, Any], trace: Trace, wall: float,
          t0: float = 0.0) -> dict[str, Any]:
    """Goodput and misses over the trace's wall time (restarts included); every failed
    request's second into the trace, phase and kind (``errorsAt``), to set beside the
    cap changes."""
    ttft_s, tpot_s = slo["ttftMs"] / 1000, slo["tpotMs"] / 1000

    def tpot(r: Req) -> float:
        assert r.end is not None and r.ttft is not None
        return (r.end - r.start - r.ttft) / (r.tokens - 1) if r.tokens > 1 else 0.0

    done = [r for r in reqs if r.end is not None and r.ttft is not None]
    good = [r for r in done if r.ttft <= ttft_s and tpot(r) <= tpot_s]
    errors: dict[str, int] = {}
    for r in reqs:
        if r.error is not None:
            key = r.error if r.error in ("cut",) else r.error.split(":")[0]
            errors[key] = errors.get(key, 0) + 1
    per_phase = []
    for pi, p in enumerate(trace.phases):
        g = [r for r in good if r.phase == pi]
        per_phase.append({"phase": pi, "goodTokens": sum(r.tokens for r in g),
                          "goodputTokS": round(sum(r.tokens for r in g) / p["seconds"], 1),
                          "requests": sum(1 for r in reqs if r.phase == pi),
                          "good": len(g)})

    def p95(xs: list[float]) -> float | None:
        if not xs:
            return None
        s = sorted(xs)
        return s[min(len(s) - 1, math.ceil(0.95 * len(s)) - 1)]

    return {
        "wallSeconds": round(wall, 1),
        "goodTokens": sum(r.tokens for r in good),
        "outputTokens": sum(r.tokens for r in done),
        "goodputTokS": round(sum(r.tokens for r in good) / wall, 1),
        "outputTokS": round(sum(r.tokens for r in done) / wall, 1),
        "requests": len(reqs), "completed": len(done), "good": len(good),
        "missed": len(reqs) - len(good), "failed": sum(v for k, v in errors.items()
                                                       if k != "cut"),
        "errors": errors,
        # [second into the trace, phase, kind, seconds since the request was sent,
        #  seconds since its last streamed line (None: none came), the exception's text]
        "errorsAt": [[round(r.failed_at - t0, 1), r.phase, r.error.split(":")[0],
                      round(r.failed_at - r.start, 2),
                      None if r.last_byte_at is None else round(r.failed_at - r.last_byte_at, 2),
                      r.detail]
                     for r in reqs if r.error is not None and r.failed_at is not None],
        "ttftP95Ms": round((p95([r.ttft for r in done if r.ttft]) or 0) * 1000),
        "tpotP95Ms": round((p95([tpot(r) for r in done]) or 0) * 1000, 1),
        "perPhase": per_phase,
    }


# --- the run ---------------------------------------------------------------------------


def arms_of(cfg: dict[str, Any], trace: str) -> list[str]:
    return ["live", "rollout", *cfg["traces"][trace]["static"]]


def plan(cfg: dict[str, Any]) -> list[tuple[int, str, str]]:
    """(repeat, trace, arm) in run order: every (trace, arm) once per repeat, each trace's
    arm order rotated by one per repeat."""
    out = []
    for rep in range(cfg["repeats"]):
        for trace in cfg["traces"]:
            arms = arms_of(cfg, trace)
            k = rep % len(arms)
            out += [(rep, trace, a) for a in arms[k:] + arms[:k]]
    return out


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=False).stdout.strip()


def run(config: Path, out: Path, only: list[str] | None, scale: float,
        repeats: int | None, label: str | None = None, note: str | None = None,
        ) -> dict[str, Any]:
    cfg = yaml.safe_load(config.read_text())
    config_label = cfg["label"]
    if label:  # another run of the same committed config: its own label
        cfg["label"] = label
    if scale != 1.0 or repeats is not None or only:
        cfg["label"] += "-smoke"
    if scale != 1.0:
        for t in cfg["traces"].values():
            for p in t["phases"]:
                p["seconds"] = max(3, round(p["seconds"] * scale))
    if repeats is not None:
        cfg["repeats"] = repeats
    if only:
        cfg["traces"] = {k: v for k, v in cfg["traces"].items() if k in only}
    doc: dict[str, Any] = {
        "config": cfg, "configFile": str(config.relative_to(ROOT)),
        "configLabel": config_label,
        "configGitBlob": _git("hash-object", str(config)), "commit": _git("rev-parse", "HEAD"),
        "engine": "vLLM CPU 0.32, tiny generated Llama (2 layers, hidden 128)",
        "client": {"keepaliveSeconds": CLIENT_KEEPALIVE_S},
        "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "partial": True, "measurements": [],
        **({"note": note} if note else {}),
    }
    order = plan(cfg)
    logdir = Path("/tmp/llmop-adapt-live")
    logdir.mkdir(exist_ok=True)
    model = ensure_tiny_llama(Path("/tmp/llmop-models"), VLLM_PY)
    code = copy_engine_code(logdir / f"code-{os.getpid()}")
    eng = Engine(model, cfg, free_port(), code, logdir / "admission-cap", logdir)
    t_start = time.monotonic()
    with vllm_lock(), running_prometheus(
            [Target(f"127.0.0.1:{eng.port}", {"llmservice": KEY[1], "namespace": KEY[0]})]
    ) as prom:
        try:
            for i, (rep, trace, arm) in enumerate(order):
                _say(f"[{i + 1}/{len(order)}] repeat {rep + 1}: {trace} / {arm}")
                m = measure(eng, cfg, prom.url, trace, arm, rep, seed=i)
                _say(f"  goodput {m['goodputTokS']} tok/s, good {m['good']}/{m['requests']}, "
                     f"failed {m['failed']}, restarts {len(m['restarts'])} "
                     f"({m['restartSeconds']} s), preempt {m['preemptions']}, load "
                     f"{m['loadavgBefore'][0]}")
                doc["measurements"].append(m)
                doc["wallSeconds"] = round(time.monotonic() - t_start)
                doc["serverStarts"] = eng.starts
                out.write_text(json.dumps(doc, indent=1) + "\n")
        finally:
            eng.stop()
    doc["partial"] = len(doc["measurements"]) < len(order)
    doc["wallSeconds"] = round(time.monotonic() - t_start)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


# --- RESULTS.md --------------------------------------------------------------------------


def _stats(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """Per trace and arm: mean and spread of goodput over repeats; the goals."""
    cfg = doc["config"]
    out: dict[str, Any] = {}
    for trace in cfg["traces"]:
        ms = [m for m in doc["measurements"] if m["trace"] == trace]
        if not ms:
            continue
        rows = {}
        for arm in arms_of(cfg, trace):
            am = [m for m in ms if m["arm"] == arm]
            if not am:
                continue
            g = [m["goodputTokS"] for m in am]
            mean, sd = _stats(g)
            rows[arm] = {"n": len(am), "mean": mean, "sd": sd, "each": g,
                         "failed": sum(m["failed"] for m in am),
                         "missed": sum(m["missed"] for m in am),
                         "cut": sum(m["errors"].get("cut", 0) for m in am),
                         "requests": sum(m["requests"] for m in am),
                         "restarts": sum(len(m["restarts"]) for m in am),
                         "restartSeconds": sum(m["restartSeconds"] for m in am) / len(am),
                         "preemptions": sum(m["preemptions"] for m in am) / len(am),
                         "ttftP95Ms": statistics.median(m["ttftP95Ms"] for m in am),
                         "tpotP95Ms": statistics.median(m["tpotP95Ms"] for m in am),
                         "changes": sum(len(m["caps"]) - 1 for m in am) / len(am),
                         "reportSeconds": [d["reportSeconds"] for m in am
                                           for d in m["decisions"] if "reportSeconds" in d],
                         "perPhase": [statistics.mean(m["perPhase"][i]["goodputTokS"]
                                                      for m in am)
                                      for i in range(len(cfg["traces"][trace]["phases"]))],
                         "caps": [m["caps"] for m in am]}
        statics = [a for a in cfg["traces"][trace]["static"] if a in rows]
        best = max(statics, key=lambda a: rows[a]["mean"]) if statics else None
        out[trace] = {"rows": rows, "bestStatic": best,
                      "perPhaseBest": per_phase_best(cfg["traces"][trace]["phases"],
                                                     {a: rows[a]["perPhase"] for a in statics})}
    return out


def per_phase_best(phases: list[dict[str, Any]],
                   static_phases: dict[str, list[float]]) -> dict[str, Any] | None:
    """What adapting could gain at most over the static arms measured: in each phase the
    static cap with the best mean goodput there, switched to at once and for free, over
    the whole trace (goodput per phase weighted by the phase's seconds). A policy can
    exceed it only through a cap no static arm held."""
    if not static_phases:
        return None
    picks = [max(static_phases, key=lambda a: static_phases[a][i])  # noqa: B023
             for i in range(len(phases))]
    seconds = [float(p["seconds"]) for p in phases]
    goodput = sum(static_phases[a][i] * seconds[i] for i, a in enumerate(picks))
    return {"arms": picks, "goodputTokS": goodput / sum(seconds)}


def render_markdown(doc: dict[str, Any], section: str = SECTION,
                    source: str = "benchmarks/data/adapt_live.json") -> str:
    """The RESULTS.md section of one run: the first run owns ``adaptation`` (with the
    simulated day); another run of the same config gets its own section and heading."""
    cfg = doc["config"]
    s = summarize(doc)
    begin, end = markers(section)
    first = section == SECTION
    same = doc.get("configLabel", cfg["label"])
    render = "`.venv/bin/python -m benchmarks.adapt_live --write-results" + (
        "`" if first else f" --out {source} --section {section}`")
    n_done = len(doc["measurements"])
    n_all = len(plan(cfg))
    loads = [m["loadavgBefore"][0] for m in doc["measurements"]]
    slo = cfg["slo"]
    lines = [
        begin,
        ("## Adaptation: restart-free admission cap against rollouts and static caps"
         if first else f"## Adaptation, run {cfg['label']}: the same committed config as "
         f"{same}, measured again"),
        "",
        f"Run **{cfg['label']}**"
        + (f" (PARTIAL: {n_done} of {n_all} measurements)" if doc["partial"] else "") + ", "
        f"started {doc['started']} at commit `{doc['commit'][:10]}`; its SLO, traces and "
        f"arms are `{doc['configFile']}` (git blob `{doc['configGitBlob'][:10]}`), committed "
        "before the run" + (f" (as run {same})" if same != cfg["label"] else "")
        + f". Rendered from `{source}` by {render}; the "
        "harness is `benchmarks/adapt_live.py`. Earlier runs (segment-wise load that "
        "paused during restarts) are in [HISTORY.md](../HISTORY.md).",
        "",
        f"**Measured** on {doc['engine']}, KV cache 4,096 tokens, {doc['cpus']} CPU cores "
        "(the machine's load is given below), scraped every second by a real Prometheus. "
        f"SLO: TTFT ≤ {slo['ttftMs']:g} ms and TPOT ≤ {slo['tpotMs']:g} ms per request. "
        "Goodput = output tokens/s of requests meeting it over the trace's **wall time, "
        "restarts included**; the closed-loop clients never pause: a request refused or cut "
        "by a restart is a miss and the client retries after "
        f"{cfg['load']['retrySeconds']:g} s. " + _client_text(doc) + " Both adaptive arms "
        "run the operator's policy "
        f"(`decide`, preemptions={cfg['controller']['preemptions']}) every "
        f"{cfg['controller']['intervalSeconds']} s on a {cfg['controller']['windowSeconds']} s "
        f"window, cooldown {cfg['controller']['cooldownSeconds']} s, starting at vLLM's "
        f"default cap {cfg['engine']['defaultMaxNumSeqs']}: **live** writes the admission-cap "
        "file the engine re-reads (one server, never restarted); **rollout** restarts the "
        "server for every change (one replica, so an outage). Static caps are set "
        "through the admission cap on the live arm's server before the trace. A rollout "
        "restarts that same server with the new cap in force from its first request (stop, "
        "then start: the cost of a rollout of one replica). The denominator is the wall "
        "time from the trace's start until the arm is done, so a restart still running when "
        "the trace ends counts in full. \"Cut\" requests were in flight when the trace "
        "ended (every arm has some) or stalled by a restart; a rollout arm's preemptions "
        "are counted since its last restart (the counter starts again).",
        "",
        "What this does not show: here the cap file is written on the engine's own disk, so "
        "the live arm's cap is in force about a second after a decision; on a cluster the "
        "kubelet refreshes the ConfigMap volume first (an expected 60-90 s, not measured: "
        "no kubelet runs here), so a live change there lands later than here. The rollout "
        "arm stops the server as the harness's `VLLMServer.stop` does (SIGINT, then kill "
        "after 30 s), not with the rendered pod's `--shutdown-timeout 120` drain: with one "
        "replica either way the server serves nothing new until the new one is ready. "
        "A vLLM start here takes about 40 s on an idle machine and minutes on this loaded "
        "one; on GPUs loading a large model takes minutes too.",
        "",
        f"{cfg['repeats']} interleaved repeats (every trace and arm once per repeat, the arm "
        "order rotated by one each repeat), so a slow spell of the shared machine spreads "
        f"over the arms. Machine load (1-min loadavg before each measurement): "
        + (f"median {statistics.median(loads):.1f}, range {min(loads):.1f}-{max(loads):.1f} "
           "on 2 cores" if loads else "n/a")
        + f"; the run took {doc.get('wallSeconds', 0) / 60:.0f} min."
        + (f" {doc['note']}" if doc.get("note") else ""),
        "",
    ]
    goal_rows: list[tuple[str, float, float | None, bool | None]] = []
    for trace, t in s.items():
        phases = cfg["traces"][trace]["phases"]
        desc = " → ".join(f"{p['clients']} clients {p['input']}/{p['output']} tok "
                          f"{p['seconds']} s" for p in phases)
        lines += [f"### Trace `{trace}`: {desc}", "",
                  "| arm | goodput tok/s mean ± sd | per repeat | per phase (mean) | missed / "
                  "requests | of them failed / cut | rollouts per run (restart s) | cap "
                  "changes per run | preemptions per run | TTFT p95 ms | TPOT p95 ms |",
                  "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for arm, r in t["rows"].items():
            bold = "**" if arm == t["bestStatic"] else ""
            lines.append(
                f"| {bold}{arm}{bold} | {r['mean']:.0f} ± {r['sd']:.0f} | "
                f"{' / '.join(f'{x:.0f}' for x in r['each'])} | "
                f"{' → '.join(f'{x:.0f}' for x in r['perPhase'])} | {r['missed']} / "
                f"{r['requests']} | {r['failed']} / {r['cut']} | {r['restarts'] / r['n']:.1f} "
                f"({r['restartSeconds']:.0f}) | "
                f"{r['changes']:.1f} | {r['preemptions']:.0f} | {r['ttftP95Ms']:.0f} | "
                f"{r['tpotP95Ms']:.1f} |")
        caps_live = t["rows"].get("live", {}).get("caps")
        if caps_live:
            lines += ["", "Caps of the live arm, (second, cap) per repeat: " + "; ".join(
                " ".join(f"({a:g}, {b})" for a, b in run) for run in caps_live) + "."]
            rep = t["rows"]["live"]["reportSeconds"]
            if rep:
                lines += [f"Engine report after a cap write: median "
                          f"{statistics.median(rep):.1f} s, max {max(rep):.1f} s ({len(rep)} "
                          "changes)."]
        lines.append("")
        best = t["bestStatic"]
        live = t["rows"].get("live")
        if best and live:
            b = t["rows"][best]
            ratio = live["mean"] / b["mean"] if b["mean"] else float("nan")
            # The spread of the ratio: the two arms' relative sd added in quadrature.
            rel = math.hypot(live["sd"] / live["mean"] if live["mean"] else 0,
                             b["sd"] / b["mean"] if b["mean"] else 0)
            # Issue 12's goals: 0.95 x the best static cap in hindsight on the step and
            # burst traces, 1.2 x it on the request-mix shift.
            line = 1.2 if trace == "mix" else 0.95
            goal_rows.append((f"live ≥ {line:g} x best static in hindsight (`{trace}`: "
                              f"{best})", ratio, rel, ratio >= line))
            bound = t["perPhaseBest"]
            if bound and b["mean"]:
                goal_rows.append((f"(bound, not a goal) each phase's best static cap, "
                                  f"switched at once for free ({' → '.join(bound['arms'])}) "
                                  f"/ best static (`{trace}`)",
                                  bound["goodputTokS"] / b["mean"], None, None))
            dflt = t["rows"].get("default 128")
            if trace == "mix" and dflt:
                r2 = live["mean"] / dflt["mean"] if dflt["mean"] else float("nan")
                rel2 = math.hypot(live["sd"] / live["mean"] if live["mean"] else 0,
                                  dflt["sd"] / dflt["mean"] if dflt["mean"] else 0)
                goal_rows.append(("(not a goal) live / vLLM's default (`mix`)", r2, rel2,
                                  None))
            ro = t["rows"].get("rollout")
            if ro and ro["mean"]:
                goal_rows.append((f"(not a goal) live / rollout (`{trace}`)",
                                  live["mean"] / ro["mean"], None, None))
    fails = sum(r["failed"] for t in s.values() for a, r in t["rows"].items() if a == "live")
    # Failures by kind, live arm against the static arms on the same server: an error the
    # static arms see as well (a dropped connection on the loaded machine) is not the
    # adaptation's doing.
    kinds: dict[str, Counter[str]] = {"live": Counter(), "static": Counter()}
    for m in doc["measurements"]:
        side = "live" if m["arm"] == "live" else \
            "static" if m["arm"] in cfg["traces"][m["trace"]]["static"] else None
        if side:
            kinds[side].update({k: v for k, v in m["errors"].items()
                                if k not in ("cut", "short")})

    def _kinds(c: Counter[str]) -> str:
        return ", ".join(f"{k} {v}" for k, v in c.most_common()) or "none"
    lines += ["### Goals, from this run's own figures", "",
              "| goal | ratio of means | ± (relative sd of the two arms) | met |",
              "|---|---:|---:|---|"]
    for name, ratio, spread, ok in goal_rows:
        met = "" if ok is None else ("**met**" if ok else "**not met**")
        line = 0.95 if "0.95 x" in name else 1.2
        if ok is not None and spread is not None and abs(ratio - line) < spread * ratio:
            met += " (within the noise)"
        sd_text = "" if spread is None else f"{spread:.0%}"
        lines.append(f"| {name} | {ratio:.2f} | {sd_text} | {met} |")
    lines += [f"| 0 requests failed because of live adaptation | {fails} failed in the live "
              f"arm ({_kinds(kinds['live'])}); the static arms on the same server: "
              f"{_kinds(kinds['static'])} | | " + ("**met**" if fails == 0 else "**not met**")
              + " |", ""]
    if first:
        lines += _simulated_lines()
    lines += [end]
    return "\n".join(lines) + "\n"


def _client_text(doc: dict[str, Any]) -> str:
    keepalive = doc.get("client", {}).get("keepaliveSeconds")
    if keepalive is None:
        return ("The clients reused connections (aiohttp's default keep-alive): under "
                "load vLLM's server closed some reused connections while their requests "
                "waited, without a byte (ServerDisconnectedError), in every arm alike "
                "(see the section on the load generator's connections).")
    if keepalive == 0:
        return ("The clients open a new connection for every request (reused ones lost "
                "waiting requests to vLLM's server under load, in every arm alike: see the "
                "section on the load generator's connections).")
    return f"The clients close a connection idle for {keepalive:g} s."


def _simulated_lines() -> list[str]:
    """The simulated diurnal day (``benchmarks.adapt_benchmark --simulate-only``, stored in
    its JSON), kept in this section as that benchmark renders it."""
    from benchmarks import adapt_benchmark

    path = ROOT / "benchmarks" / "data" / "adapt_benchmark.json"
    if not path.exists():
        return []
    sim = json.loads(path.read_text()).get("simulated")
    if not sim:
        return []
    text = adapt_benchmark.render_markdown({"simulated": sim})
    body = text.split("### Simulated", 1)[1].rsplit(adapt_benchmark.END, 1)[0]
    return [f"### Simulated{body}".rstrip("\n").replace(
        "see the measured run above", "see the measured traces above"), ""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--write-results", action="store_true",
                   help="only render the JSON into its results section")
    p.add_argument("--results", type=Path, default=None,
                   help="the file to write (default: where the section lives)")
    p.add_argument("--smoke-scale", type=float, default=1.0,
                   help="scale every phase (a smoke run; labelled -smoke, not for RESULTS)")
    p.add_argument("--smoke-repeats", type=int, default=None)
    p.add_argument("--smoke-traces", default="", help="comma-separated traces (smoke)")
    p.add_argument("--label", default=None,
                   help="label of another run of the same committed config (stored in the "
                   "JSON beside the config's own label); use a new --out for it")
    p.add_argument("--note", default=None, help="a sentence stored in the JSON and RESULTS")
    p.add_argument("--section", default=SECTION,
                   help=f"RESULTS.md section to render into (default {SECTION}: the first "
                   "run; another run gets its own)")
    a = p.parse_args(argv)
    if a.write_results:
        replace_section(a.section, render_markdown(
            json.loads(a.out.read_text()), a.section,
            str(a.out.resolve().relative_to(ROOT)) if a.out.resolve().is_relative_to(ROOT)
            else str(a.out)), a.results)
        return 0
    if a.label and a.out.resolve() == OUT.resolve():
        p.error(f"--label {a.label} would overwrite the first run in {OUT.name}: give the "
                "new run its own --out (e.g. benchmarks/data/adapt_live_2.json)")
    # A background run (SIGINT ignored) stops cleanly on SIGTERM: servers, Prometheus.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run(a.config, a.out, [t for t in a.smoke_traces.split(",") if t], a.smoke_scale,
        a.smoke_repeats, a.label, a.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())

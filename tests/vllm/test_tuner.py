"""The tuner against the real vLLM CPU engine.

1. The tuning Job the operator renders, executed the way the kubelet would run it: the
   init container's command copies the package, then the tuner container's command,
   args and env run under the vLLM interpreter against a real vLLM, and the termination
   message it writes is what the operator would read. The search must find the
   known-better region of a space where one exists: 48 clients on a KV cache that holds
   them all run a batch of 48 whose decode steps are slow, while a cap of a few keeps
   steps fast at the price of queueing, which the loose TTFT objective allows. How slow
   and how fast depends on the machine and its load (a batch of 48: 39-41 ms ITL p95 on
   an idle machine here on one day, 51 ms under a concurrent build, 14-17 ms on a quiet
   new machine on another), so the ITL objective is not a constant: the test first
   measures, on this machine now, the ITL p95 of 48 clients with vLLM's default cap and
   of 6 clients (what a cap of 6 runs), and puts the objective at their geometric mean,
   the same factor from both sides. It requires that factor to be at least 1.4 (a
   regime the tuner can find). Where a step's fixed cost hides the batch's (a fast
   machine: 6.4 ms at 48 clients, 3.9 ms at 6 on CI one day), it calibrates a wider
   model sized from those two figures; where neither model gives the regime, the test
   says so and fails.
2. ``llm-operator tune --url`` against a KV-constrained server the test started (4,096
   KV tokens, 128 in / 256 out: 10 requests fit): the one-server concurrency sweep shows
   the knee: the running batch saturates at what the KV cache admits, preemptions
   appear above the fit and vanish below it. No restarts, so the cap is only predicted.

Measured on this machine (benchmarks/RESULTS.md, "Tuning"): in the KV-constrained
regime a cap near the fit removes the preemptions but changes goodput by only ~10-15%
(about the noise of one run), so that regime is shown by its knee, not by a goodput win.
Both tests hold the machine-wide vLLM lock while a server runs (the tuner's servers take
it themselves). Server starts: 2 + 1.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support import machine_load
from tests.support.tiny_model import ensure_tiny_llama, tiny_shape

from llm_operator.api.models import parse_llmservice
from llm_operator.inpod.tuner.result import TERMINATION_LIMIT, TuningResult, parse_result
from llm_operator.inpod.tuner.server import VLLMServer
from llm_operator.planning import make_plan
from llm_operator.rendering.pod import HF_CACHE_PATH, VLLM_CACHE_PATH
from llm_operator.settings import Settings
from llm_operator.tuning.fingerprint import tuning_fingerprint
from llm_operator.tuning.job import (
    CODE_PATH,
    INIT_CONTAINER,
    TERMINATION_LOG,
    TUNER_CONTAINER,
    WORK_DIR,
    build_tuning_job,
)
from llm_operator_sandbox.local_plan import rewrite_paths

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
LOCK = "/tmp/llmop-vllm.lock"

# A 13.6 M-parameter Llama (27 MB bf16): big enough that a decode step's time grows with
# the batch on the CPU. KV per token: 2 x 4 layers x 4 KV heads x 64 x 2 bytes = 4 KiB.
MID_MODEL = {"hidden": 512, "layers": 4, "heads": 8, "kv_heads": 4, "intermediate": 1536}
IN_TOKENS, OUT_TOKENS, CLIENTS = 128, 256, 48
# The rendered Job's workload: the decode step's time depends on the batch, not on how
# many tokens each request asks for, so 48 out shows the same regime in a fifth of the
# time of 256 (each paired decision needs at least 5 pairs of runs, and a CI machine
# measured 40-60 s per run at 128 out, 2026-11-27); a prefill joins fewer than 1 in 48
# of a request's steps, below the ITL p95.
JOB_OUT_TOKENS = 48
# The baseline, the verification of the sweep's best cap, and one more where that one
# loses. With two, CI (2026-12-06) once ended on a cap outside 2-32, most likely vLLM's
# defaults kept after the one verification lost (the log kept only the table's header).
MAX_TRIALS = 3
KV_ROOMY = 96 * 1024 * 1024  # 24,576 tokens: all 48 requests (18,432 tokens) fit
KV_TIGHT = 16 * 1024 * 1024  # 4,096 tokens: 10 whole requests fit
# On the CPU engine gpuMemoryUtilization sizes nothing and vLLM's default KV cache would
# take a share of the machine's memory: the rendered Job's server args get a KV cache of
# known size, the CPU stand-in for the GPU memory the plan sizes on a cluster.
CPU_KV_ARGS = f" --kv-cache-memory-bytes {KV_ROOMY}"
FIT = 4096 // (IN_TOKENS + OUT_TOKENS)
SLO_TTFT_MS = 30000
LOW_CLIENTS = 6  # the calibration's capped side: a batch of 6
MIN_FACTOR = 1.4  # the objective at least this far from both measured sides
# Runs of the batch of 48 the calibration takes the median of. One run was not enough: the
# first run on a fresh server measured ITL p95 59.3 ms (vLLM's own figure 24.5 ms) where
# the tuner's 15 later runs of the same load measured 26.4 ms, above the objective the
# one run gave (27.1 ms), and the test failed (2026-12-05; CI failed the same way, 39.9
# ms against an objective above it).
CALIBRATION_REPEATS = 3
# Where a decode step's fixed cost hides the batch's (a fast machine: CI measured ITL p95
# 6.4 ms at 48 clients and 3.9 ms at 6 with MID_MODEL, 2026-11-29), a wider model is
# calibrated instead: sized so the two sides would differ REGIME_RATIO-fold (a factor
# 1.73 from both, MIN_FACTOR needs 1.96-fold), if the batch of 48 stays below
# MAX_HIGH_MS (slow machines measure 39-51 ms with MID_MODEL and find the regime there).
REGIME_RATIO, MAX_HIGH_MS = 3.0, 60.0

pytestmark = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


def _service(max_trials: int, minutes: int, itl_ms: float,
             shape: dict[str, int]) -> dict[str, Any]:
    """An ITL-bound LLMService whose model (of ``shape``) sits on a volume (so the Job
    mounts it)."""
    return {
        "apiVersion": "llmops.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": "tiny-kv", "namespace": "ml", "uid": "0000-tiny-kv"},
        "spec": {
            "model": {
                "name": "tiny-kv",
                "volume": {"claimName": "models"},
                "architecture": {
                    "parameters": tiny_shape(**shape).parameters,
                    "numLayers": shape["layers"], "hiddenSize": shape["hidden"],
                    "numAttentionHeads": shape["heads"],
                    "numKeyValueHeads": shape["kv_heads"], "maxContext": 4096,
                },
            },
            "gpus": {"count": 1, "product": "L4"},
            # The KV cache size is added where the Job's commands run (see
            # CPU_KV_ARGS): the planner refuses --kv-cache-memory-bytes in extraArgs.
            "engine": {"maxModelLen": 2048},
            "workload": {
                "inputTokens": IN_TOKENS, "outputTokens": JOB_OUT_TOKENS,
                "concurrency": CLIENTS,
                # A capped server queues the other clients for seconds on 2 CPU cores:
                # the TTFT objective allows that; the ITL objective is what binds.
                "slo": {"ttftP95Ms": SLO_TTFT_MS, "itlP95Ms": itl_ms},
            },
            "tuning": {"maxTrials": max_trials, "maxDurationMinutes": minutes},
        },
    }


def _env_list_to_dict(env: list[dict[str, Any]]) -> dict[str, str]:
    out = {}
    for e in env:
        assert "value" in e, f"env {e['name']} needs a Secret; this test gives none"
        out[e["name"]] = e["value"]
    return out


def _itl_regime(model_dir: Path, tmp_path: Path) -> tuple[float, float, float]:
    """ITL p95 (ms) of CLIENTS clients with vLLM's default cap and of LOW_CLIENTS clients,
    on the roomy KV cache, and the seconds the run at CLIENTS took, measured now by the
    tuner's own measurement (``llm-operator tune --url``: its baseline at CLIENTS, one
    probe at LOW_CLIENTS)."""
    full = tmp_path / "calibration.json"
    server = VLLMServer(model=str(model_dir), python=str(VLLM_PYTHON),
                        log_path=tmp_path / "calibration-vllm.log",
                        flags=["--kv-cache-memory-bytes", str(KV_ROOMY), "--max-model-len",
                               "2048"])
    with server:  # holds the machine-wide lock while it runs
        cmd = [str(Path(sys.executable).with_name("llm-operator")), "tune", "--url",
               server.url, "--tokenizer", str(model_dir), "--vllm-python", str(VLLM_PYTHON),
               "--input-tokens", str(IN_TOKENS), "--output-tokens", str(JOB_OUT_TOKENS),
               "--concurrency", str(CLIENTS), "--slo-ttft-ms", str(SLO_TTFT_MS),
               "--slo-itl-ms", "1000", "--repeats", str(CALIBRATION_REPEATS),
               "--sweep-points", "1",
               "--hint-max-num-seqs", str(LOW_CLIENTS),
               "--max-num-seqs-levels", str(LOW_CLIENTS), "--output", str(full),
               "--log-dir", str(tmp_path / "calibration-logs")]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              env={**os.environ,
                                   "LLMOP_TERMINATION_LOG": str(tmp_path / "cal.msg")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    (trial,) = json.loads(full.read_text())["trials"]
    (probe,) = trial["probes"]
    assert probe["concurrency"] == LOW_CLIENTS
    runs = trial["runs"]
    assert len(runs) >= CALIBRATION_REPEATS, runs
    return (statistics.median(r["itl_p95_ms"] for r in runs), probe["itl_p95_ms"],
            statistics.median(r["duration_s"] for r in runs))


def _summary(result: TuningResult) -> str:
    """The result in one line: each arm's cap, ITL p95 and goodput, the paired interval
    against the defaults and the decision's sentence."""
    def arm(score: Any) -> str:
        if score is None:
            return "none"
        cap = score.settings.max_num_seqs
        return (f"cap {cap if cap is not None else 'default'} ITL p95 "
                f"{score.itl_p95_ms:.1f} ms goodput {score.goodput:.0f} tok/s")
    vs = result.versus_defaults
    interval = (f"{vs.low}-{vs.high}x over {vs.pairs} pairs" if vs is not None else "none")
    return (f"{result.state} after {result.trials} trial(s): best {arm(result.best)}; "
            f"defaults {arm(result.baseline)}; vs defaults {interval}; "
            f"decision: {result.decision or result.reason}")


def _factor(high: float, low: float) -> float:
    """How far the geometric-mean objective is from both measured sides."""
    return (high / low) ** 0.5 if low > 0 else 0.0


def _wider_model(high: float, low: float) -> dict[str, int] | None:
    """MID_MODEL widened so that the ITL p95 of a batch of CLIENTS and of LOW_CLIENTS,
    modelled as a fixed cost per step plus a cost per sequence that grows with the
    square of the width (fitted to ``high`` and ``low``, measured with MID_MODEL), would
    differ REGIME_RATIO-fold; None where the batch of CLIENTS would exceed MAX_HIGH_MS."""
    per_seq = (high - low) / (CLIENTS - LOW_CLIENTS)
    fixed = max(low - LOW_CLIENTS * per_seq, 0.0)
    need = (16.0 if per_seq <= 0 else
            (REGIME_RATIO - 1) * fixed / ((CLIENTS - REGIME_RATIO * LOW_CLIENTS) * per_seq))
    hidden = math.ceil(512 * math.sqrt(min(max(need, 2.0), 16.0)) / 256) * 256  # <= 2048
    if per_seq > 0 and fixed + CLIENTS * per_seq * (hidden / 512) ** 2 > MAX_HIGH_MS:
        return None
    return {**MID_MODEL, "hidden": hidden, "heads": hidden // 64, "intermediate": 3 * hidden}


@dataclass(frozen=True)
class Attempt:
    """One calibration and the rendered Job's run against the objective it set."""

    result: TuningResult
    itl_ms: float  # the objective
    measured: str  # the calibration's figures and who else used the CPUs meanwhile
    stdout: str  # the tuner's log: its trial table
    fingerprint: str
    work: Path  # the tuner's work folder

    @property
    def regime_held(self) -> bool:
        """The defaults, measured by the Job, still missed the calibrated objective."""
        return self.result.baseline is not None and self.result.baseline.itl_p95_ms > self.itl_ms

    def why(self) -> str:
        # One line first (CI shows a failure's first line in its summary, the last thing
        # it prints), then the tuner's own table (a str message is not truncated).
        return (f"{_summary(self.result)}; calibration: {self.measured}; objective "
                f"{self.itl_ms} ms\n{self.stdout[-4000:]}")


def _calibrate_and_tune(models: Path, tmp_path: Path) -> Attempt:
    """Calibrate the objective on this machine now, render the tuning Job for it and run
    the Job's containers as the kubelet would; what the operator would read back."""
    import kubernetes_validate

    tmp_path.mkdir()

    # The regime, created rather than assumed: the objective between what a batch of 48
    # and a batch of 6 measure here now, the same factor from both; on a machine where
    # MID_MODEL's steps cost about the same at both, a wider model's.
    measured: list[str] = []

    def calibrate(shape: dict[str, int]) -> tuple[Path, float, float, float]:
        model_dir = ensure_tiny_llama(models, VLLM_PYTHON, **shape)
        folder = tmp_path / f"calibration-{shape['hidden']}"
        folder.mkdir()
        before = machine_load.snapshot()
        high, low, run_s = _itl_regime(model_dir, folder)
        measured.append(f"hidden {shape['hidden']}: ITL p95 {high:.1f} ms at {CLIENTS} "
                        f"clients, {low:.1f} ms at {LOW_CLIENTS} ("
                        f"{machine_load.describe(before, machine_load.snapshot())})")
        return model_dir, high, low, run_s

    shape = MID_MODEL
    model_dir, high, low, run_s = calibrate(shape)
    if _factor(high, low) < MIN_FACTOR and (wider := _wider_model(high, low)) is not None:
        shape = wider
        model_dir, high, low, run_s = calibrate(shape)
    factor = _factor(high, low)
    assert factor >= MIN_FACTOR, f"no regime to tune on this machine now: {'; '.join(measured)}"
    itl_ms = round((high * low) ** 0.5, 1)
    print(f"calibration: {'; '.join(measured)}; objective {itl_ms} ms "  # noqa: T201
          f"({factor:.2f}x from both); a run at {CLIENTS} clients took {run_s:.0f} s")
    # The time budget from the same calibration, not a constant: the search needs about 3
    # baseline runs, 5 sweep probes (shorter) and 5-6 pairs of runs (the capped arm runs
    # longer than the batch of 48) plus a server start; 24 runs' time and 3 minutes
    # leaves room for more pairs. CI ran out of a fixed 14 minutes at 4 pairs (88%
    # confidence, 2026-11-27, ITL p95 141 ms at 48 clients), short of the 90% a win needs.
    minutes = min(20, max(6, math.ceil((24 * run_s + 180) / 60)))
    svc = parse_llmservice(_service(max_trials=MAX_TRIALS, minutes=minutes, itl_ms=itl_ms,
                                    shape=shape))
    plan = make_plan(svc.spec)
    fp = tuning_fingerprint(svc, plan)
    job = build_tuning_job(svc, plan, Settings(), fp)
    kubernetes_validate.validate(job, "1.30.0", strict=True)
    pod = job["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (main,) = pod["containers"]
    assert init["name"] == INIT_CONTAINER and main["name"] == TUNER_CONTAINER
    assert main["terminationMessagePath"] == TERMINATION_LOG

    # --- What the volumes and images provide, substituted explicitly -------------------
    # 1. The init container (operator image): its command, with the operator image's
    #    `python3` = this project's venv Python (it has llm_operator installed) and the
    #    emptyDir mount /opt/llmop = a temp folder.
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    assert init["command"][0] == "python3" and CODE_PATH in init["command"][2]
    init_cmd = [sys.executable, init["command"][1],
                init["command"][2].replace(CODE_PATH, str(code_dir))]
    subprocess.run(init_cmd, check=True, timeout=60, cwd=tmp_path)
    assert (code_dir / "llm_operator" / "inpod" / "tuner" / "__main__.py").exists()
    # Only the tuner, the server pod's admission controller (inpod/engine/, run as the
    # servers' --scheduler-cls to sweep caps live) and vLLM's start-up rules the tuner
    # checks its candidates with (knowledge/: engine_rules.py, serve_args.py and its flag
    # table in data/) are copied: nothing else of the operator reaches the vLLM image.
    assert sorted(p.name for p in (code_dir / "llm_operator").iterdir()) == [
        "__init__.py", "inpod", "knowledge"]
    assert sorted(p.name for p in (code_dir / "llm_operator" / "knowledge").iterdir()) == [
        "__init__.py", "data", "engine_rules.py", "serve_args.py"]
    assert sorted(p.name for p in (code_dir / "llm_operator" / "inpod").iterdir()) == [
        "__init__.py", "engine", "tuner"]
    assert (code_dir / "llm_operator" / "inpod" / "engine" / "scheduler.py").exists()

    # 2. The tuner container (vLLM image): `python3` = the vLLM venv's Python; the model
    #    volume mounted at /mnt/models = the generated model folder; /opt/llmop = the
    #    folder the init container filled; terminationMessagePath = a temp file; the
    #    container's own /tmp/llmop-tuning = a temp folder; the model cache volume (HF_HOME,
    #    VLLM_CACHE_ROOT under it) = a temp folder; and the machine-wide vLLM
    #    lock switched back on (a pod is alone on its GPUs, this machine is shared).
    #    Every other argument and variable is used verbatim.
    term = tmp_path / "termination-log"
    work = tmp_path / "work"
    model_args = list(main["args"])
    i = model_args.index("--model")
    assert model_args[i + 1] == "/mnt/models"
    model_args[i + 1] = str(model_dir)
    model_args = [a.replace(WORK_DIR, str(work)) for a in model_args]
    (k,) = [n for n, a in enumerate(model_args) if a.startswith("--server-args=")]
    model_args[k] += CPU_KV_ARGS
    # The default image has the live hook: the Job sweeps caps on the copied engine.
    j = model_args.index("--live-cap-engine")
    assert model_args[j + 1] == CODE_PATH
    model_args[j + 1] = str(code_dir)
    env = _env_list_to_dict(main["env"])
    assert env["PYTHONPATH"] == CODE_PATH and env["LLMOP_TERMINATION_LOG"] == TERMINATION_LOG
    # The model cache volume (HF_HOME, and vLLM's compile cache on it) = a temp folder.
    assert env["VLLM_CACHE_ROOT"] == VLLM_CACHE_PATH
    cache = [(HF_CACHE_PATH, str(tmp_path / "model-cache"))]
    env = {k: rewrite_paths(v, cache) for k, v in env.items()}  # the process kubelet's rule
    env.update(PYTHONPATH=str(code_dir), LLMOP_TERMINATION_LOG=str(term), LLMOP_VLLM_LOCK=LOCK)
    # The test command's ledger of the lock's holds counts the Job's servers under this
    # test's name (without it, about 270 s of lane A's holds went unrecorded).
    env.update({k: os.environ[k] for k in ("LLMOP_VLLM_LOCK_LEDGER", "PYTEST_CURRENT_TEST")
                if k in os.environ})
    assert main["command"][:1] == ["python3"]
    cmd = [str(VLLM_PYTHON), *main["command"][1:], *model_args]
    before = machine_load.snapshot()
    proc = subprocess.run(
        cmd, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env},
        capture_output=True, text=True, timeout=minutes * 60 + 300, cwd=tmp_path,
    )
    load = machine_load.describe(before, machine_load.snapshot())
    log_tail = proc.stderr[-3000:]
    assert proc.returncode == 0, f"tuner failed:\n{log_tail}\n{proc.stdout[-2000:]}"

    # --- What the operator would read ----------------------------------------------------
    message = term.read_text()
    assert len(message.encode()) <= TERMINATION_LIMIT
    result: TuningResult = parse_result(message)
    measured.append(f"the Job: {load}")
    return Attempt(result, itl_ms, "; ".join(measured), proc.stdout, fp, work)


# At most 20 min of search per attempt (6 where a run at 48 clients takes under 8 s, as
# here), a calibration before each, and a second attempt only where the first lost its
# regime.
@pytest.mark.timeout(3000)
def test_rendered_job_runs_as_the_kubelet_would_and_finds_the_better_region(
    models: Path, tmp_path: Path
) -> None:
    # The regime is real: with vLLM's default cap the batch of 48 misses the ITL objective
    # in the Job as it did in the calibration. Where it does not, the machine's load
    # changed between the two and nothing can be said about the search: calibrated and run
    # once more, saying so. CI, 2026-12-05: calibrated while the other lane wrote the 6.7
    # GB vLLM image, the defaults then measured 39.9 ms against an objective above that (the
    # image's build and push take the vLLM lock since); 2026-12-07: calibrated at 86.0 ms
    # (median of 3 runs at 48 clients) where the Job's baseline measured 30.0 ms, cause not
    # known (each calibration and Job now says who else used the CPUs meanwhile).
    attempt = _calibrate_and_tune(models, tmp_path / "attempt-1")
    if not attempt.regime_held:
        first = attempt.why().splitlines()[0]
        print(f"the regime was gone in the Job; calibrating once more: {first}")  # noqa: T201
        attempt = _calibrate_and_tune(models, tmp_path / "attempt-2")
        assert attempt.regime_held, (
            f"the machine changed between the calibration and the search twice; the "
            f"second: {attempt.why()}\nthe first: {first}")
    result, proc_stdout, work = attempt.result, attempt.stdout, attempt.work
    why = attempt.why()
    assert result.fingerprint == attempt.fingerprint
    assert result.state in ("Succeeded", "Partial"), result.reason
    assert 1 <= result.trials <= MAX_TRIALS
    assert result.baseline is not None and result.best is not None
    # ...and the tuner lands on a cap that keeps steps fast, with more goodput than the
    # defaults measured the same way (medians of repeats). How much more is not fixed:
    # goodput counts requests, and the load on the 2 shared cores moves between the
    # calibration and the search. CI, 2026-12-02: the defaults' ITL p95 43.2 ms (mean of
    # 8 runs), just over the objective, so 6 of their runs kept some goodput (median 363
    # tok/s; mean output 1,012 tok/s); the tuner kept --max-num-seqs 12 by the SLO rule
    # (ITL p95 20.7 ms, median goodput 402 tok/s; goodput interval 0.38-100x, 5 pairs),
    # and a fixed 1.5x goodput ratio failed that decision.
    # The second trial verifies the cap the concurrency sweep on the baseline server
    # predicts: 6 on a quiet machine, 3 when other work shared the 2 cores, 12 with the
    # cluster tier beside it (all seen here); any cap well below the 48 clients passes.
    # Where that one loses (the sweep's best is the largest cap its single probe saw meet
    # the SLO, so it sits near the objective), the third verifies the next (MAX_TRIALS).
    cap = result.best.settings.max_num_seqs
    assert cap is not None and 2 <= cap <= 32, why
    assert result.best.goodput > result.baseline.goodput, why
    assert result.best.itl_p95_ms < result.baseline.itl_p95_ms
    # The gain is a paired comparison against the defaults (5 pairs at least), and the
    # sentence an operator's Event carries says what decided it: the goodput interval
    # above 1 + the minimum gain, or (search version 6 on) the defaults missing the SLO in
    # their typical run while the cap's typical run met it, with both arms' figures.
    vs = result.versus_defaults
    assert vs is not None and vs.pairs >= 5 and vs.interleaved, why
    assert result.decision.startswith(f"--max-num-seqs {cap}: "), result.decision
    assert "of vLLM's defaults; kept --max-num-seqs" in result.decision
    if "met the SLO in its typical run" in result.decision:
        assert "where vLLM's defaults missed it" in result.decision, result.decision
    else:
        assert vs.low is not None and vs.low > 1.05, why
    # A person can read the trial table in the pod log, and the full result file.
    assert "max-num-seqs" in proc_stdout and "baseline" in proc_stdout
    assert (work / "result.json").exists()
    # Fewer server starts than trials: caps moved live on a running server.
    full = json.loads((work / "result.json").read_text())
    starts = sorted(p.name for p in work.glob("server-*.log"))
    assert any("swept live" in n for n in full["notes"]), full["notes"]
    assert 1 <= len(starts) < len(full["trials"]), (starts, len(full["trials"]))
    # What status.tuning then says of it (the compact result the operator reads).
    assert result.server_starts == len(starts), (result.server_starts, starts)
    assert (result.sweep or "").startswith("max-num-seqs swept live"), result.sweep
    print(proc_stdout)  # noqa: T201 - the table, for the test log
    print(f"rendered Job: {len(full['trials'])} trials, {len(starts)} server "  # noqa: T201
          "start(s)")


@pytest.mark.timeout(1200)
def test_cli_tune_against_a_given_server_shows_the_kv_knee(models: Path, tmp_path: Path) -> None:
    import json

    model_dir = ensure_tiny_llama(models, VLLM_PYTHON, **MID_MODEL)
    term = tmp_path / "termination-log"
    full = tmp_path / "result.json"
    server = VLLMServer(
        model=str(model_dir), python=str(VLLM_PYTHON), log_path=tmp_path / "vllm.log",
        flags=["--kv-cache-memory-bytes", str(KV_TIGHT), "--max-model-len", "2048"],
    )
    with server:  # holds the machine-wide lock while it runs
        cli = Path(sys.executable).with_name("llm-operator")
        cmd = [
            str(cli), "tune", "--url", server.url, "--tokenizer", str(model_dir),
            "--vllm-python", str(VLLM_PYTHON),
            "--input-tokens", str(IN_TOKENS), "--output-tokens", str(OUT_TOKENS),
            "--concurrency", str(CLIENTS), "--slo-ttft-ms", "20000", "--slo-itl-ms", "100",
            # One wave of 48 requests shows the knee (10 fit the KV cache) in half the
            # time of two.
            "--repeats", "1", "--sweep-points", "2", "--waves", "1", "--output", str(full),
            "--log-dir", str(tmp_path / "logs"),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                              env={**os.environ, "LLMOP_TERMINATION_LOG": str(term)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = parse_result(term.read_text())
    assert result.state == "Succeeded" and result.trials == 1
    assert result.predicted is not None  # one server, no restarts: a prediction only
    assert "Concurrency sweep" in proc.stdout and "predicted, not verified" in proc.stdout
    # The last line of the log is the compact result too (FallbackToLogsOnError).
    assert parse_result(proc.stdout.strip().splitlines()[-1]) == result

    # The knee, as the sweep recorded it: at 48 clients the running batch stays at what
    # the KV cache admits and the engine preempts; at the KV-derived cap (probed first)
    # it runs without preemptions.
    (trial,) = json.loads(full.read_text())["trials"]
    at_c = trial["runs"][0]
    assert 3584 <= at_c["kv_tokens"] <= 4096, at_c  # whole blocks of the 16 MiB
    assert at_c["preemptions"] > FIT, at_c
    assert 0 < at_c["running_max"] < CLIENTS / 2, at_c
    fit_probe = min(trial["probes"], key=lambda m: abs(m["concurrency"] - FIT))
    assert fit_probe["concurrency"] <= FIT + 2
    assert fit_probe["preemptions"] <= at_c["preemptions"] / 10, trial["probes"]

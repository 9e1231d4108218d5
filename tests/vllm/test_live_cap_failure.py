"""The live cap's scheduler failing cannot keep serving down (issue 35 item 2), with the
real vLLM CPU engine and the server container's own command.

Two ways the operator's ``--scheduler-cls`` can fail where a kubelet runs it, each ending
in a termination message the operator reads (the kubelet copies the file named by
``terminationMessagePath`` into the pod status; vLLM's own last 2 KiB of log, what
``FallbackToLogsOnError`` would keep instead, end in "Engine core initialization failed.
See root cause above" and do not name the cause):

1. **Import error**: the init container did not copy the scheduler's code. The rendered
   command (a shell script) checks for it before vLLM starts, says so in the termination
   message, and exits 1: vLLM never loads.
2. **A vLLM whose scheduler interface differs**: the scheduler's code is there, but
   vLLM's ``AsyncScheduler`` rejects how the class calls it. Made here in a throwaway copy
   of the scheduler's module whose ``__init__`` passes vLLM an argument it does not take
   (a ``TypeError`` raised by the real vLLM class, inside the real engine-core process).
   The class writes its line to the termination message and re-raises.

Each message is then read the way the operator reads a crash-looping pod
(:func:`llm_operator.health.podscheduling.live_cap_failure`), turns the live cap off for the
spec's generation (:func:`llm_operator.health.status.live_cap_crash_fallback`), and the service
re-renders without the scheduler class. The operator's side on an API server, with the
Event and the condition, is tests/integration/test_scheduling.py. (A vLLM that has the
class but lacks the live hook keeps serving with vLLM's own scheduling and reports
``llmop_admission_live 0``: tests/vllm/test_live_cap.py.) Server starts: 1 (that fails).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.support.engine import LIVE_FLAGS, copy_engine_code, live_env
from tests.support.tiny_model import ensure_tiny_llama
from tests.unit.test_rendering import args_of, container_of, hand_plan, make_svc

from llm_operator import rendering
from llm_operator.health import status
from llm_operator.health.podscheduling import PodScheduling
from llm_operator.inpod.engine.cap import FAILURE_PREFIX, TERMINATION_LOG_ENV
from llm_operator.inpod.tuner.runner import scheduler_failure
from llm_operator.inpod.tuner.server import free_port, vllm_lock
from llm_operator.rendering.admission import ENGINE_SCHEDULER_CLS
from llm_operator.settings import Settings
from llm_operator_sandbox.loop import cap_arg

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
LIVE_SPEC: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                             "adaptation": {"mode": "Apply"}}
GENERATION = 5

pytestmark = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")


def live_deployment(generation_status: dict[str, Any] | None = None) -> dict[str, Any]:
    svc = make_svc(LIVE_SPEC)
    docs = rendering.render_all(
        svc, hand_plan(), Settings(), overrides={"maxNumSeqs": 24},
        live_cap=status.live_cap_in_use(svc.spec, generation_status, GENERATION))
    return docs[0]


def crash_looping(message: str) -> dict[str, Any]:
    """The pod status a kubelet writes for the vllm container exiting with ``message``
    in its termination message, then backing off."""
    return {"metadata": {"name": "llama-5d4-x2x4q"}, "spec": {"nodeName": "gpu-1"},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "vllm", "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                             "message": message}}}]}}


def operator_reads(message: str) -> dict[str, Any]:
    """What the operator does with that pod: the fallback it records, and the Deployment
    it renders next (checked here: the rollout form, without the scheduler class)."""
    pod = PodScheduling.from_pod(crash_looping(message))
    assert pod.live_cap_failure is not None, message
    adaptation = status.live_cap_crash_fallback(make_svc(LIVE_SPEC).spec, None, GENERATION,
                                                pod.name, pod.live_cap_failure)
    assert adaptation is not None
    after = live_deployment({"adaptation": adaptation})
    args = args_of(after)
    assert ENGINE_SCHEDULER_CLS not in args and "--scheduler-cls" not in args
    assert cap_arg(args) == 24  # the cap, now by rollout (--max-num-active-seqs on 0.32)
    return dict(adaptation["liveCapFallback"])


def test_scheduler_code_missing_stops_before_vllm_loads_and_says_why(tmp_path: Path) -> None:
    deployment = live_deployment()
    container = container_of(deployment)
    assert ENGINE_SCHEDULER_CLS in args_of(deployment)
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    term = tmp_path / "termination-log"
    empty = tmp_path / "opt-llmop-engine"  # the init container's volume, left empty
    empty.mkdir()
    metrics = tmp_path / "prometheus"
    metrics.mkdir()
    env.update(PYTHONPATH=str(empty), PROMETHEUS_MULTIPROC_DIR=str(metrics),
               **{TERMINATION_LOG_ENV: str(term)},
               # the vLLM image's python3 first (vLLM itself must never be reached)
               PATH=f"{VLLM_PYTHON.parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run([*container["command"], *container["args"]], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    message = term.read_text()
    assert message.startswith(FAILURE_PREFIX), message
    assert "is not on PYTHONPATH" in message and str(empty) in message
    assert "vLLM API server" not in proc.stderr  # stopped before vLLM
    fallback = operator_reads(message)
    assert fallback["reason"] == "SchedulerFailed" and fallback["generation"] == GENERATION
    assert "the init container copy-engine did not copy it" in fallback["message"]


@pytest.mark.timeout(900)  # a vLLM start that fails; the rest is waiting for the lock
def test_a_scheduler_vllm_rejects_writes_its_failure_then_the_engine_exits(
        tmp_path: Path) -> None:
    model = ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON)
    code = copy_engine_code(tmp_path / "code")
    module = code / "llm_operator" / "inpod" / "engine" / "scheduler.py"
    source = module.read_text()
    call = "super().__init__(*args, **kwargs)"
    assert source.count(call) == 1
    # Another vLLM's interface, simulated: the real AsyncScheduler gets an argument it
    # does not take and raises TypeError in the engine-core process.
    module.write_text(source.replace(call, "super().__init__(*args, llmop_moved=1, **kwargs)"))
    term = tmp_path / "termination-log"
    env = {**os.environ, **live_env(code, tmp_path / "cap", tmp_path / "prometheus"),
           TERMINATION_LOG_ENV: str(term)}
    cmd = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--port", str(free_port()), "--max-model-len", "512", "--max-num-seqs", "8",
           "--kv-cache-memory-bytes", str(16 * 1024 * 1024), *LIVE_FLAGS]
    log = tmp_path / "vllm.log"
    with vllm_lock(), log.open("w") as out:
        proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=600, cwd=tmp_path)
    tail = log.read_text()[-3000:]
    assert proc.returncode != 0, tail
    message = term.read_text()
    assert message.startswith(f"{FAILURE_PREFIX} AdmissionCapScheduler cannot start"), (
        message, tail)
    assert "llmop_moved" in message, message  # vLLM's own TypeError, named
    # What the kubelet would have kept of the log instead names neither.
    assert FAILURE_PREFIX not in log.read_bytes()[-2048:].decode(errors="replace")
    fallback = operator_reads(message)
    assert "unexpected keyword argument" in fallback["message"], fallback
    # The tuning Job's tuner reads the same failure from its server's whole log and
    # sweeps the values with one start each instead (tests/unit/test_tuner_live_sweep.py).
    said = scheduler_failure(log.read_text())
    assert said is not None and said.startswith(f"{FAILURE_PREFIX} AdmissionCapScheduler"), said

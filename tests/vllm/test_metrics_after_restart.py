"""A restarted engine reports its own requests, not the dead one's (real vLLM CPU engine).

In live mode the server pod sets ``PROMETHEUS_MULTIPROC_DIR`` on an emptyDir, and an
emptyDir outlives a container restart inside the pod (a crash, an OOM kill, a failed
liveness probe). prometheus_client's multiprocess collector serves the last value a dead
process wrote to a ``mostrecent`` gauge until the new process sets it, and vLLM sets
``vllm:num_requests_running`` only at its first step: an idle restarted engine would
report the crashed one's running requests, and adaptation would act on them.

The test runs the rendered container's own command (the wrapper that empties the
directory, then ``exec vllm serve``) twice on one directory: the first engine is killed
with requests running, as a container dies; the directory then holds its running count
(read with prometheus_client, as the API server's /metrics would); the second engine,
idle, must report no running request, and serve.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.support.engine import LIVE_FLAGS, copy_engine_code, live_env
from tests.support.streams import Streams, stream_completions
from tests.support.tiny_model import ensure_tiny_llama
from tests.support.vllm_load import engine_metric
from tests.unit.test_rendering import container_of, hand_plan, make_svc

from llm_operator import rendering
from llm_operator.health import status
from llm_operator.inpod.tuner.server import VLLMServer, sample_sums
from llm_operator.settings import Settings
from llm_operator_sandbox.local_plan import vllm_cli_script

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
RUNNING = "vllm:num_requests_running"
CLIENTS = 6

pytestmark = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")

# What /metrics would serve from a directory, read the way vLLM's API server reads it.
_COLLECT = """
import sys
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry, path=sys.argv[1])
sys.stdout.write(generate_latest(registry).decode())
"""


def rendered_command() -> list[str]:
    svc = make_svc({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                    "adaptation": {"mode": "Apply"}})
    docs = rendering.render_all(svc, hand_plan(), Settings(),
                                live_cap=status.live_cap_in_use(svc.spec, None))
    return list(container_of(docs[0])["command"])


def served(metrics_dir: Path, name: str) -> float:
    text = subprocess.run([str(VLLM_PYTHON), "-c", _COLLECT, str(metrics_dir)],
                          capture_output=True, text=True, check=True, timeout=60).stdout
    return sample_sums(text).get(name, 0.0)


def long_requests(url: str, model: str, n: int) -> Streams:
    """``n`` streamed requests of ~4,000 tokens each."""
    return stream_completions(url, model, n, prompt="hello " * 16, max_tokens=4000,
                              timeout_s=300)


# Up to three starts of the first engine and one of the second (each about 1 min on 2
# shared cores), and the wait for the vLLM lock while the other lane's nodes tier holds it.
@pytest.mark.timeout(1500)
def test_a_restarted_engine_does_not_report_the_dead_ones_requests(tmp_path: Path) -> None:
    model = str(ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON))
    command = rendered_command()
    assert command[:2] == ["/bin/sh", "-c"]
    metrics = tmp_path / "emptydir"  # the pod's emptyDir: the same for both containers
    env = live_env(copy_engine_code(tmp_path / "code"), tmp_path / "cap", metrics)
    # The image's `vllm` (the CPU build's console script fails on its distribution name:
    # the node agent's stand-in, as the sandbox runs the same command).
    cli = tmp_path / "bin" / "vllm"
    cli.parent.mkdir()
    cli.write_text(vllm_cli_script(VLLM_PYTHON))
    cli.chmod(0o755)
    env["PATH"] = f"{cli.parent}{os.pathsep}{os.environ['PATH']}"
    flags = ["--max-num-seqs", "16", *LIVE_FLAGS, "--max-model-len", "4096",
             "--kv-cache-memory-bytes", str(16 * 1024 * 1024)]

    def container(n: int) -> VLLMServer:
        return VLLMServer(model=model, python=str(VLLM_PYTHON), flags=flags, env=env,
                          command=command, log_path=tmp_path / f"vllm-{n}.log")

    # The first container dies with requests running: it is killed once two of them have
    # streamed 10 tokens (~3,990 to go). Whether the engine had written its running count
    # to the directory by then depends on how the 2 cores were shared (under load the
    # count it writes can lag the stream): the set-up is tried again, up to 3 times, until
    # the directory holds at least 2 running requests, what this test needs left.
    left = 0.0
    for attempt in range(1, 4):
        first = container(attempt)
        with first:
            chunks = long_requests(first.url, model, CLIENTS).tokens
            t0 = time.monotonic()
            while sum(c >= 10 for c in chunks) < 2 and time.monotonic() - t0 < 120:
                time.sleep(0.05)
            assert first.proc is not None
            os.killpg(first.proc.pid, signal.SIGKILL)  # the container dies with its processes
            first.proc.wait(timeout=30)
        # What the dead engine left: without emptying, the next /metrics would serve this.
        left = served(metrics, RUNNING)
        if left >= 2:
            break
    assert left >= 2, first.log_tail(30)

    second = container(9)
    with second:
        assert engine_metric(second.url, RUNNING) == 0, (
            f"an idle restarted engine reports {engine_metric(second.url, RUNNING):g} "
            f"running requests: the dead container's gauges ({left:g} left)")
        assert engine_metric(second.url, "llmop_admission_cap") == 16  # its own gauges
        long_requests(second.url, model, 1).threads[0].join(timeout=300)
        assert engine_metric(second.url, "vllm:request_success_total") == 1

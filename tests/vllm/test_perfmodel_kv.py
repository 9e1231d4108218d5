"""The real vLLM CPU engine's KV token capacity (its start-up log and /metrics) against
the performance model's prediction. One server start (~1 min), under the machine-wide
vLLM lock."""

from __future__ import annotations

import fcntl
import os
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from tests.support.perf_reference import THIS_CPU
from tests.support.tiny_model import ensure_tiny_llama

from llm_operator.planning.perfmodel import ModelShape, kv_capacity_from_bytes

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
LOCK = "/tmp/llmop-vllm.lock"
KV_BYTES = 3_000_000  # not a whole number of 128-token blocks: tests the rounding


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _acquire(lock: object, wait_s: float) -> None:
    """Take the machine-wide vLLM lock, waiting up to ``wait_s`` for another server."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[arg-type]
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.fail(f"another vLLM server held {LOCK} for over {wait_s:.0f} s")
            time.sleep(2)


# The server itself takes about a minute; the rest of the budget is for waiting on the
# lock while another tier's server finishes.
@pytest.mark.timeout(1200)
def test_kv_capacity_vllm_logs_matches_the_model(tmp_path: Path) -> None:
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM venv at {VLLM_PYTHON}")
    model_dir = ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON, layers=3, kv_heads=4)
    shape = ModelShape(name="tiny", parameters=1e6, num_layers=3, hidden_size=128,
                       num_attention_heads=4, num_kv_heads=4, head_dim=32)
    predicted = kv_capacity_from_bytes(shape, KV_BYTES, 1, THIS_CPU.block_size)
    log_path = tmp_path / "vllm.log"
    port = _port()
    with open(LOCK, "a") as lock:
        _acquire(lock, 900)
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model",
                 str(model_dir), "--host", "127.0.0.1", "--port", str(port),
                 "--kv-cache-memory-bytes", str(KV_BYTES), "--max-model-len", "512"],
                stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "HF_HUB_OFFLINE": "1"})
        try:
            deadline = time.monotonic() + 180
            while True:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    metrics = urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "vLLM not ready in 180 s"
                    time.sleep(1)
        finally:
            proc.terminate()
            proc.wait(30)
    logged = re.search(r"KV cache size: ([\d,]+) tokens", log_path.read_text())
    assert logged, "vLLM logged no KV cache size"
    logged_tokens = int(logged.group(1).replace(",", ""))
    exported = re.search(r'kv_cache_size_tokens="(\d+)"', metrics)
    assert exported and int(exported.group(1)) == logged_tokens
    assert predicted == pytest.approx(logged_tokens, rel=0.10)

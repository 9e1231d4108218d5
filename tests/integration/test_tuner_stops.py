"""The real tuner process (``python -m llm_operator.inpod.tuner``, as the tuning Job runs it)
stopped early: by SIGTERM (a preempted or deleted pod) and by its own deadline. It must
stop its vLLM server and leave the best result so far, marked partial with how many
trials ran, where the kubelet reads the termination message.

No vLLM here: a stand-in ``vllm`` package (written by the test, on the tuner's
PYTHONPATH) answers the few things the tuner touches: the OpenAI server module (an HTTP
server answering /health and /metrics) and ``vllm.benchmarks.serve`` (a fixed, slow
result). So the signal handling, the search unwinding, the server shutdown and the
termination message are real; the figures are not measurements. The real engine under
the tuner is in tests/vllm/test_tuner.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_SERVER = '''
import argparse, http.server, sys
if any(a.startswith("--help") for a in sys.argv[1:]):
    sys.exit(2)
p = argparse.ArgumentParser()
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, required=True)
args, _ = p.parse_known_args()
SCRAPES = [0]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        # The tuner reads a run from the engine's counters at its start and end: they must
        # move (the stand-in's "benchmark" sends no request, so each scrape counts 8).
        SCRAPES[0] += 1
        n = 8 * SCRAPES[0]
        body = (f"vllm:num_requests_running 1.0\\nvllm:request_success_total {n}.0\\n"
                f"vllm:request_inference_time_seconds_sum {n}.0\\n").encode() \\
            if self.path == "/metrics" else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((args.host, args.port), H).serve_forever()
'''

FAKE_BENCH = '''
import os, time
VALUED = ["--backend", "--base-url", "--endpoint", "--model", "--tokenizer", "--dataset-name",
          "--random-input-len", "--random-output-len", "--random-range-ratio", "--num-prompts",
          "--max-concurrency", "--request-rate", "--temperature", "--seed", "--num-warmups",
          "--percentile-metrics", "--metric-percentiles", "--ready-check-timeout-sec"]
def add_cli_args(parser):
    for flag in VALUED:
        parser.add_argument(flag)
    for flag in ("--ignore-eos", "--disable-tqdm", "--save-detailed"):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--goodput", nargs="+")
def main(args):
    seconds = float(os.environ.get("FAKE_BENCH_SECONDS", "1"))
    time.sleep(seconds)
    n, out = int(args.num_prompts), int(args.random_output_len)
    return {"duration": seconds, "ttfts": [0.01] * n, "itls": [[0.005] * 4] * n,
            "output_lens": [out] * n}
'''


def fake_vllm(root: Path) -> Path:
    """A stand-in ``vllm`` package under ``root`` (see the module docstring)."""
    files = {
        "vllm/__init__.py": "",
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/openai/__init__.py": "",
        "vllm/entrypoints/openai/api_server.py": FAKE_SERVER,
        "vllm/utils/__init__.py": "",
        "vllm/utils/argparse_utils.py":
            "from argparse import ArgumentParser as FlexibleArgumentParser\n",
        "vllm/benchmarks/__init__.py": "",
        "vllm/benchmarks/serve.py": FAKE_BENCH,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def start_tuner(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path, Path]:
    fake = fake_vllm(tmp_path / "fake")
    term = tmp_path / "termination-log"
    log = tmp_path / "tuner.log"
    env = {**os.environ, "PYTHONPATH": f"{fake}{os.pathsep}{ROOT / 'operator'}",
           "LLMOP_TERMINATION_LOG": str(term), "LLMOP_VLLM_LOCK": "",
           "FAKE_BENCH_SECONDS": "1"}
    cmd = [sys.executable, "-m", "llm_operator.inpod.tuner", "--model", str(tmp_path / "model"),
           "--input-tokens", "8", "--output-tokens", "8", "--concurrency", "8",
           "--repeats", "1", "--min-prompts", "2", "--waves", "1", "--sweep-points", "2",
           "--max-trials", "12", "--fingerprint", "abcdef0123456789",
           "--log-dir", str(tmp_path / "work"), "--progress", "log", "--start-timeout", "60",
           *extra]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=out, env=env, text=True)
    return proc, term, log


def wait_log(log: Path, text: str, timeout: float, proc: subprocess.Popen[str]) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if text in log.read_text():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in the tuner's log:\n{log.read_text()[-3000:]}")


def server_ports(log: Path) -> list[int]:
    return [int(line.rsplit("on port ", 1)[1].split()[0])
            for line in log.read_text().splitlines() if "vLLM ready on port" in line]


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
            return True
    except OSError:
        return False


def test_sigterm_leaves_the_best_so_far_marked_partial(tmp_path: Path) -> None:
    proc, term, log = start_tuner(tmp_path)
    try:
        wait_log(log, "Trial 2/", 60, proc)  # the baseline is measured, trial 2 starts
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - t0 < 45  # well within the Job's 90 s grace
    assert code == 0, log.read_text()[-2000:]
    result = json.loads(term.read_text())
    assert result["state"] == "Partial" and result["fingerprint"] == "abcdef0123456789"
    assert "SIGTERM" in result["reason"] and result["trials"] >= 2
    assert f"after {result['trials']} trial(s)" in result["reason"]
    assert result["best"] is not None and result["baseline"] is not None
    # Every server the tuner started is gone (it runs in its own session).
    ports = server_ports(log)
    assert ports and not any(answers(p) for p in ports)


@pytest.mark.parametrize("deadline", [9])
def test_the_tuner_stops_itself_before_its_deadline(tmp_path: Path, deadline: int) -> None:
    proc, term, log = start_tuner(tmp_path, "--deadline-seconds", str(deadline))
    # Timed from when the tuner arms its deadline, not from its process start (Python's
    # imports are not under test). Started in the background by a non-interactive shell
    # (SIGINT ignored, inherited by the servers it stops with SIGINT), it took 34 s for a
    # 9 s deadline until the tuner restored SIGINT's default (2026-11-28).
    wait_log(log, "Deadline armed", 120, proc)
    t0 = time.monotonic()
    try:
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    elapsed = time.monotonic() - t0
    result = json.loads(term.read_text())
    if result["state"] == "Succeeded":
        pytest.skip("the search converged before its deadline on this machine")
    assert elapsed < deadline + 10, elapsed
    assert code == 0 and result["state"] == "Partial", log.read_text()[-2000:]
    assert "deadline" in result["reason"] and result["trials"] >= 1

"""Measure the real vLLM CPU engine on this machine (not a unit test).

Two measurements, written as JSON to ``benchmarks/data/cpu_engine_profile.json``:

1. KV token capacity that vLLM logs at start-up ("CPU KV cache size: N tokens") for
   several ``--kv-cache-memory-bytes`` settings and two tiny-model shapes;
2. throughput and latency against client concurrency with ``vllm.benchmarks.serve``
   (the module behind ``vllm bench serve``), once with ample KV cache and once with a
   KV cache small enough to force preemption.

Run with the vLLM venv's Python (it imports vLLM's benchmark in-process)::

    .venv-vllm/bin/python -m benchmarks.cpu_engine_profile [--quick] [--only kv|sweep]

Holds the exclusive lock ``/tmp/llmop-vllm.lock`` while any server runs (one vLLM
server at a time on this machine). ``benchmarks/perfmodel_points.py`` turns the JSON
into the tables of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.tiny_model import make_tiny_llama
from tests.support.vllm_load import engine_metric

ROOT = Path(__file__).resolve().parent.parent

LOCK_PATH = "/tmp/llmop-vllm.lock"
OUT = ROOT / "benchmarks" / "data" / "cpu_engine_profile.json"
KV_LOG_RE = re.compile(r"KV cache size: ([\d,]+) tokens")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def vllm_server(model: Path, args: list[str], log_path: Path,
                timeout: float = 300) -> Iterator[tuple[str, Path]]:
    """Start the vLLM OpenAI server under the machine-wide lock; yield (base_url, log)."""
    port = _free_port()
    with open(LOCK_PATH, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
               str(model), "--host", "127.0.0.1", "--port", str(port), *args]
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"vLLM exited with {proc.returncode}; see {log_path}")
                try:
                    urllib.request.urlopen(base + "/health", timeout=2)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"vLLM not ready in {timeout} s") from None
                    time.sleep(1)
            yield base, log_path
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def logged_kv_tokens(log_path: Path) -> int:
    """The KV token capacity vLLM logged at start-up."""
    m = KV_LOG_RE.search(log_path.read_text())
    if not m:
        raise RuntimeError(f"no 'KV cache size' line in {log_path}")
    return int(m.group(1).replace(",", ""))


def run_bench(base: str, model: Path, concurrency: int, prompts: int, input_len: int,
              output_len: int) -> dict[str, Any]:
    """One ``vllm.benchmarks.serve`` run at a fixed client concurrency."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args([
        "--backend", "openai", "--base-url", base, "--endpoint", "/v1/completions",
        "--model", str(model), "--tokenizer", str(model),
        "--dataset-name", "random", "--random-input-len", str(input_len),
        "--random-output-len", str(output_len), "--ignore-eos",
        "--num-prompts", str(prompts), "--max-concurrency", str(concurrency),
        "--request-rate", "inf", "--disable-tqdm", "--seed", "0",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
    ])
    result = bench_main(args)
    keep = ("completed", "duration", "request_throughput", "output_throughput",
            "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p95_ttft_ms",
            "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "median_itl_ms", "p95_itl_ms",
            "p99_itl_ms", "mean_e2el_ms")
    return {k: result[k] for k in keep if k in result}


def measure_kv(workdir: Path, quick: bool) -> list[dict[str, Any]]:
    """KV capacity logged by vLLM for several settings."""
    shapes = {
        "tiny-128x2": {"hidden": 128, "layers": 2, "heads": 4, "kv_heads": 2,
                       "intermediate": 256},
        "tiny-256x4": {"hidden": 256, "layers": 4, "heads": 8, "kv_heads": 4,
                       "intermediate": 512},
    }
    cases = [("tiny-128x2", 1_048_576), ("tiny-128x2", 3_000_000),
             ("tiny-256x4", 5_000_000), ("tiny-128x2", 16_777_216)]
    if quick:
        cases = cases[:2]
    rows = []
    for shape, kv_bytes in cases:
        model = make_tiny_llama(workdir / shape, **shapes[shape])
        log = workdir / f"kv-{shape}-{kv_bytes}.log"
        with vllm_server(model, ["--kv-cache-memory-bytes", str(kv_bytes),
                                 "--max-model-len", "1024"], log):
            pass
        rows.append({"shape": shape, **shapes[shape], "head_dim":
                     shapes[shape]["hidden"] // shapes[shape]["heads"],
                     "kv_cache_memory_bytes": kv_bytes, "logged_kv_tokens": logged_kv_tokens(log)})
    return rows


def measure_sweep(workdir: Path, quick: bool) -> list[dict[str, Any]]:
    """Throughput and latency against concurrency (ample KV, then scarce KV)."""
    model = make_tiny_llama(workdir / "tiny-128x2")
    sweeps = [
        {"name": "ample-kv", "kv_bytes": 67_108_864, "max_num_seqs": 256, "input_len": 128,
         "output_len": 128, "concurrencies": [1, 2, 4, 8, 16, 32, 64]},
        {"name": "scarce-kv", "kv_bytes": 2_097_152, "max_num_seqs": 64, "input_len": 128,
         "output_len": 256, "concurrencies": [4, 8, 16, 32, 48]},
    ]
    if quick:
        sweeps = sweeps[:1]
        sweeps[0]["concurrencies"] = [1, 8]
    rows = []
    for sw in sweeps:
        log = workdir / f"sweep-{sw['name']}.log"
        args = ["--kv-cache-memory-bytes", str(sw["kv_bytes"]), "--max-model-len", "1024",
                "--max-num-seqs", str(sw["max_num_seqs"])]
        with vllm_server(model, args, log) as (base, _):
            kv_tokens = logged_kv_tokens(log)
            # Warm-up run (first requests pay for lazy initialisation).
            run_bench(base, model, 4, 8, sw["input_len"], sw["output_len"])
            for c in sw["concurrencies"]:
                pre0 = engine_metric(base, "vllm:num_preemptions_total")
                load = os.getloadavg()[0]
                res = run_bench(base, model, c, max(16, 4 * c), sw["input_len"],
                                sw["output_len"])
                pre = engine_metric(base, "vllm:num_preemptions_total") - pre0
                rows.append({"sweep": sw["name"], "kv_cache_memory_bytes": sw["kv_bytes"],
                             "kv_tokens": kv_tokens, "max_num_seqs": sw["max_num_seqs"],
                             "input_len": sw["input_len"], "output_len": sw["output_len"],
                             "concurrency": c, "preemptions": pre, "loadavg_1m": load, **res})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and write the JSON file."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="fewer settings (a smoke run)")
    p.add_argument("--only", choices=["kv", "sweep"])
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    data: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {}
    with tempfile.TemporaryDirectory(prefix="llmop-cpu-profile-") as tmp:
        work = Path(tmp)
        if a.only in (None, "kv"):
            data["kv_capacity"] = measure_kv(work, a.quick)
        if a.only in (None, "sweep"):
            data["sweep"] = measure_sweep(work, a.quick)
    data["machine"] = {"cpus": os.cpu_count(), "vllm": _vllm_version(),
                       "measured_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=1) + "\n")
    sys.stdout.write(f"wrote {a.out}\n")
    return 0


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


if __name__ == "__main__":
    sys.exit(main())

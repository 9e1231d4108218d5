"""The tuner sweeps max-num-seqs on ONE running server through the live admission cap
(issue 12), on the real vLLM CPU engine.

The tuner and the engine module are copied into one folder by the commands the pods run
(the tuning Job's init container for the tuner, the server pod's for the engine), and
``python -m llm_operator.inpod.tuner --live-cap-engine`` runs under the vLLM interpreter with
that folder on its PYTHONPATH. Three caps and vLLM's default are measured with one
server start (the restart-per-cap tuner needs four), and each trial's running batch
stays within its cap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.engine import copy_engine_code
from tests.support.tiny_model import ensure_tiny_llama

from llm_operator.tuning.job import CODE_PATH, COPY_SCRIPT

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
CAPS = (2, 4, 8)

pytestmark = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")


@pytest.mark.timeout(900)
def test_one_server_start_measures_every_cap(tmp_path: Path) -> None:
    model = ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON)
    code = copy_engine_code(tmp_path / "code")
    subprocess.run([sys.executable, "-c", COPY_SCRIPT.replace(CODE_PATH, str(code))],
                   check=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "operator")})
    logs = tmp_path / "logs"
    cmd = [
        str(VLLM_PYTHON), "-m", "llm_operator.inpod.tuner", "--model", str(model),
        "--live-cap-engine", str(code), "--grid",
        "--max-num-seqs-levels", ",".join(map(str, CAPS)),
        "--max-num-batched-tokens-levels", "2048", "--default-max-num-seqs", "16",
        "--default-max-num-batched-tokens", "2048",
        "--input-tokens", "32", "--output-tokens", "64", "--concurrency", "16",
        "--slo-ttft-ms", "60000", "--slo-itl-ms", "1000", "--repeats", "1",
        "--min-prompts", "16", "--waves", "1", "--max-trials", "8", "--max-seconds", "600",
        "--server-args", "--kv-cache-memory-bytes 67108864 --max-model-len 1024",
        "--output", str(tmp_path / "result.json"), "--log-dir", str(logs), "--progress", "log",
    ]
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1",
           "LLMOP_TERMINATION_LOG": str(tmp_path / "termination-log")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=840, env=env,
                          check=False)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    full = json.loads((tmp_path / "result.json").read_text())
    trials = full["trials"]
    assert all(t["error"] is None for t in trials), trials
    caps = {t["config"]["max_num_seqs"] for t in trials}
    assert set(CAPS) <= caps, caps
    # One server for all of them: one server log, and only the first trial paid a start.
    assert sorted(p.name for p in logs.glob("server-*.log")) == ["server-01.log"]
    assert sum(1 for t in trials if t["startup_s"] > 0) == 1
    for t in trials:
        cap = t["config"]["max_num_seqs"] or 16
        run = t["runs"][0]
        if run["metric_samples"]:
            assert run["running_max"] <= cap, (cap, run)
    assert any("swept live" in n for n in full["notes"])
    # The compact result (the pod's termination message, which the operator copies into
    # status.tuning) says so too: one start, and how the caps were measured.
    said = json.loads((tmp_path / "termination-log").read_text())
    assert said["serverStarts"] == 1 and said["trials"] == len(trials), said
    assert said["sweep"].startswith("max-num-seqs swept live on one server"), said
    print(f"\ntuner, live caps: {len(trials)} trials, 1 server start, wall "  # noqa: T201
          f"{sum(t['wall_s'] for t in trials):.0f} s, startup "
          f"{max(t['startup_s'] for t in trials):.0f} s")

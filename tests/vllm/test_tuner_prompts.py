"""Each tuner measurement sends prompts the server has not seen, on the real vLLM CPU
engine with its prefix cache on (vLLM's default, and so the configuration a tuning Job
measures). The live cap sweeps every cap on one server: were the prompts the same in
each trial, every trial after the first would be served partly from the cache and look
faster than the configuration is. One server start; the measurements run under the vLLM
interpreter, as in the tuning Job."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.support.tiny_model import ensure_tiny_llama
from tests.support.vllm_load import engine_metric

from llm_operator.inpod.tuner.server import VLLMServer

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
# Three of the CPU engine's 128-token KV blocks per prompt: a repeated prompt would find
# two of them cached.
PROMPT_TOKENS, PROMPTS, MEASUREMENTS = 384, 8, 3

MEASURE = """
import sys
from llm_operator.inpod.tuner.bench import BenchTarget, measure
from llm_operator.inpod.tuner.search import SLO
url, model, prompts, tokens, n = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
target = BenchTarget(base_url=url, model=model, tokenizer=model, input_tokens=tokens,
                     output_tokens=4, slo=SLO(60000, 10000), waves=1, min_prompts=prompts)
for _ in range(n):
    measure(target, 4, sample_metrics=False)
"""

pytestmark = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")


@pytest.mark.timeout(600)
def test_successive_measurements_are_not_served_from_the_prefix_cache(tmp_path: Path) -> None:
    model = ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON)
    with VLLMServer(model=str(model), python=str(VLLM_PYTHON), log_path=tmp_path / "vllm.log",
                    flags=["--max-model-len", "1024",
                           "--kv-cache-memory-bytes", str(64 * 1024 * 1024)]) as srv:
        subprocess.run(
            [str(VLLM_PYTHON), "-c", MEASURE, srv.url, str(model), str(PROMPTS),
             str(PROMPT_TOKENS), str(MEASUREMENTS)],
            check=True, timeout=300, capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "operator"), "HF_HUB_OFFLINE": "1"})
        queries = engine_metric(srv.url, "vllm:prefix_cache_queries_total")
        hits = engine_metric(srv.url, "vllm:prefix_cache_hits_total")
    sent = MEASUREMENTS * PROMPTS * PROMPT_TOKENS
    assert queries >= 0.9 * sent, (queries, sent)  # the cache was on and consulted
    # Measured: one seed for all three (the prompts repeated) 5,760 of 10,386 tokens (55%)
    # from the cache; a seed per measurement 1,024 of 10,382 (10%). That rest is the tiny
    # model's 1,000-token vocabulary: vLLM's random prompts are runs of consecutive token
    # ids from random offsets, and a few runs coincide (with a real vocabulary, ~none).
    assert hits <= 0.2 * queries, f"{hits:g} of {queries:g} prompt tokens came from the cache"
    print(f"\nprefix cache: {hits:g} hits of {queries:g} prompt tokens queried")  # noqa: T201

"""What the tuner and the planner say of chunked prefill off is what the installed vLLM
does (real vLLM, no server started, no weights): it builds its configuration with
chunked prefill off for a generate model (a local tiny Llama), says that this is not
officially supported for such a model, and needs at least --max-model-len batched
tokens without it. The tuner searches it only when asked because of that warning
(``search.CHUNKED_OFF_WARNING``); a vLLM upgrade that drops or rewords it fails here."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.support.tiny_model import ensure_tiny_llama

from llm_operator.inpod.tuner.search import CHUNKED_OFF_WARNING

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")]

HARNESS = r"""
import inspect, json, sys
from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
job = json.loads(sys.stdin.read())
out = {"source": inspect.getsource(
    EngineArgs._set_default_chunked_prefill_and_prefix_caching_args)}
cfg = AsyncEngineArgs(model=job["model"], enable_chunked_prefill=False, max_model_len=512,
                      max_num_batched_tokens=512).create_engine_config()
out["off"] = cfg.scheduler_config.enable_chunked_prefill
out["supported"] = cfg.model_config.is_chunked_prefill_supported
try:
    AsyncEngineArgs(model=job["model"], enable_chunked_prefill=False, max_model_len=512,
                    max_num_batched_tokens=256).create_engine_config()
    out["below"] = None
except Exception as exc:
    out["below"] = str(exc)
sys.stdout.write(json.dumps(out))
"""


def test_vllm_takes_chunked_prefill_off_with_the_warning_the_tuner_quotes(
        tmp_path: Path) -> None:
    model = ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON, hidden=64, layers=1, heads=2,
                              kv_heads=1, intermediate=128)
    proc = subprocess.run([str(VLLM_PYTHON), "-c", HARNESS],
                          input=json.dumps({"model": str(model)}), capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["off"] is False and got["supported"] is True
    # The warning, sentence by sentence (vLLM writes it as adjacent string literals).
    for sentence in CHUNKED_OFF_WARNING.split(". "):
        words = sentence.rstrip(".").split()
        assert all(w in got["source"] for w in words), sentence
    assert "does not officially support disabling chunked prefill" in got["source"]
    assert got["below"] is not None and "max_model_len" in got["below"]

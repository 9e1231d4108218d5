"""Decode context parallelism as the planner plans it, against vLLM's own code (issue 33).

Two things the planner decides for ``--decode-context-parallel-size`` are checked with
vLLM 0.32's CPU build (``tests/support/vllm_dcp.py``, one process, config only: vLLM's
parallelism checks need no devices):

- which sizes vLLM takes: for tiny versions of corpus models (DeepSeek-V3's latent
  attention; Qwen3-235B-A22B's 4 KV heads and a 2-KV-head variant), at tensor-parallel 2,
  4 and 8, vLLM builds its config at every divisor of TP, and the sizes it takes must be
  exactly ``planning.decode_context_parallel_sizes``;
- the KV capacity: for each size it takes, the tokens vLLM's engine core counts for a
  fixed KV budget (``get_kv_cache_configs``, ``get_kv_cache_capacity``: blocks of 16
  tokens on each DCP rank) must equal the planner's ``kv_token_capacity`` at that size.

The per-rank spec given to vLLM's accounting is written here (one latent head of
kv_lora_rank + qk_rope_head_dim for MLA; KV heads / TP heads, at least one, for GQA):
vLLM builds a model's layers only at TP 1 on the CPU, where
``test_kv_specs_match_vllm.py`` checks those specs against the planner.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llm_operator.inpod.tuner.server import vllm_lock
from llm_operator.knowledge.modelfacts import facts_from_hf_config
from llm_operator.planning import (
    BLOCK_SIZE,
    decode_context_parallel_sizes,
    kv_bytes_per_token,
    kv_token_capacity,
)

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
CORPUS = ROOT / "tests" / "fixtures" / "model_configs"
PROBE = ROOT / "tests" / "support" / "vllm_dcp.py"
MEMORY = 64 * 1024 * 1024  # KV bytes per GPU given to vLLM's accounting

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")]


def _tiny(stem: str, **sizes: Any) -> dict[str, Any]:
    """The corpus config ``stem`` with two layers, small sizes and 16 attention heads (so
    that TP 8 divides them), its quantization dropped (vLLM's CPU build runs bf16)."""
    config = json.loads((CORPUS / f"{stem}_config.json").read_text())
    config.pop("quantization_config", None)
    config.update(num_hidden_layers=2, hidden_size=256, num_attention_heads=16,
                  intermediate_size=512, vocab_size=1024, moe_intermediate_size=64,
                  num_experts_per_tok=2, **sizes)
    return config


CASES: dict[str, dict[str, Any]] = {
    "deepseek-v3-mla": _tiny(
        "deepseek-ai--DeepSeek-V3", num_key_value_heads=16, kv_lora_rank=64,
        q_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
        n_routed_experts=8, n_group=1, topk_group=1, first_k_dense_replace=1,
        num_nextn_predict_layers=0),
    "qwen3-moe-4-kv-heads": _tiny("Qwen--Qwen3-235B-A22B", num_key_value_heads=4,
                                  head_dim=32, num_experts=8),
    "qwen3-moe-2-kv-heads": _tiny("Qwen--Qwen3-235B-A22B", num_key_value_heads=2,
                                  head_dim=32, num_experts=8),
}
TPS = (2, 4, 8)


def _rank_spec(name: str, tp: int) -> dict[str, Any]:
    facts = facts_from_hf_config(copy.deepcopy(CASES[name]), name=name)
    if facts.mla_kv_dim is not None:
        return {"kind": "mla", "head_size": facts.mla_kv_dim, "kv_heads": 1,
                "layers": facts.kv_layers}
    return {"kind": "full", "head_size": facts.head_dim,
            "kv_heads": max(1, facts.num_key_value_heads // tp), "layers": facts.kv_layers}


@pytest.fixture(scope="module")
def vllm_dcp(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Any]:
    root = tmp_path_factory.mktemp("dcp")
    cases, keys = [], []
    for name, config in CASES.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
        for tp in TPS:
            cases.append({"folder": str(root / name), "tp": tp, "memory": MEMORY,
                          **_rank_spec(name, tp)})
            keys.append((name, tp))
    (root / "cases.json").write_text(json.dumps(cases))
    with vllm_lock(timeout_s=600):  # one vLLM process on the machine at a time
        out = subprocess.run([str(VLLM_PYTHON), str(PROBE), str(root / "cases.json")],
                             capture_output=True, text=True, timeout=600,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("DCP ")), None)
    assert line is not None, out.stderr[-3000:]
    return dict(zip(keys, json.loads(line.removeprefix("DCP ")), strict=True))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("tp", TPS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_sizes_vllm_takes_are_the_planners(name: str, tp: int,
                                               vllm_dcp: dict[tuple[str, int], Any]) -> None:
    answers = vllm_dcp[(name, tp)]
    taken = sorted(int(d) for d, a in answers.items() if a["ok"])
    facts = facts_from_hf_config(copy.deepcopy(CASES[name]), name=name)
    assert taken == decode_context_parallel_sizes(facts, tp), answers
    # Where vLLM refuses, it is its decode-context-parallel check that speaks.
    for a in answers.values():
        if not a["ok"]:
            assert "context" in a["error"].lower() or "dcp" in a["error"].lower(), a


@pytest.mark.timeout(900)
@pytest.mark.parametrize("tp", TPS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_kv_capacity_vllm_counts_is_the_planners(
        name: str, tp: int, vllm_dcp: dict[tuple[str, int], Any]) -> None:
    facts = facts_from_hf_config(copy.deepcopy(CASES[name]), name=name)
    base = None
    for d, answer in sorted(vllm_dcp[(name, tp)].items(), key=lambda x: int(x[0])):
        if not answer["ok"]:
            continue
        dcp = int(d)
        assert answer["block_size"] == BLOCK_SIZE, answer  # vLLM kept the block size given
        planned = kv_token_capacity(MEMORY, kv_bytes_per_token(facts, tp, 1, 2, dcp=dcp),
                                    BLOCK_SIZE * dcp)
        assert planned == answer["tokens"], (dcp, planned, answer)
        base = base or answer["tokens"]
        # What the split buys: the same bytes hold dcp times the tokens.
        assert answer["tokens"] == base * dcp

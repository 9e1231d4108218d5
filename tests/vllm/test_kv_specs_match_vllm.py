"""The planner's KV bytes per token against vLLM's own KV cache specs (issue 33).

Tiny versions of real corpus configs (tests/fixtures/model_configs/, the layer pattern
and field names kept, the sizes shrunk so vLLM builds them on the CPU in a second) are
given to vLLM 0.32's CPU build: ``tests/support/vllm_kv_specs.py`` builds each model's
layers without weights and prints each layer's ``get_kv_cache_spec`` (the path vLLM's
model runner sizes the KV cache from). The planner reads the same config.json
(``facts_from_hf_config``) and must give the same parameter count as the model vLLM
built, within 5%, and the same KV bytes per token within 5%:

- full attention and MLA layers: the spec's ``page_size_bytes / block_size`` a token;
- sliding-window layers: a page per token for the blocks a decoding sequence holds,
  ``cdiv(window, block) + 1`` blocks of 16 tokens (vLLM's
  ``SlidingWindowSpec.max_admission_blocks_per_request`` with one token in flight);
- Mamba and linear-attention layers: the ``MambaSpec``'s state bytes per sequence;
- per-sequence bytes spread over a 2,048-token sequence, as the planner does.

What vLLM's CPU build cannot build, and so is checked by hand derivation only
(tests/unit/test_modelfacts.py): Qwen3.5 (its vLLM module imports transformers' Qwen2-VL
image processor, which needs torchvision, absent from the CPU build; Qwen3-Next, the
same gated-DeltaNet layers, is built instead from the Qwen3.5 text config), Nemotron NAS
(transformers does not know ``nemotron-nas`` and the publisher's remote
``configuration_decilm.py`` is not in the corpus) and DeepSeek-V4 (refused by the
planner). One vLLM process for all models (~20-40 s), under the machine-wide vLLM lock.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llm_operator.inpod.tuner.server import vllm_lock
from llm_operator.knowledge.modelfacts import facts_from_hf_config
from llm_operator.planning import BLOCK_SIZE, DTYPE_BYTES, kv_bytes_per_token

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
CORPUS = ROOT / "tests" / "fixtures" / "model_configs"
PROBE = ROOT / "tests" / "support" / "vllm_kv_specs.py"
LOCK = "/tmp/llmop-vllm.lock"
TOKENS = 2048

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM at {VLLM_PYTHON}")]

_SMALL = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 64, "intermediate_size": 512, "vocab_size": 1024}
_EXPERTS = {"moe_intermediate_size": 64, "num_experts_per_tok": 2}


def _tiny(stem: str, layers: int, **sizes: Any) -> dict[str, Any]:
    """The corpus config ``stem``, its first ``layers`` layers (per-layer lists cut to
    them), the sizes shrunk, the quantization dropped (vLLM's CPU build runs bf16)."""
    config = json.loads((CORPUS / f"{stem}_config.json").read_text())
    config.pop("quantization_config", None)
    text = config.get("text_config") if "num_hidden_layers" not in config else config
    assert isinstance(text, dict)
    for key in ("layer_types", "hybrid_layer_pattern", "moe_layer_freq", "block_configs",
                "compress_ratios"):
        if isinstance(text.get(key), list):
            text[key] = text[key][:layers]
    text.update(num_hidden_layers=layers, **{**_SMALL, **sizes})
    return config


CASES: dict[str, dict[str, Any]] = {
    # Dense full attention.
    "llama": _tiny("meta-llama--Meta-Llama-3.1-8B", 2, head_dim=None),
    # MLA with experts: one latent of kv_lora_rank + qk_rope_head_dim a token and layer.
    "deepseek-v3-mla": _tiny(
        "deepseek-ai--DeepSeek-V3", 2, num_key_value_heads=4, head_dim=None,
        kv_lora_rank=64, q_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32,
        v_head_dim=32, n_routed_experts=4, n_group=1, topk_group=1,
        first_k_dense_replace=1, num_nextn_predict_layers=0, **_EXPERTS),
    # Sliding (128-token windows) and full layers alternating.
    "gpt-oss-sliding": _tiny("openai--gpt-oss-120b", 4, intermediate_size=256,
                             num_local_experts=4, experts_per_token=2),
    # Mamba-2 and attention layers (Nemotron-H pattern), fp32 SSM state.
    "nemotron-h-mamba": _tiny(
        "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 4, hybrid_override_pattern="M*M-",
        mamba_num_heads=8, mamba_head_dim=32, n_groups=2, ssm_state_size=16,
        n_routed_experts=4, moe_shared_expert_intermediate_size=64, **_EXPERTS),
    # MiMo-V2: sliding layers with their own KV heads, V's head size apart from K's.
    "mimo-v2-sliding-heads": _tiny(
        "XiaomiMiMo--MiMo-V2-Flash", 4, hybrid_layer_pattern=[0, 1, 1, 0],
        moe_layer_freq=[0, 1, 1, 1], num_key_value_heads=1, swa_num_attention_heads=4,
        swa_num_key_value_heads=2, swa_head_dim=64, v_head_dim=32, swa_v_head_dim=32,
        n_routed_experts=4, **_EXPERTS),
    # DeepSeek-V4: layers of compress ratio 0 (window only), 4 (+ indexer) and 128, its
    # 512-wide fp8_ds_mla states kept (the layout vLLM fixes).
    "deepseek-v4-compressed": _tiny(
        "deepseek-ai--DeepSeek-V4-Flash", 4, num_attention_heads=8, num_key_value_heads=1,
        head_dim=512, q_lora_rank=64, o_lora_rank=64, o_groups=8, index_n_heads=4,
        n_routed_experts=4, num_hash_layers=1, num_nextn_predict_layers=0, **_EXPERTS),
}


def _qwen3_next_from_qwen35() -> dict[str, Any]:
    """Qwen3.5's text config (gated DeltaNet + full layers) as Qwen3-Next's: the same
    layers, the architecture vLLM's CPU build can import; no mrope (text only), the SSM
    state in the model's dtype (vLLM reads mamba_ssm_dtype for Qwen3.5 only)."""
    text = _tiny("Qwen--Qwen3.5-35B-A3B", 4, linear_num_key_heads=2,
                 linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32,
                 num_experts=4, shared_expert_intermediate_size=64,
                 **_EXPERTS)["text_config"]
    text.update(architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next",
                full_attention_interval=4)
    text.pop("mamba_ssm_dtype", None)
    rope = text.get("rope_parameters") or {}
    for key in ("mrope_section", "mrope_interleaved"):
        rope.pop(key, None)
    return dict(text)


CASES["qwen3-next-linear"] = _qwen3_next_from_qwen35()


def _vllm_kv_bytes_per_token(specs: dict[str, dict[str, Any]]) -> tuple[int, dict[str, int]]:
    """KV bytes per token of a 2,048-token sequence from vLLM's specs, and the layers of
    each kind (DeepSeek-V4's compressed and window caches apart)."""
    per_token, per_sequence = 0.0, 0.0
    kinds = {"full": 0, "sliding": 0, "state": 0, "compressed": 0}
    for spec in specs.values():
        kind = spec["kind"]
        if kind == "SlidingWindowMLASpec" or spec.get("tokens_per_state", 1) > 1:
            # DeepSeek-V4: compressed caches a token; window caches (in the model's own
            # block sizes) as the pages a decoding sequence holds.
            kinds["compressed"] += 1
            if kind == "SlidingWindowMLASpec":
                per_sequence += (math.ceil(spec["sliding_window"] / spec["block_size"]) + 1) \
                    * spec["page_size_bytes"]
            else:
                per_token += spec["page_size_bytes"] / spec["block_size"]
        elif kind in ("FullAttentionSpec", "MLAAttentionSpec"):
            per_token += spec["page_size_bytes"] / spec["block_size"]
            kinds["full"] += 1
        elif kind == "SlidingWindowSpec":
            held = (math.ceil(spec["sliding_window"] / BLOCK_SIZE) + 1) * BLOCK_SIZE
            per_sequence += spec["page_size_bytes"] / spec["block_size"] * min(TOKENS, held)
            kinds["sliding"] += 1
        elif kind == "MambaSpec":
            per_sequence += spec["real_page_size_bytes"]
            kinds["state"] += 1
        else:
            raise AssertionError(f"a KV cache spec the check does not know: {kind}")
    return math.ceil(per_token + per_sequence / TOKENS), kinds


@pytest.fixture(scope="module")
def vllm_specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("kvspecs")
    folders = []
    for name, config in CASES.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
        folders.append(str(root / name))
    with vllm_lock(LOCK, timeout_s=600):
        out = subprocess.run([str(VLLM_PYTHON), str(PROBE), *folders], capture_output=True,
                             text=True, timeout=300,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("KVSPECS ")), None)
    assert line is not None, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(line.removeprefix("KVSPECS "))
    return {Path(folder).name: value for folder, value in result.items()}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(CASES))
def test_planner_kv_bytes_match_vllms_specs(name: str, vllm_specs: dict[str, Any]) -> None:
    built = vllm_specs[name]
    assert "error" not in built, built.get("trace")
    vllm_kv, kinds = _vllm_kv_bytes_per_token(built["specs"])
    facts = facts_from_hf_config(copy.deepcopy(CASES[name]), name=name)
    assert kinds.pop("compressed") > 0 or not facts.compressed_kv_bytes_per_token
    assert kinds == {"full": facts.kv_layers, "sliding": facts.sliding_window_layers,
                     "state": facts.state_layers}
    planned = kv_bytes_per_token(
        facts, 1, 1, 2, tokens=TOKENS,
        state_dtype_bytes=DTYPE_BYTES.get(facts.state_dtype or "bfloat16", 2),
        conv_dtype_bytes=2)
    assert planned == pytest.approx(vllm_kv, rel=0.05), (planned, vllm_kv, built["specs"])


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(CASES))
def test_planner_parameters_match_the_model_vllm_builds(name: str,
                                                        vllm_specs: dict[str, Any]) -> None:
    """The parameter count (the weight bytes of an unquantized checkpoint without an
    index are parameters x dtype bytes) against the parameters of the model vLLM built
    from the same config.json, within 5%."""
    built = vllm_specs[name]
    assert "error" not in built, built.get("trace")
    facts = facts_from_hf_config(copy.deepcopy(CASES[name]), name=name)
    assert facts.parameters == pytest.approx(built["parameters"], rel=0.05)

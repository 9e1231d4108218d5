"""Model families whose config.json the planner once misread (issue 56): per-layer and
per-modality lists, the experts each family names its own way, the field names of the
GPT-2 generation, and hybrid layer patterns.

Each config below is shaped like the family's published checkpoint: the fields and values
are those of transformers' config class for the type (its defaults, which the class's
docstring ties to the checkpoint named), as transformers writes them to config.json. The
expected figures are derived by hand in the comments.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from llm_operator import cli
from llm_operator.facts import message as fm
from llm_operator.facts.control import FactsFailed, parse_facts
from llm_operator.modelfacts import facts_from_hf_config
from llm_operator.models import parse_llmservice
from llm_operator.planning import kv_bytes_per_token, make_plan

pytestmark = pytest.mark.unit


def spec(name: str, product: str = "NVIDIA-H100-80GB-HBM3", **sections: Any) -> Any:
    body: dict[str, Any] = {"model": {"name": name}, "gpus": {"product": product}}
    for key, values in sections.items():
        body.setdefault(key, {}).update(values)
    return parse_llmservice({"metadata": {"name": "svc", "namespace": "ml"}, "spec": body}).spec


# --------------------------------------------------------------------------- item 1

# google/gemma-3n-E4B as transformers' Gemma3nConfig writes it (Gemma3nTextConfig's
# defaults: its __post_init__ turns intermediate_size 16384 into one per layer and fills
# layer_types, every 5th layer full attention).
GEMMA_3N_TEXT: dict[str, Any] = {
    "model_type": "gemma3n_text", "vocab_size": 262400, "hidden_size": 2048,
    "intermediate_size": [16384] * 35, "num_hidden_layers": 35, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 256, "max_position_embeddings": 32768,
    "sliding_window": 512, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "layer_types": ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention"
                    for i in range(35)],
    "vocab_size_per_layer_input": 262144, "hidden_size_per_layer_input": 256,
    "num_kv_shared_layers": 15, "laurel_rank": 64, "altup_num_inputs": 4,
    "activation_sparsity_pattern": [0.95] * 10 + [0.0] * 25,
}
GEMMA_3N: dict[str, Any] = {"model_type": "gemma3n", "architectures":
                            ["Gemma3nForConditionalGeneration"], "text_config": GEMMA_3N_TEXT}

# baidu/ERNIE-4.5-VL-28B-A3B-PT's language model as transformers'
# Ernie4_5_VLMoeTextConfig writes it: moe_intermediate_size is a (text, vision) pair,
# one moe_num_experts for both groups, the first layer dense (mlp_layer_types).
ERNIE_VL_TEXT: dict[str, Any] = {
    "model_type": "ernie4_5_vl_moe_text", "vocab_size": 103424, "hidden_size": 2560,
    "intermediate_size": 12288, "num_hidden_layers": 28, "num_attention_heads": 20,
    "num_key_value_heads": 4, "max_position_embeddings": 131072,
    "tie_word_embeddings": True, "use_bias": False, "moe_intermediate_size": [1536, 512],
    "moe_k": 6, "moe_num_experts": 64, "moe_num_shared_experts": 2,
    "mlp_layer_types": ["dense"] + ["sparse"] * 27, "torch_dtype": "bfloat16",
}
ERNIE_VL: dict[str, Any] = {
    "model_type": "ernie4_5_vl_moe", "architectures": ["Ernie4_5_VLMoeForConditionalGeneration"],
    "text_config": ERNIE_VL_TEXT,
    "vision_config": {"model_type": "ernie4_5_vl_moe_vision", "depth": 32,
                      "hidden_size": 1280, "intermediate_size": 5120, "num_heads": 16},
}


def test_gemma_3n_per_layer_intermediate_size_is_summed_over_its_layers() -> None:
    facts = facts_from_hf_config(GEMMA_3N, name="google/gemma-3n-E4B")
    # Per layer: attention q 2048x8x256 + k,v 2048x2x(256+256) + o 8x256x2048
    # = 4,194,304 + 2,097,152 + 4,194,304 = 10,485,760; MLP 3 x 2048 x 16384 = 100,663,296;
    # norms 2 x 2048. Tied embeddings 262,400 x 2048 + the final norm 2048.
    # 35 x (10,485,760 + 100,663,296 + 4,096) + 537,395,200 + 2048 = 4,427,757,568
    # (the per-layer input embeddings, AltUp and LAuReL are not counted).
    assert facts.parameters == 4_427_757_568
    assert (facts.full_attention_layers, facts.sliding_window_layers) == (7, 28)
    # 7 full layers x 2 KV heads x (256 + 256) x 2 bytes per token at TP 1; the 28
    # sliding layers hold 512 tokens at most (without a length, counted as full: 35 x).
    assert kv_bytes_per_token(facts, 1, 1, 2) == 35 * 2 * 512 * 2 == 71_680
    assert kv_bytes_per_token(facts, 1, 1, 2, tokens=32768) < 7 * 2 * 512 * 2 + 2048
    plan = make_plan(spec("google/gemma-3n-E4B"), facts=facts)
    assert plan.tensor_parallel_size == 1
    assert plan.weight_bytes == 2 * 4_427_757_568


def test_per_layer_widths_are_read_layer_by_layer() -> None:
    """A MatFormer slice of Gemma-3n (its Mix-n-Match sub-models) gives each layer its own
    width: the count uses each layer's, not the first's."""
    text = {**GEMMA_3N_TEXT, "intermediate_size": [8192] * 20 + [16384] * 15}
    facts = facts_from_hf_config({**GEMMA_3N, "text_config": text})
    # The MLPs shrink by 3 x 2048 x 20 x (16384 - 8192) = 1,006,632,960.
    assert facts.parameters == 4_427_757_568 - 1_006_632_960 == 3_421_124_608


def test_ernie_4_5_vl_per_modality_lists_do_not_crash() -> None:
    facts = facts_from_hf_config(ERNIE_VL, name="baidu/ERNIE-4.5-VL-28B-A3B-PT")
    assert facts.num_layers == 28 and facts.moe_intermediate_size in (None, 1536)


@pytest.mark.parametrize(("field", "value", "says"), [
    ("intermediate_size", [16384] * 34, "is a list of 34 for 35 layers"),
    ("intermediate_size", "16384", 'is "16384", not a number'),
    ("num_key_value_heads", [2, 2], "is a list, not a number"),
    ("head_dim", {"full": 256}, "is a mapping, not a number"),
    ("sliding_window", True, "is true, not a number"),
])
def test_a_field_of_an_unexpected_shape_is_refused_by_name(field: str, value: Any,
                                                           says: str) -> None:
    text = {**GEMMA_3N_TEXT, field: value}
    with pytest.raises(ValueError) as exc:
        facts_from_hf_config({**GEMMA_3N, "text_config": text})
    message = str(exc.value)
    assert f"config.json {field} {says}" in message
    assert "model_type 'gemma3n_text'" in message
    assert message.endswith(": give spec.model.architecture")


def test_a_shape_no_check_foresaw_is_still_a_refusal() -> None:
    # rope_scaling read as a mapping; a list there fails deep in the reader.
    text = {**GEMMA_3N_TEXT, "rope_scaling": ["yarn", 4.0]}
    with pytest.raises(ValueError) as exc:
        facts_from_hf_config({**GEMMA_3N, "text_config": text})
    assert "model_type 'gemma3n_text'" in str(exc.value)
    assert "AttributeError" in str(exc.value)
    assert str(exc.value).endswith(": give spec.model.architecture")


def test_the_operator_reports_a_refused_shape_as_a_failed_read() -> None:
    bad = copy.deepcopy(GEMMA_3N)
    bad["text_config"]["intermediate_size"] = [16384] * 34
    message = fm.encode_facts(bad, None, None, source="google/gemma-3n-E4B@main")
    with pytest.raises(FactsFailed) as exc:
        parse_facts(message, "google/gemma-3n-E4B")
    assert exc.value.error["kind"] == fm.INVALID
    assert "intermediate_size is a list of 34" in exc.value.error["problem"]


def test_facts_job_writes_its_termination_message_on_every_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    log = tmp_path / "termination-log"
    # A config the parser refuses: exit 2, kind invalid, the field named.
    bad = copy.deepcopy(GEMMA_3N)
    bad["text_config"]["intermediate_size"] = [16384] * 34
    (folder / "config.json").write_text(json.dumps(bad))
    assert cli.main(["facts", "--repo", "google/gemma-3n-E4B", "--source", str(folder),
                     "--termination-log", str(log)]) == 2
    err = fm.decode(log.read_text())["error"]
    assert err["kind"] == fm.INVALID and "intermediate_size" in err["problem"]
    # The published configs are read: exit 0.
    (folder / "config.json").write_text(json.dumps(GEMMA_3N))
    assert cli.main(["facts", "--repo", "google/gemma-3n-E4B", "--source", str(folder),
                     "--termination-log", str(log)]) == 0
    (folder / "config.json").write_text(json.dumps(ERNIE_VL))
    assert cli.main(["facts", "--repo", "baidu/ERNIE-4.5-VL-28B-A3B-PT", "--source",
                     str(folder), "--termination-log", str(log)]) == 0
    # An exception nothing expected (a bug): still a message, exit 1.
    from llm_operator.cli import modelsource

    def broken(*_a: Any, **_k: Any) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(modelsource.fm, "encode_facts", broken)
    assert cli.main(["facts", "--repo", "google/gemma-3n-E4B", "--source", str(folder),
                     "--termination-log", str(log)]) == 1
    err = fm.decode(log.read_text())["error"]
    assert err["kind"] == fm.INTERNAL and "RuntimeError: boom" in err["problem"]
    assert "spec.model.architecture" in err["fix"]
    capsys.readouterr()

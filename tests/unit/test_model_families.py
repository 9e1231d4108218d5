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
from llm_operator.api.models import parse_llmservice
from llm_operator.facts import message as fm
from llm_operator.facts.control import FactsFailed, parse_facts
from llm_operator.knowledge.modelfacts import MAX_CONTEXT_UNSTATED, facts_from_hf_config
from llm_operator.planning import kv_bytes_per_token, make_plan
from llm_operator.planning.memory import kv_bytes_per_sequence

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
    # as a plain decoder (what was counted before). vLLM's gemma3n.py builds more:
    # per-layer embeddings 262,144 x 35 x 256 = 2,348,810,240 and their projection
    # 2048 x 35 x 256 = 18,350,080; AltUp's 3 + 3 projections 2048 x 2048 = 25,165,824;
    # per layer the input gate and projection 2 x 2048 x 256, LAuReL 2 x 2048 x 64 and
    # AltUp's coefficients 4^2 + 4^3 and router 2048 x 4: 1,318,992 x 35 = 46,164,720;
    # less K and V of the 15 KV-shared layers, 15 x 2048 x 2 x 2 x 256 = 31,457,280.
    assert facts.parameters == 4_427_757_568 + 2_348_810_240 + 18_350_080 + 25_165_824 \
        + 46_164_720 - 31_457_280 == 6_834_791_152
    assert (facts.full_attention_layers, facts.sliding_window_layers) == (7, 28)
    # 7 full layers x 2 KV heads x (256 + 256) x 2 bytes per token at TP 1; the 28
    # sliding layers hold 512 tokens at most (without a length, counted as full: 35 x).
    assert kv_bytes_per_token(facts, 1, 1, 2) == 35 * 2 * 512 * 2 == 71_680
    assert kv_bytes_per_token(facts, 1, 1, 2, tokens=32768) < 7 * 2 * 512 * 2 + 2048
    plan = make_plan(spec("google/gemma-3n-E4B"), facts=facts)
    assert plan.tensor_parallel_size == 1
    assert plan.weight_bytes == 2 * 6_834_791_152


def test_per_layer_widths_are_read_layer_by_layer() -> None:
    """A MatFormer slice of Gemma-3n (its Mix-n-Match sub-models) gives each layer its own
    width: the count uses each layer's, not the first's."""
    text = {**GEMMA_3N_TEXT, "intermediate_size": [8192] * 20 + [16384] * 15}
    facts = facts_from_hf_config({**GEMMA_3N, "text_config": text})
    # The MLPs shrink by 3 x 2048 x 20 x (16384 - 8192) = 1,006,632,960.
    assert facts.parameters == 6_834_791_152 - 1_006_632_960


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


# --------------------------------------------------------------------------- item 2

# baidu/ERNIE-4.5-21B-A3B-PT as transformers' Ernie4_5_MoeConfig gives it (its defaults;
# moe_layer_end_index -1 is the last layer): 64 routed experts of 1536, 6 per token, 2
# shared, the first layer dense. The class sets no dtype; the published config says
# bfloat16.
ERNIE_MOE: dict[str, Any] = {
    "model_type": "ernie4_5_moe", "architectures": ["Ernie4_5_MoeForCausalLM"],
    "vocab_size": 103424, "hidden_size": 2560, "intermediate_size": 12288,
    "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4,
    "max_position_embeddings": 131072, "tie_word_embeddings": True, "use_bias": False,
    "moe_intermediate_size": 1536, "moe_k": 6, "moe_num_experts": 64,
    "moe_num_shared_experts": 2, "moe_layer_start_index": 1, "moe_layer_end_index": -1,
    "moe_layer_interval": 1, "torch_dtype": "bfloat16",
}
# Per layer (head_dim 2560 / 20 = 128): attention q 2560 x 2560 + k,v 2560 x 4 x 256 + o
# 2560 x 2560 = 15,728,640; an expert 3 x 2560 x 1536 = 11,796,480; norms 2 x 2560.
ERNIE_ATTENTION = 28 * 15_728_640  # 440,401,920
ERNIE_EXPERT = 3 * 2560 * 1536  # 11,796,480
ERNIE_COMMON = (103424 * 2560 + 2560  # tied embeddings, final norm: 264,768,000
                + ERNIE_ATTENTION
                + 3 * 2560 * 12288  # layer 0's dense MLP: 94,371,840
                + 27 * 2 * ERNIE_EXPERT  # shared experts: 637,009,920
                + 27 * 2560 * 64  # routers: 4,423,680
                + 28 * 2 * 2560)  # norms: 143,360
ERNIE_TOTAL = ERNIE_COMMON + 27 * 64 * ERNIE_EXPERT  # + 20,384,317,440 = 21,825,436,160
ERNIE_ACTIVE = ERNIE_COMMON + 27 * 6 * ERNIE_EXPERT  # + 1,911,029,760 = 3,352,148,480


def test_ernie_4_5_moe_experts_are_read_from_moe_num_experts() -> None:
    facts = facts_from_hf_config(ERNIE_MOE, name="baidu/ERNIE-4.5-21B-A3B-PT")
    assert (facts.num_experts, facts.num_experts_per_token, facts.shared_experts) == (64, 6, 2)
    assert facts.parameters == ERNIE_TOTAL == 21_825_436_160  # "21B"
    assert facts.active == ERNIE_ACTIVE == 3_352_148_480  # "A3B"
    # 43.65 GB of bf16 weights do not fit one L4 (22.5 GiB): not TP 1, as was planned
    # when the experts went unread (a dense 3.35 B model, 6.7 GB).
    plan = make_plan(spec("baidu/ERNIE-4.5-21B-A3B-PT", product="NVIDIA-L4"), facts=facts)
    assert plan.weight_bytes == 2 * 21_825_436_160
    assert plan.tensor_parallel_size * plan.pipeline_parallel_size >= 2


def test_the_index_total_size_is_the_weight_bytes_whenever_there_is_one() -> None:
    """transformers' class writes no dtype (float32, the class default): the index's bytes
    are what the checkpoint holds, used as written, not 4 bytes per estimated parameter."""
    config = {k: v for k, v in ERNIE_MOE.items() if k != "torch_dtype"}
    total_size = 43_650_872_320  # 2 x 21,825,436,160: a bf16 checkpoint of that count
    facts = facts_from_hf_config(config, index={"metadata": {"total_size": total_size}})
    plan = make_plan(spec("baidu/ERNIE-4.5-21B-A3B-PT", product="NVIDIA-L4"), facts=facts)
    assert plan.weight_bytes == total_size
    weights = next(e for e in plan.explanations if e.name == "weightBytes")
    assert "total_size" in weights.formula
    # A checkpoint that says float32 is served in bfloat16: half the index's bytes.
    f32 = facts_from_hf_config({**config, "torch_dtype": "float32"},
                               index={"metadata": {"total_size": 2 * total_size}})
    plan = make_plan(spec("baidu/ERNIE-4.5-21B-A3B-PT", product="NVIDIA-L4"), facts=f32)
    assert plan.weight_bytes == total_size
    weights = next(e for e in plan.explanations if e.name == "weightBytes")
    assert "x 2 / 4" in weights.formula


def test_ernie_4_5_vl_has_text_and_vision_experts() -> None:
    facts = facts_from_hf_config(ERNIE_VL, name="baidu/ERNIE-4.5-VL-28B-A3B-PT")
    assert (facts.num_experts, facts.num_experts_per_token) == (64, 6)
    assert facts.moe_intermediate_size == 1536
    # As ERNIE-4.5-MoE, plus 64 vision experts of 3 x 2560 x 512 = 3,932,160 in each of
    # the 27 MoE layers (6,794,772,480), their routers (27 x 2560 x 64 = 4,423,680), and
    # the vision tower: 32 x (4 x 1280^2 + 2 x 1280 x 5120) = 629,145,600.
    vision_experts = 27 * 64 * 3 * 2560 * 512 + 27 * 2560 * 64
    assert facts.parameters == ERNIE_TOTAL + vision_experts + 629_145_600 \
        == 29_253_777_920  # "28B"
    # A text token routes to 6 text experts: the vision experts are not active.
    assert facts.active == ERNIE_ACTIVE + 27 * 2560 * 64 + 629_145_600
    # The published config's (text, vision) pair of counts reads the same.
    pair = {**ERNIE_VL_TEXT, "moe_num_experts": [64, 64], "moe_layer_start_index": [1, 1],
            "moe_layer_end_index": [27, 27]}
    pair.pop("mlp_layer_types")
    same = facts_from_hf_config({**ERNIE_VL, "text_config": pair})
    assert same.parameters == facts.parameters


# rhymes-ai/Aria's language model (transformers' AriaTextConfig: the experts' width is
# intermediate_size; values of the published checkpoint's text_config), with its
# Idefics2-shaped vision tower.
ARIA: dict[str, Any] = {
    "model_type": "aria", "architectures": ["AriaForConditionalGeneration"],
    "text_config": {
        "model_type": "aria_text", "hidden_size": 2560, "intermediate_size": 1664,
        "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 20,
        "moe_num_experts": 64, "moe_topk": 6, "moe_num_shared_experts": 2,
        "vocab_size": 100352, "max_position_embeddings": 65536,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "vision_config": {"model_type": "idefics3_vision", "hidden_size": 1152,
                      "intermediate_size": 4304, "num_hidden_layers": 27},
}


def test_aria_experts_are_read_from_moe_num_experts() -> None:
    facts = facts_from_hf_config(ARIA, name="rhymes-ai/Aria")
    assert (facts.num_experts, facts.num_experts_per_token, facts.shared_experts) == (64, 6, 2)
    # Per layer: attention 2 x 2560^2 + 2560 x 20 x 256 = 26,214,400; an expert
    # 3 x 2560 x 1664 = 12,779,520. 28 x (26,214,400 + 66 x 12,779,520 + 2560 x 64 router
    # + 2 x 2560 norms) + embeddings 2 x 100,352 x 2560 + 2560 + vision 27 x (4 x 1152^2 +
    # 2 x 1152 x 4304) = 24,869,091,840 + 411,070,464 = 25,280,162,304 ("25.3B").
    assert facts.parameters == 25_280_162_304
    plan = make_plan(spec("rhymes-ai/Aria"), facts=facts)
    assert plan.weight_bytes == 2 * 25_280_162_304
    assert plan.tensor_parallel_size == 1  # 50.6 GB on one H100


def test_is_moe_false_means_dense_whatever_the_expert_count() -> None:
    # transformers' DogeConfig (SmallDoge/Doge-320M): is_moe false by default, with
    # num_experts 16384 and num_experts_per_tok 64 written beside it.
    doge = {"model_type": "doge", "vocab_size": 32768, "hidden_size": 1024,
            "intermediate_size": 2048, "num_hidden_layers": 32, "num_attention_heads": 8,
            "num_key_value_heads": 4, "max_position_embeddings": 2048,
            "is_moe": False, "num_experts": 16384, "num_experts_per_tok": 64}
    facts = facts_from_hf_config(doge)
    dense = facts_from_hf_config({k: v for k, v in doge.items()
                                  if k not in ("is_moe", "num_experts")})
    assert facts.num_experts is None and facts.parameters == dense.parameters


# --------------------------------------------------------------------------- item 3

# openai-community/gpt2 as published (GPT2Config's defaults).
GPT2: dict[str, Any] = {
    "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 50257,
    "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
    "activation_function": "gelu_new", "tie_word_embeddings": True,
}
# bigcode/starcoder as published (GPTBigCodeConfig's names; multi-query attention).
STARCODER: dict[str, Any] = {
    "model_type": "gpt_bigcode", "architectures": ["GPTBigCodeForCausalLM"],
    "vocab_size": 49152, "n_positions": 8192, "n_embd": 6144, "n_layer": 40, "n_head": 48,
    "n_inner": 24576, "multi_query": True, "torch_dtype": "float32",
}
# EleutherAI/gpt-j-6b as published (GPTJConfig's defaults).
GPTJ: dict[str, Any] = {
    "model_type": "gptj", "architectures": ["GPTJForCausalLM"], "vocab_size": 50400,
    "n_positions": 2048, "n_embd": 4096, "n_layer": 28, "n_head": 16, "rotary_dim": 64,
    "n_inner": None, "tie_word_embeddings": False,
}
# mosaicml/mpt-7b as published (MptConfig's names: d_model, n_layers, n_heads,
# expansion_ratio; no kv_n_heads, so every head keeps K and V).
MPT: dict[str, Any] = {
    "model_type": "mpt", "architectures": ["MPTForCausalLM"], "d_model": 4096,
    "n_heads": 32, "n_layers": 32, "expansion_ratio": 4, "max_seq_len": 2048,
    "vocab_size": 50432, "attn_config": {"alibi": True, "attn_type": "multihead_attention"},
    "torch_dtype": "bfloat16",
}
# databricks/dbrx-instruct as published (DbrxConfig with its attn and ffn sub-configs).
DBRX: dict[str, Any] = {
    "model_type": "dbrx", "architectures": ["DbrxForCausalLM"], "d_model": 6144,
    "n_heads": 48, "n_layers": 40, "max_seq_len": 32768, "vocab_size": 100352,
    "attn_config": {"kv_n_heads": 8, "clip_qkv": 8, "rope_theta": 500000},
    "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
# bigscience/bloom-560m as published (BloomConfig's names n_layer, n_head; ALiBi, so no
# position count).
BLOOM: dict[str, Any] = {
    "model_type": "bloom", "architectures": ["BloomForCausalLM"], "vocab_size": 250880,
    "hidden_size": 1024, "n_layer": 24, "n_head": 16, "n_inner": None,
}


@pytest.mark.parametrize(("config", "shape", "kv_per_token"), [
    # 12 layers x 12 heads x (64 + 64) x 2 bytes
    (GPT2, (768, 12, 12, 12, 64, 1024), 12 * 12 * 128 * 2),
    # multi_query: one KV head of 128; 40 x 1 x 256 x 2 = 20,480 (48 heads: 983,040)
    (STARCODER, (6144, 40, 48, 1, 128, 8192), 40 * 1 * 256 * 2),
    # 28 x 16 x 512 x 2
    (GPTJ, (4096, 28, 16, 16, 256, 2048), 28 * 16 * 512 * 2),
    # 32 x 32 x 256 x 2
    (MPT, (4096, 32, 32, 32, 128, 2048), 32 * 32 * 256 * 2),
    # attn_config.kv_n_heads 8: 40 x 8 x 256 x 2 = 163,840
    (DBRX, (6144, 40, 48, 8, 128, 32768), 40 * 8 * 256 * 2),
], ids=["gpt2", "gpt_bigcode", "gptj", "mpt", "dbrx"])
def test_gpt2_generation_field_names_are_read(config: dict[str, Any],
                                              shape: tuple[int, ...],
                                              kv_per_token: int) -> None:
    facts = facts_from_hf_config(config)
    assert (facts.hidden_size, facts.num_layers, facts.num_attention_heads,
            facts.num_key_value_heads, facts.head_dim, facts.max_context) == shape
    assert kv_bytes_per_token(facts, 1, 1, 2) == kv_per_token


def test_dbrx_experts_are_read_from_ffn_config() -> None:
    facts = facts_from_hf_config(DBRX, name="databricks/dbrx-instruct")
    assert (facts.num_experts, facts.num_experts_per_token) == (16, 4)
    # Per layer: attention 2 x 6144^2 + 6144 x 8 x 256 = 88,080,384; an expert (w1, v1,
    # w2) 3 x 6144 x 10752 = 198,180,864; router 6144 x 16; norms 2 x 6144. Embeddings
    # 2 x 100,352 x 6144 + 6144. 40 x (88,080,384 + 16 x 198,180,864 + 98,304 + 12,288)
    # + 1,233,131,520 = 131,596,523,520 ("132B"); with 4 experts 36,469,708,800 ("36B").
    assert facts.parameters == 131_596_523_520
    assert facts.active == 36_469_708_800
    plan = make_plan(spec("databricks/dbrx-instruct"), facts=facts)
    assert plan.tensor_parallel_size == 4  # 263 GB of bf16: four 80 GB GPUs


def test_bloom_is_planned_at_the_length_vllm_assumes() -> None:
    """Bloom (ALiBi) names no length: refused before ("config.json has no
    max_position_embeddings"); vLLM serves it at 2048 (_get_and_verify_max_len's
    default, with a warning), and so is it planned, the source saying so."""
    facts = facts_from_hf_config(BLOOM, name="bigscience/bloom-560m")
    assert facts.max_context == 2048
    assert facts.source_of("max_context") == MAX_CONTEXT_UNSTATED
    assert "spec.engine.maxModelLen" in MAX_CONTEXT_UNSTATED
    # Tied by BloomConfig's default (config.json does not write it). Per layer:
    # attention 4 x 1024^2 = 4,194,304; MLP (two matrices) 2 x 1024 x 4096 = 8,388,608;
    # norms 2 x 1024: 12,584,960 x 24 = 302,039,040; embedding 250,880 x 1024 =
    # 256,901,120 once, + 1024: 558,941,184 (bigscience/bloom-560m: 559,214,592 with its
    # biases and embedding norm, -0.05%; read untied it was 815,842,304, +46%).
    assert facts.tie_word_embeddings
    assert facts.parameters == 558_941_184
    # 24 layers x 16 KV heads x (64 + 64) x 2 bytes.
    assert kv_bytes_per_token(facts, 1, 1, 2) == 98_304
    plan = make_plan(spec("bigscience/bloom-560m"), facts=facts)
    assert plan.max_model_len == 2048
    assert plan.fact_sources["maxContext"] == MAX_CONTEXT_UNSTATED
    facts = facts_from_hf_config({**BLOOM, "seq_length": 2048})
    assert facts.source_of("max_context") == "config.json"
    assert (facts.hidden_size, facts.num_layers, facts.num_attention_heads) == (1024, 24, 16)
    # n_embed, which BloomConfig also reads as hidden_size (bigscience/bloom's own).
    renamed = {k: v for k, v in BLOOM.items() if k != "hidden_size"}
    assert facts_from_hf_config({**renamed, "n_embed": 1024, "seq_length": 2048}).hidden_size \
        == 1024


# --------------------------------------------------------------------------- item 4

# ai21labs/Jamba-v0.1 as transformers' JambaConfig gives it (its defaults): attention in
# 1 layer of 8 (offset 4), experts in 1 of 2 (offset 1), the rest Mamba-1.
JAMBA: dict[str, Any] = {
    "model_type": "jamba", "architectures": ["JambaForCausalLM"], "vocab_size": 65536,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 262144,
    "attn_layer_period": 8, "attn_layer_offset": 4, "expert_layer_period": 2,
    "expert_layer_offset": 1, "num_experts": 16, "num_experts_per_tok": 2,
    "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 256,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
# ibm-ai-platform/Bamba-9B as published (BambaConfig's names): attention at layers 9,
# 18 and 27, the rest Mamba-2.
BAMBA: dict[str, Any] = {
    "model_type": "bamba", "architectures": ["BambaForCausalLM"], "vocab_size": 128000,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 262144,
    "attn_layer_indices": [9, 18, 27], "mamba_n_heads": 128, "mamba_d_head": 64,
    "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def test_jamba_attention_and_expert_periods() -> None:
    facts = facts_from_hf_config(JAMBA, name="ai21labs/Jamba-v0.1")
    assert (facts.kv_layers, facts.state_layers, facts.state_kind) == (4, 28, "mamba1")
    # Mamba-1 state per layer (inner 2 x 4096 = 8192): conv 3 x 8192 + SSM 8192 x 16.
    assert facts.state_elements_per_layer == 24_576 + 131_072 == 155_648
    assert facts.state_conv_elements_per_layer == 24_576
    # 4 attention layers x 8 KV heads x (128 + 128) x 2 bytes.
    assert kv_bytes_per_token(facts, 1, 1, 2) == 4 * 8 * 256 * 2 == 16_384
    # Attention 4 x (2 x 4096^2 + 4096 x 8 x 256) = 167,772,160; Mamba-1 28 x (in_proj
    # 4096 x 16384 + conv 8192 x 5 + x_proj 8192 x (256 + 32) + dt_proj 256 x 8192 + 8192
    # + A 8192 x 16 + D 8192 + out_proj 8192 x 4096 = 105,308,160) = 2,948,628,480;
    # experts 16 layers x 16 x 3 x 4096 x 14336 = 45,097,156,608; dense MLPs 16 x
    # 176,160,768 = 2,818,572,288; routers 16 x 4096 x 16; embeddings 2 x 65536 x 4096 +
    # 4096; norms 32 x 2 x 4096: 51,570,315,264 ("52B").
    assert facts.parameters == 51_570_315_264
    assert facts.num_experts == 16
    plan = make_plan(spec("ai21labs/Jamba-v0.1"), facts=facts)
    assert plan.tensor_parallel_size == 2  # 103 GB of bf16


def test_bamba_attention_layer_indices() -> None:
    facts = facts_from_hf_config(BAMBA, name="ibm-ai-platform/Bamba-9B")
    assert (facts.kv_layers, facts.state_layers, facts.state_kind) == (3, 29, "mamba2")
    # Mamba-2 (128 heads of 64 = 8192): conv 3 x (8192 + 2 x 1 x 256) + SSM 128 x 64 x 256.
    assert facts.state_elements_per_layer == 26_112 + 2_097_152 == 2_123_264
    # 3 attention layers, not 32: 12,288 B/token (131,072 before, 10.7x).
    assert kv_bytes_per_token(facts, 1, 1, 2) == 3 * 8 * 256 * 2 == 12_288
    # Attention 3 x 41,943,040; Mamba-2 29 x (4096 x (16384 + 512 + 128) + 8192 x 4096
    # = 103,284,736); MLPs 32 x 3 x 4096 x 14336; embeddings 2 x 128000 x 4096 + 4096;
    # norms 32 x 2 x 4096: 9,807,073,280 ("9B").
    assert facts.parameters == 9_807_073_280


# --------------------------------------------------------------------------- two-matrix MLPs

# bigcode/starcoder2-3b as transformers' Starcoder2Config writes it (tie_word_embeddings:
# the class's default, true; the published checkpoint is float32).
STARCODER2_3B: dict[str, Any] = {
    "model_type": "starcoder2", "architectures": ["Starcoder2ForCausalLM"],
    "vocab_size": 49152, "hidden_size": 3072, "intermediate_size": 12288,
    "num_hidden_layers": 30, "num_attention_heads": 24, "num_key_value_heads": 2,
    "max_position_embeddings": 16384, "sliding_window": 4096, "use_bias": True,
    "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": True, "torch_dtype": "float32",
}
# tiiuae/falcon-7b as transformers' FalconConfig writes it (its defaults: multi_query,
# num_kv_heads filled with num_attention_heads, which vLLM ignores without
# new_decoder_architecture).
FALCON_7B: dict[str, Any] = {
    "model_type": "falcon", "architectures": ["FalconForCausalLM"], "vocab_size": 65024,
    "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
    "num_kv_heads": 71, "multi_query": True, "new_decoder_architecture": False,
    "parallel_attn": True, "bias": False, "alibi": False, "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
}
# tiiuae/falcon-40b: the new decoder architecture, 8 KV heads.
FALCON_40B: dict[str, Any] = {
    **FALCON_7B, "hidden_size": 8192, "num_hidden_layers": 60, "num_attention_heads": 128,
    "num_kv_heads": 8, "new_decoder_architecture": True,
}
# EleutherAI/gpt-neox-20b as published.
GPT_NEOX_20B: dict[str, Any] = {
    "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "vocab_size": 50432,
    "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 44,
    "num_attention_heads": 64, "max_position_embeddings": 2048, "rotary_pct": 0.25,
    "use_parallel_residual": True, "tie_word_embeddings": False, "torch_dtype": "float16",
}
# facebook/opt-6.7b as OPTConfig writes it (the MLP is ffn_dim; embeddings tied).
OPT_6_7B: dict[str, Any] = {
    "model_type": "opt", "architectures": ["OPTForCausalLM"], "vocab_size": 50272,
    "hidden_size": 4096, "ffn_dim": 16384, "num_hidden_layers": 32,
    "num_attention_heads": 32, "max_position_embeddings": 2048, "word_embed_proj_dim": 4096,
    "do_layer_norm_before": True, "tie_word_embeddings": True, "torch_dtype": "float16",
}
# microsoft/phi-2 as published.
PHI_2: dict[str, Any] = {
    "model_type": "phi", "architectures": ["PhiForCausalLM"], "vocab_size": 51200,
    "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 2048,
    "partial_rotary_factor": 0.4, "hidden_act": "gelu_new", "tie_word_embeddings": False,
    "torch_dtype": "float16",
}
# adept/persimmon-8b-base: PersimmonConfig's defaults.
PERSIMMON: dict[str, Any] = {
    "model_type": "persimmon", "architectures": ["PersimmonForCausalLM"],
    "vocab_size": 262144, "hidden_size": 4096, "intermediate_size": 16384,
    "num_hidden_layers": 36, "num_attention_heads": 64, "hidden_act": "relu2",
    "max_position_embeddings": 16384, "tie_word_embeddings": False,
}
# NemotronConfig's defaults ("nemotron-15b style"; head_dim filled in, KV heads none:
# all 48).
NEMOTRON: dict[str, Any] = {
    "model_type": "nemotron", "architectures": ["NemotronForCausalLM"],
    "vocab_size": 256000, "hidden_size": 6144, "intermediate_size": 24576,
    "num_hidden_layers": 32, "num_attention_heads": 48, "head_dim": 128,
    "num_key_value_heads": None, "hidden_act": "relu2", "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}


# Per family: attention + MLP (up and down: 2 x hidden x intermediate) + 2 x hidden of
# norms per layer; embeddings (one matrix when tied) + the final norm. Biases and GPT-2's
# and OPT's learned positions are not counted (under 1.3 %). "was": with three MLP
# matrices, as counted before.
@pytest.mark.parametrize(("config", "parameters"), [
    # 12 x (4 x 768^2 + 2 x 768 x 3072 + 1536) + 50,257 x 768 + 768 (124 M; was 151.9 M)
    (GPT2, 123_551_232),
    # 40 x (2 x 6144^2 + 6144 x 256 + 2 x 6144 x 24576 + 12,288) + 49,152 x 6144 + 6144
    # (15.5 B; was 21.5 B)
    ({**STARCODER, "tie_word_embeddings": True}, 15_464_896_512),
    # 28 x (4 x 4096^2 + 2 x 4096 x 16384 + 8192) + 2 x 50,400 x 4096 + 4096 (6.05 B;
    # was 7.93 B)
    (GPTJ, 6_050_254_848),
    # 32 x (4 x 4096^2 + 2 x 4096 x 16384 + 8192) + 50,432 x 4096 + 4096 (6.65 B; was 8.80 B)
    ({**MPT, "tie_word_embeddings": True}, 6_649_286_656),
    # 24 x (4 x 1024^2 + 2 x 1024 x 4096 + 2048) + 250,880 x 1024 + 1024 (559 M; was 660 M)
    ({**BLOOM, "seq_length": 2048, "tie_word_embeddings": True}, 558_941_184),
    # 30 x (2 x 3072^2 + 3072 x 2 x 256 + 2 x 3072 x 12288 + 6144) + 49,152 x 3072 + 3072
    # (3.03 B; was 4.16 B)
    (STARCODER2_3B, 3_029_523_456),
    # One KV head: 32 x (2 x 4544^2 + 4544 x 128 + 2 x 4544 x 18176 + 9088) + 65,024 x 4544
    # + 4544 (6.92 B; was 11.16 B: three matrices, 71 KV heads, untied)
    (FALCON_7B, 6_921_716_160),
    # 44 x (4 x 6144^2 + 2 x 6144 x 24576 + 12,288) + 2 x 50,432 x 6144 + 6144 (20.55 B;
    # was 27.20 B)
    (GPT_NEOX_20B, 20_551_587_840),
    # 32 x (4 x 4096^2 + 2 x 4096 x 16384 + 8192) + 50,272 x 4096 + 4096 (6.65 B; was 8.80 B)
    (OPT_6_7B, 6_648_631_296),
    # 32 x (4 x 2560^2 + 2 x 2560 x 10240 + 5120) + 2 x 51,200 x 2560 + 2560 (2.78 B;
    # was 3.62 B)
    (PHI_2, 2_778_892_800),
    # 36 x (4 x 4096^2 + 2 x 4096 x 16384 + 8192) + 2 x 262,144 x 4096 + 4096 (9.40 B;
    # was 11.81 B)
    (PERSIMMON, 9_395_539_968),
    # 32 x (4 x 6144^2 + 2 x 6144 x 24576 + 12,288) + 2 x 256,000 x 6144 + 6144 (17.64 B;
    # was 22.47 B)
    (NEMOTRON, 17_641_641_984),
], ids=["gpt2", "gpt_bigcode", "gptj", "mpt", "bloom", "starcoder2", "falcon", "gpt_neox",
        "opt", "phi", "persimmon", "nemotron"])
def test_two_matrix_mlps_are_counted_as_two(config: dict[str, Any], parameters: int) -> None:
    assert facts_from_hf_config(config).parameters == parameters


def test_starcoder2_3b_weighs_3_03_b_parameters() -> None:
    facts = facts_from_hf_config(STARCODER2_3B, name="bigcode/starcoder2-3b")
    plan = make_plan(spec("bigcode/starcoder2-3b", product="NVIDIA-L4"), facts=facts)
    # A float32 checkpoint served in bfloat16: 2 x 3,029,523,456 (8.32 GB before).
    assert plan.weight_bytes == 6_059_046_912
    assert plan.tensor_parallel_size == 1


def test_falcon_kv_heads_as_vllm_reads_them() -> None:
    # Falcon-7B: multi_query, one KV head of 64: 32 x 1 x 128 x 2 = 8,192 B/token
    # (581,632 when its 71 query heads were read as KV heads).
    falcon_7b = facts_from_hf_config(FALCON_7B)
    assert falcon_7b.num_key_value_heads == 1
    assert kv_bytes_per_token(falcon_7b, 1, 1, 2) == 32 * 1 * 128 * 2 == 8_192
    # Falcon-40B: the new decoder architecture's num_kv_heads: 60 x 8 x 128 x 2.
    falcon_40b = facts_from_hf_config(FALCON_40B)
    assert kv_bytes_per_token(falcon_40b, 1, 1, 2) == 60 * 8 * 128 * 2 == 122_880
    # Neither: every head keeps K and V.
    mha = facts_from_hf_config({**FALCON_7B, "multi_query": False})
    assert mha.num_key_value_heads == 71
    # An untied Falcon (Falcon-11B writes tie_word_embeddings false): two matrices.
    untied = facts_from_hf_config({**FALCON_7B, "tie_word_embeddings": False})
    assert untied.parameters - falcon_7b.parameters == 65024 * 4544


# --------------------------------------------------------------------------- per-sequence state

# FalconH1Config's defaults: every layer attention and Mamba-2 side by side (its
# mamba_d_head "auto" = mamba_d_ssm 1024 / 128 heads = 8, as the class writes it).
FALCON_H1: dict[str, Any] = {
    "model_type": "falcon_h1", "architectures": ["FalconH1ForCausalLM"],
    "vocab_size": 128000, "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 8192, "mamba_d_ssm": 1024, "mamba_n_heads": 128,
    "mamba_d_head": 8, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
    "mamba_expand": 2, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
# MiniMaxAI/MiniMax-Text-01-hf as transformers 5's MiniMaxConfig writes it: 7 lightning
# layers, then one softmax layer.
MINIMAX_TEXT_01: dict[str, Any] = {
    "model_type": "minimax", "architectures": ["MiniMaxForCausalLM"], "vocab_size": 200064,
    "hidden_size": 6144, "intermediate_size": 9216, "num_hidden_layers": 80,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 10240000, "num_local_experts": 32, "num_experts_per_tok": 2,
    "layer_types": ["full_attention" if (i + 1) % 8 == 0 else "linear_attention"
                    for i in range(80)],
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
# moonshotai/Kimi-Linear-48B-A3B-Instruct as published (what vLLM's KimiLinearConfig
# reads): KDA layers and MLA layers by 1-based index in linear_attn_config.
KIMI_FULL = [4, 8, 12, 16, 20, 24, 27]
KIMI_LINEAR: dict[str, Any] = {
    "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"],
    "vocab_size": 163840, "hidden_size": 2304, "intermediate_size": 9216,
    "moe_intermediate_size": 1024, "num_hidden_layers": 27, "num_attention_heads": 32,
    "num_key_value_heads": 32, "kv_lora_rank": 512, "q_lora_rank": None,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "mla_use_nope": True, "num_experts": 256, "num_experts_per_token": 8,
    "num_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "model_max_length": 1048576,
    "linear_attn_config": {"full_attn_layers": KIMI_FULL,
                           "kda_layers": [i for i in range(1, 28) if i not in KIMI_FULL],
                           "num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
# transformers 5's BailingHybridConfig defaults (its __post_init__ writes layer_types
# from layer_group_size 8, and head_dim as MLA's qk_rope_head_dim).
BAILING_HYBRID: dict[str, Any] = {
    "model_type": "bailing_hybrid", "architectures": ["BailingMoeV2_5ForCausalLM"],
    "vocab_size": 157184, "hidden_size": 8192, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "moe_shared_expert_intermediate_size": 2048,
    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 64,
    "num_experts": 256, "num_shared_experts": 1, "num_experts_per_tok": 8,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "qk_nope_head_dim": 128, "head_dim": 64, "first_k_dense_replace": 4,
    "layer_group_size": 8, "num_kv_heads_for_linear_attn": 64,
    "max_position_embeddings": 131072, "tie_word_embeddings": False,
    "layer_types": ["full_attention" if (i + 1) % 8 == 0 else "linear_attention"
                    for i in range(80)],
}
# GraniteMoeHybridConfig's defaults (Bamba's Mamba-2 shape) with transformers 5's labels:
# "linear_attention" for the Mamba layers, attention at 9, 18 and 27.
GRANITE_4_H: dict[str, Any] = {
    "model_type": "granitemoehybrid", "architectures": ["GraniteMoeHybridForCausalLM"],
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "max_position_embeddings": 2048, "num_local_experts": 8, "num_experts_per_tok": 2,
    "shared_intermediate_size": 1024, "mamba_n_heads": 128, "mamba_n_groups": 1,
    "mamba_d_state": 256, "mamba_d_head": 64, "mamba_d_conv": 4, "mamba_expand": 2,
    "layer_types": ["full_attention" if i in (9, 18, 27) else "linear_attention"
                    for i in range(32)],
}


def test_falcon_h1_runs_mamba_2_beside_attention_in_every_layer() -> None:
    facts = facts_from_hf_config(FALCON_H1)
    assert (facts.kv_layers, facts.state_layers, facts.state_kind) == (32, 32, "mamba2")
    # vLLM's MambaStateShapeCalculator.mamba2_state_shape with intermediate mamba_d_ssm:
    # conv 3 x (1024 + 2 x 1 x 256) = 4,608; SSM 128 heads x 8 x 256 = 262,144.
    assert facts.state_elements_per_layer == 4_608 + 262_144 == 266_752
    assert facts.state_conv_elements_per_layer == 4_608
    # 32 layers x 266,752 x 2 bytes per sequence (0 before); KV unchanged: 32 x 8 x 256 x 2.
    assert kv_bytes_per_sequence(facts, 1, 1, 2, 1000) == 32 * 266_752 * 2 == 17_072_128
    assert kv_bytes_per_token(facts, 1, 1, 2) == 131_072
    # Mamba-2 weights per layer: in_proj 4096 x (2 x 1024 + 2 x 256 + 128) + out_proj
    # 1024 x 4096 = 15,204,352; x 32 = 486,539,264 over the 8,028,164,096 counted before
    # (attention, gated MLP, embeddings, norms).
    assert facts.parameters == 8_028_164_096 + 32 * 15_204_352 == 8_514_703_360


def test_minimax_text_01_lightning_state() -> None:
    facts = facts_from_hf_config(MINIMAX_TEXT_01)
    assert (facts.kv_layers, facts.state_layers, facts.state_kind) == (10, 70, "lightning")
    # linear_attention_state_shape: 64 heads x 128 x 128, no conv state.
    assert facts.state_elements_per_layer == 64 * 128 * 128 == 1_048_576
    assert facts.state_conv_elements_per_layer == 0
    # 70 x 1,048,576 x 2 bytes = 140 MiB per sequence at TP 1 (0 before); at TP 8 an
    # eighth of the heads on each GPU.
    assert kv_bytes_per_sequence(facts, 1, 1, 2, 1000) == 146_800_640
    assert kv_bytes_per_sequence(facts, 8, 1, 2, 1000) == 146_800_640 // 8
    assert kv_bytes_per_token(facts, 1, 1, 2) == 10 * 8 * 256 * 2 == 40_960
    # Lightning layers' weights (q, k, v, gate, out: 5 x 6144 x 8192 each) now counted:
    # 456,089,081,856 in all ("456B"; 438.5 B before), 48.4 B active (45.9 B without the
    # embeddings, as published).
    assert facts.parameters == 456_089_081_856
    # The published (remote-code) config's attn_type_list reads the same.
    published = {k: v for k, v in MINIMAX_TEXT_01.items() if k != "layer_types"}
    published["attn_type_list"] = [1 if (i + 1) % 8 == 0 else 0 for i in range(80)]
    assert facts_from_hf_config(published).state_elements_per_layer == 1_048_576
    assert facts_from_hf_config(published).kv_layers == 10


def test_kimi_linear_kda_state() -> None:
    facts = facts_from_hf_config(KIMI_LINEAR)
    assert (facts.kv_layers, facts.state_layers, facts.state_kind) == (7, 20, "kda")
    # kda_state_shape: conv 3 x (3 x 32 x 128) = 36,864 in the model's dtype; recurrent
    # 32 x 128 x 128 = 524,288 in float32 (kda_state_dtype's default).
    assert facts.state_elements_per_layer == 36_864 + 524_288
    assert facts.state_dtype == "float32"
    assert kv_bytes_per_sequence(facts, 1, 1, 2, 1000, state_dtype_bytes=4,
                                 conv_dtype_bytes=2) \
        == 20 * (36_864 * 2 + 524_288 * 4) == 43_417_600
    # 7 MLA layers x (512 + 64) x 2 bytes per token (27 layers' 31,104 before).
    assert kv_bytes_per_token(facts, 1, 1, 2) == 7 * 576 * 2 == 8_064
    assert facts.num_experts_per_token == 8
    assert round(facts.parameters / 1e9, 1) == 49.1  # "48B"
    assert round(facts.active / 1e9, 1) == 3.5  # "A3B"


def test_bailing_hybrid_lightning_state() -> None:
    facts = facts_from_hf_config(BAILING_HYBRID)
    assert (facts.kv_layers, facts.state_layers, facts.state_kind) == (10, 70, "lightning")
    # 64 heads of 8192 / 64 = 128 (not head_dim 64, MLA's rope size): 64 x 128 x 128.
    assert facts.state_elements_per_layer == 1_048_576
    assert kv_bytes_per_sequence(facts, 1, 1, 2, 1000) == 70 * 1_048_576 * 2
    # The MLA layers' latent: 10 x (512 + 64) x 2.
    assert kv_bytes_per_token(facts, 1, 1, 2) == 11_520
    # The published config gives layer_group_size only: the same layers.
    published = {k: v for k, v in BAILING_HYBRID.items() if k != "layer_types"}
    same = facts_from_hf_config(published)
    assert (same.kv_layers, same.state_elements_per_layer) == (10, 1_048_576)


def test_granite_4_h_mamba_layers_under_either_label() -> None:
    facts = facts_from_hf_config(GRANITE_4_H)
    # vLLM's granitemoehybrid.py builds "linear_attention" layers as Mamba-2: conv
    # 3 x (8192 + 2 x 256) + SSM 128 x 64 x 256 (0 before under this label).
    assert (facts.state_layers, facts.state_kind) == (29, "mamba2")
    assert facts.state_elements_per_layer == 26_112 + 2_097_152 == 2_123_264
    older = {**GRANITE_4_H, "layer_types": [
        "attention" if i in (9, 18, 27) else "mamba" for i in range(32)]}
    assert facts_from_hf_config(older).state_elements_per_layer == 2_123_264
    assert kv_bytes_per_token(facts, 1, 1, 2) == 3 * 32 * 256 * 2


# --------------------------------------------------------------------------- chunked attention

# meta-llama/Llama-4-Scout-17B-16E-Instruct as published: no_rope_layers empty, which
# Llama4TextConfig fills with every 4th layer NoPE (full attention); the others attend
# within chunks of attention_chunk_size.
LLAMA4_TEXT: dict[str, Any] = {
    "model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128,
    "hidden_size": 5120, "interleave_moe_layer_step": 1, "intermediate_size": 8192,
    "intermediate_size_mlp": 16384, "max_position_embeddings": 10485760,
    "no_rope_layers": [], "num_attention_heads": 40, "num_experts_per_tok": 1,
    "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
    "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "use_qk_norm": True, "vocab_size": 202048, "torch_dtype": "bfloat16",
}
LLAMA4: dict[str, Any] = {
    "model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
    "text_config": LLAMA4_TEXT, "tie_word_embeddings": False,
    "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408,
                      "intermediate_size": 5632, "num_hidden_layers": 34},
}
# The same as transformers 5's Llama4TextConfig writes it: no_rope_layers filled, and
# layer_types "chunked_attention" / "full_attention" (refused before: "sliding-window
# layers ... but no sliding_window size").
LLAMA4_T5 = {**LLAMA4, "text_config": {
    **LLAMA4_TEXT, "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(48)],
    "layer_types": ["chunked_attention" if (i + 1) % 4 else "full_attention"
                    for i in range(48)]}}


@pytest.mark.parametrize("config", [LLAMA4, LLAMA4_T5], ids=["published", "transformers5"])
def test_llama_4_chunked_layers_hold_one_chunk(config: dict[str, Any]) -> None:
    facts = facts_from_hf_config(config, name="meta-llama/Llama-4-Scout-17B-16E-Instruct")
    # 12 NoPE layers keep every token; 36 chunked layers at most 8192 (+ one block).
    assert (facts.kv_layers, facts.sliding_window_layers, facts.sliding_window) \
        == (12, 36, 8192)
    # Without a length, all 48 as full (the bound): 48 x 8 x 256 x 2.
    assert kv_bytes_per_token(facts, 1, 1, 2) == 196_608
    # A 131,072-token sequence at TP 1: 12 x 8 x 256 x 2 = 49,152 B/token, plus the
    # chunked layers' 36 x 8 x 256 x 2 x 8208 = 1,210,318,848 B per sequence (the
    # published config was planned with all 48 layers full: 196,608 B/token).
    assert kv_bytes_per_sequence(facts, 1, 1, 2, 131_072) == 1_210_318_848
    assert kv_bytes_per_token(facts, 1, 1, 2, tokens=131_072) \
        == 49_152 + -(-1_210_318_848 // 131_072) == 58_386
    assert round(facts.parameters / 1e9, 1) == 108.6  # "109B"
    assert round(facts.active / 1e9, 1) == 18.0  # "17B" active, with the vision tower
    # 128 K-token requests, 8 at a time: TP 4 (TP 8 when all 48 layers were full). Per GPU
    # at TP 4: 12 x 2 x 256 x 2 = 12,288 B/token + 36 x 2 x 256 x 2 x 8208 = 302,579,712 B
    # over the 132,096 tokens of a request (2,291): 14,579 (49,152 before).
    plan = make_plan(spec("meta-llama/Llama-4-Scout-17B-16E-Instruct", workload={
        "inputTokens": 131072, "outputTokens": 1024, "concurrency": 8}), facts=facts)
    assert plan.tensor_parallel_size == 4
    per_token = next(e for e in plan.explanations if e.name == "kvBytesPerToken")
    assert per_token.value == 14_579


def test_chunked_layers_without_a_chunk_size_are_refused_for_that() -> None:
    text = {k: v for k, v in LLAMA4_T5["text_config"].items() if k != "attention_chunk_size"}
    with pytest.raises(ValueError, match="chunked-attention layers in layer_types but no "
                       "attention_chunk_size"):
        facts_from_hf_config({**LLAMA4, "text_config": text})
    mixed = {**LLAMA4_T5["text_config"], "sliding_window": 4096,
             "layer_types": ["sliding_attention"] + LLAMA4_T5["text_config"]["layer_types"][1:]}
    with pytest.raises(ValueError, match="sliding-window layers of 4096 tokens and "
                       "chunked-attention layers of 8192"):
        facts_from_hf_config({**LLAMA4, "text_config": mixed})


# --------------------------------------------------------------------------- item 5
# MiniCPM3-4B (transformers' MiniCPM3Config defaults): MLA's projections, but vLLM's
# MiniCPM3Attention caches every head's K and V (Attention(num_heads, qk_nope +
# qk_rope, num_kv_heads=num_heads), V padded to that width): no latent cache. Found by
# the installed-corpus test (tests/vllm/test_corpus_from_installed.py).
MINICPM3 = {
    "architectures": ["MiniCPM3ForCausalLM"], "model_type": "minicpm3",
    "hidden_size": 2560, "intermediate_size": 6400, "num_hidden_layers": 62,
    "num_attention_heads": 40, "num_key_value_heads": 40, "head_dim": 32,
    "q_lora_rank": 768, "kv_lora_rank": 256, "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 32, "v_head_dim": 64, "vocab_size": 73448,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16",
}


def test_minicpm3_caches_full_heads_not_a_latent() -> None:
    facts = facts_from_hf_config(copy.deepcopy(MINICPM3), name="openbmb/MiniCPM3-4B")
    assert facts.mla_kv_dim is None and facts.v_head_dim is None
    # 62 layers x 40 heads x 2 (K, V) x (64 + 32) x 2 bytes = 952,320 B/token (the
    # latent rule gave 62 x (256 + 32) x 2 = 35,712, 27x too few); split by TP.
    assert kv_bytes_per_token(facts, 1, 1, 2) == 62 * 40 * 2 * 96 * 2 == 952_320
    assert kv_bytes_per_token(facts, 4, 1, 2) == 952_320 // 4
    # The weights still count the latent projections: 4.26B untied ("4B").
    assert facts.parameters == pytest.approx(4.0e9, rel=0.07)


# --------------------------------------------------------------------------- issue 56, rest

# transformers 5's NemotronHConfig defaults: layers_block_type in its own labels
# ("linear_attention" for the Mamba-2 blocks, "full_attention"), one block of each kind.
NEMOTRON_H_T5: dict[str, Any] = {
    "model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"],
    "vocab_size": 131072, "hidden_size": 4096, "tie_word_embeddings": False,
    "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"],
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 4096, "intermediate_size": 21504, "mlp_hidden_act": "relu2",
    "ssm_state_size": 128, "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8,
    "conv_kernel": 4, "expand": 2, "mamba_ssm_cache_dtype": "float32",
    "n_routed_experts": 8, "n_shared_experts": 1, "moe_intermediate_size": 7688,
    "moe_shared_expert_intermediate_size": 7688, "num_experts_per_tok": 2,
}


def test_nemotron_h_transformers_5_block_labels() -> None:
    """Refused before ("layers_block_type has 'linear_attention', a block the planner
    does not model"); read as the pattern "ME*-" that the class's
    hybrid_override_pattern property gives vLLM's nemotron_h.py."""
    facts = facts_from_hf_config(NEMOTRON_H_T5)
    assert (facts.num_layers, facts.kv_layers, facts.state_layers, facts.state_kind) == (
        4, 1, 1, "mamba2")
    # KV: 1 attention block x 8 KV heads x (128 + 128) x 2 bytes = 4,096 B/token.
    assert kv_bytes_per_token(facts, 1, 1, 2) == 1 * 8 * 256 * 2 == 4_096
    # Mamba-2 (MambaStateShapeCalculator.mamba2_state_shape): conv 3 x (128 x 64 +
    # 2 x 8 x 128) = 30,720 (bf16); SSM 128 x 64 x 128 = 1,048,576 (float32, the
    # config's mamba_ssm_cache_dtype): 61,440 + 4,194,304 = 4,255,744 B per sequence.
    assert facts.state_elements_per_layer == 30_720 + 1_048_576
    assert facts.state_dtype == "float32"
    assert kv_bytes_per_sequence(facts, 1, 1, 2, 1000, state_dtype_bytes=4,
                                 conv_dtype_bytes=2) == 4_255_744
    # Parameters: embeddings 2 x 131,072 x 4,096 + 4,096 = 1,073,745,920; attention
    # 4,096 x 128 x (32 + 8 + 8 + 32) = 41,943,040; Mamba in_proj 4,096 x (2 x 8,192 +
    # 2 x 8 x 128 + 128) + out_proj 8,192 x 4,096 = 109,576,192; relu2 MLP 2 x 4,096 x
    # 21,504 = 176,160,768; experts 8 x 2 x 4,096 x 7,688 = 503,840,768; shared expert
    # 2 x 4,096 x 7,688 = 62,980,096; router 4,096 x 8; norms 4 x 2 x 4,096.
    assert facts.parameters == 1_968_312_320
    # The same model under the older pattern reads the same.
    older = {k: v for k, v in NEMOTRON_H_T5.items() if k != "layers_block_type"}
    older.update(hybrid_override_pattern="ME*-", num_hidden_layers=4)
    assert facts_from_hf_config(older).parameters == facts.parameters


# state-spaces/mamba-130m-hf as transformers' MambaConfig writes it (FalconMamba: the
# same fields); Mamba2Config's defaults (mistralai/Mamba-Codestral-7B-v0.1's shape).
MAMBA_130M: dict[str, Any] = {
    "model_type": "mamba", "architectures": ["MambaForCausalLM"], "vocab_size": 50280,
    "hidden_size": 768, "state_size": 16, "num_hidden_layers": 24, "expand": 2,
    "conv_kernel": 4, "intermediate_size": 1536, "time_step_rank": 48,
    "use_conv_bias": True, "use_bias": False, "tie_word_embeddings": True,
    "torch_dtype": "float32",
}
MAMBA2_CODESTRAL: dict[str, Any] = {
    "model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"], "vocab_size": 32768,
    "hidden_size": 4096, "num_hidden_layers": 64, "num_heads": 128, "head_dim": 64,
    "state_size": 128, "expand": 2, "n_groups": 8, "conv_kernel": 4,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("model_type", ["mamba", "falcon_mamba"])
def test_mamba_1_models_are_planned_by_their_state(model_type: str) -> None:
    """Refused before as "config.json has no num_attention_heads: not a decoder
    transformer"; vLLM's mamba.py serves both (MambaForCausalLM, FalconMamba's too)."""
    facts = facts_from_hf_config({**MAMBA_130M, "model_type": model_type},
                                 name="state-spaces/mamba-130m-hf")
    assert (facts.kv_layers, facts.state_layers, facts.state_kind) == (0, 24, "mamba1")
    assert kv_bytes_per_token(facts, 1, 1, 2) == 0  # nothing per token
    # MambaStateShapeCalculator.mamba1_state_shape: conv (4 - 1) x 1536 = 4,608, SSM
    # 1536 x 16 = 24,576; 24 layers x 29,184 x 2 bytes (bf16) = 1,400,832 B a sequence.
    assert facts.state_elements_per_layer == 4_608 + 24_576
    assert kv_bytes_per_sequence(facts, 1, 1, 2, 1000) == 1_400_832
    # vLLM's MambaMixer per layer: in_proj 768 x 3072 = 2,359,296; conv1d 1536 x (4 + 1)
    # = 7,680; x_proj 1536 x (48 + 2 x 16) = 122,880; dt_proj 48 x 1536 + 1536 =
    # 75,264; A 1536 x 16 = 24,576; D 1536; out_proj 1536 x 768 = 1,179,648; and its
    # RMSNorm 768: 3,771,648 x 24 = 90,519,552; tied embedding 50,280 x 768 =
    # 38,615,040 and the final norm 768: 129,135,360 ("130m").
    assert facts.parameters == 129_135_360
    # No length key: vLLM's 2048; TP splits the 1536 channels (MambaMixer's in_proj).
    assert facts.max_context == 2048
    plan = make_plan(spec("state-spaces/mamba-130m-hf"), facts=facts)
    assert plan.tensor_parallel_size == 1 and plan.max_model_len == 2048


def test_mamba_2_model_is_planned_by_its_state() -> None:
    facts = facts_from_hf_config(MAMBA2_CODESTRAL, name="mistralai/Mamba-Codestral-7B-v0.1")
    assert (facts.kv_layers, facts.state_layers, facts.state_kind) == (0, 64, "mamba2")
    # mamba2_state_shape: conv 3 x (2 x 4096 + 2 x 8 x 128) = 30,720; SSM 128 x 64 x 128 =
    # 1,048,576; 64 layers x 1,079,296 x 2 bytes = 138,149,888 B (132 MiB) a sequence.
    assert facts.state_elements_per_layer == 30_720 + 1_048_576
    assert kv_bytes_per_sequence(facts, 1, 1, 2, 1000) == 138_149_888
    assert kv_bytes_per_sequence(facts, 8, 1, 2, 1000) == 138_149_888 // 8
    # Per layer in_proj 4096 x (2 x 8192 + 2 x 8 x 128 + 128) = 76,021,760 and out_proj
    # 8192 x 4096 = 33,554,432 (conv, A, D, dt bias, gated norm: 0.05%, not counted),
    # norm 4096: x 64 = 7,013,138,432; untied embeddings 2 x 32,768 x 4096 + 4096:
    # 7,281,577,984 ("7.3B").
    assert facts.parameters == 7_281_577_984
    # TP divides the 128 heads and the 8 groups (MambaMixer2's asserts).
    assert (facts.num_attention_heads, facts.num_key_value_heads) == (128, 8)
    plan = make_plan(spec("mistralai/Mamba-Codestral-7B-v0.1"), facts=facts)
    assert plan.tensor_parallel_size == 1  # 14.6 GB of bf16


def test_a_mamba_config_without_its_sizes_is_refused_naming_them() -> None:
    broken = {k: v for k, v in MAMBA2_CODESTRAL.items() if k != "expand"}
    with pytest.raises(ValueError, match="no mamba_expand: not a mamba2 .Mamba. model"):
        facts_from_hf_config(broken)


# meituan-longcat/LongCat-Flash-Chat as transformers' LongcatFlashConfig gives it (its
# defaults): num_layers decoder layers of two sublayers each.
LONGCAT_FLASH: dict[str, Any] = {
    "model_type": "longcat_flash", "architectures": ["LongcatFlashForCausalLM"],
    "vocab_size": 131072, "hidden_size": 6144, "num_layers": 28,
    "num_attention_heads": 64, "num_key_value_heads": 64, "max_position_embeddings": 131072,
    "tie_word_embeddings": False, "ffn_hidden_size": 12288, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "head_dim": 64,
    "v_head_dim": 128, "moe_topk": 12, "n_routed_experts": 512, "zero_expert_num": 256,
    "expert_ffn_hidden_size": 2048, "torch_dtype": "bfloat16",
}


def test_longcat_flash_two_sublayers_a_layer() -> None:
    """Refused before ("config.json has no num_hidden_layers"): vLLM's
    FlashDecoderLayer holds two MLA attentions, two dense MLPs and one MoE."""
    facts = facts_from_hf_config(LONGCAT_FLASH, name="meituan-longcat/LongCat-Flash-Chat")
    # 2 x 28 MLA caches x (512 + 64) x 2 bytes = 64,512 B/token (vLLM's config-only
    # convertor counts num_layers, 28: half of what the model caches).
    assert (facts.num_layers, facts.kv_layers, facts.mla_kv_dim) == (56, 56, 576)
    assert kv_bytes_per_token(facts, 1, 1, 2) == 64_512
    # Per MLA: q 6144 x 1536 + 1536 + 1536 x 64 x 192 = 28,313,088; kv 6144 x 576 + 512
    # + 512 x 64 x 256 = 11,928,064; o 64 x 128 x 6144 = 50,331,648: 90,572,800 x 56 =
    # 5,072,076,800. Dense MLPs 3 x 6144 x 12288 x 56 = 12,683,575,296. Experts 512 x 3 x
    # 6144 x 2048 x 28 = 541,165,879,296; router 28 x 6144 x 512 = 88,080,384;
    # embeddings 2 x 131,072 x 6144 + 6144 = 1,610,618,880; norms 56 x 2 x 6144 =
    # 688,128: 560,620,918,784 ("560B").
    assert facts.parameters == 560_620_918_784
    # Active: all but the experts, + 12 of 512 (zero experts counted as real: the bound)
    # = 19,455,039,488 + 12,683,575,296 = 32,138,614,784 (published: 18.6-31.3 B).
    assert facts.active == 32_138_614_784
    plan = make_plan(spec("meituan-longcat/LongCat-Flash-Chat", gpus={"perNode": 8}),
                     facts=facts)
    assert plan.weight_bytes == 2 * 560_620_918_784


@pytest.mark.parametrize(("config", "tied"), [
    (GEMMA_2_NO_TIE := {"model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304,
                        "intermediate_size": 9216, "num_hidden_layers": 26,
                        "num_attention_heads": 8, "num_key_value_heads": 4,
                        "head_dim": 256, "max_position_embeddings": 8192}, True),
    ({**GEMMA_2_NO_TIE, "model_type": "llama"}, False),
    ({**GEMMA_2_NO_TIE, "tie_word_embeddings": False}, False),
    ({"model_type": "paligemma", "text_config": GEMMA_2_NO_TIE}, True),
])
def test_a_missing_tie_word_embeddings_is_the_config_class_default(
        config: dict[str, Any], tied: bool) -> None:
    """Gemma2Config ties by default, LlamaConfig does not; a missing key was read as
    untied (vLLM reads the loaded class's attribute). Gemma 2 2B: the 256,000 x 2304
    embedding (589,824,000) is counted once."""
    facts = facts_from_hf_config(config)
    assert facts.tie_word_embeddings is tied
    assert facts.embedding_parameters == 589_824_000 * (1 if tied else 2)

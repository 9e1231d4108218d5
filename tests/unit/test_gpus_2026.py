"""The GPUs of 2026 in the table (issue 33 item 4), and vLLM's dtype rules per GPU.

Each new GPU is found by its GPU feature discovery product label and by its GKE label,
and placed by both GPU classes; plans of known checkpoints on B200 against H100 show the
memory and tensor-parallel outcome and the FLOP/s figure the planner says it used; a
dtype a GPU cannot run is refused naming the GPU, the dtype and the fix, while the
dtypes vLLM runs weight-only (gpt-oss's MXFP4 and NVFP4 on Hopper) are not.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_modelfacts import DEEPSEEK_V3, GPT_OSS_120B, spec

from llm_operator.api.errors import SpecError
from llm_operator.api.models import Quantization
from llm_operator.knowledge.catalog import gpu_table, lookup_gpu
from llm_operator.knowledge.dtype_support import compute_path, dtype_errors
from llm_operator.knowledge.gpuclass import (
    GFD_PRODUCT_LABEL,
    GKE_ACCELERATOR_LABEL,
    PRESETS,
    placement,
)
from llm_operator.knowledge.modelfacts import facts_from_hf_config
from llm_operator.planning import Plan, make_plan, model_facts
from llm_operator.planning.perfmodel import inputs_for

pytestmark = pytest.mark.unit

# (GFD product label, GKE accelerator value or None, compute capability)
NEW_GPUS = [
    ("NVIDIA-B200", "nvidia-b200", 100),
    ("NVIDIA-B300-SXM6-AC", None, 103),
    ("NVIDIA-GB200", "nvidia-gb200", 100),
    ("NVIDIA-GB300", "nvidia-gb300", 103),
    ("NVIDIA-H20", None, 90),
    ("NVIDIA-H200-NVL", None, 90),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "nvidia-rtx-pro-6000", 120),
    ("NVIDIA-L40S", None, 89),
]

# Mirrors meta-llama/Llama-3.3-70B-Instruct's config.json; with modelopt's
# hf_quant_config.json it is nvidia/Llama-3.3-70B-Instruct-FP4 (NVFP4 weights and
# activations, lm_head excluded).
LLAMA_70B: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80,
    "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672,
    "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                     "original_max_position_embeddings": 8192}}
NVFP4 = facts_from_hf_config(LLAMA_70B, name="nvidia/Llama-3.3-70B-Instruct-FP4",
                             hf_quant_config={"quantization": {
                                 "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}})
GPT_OSS = facts_from_hf_config(GPT_OSS_120B, name="openai/gpt-oss-120b")
# FP-Quant (QuTLASS) NVFP4 checkpoint, as its quantization_config reads.
FP_QUANT = facts_from_hf_config({**LLAMA_70B, "quantization_config": {
    "quant_method": "fp_quant", "forward_dtype": "nvfp4", "hadamard_group_size": 32,
    "forward_method": "abs_max", "modules_to_not_convert": ["lm_head"]}},
    name="org/Llama-3.3-70B-FPQuant")
# compressed-tensors W4A8-FP8: int4 group weights, dynamic per-token fp8 activations.
W4A8_FP8 = facts_from_hf_config({**LLAMA_70B, "quantization_config": {
    "quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {
        "group_0": {"weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                "group_size": 128},
                    "input_activations": {"num_bits": 8, "type": "float",
                                          "strategy": "token", "dynamic": True}}}}},
    name="org/Llama-3.3-70B-W4A8-FP8")


def compute(plan: Plan) -> Any:
    return next(e for e in plan.explanations if e.name == "computeFlops")


# --------------------------------------------------------------------------- the table

@pytest.mark.parametrize(("product", "gke", "capability"), NEW_GPUS)
def test_each_new_gpu_is_found_by_its_gfd_and_gke_labels(product: str, gke: str | None,
                                                        capability: int) -> None:
    gpu = lookup_gpu(product)
    assert gpu is not None and gpu.product == product
    assert gpu.compute_capability == capability
    assert gpu.gke_accelerator == gke
    if gke is not None:
        by_gke = lookup_gpu(gke)
        assert by_gke is not None and by_gke.product == product
    # FP4 tensor cores where, and only where, the GPU is a Blackwell.
    assert (gpu.fp4_flops is not None) == (capability >= 100)


@pytest.mark.parametrize(("product", "gke", "capability"), NEW_GPUS)
def test_each_new_gpu_is_placed_by_the_nvidia_and_gke_classes(product: str, gke: str | None,
                                                             capability: int) -> None:
    s = spec("meta-llama/Llama-3.1-8B-Instruct", product)
    placed = placement(s, "nvidia", PRESETS["nvidia"])
    assert placed.node_selector[GFD_PRODUCT_LABEL] == product
    if gke is None:
        with pytest.raises(SpecError, match="spec.gpus.product"):
            placement(s, "gke", PRESETS["gke"])
        return
    for named in (product, gke):  # the spec may name the GPU by either
        on_gke = placement(spec("meta-llama/Llama-3.1-8B-Instruct", named), "gke",
                           PRESETS["gke"])
        assert on_gke.node_selector[GKE_ACCELERATOR_LABEL] == gke


def test_b200_on_eks_is_placed_by_karpenters_gpu_name() -> None:
    placed = placement(spec("meta-llama/Llama-3.1-8B-Instruct", "B200"), "eks", PRESETS["eks"])
    assert placed.node_selector["karpenter.k8s.aws/instance-gpu-name"] == "b200"


# --------------------------------------------------------------------------- plans

def test_llama_70b_fp8_needs_two_h100s_and_one_b200_each_at_fp8_flops() -> None:
    h100 = make_plan(spec("meta-llama/Llama-3.1-70B-Instruct", "H100",
                          model={"quantization": "fp8"}))
    b200 = make_plan(spec("meta-llama/Llama-3.1-70B-Instruct", "B200",
                          model={"quantization": "fp8"}))
    assert (h100.tensor_parallel_size, b200.tensor_parallel_size) == (2, 1)
    assert b200.weight_bytes == h100.weight_bytes  # the same checkpoint, all on one GPU
    assert compute(h100).inputs["computeDtype"] == compute(b200).inputs["computeDtype"] == "fp8"
    assert compute(h100).value == pytest.approx(1978.9e12)
    assert compute(b200).value == pytest.approx(4.5e15)


def test_fp8_on_ampere_runs_weight_only_at_bf16_flops() -> None:
    a100 = make_plan(spec("meta-llama/Llama-3.1-70B-Instruct", "A100-80GB",
                          model={"quantization": "fp8"}))
    c = compute(a100)
    assert c.inputs["computeDtype"] == "bf16" and c.value == pytest.approx(312e12)
    assert "Marlin" in c.formula and "8.9" in c.formula


def test_gpt_oss_mxfp4_runs_on_h100_and_computes_in_bf16_even_on_b200() -> None:
    # gpt-oss runs on H100 (vLLM's Mxfp4Config needs 8.0): never refused there.
    h100 = make_plan(spec("openai/gpt-oss-120b", "H100"), facts=GPT_OSS)
    b200 = make_plan(spec("openai/gpt-oss-120b", "B200"), facts=GPT_OSS)
    assert h100.tensor_parallel_size == b200.tensor_parallel_size == 1
    # Same weights; the B200's 179 GiB hold several times the KV cache.
    assert b200.weight_bytes_per_gpu == h100.weight_bytes_per_gpu
    assert b200.kv_token_capacity > 5 * h100.kv_token_capacity
    # Its experts take bf16 activations in vLLM 0.32.0: bf16's figure on both GPUs.
    assert compute(h100).inputs["computeDtype"] == compute(b200).inputs["computeDtype"] == "bf16"
    assert compute(b200).value == pytest.approx(2.25e15)


def test_nvfp4_runs_on_hopper_weight_only_and_on_blackwell_at_fp4_flops() -> None:
    h100 = make_plan(spec(NVFP4.name, "H100"), facts=NVFP4)
    b200 = make_plan(spec(NVFP4.name, "B200"), facts=NVFP4)
    assert h100.tensor_parallel_size == b200.tensor_parallel_size == 1  # ~40 GB of weights
    assert h100.weight_bytes < 45e9
    assert compute(h100).inputs["computeDtype"] == "bf16"
    assert "no fp4 tensor cores" in compute(h100).formula
    assert compute(b200).inputs["computeDtype"] == "fp4"
    assert compute(b200).value == pytest.approx(9.0e15)
    # The performance model runs on the same figure the plan names.
    assert inputs_for(spec(NVFP4.name, "B200"), b200, NVFP4).hardware.flops == 9.0e15
    assert inputs_for(spec(NVFP4.name, "H100"), h100, NVFP4).hardware.flops == 989.4e12


# --------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("gpu", gpu_table(), ids=lambda g: g.product)
def test_fp8_nvfp4_and_mxfp4_are_refused_on_no_gpu_of_the_table(gpu: Any) -> None:
    for facts, quant in ((GPT_OSS, Quantization.NONE), (NVFP4, Quantization.NONE),
                         (model_facts(spec("meta-llama/Llama-3.1-8B-Instruct")),
                          Quantization.FP8)):
        s = spec(facts.name, gpu.product, model={"quantization": quant.value})
        assert dtype_errors(s, facts, gpu) == [], (gpu.product, facts.name)


def test_fp_quant_is_refused_on_hopper_naming_gpu_dtype_and_fix() -> None:
    with pytest.raises(SpecError) as exc:
        make_plan(spec(FP_QUANT.name, "H100"), facts=FP_QUANT)
    err = exc.value
    assert err.field == "spec.gpus.product"
    assert "H100 SXM 80GB (NVIDIA-H100-80GB-HBM3, Hopper, compute capability 9.0)" \
        in err.problem
    assert "FP-Quant (fp_quant)" in err.problem and "10.0 or newer" in err.problem
    assert "fp_quant.py" in err.problem  # vLLM's rule, by file
    assert "NVIDIA-B200" in err.fix and "NVIDIA-H200" not in err.fix
    # On Blackwell it plans, at fp4 FLOP/s.
    assert compute(make_plan(spec(FP_QUANT.name, "B200"), facts=FP_QUANT)).inputs[
        "computeDtype"] == "fp4"


def test_w4a8_fp8_runs_on_hopper_only() -> None:
    h100 = make_plan(spec(W4A8_FP8.name, "H100"), facts=W4A8_FP8)
    assert compute(h100).inputs["computeDtype"] == "fp8"
    with pytest.raises(SpecError) as exc:
        make_plan(spec(W4A8_FP8.name, "B200"), facts=W4A8_FP8)
    assert "B200 180GB (NVIDIA-B200, Blackwell, compute capability 10.0)" in exc.value.problem
    assert "W4A8-FP8" in exc.value.problem and "exactly compute capability 9.0" \
        in exc.value.problem
    assert "NVIDIA-H200" in exc.value.fix


def test_fp8_e5m2_kv_cache_is_refused_for_mla_and_fp8_is_not() -> None:
    ds = facts_from_hf_config(DEEPSEEK_V3, name="deepseek-ai/DeepSeek-V3")
    b200 = lookup_gpu("B200")
    assert b200 is not None
    errors = dtype_errors(spec(ds.name, "B200", engine={"kvCacheDtype": "fp8_e5m2"}), ds, b200)
    assert [e.field for e in errors] == ["spec.engine.kvCacheDtype"]
    assert "B200" in errors[0].problem and "fp8_e5m2" in errors[0].problem
    assert "use fp8" in errors[0].fix
    assert dtype_errors(spec(ds.name, "B200", engine={"kvCacheDtype": "fp8"}), ds, b200) == []
    # Not MLA: fp8_e5m2 is stored (Triton attention) on every GPU, Ampere included.
    a100 = lookup_gpu("A100-80GB")
    assert a100 is not None
    assert dtype_errors(spec(GPT_OSS.name, "A100-80GB", engine={"kvCacheDtype": "fp8_e5m2"}),
                        GPT_OSS, a100) == []


def test_mxfp4_refuses_a_float16_dtype() -> None:
    with pytest.raises(SpecError) as exc:
        make_plan(spec(GPT_OSS.name, "H100", engine={"dtype": "float16"}), facts=GPT_OSS)
    assert exc.value.field == "spec.engine.dtype" and "bfloat16" in exc.value.fix


def test_compute_path_without_a_capability_uses_bf16() -> None:
    # A GPU given by its memory only: nothing judged, bf16's figure (None here).
    from llm_operator.knowledge.catalog import GPUFacts

    custom = GPUFacts("custom-80GiB", "custom-80GiB", 80 * 2**30)
    path = compute_path(NVFP4, Quantization.NONE, custom)
    assert path.dtype == "bf16" and path.flops is None
    assert dtype_errors(spec(FP_QUANT.name, "H100"), FP_QUANT, custom) == []


def test_the_gpu_page_lists_every_gpu_with_its_figures() -> None:
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "production" / "gpus.md").read_text()
    for gpu in gpu_table():
        row = next((line for line in page.splitlines()
                    if line.startswith(f"| `{gpu.product}` |")), None)
        assert row is not None, gpu.product
        assert f"{gpu.memory_bytes // 2**20:,}" in row and gpu.source in row, gpu.product


def test_plan_command_prints_the_figure_used_and_why(tmp_path: Any,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_operator import cli

    monkeypatch.setenv("COLUMNS", "200")  # rich wraps the table to the terminal

    svc = tmp_path / "svc.yaml"
    svc.write_text("apiVersion: llmops.dev/v1alpha1\nkind: LLMService\n"
                   "metadata: {name: l70, namespace: ml}\n"
                   "spec:\n  model: {name: meta-llama/Llama-3.1-70B-Instruct, quantization: fp8}\n"
                   "  gpus: {product: A100-80GB}\n")
    assert cli.main(["plan", str(svc), "--no-curve"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "computeFlops 312.0 TFLOP/s" in out
    assert "Marlin W8A16" in out  # why: the A100 has no fp8 tensor cores

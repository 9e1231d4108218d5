"""Routed-expert GEMMs (benchmarks/moe_kernels.py): the RESULTS.md section is the stored
data, the model's roofline counts experts as the performance model does, and the model's
HBM factor stays where NVIDIA's measured vLLM fused MoE puts it on an H200."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks import moe_kernels as mk
from benchmarks.results_md import current

from llm_operator.knowledge.modelfacts import facts_from_hf_config
from llm_operator.planning.perfmodel import GPU_EFFICIENCY, ModelShape

MEASURED = json.loads(mk.MEASURED.read_text())
AIC = json.loads(mk.DATA.read_text())
CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "model_configs"


def test_the_results_section_is_the_stored_data() -> None:
    assert mk.section(MEASURED, AIC) in current()


def test_the_roofline_counts_touched_experts_like_the_model() -> None:
    """Qwen3-30B-A3B from 1 to 8 tokens: the expert bytes the benchmark's roofline adds per
    layer, times the layers, are what the performance model's weight read adds."""
    config = json.loads((CORPUS / "Qwen--Qwen3-30B-A3B_config.json").read_text())
    facts = facts_from_hf_config(config, "Qwen/Qwen3-30B-A3B")
    assert facts.num_experts == 128
    shape = ModelShape.from_facts(facts)
    layer = next(x for x in MEASURED["config"]["layers"] if x["name"] == "Qwen3-30B-A3B")
    per_expert = 3 * layer["hidden"] * layer["intermediate"] * shape.bytes_per_param
    _t, touched_8 = mk.model_seconds(layer, 8, 4.8e12, 989e12, 0.8, 0.6)
    _t, touched_1 = mk.model_seconds(layer, 1, 4.8e12, 989e12, 0.8, 0.6)
    added = shape.weight_bytes_read(8) - shape.weight_bytes_read(1)
    assert added == pytest.approx((touched_8 - touched_1) * per_expert * facts.num_layers,
                                  rel=0.02)


def test_the_bandwidth_factor_sits_within_vllms_measured_fused_moe() -> None:
    """Between 8 and 512 tokens the model's time for the experts is within 25% of vLLM's
    measured kernel (NVIDIA, H200): raising the factor past what vLLM reaches fails."""
    rows = [r for r in mk.summarise(MEASURED, AIC)
            if r["model_over_vllm"] is not None and 8 <= r["tokens"] <= 512]
    assert len(rows) >= 8
    assert all(0.70 <= r["model_over_vllm"] <= 1.25 for r in rows), rows
    full = [r["vllm_hbm"] for r in rows if r["vllm_hbm"] is not None]
    assert full and max(full) >= GPU_EFFICIENCY.bandwidth - 0.05


def test_aic_silicon_4s_fit_is_what_its_run_recorded() -> None:
    """aic-silicon-4's fit (the bf16 kernel, 1-128 tokens) still gives the 3.9 us its
    stored run names (a history check: the model now carries aic-silicon-7's fit)."""
    median, residuals = mk.fit_moe_layer_overhead(json.loads(mk.FIT_DATA.read_text()))
    assert len(residuals) == 176
    run4 = json.loads((mk.ROOT / "benchmarks" / "data" / "perfmodel_vs_silicon_4.json")
                      .read_text())
    assert run4["moeLayerOverheadUs"] == pytest.approx(median * 1e6, abs=0.05)


def test_the_models_moe_layer_overhead_is_the_registered_fit() -> None:
    """GPU_EFFICIENCY.moe_layer_overhead_s is what aic-silicon-7's fit gives on its stored
    kernel rows (the median residual at one token, to 0.1 us): re-fit, or re-register, to
    change it."""
    fit = json.loads(mk.FIT_1TOKEN_DATA.read_text())
    median, residuals = mk.fit_moe_layer_overhead_1token(fit)
    assert len(residuals) == 63
    assert GPU_EFFICIENCY.moe_layer_overhead_s == pytest.approx(median, abs=0.05e-6)


def test_the_1token_fit_reads_only_the_registered_rows() -> None:
    """Every stored row is one of the registered dtypes and GPUs at one token, and each
    GPU has rows of every dtype: a row of another dtype or token count fails here."""
    import yaml

    fit = json.loads(mk.FIT_1TOKEN_DATA.read_text())
    registered = yaml.safe_load(mk.FIT_1TOKEN_CONFIG.read_text())["fit"]
    rows = fit["rows"]
    assert {r["dtype"] for r in rows} == set(registered["moeDtypes"])
    assert {r["gpu"] for r in rows} == set(registered["gpus"])
    assert {r["tokens"] for r in rows} == {registered["tokens"]}
    for gpu in registered["gpus"]:
        assert {r["dtype"] for r in rows if r["gpu"] == gpu} == set(registered["moeDtypes"])


def test_the_1token_roofline_uses_the_dtypes_bytes() -> None:
    """A row's residual is its measured time less its top-k experts' bytes at the
    registered bytes per weight over the GPU's HBM x the model's factor, computed here
    apart; relabelled from fp8_block (1 byte) to int4_wo (0.5625), its roofline shrinks by
    that ratio (a fit that ignored the dtype, or read all experts, fails)."""
    import yaml

    fit = json.loads(mk.FIT_1TOKEN_DATA.read_text())
    bytes_per = yaml.safe_load(mk.FIT_1TOKEN_CONFIG.read_text())["fit"]["moeDtypes"]
    r = next(x for x in fit["rows"] if x["gpu"] == "h200_sxm" and x["dtype"] == "fp8_block")
    weights = r["top_k"] * 3 * r["hidden"] * r["intermediate"]
    roofline = weights * bytes_per["fp8_block"] / (4.8e12 * GPU_EFFICIENCY.bandwidth)
    _, (res,) = mk.fit_moe_layer_overhead_1token({**fit, "rows": [r]})
    assert res == pytest.approx(r["ms"] / 1e3 - roofline, rel=1e-6)
    _, (res4,) = mk.fit_moe_layer_overhead_1token({**fit, "rows": [{**r, "dtype": "int4_wo"}]})
    assert r["ms"] / 1e3 - res4 == pytest.approx(roofline * bytes_per["int4_wo"]
                                                 / bytes_per["fp8_block"], rel=1e-6)


def test_the_models_moe_compute_is_the_registered_fit() -> None:
    """GPU_EFFICIENCY.moe_compute is what aic-silicon-8's fit gives on its stored kernel rows
    (the median achieved fraction of peak at 1,024-8,192 tokens, to 0.005)."""
    fit = json.loads(mk.FIT_PREFILL_DATA.read_text())
    median, fractions = mk.fit_moe_compute(fit)
    assert len(fractions) == 252
    assert GPU_EFFICIENCY.moe_compute == pytest.approx(median, abs=0.005)


def test_the_prefill_fit_reads_only_the_registered_rows() -> None:
    """Every stored row is a registered dtype, GPU and token count, and every GPU has
    every dtype at every token count."""
    import yaml

    fit = json.loads(mk.FIT_PREFILL_DATA.read_text())
    registered = yaml.safe_load(mk.FIT_PREFILL_CONFIG.read_text())["fit"]
    rows = fit["rows"]
    assert {r["dtype"] for r in rows} == set(registered["moeDtypes"])
    assert {r["gpu"] for r in rows} == set(registered["gpus"])
    assert {r["tokens"] for r in rows} == set(registered["tokens"])
    for gpu in registered["gpus"]:
        have = {(r["dtype"], r["tokens"]) for r in rows if r["gpu"] == gpu}
        assert have == {(d, t) for d in registered["moeDtypes"] for t in registered["tokens"]}


def test_the_prefill_fraction_uses_the_fp8_peak_only_for_fp8() -> None:
    """The same measured row counts against the FP8 peak as fp8_block and the BF16 peak as
    int4_wo: on an H200 (FP8 twice BF16) the fraction halves."""
    fit = json.loads(mk.FIT_PREFILL_DATA.read_text())
    row = next(r for r in fit["rows"] if r["gpu"] == "h200_sxm" and r["dtype"] == "fp8_block")
    (_, (as_fp8,)) = mk.fit_moe_compute({**fit, "rows": [row]})
    (_, (as_int4,)) = mk.fit_moe_compute({**fit, "rows": [{**row, "dtype": "int4_wo"}]})
    assert as_fp8 == pytest.approx(as_int4 / 2, rel=0.01)

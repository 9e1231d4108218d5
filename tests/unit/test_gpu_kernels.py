"""The GPU kernel sweep (benchmarks/gpu_kernels.py): its shapes are the models' own, its
arithmetic is right, and the performance model's efficiency factors stay within what
PyTorch's GEMMs reached on the H100 and H200 measured in this workplace (stored data)."""

from __future__ import annotations

import json

import pytest
import yaml
from benchmarks import gpu_kernels as gk

from llm_operator.knowledge.catalog import lookup_model
from llm_operator.planning.perfmodel import GPU_EFFICIENCY

CONFIG = yaml.safe_load(gk.CONFIG.read_text())


@pytest.mark.parametrize("shard,model", [
    ("Llama-3.1-8B TP1", "meta-llama/Llama-3.1-8B-Instruct"),
    ("Llama-3.1-70B TP4", "meta-llama/Llama-3.1-70B-Instruct"),
])
def test_shard_shapes_sum_to_the_catalogs_parameters(shard: str, model: str) -> None:
    """A layer's GEMMs x TP x layers + embeddings and LM head = the catalog's count, so
    the sweep measures the model's real matrices (norms are under 0.01%)."""
    cfg = next(s for s in CONFIG["shards"] if s["name"] == shard)
    facts = lookup_model(model)
    assert facts is not None and facts.vocab_size
    per_layer = sum(k * n for _name, k, n in gk.gemm_shapes(cfg)) * cfg["tp"]
    total = per_layer * facts.num_layers + 2 * facts.vocab_size * facts.hidden_size
    assert total == pytest.approx(facts.parameters, rel=1e-3)


def _record(seconds: float) -> dict:
    cfg = CONFIG["shards"][0]
    shapes = gk.gemm_shapes(cfg)
    m = 64
    return {"label": "t", "config": CONFIG,
            "device": {"name": "NVIDIA H100 80GB HBM3", "torch": "x", "cuda": "x"},
            "bandwidth": [{"rep": 0, "kind": "read", "bytes": 3.35e12, "seconds": 1.0}],
            "attention": [], "errors": [],
            "gemm": [{"rep": rep, "shard": cfg["name"], "tp": 1, "dtype": "bf16", "tokens": m,
                      "mode": "graph", "seconds_per_layer": seconds * (1 + 0.1 * rep),
                      "flops_per_layer": sum(2 * m * k * n for _x, k, n in shapes),
                      "bytes_per_layer": 2.68e8, "weight_bytes_per_layer": 2.6e8}
                     for rep in (0, 1)]}


def test_summary_fractions_and_model_ratio() -> None:
    """A layer moving 268 MB in 100 us is 80% of the H100's 3.35 TB/s, exactly the
    model's bandwidth factor: model/measured = 1 (memory-bound at M = 64)."""
    s = gk.summarise(_record(0.1e-3 / 1.05))  # the median of 1.0x and 1.1x is 1.05x
    (row,) = s["rows"]
    assert row["bandwidth_fraction"] == pytest.approx(0.80, rel=1e-6)
    assert row["model_over_measured"] == pytest.approx(1.0, rel=1e-6)
    assert row["spread"] == pytest.approx(0.1)
    assert s["hbm"]["read"] == pytest.approx(1.0)


def _stored() -> list[dict]:
    files = gk.data_files()
    assert {json.loads(f.read_text())["device"]["name"] for f in files} >= {
        "NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    return [gk.summarise(json.loads(f.read_text())) for f in files]


def test_compute_factor_is_below_what_prefill_gemms_reach() -> None:
    """vLLM's prefill is its GEMMs plus attention and the rest: the model's share of
    peak must not exceed the worst large-M GEMM measured on either GPU."""
    for s in _stored():
        prefill = [r["compute_fraction"] for r in s["rows"]
                   if r["mode"] == "graph" and r["tokens"] >= 1024]
        assert GPU_EFFICIENCY.compute <= min(prefill), s["gpu"]


def test_bandwidth_factor_is_within_what_decode_gemms_reach() -> None:
    """The model's decode bandwidth is at most the best bf16 decode GEMM (M <= 128) on
    either GPU, and not below the worst by more than 15 points either (0.71-0.82
    measured; a factor of 0.6 would make every decode step a third too slow)."""
    for s in _stored():
        dec = [r["bandwidth_fraction"] for r in s["rows"] if r["mode"] == "graph"
               and r["dtype"] == "bf16" and r["tokens"] <= 128]
        assert min(dec) - 0.15 <= GPU_EFFICIENCY.bandwidth <= max(dec), s["gpu"]


def test_section_renders_every_gpu() -> None:
    text = gk.render(gk.data_files())
    assert "### NVIDIA H100 80GB HBM3" in text and "### NVIDIA H200" in text
    assert "Not vLLM" in text

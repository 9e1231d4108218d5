"""gpu-noise-1: the run-to-run spread of real vLLM on GPUs from NVIDIA's repeated
measurements (benchmarks/gpu_noise.py), and the tuner runs that take it (tune-landscape-78,
-79). The extraction rules on rows shaped as the CSV's, and the stored figures against
each other; the aic tier checks the extract against the installed CSV."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from benchmarks import gpu_noise as gn
from benchmarks import tune_on_landscape as tl

ROOT = Path(__file__).resolve().parents[2]


def row(date: str | None, image: str | None, ttft: float, tpot: float, *, c: int = 16,
        model: str = "acme/m", rid: str = "r", **over: str) -> dict[str, str]:
    src = "source_file=x.csv; model=M; "
    if date:
        src += f"; measured={date}T00:00:00.000Z; wip=False"
    if image:
        src += f"; image={image}"
    src += f"; silicon_concurrency={c}"
    r = {"id": rid, "backend": "vllm", "mode": "agg", "silicon_data_source": src,
         "backend_version": "0.19.0", "model_path": model, "system": "b200_sxm",
         "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "isl": "1024", "osl": "1024",
         "batch_size": "999", "tp_size": "4", "pp_size": "1", "attention_dp_size": "",
         "moe_tp_size": "4", "moe_ep_size": "1", "silicon_ttft_ms": str(ttft),
         "silicon_tpot_ms": str(tpot)}
    return {**r, **over}


IMG = "vllm/vllm-openai:v0.19.0-cu130"


def test_a_repeat_is_the_same_setting_and_image_on_another_date() -> None:
    rows = [row("2026-04-03", IMG, 100.0, 10.0, rid="a"),
            row("2026-04-03", IMG, 100.1, 10.01, rid="a-copy"),  # the same day: one
            row("2026-04-22", IMG, 110.0, 11.0, rid="b"),
            row("2026-04-22", "vllm/vllm-openai:v0.18.0", 90.0, 9.0, rid="other-image"),
            row(None, IMG, 95.0, 9.5, rid="no-date"),
            row("2026-04-25", None, 95.0, 9.5, rid="no-image"),
            row("2026-04-25", IMG, 95.0, 9.5, rid="trtllm", backend="trtllm"),
            row("2026-04-25", IMG, 95.0, 9.5, rid="other-c", c=32)]
    configs = gn.extract(rows)
    assert [[m["id"] for m in c["measurements"]] for c in configs] == [["a", "b"]]
    # The concurrency is the source's silicon_concurrency, not batch_size.
    assert configs[0]["measurements"][0]["concurrency"] == 16
    tps = configs[0]["measurements"][0]["tps"]
    assert tps == pytest.approx(16 * 1024 / (100.0 + 1023 * 10.0) * 1e3, rel=1e-6)


def test_the_figure_is_the_pooled_within_configuration_log_sd() -> None:
    a = [row("2026-04-03", IMG, 100.0, 10.0), row("2026-04-22", IMG, 100.0, 11.0)]
    b = [row(d, IMG, 100.0, t, model="acme/n")
         for d, t in (("2026-04-01", 10.0), ("2026-04-02", 10.0), ("2026-04-03", 10.0))]
    s = gn.summarise(gn.extract(a + b))
    logs = [math.log(m["tps"]) for m in gn.extract(a)[0]["measurements"]]
    want = math.sqrt(((logs[0] - logs[1]) ** 2 / 2) / 3)  # 1 + 2 degrees of freedom
    assert s["tps"]["dof"] == 3 and s["tps"]["logSd"] == pytest.approx(want, abs=1e-4)
    assert s["configurations"] == 2 and s["measurements"] == 5


def test_the_tuner_runs_took_the_stored_figure_and_say_where_it_came_from() -> None:
    """tune-landscape-78 and -79 ran at gpu-noise-1's stored figure (rounded as its config
    says), and their label says the noise is NVIDIA's GPU measurement, not the CPU's."""
    sigma = gn.noise_of()
    assert 0 < sigma < 0.32  # below the CPU engine's spread, as measured
    for n in (78, 79):
        cfg = tl.load(ROOT / "benchmarks" / "configs" / f"tune_landscape_{n}.yaml")
        assert cfg["noise"]["logSd"] == sigma
        data = json.loads((ROOT / "benchmarks" / "data" / f"tune_landscape_{n}.json")
                          .read_text())
        assert data["config"]["noise"]["logSd"] == sigma
        assert "measured on GPUs by NVIDIA" in data["label"]
        assert "CPU engine;" not in data["label"]


def test_the_gpu_noise_section_is_what_its_stored_data_renders_to() -> None:
    """The committed section is `gpu_noise`'s render of the stored extract, byte for byte
    (the renderer or the data changed without the page fails here)."""
    from benchmarks.goals import blocks_of
    from benchmarks.results_md import current

    assert gn.render().rstrip("\n") == blocks_of(current())[gn.SECTION]

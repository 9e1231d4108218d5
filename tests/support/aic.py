"""NVIDIA AIConfigurator as a reference for the performance model (issue 34): test and
benchmark data, never part of the operator or its image.

AIConfigurator 0.12.0 (PyPI ``aiconfigurator``, Apache-2.0) is installed in its own
environment, ``.venv-aic`` (``bash tools/setup.sh --aic``, about 30 s and 850 MB).
Nothing of it is copied into this repository: :func:`silicon_csv` finds its
``silicon_sample.csv`` (vLLM serving points NVIDIA measured on H100, H200 and B200) in
that install at run time; benchmarks store only derived result tables, attributed.

Also here: the facts of the one model and the one GPU those rows need that the catalog
does not have (Qwen3-32B, B200), taken from the model's config.json and NVIDIA's
datasheet, other models' facts from the corpus of public config.json files, and the
reading of one CSV row (:func:`read_rows`).
"""

from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from llm_operator.knowledge.catalog import GPUFacts, ModelFacts, lookup_gpu, lookup_model
from llm_operator.planning.perfmodel import Hardware

ROOT = Path(__file__).resolve().parents[2]
AIC_VENV = ROOT / ".venv-aic"
AIC_VERSION = "0.12.0"
AIC_SOURCE = (f"NVIDIA AIConfigurator {AIC_VERSION} (PyPI aiconfigurator, Apache-2.0), "
              "aiconfigurator_core/systems/silicon_sample.csv: vLLM serving points "
              "measured by NVIDIA on real GPUs")
_CSV = Path("aiconfigurator_core") / "systems" / "silicon_sample.csv"


def silicon_csv() -> Path | None:
    """The installed ``silicon_sample.csv`` (``$LLMOP_AIC_CSV``, else under
    ``.venv-aic``), or None when AIConfigurator is not installed."""
    env = os.environ.get("LLMOP_AIC_CSV")
    if env:
        return Path(env) if Path(env).exists() else None
    for site in sorted(AIC_VENV.glob("lib/python*/site-packages")):
        if (site / _CSV).exists():
            return site / _CSV
    return None


def aic_python() -> Path:
    """The Python of the AIConfigurator environment."""
    return AIC_VENV / "bin" / "python"


# Qwen3-32B, from its config.json (64 layers, hidden 5120, 64 query heads of 128, 8 KV
# heads, MLP 25600, vocab 151936, untied LM head): 32,762,123,264 parameters as the
# shapes sum (the model card's 32.8B). Not in the catalog; its facts live here until the
# catalog has them.
QWEN3_32B = ModelFacts(
    name="Qwen/Qwen3-32B", parameters=32_762_123_264, num_layers=64, hidden_size=5120,
    num_attention_heads=64, num_key_value_heads=8, head_dim=128, max_context=40960,
    vocab_size=151936,
)
# B200 (HGX B200, NVIDIA's datasheet): 180 GB HBM3e, 8 TB/s, dense 2.25 PFLOP/s bf16 and
# 4.5 PFLOP/s fp8 (the datasheet's sparse figures halved); NVLink 5 at 1.8 TB/s per GPU.
B200 = GPUFacts("NVIDIA-B200", "B200 180GB", 180 * 10**9, 8.0e12, 2.25e15, 4.5e15)
B200_NVLINK = 900e9  # one direction, bytes/s


CORPUS = ROOT / "tests" / "fixtures" / "model_configs"


def model(name: str) -> ModelFacts:
    """Catalog facts, or the ones above, or the facts of the model's config.json in the
    corpus of public configs (``tests/fixtures/model_configs``), as the planner reads it."""
    facts = QWEN3_32B if name == QWEN3_32B.name else lookup_model(name)
    if facts is None:
        path = CORPUS / f"{name.replace('/', '--')}_config.json"
        if not path.exists():
            raise KeyError(name)
        from llm_operator.knowledge.modelfacts import facts_from_hf_config

        facts = facts_from_hf_config(json.loads(path.read_text()), name)
    return facts


def gpu_facts(name: str) -> GPUFacts:
    facts = B200 if name == "B200" else lookup_gpu(name)
    if facts is None:
        raise KeyError(name)
    return facts


def hardware(name: str, fp8: bool) -> Hardware:
    """The performance model's hardware for a GPU (fp8: the FP8 tensor-core peak)."""
    hw = Hardware.from_facts(gpu_facts(name), fp8=fp8)
    if name == "B200":
        hw = replace(hw, interconnect_bandwidth=B200_NVLINK)
    return hw


@dataclass(frozen=True)
class SiliconRow:
    """One measured vLLM serving point of silicon_sample.csv."""

    id: str
    group: str
    model_path: str
    system: str
    quant: str
    vllm: str  # backend_version, or what the source column says, or "not stated"
    tp: int
    isl: int
    osl: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float
    source: str  # silicon_data_source, less the local file path

    @property
    def measured_tps(self) -> float:
        """Output tok/s of a closed loop of ``concurrency`` clients with these
        latencies (derived: the CSV has no throughput column)."""
        return self.concurrency * self.osl / ((self.ttft_ms + (self.osl - 1) * self.tpot_ms) / 1e3)


def _version(row: dict[str, str]) -> str:
    if row["backend_version"]:
        return row["backend_version"]
    m = re.search(r"vllm[-/a-z]*:v?([0-9][\w.]*)", row["silicon_data_source"])
    return m.group(1) if m else "not stated"


def _at_most_one(value: str) -> bool:
    """An EP or attention-DP size of one (or none stated: empty, 0)."""
    try:
        return not value or float(value) <= 1
    except ValueError:
        return False


def read_rows(path: Path, groups: list[dict[str, str]],
              tp_experts_only: bool = False, experts_match_tp: bool = False
              ) -> list[SiliconRow]:
    """The rows the config's groups name: backend vllm, mode agg, one pipeline stage,
    TTFT and TPOT present; with ``tp_experts_only`` also no expert parallelism and no
    data-parallel attention (the placement the operator renders); with
    ``experts_match_tp`` also the experts' TP equal to the attention's (the CSV leaves
    ``attention_dp_size`` empty on some rows whose experts span more GPUs). Nothing else
    dropped."""
    out = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            if r["backend"] != "vllm" or r["mode"] != "agg" or r["pp_size"] not in ("", "1"):
                continue
            if tp_experts_only and not (_at_most_one(r.get("moe_ep_size", ""))
                                        and _at_most_one(r.get("attention_dp_size", ""))):
                continue
            moe_tp = r.get("moe_tp_size", "")
            if experts_match_tp and moe_tp not in ("", "0") and float(moe_tp) != float(
                    r["tp_size"]):
                continue
            if not (r["silicon_ttft_ms"] and r["silicon_tpot_ms"] and r["tp_size"]):
                continue
            g = next((g for g in groups if g["model_path"] == r["model_path"]
                      and g["system"] == r["system"] and g["quant"] == r["gemm_quant_mode"]),
                     None)
            if g is None:
                continue
            m = re.search(r"silicon_concurrency=(\d+)", r["silicon_data_source"])
            conc = int(m.group(1)) if m else int(r["batch_size"])
            source = re.sub(r"source_file=\S*/", "source_file=", r["silicon_data_source"])
            out.append(SiliconRow(
                id=r["id"], group=g["name"], model_path=r["model_path"], system=r["system"],
                quant=r["gemm_quant_mode"], vllm=_version(r), tp=int(r["tp_size"]),
                isl=int(r["isl"]), osl=int(r["osl"]), concurrency=conc,
                ttft_ms=float(r["silicon_ttft_ms"]), tpot_ms=float(r["silicon_tpot_ms"]),
                source=source))
    return out

"""``--gpu-memory-utilization`` as the planner reads it, against vLLM's own start-up
accounting on the real CPU engine, at two utilizations (issue 37 item 3).

The planner gives the KV cache ``memory x gpuMemoryUtilization - overhead - weights`` per
GPU (:func:`llm_operator.planning.usable_bytes_per_gpu`): the utilization is a share of
the device's whole memory, and what the engine uses besides the KV cache comes off it.
vLLM does the same on a GPU (``vllm/v1/worker/utils.py``: requested = total x
utilization; the profile's non-KV use off that) and on the CPU engine, which logs it
(``vllm/v1/worker/cpu_worker.py``: "Auto set (KV/total) GiB for KV cache ... C GiB memory
was consumed by non-kv usages"). The check: a higher utilization gives vLLM exactly its
share of the whole memory more KV cache, as it gives the planner, so the planner's KV
and vLLM's differ by one constant (its fixed GPU overhead against what the CPU engine
really used, up to the process's RSS changing between starts), which is reported.
Should vLLM ever apply the utilization to free memory, or to what is left after the
weights, this fails.

Two server starts (about a minute each here), each under the machine-wide vLLM lock.
The utilizations are set from this machine's memory (1.5 and 2.5 GiB more than a
start's typical non-KV use), so the test holds on a machine of any size that has 5 GiB
free.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from tests.support.tiny_model import ensure_tiny_llama

from llm_operator.api.constants import GIB
from llm_operator.inpod.tuner.server import VLLMServer
from llm_operator.knowledge.catalog import GPUFacts
from llm_operator.planning import OVERHEAD_BYTES_PER_GPU, usable_bytes_per_gpu

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
# What a CPU start of the tiny model used besides its KV cache here: 0.95 GiB in each of
# three starts (RSS of the worker: torch and vLLM; the weights are 2 MB). The
# utilizations leave the KV cache 1.5 and 2.5 GiB above this figure.
TYPICAL_NON_KV = 1.2 * GIB
AUTO_SET = re.compile(r"Auto set \(([\d.]+)/([\d.]+)\) GiB for KV cache .*? ([\d.]+) GiB "
                      r"memory was consumed by non-kv usages")
ROUNDING = 0.01 * GIB  # vLLM's format_gib: two decimals


def _total_memory() -> int:
    """The memory vLLM's CPU worker reads (NUMA node 0, else the machine's)."""
    node = Path("/sys/devices/system/node/node0/meminfo")
    if node.exists():
        for line in node.read_text().splitlines():
            if "MemTotal:" in line:
                return int(line.split()[3]) * 1024
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def _kv_at(model: Path, utilization: float, log_path: Path) -> tuple[float, float, float]:
    """(KV GiB, total GiB, non-KV GiB) vLLM logged at ``utilization``. The project's
    server runner takes the machine-wide lock, waits for the server and stops its whole
    process group (the engine core and its worker are grandchildren that hold the KV
    cache: stopping only the API server while the engine starts leaves them running)."""
    flags = ["--gpu-memory-utilization", f"{utilization:.4f}", "--max-model-len", "512"]
    with VLLMServer(model=str(model), python=str(VLLM_PYTHON), log_path=log_path,
                    flags=flags, start_timeout_s=300):
        found = AUTO_SET.search(log_path.read_text(errors="replace"))
    assert found, log_path.read_text(errors="replace")[-3000:]
    return float(found.group(1)), float(found.group(2)), float(found.group(3))


@pytest.mark.timeout(1500)
def test_the_kv_cache_grows_with_the_utilization_as_the_planner_plans_it(
        tmp_path: Path) -> None:
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM venv at {VLLM_PYTHON}")
    model = ensure_tiny_llama(tmp_path / "models", VLLM_PYTHON)
    total = _total_memory()
    low, high = ((TYPICAL_NON_KV + extra) / total for extra in (1.5 * GIB, 2.5 * GIB))
    runs = {u: _kv_at(model, u, tmp_path / f"vllm-{u:.3f}.log") for u in (low, high)}
    cpu = GPUFacts(product="cpu", name="this machine's memory", memory_bytes=total)
    weights = (model / "model.safetensors").stat().st_size  # the checkpoint's bytes
    gaps = {}
    for u, (kv, logged_total, non_kv) in runs.items():
        assert logged_total * GIB == pytest.approx(total, abs=ROUNDING)
        planned = usable_bytes_per_gpu(cpu, u) - weights
        gaps[u] = planned - kv * GIB  # the planner's fixed overhead vs what vLLM used
        print(f"utilization {u:.4f}: vLLM KV {kv:.2f} GiB (non-KV {non_kv:.2f} GiB), "  # noqa: T201
              f"planner KV {planned / GIB:.2f} GiB (overhead "
              f"{OVERHEAD_BYTES_PER_GPU / GIB:.0f} GiB + weights)")
    (kv_low, _, used_low), (kv_high, _, used_high) = runs[low], runs[high]
    # vLLM's KV grew by the utilization's share of the whole memory, less any change in
    # what the process used besides it (its RSS at that moment), as the planner's did.
    grown = (kv_high - kv_low) * GIB
    share = (high - low) * total
    assert grown == pytest.approx(share - (used_high - used_low) * GIB, abs=3 * ROUNDING)
    print(f"planner's KV - vLLM's: {gaps[low] / GIB:+.2f} GiB at {low:.4f}, "  # noqa: T201
          f"{gaps[high] / GIB:+.2f} GiB at {high:.4f}")

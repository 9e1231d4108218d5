"""NVIDIA AIConfigurator's estimate beside the plan's predicted curve (``llm-operator plan
--aic``).

AIConfigurator (PyPI ``aiconfigurator``, Apache-2.0, NVIDIA; about 850 MB installed) is
never a dependency of the operator or its image: ``plan --aic`` runs it with another
Python, its own environment (``python -m venv .venv-aic && .venv-aic/bin/pip install
aiconfigurator==0.12.0``, or ``bash tools/setup.sh --aic`` in a checkout), and reads its
answer as JSON. Both columns of the table are **estimates**: ours from
:mod:`llm_operator.planning.perfmodel`, AIConfigurator's from NVIDIA's model built on vLLM kernel
latencies NVIDIA measured. Neither is a measurement of this service.

Pure parts (the GPU's system name, the request, the ITL p95 rule, the table) are tested
without AIConfigurator; :func:`run_aic` is the one piece of I/O.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from ..api.models import LLMServiceSpec, Quantization
from ..planning import Plan
from ..planning.perfmodel import SLO, Point

# AIConfigurator's system name for each GPU product it has tables for (its
# aiconfigurator_core/systems/*.yaml). The 40 GB A100s and the NVL parts have none.
AIC_SYSTEMS: dict[str, str] = {
    "NVIDIA-H100-80GB-HBM3": "h100_sxm", "NVIDIA-H100-PCIe": "h100_pcie",
    "NVIDIA-H200": "h200_sxm", "NVIDIA-A100-SXM4-80GB": "a100_sxm",
    "NVIDIA-A100-80GB-PCIe": "a100_pcie", "NVIDIA-L40S": "l40s", "NVIDIA-L4": "l4",
    "NVIDIA-B200": "b200_sxm", "NVIDIA-B300-SXM6-AC": "b300_sxm", "NVIDIA-GB200": "gb200",
    "NVIDIA-GB300": "gb300",
    "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition": "rtx_pro_6000_server",
}
# spec.model.quantization -> AIConfigurator's gemm_quant_mode (None: read from the
# checkpoint's config.json, as AIConfigurator does by default).
AIC_QUANT: dict[Quantization, str | None] = {
    Quantization.NONE: None, Quantization.FP8: "fp8", Quantization.AWQ: "int4_wo",
    Quantization.GPTQ: "int4_wo",
}
INSTALL = ("install AIConfigurator into its own environment (python -m venv .venv-aic && "
           ".venv-aic/bin/pip install aiconfigurator==0.12.0; about 850 MB) and pass "
           "--aic .venv-aic/bin/python, or set LLMOP_AIC_PYTHON")


class AICError(RuntimeError):
    """AIConfigurator cannot give this estimate; the message says why and the fix."""


def aic_system(product: str) -> str:
    """AIConfigurator's system name for a GPU product (``spec.gpus.product``)."""
    try:
        return AIC_SYSTEMS[product]
    except KeyError:
        raise AICError(
            f"AIConfigurator has no tables for spec.gpus.product {product!r}; it covers "
            + ", ".join(sorted(AIC_SYSTEMS)) + ": plan --aic compares on those only"
        ) from None


def itl_p95_ms(schedule: dict[str, float], batch: float) -> float:
    """The ITL p95 (ms) at ``batch`` sequences from AIConfigurator's step schedule of its
    aggregated mode: the latency of its mix step (one prompt plus the decodes) when the
    mix steps carrying other requests' prompts are more than 5% of a request's steps,
    else of its generation-only step (the nearest-rank p95 of a two-valued
    distribution; benchmarks/configs/aic_estimator_3.yaml fixed the rule)."""
    share = schedule["mixSteps"] * (1 - 1 / batch) / schedule["decodeIterations"]
    return schedule["mixStepMs"] if share > 0.05 else schedule["genonlyStepMs"]


def request_for(spec: LLMServiceSpec, plan: Plan, model: str, batches: Sequence[int],
                experts: bool = False) -> dict[str, Any]:
    """What :data:`SCRIPT` estimates: the service's lengths at the plan's parallelism,
    one estimate per batch (``batches`` sequences running, as many clients)."""
    tp = plan.tensor_parallel_size
    return {"model": model, "system": aic_system(plan.gpu_product), "tp": tp,
            "pp": plan.pipeline_parallel_size, "isl": spec.workload.input_tokens,
            "osl": spec.workload.output_tokens, "quant": AIC_QUANT[spec.model.quantization],
            "moeTp": tp if experts else None, "batches": sorted(set(batches))}


def find_python(choice: str) -> str:
    """The Python that has AIConfigurator: ``choice`` when it is a path; for ``auto``,
    $LLMOP_AIC_PYTHON, else this one when it can import it, else ./.venv-aic/bin/python."""
    if choice != "auto":
        if not Path(choice).exists():
            raise AICError(f"--aic {choice}: no such Python; {INSTALL}")
        return choice
    env = os.environ.get("LLMOP_AIC_PYTHON")
    if env:
        if not Path(env).exists():
            raise AICError(f"LLMOP_AIC_PYTHON={env}: no such Python; {INSTALL}")
        return env
    if importlib.util.find_spec("aiconfigurator") is not None:
        return sys.executable
    local = Path(".venv-aic") / "bin" / "python"
    if local.exists():
        return str(local)
    raise AICError(f"plan --aic needs NVIDIA AIConfigurator, not found: {INSTALL}")


# Run by AIConfigurator's Python: the request as JSON on stdin, the estimates as JSON on
# stdout. An OOM at one batch is that batch's answer; any other error stops and is said.
SCRIPT = r"""
import contextlib, io, json, logging, sys
logging.disable(logging.WARNING)
req = json.load(sys.stdin)
try:
    from importlib.metadata import version
    from aiconfigurator.cli.api import cli_estimate
except Exception as e:
    json.dump({"error": f"cannot import AIConfigurator: {e}"}, sys.stdout); sys.exit(0)
out = {"version": version("aiconfigurator"), "batches": {}}
kw = {}
if req["moeTp"]:
    kw = {"moe_tp_size": req["moeTp"], "moe_ep_size": 1}
for b in req["batches"]:
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            r = cli_estimate(req["model"], req["system"], backend_name="vllm", mode="agg",
                             isl=req["isl"], osl=req["osl"], batch_size=b, tp_size=req["tp"],
                             pp_size=req["pp"], gemm_quant_mode=req["quant"], **kw)
    except Exception as e:
        msg = (str(e).splitlines() or [type(e).__name__])[0][:300]
        if "OOM" in msg:
            out["batches"][str(b)] = {"oom": msg}
            continue
        out["error"] = f"{type(e).__name__}: {msg}"
        break
    s = (r.per_ops_data or {}).get("scheduling", {})
    out["tables"] = r.backend_version
    out["batches"][str(b)] = {
        "ttftMs": float(r.ttft), "tpotMs": float(r.tpot), "outputTps": float(r.raw["tokens/s"]),
        "schedule": {"mixSteps": float(s.get("num_mix_steps", 0)),
                     "mixStepMs": float(s.get("mix_step_latency_ms", 0)),
                     "genonlyStepMs": float(s.get("genonly_step_latency_ms", 0)),
                     "decodeIterations": float(s.get("decode_iterations", 1) or 1)}}
json.dump(out, sys.stdout)
"""


def run_aic(python: str, request: dict[str, Any], timeout_s: float = 900.0) -> dict[str, Any]:
    """AIConfigurator's estimates for ``request`` (about a second each, after a few
    seconds of loading its tables)."""
    try:
        proc = subprocess.run([python, "-c", SCRIPT], input=json.dumps(request),
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise AICError(f"AIConfigurator took over {timeout_s:.0f} s; run it with fewer "
                       "points (--no-curve skips the comparison)") from None
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise AICError(f"AIConfigurator ({python}) failed: {tail}") from None
    if "error" in out and not out.get("batches"):
        raise AICError(f"AIConfigurator: {out['error']}. If it could not find the model, "
                       "pass --aic-model with an id it knows (e.g. meta-llama/Meta-Llama-"
                       "3.1-8B) or a folder holding the model's config.json")
    return out


def comparable(points: Sequence[Point]) -> list[Point]:
    """The curve's points where every client's request runs (no queue, the cap and the KV
    cache not binding): AIConfigurator's batch b is b running sequences."""
    return [p for p in points if p.limit == "clients" and p.queued < 0.5]


def comparison_table(points: Sequence[Point], result: dict[str, Any], system: str,
                     slo: SLO | None = None) -> Table:
    """Our figures beside AIConfigurator's at each comparable concurrency."""
    version = result.get("version", "?")
    table = Table(
        title=f"Predicted beside NVIDIA AIConfigurator {version} (vLLM kernel tables "
              f"{result.get('tables', '?')}, {system}): both estimates, neither measured",
        caption="ours: llm_operator.planning.perfmodel; AIC: AIConfigurator's aggregated-serving "
                "estimate at as many sequences as clients, its ITL p95 from its step "
                "schedule; times in ms; SLO: met (ours, AIC's)")
    for col in ("clients", "tok/s", "AIC tok/s", "ratio", "TTFT", "AIC TTFT", "ITL p95",
                "AIC ITL p95", "AIC TPOT"):
        table.add_column(col, justify="right")
    if slo:
        table.add_column("SLO", justify="left")
    for p in comparable(points):
        est = result.get("batches", {}).get(str(p.concurrency))
        ours = [f"{p.output_tps:,.0f}", f"{p.ttft_s * 1e3:,.0f}", f"{p.itl_p95_s * 1e3:,.1f}"]
        if est is None or "oom" in est:
            why = "OOM in AIC" if est else "not estimated"
            row = [str(p.concurrency), ours[0], why, "-", ours[1], "-", ours[2], "-", "-"]
            if slo:
                row.append(f"{_yes(p.meets(slo))},-")
            table.add_row(*row)
            continue
        p95 = itl_p95_ms(est["schedule"], p.concurrency)
        row = [str(p.concurrency), ours[0], f"{est['outputTps']:,.0f}",
               f"{p.output_tps / est['outputTps']:.2f}" if est["outputTps"] else "-",
               ours[1], f"{est['ttftMs']:,.0f}", ours[2], f"{p95:,.1f}", f"{est['tpotMs']:,.1f}"]
        if slo:
            theirs = est["ttftMs"] <= slo.ttft_ms and p95 <= slo.itl_ms
            row.append(f"{_yes(p.meets(slo))},{_yes(theirs)}")
        table.add_row(*row)
    return table


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"

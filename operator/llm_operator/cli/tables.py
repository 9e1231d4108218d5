"""What ``llm-operator plan`` prints: the plan with the formula behind each number, and the
performance model's predicted curve (rich tables; presentation only, no logic)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..inpod.tuner.search import SLO
from ..models import LLMService
from ..perfmodel import Point, knee
from ..planning import Explained, Plan, human_bytes
from ..status import plan_summary


def _fmt(key: str, value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int | float) and "bytes" in key.lower() and "per" not in key[:3] \
            and key not in ("kvBytes", "dtypeBytes", "bytesPerParam") and value >= 1e6:
        return human_bytes(value)
    if isinstance(value, int | float) and key.lower().endswith("flops") and value >= 1e9:
        return f"{value / 1e12:,.1f} TFLOP/s"
    if isinstance(value, float) and value.is_integer() and value >= 1e6:
        return f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list):
        return ", ".join(map(str, value)) if value else "-"
    return str(value)


def _value(item: Explained) -> str:
    if item.unit == "bytes" and isinstance(item.value, int | float) and item.value >= 1e6:
        return human_bytes(item.value)
    if item.unit == "FLOP/s" and isinstance(item.value, int | float):
        return _fmt("flops", item.value)
    text = _fmt("", item.value)
    return f"{text} {item.unit}" if item.unit and item.unit != "bytes" else text


# Below this many columns the four-column table squeezes its formula column to a word per
# line; plan_table then prints one block per number instead.
NARROW_COLUMNS = 110


def plan_table(svc: LLMService, plan: Plan, width: int | None = None) -> RenderableType:
    """A table of each planned number: value, source, and the formula with its inputs;
    the plan's warnings below it (what ``llm-operator plan`` prints). On a terminal (or a
    pipe: rich assumes 80 columns) narrower than :data:`NARROW_COLUMNS`, one block per
    number: its name, value and source on one line, the formula and inputs below."""
    title = (f"{svc.metadata.namespace}/{svc.metadata.name}: {plan.model_name} on "
             f"{plan.gpus_per_replica} x {plan.gpu_product} (TP={plan.tensor_parallel_size}, "
             f"PP={plan.pipeline_parallel_size}"
             + (f", DCP={plan.decode_context_parallel_size}"
                if plan.decode_context_parallel_size > 1 else "") + ")")
    if width is not None and width < NARROW_COLUMNS:
        return _plan_blocks(title, plan)
    table = Table(title=title, show_lines=True, title_justify="left")
    table.add_column("setting", style="bold", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("source")
    table.add_column("how (formula; inputs)")
    for item in plan.explanations:
        table.add_row(item.name, _value(item), item.source,
                      "\n".join([item.formula, *_inputs(item)]))
    return Group(table, *_notes(plan))


def _inputs(item: Explained) -> list[str]:
    lines = []
    for key, value in item.inputs.items():
        if key == "passedOver" and isinstance(value, list):
            lines += [f"  not {v}" for v in value]
        else:
            lines.append(f"  {key} = {_fmt(key, value)}")
    return lines


def _notes(plan: Plan) -> list[RenderableType]:
    notes: list[RenderableType] = [Text(f"warning: {w}", style="yellow") for w in plan.warnings]
    notes += [Text(f"adjusted: {a}", style="cyan") for a in plan.adjustments]
    return notes


def _plan_blocks(title: str, plan: Plan) -> RenderableType:
    parts: list[RenderableType] = [Text(title, style="bold")]
    for item in plan.explanations:
        head = Text(f"\n{item.name} = {_value(item)}", style="bold")
        head.append(f"  ({item.source})", style="dim")
        parts += [head, Text("\n".join([item.formula, *_inputs(item)]))]
    return Group(*parts, Text(""), *_notes(plan))


def plan_document(svc: LLMService, plan: Plan) -> dict[str, Any]:
    """The plan as data (``llm-operator plan -o yaml|json``): what ``status.plan`` holds,
    with each explanation's inputs and unit as well."""
    summary = plan_summary(plan)
    summary["explanations"] = [
        {"name": e.name, "value": e.value, "unit": e.unit, "source": e.source,
         "formula": e.formula, "inputs": e.inputs} for e in plan.explanations]
    return {"namespace": svc.metadata.namespace, "name": svc.metadata.name, "plan": summary}


def curve_table(points: Sequence[Point], title: str = "Predicted curve",
                slo: SLO | None = None,
                caption: str = "predicted by llm_operator.perfmodel (steady state)") -> Table:
    """The curve as a rich table (one row per concurrency; the knee marked, and the
    goodput column when an SLO is given)."""
    table = Table(title=title, caption=caption)
    for col in ("clients", "running", "queued", "output tok/s", "tok/s per user", "TTFT ms",
                "ITL ms", "ITL p95 ms", "bound"):
        table.add_column(col, justify="right" if col != "bound" else "left")
    if slo:
        table.add_column("goodput tok/s", justify="right")
    k = knee(points) if points else None
    for p in points:
        notes = [p.bound]
        if p.limit != "clients":
            notes.append(f"cap: {p.limit}")
        if p.preempting:
            notes.append("preempting")
        if p is k:
            notes.append("knee")
        row = [str(p.concurrency), f"{p.running:.1f}", f"{p.queued:.1f}", f"{p.output_tps:,.0f}",
               f"{p.user_tps:,.1f}", f"{p.ttft_s * 1e3:,.0f}", f"{p.itl_s * 1e3:,.2f}",
               f"{p.itl_p95_s * 1e3:,.2f}", ", ".join(notes)]
        if slo:
            row.append(f"{p.goodput(slo):,.0f}")
        table.add_row(*row, style="bold" if p is k else None)
    return table

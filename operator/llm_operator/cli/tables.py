"""What ``llm-operator plan`` prints: the plan with the formula behind each number, and the
performance model's predicted curve (rich tables; presentation only, no logic)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..api.models import LLMService
from ..health.status import plan_summary
from ..inpod.tuner.space import SLO
from ..planning import Explained, Plan, human_bytes
from ..planning.perfmodel import Point, knee


def _fmt(key: str, value: Any) -> str:
    if value is None:  # a plan input says why it is unknown; this is the last resort
        return "unknown"
    if isinstance(value, bool):
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
# line; plan_table then prints one block per number instead. It does the same wherever the
# formula column would get fewer than FORMULA_COLUMNS (a long value, such as a placement's
# node label, widens the value column).
NARROW_COLUMNS = 110
FORMULA_COLUMNS = 60


def plan_table(svc: LLMService, plan: Plan, width: int | None = None) -> RenderableType:
    """A table of each planned number: value, source, and the formula with its inputs;
    the plan's warnings below it (what ``llm-operator plan`` prints). On a terminal (or a
    pipe: rich assumes 80 columns) narrower than :data:`NARROW_COLUMNS`, or where the
    formula column would get fewer than :data:`FORMULA_COLUMNS`, one block per number:
    its name, value and source on one line, the formula and inputs below."""
    title = (f"{svc.metadata.namespace}/{svc.metadata.name}: {plan.model_name} on "
             f"{plan.gpus_per_replica} x {plan.gpu_product} (TP={plan.tensor_parallel_size}, "
             f"PP={plan.pipeline_parallel_size}"
             + (f", DCP={plan.decode_context_parallel_size}"
                if plan.decode_context_parallel_size > 1 else "") + ")")
    if width is not None and (width < NARROW_COLUMNS or _formula_width(plan, width)
                              < FORMULA_COLUMNS):
        return _plan_blocks(title, plan)
    table = Table(title=title, show_lines=True, title_justify="left")
    table.add_column("setting", style="bold", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    # fold, not ellipsis: a word longer than its column (a path, a label) breaks, never cut.
    table.add_column("source", overflow="fold")
    table.add_column("how (formula; inputs)", overflow="fold")
    for item in plan.explanations:
        table.add_row(item.name, _value(item), item.source,
                      "\n".join([item.formula, *_inputs(item)]))
    return Group(table, *_notes(plan))


def _formula_width(plan: Plan, width: int) -> int:
    """What the formula column would get beside the other three at ``width`` (each column
    padded by one space each side, five borders)."""
    others = sum(max(len(text) for text in column) for column in zip(
        *((item.name, _value(item), item.source) for item in plan.explanations),
        strict=True))
    return width - others - 4 * 2 - 5


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


# The curve's columns: key, full header, short header (for narrow terminals), and the
# legend's words for the short header. _CURVE_OPTIONAL: the columns left out, in this
# order, when even the short headers do not fit.
_CURVE_COLUMNS = (
    ("clients", "clients", "N", "clients"),
    ("running", "running", "run", "requests running"),
    ("queued", "queued", "queue", "requests queued"),
    ("output", "output tok/s", "out/s", "output tok/s"),
    ("user", "tok/s per user", "user/s", "tok/s per user"),
    ("ttft", "TTFT ms", "TTFT", "TTFT ms"),
    ("itl", "ITL ms", "ITL", "mean ITL ms"),
    ("itl95", "ITL p95 ms", "ITL95", "ITL p95 ms"),
    ("bound", "bound", "bound", ""),
    ("goodput", "goodput tok/s", "good/s", "goodput tok/s (output within the SLO)"),
)
_CURVE_OPTIONAL = ("user", "running", "itl")


def _curve_rows(points: Sequence[Point], slo: SLO | None) -> tuple[list[dict[str, str]], Any]:
    k = knee(points) if points else None
    rows = []
    for p in points:
        notes = [p.bound]
        if p.limit != "clients":
            notes.append(f"cap: {p.limit}")
        if p.preempting:
            notes.append("preempting")
        if p is k:
            notes.append("knee")
        row = {"clients": str(p.concurrency), "running": f"{p.running:.1f}",
               "queued": f"{p.queued:.1f}", "output": f"{p.output_tps:,.0f}",
               "user": f"{p.user_tps:,.1f}", "ttft": f"{p.ttft_s * 1e3:,.0f}",
               "itl": f"{p.itl_s * 1e3:,.2f}", "itl95": f"{p.itl_p95_s * 1e3:,.2f}",
               "bound": ", ".join(notes)}
        if slo:
            row["goodput"] = f"{p.goodput(slo):,.0f}"
        rows.append(row)
    return rows, k


def _widths(header: str, cells: list[str]) -> tuple[int, int]:
    """The narrowest width that cuts no word of the header or a cell, and the width
    that wraps nothing."""
    words = header.split() + [w for c in cells for w in c.split()]
    return (max(len(w) for w in words),
            max([len(header), *(len(c) for c in cells)]))


def curve_table(points: Sequence[Point], title: str = "Predicted curve",
                slo: SLO | None = None,
                caption: str = "predicted by llm_operator.planning.perfmodel (steady state)",
                width: int | None = None) -> Table:
    """The curve as a rich table (one row per concurrency; the knee marked, and the
    goodput column when an SLO is given). Given the terminal's ``width`` (a pipe: rich
    assumes 80), the table never cuts a header or a value: full headers where they fit
    (wrapped at spaces if need be); else short headers, explained in a legend under the
    table, in a table without side borders; and only where that is still too wide, fewer
    columns (the legend names those left out)."""
    rows, k = _curve_rows(points, slo)
    columns = [c for c in _CURVE_COLUMNS if slo or c[0] != "goodput"]

    def sizes(cols: Sequence[tuple[str, str, str, str]], short: bool) -> list[tuple[int, int]]:
        return [_widths(c[2] if short else c[1], [r[c[0]] for r in rows]) for c in cols]

    def span(cols: Sequence[tuple[str, str, str, str]], short: bool, least: bool) -> int:
        inner = sum(s[0] if least else s[1] for s in sizes(cols, short))
        return inner + (3 * len(cols) - 3 if short else 3 * len(cols) + 1)

    short = width is not None and span(columns, False, True) > width
    if width is not None and short:
        for key in _CURVE_OPTIONAL:
            if span(columns, True, True) <= width:
                break
            columns = [c for c in columns if c[0] != key]
    # Where the widest layout does not fit, every column but "bound" gets the width of its
    # longest word, so that rich narrows (wraps) only the notes, never a number.
    fixed = width is not None and span(columns, short, False) > width
    if short:
        left_out = [c[3] for c in _CURVE_COLUMNS if c not in columns
                    and (slo or c[0] != "goodput")]
        legend = "; ".join(f"{c[2]}: {c[3]}" for c in columns if c[3] and c[2] != c[3])
        caption = (f"{caption}. {legend}"
                   + (f"; left out at this width: {', '.join(left_out)}" if left_out else ""))
        table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False,
                      pad_edge=False)
    else:
        table = Table(title=title, caption=caption)
    for (key, long, brief, _legend), (least, _) in zip(columns, sizes(columns, short),
                                                       strict=True):
        table.add_column(brief if short else long,
                         justify="left" if key == "bound" else "right",
                         width=least if fixed and key != "bound" else None,
                         min_width=least, overflow="fold")
    for row, p in zip(rows, points, strict=True):
        table.add_row(*(row[c[0]] for c in columns), style="bold" if p is k else None)
    return table

"""The corpus of engine settings vLLM refuses (``tests/unit/data/engine_refusals.yaml``):
each case as the LLMService the operator plans, and as the arguments it would render."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from llm_operator.api.models import LLMService, parse_llmservice
from llm_operator.planning import engine_argv, make_plan

CORPUS = Path(__file__).resolve().parents[1] / "unit" / "data" / "engine_refusals.yaml"


@dataclass(frozen=True)
class Case:
    id: str
    rule: str
    fields: tuple[str, ...]
    tiny: str  # which tiny Llama vLLM reads (a key of the corpus's `tiny`)
    svc: LLMService


@cache
def _corpus() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CORPUS.read_text())
    return data


def service(case: dict[str, Any]) -> LLMService:
    """``base`` with the case's engine and GPUs merged in and its model instead."""
    spec = copy.deepcopy(_corpus()["base"])
    if "model" in case:
        spec["model"] = case["model"]
    spec["engine"] = {**spec["engine"], **case.get("engine", {})}
    spec["gpus"] = {**spec["gpus"], **case.get("gpus", {})}
    return parse_llmservice({"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
                             "metadata": {"name": "engine-rules", "namespace": "ml"},
                             "spec": spec})


def baseline() -> LLMService:
    return service({})


def cases() -> list[Case]:
    return [Case(c["id"], c["rule"], tuple(c["fields"]), c.get("tiny", "default"), service(c))
            for c in _corpus()["cases"]]


def tiny_models() -> dict[str, dict[str, int]]:
    """Key -> the arguments of ``ensure_tiny_llama`` for that tiny Llama."""
    return dict(_corpus()["tiny"])


def rendered_args(svc: LLMService) -> list[str]:
    """The engine arguments the operator would render for ``svc`` were vLLM's start-up
    rules not checked (the planner refuses every case of the corpus)."""
    return engine_argv(svc.spec, make_plan(svc.spec, engine_rules=False))


# --------------------------------------------------------------------------- the docs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "production" / "engine-rules.md"
BEGIN, END = "<!-- rules: begin -->", "<!-- rules: end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rules_table() -> str:
    """The table of docs/production/engine-rules.md: each rule, where vLLM makes it, and
    what the operator says for the corpus's case of it (fields, fix)."""
    from llm_operator.api.errors import SpecError, SpecErrors
    from llm_operator.knowledge.engine_rules import RULES

    by_rule = {c.rule: c for c in cases()}
    rows = ["| # | rule | vLLM 0.32.0 source (file, function) | vLLM says | corpus case: "
            "the operator refuses | fix it gives |", "|---|---|---|---|---|---|"]
    for n, rule in enumerate(RULES, 1):
        case = by_rule[rule.id]
        try:
            make_plan(case.svc.spec)
            said = "(accepted)"  # never: the unit tier fails first
            fix = ""
        except (SpecError, SpecErrors) as exc:
            errors = exc.errors if isinstance(exc, SpecErrors) else [exc]
            err = next(e for e in errors if rule.source in e.problem)
            said = f"`{case.id}`: **{err.field}**: {err.problem}"
            fix = err.fix
        rows.append(f"| {n} | `{rule.id}`: {_cell(rule.summary)} | `{rule.source}` | "
                    f"{_cell(repr(rule.says))} | {_cell(said)} | {_cell(fix)} |")
    return "\n".join(rows)


def write_docs() -> None:
    text = DOCS.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOCS.write_text(f"{head}{BEGIN}\n{rules_table()}\n{END}{tail}")


if __name__ == "__main__":  # python -m tests.support.engine_refusals: rewrite the table
    write_docs()

"""Bad input: the corpus in ``tests/unit/data/bad_input.yaml`` run through every stage
(the CRD's schema and CEL rules as the API server applies them, emulated by
``tests/support/crd.py``; the operator's planner and renderer; the command line), with
what each stage did. Writes the table ``docs/production/bad-input.md``, the figures
``benchmarks/data/bad_input.json`` and their section of ``benchmarks/results/bad-input.md``; a unit
test (``tests/unit/test_bad_input.py``) checks that all three are current.

    .venv/bin/python -m benchmarks.bad_input --write
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.bad_input import Judged, judge, load_accepted, load_cases

from benchmarks.results_md import markers, replace_section

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "production" / "bad-input.md"
DATA = ROOT / "benchmarks" / "data" / "bad_input.json"
NAME = "bad-input"
BEGIN, END = markers(NAME)

WHERE = {
    "crd": "API server (CRD)",
    "plan": "operator (planner)",
    "cli": "`llm-operator plan/render`",
}


def _cell(text: str, limit: int = 260) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _code(text: str) -> str:
    """A table cell as a code span, so that a message quoting a pattern is not read as
    markdown (``[a-z](...)`` became a link); doubled backticks when it holds one."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def doc_markdown(judged: list[Judged]) -> str:
    """The docs page: one row per corpus case."""
    lines = [
        "# Bad input: what is refused, where, and with what message",
        "",
        "Written by `python -m benchmarks.bad_input --write` from the corpus",
        "`tests/unit/data/bad_input.yaml`; `tests/unit/test_bad_input.py` runs one test per",
        "row and fails when this page is not current. Where a row says *API server (CRD)*,",
        "the refusal comes from the CRD's schema or CEL rules (`kubectl apply` fails; the",
        "tests evaluate them as the API server does, with `jsonschema` and `celpy`: not a",
        "real API server). *operator (planner)*: the API server admits the object, and the",
        "operator refuses it with the message in the `SpecValid=False` condition (reason",
        "`InvalidSpec`) and a Warning Event; `llm-operator plan` and `render` print the same",
        "message and exit 2. *`llm-operator plan/render`*: problems of the file itself",
        "(exit 2, one error line and one fix line, never a traceback).",
        "",
        "Every row is also run through the other stages: none crashes, and none accepts",
        "the input and renders an object the API server (strict schema, name and label",
        "rules) or vLLM's argument parser would refuse. Figures:",
        "`benchmarks/results/bad-input.md`.",
        "",
        "| # | kind | mistake | example | refused by | message |",
        "|---|---|---|---|---|---|",
    ]
    for i, j in enumerate(judged, 1):
        c = j.case
        how = j.outcomes[c.refused_by].how
        where = WHERE[c.refused_by] + (f": {how}" if how and c.refused_by == "crd" else "")
        lines.append(f"| {i} | {c.kind} | {_cell(c.mistake)} | `{_cell(c.example, 140)}` | "
                     f"{where} | {_code(_cell(j.message()))} |")
    return "\n".join(lines) + "\n"


def figures(judged: list[Judged], accepted: list[Judged]) -> dict[str, Any]:
    """The figures the results page shows (deterministic: no times, no paths)."""
    every = judged + accepted
    outcomes = [o for j in every for o in j.outcomes.values()]
    return {
        "kinds": len(judged),
        "classes": dict(sorted(Counter(j.case.kind for j in judged).items())),
        "refusedBy": dict(sorted(Counter(j.case.refused_by for j in judged).items())),
        "firstRefusedBy": dict(sorted(Counter(str(j.refused_by) for j in judged).items())),
        "refusedNamingTheField": sum(1 for j in judged if not j.problems()),
        "tracebacks": sum(1 for o in outcomes if o.result == "traceback"),
        "acceptedButInvalid": sum(1 for o in outcomes if o.result == "invalid"),
        "acceptedEdgeCases": len(accepted),
        "acceptedEdgeCasesValid": sum(
            1 for j in accepted if all(o.result == "accepted" for o in j.outcomes.values())),
    }


def section(fig: dict[str, Any]) -> str:
    """The results section, from the stored figures."""
    by = fig["refusedBy"]
    classes = ", ".join(f"{k} {v}" for k, v in fig["classes"].items())
    return "\n".join([
        BEGIN,
        "## Bad input",
        "",
        "The bad-input corpus (`tests/unit/data/bad_input.yaml`, one unit test per row; the",
        "table with every message: `docs/production/bad-input.md`), each case run through",
        "the CRD's schema and CEL rules (evaluated as the API server does, not a real API",
        "server), the operator's planner and renderer, and `llm-operator plan/render`.",
        "Stored: `benchmarks/data/bad_input.json`; `python -m benchmarks.bad_input --write`.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| bad-input kinds tried | {fig['kinds']} ({classes}) |",
        f"| refused by the API server (CRD schema or CEL) | {by.get('crd', 0)} |",
        f"| refused by the operator's planner (and `llm-operator plan/render`) | "
        f"{by.get('plan', 0)} |",
        f"| refused by the command line (the file itself) | {by.get('cli', 0)} |",
        f"| refused where expected, naming the field | {fig['refusedNamingTheField']} of "
        f"{fig['kinds']} |",
        f"| tracebacks (any stage) | {fig['tracebacks']} |",
        f"| accepted but rendering an object the API server or vLLM would refuse | "
        f"{fig['acceptedButInvalid']} |",
        f"| accepted edge cases rendered and validated strictly | "
        f"{fig['acceptedEdgeCasesValid']} of {fig['acceptedEdgeCases']} |",
        END,
        "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="write the docs table, the JSON and the results section")
    args = parser.parse_args()
    judged = [judge(c) for c in load_cases()]
    accepted = [judge(c) for c in load_accepted()]
    fig = figures(judged, accepted)
    print(json.dumps(fig, indent=1))  # noqa: T201
    for j in judged:
        for problem in j.problems():
            print(f"{j.case.id}: {problem}")  # noqa: T201
    if args.write:
        DOC.write_text(doc_markdown(judged))
        DATA.write_text(json.dumps(fig, indent=1) + "\n")
        replace_section(NAME, section(fig))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

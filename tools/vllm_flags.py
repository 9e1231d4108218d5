"""Write the option table of ``vllm serve`` (the vLLM release of the default image) to
``operator/llm_operator/knowledge/data/vllm_serve_flags.json``; the planner checks
``spec.engine.extraArgs`` against it (see ``llm_operator.knowledge.extra_args``).

Run with the Python that has vLLM: ``.venv-vllm/bin/python tools/vllm_flags.py``.
The vLLM tier test ``test_the_flag_table_is_the_installed_vllm_serve_parser`` fails when
the table and the installed parser differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OUT = (Path(__file__).resolve().parents[1]
       / "operator/llm_operator/knowledge/data/vllm_serve_flags.json")


def arity(action: argparse.Action) -> int | str:
    """How many values an option takes, as argparse counts them: 0 (a switch), 1, a
    fixed number, or "?" (zero or one), "+" (one or more), "*" (any number)."""
    if action.nargs is None:
        return 1
    if action.nargs in ("?", "+", "*") or isinstance(action.nargs, int):
        return action.nargs
    raise ValueError(f"{action.option_strings}: nargs {action.nargs!r} is not modelled")


def flag_table() -> dict[str, object]:
    """Every option string of ``vllm serve`` with its destination, how many values it
    takes and whether giving it again adds to it (an append action) or replaces it, as
    vLLM's own parser defines them."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    import vllm

    top = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand()
    parser = serve.subparser_init(top.add_subparsers(dest="subparser"))
    options: dict[str, dict[str, object]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for opt in action.option_strings:
            options[opt] = {"dest": action.dest, "arity": arity(action),
                            "appends": isinstance(action, argparse._AppendAction)}
    return {"vllm": vllm.__version__, "options": dict(sorted(options.items()))}


def main() -> int:
    table = flag_table()
    text = json.dumps(table, indent=1, sort_keys=False) + "\n"
    if "--check" in sys.argv:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    sys.stdout.write(f"{OUT}: {len(table['options'])} options of vllm serve {table['vllm']}\n")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())

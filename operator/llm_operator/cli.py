"""The ``llm-operator`` command line.

Subcommands: ``run`` (the operator), ``render`` (manifests for LLMService files, like
``helm template``), ``plan`` (capacity and parallelism plan), ``tune`` and
``recommend`` (later issues). Each subcommand parses its files at the boundary and
calls one pure function.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from .errors import SpecError, SpecErrors
from .models import LLMService, parse_llmservice


def load_services(paths: Sequence[str]) -> Iterator[tuple[str, LLMService]]:
    """Yield every LLMService document in the given YAML files (other kinds are skipped)."""
    for path in paths:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") == "LLMService":
                yield path, parse_llmservice(doc)


def _cmd_plan(args: argparse.Namespace) -> int:
    from .planning import make_plan, plan_table

    console = Console()
    for path, svc in load_services(args.files):
        plan = make_plan(svc.spec)
        console.print(plan_table(svc, plan))
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    from .planning import make_plan
    from .rendering import render_all
    from .settings import Settings

    settings = Settings()
    docs: list[dict[str, Any]] = []
    for _path, svc in load_services(args.files):
        docs.extend(render_all(svc, make_plan(svc.spec), settings))
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from .handlers import run_operator

    return run_operator(namespaces=args.namespace, standalone=args.standalone)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="llm-operator", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="print the capacity and parallelism plan, with reasons")
    p.add_argument("files", nargs="+", help="LLMService YAML files ('-' for stdin)")
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("render", help="print the manifests the operator would apply")
    p.add_argument("files", nargs="+", help="LLMService YAML files ('-' for stdin)")
    p.set_defaults(func=_cmd_render)

    p = sub.add_parser("run", help="run the operator against the current kubeconfig")
    p.add_argument("-n", "--namespace", action="append", default=[], help="watch (repeatable)")
    p.add_argument("--standalone", action="store_true", help="no peering with a standby")
    p.set_defaults(func=_cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llm-operator`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (SpecError, SpecErrors) as exc:
        errs = exc.errors if isinstance(exc, SpecErrors) else [exc]
        err = Console(stderr=True)
        for e in errs:
            err.print(f"[bold red]error[/] {e.field}: {e.problem}\n  fix: {e.fix}")
        return 2


if __name__ == "__main__":
    sys.exit(main())

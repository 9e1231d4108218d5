"""The ``llm-operator`` command line.

Subcommands: ``run`` (the operator), ``render`` (manifests for LLMService files, like
``helm template``), ``plan`` (capacity and parallelism plan, with the predicted curve),
``facts`` (a model's config.json, compactly: the facts Job's command),
``tune`` (the benchmark search, :mod:`.tune`), ``recommend`` (what the online controller
would decide now, :mod:`.recommend`), ``plot`` (PNGs of a tuning run and of an
adaptation timeline, :mod:`.plot`) and ``demo`` (the whole loop on this machine, on a
local real control plane; ``--emulated``: on the emulated API server). Each subcommand
parses its files at the boundary and calls one pure function; the tables it prints are
in :mod:`.tables`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import yaml
from rich.console import Console

from ..api.errors import InputError, SpecError, SpecErrors
from ..api.models import load_services
from ..settings import Settings


def _cmd_plan(args: argparse.Namespace) -> int:
    from ..planning.perfmodel import (
        NoPrediction,
        accuracy_caption,
        curve_for,
        inputs_for,
        suggest_for,
        tp_alternative,
    )
    from ..planning.sizing import plan_for_slo
    from ..rendering.placement import with_placement
    from .tables import curve_table, plan_document, plan_table

    console = Console()
    settings = Settings()
    documents = []
    for _path, svc in load_services(args.files):
        facts = _read_facts(args.model_config, svc.spec)
        plan = with_placement(plan_for_slo(svc.spec, gpus_per_node=settings.gpus_per_node,
                                           facts=facts,
                                           load_bandwidth=settings.model_load_bandwidth),
                              svc.spec, settings)
        if args.output != "table":
            documents.append(plan_document(svc, plan))
            continue
        console.print(plan_table(svc, plan, width=console.width))
        if facts is not None and svc.spec.model.architecture is None:
            console.print(f"Model facts read from {args.model_config}: " + ", ".join(
                f"{fact} from {source}" for fact, source in plan.fact_sources.items()))
        if not args.no_curve:
            try:
                # The facts the plan was made from (catalog, spec.model.architecture, or
                # --model-config's config.json).
                points, slo = curve_for(svc.spec, plan, facts=facts)
                start = suggest_for(svc.spec, plan, facts=facts)
            except NoPrediction as exc:
                console.print(f"No predicted curve: {exc}.")
                continue
            experts = bool(inputs_for(svc.spec, plan, facts).model.num_experts)
            console.print(curve_table(points, f"Predicted: {plan.model_name} on "
                                      f"{plan.gpu_product}, TP {plan.tensor_parallel_size}", slo,
                                      accuracy_caption(experts), width=console.width))
            console.print(_start_line(plan, start))
            if args.aic is not None:
                _print_aic(console, args, svc.spec, plan, points, slo, experts)
            for option, point in tp_alternative(svc.spec, plan, facts=facts,
                                                gpus_per_node=settings.gpus_per_node):
                taken = "planned" if option is plan else "not taken"
                console.print(
                    f"Predicted at {plan.slo.get('concurrencyPerReplica') or '?'} clients per "
                    f"replica, TP "
                    f"{option.tensor_parallel_size} ({taken}, {option.gpus_per_replica} GPUs): "
                    f"TTFT {point.ttft_s * 1e3:,.0f} ms, ITL p95 {point.itl_p95_s * 1e3:,.1f} "
                    f"ms, {point.output_tps:,.0f} tok/s, "
                    f"{'meets' if point.meets(slo) else 'misses'} the SLO")
    if args.output == "json":
        sys.stdout.write(json.dumps(documents if len(documents) != 1 else documents[0],
                                    indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True))
    return 0


def _start_line(plan: Any, start: Any) -> str:
    """The last line of ``plan``: the knobs the pods start with (and the tuner's hint),
    from the SLO sizing where it ran (one number per knob), else the model's suggestion."""
    slo = plan.slo
    if not slo.get("sized"):
        return f"Suggested starting max-num-seqs: {start.max_num_seqs} ({start.reason})"
    p, goal = slo["predicted"], slo["objective"]
    verdict = "meets" if slo["attainable"] else "misses"
    after = "" if slo["attainable"] else "; no plan meets it: the warning above has the fixes"
    return ("Start (rendered; the tuner's hint where it searches max-num-seqs): "
            f"--max-num-seqs {p['maxNumSeqs']} "
            f"--max-num-batched-tokens {p['maxNumBatchedTokens']}; predicted at "
            f"{slo['concurrencyPerReplica']} clients per replica: TTFT {p['ttftP95Ms']:,.0f} "
            f"ms, ITL p95 {p['itlP95Ms']:,.1f} ms, {p['outputTokensPerSecond']:,.0f} output "
            f"tok/s (estimated): {verdict} the SLO (TTFT {goal['ttftP95Ms']:,g} ms, ITL "
            f"{goal['itlP95Ms']:,g} ms); layout by {slo['layoutBy']}{after}")


def _print_aic(console: Console, args: argparse.Namespace, spec: Any, plan: Any,
               points: Any, slo: Any, experts: bool) -> None:
    """AIConfigurator's estimate beside the curve (``plan --aic``), or why not; ``experts``:
    whether the model routes to experts (the estimator names MoE models differently)."""
    from .aic import (
        AICError,
        comparable,
        comparison_table,
        find_python,
        request_for,
        run_aic,
    )

    model = args.aic_model or (args.model_config if args.model_config not in (None, "hub")
                               else spec.model.name)
    try:
        rows = comparable(points)
        if not rows:
            raise AICError("no point of the curve runs every client's request (the cap or "
                           "the KV cache binds at every concurrency): nothing to compare")
        request = request_for(spec, plan, model, [p.concurrency for p in rows], experts)
        result = run_aic(find_python(args.aic), request)
    except AICError as exc:
        console.print(f"No AIConfigurator estimate: {exc}.")
        return
    console.print(comparison_table(points, result, request["system"], slo))
    if result.get("error"):
        console.print(f"AIConfigurator stopped early: {result['error']}.")


def _read_facts(source: str | None, spec: Any) -> Any:
    """The model's facts from ``--model-config`` (a folder, or ``hub``), or None. Without
    it, a model the catalog does not know and no ``spec.model.architecture``: the error
    names the flag (the operator reads config.json itself; this command does not unless
    asked)."""
    from ..facts.control import needs_facts

    if source is None:
        if needs_facts(spec):
            raise SpecError(
                "spec.model.architecture",
                f"is required here: model {spec.model.name!r} is not in the built-in "
                "catalog and --model-config was not given",
                "add --model-config hub (reads spec.model.name's config.json from the "
                "Hub; HF_ENDPOINT, HF_TOKEN honoured) or --model-config DIR (a folder "
                "holding config.json), or set spec.model.architecture; in a cluster the "
                "operator reads config.json itself (a facts Job)")
        return None
    from .modelsource import facts_from_folder, facts_from_hub

    if source == "hub":
        return facts_from_hub(spec.model.name, spec.model.revision)
    return facts_from_folder(source, spec.model.name)


def _cmd_render(args: argparse.Namespace) -> int:
    from ..health.status import live_cap_in_use
    from ..planning.sizing import plan_for_slo
    from ..rendering import render_all

    settings = Settings()
    docs: list[dict[str, Any]] = []
    for _path, svc in load_services(args.files):
        facts = _read_facts(args.model_config, svc.spec)
        # As the operator renders a new service (no status yet): live cap where it applies.
        docs.extend(render_all(
            svc, plan_for_slo(svc.spec, gpus_per_node=settings.gpus_per_node, facts=facts,
                              load_bandwidth=settings.model_load_bandwidth),
            settings, live_cap=live_cap_in_use(
                svc.spec, None, adaptation_runs=bool(settings.prometheus_url),
                default_image=settings.default_image)))
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True))
    return 0


def _cmd_facts(args: argparse.Namespace) -> int:
    from .modelsource import facts_command

    return facts_command(args.source, args.repo, args.revision or None,
                         args.termination_log or os.environ.get("LLMOP_TERMINATION_LOG"))


def _cmd_run(args: argparse.Namespace) -> int:
    from ..controller.run import run_operator

    return run_operator(namespaces=args.namespace, standalone=args.standalone,
                        peering=args.peering, liveness=args.liveness)


def _add_sandbox_parsers(sub: Any) -> None:
    """``demo`` and ``cluster`` come from the sandbox package (a development checkout's:
    ``bash tools/setup.sh``); the operator's image does not carry it, and there they say
    so instead of failing on an import."""
    try:
        from llm_operator_sandbox.cluster import add_parser as add_cluster_parser
        from llm_operator_sandbox.demo import add_parser as add_demo_parser
    except ImportError:
        for verb in ("demo", "cluster"):
            p = sub.add_parser(verb, help=f"(not in this install) the sandbox's {verb}")
            p.set_defaults(func=_sandbox_missing)
        return
    add_demo_parser(sub)
    add_cluster_parser(sub)


def _sandbox_missing(args: argparse.Namespace) -> int:
    sys.stderr.write(
        f"llm-operator {args.command}: this install has no sandbox (the local control "
        "plane, kubelet and demo are not part of the operator's image). Fix: from a "
        "checkout of the repository, run `bash tools/demo.sh`.\n")
    return 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="llm-operator", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="print the capacity and parallelism plan, with reasons")
    p.add_argument("files", nargs="+", help="LLMService YAML files ('-' for stdin)")
    p.add_argument("--no-curve", action="store_true", help="omit the predicted curve")
    p.add_argument("-o", "--output", choices=("table", "yaml", "json"), default="table",
                   help="table (default; one block per number below 110 columns), or the "
                   "plan as data: what status.plan holds, each explanation with its inputs "
                   "(no predicted curve)")
    p.add_argument("--model-config", metavar="DIR|hub", default=None,
                   help="read the model's facts from its config.json (and safetensors "
                   "index): a local folder, or 'hub' for spec.model.name at "
                   "spec.model.revision (HF_ENDPOINT, HF_TOKEN honoured); "
                   "spec.model.architecture still wins")
    p.add_argument("--aic", nargs="?", const="auto", default=None, metavar="PYTHON",
                   help="also print NVIDIA AIConfigurator's estimate beside the predicted "
                   "curve (an estimate too, not a measurement), run with PYTHON (default: "
                   "$LLMOP_AIC_PYTHON, this Python, or ./.venv-aic/bin/python); "
                   "AIConfigurator is not a dependency: pip install aiconfigurator==0.12.0 "
                   "into its own environment")
    p.add_argument("--aic-model", metavar="ID|DIR", default=None,
                   help="the model as AIConfigurator knows it (an id from its own list, e.g. "
                   "meta-llama/Meta-Llama-3.1-8B, or a folder holding config.json; default: "
                   "the --model-config folder, else spec.model.name)")
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("render", help="print the manifests the operator would apply")
    p.add_argument("files", nargs="+", help="LLMService YAML files ('-' for stdin)")
    p.add_argument("--model-config", metavar="DIR|hub", default=None,
                   help="plan from the model's config.json, as `plan --model-config`")
    p.set_defaults(func=_cmd_render)

    p = sub.add_parser("facts", help="read a model's config.json (Hub or folder) and print "
                       "it compactly, as the operator's facts Job does")
    # --repo, not --model: the sandbox's kubelet reads --model as a model to serve.
    p.add_argument("--repo", required=True, help="the repository id (spec.model.name)")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    p.add_argument("--source", default="hub", metavar="hub|DIR",
                   help="'hub' (HF_ENDPOINT, HF_TOKEN honoured) or a folder holding config.json")
    p.add_argument("--termination-log", default=None, metavar="PATH",
                   help="also write the result there (default: $LLMOP_TERMINATION_LOG)")
    p.set_defaults(func=_cmd_facts)

    p = sub.add_parser("run", help="run the operator against the current kubeconfig")
    p.add_argument("-n", "--namespace", action="append", default=[], help="watch (repeatable)")
    p.add_argument("--standalone", action="store_true", help="no peering with a standby")
    p.add_argument("--peering", metavar="NAME", default=None,
                   help="kopf peering object shared with standby replicas (one acts at a time)")
    p.add_argument("--liveness", metavar="URL", default=None,
                   help="kopf health endpoint, e.g. http://0.0.0.0:8081/healthz "
                        "(default: LLMOP_HEALTH_PORT)")
    p.set_defaults(func=_cmd_run)

    from .recommend import add_parser as add_recommend_parser

    add_recommend_parser(sub)

    _add_sandbox_parsers(sub)

    from .tune import add_parser as add_tune_parser

    add_tune_parser(sub)

    from .plot import add_parser as add_plot_parser

    add_plot_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llm-operator`` console script."""
    args = build_parser().parse_args(argv)
    err = Console(stderr=True, highlight=False)
    try:
        return int(args.func(args))
    except (SpecError, SpecErrors) as exc:
        errs = exc.errors if isinstance(exc, SpecErrors) else [exc]
        source = f"{exc.source}: " if isinstance(exc, SpecErrors) and exc.source else ""
        for e in errs:
            err.print(f"[bold red]error[/] {source}{e.field}: {e.problem}\n  fix: {e.fix}",
                      markup=True)
        return 2
    except InputError as exc:
        err.print(f"[bold red]error[/] {exc.source}: {exc.problem}\n  fix: {exc.fix}")
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line, never a traceback, unless asked for
        if os.environ.get("LLMOP_TRACEBACK"):
            raise
        err.print(f"[bold red]error[/] {exc.__class__.__name__}: {exc}\n"
                  "  (a bug in llm-operator: set LLMOP_TRACEBACK=1 to see where, and report it)")
        return 1


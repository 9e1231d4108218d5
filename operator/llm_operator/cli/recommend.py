"""``llm-operator recommend``: read Prometheus and print the decision the controller would take.

The command runs the same code as the operator's adaptation loop
(:mod:`llm_operator.adaptation.prometheus` to observe,
:func:`llm_operator.adaptation.policy.decide` to decide) for one service, and prints the
observations and the decision as tables (or JSON with ``-o json``). It changes nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from ..adaptation.policy import (
    DEFAULT_POLICY,
    AdaptationState,
    CapDecision,
    CapLimits,
    Observation,
    bounds_for,
    decide,
    policy_for_scrape,
    with_decode_context_parallel,
)
from ..api.errors import SpecError, SpecErrors
from ..api.models import LLMServiceSpec, ModelSpec, load_services
from ..planning import Plan
from ..planning.sizing import plan_for_slo
from ..settings import Settings


def add_parser(sub: Any) -> None:
    """Register the ``recommend`` subcommand on an argparse subparsers object."""
    p = sub.add_parser(
        "recommend",
        help="read Prometheus and print the max-num-seqs decision the controller would take",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("--prometheus", help="Prometheus base URL (default: $LLMOP_PROMETHEUS_URL)")
    p.add_argument("--service", required=True, metavar="NAMESPACE/NAME",
                   help="the LLMService to observe")
    p.add_argument("--current", type=int, metavar="N",
                   help="the max-num-seqs the server runs with now (vLLM does not export it; "
                        "default: spec.engine.maxNumSeqs when pinned)")
    p.add_argument("-f", "--file", help="the LLMService YAML (SLO, adaptation bounds, pins)")
    p.add_argument("--window", type=float, default=DEFAULT_POLICY.window_seconds,
                   help="observation window in seconds (default %(default)s)")
    p.add_argument("--scrape-interval", type=float, metavar="SECONDS",
                   help="how often Prometheus scrapes the vLLM pods; sizes the sample minimum "
                        "(default: $LLMOP_SCRAPE_INTERVAL_SECONDS, 30)")
    p.add_argument("--plan-max", type=int, metavar="N",
                   help="the planner's memory limit for the cap (default: from -f's plan)")
    p.add_argument("--tuned", "--knee", dest="tuned", type=int, metavar="N",
                   help="the tuning result (status.tuning.best.maxNumSeqs), if known: named "
                        "by a raise above it, never a bound (--knee: its former name)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_recommend)


def cmd_recommend(args: argparse.Namespace) -> int:
    """Observe one service, decide, print. Exit 0 on any decision (hold included), 2 on
    bad arguments."""
    from ..adaptation import prometheus

    settings = Settings()
    err = Console(stderr=True)
    url = args.prometheus or settings.prometheus_url
    if not url:
        err.print("[bold red]error[/] --prometheus: no Prometheus URL\n"
                  "  fix: pass --prometheus http://HOST:9090 or set LLMOP_PROMETHEUS_URL")
        return 2
    namespace, sep, name = args.service.partition("/")
    if not sep or not namespace or not name:
        err.print(f"[bold red]error[/] --service: {args.service!r} is not NAMESPACE/NAME\n"
                  "  fix: e.g. --service default/llama")
        return 2

    try:
        policy = policy_for_scrape(args.window,
                                   args.scrape_interval or settings.scrape_interval_seconds)
    except ValueError as exc:
        err.print(f"[bold red]error[/] --window/--scrape-interval: {exc}")
        return 2

    spec, plan, notes = _spec_and_plan(args, name, settings)
    plan_max = plan.max_num_seqs if plan is not None else None
    current = args.current
    if current is None and isinstance(spec.engine.max_num_seqs, int):
        current = spec.engine.max_num_seqs
    if current is None:
        err.print("[bold red]error[/] --current: the server's max-num-seqs is not known\n"
                  "  fix: pass --current N (vLLM does not export its cap), or -f with "
                  "spec.engine.maxNumSeqs")
        return 2
    if current < 1:
        err.print("[bold red]error[/] --current: must be at least 1\n  fix: pass --current N")
        return 2

    # The tables say when Prometheus is unavailable; no log line on top of them.
    logging.getLogger(prometheus.__name__).setLevel(logging.ERROR)
    now = time.time()
    client = prometheus.connect(
        url, ca_file=settings.prometheus_ca_file,
        bearer_token_file=settings.prometheus_bearer_token_file,
        insecure_skip_verify=settings.prometheus_insecure_skip_verify)
    observed = prometheus.fetch_observations(
        client, [(namespace, name)], now, args.window,
        service_label=settings.prometheus_service_label,
        namespace_label=settings.prometheus_namespace_label,
    )
    obs = with_decode_context_parallel(observed.get((namespace, name)),
                                       plan.decode_context_parallel_size if plan else 1)
    limits = CapLimits(plan_max_num_seqs=args.plan_max or plan_max, tuned=args.tuned)
    decision = decide(obs, AdaptationState(current=current), spec, now, namespace=namespace,
                      name=name, limits=limits, settings=policy)

    if args.output == "json":
        sys.stdout.write(json.dumps({
            "observation": None if obs is None else obs.model_dump(by_alias=True),
            "decision": decision.model_dump(by_alias=True, mode="json"),
            "notes": notes,
        }, indent=2) + "\n")
        return 0
    console = Console()
    for note in notes:
        console.print(f"[yellow]note[/] {note}")
    console.print(observation_table(obs, namespace, name, url))
    console.print(decision_table(decision, spec, limits))
    return 0


def _spec_and_plan(args: argparse.Namespace, name: str, settings: Settings
                   ) -> tuple[LLMServiceSpec, Plan | None, list[str]]:
    notes: list[str] = []
    if not args.file:
        return LLMServiceSpec(model=ModelSpec(name=name)), None, [
            "no -f given: default SLO and adaptation bounds"]
    services = [svc for _p, svc in load_services([args.file])]
    wanted = [s for s in services if s.metadata.name == name] or services
    if not wanted:
        raise SpecErrors([SpecError("kind", f"no LLMService in {args.file}",
                                    "pass the file that holds the service")])
    spec = wanted[0].spec
    plan: Plan | None = None
    try:
        plan = plan_for_slo(spec, gpus_per_node=settings.gpus_per_node)
    except (SpecError, SpecErrors) as exc:
        notes.append(f"no plan ({exc}): no memory limit on the cap")
    return spec, plan, notes


def _fmt(v: float | int | None, unit: str = "", scale: float = 1.0, nd: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v * scale:.{nd}f}{unit}" if isinstance(v, float) else f"{v}{unit}"


def observation_table(obs: Observation | None, namespace: str, name: str, url: str) -> Table:
    """The observations of one service as a table."""
    table = Table(title=f"Observations of {namespace}/{name} from {url}")
    table.add_column("signal")
    table.add_column("value", justify="right")
    if obs is None:
        table.add_row("series", "none found")
        return table
    if obs.error:
        table.add_row("Prometheus", f"unavailable: {obs.error}")
        return table
    age = None if obs.last_sample_at is None else obs.evaluated_at - obs.last_sample_at
    rows: list[tuple[str, str]] = [
        ("window", f"{obs.window_seconds:.0f} s"),
        ("samples", _fmt(obs.samples)),
        ("newest sample age", _fmt(age, " s", nd=1)),
        ("replicas", _fmt(obs.replicas)),
        ("running (mean / max)", f"{_fmt(obs.running_mean)} / {_fmt(obs.running_max)}"),
        ("waiting (mean / max)", f"{_fmt(obs.waiting_mean)} / {_fmt(obs.waiting_max)}"),
        ("waiting for capacity (mean)", _fmt(obs.waiting_capacity_mean)),
        ("KV cache usage (mean / max)",
         f"{_fmt(obs.kv_usage_mean, '%', 100, 1)} / {_fmt(obs.kv_usage_max, '%', 100, 1)}"),
        ("KV cache size", _fmt(obs.kv_capacity_tokens, " tokens")),
        ("preemptions in window", _fmt(obs.preemptions, nd=1)),
        ("finished requests", _fmt(obs.request_rate, " /s")),
        ("TTFT p95", _fmt(obs.ttft_p95_seconds, " ms", 1000, 1)),
        ("inter-token latency p95", _fmt(obs.itl_p95_seconds, " ms", 1000, 1)),
        ("mean request (prompt + output)",
         f"{_fmt(obs.mean_prompt_tokens, nd=0)} + {_fmt(obs.mean_generation_tokens, nd=0)}"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    return table


def decision_table(decision: CapDecision, spec: LLMServiceSpec, limits: CapLimits) -> Table:
    """The decision as a table: action, cap before and after, bounds, reason."""
    bounds = bounds_for(spec, limits)
    colour = {"raise": "green", "lower": "yellow", "hold": "cyan"}[decision.action.value]
    table = Table(title="CapDecision", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("action", f"[bold {colour}]{decision.action.value}[/]")
    table.add_row("max-num-seqs", f"{decision.current} → {decision.value}")
    table.add_row("bounds", f"{bounds.lower} .. {bounds.upper} (lower: {bounds.lower_source}; "
                            f"upper: {bounds.upper_source})")
    table.add_row("tuned", "not known" if limits.tuned is None else
                  f"{limits.tuned} (the tuning result: where the cap starts, not a bound)")
    table.add_row("SLO", f"TTFT p95 {spec.workload.slo.ttft_p95_ms:g} ms, "
                         f"ITL p95 {spec.workload.slo.itl_p95_ms:g} ms")
    table.add_row("reason", decision.reason)
    return table

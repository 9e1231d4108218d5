#!/usr/bin/env python3
"""The llm-operator Grafana dashboard, as code (Grafana's ``grafana-foundation-sdk``).

What the dashboard shows is declared once, as data: :func:`service_panels` and
:func:`operator_panels` list every panel with its PromQL (Grafana variables left in:
``$namespace``, ``$service``, ``$__rate_interval``, ``$__range``), and :func:`build` turns
them into a dashboard with the SDK's builders. The chart ships the JSON
(``charts/llm-operator/files/dashboard.json``, loaded by kube-prometheus-stack's Grafana
sidecar through ``templates/dashboard-configmap.yaml``); the chart tests fail when the
committed JSON differs from what this module generates, so nobody edits the JSON by hand.

Series names come from the code that exports or queries them: vLLM's from
:mod:`llm_operator.adaptation.prometheus`, the live admission cap's from
:mod:`llm_operator.inpod.engine.cap`; the operator's own (``llmop_*``, served by
:mod:`llm_operator.controller.metrics`) are checked against its registry by a unit test.
The labels are the rendered PodMonitor's defaults (``namespace``, ``llmservice``); the
operator's per-service series carry the same two labels (the chart's ServiceMonitor keeps
them with ``honorLabels``).

:func:`panel_queries` reads every query back out of a dashboard JSON and
:func:`interpolate` fills in the variables the way Grafana does for one service, so the
slow test (``tests/prometheus/test_dashboard_queries.py``) and the picture
(``tools/render_dashboard_png.py``) run the shipped queries against a real Prometheus.

Usage (from the repository root)::

    python -m tools.dashboard          # write charts/llm-operator/files/dashboard.json
    python -m tools.dashboard --check  # exit 1 when the committed JSON differs (for CI)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.builders import stat as stat_b
from grafana_foundation_sdk.builders import statetimeline as state_b
from grafana_foundation_sdk.builders import table as table_b
from grafana_foundation_sdk.builders import timeseries as ts_b
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m
from grafana_foundation_sdk.models import prometheus as prom_m

from llm_operator.adaptation import prometheus as vllm
from llm_operator.inpod.engine.cap import METRIC_CAP, METRIC_CAPACITY

REPO_ROOT = Path(__file__).resolve().parent.parent
CHART_JSON = REPO_ROOT / "charts" / "llm-operator" / "files" / "dashboard.json"

UID = "llm-operator"
TITLE = "LLM services (llm-operator)"
SERVICE_LABEL = "llmservice"
NAMESPACE_LABEL = "namespace"

# vLLM's token counters: not read by the adaptation loop, so not in adaptation.prometheus.
VLLM_GENERATION_TOKENS_TOTAL = "vllm:generation_tokens_total"
VLLM_PROMPT_TOKENS_TOTAL = "vllm:prompt_tokens_total"

# The operator's own series (controller/metrics.py; the metrics contract of issue 27).
OP_DECISIONS = "llmop_adaptation_decisions_total"
OP_MAX_NUM_SEQS = "llmop_adaptation_max_num_seqs"
OP_KV_FIT = "llmop_adaptation_kv_fit"
OP_BOUND = "llmop_adaptation_bound"
OP_TUNED = "llmop_adaptation_tuned_max_num_seqs"
OP_SLO = "llmop_service_slo_seconds"
OP_CONDITION = "llmop_service_condition"
OP_TUNING_STARTED = "llmop_tuning_jobs_started_total"
OP_TUNING_SUCCEEDED = "llmop_tuning_jobs_succeeded_total"
OP_TUNING_FAILED = "llmop_tuning_jobs_failed_total"
OP_RECONCILE_SECONDS = "llmop_reconcile_duration_seconds"
OP_RECONCILE_ERRORS = "llmop_reconcile_errors_total"
OP_RECONCILE_IN_FLIGHT = "llmop_reconcile_in_flight"
OP_QUERY_ERRORS = "llmop_prometheus_query_errors_total"
OP_QUERY_SECONDS = "llmop_prometheus_query_duration_seconds"

# One service's series (the row repeats per selected service).
SEL = f'{NAMESPACE_LABEL}="$namespace", {SERVICE_LABEL}=~"$service"'
BY = SERVICE_LABEL
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel: the expression and its legend."""

    expr: str
    legend: str
    table: bool = False  # an instant query in table format (table panels)


@dataclass(frozen=True)
class PanelSpec:
    """One panel: what it is called, how it is drawn and what it asks Prometheus."""

    title: str
    description: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # timeseries | table | stat | state
    unit: str = "short"
    min: float | None = 0
    max: float | None = None
    width: int = 8
    height: int = 8
    series_units: Mapping[str, str] = field(default_factory=dict)  # legend -> unit


def _quantiles(metric: str, slo_objective: str) -> tuple[Query, ...]:
    parts = tuple(
        Query(f"histogram_quantile({q}, sum by (le, {BY}) "
              f"(rate({metric}_bucket{{{SEL}}}[{RATE}])))", f"p{round(q * 100)}")
        for q in (0.5, 0.95, 0.99))
    slo = Query(f'max by ({BY}) ({OP_SLO}{{{SEL}, objective="{slo_objective}"}})',
                "SLO (p95)")
    return (*parts, slo)


def service_panels() -> list[PanelSpec]:
    """The panels of one LLMService (the row repeated per ``$service``)."""
    return [
        PanelSpec(
            "Requests running and waiting vs the cap in force",
            "Per replica (the busiest one): requests vLLM runs and queues, the cap the "
            "engines report in force (live admission cap) and the cap the operator decided.",
            (Query(f"max by ({BY}) ({vllm.VLLM_RUNNING}{{{SEL}}})", "running"),
             Query(f"max by ({BY}) ({vllm.VLLM_WAITING}{{{SEL}}})", "waiting"),
             Query(f"min by ({BY}) ({METRIC_CAP}{{{SEL}}})", "cap in force (engine)"),
             Query(f"max by ({BY}) ({OP_MAX_NUM_SEQS}{{{SEL}}})", "cap decided (operator)"))),
        PanelSpec(
            "Cap, its bounds, the tuned value, the KV fit and vLLM's limit",
            "The decided cap between the bounds adaptation may move in (min: "
            "spec.adaptation.minMaxNumSeqs; max: the planner's memory limit or "
            "spec.adaptation.maxMaxNumSeqs), the tuning result it started from (not a bound: "
            "live evidence may raise above it), the sequences the KV cache holds at the "
            "observed request size (the policy's KV fit) and vLLM's --max-num-seqs (the "
            "runner's request slots).",
            (Query(f"max by ({BY}) ({OP_MAX_NUM_SEQS}{{{SEL}}})", "cap decided"),
             Query(f"max by ({BY}, bound) ({OP_BOUND}{{{SEL}}})", "bound {{bound}}"),
             Query(f"max by ({BY}) ({OP_TUNED}{{{SEL}}})", "tuned (start, not a bound)"),
             Query(f"max by ({BY}) ({OP_KV_FIT}{{{SEL}}})", "KV fit"),
             Query(f"max by ({BY}) ({METRIC_CAPACITY}{{{SEL}}})",
                   "vLLM --max-num-seqs"))),
        PanelSpec(
            "KV-cache usage",
            "Share of the KV cache in use: the busiest replica and the mean over replicas. "
            "Near 1 with preemptions means the cap admits more than the cache holds.",
            (Query(f"max by ({BY}) ({vllm.VLLM_KV_USAGE}{{{SEL}}})", "busiest replica"),
             Query(f"avg by ({BY}) ({vllm.VLLM_KV_USAGE}{{{SEL}}})", "mean")),
            unit="percentunit", max=1),
        PanelSpec(
            "Preemptions",
            "Requests vLLM preempted (KV cache full), per second, all replicas.",
            (Query(f"sum by ({BY}) (rate({vllm.VLLM_PREEMPTIONS}{{{SEL}}}[{RATE}]))",
                   "preemptions/s"),),
            unit="reqps"),
        PanelSpec(
            "Time to first token vs SLO",
            "TTFT quantiles over all replicas against the service's spec.adaptation.slo "
            "(the SLO line is absent when the spec sets none).",
            _quantiles(vllm.VLLM_TTFT, "ttft_p95"), unit="s"),
        PanelSpec(
            "Inter-token latency vs SLO",
            "Time between output tokens, quantiles over all replicas, against the SLO.",
            _quantiles(vllm.VLLM_ITL, "itl_p95"), unit="s"),
        PanelSpec(
            "Tokens per second",
            "Generated and prompt tokens per second, all replicas.",
            (Query(f"sum by ({BY}) (rate({VLLM_GENERATION_TOKENS_TOTAL}{{{SEL}}}[{RATE}]))",
                   "generated"),
             Query(f"sum by ({BY}) (rate({VLLM_PROMPT_TOKENS_TOTAL}{{{SEL}}}[{RATE}]))",
                   "prompt"),
             Query(f"sum by ({BY}) (rate({vllm.VLLM_REQUEST_SUCCESS}{{{SEL}}}[{RATE}]))",
                   "requests finished/s")),
            series_units={"requests finished/s": "reqps"}),
        PanelSpec(
            "Prefix-cache hit rate",
            "Share of the prompt tokens looked up in vLLM's prefix cache that it held, all "
            "replicas. Near 0 while spec.workload.sharedPrefixTokens states a shared prefix "
            "(condition PrefixCacheHits False): the prompts do not start with the same "
            "bytes; put the shared system prompt first and keep it byte-identical.",
            (Query(f"sum by ({BY}) (rate({vllm.VLLM_PREFIX_HITS}{{{SEL}}}[{RATE}])) / "
                   f"(sum by ({BY}) (rate({vllm.VLLM_PREFIX_QUERIES}{{{SEL}}}[{RATE}])) > 0)",
                   "hit rate"),),
            unit="percentunit", max=1),
        PanelSpec(
            "Adaptation decisions in range",
            "Decisions of the online controller in the time range, by direction (raise, "
            "lower, hold) and cause.",
            (Query(f"sum by (direction, cause) "
                   f"(increase({OP_DECISIONS}{{{SEL}}}[$__range]))", "", table=True),),
            kind="table"),
        PanelSpec(
            "Tuning Jobs (since the operator started)",
            "Tuning Jobs started, accepted and failed for this service.",
            (Query(f"sum by ({BY}) ({OP_TUNING_STARTED}{{{SEL}}})", "started"),
             Query(f"sum by ({BY}) ({OP_TUNING_SUCCEEDED}{{{SEL}}})", "succeeded"),
             Query(f"sum by ({BY}) ({OP_TUNING_FAILED}{{{SEL}}})", "failed")),
            kind="stat"),
        PanelSpec(
            "Conditions",
            "The LLMService's status conditions over time (1 true, 0 false or unknown).",
            (Query(f'max by ({BY}, type) ({OP_CONDITION}{{{SEL}, status="true"}})', "{{type}}"),),
            kind="state", width=16, height=8, max=1),
    ]


def operator_panels() -> list[PanelSpec]:
    """The operator's own health (not per service)."""
    return [
        PanelSpec(
            "Reconcile duration p95",
            "95th percentile of one reconciliation (parse, plan, render, apply) by trigger.",
            (Query(f"histogram_quantile(0.95, sum by (le, trigger) "
                   f"(rate({OP_RECONCILE_SECONDS}_bucket[{RATE}])))", "{{trigger}}"),),
            unit="s", width=6),
        PanelSpec(
            "Reconcile errors",
            "Reconciliations that raised, per second, by trigger.",
            (Query(f"sum by (trigger) (rate({OP_RECONCILE_ERRORS}[{RATE}]))", "{{trigger}}"),),
            unit="ops", width=6),
        PanelSpec(
            "Reconciliations in flight",
            "Reconciliations running now (the operator's work in progress).",
            (Query(f"sum({OP_RECONCILE_IN_FLIGHT})", "in flight"),),
            width=6),
        PanelSpec(
            "Prometheus queries of the adaptation loop",
            "Failed observation queries per second and the query's p95 duration.",
            (Query(f"sum(rate({OP_QUERY_ERRORS}[{RATE}]))", "errors/s"),
             Query(f"histogram_quantile(0.95, sum by (le) "
                   f"(rate({OP_QUERY_SECONDS}_bucket[{RATE}])))", "p95 duration")),
            unit="ops", width=6, series_units={"p95 duration": "s"}),
    ]


# ---------------------------------------------------------------- building (the SDK)

def _datasource() -> dash_m.DataSourceRef:
    return dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")


def _target(q: Query, ref: str) -> prom_b.Dataquery:
    target = (prom_b.Dataquery().expr(q.expr).ref_id(ref).datasource(_datasource()))
    if q.table:
        return target.instant().format(prom_m.PromQueryFormat.TABLE)
    return target.range().legend_format(q.legend or "__auto")


def _unit_overrides(builder: Any, spec: PanelSpec) -> Any:
    for legend, unit in spec.series_units.items():
        builder = builder.override_by_name(
            legend, [dash_m.DynamicConfigValue(id_val="unit", value=unit)])
    return builder


def _panel(spec: PanelSpec, panel_id: int) -> Any:
    """The SDK builder of one panel."""
    builder: Any
    if spec.kind == "timeseries":
        builder = (ts_b.Panel().line_width(1).fill_opacity(10)
                   .show_points(common_m.VisibilityMode.NEVER)
                   .legend(common_b.VizLegendOptions().show_legend(True)
                           .display_mode(common_m.LegendDisplayMode.LIST)
                           .placement(common_m.LegendPlacement.BOTTOM)))
    elif spec.kind == "table":
        builder = (table_b.Panel().with_transformation(dash_m.DataTransformerConfig(
            id_val="organize", options={"excludeByName": {"Time": True}})))
    elif spec.kind == "stat":
        builder = (stat_b.Panel().graph_mode(common_m.BigValueGraphMode.NONE)
                   .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"])))
    elif spec.kind == "state":
        builder = (state_b.Panel().show_value(common_m.VisibilityMode.NEVER)
                   .mappings([dash_m.ValueMap(options={
                       "0": dash_m.ValueMappingResult(text="false", color="red"),
                       "1": dash_m.ValueMappingResult(text="true", color="green")})]))
    else:
        raise ValueError(f"panel {spec.title!r}: unknown kind {spec.kind!r} "
                         "(timeseries, table, stat or state)")
    builder = (builder.id(panel_id).title(spec.title).description(spec.description)
               .datasource(_datasource()).unit(spec.unit)
               .span(spec.width).height(spec.height))
    if spec.min is not None:
        builder = builder.min(spec.min)
    if spec.max is not None:
        builder = builder.max(spec.max)
    for i, q in enumerate(spec.queries):
        builder = builder.with_target(_target(q, chr(ord("A") + i)))
    return _unit_overrides(builder, spec)


def _variables() -> list[Any]:
    running = vllm.VLLM_RUNNING
    return [
        dash_b.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        (dash_b.QueryVariable("namespace").label("Namespace").datasource(_datasource())
         .query(f'label_values({running}{{{SERVICE_LABEL}!=""}}, {NAMESPACE_LABEL})')
         .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
         .sort(dash_m.VariableSort.ALPHABETICAL_ASC)),
        (dash_b.QueryVariable("service").label("LLMService").datasource(_datasource())
         .query(f'label_values({running}{{{NAMESPACE_LABEL}="$namespace"}}, {SERVICE_LABEL})')
         .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
         .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
         .multi(True).include_all(True)),
    ]


def build() -> dash_m.Dashboard:
    """The dashboard (the SDK's model)."""
    board = (dash_b.Dashboard(TITLE).uid(UID)
             .description("Per LLMService: load against the cap in force, KV cache, "
                          "latency against the SLO, throughput and the operator's "
                          "decisions; then the operator's own health.")
             .tags(["llm-operator", "vllm"]).editable()
             .tooltip(dash_m.DashboardCursorSync.CROSSHAIR)
             .time("now-1h", "now").refresh("30s").timezone("browser")
             .variables(_variables())
             .with_row(dash_b.Row("LLMService $namespace/$service").id(1).repeat("service")))
    ids = iter(range(2, 1000))
    for spec in service_panels():
        board = board.with_panel(_panel(spec, next(ids)))
    board = board.with_row(dash_b.Row("The operator").id(next(ids)))
    for spec in operator_panels():
        board = board.with_panel(_panel(spec, next(ids)))
    return board.build()


def render_json() -> str:
    """The dashboard as the chart ships it (stable key order, trailing newline)."""
    doc = json.loads(json.dumps(build(), cls=JSONEncoder))
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# ---------------------------------------------------------------- reading it back

@dataclass(frozen=True)
class PanelQuery:
    """One query found in a dashboard JSON: its panel, ref id, PromQL and legend."""

    panel: str
    ref: str
    expr: str
    legend: str
    instant: bool


def panel_queries(doc: Mapping[str, Any]) -> list[PanelQuery]:
    """Every panel target of a dashboard JSON (rows' nested panels included), in order."""
    out: list[PanelQuery] = []

    def walk(panels: Sequence[Mapping[str, Any]]) -> None:
        for p in panels:
            walk(p.get("panels") or [])
            for t in p.get("targets") or []:
                out.append(PanelQuery(p.get("title", ""), t.get("refId", ""), t["expr"],
                                      t.get("legendFormat", ""), bool(t.get("instant"))))

    walk(doc.get("panels") or [])
    return out


_LABEL_VALUES = re.compile(r"^label_values\((?P<sel>.+),\s*(?P<label>\w+)\)$")


def variable_queries(doc: Mapping[str, Any]) -> dict[str, str]:
    """The query variables as PromQL: ``label_values(sel, l)`` -> ``group by (l) (sel)``."""
    out: dict[str, str] = {}
    for var in doc.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"] if isinstance(var["query"], str) else var["query"]["query"]
        m = _LABEL_VALUES.match(query.strip())
        if m is None:
            raise ValueError(f"variable {var['name']!r}: not label_values(selector, label): "
                             f"{query!r}")
        out[var["name"]] = f"group by ({m['label']}) ({m['sel']})"
    return out


def interpolate(expr: str, variables: Mapping[str, str]) -> str:
    """``expr`` with ``$name`` and ``${name}`` replaced as Grafana does for single values;
    a variable that is not given is an error naming it."""
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise KeyError(f"no value for the dashboard variable ${name} in {expr!r}")
        return variables[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, expr)


def grafana_variables(namespace: str, service: str, *, rate_interval_s: int,
                      range_s: int) -> dict[str, str]:
    """The values Grafana substitutes for one service (``$__rate_interval`` is
    max(4 x scrape interval, step + scrape interval); pass what that is for the run)."""
    return {"namespace": namespace, "service": service,
            "__rate_interval": f"{rate_interval_s}s", "__range": f"{range_s}s"}


# ---------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, compare) the chart's dashboard JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on drift")
    args = parser.parse_args(argv)
    text = render_json()
    rel = CHART_JSON.relative_to(REPO_ROOT)
    if args.check:
        if CHART_JSON.exists() and CHART_JSON.read_text() == text:
            return 0
        sys.stderr.write(f"{rel} differs from tools/dashboard.py; fix: python -m tools.dashboard\n")
        return 1
    changed = not CHART_JSON.exists() or CHART_JSON.read_text() != text
    CHART_JSON.write_text(text)
    sys.stdout.write(f"{'updated' if changed else 'already up to date'}: {rel}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Plot the dashboard's panel queries from a Prometheus into one PNG (matplotlib).

Not a Grafana screenshot: every panel of ``charts/llm-operator/files/dashboard.json`` is
read back (:func:`tools.dashboard.panel_queries`), its variables filled in for one
service as Grafana would (:func:`tools.dashboard.interpolate`), and its queries run
against Prometheus (range queries; table and stat panels as an instant query at the end),
then drawn in a grid with the panels' titles and legends. The README's picture
(``docs/images/dashboard.png``) is made this way from a real run; the slow test
``tests/prometheus/test_dashboard_queries.py`` writes it when ``LLMOP_DASHBOARD_PNG``
names a file.

Usage (from the repository root)::

    python -m tools.render_dashboard_png --prometheus http://127.0.0.1:9090 \\
        --namespace team-a --service chat --minutes 15 --out docs/images/dashboard.png
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import dashboard


@dataclass
class Series:
    """One line of a panel: its legend and points (Unix seconds, value)."""

    legend: str
    points: list[tuple[float, float]]


@dataclass
class PanelData:
    """What one panel shows: its title, kind, unit, lines (or table rows)."""

    title: str
    kind: str
    unit: str
    series: list[Series] = field(default_factory=list)
    rows: list[dict[str, str]] = field(default_factory=list)  # table panels


def _legend(template: str, labels: Mapping[str, str]) -> str:
    out = template or ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    for key, value in labels.items():
        out = out.replace("{{" + key + "}}", value)
    return out


def _finite(values: Sequence[Any]) -> list[tuple[float, float]]:
    points = [(float(t), float(v)) for t, v in values]
    return [(t, v) for t, v in points if math.isfinite(v)]


def fetch(client: Any, doc: Mapping[str, Any], variables: Mapping[str, str],
          start: float, end: float, step_s: float) -> list[PanelData]:
    """Run every panel's queries (``client``: a ``prometheus_api_client.PrometheusConnect``)."""
    panels: dict[str, PanelData] = {}
    kinds = {p["title"]: (p["type"], p.get("fieldConfig", {}).get("defaults", {})
                          .get("unit", "")) for p in doc["panels"] if p["type"] != "row"}
    for q in dashboard.panel_queries(doc):
        kind, unit = kinds[q.panel]
        data = panels.setdefault(q.panel, PanelData(q.panel, kind, unit))
        expr = dashboard.interpolate(q.expr, variables)
        if q.instant or kind == "stat":
            result = client.custom_query(expr, params={"time": f"{end:.3f}"})
            for s in result:
                labels = {k: v for k, v in s["metric"].items() if k != "__name__"}
                if kind == "stat":
                    data.series.append(Series(_legend(q.legend, labels),
                                              _finite([s["value"]])))
                else:
                    data.rows.append({**labels, "Value": f"{float(s['value'][1]):g}"})
            continue
        result = client.custom_query_range(
            expr, start_time=_dt(start), end_time=_dt(end), step=f"{step_s:g}s")
        for s in result:
            labels = {k: v for k, v in s["metric"].items() if k != "__name__"}
            data.series.append(Series(_legend(q.legend, labels), _finite(s["values"])))
    return list(panels.values())


def _dt(t: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, tz=UTC)


def draw(panels: Sequence[PanelData], out: Path, title: str, start: float,
         columns: int = 4) -> None:
    """Draw ``panels`` in a grid, titled, into ``out`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.0 * columns, 3.3 * rows),
                             squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        ax.set_title(panel.title, fontsize=10, loc="left")
        if panel.kind == "table":
            ax.axis("off")
            if panel.rows:
                cols = sorted({k for r in panel.rows for k in r} - {"Value"}) + ["Value"]
                cells = [[r.get(c, "") for c in cols] for r in panel.rows]
                table = ax.table(cellText=cells, colLabels=cols, loc="upper left",
                                 cellLoc="left")
                table.auto_set_font_size(False)
                table.set_fontsize(8)
            else:
                ax.text(0.5, 0.5, "no data", ha="center", va="center")
            continue
        if panel.kind == "stat":
            ax.axis("off")
            for i, s in enumerate(panel.series):
                value = s.points[-1][1] if s.points else float("nan")
                ax.text(0.05 + i * 0.32, 0.45, f"{value:g}", fontsize=22, weight="bold")
                ax.text(0.05 + i * 0.32, 0.25, s.legend, fontsize=9)
            continue
        for s in panel.series:
            if s.points:
                ax.plot([(t - start) / 60 for t, _ in s.points], [v for _, v in s.points],
                        label=s.legend, linewidth=1.2,
                        drawstyle="steps-post" if panel.kind == "state-timeline" else "default")
        if not any(s.points for s in panel.series):
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("minutes", fontsize=8)
        if panel.unit and panel.unit not in ("short", "none"):
            ax.set_ylabel(panel.unit, fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if any(s.points for s in panel.series):
            ax.legend(fontsize=7, loc="best", framealpha=0.6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)


def render(prometheus_url: str, namespace: str, service: str, start: float, end: float,
           out: Path, *, step_s: float = 5.0, scrape_interval_s: float = 1.0,
           doc: Mapping[str, Any] | None = None) -> list[PanelData]:
    """Fetch and draw the dashboard for one service between ``start`` and ``end``."""
    from prometheus_api_client import PrometheusConnect

    doc = doc if doc is not None else json.loads(dashboard.CHART_JSON.read_text())
    # Grafana: $__rate_interval = max(step + scrape interval, 4 x scrape interval).
    rate = math.ceil(max(step_s + scrape_interval_s, 4 * scrape_interval_s))
    variables = dashboard.grafana_variables(namespace, service, rate_interval_s=rate,
                                            range_s=math.ceil(end - start))
    client = PrometheusConnect(url=prometheus_url, disable_ssl=True)
    panels = fetch(client, doc, variables, start, end, step_s)
    draw(panels, out, f"{doc['title']}: {namespace}/{service} (panel queries plotted from "
                      "Prometheus, not a Grafana screenshot)", start)
    return panels


def main(argv: list[str] | None = None) -> int:
    """Command line entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--service", required=True, help="the LLMService's name")
    parser.add_argument("--minutes", type=float, default=15.0, help="time range up to now")
    parser.add_argument("--step", type=float, default=5.0, help="seconds between points")
    parser.add_argument("--scrape-interval", type=float, default=15.0,
                        help="Prometheus' scrape interval in seconds (for $__rate_interval)")
    parser.add_argument("--out", type=Path, default=Path("docs/images/dashboard.png"))
    args = parser.parse_args(argv)
    end = time.time()
    panels = render(args.prometheus, args.namespace, args.service, end - args.minutes * 60,
                    end, args.out, step_s=args.step, scrape_interval_s=args.scrape_interval)
    empty = [p.title for p in panels if not p.series and not p.rows]
    sys.stdout.write(f"wrote {args.out}: {len(panels)} panels"
                     + (f"; no data: {', '.join(empty)}" if empty else "") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

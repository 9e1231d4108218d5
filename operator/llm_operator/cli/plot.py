"""``llm-operator plot``: PNGs of a tuning run and of a service's adaptation timeline.

``plot tuning FILE`` (or ``--service NAMESPACE/NAME``, read with kubectl) draws the trials
of a tuning run; ``plot timeline --service NAMESPACE/NAME`` reads the service's series
back from Prometheus with the adaptation loop's queries and draws them over time. The
drawing is :mod:`llm_operator.cli.plots` (pure); this module reads files, kubectl and
Prometheus, and writes the PNG (matplotlib's Agg backend). matplotlib is the optional
extra ``plots``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import yaml
from rich.console import Console
from rich.markup import escape

from ..settings import Settings
from .plots import (
    INSTALL_HINT,
    PlotInputError,
    PlotsUnavailable,
    Timeline,
    TuningTrials,
    require_matplotlib,
    timeline_figure,
    timeline_from_matrices,
    trials_from_document,
    tuning_figure,
)


def add_parser(sub: Any) -> None:
    """Register ``plot tuning`` and ``plot timeline`` on the CLI's subparsers."""
    p = sub.add_parser("plot", help="write a PNG of a tuning run's trials or of a service's "
                       f"adaptation timeline (needs {INSTALL_HINT})",
                       description=__doc__.splitlines()[0] if __doc__ else None)
    verbs = p.add_subparsers(dest="what", required=True)

    t = verbs.add_parser("tuning", help="goodput, throughput and p95 latencies against "
                         "max-num-seqs, the SLO, the choice and vLLM's defaults")
    t.add_argument("file", nargs="?", help="the tuner's result: the compact JSON (the Job's "
                   "last log line), `llm-operator tune --output`'s file, or an LLMService "
                   "(YAML/JSON) with status.tuning; '-' for stdin")
    t.add_argument("--service", metavar="NAMESPACE/NAME",
                   help="read status.tuning of this LLMService with kubectl instead")
    t.add_argument("--kubectl", default=None, help="kubectl binary (default: on PATH)")
    t.add_argument("-o", "--output", type=Path, help="PNG to write (default: "
                   "tuning-trials-NAME.png)")
    t.set_defaults(func=cmd_plot_tuning)

    tl = verbs.add_parser("timeline", help="cap in force, running, waiting, KV usage, "
                          "preemptions and decisions over time, from Prometheus")
    tl.add_argument("--service", required=True, metavar="NAMESPACE/NAME")
    tl.add_argument("--prometheus", help="Prometheus base URL (default: $LLMOP_PROMETHEUS_URL)")
    tl.add_argument("--since", default="30m", metavar="DURATION",
                    help="how far back from --end (e.g. 90s, 30m, 2h; default %(default)s)")
    tl.add_argument("--end", type=float, metavar="UNIX_SECONDS", help="end (default: now)")
    tl.add_argument("--step", type=float, metavar="SECONDS",
                    help="resolution (default: the range / 240, at least the scrape interval)")
    tl.add_argument("--window", type=float, metavar="SECONDS",
                    help="averaging window of each point (default: twice the scrape "
                    "interval, at least the step)")
    tl.add_argument("--scrape-interval", type=float, metavar="SECONDS",
                    help="default: $LLMOP_SCRAPE_INTERVAL_SECONDS")
    tl.add_argument("-o", "--output", type=Path, help="PNG to write (default: "
                    "adaptation-timeline-NAMESPACE-NAME.png)")
    tl.set_defaults(func=cmd_plot_timeline)


# ------------------------------------------------------------------------------ writing
def save_png(fig: Any, path: Path) -> Path:
    """Write ``fig`` as a PNG with the Agg backend; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")
    return path


def write_tuning_png(trials: TuningTrials, path: Path) -> Path:
    """Draw ``trials`` and write the PNG."""
    return save_png(tuning_figure(trials), path)


def write_timeline_png(timeline: Timeline, path: Path) -> Path:
    """Draw ``timeline`` and write the PNG."""
    return save_png(timeline_figure(timeline), path)


# ------------------------------------------------------------------------------- inputs
def _service(text: str) -> tuple[str, str]:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name:
        raise PlotInputError("--service", f"{text!r} is not NAMESPACE/NAME",
                             "e.g. --service default/llama")
    return namespace, name


def read_document(path: str) -> Any:
    """A JSON or YAML file ('-': stdin); the compact result may be a log's last line."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise PlotInputError(path, f"cannot read it ({exc.strerror})",
                             "pass an existing file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if lines and lines[-1].lstrip().startswith("{"):
        try:
            return json.loads(lines[-1])  # a tuner log: the result is its last line
        except json.JSONDecodeError:
            pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PlotInputError(path, f"neither JSON nor YAML ({str(exc).splitlines()[0]})",
                             "pass the tuner's JSON or an LLMService manifest") from None


def kubectl_get_service(namespace: str, name: str, kubectl: str | None = None) -> Any:
    """``kubectl get llmservices NAME -n NAMESPACE -o json`` (the current kubeconfig)."""
    binary = kubectl or shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    try:
        proc = subprocess.run([binary, "get", "llmservices.llmops.dev", name, "-n", namespace,
                               "-o", "json"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise PlotInputError("--kubectl", f"cannot run {binary} ({exc.strerror})",
                             "install kubectl or pass --kubectl PATH") from None
    if proc.returncode != 0:
        raise PlotInputError(f"{namespace}/{name}", f"kubectl: {proc.stderr.strip()[:300]}",
                             "check the name, the namespace and KUBECONFIG")
    return json.loads(proc.stdout)


def parse_duration(text: str) -> float:
    """Seconds of ``90``, ``90s``, ``30m``, ``2h`` or ``1d``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise PlotInputError("--since", f"{text!r} is not a duration",
                             "e.g. --since 90s, 30m or 2h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def read_timeline(url: str, namespace: str, name: str, start: float, end: float,
                  step: float, window: float, settings: Settings | None = None) -> Timeline:
    """The service's timeline read back from Prometheus at ``url`` (labels and TLS from
    ``settings``, default: the ``LLMOP_*`` environment)."""
    from ..adaptation import prometheus

    settings = settings or Settings()

    client = prometheus.connect(
        url, timeout_seconds=30, ca_file=settings.prometheus_ca_file,
        bearer_token_file=settings.prometheus_bearer_token_file,
        insecure_skip_verify=settings.prometheus_insecure_skip_verify)
    try:
        matrices = prometheus.fetch_timeline(
            cast(prometheus.RangeQueryClient, client), namespace, name, start, end, step,
            window,
            service_label=settings.prometheus_service_label,
            namespace_label=settings.prometheus_namespace_label)
    except Exception as exc:  # noqa: BLE001 - any client failure: say which Prometheus
        raise PlotInputError(f"--prometheus {url}", f"the range query failed "
                             f"({prometheus._describe(exc)})",
                             "check the URL (and LLMOP_PROMETHEUS_* TLS settings)") from None
    return timeline_from_matrices(namespace, name, start, end, step, matrices, source=url)


# ----------------------------------------------------------------------------- commands
def _run(body: Any) -> int:
    err = Console(stderr=True, highlight=False)
    try:
        require_matplotlib()
        path = body()
    except PlotsUnavailable as exc:
        err.print(f"[bold red]error[/] {escape(str(exc))}")
        return 2
    except PlotInputError as exc:
        err.print(f"[bold red]error[/] {escape(exc.source)}: {escape(exc.problem)}\n"
                  f"  fix: {escape(exc.fix)}")
        return 2
    Console(highlight=False).print(f"wrote {escape(str(path))}", soft_wrap=True)
    return 0


def cmd_plot_tuning(args: argparse.Namespace) -> int:
    """``plot tuning``."""
    def body() -> Path:
        if bool(args.file) == bool(args.service):
            raise PlotInputError("plot tuning", "give a result FILE or --service, one of them",
                                 "e.g. `llm-operator plot tuning result.json` or "
                                 "`--service default/llama`")
        if args.service:
            namespace, name = _service(args.service)
            doc, source = kubectl_get_service(namespace, name, args.kubectl), args.service
        else:
            doc, source = read_document(args.file), args.file
            name = Path(args.file).stem if args.file != "-" else "stdin"
        trials = trials_from_document(doc, source)
        return write_tuning_png(trials, args.output or Path(f"tuning-trials-{name}.png"))

    return _run(body)


def cmd_plot_timeline(args: argparse.Namespace) -> int:
    """``plot timeline``."""
    settings = Settings()

    def body() -> Path:
        namespace, name = _service(args.service)
        url = args.prometheus or settings.prometheus_url
        if not url:
            raise PlotInputError("--prometheus", "no Prometheus URL",
                                 "pass --prometheus http://HOST:9090 or set "
                                 "LLMOP_PROMETHEUS_URL")
        end = args.end or time.time()
        start = end - parse_duration(args.since)
        scrape = args.scrape_interval or settings.scrape_interval_seconds
        step = args.step or max(scrape, (end - start) / 240)
        window = args.window or max(step, 2 * scrape)
        timeline = read_timeline(url, namespace, name, start, end, step, window, settings)
        return write_timeline_png(timeline, args.output or Path(
            f"adaptation-timeline-{namespace}-{name}.png"))

    return _run(body)

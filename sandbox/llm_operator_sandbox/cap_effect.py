"""The demo's binding-cap comparison (``benchmarks/configs/demo_binding_cap.yaml``): what it
runs and what it concludes, as pure functions. The demo (:mod:`.loop_demo`) does the I/O:
it pins each round's cap, waits for the engine to report it, runs vLLM's benchmark and
reads the engine's preemption counter.

Each arm runs the same load the same number of times, interleaved (the config's
``order``). Per arm and metric it reports the mean and the range (lowest, highest) over
its rounds; a difference is called real only when the two ranges do not overlap, which
with 3 rounds each is a strict test (no distribution assumed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

CONFIG = Path(__file__).resolve().parents[2] / "benchmarks" / "configs" / "demo_binding_cap.yaml"
NODES_CONFIG = CONFIG.with_name("demo_binding_cap_nodes.yaml")  # the demo on real nodes
ADAPTED, STATIC = "adapted", "static"


@dataclass(frozen=True)
class Workload:
    clients: int
    prompts: int
    input: int
    output: int


@dataclass(frozen=True)
class EffectConfig:
    label: str
    light: Workload
    heavy: Workload
    adapt_seconds: float
    order: tuple[str, ...]
    load: Workload
    ttft_ms: int
    tpot_ms: int
    cap_timeout_s: float


def load_config(path: Path = CONFIG) -> EffectConfig:
    """The registered comparison; refuses a file whose order names an unknown arm or
    runs the arms a different number of times."""
    raw: dict[str, Any] = yaml.safe_load(path.read_text())
    adapt, compare = raw["adapt"], raw["compare"]
    order = tuple(compare["order"])
    unknown = sorted(set(order) - {ADAPTED, STATIC})
    if unknown or order.count(ADAPTED) != order.count(STATIC) or not order:
        raise ValueError(f"{path}: compare.order must run {ADAPTED!r} and {STATIC!r} "
                         f"equally often, got {list(order)}")
    return EffectConfig(
        label=str(raw["label"]), light=Workload(**adapt["light"]),
        heavy=Workload(**adapt["heavy"]), adapt_seconds=float(adapt["maxSeconds"]),
        order=order, load=Workload(**compare["load"]),
        ttft_ms=int(compare["goodput"]["ttftMs"]), tpot_ms=int(compare["goodput"]["tpotMs"]),
        cap_timeout_s=float(compare["capReportTimeoutSeconds"]))


@dataclass(frozen=True)
class Round:
    """One round of the comparison's load."""
    arm: str
    cap: int
    completed: int
    preemptions: float  # the engine's vllm:num_preemptions_total, after minus before
    ttft_p95_ms: float
    goodput_rps: float  # vLLM's benchmark: requests per second meeting the SLO
    output_tps: float

    @property
    def preemptions_per_request(self) -> float:
        return self.preemptions / self.completed if self.completed else 0.0


def round_from(arm: str, cap: int, result: Mapping[str, Any], preemptions: float) -> Round:
    """A :class:`Round` from vLLM's benchmark result dict and the counter's difference."""
    return Round(arm, cap, int(result.get("completed") or 0), preemptions,
                 float(result.get("p95_ttft_ms") or 0.0),
                 float(result.get("request_goodput") or 0.0),
                 float(result.get("output_throughput") or 0.0))


# (label, Round attribute, format, which way is better)
METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("preemptions per request", "preemptions_per_request", "{:.2f}", "lower"),
    ("TTFT p95, ms", "ttft_p95_ms", "{:,.0f}", "lower"),
    ("goodput, requests/s", "goodput_rps", "{:.2f}", "higher"),
    ("output tokens/s", "output_tps", "{:,.0f}", "higher"),
)


@dataclass(frozen=True)
class Spread:
    mean: float
    low: float
    high: float
    values: tuple[float, ...]


def spread(values: Sequence[float]) -> Spread:
    vals = tuple(values)
    return Spread(sum(vals) / len(vals), min(vals), max(vals), vals)


def verdict(adapted: Spread, static: Spread, better: str) -> str:
    """How the adapted cap compares with the static one on a metric: which is better when
    the ranges do not overlap, else that the rounds cannot tell them apart."""
    if adapted.low > static.high or adapted.high < static.low:
        adapted_better = (adapted.mean < static.mean) == (better == "lower")
        ratio = (f" ({adapted.mean / static.mean:.2f}x)" if adapted.mean and static.mean
                 else f" ({adapted.mean:g} vs {static.mean:.3g})")
        return ("better with the adapted cap" if adapted_better
                else "worse with the adapted cap") + ratio
    return "within the rounds' range: no difference shown"


@dataclass(frozen=True)
class Row:
    metric: str
    adapted: Spread
    static: Spread
    verdict: str
    fmt: str

    def cell(self, s: Spread) -> str:
        f = self.fmt.format
        return f"{f(s.mean)} [{f(s.low)}, {f(s.high)}]"


def summarize(rounds: Sequence[Round]) -> list[Row]:
    """One row per metric: each arm's mean and range over its rounds, and the verdict.
    Empty unless both arms ran."""
    by_arm = {arm: [r for r in rounds if r.arm == arm] for arm in (ADAPTED, STATIC)}
    if not all(by_arm.values()):
        return []
    rows = []
    for label, attr, fmt, better in METRICS:
        a = spread([float(getattr(r, attr)) for r in by_arm[ADAPTED]])
        s = spread([float(getattr(r, attr)) for r in by_arm[STATIC]])
        rows.append(Row(label, a, s, verdict(a, s, better), fmt))
    return rows


LOCAL_FIGURES = ("measured on the CPU engine (vLLM CPU build, the demo's tiny Llama, this "
                 "machine's cores)")
NODES_FIGURES = ("measured in real containers here, on the CPU engine (vLLM CPU build in a "
                 "container of the image built here, 1.5 CPUs; the wide-KV stand-in)")


def record(rounds: Sequence[Round], config: EffectConfig, adapted: int, static: int,
           when: str, figures: str = LOCAL_FIGURES) -> dict[str, Any]:
    """What the demo writes beside its plots: the registered label, the caps, every
    round as measured and the summary rows (a run's record for benchmarks/);
    ``figures`` labels where they were measured."""
    return {
        "label": config.label, "time": when, "caps": {ADAPTED: adapted, STATIC: static},
        "label_of_figures": figures,
        "rounds": [{**asdict(r), "preemptions_per_request": r.preemptions_per_request}
                   for r in rounds],
        "summary": [{"metric": row.metric, ADAPTED: asdict(row.adapted),
                     STATIC: asdict(row.static), "verdict": row.verdict}
                    for row in summarize(rounds)],
    }

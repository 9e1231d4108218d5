"""SLO sizing (pure): the memory's plan, then the GPUs per replica and the batch knobs
the declared SLO asks for, by the performance model's predictions.

:func:`llm_operator.planning.make_plan` chooses the parallel layout from memory alone:
the fewest GPUs whose weights and KV cache hold the workload. :func:`plan_for_slo` then
asks the performance model (:mod:`llm_operator.planning.perfmodel`, used as it is) whether that
replica meets ``spec.workload.slo`` at the per-replica concurrency
(``ceil(concurrency / replicas)``), and what to change where it does not. The rule, fixed
before any figure was looked at:

1. **Layouts.** The memory's layout, then the larger tensor-parallel sizes vLLM takes for
   the model on one node (TP divides the attention heads and suits the KV heads, at most
   the node's GPUs), in order of GPUs. Only where the user left all of
   ``spec.gpus.count``, ``spec.engine.tensorParallelSize`` and ``pipelineParallelSize``
   auto (a pin is never overridden), and only without pipeline stages (the model
   predicts tensor parallelism; a replica that needs stages keeps the memory's layout).
2. **Knobs, at each layout.** Every pair of ``--max-num-seqs`` (1, 2, 4, 6, 8, 12, 16, 24, ...
   up to the memory's limit, and the per-replica concurrency) and
   ``--max-num-batched-tokens`` (vLLM's default for the GPU, halved down to
   :data:`MIN_BATCHED_TOKENS`), at least as many tokens as sequences (vLLM's rule); a
   pinned knob is the only value of its axis. Each pair is predicted at the per-replica
   concurrency.
3. **Verdict of a layout.** It meets the SLO when one pair's predicted TTFT and ITL p95
   are within the objectives. Of those pairs: the best goodput; of those within 2% of it
   (the tuner's start rule, :func:`llm_operator.planning.perfmodel.suggest_start`), the smallest
   max-num-seqs, then the largest token budget (the nearest to vLLM's default). Where no
   pair meets: the pair whose worse latency is the smallest multiple of its objective.
4. **Choice.** The first layout that meets; where none does, the memory's (more GPUs
   that still miss are not bought) and the plan says so (``status.plan.slo``, a warning,
   the condition ``SLOAttainable`` False) with the closest figures and the fixes: more
   GPUs per replica (where one is pinned), leaving a pinned knob auto, more replicas
   (the fewest that meet, at the chosen layout), or the objectives the closest pair
   meets.

``spec.replicas`` is never planned here: it is the scale subresource's integer (``kubectl
scale``, a HorizontalPodAutoscaler write it), so the plan says how many replicas the SLO
needs and the user (or the autoscaler) sets them.

Every figure is the model's estimate; the plan carries its measured error band
(:data:`llm_operator.planning.perfmodel.MEASURED_ACCURACY`) and the reference points it was
fitted to (:data:`llm_operator.planning.perfmodel.GPU_EFFICIENCY`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..api.constants import DEFAULT_GPUS_PER_NODE
from ..api.errors import SpecError, SpecErrors
from ..api.models import LLMServiceSpec
from ..inpod.tuner.space import SLO
from ..knowledge.catalog import ModelFacts
from . import (
    Explained,
    Plan,
    engine_rule_errors,
    gpu_facts,
    layout_label,
    make_plan,
    model_facts,
    valid_tensor_parallel_sizes,
    vllm_default_max_num_batched_tokens,
)
from .perfmodel import (
    GPU_EFFICIENCY,
    MEASURED_ACCURACY,
    NoPrediction,
    PlanInputs,
    Point,
    _pow2_grid,
    inputs_for,
    predict_point,
)

# The smallest --max-num-batched-tokens the search tries: halving vLLM's default stops
# here (a step of fewer tokens carries less than one token for each of 256 sequences).
MIN_BATCHED_TOKENS = 256

# Pairs within this share of the best goodput count as equal (as suggest_start's rule).
GOODPUT_TIE = 0.98


def per_replica_concurrency(spec: LLMServiceSpec) -> int:
    """The concurrent requests one replica serves: ``ceil(concurrency / replicas)``, as the
    planner sizes the KV cache."""
    return max(1, math.ceil(spec.workload.concurrency / max(spec.replicas, 1)))


@dataclass(frozen=True)
class Setting:
    """One pair of batch knobs and the model's prediction at the per-replica concurrency."""

    max_num_seqs: int
    max_num_batched_tokens: int
    point: Point

    def excess(self, slo: SLO) -> float:
        """The worse latency as a multiple of its objective (<= 1: meets)."""
        return max(self.point.ttft_s * 1e3 / slo.ttft_ms,
                   self.point.itl_p95_s * 1e3 / slo.itl_ms)

    def figures(self) -> str:
        p = self.point
        return (f"TTFT {p.ttft_s * 1e3:,.0f} ms, ITL p95 {p.itl_p95_s * 1e3:,.1f} ms, "
                f"{p.output_tps:,.0f} output tok/s")

    def knobs(self) -> str:
        return (f"--max-num-seqs {self.max_num_seqs} --max-num-batched-tokens "
                f"{self.max_num_batched_tokens}")

    def as_dict(self) -> dict[str, Any]:
        p = self.point
        return {"maxNumSeqs": self.max_num_seqs,
                "maxNumBatchedTokens": self.max_num_batched_tokens,
                "ttftP95Ms": round(p.ttft_s * 1e3, 1), "itlP95Ms": round(p.itl_p95_s * 1e3, 1),
                "outputTokensPerSecond": round(p.output_tps, 1)}


@dataclass(frozen=True)
class KnobSearch:
    """The search of both knobs at one layout: the chosen pair (the best that meets, else
    the closest) and whether it meets."""

    chosen: Setting
    meets: bool
    tried: int


def knob_grid(spec: LLMServiceSpec, plan: Plan, *, pins: bool = True
              ) -> tuple[list[int], list[int]]:
    """The max-num-seqs and max-num-batched-tokens values to predict (see the module's
    rule 2). ``pins=False``: as if both knobs were auto (what a fix would offer)."""
    engine = spec.engine
    c = per_replica_concurrency(spec)
    if pins and isinstance(engine.max_num_seqs, int):
        seqs = [engine.max_num_seqs]
    else:
        top = max(1, plan.max_num_seqs)
        if isinstance(engine.max_num_seqs, int):  # pinned, searched as if auto: the limit
            top = max(1, min(plan.memory_max_num_seqs or top, plan.max_num_seqs_cap or top))
        seqs = sorted({x for x in (*_pow2_grid(top), top, min(c, top)) if 1 <= x <= top})
    default = base_batched_tokens(spec, plan)
    if pins and isinstance(engine.max_num_batched_tokens, int):
        tokens = [engine.max_num_batched_tokens]
    elif engine.enable_chunked_prefill is False:
        tokens = [default]  # without chunked prefill vLLM needs >= maxModelLen: no search
    else:
        tokens, t = [default], default // 2
        while t >= MIN_BATCHED_TOKENS:
            tokens.append(t)
            t //= 2
    return seqs, tokens


def base_batched_tokens(spec: LLMServiceSpec, plan: Plan) -> int:
    """The token budget the memory's plan renders (its own value, else vLLM's default for
    the GPU, raised to maxModelLen without chunked prefill)."""
    if plan.max_num_batched_tokens is not None:
        return plan.max_num_batched_tokens
    default = vllm_default_max_num_batched_tokens(gpu_facts(spec))
    if spec.engine.enable_chunked_prefill is False:
        default = max(default, plan.max_model_len)
    return default


def search_knobs(inputs: PlanInputs, seqs: Sequence[int], tokens: Sequence[int],
                 concurrency: int) -> KnobSearch:
    """Predict every pair (tokens >= sequences) at ``concurrency`` and choose (rule 3)."""
    slo = inputs.slo
    pairs = [(s, t) for t in tokens for s in seqs if t >= s]  # vLLM refuses t < s
    scored: list[Setting] = []
    for s, t in pairs:
        engine = replace(inputs.engine, max_num_seqs=s, max_num_batched_tokens=t)
        scored.append(Setting(s, t, predict_point(inputs.model, inputs.hardware, inputs.tp,
                                                  inputs.workload, engine, concurrency)))
    if not scored:
        raise NoPrediction("no pair of max-num-seqs and max-num-batched-tokens vLLM takes")
    ok = [x for x in scored if x.point.meets(slo)]
    if ok:
        best = max(x.point.output_tps for x in ok)
        near = [x for x in ok if x.point.output_tps >= GOODPUT_TIE * best]
        chosen = min(near, key=lambda x: (x.max_num_seqs, -x.max_num_batched_tokens))
        return KnobSearch(chosen, True, len(scored))
    chosen = min(scored, key=lambda x: (round(x.excess(slo), 6), x.max_num_seqs,
                                        -x.max_num_batched_tokens))
    return KnobSearch(chosen, False, len(scored))


@dataclass(frozen=True)
class LayoutVerdict:
    """One layout's plan and its knob search."""

    plan: Plan
    search: KnobSearch

    @property
    def label(self) -> str:
        p = self.plan
        return (layout_label(p.tensor_parallel_size, p.pipeline_parallel_size)
                + f" ({p.gpus_per_replica} GPU{'s' if p.gpus_per_replica > 1 else ''})")


def _layout_pinned(spec: LLMServiceSpec) -> str | None:
    """The field that pins the layout, or None."""
    for field, value in (("spec.gpus.count", spec.gpus.count),
                         ("spec.engine.tensorParallelSize", spec.engine.tensor_parallel_size),
                         ("spec.engine.pipelineParallelSize",
                          spec.engine.pipeline_parallel_size)):
        if isinstance(value, int):
            return field
    return None


def _larger_tps(spec: LLMServiceSpec, memory: Plan, facts: ModelFacts | None,
                gpus_per_node: int) -> list[int]:
    """Tensor-parallel sizes above the memory's, on one node, that vLLM takes."""
    per_node = spec.gpus.per_node or gpus_per_node
    return [t for t in valid_tensor_parallel_sizes(model_facts(spec, facts), per_node)
            if t > memory.tensor_parallel_size]


def plan_for_slo(spec: LLMServiceSpec, *, gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
                 facts: ModelFacts | None = None, load_bandwidth: str | None = None,
                 engine_rules: bool = True) -> Plan:
    """The plan of one replica sized for ``spec.workload.slo`` (see the module's rule):
    :func:`make_plan`'s, at the layout and with the batch knobs the SLO chose, carrying the
    verdict (``Plan.slo``), its explanation and, where the SLO is out of reach, a warning.
    Raises what :func:`make_plan` raises; a replica the model cannot predict (a GPU known
    by its memory only) keeps the memory's plan and says why."""
    memory = make_plan(spec, gpus_per_node=gpus_per_node, facts=facts,
                       load_bandwidth=load_bandwidth, engine_rules=engine_rules)
    try:
        return _sized(spec, memory, gpus_per_node, facts, load_bandwidth, engine_rules)
    except NoPrediction as exc:
        return memory.model_copy(update={"slo": {"sized": False, "reason": str(exc)}})


def _verdict(spec: LLMServiceSpec, plan: Plan, facts: ModelFacts | None,
             concurrency: int | None = None, *, pins: bool = True) -> LayoutVerdict:
    seqs, tokens = knob_grid(spec, plan, pins=pins)
    try:
        inputs = inputs_for(spec, plan, facts)
        search = search_knobs(inputs, seqs, tokens, concurrency or per_replica_concurrency(spec))
    except ValueError as exc:  # NoPrediction too: the GPU or model lacks a figure
        raise NoPrediction(str(exc)) from exc
    return LayoutVerdict(plan, search)


def _sized(spec: LLMServiceSpec, memory: Plan, gpus_per_node: int, facts: ModelFacts | None,
           load_bandwidth: str | None, engine_rules: bool) -> Plan:
    tried = [_verdict(spec, memory, facts)]
    pinned = _layout_pinned(spec)
    if not tried[0].search.meets and pinned is None and memory.pipeline_parallel_size == 1:
        for tp in _larger_tps(spec, memory, facts, gpus_per_node):
            try:
                bigger = make_plan(spec, gpus_per_node=gpus_per_node, facts=facts,
                                   load_bandwidth=load_bandwidth, engine_rules=engine_rules,
                                   layout=(tp, 1))
            except (SpecError, SpecErrors, ValueError):
                continue  # not a layout this spec takes (a pinned DCP size, say)
            tried.append(_verdict(spec, bigger, facts))
            if tried[-1].search.meets:
                break
    met = next((v for v in tried if v.search.meets), None)
    chosen = met or tried[0]
    fixes = [] if met else _fixes(spec, chosen, tried, pinned, facts, gpus_per_node,
                                  load_bandwidth)
    return _with_verdict(spec, memory, chosen, tried, fixes, pinned, facts, engine_rules)


def _fixes(spec: LLMServiceSpec, chosen: LayoutVerdict, tried: list[LayoutVerdict],
           pinned: str | None, facts: ModelFacts | None, gpus_per_node: int,
           load_bandwidth: str | None) -> list[str]:
    """What would meet the SLO, each predicted (module rule 4). More replicas: at each
    layout tried, the fewest replicas that meet; the layout with the fewest GPUs in all
    (then the fewest per replica) is named."""
    out: list[str] = []
    c = per_replica_concurrency(spec)
    engine = spec.engine
    knob_pins = [f for f, v in (("spec.engine.maxNumSeqs", engine.max_num_seqs),
                                ("spec.engine.maxNumBatchedTokens",
                                 engine.max_num_batched_tokens)) if isinstance(v, int)]
    if knob_pins:
        free = _verdict(spec, chosen.plan, facts, pins=False)
        if free.search.meets:
            s = free.search.chosen
            out.append(f"leave {' and '.join(knob_pins)} auto: at {chosen.label} the model "
                       f"predicts {s.knobs()} meets it ({s.figures()})")
    if pinned is not None and chosen.plan.pipeline_parallel_size == 1:
        for tp in _larger_tps(spec, chosen.plan, facts, gpus_per_node):
            gpus = spec.gpus.model_copy(update={"count": tp}) if isinstance(
                spec.gpus.count, int) else spec.gpus
            alt = spec.model_copy(update={"gpus": gpus, "engine": engine.model_copy(
                update={"tensor_parallel_size": tp, "pipeline_parallel_size": 1})})
            try:
                plan = make_plan(alt, gpus_per_node=gpus_per_node, facts=facts,
                                 load_bandwidth=load_bandwidth)
                found = _verdict(alt, plan, facts)
            except (SpecError, SpecErrors, ValueError):
                continue
            if found.search.meets:
                s = found.search.chosen
                field = ("spec.gpus.count and spec.engine.tensorParallelSize"
                         if isinstance(spec.gpus.count, int) else "spec.engine.tensorParallelSize")
                out.append(f"more GPUs per replica: {field} {tp} (now {pinned} is pinned); "
                           f"predicted with {s.knobs()}: {s.figures()}")
                break
    options: list[tuple[int, int, int, Setting, LayoutVerdict]] = []
    for v in tried:
        fewest = _replicas_for_slo(spec, v.plan, facts)
        if fewest is not None:
            options.append((fewest[0] * v.plan.gpus_per_replica, v.plan.gpus_per_replica,
                            fewest[0], fewest[1], v))
    if options:
        total, _, r, s, v = min(options, key=lambda o: (o[0], o[1]))
        at = "" if v is chosen else (f" with spec.engine.tensorParallelSize "
                                     f"{v.plan.tensor_parallel_size} ({v.label} each)")
        out.append(f"more replicas: spec.replicas {r}{at} "
                   f"({math.ceil(spec.workload.concurrency / r)} clients per replica instead "
                   f"of {c}, {total} GPUs in all); predicted with {s.knobs()}: {s.figures()}")
    best = chosen.search.chosen
    out.append(f"a looser SLO: the closest setting ({best.knobs()}) is predicted to meet "
               f"spec.workload.slo.ttftP95Ms {math.ceil(best.point.ttft_s * 1e3):,} and "
               f"itlP95Ms {math.ceil(best.point.itl_p95_s * 1e3):,}")
    return out


def _replicas_for_slo(spec: LLMServiceSpec, plan: Plan, facts: ModelFacts | None
                      ) -> tuple[int, Setting] | None:
    """The fewest replicas above ``spec.replicas`` at this layout whose per-replica
    concurrency meets the SLO (the model's latencies do not rise with fewer clients, so
    a bisection over the replicas), with the pair chosen there; None: not even one client
    per replica meets it."""
    total = spec.workload.concurrency
    low, high = max(spec.replicas, 1), max(total, 1)

    def meets(r: int) -> Setting | None:
        found = _verdict(spec, plan, facts, math.ceil(total / r))
        return found.search.chosen if found.search.meets else None

    if high <= low or meets(high) is None:
        return None
    while high - low > 1:
        mid = (low + high) // 2
        if meets(mid) is None:
            low = mid
        else:
            high = mid
    setting = meets(high)
    assert setting is not None
    return high, setting


def error_band(plan: Plan, spec: LLMServiceSpec, facts: ModelFacts | None) -> str:
    """The model's measured error band for this kind of model, and what it was fitted to."""
    experts = bool(model_facts(spec, facts).num_experts)
    acc = MEASURED_ACCURACY["moe" if experts else "dense"]
    kind = "mixture-of-experts models" if experts else "dense models"
    return (f"estimated by llm_operator.planning.perfmodel; {acc.note(kind)} "
            "(TTFT and TPOT, the mean time per token; the ITL p95 here is the model's "
            "chunked-prefill step, which no measured row reports: no band for it); fitted to "
            f"{GPU_EFFICIENCY.source} (docs/production/performance-model.md)")


def _with_verdict(spec: LLMServiceSpec, memory: Plan, chosen: LayoutVerdict,
                  tried: list[LayoutVerdict], fixes: list[str], pinned: str | None,
                  facts: ModelFacts | None, engine_rules: bool) -> Plan:
    plan, search = chosen.plan, chosen.search
    best = search.chosen
    wl = spec.workload
    c = per_replica_concurrency(spec)
    memory_label = tried[0].label
    band = error_band(plan, spec, facts)
    objective = f"TTFT p95 {wl.slo.ttft_p95_ms:,g} ms, ITL p95 {wl.slo.itl_p95_ms:,g} ms"
    if pinned is not None:
        layout_by = f"{pinned} is pinned: the layout is the user's ({chosen.label})"
    elif search.meets and chosen is not tried[0]:
        layout_by = (f"the SLO: {chosen.label}, the fewest GPUs predicted to meet it; memory "
                     f"alone chose {memory_label}")
    elif plan.pipeline_parallel_size > 1:
        layout_by = (f"memory: {chosen.label} needs pipeline stages, which the model does "
                     "not predict; no larger layout was tried")
    elif search.meets:
        layout_by = f"memory: {chosen.label} holds the workload and meets the SLO"
    else:
        layout_by = (f"memory: {chosen.label}; no layout tried meets the SLO ("
                     + ", ".join(v.label for v in tried) + "), so none with more GPUs")
    seqs_pinned = isinstance(spec.engine.max_num_seqs, int)
    tokens_pinned = isinstance(spec.engine.max_num_batched_tokens, int)
    base_tokens = base_batched_tokens(spec, plan)
    verdict = "meets" if search.meets else "misses"
    ex = list(plan.explanations)
    layouts = {v.label: ("meets: " if v.search.meets else "misses, closest: ")
               + f"{v.search.chosen.knobs()}: {v.search.chosen.figures()}" for v in tried}
    ex.append(Explained(
        name="sloSizing", value=verdict, source="planned",
        formula=(f"predicted at {c} clients per replica (ceil({wl.concurrency} / "
                 f"{max(spec.replicas, 1)} replicas)) against {objective}: the fewest GPUs "
                 "per replica (memory's layout, then larger tensor-parallel sizes on one "
                 "node, unless pinned) whose best pair of max-num-seqs and "
                 "max-num-batched-tokens meets it; layout by " + layout_by),
        inputs={"concurrencyPerReplica": c, "layouts": layouts, "errorBand": band,
                "pairsEvaluated": sum(v.search.tried for v in tried)}))
    for i, e in enumerate(ex):
        if e.name == "tensorParallelSize" and chosen is not tried[0]:
            ex[i] = e.model_copy(update={"formula": (
                f"the SLO's choice (see sloSizing): memory alone chose {memory_label}, "
                f"predicted to miss the SLO; {chosen.label} is the fewest GPUs predicted to "
                "meet it")})
    seqs_why = ("pinned by the user" if seqs_pinned else
                f"the SLO sizing's pair ({verdict}): {best.figures()} at {c} clients per "
                f"replica (estimated). The memory's limit, {plan.max_num_seqs}, stays the "
                "bound of tuning and adaptation; the tuner starts its search here "
                "(--hint-max-num-seqs), and a tuned or adapted value replaces it")
    ex.append(Explained(name="startMaxNumSeqs", value=best.max_num_seqs,
                        source="pinned" if seqs_pinned else "planned", formula=seqs_why,
                        inputs={"memoryLimit": plan.max_num_seqs,
                                "concurrencyPerReplica": c}))
    batched = plan.max_num_batched_tokens
    if not tokens_pinned and best.max_num_batched_tokens != base_tokens:
        batched = best.max_num_batched_tokens
        for i, e in enumerate(ex):
            if e.name == "maxNumBatchedTokens":
                ex[i] = e.model_copy(update={"value": batched, "formula": (
                    f"the SLO sizing's pair ({verdict}; see sloSizing): {batched} instead of "
                    f"{base_tokens} (vLLM's default here): a step carrying a prompt chunk of "
                    f"up to {batched} tokens beside the decodes is shorter, so the ITL p95 "
                    f"falls: {best.figures()} (estimated). The tuner measures this knob from "
                    "vLLM's default by its own steps (no hint), and its result replaces it")})
    warnings = list(plan.warnings)
    slo: dict[str, Any] = {
        "sized": True, "attainable": search.meets,
        "objective": {"ttftP95Ms": wl.slo.ttft_p95_ms, "itlP95Ms": wl.slo.itl_p95_ms},
        "concurrencyPerReplica": c,
        "layoutBy": layout_by,
        "memoryChoice": memory_label, "sloChoice": chosen.label if search.meets else None,
        "predicted": best.as_dict(),
        "errorBand": band,
    }
    if not search.meets:
        slo["fixes"] = fixes
        warnings.append(
            f"no plan meets the SLO ({objective}) at {c} clients per replica: the closest "
            f"predicted is {best.figures()} with {best.knobs()} at {chosen.label} (estimated). "
            "Fix: " + "; or ".join(fixes) + f". How far to trust it: {band}")
    sized = plan.model_copy(update={
        "explanations": ex, "warnings": warnings, "slo": slo,
        "start_max_num_seqs": best.max_num_seqs, "max_num_batched_tokens": batched})
    if engine_rules:
        errors = engine_rule_errors(spec, sized, facts=facts)
        if errors:
            raise SpecErrors(errors)
    return sized

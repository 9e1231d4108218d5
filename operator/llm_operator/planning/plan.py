"""The plan (pure): :func:`make_plan` puts facts, memory, parallelism, engine settings and
pod sizing together, with the explanation of every number.
"""

from __future__ import annotations

import math
from typing import Any

from ..api.constants import DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_GPUS_PER_NODE
from ..api.errors import SpecError
from ..api.models import (
    AdaptationMode,
    LLMServiceSpec,
    Quantization,
)
from ..knowledge.catalog import (
    GPUFacts,
    ModelFacts,
)
from ..knowledge.dtype_support import compute_path, dtype_errors
from ..knowledge.extra_args import check_extra_args
from ..knowledge.modelfacts import QUANT_BYTES_PER_WEIGHT
from ..knowledge.startup import StartupBudget, startup_budget
from .engine import (
    _plan_batched_tokens,
    _plan_max_model_len,
    _plan_max_num_seqs,
    engine_rule_errors,
)
from .facts import fact_sources, gpu_facts, model_facts
from .memory import (
    BLOCK_SIZE,
    DTYPE_BYTES,
    OVERHEAD_BYTES_PER_GPU,
    QUANT_BYTES_PER_PARAM,
    download_bytes,
    human_bytes,
    kv_bytes_per_sequence,
    kv_dtype_bytes,
    serving_dtype,
    usable_bytes_per_gpu,
    weight_bytes,
)
from .parallelism import (
    KV_SHORTFALL_FLOOR,
    _candidates,
    _Choice,
    _choose_detail,
    _dcp_candidates,
    _Fit,
    _fit_at,
    _holds,
    _Need,
    _nodes,
    _pinned,
    _serves,
    _tolerated,
    dcp_plannable,
    decode_context_parallel_sizes,
    held_sequences,
    queue_wait_bound_s,
    valid_tensor_parallel_sizes,
)
from .pod import _host_buffer_errors, _pod_memory_errors, with_pod_sizing
from .types import Explained, Plan
from .validation import _pin_errors, _raise, _too_small, contradictions, managed_flag_errors

# --------------------------------------------------------------------------- the plan

def make_plan(spec: LLMServiceSpec, *, gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
              engine_rules: bool = True, facts: ModelFacts | None = None,
              load_bandwidth: str | None = None,
              layout: tuple[int, int] | None = None) -> Plan:
    """Plan one replica of ``spec``; raise :class:`~llm_operator.api.errors.SpecError` on
    a spec that cannot be served (naming the field and the fix), including one whose
    engine arguments, as the renderer renders them (:func:`engine_flags` and
    ``spec.engine.extraArgs``), break a start-up rule of vLLM
    (:func:`engine_rule_errors`).

    ``gpus_per_node``: the GPUs of one node where ``spec.gpus.perNode`` is unset (the
    operator's ``LLMOP_GPUS_PER_NODE``). ``engine_rules=False`` skips vLLM's start-up
    rules (the vLLM tier gives vLLM itself what the operator would have rendered).
    ``facts``: the model's facts read from its config.json at an edge (see
    :func:`model_facts`; ``spec.model.architecture`` still wins). ``load_bandwidth``: the
    operator's ``LLMOP_MODEL_LOAD_BANDWIDTH`` where ``spec.model.loadBandwidth`` is unset
    (the startup budget, :mod:`llm_operator.knowledge.startup`). ``layout``: the (TP, PP) to
    plan at, one of the candidates memory and vLLM's rules allow for this spec (the SLO
    sizing of :mod:`llm_operator.planning.sizing` picks it); a layout outside them raises
    ``ValueError``."""
    plan = _make_plan(spec, gpus_per_node, facts, load_bandwidth, layout)
    if engine_rules:
        _raise(engine_rule_errors(spec, plan, facts=facts))
    return plan


def _make_plan(spec: LLMServiceSpec, gpus_per_node: int,
               read: ModelFacts | None = None, load_bandwidth: str | None = None,
               layout: tuple[int, int] | None = None) -> Plan:
    per_node = spec.gpus.per_node or gpus_per_node
    errors: list[SpecError] = []
    facts: ModelFacts | None = None
    gpu: GPUFacts | None = None
    try:
        facts = model_facts(spec, read)
    except SpecError as exc:
        errors.append(exc)
    try:
        gpu = gpu_facts(spec)
    except SpecError as exc:
        errors.append(exc)
    wl, engine = spec.workload, spec.engine
    tokens_per_request = wl.input_tokens + wl.output_tokens
    if gpu is not None and usable_bytes_per_gpu(gpu, engine.gpu_memory_utilization) <= 0:
        errors.append(SpecError(
            "spec.engine.gpuMemoryUtilization",
            f"{engine.gpu_memory_utilization:g} of {human_bytes(gpu.memory_bytes)} does not "
            f"even cover vLLM's {human_bytes(OVERHEAD_BYTES_PER_GPU)} of runtime overhead per "
            "GPU", f"raise it (default {DEFAULT_GPU_MEMORY_UTILIZATION:g})"))
    if facts is not None:
        errors += _pin_errors(spec, facts, tokens_per_request, per_node)
        if gpu is not None:
            errors += dtype_errors(spec, facts, gpu)
    else:
        errors += managed_flag_errors(spec)
    errors += contradictions(spec)
    _raise(errors)
    assert facts is not None and gpu is not None

    dtype = serving_dtype(facts, engine)
    dbytes = DTYPE_BYTES.get(dtype, 2)
    kvb = kv_dtype_bytes(engine, dbytes)
    weights = weight_bytes(facts, dbytes, spec.model.quantization)
    usable = usable_bytes_per_gpu(gpu, engine.gpu_memory_utilization)
    blocks_per_request = math.ceil(tokens_per_request / BLOCK_SIZE)
    concurrency = math.ceil(wl.concurrency / max(spec.replicas, 1))
    pinned_len = engine.max_model_len if isinstance(engine.max_model_len, int) else None
    hard = pinned_len or tokens_per_request
    need = _Need(facts, weights, kvb, usable, hard,
                 max(hard, concurrency * blocks_per_request * BLOCK_SIZE), per_node,
                 concurrency=concurrency, request_blocks=blocks_per_request,
                 output_tokens=wl.output_tokens, ttft_s=wl.slo.ttft_p95_ms / 1000,
                 itl_s=wl.slo.itl_p95_ms / 1000, seq_tokens=tokens_per_request,
                 state_bytes=DTYPE_BYTES.get(facts.state_dtype or dtype, dbytes),
                 conv_bytes=dbytes, dcp_pin=_pinned(engine.decode_context_parallel_size))
    count = spec.gpus.count if isinstance(spec.gpus.count, int) else None
    cands = _candidates(need, facts, engine, count)
    if need.dcp_pin is not None and not isinstance(engine.tensor_parallel_size, int):
        # With TP pinned too, vLLM's own rules judge the pair (engine_rules).
        cands = _dcp_candidates(spec, facts, cands, need.dcp_pin)
    if layout is not None:
        if layout not in cands:
            raise ValueError(f"layout TP={layout[0]} PP={layout[1]} is not a candidate of this "
                             f"spec: {cands}")
        cands = [layout]
    choice = _choose_detail(need, cands)
    fit, ideal, rejected = choice.fit, choice.ideal, choice.rejected
    if fit is None:
        raise _too_small(spec, need, gpu, cands, rejected)

    warnings: list[str] = check_extra_args(spec)[1]
    ex: list[Explained] = []
    _explain_facts(ex, spec, facts, gpu, dtype, dbytes, kvb, weights, usable)
    _explain_parallelism(ex, warnings, spec, need, fit, ideal, rejected, concurrency)
    _explain_dcp(ex, spec, need, fit)
    _explain_alternatives(ex, warnings, spec, need, choice)
    _explain_rollout(ex, spec, fit.gpus)
    startup = _explain_startup(ex, spec, weights, load_bandwidth)

    capacity = fit.capacity
    ex.append(Explained(
        name="kvTokenCapacity", value=capacity, unit="tokens",
        formula=(f"floor((usable - weights per GPU) / ({fit.block}-token block x KV bytes per "
                 f"token)) x {fit.block}"
                 + (f" (a block: {BLOCK_SIZE} tokens on each of {fit.dcp} decode context "
                    "parallel ranks)" if fit.dcp > 1 else "")),
        inputs={"usableBytesPerGpu": usable, "weightBytesPerGpu": fit.weights_per_gpu,
                "kvBudgetBytesPerGpu": fit.kv_budget, "kvBytesPerToken": fit.kv_per_token,
                "blockSize": BLOCK_SIZE}))
    max_model_len = _plan_max_model_len(ex, warnings, facts, pinned_len, fit,
                                        tokens_per_request)
    adjusted: list[str] = []
    seqs, mem_seqs, cap = _plan_max_num_seqs(ex, warnings, adjusted, spec, gpu, fit,
                                             concurrency, tokens_per_request)
    batched = _plan_batched_tokens(ex, adjusted, spec, seqs, max_model_len)
    _check_min_cap(warnings, spec, seqs)
    if spec.engine.enable_chunked_prefill is False:
        # vLLM 0.32 starts, with a warning: vllm/engine/arg_utils.py EngineArgs.
        # _set_default_chunked_prefill_and_prefix_caching_args (every generate model but
        # encoder-decoder ones has is_chunked_prefill_supported).
        warnings.append(
            "spec.engine.enableChunkedPrefill is false: vLLM 0.32 does not officially "
            "support switching chunked prefill off for generate models (\"may cause the "
            "engine to crash or produce incorrect outputs\"), and needs "
            "maxNumBatchedTokens >= maxModelLen without it; the tuner never switches it off. "
            "Fix: remove the field (vLLM's default, on) unless you have measured the gain")
    if not ideal and not _holds(need, fit) and choice.tolerated_over is None:
        warnings.append(
            f"KV cache holds {fit.usable_tokens:,} tokens for requests, less than the "
            f"workload's {concurrency} concurrent requests x {tokens_per_request:,} tokens "
            f"= {need.ideal_tokens:,}: "
            "vLLM will queue or preempt requests; add replicas or GPUs")
    if spec.scheduling.group_topology_key and _nodes(fit, per_node) == 1:
        warnings.append(
            f"spec.scheduling.groupTopologyKey ({spec.scheduling.group_topology_key}) places "
            "the groups of a replica spread over nodes (a LeaderWorkerSet), but a replica "
            "here fits one node and runs as a Deployment: it has no effect. Fix: remove it, "
            "or use spec.scheduling.affinity for a single-node replica")

    plan = Plan(
        model_name=facts.name, gpu_product=gpu.product, gpu_memory_bytes=gpu.memory_bytes,
        tensor_parallel_size=fit.tp, pipeline_parallel_size=fit.pp, gpus_per_replica=fit.gpus,
        nodes_per_replica=_nodes(fit, per_node), max_model_len=max_model_len,
        dtype=str(engine.dtype), weight_bytes=weights, weight_bytes_per_gpu=fit.weights_per_gpu,
        kv_bytes_per_token=fit.kv_per_token, kv_token_capacity=capacity, max_num_seqs=seqs,
        max_num_batched_tokens=batched, explanations=ex, warnings=warnings,
        kv_cache_dtype=str(engine.kv_cache_dtype), usable_bytes_per_gpu=usable,
        kv_budget_bytes_per_gpu=fit.kv_budget, tokens_per_request=tokens_per_request,
        memory_max_num_seqs=mem_seqs, max_num_seqs_cap=cap,
        download_bytes=download_bytes(facts, dbytes, spec.model.quantization),
        adjustments=adjusted, fact_sources=fact_sources(spec, facts),
        startup_budget_seconds=startup.seconds,
        load_bytes_per_second=startup.load_bytes_per_second,
        decode_context_parallel_size=fit.dcp, block_size=fit.block,
    )
    sized = with_pod_sizing(spec, _check_utilization(spec, plan, gpus_per_node, read))
    _raise(_pod_memory_errors(spec, sized) + _host_buffer_errors(spec, sized))
    return sized


def _check_min_cap(warnings: list[str], spec: LLMServiceSpec, seqs: int) -> None:
    """A lower bound of the adaptation above the planned max-num-seqs: the bound wins over
    the planner's memory limit (adaptation.policy.bounds_for), so the cap goes there at
    once and never below it."""
    low = spec.adaptation.min_max_num_seqs
    if low <= seqs or isinstance(spec.engine.max_num_seqs, int) \
            or spec.adaptation.mode is AdaptationMode.DISABLED:
        return  # a pin above it is refused (validation); Disabled never moves the cap
    warnings.append(
        f"spec.adaptation.minMaxNumSeqs {low} is above the planned max-num-seqs {seqs} "
        "(what the KV cache holds, within vLLM's default cap): the user's lower bound wins "
        f"over the planner's memory limit, so the adaptation sets the cap to {low} at once "
        "and never lowers it below, however often vLLM preempts. Fix: set "
        f"spec.adaptation.minMaxNumSeqs to at most {seqs}, or remove it (default 1)")


def _explain_rollout(ex: list[Explained], spec: LLMServiceSpec, gpus: int) -> None:
    """How a rollout replaces the pods (``spec.rollout``), and what one replica replaced in
    place costs: it serves nothing while its replacement starts."""
    surge = spec.rollout.max_surge
    if surge:
        value = f"surge {surge}"
        formula = (f"spec.rollout.maxSurge {surge}: {surge} replacement replica(s) start first "
                   f"(needing {surge * gpus} spare GPUs) and no replica stops before its "
                   "replacement serves")
    elif spec.replicas == 1:
        value = "in place (an outage)"
        formula = ("spec.replicas 1 and spec.rollout.maxSurge 0: every rollout (a tuning "
                   "result, an edit of the spec, a max-num-seqs change without the live "
                   "admission cap) stops serving until the new pod has downloaded and loaded "
                   f"the model; set spec.rollout.maxSurge: 1 if the cluster has {gpus} spare "
                   "GPUs for the replacement, or spec.replicas: 2")
    else:
        value = "in place, one replica at a time"
        formula = "spec.rollout.maxSurge 0: the other replicas serve while one is replaced"
    ex.append(Explained(name="rolloutStrategy", value=value, formula=formula,
                        source="pinned" if "max_surge" in spec.rollout.model_fields_set
                        else "planned",
                        inputs={"replicas": spec.replicas, "maxSurge": surge,
                                "drainSeconds": spec.rollout.drain_seconds}))


def _explain_startup(ex: list[Explained], spec: LLMServiceSpec, weights: int,
                     setting: str | None) -> StartupBudget:
    """The startup budget (:mod:`llm_operator.knowledge.startup`), explained."""
    budget = startup_budget(weights, spec.model.load_bandwidth, setting)
    ex.append(Explained(
        name="startupBudgetSeconds", value=budget.seconds, unit="seconds",
        formula=(f"{budget.base_seconds} s (engine start, CUDA graphs or torch.compile, KV "
                 f"allocation) + ceil(weight bytes / load bandwidth) = {budget.base_seconds} + "
                 f"{budget.load_seconds}: the startup probe's budget and the tuner's per "
                 "server start; set spec.model.loadBandwidth to the sustained read rate of "
                 "the storage the weights are on"),
        inputs={"weightBytes": weights, "loadBytesPerSecond": budget.load_bytes_per_second,
                "loadBandwidthFrom": budget.source},
        source="pinned" if budget.source == "spec.model.loadBandwidth" else "planned"))
    return budget


def _check_utilization(spec: LLMServiceSpec, plan: Plan, gpus_per_node: int,
                       read: ModelFacts | None = None) -> Plan:
    """A gpuMemoryUtilization below the default that multiplies the GPUs: say so, and
    refuse more than twice the GPUs unless the user pinned the count (a typo such as
    0.09 for 0.9 must not silently turn one GPU into sixteen)."""
    utilization = spec.engine.gpu_memory_utilization
    if utilization >= DEFAULT_GPU_MEMORY_UTILIZATION:
        return plan
    default_spec = spec.model_copy(update={"engine": spec.engine.model_copy(
        update={"gpu_memory_utilization": DEFAULT_GPU_MEMORY_UTILIZATION})})
    try:
        default_gpus = _make_plan(default_spec, gpus_per_node, read).gpus_per_replica
    except SpecError:
        return plan
    if plan.gpus_per_replica <= default_gpus:
        return plan
    said = (f"{utilization:g} leaves {human_bytes(plan.usable_bytes_per_gpu)} per GPU for "
            f"weights and KV cache: the replica needs {plan.gpus_per_replica} GPUs where the "
            f"default {DEFAULT_GPU_MEMORY_UTILIZATION:g} needs {default_gpus}")
    if plan.gpus_per_replica > 2 * default_gpus and not isinstance(spec.gpus.count, int):
        raise SpecError("spec.engine.gpuMemoryUtilization", said,
                        f"raise it (default {DEFAULT_GPU_MEMORY_UTILIZATION:g}), or pin "
                        f"spec.gpus.count: {plan.gpus_per_replica} to accept this")
    return plan.model_copy(update={"warnings": [*plan.warnings,
                                                f"gpuMemoryUtilization {said}"]})


def _explain_facts(ex: list[Explained], spec: LLMServiceSpec, facts: ModelFacts,
                   gpu: GPUFacts, dtype: str, dbytes: int, kvb: int, weights: int,
                   usable: int) -> None:
    engine = spec.engine
    ex.append(Explained(
        name="gpuMemoryBytes", value=gpu.memory_bytes, unit="bytes",
        formula="spec.gpus.memoryGib x 2^30" if spec.gpus.memory_gib else
        f"GPU table: {gpu.name} (nvidia-smi total)",
        inputs={"product": gpu.product}, source="pinned" if spec.gpus.memory_gib else "planned"))
    util_pinned = "gpu_memory_utilization" in engine.model_fields_set
    ex.append(Explained(
        name="usableBytesPerGpu", value=usable, unit="bytes",
        formula="memory x gpuMemoryUtilization - overhead (activations, CUDA graphs, NCCL)",
        inputs={"gpuMemoryBytes": gpu.memory_bytes,
                "gpuMemoryUtilization": engine.gpu_memory_utilization,
                "gpuMemoryUtilizationSource": "pinned" if util_pinned else "default",
                "overheadBytes": OVERHEAD_BYTES_PER_GPU}))
    quant = spec.model.quantization
    if facts.quantization is not None:
        if facts.weight_bytes:
            formula = ("the checkpoint's bytes: model.safetensors.index.json metadata.total_size "
                       f"({facts.quantization} weights, quantized by its publisher)")
        else:
            formula = ("estimated: the groups the checkpoint quantizes x its bytes per weight "
                       "+ the rest x dtype bytes (no safetensors index read)")
        inputs: dict[str, Any] = {
            "parameters": facts.parameters, "quantization": facts.quantization,
            "quantMethod": facts.quantization_method,
            "bytesPerQuantizedWeight": QUANT_BYTES_PER_WEIGHT[facts.quantization],
            "quantizedGroups": list(facts.quantized_groups), "dtype": dtype,
            "dtypeBytes": dbytes}
    elif quant == Quantization.NONE and facts.weight_bytes:
        formula = ("the checkpoint's bytes: model.safetensors.index.json metadata.total_size "
                   + ("(stored in the dtype vLLM serves, or config.json names none)"
                      if weights == facts.weight_bytes else
                      f"x {dbytes} / {DTYPE_BYTES.get(facts.dtype)} (stored in "
                      f"{facts.dtype}, served in {dtype})"))
        inputs = {"parameters": facts.parameters, "totalSize": facts.weight_bytes,
                  "checkpointDtype": facts.dtype, "dtype": dtype, "dtypeBytes": dbytes}
    elif quant == Quantization.NONE:
        formula = "parameters x dtype bytes"
        inputs = {"parameters": facts.parameters, "dtype": dtype, "dtypeBytes": dbytes}
    else:
        formula = ("(parameters - embeddings) x quantized bytes/param + embeddings x "
                   "dtype bytes")
        inputs = {"parameters": facts.parameters, "embeddings": facts.embedding_parameters,
                  "quantization": str(quant), "bytesPerParam": QUANT_BYTES_PER_PARAM[quant],
                  "dtype": dtype, "dtypeBytes": dbytes}
    inputs["modelFacts"] = facts.source
    ex.append(Explained(name="weightBytes", value=weights, unit="bytes", formula=formula,
                        inputs=inputs))
    ex.append(Explained(
        name="kvCacheDtypeBytes", value=kvb, unit="bytes",
        formula="1 for an fp8 KV cache, else the serving dtype's bytes",
        inputs={"kvCacheDtype": str(engine.kv_cache_dtype), "dtype": dtype},
        source="pinned" if engine.kv_cache_dtype != "auto" else "planned"))
    path = compute_path(facts, quant, gpu)
    weight_dtype = facts.quantization or str(quant)
    activations = (facts.activation_quantization if facts.quantization
                   else ("fp8" if quant == Quantization.FP8 else None))
    # A figure the GPU table lacks says why: a GPU given by its memory only has none; a
    # known GPU without FP8 or FP4 tensor cores has no such figure (catalog.GPUFacts).
    unknown = "unknown: spec.gpus.memoryGib gives memory only" if not gpu.source else None
    ex.append(Explained(
        name="computeFlops", value=path.flops if path.flops is not None else "unknown",
        unit="FLOP/s", formula=f"the GPU's dense {path.dtype} tensor-core FLOP/s: {path.why}",
        inputs={"gpu": gpu.product, "computeDtype": path.dtype,
                "computeCapability": gpu.compute_capability or unknown or "not in the table",
                "weights": weight_dtype,
                "activations": activations or ("not quantized" if weight_dtype == "none"
                                               else "not quantized (weight-only)"),
                "bf16Flops": gpu.bf16_flops or unknown or "not in the table",
                "fp8Flops": gpu.fp8_flops or unknown or "none: no fp8 tensor cores",
                "fp4Flops": gpu.fp4_flops or unknown or "none: no fp4 tensor cores",
                "source": gpu.source or "spec.gpus.memoryGib"}))


def _explain_parallelism(ex: list[Explained], warnings: list[str], spec: LLMServiceSpec,
                         need: _Need, fit: _Fit, ideal: bool, rejected: list[str],
                         concurrency: int) -> None:
    engine, facts = spec.engine, need.facts
    tp_pinned = isinstance(engine.tensor_parallel_size, int)
    pp_pinned = isinstance(engine.pipeline_parallel_size, int)
    count_pinned = isinstance(spec.gpus.count, int)
    aim = (f"holds the workload ({concurrency} requests, {need.ideal_tokens:,} KV tokens)"
           if ideal else f"holds one sequence of {need.hard_tokens:,} tokens")
    if not ideal and _tolerated(need, fit):
        aim = (f"holds {held_sequences(need, fit)} of the workload's {concurrency} requests, "
               "within the tolerance (see kvShortfall)")
    ex.append(Explained(
        name="tensorParallelSize", value=fit.tp, source="pinned" if tp_pinned else "planned",
        formula="pinned by the user" if tp_pinned else
        f"smallest TP dividing the {facts.num_attention_heads} attention heads "
        + ("(multi-head latent attention: one latent KV cache replicated on every rank, so "
           "no KV-head rule)" if facts.is_mla else f"({facts.num_key_value_heads} KV heads)")
        + f", at most {need.per_node} per node, "
        f"whose weights/(TP x PP) + KV reserve fit the usable memory: {aim}",
        inputs={"weightBytes": need.weights, "usableBytesPerGpu": need.usable,
                "reserveTokens": need.ideal_tokens if ideal else need.hard_tokens,
                "validSizes": valid_tensor_parallel_sizes(facts, need.per_node),
                "passedOver": rejected}))
    pp_formula = ("pinned by the user" if pp_pinned else
                  "1 when one node's GPUs hold the model; else the fewest stages (across "
                  "nodes) that do")
    if tp_pinned and not pp_pinned and fit.pp > 1:
        # With TP pinned, more memory can only come as pipeline stages, even on one node.
        pp_formula = ("tensorParallelSize is pinned, so more GPUs come as pipeline stages: "
                      "the fewest stages whose weights/(TP x PP) + KV reserve fit")
        if _nodes(fit, need.per_node) == 1:
            bigger = [t for t in valid_tensor_parallel_sizes(facts, need.per_node)
                      if t >= fit.gpus]
            alt = (f" (auto would consider TP={bigger[0]})" if bigger else "")
            warnings.append(
                f"tensorParallelSize is pinned at {fit.tp}, so the planner adds pipeline "
                f"stages for memory: {fit.pp} stages on one node ({fit.gpus} of its "
                f"{need.per_node} GPUs). Within a node a larger tensor-parallel size is "
                "usually faster (no pipeline bubbles, all-reduce over NVLink): leave "
                f"spec.engine.tensorParallelSize auto{alt}, or pin "
                "spec.engine.pipelineParallelSize if the stages are wanted")
    if count_pinned and not tp_pinned and not pp_pinned and fit.pp > 1 \
            and _nodes(fit, need.per_node) == 1:
        warnings.append(_count_warning(spec, need, fit))
    ex.append(Explained(
        name="pipelineParallelSize", value=fit.pp, source="pinned" if pp_pinned else "planned",
        formula=pp_formula,
        inputs={"numLayers": facts.num_layers, "gpusPerNode": need.per_node}))
    ex.append(Explained(
        name="gpus.count", value=fit.gpus, unit="GPUs",
        source="pinned" if count_pinned else "planned", formula="TP x PP",
        inputs={"tensorParallelSize": fit.tp, "pipelineParallelSize": fit.pp}))
    ex.append(Explained(
        name="nodesPerReplica", value=_nodes(fit, need.per_node),
        formula="ceil(TP x PP / gpus per node)",
        inputs={"gpus": fit.gpus, "gpusPerNode": need.per_node,
                "gpusPerNodeFrom": "spec.gpus.perNode" if spec.gpus.per_node
                else "LLMOP_GPUS_PER_NODE"}))
    if fit.tp > need.per_node:
        warnings.append(f"tensorParallelSize {fit.tp} spans nodes ({need.per_node} GPUs each): "
                        "tensor parallelism over the network is slow; prefer pipeline stages")
    ex.append(Explained(
        name="weightBytesPerGpu", value=fit.weights_per_gpu, unit="bytes",
        formula="weights / (TP x PP)",
        inputs={"weightBytes": need.weights, "tensorParallelSize": fit.tp,
                "pipelineParallelSize": fit.pp}))
    ex.append(_explain_kv(need, fit))


def _count_warning(spec: LLMServiceSpec, need: _Need, fit: _Fit) -> str:
    """Why a pinned ``spec.gpus.count`` that no valid tensor-parallel size divides into one
    node's GPUs as TP alone ends as pipeline stages on one node, and the fix."""
    facts, count = need.facts, fit.gpus
    sizes = valid_tensor_parallel_sizes(facts, need.per_node)
    auto = _choose_detail(need, _candidates(need, facts, spec.engine, None)).fit
    least = auto.gpus if auto is not None else None
    rule = (f"TP must divide its {facts.num_attention_heads} attention heads"
            + ("" if facts.is_mla else f" and suit its {facts.num_key_value_heads} KV heads"))
    fixes: list[str] = []
    near = [t for t in sizes if t != count and (least is None or t >= least)]
    if near:
        below = [t for t in near if t < count]
        above = [t for t in near if t > count]
        picks = ([below[-1]] if below else []) + ([above[0]] if above else [])
        fixes.append("set spec.gpus.count to " + " or ".join(map(str, picks))
                     + " (tensor parallel on one node)")
    if least is not None and least < count and count % least == 0:
        fixes.append(f"set spec.gpus.count to {least} with spec.replicas: "
                     f"{spec.replicas * count // least} (copies that each serve a share)")
    fixes.append("pin spec.engine.pipelineParallelSize if the stages are wanted")
    fits = ("" if least is None or least >= count else
            f" Left auto, spec.gpus.count would be {least} for this model and workload: the "
            "GPUs beyond it add KV cache, not speed.")
    return (f"spec.gpus.count {count} is not a tensor-parallel size this model allows ({rule}: "
            f"{', '.join(map(str, sizes))}), so the planner runs TP {fit.tp} x PP {fit.pp}: "
            f"{fit.pp} pipeline stages on one node. Each step passes the stages in turn, so "
            "within a node pipeline stages are slower than tensor parallelism (bubbles while "
            f"a stage waits for the one before it, no all-reduce over NVLink).{fits} Fix: "
            + "; or ".join(fixes))


def _explain_kv(need: _Need, fit: _Fit) -> Explained:
    """kvBytesPerToken, with the formula of the model's layer types."""
    facts = need.facts
    inputs: dict[str, Any] = {"numLayers": facts.num_layers, "pipelineParallelSize": fit.pp,
                              "tensorParallelSize": fit.tp, "kvBytes": need.kv_bytes}
    if facts.mla_kv_dim is not None:
        formula = ("multi-head latent attention: ceil(layers / PP) x (kv_lora_rank + "
                   "qk_rope_head_dim) x kv bytes per GPU; the latent cache is replicated on "
                   "every TP rank (vLLM's MLAAttentionSpec), so TP does not divide it")
        inputs["mlaKvDim"] = facts.mla_kv_dim
    else:
        formula = "2 x ceil(layers / PP) x ceil(kv_heads / TP) x head_dim x kv bytes (per GPU)"
        inputs.update(numKeyValueHeads=facts.num_key_value_heads, headDim=facts.head_dim)
        if facts.v_head_dim:  # MiMo-V2: K and V of different head sizes
            formula = ("ceil(layers / PP) x ceil(kv_heads / TP) x (head_dim + v_head_dim) x "
                       "kv bytes (per GPU)")
            inputs["vHeadDim"] = facts.v_head_dim
    if facts.full_attention_head_dim or facts.full_attention_kv_heads:
        inputs.update(fullAttentionHeadDim=facts.full_head_dim,
                      fullAttentionKeyValueHeads=facts.full_kv_heads)
    if facts.full_attention_layers is not None:
        inputs["fullAttentionLayers"] = facts.full_attention_layers
        formula = formula.replace("layers", "full-attention layers", 1)
    if facts.sliding_window_layers or facts.state_layers:
        per_seq = kv_bytes_per_sequence(facts, fit.tp, fit.pp, need.kv_bytes, need.seq_tokens,
                                        need.state_bytes, need.conv_bytes)
        formula += (" + (estimated) per-sequence bytes over the request's tokens: "
                    "sliding-window layers hold min(tokens, window + 16), linear-attention "
                    "and Mamba layers a fixed state / TP")
        inputs.update(slidingWindowLayers=facts.sliding_window_layers,
                      slidingWindow=facts.sliding_window, stateLayers=facts.state_layers,
                      stateKind=facts.state_kind, stateBytes=need.state_bytes,
                      stateElementsPerLayer=facts.state_elements_per_layer,
                      sequenceTokens=need.seq_tokens, bytesPerSequence=per_seq)
    if facts.compressed_kv_bytes_per_token or facts.window_kv_bytes_per_sequence:
        formula = ("DeepSeek-V4 compressed attention (vLLM's fp8_ds_mla caches, the same on "
                   "every TP rank): compressed and indexer caches a token / PP + window "
                   "caches (sliding window, compressor states) a sequence / PP over the "
                   "request's tokens")
        inputs.update(compressedBytesPerToken=facts.compressed_kv_bytes_per_token,
                      windowBytesPerSequence=facts.window_kv_bytes_per_sequence,
                      sequenceTokens=need.seq_tokens)
    if fit.dcp > 1:
        formula += (f"; split by tokens over {fit.dcp} decode context parallel ranks (each "
                    f"keeps one token in {fit.dcp}; vLLM's dcp_sharded AttentionSpec)")
        inputs.update(decodeContextParallelSize=fit.dcp,
                      kvBytesPerTokenWithoutDcp=fit.kv_per_token_whole)
    inputs["modelFacts"] = facts.source
    return Explained(name="kvBytesPerToken", value=fit.kv_per_token, unit="bytes",
                     formula=formula, inputs=inputs)


def _explain_dcp(ex: list[Explained], spec: LLMServiceSpec, need: _Need, fit: _Fit) -> None:
    """decodeContextParallelSize, where it is not 1 or vLLM would take another size."""
    sizes = decode_context_parallel_sizes(need.facts, fit.tp)
    pinned = isinstance(spec.engine.decode_context_parallel_size, int)
    if fit.dcp == 1 and len(sizes) == 1 and not pinned:
        return
    one = _fit_at(need, fit.tp, fit.pp, 1)
    if pinned:
        formula = "pinned by the user"
    elif not dcp_plannable(need.facts):
        formula = ("1: the planner splits only caches of full or latent attention in every "
                   "layer (this model has sliding-window, linear-attention/Mamba or "
                   "compressed layers); pin it to use another size vLLM takes")
    elif fit.dcp == 1:
        formula = ("1: one copy of the KV cache on every TP rank holds the workload (vLLM's "
                   "advice: add decode context parallelism to reduce that duplication where "
                   "the KV cache is short; it costs communication in every decode step)")
    else:
        formula = (f"the smallest size vLLM takes at TP={fit.tp} ({sizes}) whose KV cache "
                   "holds the workload, else the largest: each TP rank would otherwise hold "
                   "a copy of every token's KV"
                   + (" (multi-head latent attention: one latent head)" if need.facts.is_mla
                      else f" ({need.facts.num_key_value_heads} KV heads on {fit.tp} ranks)"))
    ex.append(Explained(
        name="decodeContextParallelSize", value=fit.dcp,
        source="pinned" if pinned else "planned", formula=formula,
        inputs={"validSizes": sizes, "tensorParallelSize": fit.tp,
                "kvTokensWithoutDcp": one.capacity, "kvTokens": fit.capacity,
                "heldSequencesWithoutDcp": min(held_sequences(need, one), need.concurrency),
                "heldSequences": min(held_sequences(need, fit), need.concurrency),
                "concurrency": need.concurrency,
                "source": "vllm/config/model.py ModelConfig.verify_with_parallel_config; "
                          "docs/serving/context_parallel_deployment.md"}))


def _explain_alternatives(ex: list[Explained], warnings: list[str], spec: LLMServiceSpec,
                          need: _Need, choice: _Choice) -> None:
    """The TP option not taken and what it would serve (see :data:`KV_SHORTFALL_FLOOR`)."""
    fit = choice.fit
    if fit is None or need.concurrency <= 0:
        return
    rule = (f"fewer GPUs win when their KV cache holds >= {KV_SHORTFALL_FLOOR:.0%} of the "
            "concurrent sequences and the queue wait of the rest, bounded by (C - held) / "
            "held x outputTokens x itlP95 objective, is within the ttftP95 objective")
    wl = spec.workload
    if choice.tolerated_over is not None:
        held = held_sequences(need, fit)
        wait = queue_wait_bound_s(need, held)
        big = choice.tolerated_over
        text = (f"{_serves(need, fit)}: chosen over TP={big.tp}"
                + (f" PP={big.pp}" if big.pp > 1 else "")
                + f" ({big.gpus} GPUs, all {need.concurrency}); at peak "
                f"{need.concurrency - held} request(s) wait for a running one, at most "
                f"~{wait:.1f} s by the SLO ({wl.slo.itl_p95_ms:g} ms ITL x "
                f"{wl.output_tokens} tokens), within the {wl.slo.ttft_p95_ms:g} ms TTFT "
                "objective")
        ex.append(Explained(name="kvShortfall", value=f"{held} of {need.concurrency}",
                            unit="sequences", formula=rule,
                            inputs={"heldSequences": held, "concurrency": need.concurrency,
                                    "queueWaitBoundSeconds": round(wait, 3),
                                    "ttftObjectiveSeconds": need.ttft_s,
                                    "floor": KV_SHORTFALL_FLOOR, "chosen": text,
                                    "alternative": _serves(need, big),
                                    "alternativeTensorParallelSize": big.tp,
                                    "alternativePipelineParallelSize": big.pp}))
        pin = ("spec.engine.tensorParallelSize" if big.pp == 1 else "spec.gpus.count")
        value = big.tp if big.pp == 1 else big.gpus
        warnings.append(f"{text}; to hold every sequence set {pin}: {value}")
    elif choice.cheaper is not None:
        small = choice.cheaper
        held = held_sequences(need, small)
        wait = queue_wait_bound_s(need, held)
        why = (f"below the {KV_SHORTFALL_FLOOR:.0%} floor"
               if held < math.ceil(KV_SHORTFALL_FLOOR * need.concurrency) else
               f"its queue wait bound ~{wait:.1f} s exceeds the {wl.slo.ttft_p95_ms:g} ms "
               "TTFT objective")
        ex.append(Explained(name="cheaperOption", value=f"{min(held, need.concurrency)} of "
                            f"{need.concurrency}", unit="sequences", formula=rule,
                            inputs={"option": _serves(need, small), "heldSequences": held,
                                    "concurrency": need.concurrency, "notChosen": why,
                                    "queueWaitBoundSeconds": round(min(wait, 1e9), 3),
                                    "alternativeTensorParallelSize": small.tp,
                                    "alternativePipelineParallelSize": small.pp}))

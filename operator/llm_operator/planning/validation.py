"""Validation (pure): what the spec contradicts, user pins vLLM would refuse or the plan
cannot honour, and GPUs too small for the model; each a :class:`SpecError` naming the
field and the fix.
"""

from __future__ import annotations

from ..api.errors import SpecError, SpecErrors
from ..api.models import (
    AdaptationMode,
    LLMServiceSpec,
    Quantization,
    TuningPlacement,
)
from ..knowledge.catalog import (
    GPUFacts,
    ModelFacts,
    gpu_products,
    lookup_gpu,
)
from ..knowledge.extra_args import check_extra_args
from ..knowledge.modelfacts import CATALOG, CONFIG_JSON
from .memory import human_bytes, usable_bytes_per_gpu
from .parallelism import _choose, _evaluate, _Need, valid_tensor_parallel_sizes


def managed_flag_errors(spec: LLMServiceSpec) -> list[SpecError]:
    """One :class:`SpecError` per ``spec.engine.extraArgs`` item that vLLM would read as a
    flag the operator manages or one that invalidates the plan, or would refuse at start
    (see :mod:`llm_operator.knowledge.extra_args`: items are resolved as vLLM's parser resolves
    them, prefixes and ``=`` forms included).

    A managed flag is rejected whether or not the matching field is pinned: the renderer
    passes the field's value itself, and a second copy of the flag (argparse keeps the
    last) would silently defeat the plan, a pin, tuning or adaptation.
    """
    return check_extra_args(spec)[0]


# --------------------------------------------------------------------------- validation

# Extended-resource domains of other GPU vendors' device plugins: a pod asking for them
# never lands on the NVIDIA GPUs spec.gpus.product names.
OTHER_VENDOR_RESOURCES = {"amd.com": "AMD", "gpu.intel.com": "Intel", "habana.ai": "Intel Gaudi"}


def contradictions(spec: LLMServiceSpec) -> list[SpecError]:
    """Settings that each make sense alone and contradict each other (pure)."""
    errors: list[SpecError] = []
    tuning, adaptation, engine = spec.tuning, spec.adaptation, spec.engine
    if (tuning.priority_class_name is not None
            and tuning.placement is TuningPlacement.BORROW_REPLICA):
        errors.append(SpecError(
            "spec.tuning.priorityClassName",
            f"{tuning.priority_class_name!r} is never used with spec.tuning.placement "
            "BorrowReplica: the Job runs on the GPUs a replica lends it, at the service's "
            "own priority (spec.scheduling.priorityClassName)",
            "remove it, or set spec.tuning.placement: Spare (extra GPUs at that priority)"))
    pinned = engine.max_num_seqs if isinstance(engine.max_num_seqs, int) else None
    if pinned is not None and adaptation.mode is not AdaptationMode.DISABLED:
        if adaptation.min_max_num_seqs > pinned:
            errors.append(SpecError(
                "spec.adaptation.minMaxNumSeqs",
                f"{adaptation.min_max_num_seqs} is above the pinned spec.engine.maxNumSeqs "
                f"{pinned}: a pin is never moved, so the bound can never hold",
                "remove spec.engine.maxNumSeqs to let the adaptation move the cap within "
                "its bounds, or lower spec.adaptation.minMaxNumSeqs"))
        if isinstance(adaptation.max_max_num_seqs, int) and adaptation.max_max_num_seqs < pinned:
            errors.append(SpecError(
                "spec.adaptation.maxMaxNumSeqs",
                f"{adaptation.max_max_num_seqs} is below the pinned spec.engine.maxNumSeqs "
                f"{pinned}: a pin is never moved, so the bound can never hold",
                "remove spec.engine.maxNumSeqs to let the adaptation move the cap within "
                "its bounds, or raise spec.adaptation.maxMaxNumSeqs"))
    batched = engine.max_num_batched_tokens
    if (pinned is None and isinstance(batched, int)
            and adaptation.mode is AdaptationMode.APPLY
            and adaptation.min_max_num_seqs > batched):
        errors.append(SpecError(
            "spec.adaptation.minMaxNumSeqs",
            f"{adaptation.min_max_num_seqs} is above the pinned "
            f"spec.engine.maxNumBatchedTokens {batched}: vLLM refuses to start with more "
            "sequences than batched tokens, and the adaptation would set at least that many",
            f"lower it to at most {batched}, or raise spec.engine.maxNumBatchedTokens"))
    if spec.model.revision is not None and spec.model.volume is not None:
        errors.append(SpecError(
            "spec.model.revision",
            f"{spec.model.revision!r} picks a revision to download from the hub, and the "
            "model is read from spec.model.volume, as the volume holds it: the revision "
            "would be ignored", "remove spec.model.revision, or remove spec.model.volume to "
            "download that revision"))
    namespace_bound = {"system-node-critical", "system-cluster-critical"}
    for field, name in (("spec.scheduling.priorityClassName",
                         spec.scheduling.priority_class_name),
                        ("spec.tuning.priorityClassName", tuning.priority_class_name)):
        if name in namespace_bound:
            errors.append(SpecError(
                field, f"{name!r} is for the cluster's own components: the API server admits "
                "pods with it only in kube-system (by default), so no pod would be created",
                "use a PriorityClass of your own (kubectl get priorityclasses)"))
    resource = spec.gpus.resource_name or ""
    vendor = OTHER_VENDOR_RESOURCES.get(resource.partition("/")[0])
    if vendor and spec.gpus.product and lookup_gpu(spec.gpus.product) is not None:
        errors.append(SpecError(
            "spec.gpus.resourceName",
            f"{resource!r} requests {vendor} GPUs, while spec.gpus.product "
            f"{spec.gpus.product!r} is an NVIDIA GPU: no node offers both, and the plan "
            "is for the NVIDIA one", "remove spec.gpus.resourceName (the GPU class gives "
            "nvidia.com/gpu), or describe the GPU you have with spec.gpus.memoryGib "
            "instead of spec.gpus.product"))
    return errors


# spec.model.quantization values that name the method a checkpoint was quantized with
# (vLLM refuses a --quantization that differs from the checkpoint's quantization_config).
_SPEC_QUANT_MATCHES: dict[Quantization, tuple[str, ...]] = {
    Quantization.FP8: ("fp8",),
    Quantization.AWQ: ("awq", "awq_marlin"),
    Quantization.GPTQ: ("gptq", "gptq_marlin"),
}


def _checkpoint_quantization_errors(spec: LLMServiceSpec, facts: ModelFacts) -> list[SpecError]:
    """spec.model.quantization against a checkpoint its publisher quantized (config.json's
    quantization_config): vLLM refuses a different method at start."""
    quant = spec.model.quantization
    if (facts.quantization is None and facts.source == CONFIG_JSON
            and quant in (Quantization.AWQ, Quantization.GPTQ)):
        return [SpecError(
            "spec.model.quantization",
            f"{quant.value} needs a checkpoint quantized with it, and {spec.model.name}'s "
            "config.json has no quantization_config: vLLM refuses to start",
            "name the quantized checkpoint (e.g. an ...-AWQ repository), or use fp8, which "
            "vLLM applies to an unquantized checkpoint as it loads it")]
    if facts.quantization is None or quant == Quantization.NONE:
        return []
    method = (facts.quantization_method or "").lower()
    if method in _SPEC_QUANT_MATCHES.get(quant, ()) or (
            quant == Quantization.FP8 and facts.quantization == "fp8"):
        return []
    return [SpecError(
        "spec.model.quantization",
        f"{quant.value} differs from the checkpoint's own quantization "
        f"({facts.quantization_method}, {facts.quantization} weights, from "
        f"{facts.source_of('quantization')}): vLLM refuses a --quantization other than the "
        "checkpoint's", "remove spec.model.quantization (vLLM reads the checkpoint's), or "
        "name an unquantized checkpoint")]


def _pin_errors(spec: LLMServiceSpec, facts: ModelFacts,
                tokens_per_request: int, per_node: int) -> list[SpecError]:
    """Pins that cannot be served, whatever the GPUs."""
    engine, errors = spec.engine, managed_flag_errors(spec)
    errors += _checkpoint_quantization_errors(spec, facts)
    if (spec.model.quantization in (Quantization.AWQ, Quantization.GPTQ)
            and facts.source == CATALOG and spec.model.volume is None):
        # The catalog's ids are the publishers' unquantized checkpoints: vLLM finds no
        # quantization config in them and exits at start.
        errors.append(SpecError(
            "spec.model.quantization",
            f"{spec.model.quantization.value} needs a checkpoint quantized with it, and "
            f"{spec.model.name} (from the built-in catalog) is not one: vLLM refuses to "
            "start", "name the quantized checkpoint (e.g. an ...-AWQ repository) with "
            "spec.model.architecture from its config.json, or use fp8, which vLLM applies "
            "to an unquantized checkpoint as it loads it"))
    tp, pp, count = (engine.tensor_parallel_size, engine.pipeline_parallel_size, spec.gpus.count)
    valid = valid_tensor_parallel_sizes(facts, facts.num_attention_heads)
    if isinstance(tp, int) and tp not in valid:
        errors.append(SpecError(
            "spec.engine.tensorParallelSize",
            f"{tp} does not divide the model's {facts.num_attention_heads} attention heads"
            + (" (multi-head latent attention: the latent KV cache is replicated on every "
               "rank, so only the heads constrain TP)" if facts.is_mla else
               f" (with {facts.num_key_value_heads} KV heads, which vLLM needs to divide TP "
               "or be divided by it)"),
            "use one of: " + ", ".join(map(str, valid)) + ", or leave it auto"))
    if isinstance(pp, int) and pp > facts.num_layers:
        errors.append(SpecError(
            "spec.engine.pipelineParallelSize",
            f"{pp} stages exceed the model's {facts.num_layers} layers",
            f"use at most {facts.num_layers}, or leave it auto"))
    if isinstance(count, int):
        if isinstance(tp, int) and isinstance(pp, int) and tp * pp != count:
            errors.append(SpecError(
                "spec.gpus.count", f"{count} GPUs but tensorParallelSize x pipelineParallelSize "
                f"= {tp} x {pp} = {tp * pp}",
                f"set spec.gpus.count to {tp * pp} or auto (auto = TP x PP)"))
        elif isinstance(tp, int) and count % tp:
            errors.append(SpecError(
                "spec.gpus.count", f"{count} GPUs is not a multiple of tensorParallelSize {tp}",
                f"set spec.gpus.count to a multiple of {tp}, or auto"))
        elif isinstance(pp, int) and (count % pp or count // pp not in valid):
            errors.append(SpecError(
                "spec.gpus.count",
                f"{count} GPUs over {pp} pipeline stages gives no valid tensor-parallel size",
                f"set spec.gpus.count to {pp} x one of {valid}, or auto"))
        elif not isinstance(tp, int) and not isinstance(pp, int) and not any(
                count % t == 0 and count // t <= facts.num_layers
                for t in valid_tensor_parallel_sizes(facts, per_node)):
            errors.append(SpecError(
                "spec.gpus.count",
                f"{count} GPUs cannot be split into TP x PP for this model (TP in "
                f"{valid_tensor_parallel_sizes(facts, per_node)}, PP at most "
                f"{facts.num_layers} layers)",
                "set spec.gpus.count to TP x PP with such sizes, or auto"))
    if isinstance(engine.max_model_len, int):
        if engine.max_model_len > facts.max_context:
            errors.append(SpecError(
                "spec.engine.maxModelLen",
                f"{engine.max_model_len:,} is beyond the model's context of "
                f"{facts.max_context:,} tokens",
                f"set it to at most {facts.max_context}, or leave it auto"))
        elif engine.max_model_len < tokens_per_request:
            errors.append(SpecError(
                "spec.engine.maxModelLen",
                f"{engine.max_model_len:,} is shorter than one request of the workload "
                f"({tokens_per_request:,} = inputTokens + outputTokens)",
                f"raise it to at least {tokens_per_request}, or lower "
                "spec.workload.inputTokens/outputTokens"))
    elif tokens_per_request > facts.max_context:
        errors.append(SpecError(
            "spec.workload.inputTokens",
            f"inputTokens + outputTokens = {tokens_per_request:,} exceeds the model's context "
            f"of {facts.max_context:,} tokens",
            f"lower spec.workload.inputTokens/outputTokens to at most {facts.max_context} "
            "together"))
    return errors


def _raise(errors: list[SpecError]) -> None:
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)


def _too_small(spec: LLMServiceSpec, need: _Need, gpu: GPUFacts,
               cands: list[tuple[int, int]], rejected: list[str]) -> SpecError:
    """The error for GPUs that cannot hold the weights plus one sequence, with what would."""
    engine = spec.engine
    auto_need = _Need(need.facts, need.weights, need.kv_bytes, need.usable, need.hard_tokens,
                      need.hard_tokens, need.per_node, seq_tokens=need.seq_tokens,
                      state_bytes=need.state_bytes, conv_bytes=need.conv_bytes)
    tps = valid_tensor_parallel_sizes(need.facts, need.per_node)
    auto = _choose(auto_need, [(t, 1) for t in tps] + [(tps[-1], p) for p in
                                                        range(2, need.facts.num_layers + 1)])[0]
    gpus_hint = (f"{auto.gpus} GPUs of this product (TP={auto.tp}, PP={auto.pp})"
                 if auto else "no count of this product")
    bigger = []
    for product in gpu_products():
        other = lookup_gpu(product)
        if other is None or other.memory_bytes <= gpu.memory_bytes:
            continue
        trial = _Need(need.facts, need.weights, need.kv_bytes,
                      usable_bytes_per_gpu(other, engine.gpu_memory_utilization),
                      need.hard_tokens, need.hard_tokens, need.per_node,
                      seq_tokens=need.seq_tokens, state_bytes=need.state_bytes,
                      conv_bytes=need.conv_bytes)
        if _choose(trial, cands)[0] is not None:
            bigger.append(product)
    fits = [_evaluate(need, tp, pp) for tp, pp in cands]
    best = max(fits, key=lambda f: f.usable_tokens, default=None)
    if isinstance(engine.max_model_len, int) and best is not None and best.usable_tokens > 0:
        return SpecError(
            "spec.engine.maxModelLen",
            f"one sequence of {need.hard_tokens:,} tokens needs "
            f"{human_bytes(need.hard_tokens * best.kv_per_token)} of KV cache per GPU, but "
            f"{human_bytes(best.kv_budget)} is left after the weights (TP={best.tp}, PP={best.pp})",
            f"lower it to at most {best.usable_tokens}, or use {gpus_hint}"
            + (" or a larger GPU: " + ", ".join(bigger) if bigger else ""))
    if isinstance(spec.gpus.count, int):
        field = "spec.gpus.count"
    elif isinstance(engine.tensor_parallel_size, int):
        field = "spec.engine.tensorParallelSize"
    elif isinstance(engine.pipeline_parallel_size, int):
        field = "spec.engine.pipelineParallelSize"
    else:
        field = "spec.gpus.memoryGib" if spec.gpus.memory_gib else "spec.gpus.product"
    largest = max(cands, key=lambda c: c[0] * c[1]) if cands else (1, 1)
    problem = (f"{gpu.name} GPUs are too small: weights {human_bytes(need.weights)} plus KV "
               f"for one sequence of {need.hard_tokens:,} tokens do not fit even on "
               f"{largest[0] * largest[1]} GPU(s) (usable {human_bytes(need.usable)} each: "
               + "; ".join(rejected[-2:]) + ")")
    fix = f"use {gpus_hint}"
    if bigger:
        fix += " or a larger GPU: " + ", ".join(bigger)
    fix += "; or quantize (spec.model.quantization) or lower spec.engine.maxModelLen"
    return SpecError(field, problem, fix)

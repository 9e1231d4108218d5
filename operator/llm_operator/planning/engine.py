"""Engine settings (pure): max-model-len, max-num-seqs and batched tokens as planned, and
the ``vllm serve`` flags the spec and the plan decide, checked against vLLM's start-up
rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..api.constants import GIB
from ..api.errors import SpecError
from ..api.models import (
    EngineSpec,
    LLMServiceSpec,
    Quantization,
)
from ..knowledge.catalog import (
    GPUFacts,
    ModelFacts,
)
from ..knowledge.engine_rules import (
    VLLM_VERSION,
    Defaults,
    EngineSettings,
    ModelShape,
    flag_words,
    refusals,
)
from ..knowledge.extra_args import MANAGED_FLAGS, flag_table
from ..knowledge.modelfacts import CATALOG, CONFIG_JSON
from .facts import gpu_facts, model_facts
from .memory import BLOCK_SIZE, NULL_BLOCKS, human_bytes
from .parallelism import _Fit
from .types import Explained, Plan

# maxModelLen is planned with a margin below the predicted KV space for requests: the
# capacity is a prediction (the overhead estimate above is a middle value of 1-4 GiB),
# and vLLM refuses to start when maxModelLen exceeds what its memory profile finds.
MODEL_LEN_MARGIN = 0.9


VLLM_BATCH_DEFAULTS_SOURCE = (
    "vLLM EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py, read in vLLM 0.32.0): "
    "OpenAI server default max_num_seqs = 1024 on GPUs with >= 160 GiB, or >= 70 GiB "
    "and not an A100; 256 otherwise"
)


def vllm_default_max_num_seqs(gpu: GPUFacts) -> int:
    """vLLM's own default ``--max-num-seqs`` for the OpenAI server on this GPU (see
    :data:`VLLM_BATCH_DEFAULTS_SOURCE`): the planner never goes above it."""
    name = f"{gpu.product} {gpu.name}".lower()
    if gpu.memory_bytes >= 160 * GIB or (gpu.memory_bytes >= 70 * GIB and "a100" not in name):
        return 1024
    return 256


def vllm_default_max_num_batched_tokens(gpu: GPUFacts) -> int:
    """vLLM's own default ``--max-num-batched-tokens`` for the OpenAI server on this GPU
    (see :data:`VLLM_BATCH_DEFAULTS_SOURCE`; before the raise to maxModelLen that vLLM
    applies when chunked prefill is off)."""
    name = f"{gpu.product} {gpu.name}".lower()
    if gpu.memory_bytes >= 160 * GIB:
        return 16384
    if gpu.memory_bytes >= 70 * GIB and "a100" not in name:
        return 8192
    return 2048


def _plan_max_model_len(ex: list[Explained], warnings: list[str], facts: ModelFacts,
                        pinned: int | None, fit: _Fit, tokens_per_request: int = 0) -> int:
    inputs = {"maxContext": facts.max_context, "kvTokenCapacity": fit.capacity,
              "nullBlockTokens": NULL_BLOCKS * fit.block, "requestTokens": fit.usable_tokens,
              "margin": MODEL_LEN_MARGIN}
    if pinned is not None:
        ex.append(Explained(name="maxModelLen", value=pinned, unit="tokens", source="pinned",
                            formula="pinned by the user (<= model context, fits the KV cache)",
                            inputs=inputs))
        return pinned
    room = int(fit.usable_tokens * MODEL_LEN_MARGIN) // BLOCK_SIZE * BLOCK_SIZE
    value = min(facts.max_context, max(room, min(tokens_per_request, fit.usable_tokens)))
    ex.append(Explained(
        name="maxModelLen", value=value, unit="tokens",
        formula=f"min(model context, {MODEL_LEN_MARGIN:.0%} of (KV token capacity - vLLM's "
        "null block) in whole 16-token blocks): the margin covers the error of the predicted "
        "capacity (vLLM refuses to start when maxModelLen exceeds what its profile finds)",
        inputs=inputs))
    if value < facts.max_context:
        warnings.append(
            f"maxModelLen lowered from the model's context {facts.max_context:,} to "
            f"{value:,} ({MODEL_LEN_MARGIN:.0%} of the {fit.usable_tokens:,} KV tokens "
            "predicted for requests, a margin for the prediction): one sequence of the full "
            f"context needs {human_bytes(facts.max_context * fit.kv_per_token)} of KV cache "
            f"per GPU, {human_bytes(fit.kv_budget)} is left after the weights; pin "
            "spec.engine.maxModelLen to accept this, or give the replica more GPUs "
            "(spec.gpus.count) or a larger spec.gpus.product for the full context")
    return value


def _plan_max_num_seqs(ex: list[Explained], warnings: list[str], adjusted: list[str],
                       spec: LLMServiceSpec, gpu: GPUFacts, fit: _Fit, concurrency: int,
                       tokens_per_request: int) -> tuple[int, int, int]:
    engine = spec.engine
    blocks = fit.usable_tokens // fit.block
    blocks_per_request = math.ceil(tokens_per_request / fit.block)
    mem_seqs = max(1, blocks // blocks_per_request)
    cap = vllm_default_max_num_seqs(gpu)
    inputs: dict[str, Any] = {
        "kvBlocksForRequests": blocks, "blocksPerRequest": blocks_per_request,
        "tokensPerRequest": tokens_per_request, "memorySupports": mem_seqs,
        "vllmDefaultCap": cap, "capSource": VLLM_BATCH_DEFAULTS_SOURCE,
        "workloadConcurrencyPerReplica": concurrency}
    if isinstance(engine.max_num_seqs, int):
        if engine.max_num_seqs > mem_seqs:
            warnings.append(
                f"pinned maxNumSeqs {engine.max_num_seqs} exceeds the {mem_seqs} requests of "
                f"{tokens_per_request:,} tokens the KV cache holds: expect preemptions")
        ex.append(Explained(name="maxNumSeqs", value=engine.max_num_seqs, source="pinned",
                            formula="pinned by the user", inputs=inputs))
        return engine.max_num_seqs, mem_seqs, cap
    value = min(mem_seqs, cap)
    formula = (f"min(max(1, floor((KV blocks - null block) / ceil((input + output) / "
               f"{fit.block}))), vLLM default cap)")
    if fit.dcp > 1:
        formula += (f"; a block is {BLOCK_SIZE} tokens on each of the {fit.dcp} decode "
                    "context parallel ranks")
    batched = engine.max_num_batched_tokens
    if isinstance(batched, int) and batched < value:
        adjusted.append(
            f"maxNumSeqs planned at {batched}, the pinned spec.engine.maxNumBatchedTokens, "
            f"instead of {value}: vLLM refuses to start with more sequences than batched "
            "tokens (SchedulerConfig.verify_max_model_len); raise maxNumBatchedTokens for "
            "more concurrent sequences")
        value = batched
        formula += ", at most the pinned maxNumBatchedTokens"
        inputs["maxNumBatchedTokens"] = batched
    ex.append(Explained(name="maxNumSeqs", value=value, formula=formula, inputs=inputs))
    return value, mem_seqs, cap


def _plan_batched_tokens(ex: list[Explained], adjusted: list[str], spec: LLMServiceSpec,
                         seqs: int, max_model_len: int) -> int | None:
    engine = spec.engine
    batched = engine.max_num_batched_tokens
    if not isinstance(batched, int):
        default = vllm_default_max_num_batched_tokens(gpu_facts(spec))
        if engine.enable_chunked_prefill is False:
            default = max(default, max_model_len)
        inputs: dict[str, Any] = {"vllmDefault": default, "maxNumSeqs": seqs,
                                  "source": "vllm/engine/arg_utils.py get_batch_defaults"}
        if seqs > default:
            # vLLM refuses max_num_batched_tokens < max_num_seqs at start, and its default
            # does not follow a large max_num_seqs: left alone, the engine would exit.
            adjusted.append(
                f"maxNumBatchedTokens set to {seqs} (maxNumSeqs) instead of vLLM's default "
                f"{default} for this GPU: vLLM refuses to start with fewer batched tokens "
                "than sequences (SchedulerConfig.verify_max_model_len); pin "
                "spec.engine.maxNumBatchedTokens to choose another value")
            ex.append(Explained(name="maxNumBatchedTokens", value=seqs, inputs=inputs,
                                formula="raised to maxNumSeqs: vLLM's default here is "
                                f"{default}, and vLLM refuses fewer batched tokens than "
                                "sequences"))
            return seqs
        ex.append(Explained(name="maxNumBatchedTokens", value="vLLM default", inputs=inputs,
                            formula=f"left to vLLM ({default} here: 2048, 8192 on >= 70 GiB "
                            "GPUs other than A100, 16384 on >= 160 GiB; raised to maxModelLen "
                            "without chunked prefill)"))
        return None
    # Whether vLLM takes it with the rest (at least maxNumSeqs; at least maxModelLen
    # without chunked prefill) is checked with every other start-up rule (engine_rules).
    ex.append(Explained(name="maxNumBatchedTokens", value=batched, source="pinned",
                        formula="pinned by the user (>= maxNumSeqs)",
                        inputs={"maxNumSeqs": seqs}))
    return batched


# --------------------------------------------------------------------------- engine
# The flags of ``vllm serve`` that the spec and the plan decide, in the renderer's order
# (rendering.vllm_args.build_vllm_flags puts the endpoint flags before them and the drain flag and
# spec.engine.extraArgs after), and vLLM's start-up rules checked on them with the
# extraArgs: one list, so what is checked is what the pod runs.

# Engine settings that tuning and adaptation move, by their spec name.
# They apply only where the user left the field to "auto": a pin always wins.
OVERRIDABLE: dict[str, str] = {
    "maxNumSeqs": "max_num_seqs",
    "maxNumBatchedTokens": "max_num_batched_tokens",
}

# A replica over several nodes runs on vLLM's own multiprocessing executor across nodes
# (vLLM's docs/serving/parallelism_scaling.md, "Running vLLM with MultiProcessing"; no
# Ray in the image, and the same on vLLM's CPU build, which refuses Ray): every node runs
# ``vllm serve`` with the same arguments plus these, then its rank (0 serves the API, the
# others run --headless) and the leader's address, which only the pod knows
# (rendering.leaderworkerset).


def multi_node_flags(plan: Plan) -> tuple[str, ...]:
    """What every node of a multi-node replica adds after every other argument."""
    return ("--distributed-executor-backend", "mp", "--nnodes", str(plan.nodes_per_replica))


def effective_engine_value(
    engine: EngineSpec, key: str, planned: int | None, overrides: Mapping[str, int] | None
) -> tuple[int | None, str]:
    """The value of an overridable engine setting and where it came from.

    Precedence: the user's pin (``pinned``), then a tuned/adapted override
    (``override``), then the plan (``planned``; None leaves vLLM's default).
    """
    pinned = getattr(engine, OVERRIDABLE[key])
    if isinstance(pinned, int):
        return pinned, "pinned"
    if overrides and key in overrides:
        return int(overrides[key]), "override"
    return planned, "planned"


@dataclass(frozen=True)
class EngineFlag:
    """One flag of ``vllm serve`` with its value, the spec field that owns it, and where
    the value came from: ``pinned`` (the field), ``planned``, ``override`` (tuned or
    adapted), ``adjusted`` (``why`` says how) or ``operator``."""

    items: tuple[str, ...]
    field: str
    source: str
    why: str = ""


def _pinned_or_planned(value: object) -> str:
    return "pinned" if isinstance(value, int) else "planned"


ACTIVE_SEQS_FLAG = "--max-num-active-seqs"  # vLLM #56758: the admission cap, at start
ACTIVE_CAP_CAPACITY_WHY = ("the runner's capacity (buffers, CUDA graphs); the cap is "
                           "--max-num-active-seqs")


def runner_capacity(plan: Plan, cap: int, batched: int) -> int:
    """``--max-num-seqs`` where the cap travels as ``--max-num-active-seqs``: the plan's
    memory bound (``Plan.max_num_seqs``, what the live cap's runner gets too), at most the
    batch (``batched``: vLLM refuses fewer batched tokens than sequences; only a tuned
    batch below the plan's bound makes this bite) and at least ``cap`` (vLLM refuses an
    active cap above max-num-seqs; only an adaptation's lower bound above the plan's
    bound makes this bite). Where it comes to ``cap``, :func:`engine_flags` renders
    ``--max-num-seqs cap`` alone, as without the flag."""
    return max(cap, min(plan.max_num_seqs, batched))


def engine_flags(spec: LLMServiceSpec, plan: Plan,
                 overrides: Mapping[str, int] | None = None, *,
                 active_cap_flag: bool = False) -> list[EngineFlag]:
    """The engine flags the spec and the plan decide, as the pods get them:
    parallelism, memory, batching, numerics, then the switches the user set.
    ``overrides`` (tuned or adapted values) apply where the field is ``auto``.

    ``active_cap_flag`` (the image's vLLM takes ``--max-num-active-seqs`` and the live
    cap is not in use: :func:`llm_operator.rendering.admission.uses_active_seqs_flag`):
    where ``spec.engine.maxNumSeqs`` is ``auto``, the cap (planned, tuned or adapted) is
    rendered as ``--max-num-active-seqs`` and ``--max-num-seqs`` is the runner's capacity
    (:func:`runner_capacity`), so a change of the cap leaves the runner's buffers and CUDA
    graphs as they are. A pinned maxNumSeqs stays ``--max-num-seqs``, and so does a cap
    at the capacity (the flag would say what vLLM does without it, and rendering it would
    roll the pods for nothing)."""
    engine = spec.engine
    flags = [EngineFlag(("--tensor-parallel-size", str(plan.tensor_parallel_size)),
                        "spec.engine.tensorParallelSize",
                        _pinned_or_planned(engine.tensor_parallel_size))]
    if plan.pipeline_parallel_size > 1:
        flags.append(EngineFlag(("--pipeline-parallel-size", str(plan.pipeline_parallel_size)),
                                "spec.engine.pipelineParallelSize",
                                _pinned_or_planned(engine.pipeline_parallel_size)))
    if plan.decode_context_parallel_size > 1 or isinstance(
            engine.decode_context_parallel_size, int):
        flags.append(EngineFlag(
            ("--decode-context-parallel-size", str(plan.decode_context_parallel_size)),
            "spec.engine.decodeContextParallelSize",
            _pinned_or_planned(engine.decode_context_parallel_size)))
    flags += [
        EngineFlag(("--max-model-len", str(plan.max_model_len)), "spec.engine.maxModelLen",
                   _pinned_or_planned(engine.max_model_len)),
        EngineFlag(("--gpu-memory-utilization", f"{engine.gpu_memory_utilization:g}"),
                   "spec.engine.gpuMemoryUtilization", "pinned"),
    ]
    seqs, seqs_from = effective_engine_value(engine, "maxNumSeqs", plan.start_seqs, overrides)
    batched, source = effective_engine_value(
        engine, "maxNumBatchedTokens", plan.max_num_batched_tokens, overrides)
    default_batch = vllm_default_max_num_batched_tokens(
        GPUFacts(plan.gpu_product, plan.gpu_product, plan.gpu_memory_bytes))
    why = ""
    if source != "pinned" and seqs is not None and seqs > (batched or default_batch):
        # An adapted or tuned cap above the batch (the adaptation's lower bound may exceed
        # the plan): vLLM refuses fewer batched tokens than sequences, so raise the batch
        # with it as the planner does (a pinned batch is checked by the rules instead).
        batched, source = seqs, "adjusted"
        why = "raised to max-num-seqs, which vLLM refuses to exceed"
    capacity = runner_capacity(plan, seqs or 0, batched or default_batch)
    if active_cap_flag and seqs_from != "pinned" and seqs is not None and seqs < capacity:
        # By construction seqs < capacity <= the batch, so vLLM's rules on the pair
        # (active-seqs-above-seqs, batch-below-seqs) hold; the renderer checks them again
        # where a tuned or adapted value takes part.
        flags += [EngineFlag(("--max-num-seqs", str(capacity)), "spec.engine.maxNumSeqs",
                             "operator", ACTIVE_CAP_CAPACITY_WHY),
                  EngineFlag((ACTIVE_SEQS_FLAG, str(seqs)), "spec.engine.maxNumSeqs",
                             seqs_from)]
    else:
        flags.append(EngineFlag(("--max-num-seqs", str(seqs)), "spec.engine.maxNumSeqs",
                                seqs_from))
    if batched is not None:
        flags.append(EngineFlag(("--max-num-batched-tokens", str(batched)),
                                "spec.engine.maxNumBatchedTokens", source, why))
    if engine.dtype != "auto":
        flags.append(EngineFlag(("--dtype", str(engine.dtype)), "spec.engine.dtype", "pinned"))
    if engine.kv_cache_dtype != "auto":
        flags.append(EngineFlag(("--kv-cache-dtype", str(engine.kv_cache_dtype)),
                                "spec.engine.kvCacheDtype", "pinned"))
    # fp8 weights are quantized on load when the checkpoint is not already fp8; AWQ and
    # GPTQ checkpoints carry their quantization_config and vLLM detects it.
    if spec.model.quantization == Quantization.FP8:
        flags.append(EngineFlag(("--quantization", "fp8"), "spec.model.quantization",
                                "pinned"))
    if engine.enable_chunked_prefill is not None:
        flags.append(EngineFlag(
            ("--enable-chunked-prefill" if engine.enable_chunked_prefill
             else "--no-enable-chunked-prefill",), "spec.engine.enableChunkedPrefill", "pinned"))
    if engine.enable_prefix_caching is not None:
        flags.append(EngineFlag(
            ("--enable-prefix-caching" if engine.enable_prefix_caching
             else "--no-enable-prefix-caching",), "spec.engine.enablePrefixCaching", "pinned"))
    return flags


def _model_shape(spec: LLMServiceSpec, read: ModelFacts | None = None) -> ModelShape:
    """What the rules know of the model: heads and context from the catalog or
    spec.model.architecture; whether it has experts only where that is known (the
    catalog records experts; an architecture says so with activeParameters, and says
    nothing when it leaves them out); ``read``: facts from config.json (see
    :func:`model_facts`), whose experts are known either way."""
    try:
        facts = model_facts(spec, read)
    except SpecError:  # a plan written by hand for a model the catalog does not know
        return ModelShape()
    moe = facts.num_experts is not None or facts.active_parameters is not None
    return ModelShape(attention_heads=facts.num_attention_heads,
                      kv_heads=facts.num_key_value_heads, max_context=facts.max_context,
                      is_moe=moe if moe or facts.source in (CATALOG, CONFIG_JSON) else None)


def _engine_argv(spec: LLMServiceSpec, plan: Plan, overrides: Mapping[str, int] | None,
                 active_cap_flag: bool = False
                 ) -> tuple[list[str], list[EngineFlag | int]]:
    """The engine's arguments (:func:`engine_flags`, then ``spec.engine.extraArgs``,
    then what a multi-node leader adds) and, item by item, what set each one: its
    :class:`EngineFlag`, or the index of the extraArgs item."""
    owners: list[EngineFlag | int] = []
    argv: list[str] = []
    for flag in engine_flags(spec, plan, overrides, active_cap_flag=active_cap_flag):
        argv += flag.items
        owners += [flag] * len(flag.items)
    for k, item in enumerate(spec.engine.extra_args):
        argv.append(item)
        owners.append(k)
    if plan.nodes_per_replica > 1:
        items = multi_node_flags(plan)
        nodes = EngineFlag(items, "spec.gpus", "operator",
                           "a replica over several nodes runs vLLM's mp executor on each")
        argv += items
        owners += [nodes] * len(items)
    return argv, owners


def engine_argv(spec: LLMServiceSpec, plan: Plan,
                overrides: Mapping[str, int] | None = None) -> list[str]:
    """The engine's arguments as the pods get them, without the endpoint and drain flags:
    what :func:`engine_rule_errors` checks."""
    return _engine_argv(spec, plan, overrides)[0]


def engine_settings(spec: LLMServiceSpec, plan: Plan,
                    overrides: Mapping[str, int] | None = None, *,
                    facts: ModelFacts | None = None,
                    active_cap_flag: bool = False) -> EngineSettings:
    """The settings the pods' ``vllm serve`` starts with (:func:`_engine_argv`), each
    named in messages by the spec field that sets it; ``facts``: as :func:`make_plan`'s;
    ``active_cap_flag``: as :func:`engine_flags`'."""
    argv, owners = _engine_argv(spec, plan, overrides, active_cap_flag)
    table = flag_table()
    managed = {table.options[f].dest: field for f, field in MANAGED_FLAGS.items()
               if f in table.options}

    def owner(s: EngineSettings, dest: str) -> EngineFlag | int | None:
        at = s.read.at.get(s.source_of(dest))
        return None if at is None else owners[at]

    def where(s: EngineSettings, dest: str) -> str:
        found = owner(s, dest)
        if isinstance(found, int):
            return f"spec.engine.extraArgs[{found}]"
        if found is not None:
            return found.field
        return managed.get(dest, "spec.engine.extraArgs").split(" ")[0]

    def describe(s: EngineSettings, dest: str) -> str:
        found, words = owner(s, dest), flag_words(s, dest)
        if isinstance(found, int):
            return f"{words} (spec.engine.extraArgs[{found}])"
        if found is None:
            return (f"{words[:-1]}; set by {where(s, dest)})" if dest in managed else words)
        value = " ".join(found.items[1:]) or ("true" if s.on(dest) else "false")
        if found.source == "pinned":
            return f"{found.field} {value}"
        said = {"planned": f"planned: {found.field} is auto",
                "override": f"tuned or adapted: {found.field} is auto"}
        return f"{found.items[0]} {value} ({said.get(found.source, found.why)})"

    gpu = GPUFacts(plan.gpu_product, plan.gpu_product, plan.gpu_memory_bytes)
    return EngineSettings.of(
        argv, defaults=Defaults(vllm_default_max_num_batched_tokens(gpu),
                                vllm_default_max_num_seqs(gpu)),
        model=_model_shape(spec, facts), describe=describe, locate=where, table=table)


def engine_rule_errors(spec: LLMServiceSpec, plan: Plan,
                       overrides: Mapping[str, int] | None = None, *,
                       overridden_only: bool = False,
                       facts: ModelFacts | None = None,
                       active_cap_flag: bool = False) -> list[SpecError]:
    """One :class:`SpecError` per start-up rule of vLLM (:mod:`llm_operator.knowledge.engine_rules`)
    that the pods' engine arguments break: the field to change first (``field``), the
    others involved and each setting's value in the problem, where vLLM makes the rule,
    and the fix. ``overridden_only``: only the rules a tuned or adapted value takes part
    in (the renderer's check: the planner has checked the rest). ``facts``: the model's
    facts read from its config.json, as given to :func:`make_plan`. ``active_cap_flag``:
    the arguments as :func:`engine_flags` renders them with it (the cap as
    ``--max-num-active-seqs``)."""
    settings = engine_settings(spec, plan, overrides, facts=facts,
                               active_cap_flag=active_cap_flag)
    _, owners = _engine_argv(spec, plan, overrides, active_cap_flag)

    def moved(dest: str) -> bool:
        at = settings.read.at.get(settings.source_of(dest))
        owner = None if at is None else owners[at]
        return isinstance(owner, EngineFlag) and owner.source in ("override", "adjusted")

    errors = []
    for refusal in refusals(settings):
        found = refusal.finding
        if overridden_only and not any(moved(d) for d in found.dests):
            continue
        fields = list(dict.fromkeys(settings.where(d) for d in found.dests))
        also = f" (with {', '.join(fields[1:])})" if len(fields) > 1 else ""
        errors.append(SpecError(
            fields[0], f"{found.problem}{also}, and vLLM {VLLM_VERSION} refuses to start "
            f"with that ({refusal.rule.source})", found.fix))
    return errors

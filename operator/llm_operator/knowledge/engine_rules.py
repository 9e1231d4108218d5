"""vLLM's own start-up checks between settings, as pure rules (standard library only).

vLLM checks its configuration when it starts (``EngineArgs.create_engine_config`` and the
``__post_init__`` / ``_verify_args`` / ``verify_*`` methods of its config classes) and
exits on a combination it refuses: the pod crash-loops and the reason is only in its log.
Each :class:`Rule` here is one such check of the pinned release (:data:`VLLM_VERSION`),
written from reading its source: the rule cites the module and function it mirrors and
the words of vLLM's refusal (``says``), which the vLLM tier
(``tests/vllm/test_vllm_refuses_engine_rules.py``) finds in that function's source and in the error
vLLM raises for every case of the corpus ``tests/unit/data/engine_refusals.yaml``.

The rules read :class:`EngineSettings`: the ``vllm serve`` arguments as vLLM's parser
reads them (:func:`llm_operator.knowledge.serve_args.read_args`), vLLM's defaults for what is not
given, and what is known of the model. Who reads the findings decides how to name the
settings: the planner by the spec fields that set them, the tuner by their flags.

Only checks vLLM makes whatever the hardware are here (no CUDA-only or ROCm-only rule),
and only those the operator's view of the model can decide: a rule that needs a fact
the caller does not know is skipped, never guessed. Imports nothing of the operator but
:mod:`llm_operator.knowledge.serve_args`: the tuner, which runs in the vLLM image, uses it too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .serve_args import FlagTable, ReadArgs, flag_table, read_args

VLLM_VERSION = "0.32.0"  # the release the rules were read from (the default image's)


@dataclass(frozen=True)
class ModelShape:
    """What the rules need to know of the model (None: not known, the rule is skipped)."""

    attention_heads: int | None = None
    kv_heads: int | None = None
    is_moe: bool | None = None
    max_context: int | None = None  # the longest --max-model-len vLLM derives


@dataclass(frozen=True)
class Defaults:
    """vLLM's batch defaults where the arguments leave them out: its
    ``get_batch_defaults`` for the OpenAI server on this GPU (before the adjustments of
    ``_set_default_max_num_seqs_and_batched_tokens_args``, which :class:`EngineSettings`
    applies). None: unknown, and a rule that needs it is skipped."""

    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None


Describe = Callable[["EngineSettings", str], str]


def flag_words(settings: EngineSettings, dest: str) -> str:
    """A setting by its flag and value: ``--max-num-seqs 64``, ``num_speculative_tokens
    3 in --speculative-config``, ``--max-num-batched-tokens 2048 (vLLM's default)``."""
    top, _, key = dest.partition(".")
    value = settings.get(dest)
    shown = ("on" if value is True else "off" if value is False else
             value if value is not None else "unset")
    source = settings.source_of(dest)
    if key and source in _SPEC_SHORTHANDS:
        return f"{settings.option(source)} {shown}"
    if key:
        return f"{key} {shown} in {settings.option(top)}"
    if not settings.given(dest):
        return f"{settings.option(dest)} {shown} (vLLM's default)"
    if isinstance(value, bool):
        return settings.read.option.get(dest, settings.option(dest))
    return f"{settings.option(dest)} {shown}"


def flag_where(settings: EngineSettings, dest: str) -> str:
    """Where to change a setting, by flag: ``--max-num-seqs``."""
    return settings.option(settings.source_of(dest).partition(".")[0])


@dataclass
class EngineSettings:
    """The settings one ``vllm serve`` starts with: the arguments read as vLLM reads
    them (``read``), its defaults for the rest, and the model. ``describe`` and ``where``
    name a setting in messages (the whole of it, and where to change it)."""

    read: ReadArgs
    defaults: Defaults = field(default_factory=Defaults)
    model: ModelShape = field(default_factory=ModelShape)
    describe: Describe = flag_words
    locate: Describe = flag_where
    table: FlagTable = field(default_factory=flag_table)

    @classmethod
    def of(cls, argv: Sequence[str], **kwargs: Any) -> EngineSettings:
        """The settings of ``argv`` (flags only, as ``vllm serve`` takes them after the
        model)."""
        return cls(read_args(argv), **kwargs)

    # --- raw values ---------------------------------------------------------------
    def given(self, dest: str) -> bool:
        """Whether the arguments set ``dest`` (a JSON option's key: ``opt.key``)."""
        top, _, key = dest.partition(".")
        if key:
            return key in self.json(top)
        return self.read.values.get(dest) is not None

    def source_of(self, dest: str) -> str:
        """The destination whose item set ``dest``: itself, the JSON option of a key
        (``speculative_config.method`` -> the dotted item of that key if there is one,
        else ``speculative_config``), or the ``--spec-*`` shorthand that gave the key."""
        top, _, key = dest.partition(".")
        if not key or dest in self.read.at:
            return dest
        raw = self.read.values.get(top)
        if top == "speculative_config" and not (isinstance(raw, dict) and key in raw):
            for short, spec_key in _SPEC_SHORTHANDS.items():
                if spec_key == key and self.given(short):
                    return short
        return top

    def option(self, dest: str) -> str:
        """The option string that set ``dest``, else its canonical long option."""
        if dest in self.read.option:
            return self.read.option[dest]
        longs = [o for o, f in self.table.options.items()
                 if f.dest == dest and o.startswith("--") and not o.startswith("--no-")]
        return min(longs, key=len) if longs else "--" + dest.replace("_", "-")

    def json(self, dest: str) -> dict[str, Any]:
        """A JSON option (``--speculative-config``...) as a dict (empty when not given or
        not an object); for ``speculative_config``, with vLLM's ``--spec-method``,
        ``--spec-model`` and ``--spec-tokens`` folded in."""
        value = self.read.values.get(dest)
        out = {str(k).replace("-", "_"): v for k, v in value.items()} \
            if isinstance(value, dict) else {}
        if dest == "speculative_config":
            for short, key in _SPEC_SHORTHANDS.items():
                if self.read.values.get(short) is not None and key not in out:
                    out[key] = self.read.values[short]
        return out

    def get(self, dest: str) -> Any:
        """The value vLLM runs with: given, else its default (None: unknown)."""
        top, _, key = dest.partition(".")
        if key:
            return self.json(top).get(key)
        if self.given(dest):
            return self.read.values[dest]
        if dest == "max_num_batched_tokens":
            return self._default_batched_tokens()
        if dest == "max_num_seqs":
            return self._default_seqs()
        if dest == "max_model_len":
            return self.model.max_context
        return _DEFAULTS.get(dest)

    # --- typed values -------------------------------------------------------------
    def number(self, dest: str) -> int | None:
        """An integer setting (vLLM reads ``1k``-style numbers too), None if unknown."""
        return as_int(self.get(dest))

    def on(self, dest: str) -> bool:
        """A switch or boolean key: True only when it is on."""
        value = self.get(dest)
        if isinstance(value, str):
            return value.lower() in ("true", "1", "yes")
        return value is True

    # --- naming, for messages -----------------------------------------------------
    def name(self, dest: str) -> str:
        return self.describe(self, dest)

    def where(self, dest: str) -> str:
        return self.locate(self, dest)

    # --- vLLM's defaults for the batch ---------------------------------------------
    def _default_batched_tokens(self) -> int | None:
        """``_set_default_max_num_seqs_and_batched_tokens_args``: the GPU default, at
        least max_model_len without chunked prefill, at most max_num_seqs x
        max_model_len."""
        base, mml = self.defaults.max_num_batched_tokens, self.number("max_model_len")
        if base is None or mml is None:
            return None
        if not self.on("enable_chunked_prefill"):
            base = max(base, mml)
        seqs = as_int(self.read.values.get("max_num_seqs")) or self.defaults.max_num_seqs
        return min(seqs * mml, base) if seqs else base

    def _default_seqs(self) -> int | None:
        """The default max_num_seqs, at most max_num_batched_tokens."""
        base = self.defaults.max_num_seqs
        batched = self.number("max_num_batched_tokens")
        if base is None or batched is None:
            return base
        return min(base, batched)


def as_int(value: Any) -> int | None:
    """``value`` as vLLM's ``human_readable_int`` reads it (``4k`` = 4000, ``4K`` =
    4096; plain numbers), None when it is not a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    scale = units.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(float(number) * scale) if scale != 1 else int(number)
    except ValueError:
        return None


_SPEC_SHORTHANDS = {"spec_method": "method", "spec_model": "model",
                    "spec_tokens": "num_speculative_tokens"}
# EngineArgs / config defaults the rules read (vllm/engine/arg_utils.py, 0.32.0).
_DEFAULTS: dict[str, Any] = {
    "enable_chunked_prefill": True,  # every generate model the operator serves
    "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
    "prefill_context_parallel_size": 1, "decode_context_parallel_size": 1,
    "max_loras": 1, "long_prefill_token_threshold": 0,
    "mamba_ssm_cache_dtype": "auto", "per_request_spec_decode_metrics": "none",
}


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Finding:
    """What one rule found: the settings involved (the first is the one to change
    first), the problem and the fix, in the words of :meth:`EngineSettings.name`."""

    dests: tuple[str, ...]
    problem: str
    fix: str


@dataclass(frozen=True)
class Rule:
    """One start-up check of vLLM: ``module`` and ``function`` are where vLLM makes it
    (``vllm.config.scheduler``, ``SchedulerConfig.verify_max_model_len``), ``says`` words
    of the error it raises, verbatim in that function's source."""

    id: str
    module: str
    function: str
    says: str
    summary: str  # the rule in words, for the docs
    check: Callable[[EngineSettings], Finding | None]

    @property
    def source(self) -> str:
        return f"{self.module.replace('.', '/')}.py {self.function}"


@dataclass(frozen=True)
class Refusal:
    """A rule that the settings break."""

    rule: Rule
    finding: Finding

    def __str__(self) -> str:
        return (f"{self.finding.problem} (vLLM {VLLM_VERSION} refuses to start: "
                f"{self.rule.source}). Fix: {self.finding.fix}")


RULES: list[Rule] = []


def rule(id: str, module: str, function: str, says: str, summary: str
         ) -> Callable[[Callable[[EngineSettings], Finding | None]],
                       Callable[[EngineSettings], Finding | None]]:
    def register(check: Callable[[EngineSettings], Finding | None]
                 ) -> Callable[[EngineSettings], Finding | None]:
        RULES.append(Rule(id, module, function, says, summary, check))
        return check
    return register


def refusals(settings: EngineSettings) -> list[Refusal]:
    """Every rule the settings break, in :data:`RULES` order."""
    out = []
    for r in RULES:
        found = r.check(settings)
        if found is not None:
            out.append(Refusal(r, found))
    return out


_SCHED = ("vllm.config.scheduler", "SchedulerConfig.verify_max_model_len")
_ARGS = ("vllm.engine.arg_utils", "EngineArgs.create_engine_config")
_PARALLEL = ("vllm.config.parallel", "ParallelConfig._validate_parallel_config")
_MODEL_PARALLEL = ("vllm.config.model", "ModelConfig.verify_with_parallel_config")
_SPEC_POST = ("vllm.config.speculative", "SpeculativeConfig.__post_init__")
_SPEC_ARGS = ("vllm.config.speculative", "SpeculativeConfig._verify_args")
_VLLM_POST = ("vllm.config.vllm", "VllmConfig.__post_init__")


# --- the scheduler -------------------------------------------------------------------

@rule("chunked-prefill-off-batch-below-model-len", *_SCHED,
      says="smaller than max_model_len",
      summary="with chunked prefill off, max-num-batched-tokens must be at least "
              "max-model-len (a whole prompt is one step)")
def _batch_below_model_len(s: EngineSettings) -> Finding | None:
    batched, mml = s.number("max_num_batched_tokens"), s.number("max_model_len")
    if s.on("enable_chunked_prefill") or batched is None or mml is None or batched >= mml:
        return None
    d = ("max_num_batched_tokens", "max_model_len", "enable_chunked_prefill")
    return Finding(d, f"{s.name(d[0])} is smaller than {s.name(d[1])} with chunked prefill "
                   f"off ({s.name(d[2])}): a prompt longer than the batch could never be "
                   "scheduled",
                   f"raise {s.where(d[0])} to at least {mml}, lower {s.where(d[1])}, or "
                   f"turn chunked prefill on ({s.where(d[2])})")


def _at_most(dest: str, bound: str, why: str, fix: str, *, bound_first: bool = False
             ) -> Callable[[EngineSettings], Finding | None]:
    """A setting that may not exceed another (``dest`` <= ``bound``). ``fix`` may name
    ``{dest}``, ``{bound}`` (where to change them) and ``{value}``, ``{limit}``;
    ``bound_first``: the bound is the setting to change first."""
    def check(s: EngineSettings) -> Finding | None:
        value, limit = s.number(dest), s.number(bound)
        if value is None or limit is None or value <= limit:
            return None
        return Finding((bound, dest) if bound_first else (dest, bound),
                       f"{s.name(dest)} is above {s.name(bound)}: {why}",
                       fix.format(dest=s.where(dest), bound=s.where(bound), value=value,
                                  limit=limit))
    return check


rule("batch-below-seqs", *_SCHED, says="be greater than or equal to max_num_seqs",
     summary="max-num-batched-tokens must be at least max-num-seqs")(_at_most(
         "max_num_seqs", "max_num_batched_tokens",
         "every running sequence needs at least one token of each step",
         "raise {bound} to at least {value}, or lower {dest} to at most {limit}",
         bound_first=True))
rule("active-seqs-above-seqs", *_SCHED, says="greater than max_num_seqs",
     summary="max-num-active-seqs may not exceed max-num-seqs")(_at_most(
         "max_num_active_seqs", "max_num_seqs",
         "it admits more requests than the engine is sized for",
         "lower {dest} to at most {limit} (or remove it), or raise {bound}"))
rule("long-prefill-threshold-above-model-len", *_SCHED, says="than the max_model_len",
     summary="long-prefill-token-threshold may not exceed max-model-len")(_at_most(
         "long_prefill_token_threshold", "max_model_len", "no prompt could be long",
         "lower {dest} to at most {limit}, or raise {bound}"))


# --- EngineArgs.create_engine_config --------------------------------------------------

def _spec_tokens(s: EngineSettings) -> int | None:
    return as_int(s.json("speculative_config").get("num_speculative_tokens"))


@rule("lora-speculative-batch", *_ARGS, says="Consider increasing max_num_batched_tokens or",
      summary="with LoRA and speculative decoding, max-num-batched-tokens must be at "
              "least max-num-seqs x (num_speculative_tokens + 1)")
def _lora_spec_batch(s: EngineSettings) -> Finding | None:
    tokens = _spec_tokens(s)
    batched, seqs = s.number("max_num_batched_tokens"), s.number("max_num_seqs")
    if (not s.on("enable_lora") or tokens is None or batched is None or seqs is None
            or batched >= seqs * (tokens + 1)):
        return None
    d = ("max_num_batched_tokens", "max_num_seqs", "speculative_config.num_speculative_tokens",
         "enable_lora")
    need = seqs * (tokens + 1)
    return Finding(d, f"{s.name(d[0])} is below {s.name(d[1])} x ({s.name(d[2])} + 1) = "
                   f"{need}, which LoRA ({s.name(d[3])}) with speculative decoding needs",
                   f"raise {s.where(d[0])} to at least {need}, or lower {s.where(d[1])} or "
                   "num_speculative_tokens")


def _twice(flag_dest: str, config_dest: str, key: str) -> Callable[[EngineSettings],
                                                                   Finding | None]:
    """A setting given both as its own flag and as a key of a JSON option."""
    def check(s: EngineSettings) -> Finding | None:
        if not s.given(flag_dest) or s.json(config_dest).get(key) is None:
            return None
        d = (flag_dest, f"{config_dest}.{key}")
        return Finding(d, f"{s.name(d[0])} and {s.name(d[1])} set the same thing twice",
                       f"keep one of them: remove {s.where(d[0])} or the {key} key of "
                       f"{s.where(d[1])}")
    return check


for _flag, _config, _key, _says in (
        ("attention_backend", "attention_config", "backend",
         "attention_backend and attention_config.backend"),
        ("cudagraph_capture_sizes", "compilation_config", "cudagraph_capture_sizes",
         "cudagraph_capture_sizes and compilation_config."),
        ("max_cudagraph_capture_size", "compilation_config", "max_cudagraph_capture_size",
         "max_cudagraph_capture_size and compilation_config."),
        ("enable_flashinfer_autotune", "kernel_config", "enable_flashinfer_autotune",
         "enable_flashinfer_autotune and ")):
    rule(f"{_flag.replace('_', '-')}-given-twice", *_ARGS, says=_says,
         summary=f"--{_flag.replace('_', '-')} and the {_key} key of "
                 f"--{_config.replace('_', '-')} are mutually exclusive"
         )(_twice(_flag, _config, _key))


@rule("speculative-shorthand-given-twice", "vllm.engine.arg_utils",
      "EngineArgs.create_speculative_config", says="and --speculative-config[",
      summary="--spec-method, --spec-model and --spec-tokens may not repeat a key of "
              "--speculative-config")
def _spec_shorthand_twice(s: EngineSettings) -> Finding | None:
    config = s.read.values.get("speculative_config")
    config = config if isinstance(config, dict) else {}
    for short, key in _SPEC_SHORTHANDS.items():
        if s.given(short) and key in {str(k).replace("-", "_") for k in config}:
            d = (short, "speculative_config")
            return Finding(d, f"{s.name(d[0])} and the {key} key of {s.where(d[1])} set the "
                           "same thing twice",
                           f"keep one of them: remove {s.where(d[0])} or that key")
    return None


@rule("pipeline-parallel-executor", "vllm.engine.arg_utils",
      "EngineArgs._check_feature_supported", says="Pipeline Parallelism without Ray distributed",
      summary="pipeline parallelism needs the mp, ray or external_launcher executor")
def _pp_executor(s: EngineSettings) -> Finding | None:
    pp, backend = s.number("pipeline_parallel_size"), s.get("distributed_executor_backend")
    if pp is None or pp <= 1 or backend in (None, "ray", "mp", "external_launcher"):
        return None
    d = ("distributed_executor_backend", "pipeline_parallel_size")
    return Finding(d, f"{s.name(d[0])} cannot run {s.name(d[1])} pipeline stages",
                   f"remove {s.where(d[0])} (vLLM picks mp on one node; the operator "
                   "runs mp across nodes too)")


@rule("nnodes-divides-world-size", *_ARGS, says="must evenly divide the total",
      summary="--nnodes must divide tensor x pipeline parallel GPUs")
def _nnodes(s: EngineSettings) -> Finding | None:
    nodes = s.number("nnodes")
    tp, pp = s.number("tensor_parallel_size") or 1, s.number("pipeline_parallel_size") or 1
    if nodes is None or nodes <= 1 or (tp * pp) % nodes == 0:
        return None
    d = ("nnodes", "tensor_parallel_size", "pipeline_parallel_size")
    return Finding(d, f"{tp * pp} GPUs ({s.name(d[1])} x {s.name(d[2])}) do not divide "
                   f"evenly over the replica's {nodes} nodes (--nnodes; vLLM's mp executor "
                   "runs the same number of workers on every node)",
                   f"make tensorParallelSize x pipelineParallelSize a multiple of the {nodes} "
                   "nodes (e.g. tensorParallelSize = the GPUs of one node)")


@rule("fault-tolerance-needs-external-lb", *_ARGS,
      says="Fault tolerance requires external load balancer mode",
      summary="--enable-fault-tolerance needs an external data-parallel load balancer")
def _fault_tolerance(s: EngineSettings) -> Finding | None:
    if not s.on("enable_fault_tolerance") or s.on("data_parallel_external_lb") \
            or s.given("data_parallel_rank"):
        return None
    d = ("enable_fault_tolerance",)
    return Finding(d, f"{s.name(d[0])} needs an external data-parallel load balancer "
                   "(--data-parallel-external-lb or --data-parallel-rank), which one "
                   "engine per pod does not have",
                   f"remove {s.where(d[0])}")


# --- parallelism ----------------------------------------------------------------------

@rule("decode-context-parallel-divides-tp", *_PARALLEL, says="must be divisible by dcp_size",
      summary="tensor-parallel-size must be a multiple of decode-context-parallel-size")
def _dcp_divides_tp(s: EngineSettings) -> Finding | None:
    tp, dcp = s.number("tensor_parallel_size"), s.number("decode_context_parallel_size")
    pcp = s.number("prefill_context_parallel_size")
    if tp is None or dcp is None or pcp != 1 or tp % dcp == 0:
        return None
    d = ("decode_context_parallel_size", "tensor_parallel_size")
    return Finding(d, f"{s.name(d[1])} is not a multiple of {s.name(d[0])} (decode context "
                   "parallelism reuses the tensor-parallel ranks)",
                   f"set {s.where(d[0])} to a divisor of {tp}, or remove it")


@rule("numa-bind-lists-need-numa-bind", *_PARALLEL,
      says="numa_bind_nodes and numa_bind_cpus require numa_bind=True.",
      summary="--numa-bind-nodes and --numa-bind-cpus need --numa-bind")
def _numa(s: EngineSettings) -> Finding | None:
    if s.on("numa_bind"):
        return None
    for dest in ("numa_bind_nodes", "numa_bind_cpus"):
        if s.given(dest):
            d = (dest, "numa_bind")
            return Finding(d, f"{s.name(d[0])} is given without --numa-bind",
                           f"add --numa-bind, or remove {s.where(d[0])}")
    return None


@rule("redundant-experts-need-eplb", *_PARALLEL, says="but EPLB is not",
      summary="eplb-config num_redundant_experts needs --enable-eplb")
def _redundant_experts(s: EngineSettings) -> Finding | None:
    redundant = as_int(s.json("eplb_config").get("num_redundant_experts"))
    if s.on("enable_eplb") or not redundant:
        return None
    d = ("eplb_config.num_redundant_experts", "enable_eplb")
    return Finding(d, f"{s.name(d[0])} asks for redundant experts, which only expert "
                   "load balancing (--enable-eplb) places",
                   f"remove num_redundant_experts from {s.where(d[0])}, or enable EPLB")


@rule("nsight-needs-ray", "vllm.config.parallel", "ParallelConfig._verify_args",
      says="Unable to use nsight profiling unless workers run with Ray.",
      summary="--ray-workers-use-nsight needs the Ray executor")
def _nsight(s: EngineSettings) -> Finding | None:
    if not s.on("ray_workers_use_nsight") or s.get("distributed_executor_backend") == "ray":
        return None
    d = ("ray_workers_use_nsight", "distributed_executor_backend")
    return Finding(d, f"{s.name(d[0])} profiles Ray workers, and this server runs none "
                   "(the mp executor, on one node or across nodes)",
                   f"remove {s.where(d[0])}")


# --- the model and parallelism --------------------------------------------------------

@rule("expert-parallel-needs-moe", "vllm.config.model",
      "ModelConfig._verify_with_expert_parallelism",
      says="Number of experts in the model must be greater than 0",
      summary="--enable-expert-parallel needs a mixture-of-experts model")
def _ep_dense(s: EngineSettings) -> Finding | None:
    if not s.on("enable_expert_parallel") or s.model.is_moe is not False:
        return None
    d = ("enable_expert_parallel",)
    return Finding(d, f"{s.name(d[0])} is set for a model without experts (dense)",
                   f"remove {s.where(d[0])}")


def _gqa(s: EngineSettings) -> tuple[int, int, int, int] | None:
    """(tp, dcp, heads, kv heads) when decode context parallelism is on for a model
    whose KV heads are fewer than its attention heads (GQA/MQA, so not MLA, whose
    configs give as many KV heads as heads)."""
    tp, dcp = s.number("tensor_parallel_size"), s.number("decode_context_parallel_size")
    heads, kv = s.model.attention_heads, s.model.kv_heads
    if tp is None or dcp is None or dcp <= 1 or heads is None or kv is None or kv >= heads \
            or tp % dcp:  # vLLM refuses that first (decode-context-parallel-divides-tp)
        return None
    return tp, dcp, heads, kv


@rule("decode-context-parallel-needs-tp-above-kv-heads", *_MODEL_PARALLEL,
      says="Decode context parallelism for GQA/MQA requires",
      summary="decode context parallelism of a GQA model needs tensor-parallel-size "
              "above its KV heads")
def _dcp_tp_kv(s: EngineSettings) -> Finding | None:
    found = _gqa(s)
    if found is None or found[0] > found[3]:
        return None
    d = ("decode_context_parallel_size", "tensor_parallel_size")
    return Finding(d, f"{s.name(d[0])} needs {s.name(d[1])} above the model's {found[3]} "
                   "KV heads",
                   f"remove {s.where(d[0])}, or raise {s.where(d[1])} above {found[3]}")


@rule("decode-context-parallel-at-most-tp-over-kv-heads", *_MODEL_PARALLEL,
      says="exceeds the maximum",
      summary="decode-context-parallel-size may not exceed tensor-parallel-size / KV heads")
def _dcp_max(s: EngineSettings) -> Finding | None:
    found = _gqa(s)
    if found is None or found[0] <= found[3] or found[1] <= found[0] // found[3]:
        return None
    tp, _, _, kv = found
    d = ("decode_context_parallel_size", "tensor_parallel_size")
    return Finding(d, f"{s.name(d[0])} is above {tp // kv} = {s.name(d[1])} / {kv} KV heads",
                   f"lower {s.where(d[0])} to at most {tp // kv}")


@rule("decode-context-parallel-divides-heads-per-kv-head", *_MODEL_PARALLEL,
      says="query heads per KV head",
      summary="decode-context-parallel-size must divide the query heads per KV head")
def _dcp_q_per_kv(s: EngineSettings) -> Finding | None:
    found = _gqa(s)
    if found is None:
        return None
    tp, dcp, heads, kv = found
    if tp <= kv or dcp > tp // kv or (heads // kv) % dcp == 0:
        return None
    d = ("decode_context_parallel_size",)
    return Finding(d, f"{s.name(d[0])} does not divide the model's {heads // kv} query heads "
                   "per KV head", f"set {s.where(d[0])} to a divisor of {heads // kv}")


# --- speculative decoding -------------------------------------------------------------

def _spec_method(s: EngineSettings) -> str | None:
    """The method vLLM resolves (SpeculativeConfig.__post_init__), None without
    speculative decoding."""
    config = s.json("speculative_config")
    if not config:
        return None
    method, model = config.get("method"), config.get("model")
    if method is None:
        return "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    return "ngram" if method == "[ngram]" else str(method)


@rule("ngram-lookup-min-above-max", *_SPEC_POST, says="be <= prompt_lookup_max",
      summary="ngram prompt_lookup_min may not exceed prompt_lookup_max")
def _lookup(s: EngineSettings) -> Finding | None:
    config = s.json("speculative_config")
    low = as_int(config.get("prompt_lookup_min"))
    high = as_int(config.get("prompt_lookup_max"))
    if _spec_method(s) not in ("ngram", "ngram_gpu") or low is None or high is None \
            or low <= high:
        return None
    d = ("speculative_config.prompt_lookup_min", "speculative_config.prompt_lookup_max")
    return Finding(d, f"{s.name(d[0])} is above {s.name(d[1])}",
                   f"make prompt_lookup_min at most prompt_lookup_max in {s.where(d[0])}")


@rule("speculative-tokens-required", *_SPEC_ARGS,
      says="num_speculative_tokens must be provided with",
      summary="ngram speculative decoding needs num_speculative_tokens")
def _spec_tokens_required(s: EngineSettings) -> Finding | None:
    if _spec_method(s) not in ("ngram", "ngram_gpu") or _spec_tokens(s) is not None:
        return None
    d = ("speculative_config",)
    return Finding(d, f"{s.name(d[0])} proposes {_spec_method(s)} drafts without "
                   "num_speculative_tokens (how many)",
                   f"add num_speculative_tokens to {s.where(d[0])}")


@rule("speculative-tensor-parallel-size", *_SPEC_ARGS,
      says="'tensor_parallel_size' is not a valid argument in the",
      summary="--speculative-config takes draft_tensor_parallel_size, not "
              "tensor_parallel_size")
def _spec_tp(s: EngineSettings) -> Finding | None:
    if s.json("speculative_config").get("tensor_parallel_size") is None:
        return None
    d = ("speculative_config.tensor_parallel_size",)
    return Finding(d, f"{s.name(d[0])} is not a key vLLM takes there",
                   f"write draft_tensor_parallel_size in {s.where(d[0])}")


@rule("synthetic-acceptance-needs-synthetic-sampling", *_SPEC_ARGS,
      says="are only valid with rejection_sample_method='synthetic'",
      summary="synthetic_acceptance_rates/length need rejection_sample_method synthetic")
def _synthetic(s: EngineSettings) -> Finding | None:
    config = s.json("speculative_config")
    if config.get("rejection_sample_method") == "synthetic":
        return None
    for key in ("synthetic_acceptance_rates", "synthetic_acceptance_length"):
        if config.get(key) is not None:
            d = (f"speculative_config.{key}",)
            return Finding(d, f"{s.name(d[0])} is only read with rejection_sample_method "
                           "synthetic", f"remove {key}, or set rejection_sample_method: "
                           f"synthetic in {s.where(d[0])}")
    return None


@rule("spec-decode-metrics-need-speculation", *_VLLM_POST,
      says="--per-request-spec-decode-metrics requires speculative decoding",
      summary="--per-request-spec-decode-metrics needs --speculative-config")
def _spec_metrics(s: EngineSettings) -> Finding | None:
    if s.get("per_request_spec_decode_metrics") in (None, "none") or _spec_method(s):
        return None
    d = ("per_request_spec_decode_metrics",)
    return Finding(d, f"{s.name(d[0])} reports on speculative decoding, which is off",
                   f"remove {s.where(d[0])}, or add --speculative-config")


# Methods async scheduling works with (VllmConfig.__post_init__: EagleModelTypes, MTP
# types, NgramGPUTypes, draft_model, dspark, dflash).
_ASYNC_METHODS = frozenset({"eagle", "eagle3", "extract_hidden_states", "dflash", "ngram_gpu",
                            "draft_model", "dspark", "mtp"})


@rule("async-scheduling-speculative-method", *_VLLM_POST,
      says="Currently, async scheduling is only supported",
      summary="--async-scheduling works with EAGLE, MTP, draft-model, ngram_gpu, DSpark "
              "and DFlash speculative decoding only")
def _async_method(s: EngineSettings) -> Finding | None:
    method = _spec_method(s)
    if s.get("async_scheduling") is not True or method is None \
            or method in _ASYNC_METHODS or method.endswith("_mtp"):
        return None
    d = ("async_scheduling", "speculative_config.method")
    return Finding(d, f"{s.name(d[0])} cannot run {method} speculative decoding",
                   f"remove {s.where(d[0])} (vLLM then schedules synchronously for "
                   f"{method}), or use another method")


@rule("async-scheduling-padded-drafter-batch", *_VLLM_POST,
      says="disable_padded_drafter_batch=True.",
      summary="--async-scheduling does not work with disable_padded_drafter_batch")
def _async_padded(s: EngineSettings) -> Finding | None:
    method = _spec_method(s)
    if s.get("async_scheduling") is not True or method is None \
            or not (method in _ASYNC_METHODS or method.endswith("_mtp")) \
            or s.json("speculative_config").get("disable_padded_drafter_batch") is not True:
        return None
    d = ("async_scheduling", "speculative_config.disable_padded_drafter_batch")
    return Finding(d, f"{s.name(d[0])} cannot run with {s.name(d[1])}",
                   f"remove {s.where(d[0])}, or disable_padded_drafter_batch")


@rule("mamba-stochastic-rounding-needs-float16", *_VLLM_POST,
      says="Stochastic rounding for Mamba cache requires",
      summary="--enable-mamba-cache-stochastic-rounding needs --mamba-ssm-cache-dtype "
              "float16")
def _mamba_rounding(s: EngineSettings) -> Finding | None:
    if not s.on("enable_mamba_cache_stochastic_rounding") \
            or s.get("mamba_ssm_cache_dtype") == "float16":
        return None
    d = ("enable_mamba_cache_stochastic_rounding", "mamba_ssm_cache_dtype")
    return Finding(d, f"{s.name(d[0])} needs a float16 SSM cache, not {s.name(d[1])}",
                   "add --mamba-ssm-cache-dtype float16, or remove "
                   f"{s.where(d[0])}")


# --- LoRA -----------------------------------------------------------------------------

@rule("cpu-loras-below-loras", "vllm.config.lora", "LoRAConfig._validate_lora_config",
      says="must be >= ",
      summary="max-cpu-loras may not be below max-loras")
def _cpu_loras(s: EngineSettings) -> Finding | None:
    cpu, loras = s.number("max_cpu_loras"), s.number("max_loras")
    if not s.on("enable_lora") or not cpu or cpu <= 0 or loras is None or cpu >= loras:
        return None
    d = ("max_cpu_loras", "max_loras")
    return Finding(d, f"{s.name(d[0])} holds fewer adapters than {s.name(d[1])} runs at once",
                   f"raise {s.where(d[0])} to at least {loras}, or lower {s.where(d[1])}")

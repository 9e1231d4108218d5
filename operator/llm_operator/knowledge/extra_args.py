"""spec.engine.extraArgs read the way ``vllm serve`` reads them (pure).

vLLM's parser is more forgiving than a pattern: it accepts any unique prefix of a long
option (``--max-num-seq=999`` sets ``--max-num-seqs``), underscores for dashes, the
``=`` form, dotted keys of JSON options (``--compilation-config.mode 3``) and short
aliases (``-tp``, ``-dp``). So each item is resolved against the option table of the
vLLM release the default image runs (``data/vllm_serve_flags.json``, written by
``tools/vllm_flags.py`` from vLLM's own parser and checked against it by the vLLM tier),
with argparse's rules, and then judged by what it sets:

- a flag a spec field owns, or the operator sets itself: refused, naming the field;
- a flag that silently invalidates the plan (GPUs per replica, KV capacity, how the pod
  is reached or measured): refused, saying what to do instead;
- an item vLLM would refuse at start (ambiguous prefix, unknown flag, a flag and its
  value in one item, whitespace or control characters): refused, or only a warning
  for an unknown flag when ``spec.image`` names another image, whose vLLM may know it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from ..api.errors import SpecError
from ..api.models import SECRET_TOKEN, AdaptationMode, LLMServiceSpec
from .serve_args import (  # noqa: F401 - Flag, flag_table... re-exported for their users
    Arity,
    Flag,
    FlagTable,
    flag_table,
    is_value,
    normalize_key,
    vllm_spelling,
)

# vLLM flags the operator manages, with the spec field that sets them instead. One
# place for the planner's checks and the renderer. Flags in UNPINNABLE_FLAGS are
# always rejected in extraArgs (the operator owns them outright).
MANAGED_FLAGS: dict[str, str] = {
    "--model": "spec.model.name (or spec.model.volume)",
    "--served-model-name": "spec.model.name",
    "--host": "nothing: the operator serves on 0.0.0.0",
    "--port": "nothing: the operator serves on port 8000",
    "--revision": "spec.model.revision",
    "--tensor-parallel-size": "spec.engine.tensorParallelSize",
    "-tp": "spec.engine.tensorParallelSize",
    "--pipeline-parallel-size": "spec.engine.pipelineParallelSize",
    "-pp": "spec.engine.pipelineParallelSize",
    "--decode-context-parallel-size": "spec.engine.decodeContextParallelSize",
    "-dcp": "spec.engine.decodeContextParallelSize",
    "--max-model-len": "spec.engine.maxModelLen",
    "--gpu-memory-utilization": "spec.engine.gpuMemoryUtilization",
    "--max-num-seqs": "spec.engine.maxNumSeqs",
    "--max-num-batched-tokens": "spec.engine.maxNumBatchedTokens",
    "--dtype": "spec.engine.dtype",
    "--kv-cache-dtype": "spec.engine.kvCacheDtype",
    "--quantization": "spec.model.quantization",
    "-q": "spec.model.quantization",
    "--enable-chunked-prefill": "spec.engine.enableChunkedPrefill",
    "--no-enable-chunked-prefill": "spec.engine.enableChunkedPrefill",
    "--enable-prefix-caching": "spec.engine.enablePrefixCaching",
    "--no-enable-prefix-caching": "spec.engine.enablePrefixCaching",
}
UNPINNABLE_FLAGS = frozenset({"--model", "--served-model-name", "--host", "--port"})

# Flags no field owns that would make the plan or the pod wrong without an error, by
# the destination vLLM parses them into: what they break and what to do instead.
_DP = ("runs several engines in the pod, each needing the plan's GPUs: the pod asks "
       "for one engine's", "use spec.replicas for more engines")
PLAN_BREAKING: dict[str, tuple[str, str]] = {
    "data_parallel_size": _DP,
    "data_parallel_size_local": _DP,
    "data_parallel_rank": _DP,
    "data_parallel_start_rank": _DP,
    "data_parallel_address": _DP,
    "data_parallel_rpc_port": _DP,
    "data_parallel_backend": _DP,
    "data_parallel_hybrid_lb": _DP,
    "data_parallel_external_lb": _DP,
    "prefill_context_parallel_size": (
        "multiplies the GPUs one engine needs (vLLM's world size is tensor x pipeline x "
        "prefill-context parallel), while the pod asks for tensor x pipeline only",
        "remove it; size the engine with spec.engine.tensorParallelSize and "
        "pipelineParallelSize"),
    "kv_cache_memory_bytes": (
        "fixes the KV cache size in bytes, so the planned KV capacity and max-num-seqs "
        "no longer hold", "remove it and set spec.engine.gpuMemoryUtilization"),
    "num_gpu_blocks_override": (
        "overrides the KV cache size, so the planned KV capacity and max-num-seqs no "
        "longer hold", "remove it and set spec.engine.gpuMemoryUtilization"),
    "block_size": (
        "changes the KV block size the plan counts blocks in (vLLM's default 16)",
        "remove it"),
    "cpu_offload_gb": (
        "moves weights to host memory, which the plan (GPU count, KV capacity, pod "
        "memory) does not model", "remove it; quantize (spec.model.quantization) or "
        "let the plan add GPUs"),
    "config": (
        "reads further arguments from a file, which could set any managed flag",
        "give those arguments as extraArgs items"),
    "headless": (
        "starts no API server, so the pod never passes its /health probes",
        "remove it"),
    **dict.fromkeys(("nnodes", "node_rank", "master_addr", "master_port"), (
        "spreads one engine over nodes, which the operator renders itself for a replica "
        "that needs more GPUs than a node has (a LeaderWorkerSet; one node needs none)",
        "remove it; set spec.gpus.perNode, or pin spec.gpus.count, for a replica over "
        "nodes")),
    "uds": (
        "serves on a Unix socket instead of port 8000, so probes and the Service find "
        "nothing", "remove it"),
    "ssl_keyfile": (
        "serves HTTPS, while the probes and the Prometheus scrape speak HTTP",
        "remove it; terminate TLS in front of the Service (Ingress, Gateway or mesh)"),
    "ssl_certfile": (
        "serves HTTPS, while the probes and the Prometheus scrape speak HTTP",
        "remove it; terminate TLS in front of the Service (Ingress, Gateway or mesh)"),
}

# Flags whose value is a secret: in extraArgs it sits in clear text in the LLMService and
# the pod spec, readable by anyone who can read either.
SECRET_FLAGS: dict[str, str] = {
    "hf_token": "use spec.model.tokenSecretRef (a Secret, passed as HF_TOKEN)",
    "api_key": "set VLLM_API_KEY from a Secret: spec.pod.env with valueFrom.secretKeyRef",
}

def _managed_dests(table: FlagTable) -> dict[str, tuple[str, str]]:
    """destination -> (a managed flag that sets it, the field that owns it)."""
    return {table.options[flag].dest: (flag, field)
            for flag, field in MANAGED_FLAGS.items() if flag in table.options}


@dataclass
class _Open:
    """The last flag read, while it may still take values (argparse's consumption)."""

    index: int
    option: str
    flag: Flag
    given: int = 0


# An option the table does not know (another image's vLLM may): any number of values.
_UNKNOWN = Flag("", "*")
# A dotted key (``--compilation-config.mode 3``): vLLM folds it and the next item.
_DOTTED = Flag("", 1)


def check_extra_args(spec: LLMServiceSpec) -> tuple[list[SpecError], list[str]]:
    """Every problem with ``spec.engine.extraArgs``: errors (the spec cannot be served
    as written) and warnings (it may be served, but the user should know). Items are
    read as vLLM's parser reads them: each flag takes as many of the following values
    as its arity in the option table allows (one, one or more, at most one...)."""
    table = flag_table()
    managed = _managed_dests(table)
    errors: list[SpecError] = []
    warnings: list[str] = []
    last: _Open | None = None  # the flag the next value would go to
    given: dict[str, int] = {}  # destination of a value-taking flag -> its item

    def close() -> None:
        nonlocal last
        if last is not None and last.flag.short_of(last.given):
            errors.append(_missing_value(last.index, last.option, last.flag.arity))
        last = None

    for i, arg in enumerate(vllm_spelling(spec.engine.extra_args)):
        field = f"spec.engine.extraArgs[{i}]"
        if SECRET_TOKEN.search(arg):
            errors.append(SpecError(field, "holds what looks like an access token in clear "
                                    "text: anyone who can read the LLMService or its pods "
                                    "can read it", "keep it in a Secret: "
                                    "spec.model.tokenSecretRef for the Hugging Face token"))
            if last is not None and is_value(arg) and last.flag.wants_more(last.given):
                last.given += 1  # the value of the flag before it
            else:
                last = None
            continue
        if arg != arg.strip() or any(c in arg for c in "\n\r\t\v\f") or not arg:
            errors.append(SpecError(field, f"{arg!r} has surrounding whitespace, a control "
                                    "character or is empty (vLLM receives it verbatim)",
                                    "give one flag or one value per item, without whitespace "
                                    "around it"))
            last = None
            continue
        if is_value(arg):
            if last is not None and last.flag.wants_more(last.given):
                last.given += 1
                continue
            if i == 0:
                errors.append(SpecError(field, f"{arg!r} is a value with no flag before it "
                                        "(vLLM refuses a stray positional argument)",
                                        "put its flag first, e.g. \"--max-logprobs\", \"5\""))
            elif last is not None:
                errors.append(SpecError(field, f"{arg!r} follows {last.option}, which takes "
                                        f"{_arity_words(last.flag.arity)} (vLLM refuses a "
                                        "stray positional argument)",
                                        "remove it, or put the flag it belongs to before it"))
            else:
                errors.append(SpecError(field, f"{arg!r} follows a flag that takes no value "
                                        "(vLLM refuses a stray positional argument)",
                                        "remove it, or put the flag it belongs to before it"))
            continue
        close()
        key = arg.split("=", 1)[0]
        if " " in key:
            errors.append(SpecError(field, f"{arg!r} holds a flag and its value in one item "
                                    "(vLLM reads it as one unknown argument)",
                                    f"split it into two items: {key.split(' ', 1)[0]!r}, "
                                    f"{key.split(' ', 1)[1].strip()!r}, or use "
                                    f"{key.split(' ', 1)[0]}=VALUE"))
            continue
        option, candidates = table.resolve(normalize_key(key))
        if option is None:
            last = _Open(i, key, _UNKNOWN)
            if candidates:
                errors.append(SpecError(field, f"{key!r} is ambiguous for vLLM "
                                        f"{table.vllm_version}: it abbreviates "
                                        + ", ".join(candidates[:6])
                                        + (" ..." if len(candidates) > 6 else ""),
                                        "write the whole flag"))
                continue
            close_to = difflib.get_close_matches(normalize_key(key), list(table.options), n=3)
            hint = f" (did you mean {', '.join(close_to)}?)" if close_to else ""
            problem = f"{key!r} is not an option of vllm serve {table.vllm_version}{hint}"
            if spec.image is None:
                errors.append(SpecError(field, problem + ", the default image's vLLM: it "
                                        "would refuse to start", "correct or remove it"))
            else:
                warnings.append(f"{field}: {problem}; your image ({spec.image}) must know it, "
                                "or vLLM will refuse to start")
            continue
        flag = table.options[option]
        dest, dotted = flag.dest, "." in key
        # "--flag=v", or a short flag with its value attached ("-qawq"): one value given.
        inline = "=" in arg or (not key.startswith("--") and len(key) > len(option) == 2)
        # With "=" a flag takes that one value and no more, whatever its arity.
        last = (_Open(i, f"{option}=...", Flag(dest, 1), given=1) if inline
                else _Open(i, option, _DOTTED if dotted else flag))
        spelled = "" if option == key else f" (vLLM reads {key!r} as {option})"
        if flag.takes_value and not dotted and dest in given and not flag.appends:
            errors.append(SpecError(field, f"sets {option}{spelled} again, after item "
                                    f"{given[dest]} (vLLM keeps the last value: the first "
                                    "would be lost)", "give it once"
                                    + (", with all its values after it"
                                       if flag.arity in ("+", "*") else "")))
        elif flag.takes_value and not dotted:
            given[dest] = i
        if inline and not flag.takes_value and not dotted:
            errors.append(SpecError(field, f"gives {option}{spelled} a value, and it is a "
                                    "switch that takes none (vLLM refuses to start: ignored "
                                    "explicit argument)", f"give it alone: {option}"))
            continue
        if "=" in arg and not arg.split("=", 1)[1] and flag.takes_value:
            # "--max-loras=", "-O=": argparse hands vLLM an empty string, which a number
            # refuses (vLLM does not start) and a name or path takes as given.
            errors.append(SpecError(field, f"gives {option}{spelled} an empty value (nothing "
                                    "after '=')", f"write its value after '=' "
                                    f"({option}=VALUE), or remove the item"))
            continue
        if dest in SECRET_FLAGS:
            errors.append(SpecError(field, f"sets {option}{spelled}, a secret, in clear text "
                                    "(anyone who can read the LLMService or its pods can "
                                    "read it)", SECRET_FLAGS[dest]))
            continue
        if dest in managed:
            flag_name, owner = managed[dest]
            fix = (f"remove it: the operator sets {flag_name} itself ({owner})"
                   if flag_name in UNPINNABLE_FLAGS else f"set {owner} instead")
            errors.append(SpecError(field, f"sets {option}, which the operator "
                                    f"manages{spelled}", fix))
        elif dest in PLAN_BREAKING:
            why, fix = PLAN_BREAKING[dest]
            errors.append(SpecError(field, f"sets {option}{spelled}, which {why}", fix))
        elif dest == "disable_log_stats" and spec.adaptation.mode != AdaptationMode.DISABLED:
            errors.append(SpecError(field, f"sets {option}{spelled}, which removes the engine "
                                    "metrics the online adaptation reads",
                                    "remove it, or set spec.adaptation.mode: Disabled"))
    close()
    return errors, warnings


def _arity_words(arity: Arity) -> str:
    return {0: "no value", 1: "one value", "?": "at most one value"}.get(
        arity, f"{arity} values")


def _missing_value(index: int, option: str, arity: Arity = 1) -> SpecError:
    expected = {"+": "at least one argument"}.get(str(arity), "one argument")
    if isinstance(arity, int) and arity > 1:
        expected = f"{arity} arguments"
    return SpecError(f"spec.engine.extraArgs[{index}]", f"{option} takes a value, and none "
                     f"follows it (vLLM refuses to start: expected {expected})",
                     f"put its value in the next item, or write {option}=VALUE")


def flag_set(extra_args: list[str], flags: tuple[str, ...]) -> str | None:
    """The first of ``flags`` that an ``extraArgs`` item sets, as vLLM's parser reads the
    item (prefixes, underscores, ``=`` forms: see :meth:`FlagTable.resolve`), or None."""
    table = flag_table()
    for arg in extra_args:
        if not arg.startswith("-"):
            continue
        option, _ = table.resolve(normalize_key(arg.strip().split("=", 1)[0]))
        if option in flags:
            return option
    return None

"""spec.engine.extraArgs as vLLM's parser reads them: every spelling vLLM accepts for a
flag the operator manages is refused, and so is every item vLLM itself would refuse."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_planning import L8B, spec

from llm_operator.api.errors import SpecError, SpecErrors
from llm_operator.api.models import LLMServiceSpec
from llm_operator.knowledge.extra_args import check_extra_args, flag_table
from llm_operator.planning import make_plan
from llm_operator.rendering.vllm_args import build_vllm_args

ROOT = Path(__file__).resolve().parents[2]


def errors_of(args: list[str], **sections: Any) -> list[SpecError]:
    return check_extra_args(spec(L8B, "H100", engine={"extraArgs": args}, **sections))[0]


def refused(args: list[str], **sections: Any) -> SpecError:
    errors = errors_of(args, **sections)
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize(("args", "owner"), [
    (["--max-num-seq=999"], "spec.engine.maxNumSeqs"),       # a unique prefix, = form
    (["--max_num_seq", "999"], "spec.engine.maxNumSeqs"),    # underscores, prefix
    (["--gpu-memory-util=0.2"], "spec.engine.gpuMemoryUtilization"),
    (["--tensor-parallel", "2"], "spec.engine.tensorParallelSize"),
    (["-tp=2"], "spec.engine.tensorParallelSize"),
    (["--no-enable-prefix"], "spec.engine.enablePrefixCaching"),
    (["--served-model", "x"], "spec.model.name"),
])
def test_every_spelling_of_a_managed_flag_is_refused_naming_its_field(
        args: list[str], owner: str) -> None:
    err = refused(args)
    assert err.field == "spec.engine.extraArgs[0]"
    assert owner in err.fix
    key = args[0].split("=")[0]
    if not key.startswith("-tp"):
        assert f"vLLM reads {key!r} as" in err.problem  # the user sees why it matched


@pytest.mark.parametrize(("args", "words"), [
    (["--data-parallel-size=2"], "spec.replicas"),
    (["-dp", "2"], "spec.replicas"),
    (["--prefill-context-parallel-size", "2"], "tensorParallelSize"),
    (["--kv-cache-memory-bytes", "2097152"], "gpuMemoryUtilization"),
    (["--num-gpu-blocks-override=100"], "gpuMemoryUtilization"),
    (["--block-size", "32"], "remove it"),
    (["--cpu-offload-gb", "10"], "quantize"),
    (["--config", "/etc/vllm.yaml"], "extraArgs items"),
    (["--headless"], "remove it"),
    (["--nnodes", "2"], "spec.gpus.perNode"),
    (["--node-rank=1"], "spec.gpus.perNode"),
    (["--master-addr", "10.0.0.1"], "spec.gpus.perNode"),
    (["--master-port", "29600"], "spec.gpus.perNode"),
])
def test_flags_that_would_invalidate_the_plan_are_refused(args: list[str], words: str) -> None:
    assert words in refused(args).fix


@pytest.mark.parametrize(("args", "words"), [
    ([" --enforce-eager"], "whitespace"),
    (["--enforce-eager\n--max-num-seqs=999"], "control character"),
    ([""], "empty"),
    (["--gpu-memory-utilization 0.5"], "split it into two items"),
    (["--max-num"], "ambiguous"),
    (["--enforce-eager", "yes"], "takes no value"),
    (["5"], "no flag before it"),
    (["--swap-space", "4"], "not an option of vllm serve"),  # gone in vLLM 0.32
])
def test_items_vllm_would_refuse_at_start_are_refused_now(args: list[str], words: str) -> None:
    err = refused(args)
    assert words in err.problem + err.fix, err


def test_an_unknown_flag_is_only_a_warning_for_another_image() -> None:
    svc = spec(L8B, "H100", engine={"extraArgs": ["--swap-space", "4"]}).model_copy(
        update={"image": "registry.example/vllm:nightly"})
    errors, warnings = check_extra_args(svc)
    assert errors == []
    assert any("--swap-space" in w and "registry.example/vllm:nightly" in w for w in warnings)
    assert any("--swap-space" in w for w in make_plan(svc).warnings)  # `plan` shows it


def test_metrics_off_is_refused_only_while_adaptation_reads_them() -> None:
    assert "spec.adaptation.mode" in refused(["--disable-log-stats"]).fix
    assert errors_of(["--disable-log-stats"], adaptation={"mode": "Disabled"}) == []


VALID = ["--enforce-eager", "--max-logprobs", "5", "--compilation-config.mode", "3",
         "--seed", "-1", "--max-log-len=256", "--enable-log-requests",
         "--kv-transfer-config", '{"kv_connector": "x", "kv_role": "kv_both"}']


def test_ordinary_flags_pass_and_reach_the_container_verbatim() -> None:
    assert errors_of(VALID) == []
    from llm_operator.api.models import parse_llmservice
    body = {"metadata": {"name": "x"}, "spec": {"model": {"name": L8B},
                                                "gpus": {"product": "H100"},
                                                "engine": {"extraArgs": VALID}}}
    svc = parse_llmservice(body)
    args = build_vllm_args(svc, make_plan(svc.spec))
    assert args[-len(VALID):] == VALID


def test_the_renderer_refuses_what_the_planner_refuses() -> None:
    from llm_operator.api.models import parse_llmservice
    svc = parse_llmservice({"metadata": {"name": "x"}, "spec": {
        "model": {"name": L8B}, "gpus": {"product": "H100"}}})
    bad = svc.model_copy(update={"spec": svc.spec.model_copy(update={
        "engine": svc.spec.engine.model_copy(update={"extra_args": ["--max-num-seq=9"]})})})
    with pytest.raises(SpecErrors):
        build_vllm_args(bad, make_plan(svc.spec))


def test_pinned_max_num_seqs_above_vllms_batched_token_default_raises_the_batch() -> None:
    # vLLM refuses max_num_batched_tokens < max_num_seqs at start; its default on an L4
    # is 2048 tokens, so a pin of 4096 sequences left alone would never start.
    svc: LLMServiceSpec = spec(L8B, "NVIDIA-L4", engine={"maxNumSeqs": 4096})
    plan = make_plan(svc)
    assert plan.max_num_batched_tokens is not None
    assert plan.max_num_batched_tokens >= plan.max_num_seqs == 4096
    # ... while a pin below the default leaves vLLM's default alone.
    assert make_plan(spec(L8B, "NVIDIA-L4", engine={"maxNumSeqs": 64})
                     ).max_num_batched_tokens is None


# Options that take several values (nargs "+"), at most one ("?"), or add up when given
# again: read as vLLM's parser reads them. Each case: the items, and whether vLLM parses
# them; the vLLM tier below checks every one against the real parser.
ARITY_CASES: dict[str, tuple[list[str], bool]] = {
    "lora-several": (["--enable-lora", "--lora-modules", "a=/m/a", "b=/m/b",
                      "--max-loras", "2"], True),
    "lora-json": (["--enable-lora", "--lora-modules",
                   '{"name": "a", "path": "/m/a", "base_model_name": "m"}'], True),
    "domains": (["--allowed-media-domains", "a.example", "b.example"], True),
    "negative-values": (["--cudagraph-capture-sizes", "1", "2", "-1"], True),
    "ignore-patterns-last": (["--enforce-eager", "--ignore-patterns", "*.pt", "*.bin"], True),
    "middleware-twice": (["--middleware", "a.b", "--middleware", "c.d"], True),
    "opt-level-attached": (["-O3"], True),
    "opt-level-apart": (["-O", "1", "--enforce-eager"], True),
    "short-attached": (["-qawq"], True),  # (refused as managed: parsed all the same)
    "plus-empty": (["--lora-modules", "--enforce-eager"], False),
    "plus-at-end": (["--enforce-eager", "--allowed-media-domains"], False),
    "equals-then-more": (["--allowed-media-domains=a.example", "b.example"], False),
    "one-value-then-more": (["--max-logprobs", "5", "6"], False),
}


def test_multi_value_options_take_every_value_that_follows() -> None:
    """`--lora-modules a=x b=y` is one flag with two values, not a stray `b=y`."""
    for name in ("lora-several", "lora-json", "domains", "negative-values",
                 "ignore-patterns-last", "middleware-twice", "opt-level-attached",
                 "opt-level-apart"):
        assert errors_of(ARITY_CASES[name][0]) == [], name


@pytest.mark.parametrize(("name", "index", "words"), [
    ("plus-empty", 0, "expected at least one argument"),
    ("plus-at-end", 1, "expected at least one argument"),
    ("equals-then-more", 1, "follows --allowed-media-domains=..., which takes one value"),
    ("one-value-then-more", 2, "follows --max-logprobs, which takes one value"),
])
def test_a_multi_value_option_short_of_values_or_followed_by_strays_is_refused(
        name: str, index: int, words: str) -> None:
    err = refused(ARITY_CASES[name][0])
    assert err.field == f"spec.engine.extraArgs[{index}]"
    assert words in err.problem, err


def test_a_replacing_multi_value_option_given_twice_is_refused_an_appending_one_is_not() -> None:
    # vLLM keeps only the last --lora-modules (its action replaces); --middleware adds up.
    err = refused(["--enable-lora", "--lora-modules", "a=/m/a", "--lora-modules", "b=/m/b"])
    assert err.field == "spec.engine.extraArgs[3]"
    assert "the first would be lost" in err.problem
    assert "with all its values after it" in err.fix
    assert errors_of(ARITY_CASES["middleware-twice"][0]) == []


_PARSE = r"""
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
sys.path.insert(0, sys.argv[1])
from vllm_flags import flag_table
serve = ServeSubcommand()
top = FlexibleArgumentParser(prog="vllm")
serve.subparser_init(top.add_subparsers(dest="subparser"))
out = {"table": flag_table(), "cases": {}}
for name, argv in json.load(sys.stdin).items():
    try:
        ns = top.parse_args(["serve", "m", *argv])
        out["cases"][name] = {"ok": True, "max_num_seqs": ns.max_num_seqs,
                              "lora_modules": [m.name for m in ns.lora_modules or []],
                              "allowed_media_domains": ns.allowed_media_domains,
                              "middleware": ns.middleware}
    except BaseException as exc:  # argparse exits
        out["cases"][name] = {"ok": False, "error": repr(exc)}
print(json.dumps(out))
"""


@pytest.mark.vllm  # imports vLLM (~10 s); no server starts
def test_the_flag_table_is_the_installed_vllm_serve_parser() -> None:
    """The committed table is what vLLM's parser defines, arity and append actions
    included (regenerate it with tools/vllm_flags.py), and the readings above are the
    parser's own: what the operator accepts vLLM parses, a prefix it refuses vLLM reads
    as the managed flag, items it calls ambiguous, stray or short of values vLLM
    refuses, and a multi-value option takes every value that follows it."""
    python = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
    if not python.exists():
        pytest.skip(f"no vLLM interpreter at {python} (see docs/TESTING.md)")
    cases = {"valid": VALID, "prefix": ["--max-num-seq=999"], "ambiguous": ["--max-num", "5"],
             "stray": ["--enforce-eager", "yes"], "one-item": ["--max-logprobs 5"],
             "gone": ["--swap-space", "4"],
             "lora-twice": ["--enable-lora", "--lora-modules", "a=/m/a",
                            "--lora-modules", "b=/m/b"]}
    cases |= {name: argv for name, (argv, _) in ARITY_CASES.items()}
    proc = subprocess.run([str(python), "-c", _PARSE, str(ROOT / "tools")],
                          input=json.dumps(cases), capture_output=True, text=True,
                          timeout=180, check=False, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    table = flag_table()
    assert out["table"]["vllm"] == table.vllm_version
    assert {k: (v["dest"], v["arity"], v["appends"])
            for k, v in out["table"]["options"].items()} \
        == {k: (f.dest, f.arity, f.appends) for k, f in table.options.items()}
    parsed = out["cases"]
    assert parsed["valid"]["ok"], parsed["valid"]
    assert parsed["prefix"]["ok"] and parsed["prefix"]["max_num_seqs"] == 999  # why refused
    for name in ("ambiguous", "stray", "one-item", "gone"):
        assert not parsed[name]["ok"], (name, parsed[name])
    for name, (argv, ok) in ARITY_CASES.items():
        assert parsed[name]["ok"] is ok, (name, parsed[name])
        if name != "short-attached":  # -qawq sets a managed flag: refused for that
            assert (errors_of(argv) == []) is ok, (name, errors_of(argv))
    assert parsed["lora-several"]["lora_modules"] == ["a", "b"]
    assert parsed["domains"]["allowed_media_domains"] == ["a.example", "b.example"]
    assert parsed["middleware-twice"]["middleware"] == ["a.b", "c.d"]
    # Given twice, vLLM keeps only the last --lora-modules: why the operator refuses it.
    assert parsed["lora-twice"]["ok"] and parsed["lora-twice"]["lora_modules"] == ["b"]


def test_the_live_cap_sees_its_flags_in_every_spelling_vllm_accepts() -> None:
    from llm_operator.health.status import LiveCapReason, live_cap_blocker

    for args in (["--scheduler_cls=my.Sched"], ["--max-num-active", "4"],
                 ["--scheduler-cls", "my.Sched"]):
        s = spec(L8B, "H100", engine={"extraArgs": args}, adaptation={"mode": "Apply"})
        blocked = live_cap_blocker(s, {})
        assert blocked is not None and blocked[0] == LiveCapReason.OWN_SCHEDULER, args

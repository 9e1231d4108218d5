"""vLLM's start-up rules at plan time (issue 28): a spec whose engine arguments vLLM would
refuse is refused by the planner, naming the fields, the rule and the fix; the tuner
never tries such a configuration; and what the planner changes so that vLLM starts is
said in the status. That vLLM itself refuses every corpus case is the vLLM tier's
``tests/vllm/test_vllm_refuses_engine_rules.py``."""

from __future__ import annotations

import pytest
from tests.support.engine_refusals import Case, baseline, cases, rendered_args, service

from llm_operator import rendering
from llm_operator.api.errors import SpecError, SpecErrors
from llm_operator.health.status import plan_summary
from llm_operator.inpod.tuner.search import Config, Space
from llm_operator.knowledge.engine_rules import RULES, EngineSettings, refusals
from llm_operator.knowledge.serve_args import read_args
from llm_operator.planning import make_plan
from llm_operator.rendering.vllm_args import build_vllm_flags
from llm_operator.settings import Settings

pytestmark = pytest.mark.unit

CASES = {c.id: c for c in cases()}


def refusal_of(case: Case) -> list[SpecError]:
    with pytest.raises((SpecError, SpecErrors)) as info:
        make_plan(case.svc.spec)
    exc = info.value
    return exc.errors if isinstance(exc, SpecErrors) else [exc]  # type: ignore[union-attr]


def test_the_corpus_covers_every_rule_with_twenty_cases_or_more() -> None:
    assert len(CASES) == len(cases()) >= 20
    assert {c.rule for c in CASES.values()} == {r.id for r in RULES}
    assert len({r.id for r in RULES}) == len(RULES)


@pytest.mark.parametrize("case_id", list(CASES))
def test_the_planner_refuses_the_case_naming_its_fields_the_rule_and_the_fix(
        case_id: str) -> None:
    case = CASES[case_id]
    rule = next(r for r in RULES if r.id == case.rule)
    errors = [e for e in refusal_of(case) if rule.source in e.problem]
    assert errors, [str(e) for e in refusal_of(case)]
    err = errors[0]
    assert err.field == case.fields[0]  # the field to change first
    for field in case.fields:
        assert field in str(err), (field, str(err))
    assert "vLLM 0.32.0 refuses to start" in err.problem and err.fix


def test_the_baseline_plans_and_renders_what_the_corpus_gives_vllm() -> None:
    svc = baseline()
    plan = make_plan(svc.spec)
    args = build_vllm_flags(svc, plan)
    engine = rendered_args(svc)
    at = args.index(engine[0])
    assert args[at:at + len(engine)] == engine  # the harness's arguments are the pod's
    assert rendering.render_all(svc, plan, Settings())


def test_a_planned_value_is_named_as_planned_and_the_pin_that_would_change_it() -> None:
    svc = service({"engine": {"maxModelLen": "auto",
                              "extraArgs": ["--long-prefill-token-threshold", "8192"]}})
    (err,) = [e for e in refusal_of(Case("x", "", (), "default", svc))]
    assert err.field == "spec.engine.extraArgs[0]"
    assert "planned: spec.engine.maxModelLen is auto" in err.problem
    assert "raise spec.engine.maxModelLen" in err.fix


def test_the_same_arguments_with_their_values_in_range_are_accepted() -> None:
    for engine in ({"extraArgs": ["--max-num-active-seqs", "8"]},
                   {"extraArgs": ["--long-prefill-token-threshold=1024"]},
                   {"enableChunkedPrefill": False, "maxNumBatchedTokens": 1024},
                   {"tensorParallelSize": 4, "decodeContextParallelSize": 2},
                   {"extraArgs": ["--enable-lora", "--max-loras", "4", "--max-cpu-loras", "4"]},
                   {"maxNumBatchedTokens": 32, "extraArgs": [
                       "--enable-lora", "--speculative-config",
                       '{"method": "ngram", "num_speculative_tokens": 3}']}):
        make_plan(service({"engine": engine}).spec)


def test_an_override_that_breaks_a_rule_is_refused_at_render_naming_it() -> None:
    svc = service({"engine": {"maxNumSeqs": "auto",
                              "extraArgs": ["--max-num-active-seqs", "6"]}})
    plan = make_plan(svc.spec)
    assert plan.max_num_seqs >= 6
    build_vllm_flags(svc, plan, {"maxNumSeqs": 6})
    with pytest.raises(SpecErrors) as info:
        build_vllm_flags(svc, plan, {"maxNumSeqs": 4})
    assert "tuned or adapted: spec.engine.maxNumSeqs is auto" in str(info.value)
    assert info.value.errors[0].field == "spec.engine.extraArgs[0]"


def test_what_the_planner_adjusts_so_that_vllm_starts_is_in_the_status() -> None:
    # The KV cache would hold 256 sequences (vLLM's own cap on this GPU), and the user
    # pinned 128 batched tokens: vLLM refuses more sequences than that, so the planner
    # plans 128 and says so (status.plan.adjustments; the controller posts it as an Event).
    svc = service({"engine": {"maxNumSeqs": "auto", "maxNumBatchedTokens": 128}})
    plan = make_plan(svc.spec)
    assert plan.max_num_seqs == 128
    (said,) = plan.adjustments
    assert "maxNumSeqs planned at 128, the pinned spec.engine.maxNumBatchedTokens" in said
    assert "instead of 256" in said and "vLLM refuses to start" in said
    assert plan_summary(plan)["adjustments"] == [said]
    assert make_plan(baseline().spec).adjustments == []  # nothing adjusted: nothing said


# --------------------------------------------------------------------------- reading


def test_arguments_are_read_as_vllms_parser_reads_them() -> None:
    got = read_args(["--max-num-seq=64", "--max_num_batched_tokens", "128",
                     "--no-enable-chunked-prefill", "-tp", "2", "--enable-lora",
                     "--speculative-config", '{"method": "ngram"}',
                     "--speculative-config.num_speculative_tokens", "3",
                     "--cudagraph-capture-sizes", "1", "2", "--middleware", "a.b",
                     "--middleware", "c.d", "--max-num-seqs", "32"])
    values = got.values
    assert values["max_num_seqs"] == "32"  # the last one given wins
    assert values["max_num_batched_tokens"] == "128"
    assert values["enable_chunked_prefill"] is False and values["enable_lora"] is True
    assert values["tensor_parallel_size"] == "2"
    # dotted keys build one object that replaces the one given whole (vLLM appends it last)
    assert values["speculative_config"] == {"num_speculative_tokens": 3}
    assert values["cudagraph_capture_sizes"] == ["1", "2"]
    assert values["middleware"] == ["a.b", "c.d"]
    assert got.at["max_num_seqs"] == 18 and got.at["speculative_config.num_speculative_tokens"] == 9


def test_a_rule_with_a_fact_the_caller_does_not_know_is_skipped() -> None:
    # Decode context parallelism against the KV heads: no model shape, no judgement.
    argv = ["--tensor-parallel-size", "2", "-dcp", "2"]
    assert refusals(EngineSettings.of(argv)) == []
    assert refusals(EngineSettings.of(["--enable-expert-parallel"])) == []


# --------------------------------------------------------------------------- the tuner


def test_the_tuner_never_tries_a_configuration_vllm_would_refuse() -> None:
    fixed = ("--max-model-len", "4096", "--no-enable-chunked-prefill")
    space = Space(max_num_seqs=(8, 64), max_num_batched_tokens=(1024, 4096, 8192),
                  default_max_num_seqs=256, default_max_num_batched_tokens=2048,
                  server_args=fixed)
    grid = space.grid()
    assert Config(8, 1024) not in grid and Config(64, 1024) not in grid  # < max-model-len
    assert Config(8, 4096) in grid and Config(64, 8192) in grid
    assert "smaller than --max-model-len 4096" in space.refusals(Config(8, 1024))[0]
    # LoRA with speculative decoding: the batch must hold max-num-seqs x (k + 1) tokens.
    lora = Space(max_num_seqs=(8, 64), max_num_batched_tokens=(256, 512),
                 server_args=("--max-model-len", "1024", "--enable-lora", "--speculative-config",
                              '{"method": "ngram", "num_speculative_tokens": 8}'))
    assert lora.grid() == [Config(8, 256), Config(8, 512)]
    # The rule of old (at least as many batched tokens as sequences) still holds.
    assert not Space(default_max_num_batched_tokens=2048).valid(Config(4096, None))


def test_the_docs_table_is_the_rules_as_they_are() -> None:
    from tests.support.engine_refusals import BEGIN, DOCS, END, rules_table

    text = DOCS.read_text()
    assert f"{BEGIN}\n{rules_table()}\n{END}" in text, (
        "docs/production/engine-rules.md is out of date: python -m tests.support.engine_refusals")

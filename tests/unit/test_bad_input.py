"""Bad input, one test per row of ``tests/unit/data/bad_input.yaml``.

Each bad case must be refused where the corpus says (the CRD's schema and CEL rules as
the API server applies them, emulated by :mod:`tests.support.crd`; the operator's
planner; or the command line), with a message naming the field, and no stage may crash
or accept it and produce an object the API server or vLLM would refuse. Each accepted
edge case must pass every stage and render objects that validate strictly. The table in
``docs/production/bad-input.md`` and the figures in ``benchmarks/RESULTS.md`` are written
from the same judgement (``python -m benchmarks.bad_input --write``) and checked here.
"""

from __future__ import annotations

import copy
import json
from functools import cache

import pytest
from benchmarks import bad_input as report
from benchmarks.results_md import current
from tests.support.bad_input import (
    Case,
    Judged,
    judge,
    load_accepted,
    load_cases,
    run_plan,
    validate_rendered,
)

CASES = {c.id: c for c in load_cases()}
ACCEPTED = {c.id: c for c in load_accepted()}


@cache
def judged(case_id: str) -> Judged:
    return judge(CASES.get(case_id) or ACCEPTED[case_id])


def test_the_corpus_is_large_and_its_ids_unique() -> None:
    cases = load_cases()
    assert len(cases) == len(CASES) >= 60
    assert len({c.kind for c in cases}) >= 10
    assert {c.refused_by for c in cases} == {"crd", "plan", "cli"}


@pytest.mark.parametrize("case_id", list(CASES))
def test_bad_input_is_refused_where_the_corpus_says_naming_the_field(case_id: str) -> None:
    result = judged(case_id)
    assert result.problems() == [], {s: (o.result, o.messages[:3])
                                     for s, o in result.outcomes.items()}


@pytest.mark.parametrize("case_id", list(ACCEPTED))
def test_accepted_edge_cases_render_valid_objects(case_id: str) -> None:
    result = judged(case_id)
    for stage, outcome in result.outcomes.items():
        assert outcome.result == "accepted", (stage, outcome.messages[:3])


def _case(**patch: object) -> Case:
    base = ACCEPTED["every-optional-block"]
    manifest = copy.deepcopy(base.manifest)
    manifest["spec"].update(patch)
    return Case("t", "t", "t", "plan", "", manifest, "")


def test_the_rendered_object_check_is_not_vacuous() -> None:
    """What validate_rendered would catch: a name the API server refuses, a field the
    schema does not know, tolerations and node affinity the API server refuses, an option
    vLLM does not know, a value option given twice, a stray value, a flag short of
    values."""
    ok = run_plan(_case())
    assert ok.result == "accepted", ok.messages
    from llm_operator.api.models import parse_llmservice
    from llm_operator.planning import make_plan
    from llm_operator.rendering import render_all
    from llm_operator.settings import Settings

    svc = parse_llmservice(_case().manifest)
    deployment = render_all(svc, make_plan(svc.spec), Settings())[0]
    broken = copy.deepcopy(deployment)
    broken["metadata"]["labels"]["bad key"] = "x"
    assert any("bad key" in p for p in validate_rendered(broken))
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["nodeSelectr"] = {}
    assert validate_rendered(broken)
    # Pod-spec rules the schema does not carry, which the API server applies (422).
    for pod_patch, expected in (
            ({"tolerations": [{"key": "a", "operator": "exists"}]}, "operator"),
            ({"tolerations": [{"key": "a", "effect": "NoSchedul"}]}, "effect"),
            ({"tolerations": [{"key": "bad key", "operator": "Exists"}]}, "key"),
            ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": []}}}}, "at least one node selector term"),
            ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "In"}]}]}}}}, "must be specified")):
        broken = copy.deepcopy(deployment)
        broken["spec"]["template"]["spec"].update(pod_patch)
        assert any(expected in p for p in validate_rendered(broken)), pod_patch
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                     if c["name"] == "vllm")
    for extra, expected in ((["--no-such-flag"], "not an option"),
                            (["--max-loras", "2"], "given twice"),
                            (["--enforce-eager", "x"], "a value no flag takes"),
                            (["--lora-modules"], "short of values")):
        broken = copy.deepcopy(deployment)
        c = next(c for c in broken["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "vllm")
        c["args"] = container["args"] + extra
        assert any(expected in p for p in validate_rendered(broken)), extra


def _all_judged() -> list[Judged]:
    return [judged(i) for i in CASES]


def test_the_docs_table_is_current() -> None:
    """docs/production/bad-input.md is what the tool writes from the corpus now."""
    assert report.DOC.read_text() == report.doc_markdown(_all_judged()), (
        "run: python -m benchmarks.bad_input --write")


def test_the_stored_figures_are_current_and_in_results_md() -> None:
    stored = json.loads(report.DATA.read_text())
    assert stored == report.figures(_all_judged(), [judged(i) for i in ACCEPTED]), (
        "run: python -m benchmarks.bad_input --write")
    assert stored["kinds"] >= 60 and stored["tracebacks"] == 0
    assert stored["acceptedButInvalid"] == 0
    assert report.section(stored) in current()


def test_the_real_server_section_is_what_its_stored_figures_render_to() -> None:
    """bad-input-real-server's section is its renderer's output from the stored figures
    (measured against a real kube-apiserver; only the rendering is checked here)."""
    from benchmarks import bad_input_real_server as real
    from benchmarks.goals import blocks_of

    stored = json.loads(real.DATA.read_text())
    assert real.section(stored).rstrip("\n") == blocks_of(current())[real.NAME]

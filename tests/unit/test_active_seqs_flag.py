"""The cap rendered as vLLM's --max-num-active-seqs where the image's vLLM takes it and the
live cap is not in use (issue 60 item 3): --max-num-seqs then stays the runner's capacity,
so a rollout of a new cap does not resize buffers or CUDA graphs."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_rendering import (
    LLAMA_405B_PLAN,
    LLAMA_405B_SPEC,
    args_of,
    containers_of,
    flag_value,
    hand_plan,
    make_svc,
)

from llm_operator import rendering
from llm_operator.adaptation.update import rollout_progress, workload_max_num_seqs
from llm_operator.api.errors import SpecErrors
from llm_operator.health import status as st
from llm_operator.knowledge.engine_rules import refusals
from llm_operator.knowledge.vllm_version import active_seqs_flag, table_from_json
from llm_operator.planning import engine_settings, runner_capacity
from llm_operator.rendering.admission import ENGINE_SCHEDULER_CLS, uses_active_seqs_flag
from llm_operator.settings import Settings

MODEL = {"name": "meta-llama/Llama-3.1-8B-Instruct"}
WITH = "vllm/vllm-openai:v0.33.0"  # the committed table: activeSeqsFlag true
WITHOUT = "vllm/vllm-openai:v0.30.0"  # activeSeqsFlag false
UNKNOWN = "vllm/vllm-openai:latest"
PLAN = {"max_num_seqs": 256}  # the runner's capacity (hand_plan's memory bound)


def render(spec: dict[str, Any], overrides: dict[str, int] | None = None, *,
           live: bool | None = None, default_image: str = WITH, **plan: Any
           ) -> list[dict[str, Any]]:
    svc = make_svc({"model": MODEL, **spec})
    settings = Settings(default_image=default_image)
    if live is None:
        live = st.live_cap_in_use(svc.spec, None, default_image=default_image)
    return rendering.render_all(svc, hand_plan(**{**PLAN, **plan}), settings,
                                overrides=overrides, live_cap=live)


def pair(args: list[str]) -> tuple[str | None, str | None]:
    return flag_value(args, "--max-num-seqs"), flag_value(args, "--max-num-active-seqs")


# --- the release table --------------------------------------------------------------


def test_the_table_says_which_releases_take_the_flag():
    assert active_seqs_flag(WITH).present
    assert active_seqs_flag("vllm/vllm-openai:v0.31.0").present
    assert active_seqs_flag("vllm/vllm-openai:v0.34.1").present  # a patch: its minor's row
    for image, said in ((WITHOUT, "whose vllm serve has no --max-num-active-seqs (0.30.0 "
                                  "checked statically"),
                        (UNKNOWN, "is unknown (its tag latest is not a vLLM release"),
                        ("vllm/vllm-openai:v0.40.0", "does not say whether"),
                        ("myorg/server:0.33.0", "is unknown (its repository")):
        flag = active_seqs_flag(image)
        assert not flag.present and said in flag.message, flag.message
        assert "rendered as --max-num-seqs" in flag.message


def test_a_row_without_the_fact_is_unknown_and_a_bad_value_names_the_fix():
    old = table_from_json({"measured": "m", "releases": {
        "0.33": {"verdict": "live", "checked": "0.33.0"}}})
    assert not active_seqs_flag(WITH, table=old).present
    with pytest.raises(ValueError, match=r"releases.0.33.activeSeqsFlag .* must be true or "
                                         r"false, got 'yes': re-run tools/check_live_cap"):
        table_from_json({"measured": "m", "releases": {
            "0.33": {"verdict": "live", "checked": "0.33.0", "activeSeqsFlag": "yes"}}})


# --- what renders --------------------------------------------------------------------


@pytest.mark.parametrize("mode", [{"adaptation": {"mode": "Recommend"}},
                                  {"adaptation": {"mode": "Disabled"}},
                                  {"adaptation": {"mode": "Apply", "liveCap": False}}])
def test_a_version_with_the_flag_renders_the_cap_as_the_flag(mode):
    args = args_of(render({**mode, "image": WITH}, {"maxNumSeqs": 40})[0])
    assert pair(args) == ("256", "40")
    at = args.index("--max-num-seqs")
    assert args[at:at + 4] == ["--max-num-seqs", "256", "--max-num-active-seqs", "40"]
    assert args.count("--max-num-seqs") == 1 and "--scheduler-cls" not in args


def test_a_restart_based_change_moves_only_the_active_cap():
    spec = {"image": WITH, "adaptation": {"mode": "Apply", "liveCap": False}}
    before, after = (args_of(render(spec, {"maxNumSeqs": n})[0]) for n in (40, 24))
    assert pair(before) == ("256", "40") and pair(after) == ("256", "24")
    assert [a for a in before if a != "40"] == [a for a in after if a != "24"]


def test_a_version_without_the_flag_or_an_unknown_one_keeps_max_num_seqs():
    for image in (WITHOUT, UNKNOWN, "vllm/vllm-openai@sha256:" + "0a" * 32):
        args = args_of(render({"image": image}, {"maxNumSeqs": 40})[0])
        assert pair(args) == ("40", None), image


def test_the_default_image_is_read_when_spec_image_is_unset():
    assert pair(args_of(render({}, {"maxNumSeqs": 40})[0])) == ("256", "40")
    assert pair(args_of(render({}, {"maxNumSeqs": 40}, default_image=WITHOUT)[0])) == (
        "40", None)


def test_a_cap_at_the_capacity_renders_nothing_new():
    # hand_plan starts at its memory bound: the flag would only restate vLLM's default,
    # and the pods of such services do not roll on upgrade
    assert pair(args_of(render({"image": WITH})[0])) == ("256", None)
    assert pair(args_of(render({"image": WITH}, start_max_num_seqs=64)[0])) == ("256", "64")


def test_a_pinned_max_num_seqs_stays_the_users_flag():
    args = args_of(render({"image": WITH, "engine": {"maxNumSeqs": 32}}, {"maxNumSeqs": 8})[0])
    assert pair(args) == ("32", None)


@pytest.mark.parametrize("extra", [["--max-num-active-seqs", "12"],
                                   ["--max-num-active-seqs=12"],
                                   ["--scheduler-cls", "my.Scheduler"]])
def test_the_users_own_admission_in_extra_args_keeps_todays_rendering(extra):
    spec = {"image": WITH, "engine": {"extraArgs": extra}}
    args = args_of(render(spec, {"maxNumSeqs": 40})[0])
    assert flag_value(args, "--max-num-seqs") == "40"
    assert args[-len(extra):] == extra  # once, as the user wrote it
    assert sum(a.startswith("--max-num-active-seqs") for a in args) == (
        0 if "--scheduler-cls" in extra else 1)
    assert not uses_active_seqs_flag(make_svc({"model": MODEL, **spec}).spec, WITH, False)


def test_the_live_cap_is_rendered_as_before():
    live = args_of(render({"image": WITH, "adaptation": {"mode": "Apply"}},
                          {"maxNumSeqs": 40}, live=True)[0])
    assert ENGINE_SCHEDULER_CLS in live and pair(live) == ("256", None)


def test_a_leader_worker_set_gets_the_flag_on_every_node():
    svc = make_svc({**LLAMA_405B_SPEC, "image": WITH})
    docs = rendering.render_all(svc, hand_plan(**LLAMA_405B_PLAN), Settings(),
                                overrides={"maxNumSeqs": 100}, live_cap=True)
    lws = docs[0]
    assert lws["kind"] == "LeaderWorkerSet"
    lead, work = containers_of(lws)
    for c in (lead, work):
        words = " ".join([*c.get("command", []), *c.get("args", [])])
        assert "--max-num-seqs 512 --max-num-active-seqs 100" in words
    assert workload_max_num_seqs(lws) == 100


# --- vLLM's rules on the pair ---------------------------------------------------------


def test_the_capacity_respects_the_batch_and_never_falls_below_the_cap():
    plan = hand_plan(**PLAN)
    assert runner_capacity(plan, 40, 8192) == 256
    assert runner_capacity(plan, 40, 128) == 128  # a tuned batch below the bound
    assert runner_capacity(plan, 300, 8192) == 300  # a lower bound above the plan
    # a tuned batch of 128: --max-num-seqs 128 (vLLM refuses fewer batched tokens)
    args = args_of(render({"image": WITH}, {"maxNumSeqs": 40, "maxNumBatchedTokens": 128})[0])
    assert pair(args) == ("128", "40") and flag_value(args, "--max-num-batched-tokens") == "128"
    # an adapted cap above the plan's bound: --max-num-seqs follows it, as today
    args = args_of(render({"image": WITH}, {"maxNumSeqs": 300})[0])
    assert pair(args) == ("300", None)


def test_vllms_rules_hold_on_the_rendered_pair_and_are_checked():
    svc = make_svc({"model": MODEL, "image": WITH})
    settings = engine_settings(svc.spec, hand_plan(**PLAN), {"maxNumSeqs": 40},
                               active_cap_flag=True)
    assert settings.number("max_num_active_seqs") == 40
    assert settings.number("max_num_seqs") == 256
    assert list(refusals(settings)) == []
    # a pinned batch below the adapted cap is refused naming the fields, as without the flag
    pinned = make_svc({"model": MODEL, "image": WITH,
                       "engine": {"maxNumBatchedTokens": 32}})
    with pytest.raises(SpecErrors) as exc:
        rendering.render_all(pinned, hand_plan(max_num_seqs=32, max_num_batched_tokens=32),
                             Settings(), overrides={"maxNumSeqs": 40})
    assert "spec.engine.maxNumBatchedTokens" in str(exc.value)


# --- what status says ----------------------------------------------------------------


def test_status_engine_says_which_flag_carries_the_cap():
    plan = hand_plan(**PLAN)
    spec = make_svc({"model": MODEL, "image": WITH}).spec
    applied = {"tuning": {"applied": {"maxNumSeqs": 40}}}
    dep = render({"image": WITH}, {"maxNumSeqs": 40})[0]
    engine = st.engine_in_effect(spec.engine, plan, applied, dep)
    assert engine["maxNumSeqs"] == 40 and engine["maxNumSeqsFlag"] == "--max-num-active-seqs"
    assert engine["runnerMaxNumSeqs"] == 256
    old = render({"image": WITHOUT}, {"maxNumSeqs": 40})[0]
    engine = st.engine_in_effect(spec.engine, plan, {**applied, "engine": engine}, old)
    assert engine["maxNumSeqsFlag"] == "--max-num-seqs"
    assert engine["runnerMaxNumSeqs"] is None  # removed by the merge patch
    live = render({"image": WITH, "adaptation": {"mode": "Apply"}}, {"maxNumSeqs": 40},
                  live=True)[0]
    engine = st.engine_in_effect(spec.engine, plan, applied, live)
    assert (engine["maxNumSeqsFlag"], engine["runnerMaxNumSeqs"]) == ("admissionConfigMap", 256)
    assert "maxNumSeqsFlag" not in st.engine_in_effect(spec.engine, plan, applied)


def test_the_live_cap_condition_says_which_flag_carries_the_cap():
    spec = make_svc({"model": MODEL, "image": WITH,
                     "adaptation": {"mode": "Apply", "liveCap": False}}).spec
    blocker = st.live_cap_blocker(spec, None)
    assert blocker is not None and blocker[0] is st.LiveCapReason.OPTED_OUT
    assert blocker[1].startswith("spec.adaptation.liveCap is false: every change rolls. ")
    assert "rendered as --max-num-active-seqs" in blocker[1]
    assert "--max-num-seqs stays the plan's capacity (status.engine.runnerMaxNumSeqs)" in (
        blocker[1])
    for other in ({"image": WITHOUT}, {"image": UNKNOWN},
                  {"engine": {"extraArgs": ["--max-num-active-seqs", "4"]}}):
        s = make_svc({"model": MODEL, "image": WITH,
                      "adaptation": {"mode": "Apply", "liveCap": False}, **other}).spec
        b = st.live_cap_blocker(s, None)
        assert b is not None and "--max-num-active-seqs (the vLLM" not in b[1], other


# --- the rollout of a new cap ---------------------------------------------------------


def test_a_rollout_completes_on_the_active_cap_not_on_the_capacity():
    def deployment(cap: int) -> dict[str, Any]:
        dep = render({"image": WITH}, {"maxNumSeqs": cap})[0]
        dep["metadata"]["generation"] = 2
        dep["status"] = {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
                         "availableReplicas": 1, "readyReplicas": 1}
        return dep
    ad = {"rolloutRequested": 40, "rolloutRequestedTime": "2026-12-05T10:00:00Z"}
    assert workload_max_num_seqs(deployment(40)) == 40
    assert rollout_progress(ad, deployment(40), 1e10).completed
    waiting = rollout_progress(ad, deployment(24), 1e10)
    assert not waiting.completed and "has max-num-seqs 24, not yet" in (waiting.wait or "")
    # the user's own flag after --shutdown-timeout is never taken for the cap
    user = render({"image": WITH, "engine": {"extraArgs": ["--max-num-active-seqs", "4"]}},
                  {"maxNumSeqs": 40})[0]
    assert workload_max_num_seqs(user) == 40

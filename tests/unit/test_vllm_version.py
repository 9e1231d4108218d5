"""The vLLM release an image's tag names, and the live cap rendered only where the
compatibility table says it works (issue 60 item 2)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from tests.unit.test_adaptation_loop import POLICY, body, decision_for, pressure  # noqa: F401
from tests.unit.test_rendering import args_of, hand_plan, make_svc

from llm_operator import rendering
from llm_operator.adaptation.policy import Observation
from llm_operator.adaptation.update import live_cap_progress, plan_update
from llm_operator.api.constants import DEFAULT_IMAGE
from llm_operator.health import status as st
from llm_operator.knowledge.vllm_version import (
    LiveCapSupport,
    compat_table,
    image_vllm_version,
    live_cap_verdict,
    split_image,
    table_from_json,
)
from llm_operator.settings import Settings

TABLE = table_from_json({"measured": "statically on 2026-12-05", "releases": {
    "0.30": {"verdict": "no-hook", "checked": "0.30.0"},
    "0.31": {"verdict": "live", "checked": "0.31.0"},
    "0.32": {"verdict": "live", "checked": "0.32.0"},
    "0.27": {"verdict": "incompatible", "checked": "0.27.0"}}})
DIGEST = "sha256:" + "0a" * 32


@pytest.mark.parametrize(("image", "parts"), [
    ("vllm/vllm-openai:v0.32.0", ("vllm/vllm-openai", "v0.32.0", None)),
    ("localhost:5000/vllm-cpu", ("localhost:5000/vllm-cpu", None, None)),
    ("localhost:5000/vllm-cpu:0.33.1", ("localhost:5000/vllm-cpu", "0.33.1", None)),
    ("vllm/vllm-openai@sha256:ab12", ("vllm/vllm-openai", None, "sha256:ab12")),
    ("vllm/vllm-openai:v0.32.0@sha256:ab12", ("vllm/vllm-openai", "v0.32.0", "sha256:ab12")),
])
def test_split_image_reads_tag_and_digest_as_the_runtime_does(image, parts):
    assert split_image(image) == parts


@pytest.mark.parametrize(("image", "version", "minor"), [
    ("vllm/vllm-openai:v0.32.0", "0.32.0", "0.32"),
    ("docker.io/vllm/vllm-openai:0.33.1", "0.33.1", "0.33"),
    ("registry.corp:5000/team/vllm-cpu:v0.10.1.1", "0.10.1.1", "0.10"),
    ("vllm/vllm-openai:v0.31.0.post1", "0.31.0.post1", "0.31"),
    ("vllm/vllm-openai:v0.32", "0.32", "0.32"),
])
def test_release_tags_name_the_version(image, version, minor):
    read = image_vllm_version(image)
    assert (read.version, read.minor, read.why_unknown) == (version, minor, None)


@pytest.mark.parametrize(("image", "why"), [
    ("vllm/vllm-openai@sha256:ab12", "it has no tag, only a digest"),
    ("vllm/vllm-openai", "it has no tag"),
    ("vllm/vllm-openai:latest", "its tag latest is not a vLLM release number"),
    ("vllm/vllm-openai:nightly-3f2a", "its tag nightly-3f2a is not"),
    ("vllm/vllm-openai:v0.33.0rc1", "its tag v0.33.0rc1 is not"),
    ("vllm/vllm-openai:v0.32.0-cu128", "its tag v0.32.0-cu128 is not"),
    ("myorg/server:0.30.0", "its repository myorg/server is not named like a vLLM image"),
])
def test_anything_else_is_unknown_and_says_why(image, why):
    read = image_vllm_version(image)
    assert read.version is None and read.why_unknown and why in read.why_unknown


def test_verdicts_name_the_version_where_it_was_read_and_the_fix():
    v = live_cap_verdict("vllm/vllm-openai:v0.30.2", "spec.image", TABLE,
                         example="vllm/vllm-openai:v0.32.0")
    assert v.support is LiveCapSupport.UNSUPPORTED and v.version == "0.30.2"
    for said in ("spec.image vllm/vllm-openai:v0.30.2 runs vLLM 0.30.2 (its tag)",
                 "no max_num_active_reqs", "0.30.0 checked statically on 2026-12-05",
                 "does not render its scheduler class", "rolls the pods",
                 "use an image of vLLM 0.31 to 0.32 (e.g. vllm/vllm-openai:v0.32.0)",
                 "spec.adaptation.mode: Recommend"):
        assert said in v.message, said
    broken = live_cap_verdict("vllm/vllm-openai:v0.27.0", "spec.image", TABLE)
    assert broken.support is LiveCapSupport.UNSUPPORTED
    assert "stop the engine at start" in broken.message
    # an example that is not supported itself is never suggested
    bad = live_cap_verdict("vllm/vllm-openai:v0.30.0", "spec.image", TABLE,
                           example="vllm/vllm-openai:v0.30.0")
    assert "(e.g. vllm/vllm-openai:v0.32.0)" in bad.message
    ok = live_cap_verdict("vllm/vllm-openai:0.31.0", "spec.image", TABLE)
    assert ok.support is LiveCapSupport.SUPPORTED and "0.31.0 checked" in ok.message


def test_unknown_and_uncovered_keep_the_live_cap_and_say_so():
    for image, said in (("vllm/vllm-openai@sha256:ab12", "is unknown: it has no tag"),
                        ("vllm/vllm-openai:v0.40.0", "does not cover (vLLM 0.27, 0.30")):
        v = live_cap_verdict(image, "spec.image", TABLE)
        assert v.support is LiveCapSupport.UNKNOWN and said in v.message
        assert "rendered as for a supported vLLM" in v.message


def test_the_committed_table_supports_the_default_image():
    table = compat_table()
    assert "0.32" in table.supported()
    assert live_cap_verdict(DEFAULT_IMAGE, "x").support is LiveCapSupport.SUPPORTED


LIVE: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                        "adaptation": {"mode": "Apply"}}


def rendered_args(spec: dict[str, Any], default_image: str = DEFAULT_IMAGE) -> list[str]:
    svc = make_svc(spec)
    settings = Settings(default_image=default_image)
    docs = rendering.render_all(svc, hand_plan(), settings, live_cap=st.live_cap_in_use(
        svc.spec, None, default_image=default_image))
    return args_of(docs[0])


def test_an_unsupported_tag_renders_no_scheduler_class_and_nothing_else_changes():
    old = {**LIVE, "image": "vllm/vllm-openai:v0.30.0"}
    args = rendered_args(old)
    assert "--scheduler-cls" not in args
    # the image and everything the user asked stay as given
    assert make_svc(old).spec.image == "vllm/vllm-openai:v0.30.0"
    assert "--scheduler-cls" in rendered_args({**LIVE, "image": "vllm/vllm-openai:v0.33.0"})
    # unknown: today's behaviour
    assert "--scheduler-cls" in rendered_args({**LIVE, "image": f"vllm/vllm-openai@{DIGEST}"})
    assert "--scheduler-cls" in rendered_args({**LIVE, "image": "vllm/vllm-openai:latest"})


def test_the_operators_default_image_is_read_when_spec_image_is_unset():
    assert "--scheduler-cls" in rendered_args(LIVE)
    assert "--scheduler-cls" not in rendered_args(LIVE, "vllm/vllm-openai:v0.29.0")
    blocker = st.live_cap_blocker(make_svc(LIVE).spec, None,
                                  default_image="vllm/vllm-openai:v0.29.0")
    assert blocker is not None and blocker[0] is st.LiveCapReason.VERSION
    assert "the operator's default image (LLMOP_DEFAULT_IMAGE" in blocker[1]


def test_the_users_own_opt_out_comes_before_the_version():
    spec = make_svc({**LIVE, "image": "vllm/vllm-openai:v0.30.0",
                     "adaptation": {"mode": "Apply", "liveCap": False}}).spec
    blocker = st.live_cap_blocker(spec, None)
    assert blocker is not None and blocker[0] is st.LiveCapReason.OPTED_OUT


def test_status_says_it_when_rendered_and_only_where_the_cap_would_be_live():
    spec = make_svc({**LIVE, "image": "vllm/vllm-openai:v0.30.0"}).spec
    out = st.with_live_cap_version({"conditions": []}, spec, 3, 1000.0)
    cond = st.get_condition(out["conditions"], st.ConditionType.LIVE_CAP)
    assert cond is not None and cond["status"] == "False"
    assert cond["reason"] == "VllmVersionUnsupported" and cond["observedGeneration"] == 3
    assert "vLLM 0.30.0" in cond["message"]
    # not asked for: Recommend, a pinned cap, no Prometheus, or a supported image
    for other, runs in (({"adaptation": {"mode": "Recommend"}}, True),
                        ({"engine": {"maxNumSeqs": 32}}, True), ({}, False),
                        ({"image": "vllm/vllm-openai:v0.32.0"}, True)):
        s = make_svc({**LIVE, "image": "vllm/vllm-openai:v0.30.0", **other}).spec
        assert st.with_live_cap_version({}, s, 3, 1000.0, adaptation_runs=runs) == {}


def test_the_adaptation_tick_keeps_the_reason_and_notes_an_unknown_version(
        pressure: Observation) -> None:  # noqa: F811
    now = pressure.evaluated_at
    for image, reason, said in (
            ("vllm/vllm-openai:v0.30.0", "VllmVersionUnsupported", "runs vLLM 0.30.0"),
            (f"vllm/vllm-openai@{DIGEST}", None, "is unknown: it has no tag")):
        b = copy.deepcopy(body(mode="Apply"))
        b["spec"]["image"] = image
        svc, state, d = decision_for(b, pressure, now)
        up = plan_update(svc, d, pressure, state, now, policy=POLICY,
                         progress=live_cap_progress({}, pressure, now))
        cond = st.get_condition(up.status_patch["conditions"], st.ConditionType.LIVE_CAP)
        assert cond is not None and said in cond["message"]
        if reason:
            assert cond["reason"] == reason and up.adaptation["actuation"] == "Rollout"
        else:
            assert cond["status"] == "True" and up.adaptation["actuation"] == "Live"


def test_a_new_image_replaces_the_version_condition_at_the_next_render():
    old = make_svc({**LIVE, "image": "vllm/vllm-openai:v0.30.0"}).spec
    said = st.with_live_cap_version({"conditions": []}, old, 1, 1000.0)
    assert st.get_condition(said["conditions"], st.ConditionType.LIVE_CAP)["reason"] == \
        "VllmVersionUnsupported"
    # a release with the hook: rendered again, pending the engine's first report
    new = make_svc({**LIVE, "image": "vllm/vllm-openai:v0.31.0"}).spec
    cond = st.get_condition(st.with_live_cap_version(said, new, 2, 1010.0)["conditions"],
                            st.ConditionType.LIVE_CAP)
    assert cond["status"] == "True" and cond["reason"] == "CapPending", cond
    assert "runs vLLM 0.31.0 (its tag), which the live cap supports" in cond["message"]
    assert cond["observedGeneration"] == 2
    # another reason keeps it off: that reason, not the old one
    opted = make_svc({**LIVE, "image": "vllm/vllm-openai:v0.31.0",
                      "adaptation": {"mode": "Apply", "liveCap": False}}).spec
    cond = st.get_condition(st.with_live_cap_version(said, opted, 2, 1010.0)["conditions"],
                            st.ConditionType.LIVE_CAP)
    assert cond["status"] == "False" and cond["reason"] == "OptedOut", cond
    # the live cap not asked for at all: the stale condition goes
    recommend = make_svc({**LIVE, "image": "vllm/vllm-openai:v0.30.0",
                          "adaptation": {"mode": "Recommend"}}).spec
    out = st.with_live_cap_version(said, recommend, 2, 1010.0)
    assert st.get_condition(out["conditions"], st.ConditionType.LIVE_CAP) is None
    # nothing said before and nothing to say: the status is returned as it was
    assert st.with_live_cap_version({"conditions": []}, new, 2, 1010.0) == {"conditions": []}


def test_the_engines_report_names_the_release_where_the_tag_names_none() -> None:
    from llm_operator.knowledge.vllm_version import reported_version_note

    assert reported_version_note(None, None) is None
    assert reported_version_note("0.32.0", ("0.32.0",)) is None  # the tag was right
    said = reported_version_note(None, ("0.32.0",))
    assert said is not None and said.startswith("The engines report vLLM 0.32.0 "
                                                 "(llmop_engine_vllm_info), which the live cap "
                                                 "supports (0.32.")
    old = reported_version_note(None, ("0.30.0",))
    assert old is not None and "no max_num_active_reqs" in old
    wrong = reported_version_note("0.32.0", ("0.31.0",))
    assert wrong is not None and "tag says vLLM 0.32.0, but its engines report vLLM 0.31.0" \
        in wrong and "Fix: tag the image" in wrong
    mixed = reported_version_note(None, ("0.31.0", "0.32.0"))
    assert mixed is not None and "different vLLM releases (0.31.0, 0.32.0" in mixed
    assert "does not cover" in (reported_version_note(None, ("0.99.1",)) or "")


def test_a_digest_image_gets_its_release_from_the_engines_first_report(
        pressure: Observation) -> None:  # noqa: F811
    now = pressure.evaluated_at
    b = copy.deepcopy(body(mode="Apply"))
    b["spec"]["image"] = f"vllm/vllm-openai@{DIGEST}"
    reported = pressure.model_copy(update={"engine_vllm_versions": ("0.32.0",)})
    svc, state, d = decision_for(b, reported, now)
    up = plan_update(svc, d, reported, state, now, policy=POLICY,
                     progress=live_cap_progress({}, reported, now))
    cond = st.get_condition(up.status_patch["conditions"], st.ConditionType.LIVE_CAP)
    assert cond is not None and cond["status"] == "True"
    assert "The engines report vLLM 0.32.0 (llmop_engine_vllm_info)" in cond["message"]
    assert "is unknown: it has no tag" not in cond["message"]  # the report replaced it
    assert up.adaptation["engineVllmVersions"] == ["0.32.0"]
    # a tag that names another release than the engines run is said, with the fix
    b["spec"]["image"] = "vllm/vllm-openai:v0.32.0"
    wrong = pressure.model_copy(update={"engine_vllm_versions": ("0.31.0",)})
    svc, state, d = decision_for(b, wrong, now)
    up = plan_update(svc, d, wrong, state, now, policy=POLICY,
                     progress=live_cap_progress({}, wrong, now))
    cond = st.get_condition(up.status_patch["conditions"], st.ConditionType.LIVE_CAP)
    assert cond is not None and "but its engines report vLLM 0.31.0" in cond["message"]


@pytest.mark.parametrize("image, said", [
    ("vllm/vllm-openai:v0.31.0", "runs vLLM 0.31.0 (its tag), which the live cap supports"),
    (f"vllm/vllm-openai@{DIGEST}", "is unknown: it has no tag"),
])
def test_the_render_and_the_tick_say_cap_pending_in_the_same_words(image: str,
                                                                     said: str) -> None:
    """Before any engine reports its cap, the render (with_live_cap_version) and the
    adaptation loop's tick both write LiveCap CapPending: one message whichever writes
    last (the tick's shorter one replaced the render's, in a cluster run, 2026-12-07)."""
    b = copy.deepcopy(body(mode="Apply"))
    b["spec"]["image"] = image
    now = 2000.0
    svc, state, d = decision_for(b, None, now)  # no metrics: nothing decided, nothing written
    # The render after a move away from a release the live cap refuses (the cluster test's
    # path): the stale condition is replaced by CapPending.
    rendered = st.get_condition(st.with_live_cap_version(
        {"conditions": [{"type": "LiveCap", "status": "False",
                         "reason": "VllmVersionUnsupported", "message": "0.30.0"}]},
        svc.spec, 2, 1000.0)["conditions"], st.ConditionType.LIVE_CAP)
    up = plan_update(svc, d, None, state, now, policy=POLICY,
                     progress=live_cap_progress({}, None, now))
    ticked = st.get_condition(up.status_patch["conditions"], st.ConditionType.LIVE_CAP)
    assert rendered is not None and ticked is not None
    assert (rendered["reason"], ticked["reason"]) == ("CapPending", "CapPending")
    assert ticked["message"] == rendered["message"], (ticked, rendered)
    assert said in ticked["message"] and "No engine reports its admission cap yet" in \
        ticked["message"]

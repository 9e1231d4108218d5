"""Rendering of the live admission cap and of the drain (issue 12).

Live (``spec.adaptation.mode: Apply``, ``liveCap`` left true, cap on ``auto``): the
server pod runs the operator's scheduler class copied in by an init container, its
``--max-num-seqs`` is the runner capacity of the plan and does not move with the cap,
and the cap travels in a ConfigMap mounted as a volume. Every server drains on a rollout.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from tests.unit.test_rendering import (
    GOLDEN,
    args_of,
    check_golden,
    container_of,
    flag_value,
    hand_plan,
    make_svc,
    validate_manifest,
)

from llm_operator import rendering
from llm_operator.health import status
from llm_operator.planning import make_plan
from llm_operator.rendering.admission import (
    ADMISSION_PATH,
    ENGINE_CODE_PATH,
    ENGINE_SCHEDULER_CLS,
    METRICS_DIR_PATH,
)
from llm_operator.settings import Settings

LIVE_SPEC: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "adaptation": {"mode": "Apply"},
}


def render(spec: dict[str, Any], overrides: dict[str, int] | None = None,
           st: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    svc = make_svc(spec)
    return rendering.render_all(svc, hand_plan(), Settings(), overrides=overrides,
                                live_cap=status.live_cap_in_use(svc.spec, st))


def test_live_golden_and_strict_validation() -> None:
    docs = render(LIVE_SPEC, {"maxNumSeqs": 96})
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "ConfigMap"]
    for doc in docs:
        validate_manifest(doc)
    check_golden(GOLDEN / "live-cap.yaml", docs)


def test_the_cap_moves_the_config_map_only_never_the_pods() -> None:
    """A user sees no rollout when adaptation moves the cap: the Deployment (and its
    spec hash, which decides whether it is written) is the same for every cap."""
    a, _, cm_a = render(LIVE_SPEC, {"maxNumSeqs": 96})
    b, _, cm_b = render(LIVE_SPEC, {"maxNumSeqs": 24})
    assert a == b
    assert flag_value(args_of(a), "--max-num-seqs") == "256"  # the plan's runner capacity
    assert flag_value(args_of(a), "--scheduler-cls") == ENGINE_SCHEDULER_CLS
    assert cm_a["data"] == {"maxNumActiveSeqs": "96"} and cm_b["data"] == {
        "maxNumActiveSeqs": "24"}
    assert cm_a["metadata"]["name"] == "llama-admission-cap"
    assert cm_a["metadata"]["ownerReferences"][0]["kind"] == "LLMService"


def test_live_pod_wiring() -> None:
    deployment = render(LIVE_SPEC)[0]
    pod = deployment["spec"]["template"]["spec"]
    container = container_of(deployment)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PYTHONPATH"] == ENGINE_CODE_PATH
    assert env["LLMOP_ADMISSION_CAP_FILE"] == "/etc/llmop/admission/maxNumActiveSeqs"
    assert env["PROMETHEUS_MULTIPROC_DIR"] == METRICS_DIR_PATH
    # The scheduler says its own failure in the termination message the kubelet keeps.
    assert "terminationMessagePath" not in container
    assert env["LLMOP_TERMINATION_LOG"] == "/dev/termination-log"
    # The emptyDir outlives a container restart: the command empties it, checks that the
    # scheduler's code is there, then runs vLLM with the args
    # (tests/vllm/test_metrics_after_restart.py and test_live_cap_failure.py run it).
    shell, flag, script, name = container["command"]
    assert (shell, flag, name) == ("/bin/sh", "-c", "vllm-server")
    lines = script.strip().splitlines()
    assert lines[0] == 'find "$PROMETHEUS_MULTIPROC_DIR" -mindepth 1 -delete'
    assert "llmop-live-cap:" in script and '"$LLMOP_TERMINATION_LOG"' in script
    assert "$(" not in script  # Kubernetes would expand it
    assert lines[-1] == 'exec vllm serve "$@"'
    (init,) = [c for c in pod["initContainers"] if c["name"] != "download-model"]
    assert init["image"] == Settings().operator_image and "engine" in init["command"][2]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["llmop-admission"]["configMap"]["name"] == "llama-admission-cap"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {ENGINE_CODE_PATH, ADMISSION_PATH,
            METRICS_DIR_PATH} <= mounts


def test_cap_above_the_capacity_is_rendered_at_the_capacity() -> None:
    *_, cm = render(LIVE_SPEC, {"maxNumSeqs": 1000})
    assert cm["data"]["maxNumActiveSeqs"] == "256"


@pytest.mark.parametrize(("spec_change", "st", "reason"), [
    ({"adaptation": {"mode": "Apply", "liveCap": False}}, None, "OptedOut"),
    ({"adaptation": {"mode": "Apply"},
      "engine": {"extraArgs": ["--scheduler-cls=my.Scheduler"]}}, None,
     "SchedulerInExtraArgs"),
    ({"adaptation": {"mode": "Apply"}},
     {"adaptation": {"liveCapFallback": {"reason": "EngineLacksHook", "message": "m"}}},
     "EngineLacksHook"),
    ({"adaptation": {"mode": "Apply"}}, {"plan": {"nodesPerReplica": 2}}, "MultiNode"),
    ({"adaptation": {"mode": "Apply"}},
     {"adaptation": {"liveCapFallback": {"reason": "SchedulerFailed", "message": "m"}}},
     "SchedulerFailed"),
])
def test_fallback_renders_the_rollout_form(
    spec_change: dict[str, Any], st: dict[str, Any] | None, reason: str,
) -> None:
    spec = {**copy.deepcopy(LIVE_SPEC), **spec_change}
    docs = render(spec, {"maxNumSeqs": 24}, st)
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    # rolls onto the cap: on the default image's vLLM (0.32) as --max-num-active-seqs,
    # --max-num-seqs staying the runner's capacity; the user's own scheduler keeps
    # today's form (issue 60 item 3)
    own = reason == "SchedulerInExtraArgs"
    assert (flag_value(args_of(docs[0]), "--max-num-seqs"),
            flag_value(args_of(docs[0]), "--max-num-active-seqs")) == (
                ("24", None) if own else ("256", "24"))
    blocker = status.live_cap_blocker(make_svc(spec).spec, st)
    assert blocker is not None and blocker[0] == reason


def test_a_scheduler_crash_turns_the_live_cap_off_for_that_generation_only() -> None:
    """Issue 35 item 2: a server pod crash-looping on the scheduler's own failure line
    turns the live cap off (the pods roll onto vLLM's own scheduler), reversibly: the
    next generation of the spec renders it again."""
    spec = make_svc(LIVE_SPEC).spec
    line = ("llmop-live-cap: AdmissionCapScheduler cannot start on this vLLM "
            "(AttributeError(\"no attribute 'max_num_running_reqs'\")): start vLLM without "
            "--scheduler-cls (the operator does so on reading this)")
    before = {"adaptation": {"maxNumSeqs": 24, "capRequested": 16, "actuation": "Live"}}
    adaptation = status.live_cap_crash_fallback(spec, before, 3, "llama-5d4-x2x4q", line)
    assert adaptation is not None
    fallback = adaptation["liveCapFallback"]
    assert fallback["reason"] == "SchedulerFailed" and fallback["generation"] == 3
    assert "llama-5d4-x2x4q" in fallback["message"]
    assert "no attribute 'max_num_running_reqs'" in fallback["message"]
    assert "An edit of the spec" in fallback["message"]
    assert not fallback["message"].count("llmop-live-cap:")
    # What the user had is kept; the pending live change is dropped (it rolls instead).
    assert adaptation["maxNumSeqs"] == 24 and adaptation["actuation"] == "Rollout"
    assert adaptation["capRequested"] is None
    after = {"adaptation": adaptation}
    assert not status.live_cap_in_use(spec, after, 3)
    docs = rendering.render_all(make_svc(LIVE_SPEC), hand_plan(), Settings(),
                                overrides={"maxNumSeqs": 24},
                                live_cap=status.live_cap_in_use(spec, after, 3))
    assert ENGINE_SCHEDULER_CLS not in args_of(docs[0])
    assert flag_value(args_of(docs[0]), "--max-num-seqs") == "256"  # the runner's capacity
    assert flag_value(args_of(docs[0]), "--max-num-active-seqs") == "24"  # vLLM 0.32's flag
    # Said once: the fallback in force is not recorded again.
    assert status.live_cap_crash_fallback(spec, after, 3, "llama-5d4-x2x4q", line) is None
    # An edit of the spec (generation 4) tries the live cap again.
    assert status.live_cap_in_use(spec, after, 4)


@pytest.mark.parametrize("spec", [
    {"model": {"name": "m"}},  # Recommend (the default): nothing to steer
    {"model": {"name": "m"}, "adaptation": {"mode": "Apply"}, "engine": {"maxNumSeqs": 8}},
])
def test_not_live_without_apply_on_an_auto_cap(spec: dict[str, Any]) -> None:
    assert not status.live_cap_in_use(make_svc(spec).spec, None)
    assert "--scheduler-cls" not in args_of(render(spec)[0])


@pytest.mark.parametrize(("rollout", "drain"), [({}, 120), ({"drainSeconds": 900}, 900)])
def test_every_server_drains_on_a_rollout(rollout: dict[str, Any], drain: int) -> None:
    """In-flight requests finish: vLLM drains for --shutdown-timeout (spec.rollout.
    drainSeconds), the preStop waits for routing to stop first, and the grace period
    covers both."""
    deployment = render({"model": {"name": "m"}, "rollout": rollout})[0]
    assert flag_value(args_of(deployment), "--shutdown-timeout") == str(drain)
    pre_stop = container_of(deployment)["lifecycle"]["preStop"]["exec"]["command"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > int(pre_stop[1]) + drain


@pytest.mark.parametrize(("replicas", "surge", "expected"), [
    (1, 0, {"maxSurge": 0, "maxUnavailable": 1}),
    (3, 0, {"maxSurge": 0, "maxUnavailable": 1}),
    (1, 1, {"maxSurge": 1, "maxUnavailable": 0}),
    (4, 2, {"maxSurge": 2, "maxUnavailable": 0}),
])
def test_rollout_surges_only_when_asked_and_then_keeps_every_replica_serving(
    replicas: int, surge: int, expected: dict[str, int]
) -> None:
    spec = {**LIVE_SPEC, "gpus": {"product": "L4"}, "replicas": replicas,
            "rollout": {"maxSurge": surge}}
    deployment = render(spec)[0]
    assert deployment["spec"]["strategy"]["rollingUpdate"] == expected
    explained = {e.name: e for e in make_plan(make_svc(spec).spec).explanations}
    said = explained["rolloutStrategy"]
    assert ("an outage" in str(said.value)) == (replicas == 1 and surge == 0)
    assert ("spare GPUs" in said.formula) == (surge > 0 or replicas == 1)

"""Online adaptation through the live admission cap (issue 12), operator side.

Apply with ``liveCap`` (the default): a decision changes the admission-cap ConfigMap, not
the Deployment; the next decision holds until the engines report the new cap on their
/metrics (``llmop_admission_cap`` through Prometheus), and the cooldown counts from that
report; an engine that lacks the hook or never reports falls back to rollouts, and the
``LiveCap`` condition says which. Decisions come from the recorded KV-pressure run.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from tests.support.emulator import ROOT
from tests.unit.test_adaptation_loop import NS, POLICY, body, decision_for, pressure  # noqa: F401

from llm_operator.adaptation.policy import CapAction, Observation
from llm_operator.adaptation.update import (
    LIVE_CAP_REPORT_TIMEOUT_SECONDS,
    live_cap_progress,
    plan_update,
    waiting_decision,
)
from llm_operator.api.models import parse_llmservice
from llm_operator.health import status as st
from llm_operator.planning import make_plan
from llm_operator.rendering import render_all
from llm_operator.settings import Settings


def condition(up: Any, status: dict[str, Any]) -> dict[str, Any]:
    conds = up.status_patch.get("conditions", status.get("conditions") or [])
    found = st.get_condition(conds, st.ConditionType.LIVE_CAP)
    assert found is not None
    return dict(found)


def reporting(obs: Observation, cap: int | None, at: float, live: float = 1) -> Observation:
    return obs.model_copy(update={"evaluated_at": at, "last_sample_at": at - 0.1,
                                  "cap_in_force_min": cap, "cap_in_force_max": cap,
                                  "live_cap_min": live})


def first_change(pressure: Observation) -> tuple[dict[str, Any], Any, Any]:  # noqa: F811
    now = pressure.evaluated_at
    b = body(mode="Apply")
    svc, state, d = decision_for(b, reporting(pressure, 64, now), now)
    assert d.action is CapAction.LOWER and d.value is not None, d.reason
    up = plan_update(svc, d, pressure, state, now, policy=POLICY,
                     progress=live_cap_progress({}, reporting(pressure, 64, now), now))
    b2 = copy.deepcopy(b)
    b2["status"] = {**b["status"], "adaptation": up.adaptation,
                    "conditions": up.status_patch.get("conditions", [])}
    return b2, d, up


def test_a_live_change_moves_the_config_map_not_the_deployment(
        pressure: Observation) -> None:  # noqa: F811
    b2, d, up = first_change(pressure)
    ad = up.adaptation
    assert up.rollout  # re-rendered: the ConfigMap carries the cap
    assert ad["capRequested"] == d.value == ad["maxNumSeqs"] and ad["actuation"] == "Live"
    assert ad["capInForce"] == 64  # what the engines reported before the change
    assert condition(up, b2["status"])["reason"] == "CapPending"
    (event,) = up.events
    assert event.reason == "MaxNumSeqsLowered" and "no restart" in event.message
    # What the reconciliation renders from the status before and after the decision.
    svc = parse_llmservice(b2)
    plan = make_plan(svc.spec)
    before = render_all(svc, plan, Settings(), live_cap=True,
                        overrides=st.engine_overrides(body(mode="Apply")["status"]))
    after = render_all(svc, plan, Settings(),
                       live_cap=st.live_cap_in_use(svc.spec, b2["status"], 1),
                       overrides=st.engine_overrides(b2["status"]))
    assert after[0] == before[0]  # the Deployment is unchanged: nothing rolls
    assert after[-1]["kind"] == "ConfigMap"
    assert after[-1]["data"]["maxNumActiveSeqs"] == str(d.value)


def test_the_next_decision_waits_for_the_engines_report(pressure: Observation) -> None:  # noqa: F811
    b2, d, _ = first_change(pressure)
    now = pressure.evaluated_at + 60
    obs = reporting(pressure, 64, now)  # the kubelet has not refreshed the volume yet
    progress = live_cap_progress(b2["status"]["adaptation"], obs, now)
    assert progress.wait and f"admission cap {d.value}" in progress.wait
    assert "they report 64" in progress.wait
    svc, state, _ = decision_for(b2, obs, now)
    hold = waiting_decision(svc, state, obs, progress.wait, now)
    up = plan_update(svc, hold, obs, state, now, policy=POLICY, progress=progress)
    assert not up.rollout and up.adaptation["capRequested"] == d.value
    assert up.adaptation["lastDecision"]["action"] == "hold"
    assert "waiting for the engines" in up.adaptation["lastDecision"]["reason"]


def test_the_report_lands_in_status_and_starts_the_cooldown(pressure: Observation) -> None:  # noqa: F811
    b2, d, _ = first_change(pressure)
    seen = pressure.evaluated_at + 75
    obs = reporting(pressure, d.value, seen)
    progress = live_cap_progress(b2["status"]["adaptation"], obs, seen)
    assert progress.took_effect and progress.in_force == d.value
    svc, state, dec = decision_for(b2, obs, seen)
    up = plan_update(svc, dec, obs, state, seen, policy=POLICY, progress=progress)
    ad = up.adaptation
    assert "capRequested" not in ad and ad["capInForce"] == d.value
    assert ad["lastChangeTime"] == st.rfc3339(seen)  # the cooldown counts from the report
    assert ("Normal", "AdmissionCapInForce") in [(e.type, e.reason) for e in up.events]
    assert condition(up, b2["status"])["reason"] == "EngineReportsCap"
    # Still under pressure one cooldown after the DECISION, but not after the report: hold.
    b3 = copy.deepcopy(b2)
    b3["status"]["adaptation"] = ad
    cooldown = parse_llmservice(b3).spec.adaptation.cooldown_seconds
    later = pressure.evaluated_at + cooldown + 10
    _, _, d3 = decision_for(b3, reporting(pressure, d.value, later), later)
    assert d3.action is CapAction.HOLD and "cooldown" in d3.reason, d3.reason


@pytest.mark.parametrize(("live", "cap", "after", "reason"), [
    (1, 64, LIVE_CAP_REPORT_TIMEOUT_SECONDS + 1, "EngineDidNotReport"),
    (0, None, 30, "EngineLacksHook"),
])
def test_an_engine_that_cannot_take_the_cap_falls_back_to_a_rollout(
        pressure: Observation, live: float, cap: int | None,  # noqa: F811
        after: float, reason: str) -> None:
    b2, d, _ = first_change(pressure)
    now = pressure.evaluated_at + after
    obs = reporting(pressure, cap, now, live)
    progress = live_cap_progress(b2["status"]["adaptation"], obs, now)
    assert progress.fallback is not None and progress.fallback[0] == reason
    svc, state, dec = decision_for(b2, obs, now)
    if progress.wait is None and dec.action is not CapAction.HOLD:
        pass  # a decision may also move the cap; the fallback holds either way
    up = plan_update(svc, dec, obs, state, now, policy=POLICY, progress=progress)
    assert up.rollout and up.adaptation["actuation"] == "Rollout"
    assert up.adaptation["liveCapFallback"]["reason"] == reason
    assert "capRequested" not in up.adaptation
    cond = condition(up, b2["status"])
    assert cond["status"] == "False" and cond["reason"] == reason
    assert ("Warning", "LiveCapFallback") in [(e.type, e.reason) for e in up.events]
    # The re-render rolls the Deployment onto the cap, without the live pieces.
    status = {**b2["status"], "adaptation": up.adaptation}
    svc_model = parse_llmservice(b2)
    assert not st.live_cap_in_use(svc_model.spec, status, 1)
    docs = render_all(svc_model, make_plan(svc_model.spec), Settings(),
                      live_cap=st.live_cap_in_use(svc_model.spec, status, 1),
                      overrides=st.engine_overrides(status))
    args = docs[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--scheduler-cls" not in args
    # the default image's vLLM (0.32): the cap as --max-num-active-seqs (issue 60 item 3)
    assert args[args.index("--max-num-active-seqs") + 1] == str(up.adaptation["maxNumSeqs"])
    # A new generation of the spec (e.g. another image) tries live again.
    assert st.live_cap_in_use(svc_model.spec, status, 2)


def test_opting_out_rolls_and_says_so(pressure: Observation) -> None:  # noqa: F811
    now = pressure.evaluated_at
    b = body(mode="Apply")
    b["spec"]["adaptation"]["liveCap"] = False
    svc, state, d = decision_for(b, pressure, now)
    up = plan_update(svc, d, pressure, state, now, policy=POLICY)
    assert up.rollout and up.adaptation["actuation"] == "Rollout"
    assert "capRequested" not in up.adaptation
    cond = condition(up, b["status"])
    assert cond["status"] == "False" and cond["reason"] == "OptedOut"


def test_the_report_timeout_is_the_operators_setting(pressure: Observation) -> None:  # noqa: F811
    """LLMOP_LIVE_CAP_REPORT_TIMEOUT_SECONDS: a slow kubelet sync (a longer timeout) keeps
    waiting where the default would already have rolled; a shorter one rolls sooner."""
    assert Settings().live_cap_report_timeout_seconds == LIVE_CAP_REPORT_TIMEOUT_SECONDS
    slow = Settings(live_cap_report_timeout_seconds=900)
    b2, _, _ = first_change(pressure)
    now = pressure.evaluated_at + LIVE_CAP_REPORT_TIMEOUT_SECONDS + 60
    obs = reporting(pressure, 64, now, 1)
    waiting = live_cap_progress(b2["status"]["adaptation"], obs, now,
                                timeout=slow.live_cap_report_timeout_seconds)
    assert waiting.fallback is None and waiting.wait is not None and "900" in waiting.wait
    early = pressure.evaluated_at + 100
    fast = live_cap_progress(b2["status"]["adaptation"], reporting(pressure, 64, early, 1),
                             early, timeout=Settings(live_cap_report_timeout_seconds=60)
                             .live_cap_report_timeout_seconds)
    assert fast.fallback is not None and fast.fallback[0] == "EngineDidNotReport"


@pytest.mark.parametrize("batched", [64, 200, 4096])
def test_live_runner_capacity_never_exceeds_the_rendered_batch(batched: int) -> None:
    """A tuned --max-num-batched-tokens below the plan's memory bound: the live cap's
    --max-num-seqs (the runner's capacity) follows the batch down, since vLLM refuses to
    start with fewer batched tokens than sequences ("max_num_batched_tokens (64) must be
    greater than or equal to max_num_seqs (256)", vLLM 0.32's SchedulerConfig), and the
    ConfigMap's cap stays within it."""
    doc = yaml.safe_load((ROOT / "demo" / "tiny-llama-local.yaml").read_text())
    doc["metadata"]["namespace"] = NS
    svc = parse_llmservice(doc)
    plan = make_plan(svc.spec)
    docs = render_all(svc, plan, Settings(), live_cap=True,
                      overrides={"maxNumSeqs": 32, "maxNumBatchedTokens": batched})
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    seqs = int(args[args.index("--max-num-seqs") + 1])
    batch = int(args[args.index("--max-num-batched-tokens") + 1])
    assert batch == batched
    assert 32 <= seqs <= batch, (seqs, batch)
    assert seqs == min(plan.max_num_seqs, batched)
    assert int(next(iter(cm["data"].values()))) == 32

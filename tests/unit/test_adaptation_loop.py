"""The pure parts of the operator's adaptation loop (``llm_operator.adaptation.update``):
which services are due, the cap they run with, and how a decision becomes a status patch
and Events in Apply and Recommend mode. Decisions come from the real policy fed with
observations recorded from a real vLLM under KV pressure (``tests/unit/data``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from llm_operator.adaptation.policy import (
    CapAction,
    Observation,
    PolicySettings,
    decide,
    unavailable,
)
from llm_operator.adaptation.update import (
    MIN_SLEEP_SECONDS,
    MetricsReason,
    cap_limits,
    current_state,
    due_services,
    fresher_status,
    metrics_condition,
    parse_services,
    plan_update,
    running_cap,
    seconds_until_next,
    warmup_seconds,
)
from llm_operator.api.models import parse_llmservice
from llm_operator.api.timestamps import rfc3339
from llm_operator.controller.metrics import OperatorMetrics
from llm_operator.health import status as st
from llm_operator.planning import make_plan
from llm_operator.rendering import render_all
from llm_operator.settings import Settings

DATA = Path(__file__).parent / "data"
NS = "team-a"
PLAN_CAP = 64  # the cap the recorded engine ran with, here the plan's value


def body(name: str = "kv-pressure", mode: str = "Apply", *, interval: int = 30,
         pinned: int | None = None, status: dict[str, Any] | None = None,
         **meta: Any) -> dict[str, Any]:
    engine: dict[str, Any] = {} if pinned is None else {"maxNumSeqs": pinned}
    return {
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1,
                     **meta},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                 "gpus": {"product": "L4"}, "engine": engine,
                 "adaptation": {"mode": mode, "intervalSeconds": interval}},
        "status": status if status is not None else {"plan": {"maxNumSeqs": PLAN_CAP}},
    }


def services(*bodies: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return parse_services(bodies)


@pytest.fixture(scope="module")
def pressure() -> Observation:
    """The last full window of the recorded KV-pressure run (real vLLM, real Prometheus)."""
    doc = json.loads((DATA / "kv_pressure.json").read_text())
    obs = [Observation.model_validate(o) for o in doc["observations"]]
    full = [o for o in obs if o.samples >= doc["windowSeconds"] * 0.75]
    return full[-1].model_copy(update={"namespace": NS, "name": "kv-pressure"})


POLICY = PolicySettings(window_seconds=20.0)


def decision_for(b: dict[str, Any], obs: Observation | None, now: float) -> Any:
    svc = services(b)[(NS, b["metadata"]["name"])]
    state = current_state(svc.spec, svc.status)
    d = decide(obs, state, svc.spec, now, namespace=NS, name=svc.key[1],
               limits=cap_limits(svc.status), settings=POLICY)
    return svc, state, d


# --------------------------------------------------------------------------- due
def test_due_services_follow_each_services_interval() -> None:
    svcs = services(body("a", interval=10), body("b", interval=60), body("c", "Disabled"),
                    body("d", pinned=32))
    assert due_services(svcs, {}, 1000.0) == [(NS, "a"), (NS, "b")]  # never decided: due now
    last = {(NS, "a"): 995.0, (NS, "b"): 995.0}
    assert due_services(svcs, last, 1000.0) == []
    assert due_services(svcs, last, 1005.0) == [(NS, "a")]
    assert due_services(svcs, last, 1055.0) == [(NS, "a"), (NS, "b")]


def test_disabled_and_pinned_services_are_never_due() -> None:
    svcs = services(body("off", "Disabled"), body("pin", "Apply", pinned=32),
                    body("pin-rec", "Recommend", pinned=8))
    assert due_services(svcs, {}, 0.0) == []
    assert seconds_until_next(svcs, {}, 0.0, idle=15.0) == 15.0


def test_deleting_and_invalid_services_are_skipped() -> None:
    bad = body("bad")
    bad["spec"]["replicas"] = -1
    svcs = services(body("gone", deletionTimestamp="2025-01-01T00:00:00Z"), bad, body("ok"))
    assert list(svcs) == [(NS, "ok")]


def test_the_loop_sleeps_until_the_earliest_service_is_due() -> None:
    svcs = services(body("a", interval=10), body("b", interval=60))
    last = {(NS, "a"): 100.0, (NS, "b"): 100.0}
    assert seconds_until_next(svcs, last, 103.0, idle=15.0) == pytest.approx(7.0)
    assert seconds_until_next(svcs, last, 120.0, idle=15.0) == MIN_SLEEP_SECONDS
    assert seconds_until_next(services(body("b", interval=60)), last, 103.0,
                              idle=15.0) == 15.0


# --------------------------------------------------------------------------- cap
def test_running_cap_is_what_the_renderer_uses() -> None:
    spec = services(body())[(NS, "kv-pressure")].spec
    assert running_cap(spec, {}) is None
    assert running_cap(spec, {"plan": {"maxNumSeqs": 64}}) == 64
    # The SLO sizing's start is what the pods render (the memory limit bounds it).
    assert running_cap(spec, {"plan": {"maxNumSeqs": 64, "startMaxNumSeqs": 32}}) == 32
    tuned = {"plan": {"maxNumSeqs": 64, "startMaxNumSeqs": 32},
             "tuning": {"applied": {"maxNumSeqs": 48}}}
    assert running_cap(spec, tuned) == 48
    adapted = {**tuned, "adaptation": {"maxNumSeqs": 24}}
    assert running_cap(spec, adapted) == 24 == st.engine_overrides(adapted)["maxNumSeqs"]
    pinned = services(body(pinned=16))[(NS, "kv-pressure")].spec
    assert running_cap(pinned, adapted) == 16


def test_cap_limits_take_the_tuned_value_only_from_a_successful_run() -> None:
    tuning: dict[str, Any] = {"state": "Succeeded", "best": {"maxNumSeqs": 96}}
    status = {"plan": {"maxNumSeqs": 256}, "tuning": tuning}
    assert cap_limits(status).plan_max_num_seqs == 256
    assert cap_limits(status).tuned == 96
    tuning["state"] = "Failed"
    assert cap_limits(status).tuned is None


def test_the_state_keeps_history_but_takes_the_cap_from_the_render() -> None:
    spec = services(body())[(NS, "kv-pressure")].spec
    status = {"plan": {"maxNumSeqs": 64}, "tuning": {"applied": {"maxNumSeqs": 40}},
              "adaptation": {"currentMaxNumSeqs": 99, "lastChangeTime": "2025-01-01T00:00:00Z",
                             "history": [{"time": "2025-01-01T00:00:00Z", "from": 64, "to": 99,
                                          "reason": "r"}]}}
    state = current_state(spec, status)
    assert state is not None and state.current == 40 and len(state.history) == 1
    assert state.last_change_at is not None


# --------------------------------------------------------------------------- Apply
def test_apply_lowers_writes_the_override_and_rolls(pressure: Observation) -> None:
    now = pressure.evaluated_at
    svc, state, d = decision_for(body(mode="Apply"), pressure, now)
    assert d.action is CapAction.LOWER and d.value is not None and d.value < PLAN_CAP, d.reason
    up = plan_update(svc, d, pressure, state, now, policy=POLICY)
    ad = up.status_patch["adaptation"]
    assert up.rollout is True
    assert ad["maxNumSeqs"] == d.value == ad["currentMaxNumSeqs"]
    assert ad["lastDecision"]["action"] == "lower" and "preemptions" in ad["lastDecision"]["reason"]
    assert ad["lastChangeTime"] is not None and len(ad["history"]) == 1
    assert ad["history"][0]["from"] == PLAN_CAP and ad["history"][0]["to"] == d.value
    assert ad["lastObservation"]["preemptions"] > 0
    assert [(e.type, e.reason) for e in up.events] == [("Normal", "MaxNumSeqsLowered")]
    assert d.reason in up.events[0].message
    # The contract with the renderer: the status after the patch renders the new cap.
    after = {**svc.status, "adaptation": up.adaptation}
    assert st.engine_overrides(after)["maxNumSeqs"] == d.value


def test_the_applied_status_renders_a_deployment_with_the_new_cap(
        pressure: Observation) -> None:
    now = pressure.evaluated_at
    b = body(mode="Apply")
    svc_model = parse_llmservice(b)
    plan = make_plan(svc_model.spec)
    b["status"] = {"plan": {"maxNumSeqs": plan.max_num_seqs}}
    svc, state, d = decision_for(b, pressure, now)
    assert d.action is CapAction.LOWER, d.reason
    up = plan_update(svc, d, pressure, state, now, policy=POLICY)
    after = {**svc.status, "adaptation": up.adaptation}
    docs = render_all(svc_model, plan, Settings(), pod_monitor=False,
                      overrides=st.engine_overrides(after))
    args = docs[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    # the default image's vLLM (0.32) takes the cap as --max-num-active-seqs; --max-num-seqs
    # stays the plan's capacity (issue 60 item 3)
    assert args[args.index("--max-num-active-seqs") + 1] == str(d.value)
    assert args[args.index("--max-num-seqs") + 1] == str(plan.max_num_seqs)
    assert d.value is not None and d.value < plan.max_num_seqs


def test_a_second_lower_within_the_cooldown_holds(pressure: Observation) -> None:
    now = pressure.evaluated_at
    b = body(mode="Apply")
    svc, state, d = decision_for(b, pressure, now)
    first = plan_update(svc, d, pressure, state, now, policy=POLICY)
    # The status as written, a full window later: still under pressure.
    later = pressure.model_copy(update={"evaluated_at": now + 30,
                                        "last_sample_at": now + 29.9})
    b2 = copy.deepcopy(b)
    b2["status"] = {**b["status"], "adaptation": first.adaptation}
    svc2, state2, d2 = decision_for(b2, later, now + 30)
    assert state2 is not None and state2.current == d.value
    assert d2.action is CapAction.HOLD and "cooldown" in d2.reason, d2.reason
    up2 = plan_update(svc2, d2, later, state2, now + 30, policy=POLICY)
    assert not up2.rollout and not [e for e in up2.events if e.reason.startswith("MaxNumSeqs")]
    assert "maxNumSeqs" not in up2.status_patch["adaptation"]  # the applied value stays
    assert up2.adaptation["maxNumSeqs"] == d.value
    assert len(up2.status_patch["adaptation"]["history"]) == 1


# --------------------------------------------------------------------------- Recommend
def test_recommend_reports_without_touching_the_cap(pressure: Observation) -> None:
    now = pressure.evaluated_at
    svc, state, d = decision_for(body(mode="Recommend"), pressure, now)
    assert d.action is CapAction.LOWER, d.reason
    up = plan_update(svc, d, pressure, state, now, policy=POLICY)
    ad = up.status_patch["adaptation"]
    assert up.rollout is False
    assert "maxNumSeqs" not in ad and ad["recommendedMaxNumSeqs"] == d.value
    assert ad["currentMaxNumSeqs"] == PLAN_CAP and ad["history"] == []
    assert st.engine_overrides({**svc.status, "adaptation": up.adaptation}) == {}
    assert [e.reason for e in up.events] == ["MaxNumSeqsLowerRecommended"]
    assert "not applied" in up.events[0].message

    # The same recommendation on the next tick: status only, no second Event.
    b2 = body(mode="Recommend", status={**svc.status, "adaptation": up.adaptation})
    svc2, state2, d2 = decision_for(b2, pressure, now + 30)
    up2 = plan_update(svc2, d2, pressure, state2, now + 30, policy=POLICY)
    assert up2.status_patch["adaptation"]["recommendedMaxNumSeqs"] == d.value
    assert not [e for e in up2.events if e.reason.startswith("MaxNumSeqs")]


def test_recommend_after_apply_keeps_the_applied_cap(pressure: Observation) -> None:
    now = pressure.evaluated_at
    status = {"plan": {"maxNumSeqs": PLAN_CAP}, "adaptation": {"maxNumSeqs": 40}}
    svc, state, d = decision_for(body(mode="Recommend", status=status), pressure, now)
    assert state is not None and state.current == 40
    up = plan_update(svc, d, pressure, state, now, policy=POLICY)
    assert "maxNumSeqs" not in up.status_patch["adaptation"]
    assert st.engine_overrides({**status, "adaptation": up.adaptation})["maxNumSeqs"] == 40


# --------------------------------------------------------------------------- range
@pytest.mark.parametrize("mode", ["Apply", "Recommend"])
def test_status_shows_the_tuned_value_and_what_set_each_bound(pressure: Observation,
                                                              mode: str) -> None:
    # Issue 32 item 2: kubectl describe shows the tuning result (where the cap started)
    # apart from the bounds (what the cap may move between, and what set each end).
    now = pressure.evaluated_at
    tuned = {"plan": {"maxNumSeqs": PLAN_CAP},
             "tuning": {"state": "Succeeded", "best": {"maxNumSeqs": 16},
                        "applied": {"maxNumSeqs": 16}}}
    svc, state, d = decision_for(body(mode=mode, status=tuned), pressure, now)
    assert state is not None and state.current == 16  # the tuned value is the start
    up = plan_update(svc, d, pressure, state, now, policy=POLICY)
    ad = up.status_patch["adaptation"]
    assert ad["tuned"] == 16 == up.tuned
    assert ad["bounds"] == {"lower": 1, "upper": PLAN_CAP,
                            "lowerSource": "spec.adaptation.minMaxNumSeqs",
                            "upperSource": "the planner's memory limit"}
    assert up.bounds is not None and up.bounds.upper == PLAN_CAP
    # A retune that failed: the tuned value goes from status (null in the merge patch).
    failed = {**tuned, "tuning": {**tuned["tuning"], "state": "Failed"},
              "adaptation": up.adaptation}
    svc, state, d = decision_for(body(mode=mode, status=failed), pressure, now + 30)
    up = plan_update(svc, d, pressure, state, now + 30, policy=POLICY)
    assert up.status_patch["adaptation"]["tuned"] is None and "tuned" not in up.adaptation


# --------------------------------------------------------------------------- metrics
def test_prometheus_down_holds_with_a_condition_and_one_warning(pressure: Observation) -> None:
    now = pressure.evaluated_at
    down = unavailable(NS, "kv-pressure", now, 20.0, "cannot connect (ConnectionError)")
    svc, state, d = decision_for(body(mode="Apply"), down, now)
    assert d.action is CapAction.HOLD and "unavailable" in d.reason
    up = plan_update(svc, d, down, state, now, policy=POLICY)
    assert not up.rollout and "maxNumSeqs" not in up.status_patch["adaptation"]
    cond = st.get_condition(up.status_patch["conditions"], st.ConditionType.METRICS_AVAILABLE)
    assert cond is not None and cond["status"] == "False"
    assert cond["reason"] == "PrometheusUnavailable" and "cannot connect" in cond["message"]
    assert [(e.type, e.reason) for e in up.events] == [("Warning", "PrometheusUnavailable")]

    # Still down on the next tick: the condition stands, no new Event unless it is time.
    b2 = body(mode="Apply", status={**svc.status, "conditions": up.status_patch["conditions"],
                                    "adaptation": up.adaptation})
    svc2, state2, d2 = decision_for(b2, down, now + 30)
    quiet = plan_update(svc2, d2, down, state2, now + 30, policy=POLICY)
    assert "conditions" not in quiet.status_patch and quiet.events == []
    again = plan_update(svc2, d2, down, state2, now + 30, policy=POLICY, warn_again=True)
    assert [e.reason for e in again.events] == ["PrometheusUnavailable"]

    # Back: the condition turns True and says what was seen.
    svc3, state3, d3 = decision_for(b2, pressure, now)
    back = plan_update(svc3, d3, pressure, state3, now, policy=POLICY)
    cond = st.get_condition(back.status_patch["conditions"], st.ConditionType.METRICS_AVAILABLE)
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "SeriesObserved"


def test_missing_samples_on_new_pods_wait_without_a_warning_then_warn(
        pressure: Observation) -> None:
    """The first scrapes of a pod that just became available have not filled the window:
    the condition says so, but no Warning Event (every new service would get one); past
    the warm-up the same missing data is a Warning naming what to check."""
    now = pressure.evaluated_at
    empty = pressure.model_copy(update={"samples": 0, "running_mean": None})

    def available_since(seconds_ago: float) -> dict[str, Any]:
        return {"conditions": [{"type": "Available", "status": "True", "reason": "Serving",
                                "message": "", "lastTransitionTime": rfc3339(now - seconds_ago)}]}

    svc, state, d = decision_for(body(mode="Apply", status=available_since(15)), empty, now)
    up = plan_update(svc, d, empty, state, now, policy=POLICY)
    cond = st.get_condition(up.status_patch["conditions"], st.ConditionType.METRICS_AVAILABLE)
    assert cond is not None and cond["status"] == "False"
    assert cond["reason"] == "WaitingForFirstSamples" and "15 s ago" in cond["message"]
    assert "no samples of vllm:num_requests_running" in cond["message"]
    assert not [e for e in up.events if e.type == "Warning"]
    assert d.action is CapAction.HOLD

    late = warmup_seconds(POLICY) + 1
    svc, state, d = decision_for(body(mode="Apply", status=available_since(late)), empty, now)
    up = plan_update(svc, d, empty, state, now, policy=POLICY)
    assert [(e.type, e.reason) for e in up.events] == [("Warning", "NoSamples")]
    # No replica serves yet (Available False): no series is expected, Ready says why.
    not_yet = {"conditions": [{"type": "Available", "status": "False",
                               "reason": "NoReplicasAvailable", "message": "",
                               "lastTransitionTime": rfc3339(now - 600)}]}
    svc, state, d = decision_for(body(mode="Apply", status=not_yet), None, now)
    up = plan_update(svc, d, None, state, now, policy=POLICY)
    cond = st.get_condition(up.status_patch["conditions"], st.ConditionType.METRICS_AVAILABLE)
    assert cond is not None and cond["reason"] == "WaitingForFirstSamples"
    assert "no replica serves yet" in cond["message"] and up.events == []
    # Held for its tuning before serving: no workload, no Available, Ready False.
    held = {"conditions": [{"type": "Ready", "status": "False", "reason": "TuningBeforeServing",
                            "message": "", "lastTransitionTime": rfc3339(now - 600)}]}
    svc, state, d = decision_for(body(mode="Apply", status=held), None, now)
    up = plan_update(svc, d, None, state, now, policy=POLICY)
    assert up.events == [], up.events
    # No Available condition at all (a status from before it existed): the Warning stands.
    svc, state, d = decision_for(body(mode="Apply"), None, now)
    up = plan_update(svc, d, None, state, now, policy=POLICY)
    assert [(e.type, e.reason) for e in up.events] == [("Warning", "NoSeries")]


@pytest.mark.parametrize(("change", "reason"), [
    ({"samples": 0, "running_mean": None}, MetricsReason.NO_SAMPLES),
    ({"samples": 2}, MetricsReason.TOO_LITTLE),
    ({"last_sample_at": 0.0}, MetricsReason.STALE),
    ({"kv_usage_mean": None}, MetricsReason.MISSING),
])
def test_metrics_condition_names_what_is_missing(pressure: Observation, change: dict[str, Any],
                                                 reason: MetricsReason) -> None:
    ok, got, message = metrics_condition(pressure.model_copy(update=change),
                                         pressure.evaluated_at, POLICY)
    assert not ok and got is reason and "holds" in message
    ok, got, _ = metrics_condition(None, pressure.evaluated_at, POLICY)
    assert not ok and got is MetricsReason.NO_SERIES


def test_fresher_status_prefers_the_loops_own_latest_write() -> None:
    old = {"adaptation": {"lastDecision": {"time": "2025-01-01T00:00:00Z"}, "maxNumSeqs": 64}}
    mine = {"lastDecision": {"time": "2025-01-01T00:00:30Z"}, "maxNumSeqs": 32}
    assert fresher_status(old, mine)["adaptation"]["maxNumSeqs"] == 32
    newer = {"adaptation": {"lastDecision": {"time": "2025-01-01T00:01:00Z"}, "maxNumSeqs": 48}}
    assert fresher_status(newer, mine)["adaptation"]["maxNumSeqs"] == 48


def test_operator_metrics_count_decisions_by_direction_and_service() -> None:
    from prometheus_client import generate_latest

    m = OperatorMetrics()
    m.decision(NS, "a", "lower", "Apply", "kv_usage", 32)
    m.decision(NS, "a", "hold", "Apply", "cooldown", 32)
    m.query_error(RuntimeError("x"))
    with m.timed_reconcile("adaptation"):
        pass
    text = generate_latest(m.registry).decode()
    assert ('llmop_adaptation_decisions_total{cause="kv_usage",direction="lower",'
            'llmservice="a",mode="Apply",namespace="team-a"} 1.0') in text
    assert 'llmop_adaptation_max_num_seqs{llmservice="a",namespace="team-a"} 32.0' in text
    assert "llmop_prometheus_query_errors_total 1.0" in text
    assert 'llmop_reconcile_duration_seconds_count{trigger="adaptation"} 1.0' in text
    m.forget(NS, "a")
    assert "llmop_adaptation_max_num_seqs{" not in generate_latest(m.registry).decode()


def test_tuning_milestones_are_counted_by_event_reason() -> None:
    from prometheus_client import CollectorRegistry

    from llm_operator.controller.metrics import OperatorMetrics

    reg = CollectorRegistry()
    m = OperatorMetrics(registry=reg)
    for reason in ("TuningStarted", "TuningFailed", "TuningStarted", "TuningSucceeded",
                   "TuningCached"):
        m.tuning_event("ml", "llama", reason)
    labels = {"namespace": "ml", "llmservice": "llama"}
    assert reg.get_sample_value("llmop_tuning_jobs_started_total", labels) == 2
    assert reg.get_sample_value("llmop_tuning_jobs_failed_total", labels) == 1
    assert reg.get_sample_value("llmop_tuning_jobs_succeeded_total", labels) == 1

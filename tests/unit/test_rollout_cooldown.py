"""A change applied by a rollout (issue 12): the next decision waits until the workload
has rolled out, and the cooldown counts from the rollout's completion, not from the
decision. Pure logic (no clock, no API server): the workload is the Deployment the
renderer gives for the status after the decision, with the status its controller would
write. Decisions come from the recorded KV-pressure run."""

from __future__ import annotations

import copy
from typing import Any

from tests.unit.test_adaptation_loop import NS, POLICY, body, decision_for, pressure  # noqa: F401

from llm_operator.adaptation.policy import CapAction, Observation
from llm_operator.adaptation.update import (
    after_rollout,
    plan_update,
    rollout_progress,
    waiting_decision,
    workload_max_num_seqs,
)
from llm_operator.api.models import parse_llmservice
from llm_operator.api.timestamps import rfc3339
from llm_operator.health import status as st
from llm_operator.planning import make_plan
from llm_operator.rendering import render_all
from llm_operator.settings import Settings

COOLDOWN = 600  # spec.adaptation.cooldownSeconds (the default)
ROLLOUT_S = 400  # how long the rollout takes (a GPU model's restart takes minutes)


def rolling_body() -> dict[str, Any]:
    b = body(mode="Apply")
    b["spec"]["adaptation"]["liveCap"] = False
    b["status"] = {"plan": {"maxNumSeqs": make_plan(parse_llmservice(b).spec).max_num_seqs}}
    return b


def deployment(b: dict[str, Any], adaptation: dict[str, Any], generation: int,
               observed: int, updated: int, available: int) -> dict[str, Any]:
    """The Deployment the renderer gives for ``adaptation``, with the status its controller
    would report."""
    svc = parse_llmservice(b)
    docs = render_all(svc, make_plan(svc.spec), Settings(), pod_monitor=False,
                      overrides=st.engine_overrides({**b["status"], "adaptation": adaptation}))
    dep = copy.deepcopy(docs[0])
    assert dep["kind"] == "Deployment"
    dep["metadata"]["generation"] = generation
    dep["status"] = {"observedGeneration": observed, "replicas": 1, "updatedReplicas": updated,
                     "availableReplicas": available}
    return dep


def first_change(pressure: Observation) -> tuple[dict[str, Any], Any, Any]:  # noqa: F811
    now = pressure.evaluated_at
    b = rolling_body()
    svc, state, d = decision_for(b, pressure, now)
    assert d.action is CapAction.LOWER and d.value is not None, d.reason
    up = plan_update(svc, d, pressure, state, now, policy=POLICY)
    b2 = copy.deepcopy(b)
    b2["status"] = {**b["status"], "adaptation": up.adaptation}
    return b2, d, up


def test_a_rollout_is_remembered_until_the_deployment_rolled_out(
        pressure: Observation) -> None:  # noqa: F811
    b2, d, up = first_change(pressure)
    now = pressure.evaluated_at
    ad = up.adaptation
    assert up.rollout and ad["actuation"] == "Rollout"
    assert ad["rolloutRequested"] == d.value == ad["maxNumSeqs"]
    assert ad["rolloutRequestedTime"] == rfc3339(now)

    new = ad
    old = {k: v for k, v in ad.items() if k != "maxNumSeqs"}
    # The Deployment controller has not seen the new spec yet.
    dep = deployment(b2, new, generation=2, observed=1, updated=1, available=1)
    assert workload_max_num_seqs(dep) == d.value
    p = rollout_progress(ad, dep, now + 5)
    assert not p.completed and p.wait is not None
    assert "has not picked up the new spec" in p.wait and f"max-num-seqs {d.value}" in p.wait
    # The old pod still serves, the new one is not available yet.
    p = rollout_progress(ad, deployment(b2, new, 2, 2, updated=0, available=1), now + 60)
    assert p.wait is not None and "0 of 1 replicas updated" in p.wait, p.wait
    p = rollout_progress(ad, deployment(b2, new, 2, 2, updated=1, available=0), now + 200)
    assert p.wait is not None and "1 of 1 replicas updated, 0 available" in p.wait, p.wait
    # The reconciliation has not written the new cap yet (a failed write is retried).
    p = rollout_progress(ad, deployment(b2, old, 1, 1, 1, 1), now + 5)
    assert p.wait is not None and "not yet the new value" in p.wait, p.wait
    assert rollout_progress(ad, None, now + 5).wait is not None
    # Rolled out: updated = available = desired at the new generation.
    p = rollout_progress(ad, deployment(b2, new, 2, 2, 1, 1), now + ROLLOUT_S)
    assert p.completed and p.wait is None and p.cap == d.value


def test_the_next_decision_waits_for_the_rollout_and_says_so(
        pressure: Observation) -> None:  # noqa: F811
    b2, d, up = first_change(pressure)
    now = pressure.evaluated_at + 60
    svc, state, _ = decision_for(b2, pressure, now)
    assert state is not None
    p = rollout_progress(up.adaptation, deployment(b2, up.adaptation, 2, 2, 0, 1), now)
    assert p.wait is not None
    hold = waiting_decision(svc, after_rollout(state, p, now), pressure, p.wait, now)
    up2 = plan_update(svc, hold, pressure, state, now, policy=POLICY, rollout_state=p)
    last = up2.status_patch["adaptation"]["lastDecision"]
    assert last["action"] == "hold" and "waiting for the rollout" in last["reason"]
    assert "cooldown counts from its completion" in last["reason"]
    assert not up2.rollout and up2.adaptation["rolloutRequested"] == d.value
    assert "rolloutRequested" not in up2.status_patch["adaptation"]  # kept, not rewritten


def test_the_cooldown_counts_from_the_rollouts_completion(
        pressure: Observation) -> None:  # noqa: F811
    b2, d, up = first_change(pressure)
    t0 = pressure.evaluated_at
    done = t0 + ROLLOUT_S
    dep = deployment(b2, up.adaptation, 2, 2, 1, 1)
    at_done = pressure.model_copy(update={"evaluated_at": done, "last_sample_at": done - 0.1})
    svc, state, _ = decision_for(b2, at_done, done)
    assert state is not None and state.last_change_at is not None
    assert abs(state.last_change_at - t0) < 1  # status keeps whole seconds
    p = rollout_progress(up.adaptation, dep, done)
    state = after_rollout(state, p, done)
    assert state.last_change_at == done
    up2 = plan_update(svc, waiting_decision(svc, state, at_done, "held", done), at_done, state,
                      done, policy=POLICY, rollout_state=p)
    ad = up2.status_patch["adaptation"]
    assert ad["rolloutRequested"] is None and ad["rolloutRequestedTime"] is None
    assert ad["lastChangeTime"] == rfc3339(done)
    (event,) = [e for e in up2.events if e.reason == "MaxNumSeqsRolledOut"]
    assert str(d.value) in event.message

    # The cooldown after the decision has passed, the one after the rollout has not: the
    # replayed engine still preempts, yet the cap holds.
    later = t0 + COOLDOWN + 60
    obs = pressure.model_copy(update={"evaluated_at": later, "last_sample_at": later - 0.1})
    b3 = copy.deepcopy(b2)
    b3["status"]["adaptation"] = {k: v for k, v in up2.adaptation.items()
                                  if v is not None}
    _, state3, d3 = decision_for(b3, obs, later)
    assert state3 is not None and state3.last_change_at is not None
    assert abs(state3.last_change_at - done) < 1
    assert d3.action is CapAction.HOLD and "cooldown" in d3.reason, d3.reason
    # Without the rollout's completion, the same observation would have moved the cap.
    b4 = copy.deepcopy(b2)
    _, _, d4 = decision_for(b4, obs, later)
    assert d4.action is CapAction.LOWER, d4.reason
    # After the cooldown from the completion, it moves again.
    final = done + COOLDOWN + 1
    obs5 = pressure.model_copy(update={"evaluated_at": final, "last_sample_at": final - 0.1})
    _, _, d5 = decision_for(b3, obs5, final)
    assert d5.action is CapAction.LOWER, d5.reason


def test_a_free_change_rolled_out_starts_no_cooldown(pressure: Observation) -> None:  # noqa: F811
    # Issue 57 item 4: running never above 2, a KV cache that holds 10: the lower to 10
    # turns no request away, so its rollout's completion starts no cooldown.
    calm = pressure.model_copy(update={"running_max": 2.0})
    b2, d, up = first_change(calm)
    assert not d.binding and d.free_to == d.value, d.reason
    assert up.adaptation["history"][-1]["binding"] is False
    assert up.adaptation["lastDecision"]["free"]["to"] == d.value
    t0 = calm.evaluated_at
    done = t0 + ROLLOUT_S
    at_done = calm.model_copy(update={"evaluated_at": done, "last_sample_at": done - 0.1})
    svc, state, _ = decision_for(b2, at_done, done)
    assert state is not None
    p = rollout_progress(up.adaptation, deployment(b2, up.adaptation, 2, 2, 1, 1), done)
    state = after_rollout(state, p, done)
    up2 = plan_update(svc, waiting_decision(svc, state, at_done, "held", done), at_done, state,
                      done, policy=POLICY, rollout_state=p)
    (event,) = [e for e in up2.events if e.reason == "MaxNumSeqsRolledOut"]
    assert "no cooldown counts from it" in event.message, event.message
    # The next window (after the completion) still preempts with running at 10: the cut
    # below 10 goes at once, no cooldown.
    later = done + 60
    obs = pressure.model_copy(update={"evaluated_at": later, "last_sample_at": later - 0.1,
                                      "running_max": 10.0})
    b3 = copy.deepcopy(b2)
    b3["status"]["adaptation"] = {k: v for k, v in up2.adaptation.items() if v is not None}
    _, _, d3 = decision_for(b3, obs, later)
    assert d3.action is CapAction.LOWER and d3.binding, d3.reason


def test_a_rollout_that_never_completes_is_said_once_and_holds_every_change(
        pressure: Observation) -> None:  # noqa: F811
    """The new pod never becomes available (no GPU for it, a crash loop): the Deployment
    controller gives up at progressDeadlineSeconds (Progressing=False,
    ProgressDeadlineExceeded). The hold's reason says so, a Warning is posted once, the
    service's Progressing condition says it too, and nothing moves until it completes."""
    b2, d, up = first_change(pressure)
    dep = deployment(b2, up.adaptation, 2, 2, updated=1, available=0)
    deadline = ('ReplicaSet "chat-5d8f" has timed out progressing.')
    dep["status"]["conditions"] = [{"type": "Progressing", "status": "False",
                                    "reason": "ProgressDeadlineExceeded", "message": deadline}]
    later = pressure.evaluated_at + 2400
    p = rollout_progress(up.adaptation, dep, later)
    assert p.stalled and not p.completed and p.wait is not None
    assert "did not complete" in p.wait and deadline in p.wait
    assert "spec.adaptation.mode: Recommend" in p.wait  # a way out the user controls

    obs = pressure.model_copy(update={"evaluated_at": later, "last_sample_at": later - 0.1})
    svc, state, _ = decision_for(b2, obs, later)
    assert state is not None
    hold = waiting_decision(svc, after_rollout(state, p, later), obs, p.wait, later)
    first = plan_update(svc, hold, obs, state, later, policy=POLICY, rollout_state=p)
    warned = [e for e in first.events if e.reason == "MaxNumSeqsRolloutStalled"]
    assert len(warned) == 1 and warned[0].type == "Warning" and deadline in warned[0].message
    assert first.adaptation["rolloutStalled"] is True and not first.rollout
    assert first.status_patch["adaptation"]["lastDecision"]["action"] == "hold"

    b3 = copy.deepcopy(b2)
    b3["status"]["adaptation"] = first.adaptation
    svc3, state3, _ = decision_for(b3, obs, later + 60)
    assert state3 is not None
    again = plan_update(svc3, waiting_decision(svc3, state3, obs, p.wait, later + 60), obs,
                        state3, later + 60, policy=POLICY, rollout_state=p)
    assert not [e for e in again.events if e.reason == "MaxNumSeqsRolloutStalled"]

    conds = st.workload_conditions([], st.WorkloadState.from_object(dep, 1), kind="Deployment",
                                   name="chat", generation=1, now=later)
    progressing = st.get_condition(conds, st.ConditionType.PROGRESSING)
    assert progressing is not None and progressing["status"] == "False"
    assert progressing["reason"] == "ProgressDeadlineExceeded"
    assert deadline in progressing["message"]

    # Once the pod comes up after all, the rollout completes and the stall is cleared.
    dep["status"].update({"availableReplicas": 1, "conditions": []})
    p2 = rollout_progress(first.adaptation, dep, later + 120)
    assert p2.completed
    done = plan_update(svc3, waiting_decision(svc3, state3, obs, "held", later + 120), obs, state3,
                       later + 120, policy=POLICY, rollout_state=p2)
    assert done.status_patch["adaptation"]["rolloutStalled"] is None


def test_a_multi_node_workload_carries_the_cap_in_its_shell_command() -> None:
    lws = {"spec": {"leaderWorkerTemplate": {"leaderTemplate": {"spec": {"containers": [
        {"command": ["/bin/sh", "-c"],
         "args": ["ray start --head && vllm serve m --max-num-seqs 24 --port 8000"]}]}}}}}
    assert workload_max_num_seqs(lws) == 24
    assert workload_max_num_seqs({"spec": {}}) is None
    req = {"rolloutRequested": 24, "rolloutRequestedTime": rfc3339(1000.0)}
    lws["spec"]["replicas"] = 2
    lws["metadata"] = {"generation": 3}
    lws["status"] = {"observedGeneration": 3, "updatedReplicas": 2, "readyReplicas": 1}
    p = rollout_progress(req, lws, 1100.0, kind="LeaderWorkerSet")
    assert p.wait is not None and "2 of 2 replicas updated, 1 available" in p.wait
    lws["status"]["readyReplicas"] = 2
    assert rollout_progress(req, lws, 1100.0, kind="LeaderWorkerSet").completed

"""Status (pure): conditions, transition times, the patch written only on change."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.api.errors import SpecError
from llm_operator.api.models import LLMServiceSpec
from llm_operator.api.timestamps import parse_rfc3339
from llm_operator.health.status import (
    ConditionType,
    WorkloadState,
    build_status,
    get_condition,
    rebase_patch,
    set_condition,
    status_patch,
)
from llm_operator.planning import make_plan

T0, T1 = "2025-01-01T00:00:00Z", "2025-01-01T00:05:00Z"  # as status shows them
AT0, AT1 = parse_rfc3339(T0), parse_rfc3339(T1)  # as the caller passes them


def spec(**engine: Any) -> LLMServiceSpec:
    return LLMServiceSpec.model_validate({
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "gpus": {"product": "L4"}, "engine": engine,
    })


def test_transition_time_moves_only_when_status_changes() -> None:
    conds = set_condition([], ConditionType.READY, False, "WaitingForReplicas", "0 of 1",
                          generation=1, now=AT0)
    same = set_condition(conds, ConditionType.READY, False, "WaitingForReplicas", "still 0",
                         generation=2, now=AT1)
    ready = get_condition(same, ConditionType.READY)
    assert ready is not None
    assert ready["lastTransitionTime"] == T0  # status unchanged: time kept
    assert ready["message"] == "still 0" and ready["observedGeneration"] == 2
    flipped = set_condition(same, ConditionType.READY, True, "Serving", "1 of 1",
                            generation=2, now=AT1)
    assert get_condition(flipped, ConditionType.READY)["lastTransitionTime"] == T1  # type: ignore[index]


def test_set_condition_keeps_the_others_and_their_order() -> None:
    conds = set_condition([], ConditionType.SPEC_VALID, True, "Valid", "", generation=1, now=AT0)
    conds = set_condition(conds, ConditionType.READY, False, "X", "", generation=1, now=AT0)
    conds = set_condition(conds, ConditionType.SPEC_VALID, False, "InvalidSpec", "m",
                          generation=2, now=AT1)
    assert [c["type"] for c in conds] == ["SpecValid", "Ready"]
    assert set(conds[0]) == {"type", "status", "reason", "message", "observedGeneration",
                             "lastTransitionTime"}


def test_valid_status_has_plan_endpoint_and_generation() -> None:
    plan = make_plan(spec())
    status = build_status(None, name="llm", namespace="ml", generation=3, now=AT0, plan=plan,
                          workload=WorkloadState(exists=True, desired=1))
    assert status["observedGeneration"] == 3
    assert status["endpoint"] == "http://llm.ml.svc:8000/v1"
    summary = status["plan"]
    assert summary["gpusPerReplica"] == plan.tensor_parallel_size * plan.pipeline_parallel_size
    assert summary["maxNumSeqs"] == plan.max_num_seqs
    assert summary["kvTokenCapacity"] == plan.kv_token_capacity
    assert {e["name"] for e in summary["explanations"]} >= {"tensorParallelSize", "maxNumSeqs"}
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["SpecValid"]["status"] == "True"
    assert by_type["Planned"]["status"] == "True"
    assert by_type["Ready"]["status"] == "False"
    assert by_type["Ready"]["reason"] == "WaitingForReplicas"


@pytest.mark.parametrize(
    ("state", "ready", "reason", "progressing"),
    [
        (WorkloadState(exists=False, desired=1), "False", "WorkloadMissing", "True"),
        (WorkloadState(exists=True, desired=2, available=1, updated=2), "False",
         "WaitingForReplicas", "True"),
        (WorkloadState(exists=True, desired=2, available=2, updated=2, generation=3,
                       observed_generation=3), "True", "Serving", "False"),
        (WorkloadState(exists=True, desired=2, available=2, updated=2, generation=4,
                       observed_generation=3), "False", "WaitingForReplicas", "True"),
        (WorkloadState(exists=True, desired=0), "False", "ScaledToZero", "False"),
    ],
)
def test_workload_state_sets_ready(state: WorkloadState, ready: str, reason: str,
                                   progressing: str) -> None:
    status = build_status(None, name="llm", namespace="ml", generation=1, now=AT0,
                          plan=make_plan(spec()), workload=state)
    by_type = {c["type"]: c for c in status["conditions"]}
    assert (by_type["Ready"]["status"], by_type["Ready"]["reason"]) == (ready, reason)
    assert by_type["Progressing"]["status"] == progressing


def test_invalid_spec_drops_the_plan_and_names_the_field() -> None:
    valid = build_status(None, name="llm", namespace="ml", generation=1, now=AT0,
                         plan=make_plan(spec()), workload=WorkloadState(True, 1, 1, 1))
    err = SpecError("spec.engine.tensorParallelSize", "3 does not divide 32 heads",
                    "use 1, 2, 4 or 8")
    invalid = build_status(valid, name="llm", namespace="ml", generation=2, now=AT1,
                           errors=[err])
    patch = status_patch(valid, invalid)
    assert patch["plan"] is None  # removed: it described the old spec
    cond = get_condition(patch["conditions"], ConditionType.SPEC_VALID)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "InvalidSpec"
    assert "spec.engine.tensorParallelSize" in cond["message"] and "Fix:" in cond["message"]
    assert cond["lastTransitionTime"] == T1
    ready = get_condition(patch["conditions"], ConditionType.READY)
    assert ready is not None and ready["status"] == "False"


def test_patch_is_empty_when_nothing_changed() -> None:
    plan = make_plan(spec())
    first = build_status(None, name="llm", namespace="ml", generation=1, now=AT0, plan=plan,
                         workload=WorkloadState(True, 1, 1, 1))
    again = build_status(first, name="llm", namespace="ml", generation=1, now=AT1, plan=plan,
                         workload=WorkloadState(True, 1, 1, 1))
    assert status_patch(first, again) == {}  # a later clock alone writes nothing
    changed = build_status(first, name="llm", namespace="ml", generation=1, now=AT1, plan=plan,
                           workload=WorkloadState(True, 1, 0, 1))
    patch = status_patch(first, changed)
    assert set(patch) == {"conditions"}


def test_pinned_value_reaches_the_summary() -> None:
    status = build_status(None, name="llm", namespace="ml", generation=1, now=AT0,
                          plan=make_plan(spec(maxNumSeqs=7)))
    assert status["plan"]["maxNumSeqs"] == 7
    why = [e for e in status["plan"]["explanations"] if e["name"] == "maxNumSeqs"]
    assert why and why[0]["source"] == "pinned"


def test_engine_overrides_take_tuning_then_adaptation() -> None:
    from llm_operator.health.status import engine_overrides

    assert engine_overrides(None) == {}
    status = {"tuning": {"applied": {"maxNumSeqs": 24, "maxNumBatchedTokens": 4096}}}
    assert engine_overrides(status) == {"maxNumSeqs": 24, "maxNumBatchedTokens": 4096}
    status["adaptation"] = {"maxNumSeqs": 12}
    assert engine_overrides(status) == {"maxNumSeqs": 12, "maxNumBatchedTokens": 4096}
    # Garbage in status (a hand edit) is ignored rather than rendered.
    assert engine_overrides({"adaptation": {"maxNumSeqs": "lots"}}) == {}


def test_engine_in_effect_names_where_each_value_came_from() -> None:
    from llm_operator.api.models import EngineSpec, LLMServiceSpec
    from llm_operator.health.status import engine_in_effect
    from llm_operator.planning import make_plan

    spec = LLMServiceSpec.model_validate(
        {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": {"product": "H100"}})
    plan = make_plan(spec)
    planned = engine_in_effect(spec.engine, plan, None)
    assert planned["maxNumSeqs"] == plan.max_num_seqs
    assert planned["maxNumSeqsSource"] == "planned"
    tuned = {"tuning": {"applied": {"maxNumSeqs": 24}}}
    assert engine_in_effect(spec.engine, plan, tuned)["maxNumSeqs"] == 24
    assert engine_in_effect(spec.engine, plan, tuned)["maxNumSeqsSource"] == "tuned"
    adapted = {**tuned, "adaptation": {"maxNumSeqs": 12}}
    assert engine_in_effect(spec.engine, plan, adapted)["maxNumSeqsSource"] == "adapted"
    pinned = EngineSpec(max_num_seqs=64)
    in_effect = engine_in_effect(pinned, plan, adapted)
    assert (in_effect["maxNumSeqs"], in_effect["maxNumSeqsSource"]) == (64, "pinned")


def test_a_stale_writer_keeps_the_conditions_another_wrote_meanwhile() -> None:
    """The reconcile handler read the status, then a workload event set Available; the
    handler's patch (Planned for the new generation) must not bring Available back."""
    planned_old = set_condition([], ConditionType.PLANNED, True, "PlanComputed", "p",
                                generation=1, now=AT0)
    base = {"observedGeneration": 1,
            "conditions": set_condition(planned_old, ConditionType.AVAILABLE, False,
                                        "NoReplicasAvailable", "none", generation=1, now=AT0)}
    fresh = {**base, "conditions": set_condition(base["conditions"], ConditionType.AVAILABLE,
                                                 True, "ReplicasAvailable", "1 of 1",
                                                 generation=1, now=AT1)}
    mine = {"observedGeneration": 2,
            "conditions": set_condition(base["conditions"], ConditionType.PLANNED, True,
                                        "PlanComputed", "p2", generation=2, now=AT1)}
    patch = rebase_patch(mine, base, fresh)
    assert patch["observedGeneration"] == 2
    available = get_condition(patch["conditions"], ConditionType.AVAILABLE)
    planned = get_condition(patch["conditions"], ConditionType.PLANNED)
    assert available is not None and available["status"] == "True"  # the other writer's
    assert planned is not None and planned["observedGeneration"] == 2  # mine
    assert planned["lastTransitionTime"] == T0  # status did not change: time kept
    # Against the status it was computed from, the patch is itself (no-ops dropped).
    assert rebase_patch(mine, base, base) == {
        "observedGeneration": 2, "conditions": mine["conditions"]}
    # Already written: nothing to write.
    assert rebase_patch(mine, base, {**fresh, **rebase_patch(mine, base, fresh)}) == {}


def test_rebase_removes_a_dropped_condition_only_where_it_is_still_as_it_was() -> None:
    old = {"type": "LiveCap", "status": "False", "reason": "VllmVersionUnsupported"}
    other = {"type": "Ready", "status": "True", "reason": "Ready"}
    base = {"conditions": [other, old]}
    mine = {"conditions": [other]}  # this writer removed LiveCap
    assert rebase_patch(mine, base, {"conditions": [other, old]}) == {"conditions": [other]}
    # another writer set LiveCap since: theirs stays
    theirs = {**old, "reason": "CapPending", "status": "True"}
    assert rebase_patch(mine, base, {"conditions": [other, theirs]}) == {}


def test_rebase_removes_a_key_only_where_it_still_exists() -> None:
    assert rebase_patch({"plan": None}, {"plan": {"a": 1}}, {"plan": {"a": 1}}) == {
        "plan": None}
    assert rebase_patch({"plan": None}, {"plan": {"a": 1}}, {}) == {}


def test_children_applied_says_what_failed_and_the_scale_fields() -> None:
    plan = make_plan(spec())
    state = WorkloadState(exists=True, desired=2, available=1, updated=2, replicas=2)
    ok = build_status(None, name="llm", namespace="ml", generation=1, now=AT0, plan=plan,
                      workload=state, selector="a=b")
    assert ok["replicas"] == 2 and ok["selector"] == "a=b"  # the scale subresource reads them
    cond = next(c for c in ok["conditions"] if c["type"] == "ChildrenApplied")
    assert (cond["status"], cond["reason"]) == ("True", "ChildrenApplied")
    failed = build_status(ok, name="llm", namespace="ml", generation=1, now=AT1, plan=plan,
                          workload=state, apply_failures=["apply PodMonitor llm: (403) no"])
    cond = next(c for c in failed["conditions"] if c["type"] == "ChildrenApplied")
    assert (cond["status"], cond["reason"]) == ("False", "ApplyFailed")
    assert "PodMonitor" in cond["message"]
    half = build_status(ok, name="llm", namespace="ml", generation=1, now=AT1, plan=plan,
                        workload=state, apply_failures=["delete Deployment llm: (403)"],
                        switch_incomplete="Deployment ml/llm keeps its GPUs")
    cond = next(c for c in half["conditions"] if c["type"] == "ChildrenApplied")
    assert (cond["status"], cond["reason"]) == ("False", "WorkloadSwitchIncomplete")

"""A LeaderWorkerSet group that LWS recreated after one of its pods restarted: the
LLMService's Available and Ready say so, from LWS's own Event (issue 36)."""

from __future__ import annotations

import pytest

from llm_operator.api.timestamps import parse_rfc3339
from llm_operator.health import status as st

NOW = parse_rfc3339("2026-11-28T10:00:00Z")
MESSAGE = "Worker pod duo-lws-0-1 failed, deleted leader pod duo-lws-0 to recreate group 0"


def event(when: str, message: str = MESSAGE, reason: str = st.GROUP_RECREATED_REASON,
          key: str = "lastTimestamp") -> dict:
    return {"reason": reason, "message": message, key: when,
            "involvedObject": {"kind": "LeaderWorkerSet", "name": "duo-lws"}}


def down(generation: int = 1) -> list[dict]:
    state = st.WorkloadState(exists=True, desired=1, available=0, updated=1)
    return st.workload_conditions([], state, kind="LeaderWorkerSet", name="duo",
                                  generation=generation, now=NOW - 5)


def test_the_latest_recent_event_is_said_with_its_time() -> None:
    note = st.group_recreated_note([
        event("2026-11-28T09:40:00Z", "Worker pod duo-lws-0-1 failed, deleted leader pod "
              "duo-lws-0 to recreate group 0 (earlier)"),
        event("2026-11-28T09:59:30Z"),
        event("2026-11-28T09:59:50Z", "other", reason="GroupsProgressing"),
    ], NOW)
    assert note is not None
    assert "2026-11-28T09:59:30Z" in note and MESSAGE in note and "(earlier)" not in note


@pytest.mark.parametrize("events", [
    [],
    [event("2026-11-28T08:00:00Z")],  # over an hour ago: not why the group is down now
    [event("2026-11-28T09:59:00Z", reason="GroupsProgressing")],
])
def test_no_note_without_a_recent_recreation(events: list[dict]) -> None:
    assert st.group_recreated_note(events, NOW) is None


def test_an_event_with_only_an_event_time_counts() -> None:
    assert st.group_recreated_note([event("2026-11-28T09:59:00.123456Z", key="eventTime")],
                                   NOW) is not None


def test_available_and_ready_carry_the_note_while_false_only() -> None:
    note = st.group_recreated_note([event("2026-11-28T09:59:30Z")], NOW)
    conds = st.with_group_recreated(down(), note, generation=1, now=NOW)
    for ctype in ("Available", "Ready"):
        cond = st.get_condition(conds, ctype)
        assert cond is not None and cond["status"] == "False"
        assert MESSAGE in cond["message"] and cond["message"].startswith(
            st.get_condition(down(), ctype)["message"])  # type: ignore[index]
    progressing = st.get_condition(conds, "Progressing")
    assert progressing is not None and MESSAGE not in progressing["message"]
    # said once, however often the workload changes
    again = st.with_group_recreated(conds, note, generation=1, now=NOW + 10)
    assert again == conds
    # a serving workload is not marked
    state = st.WorkloadState(exists=True, desired=1, available=1, updated=1)
    up = st.workload_conditions(conds, state, kind="LeaderWorkerSet", name="duo",
                                generation=1, now=NOW + 20)
    assert all(MESSAGE not in c["message"] for c in st.with_group_recreated(
        up, note, generation=1, now=NOW + 20))

"""Status writes from several handlers, through the operator's own client against the
EMULATED API server (which checks ``metadata.resourceVersion`` in a patch as a real one
does): a write computed from an older read must not undo what another wrote meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client import Configuration

from llm_operator.api.constants import API_VERSION, KIND
from llm_operator.api.timestamps import parse_rfc3339
from llm_operator.controller.kube import ConflictError, KubeClient
from llm_operator.health.status import ConditionType, get_condition, rebase_patch, set_condition
from llm_operator_sandbox.emulator import EmulatorThread

NAME = "llama-3-1-8b"
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"
AT1 = parse_rfc3339(T1)


def client(server: EmulatorThread) -> KubeClient:
    return KubeClient(Configuration(host=server.url))


def conds_patch(status: dict[str, Any], ctype: ConditionType, ok: bool, reason: str,
                generation: int) -> dict[str, Any]:
    return {"conditions": set_condition(status.get("conditions") or [], ctype, ok, reason,
                                        reason, generation=generation, now=AT1)}


def test_a_write_from_a_stale_read_keeps_the_other_writers_condition(
        server: EmulatorThread) -> None:
    async def scenario() -> dict[str, Any]:
        kube = client(server)
        try:
            stale = await kube.get(API_VERSION, KIND, "default", NAME)
            assert stale is not None
            # Another handler (a workload event) writes Available meanwhile.
            other = conds_patch({}, ConditionType.AVAILABLE, True, "ReplicasAvailable", 1)
            await kube.update_status(API_VERSION, KIND, "default", NAME,
                                     lambda obj: rebase_patch(other, {}, obj.get("status")))
            # This handler computed its patch from the stale read.
            mine = conds_patch(stale.get("status") or {}, ConditionType.PLANNED, True,
                               "PlanComputed", 1)
            written = await kube.update_status(
                API_VERSION, KIND, "default", NAME,
                lambda obj: rebase_patch(mine, stale.get("status"), obj.get("status")),
                known=stale)
            assert written is not None
            return written
        finally:
            await kube.close()

    status = asyncio.run(scenario())["status"]
    for ctype in (ConditionType.AVAILABLE, ConditionType.PLANNED):
        cond = get_condition(status["conditions"], ctype)
        assert cond is not None and cond["status"] == "True", status["conditions"]


def test_a_writer_that_always_loses_gives_up_with_a_conflict(server: EmulatorThread) -> None:
    async def scenario() -> None:
        kube = client(server)
        try:
            stale = await kube.get(API_VERSION, KIND, "default", NAME)
            assert stale is not None
            await kube.update_status(API_VERSION, KIND, "default", NAME,
                                     lambda obj: {"endpoint": "http://changed"})
            # One attempt, from the stale copy: its resourceVersion no longer matches, so
            # the only write conflicts and nothing is left to retry with.
            with pytest.raises(ConflictError):
                await kube.update_status(API_VERSION, KIND, "default", NAME,
                                         lambda obj: {"endpoint": "http://mine"},
                                         known=stale, attempts=1)
        finally:
            await kube.close()

    asyncio.run(scenario())

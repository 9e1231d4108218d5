"""kopf retries a failed change handler but ignores a failed event handler: a server pod's
PodsScheduled update that hit an API outage would be lost until the pod's next event (the
churn on the real control plane logged 170 such failures during a kube-apiserver restart).
The operator retries that step in the background, with backoff, one task per service."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import pytest

from llm_operator.controller import handlers
from llm_operator.controller.context import CONTEXT_KEY, OperatorContext
from llm_operator.controller.handlers import api_fault
from llm_operator.controller.kube import ApiError
from llm_operator.settings import Settings

pytestmark = pytest.mark.unit
LOG = logging.getLogger("test")


def context() -> OperatorContext:
    return OperatorContext(settings=Settings(), kube=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("exc", "fault"), [
    (ApiError(503, "{}"), True),
    (ApiError(500, "{}"), True),
    (ApiError(429, "{}"), True),
    (TimeoutError(), True),
    (aiohttp.ClientConnectionError("refused"), True),
    (ApiError(403, "{}"), False),
    (ApiError(422, "{}"), False),
    (ValueError("a bug"), False),
])
def test_what_counts_as_an_api_fault(exc: BaseException, fault: bool) -> None:
    assert api_fault(exc) is fault


def test_a_step_that_fails_on_faults_is_retried_until_it_succeeds() -> None:
    calls: list[int] = []

    async def step() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise ApiError(503, '{"message": "etcd is restarting"}')

    async def scenario() -> None:
        ctx = context()
        ctx.retry_in_background("k", step, (0.01, 0.01, 0.01, 0.01), api_fault, LOG)
        ctx.retry_in_background("k", step, (0.01,), api_fault, LOG)  # one task per key
        await asyncio.gather(*ctx.background)
        assert ctx.retries == {}

    asyncio.run(scenario())
    assert len(calls) == 3


def test_retries_stop_on_an_error_that_is_not_a_fault_and_after_the_last_delay(
        caplog: pytest.LogCaptureFixture) -> None:
    calls: dict[str, int] = {"bug": 0, "down": 0}

    async def bug() -> None:
        calls["bug"] += 1
        raise ValueError("a bug")

    async def down() -> None:
        calls["down"] += 1
        raise TimeoutError()

    async def scenario() -> None:
        ctx = context()
        ctx.retry_in_background("bug", bug, (0.01,) * 5, api_fault, LOG)
        ctx.retry_in_background("down", down, (0.01,) * 3, api_fault, LOG)
        await asyncio.gather(*ctx.background)

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert calls == {"bug": 1, "down": 3}
    assert "not retried" in caplog.text and "Gave up on down after 3 retries" in caplog.text


def test_the_pod_event_handler_retries_its_step_in_the_background(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    async def pods_changed(ctx: Any, key: Any, services: Any, pods: Any, logger: Any) -> None:
        seen.append(key)
        if len(seen) == 1:
            raise ApiError(503, "{}")

    monkeypatch.setattr(handlers, "pods_changed", pods_changed)
    monkeypatch.setattr(handlers, "EVENT_RETRY_DELAYS_SECONDS", (0.01, 0.01))

    async def scenario() -> None:
        ctx = context()
        memo: dict[str, Any] = {CONTEXT_KEY: ctx}
        await handlers.server_pod_event(
            namespace="ns", labels={"llmops.dev/llmservice": "svc"}, memo=memo, logger=LOG,
            **{handlers.INDEX: {}, handlers.POD_INDEX: {}})
        await asyncio.gather(*ctx.background)

    asyncio.run(scenario())
    assert seen == [("ns", "svc"), ("ns", "svc")]

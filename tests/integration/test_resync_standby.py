"""The resync loop in an operator pod whose index is behind the API server, as a standby's
is (peering paused it: kopf stops its watches, the index freezes at what it last saw).
Against the EMULATED API server, through the operator's own client: a service the
frozen index shows as stalled, but that somebody (the active operator) has written
since, is neither touched nor reconciled, and read only once; the same service left
unwritten is touched (the loop does act when its view is current)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import pytest
from kubernetes_asyncio.client import Configuration

from llm_operator.api.constants import API_VERSION, KIND, PROGRESS_PREFIX
from llm_operator.controller import resync
from llm_operator.controller.context import OperatorContext
from llm_operator.controller.diffbase import SlimDiffBaseStorage
from llm_operator.controller.kube import KubeClient
from llm_operator.controller.progress import GenerationProgressStorage
from llm_operator.settings import Settings
from llm_operator_sandbox.emulator import EmulatorThread

NAME = "llama-3-1-8b"
KEY = ("default", NAME)
ROUNDS = 8


class CountingKube(KubeClient):
    """The operator's client, counting its reads of the service."""

    gets = 0

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        self.gets += 1
        return await super().get(*args, **kwargs)


def run_loop(server: EmulatorThread, written_since: bool,
             monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], int]:
    """The loop for ROUNDS intervals over an index frozen at the service as applied (no
    handling recorded: kopf's cycle looks open); ``written_since``: another writer
    labels the service first. Returns the service's annotations after, and the reads."""
    monkeypatch.setattr(resync, "RESYNC_INTERVAL_SECONDS", 0.05)
    settings = kopf.OperatorSettings()
    settings.persistence.progress_storage = GenerationProgressStorage(prefix=PROGRESS_PREFIX)
    settings.persistence.diffbase_storage = SlimDiffBaseStorage(
        prefix=PROGRESS_PREFIX, key="last-handled-configuration")

    async def scenario() -> tuple[dict[str, Any], int]:
        kube = CountingKube(Configuration(host=server.url))
        try:
            frozen = await kube.get(API_VERSION, KIND, *KEY)
            assert frozen is not None
            if written_since:
                await kube.merge_patch(API_VERSION, KIND, *KEY,
                                       {"metadata": {"labels": {"team": "active-pod"}}})
            kube.gets = 0
            ctx = OperatorContext(settings=Settings(), kube=kube)
            task = asyncio.create_task(
                resync.resync_loop(ctx, {KEY: [frozen]}, settings, logging.getLogger("resync")))
            await asyncio.sleep(resync.RESYNC_INTERVAL_SECONDS * ROUNDS)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            reads = kube.gets
            now = await kube.get(API_VERSION, KIND, *KEY)
            assert now is not None
            return dict(now["metadata"].get("annotations") or {}), reads
        finally:
            await kube.close()

    return asyncio.run(scenario())


def kopf_marks(annotations: dict[str, Any]) -> list[str]:
    return [k for k in annotations if k.startswith(PROGRESS_PREFIX)]


def test_a_frozen_index_does_not_act_on_a_service_written_since(
        server: EmulatorThread, monkeypatch: pytest.MonkeyPatch) -> None:
    annotations, reads = run_loop(server, written_since=True, monkeypatch=monkeypatch)
    assert kopf_marks(annotations) == [], annotations  # not touched
    assert reads == 1, f"read {reads} times in {ROUNDS} rounds: once is enough to know"


def test_a_current_index_touches_the_stalled_service(
        server: EmulatorThread, monkeypatch: pytest.MonkeyPatch) -> None:
    annotations, reads = run_loop(server, written_since=False, monkeypatch=monkeypatch)
    assert kopf_marks(annotations), annotations  # kopf's touch: its cycle is set going
    assert reads >= 1

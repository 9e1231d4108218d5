"""The operator's API client under a burst and against a server that hangs: its timeout
is the server's (connect, read), not the wait for a connection of its own pool. Against
the EMULATED API server (in-process), with a delay injected on every read."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest
from kubernetes_asyncio.client import Configuration

from llm_operator.controller.kube import KubeClient
from llm_operator_sandbox.emulator import EmulatorThread


def client(url: str, timeout: float) -> KubeClient:
    return KubeClient(Configuration(host=url), timeout=timeout)


def test_a_burst_larger_than_the_pool_waits_its_turn_instead_of_timing_out() -> None:
    with EmulatorThread() as api:
        assert api.emulator is not None
        api.emulator.add_fault("GET", "configmaps", delay=0.2, times=None)

        async def burst() -> list[object]:
            kube = client(api.url, timeout=1.5)
            try:  # 400 reads of 0.2 s through a pool of 32: about 2.5 s in all
                return await asyncio.gather(
                    *(kube.get("v1", "ConfigMap", "default", f"cm-{i}") for i in range(400)),
                    return_exceptions=True)
            finally:
                await kube.close()
        results = asyncio.run(burst())
    assert [r for r in results if r is not None] == []  # all answered (404: None)


def test_a_server_that_does_not_answer_still_times_out() -> None:
    with EmulatorThread() as api:
        assert api.emulator is not None
        api.emulator.add_fault("GET", "configmaps", delay=3.0)

        async def one() -> object:
            kube = client(api.url, timeout=0.5)
            try:
                return await kube.get("v1", "ConfigMap", "default", "hung")
            finally:
                await kube.close()
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            asyncio.run(one())
        assert time.monotonic() - t0 < 2.5
        urllib.request.urlopen(api.url + "/emulator/faults", timeout=5).close()

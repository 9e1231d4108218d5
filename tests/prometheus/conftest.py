"""Fixtures of the prometheus tier: a throwaway real Prometheus scraping a real vLLM.

Each scenario module starts ONE vLLM server (CPU build, tiny generated model) with its
own flags, holding the machine-wide vLLM lock for the server's lifetime, and one
Prometheus whose static target carries the labels the rendered PodMonitor's relabelling
would give the pod (``llmservice``, ``namespace``). Load comes from vLLM's own benchmark.

Set ``LLMOP_RECORD_SERIES=DIR`` to write the observation sequences a test saw into
``DIR/<scenario>.json`` (how ``tests/unit/data/*.json`` were recorded).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llm_operator.adaptation import prometheus
from llm_operator.adaptation.policy import Observation
from llm_operator.inpod.tuner.server import VLLMServer
from tests.conftest import vllm_python
from tests.support.prometheus import (
    PrometheusServer,
    Target,
    prometheus_available,
    start_prometheus,
)
from tests.support.tiny_model import ensure_tiny_llama
from tests.support.vllm_load import Load, LoadRun

MODEL_CACHE = Path(os.environ.get("LLMOP_TEST_MODELS", "/tmp/llmop-models"))
NAMESPACE = "team-a"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the tier cleanly where its real parts are not installed."""
    no_prom = not prometheus_available()
    no_vllm = not vllm_python().exists()
    for item in items:
        if "tests/prometheus" not in str(item.fspath):
            continue
        if no_prom:
            item.add_marker(pytest.mark.skip(reason="no /usr/bin/prometheus (apt install "
                                                    "prometheus)"))
        elif no_vllm and item.get_closest_marker("vllm") is not None:
            item.add_marker(pytest.mark.skip(reason=f"no vLLM Python at {vllm_python()}"))


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The tiny Llama the vLLM CPU engine serves (generated once, cached)."""
    return ensure_tiny_llama(MODEL_CACHE, vllm_python())


@dataclass
class Stack:
    """A vLLM server and a Prometheus scraping it as LLMService ``namespace/name``."""

    server: VLLMServer
    prom: PrometheusServer
    model: Path
    namespace: str
    name: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def load(self, load: Load) -> LoadRun:
        """Start a benchmark against the server (returns at once), once the requests of
        an earlier one have left it (:meth:`wait_idle`)."""
        self.wait_idle()
        return LoadRun(vllm_python(), self.server.url, str(self.model), load)

    def wait_idle(self, timeout_s: float = 120.0) -> None:
        """Wait until Prometheus's latest sample has no request running on the server.

        A load a test killed leaves its last samples (running > 0) in Prometheus for a
        scrape or more, and its requests in the engine until it notices the clients
        went. :func:`observe_while` waits for ``running > 0`` to know the next load
        arrived: without this wait, those samples answered it at once, its windows
        started before the next benchmark's client had even imported vLLM (tens of
        seconds on two busy cores), and a test judged idle windows ("no window looked
        anything up in the prefix cache", CI, after a 310 s wait for the vLLM lock)."""
        self.prom.wait_for_series(
            f'vllm:num_requests_running{{llmservice="{self.name}"}} == 0', timeout_s)

    def restart(self, flags: list[str]) -> None:
        """A rollout played by hand: the server stopped and started again on its port with
        ``flags``, so Prometheus keeps scraping the same target. The stack's teardown stops
        whichever server it holds."""
        old = self.server
        old.stop()
        self.server = VLLMServer(model=old.model, python=old.python, flags=flags,
                                 port=old.port, log_path=old.log_path,
                                 start_timeout_s=old.start_timeout_s)
        self.server.start()

    def observe(self, window_s: float, now: float | None = None) -> Observation | None:
        """The controller's observation of this service, evaluated now."""
        client = prometheus.connect(self.prom.url)
        obs = prometheus.fetch_observations(client, [self.key], now or time.time(), window_s)
        return obs.get(self.key)


def start_stack(model: Path, flags: list[str], name: str) -> Iterator[Stack]:
    """Start vLLM with ``flags`` (under the vLLM lock) and a Prometheus scraping it."""
    log = Path(os.environ.get("LLMOP_TEST_LOGS", "/tmp")) / f"llmop-adapt-{name}-vllm.log"
    server = VLLMServer(model=str(model), python=str(vllm_python()), flags=flags,
                        log_path=log, start_timeout_s=300)
    server.start()
    stack: Stack | None = None
    try:
        prom = start_prometheus([Target(f"127.0.0.1:{server.port}",
                                        {"llmservice": name, "namespace": NAMESPACE})])
        try:
            prom.wait_for_series(f'vllm:num_requests_running{{llmservice="{name}"}}', 30)
            stack = Stack(server, prom, model, NAMESPACE, name)
            yield stack
        finally:
            prom.stop()
    finally:
        # A test may have restarted the server (Stack.restart): stop the one running.
        (server if stack is None else stack.server).stop()


def full(seen: list[Observation], window_s: float) -> list[Observation]:
    """The windows holding at least 3/4 of their scrapes (one a second): the ones a test
    judges."""
    return [o for o in seen if o.samples >= window_s * 0.75]


def observe_while(stack: Stack, run: LoadRun, window_s: float, every_s: float,
                  max_s: float, want: int = 2) -> list[Observation]:
    """Observe every ``every_s`` while the load runs, for ``max_s`` or, while fewer than
    ``want`` full windows (:func:`full`) are in, up to ``2 * window_s`` longer; first wait
    for the load to reach the server.

    Only windows that begin after the load was seen on the server are returned, and only
    those Prometheus answered: a window reaching back before the load is mostly idle
    samples (the server is scraped from its start), and on a loaded machine a query can
    fail. CI once judged such a window (running 0.5 of a cap of 2, waiting 1.5, with 8
    clients), so a test reading the last window must not get one.
    """
    stack.prom.wait_for_series(
        f'vllm:num_requests_running{{llmservice="{stack.name}"}} > 0', 120)
    seen_at = time.time()
    seen: list[Observation] = []
    t0 = time.monotonic()
    while run.running():
        enough = len(full(seen, window_s)) >= want
        if time.monotonic() - t0 >= (max_s if enough else max_s + 2 * window_s):
            break
        time.sleep(every_s)
        obs = stack.observe(window_s)
        if obs is not None and obs.error is None and obs.evaluated_at - window_s >= seen_at:
            seen.append(obs)
    return seen


def record(scenario: str, meta: dict[str, object], seen: list[Observation]) -> None:
    """Write the sequence to ``$LLMOP_RECORD_SERIES/<scenario>.json`` when asked to."""
    out = os.environ.get("LLMOP_RECORD_SERIES")
    if not out:
        return
    Path(out).mkdir(parents=True, exist_ok=True)
    doc = {**meta, "observations": [o.model_dump(by_alias=True) for o in seen]}
    (Path(out) / f"{scenario}.json").write_text(json.dumps(doc, indent=1) + "\n")


def observe_scenario(stack: Stack, scenario: str, load: Load, cap: int, flags: list[str],
                     window_s: float) -> list[Observation]:
    """Run ``load`` against the stack and observe it (:func:`observe_while`, about 35 s),
    then record the series (see :func:`record`). A load that ended before a full window
    was seen fails here, with the benchmark's output."""
    run = stack.load(load)
    try:
        seen = observe_while(stack, run, window_s, every_s=3.0, max_s=35.0)
        if not full(seen, window_s) and not run.running():
            raise AssertionError(
                f"the load ended before a full {window_s:.0f} s window of it was observed "
                f"(samples {[o.samples for o in seen]}); the benchmark's output:\n"
                f"{run.output_tail()}")
    finally:
        run.kill()
    record(scenario, {"scenario": scenario, "cap": cap, "flags": flags,
                      "load": load.__dict__, "windowSeconds": window_s}, seen)
    return seen

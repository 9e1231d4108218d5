"""Prometheus slow, answering garbage, or with stale series: the adaptation holds, says
why, and never acts on them; the fetch never raises (the timer never crashes).

Slow and stale use the real Prometheus (Debian package); garbage is a plain HTTP server
answering nonsense on the query API (no Prometheus answers that, which is the point).
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llm_operator.adaptation import prometheus
from llm_operator.adaptation.policy import AdaptationState, CapAction, decide
from llm_operator.api.models import LLMServiceSpec
from tests.support.metrics_replay import KV_PRESSURE, Recording, ReplayServer
from tests.support.prometheus import Target, running_prometheus

SPEC = LLMServiceSpec.model_validate({"model": {"name": "tiny"},
                                      "adaptation": {"mode": "Apply"}})
KEY = ("team-a", "chat")


@contextmanager
def http_server(answer: Any) -> Iterator[str]:
    """An HTTP server whose every answer is ``answer(handler)``; yields its URL."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answer(self)

        do_GET = do_POST  # noqa: N815

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def reply(body: bytes, ctype: str = "application/json") -> Any:
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
    return answer


def holds(obs: dict[Any, Any], reason: str) -> None:
    d = decide(obs.get(KEY), AdaptationState(current=16), SPEC, time.time())
    assert d.action is CapAction.HOLD and d.value == 16
    assert reason in d.reason, d.reason


@pytest.mark.parametrize("body", [
    b"<html>502 Bad Gateway</html>",
    b'{"status": "success", "data": {"resultType": "vector", "result": "nonsense"}}',
    b'{"status": "success", "data": {"resultType": "vector", "result": [1, "x", null]}}',
    b'{"status": "success", "data": {"result": {"metric": 3}}}',
])
def test_garbage_from_the_query_api_holds_as_unavailable(body: bytes) -> None:
    with http_server(reply(body)) as url:
        errors: list[Exception] = []
        obs = prometheus.fetch_observations(prometheus.connect(url, timeout_seconds=2), [KEY],
                                            time.time(), 60, on_error=errors.append)
    assert len(errors) == 1
    holds(obs, "Prometheus is unavailable")


def test_a_slow_prometheus_times_out_and_holds() -> None:
    with running_prometheus([]) as prom:
        def slow(h: BaseHTTPRequestHandler) -> None:  # a proxy that answers 3 s late
            time.sleep(3)
            with urllib.request.urlopen(prom.url + h.path, timeout=10) as resp:
                reply(resp.read())(h)
        with http_server(slow) as url:
            errors: list[Exception] = []
            t0 = time.monotonic()
            obs = prometheus.fetch_observations(
                prometheus.connect(url, timeout_seconds=1, retries=0), [KEY], time.time(), 60,
                on_error=errors.append)
            assert time.monotonic() - t0 < 2.5  # the timer is not held up by a slow query
    assert len(errors) == 1
    holds(obs, "Prometheus is unavailable")
    assert "Timeout" in obs[KEY].error


def test_series_of_a_stopped_target_are_stale_and_hold() -> None:
    replay = ReplayServer(Recording.load(KV_PRESSURE)).start()
    stopped = False
    try:
        with running_prometheus([Target(replay.address, {"llmservice": KEY[1],
                                                         "namespace": KEY[0]})]) as prom:
            prom.wait_for_series(f'vllm:num_requests_running{{llmservice="{KEY[1]}"}}', 30)
            time.sleep(3)
            replay.stop()  # the pod went: the scrapes fail, Prometheus marks the series stale
            stopped = True
            prom.wait_for_series(f'up{{llmservice="{KEY[1]}"}} == 0', 20)
            time.sleep(1.5)
            errors: list[Exception] = []
            obs = prometheus.fetch_observations(prometheus.connect(prom.url), [KEY],
                                                time.time(), 60, on_error=errors.append)
    finally:
        if not stopped:
            replay.stop()
    assert errors == [] and obs[KEY].samples and obs[KEY].last_sample_at is None
    holds(obs, "stale data")

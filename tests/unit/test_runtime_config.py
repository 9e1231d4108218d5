"""The runtime-config adapter (issue 60 item 3; llm_operator.adaptation.runtime_config).

STAND-IN: the HTTP server here plays a vLLM with RFC #54816's ``GET``/``PATCH
/v1/runtime_config``, an API no vLLM release has (the RFC is open and unmerged as of
2026-12-05). Its shapes are the adapter's reading of the RFC, not a vLLM contract; what
a real vLLM answers today is checked in tests/vllm/test_runtime_config_probe.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llm_operator.adaptation import runtime_config as rc

OPENAPI_WITH = {"openapi": "3.1.0", "paths": {
    "/v1/models": {"get": {}},
    "/v1/runtime_config": {"get": {}, "patch": {}}}}
OPENAPI_WITHOUT = {"openapi": "3.1.0", "paths": {"/v1/models": {"get": {}},
                                                  "/v1/completions": {"post": {}}}}


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class StandIn:
    """What the stand-in server answers, per (method, path): (status, JSON or bytes);
    ``delay_s`` before answering a PATCH (a timeout); every request it got."""

    answers: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    delay_s: float = 0.0
    seen: list[Seen] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    state = StandIn()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            state.seen.append(Seen(self.command, self.path, dict(self.headers), body))
            if self.command == "PATCH" and state.delay_s:
                time.sleep(state.delay_s)
            status, payload = state.answers.get((self.command, self.path), (404, {
                "detail": "Not Found"}))
            out = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_PATCH = do_POST = _answer  # noqa: N815

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def serving_the_rfc(s: StandIn, cap: int = 32) -> None:
    s.answers[("GET", "/openapi.json")] = (200, OPENAPI_WITH)
    s.answers[("GET", "/v1/runtime_config")] = (200, {"max_num_running_seqs": cap,
                                                      "max_num_seqs": 256})


# --- detection ------------------------------------------------------------------------


def test_a_server_that_advertises_the_endpoint_is_supported(stand_in: StandIn):
    serving_the_rfc(stand_in, 32)
    found = rc.detect(stand_in.url)
    assert found.support is rc.Support.SUPPORTED and found.cap == 32
    assert "listed in its OpenAPI schema" in found.reason
    assert [(s.method, s.path) for s in stand_in.seen] == [
        ("GET", "/openapi.json"), ("GET", "/v1/runtime_config")]


def test_a_schema_without_the_path_is_unsupported_without_asking_further(stand_in: StandIn):
    stand_in.answers[("GET", "/openapi.json")] = (200, OPENAPI_WITHOUT)
    found = rc.detect(stand_in.url)
    assert found.support is rc.Support.UNSUPPORTED
    assert "without PATCH /v1/runtime_config (vLLM RFC #54816, unreleased)" in found.reason
    assert len(stand_in.seen) == 1  # no GET of the endpoint


def test_a_listed_get_without_patch_is_unsupported():
    doc = {"paths": {"/v1/runtime_config": {"get": {}}}}
    assert rc.advertised(rc.Answer(200, json.dumps(doc).encode())) is False


@pytest.mark.parametrize(("status", "payload", "said"), [
    (404, {"detail": "Not Found"}, "answered 404"),
    (200, {"max_num_seqs": 256}, "not a JSON object with an integer max_num_running_seqs"),
    (200, {"max_num_running_seqs": "32"}, "not a JSON object"),
    (200, {"max_num_running_seqs": 0}, "not a JSON object"),
    (200, b"<html>", "answered 200 with <html>"),
])
def test_without_a_schema_the_get_decides(stand_in: StandIn, status, payload, said):
    stand_in.answers[("GET", "/v1/runtime_config")] = (status, payload)
    found = rc.detect(stand_in.url)  # /openapi.json: 404 (--disable-fastapi-docs)
    assert found.support is rc.Support.UNSUPPORTED and said in found.reason, found.reason
    stand_in.answers[("GET", "/v1/runtime_config")] = (200, {"max_num_running_seqs": 8})
    found = rc.detect(stand_in.url)
    assert found.support is rc.Support.SUPPORTED and "no OpenAPI schema served" in found.reason


def test_no_answer_is_unknown_not_unsupported():
    found = rc.detect("http://127.0.0.1:9", timeout_seconds=1.0)  # nothing listens
    assert found.support is rc.Support.UNKNOWN and "got no answer" in found.reason


# --- the PATCH ------------------------------------------------------------------------


def test_the_patch_request_is_exactly_the_rfcs(stand_in: StandIn):
    serving_the_rfc(stand_in)
    stand_in.answers[("PATCH", "/v1/runtime_config")] = (200, {"max_num_running_seqs": 12})
    out = rc.set_cap(stand_in.url, 12, capacity=256)
    assert out.applied and out.in_force == 12 and not out.retry
    (seen,) = stand_in.seen
    assert (seen.method, seen.path) == ("PATCH", "/v1/runtime_config")
    assert seen.body == b'{"max_num_running_seqs":12}'
    assert json.loads(seen.body) == {"max_num_running_seqs": 12}
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.headers["Accept"] == "application/json"


@pytest.mark.parametrize(("status", "payload", "expect", "said"), [
    (200, {"max_num_running_seqs": 16}, dict(applied=False, in_force=16),
     "the cap in force is 16"),
    (200, {}, dict(applied=False, in_force=None), "the cap in force is unknown"),
    (404, {"detail": "Not Found"}, dict(applied=False, unsupported=True),
     "no longer serves the endpoint"),
    (405, {"detail": "Method Not Allowed"}, dict(applied=False, unsupported=True),
     "answered 405"),
    (422, {"detail": [{"loc": ["body", "max_num_running_seqs"],
                       "msg": "must be <= max_num_seqs (256)"}]},
     dict(applied=False, retry=False, unsupported=False),
     "was refused (422: {\"detail\": [{\"loc\": [\"body\", \"max_num_running_seqs\"]"),
    (503, {"detail": "engine dead"}, dict(applied=False, retry=True), "answered 503"),
])
def test_each_answer_is_read(stand_in: StandIn, status, payload, expect, said):
    stand_in.answers[("PATCH", "/v1/runtime_config")] = (status, payload)
    out = rc.set_cap(stand_in.url, 12)
    for key, value in expect.items():
        assert getattr(out, key) == value, (key, out)
    assert said in out.message and "max_num_running_seqs=12" in out.message, out.message


def test_a_timeout_is_retried_and_the_cap_in_force_unknown(stand_in: StandIn):
    stand_in.answers[("PATCH", "/v1/runtime_config")] = (200, {"max_num_running_seqs": 12})
    stand_in.delay_s = 2.0
    out = rc.set_cap(stand_in.url, 12, timeout_seconds=0.3)
    assert not out.applied and out.retry and out.in_force is None
    assert "got no answer" in out.message and "try again" in out.message


@pytest.mark.parametrize(("cap", "capacity", "said"), [
    (0, None, "max_num_running_seqs must be an integer of at least 1, got 0"),
    (True, None, "got True"),
    ("8", None, "got '8'"),
    (300, 256, "max_num_running_seqs 300 is above the server's --max-num-seqs 256"),
])
def test_a_bad_cap_is_refused_before_sending_naming_the_field_and_the_fix(cap, capacity, said):
    with pytest.raises(ValueError) as exc:
        rc.patch_request(cap, capacity)
    assert said in str(exc.value)
    assert "status.adaptation.maxNumSeqs" in str(exc.value) or "lower the cap" in str(exc.value)

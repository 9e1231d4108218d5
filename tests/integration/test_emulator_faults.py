"""The fault kinds the EMULATED API server injects (``POST /emulator/faults``; see the
module docstring of llm_operator_sandbox.emulator): delays, random rates, subresource
faults, slow and closed watches. The operator's behaviour under them is in
tests/integration/test_faults.py."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from llm_operator_sandbox.emulator import EmulatorThread

CMS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
def server() -> Iterator[EmulatorThread]:
    with EmulatorThread() as api:
        yield api


def http(server: EmulatorThread, method: str, path: str, body: Any = None,
         timeout: float = 10, content_type: str = "application/json",
         ) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method,
                                 headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"k": name}}


def fault(server: EmulatorThread, **spec: Any) -> None:
    assert http(server, "POST", "/emulator/faults", spec)[0] == 200


def test_a_delay_makes_a_short_client_timeout_fire_and_the_request_still_happens(
        server: EmulatorThread) -> None:
    fault(server, method="POST", plural="configmaps", delay=1.5)
    t0 = time.monotonic()
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        http(server, "POST", CMS, cm("slow"), timeout=0.5)
    assert time.monotonic() - t0 < 1.4  # the client gave up first
    time.sleep(1.5)
    # As on a real server, the request the client gave up on was still carried out.
    assert http(server, "GET", CMS + "/slow")[0] == 200
    fault(server, method="GET", plural="configmaps", delay=0.3, code=504)
    t0 = time.monotonic()
    assert http(server, "GET", CMS + "/slow")[0] == 504
    assert time.monotonic() - t0 >= 0.3


def test_a_random_rate_over_verbs_and_plurals_is_reproducible_and_counted(
        server: EmulatorThread) -> None:
    def run() -> list[int]:
        http(server, "DELETE", "/emulator/faults")
        fault(server, method=["POST", "GET"], plural=["configmaps", "secrets"], code=500,
              rate=0.3, seed=7)
        codes = [http(server, "POST", CMS, cm(f"c{run.n}-{i}"))[0] for i in range(60)]
        run.n += 1
        return codes
    run.n = 0  # type: ignore[attr-defined]
    first, second = run(), run()
    assert [c == 500 for c in first] == [c == 500 for c in second]  # the seed decides
    failed = first.count(500)
    assert 8 <= failed <= 30 and first.count(201) == 60 - failed
    listing = http(server, "GET", "/emulator/faults")[1]
    assert listing["faults"][0]["times"] is None  # unlimited with a rate
    assert listing["injected"] == 2 * failed
    # Other resources and verbs are untouched.
    assert http(server, "DELETE", CMS + "/c0-0")[0] in (200, 404)


def test_a_status_subresource_fault_leaves_the_object_itself_alone(
        server: EmulatorThread) -> None:
    http(server, "POST", "/apis/apps/v1/namespaces/default/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    path = "/apis/apps/v1/namespaces/default/deployments/d"
    fault(server, method="PATCH", plural="deployments", subresource="status", code=500)
    merge = "application/merge-patch+json"
    assert http(server, "PATCH", path, {"metadata": {"labels": {"x": "y"}}},
                content_type=merge)[0] == 200
    assert http(server, "PATCH", path + "/status", {"status": {"replicas": 1}},
                content_type=merge)[0] == 500
    assert http(server, "PATCH", path + "/status", {"status": {"replicas": 1}},
                content_type=merge)[0] == 200


def watch_lines(server: EmulatorThread, out: list[tuple[float, str]],
                done: threading.Event) -> None:
    with urllib.request.urlopen(server.url + CMS + "?watch=true&resourceVersion=1",
                                timeout=20) as resp:
        for raw in resp:
            event = json.loads(raw)
            out.append((time.monotonic(), event["object"]["metadata"]["name"]))
    done.set()


def test_a_slow_watch_delivers_late_and_a_closed_watch_ends_mid_stream(
        server: EmulatorThread) -> None:
    events: list[tuple[float, str]] = []
    done = threading.Event()
    threading.Thread(target=watch_lines, args=(server, events, done), daemon=True).start()
    time.sleep(0.3)
    fault(server, method="WATCH", plural="configmaps", delay=1.0, times=1)
    t0 = time.monotonic()
    http(server, "POST", CMS, cm("late"))
    deadline = time.monotonic() + 5
    while not events and time.monotonic() < deadline:
        time.sleep(0.05)
    assert events and events[0][1] == "late" and events[0][0] - t0 >= 0.9
    fault(server, method="WATCH", plural="configmaps", close=True, times=1)
    http(server, "POST", CMS, cm("lost-here"))
    assert done.wait(5), "the watch was not closed"
    assert [name for _, name in events] == ["late"]  # the stream ended before the event
    # A client resuming from the last resourceVersion it saw gets the event it missed.
    status, body = http(server, "GET", CMS)
    assert "lost-here" in [o["metadata"]["name"] for o in body["items"]]


def test_a_child_created_for_an_owner_already_gone_is_collected(server: EmulatorThread) -> None:
    assert http(server, "POST", CMS, cm("owner"))[0] == 201
    owner = http(server, "GET", CMS + "/owner")[1]
    assert http(server, "DELETE", CMS + "/owner")[0] == 200
    late = cm("late-child")
    late["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap",
                                            "name": "owner", "uid": owner["metadata"]["uid"]}]
    assert http(server, "POST", CMS, late)[0] == 201  # accepted, as a real server does
    deadline = time.monotonic() + 5
    while http(server, "GET", CMS + "/late-child")[0] == 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert http(server, "GET", CMS + "/late-child")[0] == 404

"""Closed-loop clients in their own process: ``n`` threads sending completions back to back
until stopped, counting what came back.

The clients run in a child process, not as threads of the test, so that the test's own
reads and sleeps do not wait for the interpreter lock behind 48 client threads. (What
made the live-cap test miss its 10 s bound on 2026-11-29 was the CPU: see
``niced_python`` in tests/support/engine.py; with the clients moved out alone, reads
still took up to 15 s.) The child is stopped with SIGTERM; it lets the requests in
flight finish and prints its counts as one JSON line.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.request
from typing import Any


class ClosedLoopClients:
    """``with ClosedLoopClients(url, model, n, max_tokens) as c: ...``; after the block,
    ``c.ok`` (complete answers) and ``c.failed`` (what went wrong, one string each)."""

    def __init__(self, url: str, model: str, n: int, max_tokens: int) -> None:
        self.args = [url, model, str(n), str(max_tokens)]
        self.ok = 0
        self.failed: list[str] = []
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ClosedLoopClients:
        self._proc = subprocess.Popen([sys.executable, __file__, *self.args],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        assert proc is not None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=330)
        if proc.returncode != 0 or not out.strip():
            self.failed.append(f"the clients' process exited {proc.returncode}: {err[-2000:]}")
            return
        counts = json.loads(out.strip().splitlines()[-1])
        self.ok, self.failed = counts["ok"], counts["failed"]


def _run(url: str, model: str, n: int, max_tokens: int) -> dict[str, Any]:
    stop = threading.Event()
    lock = threading.Lock()
    counts: dict[str, Any] = {"ok": 0, "failed": []}
    body = json.dumps({"model": model, "prompt": "hello world " * 8, "max_tokens": max_tokens,
                       "ignore_eos": True, "temperature": 0}).encode()

    def client() -> None:
        while not stop.is_set():
            req = urllib.request.Request(f"{url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    out = json.loads(r.read())
                ok = out["usage"]["completion_tokens"] == max_tokens
                err = "" if ok else f"short completion: {out['usage']}"
            except Exception as e:  # any failure is a finding, not a crash
                ok, err = False, repr(e)
            with lock:
                if ok:
                    counts["ok"] += 1
                else:
                    counts["failed"].append(err)

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [threading.Thread(target=client, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    while not stop.wait(0.5):
        pass
    for t in threads:
        t.join(timeout=300)
    return counts


if __name__ == "__main__":
    url, model, n, max_tokens = sys.argv[1:5]
    print(json.dumps(_run(url, model, int(n), int(max_tokens))))  # noqa: T201 - the result

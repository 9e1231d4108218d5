"""Streamed completions against a real vLLM server, seen from the client side: the tokens
each request has received so far (a request with tokens is running on the engine, which
the engine's /metrics can report late under load) and how each one ended."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Streams:
    """``n`` streamed requests in flight: ``tokens[i]`` chunks with text so far,
    ``usage[i]`` at the end (the server's usage record, or the error that cut the stream,
    as a string). A chunk carries one token or, when the API server falls behind the
    engine, several (995 chunks for 1,000 tokens on 2 shared cores, 2026-12-06): count a
    request's tokens with :meth:`completion_tokens`."""

    threads: list[threading.Thread] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    usage: list[dict[str, Any] | str | None] = field(default_factory=list)

    def completion_tokens(self) -> list[int | None]:
        """Each request's ``completion_tokens`` from its usage record (None: no record)."""
        return [u.get("completion_tokens") if isinstance(u, dict) else None
                for u in self.usage]

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))


def stream_completions(url: str, model: str, n: int, *, prompt: str, max_tokens: int,
                       timeout_s: float) -> Streams:
    """Start ``n`` threads, each streaming one ``/v1/completions`` request of
    ``max_tokens`` tokens (``ignore_eos``, usage reported in the last chunk)."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    out = Streams(tokens=[0] * n, usage=[None] * n)

    def one(i: int) -> None:
        req = urllib.request.Request(f"{url}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                for line in r:
                    if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    if chunk.get("usage"):
                        out.usage[i] = chunk["usage"]
                    if chunk.get("choices"):
                        out.tokens[i] += 1
        except Exception as e:  # noqa: BLE001 - a cut stream is a finding for the caller
            out.usage[i] = repr(e)

    out.threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in out.threads:
        t.start()
    return out

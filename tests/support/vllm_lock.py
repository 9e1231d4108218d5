"""The machine-wide lock every tier's vLLM server takes: one at a time on 2 shared cores
(the tuner's in-pod server takes the same one: ``LLMOP_VLLM_LOCK``)."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

LOCK = "/tmp/llmop-vllm.lock"


@contextmanager
def vllm_lock(wait_s: float, path: str = LOCK) -> Iterator[None]:
    """Hold the lock for the block, waiting up to ``wait_s`` for another server first."""
    deadline = time.monotonic() + wait_s
    with open(path, "a") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another vLLM server held {path} for over {wait_s:.0f} s")
                time.sleep(2)
        yield

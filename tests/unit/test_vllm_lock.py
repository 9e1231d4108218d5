"""The machine-wide vLLM lock: one holder at a time, and the ledger tools/test.sh reads
(who held it, how long) when ``LLMOP_VLLM_LOCK_LEDGER`` is set."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from llm_operator.inpod.tuner.server import vllm_lock

pytestmark = pytest.mark.unit


def test_a_second_holder_waits_and_each_hold_is_in_the_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "ledger.tsv"
    monkeypatch.setenv("LLMOP_VLLM_LOCK_LEDGER", str(ledger))
    lock = str(tmp_path / "vllm.lock")
    held = threading.Event()

    def first() -> None:
        with vllm_lock(lock):
            held.set()
            time.sleep(1.5)

    t = threading.Thread(target=first)
    t.start()
    held.wait(5)
    started = time.monotonic()
    with vllm_lock(lock):  # polls every second until the first lets go
        waited = time.monotonic() - started
    t.join()
    assert waited >= 1.0, waited
    rows = [line.split("\t") for line in ledger.read_text().splitlines()]
    assert len(rows) == 2, rows
    (holder, w1, h1), (_, w2, h2) = rows
    assert holder == os.environ["PYTEST_CURRENT_TEST"]  # which test held it
    assert float(w1) < 0.5 and float(h1) >= 1.4, rows[0]  # the first: no wait, 1.5 s held
    assert float(w2) >= 1.0 and float(h2) < 0.5, rows[1]  # the second waited for it


def test_no_ledger_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMOP_VLLM_LOCK_LEDGER", raising=False)
    with vllm_lock(str(tmp_path / "vllm.lock")):
        pass
    assert list(tmp_path.iterdir()) == [tmp_path / "vllm.lock"]

"""The admission cap file as the engine reads it (:mod:`llm_operator.inpod.engine.cap`).

Standard library only, so these run without vLLM; the same behaviour on the real engine
is tested in ``tests/vllm/test_live_cap.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from llm_operator.inpod.engine.cap import CapReader, parse_cap


@pytest.mark.parametrize(("text", "cap", "said"), [
    ("8\n", 8, None),
    (" 48 ", 48, None),
    ("0", 1, "cap 0 is below 1: clamped to 1"),
    ("-3", 1, "cap -3 is below 1: clamped to 1"),
    ("49", 48, "cap 49 is above the runner capacity 48 (--max-num-seqs): clamped to 48"),
])
def test_parse_cap_clamps_into_one_to_capacity(text: str, cap: int, said: str | None) -> None:
    assert parse_cap(text, 48) == (cap, said)


@pytest.mark.parametrize("text", ["", "eight", "8.5", "8 9", "1e3"])
def test_parse_cap_rejects_what_is_not_one_integer(text: str) -> None:
    with pytest.raises(ValueError, match="not an integer"):
        parse_cap(text, 48)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_reader_reads_at_most_once_per_interval(tmp_path: Path) -> None:
    f = tmp_path / "cap"
    f.write_text("8")
    clock = Clock()
    r = CapReader(str(f), capacity=48, cap=48, clock=clock)
    assert r.poll() == 8
    f.write_text("16")
    clock.t = 0.5
    assert r.poll() == 8 and r.reads == 1  # not re-read within the second
    clock.t = 1.0
    assert r.poll() == 16 and r.reads == 2


def test_reader_keeps_the_last_good_cap_and_reports_each_problem_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    f = tmp_path / "cap"
    f.write_text("12")
    r = CapReader(str(f), capacity=48, cap=48)
    caplog.set_level(logging.INFO)
    assert r.read() == 12 and r.problem is None
    f.write_text("twelve")
    assert r.read() == 12 and r.read() == 12
    assert r.problem == f"admission cap file {f} holds not an integer: 'twelve': keeping the cap 12"
    assert [m for m in caplog.messages if "twelve" in m] == [r.problem]  # said once
    f.unlink()
    assert r.read() == 12 and r.problem is not None and "cannot read" in r.problem
    f.write_text("100")
    assert r.read() == 48 and r.problem is None
    assert any("readable again" in m for m in caplog.messages)
    assert any("clamped to 48" in m for m in caplog.messages)


def test_reader_without_a_file_keeps_the_engines_own_cap() -> None:
    r = CapReader(None, capacity=48, cap=48)
    assert r.poll() == 48 and r.reads == 0

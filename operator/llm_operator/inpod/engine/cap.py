"""The admission cap channel, engine side: read a cap from a file, clamp it, remember it.

Standard library only, so it is tested without vLLM. The file holds one integer, the
number of requests the scheduler may admit into RUNNING (``max_num_active_reqs``); the
operator writes it (a ConfigMap key mounted as a file). :class:`CapReader` re-reads the
file at most once per ``interval_s``, and:

- a cap outside ``[1, capacity]`` (``capacity`` = ``--max-num-seqs``, the runner slots) is
  clamped into it, and the log says so;
- a missing, unreadable or non-integer file leaves the last good cap in force, and the log
  says so once per distinct problem (never an exception into the engine).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

CAP_FILE_ENV = "LLMOP_ADMISSION_CAP_FILE"  # where the engine reads the cap
READ_INTERVAL_S = 1.0  # at most one read per second
# The gauges the scheduler reports (see .scheduler).
METRIC_CAP = "llmop_admission_cap"
METRIC_CAPACITY = "llmop_admission_capacity"
METRIC_FILE_OK = "llmop_admission_cap_file_ok"
METRIC_LIVE = "llmop_admission_live"
# The vLLM release the engine runs (vllm.__version__), as an info gauge: 1, labelled
# VERSION_LABEL. The operator reads it where the image's tag names no release (a digest,
# ``latest``) and checks it against the tag where one does.
METRIC_VLLM_INFO = "llmop_engine_vllm_info"
VERSION_LABEL = "vllm_version"
# A failure of the admission scheduler itself (its code missing from the pod, vLLM's
# scheduler classes not importable, its start raising on another vLLM) is said on one
# line starting with FAILURE_PREFIX in the container's termination message, the file
# named by TERMINATION_LOG_ENV (the container's terminationMessagePath): the kubelet
# copies it into the pod's status, where the operator reads it and turns the live cap
# off for the service (its status.adaptation.liveCapFallback, reason SchedulerFailed).
FAILURE_PREFIX = "llmop-live-cap:"
TERMINATION_LOG_ENV = "LLMOP_TERMINATION_LOG"
TERMINATION_LIMIT = 4096  # bytes the kubelet keeps of a termination message


def say_failure(what: str) -> None:
    """Write ``FAILURE_PREFIX what`` to the termination message (and the log). Never
    raises: the caller re-raises the failure itself."""
    line = f"{FAILURE_PREFIX} {what}"
    logging.getLogger("vllm.llmop.admission").error(line)
    path = os.environ.get(TERMINATION_LOG_ENV)
    if not path:
        return
    try:
        with open(path, "wb") as f:
            f.write(line.encode()[:TERMINATION_LIMIT])
    except OSError:
        pass


def parse_cap(text: str, capacity: int) -> tuple[int, str | None]:
    """The cap in ``text`` clamped into ``[1, capacity]``, and a message when clamped.

    Raises ``ValueError`` (naming what was read) when ``text`` is not one integer.
    """
    stripped = text.strip()
    try:
        value = int(stripped)
    except ValueError:
        raise ValueError(f"not an integer: {stripped[:40]!r}") from None
    if value < 1:
        return 1, f"cap {value} is below 1: clamped to 1"
    if value > capacity:
        return capacity, (
            f"cap {value} is above the runner capacity {capacity} (--max-num-seqs): "
            f"clamped to {capacity}"
        )
    return value, None


@dataclass
class CapReader:
    """Reads the cap file at most once per ``interval_s``; keeps the last good cap."""

    path: str | None
    capacity: int
    cap: int  # the cap in force (starts at the engine's own, e.g. --max-num-seqs)
    interval_s: float = READ_INTERVAL_S
    log: logging.Logger = field(default_factory=lambda: logging.getLogger(__name__))
    clock: Callable[[], float] = time.monotonic
    problem: str | None = field(default=None, init=False)  # the last bad read, if any
    reads: int = field(default=0, init=False)
    _last_read: float | None = field(default=None, init=False)
    _last_text: str | None = field(default=None, init=False)

    def poll(self) -> int:
        """The cap in force, re-reading the file when ``interval_s`` has passed."""
        now = self.clock()
        if self._last_read is not None and now - self._last_read < self.interval_s:
            return self.cap
        self._last_read = now
        self.read()
        return self.cap

    def read(self) -> int:
        """Read the file now; on any problem keep the cap and record the problem."""
        if not self.path:
            return self.cap
        self.reads += 1
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read(256)
        except OSError as e:
            self._report(f"cannot read the admission cap file {self.path} "
                         f"({e.strerror or e}): keeping the cap {self.cap}")
            return self.cap
        if text == self._last_text and self.problem is None:
            return self.cap
        self._last_text = text
        try:
            cap, clamped = parse_cap(text, self.capacity)
        except ValueError as e:
            self._report(f"admission cap file {self.path} holds {e}: keeping the cap {self.cap}")
            return self.cap
        if self.problem is not None:
            self.log.info("Admission cap file %s is readable again", self.path)
            self.problem = None
        if clamped:
            self.log.warning("Admission cap file %s: %s", self.path, clamped)
        if cap != self.cap:
            self.log.info("Admission cap %d -> %d (runner capacity %d)", self.cap, cap,
                          self.capacity)
            self.cap = cap
        return self.cap

    def _report(self, message: str) -> None:
        if message != self.problem:
            self.log.warning("%s", message)
        self.problem = message
        self._last_text = None

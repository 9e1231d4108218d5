"""A vLLM scheduler whose admission cap follows a file, live (``--scheduler-cls``).

vLLM (0.32) separates the model runner's request slots (``--max-num-seqs``, fixed at
start) from admission into RUNNING (``max_num_active_reqs``, read at every scheduling
step). :class:`AdmissionCapScheduler` subclasses vLLM's ``AsyncScheduler`` (so async
scheduling stays on) and sets ``max_num_active_reqs`` from the file named by
``$LLMOP_ADMISSION_CAP_FILE``, re-read at most once a second by a daemon thread of the
engine-core process (also while the engine is idle, so the reported cap is current).
Lowering the cap admits nothing new until the running batch has drained below it; no
request is aborted or preempted by a change.

The cap in force is reported as Prometheus gauges (``llmop_admission_cap``,
``llmop_admission_capacity``, ``llmop_admission_cap_file_ok``, ``llmop_admission_live``,
and ``llmop_engine_vllm_info{vllm_version="..."} 1``) set in the engine-core process.
They appear on the API server's ``/metrics`` when ``PROMETHEUS_MULTIPROC_DIR`` names a
directory shared by the processes (vLLM then serves every process's metrics through
prometheus_client's multiprocess collector); the operator renders that. Without it, only the
log says what the cap is.

Where the running vLLM lacks ``max_num_active_reqs`` (older releases), the class still
schedules as vLLM's own does, logs that the cap cannot be steered live and reports
``llmop_admission_live 0``: the operator then changes ``--max-num-seqs`` by a rollout.
Where the class cannot exist or start at all (vLLM's scheduler classes do not import,
or its start raises on another vLLM), it writes one ``llmop-live-cap:`` line to the
container's termination message (:func:`.cap.say_failure`) and re-raises: the pod
crash-loops with that line in its status, and the operator turns the live cap off for
the service and re-renders it with vLLM's own scheduler.

Imports: vLLM, ``prometheus_client`` and the standard library only (copied into the
stock vLLM image by the server pod's init container).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from .cap import (
    CAP_FILE_ENV,
    METRIC_CAP,
    METRIC_CAPACITY,
    METRIC_FILE_OK,
    METRIC_LIVE,
    METRIC_VLLM_INFO,
    READ_INTERVAL_S,
    VERSION_LABEL,
    CapReader,
    say_failure,
)

try:  # keeps async scheduling (subclassing Scheduler instead turns it off)
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler as _Base
except ImportError:  # pragma: no cover - an older vLLM
    try:
        from vllm.v1.core.sched.scheduler import Scheduler as _Base
    except ImportError as e:  # another vLLM: say so where the operator reads it
        say_failure(f"vLLM's scheduler classes do not import here ({e!r}): start vLLM "
                    "without --scheduler-cls (the operator does so on reading this)")
        raise

log = logging.getLogger("vllm.llmop.admission")


_gauges: dict[str, Any] = {}


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
    """One process-wide gauge (``mostrecent``: one value across processes, no pid label)."""
    if name not in _gauges:
        try:
            from prometheus_client import Gauge

            _gauges[name] = Gauge(name, doc, labels, multiprocess_mode="mostrecent")
        except Exception as e:  # never let reporting break the engine
            log.warning("Cannot create the metric %s: %s", name, e)
            _gauges[name] = None
    return _gauges[name]


def _set(name: str, doc: str, value: float) -> None:
    gauge = _gauge(name, doc)
    if gauge is not None:
        try:
            gauge.set(value)
        except Exception as e:  # pragma: no cover - e.g. an unwritable multiprocess dir
            log.warning("Cannot set the metric %s: %s", name, e)


def _report_version() -> None:
    """``llmop_engine_vllm_info{vllm_version=...} 1``: the release this engine runs.
    Never raises."""
    gauge = _gauge(METRIC_VLLM_INFO, "The vLLM release the engine runs (vllm.__version__)",
                   (VERSION_LABEL,))
    if gauge is None:
        return
    try:
        from vllm import __version__

        gauge.labels(str(__version__)).set(1)
    except Exception as e:  # never let reporting break the engine
        log.warning("Cannot report the vLLM version (%s): %s", METRIC_VLLM_INFO, e)


class AdmissionCapScheduler(_Base):
    """vLLM's async scheduler with ``max_num_active_reqs`` read from a file, live."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _report_version()
        try:
            super().__init__(*args, **kwargs)
            capacity = int(self.max_num_running_reqs)
        except Exception as e:  # another vLLM's interface: say so where the operator reads
            say_failure(f"AdmissionCapScheduler cannot start on this vLLM ({e!r}): start "
                        "vLLM without --scheduler-cls (the operator does so on reading this)")
            raise
        self._llmop_live = hasattr(self, "max_num_active_reqs")
        path = os.environ.get(CAP_FILE_ENV) or None
        _set(METRIC_CAPACITY, "Runner request slots (--max-num-seqs)", capacity)
        _set(METRIC_LIVE, "1 when the admission cap can be changed live", int(self._llmop_live))
        if not self._llmop_live:
            log.warning("This vLLM has no max_num_active_reqs: the admission cap cannot be "
                        "changed live; scheduling as vLLM's own scheduler does")
            return
        start = int(getattr(self, "max_num_active_reqs", capacity))
        self._llmop_reader = CapReader(path, capacity, start, log=log)
        self._llmop_tick()
        log.info("Admission cap %d of %d runner slots, read from %s every %.0f s",
                 self._llmop_reader.cap, capacity, path or f"(no file: ${CAP_FILE_ENV} unset)",
                 READ_INTERVAL_S)
        if path:
            threading.Thread(target=self._llmop_loop, name="llmop-admission-cap",
                             daemon=True).start()

    def _llmop_tick(self) -> None:
        """Read the file once, apply the cap, report it. Never raises."""
        try:
            reader = self._llmop_reader
            cap = reader.read()
            # One attribute store: the scheduler reads it at its next admission check.
            self.max_num_active_reqs = cap
            _set(METRIC_CAP, "Admission cap in force (max_num_active_reqs)", cap)
            _set(METRIC_FILE_OK, "1 when the last read of the cap file succeeded",
                 0 if reader.problem else 1)
        except Exception as e:  # pragma: no cover - belt and braces: keep serving
            log.warning("Admission cap update failed: %s", e)

    def _llmop_loop(self) -> None:
        while True:
            time.sleep(READ_INTERVAL_S)
            self._llmop_tick()

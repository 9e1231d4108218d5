"""Start and stop one vLLM OpenAI server with candidate settings, and read its /metrics.

Runs under the vLLM image's Python (standard library only, plus ``prometheus_client``
which every vLLM install has). The server is ``python -m
vllm.entrypoints.openai.api_server`` in a child process; its log goes to a file so
a failed start can be explained with the log's tail.

Only one vLLM server may run at a time on a shared machine: a server holds an exclusive
``fcntl`` lock on ``LLMOP_VLLM_LOCK`` (default ``/tmp/llmop-vllm.lock``) for its lifetime.
In a tuning Job the pod is alone and the lock is free.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

DEFAULT_LOCK = "/tmp/llmop-vllm.lock"


class ServerStartError(RuntimeError):
    """The vLLM server did not become healthy; ``log_tail`` says why."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        super().__init__(message + (f"\n--- server log (tail) ---\n{log_tail}" if log_tail else ""))


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def vllm_lock(path: str | None = None, timeout_s: float = 3600.0) -> Iterator[None]:
    """Hold the machine-wide exclusive lock that serialises vLLM servers.

    ``path`` defaults to ``$LLMOP_VLLM_LOCK`` or ``/tmp/llmop-vllm.lock``; an empty
    ``LLMOP_VLLM_LOCK`` disables locking. Waits at most ``timeout_s``. With
    ``LLMOP_VLLM_LOCK_LEDGER`` set (tools/test.sh sets it), each hold appends one line to
    that file: the holder (the pytest test, else the command), seconds waited, seconds held.
    """
    lock_path = path if path is not None else os.environ.get("LLMOP_VLLM_LOCK", DEFAULT_LOCK)
    if not lock_path:
        yield
        return
    asked = time.monotonic()
    got: float | None = None
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + timeout_s
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited:
                    log.info("Waiting for the vLLM lock %s (another server runs)", lock_path)
                    waited = True
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"vLLM lock {lock_path} not free after {timeout_s:.0f} s") from None
                time.sleep(1.0)
        got = time.monotonic()
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        if got is not None:
            _ledger(got - asked, time.monotonic() - got)


def _ledger(waited_s: float, held_s: float) -> None:
    """One line for ``$LLMOP_VLLM_LOCK_LEDGER``, if set: who held the lock, how long."""
    ledger = os.environ.get("LLMOP_VLLM_LOCK_LEDGER")
    if not ledger:
        return
    holder = os.environ.get("PYTEST_CURRENT_TEST") or " ".join(sys.argv[:2])
    with contextlib.suppress(OSError), open(ledger, "a", encoding="utf-8") as f:
        f.write(f"{holder.replace(chr(9), ' ')}\t{waited_s:.1f}\t{held_s:.1f}\n")


def server_command(
    python: str, model: str, port: int, flags: Sequence[str], host: str = "127.0.0.1"
) -> list[str]:
    """The command line that starts the vLLM OpenAI server with ``flags``."""
    return [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model, "--host", host, "--port", str(port),
        *flags,
    ]


@dataclass
class VLLMServer:
    """One vLLM server child process (use as a context manager, or start()/stop())."""

    model: str
    flags: list[str] = field(default_factory=list)
    python: str = sys.executable
    port: int = 0
    log_path: Path | None = None
    start_timeout_s: float = 600.0
    lock: bool = True
    env: dict[str, str] = field(default_factory=dict)
    # A container's command to run instead of ``python -m ...api_server`` (the rendered
    # pod's, e.g. a shell script ending in ``exec vllm serve "$@"``, with ``vllm`` on the
    # PATH of ``env``): it gets the pod's form of the arguments, the model first.
    command: list[str] | None = None

    proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    startup_s: float = field(default=0.0, init=False)
    lock_wait_s: float = field(default=0.0, init=False)  # time spent waiting for the lock
    _lock_cm: Any = field(default=None, init=False, repr=False)
    _log_file: IO[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """Base URL of the server (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> VLLMServer:
        """Start the server and wait for ``/health``; raise :class:`ServerStartError`."""
        if self.lock:
            t0 = time.monotonic()
            self._lock_cm = vllm_lock()
            self._lock_cm.__enter__()
            self.lock_wait_s = time.monotonic() - t0
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        if not self.port:
            self.port = free_port()
        if self.log_path is None:
            self.log_path = Path(f"/tmp/llmop-vllm-{self.port}.log")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        cmd = server_command(self.python, self.model, self.port, self.flags)
        log.info("Starting vLLM: %s", " ".join(cmd[3:]))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", **self.env}
        if self.command is not None:
            cmd = [*self.command, self.model, *cmd[5:]]  # vllm serve MODEL --host ... flags
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, stdout=self._log_file, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )
        deadline = t0 + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"vLLM exited with code {self.proc.returncode} while starting "
                    f"(flags: {' '.join(self.flags)})", self.log_tail()
                )
            if _healthy(self.url):
                self.startup_s = time.monotonic() - t0
                log.info("vLLM ready on port %d in %.1f s", self.port, self.startup_s)
                return
            time.sleep(0.5)
        raise ServerStartError(
            f"vLLM not healthy after {self.start_timeout_s:.0f} s", self.log_tail()
        )

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the server log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_bytes()[-64_000:].decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server (SIGINT, then SIGKILL of its process group) and release the lock."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGINT)
                try:
                    self.proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=10)
            # vLLM's engine core is a grandchild in the same session: make sure it is gone.
            if self.proc is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
        finally:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
            if self._lock_cm is not None:
                self._lock_cm.__exit__(None, None, None)
                self._lock_cm = None

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


# --- /metrics ---------------------------------------------------------------------------

def _exposition(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=timeout_s) as r:
        return str(r.read().decode())


def sample_sums(text: str) -> dict[str, float]:
    """Prometheus exposition text as {sample name: value summed over its label sets}
    (pure). Counters keep their ``_total`` name; ``_created`` samples are left out."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.endswith("_created"):
                out[s.name] = out.get(s.name, 0.0) + float(s.value)
    return out


def engine_metrics(url: str, timeout_s: float = 10.0) -> dict[str, float]:
    """A server's /metrics as :func:`sample_sums`."""
    return sample_sums(_exposition(url, timeout_s))


def engine_metric(url: str, name: str, timeout_s: float = 10.0) -> float:
    """One sample from a server's /metrics, summed over its label sets (engines); 0 when
    absent (vLLM exposes a gauge only once it has been set, e.g. at the first step)."""
    return engine_metrics(url, timeout_s).get(name, 0.0)


def read_metrics(url: str, timeout_s: float = 5.0) -> dict[str, float]:
    """The vLLM gauges and counters the tuner uses, summed over engines: :func:`gauges`
    of the server's /metrics."""
    return gauges(_exposition(url, timeout_s))


def gauges(text: str) -> dict[str, float]:
    """From exposition text (pure), keys ``running``, ``waiting``, ``kv_usage`` (0..1),
    ``preemptions`` (counter), ``kv_tokens`` (KV cache capacity in tokens, from
    ``vllm:cache_config_info``; absent when the server does not say)."""
    from prometheus_client.parser import text_string_to_metric_families

    names = {
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:kv_cache_usage_perc": "kv_usage",
        "vllm:num_preemptions_total": "preemptions",
    }
    sums = sample_sums(text)
    out = {key: sums[name] for name, key in names.items() if name in sums}
    for fam in text_string_to_metric_families(text):
        if fam.name == "vllm:cache_config_info":
            for s in fam.samples:
                blocks = s.labels.get("num_gpu_blocks")
                size = s.labels.get("block_size")
                if blocks and size and blocks != "None" and size != "None":
                    out["kv_tokens"] = float(int(blocks) * int(size))
                    break
    return out


# Counters and histograms of a run's window (vLLM 0.32 names; summed over engines).
FINISHED = "vllm:request_success_total"
PREEMPTIONS = "vllm:num_preemptions_total"
RUNNING_TIME = "vllm:request_inference_time_seconds_sum"  # time each request spent RUNNING
QUEUE_TIME = "vllm:request_queue_time_seconds_sum"  # time each request spent WAITING
ITL_HISTOGRAM = "vllm:inter_token_latency_seconds"


def histogram_buckets(text: str, name: str) -> dict[float, float]:
    """Cumulative bucket counts of histogram ``name`` by upper bound, summed over the
    other labels (engines), from exposition text (pure)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[float, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == f"{name}_bucket" and "le" in s.labels:
                le = float(s.labels["le"])
                out[le] = out.get(le, 0.0) + float(s.value)
    return out


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The ``q`` quantile of cumulative ``buckets`` the way Prometheus interpolates it
    (linearly within the bucket; the last finite bound when it falls in ``+Inf``);
    None when the histogram holds no observation (pure)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    prev_bound, prev_count = 0.0, 0.0
    for b in bounds:
        count = buckets[b]
        if count >= rank:
            if b == float("inf"):
                return prev_bound
            if count == prev_count:
                return b
            return prev_bound + (b - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = b, count
    return prev_bound


def window_stats(before: str, after: str, window_s: float) -> dict[str, float]:
    """What the engine itself counted between two reads of its /metrics (pure): requests
    finished, preemptions, the mean running and waiting requests over the window (Little's
    law: the time requests spent RUNNING, or WAITING, divided by the window) and the p95
    of the inter-token latency histogram (seconds; absent when it holds nothing new).

    Counters and histograms count every step, so unlike point samples of the gauges
    they miss nothing under load."""
    a, b = sample_sums(before), sample_sums(after)

    def delta(name: str) -> float:
        return max(0.0, b.get(name, 0.0) - a.get(name, 0.0))

    out = {"finished": delta(FINISHED), "preemptions": delta(PREEMPTIONS)}
    if window_s > 0:
        out["running_mean"] = delta(RUNNING_TIME) / window_s
        out["waiting_mean"] = delta(QUEUE_TIME) / window_s
    hb, ha = histogram_buckets(after, ITL_HISTOGRAM), histogram_buckets(before, ITL_HISTOGRAM)
    diff = {le: max(0.0, n - ha.get(le, 0.0)) for le, n in hb.items()}
    p95 = histogram_quantile(0.95, diff)
    if p95 is not None:
        out["itl_p95_s"] = p95
    return out


class EngineReportedNothing(RuntimeError):
    """A run whose window the engine's own counters do not show (no request finished, or
    /metrics unreadable at its start or end): an error, never a zero."""


class MetricsSampler:
    """A run's window on the engine: /metrics read at its start and its end (the counters
    and histograms of :func:`window_stats`), and sampled in a thread between them for the
    peaks only gauges show (running batch, KV usage); a sample that misses under load
    only loses a peak, never a count."""

    def __init__(self, url: str, interval_s: float = 0.5) -> None:
        self.url = url
        self.interval_s = interval_s
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._texts: list[str | None] = [None, None]
        self._times = [0.0, 0.0]

    def _read_window_end(self, i: int) -> None:
        try:
            self._texts[i] = _exposition(self.url, 10.0)
        except Exception as exc:  # noqa: BLE001 - judged in window()
            log.warning("Could not read %s/metrics at the run's %s: %s", self.url,
                        ("start", "end")[i], exc)
        self._times[i] = time.monotonic()

    def __enter__(self) -> MetricsSampler:
        self._read_window_end(0)
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):
                self.samples.append(read_metrics(self.url))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._read_window_end(1)
        if self._texts[1] is not None:  # the end's read is also the last sample
            self.samples.append(gauges(self._texts[1]))

    def window(self, busy_s: float | None = None) -> dict[str, float]:
        """:func:`window_stats` of the run; :class:`EngineReportedNothing` when /metrics
        could not be read at either end or no request finished in the window. The means
        are over ``busy_s`` (the benchmark's own duration, first request to last answer)
        when given: the reads also enclose the benchmark's set-up, when nothing runs."""
        before, after = self._texts
        if before is None or after is None:
            raise EngineReportedNothing(
                f"{self.url}/metrics could not be read at the run's "
                f"{'start' if before is None else 'end'}: the run is not measured")
        stats = window_stats(before, after, self._busy(busy_s))
        if stats["finished"] <= 0:
            raise EngineReportedNothing(
                f"the engine at {self.url} counted no finished request "
                f"({FINISHED}) during the run: nothing was measured")
        return stats

    def _busy(self, busy_s: float | None) -> float:
        """The seconds the means are over: ``busy_s`` within the span between the reads."""
        span = self._times[1] - self._times[0]
        return min(busy_s, span) if busy_s else span

    def summary(self, busy_s: float | None = None) -> dict[str, float]:
        """The run's window: counts, means and the ITL p95 from the engine's counters and
        histograms (:meth:`window`), and the peaks of the sampled gauges (``samples``
        says how many samples the peaks rest on)."""
        out = self.window(busy_s)
        running = [s.get("running", 0.0) for s in self.samples]
        # A peak is at least the mean over the whole span between the two reads, whatever
        # the samples missed: an exact time-average of everything the engine ran then.
        # Over the busy part alone it is not when the engine ran a request outside it (an
        # older benchmark's initial test request: 2.03 at a cap of 2 was seen).
        span = self._times[1] - self._times[0]
        floor = out.get("running_mean", 0.0) * self._busy(busy_s) / span if span > 0 else 0.0
        out["running_max"] = max([*running, floor])
        out["samples"] = float(len(self.samples))
        if self.samples:
            out["waiting_max"] = max(s.get("waiting", 0.0) for s in self.samples)
            out["kv_usage_max"] = max(s.get("kv_usage", 0.0) for s in self.samples)
        kv_tokens = gauges(self._texts[1] or "").get("kv_tokens")
        if kv_tokens is not None:
            out["kv_tokens"] = kv_tokens
        return out

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
    ``LLMOP_VLLM_LOCK`` disables locking. Waits at most ``timeout_s``.
    """
    lock_path = path if path is not None else os.environ.get("LLMOP_VLLM_LOCK", DEFAULT_LOCK)
    if not lock_path:
        yield
        return
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
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


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
    """The vLLM gauges and counters the tuner uses, summed over engines.

    Keys: ``running``, ``waiting``, ``kv_usage`` (0..1), ``preemptions`` (counter),
    ``kv_tokens`` (KV cache capacity in tokens, from ``vllm:cache_config_info``; absent
    when the server does not say).
    """
    from prometheus_client.parser import text_string_to_metric_families

    text = _exposition(url, timeout_s)
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


class MetricsSampler:
    """Sample /metrics in a thread while a benchmark runs: peak and mean running batch,
    peak waiting, peak KV usage and the preemptions during the window."""

    def __init__(self, url: str, interval_s: float = 0.5) -> None:
        self.url = url
        self.interval_s = interval_s
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first: dict[str, float] = {}

    def __enter__(self) -> MetricsSampler:
        with contextlib.suppress(Exception):
            self._first = read_metrics(self.url)
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
        with contextlib.suppress(Exception):
            self.samples.append(read_metrics(self.url))

    def summary(self) -> dict[str, float]:
        """Peak/mean of the sampled gauges and the preemption count in the window."""
        if not self.samples:
            return {}
        running = [s.get("running", 0.0) for s in self.samples]
        busy = [r for r in running if r > 0] or [0.0]
        out = {
            "samples": float(len(self.samples)),
            "running_max": max(running),
            "running_mean": sum(busy) / len(busy),
            "waiting_max": max(s.get("waiting", 0.0) for s in self.samples),
            "kv_usage_max": max(s.get("kv_usage", 0.0) for s in self.samples),
            "preemptions": self.samples[-1].get("preemptions", 0.0)
            - self._first.get("preemptions", 0.0),
        }
        if "kv_tokens" in self.samples[-1]:
            out["kv_tokens"] = self.samples[-1]["kv_tokens"]
        return out

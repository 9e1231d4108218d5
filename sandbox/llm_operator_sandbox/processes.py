"""Child processes of local trials (the emulator, the operator, Prometheus)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterable
from typing import Any


def stop(proc: subprocess.Popen[Any] | None, timeout: float = 15.0) -> None:
    """SIGTERM ``proc`` (the operator and the emulator then shut down cleanly) and wait up
    to ``timeout`` seconds; SIGKILL it if it hangs. Nothing to do when it has exited."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def stop_all(stops: Iterable[Callable[[], None]]) -> None:
    """Call every ``stop`` at once, each on its own thread, and wait for all: pods end in
    parallel, each within its own grace period, not one after another."""
    threads = [threading.Thread(target=stop) for stop in stops]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

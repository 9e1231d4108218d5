"""Child processes of local trials (the emulator, the operator, Prometheus)."""

from __future__ import annotations

import subprocess
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

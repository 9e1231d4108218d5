"""The server pod's engine module, set up on this machine as the pod sets it up.

:func:`copy_engine_code` runs the init container's own command (from the rendered pod)
into a folder; :func:`write_cap` replaces the cap file the way the kubelet swaps a
ConfigMap volume's contents (an atomic rename); :func:`live_env` is the vLLM container's
environment for those paths; :func:`multiproc_metrics` reads what /metrics serves from its
files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from llm_operator.inpod.engine.cap import CAP_FILE_ENV
from llm_operator.inpod.tuner.server import sample_sums
from llm_operator.rendering.admission import (
    ENGINE_CODE_PATH,
    ENGINE_SCHEDULER_CLS,
    build_engine_init_container,
)
from llm_operator.rendering.pod import RESTRICTED_CONTAINER_SECURITY_CONTEXT

ROOT = Path(__file__).resolve().parents[2]
LIVE_FLAGS = ["--scheduler-cls", ENGINE_SCHEDULER_CLS]


def copy_engine_code(dst: Path) -> Path:
    """Run the server pod's init-container command (see rendering) into ``dst``."""
    init = build_engine_init_container("operator:test", RESTRICTED_CONTAINER_SECURITY_CONTEXT)
    script = init["command"][2].replace(ENGINE_CODE_PATH, str(dst))
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(ROOT / "operator")})
    assert sorted(p.name for p in (dst / "llm_operator").iterdir()) == ["__init__.py", "inpod"]
    assert sorted(p.name for p in (dst / "llm_operator" / "inpod").iterdir()) == [
        "__init__.py", "engine"]
    return dst


def live_env(code: Path, cap_file: Path, metrics_dir: Path) -> dict[str, str]:
    """The vLLM container's environment in live mode, with this machine's paths.
    ``metrics_dir`` is emptied (a dead server's files there would be served as the new
    one's gauges until it sets them; the rendered pod empties it before vLLM starts)."""
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)
    return {"PYTHONPATH": str(code), CAP_FILE_ENV: str(cap_file),
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}


def multiproc_metrics(metrics_dir: Path) -> dict[str, float]:
    """What the API server's /metrics serves (as :func:`sample_sums`), read from the
    ``PROMETHEUS_MULTIPROC_DIR`` files it serves it from, by prometheus_client's own
    multiprocess collector, without asking the API server."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(metrics_dir))
    return sample_sums(generate_latest(registry).decode())


def niced_python(python: Path, folder: Path, nice: int = 10) -> str:
    """A launcher (written into ``folder``) that runs ``python`` behind everything else on
    the machine, for a server whose test must read and write under load.

    On 2 cores the CPU engine's worker and engine core busy-loop (the worker pinned to a
    core, yielding in a loop while busy). vLLM starts in a session of its own, so with
    the kernel's autogroup scheduling (on here) the whole server competes as one group
    and a nice value inside it changes nothing outside: beside a loaded server a test's
    50 ms sleep overslept by 3.3 s at the 90th percentile (11.6 s at most) and a busy
    loop got 0.43 s of CPU in 5 s. With the server's autogroup at nice 10 the same busy
    loop got 4.8 s and the sleeps overslept by 2 ms at most (2026-11-29). The launcher
    sets that (``/proc/self/autogroup``, where the kernel has it) and plain nice (where
    it has not); the engine still gets every cycle the test and its clients leave."""
    launcher = folder / f"python-nice{nice}"
    launcher.write_text("#!/bin/sh\n"
                        f"[ -w /proc/self/autogroup ] && echo {nice} > /proc/self/autogroup\n"
                        f'exec nice -n {nice} "{python}" "$@"\n')
    launcher.chmod(0o755)
    return str(launcher)


def write_cap(path: Path, text: str) -> None:
    """Replace the file atomically, as the kubelet swaps a ConfigMap volume's contents."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

"""The server pod's engine module, set up on this machine as the pod sets it up.

:func:`copy_engine_code` runs the init container's own command (from the rendered pod)
into a folder; :func:`write_cap` replaces the cap file the way the kubelet swaps a
ConfigMap volume's contents (an atomic rename); :func:`live_env` is the vLLM container's
environment for those paths.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from llm_operator.inpod.engine.cap import CAP_FILE_ENV
from llm_operator.rendering.admission import (
    ENGINE_CODE_PATH,
    ENGINE_SCHEDULER_CLS,
    build_engine_init_container,
)

ROOT = Path(__file__).resolve().parents[2]
LIVE_FLAGS = ["--scheduler-cls", ENGINE_SCHEDULER_CLS]


def copy_engine_code(dst: Path) -> Path:
    """Run the server pod's init-container command (see rendering) into ``dst``."""
    init = build_engine_init_container("operator:test")
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


def write_cap(path: Path, text: str) -> None:
    """Replace the file atomically, as the kubelet swaps a ConfigMap volume's contents."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

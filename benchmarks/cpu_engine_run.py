"""What the CPU-engine benchmarks of one committed config share (chunked_prefill,
prefix_cache, compile_cache): the vLLM interpreter, its environment, the generated model,
the head of the stored record (config, commit, engine, machine, start), and the command
line (:func:`main`)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VLLM_PY = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
ENGINE = "vLLM CPU 0.32.0, generated Llama 13.6 M parameters"


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def vllm_env() -> dict[str, str]:
    """The environment of a child under the vLLM interpreter: the operator's package on
    its path, the Hub offline."""
    return {**os.environ, "PYTHONPATH": str(ROOT / "operator"), "HF_HUB_OFFLINE": "1"}


def start(cfg: dict[str, Any], config: Path, work: Path, **fields: Any
          ) -> tuple[Path, dict[str, Any]]:
    """The config's generated model (made once under ``work``) and the run's record, marked
    partial until the benchmark says otherwise; ``fields`` are its own lists."""
    sys.path.insert(0, str(ROOT))
    from tests.support.tiny_model import ensure_tiny_llama

    work.mkdir(parents=True, exist_ok=True)
    model = ensure_tiny_llama(work / "models", VLLM_PY, **cfg["model"])
    doc: dict[str, Any] = {
        "config": cfg, "configFile": str(config.resolve().relative_to(ROOT)),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True, check=False).stdout.strip(),
        "engine": ENGINE, "cpus": os.cpu_count(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "partial": True,
        **fields}
    return model, doc


def main(argv: list[str] | None, description: str, config: Path, stored: Path,
         section: str | Callable[[dict[str, Any]], str],
         run: Callable[[Path, Path], None], render: Callable[[dict[str, Any]], str]) -> int:
    """``--out PATH``: run the config and store it there; else the section a stored run
    (``--data``, default ``stored``) renders to, printed or (``--write``) put where it
    lives. ``section``: its name, or how to name it from the stored run."""
    from benchmarks.results_md import emit

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--config", type=Path, default=config)
    ap.add_argument("--out", type=Path, default=None, help="run and store here")
    ap.add_argument("--data", type=Path, default=stored, help="the stored run to render")
    ap.add_argument("--write", action="store_true", help="replace the section where it lives")
    args = ap.parse_args(argv)
    if args.out is not None:
        run(args.config, args.out)
        return 0
    doc = json.loads(args.data.read_text())
    name = section if isinstance(section, str) else section(doc)
    return emit(name, render(doc), write=args.write)

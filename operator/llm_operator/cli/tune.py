"""``llm-operator tune``, on this machine: run the in-pod tuner under a Python with vLLM.

The operator's own environment has no vLLM (and must not need it), so the command
re-executes ``python -m llm_operator.inpod.tuner`` under a vLLM interpreter with this
package's parent folder on ``PYTHONPATH``, exactly as the tuning Job does in the vLLM
image. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

PACKAGE_PARENT = Path(__file__).resolve().parents[2]  # the folder that holds llm_operator/


class NoVLLMPython(RuntimeError):
    """No interpreter with vLLM was found (the message says how to give one)."""


def _has_vllm(python: str) -> bool:
    try:
        return subprocess.run(
            [python, "-c", "import vllm"], capture_output=True, timeout=120
        ).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_vllm_python(explicit: str | None = None, cwd: Path | None = None) -> str:
    """The interpreter to run the tuner with: ``explicit`` if given; else
    ``.venv-vllm/bin/python`` of the project checkout or of the working folder; else
    ``python3`` on PATH if it imports vllm. Raises :class:`NoVLLMPython`."""
    if explicit:
        if not Path(explicit).exists() and shutil.which(explicit) is None:
            raise NoVLLMPython(f"--vllm-python {explicit}: no such interpreter")
        return explicit
    for root in (PACKAGE_PARENT.parent, cwd or Path.cwd()):
        cand = root / ".venv-vllm" / "bin" / "python"
        if cand.exists():
            return str(cand)
    py3 = shutil.which("python3")
    if py3 and _has_vllm(py3):
        return py3
    raise NoVLLMPython(
        "no Python with vLLM found: pass --vllm-python PATH (an interpreter that can "
        "`import vllm`), or create .venv-vllm (bash tools/setup.sh --tests)"
    )


def namespace_to_argv(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> list[str]:
    """Turn parsed tuner options back into arguments (only those that differ from the
    parser's defaults), so they can be handed to another interpreter unchanged."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(ns, action.dest, None)
        if value is None or value == action.default:
            continue
        flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") \
            else action.option_strings[0]
        if isinstance(action, argparse._StoreTrueAction):
            argv.append(flag)
        else:
            argv.append(f"{flag}={value}")  # "=": a value may itself start with "--"
    return argv


def tuner_command(python: str, argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run the tuner under ``python``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PACKAGE_PARENT), env.get("PYTHONPATH", "")) if p
    )
    model = _model_arg(argv)
    if model and Path(model).is_dir():  # a local model: never reach for the hub
        env.setdefault("HF_HUB_OFFLINE", "1")
    return [python, "-m", "llm_operator.inpod.tuner", *argv], env


def _model_arg(argv: Sequence[str]) -> str | None:
    for i, a in enumerate(argv):
        if a == "--model" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def run_tuner(python: str, argv: Sequence[str]) -> int:
    """Run the tuner in a child process (its output goes straight to this terminal)."""
    cmd, env = tuner_command(python, argv)
    return subprocess.call(cmd, env=env)


def _cmd_tune(args: argparse.Namespace) -> int:
    import sys

    from ..inpod.tuner.main import build_parser

    try:
        python = find_vllm_python(args.vllm_python)
    except NoVLLMPython as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    args.vllm_python = python
    return run_tuner(python, namespace_to_argv(build_parser(), args))


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``tune`` to the ``llm-operator`` command line (same options as the tuner)."""
    from ..inpod.tuner.main import build_parser

    p = sub.add_parser(
        "tune", parents=[build_parser(add_help=False)],
        help="search vLLM batch settings (servers it starts with --model, or one at --url)",
        description="Run the tuner under a Python with vLLM (--vllm-python, else "
        ".venv-vllm/bin/python, else python3 if it has vllm).",
    )
    p.set_defaults(func=_cmd_tune)

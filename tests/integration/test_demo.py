"""`llm-operator demo --tour` (the quick tour without an engine) runs to the end by itself
and says that its API server is emulated. The whole loop with vLLM (`demo`, `demo --nodes`) is
run by hand (CONTRIBUTING.md); its parts are the nodes tier's (tests/nodes)."""

from __future__ import annotations

import subprocess

from tests.support.emulator import ROOT, operator_command


def test_demo_runs_and_says_it_is_emulated() -> None:
    proc = subprocess.run([*operator_command(), "demo", "--tour", "--project-dir", str(ROOT)],
                          capture_output=True, text=True, timeout=180,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "EMULATED" in out and "not a cluster" in out
    assert "kubectl get llms" in out
    # Every example was planned and, once the demo played the Deployment controller, Ready.
    table = out.split("$ kubectl get llms -n default\n")[-1]
    for name in ("llama-3-1-8b", "llama-3-1-70b", "mistral-7b", "qwen2-5-72b"):
        row = next(line for line in table.splitlines() if line.startswith(name))
        assert "True" in row, row

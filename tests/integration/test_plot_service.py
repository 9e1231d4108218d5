"""``llm-operator plot tuning --service NS/NAME``: status.tuning of a live LLMService read
with the real kubectl (against the emulated API server), drawn to a PNG."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from llm_operator.tuning.control import score_summary, trial_table
from tests.integration.conftest import NAMESPACE
from tests.support.emulator import EXAMPLES_DIR, Kubectl
from tests.support.plots import assert_png_drawn
from tests.support.tuning_results import kv_constrained_result


def plot(kubectl: Kubectl, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llm_operator.cli", "plot", "tuning", *args,
                           "--kubectl", kubectl.binary], env=kubectl.env,
                          capture_output=True, text=True, timeout=120)


def test_plot_tuning_of_a_live_service(kubectl: Kubectl, tmp_path: Path) -> None:
    kubectl.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml", NAMESPACE)
    listed = kubectl.get("llms", namespace=NAMESPACE) or {}
    name = listed["items"][0]["metadata"]["name"]
    out = tmp_path / "t.png"

    # Before any tuning run: no status.tuning, said so.
    proc = plot(kubectl, "--service", f"{NAMESPACE}/{name}", "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    assert f"LLMService {name} has no status.tuning" in " ".join(proc.stderr.split())
    assert not out.exists()

    # The status the operator writes when a tuning Job's result is accepted.
    result = kv_constrained_result("fp-1")
    tuning = {"state": "Succeeded", "table": trial_table(result.table),
              "best": score_summary(result.best), "baseline": score_summary(result.baseline),
              "slo": result.slo, "workload": result.workload}
    kubectl.run("patch", "llms", name, "-n", NAMESPACE, "--subresource", "status", "--type",
                "merge", "-p", json.dumps({"status": {"tuning": tuning}}))
    proc = plot(kubectl, "--service", f"{NAMESPACE}/{name}", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stdout
    assert_png_drawn(out, min_width=1000, min_height=800)

    proc = plot(kubectl, "--service", f"{NAMESPACE}/no-such", "-o", str(out))
    assert proc.returncode == 2 and f"{NAMESPACE}/no-such" in proc.stderr
    assert "Traceback" not in proc.stderr

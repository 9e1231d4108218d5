"""The tuning GPU budget on the REAL control plane: with a budget of 1 GPU, a second
service's tuning Job is not created while the first service's Job holds that GPU; the
second service says so in its Tuned condition (what tuning holds, the budget, the Helm
value that raises it), and its Job is created once the first one is gone.

No tuning pod runs here: other pods take every GPU first (as in test_scheduling.py), so
both tuning pods wait for a node. A Job whose pod waits still holds its GPUs against the
budget: its pod is the one an autoscaler would buy a node for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llm_operator_sandbox.cluster import Installed
from llm_operator_sandbox.kubelet import LocalKubelet
from tests.support.emulator import OperatorProcess, wait_for

from .conftest import ClusterKubectl
from .test_control_plane import condition, tiny_service
from .test_scheduling import filler

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def spare_service(name: str) -> dict[str, Any]:
    svc = tiny_service(name)
    svc["spec"]["tuning"] = {"mode": "OnRollout", "placement": "Spare", "maxTrials": 1,
                             "maxDurationMinutes": 4}
    return svc


def test_a_second_tuning_job_waits_for_the_gpu_budget_and_starts_after(
        admin: ClusterKubectl, namespace: str, installed: Installed, tmp_path: Path,
        kubelet: LocalKubelet) -> None:
    admin.apply_obj(filler(2), namespace)
    wait_for(lambda: len([p for p in admin.items("pods", namespace, "app=filler")
                          if p["spec"].get("nodeName")]) == 2, 60,
             "two filler pods bound, 16 GPUs taken")
    proc = OperatorProcess(installed.kubeconfig, tmp_path / "operator.log", [],
                           env={**installed.env, "LLMOP_METRICS_PORT": "0",
                                "LLMOP_TUNING_GPU_BUDGET": "1"}).start()
    try:
        proc.wait_log("Initial authentication has finished", timeout=60)

        def tuning_jobs(service: str) -> list[dict[str, Any]]:
            return admin.items("jobs", namespace,
                               f"llmops.dev/llmservice={service},llmops.dev/component=tuning")

        admin.apply_obj(spare_service("first"), namespace)
        first_job = wait_for(lambda: (tuning_jobs("first") or [None])[0], 60,
                             "the first service's tuning Job")
        assert first_job["metadata"]["annotations"]["llmops.dev/tuning-on-spare"] == "true"

        admin.apply_obj(spare_service("second"), namespace)

        def queued() -> dict[str, Any] | None:
            obj = admin.get("llms", "second", namespace)
            tuning = ((obj or {}).get("status") or {}).get("tuning") or {}
            return obj if tuning.get("state") == "Queued" else None
        second = wait_for(queued, 60, "the second service's run queued for the budget")
        tuning = second["status"]["tuning"]
        assert tuning["queued"]["heldGpus"] == 1 and tuning["queued"]["needGpus"] == 1
        assert tuning["queued"]["budgetGpus"] == 1
        cond = condition(second, "Tuned")
        assert cond["status"] == "Unknown" and cond["reason"] == "TuningQueued"
        assert cond["message"] == (
            f"Tuning Job {tuning['jobName']} is not created yet: tuning Jobs on spare GPUs "
            "hold 1 of the 1-GPU tuning budget and this run needs 1; it starts when enough "
            "of them end, or raise Helm value settings.tuningGpuBudget "
            "(LLMOP_TUNING_GPU_BUDGET) to 2 or more")
        reasons = {e.get("reason") for e in admin.items("events", namespace)
                   if (e.get("involvedObject") or {}).get("name") == "second"}
        assert "TuningQueued" in reasons and "TuningStarted" not in reasons
        assert tuning_jobs("second") == []

        # The first service goes, and its Job with it: the budget frees, the queued run
        # starts within the operator's 20-second recheck.
        admin.run("delete", "llms", "first", "-n", namespace, "--wait=false")
        job = wait_for(lambda: (tuning_jobs("second") or [None])[0], 90,
                       "the second service's tuning Job once the budget freed", interval=1)
        assert job["metadata"]["name"] == tuning["jobName"]
        started = admin.get("llms", "second", namespace) or {}
        assert started["status"]["tuning"]["state"] == "Running"
        assert "queued" not in started["status"]["tuning"]
        assert condition(started, "Tuned")["reason"] in ("TuningInProgress", "TuningPending")
        assert "the tuning GPU budget has room" in proc.log()
        admin.run("delete", "llms", "second", "-n", namespace, "--wait=false")
    finally:
        proc.stop()

"""The live cap follows the image's vLLM release, on the REAL control plane (issue 60):
two LLMServices in Apply mode, one on ``vllm/vllm-openai:v0.32.0`` (a release the live
cap's compatibility table marks ``live``), one on ``v0.30.0`` (``no-hook``: its scheduler
has no ``max_num_active_reqs``, confirmed on vLLM's CPU build by
``tools/live_cap_matrix.sh``). The operator runs as the chart's ServiceAccount with a
Prometheus URL, so the adaptation would run.

- v0.32.0: the Deployment's vLLM runs the operator's scheduler class
  (``--scheduler-cls``) and the admission ConfigMap exists;
- v0.30.0: no scheduler class and no ConfigMap (vLLM's own scheduler, so no crash loop
  and no fallback to wait for), ``LiveCap`` False ``VllmVersionUnsupported`` naming the
  release and the supported range, and one Warning Event;
- the user moves that service to ``v0.31.0``: the live cap is rendered and ``LiveCap``
  says so at the same render (True ``CapPending``; before the fix it kept saying 0.30.0
  until an adaptation tick that reached Prometheus replaced it).

No pod runs: the GPU product is one no node the cluster tier's process kubelet
registers has (the decision is the rendering's), so no kubelet, process or real, is
exercised here.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from llm_operator.knowledge.vllm_version import compat_table
from llm_operator.rendering.admission import ADMISSION_CONFIG_MAP_SUFFIX, ENGINE_SCHEDULER_CLS
from tests.support.emulator import OperatorProcess, wait_for

from .conftest import ClusterKubectl, Installed
from .test_control_plane import condition, tiny_service

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

SAID_WITHIN_SECONDS = 60


def service(name: str, image: str) -> dict[str, Any]:
    svc = tiny_service(name)
    svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}  # no node has one
    svc["spec"]["image"] = image
    svc["spec"]["adaptation"] = {"mode": "Apply", "intervalSeconds": 10}
    return svc


def vllm_command(admin: ClusterKubectl, namespace: str, name: str) -> str:
    """The vLLM container's command and args, as one string."""
    dep = admin.get("deployments", name, namespace) or {}
    pod = ((dep.get("spec") or {}).get("template") or {}).get("spec") or {}
    vllm = next((c for c in pod.get("containers") or [] if c["name"] == "vllm"), {})
    return " ".join([*vllm.get("command", []), *vllm.get("args", [])])


def version_warnings(admin: ClusterKubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    return [e for e in admin.items("events", namespace)
            if e["involvedObject"].get("name") == name
            and e.get("reason") == "LiveCapUnsupportedVersion"]


def test_the_live_cap_is_rendered_only_on_a_release_that_has_the_hook(
        admin: ClusterKubectl, namespace: str, installed: Installed, tmp_path: Path) -> None:
    # A Prometheus URL nothing answers: the adaptation is configured (what decides whether
    # the live cap would be used); its queries fail, which other tests cover.
    proc = OperatorProcess(installed.kubeconfig, tmp_path / "operator.log", [],
                           env={**installed.env, "LLMOP_METRICS_PORT": "0",
                                "LLMOP_PROMETHEUS_URL": "http://127.0.0.1:9"}).start()
    try:
        proc.wait_log("Initial authentication has finished", timeout=60)
        started = time.monotonic()
        admin.apply_obj(service("new", "vllm/vllm-openai:v0.32.0"), namespace)
        admin.apply_obj(service("old", "vllm/vllm-openai:v0.30.0"), namespace)

        def unsupported() -> dict[str, Any] | None:
            c = condition(admin.get("llms", "old", namespace), "LiveCap")
            return c if c.get("reason") == "VllmVersionUnsupported" else None
        cond = wait_for(unsupported, SAID_WITHIN_SECONDS, "LiveCap VllmVersionUnsupported",
                        interval=1)
        took = time.monotonic() - started
        supported = compat_table().supported()
        assert cond["status"] == "False", cond
        assert "runs vLLM 0.30.0 (its tag)" in cond["message"], cond
        assert f"vLLM {supported[0]} to {supported[-1]}" in cond["message"], cond
        assert "spec.adaptation.mode: Recommend" in cond["message"], cond
        old = wait_for(lambda: vllm_command(admin, namespace, "old") or None, 60,
                       "the old release's Deployment", interval=1)
        assert "--scheduler-cls" not in old and "--max-num-seqs" in old, old
        assert admin.get("configmaps", f"old{ADMISSION_CONFIG_MAP_SUFFIX}", namespace) is None
        new = wait_for(lambda: vllm_command(admin, namespace, "new") or None, 60,
                       "the new release's Deployment", interval=1)
        assert ENGINE_SCHEDULER_CLS in new, new
        assert admin.get("configmaps", f"new{ADMISSION_CONFIG_MAP_SUFFIX}", namespace)
        assert condition(admin.get("llms", "new", namespace), "LiveCap").get(
            "reason") != "VllmVersionUnsupported"
        said = wait_for(lambda: version_warnings(admin, namespace, "old") or None, 30,
                        "the Warning Event", interval=1)
        assert len(said) == 1 and said[0]["type"] == "Warning", said

        # The user moves to a release with the hook: the live cap comes back.
        admin.run("patch", "llms", "old", "-n", namespace, "--type=merge",
                  "-p", '{"spec": {"image": "vllm/vllm-openai:v0.31.0"}}')
        moved = wait_for(lambda: ENGINE_SCHEDULER_CLS in vllm_command(
            admin, namespace, "old") or None, 60, "the scheduler class on v0.31.0", interval=1)
        assert moved
        assert admin.get("configmaps", f"old{ADMISSION_CONFIG_MAP_SUFFIX}", namespace)
        # The same render replaces the condition: rendered, pending the engine's report.
        pending = wait_for(lambda: (c := condition(admin.get("llms", "old", namespace),
                                                   "LiveCap")).get("reason") == "CapPending"
                           and c, 30, "LiveCap CapPending on v0.31.0", interval=1)
        assert pending["status"] == "True", pending
        assert "runs vLLM 0.31.0 (its tag), which the live cap supports" in \
            pending["message"], pending
        assert len(version_warnings(admin, namespace, "old")) == 1
        sys.stderr.write(f"LiveCap VllmVersionUnsupported on v0.30.0 {took:.1f} s after "
                         "apply; v0.32.0 and, after the patch, v0.31.0 run the scheduler class\n")
    finally:
        proc.stop()

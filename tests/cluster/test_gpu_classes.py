"""GPU classes on the REAL scheduler: with the operator set to GKE's or EKS's class
(``LLMOP_GPU_CLASS``), a service asking for an L4 lands on the node that carries that
provider's label for an L4 (GKE's ``cloud.google.com/gke-accelerator: nvidia-l4``,
Karpenter's ``karpenter.k8s.aws/instance-gpu-name``), tainted as GPU pools are, and not
on the session's nodes, which name their L4 the GPU feature discovery way
(docs/production/gpu-placement-and-prometheus.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from llm_operator.knowledge.gpuclass import PRESETS
from llm_operator_sandbox.cluster import Installed, LocalCluster
from llm_operator_sandbox.kubelet import GPU_TAINT, LocalKubelet, NodeSpec
from tests.support.emulator import OperatorProcess, wait_for

from .conftest import ClusterKubectl
from .test_control_plane import forbidden_lines, tiny_service

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.mark.process_kubelet  # one node of its own, registered by the process kubelet
@pytest.mark.parametrize("class_name", ["gke", "eks"])
def test_the_class_label_places_the_pod(class_name: str, cluster: LocalCluster,
                                        admin: ClusterKubectl, installed: Installed,
                                        namespace: str, tmp_path: Path) -> None:
    gpu_class = PRESETS[class_name]
    assert gpu_class.product_label is not None
    value = gpu_class.label_value("L4")
    assert value, f"the {class_name} class names no L4"
    node = NodeSpec(f"{class_name}-node-1", gpus=8, labels={gpu_class.product_label: value},
                    taints=(GPU_TAINT,))
    # No model is mapped: the pod is placed, its server never starts (not needed here).
    kubelet = LocalKubelet(cluster.admin_kubeconfig, [node], tmp_path / "kubelet",
                           vllm_python=Path(sys.executable),
                           out=lambda line: sys.stderr.write(line + "\n"))
    op = OperatorProcess(installed.kubeconfig, tmp_path / "operator.log", [],
                         env={**installed.env, "LLMOP_METRICS_PORT": "0",
                              "LLMOP_GPU_CLASS": class_name})
    try:
        kubelet.start()
        op.start().wait_log("Initial authentication has finished", timeout=60)
        svc = tiny_service(f"on-{class_name}")
        svc["spec"]["gpus"] = {"product": "L4", "count": 1}
        admin.apply_obj(svc, namespace)

        def bound() -> dict[str, Any] | None:
            pods = admin.items("pods", namespace, selector=f"llmops.dev/llmservice=on-{class_name}")
            return pods[0] if pods and pods[0]["spec"].get("nodeName") else None
        pod = wait_for(bound, 90, f"the server pod bound by the scheduler ({class_name})")
        assert pod["spec"]["nodeName"] == node.name, pod["spec"]["nodeName"]
        assert pod["spec"]["nodeSelector"].get(gpu_class.product_label) == value
        assert forbidden_lines(op.log()) == []
    finally:
        admin.run("delete", "llms", f"on-{class_name}", "-n", namespace, "--wait=false",
                  check=False)
        op.stop()
        kubelet.stop()
        # The session's other tests count the nodes ("0/3 nodes are available").
        admin.run("delete", "node", node.name, "--wait=true", timeout=60)

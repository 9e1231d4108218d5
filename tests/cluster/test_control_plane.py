"""The operator on the REAL control plane (see conftest.py): installed by helm, running
with the chart's ServiceAccount token, its Deployment rolled out by Kubernetes'
Deployment and ReplicaSet controllers, its pod placed by the real scheduler on a GPU node
and run by the local kubelet with vLLM (CPU build) serving a tiny model, everything it
owns removed by the real garbage collector when the LLMService is deleted.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml

from llm_operator_sandbox.cluster import KUBERNETES_VERSION, Installed
from tests.support.emulator import DEMO_DIR, OperatorProcess, wait_for

from .conftest import ClusterKubectl

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

NOT_READY = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
OWNED_KINDS = "deployments,replicasets,pods,services,configmaps,jobs,poddisruptionbudgets"


def tiny_service(name: str = "tiny") -> dict[str, Any]:
    """The demo's tiny Llama with tuning and adaptation off: one pod, one GPU."""
    doc: dict[str, Any] = yaml.safe_load((DEMO_DIR / "tiny-llama-local.yaml").read_text())
    doc["metadata"] = {"name": name}
    doc["spec"]["tuning"] = {"mode": "Disabled"}
    doc["spec"]["adaptation"] = {"mode": "Disabled"}
    return doc


def condition(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return {}


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


def managers(admin: ClusterKubectl, kind: str, name: str, namespace: str) -> dict[str, Any]:
    """The object's field managers (kubectl hides managedFields unless asked)."""
    out = admin.run("get", kind, name, "-n", namespace, "--show-managed-fields", "-o", "json")
    obj = json.loads(out.stdout)
    return {m["manager"]: m for m in obj["metadata"].get("managedFields") or []}


def forbidden_lines(log: str) -> list[str]:
    """403 answers in an operator's log, except those of a namespace being deleted (the
    session's other tests delete theirs; a cluster-wide operator sees its services) and
    the ReplicaSet controller's own "pods ... is forbidden" that PodsCreated quotes (an
    example names a PriorityClass the cluster lacks)."""
    return [line for line in log.splitlines()
            if re.search(r"\b403\b|[Ff]orbidden", line)
            and "because it is being terminated" not in line
            and "cannot create its pods: FailedCreate" not in line]


def test_the_control_plane_is_kubernetes(admin: ClusterKubectl) -> None:
    """The server is the pinned release. (Its nodes, Ready with their GPUs and untainted
    by the node lifecycle controller: tests/nodes/test_scheduling_on_the_node.py.)"""
    version = admin.run("version", "-o", "json").stdout
    assert f'"gitVersion": "{KUBERNETES_VERSION}"' in version


def test_rbac_is_the_charts(admin: ClusterKubectl, installed: Installed) -> None:
    """The operator's identity can do what the chart grants and nothing more: it may
    patch Deployments but not read Secrets' values cluster-wide or delete nodes."""
    sa = f"system:serviceaccount:{installed.namespace}:{installed.service_account}"

    def can(verb: str, resource: str) -> bool:
        out = admin.run("auth", "can-i", verb, resource, "--as", sa, "-A", check=False)
        return out.stdout.strip() == "yes"
    assert can("patch", "deployments.apps")
    assert can("create", "jobs.batch")
    assert can("patch", "llmservices.llmops.dev/status")
    assert not can("delete", "nodes")
    assert not can("create", "clusterrolebindings.rbac.authorization.k8s.io")


def test_another_managers_label_stays_and_the_scale_subresource_scales(
        admin: ClusterKubectl, namespace: str, operator: OperatorProcess) -> None:
    """Server-side apply: a label another manager (kubectl) adds to the Deployment
    survives the operator's next reconcile, which a spec change triggers."""
    svc = tiny_service("shared")
    svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}  # stays Pending: no vLLM
    admin.apply_obj(svc, namespace)
    wait_for(lambda: admin.get("deployment", "shared", namespace), 60, "the Deployment")
    admin.run("label", "deployment", "shared", "-n", namespace, "team=search")
    changed = copy.deepcopy(svc)
    changed["spec"]["engine"] = {**changed["spec"]["engine"], "maxModelLen": 512}
    admin.apply_obj(changed, namespace)

    def rerendered() -> dict[str, Any] | None:
        dep = admin.get("deployment", "shared", namespace)
        args = " ".join((dep or {}).get("spec", {}).get("template", {}).get("spec", {})
                        .get("containers", [{}])[0].get("args") or [])
        return dep if "--max-model-len 512" in args or "--max-model-len=512" in args else None
    dep = wait_for(rerendered, 60, "the operator to re-render the Deployment (max-model-len)")
    assert dep["metadata"]["labels"].get("team") == "search"
    by = managers(admin, "deployment", "shared", namespace)
    assert "kubectl-label" in by and by["llm-operator"]["operation"] == "Apply", sorted(by)

    # An autoscaler's way in: the LLMService's scale subresource (what an HPA or KEDA
    # writes); the operator carries it to the Deployment, and the label stays.
    admin.run("scale", "llms", "shared", "-n", namespace, "--replicas=2")
    scaled = wait_for(lambda: (d := admin.get("deployment", "shared", namespace)) and
                      d["spec"]["replicas"] == 2 and d, 60, "replicas 2 on the Deployment")
    assert scaled["metadata"]["labels"].get("team") == "search"
    scale = json.loads(admin.run("get", "--raw", f"/apis/llmops.dev/v1alpha1/namespaces/"
                                 f"{namespace}/llmservices/shared/scale").stdout)
    assert scale["spec"]["replicas"] == 2 and "llmops.dev/llmservice=shared" in (
        scale["status"].get("selector") or ""), scale

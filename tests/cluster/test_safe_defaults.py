"""Safe by default, on the REAL API server (issue 58): the chart's admission policies and
RBAC refuse what they promise to refuse, and an uninstall never leaves a namespace that
cannot be deleted.

- The operator's ServiceAccount (impersonated by its own token) may write only objects
  labelled as its own and owned by an LLMService: a ConfigMap, Job or Deployment outside
  that set is refused by the API server even where RBAC allows the verb.
- A tenant who may create LLMServices but not pods cannot make the operator run a pod
  with another image or ServiceAccount: the API server refuses the LLMService, naming the
  field and the Helm value that widens the rule.
- The default install watches only its own namespace; after ``helm uninstall`` with
  online adaptation on (the case that used to leave a kopf finalizer), deleting the
  namespace with its LLMServices takes less than a minute.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from llm_operator_sandbox.cluster import (
    Installed,
    LocalCluster,
    helm_install,
    kubeconfig,
    run_tool,
)
from tests.support.emulator import OperatorProcess, kubectl_binary, wait_for

from .conftest import CHART, ClusterKubectl, helm_binary
from .test_control_plane import tiny_service

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]
MANAGED = {"app.kubernetes.io/managed-by": "llm-operator"}


def as_user(cluster: LocalCluster, admin: ClusterKubectl, namespace: str, account: str,
            tmp: Path) -> ClusterKubectl:
    """kubectl with a token of ServiceAccount ``namespace/account``."""
    token = admin.run("create", "token", account, "-n", namespace,
                      "--duration=3600s").stdout.strip()
    path = tmp / f"{namespace}-{account}.kubeconfig"
    path.write_text(kubeconfig(cluster.url, cluster.ca.cert,
                               f"system:serviceaccount:{namespace}:{account}", token=token))
    return ClusterKubectl(path, tmp / f"cache-{account}")


def refused(kubectl: ClusterKubectl, *args: str, stdin: str | None = None) -> str:
    proc = kubectl.run(*args, check=False, stdin=stdin)
    assert proc.returncode != 0, f"kubectl {' '.join(args)} was allowed: {proc.stdout}"
    return proc.stderr


def configmap(name: str, namespace: str, labels: dict[str, str] | None = None,
              owner: dict[str, Any] | None = None) -> str:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if owner:
        meta["ownerReferences"] = [owner]
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                       "data": {"k": "v"}})


# ------------------------------------------------------------------ item 1: operator writes
def test_the_operator_may_write_only_what_it_owns(
        cluster: LocalCluster, admin: ClusterKubectl, installed: Installed, namespace: str,
        tmp_path: Path) -> None:
    op = ClusterKubectl(installed.kubeconfig, tmp_path / "op-cache")
    policy = f"{installed.release}-operator-writes"
    # Someone else's ConfigMap (coredns, aws-auth): RBAC allows patch and delete, the
    # policy does not.
    admin.run("create", "-f", "-", stdin=configmap("coredns", namespace))
    err = refused(op, "patch", "configmap", "coredns", "-n", namespace, "--type=merge",
                  "-p", '{"data": {"Corefile": "evil"}}')
    assert policy in err and "managed-by=llm-operator" in err and "owned by an LLMService" \
        in err, err
    assert policy in refused(op, "delete", "configmap", "coredns", "-n", namespace)
    # Labelling it first does not help: the object before the change must be the
    # operator's too.
    assert policy in refused(op, "label", "configmap", "coredns", "-n", namespace,
                             "app.kubernetes.io/managed-by=llm-operator")
    assert admin.get("configmap", "coredns", namespace)["data"] == {"k": "v"}  # type: ignore[index]
    # New objects without the label or the owner: refused.
    assert policy in refused(op, "create", "-f", "-", stdin=configmap("loose", namespace))
    assert policy in refused(op, "create", "-f", "-",
                             stdin=configmap("label-only", namespace, MANAGED))
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "miner", "namespace": namespace, "labels": MANAGED},
           "spec": {"template": {"spec": {
               "restartPolicy": "Never", "serviceAccountName": "default",
               "containers": [{"name": "c", "image": "evil.example.com/miner:1"}]}}}}
    assert policy in refused(op, "create", "-f", "-", stdin=json.dumps(job))
    # What the operator does write: labelled and owned by an LLMService, then deleted.
    svc = tiny_service("owner")
    svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}
    admin.apply_obj(svc, namespace)
    uid = admin.get("llms", "owner", namespace)["metadata"]["uid"]  # type: ignore[index]
    owner = {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService", "name": "owner",
             "uid": uid}
    op.run("create", "-f", "-", stdin=configmap("owner-cap", namespace, MANAGED, owner))
    op.run("patch", "configmap", "owner-cap", "-n", namespace, "--type=merge",
           "-p", '{"data": {"k": "w"}}')
    op.run("delete", "configmap", "owner-cap", "-n", namespace)
    # Its own kinds are not matched: an Event, kopf's annotations on the LLMService (its
    # status is a subresource, which resources ["*"] does not match; kubectl cannot patch
    # it with the operator's rights, as it reads the subresource first).
    op.run("create", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"owner.{uuid.uuid4().hex[:8]}", "namespace": namespace},
        "involvedObject": {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
                           "name": "owner", "namespace": namespace, "uid": uid},
        "reason": "Test", "message": "allowed", "type": "Normal"}))
    op.run("annotate", "llms", "owner", "-n", namespace, "llmops.dev/test=allowed")


# --------------------------------------------------------- item 2: the confused deputy
def test_a_tenant_cannot_pick_the_pods_image_or_service_account(
        cluster: LocalCluster, admin: ClusterKubectl, installed: Installed, namespace: str,
        tmp_path: Path) -> None:
    admin.run("create", "serviceaccount", "tenant", "-n", namespace)
    admin.run("create", "serviceaccount", "cluster-admin-ish", "-n", namespace)
    admin.run("create", "role", "llms-editor", "-n", namespace,
              "--verb=get,list,create,update,patch", "--resource=llmservices.llmops.dev")
    admin.run("create", "rolebinding", "tenant-llms", "-n", namespace, "--role=llms-editor",
              f"--serviceaccount={namespace}:tenant")
    tenant = as_user(cluster, admin, namespace, "tenant", tmp_path)
    assert tenant.run("auth", "can-i", "create", "pods", "-n", namespace,
                      check=False).stdout.strip() == "no"
    policy = f"{installed.release}-llmservices"

    def create(name: str, **spec: Any) -> str:
        svc = tiny_service(name)
        svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}
        svc["spec"].update(spec)
        return refused(tenant, "create", "-n", namespace, "-f", "-", stdin=json.dumps(svc))

    err = create("miner", image="evil.example.com/miner:1")
    assert "spec.image: evil.example.com/miner:1" in err and "not an allowed image" in err
    assert "admission.allowedImages" in err and policy in err, err
    # A Docker Hub look-alike is compared as docker.io/...: not the vLLM repository.
    err = create("lookalike", image="vllm/vllm-openai-tools:v1")
    assert "docker.io/vllm/vllm-openai-tools:v1" in err, err
    err = create("runas", pod={"serviceAccountName": "cluster-admin-ish"})
    assert f"spec.pod.serviceAccountName: cluster-admin-ish is not allowed in namespace " \
           f"{namespace}" in err and "admission.allowedServiceAccounts" in err, err
    # The supported image (Docker Hub short form and full), and no ServiceAccount: allowed.
    for name, image in (("short", "vllm/vllm-openai:v0.32.0"),
                        ("full", "docker.io/vllm/vllm-openai@sha256:" + "a" * 64)):
        svc = tiny_service(name)
        svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}
        svc["spec"]["image"] = image
        tenant.run("create", "-n", namespace, "-f", "-", stdin=json.dumps(svc))
    # Changing an allowed service to another image is refused as well.
    err = refused(tenant, "patch", "llms", "short", "-n", namespace, "--type=merge",
                  "-p", '{"spec": {"image": "evil.example.com/miner:1"}}')
    assert "spec.image" in err and "admission.allowedImages" in err, err


# ------------------------------------------------ items 1 and 4: the default install
def test_default_install_is_namespaced_and_uninstall_never_hangs(
        cluster: LocalCluster, admin: ClusterKubectl, installed: Installed,
        tmp_path: Path) -> None:
    """A second release with the chart's defaults (no CRD: the session's release has it),
    online adaptation on: it watches only its namespace, its services carry no
    finalizer, and after ``helm uninstall`` the namespace goes within a minute."""
    ns = f"llmop-{uuid.uuid4().hex[:6]}"
    release = helm_install(cluster, helm_binary(), kubectl_binary(), CHART, release=ns,
                           namespace=ns, values={
                               "replicaCount": 0, "crds": {"install": False},
                               "settings": {"prometheusUrl": "http://127.0.0.1:9"}})
    assert json.loads(release.env["LLMOP_NAMESPACES"]) == [ns]
    assert release.env["LLMOP_PROMETHEUS_URL"]
    op = ClusterKubectl(release.kubeconfig, tmp_path / "op-cache")
    # Namespaced: no rights elsewhere (RBAC), not even to read.
    other = f"elsewhere-{uuid.uuid4().hex[:6]}"
    admin.run("create", "namespace", other)
    try:
        err = refused(op, "create", "-f", "-", stdin=configmap("x", other, MANAGED))
        assert "forbidden" in err.lower(), err
        assert op.run("auth", "can-i", "delete", "deployments", "-n", other,
                      check=False).stdout.strip() == "no"
    finally:
        admin.run("delete", "namespace", other, "--wait=false", check=False)

    proc = OperatorProcess(release.kubeconfig, tmp_path / "operator.log", [],
                           env={**release.env, "LLMOP_METRICS_PORT": "0"}).start()
    try:
        proc.wait_log("Initial authentication has finished", timeout=60)
        for name in ("a", "b"):
            svc = tiny_service(name)
            svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}  # no vLLM
            svc["spec"]["adaptation"] = {"mode": "Recommend"}
            admin.apply_obj(svc, ns)
        for name in ("a", "b"):
            wait_for(lambda n=name: admin.get("deployment", n, ns), 90,  # type: ignore[misc]
                     f"Deployment {name}", interval=1)
        time.sleep(3)  # a few more cycles: a finalizer would be on by now
        for name in ("a", "b"):
            meta = admin.get("llms", name, ns)["metadata"]  # type: ignore[index]
            assert not meta.get("finalizers"), meta
    finally:
        proc.stop()
    run_tool([helm_binary(), "uninstall", ns, "--namespace", ns, "--wait",
              "--timeout", "60s"], cluster.admin_kubeconfig)
    t0 = time.monotonic()
    admin.run("delete", "namespace", ns, "--wait=false")
    wait_for(lambda: admin.run("get", "namespace", ns, check=False).returncode != 0, 60,
             f"namespace {ns} deleted", interval=1)
    took = time.monotonic() - t0
    sys.stderr.write(f"namespace {ns} gone {took:.1f} s after its deletion\n")
    assert took < 60, took

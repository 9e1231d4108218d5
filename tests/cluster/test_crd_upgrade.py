"""A CRD upgrade with stored objects, by ``helm upgrade`` on the REAL API server.

The project's rule for the LLMService CRD is "changes must be additive" (kopf has no
conversion webhook), so the way the API graduates is a new served version with the same
schema and ``conversion: None``, the storage version moving to it. This test makes that
chart (a copy of charts/llm-operator whose CRD adds ``v1beta1`` as the storage version
and keeps ``v1alpha1`` served) and upgrades the installed release to it while services
are stored and running. What a platform team would check after such an upgrade:

- every stored LLMService is still there, same uid, spec and status, read through either
  version; the operator (which watches v1alpha1) keeps reconciling them;
- nothing it serves restarts: the Deployment's generation and the pod's uid are the same
  after the upgrade and after the operator's own restart (a helm upgrade rolls it);
- an edit made through the new version reaches the Deployment.

Going back needs what docs/PRODUCTION.md (Upgrade) says a downgrade needs: the
objects written as v1beta1 rewritten or deleted, and v1beta1 taken out of the CRD's
``status.storedVersions`` before the chart without it is installed; the real API server
refuses the downgrade otherwise, which the teardown checks first.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator_sandbox.cluster import Installed, LocalCluster, run_tool
from tests.support.emulator import OperatorProcess, wait_for

from .conftest import CHART, SESSION_VALUES, ClusterKubectl, helm_binary
from .test_control_plane import forbidden_lines, tiny_service

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

CRD_NAME = "llmservices.llmops.dev"
CRD_FILE = Path("files") / f"{CRD_NAME}.yaml"
VALUES = SESSION_VALUES  # the session install's: clusterWide, its admission lists


def chart_with_v1beta1(dest: Path) -> Path:
    """A copy of the chart whose CRD serves v1alpha1 and v1beta1 (the storage version),
    both with the released schema."""
    chart = dest / "llm-operator"
    shutil.copytree(CHART, chart)
    crd = yaml.safe_load((chart / CRD_FILE).read_text())
    alpha = crd["spec"]["versions"][0]
    assert alpha["name"] == "v1alpha1" and len(crd["spec"]["versions"]) == 1
    beta = {**copy.deepcopy(alpha), "name": "v1beta1", "storage": True}
    alpha["storage"] = False
    crd["spec"]["versions"] = [alpha, beta]
    (chart / CRD_FILE).write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def helm_upgrade(cluster: LocalCluster, installed: Installed, chart: Path) -> None:
    run_tool([helm_binary(), "upgrade", installed.release, str(chart), "--namespace",
              installed.namespace, "--wait", "--timeout", "120s", "-f", "-"],
             cluster.admin_kubeconfig, stdin=yaml.safe_dump(VALUES))


def stored_versions(admin: ClusterKubectl) -> list[str]:
    crd = admin.get("crd", CRD_NAME) or {}
    return list((crd.get("status") or {}).get("storedVersions") or [])


@pytest.fixture
def upgraded(cluster: LocalCluster, admin: ClusterKubectl, installed: Installed,
             tmp_path: Path) -> Iterator[Path]:
    """Yields the v1beta1 chart; the teardown goes back to the released chart the way
    the downgrade docs say (the test's namespace is deleted by its own fixture later, so
    its objects are deleted here first)."""
    assert stored_versions(admin) == ["v1alpha1"]
    chart = chart_with_v1beta1(tmp_path)
    try:
        yield chart
    finally:
        # Every LLMService of the cluster: one already being deleted (its namespace, or the
        # operator's finalizer) may be gone between the list and its delete (NotFound,
        # seen once); none left is the point either way.
        for ns in json.loads(admin.run("get", "llms", "-A", "-o", "json").stdout)["items"]:
            admin.run("delete", "llms", ns["metadata"]["name"], "-n",
                      ns["metadata"]["namespace"], "--wait=true", "--ignore-not-found",
                      timeout=120)
        if "v1beta1" in stored_versions(admin):
            try:  # the real server keeps a version objects may be stored in
                helm_upgrade(cluster, installed, CHART)
            except RuntimeError as exc:
                assert "storedVersions" in str(exc) or "stored versions" in str(exc), exc
            else:
                pytest.fail("the API server took a CRD dropping a stored version")
            admin.run("patch", "crd", CRD_NAME, "--subresource=status", "--type=merge",
                      "-p", json.dumps({"status": {"storedVersions": ["v1alpha1"]}}))
        helm_upgrade(cluster, installed, CHART)
        assert stored_versions(admin) == ["v1alpha1"]
        # kubectl caches discovery on disk: until it refreshes, it still sends `llms` to
        # v1beta1 and gets 404 for every name (what the downgrade docs warn about).
        admin.run("api-resources", "--cached=false")
        assert json.loads(admin.run("get", "llms", "-A", "-o", "json").stdout)[
            "apiVersion"] == "v1"


def serving_state(admin: ClusterKubectl, name: str, namespace: str) -> dict[str, Any]:
    dep = admin.get("deployment", name, namespace)
    assert dep is not None, f"no Deployment {namespace}/{name}"
    pods = admin.items("pods", namespace, selector=f"llmops.dev/llmservice={name}")
    return {"generation": dep["metadata"]["generation"],
            "template": dep["spec"]["template"],
            "pods": sorted(p["metadata"]["uid"] for p in pods)}


def test_a_new_storage_version_keeps_stored_services_and_their_pods(
        cluster: LocalCluster, admin: ClusterKubectl, installed: Installed, namespace: str,
        operator: OperatorProcess, upgraded: Path) -> None:
    svc = tiny_service("kept")
    svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}  # Pending: no vLLM
    admin.apply_obj(svc, namespace)

    def reconciled() -> dict[str, Any] | None:
        obj = admin.get("llms", "kept", namespace)
        st = (obj or {}).get("status") or {}
        pods = admin.items("pods", namespace, selector="llmops.dev/llmservice=kept")
        ok = st.get("observedGeneration") == obj["metadata"]["generation"] and pods
        return obj if obj and ok else None
    before = wait_for(reconciled, 90, "the service reconciled, its pod created", interval=1)
    serving = serving_state(admin, "kept", namespace)
    assert serving["pods"], "no pod for the stored service"

    helm_upgrade(cluster, installed, upgraded)
    assert stored_versions(admin) == ["v1alpha1", "v1beta1"]
    # The operator of the new release starts (helm rolls its pod): here the local process.
    operator.stop()
    operator.start().wait_log("Initial authentication has finished", timeout=60)
    for version in ("v1alpha1", "v1beta1"):
        obj = admin.get(f"llmservices.{version}.llmops.dev", "kept", namespace)
        assert obj is not None and obj["apiVersion"] == f"llmops.dev/{version}"
        assert obj["metadata"]["uid"] == before["metadata"]["uid"]
        assert obj["spec"] == before["spec"]
        assert obj["status"]["conditions"], obj["status"]
    # The restarted operator resumes the stored service, and what the service runs is
    # what it ran before the upgrade.
    operator.wait_log("Resuming is processed", timeout=60)
    assert serving_state(admin, "kept", namespace) == serving, \
        "the upgrade or the operator's restart changed what the service runs"

    # An edit through the new version reaches the Deployment (the operator reads
    # v1alpha1; the server converts, conversion None).
    admin.run("patch", "llmservices.v1beta1.llmops.dev", "kept", "-n", namespace,
              "--type=merge", "-p", json.dumps({"spec": {"engine": {"maxModelLen": 512}}}))

    def rerendered() -> bool:
        dep = admin.get("deployment", "kept", namespace) or {}
        args = " ".join(dep["spec"]["template"]["spec"]["containers"][0].get("args") or [])
        return "--max-model-len 512" in args or "--max-model-len=512" in args
    wait_for(rerendered, 60, "the v1beta1 edit rendered into the Deployment", interval=1)
    assert forbidden_lines(operator.log()) == []

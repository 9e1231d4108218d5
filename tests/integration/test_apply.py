"""Sharing children with others, and multi-step switches when a step fails: the real
operator process against the EMULATED API server (kmock with the project's fixes, among
them a partial server-side apply, the scale subresource and fault injection; see
``llm_operator_sandbox.emulator`` for what it does and does not emulate). Not a cluster:
no controller acts on what is written, and RBAC is not enforced (403s are injected)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import NAMESPACE
from tests.integration.test_operator import (
    EXAMPLE,
    NAME,
    arg_value,
    condition,
    container_of,
    wait_condition,
    wait_deployment,
    write_deployment_status,
)
from tests.support.emulator import EmulatorProcess, Kubectl, OperatorProcess, wait_for

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"


def change_spec(kubectl: Kubectl, spec: dict[str, Any], name: str = NAME) -> None:
    kubectl.run("patch", "llms", name, "-n", NAMESPACE, "--type", "merge",
                "-p", json.dumps({"spec": spec}))


def wait_args(kubectl: Kubectl, flag: str, value: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        dep = kubectl.get("deployment", NAME, NAMESPACE)
        return dep if dep and arg_value(container_of(dep)["args"], flag) == value else None
    return wait_for(probe, 30, f"the Deployment to run with {flag} {value}")


def test_rollout_restart_survives_the_next_write(kubectl: Kubectl,
                                                 operator: OperatorProcess) -> None:
    """`kubectl rollout restart` annotates the pod template; the operator's next write of
    the Deployment (a spec change) keeps it, so the restart is not undone (a PUT of the
    rendered Deployment removed it and rolled the pods once more)."""
    kubectl.apply(EXAMPLE, NAMESPACE)
    wait_deployment(kubectl)
    wait_condition(kubectl, "Planned", "True", generation=1)
    kubectl.run("rollout", "restart", f"deployment/{NAME}", "-n", NAMESPACE)
    restarted = kubectl.get("deployment", NAME, NAMESPACE) or {}
    stamp = restarted["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT]

    change_spec(kubectl, {"engine": {"maxNumSeqs": 7}})
    dep = wait_args(kubectl, "--max-num-seqs", "7")
    assert dep["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT] == stamp
    assert "Updated Deployment" in operator.log()


def test_fields_of_other_managers_survive(kubectl: Kubectl, operator: OperatorProcess) -> None:
    """Fields the operator does not render stay when it writes: another manager's
    revisionHistoryLimit, a label a policy engine added to the pod template."""
    kubectl.apply(EXAMPLE, NAMESPACE)
    wait_deployment(kubectl)
    wait_condition(kubectl, "Planned", "True", generation=1)
    kubectl.run("patch", "deployment", NAME, "-n", NAMESPACE, "--type", "merge",
                "--field-manager", "policy-engine", "-p", json.dumps({"spec": {
                    "revisionHistoryLimit": 3,
                    "template": {"metadata": {"labels": {"cost-center": "ml-42"}}}}}))

    change_spec(kubectl, {"engine": {"maxNumSeqs": 9}})
    dep = wait_args(kubectl, "--max-num-seqs", "9")
    assert dep["spec"]["revisionHistoryLimit"] == 3
    assert dep["spec"]["template"]["metadata"]["labels"]["cost-center"] == "ml-42"
    # The operator's own fields are still its own: the selector labels are there.
    assert dep["spec"]["template"]["metadata"]["labels"]["llmops.dev/llmservice"] == NAME


def test_kubectl_scale_goes_through_the_scale_subresource(
    kubectl: Kubectl, operator: OperatorProcess
) -> None:
    """`kubectl scale llms/NAME` (what an HPA or KEDA does too) sets spec.replicas through
    the LLMService's scale subresource; the Deployment follows, a PodDisruptionBudget
    appears for two replicas and goes again at one; the scale reports the pods' selector."""
    kubectl.apply(EXAMPLE, NAMESPACE)
    wait_deployment(kubectl)
    wait_condition(kubectl, "Planned", "True", generation=1)

    kubectl.run("scale", f"llms/{NAME}", "-n", NAMESPACE, "--replicas=2")
    wait_for(lambda: (kubectl.get("deployment", NAME, NAMESPACE) or {}).get("spec", {}).get(
        "replicas") == 2, 30, "the Deployment to have 2 replicas")
    pdb = wait_for(lambda: kubectl.get("poddisruptionbudget", NAME, NAMESPACE), 30,
                   "the PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1

    write_deployment_status(kubectl, available=2, updated=2)
    scale = wait_for(lambda: (s := json.loads(kubectl.run(
        "get", "llms", NAME, "-n", NAMESPACE, "--subresource", "scale", "-o", "json").stdout))
        ["status"].get("replicas") == 2 and s, 30, "the scale's status.replicas")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2
    assert scale["status"]["selector"] == (
        f"llmops.dev/llmservice={NAME},llmops.dev/component=server")

    kubectl.run("scale", f"llms/{NAME}", "-n", NAMESPACE, "--replicas=1")
    wait_for(lambda: kubectl.get("poddisruptionbudget", NAME, NAMESPACE) is None, 30,
             "the PodDisruptionBudget to go at one replica (it would block node drains)")
    assert (kubectl.get("deployment", NAME, NAMESPACE) or {})["spec"]["replicas"] == 1


# ------------------------------------------------------------ switches with a failing step

def crd(group: str, kind: str, plural: str, version: str = "v1") -> dict[str, Any]:
    """A schemaless CRD, so that the emulated server serves the kind."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                 "versions": [{"name": version, "served": True, "storage": True,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {
                                   "type": "object",
                                   "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


BIG = {
    "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
    "metadata": {"name": "big"},
    # TP=16 on one node of 16 GPUs (a Deployment); perNode 4 makes it TP=4 x PP=2 on two
    # nodes (a LeaderWorkerSet).
    "spec": {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct"},
             "gpus": {"product": "L4", "perNode": 16}, "tuning": {"mode": "Disabled"}},
}


def inject(api: EmulatorProcess, method: str, plural: str, code: int, name: str | None = None,
           times: int = 1) -> None:
    """Make the next ``times`` requests ``method`` on ``plural`` (``name``) fail."""
    req = urllib.request.Request(
        api.url + "/emulator/faults", method="POST",
        data=json.dumps({"method": method, "plural": plural, "code": code, "name": name,
                         "times": times}).encode(),
        headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).close()


@pytest.fixture
def operator_with_lws(api: EmulatorProcess, kubectl: Kubectl, tmp_path: Path
                      ) -> Iterator[OperatorProcess]:
    """The emulated server serving LeaderWorkerSet and PodMonitor (schemaless CRDs), then
    the operator (it discovers the groups at start)."""
    manifest = tmp_path / "crds.yaml"
    manifest.write_text(yaml.safe_dump_all([
        crd("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets"),
        crd("monitoring.coreos.com", "PodMonitor", "podmonitors")]))
    kubectl.apply(manifest)
    wait_for(lambda: kubectl.run("get", "leaderworkersets", "-n", NAMESPACE,
                                 check=False).returncode == 0, 15, "LWS to be served")
    proc = OperatorProcess(api.kubeconfig, tmp_path / "operator.log", [NAMESPACE]).start()
    try:
        proc.wait_log("Initial authentication has finished", timeout=60)
        yield proc
    finally:
        proc.stop()


def test_switch_to_leader_worker_set_completes_after_failed_steps(
    api: EmulatorProcess, kubectl: Kubectl, operator_with_lws: OperatorProcess,
    tmp_path: Path,
) -> None:
    """Deployment -> LeaderWorkerSet while the PodMonitor write and the old Deployment's
    delete each answer 403 once (RBAC lacking a verb): the LWS is written, the failing
    PodMonitor does not stop the switch, status says the old Deployment still holds its
    GPUs, and the retry finishes the switch."""
    manifest = tmp_path / "big.yaml"
    manifest.write_text(yaml.safe_dump(BIG))
    kubectl.apply(manifest, NAMESPACE)
    wait_deployment(kubectl, "big")
    wait_for(lambda: kubectl.get("podmonitor", "big", NAMESPACE), 30, "the PodMonitor")
    wait_condition(kubectl, "ChildrenApplied", "True", name="big", generation=1)

    inject(api, "PATCH", "podmonitors", 403)
    inject(api, "DELETE", "deployments", 403)
    change_spec(kubectl, {"gpus": {"perNode": 4}}, name="big")

    svc = wait_condition(kubectl, "ChildrenApplied", "False", name="big", generation=2)
    cond = condition(svc, "ChildrenApplied")
    assert cond is not None and cond["reason"] == "WorkloadSwitchIncomplete", cond
    assert "Deployment ml/big" in cond["message"] and "403" in cond["message"]
    assert kubectl.get("leaderworkerset", "big-lws", NAMESPACE) is not None  # new one first
    assert kubectl.get("deployment", "big", NAMESPACE) is not None  # not yet deleted

    # The retry (kopf's TemporaryError) completes the switch and the PodMonitor.
    svc = wait_condition(kubectl, "ChildrenApplied", "True", name="big", generation=2,
                         timeout=90)
    assert kubectl.get("deployment", "big", NAMESPACE) is None
    monitor = kubectl.get("podmonitor", "big", NAMESPACE) or {}
    assert monitor["spec"]["selector"]["matchLabels"]["llmops.dev/role"] == "leader"
    assert svc["status"]["selector"].endswith("llmops.dev/role=leader")


def test_failed_create_of_the_new_workload_keeps_the_old_one(
    api: EmulatorProcess, kubectl: Kubectl, operator_with_lws: OperatorProcess,
    tmp_path: Path,
) -> None:
    """The new LeaderWorkerSet cannot be written (500): the old Deployment is not deleted
    (it keeps serving); the retry writes the LWS and only then deletes the Deployment."""
    manifest = tmp_path / "big.yaml"
    manifest.write_text(yaml.safe_dump(BIG))
    kubectl.apply(manifest, NAMESPACE)
    wait_deployment(kubectl, "big")
    wait_condition(kubectl, "ChildrenApplied", "True", name="big", generation=1)

    inject(api, "GET", "leaderworkersets", 500, "big-lws")  # the read before the apply
    change_spec(kubectl, {"gpus": {"perNode": 4}}, name="big")
    svc = wait_condition(kubectl, "ChildrenApplied", "False", name="big", generation=2)
    cond = condition(svc, "ChildrenApplied")
    assert cond is not None and cond["reason"] == "ApplyFailed"
    assert "LeaderWorkerSet big-lws" in cond["message"]
    assert kubectl.get("deployment", "big", NAMESPACE) is not None

    wait_condition(kubectl, "ChildrenApplied", "True", name="big", generation=2, timeout=90)
    assert kubectl.get("leaderworkerset", "big-lws", NAMESPACE) is not None
    assert kubectl.get("deployment", "big", NAMESPACE) is None


def test_children_are_watched_with_a_server_side_label_selector(
    api: EmulatorProcess, operator: OperatorProcess
) -> None:
    """kopf asks the API server only for the operator's Deployments and Jobs (a label
    selector on its watch requests), not for every one of the cluster."""
    def watches() -> list[dict[str, Any]] | None:
        with urllib.request.urlopen(api.url + "/emulator/watches", timeout=10) as resp:
            found = json.loads(resp.read())["watches"]
        kinds = {w["plural"] for w in found}
        return found if {"deployments", "jobs", "llmservices"} <= kinds else None

    for watch in wait_for(watches, 30, "the operator's watches"):
        if watch["plural"] in ("deployments", "jobs"):
            assert watch["labelSelector"] == "app.kubernetes.io/managed-by=llm-operator"


def test_finalizer_of_an_older_release_is_removed(
    kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    """An LLMService that an older release marked with kopf's finalizer loses it (nothing
    needs it with adaptation off), and is then reconciled as usual."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["finalizers"] = ["llmops.dev/finalizer"]
    manifest = tmp_path / "old.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    kubectl.apply(manifest, NAMESPACE)
    wait_for(lambda: not ((kubectl.get("llms", NAME, NAMESPACE) or {}).get("metadata", {})
                          .get("finalizers")), 30, "the finalizer to be removed")
    wait_deployment(kubectl)

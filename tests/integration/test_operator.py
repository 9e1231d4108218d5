"""The operator process end to end, driven through kubectl against the EMULATED API
server (no kubelet or controllers there: where a Deployment controller would report
available replicas, the test writes the Deployment's status itself)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator_sandbox.loop import cap_arg
from tests.integration.conftest import NAMESPACE
from tests.support.emulator import (
    EXAMPLES_DIR,
    EmulatorProcess,
    Kubectl,
    OperatorProcess,
    operator_command,
    wait_for,
)

EXAMPLE = EXAMPLES_DIR / "llama-3.1-8b-l4.yaml"
NAME = "llama-3-1-8b"


def condition(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any] | None:
    """One condition of an object's status."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def rendered(path: Path, namespace: str) -> dict[str, dict[str, Any]]:
    """What ``llm-operator render`` prints for ``path`` in ``namespace``, by kind."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        doc.setdefault("metadata", {})["namespace"] = namespace
    proc = subprocess.run([*operator_command(), "render", "-"], input=yaml.safe_dump_all(docs),
                          text=True, capture_output=True, timeout=60, check=True)
    return {d["kind"]: d for d in yaml.safe_load_all(proc.stdout) if d}


def container_of(deployment: dict[str, Any]) -> dict[str, Any]:
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def arg_value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def cap_value(args: list[str]) -> str | None:
    """The cap the server runs with: --max-num-active-seqs where rendered, else
    --max-num-seqs (:func:`llm_operator_sandbox.loop.cap_arg`)."""
    cap = cap_arg(args)
    return None if cap is None else str(cap)


def wait_deployment(kubectl: Kubectl, name: str = NAME, timeout: float = 60) -> dict[str, Any]:
    return wait_for(lambda: kubectl.get("deployment", name, NAMESPACE), timeout,
                    f"Deployment {name}")


def wait_condition(kubectl: Kubectl, ctype: str, status: str, name: str = NAME,
                   generation: int | None = None, timeout: float = 60) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        svc = kubectl.get("llms", name, NAMESPACE)
        cond = condition(svc, ctype)
        if cond and cond["status"] == status and (
                generation is None or cond.get("observedGeneration") == generation):
            return svc
        return None
    return wait_for(probe, timeout, f"{ctype}={status} on {name}")


def write_deployment_status(kubectl: Kubectl, available: int, updated: int,
                            name: str = NAME) -> None:
    """Play the Deployment controller: report replicas as a kubelet/controller would."""
    dep = kubectl.get("deployment", name, NAMESPACE) or {}
    status = {"replicas": updated, "updatedReplicas": updated, "availableReplicas": available,
              "readyReplicas": available,
              "observedGeneration": dep.get("metadata", {}).get("generation", 1)}
    kubectl.run("patch", "deployment", name, "-n", NAMESPACE, "--subresource", "status",
                "--type", "merge", "-p", json.dumps({"status": status}))


def test_create_renders_the_deployment_and_reports_status(
    kubectl: Kubectl, operator: OperatorProcess
) -> None:
    kubectl.apply(EXAMPLE, NAMESPACE)
    deployment = wait_deployment(kubectl)
    svc = wait_condition(kubectl, "Planned", "True", generation=1)
    expected = rendered(EXAMPLE, NAMESPACE)

    # The Deployment is what `llm-operator render` prints, owned by the LLMService.
    container = container_of(deployment)
    assert container["args"] == container_of(expected["Deployment"])["args"]
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == svc["metadata"]["uid"]
    assert deployment["metadata"]["labels"]["llmops.dev/llmservice"] == NAME

    # GPU requests and the tensor-parallel flag match the plan the status reports.
    plan = svc["status"]["plan"]
    assert plan["gpusPerReplica"] == plan["tensorParallelSize"] * plan["pipelineParallelSize"]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == str(plan["gpusPerReplica"])
    assert arg_value(container["args"], "--tensor-parallel-size") == str(
        plan["tensorParallelSize"])
    # The pods start on the plan's start (the SLO sizing's), within the memory limit.
    start = plan.get("startMaxNumSeqs") or plan["maxNumSeqs"]
    assert cap_value(container["args"]) == str(start)
    assert start <= plan["maxNumSeqs"]

    # The Service fronts it; status has the endpoint and standard conditions.
    service = kubectl.get("service", NAME, NAMESPACE)
    assert service is not None and service["spec"]["ports"][0]["port"] == 8000
    assert svc["status"]["endpoint"] == f"http://{NAME}.{NAMESPACE}.svc:8000/v1"
    assert svc["status"]["observedGeneration"] == 1
    for ctype in ("SpecValid", "Planned"):
        cond = condition(svc, ctype)
        assert cond is not None and cond["status"] == "True"
        assert cond["observedGeneration"] == 1 and cond["lastTransitionTime"]
    ready = condition(svc, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert ready["reason"] == "WaitingForReplicas"

    # Once the (emulated) Deployment controller reports the replica available: Ready.
    write_deployment_status(kubectl, available=1, updated=1)
    svc = wait_condition(kubectl, "Ready", "True")
    assert condition(svc, "Ready")["reason"] == "Serving"  # type: ignore[index]
    table = kubectl.run("get", "llms", "-n", NAMESPACE).stdout
    assert NAME in table and "True" in table

    # This operator has no Prometheus URL (the chart's default): the example's
    # adaptation (Recommend, the default mode) cannot run, and status says so, with the
    # fix; its pods carry no admission cap that nothing would move.
    metrics = condition(svc, "MetricsAvailable")
    assert metrics is not None and metrics["status"] == "False", metrics
    assert metrics["reason"] == "PrometheusNotConfigured"
    assert "settings.prometheusUrl" in metrics["message"]
    assert not any(a.startswith("--scheduler-cls") for a in container["args"])

    # Milestones are Events on the LLMService; the one Warning says adaptation cannot run.
    events = kubectl.get("events", namespace=NAMESPACE) or {}
    mine = [e for e in events.get("items", []) if e["involvedObject"].get("name") == NAME]
    reasons = {e["reason"] for e in mine}
    assert {"Planned", "DeploymentCreated"} <= reasons
    cannot = [e for e in mine if e["reason"] == "AdaptationCannotRun"]
    assert len(cannot) == 1 and cannot[0]["type"] == "Warning"
    assert cannot[0].get("count", 1) == 1  # not repeated by later passes


def test_spec_change_rerenders_the_deployment(
    kubectl: Kubectl, operator: OperatorProcess
) -> None:
    kubectl.apply(EXAMPLE, NAMESPACE)
    first = wait_deployment(kubectl)
    wait_condition(kubectl, "Planned", "True", generation=1)
    before = cap_value(container_of(first)["args"])
    pinned = 7 if before != "7" else 9

    kubectl.run("patch", "llms", NAME, "-n", NAMESPACE, "--type", "merge",
                "-p", json.dumps({"spec": {"engine": {"maxNumSeqs": pinned}}}))

    def updated() -> dict[str, Any] | None:
        dep = kubectl.get("deployment", NAME, NAMESPACE)
        args = container_of(dep)["args"] if dep else []
        return dep if cap_value(args) == str(pinned) else None

    dep = wait_for(updated, 30, "the Deployment to run with the pinned max-num-seqs")
    assert dep["metadata"]["generation"] == first["metadata"]["generation"] + 1
    assert dep["metadata"]["uid"] == first["metadata"]["uid"]  # patched in place
    svc = wait_condition(kubectl, "Planned", "True", generation=2)
    assert svc["status"]["observedGeneration"] == 2
    assert svc["status"]["plan"]["maxNumSeqs"] == pinned
    pinned_why = [e for e in svc["status"]["plan"]["explanations"] if e["name"] == "maxNumSeqs"]
    assert pinned_why and pinned_why[0]["source"] == "pinned"
    # SpecValid did not change status, so its transition time stayed.
    assert "Updated Deployment" in operator.log()


def test_delete_needs_no_operator_and_leaves_no_children(
    kubectl: Kubectl, operator: OperatorProcess
) -> None:
    """No finalizer holds an LLMService: deleting it (or its namespace) after the operator
    is gone (uninstalled) does not hang, and the children go by their owner references
    (here the EMULATED API server's garbage collector; on a cluster kube-controller-manager's)."""
    kubectl.apply(EXAMPLE, NAMESPACE)
    wait_deployment(kubectl)
    wait_condition(kubectl, "Planned", "True", generation=1)
    operator.wait_log("Creation is processed")
    svc = kubectl.get("llms", NAME, NAMESPACE)
    assert svc is not None and not svc["metadata"].get("finalizers")

    operator.stop()  # as after `helm uninstall`
    kubectl.run("delete", "llms", NAME, "-n", NAMESPACE, "--wait=false")

    wait_for(lambda: kubectl.get("llms", NAME, NAMESPACE) is None, 10,
             "the LLMService to be gone with no operator running")
    assert kubectl.get("deployment", NAME, NAMESPACE) is None
    assert kubectl.get("service", NAME, NAMESPACE) is None


def test_deleted_service_is_not_recreated_by_the_operator(
    kubectl: Kubectl, operator: OperatorProcess
) -> None:
    """With the operator running: the garbage collector deletes the Deployment, and the
    operator does not re-create it for an owner that is gone."""
    kubectl.apply(EXAMPLE, NAMESPACE)
    wait_deployment(kubectl)
    wait_condition(kubectl, "Planned", "True", generation=1)
    kubectl.run("delete", "llms", NAME, "-n", NAMESPACE)
    wait_for(lambda: kubectl.get("llms", NAME, NAMESPACE) is None, 10, "the LLMService gone")
    time.sleep(3)  # a workload event handled with a stale index would re-create it by now
    assert kubectl.get("deployment", NAME, NAMESPACE) is None
    assert "re-creating it" not in operator.log()


BAD_SPEC = """
apiVersion: llmops.dev/v1alpha1
kind: LLMService
metadata:
  name: bad
spec:
  model:
    name: meta-llama/Llama-3.1-8B-Instruct
  gpus:
    product: L4
  engine:
    tensorParallelSize: 3
"""


def test_bad_spec_is_marked_invalid_and_not_retried(
    kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(BAD_SPEC)
    kubectl.apply(manifest, NAMESPACE)

    svc = wait_condition(kubectl, "SpecValid", "False", name="bad")
    cond = condition(svc, "SpecValid")
    assert cond is not None and cond["reason"] == "InvalidSpec"
    assert "spec.engine.tensorParallelSize" in cond["message"]
    assert "Fix:" in cond["message"]
    assert condition(svc, "Ready")["status"] == "False"  # type: ignore[index]
    assert kubectl.get("deployment", "bad", NAMESPACE) is None

    # A permanent error: the handler ran once and is not retried (no retry storm).
    operator.wait_log("failed permanently")
    time.sleep(5)  # a retried handler (TemporaryError, crash) would have run again by now
    log = operator.log()
    assert log.count("Handler 'reconcile' failed") == 1, log
    assert sum(line.startswith("Invalid spec:") for line in log.splitlines()) == 1, log
    events = kubectl.get("events", namespace=NAMESPACE) or {}
    assert any(e["reason"] == "InvalidSpec" and e["type"] == "Warning"
               for e in events.get("items", []))

    # Fixing the spec heals it.
    kubectl.run("patch", "llms", "bad", "-n", NAMESPACE, "--type", "merge",
                "-p", json.dumps({"spec": {"engine": {"tensorParallelSize": 2}}}))
    svc = wait_condition(kubectl, "SpecValid", "True", name="bad", generation=2)
    assert svc["status"]["plan"]["tensorParallelSize"] == 2
    wait_deployment(kubectl, "bad")


def test_restart_writes_nothing_for_unchanged_children(
    api: EmulatorProcess, kubectl: Kubectl, operator: OperatorProcess
) -> None:
    kubectl.apply(EXAMPLE, NAMESPACE)
    wait_deployment(kubectl)
    wait_condition(kubectl, "Planned", "True", generation=1)
    operator.wait_log("Creation is processed")

    def versions() -> dict[str, str]:
        out = {}
        for kind in ("deployment", "service", "llms"):
            obj = kubectl.get(kind, NAME, NAMESPACE)
            assert obj is not None
            out[kind] = obj["metadata"]["resourceVersion"]
        return out

    before = versions()
    operator.stop()
    operator.start()
    operator.wait_log("Resuming is processed", timeout=30)
    assert versions() == before  # nothing was created, replaced or patched


def test_deleted_deployment_is_recreated(kubectl: Kubectl, operator: OperatorProcess) -> None:
    kubectl.apply(EXAMPLE, NAMESPACE)
    first = wait_deployment(kubectl)
    wait_condition(kubectl, "Planned", "True", generation=1)

    kubectl.run("delete", "deployment", NAME, "-n", NAMESPACE)

    def recreated() -> dict[str, Any] | None:
        dep = kubectl.get("deployment", NAME, NAMESPACE)
        return dep if dep and dep["metadata"]["uid"] != first["metadata"]["uid"] else None

    dep = wait_for(recreated, 30, "the Deployment to be re-created")
    assert container_of(dep)["args"] == container_of(first)["args"]


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES_DIR.glob("*.yaml")))
def test_every_example_reconciles(
    example: str, api: EmulatorProcess, kubectl: Kubectl, operator: OperatorProcess
) -> None:
    path = EXAMPLES_DIR / example
    kubectl.apply(path, NAMESPACE)
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc or doc.get("kind") != "LLMService":
            continue
        name = doc["metadata"]["name"]
        svc = wait_condition(kubectl, "Planned", "True", name=name)
        plan = svc["status"]["plan"]
        expected = rendered(path, NAMESPACE)
        if (doc["spec"].get("tuning") or {}).get("placement") == "BeforeServing":
            # The tuning Job first; no Deployment until it has finished (no Job controller
            # here: the loop in real containers is tests/nodes/test_loop_in_containers.py).
            wait_for(lambda n=name: (c := condition(kubectl.get("llms", n, NAMESPACE),
                                                    "Ready")) and
                     c["reason"] == "TuningBeforeServing" and c, 60, "TuningBeforeServing")
            jobs = (kubectl.get("jobs", namespace=NAMESPACE) or {}).get("items") or []
            assert any(j["metadata"]["name"].startswith(f"{name}-tune-") for j in jobs)
            assert kubectl.get("deployment", name, NAMESPACE) is None
        elif plan["nodesPerReplica"] == 1:
            dep = wait_deployment(kubectl, name)
            assert container_of(dep)["args"] == container_of(expected["Deployment"])["args"]
        else:
            # One replica over several nodes runs as a LeaderWorkerSet, a CRD the
            # emulated server does not serve: the status must say so.
            ready = wait_for(lambda n=name: (c := condition(kubectl.get("llms", n, NAMESPACE),
                                                              "Ready")) and
                             c["reason"] == "APINotServed" and c, 30, "APINotServed")
            assert "LeaderWorkerSet" in ready["message"]

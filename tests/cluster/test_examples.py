"""Every example in ``examples/`` on the REAL control plane: ``kubectl apply
--validate=strict`` of the file as a user would, the operator (the chart's ServiceAccount)
plans it and writes its children, and the real API server stores them as rendered, with
nothing pruned or defaulted away from what ``llm-operator render`` prints.

The emulated version of this (tests/integration/test_operator.py) cannot see the server's
admission, pruning or discovery; this one can. An example with
spec.routing.inferencePool gets the Gateway API Inference Extension's release CRD
installed first (``llm_operator_sandbox.inference_extension``). A multi-node example needs
the LeaderWorkerSet API: first without it (the real discovery: the service says so and keeps
its user's spec), then with a LeaderWorkerSet CRD installed (no LWS controller runs here;
its schema is the project's typed copy of LWS's fields, tests/unit/data/schemas/
leaderworkerset.yaml) the operator's next retry writes the LeaderWorkerSet, and the server
keeps every field of it. (No example in examples/ spans nodes; that test uses the 405B
spec of tests/unit/test_rendering.py.)
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator.api.constants import ANNOTATION_SPEC_HASH
from llm_operator.controller.reconcile import MISSING_API_RETRY_SECONDS
from llm_operator_sandbox.cluster import Installed, LocalCluster
from llm_operator_sandbox.inference_extension import install_crd, remove_crd
from tests.support.emulator import EXAMPLES_DIR, OperatorProcess, operator_command, wait_for
from tests.support.schemas import load_schema
from tests.unit.test_rendering import LLAMA_405B_SPEC

from .conftest import ClusterKubectl
from .test_control_plane import condition, forbidden_lines

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

EXAMPLES = sorted(p.name for p in EXAMPLES_DIR.glob("*.yaml"))
LWS_CRD_NAME = "leaderworkersets.leaderworkerset.x-k8s.io"


def services_of(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "LLMService"]


def rendered(path: Path, namespace: str) -> list[dict[str, Any]]:
    """What ``llm-operator render`` prints for ``path`` in ``namespace``."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        doc.setdefault("metadata", {})["namespace"] = namespace
    proc = subprocess.run([*operator_command(), "render", "-"], input=yaml.safe_dump_all(docs),
                          text=True, capture_output=True, timeout=60, check=True)
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def kept(rendered_part: Any, stored_part: Any, where: str = "") -> list[str]:
    """Paths of what the renderer wrote that the stored object does not carry as written
    (pruned by the schema or changed by admission). Fields the server adds are fine; so is
    the spec-hash annotation, which hashes the owner reference the operator adds (the
    offline render has no owner's uid)."""
    if where == f".metadata.annotations.{ANNOTATION_SPEC_HASH}":
        return []
    if isinstance(rendered_part, dict):
        if not isinstance(stored_part, dict):
            return [where or "/"]
        return [p for k, v in rendered_part.items()
                for p in kept(v, stored_part.get(k), f"{where}.{k}")]
    if isinstance(rendered_part, list):
        if not isinstance(stored_part, list) or len(stored_part) != len(rendered_part):
            return [where]
        return [p for i, (a, b) in enumerate(zip(rendered_part, stored_part, strict=True))
                for p in kept(a, b, f"{where}[{i}]")]
    return [] if rendered_part == stored_part or str(rendered_part) == str(stored_part) else [
        f"{where}: {rendered_part!r} -> {stored_part!r}"]


def ready_reason(admin: ClusterKubectl, name: str, namespace: str) -> str | None:
    svc = admin.run("get", "llms", name, "-n", namespace, "-o", "yaml", check=False)
    return condition(yaml.safe_load(svc.stdout or "{}"), "Ready").get("reason")


def lws_crd() -> dict[str, Any]:
    """A LeaderWorkerSet CRD whose schema is the project's typed copy of LWS's fields,
    made structural (a CRD takes neither ``const`` nor ``additionalProperties: false``:
    the server prunes unknown fields instead, which :func:`kept` would then catch)."""
    def structural(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: structural(v) for k, v in node.items()
                   if not (k == "additionalProperties" and v is False)}
            if "const" in out:
                out["enum"] = [out.pop("const")]
            if "enum" in out:
                out.setdefault("type", "string")
            if out.get("type") == "object" and "properties" not in out:
                out["x-kubernetes-preserve-unknown-fields"] = True  # a pod template, ...
            if out.get("type") == "array" and "items" not in out:
                out["items"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            if "anyOf" in out:  # int-or-string, as Kubernetes spells it in a CRD
                out = {"x-kubernetes-int-or-string": True, **out}
                out["anyOf"] = [{"type": a["type"]} for a in out["anyOf"]]
            return out
        if isinstance(node, list):
            return [structural(v) for v in node]
        return node
    schema = structural(load_schema("leaderworkerset"))
    schema["properties"]["metadata"] = {"type": "object"}
    schema["properties"]["status"] = {"type": "object",
                                      "x-kubernetes-preserve-unknown-fields": True}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": LWS_CRD_NAME},
            "spec": {"group": "leaderworkerset.x-k8s.io", "scope": "Namespaced",
                     "names": {"plural": "leaderworkersets", "singular": "leaderworkerset",
                               "kind": "LeaderWorkerSet", "listKind": "LeaderWorkerSetList",
                               "shortNames": ["lws"]},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema},
                                   "subresources": {"status": {}}}]}}


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_is_stored_as_rendered(example: str, cluster: LocalCluster,
                                             admin: ClusterKubectl, installed: Installed,
                                             namespace: str,
                                             operator: OperatorProcess) -> None:
    path = EXAMPLES_DIR / example
    expected = rendered(path, namespace)
    pool = any(d["kind"] == "InferencePool" for d in expected)
    if pool:  # spec.routing.inferencePool: the extension's real CRD, as its release ships it
        install_crd(admin.binary, cluster.admin_kubeconfig)
        admin.run("api-resources", "--cached=false")  # kubectl's discovery cache
    try:
        _stored_as_rendered(example, path, expected, admin, namespace, operator)
    finally:
        if pool:
            admin.run("delete", "-f", str(path), "-n", namespace, "--wait=false", check=False)
            remove_crd(admin.binary, cluster.admin_kubeconfig)


def _stored_as_rendered(example: str, path: Path, expected: list[dict[str, Any]],
                        admin: ClusterKubectl, namespace: str,
                        operator: OperatorProcess) -> None:
    admin.apply(path, namespace)
    for svc in services_of(path):
        name = svc["metadata"]["name"]

        def planned(n: str = name) -> dict[str, Any] | None:
            obj = yaml.safe_load(admin.run("get", "llms", n, "-n", namespace, "-o", "yaml",
                                           check=False).stdout or "{}")
            cond = condition(obj, "Planned")
            return obj if cond.get("status") == "True" else None
        status = wait_for(planned, 60, f"{example}: {name} Planned")["status"]
        mine = [d for d in expected if d["metadata"].get("labels", {}).get(
            "llmops.dev/llmservice", d["metadata"]["name"]) == name
            and d["kind"] != "LLMService"]
        if (svc["spec"].get("tuning") or {}).get("placement") == "BeforeServing":
            # The tuning Job first; the workload only once it has a result.
            def job(n: str = name) -> dict[str, Any] | None:
                jobs = admin.items("jobs", namespace)
                return next((j for j in jobs if j["metadata"]["name"].startswith(f"{n}-tune-")),
                            None)
            stored_job = wait_for(job, 60, f"{example}: the tuning Job of {name}")
            assert [r["kind"] for r in stored_job["metadata"]["ownerReferences"]] == [
                "LLMService"]
            assert ready_reason(admin, name, namespace) == "TuningBeforeServing"
            mine = [d for d in mine if d["kind"] != "Deployment"]
        else:
            assert status["plan"]["nodesPerReplica"] == 1, "a multi-node example: see below"
        for want in mine:
            if want["kind"] == "Job":
                continue  # named by its fingerprint; checked above
            got = wait_for(lambda w=want: admin.get(w["kind"], w["metadata"]["name"],
                                                     namespace), 60,
                           f"{example}: {want['kind']} {want['metadata']['name']}")
            lost = kept({k: want[k] for k in ("metadata", "spec", "data") if k in want}, got)
            assert lost == [], f"{example}: {want['kind']} stored differently: {lost}"
            assert [r["uid"] for r in got["metadata"]["ownerReferences"]] == [
                admin.get("llms", name, namespace)["metadata"]["uid"]]
    assert forbidden_lines(operator.log()) == []
    log = operator.log()
    assert "Traceback" not in log, log[max(0, log.find("Traceback") - 1500):][:4000]


def test_a_multi_node_service_waits_for_the_lws_api_then_gets_its_leader_worker_set(
        admin: ClusterKubectl, installed: Installed, namespace: str,
        operator: OperatorProcess, tmp_path: Path) -> None:
    name = "llama-405b"
    path = tmp_path / "llama-405b.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
                                    "metadata": {"name": name}, "spec": LLAMA_405B_SPEC}))
    expected = next(d for d in rendered(path, namespace) if d["kind"] == "LeaderWorkerSet")
    crd_file = tmp_path / "lws-crd.yaml"
    crd_file.write_text(yaml.safe_dump(lws_crd()))
    try:
        admin.apply(path, namespace)
        wait_for(lambda: ready_reason(admin, name, namespace) == "APINotServed", 60,
                 "APINotServed before the LWS CRD exists")
        admin.apply(crd_file)
        admin.run("wait", "--for=condition=Established", f"crd/{LWS_CRD_NAME}",
                  "--timeout=30s")
        admin.run("api-resources", "--cached=false")  # kubectl's discovery cache
        # The operator retries a missing API every MISSING_API_RETRY_SECONDS.
        try:
            got = wait_for(lambda: admin.get("LeaderWorkerSet", expected["metadata"]["name"],
                                             namespace),
                           MISSING_API_RETRY_SECONDS + 60,
                           "the LeaderWorkerSet once its API exists")
        except AssertionError as exc:
            log = [line for line in operator.log().splitlines()
                   if "'pod-scheduling'" not in line and "'workload-status'" not in line]
            raise AssertionError(f"{exc}; the operator's log:\n" + "\n".join(log[-40:])
                                 ) from None
        lost = kept({"metadata": copy.deepcopy(expected["metadata"]), "spec": expected["spec"]},
                    got)
        assert lost == [], f"LeaderWorkerSet stored differently: {lost}"
        wait_for(lambda: ready_reason(admin, name, namespace) != "APINotServed", 60,
                 "the Ready condition to stop saying APINotServed")
        assert forbidden_lines(operator.log()) == []
    finally:
        admin.run("delete", "-f", str(path), "-n", namespace, "--wait=false", check=False)
        admin.run("delete", "crd", LWS_CRD_NAME, "--wait=false", check=False)

"""spec.routing.inferencePool on the REAL control plane (issue 61), with the REAL
InferencePool CRD of the Gateway API Inference Extension's release
(``llm_operator_sandbox.inference_extension``: the file its Go module ships, checksum
pinned), and the operator running as the chart's ServiceAccount (its RBAC and the
admission policy on its writes enforced):

- without the CRD the LLMService says so in InferencePoolReady, with the fix, and serves
  on (its Deployment and Service are written, Ready is not about the pool);
- once the CRD is installed, the operator's retry writes the pool, and the API server
  stores it as ``llm-operator render`` prints it (its schema and CEL rules accept it,
  nothing is pruned), owned by the LLMService, named in status.inferencePool;
- turning the field off deletes the pool.

The server pods never run (an H100 the local nodes do not have): the pool is what is
checked, not vLLM.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator.controller.reconcile import MISSING_API_RETRY_SECONDS
from llm_operator_sandbox.cluster import Installed, LocalCluster
from llm_operator_sandbox.inference_extension import (
    crd_path,
    crd_present,
    install_crd,
    remove_crd,
)
from tests.support.emulator import OperatorProcess, wait_for
from tests.support.schemas import load_schema

from .conftest import ClusterKubectl
from .test_control_plane import condition, forbidden_lines, tiny_service
from .test_examples import kept, rendered

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

PICKER = {"name": "vllm-epp", "port": {"number": 9002}, "failureMode": "FailOpen"}


@pytest.fixture
def no_pool_crd(cluster: LocalCluster, admin: ClusterKubectl, installed: Installed
                ) -> Iterator[None]:
    """The extension's CRD absent at the start, and removed again at the end."""
    if not crd_present():
        pytest.fail("the Inference Extension's CRD is not fetched: run "
                    "`bash tools/setup.sh --controllers` (tools/test.sh does)")
    remove_crd(admin.binary, cluster.admin_kubeconfig)
    yield
    remove_crd(admin.binary, cluster.admin_kubeconfig)


def test_the_unit_tiers_schema_copy_matches_the_release_crd() -> None:
    """tests/unit/data/schemas/inferencepool.yaml (the unit tier validates every rendered
    pool against it) says what the release's CRD says, field by field."""
    if not crd_present():
        pytest.fail("run `bash tools/setup.sh --controllers`")
    crd = yaml.safe_load(crd_path().read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    real = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    copy_ = load_schema("inferencepool")["properties"]["spec"]
    keys = ("type", "minimum", "maximum", "minLength", "maxLength", "pattern", "enum",
            "minItems", "maxItems", "minProperties", "maxProperties", "required")

    def compare(mine: dict[str, Any], theirs: dict[str, Any], where: str) -> list[str]:
        out = [f"{where}.{k}: {mine[k]!r} != {theirs.get(k)!r}" for k in keys
               if k in mine and mine[k] != theirs.get(k)]
        for name, sub in (mine.get("properties") or {}).items():
            if name not in (theirs.get("properties") or {}):
                out.append(f"{where}.{name}: not in the CRD")
            else:
                out += compare(sub, theirs["properties"][name], f"{where}.{name}")
        for part in ("items", "additionalProperties"):
            if isinstance(mine.get(part), dict):
                out += compare(mine[part], theirs.get(part) or {}, f"{where}.{part}")
        return out
    assert compare(copy_, real, "spec") == []
    rules = [r["rule"] for r in real["properties"]["endpointPickerRef"].get(
        "x-kubernetes-validations") or []]
    assert rules == ["self.kind != 'Service' || has(self.port)"]


def pool_service(name: str, enabled: bool) -> dict[str, Any]:
    doc = tiny_service(name)
    doc["spec"]["gpus"] = {**doc["spec"]["gpus"], "product": "H100"}  # never scheduled here
    doc["spec"]["routing"] = {"inferencePool": {"enabled": enabled,
                                                "endpointPickerRef": PICKER}}
    return doc


def test_the_pool_waits_for_its_crd_is_stored_as_rendered_and_goes_when_turned_off(
        cluster: LocalCluster, admin: ClusterKubectl, installed: Installed, namespace: str,
        no_pool_crd: None, operator: OperatorProcess, tmp_path: Path) -> None:
    name = "routed"
    path = tmp_path / "routed.yaml"
    path.write_text(yaml.safe_dump(pool_service(name, True)))
    admin.apply(path, namespace)

    def llms() -> dict[str, Any]:
        return admin.get("llms", name, namespace) or {}

    # 1. No CRD: the condition with the fix; the service's own children are written.
    cond = wait_for(lambda: (c := condition(llms(), "InferencePoolReady")).get("reason")
                    == "InferencePoolCRDMissing" and c, 60, "InferencePoolCRDMissing")
    assert cond["status"] == "False"
    assert "kubectl apply -f https://github.com/kubernetes-sigs/gateway-api-inference-" \
           "extension/releases/download/v1.6.2/manifests.yaml" in cond["message"]
    assert "spec.routing.inferencePool.enabled: false" in cond["message"]
    assert admin.get("deployment", name, namespace) is not None
    assert admin.get("service", name, namespace) is not None
    assert condition(llms(), "Ready").get("reason") != "APINotServed"
    assert "inferencePool" not in (llms().get("status") or {})
    events = admin.items("events", namespace)
    assert any(e.get("reason") == "InferencePoolCRDMissing" for e in events), [
        e.get("reason") for e in events]

    # 2. The CRD installed: the operator's retry writes the pool as rendered.
    install_crd(admin.binary, cluster.admin_kubeconfig)
    admin.run("api-resources", "--cached=false")  # kubectl's discovery cache
    try:
        got = wait_for(lambda: admin.get("inferencepool", name, namespace),
                       MISSING_API_RETRY_SECONDS + 60, "the InferencePool once its CRD exists")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the operator's log:\n{operator.log()[-6000:]}") from None
    want = next(d for d in rendered(path, namespace) if d["kind"] == "InferencePool")
    lost = kept({"metadata": copy.deepcopy(want["metadata"]), "spec": want["spec"]}, got)
    assert lost == [], f"InferencePool stored differently: {lost}"
    svc_obj = llms()
    assert [r["uid"] for r in got["metadata"]["ownerReferences"]] == [
        svc_obj["metadata"]["uid"]]
    service = admin.get("service", name, namespace)
    assert service is not None
    assert got["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert got["spec"]["targetPorts"] == [{"number": 8000}]
    # The CRD's defaults, applied by the real API server to what was left unset.
    assert got["spec"]["endpointPickerRef"] == {**PICKER, "group": "", "kind": "Service"}
    assert got["spec"]["appProtocol"] == "http"
    status = wait_for(lambda: (s := llms().get("status") or {}).get("inferencePool") and s,
                      60, "status.inferencePool")
    assert status["inferencePool"] == name
    assert condition(llms(), "InferencePoolReady")["reason"] == "Written"
    wide = admin.run("get", "llms", name, "-n", namespace, "-o", "wide").stdout
    assert "POOL" in wide.splitlines()[0] and name in wide.splitlines()[1], wide

    # The schema is the real one: its CEL rule refuses a picker Service without a port.
    bad = copy.deepcopy(got)
    bad["metadata"] = {"name": "hand-written", "namespace": namespace}
    del bad["spec"]["endpointPickerRef"]["port"]
    proc = admin.run("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(bad),
                     check=False)
    assert proc.returncode != 0 and "port is required" in proc.stderr, proc.stderr

    # 3. Turned off: the pool is deleted, the status says so.
    path.write_text(yaml.safe_dump(pool_service(name, False)))
    admin.apply(path, namespace)
    wait_for(lambda: admin.get("inferencepool", name, namespace) is None, 60,
             "the InferencePool deleted once turned off")
    wait_for(lambda: condition(llms(), "InferencePoolReady").get("reason") == "NotRequested",
             60, "InferencePoolReady NotRequested")
    assert "inferencePool" not in (llms().get("status") or {})

    assert forbidden_lines(operator.log()) == []
    log = operator.log()
    assert "Traceback" not in log, log[max(0, log.find("Traceback") - 1500):][:4000]

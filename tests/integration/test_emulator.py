"""The fixes the project makes to kmock's emulated API server, checked through the real
kubectl and raw HTTP (what kopf and kubectl rely on; see llm_operator_sandbox.emulator)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_operator_sandbox.emulator import (
    EmulatorThread,
    apply_patch,
    field_paths,
    jsonpath_value,
    match_labels,
    strategic_merge_patch,
)
from tests.support.emulator import CRD_PATH, EXAMPLES_DIR, Kubectl, wait_for

LLMS = "/apis/llmops.dev/v1alpha1/namespaces/default/llmservices"


@pytest.fixture
def server() -> Iterator[EmulatorThread]:
    with EmulatorThread() as api:
        yield api


@pytest.fixture
def kubectl(server: EmulatorThread, tmp_path: Path) -> Kubectl:
    k = Kubectl(server.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path / "cache")
    k.apply(CRD_PATH)
    return k


def http(server: EmulatorThread, method: str, path: str, body: Any = None,
         content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method,
                                 headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_kubectl_round_trip_stamps_and_bumps(kubectl: Kubectl) -> None:
    kubectl.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml")
    svc = kubectl.get("llms", "llama-3-1-8b")
    assert svc is not None
    meta = svc["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["generation"] == 1
    rv = int(meta["resourceVersion"])
    assert svc["spec"]["replicas"] == 1  # CRD schema default applied on create

    kubectl.run("patch", "llms", "llama-3-1-8b", "--type", "merge",
                "-p", '{"spec":{"replicas":2}}')
    after = kubectl.get("llms", "llama-3-1-8b")
    assert after is not None
    assert int(after["metadata"]["resourceVersion"]) > rv
    assert after["metadata"]["generation"] == 2  # spec changed
    assert after["metadata"]["uid"] == meta["uid"]

    # Re-applying the same manifest changes nothing: no new resourceVersion.
    out = kubectl.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml")
    again = kubectl.get("llms", "llama-3-1-8b")
    assert again is not None
    assert "unchanged" in out
    assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]

    # Metadata-only changes do not move the generation.
    kubectl.run("label", "llms", "llama-3-1-8b", "team=ml")
    labelled = kubectl.get("llms", "llama-3-1-8b")
    assert labelled is not None
    assert labelled["metadata"]["generation"] == again["metadata"]["generation"]
    assert kubectl.run("get", "llms", "-l", "team=ml", "-o", "name").stdout.strip()
    assert not kubectl.run("get", "llms", "-l", "team=other", "-o", "name").stdout.strip()

    kubectl.run("delete", "llms", "llama-3-1-8b")
    assert kubectl.get("llms", "llama-3-1-8b") is None


def test_lists_have_kind_and_printer_columns(server: EmulatorThread, kubectl: Kubectl) -> None:
    kubectl.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml")
    code, body = http(server, "GET", LLMS)
    assert code == 200
    assert body["kind"] == "LLMServiceList" and body["apiVersion"] == "llmops.dev/v1alpha1"
    assert body["metadata"]["resourceVersion"].isdigit()
    header = kubectl.run("get", "llms").stdout.splitlines()[0].split()
    assert header[:3] == ["NAME", "MODEL", "GPUS"]  # the CRD's printer columns
    assert "NAME" in kubectl.run("get", "namespaces").stdout  # GET /api/v1/namespaces


def test_status_subresource_and_generation(server: EmulatorThread, kubectl: Kubectl) -> None:
    kubectl.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml")
    path = LLMS + "/llama-3-1-8b"
    # A write to the object does not touch status; a write to /status only status.
    code, body = http(server, "PATCH", path, {"status": {"x": 1}, "spec": {"replicas": 3}},
                      "application/merge-patch+json")
    assert code == 200 and "status" not in body and body["metadata"]["generation"] == 2
    code, body = http(server, "PATCH", path + "/status",
                      {"status": {"endpoint": "e"}, "spec": {"replicas": 9}},
                      "application/merge-patch+json")
    assert code == 200 and body["status"] == {"endpoint": "e"}
    assert body["spec"]["replicas"] == 3 and body["metadata"]["generation"] == 2


def test_status_fields_the_crd_does_not_declare_are_pruned(server: EmulatorThread,
                                                          kubectl: Kubectl) -> None:
    """As on a cluster: a status field the CRD's schema does not know is dropped (so an
    operator that writes one loses it there too), free-form blocks keep theirs."""
    kubectl.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml")
    path = LLMS + "/llama-3-1-8b/status"
    code, body = http(server, "PATCH", path,
                      {"status": {"endpoint": "e", "undeclared": 1,
                                  "adaptation": {"anything": {"kept": True}}}},
                      "application/merge-patch+json")
    assert code == 200, body
    assert body["status"] == {"endpoint": "e", "adaptation": {"anything": {"kept": True}}}


def test_json_patch_test_on_resource_version(server: EmulatorThread, kubectl: Kubectl) -> None:
    """kopf adds its finalizer with a JSON patch guarded by a resourceVersion test."""
    kubectl.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml")
    path = LLMS + "/llama-3-1-8b"
    _, obj = http(server, "GET", path)
    rv = obj["metadata"]["resourceVersion"]
    stale = [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
             {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]}]
    code, body = http(server, "PATCH", path, stale, "application/json-patch+json")
    assert code == 422 and body["kind"] == "Status"
    fresh = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
             {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]}]
    code, body = http(server, "PATCH", path, fresh, "application/json-patch+json")
    assert code == 200 and body["metadata"]["finalizers"] == ["x/y"]

    # With a finalizer, DELETE only marks; removing the finalizer deletes.
    code, body = http(server, "DELETE", path)
    assert code == 200 and body["metadata"]["deletionTimestamp"]
    assert http(server, "GET", path)[0] == 200
    http(server, "PATCH", path, {"metadata": {"finalizers": None}},
         "application/merge-patch+json")
    assert http(server, "GET", path)[0] == 404


def test_put_with_stale_resource_version_conflicts(server: EmulatorThread,
                                                   kubectl: Kubectl) -> None:
    kubectl.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml")
    path = LLMS + "/llama-3-1-8b"
    _, obj = http(server, "GET", path)
    obj["spec"]["replicas"] = 4
    assert http(server, "PUT", path, obj)[0] == 200
    obj["spec"]["replicas"] = 5  # still the old resourceVersion
    code, body = http(server, "PUT", path, obj)
    assert code == 409 and body["reason"] == "Conflict"
    assert http(server, "POST", LLMS, obj)[1]["reason"] == "AlreadyExists"


def test_watch_resumes_from_a_resource_version(server: EmulatorThread,
                                               kubectl: Kubectl) -> None:
    kubectl.apply(EXAMPLES_DIR / "llama-3.1-8b-l4.yaml")
    code, listing = http(server, "GET", LLMS)
    since = listing["metadata"]["resourceVersion"]
    kubectl.run("patch", "llms", "llama-3-1-8b", "--type", "merge",
                "-p", '{"spec":{"replicas":2}}')
    events: list[dict[str, Any]] = []

    def watch() -> None:
        url = f"{server.url}{LLMS}?watch=true&resourceVersion={since}&timeoutSeconds=2"
        with urllib.request.urlopen(url, timeout=10) as resp:
            for line in resp:
                events.append(json.loads(line))

    reader = threading.Thread(target=watch)
    reader.start()
    reader.join(15)
    # Only what happened after `since`: the patch, not the creation.
    assert [e["type"] for e in events] == ["MODIFIED"]
    assert events[0]["object"]["spec"]["replicas"] == 2


def test_objects_need_an_existing_namespace(server: EmulatorThread, kubectl: Kubectl) -> None:
    manifest = (EXAMPLES_DIR / "llama-3.1-8b-l4.yaml")
    proc = kubectl.run("apply", "--validate=false", "-n", "nowhere", "-f", str(manifest),
                       check=False)
    assert proc.returncode != 0 and 'namespaces "nowhere" not found' in proc.stderr
    kubectl.create_namespace("nowhere")
    kubectl.apply(manifest, "nowhere")
    wait_for(lambda: kubectl.get("llms", "llama-3-1-8b", "nowhere"), 5, "the LLMService")


def test_helpers() -> None:
    assert match_labels("a=b,c in (x, y),!d", {"a": "b", "c": "y"})
    assert not match_labels("a!=b", {"a": "b"})
    assert jsonpath_value({"s": {"c": [{"type": "Ready", "status": "True"}]}},
                          '.s.c[?(@.type=="Ready")].status') == "True"
    merged = strategic_merge_patch(
        {"containers": [{"name": "a", "image": "1", "args": ["x"]}, {"name": "b"}]},
        {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
         "containers": [{"name": "a", "image": "2"}]})
    assert merged == {"containers": [{"name": "a", "image": "2", "args": ["x"]}, {"name": "b"}]}


APPLY = "application/apply-patch+yaml"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"


def deployment(image: str, env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": image}
    if env is not None:
        container["env"] = env
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "1"}},
                     "template": {"metadata": {"labels": {"a": "1"}},
                                  "spec": {"containers": [container]}}}}


def test_server_side_apply_keeps_others_fields_and_drops_its_own(
        server: EmulatorThread) -> None:
    path = DEPLOYMENTS + "/d?fieldManager=op&force=true"
    code, created = http(server, "PATCH", path, deployment("i1", [{"name": "X", "value": "1"}]),
                         APPLY)
    assert code == 201 and created["metadata"]["generation"] == 1
    assert http(server, "PATCH", DEPLOYMENTS + "/d", deployment("i1"), APPLY)[0] == 400
    # Another manager (kubectl rollout restart) annotates the pod template.
    http(server, "PATCH", DEPLOYMENTS + "/d", {"spec": {"template": {"metadata": {
        "annotations": {"kubectl.kubernetes.io/restartedAt": "t"}}}}},
         "application/strategic-merge-patch+json")
    code, obj = http(server, "PATCH", path, deployment("i2"), APPLY)  # env no longer sent
    assert code == 200
    template = obj["spec"]["template"]
    assert template["metadata"]["annotations"] == {"kubectl.kubernetes.io/restartedAt": "t"}
    assert template["spec"]["containers"] == [{"name": "c", "image": "i2"}]
    # Applying the same again is a no-op: no new resourceVersion.
    assert http(server, "PATCH", path, deployment("i2"), APPLY)[1]["metadata"][
        "resourceVersion"] == obj["metadata"]["resourceVersion"]


def test_apply_patch_removes_only_what_the_manager_dropped() -> None:
    before = deployment("i", [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}])
    current = apply_patch({}, before, set())
    current["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "Z",
                                                                        "value": "3"})
    after = apply_patch(current, deployment("i", [{"name": "X", "value": "1"}]),
                        field_paths(before))
    assert after["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "X", "value": "1"}, {"name": "Z", "value": "3"}]  # Y was ours, Z is not


def test_scale_subresource_and_garbage_collection(server: EmulatorThread) -> None:
    http(server, "PATCH", DEPLOYMENTS + "/d?fieldManager=op", deployment("i"), APPLY)
    code, scale = http(server, "PATCH", DEPLOYMENTS + "/d/scale", {"spec": {"replicas": 3}},
                       "application/merge-patch+json")
    assert code == 200 and scale["kind"] == "Scale" and scale["status"]["selector"] == "a=1"
    _, owner = http(server, "GET", DEPLOYMENTS + "/d")
    assert owner["spec"]["replicas"] == 3
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "dep", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                            "name": "d", "uid": owner["metadata"]["uid"]}]}}
    assert http(server, "POST", "/api/v1/namespaces/default/configmaps", cm)[0] == 201
    http(server, "DELETE", DEPLOYMENTS + "/d")
    assert http(server, "GET", "/api/v1/namespaces/default/configmaps/dep")[0] == 404


def test_injected_faults(server: EmulatorThread) -> None:
    http(server, "POST", "/emulator/faults",
         {"method": "GET", "plural": "namespaces", "name": "default", "code": 403})
    code, body = http(server, "GET", "/api/v1/namespaces/default")
    assert code == 403 and body["reason"] == "Forbidden"
    assert http(server, "GET", "/api/v1/namespaces/default")[0] == 200  # once only

"""The pure parts of the apply step: what differs, and the body that replaces it."""

from __future__ import annotations

from typing import Any

from llm_operator.controller.kube import (
    needs_write,
    owned_by,
    owner_name,
    replacement,
    resource_path,
)


def child(hash_: str = "h1", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "ml",
                     "labels": {"llmops.dev/llmservice": "llm", **labels},
                     "annotations": {"llmops.dev/spec-hash": hash_},
                     "ownerReferences": [{"uid": "u1", "kind": "LLMService",
                                          "apiVersion": "llmops.dev/v1alpha1",
                                          "name": "llm"}]},
        "spec": {"replicas": 1},
    }


def test_paths() -> None:
    assert resource_path("apps/v1", "Deployment", "ml", "x") == (
        "/apis/apps/v1/namespaces/ml/deployments/x")
    assert resource_path("v1", "Service", "ml") == "/api/v1/namespaces/ml/services"
    assert resource_path("llmops.dev/v1alpha1", "LLMService", "ml", "x", "status") == (
        "/apis/llmops.dev/v1alpha1/namespaces/ml/llmservices/x/status")


def test_unchanged_child_is_not_written() -> None:
    observed = child()
    observed["metadata"]["resourceVersion"] = "7"
    observed["metadata"]["labels"]["added-by-someone"] = "x"  # others' labels are fine
    observed["status"] = {"availableReplicas": 1}
    assert not needs_write(child(), observed)


def test_changes_that_need_a_write() -> None:
    assert needs_write(child(), None)
    assert needs_write(child("h2"), child("h1"))
    stripped = child()
    del stripped["metadata"]["labels"]["llmops.dev/llmservice"]
    assert needs_write(child(), stripped)
    orphan = child()
    orphan["metadata"]["ownerReferences"] = []
    assert needs_write(child(), orphan)


def test_replacement_keeps_what_others_own() -> None:
    observed = child("h1", team="ml")
    observed["metadata"]["resourceVersion"] = "7"
    observed["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "now"
    observed["metadata"]["finalizers"] = ["x/y"]
    body = replacement(child("h2"), observed)
    meta = body["metadata"]
    assert meta["resourceVersion"] == "7"  # the write is conditional
    assert meta["labels"]["team"] == "ml"
    assert meta["annotations"]["kubectl.kubernetes.io/restartedAt"] == "now"
    assert meta["annotations"]["llmops.dev/spec-hash"] == "h2"
    assert meta["finalizers"] == ["x/y"]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "llm"},
               "spec": {"ports": []}}
    kept = replacement(service, {"metadata": {}, "spec": {"clusterIP": "10.0.0.1"}})
    assert kept["spec"]["clusterIP"] == "10.0.0.1"


def test_ownership() -> None:
    assert owned_by(child(), "u1") and not owned_by(child(), "u2")
    assert owner_name(child()) == "llm"

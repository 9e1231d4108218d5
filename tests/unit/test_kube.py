"""The pure parts of the apply step: what differs, and which calls the client may make."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_operator.controller.kube import (
    UndeclaredAccessError,
    access_of,
    check_access,
    needs_write,
    owned_by,
    owner_name,
    resource_path,
    without_managed_fields,
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


def test_every_client_call_is_declared_for_rbac() -> None:
    # What the chart's RBAC is tested against (tests/chart/test_rbac.py): a call outside
    # CLIENT_ACCESS fails before it reaches a cluster that would answer 403.
    check_access("PATCH", "/apis/apps/v1/namespaces/ml/deployments/x")
    check_access("GET", "/api/v1/namespaces/ml/configmaps/llm-operator-tuning-cache")
    check_access("POST", "/api/v1/namespaces/ml/configmaps")
    check_access("GET", "/apis")  # discovery: no resource
    for method, path in (("PUT", "/apis/apps/v1/namespaces/ml/deployments/x"),
                         ("GET", "/api/v1/namespaces/ml/configmaps"),  # no list
                         ("GET", "/api/v1/namespaces/ml/secrets/token"),
                         ("GET", "/api/v1/namespaces/ml")):
        with pytest.raises(UndeclaredAccessError, match="CLIENT_ACCESS"):
            check_access(method, path)
    assert access_of("GET", "/apis/batch/v1/namespaces/ml/jobs", [("watch", "true")]) == (
        "watch", "batch", "jobs", None)
    assert access_of("PATCH", "/apis/llmops.dev/v1alpha1/namespaces/ml/llmservices/x/status"
                     ) == ("patch", "llmops.dev", "llmservices/status", "x")


def test_ownership() -> None:
    assert owned_by(child(), "u1") and not owned_by(child(), "u2")
    assert owner_name(child()) == "llm"


def test_the_index_body_drops_managed_fields_and_keeps_the_rest() -> None:
    """The body the operator keeps per service loses only metadata.managedFields; the
    caller's body is not changed, and the annotations kopf's diff-base lives in stay."""
    body = child()
    body["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update"}]
    body["status"] = {"plan": {"maxNumSeqs": 8}}
    slim = without_managed_fields(body)
    assert "managedFields" not in slim["metadata"]
    assert body["metadata"]["managedFields"]  # the original is left alone
    assert slim["metadata"]["annotations"] == body["metadata"]["annotations"]
    assert {k: v for k, v in slim.items() if k != "metadata"} == {
        k: v for k, v in body.items() if k != "metadata"}
    assert without_managed_fields({"kind": "X"}) == {"kind": "X", "metadata": {}}


def test_a_403_of_a_terminating_namespace_is_not_the_rbacs() -> None:
    """The API server refuses writes into a namespace being deleted with 403 and the
    NamespaceTerminating cause (seen on kube-apiserver 1.37 in the cluster tier); the
    operator must not report that as a verb its RBAC lacks (ChildForbidden)."""
    from llm_operator.controller.kube import ApiError

    terminating = json.dumps({
        "kind": "Status", "code": 403, "reason": "Forbidden",
        "message": 'services "nowhere" is forbidden: unable to create new content in '
                   "namespace t-1 because it is being terminated",
        "details": {"name": "nowhere", "kind": "services",
                    "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace",
                                "message": "namespace t-1 is being terminated"}]}})
    rbac = json.dumps({
        "kind": "Status", "code": 403, "reason": "Forbidden",
        "message": 'services "x" is forbidden: User "system:serviceaccount:a:b" cannot '
                   'create resource "services" in API group "" in the namespace "t-1"'})
    assert ApiError(403, terminating).namespace_terminating
    assert not ApiError(403, rbac).namespace_terminating
    assert not ApiError(500, terminating).namespace_terminating


def test_a_404_of_a_deleted_namespace_is_told_from_a_missing_object() -> None:
    """A write into a namespace deleted meanwhile gets 404 with kind ``namespaces`` (seen
    on kube-apiserver 1.37: a tuning retry creating its Job after the test's namespace
    went); a 404 for the object itself is not that."""
    from llm_operator.controller.kube import ApiError

    gone = json.dumps({"kind": "Status", "status": "Failure", "code": 404,
                       "reason": "NotFound", "message": 'namespaces "t-1" not found',
                       "details": {"name": "t-1", "kind": "namespaces"}})
    job = json.dumps({"kind": "Status", "status": "Failure", "code": 404,
                      "reason": "NotFound", "message": 'jobs.batch "x" not found',
                      "details": {"name": "x", "group": "batch", "kind": "jobs"}})
    assert ApiError(404, gone).namespace_missing
    assert not ApiError(404, job).namespace_missing
    assert not ApiError(404, "not json").namespace_missing
    assert not ApiError(403, gone).namespace_missing

"""The sandbox's LeaderWorkerSet controller setup (pure part): its webhooks reach the
local manager by URL with the sandbox CA, the release's pod-webhook patches applied, and
the manager's configuration turns off what needs an in-cluster Service (issue 36)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from llm_operator_sandbox.lws import manager_config, webhook_configurations


def hook(name: str, path: str, resource: str) -> dict:
    return {"name": name, "admissionReviewVersions": ["v1"], "failurePolicy": "Fail",
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                         "path": path}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": [resource]}]}


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    """Files shaped as the release's config/webhook (manifests and kustomize patches)."""
    docs = [{"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
             "metadata": {"name": name},
             "webhooks": [hook(f"{p}lws.example", f"/{verb}-lws", "leaderworkersets"),
                          hook(f"{p}pod.example", f"/{verb}--v1-pod", "pods")]}
            for kind, name, p, verb in (
                ("MutatingWebhookConfiguration", "mutating-webhook-configuration", "m",
                 "mutate"),
                ("ValidatingWebhookConfiguration", "validating-webhook-configuration", "v",
                 "validate"))]
    (tmp_path / "webhooks.yaml").write_text(yaml.safe_dump_all(docs))
    for kind, verb, p in (("mutating", "mutate", "m"), ("validating", "validate", "v")):
        patched = hook(f"{p}pod.example", f"/{verb}--v1-pod", "pods")
        patched["objectSelector"] = {"matchExpressions": [
            {"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}
        (tmp_path / f"{kind}-patch.yaml").write_text(yaml.safe_dump(
            [{"op": "replace", "path": "/webhooks/1", "value": patched}]))
    return tmp_path


def test_webhooks_point_at_the_local_manager_with_the_ca(config_dir: Path) -> None:
    out = webhook_configurations(config_dir, "https://127.0.0.1:9443/", b"PEM")
    assert [d["kind"] for d in out] == ["MutatingWebhookConfiguration",
                                        "ValidatingWebhookConfiguration"]
    for doc in out:
        for h in doc["webhooks"]:
            cc = h["clientConfig"]
            assert "service" not in cc and base64.b64decode(cc["caBundle"]) == b"PEM"
            assert cc["url"].startswith("https://127.0.0.1:9443/") and "//" not in cc["url"][8:]
        pod = doc["webhooks"][1]
        # only the group's pods go through the webhook, as the release's patch says
        assert pod["objectSelector"]["matchExpressions"][0]["key"] == \
            "leaderworkerset.sigs.k8s.io/name"
        assert pod["clientConfig"]["url"].endswith("--v1-pod")


def test_an_unexpected_patch_is_refused(config_dir: Path) -> None:
    (config_dir / "mutating-patch.yaml").write_text(yaml.safe_dump(
        [{"op": "add", "path": "/webhooks/-", "value": {}}]))
    with pytest.raises(ValueError, match="unexpected patch"):
        webhook_configurations(config_dir, "https://127.0.0.1:1", b"x")


def test_the_manager_serves_on_loopback_without_cert_rotation(tmp_path: Path) -> None:
    cfg = manager_config(9443, tmp_path, 8080, 8081)
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:8081"

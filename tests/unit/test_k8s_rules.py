"""The API server's name and label rules that the emulated API server enforces: each
rule rejects what a cluster rejects and accepts what it accepts."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator_sandbox.k8s_rules import object_errors


def deployment(name: str = "web", labels: dict[str, str] | None = None,
               resources: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": labels or {"app": "web"}},
            "spec": {"template": {"metadata": {"labels": labels or {"app": "web"}},
                                  "spec": {"containers": [{"name": "vllm", "resources": {
                                      "limits": resources or {"nvidia.com/gpu": "1"}}}]}}}}


@pytest.mark.parametrize(("obj", "field"), [
    (deployment(name="Web"), "metadata.name"),
    (deployment(name="w" * 254), "metadata.name"),
    ({"kind": "Service", "metadata": {"name": "1web"}}, "metadata.name"),     # RFC 1035
    ({"kind": "Service", "metadata": {"name": "web.v1"}}, "metadata.name"),
    ({"kind": "Job", "metadata": {"name": "j" * 64}}, "metadata.name"),
    (deployment(labels={"app": "v" * 64}), "metadata.labels"),
    (deployment(labels={"app": "-web"}), "metadata.labels"),
    (deployment(labels={"bad key!": "x"}), "metadata.labels"),
    (deployment(resources={"gpu": "1"}), "resources.limits[gpu]"),
])
def test_what_a_real_api_server_refuses_is_found(obj: dict[str, Any], field: str) -> None:
    errors = object_errors(obj)
    assert errors and all(field in e for e in errors), errors


@pytest.mark.parametrize("obj", [
    deployment(name="web.v1-2"),
    deployment(name="w" * 253),
    deployment(labels={"llmops.dev/llmservice": "a" * 63, "empty": ""}),
    deployment(resources={"cpu": "4", "memory": "8Gi", "amd.com/gpu": "1"}),
    {"kind": "Service", "metadata": {"name": "a" * 63}},
])
def test_what_a_real_api_server_accepts_passes(obj: dict[str, Any]) -> None:
    assert object_errors(obj) == []

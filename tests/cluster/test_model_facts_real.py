"""Facts from the model itself on the REAL control plane (issue 33): the facts Job the
operator renders runs under Kubernetes' own Job controller and scheduler (the pod lands
on the CPU node: it asks for no GPU and tolerates no taint), the operator reads its
result as the chart's ServiceAccount (RBAC enforced: no Secret verb), and the token
reaches the pod from the Secret through the kubelet. The Hub is the local stand-in of
tests/support/hub.py, named to the Job by ``LLMOP_HF_ENDPOINT``; nothing reaches the
internet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator_sandbox.cluster import Installed
from tests.support.emulator import OperatorProcess, wait_for
from tests.support.hub import TOKEN, LocalHub

from .conftest import ClusterKubectl

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]
pytest.importorskip("huggingface_hub")


def service(name: str, model: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
            "metadata": {"name": name},
            "spec": {"model": {"name": model, "tokenSecretRef": {"name": secret}},
                     "gpus": {"product": "L4"},
                     "workload": {"concurrency": 8, "inputTokens": 512, "outputTokens": 128},
                     "tuning": {"mode": "Disabled"}}}


def planned(admin: ClusterKubectl, namespace: str, name: str) -> dict[str, Any]:
    svc = admin.get("llms", name, namespace) or {}
    return next((dict(c) for c in (svc.get("status") or {}).get("conditions") or []
                 if c["type"] == "Planned"), {})


@pytest.fixture
def hub() -> Iterator[LocalHub]:
    with LocalHub() as local:
        yield local


def test_gated_model_is_planned_from_its_config_json_with_the_secrets_token(
        installed: Installed, admin: ClusterKubectl, namespace: str, hub: LocalHub,
        tmp_path: Path) -> None:
    docs = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf"},
         "stringData": {"token": TOKEN}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-wrong"},
         "stringData": {"token": "hf_wrong"}},
        service("oss", "gated/gpt-oss-20b", "hf"),
    ]
    path = tmp_path / "docs.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    operator = OperatorProcess(installed.kubeconfig, tmp_path / "operator.log", [],
                               env={**installed.env, "LLMOP_METRICS_PORT": "0",
                                    "LLMOP_HF_ENDPOINT": hub.endpoint}).start()
    try:
        operator.wait_log("Initial authentication has finished", timeout=60)
        admin.apply(path, namespace)

        # The right token: planned from config.json (the gated repository answered the
        # pod, which had the Secret's token), rendered, its Job deleted once read.
        cond = wait_for(lambda: (c := planned(admin, namespace, "oss")).get(
            "status") == "True" and c, 120, "oss Planned=True")
        assert cond["reason"] == "PlanComputed"
        svc = admin.get("llms", "oss", namespace) or {}
        sources = svc["status"]["plan"]["factSources"]
        assert sources["architecture"] == "config.json"
        assert sources["weightBytes"] == "model.safetensors.index.json"
        assert admin.get("deployment", "oss", namespace) is not None
        cm = admin.get("configmap", "llm-operator-model-facts", namespace) or {}
        keys = [json.loads(v)["key"] for v in (cm.get("data") or {}).values()]
        assert keys == ["hub:gated/gpt-oss-20b@main"]

        # The wrong token, at a revision not cached yet (the cache is per namespace and
        # source: at main it would share oss's facts): refused, the Secret named.
        other = service("denied2", "gated/gpt-oss-20b", "hf-wrong")
        other["spec"]["model"]["revision"] = "a" * 40
        path.write_text(yaml.safe_dump(other))
        admin.apply(path, namespace)
        failed = wait_for(lambda: (c := planned(admin, namespace, "denied2")).get(
            "reason") == "ModelFactsFailed" and c, 120, "denied2 ModelFactsFailed")
        assert failed["status"] == "False"
        assert f"Secret {namespace}/hf-wrong (key token)" in failed["message"]
        assert "HTTP 401" in failed["message"]
        assert admin.get("deployment", "denied2", namespace) is None
    finally:
        operator.stop()
    assert "Forbidden" not in operator.log(), operator.log()[-3000:]

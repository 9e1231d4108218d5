"""The local kubelet's stand-ins for a pull that fails and a ReadWriteOnce claim that is
attached elsewhere (llm_operator_sandbox.kubelet_faults)."""

from __future__ import annotations

import pytest

from llm_operator_sandbox.kubelet_faults import Attachments, pull_error, registry_host
from llm_operator_sandbox.local_plan import CannotRun, resolve_env


def test_only_a_registry_under_dot_invalid_fails_to_pull() -> None:
    assert registry_host("vllm/vllm-openai:v0.10.1") is None  # Docker Hub
    assert registry_host("localhost:5000/vllm") == "localhost"
    said = pull_error("registry.invalid/vllm/vllm-openai:v0.10.1")
    assert said is not None
    assert said.startswith('failed to pull and unpack image "registry.invalid/vllm/'
                           'vllm-openai:v0.10.1"')
    assert "lookup registry.invalid: no such host" in said
    assert pull_error("vllm/vllm-openai:v0.10.1") is None
    assert pull_error("ghcr.io/org/vllm:1") is None


def test_a_read_write_once_claim_attaches_to_one_node_until_its_pods_go() -> None:
    att = Attachments()
    assert att.attach("ml", "hf-cache", "node-1", "ml/a") == []
    assert att.attach("ml", "hf-cache", "node-1", "ml/b") == []  # the same node: shared
    assert att.attach("ml", "hf-cache", "node-2", "ml/c") == ["ml/a", "ml/b"]
    att.detach("ml/a")
    assert att.attach("ml", "hf-cache", "node-2", "ml/c") == ["ml/b"]
    att.detach("ml/b")
    assert att.attach("ml", "hf-cache", "node-2", "ml/c") == []


def test_a_missing_secret_or_key_says_what_the_kubelet_says() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ml"}}
    container = {"env": [{"name": "HF_TOKEN", "valueFrom": {
        "secretKeyRef": {"name": "hf-token", "key": "token"}}}]}

    def no_secret(kind: str, name: str, key: str) -> str | None:
        raise CannotRun("CreateContainerConfigError", f'{kind.lower()} "{name}" not found')

    with pytest.raises(CannotRun, match='secret "hf-token" not found'):
        resolve_env(container, pod, no_secret)
    with pytest.raises(CannotRun, match="couldn't find key token in Secret ml/hf-token"):
        resolve_env(container, pod, lambda kind, name, key: None)
    optional = {"env": [{"name": "X", "valueFrom": {
        "secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}}}]}
    assert resolve_env(optional, pod, no_secret) == {}

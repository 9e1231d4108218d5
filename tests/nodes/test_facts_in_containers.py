"""The facts Job in a REAL container (containerd under Kubernetes' kubelet, node
``node-1``): for a model outside the catalog, the operator (in its chart pod) renders the
Job; the kubelet pulls the operator's image from the registry with the LLMService's pull
secret and runs it, `restricted`, in a namespace that enforces that standard; the pod
reads ``config.json`` from the Hub stand-in over the bridge (the chart's
``settings.hfEndpoint``), and the operator plans from its termination message."""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from llm_operator_sandbox.nodes import RealNodes
from tests.cluster.conftest import ClusterKubectl
from tests.cluster.test_control_plane import condition
from tests.nodes.test_real_containers import small_service
from tests.support.emulator import wait_for
from tests.support.hub import TOKEN

from .conftest import DEMO_MODEL, OperatorImage

pytestmark = [pytest.mark.nodes, pytest.mark.timeout(420)]

ENFORCE = "pod-security.kubernetes.io/enforce"


def test_a_model_outside_the_catalog_is_planned_from_a_facts_job_in_a_container(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes, hub: Any,
        operator_image: OperatorImage) -> None:
    admin.run("label", "namespace", namespace, f"{ENFORCE}=restricted")
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    svc = small_service("facts")
    del svc["spec"]["model"]["architecture"]  # nothing known: the facts Job reads it
    # Pods that pull (the secret) but never serve: the operator's image has no `vllm`.
    svc["spec"]["image"] = operator_image.ref
    svc["spec"]["pod"] = {"imagePullSecrets": [{"name": "regcred"}]}
    asked = len(hub.requests)
    started = time.monotonic()
    admin.apply_obj(svc, namespace)

    def planned() -> dict[str, Any] | None:
        c = condition(admin.get("llms", "facts", namespace), "Planned")
        return c if c.get("status") == "True" else None
    try:
        wait_for(planned, 300, "Planned=True from the facts Job", interval=1)
    except AssertionError as e:
        events = [(e["involvedObject"]["name"], e["reason"], e.get("message"))
                  for e in admin.items("events", namespace)]
        raise AssertionError(f"{e}\nstatus: {admin.get('llms', 'facts', namespace)}\n"
                             f"events: {events}") from e
    took = time.monotonic() - started
    plan = admin.get("llms", "facts", namespace)["status"]["plan"]
    assert plan["factSources"]["architecture"] == "config.json", plan["factSources"]
    # The pod asked the Hub stand-in for the model's config.json, over the bridge.
    config = [r for r in hub.requests[asked:] if r.endswith("/config.json")]
    assert config and DEMO_MODEL in config[0], hub.requests[asked:]
    # The real kubelet on node-1 pulled the operator's image and started the Job's pod
    # (the Job is deleted once read; the kubelet's Events stay).
    events = [e for e in admin.items("events", namespace)
              if e["involvedObject"]["name"].startswith("facts-facts-")]
    started_events = [e for e in events if e["reason"] == "Started"]
    assert started_events, [(e["involvedObject"]["name"], e["reason"]) for e in events]
    event = started_events[0]
    source = event.get("source") or {}
    assert "kubelet" in (source.get("component"), event.get("reportingComponent")), event
    assert nodes.node.name in (source.get("host"), event.get("reportingInstance")), event
    sys.stderr.write(f"facts Job in containerd: Planned {took:.0f} s after apply, "
                     f"from {config[0]}\n")


def test_a_gated_model_is_planned_with_the_secrets_token_and_refused_without_it(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes, hub: Any,
        operator_image: OperatorImage) -> None:
    """The kubelet hands the facts Job's container the token from the LLMService's Secret
    (``spec.model.tokenSecretRef``); the gated repository answers config.json to it. With
    a wrong token the Hub answers 401, and the LLMService names the Secret; nothing is
    rendered for it. (This ran on the process kubelet in the cluster tier before.)"""
    admin.run("label", "namespace", namespace, f"{ENFORCE}=restricted")
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    for name, token in (("hf", TOKEN), ("hf-wrong", "hf_wrong")):
        admin.apply_obj({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                         "stringData": {"token": token}}, namespace)

    def gated(name: str, secret: str, revision: str | None = None) -> dict[str, Any]:
        svc = small_service(name)
        model = {"name": "gated/gpt-oss-20b", "tokenSecretRef": {"name": secret}}
        svc["spec"]["model"] = {**model, **({"revision": revision} if revision else {})}
        svc["spec"]["gpus"] = {"product": "L4"}  # 13.8 GB of weights: the stand-ins' 8 GiB
        svc["spec"]["replicas"] = 0  # are too small; the facts Job only, no server pod
        svc["spec"]["image"] = operator_image.ref
        svc["spec"]["pod"] = {"imagePullSecrets": [{"name": "regcred"}]}
        return svc

    def planned(name: str) -> dict[str, Any]:
        return condition(admin.get("llms", name, namespace), "Planned")

    started = time.monotonic()
    admin.apply_obj(gated("oss", "hf"), namespace)
    cond = wait_for(lambda: (c := planned("oss")).get("status") == "True" and c, 300,
                    "oss Planned=True from the facts Job", interval=1)
    took = time.monotonic() - started
    assert cond["reason"] == "PlanComputed", cond
    plan = admin.get("llms", "oss", namespace)["status"]["plan"]
    assert plan["factSources"]["architecture"] == "config.json", plan["factSources"]
    assert plan["factSources"]["weightBytes"] == "model.safetensors.index.json"
    assert admin.get("deployment", "oss", namespace) is not None

    # The wrong token, at a revision not cached yet (the facts cache is per namespace and
    # source: at main it would share oss's facts): refused, the Secret named.
    admin.apply_obj(gated("denied", "hf-wrong", revision="a" * 40), namespace)
    failed = wait_for(lambda: (c := planned("denied")).get("reason") == "ModelFactsFailed"
                      and c, 300, "denied ModelFactsFailed", interval=1)
    assert failed["status"] == "False", failed
    assert f"Secret {namespace}/hf-wrong (key token)" in failed["message"], failed
    assert "HTTP 401" in failed["message"], failed
    assert admin.get("deployment", "denied", namespace) is None
    # Both Jobs' pods ran under Kubernetes' kubelet on node-1.
    started_events = [e for e in admin.items("events", namespace)
                      if e["reason"] == "Started" and e["involvedObject"]["name"].startswith(
                          ("oss-facts-", "denied-facts-"))]
    hosts = {(e.get("source") or {}).get("host") or e.get("reportingInstance")
             for e in started_events}
    assert hosts == {nodes.node.name}, started_events
    sys.stderr.write(f"gated facts Job in containerd: Planned {took:.0f} s after apply\n")

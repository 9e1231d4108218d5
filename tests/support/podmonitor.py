"""The operator's rendered Deployment and PodMonitor, and Pods as the sandbox's node agent
writes them, for the tests of discovery through the PodMonitor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from llm_operator import rendering
from llm_operator.api.constants import VLLM_PORT
from llm_operator.api.models import parse_llmservice
from llm_operator.planning import make_plan
from llm_operator.settings import Settings
from llm_operator_sandbox import podmonitor_sd

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama-3.1-8b-l4.yaml"


def rendered(name: str = "llama-3-1-8b", namespace: str = "team-a",
             settings: Settings | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The operator's Deployment and PodMonitor for the 8B example under ``name``."""
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": name, "namespace": namespace}
    svc = parse_llmservice(body)
    children = rendering.render_all(svc, make_plan(svc.spec), settings or Settings(),
                                    pod_monitor=True)
    kinds = {c["kind"]: c for c in children}
    return kinds["Deployment"], kinds["PodMonitor"]


def pod_of(deployment: dict[str, Any], suffix: str = "abcde", *, ready: bool = True,
           phase: str = "Running", local_port: int | None = 43123) -> dict[str, Any]:
    """A Pod as the node agent writes it for ``deployment`` (template labels, owner,
    127.0.0.1, the ports annotation)."""
    meta = deployment["metadata"]
    template = deployment["spec"]["template"]
    annotations = {}
    if local_port is not None:
        annotations[podmonitor_sd.PORTS_ANNOTATION] = json.dumps(
            {"http": local_port, str(VLLM_PORT): local_port})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{meta['name']}-7d9f-{suffix}", "namespace": meta["namespace"],
                     "uid": f"uid-{suffix}", "labels": dict(template["metadata"]["labels"]),
                     "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": f"{meta['name']}-7d9f", "uid": "rs",
                                          "controller": True}]},
        "spec": template["spec"],
        "status": {"phase": phase, "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }

"""Facts from the model itself, in the operator (issue 33): an LLMService naming a model
that is not in the catalog, without spec.model.architecture, is planned from the model's
config.json, which the operator's facts Job reads.

Real parts: the operator process, the facts Job as the operator renders it, run by the
local node agent (``python3 -m llm_operator.cli facts`` with huggingface_hub) against the
local Hub stand-in of tests/support/hub.py, which the operator names to the Job through
its ``LLMOP_HF_ENDPOINT`` setting; the token comes from a Secret that the node agent, as
the kubelet, resolves; a model on a volume is read from the folder the node agent gives
the claim. The API server is the emulated one. Nothing reaches the internet.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator.api.models import parse_llmservice
from llm_operator.knowledge.modelfacts import facts_from_hf_config
from llm_operator.planning import make_plan
from llm_operator.planning.perfmodel import suggest_for
from llm_operator_sandbox.node_agent import NodeAgent
from tests.integration.conftest import NAMESPACE
from tests.support.emulator import EmulatorProcess, Kubectl, OperatorProcess, wait_for
from tests.support.hub import GPT_OSS_20B, INDEX, LocalHub

pytest.importorskip("huggingface_hub")


def service(name: str, model: str, **model_fields: Any) -> dict[str, Any]:
    return {"apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
            "metadata": {"name": name},
            "spec": {"model": {"name": model, **model_fields},
                     "gpus": {"product": "NVIDIA-H100-80GB-HBM3"},
                     "workload": {"concurrency": 32, "inputTokens": 1536,
                                  "outputTokens": 512}}}


def condition(kubectl: Kubectl, name: str, ctype: str) -> dict[str, Any]:
    svc = kubectl.get("llms", name, NAMESPACE) or {}
    return next((dict(c) for c in (svc.get("status") or {}).get("conditions") or []
                 if c["type"] == ctype), {})


@pytest.fixture
def hub() -> Iterator[LocalHub]:
    with LocalHub() as local:
        yield local


def test_model_outside_the_catalog_is_planned_from_its_config_json(
        api: EmulatorProcess, kubectl: Kubectl, hub: LocalHub, tmp_path: Path) -> None:
    # A model on a volume: the node agent maps the claim to this folder (as a kubelet
    # mounts the PVC), read-only in the facts Job.
    folder = tmp_path / "local-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**GPT_OSS_20B, "num_hidden_layers": 12,
                                                     "layer_types": ["full_attention"] * 12}))
    agent = NodeAgent(api.kubeconfig, NAMESPACE, tmp_path / "agent",
                      vllm_python=Path(sys.executable), models={"team/oss-12": folder},
                      out=lambda _: None)
    operator = OperatorProcess(api.kubeconfig, tmp_path / "operator.log", [NAMESPACE],
                               env={"LLMOP_HF_ENDPOINT": hub.endpoint})
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf"},
              "stringData": {"token": "hf_wrong"}}
    docs = [secret, service("oss", "openai/gpt-oss-20b"),
            service("gated", "gated/gpt-oss-20b", tokenSecretRef={"name": "hf"}),
            service("onpvc", "team/oss-12", volume={"claimName": "models"})]
    path = tmp_path / "services.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    with agent:
        operator.start()
        try:
            operator.wait_log("Initial authentication has finished", timeout=60)
            kubectl.apply(path, NAMESPACE)

            # Planned from config.json and the safetensors index, and rendered.
            def planned() -> dict[str, Any] | None:
                svc = kubectl.get("llms", "oss", NAMESPACE) or {}
                plan = (svc.get("status") or {}).get("plan") or {}
                return plan if plan.get("factSources") else None
            plan = wait_for(planned, 90, "oss planned from its config.json")
            assert plan["factSources"]["architecture"] == "config.json"
            assert plan["factSources"]["weightBytes"] == "model.safetensors.index.json"
            assert condition(kubectl, "oss", "Planned")["status"] == "True"
            dep = kubectl.get("deployment", "oss", NAMESPACE) or {}
            assert "openai/gpt-oss-20b" in json.dumps(dep["spec"]["template"])
            log = operator.log()
            assert "Created Job ml/oss-facts-" in log and "Read the facts of " \
                "hub:openai/gpt-oss-20b@main (commit " + "a" * 40 in log
            # Cached by repository and revision in the namespace; the Job is gone.
            cm = kubectl.get("configmap", "llm-operator-model-facts", NAMESPACE) or {}
            entries = [json.loads(v) for v in (cm.get("data") or {}).values()]
            assert "hub:openai/gpt-oss-20b@main" in [e["key"] for e in entries]
            wait_for(lambda: not (kubectl.get("job", plan_job(log), NAMESPACE)), 30,
                     "the facts Job deleted once read")
            # The Hub answered the facts Job (the pod), with the test's token nowhere.
            assert any("/openai/gpt-oss-20b/resolve/main/config.json" in r
                       for r in hub_requests())

            # Tuning on rollout (the default) starts once the facts are in: kopf's tuning
            # handler ran before there was a plan, the Job's end runs the step again.
            job_name = wait_for(lambda: kubectl.run(
                "get", "jobs", "-n", NAMESPACE, "-o", "name", "-l",
                "llmops.dev/llmservice=oss,llmops.dev/component=tuning").stdout.strip(), 30,
                "a tuning Job for oss")
            # Its search starts at the performance model's knee with the same facts, not
            # at the plan's memory limit (what a model outside the catalog once got).
            job = kubectl.get("job", job_name.split("/")[-1], NAMESPACE) or {}
            args = job["spec"]["template"]["spec"]["containers"][0]["args"]
            hint = int(args[args.index("--hint-max-num-seqs") + 1])
            spec = parse_llmservice({**service("oss", "openai/gpt-oss-20b"),
                                     "metadata": {"name": "oss", "namespace": NAMESPACE}}).spec
            facts = facts_from_hf_config(GPT_OSS_20B, spec.model.name, index=INDEX)
            assert hint == suggest_for(spec, make_plan(spec, facts=facts), facts=facts
                                       ).max_num_seqs
            assert hint < plan["maxNumSeqs"], (hint, plan["maxNumSeqs"])

            # The model on a volume: read from the mounted folder, its own 12 layers.
            pvc = wait_for(lambda: (p := ((kubectl.get("llms", "onpvc", NAMESPACE) or {}).get(
                "status") or {}).get("plan") or {}).get("factSources") and p, 60,
                "onpvc planned from its volume's config.json")
            assert pvc["factSources"]["architecture"] == "config.json"
            assert "weightBytes" not in pvc["factSources"]  # no index: estimated
            assert "Read the facts of volume:models/ (commit None)" in operator.log()

            # A wrong token: Planned False, naming the Secret and the fix; nothing rendered.
            failed = wait_for(lambda: (c := condition(kubectl, "gated", "Planned")).get(
                "reason") == "ModelFactsFailed" and c, 60, "gated: ModelFactsFailed")
            assert failed["status"] == "False"
            assert "Secret ml/hf (key token)" in failed["message"]
            assert "HTTP 401" in failed["message"]
            assert "kubectl create secret generic hf -n ml" in failed["message"]
            assert kubectl.get("deployment", "gated", NAMESPACE) is None
            assert not kubectl.run("get", "jobs", "-n", NAMESPACE, "-o", "name", "-l",
                                   "llmops.dev/llmservice=gated,llmops.dev/component=tuning"
                                   ).stdout.strip()
            assert condition(kubectl, "gated", "Ready")["reason"] == "ModelFactsFailed"
        finally:
            operator.stop()


def plan_job(log: str) -> str:
    start = log.index("Created Job ml/oss-facts-") + len("Created Job ml/")
    return log[start:].split()[0]


def hub_requests() -> list[str]:
    from tests.support.hub import _Hub
    return list(_Hub.requests)

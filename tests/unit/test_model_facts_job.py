"""The operator's facts Job (issue 33): its manifest, the compact message it hands back,
and the operator's decisions on it (pure). The Job runs for real, against a local Hub
stand-in, in tests/integration/test_model_facts_operator.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import kubernetes_validate
import pytest
from tests.support.hub import GPT_OSS_20B, INDEX

from llm_operator.api.constants import LABEL_COMPONENT, LABEL_SERVICE
from llm_operator.api.errors import SpecErrors
from llm_operator.api.models import parse_llmservice
from llm_operator.facts import control as fc
from llm_operator.facts import message as fm
from llm_operator.facts.job import (
    ACTIVE_DEADLINE_SECONDS,
    build_facts_job,
    facts_job_name,
    facts_key,
)
from llm_operator.health import status as st
from llm_operator.planning import make_plan
from llm_operator.settings import Settings
from llm_operator.tuning.control import JobPhase, ObservedJob

BODY: dict[str, Any] = {
    "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
    "metadata": {"name": "oss", "namespace": "ml", "uid": "u-1"},
    "spec": {"model": {"name": "openai/gpt-oss-20b", "revision": "v1",
                       "tokenSecretRef": {"name": "hf", "key": "token"}},
             "gpus": {"product": "NVIDIA-H100-80GB-HBM3"},
             "workload": {"concurrency": 32, "inputTokens": 1536, "outputTokens": 512}},
}


def svc(**model: Any) -> Any:
    body = copy.deepcopy(BODY)
    body["spec"]["model"].update(model)
    body["spec"]["model"] = {k: v for k, v in body["spec"]["model"].items() if v is not None}
    return parse_llmservice(body)


def job(phase: JobPhase = JobPhase.RUNNING, created: float = 1000.0) -> ObservedJob:
    return ObservedJob(name="oss-facts-x", uid="j", fingerprint=None, phase=phase,
                       created=created)


# --------------------------------------------------------------------------- the Job
def test_job_is_valid_small_owned_and_gets_the_token_from_the_secret() -> None:
    manifest = build_facts_job(svc(), Settings(hf_endpoint="http://mirror.local"))
    kubernetes_validate.validate(manifest, "1.30.0", strict=True)
    meta = manifest["metadata"]
    assert meta["labels"][LABEL_SERVICE] == "oss"
    assert meta["labels"][LABEL_COMPONENT] == "model-facts"
    assert meta["ownerReferences"][0]["uid"] == "u-1"
    assert meta["name"] == facts_job_name(svc()) and len(meta["name"]) <= 52
    spec = manifest["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == ACTIVE_DEADLINE_SECONDS
    pod = spec["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    assert c["image"] == Settings().operator_image
    assert c["command"] == ["python3", "-m", "llm_operator.cli"]
    assert c["args"][:5] == ["facts", "--repo", "openai/gpt-oss-20b", "--source", "hub"]
    assert c["args"][-2:] == ["--revision", "v1"]
    env = {e["name"]: e for e in c["env"]}
    # The kubelet resolves the Secret; the operator never reads it.
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "hf", "key": "token", "optional": True}
    assert env["HF_ENDPOINT"]["value"] == "http://mirror.local"
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])
    assert c["resources"]["limits"]["memory"] == "512Mi"
    assert c["terminationMessagePath"] == "/dev/termination-log"


def test_job_for_a_model_on_a_volume_mounts_it_read_only() -> None:
    s = svc(volume={"claimName": "models", "subPath": "oss"}, tokenSecretRef=None,
            revision=None)
    manifest = build_facts_job(s, Settings())
    pod = manifest["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"][3:5] == ["--source", "/mnt/models"]
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/mnt/models")
    assert mount["readOnly"] is True and mount["subPath"] == "oss"
    vol = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert vol["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert "HF_ENDPOINT" not in json.dumps(c["env"])
    assert facts_key(s.spec) == "volume:models/oss"
    assert facts_key(svc().spec) == "hub:openai/gpt-oss-20b@v1"


def test_job_env_follows_spec_pod_env_and_refuses_what_the_operator_sets() -> None:
    body = copy.deepcopy(BODY)
    body["spec"]["pod"] = {"env": [{"name": "HF_ENDPOINT", "value": "http://own.mirror"}]}
    (c,) = build_facts_job(parse_llmservice(body), Settings(hf_endpoint="http://x"))[
        "spec"]["template"]["spec"]["containers"]
    names = [e["name"] for e in c["env"]]
    assert names[-1] == "HF_ENDPOINT" and c["env"][-1]["value"] == "http://own.mirror"
    body["spec"]["pod"] = {"env": [{"name": "HF_TOKEN", "value": "hf_x"}]}
    with pytest.raises(SpecErrors) as exc:
        build_facts_job(parse_llmservice(body), Settings())
    assert "spec.pod.env" in str(exc.value)


# --------------------------------------------------------------------------- the message
def test_message_round_trips_and_drops_the_weight_map() -> None:
    index = {"metadata": dict(INDEX["metadata"]),
             "weight_map": {f"model.layers.{i}.mlp.experts.w": "model-00001.safetensors"
                            for i in range(5000)}}
    text = fm.encode_facts(GPT_OSS_20B, index, None, source="openai/gpt-oss-20b@v1",
                           commit="c" * 40)
    assert len(text.encode()) <= fm.MESSAGE_LIMIT
    doc = fm.decode(text)
    assert doc["config"] == GPT_OSS_20B and doc["index"] == {"metadata": INDEX["metadata"]}
    assert doc["commit"] == "c" * 40


def test_message_of_a_long_config_keeps_what_the_parser_reads() -> None:
    # A config of 94 layers with a skip list of 28,200 module names: 984 KB of JSON, 76 KB
    # even compressed (806 bytes once reduced), so the skip list is reduced to what the
    # parser reads.
    config = {**GPT_OSS_20B, "num_hidden_layers": 94,
              "layer_types": ["sliding_attention", "full_attention"] * 47,
              "quantization_config": {"quant_method": "fp8", "ignore": [
                  f"model.layers.{i}.{m}.{n:x}" for i in range(94)
                  for m in ("self_attn.q_proj", "mlp.gate") for n in range(150)]}}
    assert len(json.dumps(config)) > 900_000
    text = fm.encode_facts(config, None, None, source="x@main")
    assert len(text.encode()) <= fm.MESSAGE_LIMIT
    doc = fm.decode(text)
    assert doc["config"]["quantization_config"]["ignore"] == ["attn"]
    assert doc["config"]["layer_types"] == config["layer_types"]
    from llm_operator.knowledge.modelfacts import facts_from_hf_config
    assert facts_from_hf_config(doc["config"]) == facts_from_hf_config(config)


def test_message_that_is_not_ours_is_refused() -> None:
    for bad in ("Traceback (most recent call last): ...", '{"v": 9}', '{"v": 1, "z": "!!"}'):
        try:
            fm.decode(bad)
        except fm.MessageError:
            continue
        raise AssertionError(f"accepted {bad!r}")


# --------------------------------------------------------------------------- decisions
def test_a_model_outside_the_catalog_needs_facts_unless_architecture_is_typed() -> None:
    assert fc.needs_facts(svc().spec)
    assert not fc.needs_facts(svc(name="meta-llama/Llama-3.1-8B-Instruct").spec)
    arch = {"parameters": 2e10, "numLayers": 24, "hiddenSize": 2880, "numAttentionHeads": 64,
            "numKeyValueHeads": 8, "headDim": 64, "maxContext": 131072}
    assert not fc.needs_facts(svc(architecture=arch).spec)


def test_no_job_creates_one_then_waits_then_plans_from_its_message() -> None:
    s = svc()
    first = fc.decide(s, None, None, None, "", None, now=1000)
    assert first.create_job and first.facts is None
    assert "openai/gpt-oss-20b@v1" in str(first.waiting)
    running = fc.decide(s, None, job(), None, "", None, now=1003)
    assert not running.create_job and running.facts is None and "Job ml/oss-facts-x" in str(
        running.waiting)
    msg = fm.encode_facts(GPT_OSS_20B, INDEX, None, source="openai/gpt-oss-20b@v1",
                          commit="c" * 40)
    done = fc.decide(s, None, job(JobPhase.COMPLETE), msg, "", None, now=1010)
    assert done.facts is not None and done.cache == msg and done.delete_job
    assert done.facts.quantization == "mxfp4" and done.commit == "c" * 40
    # Cached: planned from the cache, no Job; the plan records config.json as the source.
    entry = fc.cache_entry(facts_key(s.spec), msg, "2026-01-01T00:00:00Z")
    again = fc.decide(s, entry, None, None, "", None, now=2000)
    assert again.facts == done.facts and not again.create_job
    plan = make_plan(s.spec, facts=again.facts)
    assert plan.fact_sources["architecture"] == "config.json"
    assert plan.fact_sources["weightBytes"] == "model.safetensors.index.json"
    # Another revision's entry is not used for this one.
    assert fc.cached_facts(entry, "hub:openai/gpt-oss-20b@main", "x") is None


def test_wrong_token_names_the_secret_and_the_fix() -> None:
    msg = fm.encode_error(fm.GATED, "openai/gpt-oss-20b@v1", "the repository is gated",
                          "set HF_TOKEN", 401)
    out = fc.decide(svc(), None, job(JobPhase.FAILED), msg, "", None, now=1010)
    assert out.facts is None and not out.delete_job
    assert "Secret ml/hf (key token)" in str(out.failed) and "HTTP 401" in str(out.failed)
    assert "kubectl create secret generic hf -n ml" in str(out.failed)
    no_ref = fc.decide(svc(tokenSecretRef=None), None, job(JobPhase.FAILED), msg, "", None,
                       now=1010)
    assert "spec.model.tokenSecretRef is unset" in str(no_ref.failed)
    # Tried again once the retry interval passed: the old Job goes, the next pass makes one.
    later = fc.decide(svc(), None, job(JobPhase.FAILED), msg, "", None,
                      now=1000 + fc.RETRY_SECONDS)
    assert later.delete_job and later.failed is None


def test_missing_revision_or_repository_names_the_fields() -> None:
    rev = fm.encode_error(fm.NO_REVISION, "openai/gpt-oss-20b@v1", "no such revision", "", 404)
    out = fc.decide(svc(), None, job(JobPhase.FAILED), rev, "", None, now=1010)
    assert "spec.model.revision 'v1'" in str(out.failed)
    assert "spec.model.name 'openai/gpt-oss-20b'" in str(out.failed)
    repo = fm.encode_error(fm.NO_REPOSITORY, "x@v1", "no such repository", "", 404)
    out = fc.decide(svc(), None, job(JobPhase.FAILED), repo, "", None, now=1010)
    assert str(out.failed).startswith("spec.model.name 'openai/gpt-oss-20b': no such repository")


def test_a_job_that_died_without_a_result_says_why() -> None:
    died = ObservedJob(name="oss-facts-x", uid="j", fingerprint=None, phase=JobPhase.FAILED,
                       reason="DeadlineExceeded: Job was active longer than specified",
                       created=1000.0)
    out = fc.decide(svc(), None, died, None, "", None, now=1310, finished_at=1300)
    assert "DeadlineExceeded" in str(out.failed)
    assert "kubectl logs job/oss-facts-x -n ml" in str(out.failed)


def test_status_while_fetching_and_after_a_failure() -> None:
    new = st.build_status({}, name="oss", namespace="ml", generation=1, now=0.0,
                          facts=(st.Reason.FETCHING_MODEL_FACTS, "reading"))
    planned = st.get_condition(new["conditions"], st.ConditionType.PLANNED)
    ready = st.get_condition(new["conditions"], st.ConditionType.READY)
    assert planned is not None and ready is not None
    assert planned["status"] == "False" and planned["reason"] == "FetchingModelFacts"
    assert ready["reason"] == "FetchingModelFacts"
    assert "plan" not in new

"""The InferencePool (issue 61): rendered from spec.routing.inferencePool or the chart's
default, over the pods that serve (a LeaderWorkerSet's leaders only), owned by the
LLMService, with the endpoint picker exactly as given; and the InferencePoolReady
condition and status.inferencePool that tell the user what became of it.

Pure: the real CRD's acceptance of the pool is the cluster tier's
(tests/cluster/test_inference_pool.py), against the extension's release CRD.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from tests.unit.test_rendering import (
    INFERENCE_POOL_SCHEMA,
    LLAMA_405B_PLAN,
    LLAMA_405B_SPEC,
    hand_plan,
    make_svc,
    validate_manifest,
)

from llm_operator.api.constants import API_VERSION, KIND, LABEL_MANAGED_BY, MANAGED_BY, VLLM_PORT
from llm_operator.api.errors import InputError, SpecErrors
from llm_operator.api.models import parse_llmservice
from llm_operator.health import status as st
from llm_operator.rendering import render_all
from llm_operator.rendering.identity import LABEL_ROLE, ROLE_LEADER
from llm_operator.rendering.inferencepool import (
    ANNOTATION_SERVED_MODEL,
    INFERENCE_POOL_API_VERSION,
    describe_pool,
)
from llm_operator.settings import Settings, load_settings

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PICKER = {"name": "vllm-epp", "port": {"number": 9002}}


def spec_with(pool: dict[str, Any] | None, base: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    spec = dict(base or {"model": {"name": MODEL}})
    if pool is not None:
        spec["routing"] = {"inferencePool": pool}
    return spec


def children(pool: dict[str, Any] | None = None, settings: Settings | None = None,
             base: dict[str, Any] | None = None, **plan: Any) -> list[dict[str, Any]]:
    return render_all(make_svc(spec_with(pool, base)), hand_plan(**plan),
                      settings or Settings())


def pool_of(docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((d for d in docs if d["kind"] == "InferencePool"), None)


def test_off_by_default() -> None:
    assert pool_of(children()) is None
    assert pool_of(children({})) is None


def test_on_by_the_spec_with_every_field_the_issue_names() -> None:
    docs = children({"enabled": True, "endpointPickerRef": PICKER})
    pool = pool_of(docs)
    assert pool is not None
    service = next(d for d in docs if d["kind"] == "Service")
    deployment = docs[0]
    assert pool["apiVersion"] == INFERENCE_POOL_API_VERSION == "inference.networking.k8s.io/v1"
    assert pool["metadata"]["name"] == "llama" and pool["metadata"]["namespace"] == "ml"
    # The server pods: the Service's selector, which the Deployment's pods carry.
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selector == service["spec"]["selector"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in selector.items())
    assert pool["spec"]["targetPorts"] == [{"number": VLLM_PORT}]
    assert pool["spec"]["endpointPickerRef"] == PICKER  # as given, nothing defaulted in
    assert pool["metadata"]["annotations"][ANNOTATION_SERVED_MODEL] == MODEL
    assert set(pool["spec"]) == {"selector", "targetPorts", "endpointPickerRef"}


def test_owned_and_labelled_as_the_admission_policy_demands() -> None:
    """templates/admission.yaml lets the operator write only objects labelled
    managed-by=llm-operator with an owner reference of kind LLMService."""
    pool = pool_of(children({"enabled": True}))
    assert pool is not None
    assert pool["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY
    [owner] = pool["metadata"]["ownerReferences"]
    assert owner["kind"] == KIND and owner["apiVersion"] == API_VERSION
    assert owner["controller"] is True


def test_the_charts_default_turns_it_on_and_the_spec_wins() -> None:
    on = Settings(inference_pool=True)
    assert pool_of(children(None, on)) is not None
    assert pool_of(children({"enabled": False}, on)) is None
    assert pool_of(children({"enabled": True}, Settings(inference_pool=False))) is not None


def test_the_endpoint_picker_comes_from_the_spec_else_the_chart_else_none() -> None:
    chart = Settings(endpoint_picker_ref={"name": "shared-epp", "port": {"number": 9002},
                                          "failureMode": "FailOpen"})
    mine = {"name": "mine", "kind": "Service", "group": "", "port": {"number": 9003},
            "failureMode": "FailClose"}
    pool = pool_of(children({"enabled": True, "endpointPickerRef": mine}, chart))
    assert pool is not None and pool["spec"]["endpointPickerRef"] == mine
    pool = pool_of(children({"enabled": True}, chart))
    assert pool is not None and pool["spec"]["endpointPickerRef"] == {
        "name": "shared-epp", "port": {"number": 9002}, "failureMode": "FailOpen"}
    pool = pool_of(children({"enabled": True}))
    assert pool is not None and "endpointPickerRef" not in pool["spec"]
    assert "no endpoint picker" in describe_pool(pool)


def test_a_leader_worker_set_pool_selects_its_leaders_only() -> None:
    docs = render_all(make_svc(spec_with({"enabled": True, "endpointPickerRef": PICKER},
                                         LLAMA_405B_SPEC)),
                      hand_plan(**LLAMA_405B_PLAN), Settings())
    assert docs[0]["kind"] == "LeaderWorkerSet"
    pool = pool_of(docs)
    assert pool is not None
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selector[LABEL_ROLE] == ROLE_LEADER
    template = docs[0]["spec"]["leaderWorkerTemplate"]
    leader = template["leaderTemplate"]["metadata"]["labels"]
    worker = template["workerTemplate"]["metadata"]["labels"]
    assert all(leader.get(k) == v for k, v in selector.items())
    assert not all(worker.get(k) == v for k, v in selector.items())
    assert pool["metadata"]["annotations"][ANNOTATION_SERVED_MODEL] == (
        LLAMA_405B_SPEC["model"]["name"])


def test_the_description_names_selector_port_picker_and_model() -> None:
    pool = pool_of(children({"enabled": True, "endpointPickerRef": PICKER}))
    assert pool is not None
    text = describe_pool(pool)
    for part in ("llmops.dev/llmservice=llama", "port 8000", "Service vllm-epp:9002",
                 "(FailClose)", repr(MODEL), "X-Gateway-Model-Name"):
        assert part in text, (part, text)


@pytest.mark.parametrize(("ref", "field", "words"), [
    ({"name": "epp"}, "spec.routing.inferencePool.endpointPickerRef.port", "port: {number"),
    ({"name": "epp", "port": {"number": 0}},
     "spec.routing.inferencePool.endpointPickerRef.port.number", "at least 1"),
    ({"name": "epp", "port": {"number": 9002}, "failureMode": "Open"},
     "spec.routing.inferencePool.endpointPickerRef.failureMode", "FailOpen"),
    ({"name": "epp", "kind": "my kind", "port": {"number": 9002}},
     "spec.routing.inferencePool.endpointPickerRef.kind", "e.g. Service"),
    ({"port": {"number": 9002}}, "spec.routing.inferencePool.endpointPickerRef.name",
     "is required"),
])
def test_a_bad_endpoint_picker_names_the_field_and_the_fix(
        ref: dict[str, Any], field: str, words: str) -> None:
    body = {"metadata": {"name": "llama"},
            "spec": spec_with({"enabled": True, "endpointPickerRef": ref})}
    with pytest.raises(SpecErrors) as err:
        parse_llmservice(body)
    [error] = [e for e in err.value.errors if e.field == field]
    assert words in str(error), str(error)


def test_a_picker_of_another_kind_needs_no_port() -> None:
    ref = {"name": "epp", "kind": "Backend", "group": "gateway.example.com"}
    pool = pool_of(children({"enabled": True, "endpointPickerRef": ref}))
    assert pool is not None and pool["spec"]["endpointPickerRef"] == ref


def test_a_bad_chart_default_names_the_helm_value_and_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMOP_ENDPOINT_PICKER_REF", '{"name": "epp"}')
    with pytest.raises(InputError) as err:
        load_settings()
    text = str(err.value)
    assert "settings.inferencePool.endpointPickerRef" in text and "port: {number" in text


@pytest.mark.parametrize("pool", [
    {"enabled": True},
    {"enabled": True, "endpointPickerRef": PICKER},
    {"enabled": True, "endpointPickerRef": {"name": "b", "kind": "Backend", "group": "x.io"}},
    {"enabled": True, "endpointPickerRef": {**PICKER, "kind": "Service", "group": "",
                                            "failureMode": "FailOpen"}},
], ids=["no-picker", "picker", "other-kind", "every-field"])
def test_every_rendered_pool_fits_the_extensions_schema(pool: dict[str, Any]) -> None:
    for docs in (children(pool), render_all(make_svc(spec_with(pool, LLAMA_405B_SPEC)),
                                            hand_plan(**LLAMA_405B_PLAN), Settings())):
        rendered = pool_of(docs)
        assert rendered is not None
        validate_manifest(rendered)  # the typed copy of the CRD, metadata as an ObjectMeta


def test_the_schema_copy_has_the_crds_port_rule() -> None:
    pool = pool_of(children({"enabled": True, "endpointPickerRef": PICKER}))
    assert pool is not None
    del pool["spec"]["endpointPickerRef"]["port"]
    with pytest.raises(jsonschema.ValidationError, match="'port' is a required property"):
        jsonschema.validate(pool, INFERENCE_POOL_SCHEMA)


# --- status ------------------------------------------------------------------------------
NOW = 1_800_000_000.0


def pool_status(pool: st.InferencePoolState, conditions: list[dict[str, Any]] | None = None
                ) -> dict[str, Any]:
    return st.build_status({"conditions": conditions or []}, name="llama", namespace="ml",
                           generation=3, now=NOW, plan=hand_plan(), inference_pool=pool)


def test_a_service_that_never_asked_gets_no_pool_condition() -> None:
    status = pool_status(st.InferencePoolState(wanted=False, name="llama"))
    assert st.get_condition(status["conditions"], "InferencePoolReady") is None
    assert status["inferencePool"] is None
    assert st.status_patch({}, status).get("inferencePool") is None


def test_a_written_pool_is_ready_and_named_in_the_status() -> None:
    status = pool_status(st.InferencePoolState(wanted=True, name="llama", summary="pods x"))
    cond = st.get_condition(status["conditions"], "InferencePoolReady")
    assert cond is not None and cond["status"] == "True" and cond["reason"] == "Written"
    assert "InferencePool ml/llama is written: pods x" in cond["message"]
    assert status["inferencePool"] == "llama"
    assert status["endpoint"] == "http://llama.ml.svc:8000/v1"


def test_a_missing_crd_says_so_with_the_fix_and_leaves_ready_alone() -> None:
    status = pool_status(st.InferencePoolState(wanted=True, name="llama", missing_crd=True))
    cond = st.get_condition(status["conditions"], "InferencePoolReady")
    assert cond is not None and cond["status"] == "False"
    assert cond["reason"] == "InferencePoolCRDMissing"
    for part in ("inference.networking.k8s.io/v1", "kubectl apply -f https://github.com/"
                 "kubernetes-sigs/gateway-api-inference-extension/releases/download/v1.6.2/",
                 "spec.routing.inferencePool.enabled: false"):
        assert part in cond["message"], (part, cond["message"])
    assert status["inferencePool"] is None
    assert st.get_condition(status["conditions"], "Ready") is None  # no workload state given


def test_turning_it_off_says_not_requested_and_drops_the_name() -> None:
    before = pool_status(st.InferencePoolState(wanted=True, name="llama", summary="s"))
    after = pool_status(st.InferencePoolState(wanted=False, name="llama"),
                        before["conditions"])
    cond = st.get_condition(after["conditions"], "InferencePoolReady")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "NotRequested")
    assert st.status_patch(before, after)["inferencePool"] is None


def test_the_release_named_in_the_fix_is_the_one_the_cluster_tier_installs() -> None:
    from llm_operator_sandbox.inference_extension import VERSION
    assert st.INFERENCE_EXTENSION_RELEASE == VERSION

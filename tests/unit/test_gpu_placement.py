"""GPU classes place the pods where the GPUs are (issue 13, item 4), and the PodMonitor
and the adaptation policy fit a stock kube-prometheus-stack (item 5). Pure: rendered
objects are validated strictly as the rendering tests do."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from pydantic import ValidationError
from tests.unit.test_rendering import (
    K8S_VERSION,
    POD_MONITOR_SCHEMA,
    hand_plan,
    make_svc,
    validate_manifest,
)

from llm_operator import rendering
from llm_operator import settings as settings_module
from llm_operator.adaptation import policy as policy_module
from llm_operator.adaptation.policy import (
    AdaptationState,
    CapAction,
    Observation,
    decide,
    policy_for_scrape,
)
from llm_operator.api.errors import SpecError
from llm_operator.api.models import LLMServiceSpec
from llm_operator.health.status import plan_summary
from llm_operator.knowledge.gpuclass import PRESETS
from llm_operator.planning import make_plan
from llm_operator.rendering.deployment import build_deployment
from llm_operator.rendering.placement import gpu_placement, with_placement
from llm_operator.settings import Settings
from llm_operator.tuning.job import build_tuning_job


def pod_of(svc_spec: dict[str, Any], settings: Settings) -> dict[str, Any]:
    deployment = build_deployment(make_svc(svc_spec), hand_plan(), settings)
    validate_manifest(deployment)
    return dict(deployment["spec"]["template"]["spec"])


def l4(**extra: Any) -> dict[str, Any]:
    return {"model": {"name": "m/x"}, "gpus": {"product": "L4"}, **extra}


# --- presets ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu_class", "product", "label", "value"),
    [
        ("nvidia", "H100", "nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
        ("gke", "H100", "cloud.google.com/gke-accelerator", "nvidia-h100-80gb"),
        ("gke", "L4", "cloud.google.com/gke-accelerator", "nvidia-l4"),
        ("gke", "A100-40GB", "cloud.google.com/gke-accelerator", "nvidia-tesla-a100"),
        ("eks", "L4", "karpenter.k8s.aws/instance-gpu-name", "l4"),
        ("eks", "NVIDIA-A10G", "karpenter.k8s.aws/instance-gpu-name", "a10g"),
        ("eks", "H100-SXM", "karpenter.k8s.aws/instance-gpu-name", "h100"),
    ],
)
def test_each_preset_selects_the_label_its_nodes_carry(
    gpu_class: str, product: str, label: str, value: str
) -> None:
    pod = pod_of({"model": {"name": "m/x"}, "gpus": {"product": product}},
                 Settings(gpu_class=gpu_class))
    assert pod["nodeSelector"] == {label: value}


def test_gke_pods_tolerate_the_gpu_taint_and_keep_the_users() -> None:
    mine = {"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    pod = pod_of(l4(scheduling={"tolerations": [mine], "nodeSelector": {"pool": "a"}}),
                 Settings(gpu_class="gke"))
    assert pod["tolerations"] == [
        mine, {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4",
                                   "pool": "a"}


def test_aks_has_no_product_label_so_the_plan_warns() -> None:
    settings = Settings(gpu_class="aks")
    svc = make_svc(l4())
    pod = pod_of(l4(), settings)
    assert pod["nodeSelector"] == {"kubernetes.azure.com/accelerator": "nvidia"}
    placed = gpu_placement(svc.spec, settings)
    assert placed.warnings and "node.kubernetes.io/instance-type" in placed.warnings[0]
    # A user who pins the VM size gets no warning.
    pinned = make_svc(l4(scheduling={"nodeSelector": {
        "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"}}))
    assert gpu_placement(pinned.spec, settings).warnings == []


# --- unknown products ------------------------------------------------------------------


def test_an_unknown_product_is_refused_naming_the_field_and_the_known_values() -> None:
    svc = make_svc({"model": {"name": "m/x"},
                    "gpus": {"product": "RTX-6000-Ada", "memoryGib": 48}})
    with pytest.raises(SpecError) as err:
        build_deployment(svc, hand_plan(), Settings())
    assert err.value.field == "spec.gpus.product"
    assert "NVIDIA-H100-80GB-HBM3" in err.value.fix
    assert "spec.scheduling.nodeSelector nvidia.com/gpu.product" in err.value.fix


def test_a_product_the_class_lacks_is_refused_even_when_the_table_knows_it() -> None:
    svc = make_svc({"model": {"name": "m/x"}, "gpus": {"product": "L40S"}})
    with pytest.raises(SpecError, match="'gke'.*cloud.google.com/gke-accelerator"):
        build_deployment(svc, hand_plan(), Settings(gpu_class="gke"))


def test_the_users_label_places_a_product_the_class_does_not_know() -> None:
    pod = pod_of({"model": {"name": "m/x"}, "gpus": {"product": "L40S"},
                  "scheduling": {"nodeSelector": {
                      "cloud.google.com/gke-accelerator": "nvidia-rtx-pro-6000"}}},
                 Settings(gpu_class="gke"))
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-rtx-pro-6000"}


def test_a_required_node_affinity_on_the_label_is_the_users_choice() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{
            "key": "cloud.google.com/gke-accelerator", "operator": "In",
            "values": ["nvidia-l4", "nvidia-rtx-pro-6000"]}]}]}}}
    pod = pod_of({"model": {"name": "m/x"}, "gpus": {"product": "L40S"},
                  "scheduling": {"affinity": affinity}}, Settings(gpu_class="gke"))
    assert "nodeSelector" not in pod and pod["affinity"] == affinity


def _gke_affinity(operator: str, values: list[str]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{
            "key": "cloud.google.com/gke-accelerator", "operator": operator,
            "values": values}]}]}}}}


@pytest.mark.parametrize(("gpu_class", "scheduling", "field", "words"), [
    # The selector picks H100 nodes while the plan is for L4s: refused, naming both.
    ("nvidia", {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
     "spec.scheduling.nodeSelector[nvidia.com/gpu.product]",
     "set spec.gpus.product: NVIDIA-H100-80GB-HBM3"),
    ("eks", {"nodeSelector": {"karpenter.k8s.aws/instance-gpu-name": "a10g"}},
     "spec.scheduling.nodeSelector[karpenter.k8s.aws/instance-gpu-name]",
     "set spec.gpus.product: NVIDIA-A10G"),
    # Label values are case-sensitive: no node would match.
    ("nvidia", {"nodeSelector": {"nvidia.com/gpu.product": "nvidia-l4"}},
     "spec.scheduling.nodeSelector[nvidia.com/gpu.product]",
     "write nvidia.com/gpu.product: NVIDIA-L4"),
    ("gke", _gke_affinity("In", ["nvidia-h100-80gb", "nvidia-a100-80gb"]),
     "nodeSelectorTerms[0].matchExpressions[0]", "let the affinity admit"),
    ("gke", _gke_affinity("NotIn", ["nvidia-l4"]),
     "nodeSelectorTerms[0].matchExpressions[0]", "let the affinity admit"),
])
def test_a_selector_naming_another_gpu_than_spec_gpus_product_is_refused(
        gpu_class: str, scheduling: dict[str, Any], field: str, words: str) -> None:
    svc = make_svc(l4(scheduling=scheduling))
    with pytest.raises(SpecError) as err:
        build_deployment(svc, hand_plan(), Settings(gpu_class=gpu_class))
    assert field in err.value.field
    assert "spec.gpus.product is 'L4'" in err.value.problem
    assert words in err.value.fix


@pytest.mark.parametrize(("gpu_class", "scheduling"), [
    ("nvidia", {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}}),  # the same
    # A value the class does not know may carry the product (GKE's other pools).
    ("gke", {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4-spot"}}),
    ("gke", _gke_affinity("In", ["nvidia-l4", "nvidia-h100-80gb"])),  # admits L4 too
    ("gke", _gke_affinity("In", ["nvidia-l4-custom"])),
    ("gke", _gke_affinity("NotIn", ["nvidia-h100-80gb"])),
])
def test_a_selector_that_admits_the_product_is_kept(
        gpu_class: str, scheduling: dict[str, Any]) -> None:
    pod_of(l4(scheduling=scheduling), Settings(gpu_class=gpu_class))


# --- administrator's own classes -------------------------------------------------------


def test_a_class_from_the_environment_places_server_and_tuning_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLMOP_GPU_CLASS", "lab")
    monkeypatch.setenv("LLMOP_GPU_CLASSES", json.dumps({"lab": {
        "productLabel": "example.com/gpu", "products": {"L4": "l4-24g"},
        "nodeSelector": {"example.com/pool": "gpu"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "resourceName": "example.com/gpu"}}))
    settings = Settings()
    svc = make_svc(l4())
    deployment = rendering.render_all(svc, hand_plan(), settings)[0]
    validate_manifest(deployment)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"example.com/gpu": "l4-24g", "example.com/pool": "gpu"}
    assert pod["containers"][0]["resources"]["limits"] == {"example.com/gpu": "1"}
    job = build_tuning_job(svc, hand_plan(), settings, "f" * 12)
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    job_pod = job["spec"]["template"]["spec"]
    assert job_pod["nodeSelector"] == pod["nodeSelector"]
    assert job_pod["tolerations"] == pod["tolerations"]
    assert job_pod["containers"][0]["resources"]["limits"] == {"example.com/gpu": "1"}
    # spec.gpus.resourceName set by the user wins over the class's.
    own = make_svc(l4(gpus={"product": "L4", "resourceName": "nvidia.com/gpu"}))
    limits = rendering.render_all(own, hand_plan(), settings)[0]["spec"]["template"]["spec"][
        "containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1"}


def test_an_unknown_class_is_refused_at_start() -> None:
    with pytest.raises(ValidationError, match="LLMOP_GPU_CLASS.*aks, eks, gke, nvidia"):
        Settings(gpu_class="gcp")


def test_the_placement_explains_class_and_label() -> None:
    placed = gpu_placement(make_svc(l4()).spec, Settings(gpu_class="eks"))
    assert placed.explanation == (
        "GPU class 'eks': nodeSelector karpenter.k8s.aws/instance-gpu-name=l4")
    assert set(PRESETS) == {"nvidia", "gke", "eks", "aks"}


def test_the_plan_says_which_class_and_label_placed_the_pod() -> None:
    spec = LLMServiceSpec.model_validate(
        {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": {"product": "L4"}})
    plan = with_placement(make_plan(spec, gpus_per_node=8), spec,
                                    Settings(gpu_class="gke"))
    placement = [e for e in plan_summary(plan)["explanations"] if e["name"] == "placement"]
    assert placement == [{"name": "placement", "value": "cloud.google.com/gke-accelerator="
                          "nvidia-l4", "source": "GPU class 'gke'",
                          "formula": "GPU class 'gke': nodeSelector "
                          "cloud.google.com/gke-accelerator=nvidia-l4"}]


# --- item 5: PodMonitor and the sample minimum -----------------------------------------


def test_pod_monitor_carries_the_configured_labels_and_interval() -> None:
    settings = Settings(pod_monitor="enabled",
                        pod_monitor_labels={"release": "kube-prometheus-stack"},
                        scrape_interval_seconds=30)
    monitor = rendering.render_all(make_svc(), hand_plan(), settings)[2]
    validate_manifest(monitor)
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["metadata"]["labels"]["llmops.dev/llmservice"] == "llama"
    assert monitor["spec"]["podMetricsEndpoints"][0]["interval"] == "30s"
    # The schema's Duration pattern is not vacuous.
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "30 seconds"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, POD_MONITOR_SCHEMA)


def test_pod_monitor_labels_may_not_take_the_operators_own() -> None:
    with pytest.raises(ValidationError, match="LLMOP_POD_MONITOR_LABELS"):
        Settings(pod_monitor_labels={"app.kubernetes.io/name": "x"})


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMOP_POD_MONITOR_LABELS", '{"release": "prom"}')
    monkeypatch.setenv("LLMOP_SCRAPE_INTERVAL_SECONDS", "15")
    s = Settings()
    assert s.pod_monitor_labels == {"release": "prom"} and s.scrape_interval_seconds == 15


def queueing(samples: int) -> Observation:
    now = 1_800_000_000.0
    return Observation(
        namespace="ns", name="svc", evaluated_at=now, window_seconds=120.0, samples=samples,
        last_sample_at=now - 10, replicas=1, running_mean=16.0, running_max=16.0,
        waiting_mean=6.0, waiting_max=9.0, kv_usage_mean=0.30, kv_usage_max=0.40,
        preemption_rate=0.0, ttft_p95_seconds=0.2, itl_p95_seconds=0.02,
        mean_prompt_tokens=128.0, mean_generation_tokens=256.0, kv_capacity_tokens=16384)


def test_the_policy_acts_at_a_30s_scrape_with_a_120s_window() -> None:
    """At kube-prometheus-stack's default 30 s scrape a 120 s window holds 4 samples: the
    fixed minimum of 5 held forever ("TooLittleData"); the derived one acts."""
    settings = Settings()  # the defaults: 120 s window, 30 s scrape
    policy = policy_for_scrape(settings.adaptation_window_seconds,
                               settings.scrape_interval_seconds)
    spec = LLMServiceSpec.model_validate({
        "model": {"name": "m"}, "adaptation": {"mode": "Apply", "cooldownSeconds": 600},
        "workload": {"slo": {"ttftP95Ms": 2000, "itlP95Ms": 100}}})
    obs = queueing(samples=4)
    decision = decide(obs, AdaptationState(current=16), spec, obs.evaluated_at,
                      settings=policy)
    assert decision.action is CapAction.RAISE, decision.reason
    # Fewer samples than the derived minimum still hold, and say so.
    held = decide(queueing(samples=2), AdaptationState(current=16), spec, obs.evaluated_at,
                  settings=policy)
    assert held.action is CapAction.HOLD and "too little data" in held.reason.lower()


@pytest.mark.parametrize(("window", "interval", "minimum"),
                         [(120, 30, 3), (120, 1, 5), (20, 1, 5), (60, 15, 3), (150, 30, 4)])
def test_the_sample_minimum_follows_the_scrape_interval(
    window: float, interval: float, minimum: int
) -> None:
    assert policy_for_scrape(window, interval).min_samples == minimum


def test_a_window_too_short_for_the_interval_is_refused_naming_both_settings() -> None:
    with pytest.raises(ValueError, match="LLMOP_ADAPTATION_WINDOW_SECONDS.*"
                                         "LLMOP_SCRAPE_INTERVAL_SECONDS"):
        policy_for_scrape(60, 30)
    with pytest.raises(ValidationError, match="LLMOP_ADAPTATION_WINDOW_SECONDS.*"
                                              "LLMOP_SCRAPE_INTERVAL_SECONDS"):
        Settings(adaptation_window_seconds=60, scrape_interval_seconds=30)
    assert settings_module.MIN_SCRAPES_PER_WINDOW == policy_module.MIN_SCRAPES_PER_WINDOW

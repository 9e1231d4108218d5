"""The renderer: golden YAML, behaviour a user would notice, and schema validation.

Golden files live in ``tests/unit/golden/``; ``UPDATE_GOLDEN=1 pytest tests/unit/
test_rendering.py`` rewrites them (review the diff before committing). Every rendered
Deployment and Service is validated strictly against the newest Kubernetes schema that
kubernetes-validate ships; the PodMonitor and the LeaderWorkerSet (CRD kinds it cannot
know) against schemas of the fields we emit, written from their projects' CRDs and kept
in ``tests/unit/data/schemas/`` (read by ``tests.support.schemas.load_schema``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml
from tests.support.schemas import load_schema

from llm_operator import rendering
from llm_operator.api.constants import ANNOTATION_SPEC_HASH, DEFAULT_IMAGE, GIB, LABEL_SERVICE
from llm_operator.api.errors import SpecErrors
from llm_operator.api.models import LLMService, parse_llmservice
from llm_operator.planning import Plan, effective_engine_value, make_plan
from llm_operator.rendering.deployment import build_deployment
from llm_operator.rendering.identity import COMPONENT_TUNING, labels_for, spec_hash
from llm_operator.rendering.leaderworkerset import (
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    JOIN_BASE_SECONDS,
    build_leader_worker_set,
    join_timeout_seconds,
)
from llm_operator.rendering.pod import MODEL_MOUNT_PATH
from llm_operator.rendering.podmonitor import build_pod_monitor, prometheus_pod_label
from llm_operator.rendering.service import build_service
from llm_operator.rendering.vllm_args import build_vllm_args
from llm_operator.settings import Settings

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = kubernetes_validate.utils.latest_version()
UID = "0b6c1d2e-3f40-4a5b-8c6d-7e8f90a1b2c3"


# --- helpers ---------------------------------------------------------------------------


def hand_plan(**changes: Any) -> Plan:
    """A plan as the planner would produce it, written by hand (Llama 3.1 8B on one
    H100 80 GB unless changed)."""
    values: dict[str, Any] = {
        "model_name": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu_product": "NVIDIA-H100-80GB-HBM3",
        "gpu_memory_bytes": 80 * GIB,
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "gpus_per_replica": 1,
        "nodes_per_replica": 1,
        "max_model_len": 8192,
        "dtype": "auto",
        "weight_bytes": 16_060_522_496,
        "weight_bytes_per_gpu": 16_060_522_496,
        "kv_bytes_per_token": 131_072,
        "kv_token_capacity": 436_000,
        "max_num_seqs": 256,
        "max_num_batched_tokens": None,
        "explanations": [],
    }
    values.update(changes)
    return Plan(**values)


def make_svc(
    spec: dict[str, Any] | None = None,
    *,
    name: str = "llama",
    namespace: str = "ml",
    uid: str | None = UID,
    annotations: dict[str, str] | None = None,
) -> LLMService:
    """Parse an LLMService body the way the operator does."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    if annotations:
        meta["annotations"] = annotations
    body = {
        "apiVersion": "llmops.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": meta,
        "spec": spec or {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}},
    }
    return parse_llmservice(body)


def args_of(deployment: dict[str, Any]) -> list[str]:
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def container_of(deployment: dict[str, Any]) -> dict[str, Any]:
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def flag_value(args: list[str], flag: str) -> str | None:
    """The value after ``flag`` in ``args``, or None when the flag is absent."""
    return args[args.index(flag) + 1] if flag in args else None


def dump(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True)


# Custom resources kubernetes-validate cannot know, validated against schemas of the
# fields we emit (provenance in each file: tests/unit/data/schemas/).
POD_MONITOR_SCHEMA: dict[str, Any] = load_schema("podmonitor")
INFERENCE_POOL_SCHEMA: dict[str, Any] = load_schema("inferencepool")
LWS_SCHEMA: dict[str, Any] = load_schema("leaderworkerset")


def validate_leader_worker_set(obj: dict[str, Any]) -> None:
    """Strict validation of a LeaderWorkerSet: its own fields against LWS_SCHEMA (and the
    webhook's cross-field rule), its metadata as an ObjectMeta and each pod template as
    a core/v1 PodTemplate, strictly, through kubernetes-validate."""
    jsonschema.validate(obj, LWS_SCHEMA)
    rolling = obj["spec"].get("rolloutStrategy", {}).get("rollingUpdateConfiguration", {})
    if rolling.get("maxUnavailable", 1) in (0, "0%") and rolling.get("maxSurge", 0) in (0, "0%"):
        raise jsonschema.ValidationError("maxUnavailable must not be 0 when maxSurge is 0")
    stand_in = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
    kubernetes_validate.validate(stand_in, K8S_VERSION, strict=True)
    templates = obj["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        if role in templates:
            wrapped = {"apiVersion": "v1", "kind": "PodTemplate",
                       "metadata": {"name": f"{obj['metadata']['name']}-{role.lower()}",
                                    "namespace": obj["metadata"]["namespace"]},
                       "template": templates[role]}
            kubernetes_validate.validate(wrapped, K8S_VERSION, strict=True)


def validate_manifest(obj: dict[str, Any]) -> None:
    """Strict schema validation of one rendered child (raises on any problem)."""
    if obj["kind"] == "LeaderWorkerSet":
        validate_leader_worker_set(obj)
        return
    if obj["kind"] in ("PodMonitor", "InferencePool"):
        jsonschema.validate(obj, POD_MONITOR_SCHEMA if obj["kind"] == "PodMonitor"
                            else INFERENCE_POOL_SCHEMA)
        # Its metadata is a plain ObjectMeta: validate it strictly through a kind
        # kubernetes-validate knows.
        stand_in = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
        kubernetes_validate.validate(stand_in, K8S_VERSION, strict=True)
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


# --- golden cases ----------------------------------------------------------------------

# name -> (spec, plan changes, overrides, pod_monitor discovered)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, int] | None, bool | None]] = {
    "minimal": (
        {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}},
        {},
        None,
        None,
    ),
    "llama70b-tp4-tuned-podmonitor": (
        {
            "model": {
                "name": "meta-llama/Llama-3.1-70B-Instruct",
                "revision": "945c8663693130f8be2ee66210e062158b2a9693",
                "tokenSecretRef": {"name": "hf-token"},
            },
            "image": "vllm/vllm-openai:v0.11.0",
            "replicas": 2,
            "gpus": {"product": "NVIDIA-H100-80GB-HBM3"},
            "scheduling": {
                "nodeSelector": {"pool": "h100"},
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
                "priorityClassName": "inference",
            },
            "engine": {
                "enablePrefixCaching": True,
                "kvCacheDtype": "fp8",
                "extraArgs": ["--enable-log-requests", "--max-log-len", "256"],
            },
            "cache": {"claimName": "hf-cache"},
            "resources": {"cpu": "16", "memory": "256Gi", "shmSize": "32Gi"},
        },
        {
            "model_name": "meta-llama/Llama-3.1-70B-Instruct",
            "tensor_parallel_size": 4,
            "gpus_per_replica": 4,
            "max_model_len": 16384,
            "weight_bytes": 141_107_412_992,
            "weight_bytes_per_gpu": 35_276_853_248,
            "max_num_seqs": 128,
            "max_num_batched_tokens": 8192,
        },
        {"maxNumSeqs": 96},
        True,
    ),
    "volume-model-pinned": (
        {
            "model": {
                "name": "qwen2.5-7b",
                "volume": {"claimName": "models", "subPath": "qwen2.5-7b-instruct"},
            },
            "gpus": {"count": 2, "resourceName": "amd.com/gpu", "memoryGib": 64},
            "scheduling": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["a"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            "engine": {
                "tensorParallelSize": 1,
                "pipelineParallelSize": 2,
                "maxNumSeqs": 32,
                "maxNumBatchedTokens": 4096,
                "dtype": "bfloat16",
                "enableChunkedPrefill": False,
                "gpuMemoryUtilization": 0.85,
            },
        },
        {
            "model_name": "qwen2.5-7b",
            "gpu_product": "custom",
            "gpu_memory_bytes": 64 * GIB,
            "pipeline_parallel_size": 2,
            "gpus_per_replica": 2,
            "dtype": "bfloat16",
            "max_num_seqs": 32,
            "max_num_batched_tokens": 4096,
        },
        {"maxNumSeqs": 200, "maxNumBatchedTokens": 16384},
        False,
    ),
}


def render_case(name: str) -> list[dict[str, Any]]:
    spec, plan_changes, overrides, discovered = CASES[name]
    return rendering.render_all(
        make_svc(spec),
        hand_plan(**plan_changes),
        Settings(),
        overrides=overrides,
        pod_monitor=discovered,
    )


def check_golden(path: Path, docs: list[dict[str, Any]]) -> None:
    text = dump(docs)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), (
        f"rendered output differs from {path.name}; if intended, run with UPDATE_GOLDEN=1"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    check_golden(GOLDEN / f"{name}.yaml", render_case(name))


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_manifest_validates_strictly(name: str) -> None:
    docs = render_case(name)
    assert [d["kind"] for d in docs][:2] == ["Deployment", "Service"]
    for doc in docs:
        validate_manifest(doc)


def test_strict_validation_would_catch_a_bad_field() -> None:
    """The validation above is not vacuous: a misspelt field fails it."""
    deployment = render_case("minimal")[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["argz"] = ["x"]
    with pytest.raises(kubernetes_validate.utils.ValidationError):
        validate_manifest(deployment)
    monitor = render_case("llama70b-tp4-tuned-podmonitor")[2]
    monitor["spec"]["podMetricsEndpoints"][0]["port"] = 8000
    with pytest.raises(jsonschema.ValidationError):
        validate_manifest(monitor)


# --- vLLM arguments --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "overrides", "plan_value", "expected", "source"),
    [
        ({}, None, 256, "256", "planned"),
        ({}, {"maxNumSeqs": 48}, 256, "48", "override"),
        ({"maxNumSeqs": 16}, {"maxNumSeqs": 48}, 256, "16", "pinned"),
        ({"maxNumSeqs": 16}, None, 256, "16", "pinned"),
    ],
)
def test_max_num_seqs_pin_wins_over_override_and_plan(
    engine: dict[str, Any],
    overrides: dict[str, int] | None,
    plan_value: int,
    expected: str,
    source: str,
) -> None:
    svc = make_svc({"model": {"name": "m/x"}, "engine": engine})
    args = build_vllm_args(svc, hand_plan(max_num_seqs=plan_value), overrides)
    assert flag_value(args, "--max-num-seqs") == expected
    _, got_source = effective_engine_value(
        svc.spec.engine, "maxNumSeqs", plan_value, overrides
    )
    assert got_source == source


@pytest.mark.parametrize(
    ("engine", "overrides", "plan_value", "expected"),
    [
        ({}, None, None, None),  # vLLM's own default: flag absent
        ({}, None, 8192, "8192"),
        ({}, {"maxNumBatchedTokens": 2048}, None, "2048"),
        ({"maxNumBatchedTokens": 4096}, {"maxNumBatchedTokens": 2048}, 8192, "4096"),
    ],
)
def test_max_num_batched_tokens_pin_override_plan(
    engine: dict[str, Any],
    overrides: dict[str, int] | None,
    plan_value: int | None,
    expected: str | None,
) -> None:
    svc = make_svc({"model": {"name": "m/x"}, "engine": engine})
    args = build_vllm_args(svc, hand_plan(max_num_batched_tokens=plan_value), overrides)
    assert flag_value(args, "--max-num-batched-tokens") == expected


def test_extra_args_come_last_and_verbatim() -> None:
    extra = ["--enable-log-requests", "--max-log-len", "8", "--enforce-eager"]
    svc = make_svc(
        {"model": {"name": "m/x", "revision": "abc"}, "engine": {
            "extraArgs": extra, "enablePrefixCaching": False, "dtype": "float16"}}
    )
    args = build_vllm_args(svc, hand_plan(), {"maxNumSeqs": 7})
    assert args[-len(extra):] == extra
    assert args[0] == "m/x" and "--model" not in args  # the model is positional, first
    assert "--revision" in args[: -len(extra)]


@pytest.mark.parametrize(
    ("arg", "index"),
    [
        ("--max-num-seqs", 0),
        ("--max-num-seqs=64", 0),
        ("--max_num_seqs", 0),
        ("-tp", 0),
        ("--gpu-memory-utilization=0.5", 0),
        ("--no-enable-prefix-caching", 0),
    ],
)
def test_extra_args_may_not_set_managed_flags(arg: str, index: int) -> None:
    takes_value = "=" not in arg and "enable" not in arg  # else a "1" would be stray
    svc = make_svc({"model": {"name": "m/x"},
                    "engine": {"extraArgs": [arg, "1"] if takes_value else [arg]}})
    with pytest.raises(SpecErrors) as excinfo:
        build_vllm_args(svc, hand_plan())
    (error,) = excinfo.value.errors
    assert error.field == f"spec.engine.extraArgs[{index}]"
    assert "spec.engine." in error.fix


def test_unknown_override_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="maxModelLen"):
        build_vllm_args(make_svc(), hand_plan(), {"maxModelLen": 4096})
    with pytest.raises(ValueError, match="positive"):
        build_vllm_args(make_svc(), hand_plan(), {"maxNumSeqs": 0})


@pytest.mark.parametrize(
    ("engine", "present", "absent"),
    [
        ({}, [], ["--enable-chunked-prefill", "--no-enable-chunked-prefill",
                  "--enable-prefix-caching", "--no-enable-prefix-caching",
                  "--dtype", "--kv-cache-dtype", "--pipeline-parallel-size"]),
        ({"enableChunkedPrefill": True}, ["--enable-chunked-prefill"],
         ["--no-enable-chunked-prefill"]),
        ({"enableChunkedPrefill": False}, ["--no-enable-chunked-prefill"],
         ["--enable-chunked-prefill"]),
        ({"enablePrefixCaching": True}, ["--enable-prefix-caching"],
         ["--no-enable-prefix-caching"]),
        ({"dtype": "bfloat16", "kvCacheDtype": "fp8_e5m2"}, ["--dtype", "--kv-cache-dtype"], []),
    ],
)
def test_switches_only_when_the_user_set_them(
    engine: dict[str, Any], present: list[str], absent: list[str]
) -> None:
    args = build_vllm_args(make_svc({"model": {"name": "m/x"}, "engine": engine}),
                                     hand_plan())
    for flag in present:
        assert flag in args
    for flag in absent:
        assert flag not in args


def test_parallelism_and_gpu_requests_follow_the_plan() -> None:
    svc = make_svc({"model": {"name": "m/x"}, "gpus": {"resourceName": "nvidia.com/gpu"}})
    plan = hand_plan(tensor_parallel_size=4, pipeline_parallel_size=2, gpus_per_replica=8)
    deployment = build_deployment(svc, plan, Settings())
    args = args_of(deployment)
    assert flag_value(args, "--tensor-parallel-size") == "4"
    assert flag_value(args, "--pipeline-parallel-size") == "2"
    resources = container_of(deployment)["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == "8"
    assert resources["limits"]["nvidia.com/gpu"] == "8"


def test_args_are_deterministic() -> None:
    first = dump(render_case("llama70b-tp4-tuned-podmonitor"))
    second = dump(render_case("llama70b-tp4-tuned-podmonitor"))
    assert first == second


# --- model source, token, volumes ------------------------------------------------------


def test_model_from_volume_is_mounted_read_only_and_offline() -> None:
    svc = make_svc(
        {"model": {"name": "my-model", "revision": "ignored",
                   "volume": {"claimName": "models", "subPath": "a/b"}}}
    )
    deployment = build_deployment(svc, hand_plan(), Settings())
    args = args_of(deployment)
    container = container_of(deployment)
    mounts = container["volumeMounts"]
    mount = next(m for m in mounts if m["mountPath"] == MODEL_MOUNT_PATH)
    assert args[0] == MODEL_MOUNT_PATH
    assert flag_value(args, "--served-model-name") == "my-model"
    assert "--revision" not in args  # a volume holds one revision already
    assert mount == {"name": "model", "mountPath": "/mnt/models", "readOnly": True,
                     "subPath": "a/b"}
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == mount["name"])
    assert volume["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]


def test_hub_model_is_downloaded_online_then_served_offline() -> None:
    deployment = build_deployment(make_svc(), hand_plan(), Settings())
    container = container_of(deployment)
    assert args_of(deployment)[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert all(m["mountPath"] != MODEL_MOUNT_PATH for m in container["volumeMounts"])
    # No token; vLLM's usage statistics off; vLLM reads the cache the init container
    # filled, so a restart does not ask the hub again.
    # HF_HOME is the cache's mount, vLLM's compile cache on it too, HOME writable by the
    # pods' user (not root).
    assert container["env"] == [{"name": "VLLM_NO_USAGE_STATS", "value": "1"},
                                {"name": "DO_NOT_TRACK", "value": "1"},
                                {"name": "HF_HOME", "value": "/var/cache/huggingface"},
                                {"name": "VLLM_CACHE_ROOT",
                                 "value": "/var/cache/huggingface/vllm"},
                                {"name": "HOME", "value": "/tmp"},
                                {"name": "HF_HUB_OFFLINE", "value": "1"}]
    # The download itself stays online, or it would skip its work.
    (download,) = deployment["spec"]["template"]["spec"]["initContainers"]
    assert all(e["name"] != "HF_HUB_OFFLINE" for e in download["env"])


@pytest.mark.parametrize("extra", [["--tokenizer", "other/tok"], ["--load_format=gguf"],
                                   ["--speculative-config", '{"model": "d/raft"}']])
def test_a_hub_model_whose_flags_fetch_more_stays_online(extra: list[str]) -> None:
    svc = make_svc({"model": {"name": "m/x"}, "engine": {"extraArgs": extra}})
    env = container_of(build_deployment(svc, hand_plan(), Settings()))["env"]
    assert all(e["name"] != "HF_HUB_OFFLINE" for e in env)


def test_the_users_hf_hub_offline_wins_for_a_hub_model() -> None:
    svc = make_svc({"model": {"name": "m/x"},
                    "pod": {"env": [{"name": "HF_HUB_OFFLINE", "value": "0"}]}})
    deployment = build_deployment(svc, hand_plan(), Settings())
    env = container_of(deployment)["env"]
    assert [e for e in env if e["name"] == "HF_HUB_OFFLINE"] == [
        {"name": "HF_HUB_OFFLINE", "value": "0"}]
    (download,) = deployment["spec"]["template"]["spec"]["initContainers"]
    assert [e for e in download["env"] if e["name"] == "HF_HUB_OFFLINE"] == [
        {"name": "HF_HUB_OFFLINE", "value": "0"}]


@pytest.mark.parametrize(("ref", "key"), [({"name": "hf"}, "token"),
                                          ({"name": "hf", "key": "HF_TOKEN"}, "HF_TOKEN")])
def test_token_comes_from_the_secret_reference(ref: dict[str, str], key: str) -> None:
    svc = make_svc({"model": {"name": "meta-llama/Llama-3.1-8B", "tokenSecretRef": ref}})
    env = container_of(build_deployment(svc, hand_plan(), Settings()))["env"]
    assert [e for e in env if e["name"] == "HF_TOKEN"] == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": key}}}]


@pytest.mark.parametrize(
    ("cache", "expected"),
    [
        # Sized from the plan: 16.06 GB of weights x 1.1 + 5 GiB = 21.5 GiB -> 22Gi.
        ({}, {"name": "model-cache", "emptyDir": {"sizeLimit": "22Gi"}}),
        ({"sizeLimit": "500Gi"}, {"name": "model-cache", "emptyDir": {"sizeLimit": "500Gi"}}),
        ({"claimName": "hf"}, {"name": "model-cache",
                               "persistentVolumeClaim": {"claimName": "hf"}}),
    ],
)
def test_cache_volume_and_shm(cache: dict[str, str], expected: dict[str, Any]) -> None:
    svc = make_svc({"model": {"name": "m/x"}, "cache": cache, "resources": {"shmSize": "8Gi"}})
    deployment = build_deployment(svc, hand_plan(), Settings())
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    mounts = {m["name"]: m["mountPath"] for m in container_of(deployment)["volumeMounts"]}
    assert expected in volumes
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in volumes
    assert mounts == {"dshm": "/dev/shm", "model-cache": "/var/cache/huggingface"}


# --- probes, rollout, scheduling -------------------------------------------------------


@pytest.mark.parametrize("weight_gb", [1, 16, 141, 810])
def test_startup_budget_of_a_hand_plan_fits_loading_at_100_mib_per_second(
        weight_gb: int) -> None:
    weight = weight_gb * 10**9
    svc = make_svc({"model": {"name": "m/x"}, "cache": {"claimName": "hf"}})
    deployment = build_deployment(svc, hand_plan(weight_bytes=weight), Settings())
    probe = container_of(deployment)["startupProbe"]
    allowed = probe["periodSeconds"] * probe["failureThreshold"]
    needed = 600 + weight / (100 * 2**20)
    assert needed <= allowed < needed + probe["periodSeconds"] + 1
    assert probe["httpGet"] == {"path": "/health", "port": "http"}
    # The Deployment must not declare the rollout failed while the model still loads.
    assert deployment["spec"]["progressDeadlineSeconds"] > allowed


def test_startup_budget_grows_with_weights() -> None:
    thresholds = [
        container_of(build_deployment(make_svc(), hand_plan(weight_bytes=w),
                                                Settings()))["startupProbe"]["failureThreshold"]
        for w in (2 * 10**9, 16 * 10**9, 141 * 10**9)
    ]
    assert thresholds == sorted(thresholds) and len(set(thresholds)) == 3


def test_readiness_and_liveness_on_health() -> None:
    container = container_of(build_deployment(make_svc(), hand_plan(), Settings()))
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


@pytest.mark.parametrize("replicas", [0, 1, 3])
def test_rollout_never_needs_a_spare_gpu(replicas: int) -> None:
    svc = make_svc({"model": {"name": "m/x"}, "replicas": replicas})
    spec = build_deployment(svc, hand_plan(), Settings())["spec"]
    assert spec["replicas"] == replicas
    assert spec["strategy"] == {"type": "RollingUpdate",
                                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


@pytest.mark.parametrize(
    ("scheduling", "product", "expected"),
    [
        ({}, None, None),
        ({}, "NVIDIA-L4", {"nvidia.com/gpu.product": "NVIDIA-L4"}),
        # An alias becomes the label value GPU feature discovery puts on the node ...
        ({}, "H100-SXM", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
        # ... and for a product the GPU class does not know, the user's own label wins.
        ({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-RTX-6000-Ada-Generation"}},
         "RTX-6000-Ada", {"nvidia.com/gpu.product": "NVIDIA-RTX-6000-Ada-Generation"}),
        ({"nodeSelector": {"pool": "gpu"}}, "NVIDIA-L4",
         {"nvidia.com/gpu.product": "NVIDIA-L4", "pool": "gpu"}),
        ({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4-24GB"}}, "NVIDIA-L4",
         {"nvidia.com/gpu.product": "NVIDIA-L4-24GB"}),  # the user's selector wins
    ],
)
def test_node_selector(
    scheduling: dict[str, Any], product: str | None, expected: dict[str, str] | None
) -> None:
    gpus = {"product": product} if product else {}
    svc = make_svc({"model": {"name": "m/x"}, "gpus": gpus, "scheduling": scheduling})
    pod = build_deployment(svc, hand_plan(), Settings())["spec"]["template"]["spec"]
    assert pod.get("nodeSelector") == expected


def test_user_cpu_and_memory_win_over_the_derived_ones() -> None:
    svc = make_svc({"model": {"name": "m/x"}, "resources": {"cpu": "8", "memory": "64Gi"}})
    sized = container_of(build_deployment(svc, hand_plan(), Settings()))
    assert sized["resources"]["requests"] == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1",
                                              "ephemeral-storage": "22Gi"}
    # No CPU limit ever; the user's memory is request = limit.
    assert sized["resources"]["limits"] == {"memory": "64Gi", "nvidia.com/gpu": "1"}


@pytest.mark.parametrize(("spec_image", "expected"),
                         [(None, "registry.local/vllm:1"), ("vllm/vllm-openai:v0.10.2",
                                                            "vllm/vllm-openai:v0.10.2")])
def test_image_from_spec_else_settings(spec_image: str | None, expected: str) -> None:
    spec: dict[str, Any] = {"model": {"name": "m/x"}}
    if spec_image:
        spec["image"] = spec_image
    settings = Settings(default_image="registry.local/vllm:1")
    container = container_of(build_deployment(make_svc(spec), hand_plan(), settings))
    assert container["image"] == expected
    # Explicit, whatever the image's entrypoint: images differ (and 0.11 rejects --model).
    assert container["command"] == ["vllm", "serve"]


# --- identity: labels, selectors, owners, hashes ---------------------------------------


def test_labels_and_selectors_agree() -> None:
    deployment, service, monitor = render_case("llama70b-tp4-tuned-podmonitor")[:3]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_labels == {
        "llmops.dev/llmservice": "llama",
        "llmops.dev/component": "server",
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": "llama",
        "app.kubernetes.io/component": "server",
        "app.kubernetes.io/managed-by": "llm-operator",
        "app.kubernetes.io/part-of": "llm-operator",
    }
    for selector in (deployment["spec"]["selector"]["matchLabels"], service["spec"]["selector"],
                     monitor["spec"]["selector"]["matchLabels"]):
        assert selector == {"llmops.dev/llmservice": "llama", "llmops.dev/component": "server"}
        assert selector.items() <= pod_labels.items()
        # A tuning Job's pods (same service, other component) never receive traffic.
        tuning = labels_for(make_svc(), COMPONENT_TUNING)
        assert not selector.items() <= tuning.items()


@pytest.mark.parametrize("uid", [UID, None])
def test_owner_references_only_with_a_uid(uid: str | None) -> None:
    docs = rendering.render_all(make_svc(uid=uid), hand_plan(), Settings(), pod_monitor=True)
    for doc in docs:
        if uid is None:
            assert "ownerReferences" not in doc["metadata"]
        else:
            assert doc["metadata"]["ownerReferences"] == [{
                "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService", "name": "llama",
                "uid": uid, "controller": True, "blockOwnerDeletion": True}]


def test_kopf_annotations_are_never_copied() -> None:
    svc = make_svc(annotations={
        "kopf.zalando.org/last-handled-configuration": "{}",
        "llmops.dev/last-handled-configuration": "{}",
        "team": "search",
    })
    for doc in rendering.render_all(svc, hand_plan(), Settings(), pod_monitor=True):
        assert list(doc["metadata"]["annotations"]) == [ANNOTATION_SPEC_HASH]
        template = doc["spec"].get("template", {}).get("metadata", {})
        assert "annotations" not in template


def test_spec_hash_is_stable_self_excluding_and_tracks_changes() -> None:
    svc = make_svc()
    a = build_deployment(svc, hand_plan(), Settings())
    b = build_deployment(make_svc(), hand_plan(), Settings())
    h = a["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
    assert h == b["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
    assert spec_hash(a) == h  # the annotation itself is left out of the hash
    tuned = build_deployment(svc, hand_plan(), Settings(), {"maxNumSeqs": 64})
    assert tuned["metadata"]["annotations"][ANNOTATION_SPEC_HASH] != h
    # A pinned field does not move, so an override there changes nothing at all.
    pinned = make_svc({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                       "engine": {"maxNumSeqs": 256}})
    p1 = build_deployment(pinned, hand_plan(), Settings())
    p2 = build_deployment(pinned, hand_plan(), Settings(), {"maxNumSeqs": 64})
    assert p1 == p2


def test_service_shape() -> None:
    service = build_service(make_svc())
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http",
                                         "protocol": "TCP"}]
    assert service["metadata"]["name"] == "llama" and service["metadata"]["namespace"] == "ml"


# --- PodMonitor ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "discovered", "expected"),
    [
        ("auto", None, False),  # default: no PodMonitor
        ("auto", False, False),
        ("auto", True, True),
        ("enabled", None, True),
        ("enabled", False, True),
        ("disabled", True, False),
    ],
)
def test_pod_monitor_only_when_wanted(setting: str, discovered: bool | None,
                                      expected: bool) -> None:
    settings = Settings(pod_monitor=setting)
    docs = rendering.render_all(make_svc(), hand_plan(), settings, pod_monitor=discovered)
    assert ("PodMonitor" in [d["kind"] for d in docs]) is expected


def test_pod_monitor_relabels_service_and_namespace() -> None:
    settings = Settings(prometheus_service_label="svc", prometheus_namespace_label="ns")
    monitor = build_pod_monitor(make_svc(), settings)
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
    targets = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert targets == {
        "svc": ["__meta_kubernetes_pod_label_llmops_dev_llmservice"],
        "ns": ["__meta_kubernetes_namespace"],
    }
    assert prometheus_pod_label(LABEL_SERVICE) == targets["svc"][0]
    validate_manifest(monitor)


# --- the real vLLM parser accepts what we render ---------------------------------------

_PARSE_SCRIPT = """
import json, sys
import vllm
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
serve = ServeSubcommand()
top = FlexibleArgumentParser(prog="vllm")
serve.subparser_init(top.add_subparsers(dest="subparser")).set_defaults(
    dispatch_function=serve.cmd)
out = {"version": vllm.__version__}
for name, argv in json.load(sys.stdin).items():
    ns = top.parse_args(argv)  # exactly as `vllm serve ARGS` parses them
    serve.validate(ns)
    if ns.model_tag is not None:  # what `vllm serve` does before it starts the server
        ns.model = ns.model_tag
    out[name] = {k: getattr(ns, k) for k in (
        "model_tag", "model", "served_model_name", "port", "tensor_parallel_size",
        "pipeline_parallel_size", "max_model_len", "gpu_memory_utilization", "max_num_seqs",
        "max_num_batched_tokens", "dtype", "kv_cache_dtype", "enable_chunked_prefill",
        "enable_prefix_caching", "revision", "quantization", "max_log_len",
        "enable_log_requests")}
print(json.dumps(out, default=str))
"""


@pytest.mark.vllm  # also in the vLLM tier: it imports vLLM (~10 s), though no server starts
def test_installed_vllm_parses_the_rendered_args() -> None:
    """``vllm serve``'s own parser (the CPU build in .venv-vllm, the release the default
    image is: it parses and validates, no server starts) accepts every golden case as the
    container runs it and reads back the values we meant."""
    python = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
    if not python.exists():
        pytest.skip(f"no vLLM interpreter at {python} (see docs/TESTING.md)")
    rendered = {}
    for name in CASES:
        container = container_of(render_case(name)[0])
        assert container["command"] == ["vllm", "serve"]
        rendered[name] = [*container["command"][1:], *container["args"]]
    proc = subprocess.run(
        [str(python), "-c", _PARSE_SCRIPT], input=json.dumps(rendered), capture_output=True,
        text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = json.loads(proc.stdout.strip().splitlines()[-1])
    # The default image is the release whose parser this is.
    assert DEFAULT_IMAGE.rsplit(":v", 1)[1] == parsed["version"]
    for name, argv in rendered.items():
        assert parsed[name]["model_tag"] == argv[1]  # the positional model, taken as such
    big = parsed["llama70b-tp4-tuned-podmonitor"]
    assert big["tensor_parallel_size"] == 4 and big["max_num_seqs"] == 96
    assert big["max_num_batched_tokens"] == 8192 and big["enable_prefix_caching"] is True
    assert big["kv_cache_dtype"] == "fp8" and big["revision"].startswith("945c")
    assert big["max_log_len"] == 256 and big["enable_log_requests"] is True  # extraArgs
    vol = parsed["volume-model-pinned"]
    assert vol["model"] == "/mnt/models" and vol["pipeline_parallel_size"] == 2
    assert vol["max_num_seqs"] == 32 and vol["max_num_batched_tokens"] == 4096  # pins won
    assert vol["enable_chunked_prefill"] is False and vol["dtype"] == "bfloat16"
    assert math.isclose(vol["gpu_memory_utilization"], 0.85)
    assert parsed["minimal"]["port"] == 8000


# --- examples/ through the real planner -------------------------------------------------


def _example_services() -> list[tuple[str, LLMService]]:
    found: list[tuple[str, LLMService]] = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and doc.get("kind") == "LLMService":
                found.append((f"{path.stem}-{i}", parse_llmservice(doc)))
    return found


def _plan_or_skip(svc: LLMService) -> Plan:
    from llm_operator.planning import make_plan

    try:
        return make_plan(svc.spec)
    except NotImplementedError:
        pytest.skip("planning.make_plan is not implemented yet")


def test_examples_render_and_validate() -> None:
    services = _example_services()
    if not services:
        pytest.skip("examples/ holds no LLMService yet")
    for name, svc in services:
        try:
            plan = _plan_or_skip(svc)
        except Exception as exc:  # a deliberately bad example is the planner's test
            if type(exc).__name__ in {"SpecError", "SpecErrors"}:
                continue
            raise
        docs = rendering.render_all(svc, plan, Settings(), pod_monitor=True)
        for doc in docs:
            validate_manifest(doc)
        check_golden(GOLDEN / f"example-{name}.yaml", docs)


# --- one replica over several nodes: LeaderWorkerSet ------------------------------------

# Llama 3.1 405B in bf16 on H100 80 GB nodes of 8 GPUs: what planning.make_plan gives
# (checked in test_planner_spreads_405b_over_two_nodes below), written by hand here so
# that the golden file does not move with the planner's batch figures.
LLAMA_405B_SPEC: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-405B-Instruct", "tokenSecretRef": {"name": "hf"}},
    "replicas": 2,
    "gpus": {"product": "NVIDIA-H100-80GB-HBM3", "perNode": 8},
    "scheduling": {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    },
    "cache": {"claimName": "hf-cache"},
    "resources": {"cpu": "32", "memory": "512Gi", "shmSize": "64Gi"},
}
LLAMA_405B_PLAN: dict[str, Any] = {
    "model_name": "meta-llama/Llama-3.1-405B-Instruct",
    "tensor_parallel_size": 8,
    "pipeline_parallel_size": 2,
    "gpus_per_replica": 16,
    "nodes_per_replica": 2,
    "max_model_len": 131072,
    "weight_bytes": 811_706_777_600,
    "weight_bytes_per_gpu": 50_731_673_600,
    "max_num_seqs": 512,
}
MULTI_NODE_GOLDEN = "llama405b-2nodes-lws"


def multi_node(
    spec: dict[str, Any] | None = None, overrides: dict[str, int] | None = None,
    pod_monitor: bool | None = True, **plan: Any,
) -> list[dict[str, Any]]:
    """render_all for the 405B case (or ``spec``) with the two-node plan (or changes)."""
    return rendering.render_all(
        make_svc(spec or LLAMA_405B_SPEC), hand_plan(**{**LLAMA_405B_PLAN, **plan}), Settings(),
        overrides=overrides, pod_monitor=pod_monitor,
    )


def templates_of(lws: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    group = lws["spec"]["leaderWorkerTemplate"]
    return group["leaderTemplate"], group["workerTemplate"]


def containers_of(lws: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    leader, worker = templates_of(lws)
    (lead,) = leader["spec"]["containers"]
    (work,) = worker["spec"]["containers"]
    return lead, work


def test_multi_node_golden() -> None:
    check_golden(GOLDEN / f"{MULTI_NODE_GOLDEN}.yaml", multi_node())


def test_planner_spreads_405b_over_two_nodes_and_renders_a_leader_worker_set() -> None:
    """The real planner puts Llama 3.1 405B (bf16) on two 8 x H100 nodes with pipeline
    stages across them; the renderer then emits a LeaderWorkerSet, never a Deployment."""
    from llm_operator.planning import make_plan

    svc = make_svc(LLAMA_405B_SPEC)
    plan = make_plan(svc.spec)
    assert (plan.tensor_parallel_size, plan.pipeline_parallel_size) == (8, 2)
    assert (plan.gpus_per_replica, plan.nodes_per_replica) == (16, 2)
    docs = rendering.render_all(svc, plan, Settings(), pod_monitor=True)
    assert [d["kind"] for d in docs] == ["LeaderWorkerSet", "Service", "PodMonitor",
                                         "PodDisruptionBudget"]  # 2 replicas
    for doc in docs:
        validate_manifest(doc)
    lws = docs[0]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    args = containers_of(lws)[0]["args"]
    assert flag_value(args, "--tensor-parallel-size") == "8"
    assert flag_value(args, "--pipeline-parallel-size") == "2"


@pytest.mark.parametrize(("nodes", "kind"), [(1, "Deployment"), (2, "LeaderWorkerSet"),
                                             (4, "LeaderWorkerSet")])
def test_workload_kind_follows_nodes_per_replica(nodes: int, kind: str) -> None:
    docs = multi_node(nodes_per_replica=nodes, gpus_per_replica=8 * nodes,
                      pipeline_parallel_size=nodes)
    assert [d["kind"] for d in docs] == [kind, "Service", "PodMonitor", "PodDisruptionBudget"]
    for doc in docs:
        validate_manifest(doc)


@pytest.mark.parametrize("replicas", [0, 1, 3])
def test_one_group_per_replica_one_pod_per_node(replicas: int) -> None:
    lws = multi_node({**LLAMA_405B_SPEC, "replicas": replicas})[0]
    assert lws["spec"]["replicas"] == replicas
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    validate_manifest(lws)


def test_group_lifecycle_fits_a_distributed_engine_on_scarce_gpus() -> None:
    spec = multi_node()[0]["spec"]
    # vLLM's distributed group does not survive a member's restart: the whole group
    # restarts.
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    # Workers start with the leader; LeaderReady would wait for a leader that becomes
    # ready only after the workers joined.
    assert spec["startupPolicy"] == "LeaderCreated"
    # Like the Deployment: a rollout never needs a spare group of GPUs.
    assert spec["rolloutStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
    }


@pytest.mark.parametrize("overrides", [None, {"maxNumSeqs": 64}])
def test_every_node_serves_the_deployment_args_with_the_mp_executor_over_the_nodes(
    overrides: dict[str, int] | None,
) -> None:
    spec = {**LLAMA_405B_SPEC, "engine": {"extraArgs": ["--enable-log-requests"]}}
    lws = multi_node(spec, overrides)[0]
    lead, work = containers_of(lws)
    plan = hand_plan(**LLAMA_405B_PLAN)
    # the default image's vLLM (0.32) takes --max-num-active-seqs: a LeaderWorkerSet never
    # runs the live cap, so a cap below the capacity is that flag (issue 60 item 3)
    expected = build_vllm_args(make_svc(spec), plan, overrides, active_cap_flag=True)
    # The same arguments the Deployment would pass, then vLLM's mp executor over the
    # group's nodes (after the user's extraArgs, so that they win), on every node.
    assert lead["args"] == [*expected, "--distributed-executor-backend", "mp", "--nnodes", "2"]
    assert work["args"] == lead["args"]
    assert flag_value(lead["args"], "--max-num-seqs") == str(LLAMA_405B_PLAN["max_num_seqs"])
    assert flag_value(lead["args"], "--max-num-active-seqs") == (
        str(overrides["maxNumSeqs"]) if overrides else None)
    assert lead["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


@pytest.mark.parametrize(
    ("gpus", "nodes", "per_pod"),
    # 9 over 2: rounded up (a plan the planner refuses: vLLM's --nnodes rule)
    [(16, 2, 8), (32, 4, 8), (12, 2, 6), (9, 2, 5)],
)
def test_every_pod_requests_its_nodes_share_of_gpus(gpus: int, nodes: int, per_pod: int) -> None:
    lws = multi_node(gpus_per_replica=gpus, nodes_per_replica=nodes)[0]
    for container in containers_of(lws):
        resources = container["resources"]
        assert resources["requests"]["nvidia.com/gpu"] == str(per_pod)
        assert resources["limits"]["nvidia.com/gpu"] == str(per_pod)
        assert resources["requests"]["cpu"] == "32"
        assert resources["limits"]["memory"] == "512Gi"
    assert per_pod * nodes >= gpus > (per_pod - 1) * nodes


def test_probes_only_on_the_leader_and_its_budget_covers_the_workers_joining() -> None:
    lead, work = containers_of(multi_node()[0])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert lead[probe]["httpGet"] == {"path": "/health", "port": "http"}
        assert probe not in work  # a worker serves nothing to probe
    assert "ports" not in work
    startup = lead["startupProbe"]
    allowed = startup["periodSeconds"] * startup["failureThreshold"]
    loading = 600 + LLAMA_405B_PLAN["weight_bytes"] / (200 * 10**6)
    svc = make_svc(LLAMA_405B_SPEC)
    join = join_timeout_seconds(svc.spec, hand_plan(**LLAMA_405B_PLAN))
    assert loading + join <= allowed


def test_join_wait_covers_a_workers_download_and_only_the_base_from_a_volume() -> None:
    """A worker joins after its own download init container: the leader waits the base
    (scheduling, image pull) plus that container's budget, not a fixed 600 s; a model on
    a volume has no download."""
    plan = hand_plan(**LLAMA_405B_PLAN)
    hub = join_timeout_seconds(make_svc(LLAMA_405B_SPEC).spec, plan)
    # 812 GB at the download's 50 MB/s floor: 16,235 s, on top of 600 + 600.
    assert hub == JOIN_BASE_SECONDS + 600 + 16_235
    vol = {**LLAMA_405B_SPEC, "model": {"name": LLAMA_405B_SPEC["model"]["name"],
                                        "volume": {"claimName": "weights"}}}
    assert join_timeout_seconds(make_svc(vol).spec, plan) == JOIN_BASE_SECONDS


def test_group_topology_key_becomes_the_lws_exclusive_topology_annotation() -> None:
    key = "topology.kubernetes.io/zone"
    spec = {**LLAMA_405B_SPEC, "scheduling": {**LLAMA_405B_SPEC["scheduling"],
                                              "groupTopologyKey": key}}
    lws = multi_node(spec)[0]
    assert lws["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY_ANNOTATION] == key
    assert EXCLUSIVE_TOPOLOGY_ANNOTATION not in (
        multi_node()[0]["metadata"].get("annotations") or {})


def test_only_leaders_receive_traffic_and_are_scraped() -> None:
    lws, service, monitor = multi_node()[:3]
    leader, worker = templates_of(lws)
    leader_labels = leader["metadata"]["labels"]
    worker_labels = worker["metadata"]["labels"]
    tuning = labels_for(make_svc(LLAMA_405B_SPEC), COMPONENT_TUNING)
    for selector in (service["spec"]["selector"], monitor["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= leader_labels.items()
        assert not selector.items() <= worker_labels.items()
        assert not selector.items() <= tuning.items()
    # Every server pod, leader or worker, still carries the service's labels.
    assert labels_for(make_svc(LLAMA_405B_SPEC), "server").items() \
        <= worker_labels.items()


def test_leader_worker_set_is_not_named_like_the_service() -> None:
    """LWS creates its headless Service (the leader's DNS name) only if no Service of the
    LeaderWorkerSet's name exists: sharing the ClusterIP Service's name would break it."""
    lws, service, _ = multi_node()[:3]
    assert service["metadata"]["name"] == "llama"
    assert lws["metadata"]["name"] == "llama-lws" != service["metadata"]["name"]


def test_workers_load_the_same_model_on_the_same_kind_of_node() -> None:
    spec = {**LLAMA_405B_SPEC,
            "model": {"name": "llama-405b", "volume": {"claimName": "models", "subPath": "405b"}},
            "scheduling": {**LLAMA_405B_SPEC["scheduling"], "nodeSelector": {"pool": "h100"},
                           "priorityClassName": "inference"}}
    lws = multi_node(spec)[0]
    leader, worker = templates_of(lws)
    lead, work = containers_of(lws)
    for key in ("env", "volumeMounts", "image", "resources"):
        assert lead[key] == work[key], key
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in work["env"]
    for key in ("volumes", "nodeSelector", "tolerations", "priorityClassName",
                "enableServiceLinks", "automountServiceAccountToken"):
        assert leader["spec"][key] == worker["spec"][key], key
    assert worker["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                              "pool": "h100"}


@pytest.mark.parametrize("replicas", [1, 12])
def test_too_long_a_name_for_lws_is_a_spec_error(replicas: int) -> None:
    spec = {**LLAMA_405B_SPEC, "replicas": replicas}
    plan = hand_plan(**LLAMA_405B_PLAN)
    limit = 52 - len("-lws") - len(f"-{replicas - 1}")
    build_leader_worker_set(make_svc(spec, name="a" * limit), plan, Settings())
    with pytest.raises(SpecErrors) as excinfo:
        build_leader_worker_set(make_svc(spec, name="a" * (limit + 1)), plan,
                                          Settings())
    (error,) = excinfo.value.errors
    assert error.field == "metadata.name"
    assert f"at most {limit} characters" in error.fix


def test_multi_node_identity_hash_and_owner() -> None:
    svc = make_svc(LLAMA_405B_SPEC, annotations={"kopf.zalando.org/x": "{}", "team": "a"})
    plan = hand_plan(**LLAMA_405B_PLAN)
    first = build_leader_worker_set(svc, plan, Settings())
    again = build_leader_worker_set(make_svc(LLAMA_405B_SPEC), plan, Settings())
    h = first["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
    assert list(first["metadata"]["annotations"]) == [ANNOTATION_SPEC_HASH]
    assert h == again["metadata"]["annotations"][ANNOTATION_SPEC_HASH] == spec_hash(first)
    tuned = build_leader_worker_set(svc, plan, Settings(), {"maxNumSeqs": 64})
    assert tuned["metadata"]["annotations"][ANNOTATION_SPEC_HASH] != h
    assert first["metadata"]["ownerReferences"][0]["uid"] == UID
    assert first["metadata"]["labels"] == labels_for(svc, "server")
    for template in templates_of(first):
        assert "annotations" not in template["metadata"]


def test_lws_validation_would_catch_bad_fields() -> None:
    """The LeaderWorkerSet checks are not vacuous: each level rejects a mistake."""
    import copy

    good = multi_node()[0]
    validate_manifest(good)
    misspelt = copy.deepcopy(good)
    misspelt["spec"]["leaderWorkerTemplate"]["sise"] = 2
    bad_policy = copy.deepcopy(good)
    bad_policy["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    no_progress = copy.deepcopy(good)
    no_progress["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxUnavailable"] = 0
    for broken in (misspelt, bad_policy, no_progress):
        with pytest.raises(jsonschema.ValidationError):
            validate_manifest(broken)
    bad_pod = copy.deepcopy(good)
    bad_pod["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0][
        "comand"] = ["x"]
    with pytest.raises(kubernetes_validate.utils.ValidationError):
        validate_manifest(bad_pod)


# The leader's and workers' scripts run for real (/bin/sh) against a stand-in for
# ``vllm``, which is not installed here, that records its argv.
_FAKE_VLLM = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write("vllm " + json.dumps(sys.argv[1:]) + "\\n")
"""


def _run_script(tmp_path: Path, container: dict[str, Any], env: dict[str, str]
                ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "vllm").write_text(_FAKE_VLLM)
    (bin_dir / "vllm").chmod(0o755)
    log = tmp_path / "log"
    full_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(log), **env}
    proc = subprocess.run([*container["command"], *container.get("args", [])], env=full_env,
                          capture_output=True, text=True, timeout=60, check=False)
    return proc, (log.read_text().splitlines() if log.exists() else [])


# What LWS injects into every container of group 0 of LeaderWorkerSet llama-lws.
LWS_ENV = {"LWS_LEADER_ADDRESS": "llama-lws-0.llama-lws.ml", "LWS_GROUP_SIZE": "2"}


def test_scripts_survive_kubernetes_expansion() -> None:
    """Kubernetes rewrites $(VAR) and $$ in command and args: the scripts use neither."""
    lead, work = containers_of(multi_node()[0])
    for text in (*lead["command"], *work["command"]):
        assert "$(" not in text and "$$" not in text


def test_leader_execs_vllm_as_node_0_at_its_own_address(tmp_path: Path) -> None:
    extra = ["--chat-template", "{{ messages }} it's \"quoted\"", "--enable-log-requests"]
    spec = {**LLAMA_405B_SPEC, "engine": {"extraArgs": extra}}
    lead, _ = containers_of(multi_node(spec)[0])
    proc, log = _run_script(tmp_path, lead, {**LWS_ENV, "LWS_WORKER_INDEX": "0"})
    assert proc.returncode == 0, proc.stderr
    # vllm serve received exactly the rendered arguments, nothing re-split or expanded,
    # then its rank and the leader's address (last: argparse keeps the last).
    assert log == ["vllm " + json.dumps(["serve", *lead["args"], "--node-rank", "0",
                                         "--master-addr", LWS_ENV["LWS_LEADER_ADDRESS"]])]


def test_worker_execs_vllm_headless_at_its_index(tmp_path: Path) -> None:
    _, work = containers_of(multi_node()[0])
    proc, log = _run_script(tmp_path, work, {**LWS_ENV, "LWS_WORKER_INDEX": "1"})
    assert proc.returncode == 0, proc.stderr
    assert log == ["vllm " + json.dumps(["serve", *work["args"], "--node-rank", "1",
                                         "--master-addr", LWS_ENV["LWS_LEADER_ADDRESS"],
                                         "--headless"])]


@pytest.mark.vllm  # imports vLLM (~10 s), though no server starts
def test_installed_vllm_parses_the_leader_args() -> None:
    """``vllm serve``'s own parser accepts the leader's and a worker's arguments as their
    scripts give them: the positional model, the mp executor over 2 nodes, TP 8, PP 2,
    each node's rank, the leader's address, the worker headless."""
    python = Path(os.environ.get("LLMOP_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
    if not python.exists():
        pytest.skip(f"no vLLM interpreter at {python} (see docs/TESTING.md)")
    script = _PARSE_SCRIPT.replace('"enable_log_requests")', '"enable_log_requests", '
                                   '"distributed_executor_backend", "nnodes", "node_rank", '
                                   '"master_addr", "headless")')
    lead, work = containers_of(multi_node()[0])
    addr = LWS_ENV["LWS_LEADER_ADDRESS"]
    argv = {"leader": ["serve", *lead["args"], "--node-rank", "0", "--master-addr", addr],
            "worker": ["serve", *work["args"], "--node-rank", "1", "--master-addr", addr,
                       "--headless"]}
    proc = subprocess.run([str(python), "-c", script], input=json.dumps(argv),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for role, rank in (("leader", 0), ("worker", 1)):
        parsed = out[role]
        assert parsed["model_tag"] == lead["args"][0]
        assert parsed["distributed_executor_backend"] == "mp" and parsed["nnodes"] == 2
        assert parsed["node_rank"] == rank and parsed["master_addr"] == addr
        assert parsed["headless"] is (role == "worker")
        assert parsed["tensor_parallel_size"] == 8 and parsed["pipeline_parallel_size"] == 2


# --- PodDisruptionBudget ------------------------------------------------------------------


@pytest.mark.parametrize("replicas", [0, 1, 2, 5])
def test_pod_disruption_budget_only_for_several_replicas(replicas: int) -> None:
    """One replica gets none (a budget allowing no eviction would block every node drain);
    several get maxUnavailable 1 over the server pods, so a drain takes one at a time."""
    spec = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": {"product": "H100-SXM"}, "replicas": replicas}
    docs = rendering.render_all(make_svc(spec), hand_plan(), Settings(), pod_monitor=False)
    pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    if replicas <= 1:
        assert pdbs == []
        return
    [pdb] = pdbs
    validate_manifest(pdb)
    assert pdb["spec"]["maxUnavailable"] == 1
    deployment = docs[0]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"][
        "matchLabels"]
    assert pdb["metadata"]["ownerReferences"][0]["uid"] == UID


def test_group_topology_key_on_a_single_node_replica_is_said_not_dropped() -> None:
    """Nothing the user gave is silently ignored: a plan that fits one node says the key
    has no effect, with the fix."""
    spec = make_svc({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                     "gpus": {"product": "NVIDIA-L4"},
                     "scheduling": {"groupTopologyKey": "topology.kubernetes.io/zone"}}).spec
    plan = make_plan(spec)
    said = [w for w in plan.warnings if "groupTopologyKey" in w]
    assert plan.nodes_per_replica == 1 and said and "no effect" in said[0]

"""What the vLLM pods carry besides vLLM's arguments: a model cache that fits the model,
the download before vLLM starts, CPU and memory requests, ``spec.pod`` (env, pull
secrets, service account, labels, annotations), the security context.

Rendered objects are validated strictly against the Kubernetes schemas as in
test_rendering.py; the download script runs for real against a stand-in for
``huggingface_hub`` (the hub is not reachable here).
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from tests.unit.test_rendering import (
    LLAMA_405B_PLAN,
    LLAMA_405B_SPEC,
    ROOT,
    container_of,
    hand_plan,
    make_svc,
    validate_manifest,
)

from llm_operator import rendering
from llm_operator.api.constants import GIB
from llm_operator.api.errors import SpecError, SpecErrors
from llm_operator.api.models import parse_quantity
from llm_operator.cli.tables import plan_table
from llm_operator.planning import cache_size_limit, make_plan
from llm_operator.rendering.deployment import build_deployment
from llm_operator.settings import Settings
from llm_operator.tuning.fingerprint import tuning_fingerprint
from llm_operator.tuning.job import build_tuning_job

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
H100 = {"product": "NVIDIA-H100-80GB-HBM3"}


def pod_of(workload: dict[str, Any]) -> dict[str, Any]:
    return dict(workload["spec"]["template"]["spec"])


def volume(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in pod["volumes"] if v["name"] == name)


def render(spec: dict[str, Any], **plan: Any) -> dict[str, Any]:
    """The Deployment for ``spec`` with a hand plan (Llama 3.1 8B on one H100 unless changed)."""
    return build_deployment(make_svc(spec), hand_plan(**plan), Settings())


def planned(spec: dict[str, Any]) -> tuple[Any, Any]:
    svc = make_svc(spec)
    return svc, make_plan(svc.spec)


# --- item 2: the cache fits the model -------------------------------------------------


@pytest.mark.parametrize(("model", "gib"), [(LLAMA_70B, 131), ("Qwen/Qwen2.5-72B-Instruct", 135)])
def test_default_cache_is_sized_from_the_plan_and_requested(model: str, gib: int) -> None:
    """The old fixed 100Gi emptyDir evicted these mid-download, forever."""
    svc, plan = planned({"model": {"name": model}, "gpus": H100})
    assert round(plan.weight_bytes / GIB) == gib
    deployment = build_deployment(svc, plan, Settings())
    size = volume(pod_of(deployment), "model-cache")["emptyDir"]["sizeLimit"]
    assert parse_quantity(size) >= plan.weight_bytes * 1.1 + 5 * GIB
    assert parse_quantity(size) < plan.weight_bytes * 1.1 + 6 * GIB  # whole GiB, no more
    # The scheduler must pick a node whose disk holds it.
    assert container_of(deployment)["resources"]["requests"]["ephemeral-storage"] == size
    validate_manifest(deployment)


def test_a_user_cache_size_too_small_for_the_weights_is_refused() -> None:
    svc, plan = planned({"model": {"name": LLAMA_70B}, "gpus": H100,
                         "cache": {"sizeLimit": "100Gi"}})
    with pytest.raises(SpecError) as err:
        rendering.render_all(svc, plan, Settings())
    assert err.value.field == "spec.cache.sizeLimit"
    assert "evict" in err.value.problem
    # 141.1 GB x 1.1 + 5 GiB = 149.6 GiB -> 150Gi
    assert "spec.cache.claimName" in err.value.fix and "150Gi" in err.value.fix
    # ... and `llm-operator plan` says so before anything is applied.
    assert any("spec.cache.sizeLimit" in w for w in plan.warnings)


def test_a_user_cache_size_that_fits_is_kept_as_given() -> None:
    deployment = render({"model": {"name": "m/x"}, "cache": {"sizeLimit": "40G"}})
    assert volume(pod_of(deployment), "model-cache")["emptyDir"] == {"sizeLimit": "40G"}
    assert container_of(deployment)["resources"]["requests"]["ephemeral-storage"] == "40G"


def test_a_model_too_big_for_an_emptydir_needs_a_claim() -> None:
    spec = {k: v for k, v in LLAMA_405B_SPEC.items() if k != "cache"}
    with pytest.raises(SpecError) as err:
        rendering.render_all(make_svc(spec), hand_plan(**LLAMA_405B_PLAN), Settings())
    error = err.value
    assert error.field == "spec.cache.claimName"
    assert "PersistentVolumeClaim" in error.fix and "ReadWriteMany" in error.fix
    # An explicit size is the user's statement that the nodes hold it.
    sized = {**spec, "cache": {"sizeLimit": "900Gi"}}
    lws = rendering.render_all(make_svc(sized), hand_plan(**LLAMA_405B_PLAN), Settings())[0]
    validate_manifest(lws)


def test_the_threshold_admits_70b_class_models() -> None:
    svc, plan = planned({"model": {"name": LLAMA_70B}, "gpus": H100})
    size = cache_size_limit(svc.spec, plan)
    assert size is not None and parse_quantity(size) <= 300 * GIB


@pytest.mark.parametrize(("model", "replicas", "warned"), [
    (LLAMA_70B, 1, False), (LLAMA_70B, 2, True),
    ("meta-llama/Llama-3.1-405B-Instruct", 1, True),  # one replica on two nodes
])
def test_a_shared_cache_claim_warns_that_it_must_be_read_write_many(
        model: str, replicas: int, warned: bool) -> None:
    _, plan = planned({"model": {"name": model}, "gpus": {**H100, "perNode": 8},
                       "replicas": replicas, "cache": {"claimName": "hf"}})
    assert (plan.nodes_per_replica > 1 or replicas > 1) == warned
    assert any("ReadWriteMany" in w for w in plan.warnings) == warned


def test_no_ephemeral_storage_request_for_a_claim() -> None:
    deployment = render({"model": {"name": "m/x"}, "cache": {"claimName": "hf"}})
    assert "ephemeral-storage" not in container_of(deployment)["resources"]["requests"]


# --- item 2: the download happens before vLLM starts ----------------------------------


def test_a_hub_model_is_downloaded_by_an_init_container_before_vllm_starts() -> None:
    spec = {"model": {"name": "m/x", "revision": "abc", "tokenSecretRef": {"name": "hf"}},
            "pod": {"env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]}}
    deployment = render(spec)
    pod = pod_of(deployment)
    (init,) = pod["initContainers"]
    vllm = container_of(deployment)
    assert init["image"] == vllm["image"]
    assert init["command"][:2] == ["python3", "-c"]
    assert init["args"][:2] == ["m/x", "abc"]
    # The token and the proxy reach the download; it writes where vLLM reads (HF_HOME).
    names = {e["name"] for e in init["env"]}
    assert {"HF_TOKEN", "HTTPS_PROXY"} <= names
    assert init["volumeMounts"] == [{"name": "model-cache",
                                     "mountPath": "/var/cache/huggingface"}]
    assert {"name": "model-cache", "mountPath": "/var/cache/huggingface"} in vllm["volumeMounts"]
    validate_manifest(deployment)


def test_a_model_on_a_volume_is_not_downloaded() -> None:
    deployment = render({"model": {"name": "mine", "volume": {"claimName": "models"}}})
    assert "initContainers" not in pod_of(deployment)
    # Its small cache is not sized from weights it never downloads.
    assert volume(pod_of(deployment), "model-cache")["emptyDir"] == {"sizeLimit": "5Gi"}


def test_the_download_is_bounded_by_its_own_budget_not_the_startup_probe() -> None:
    weight = 141 * 10**9
    deployment = render({"model": {"name": "m/x"}}, weight_bytes=weight)
    (init,) = pod_of(deployment)["initContainers"]
    budget = int(init["args"][2])
    assert budget == 600 + math.ceil(weight / (50 * 10**6))
    probe = container_of(deployment)["startupProbe"]
    startup = probe["periodSeconds"] * probe["failureThreshold"]
    assert startup < 600 + weight / (100 * 2**20) + 10  # loading only, at 100Mi/s
    # The rollout is declared stuck only after both.
    assert deployment["spec"]["progressDeadlineSeconds"] > budget + startup


# A stand-in for huggingface_hub: a repository described by FAKE_REPO (top-level files and
# the index's weight map); snapshot_download records what it was asked for.
_FAKE_HUB = """import json, os, time
from types import SimpleNamespace
constants = SimpleNamespace(HF_HUB_OFFLINE=bool(os.environ.get("HF_HUB_OFFLINE")))
_repo = json.loads(os.environ["FAKE_REPO"])
class HfApi:
    def list_repo_files(self, repo, revision=None):
        return _repo["files"]
def hf_hub_download(repo, filename, revision=None):
    path = os.path.join(os.environ["FAKE_DIR"], filename)
    with open(path, "w") as f:
        json.dump({"weight_map": _repo["weight_map"]}, f)
    return path
def snapshot_download(repo, revision=None, allow_patterns=None, ignore_patterns=None):
    time.sleep(float(os.environ.get("FAKE_SLOW", "0")))
    with open(os.path.join(os.environ["FAKE_DIR"], "calls"), "a") as f:
        f.write(json.dumps([repo, revision, allow_patterns, ignore_patterns]) + "\\n")
    return "/cache/" + repo
"""


def _run_download(tmp_path: Path, repo: dict[str, Any], budget: str | None = None,
                  **env: str) -> tuple[subprocess.CompletedProcess[str], list[Any]]:
    (tmp_path / "huggingface_hub.py").write_text(_FAKE_HUB)
    (init,) = pod_of(render({"model": {"name": "org/model", "revision": "r1"}}))[
        "initContainers"]
    args = list(init["args"])
    if budget is not None:
        args[2] = budget
    command = [sys.executable, *init["command"][1:], *args]  # python3 -c SCRIPT ARGS
    proc = subprocess.run(command, env={"PYTHONPATH": str(tmp_path), "FAKE_DIR": str(tmp_path),
                                        "FAKE_REPO": json.dumps(repo), **env},
                          capture_output=True, text=True, timeout=60, check=False)
    calls = tmp_path / "calls"
    return proc, [json.loads(x) for x in calls.read_text().splitlines()] if calls.exists() else []


@pytest.mark.parametrize(("files", "weight_map", "weights"), [
    # An index: exactly the files it maps (as vLLM 0.32 does), not the duplicate
    # consolidated checkpoint nor original/.
    (["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
      "model-00002-of-00002.safetensors", "original/consolidated.00.pth"],
     {"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"},
     ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]),
    # Mistral's own format wins when present (vLLM's load format "auto").
    (["params.json", "consolidated.safetensors", "model.safetensors.index.json"], {"a": "x"},
     ["consolidated.safetensors"]),
    # No index: the first format present, in vLLM's order.
    (["config.json", "pytorch_model.bin", "model.pt"], {}, ["*.bin"]),
    (["config.json", "model.safetensors", "pytorch_model.bin"], {}, ["*.safetensors"]),
])
def test_the_download_fetches_the_weights_vllm_loads(
        tmp_path: Path, files: list[str], weight_map: dict[str, str], weights: list[str]) -> None:
    proc, calls = _run_download(tmp_path, {"files": files, "weight_map": weight_map})
    assert proc.returncode == 0, proc.stderr
    ((repo, revision, allow, ignore),) = calls
    assert (repo, revision) == ("org/model", "r1")
    assert allow[:len(weights)] == weights
    assert "*.json" in allow and "tokenizer.model" not in allow and "*.model" in allow
    assert ignore == ["original/**/*"]
    assert "Downloaded org/model" in proc.stdout


def test_a_download_that_overruns_its_budget_fails_the_init_container(tmp_path: Path) -> None:
    proc, calls = _run_download(tmp_path, {"files": ["model.safetensors"], "weight_map": {}},
                                budget="1", FAKE_SLOW="5")
    assert proc.returncode == 1
    assert "Gave up downloading org/model after 1 s" in proc.stdout
    assert calls == []


def test_an_offline_cache_is_used_as_it_is(tmp_path: Path) -> None:
    proc, calls = _run_download(tmp_path, {"files": [], "weight_map": {}}, HF_HUB_OFFLINE="1")
    assert proc.returncode == 0 and calls == []


def test_the_download_script_survives_kubernetes_expansion() -> None:
    (init,) = pod_of(render({"model": {"name": "m/x"}}))["initContainers"]
    assert all("$(" not in a and "$$" not in a for a in [*init["command"], *init["args"]])


def test_the_vllm_image_ships_the_hub_client_the_download_uses() -> None:
    """The CPU build of the default image's vLLM release installs huggingface_hub with
    every name the script imports."""
    python = ROOT / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM interpreter at {python} (see docs/TESTING.md)")
    proc = subprocess.run(
        [str(python), "-c", "from huggingface_hub import HfApi, constants, hf_hub_download, "
         "snapshot_download; HfApi.list_repo_files; print(constants.HF_HUB_OFFLINE)"],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


# --- item 10: CPU and memory requests ---------------------------------------------------


def test_vllm_pods_request_cpu_and_memory_from_the_plan() -> None:
    """No longer BestEffort: 8B on one H100 asks 2 + 1 CPUs and weights + 4 + 2 GiB + shm."""
    resources = container_of(render({"model": {"name": "m/x"}}))["resources"]
    weights = hand_plan().weight_bytes_per_gpu
    memory = parse_quantity(resources["requests"]["memory"])
    assert resources["requests"]["cpu"] == "3"
    assert weights + 22 * GIB <= memory < weights + 23 * GIB
    # CPU never has a limit; a derived memory is a request only (no OOM kill on an estimate).
    assert resources["limits"] == {"nvidia.com/gpu": "1"}


def test_shm_counts_against_the_memory_request() -> None:
    small = container_of(render({"model": {"name": "m/x"}, "resources": {"shmSize": "1Gi"}}))
    big = container_of(render({"model": {"name": "m/x"}, "resources": {"shmSize": "33Gi"}}))
    delta = (parse_quantity(big["resources"]["requests"]["memory"])
             - parse_quantity(small["resources"]["requests"]["memory"]))
    assert delta == 32 * GIB


def test_each_pod_of_a_multi_node_replica_requests_its_share() -> None:
    spec = {**LLAMA_405B_SPEC, "resources": {}}
    lws = rendering.render_all(make_svc(spec), hand_plan(**LLAMA_405B_PLAN), Settings())[0]
    group = lws["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        (container,) = group[role]["spec"]["containers"]
        requests = container["resources"]["requests"]
        assert requests["cpu"] == "10"  # 2 + 8 GPUs of the node
        per_pod = LLAMA_405B_PLAN["weight_bytes_per_gpu"] * 8
        assert parse_quantity(requests["memory"]) >= per_pod + (4 + 16 + 16) * GIB
    validate_manifest(lws)


def test_plan_explains_the_pod_requests_and_the_cache() -> None:
    svc, plan = planned({"model": {"name": LLAMA_70B}, "gpus": H100,
                         "resources": {"cpu": "12"}})
    explained = {e.name: e for e in plan.explanations}
    assert explained["cpuRequest"].value == "12" and explained["cpuRequest"].source == "pinned"
    memory = explained["memoryRequest"]
    assert memory.source == "planned" and "shmSize" in memory.formula
    assert memory.value == container_of(build_deployment(svc, plan, Settings()))[
        "resources"]["requests"]["memory"]
    assert explained["modelCacheSize"].value == cache_size_limit(svc.spec, plan)
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(plan_table(svc, plan))  # what `llm-operator plan` prints
    text = console.export_text()
    assert "memoryRequest" in text and "cpuRequest" in text and "modelCacheSize" in text


# --- item 11: spec.pod -------------------------------------------------------------------

POD = {
    "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
            {"name": "NCCL_DEBUG", "value": "INFO"},
            {"name": "VLLM_API_KEY",
             "valueFrom": {"secretKeyRef": {"name": "vllm-api", "key": "key"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
    "imagePullSecrets": [{"name": "registry"}],
    "serviceAccountName": "vllm",
    "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue", "team": "search"},
    "annotations": {"example.com/owner": "search-team"},
}


def test_pod_settings_reach_the_deployment() -> None:
    deployment = render({"model": {"name": "m/x"}, "pod": POD})
    template = deployment["spec"]["template"]
    pod = template["spec"]
    env = container_of(deployment)["env"]
    assert env[-4:] == POD["env"]
    assert pod["initContainers"][0]["env"][-4:] == POD["env"]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["serviceAccountName"] == "vllm"
    assert pod["automountServiceAccountToken"] is False  # still: vLLM never calls the API
    for labels in (template["metadata"]["labels"], deployment["metadata"]["labels"]):
        assert labels["kueue.x-k8s.io/queue-name"] == "gpu-queue" and labels["team"] == "search"
    assert template["metadata"]["annotations"] == {"example.com/owner": "search-team"}
    # The selector is the operator's alone.
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "llmops.dev/llmservice": "llama", "llmops.dev/component": "server"}
    validate_manifest(deployment)


def test_pod_settings_reach_every_pod_of_a_leader_worker_set() -> None:
    spec = {**LLAMA_405B_SPEC, "pod": POD}
    lws = rendering.render_all(make_svc(spec), hand_plan(**LLAMA_405B_PLAN), Settings())[0]
    assert lws["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    for role in ("leaderTemplate", "workerTemplate"):
        template = lws["spec"]["leaderWorkerTemplate"][role]
        assert template["spec"]["serviceAccountName"] == "vllm"
        assert template["spec"]["containers"][0]["env"][-4:] == POD["env"]
        assert template["metadata"]["labels"]["team"] == "search"
        assert template["metadata"]["annotations"] == POD["annotations"]
    validate_manifest(lws)


def _tuning_job(spec: dict[str, Any]) -> dict[str, Any]:
    svc = make_svc(spec)
    plan = make_plan(svc.spec)
    return build_tuning_job(svc, plan, Settings(), tuning_fingerprint(svc, plan))


def test_the_tuning_job_pod_downloads_first_and_carries_the_pod_settings() -> None:
    import kubernetes_validate

    job = _tuning_job({"model": {"name": LLAMA_70B}, "gpus": H100, "pod": POD})
    template = job["spec"]["template"]
    pod = template["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["copy-tuner", "download-model"]
    (tuner,) = pod["containers"]
    assert tuner["env"][-4:] == POD["env"]
    assert pod["serviceAccountName"] == "vllm" and pod["imagePullSecrets"] == [{"name": "registry"}]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert template["metadata"]["annotations"]["example.com/owner"] == "search-team"
    assert "llmops.dev/tuning-fingerprint" in template["metadata"]["annotations"]
    # The cache fits the 70B model here too, and the deadline covers its download.
    size = volume(pod, "model-cache")["emptyDir"]["sizeLimit"]
    assert parse_quantity(size) > 131 * GIB
    assert tuner["resources"]["requests"]["ephemeral-storage"] == size
    download = int(pod["initContainers"][1]["args"][2])
    assert job["spec"]["activeDeadlineSeconds"] > 60 * 60 + download
    kubernetes_validate.validate(job, kubernetes_validate.utils.latest_version(), strict=True)


@pytest.mark.parametrize(("pod", "field", "text"), [
    ({"env": [{"name": "HF_TOKEN", "value": "x"}]}, "spec.pod.env[0].name", "tokenSecretRef"),
    ({"env": [{"name": "VLLM_NO_USAGE_STATS", "value": "0"}]}, "spec.pod.env[0].name",
     "set by the operator"),
    ({"env": [{"name": "LWS_LEADER_ADDRESS", "value": "x"}]}, "spec.pod.env[0].name",
     "set by the operator"),
    ({"env": [{"name": "PYTHONPATH", "value": "/x"}]}, "spec.pod.env[0].name",
     "set by the operator"),
    ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
     "spec.pod.env[1].name", "twice"),
    ({"env": [{"name": "A"}]}, "spec.pod.env[0]", "exactly one of value and valueFrom"),
    ({"labels": {"llmops.dev/component": "x"}}, "spec.pod.labels[llmops.dev/component]",
     "owned by the operator"),
    ({"labels": {"app.kubernetes.io/name": "x"}}, "spec.pod.labels[app.kubernetes.io/name]",
     "owned by the operator"),
    ({"labels": {"pod-template-hash": "x"}}, "spec.pod.labels[pod-template-hash]", "owned"),
    ({"annotations": {"llmops.dev/spec-hash": "x"}},
     "spec.pod.annotations[llmops.dev/spec-hash]", "owned"),
    ({"annotations": {"leaderworkerset.sigs.k8s.io/size": "2"}},
     "spec.pod.annotations[leaderworkerset.sigs.k8s.io/size]", "owned"),
])
def test_pod_settings_that_collide_with_the_operators_are_refused(
        pod: dict[str, Any], field: str, text: str) -> None:
    svc = make_svc({"model": {"name": "m/x"}, "pod": pod})
    with pytest.raises(SpecErrors) as err:
        rendering.render_all(svc, hand_plan(), Settings())
    assert [e.field for e in err.value.errors] == [field]
    assert text in str(err.value)


def test_offline_mode_is_the_users_for_a_hub_model_and_the_operators_for_a_volume() -> None:
    """A pre-filled cache claim with HF_HUB_OFFLINE=1 serves a hub model air-gapped."""
    offline = {"env": [{"name": "HF_HUB_OFFLINE", "value": "1"}]}
    deployment = render({"model": {"name": "m/x"}, "cache": {"claimName": "hf"}, "pod": offline})
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container_of(deployment)["env"]
    volume_model = {"model": {"name": "mine", "volume": {"claimName": "models"}}, "pod": offline}
    with pytest.raises(SpecErrors) as err:
        render(volume_model)
    assert [e.field for e in err.value.errors] == ["spec.pod.env[0].name"]
    assert "model on a volume" in str(err.value)


@pytest.mark.parametrize(("pod", "field"), [
    ({"labels": {"team": "has space"}}, "spec.pod.labels"),
    ({"labels": {"-bad/key": "x"}}, "spec.pod.labels"),
    ({"annotations": {"no spaces please": "x"}}, "spec.pod.annotations"),
    ({"env": [{"name": "1ABC", "value": "x"}]}, "spec.pod.env[0].name"),
])
def test_malformed_pod_settings_are_refused_naming_the_field(
        pod: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecErrors) as err:
        make_svc({"model": {"name": "m/x"}, "pod": pod})
    assert [e.field for e in err.value.errors] == [field]


# --- minor: security context, usage statistics ----------------------------------------


def test_every_container_runs_without_privilege_escalation_under_runtime_seccomp() -> None:
    deployment = render({"model": {"name": "m/x"}})
    pod = pod_of(deployment)
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in (*pod["initContainers"], *pod["containers"]):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}  # tests/unit/test_pod_security.py
    validate_manifest(deployment)


def test_vllm_usage_statistics_are_off_where_vllm_reads_the_switches() -> None:
    env = {e["name"]: e.get("value") for e in container_of(render({"model": {"name": "m/x"}}))[
        "env"]}
    assert env["VLLM_NO_USAGE_STATS"] == "1" and env["DO_NOT_TRACK"] == "1"
    usage = next(iter((ROOT / ".venv-vllm").glob("lib/python*/site-packages/vllm/usage/"
                                                  "usage_lib.py")), None)
    if usage is None:
        pytest.skip("no vLLM installed in .venv-vllm (see docs/TESTING.md)")
    text = usage.read_text()
    assert "VLLM_NO_USAGE_STATS" in text or "NO_USAGE_STATS" in text
    assert "DO_NOT_TRACK" in text

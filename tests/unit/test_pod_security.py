"""Every pod the operator renders passes the `restricted` Pod Security Standard by default
(checked here rule by rule; the nodes tier has the API server enforce it on a namespace
labelled for it), and ``spec.pod.runAsUser: 0`` keeps the image's root under `baseline`."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from tests.unit.test_live_cap_rendering import LIVE_SPEC
from tests.unit.test_live_cap_rendering import render as render_live
from tests.unit.test_rendering import LLAMA_405B_SPEC, make_svc, multi_node, validate_manifest

from llm_operator import rendering
from llm_operator.facts.job import build_facts_job
from llm_operator.planning import make_plan
from llm_operator.settings import Settings
from llm_operator.tuning.fingerprint import tuning_fingerprint
from llm_operator.tuning.job import build_tuning_job

HUB = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
       "gpus": {"product": "NVIDIA-H100-80GB-HBM3"}}
# The volume types the `restricted` standard allows (Kubernetes' Pod Security Standards).
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What in ``pod`` (a pod spec) the `restricted` standard refuses, as the API server's
    PodSecurity admission checks it (policy version latest)."""
    out: list[str] = []
    ctx = pod.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            out.append(flag)
    out += [f"volume {v['name']}" for v in pod.get("volumes", [])
            if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    pod_seccomp = (ctx.get("seccompProfile") or {}).get("type")
    for c in (*pod.get("initContainers", []), *pod.get("containers", [])):
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation != false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []):
            out.append(f"{name}: capabilities not dropped")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: adds {sorted(caps['add'])}")
        if sc.get("runAsNonRoot", ctx.get("runAsNonRoot")) is not True:
            out.append(f"{name}: runAsNonRoot != true")
        if sc.get("runAsUser", ctx.get("runAsUser")) == 0:
            out.append(f"{name}: runAsUser 0")
        if (sc.get("seccompProfile") or {}).get("type", pod_seccomp) not in (
                "RuntimeDefault", "Localhost"):
            out.append(f"{name}: no seccomp profile")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            out.append(f"{name}: hostPort")
    return out


def pods_of(manifests: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for m in manifests:
        spec = m.get("spec") or {}
        if m["kind"] in ("Deployment", "Job"):
            yield m["kind"], spec["template"]["spec"]
        elif m["kind"] == "LeaderWorkerSet":
            group = spec["leaderWorkerTemplate"]
            yield "leader", group["leaderTemplate"]["spec"]
            yield "worker", group["workerTemplate"]["spec"]


def tuning_job(spec: dict[str, Any]) -> dict[str, Any]:
    svc = make_svc(spec)
    plan = make_plan(svc.spec)
    return build_tuning_job(svc, plan, Settings(), tuning_fingerprint(svc, plan))


def every_pod(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The pods of ``spec`` as served (hub model), served with the live cap (copy-engine
    init container), tuned and read by the facts Job; 405B's leader and worker pods."""
    svc = make_svc(spec)
    manifests = [*rendering.render_all(svc, make_plan(svc.spec), Settings()),
                 *render_live({**spec, **LIVE_SPEC, "model": spec["model"]}),
                 tuning_job(spec), build_facts_job(svc, Settings())]
    pod_spec = spec.get("pod")
    manifests += multi_node({**LLAMA_405B_SPEC, **({"pod": pod_spec} if pod_spec else {})})
    for m in manifests:
        validate_manifest(m)
    return list(pods_of(manifests))


def test_every_pod_passes_the_restricted_standard_by_default() -> None:
    pods = every_pod(copy.deepcopy(HUB))
    kinds = [k for k, _ in pods]
    assert kinds.count("Deployment") == 2 and kinds.count("Job") == 2, kinds
    assert "leader" in kinds and "worker" in kinds
    for kind, pod in pods:
        assert restricted_violations(pod) == [], kind
        names = [c["name"] for c in (*pod.get("initContainers", []), *pod["containers"])]
        if kind == "Job" and "facts" in " ".join(names):
            continue  # the operator's image runs as its own user (65532)
        assert pod["securityContext"]["runAsUser"] == 1000, kind
        assert pod["securityContext"]["fsGroup"] == 1000, kind  # the cache claim's group


def test_the_vllm_containers_get_a_home_and_the_cache_they_can_write() -> None:
    svc = make_svc(HUB)
    (deployment,) = [m for m in rendering.render_all(svc, make_plan(svc.spec), Settings())
                     if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    for c in (*pod["initContainers"], *pod["containers"]):
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["HOME"] == "/tmp", c["name"]
        mount = next(m for m in c["volumeMounts"] if m["name"] == "model-cache")
        assert env["HF_HOME"] == mount["mountPath"] == "/var/cache/huggingface", c["name"]
        # vLLM's compile cache outlives a container restart: on the cache volume, not in
        # the writable layer (the download writes no compile cache: not set there).
        if c["name"] == "vllm":
            assert env["VLLM_CACHE_ROOT"] == "/var/cache/huggingface/vllm"
        elif c["name"] == "download-model":
            assert "VLLM_CACHE_ROOT" not in env


def test_every_container_that_runs_vllm_keeps_its_compile_cache_on_the_cache_volume(
) -> None:
    """The served pod's vLLM, the tuner (its servers) and both pods of a two-node group:
    VLLM_CACHE_ROOT under the model cache's mount, so a restarted container finds it."""
    seen = set()
    for kind, pod in every_pod(copy.deepcopy(HUB)):
        for c in pod["containers"]:
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            if "VLLM_CACHE_ROOT" in env:
                assert env["VLLM_CACHE_ROOT"] == "/var/cache/huggingface/vllm", (kind, c["name"])
                assert mounts.get("/var/cache/huggingface") == "model-cache", (kind, c["name"])
                seen.add((kind, c["name"]))
    assert {name for _, name in seen} >= {"vllm", "tuner"}, seen
    assert len(seen) >= 3, seen  # a Deployment's, a Job's, a LeaderWorkerSet's


def test_the_users_home_and_cache_win_and_are_not_given_twice() -> None:
    spec = {**HUB, "pod": {"env": [{"name": "HOME", "value": "/home/me"},
                                   {"name": "HF_HOME", "value": "/data/hf"},
                                   {"name": "VLLM_CACHE_ROOT", "value": "/data/vllm"}]}}
    for _, pod in every_pod(spec):
        for c in (*pod.get("initContainers", []), *pod["containers"]):
            names = [e["name"] for e in c.get("env", [])]
            assert len(names) == len(set(names)), (c["name"], names)
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            if "HOME" in env:
                assert env["HOME"] == "/home/me", c["name"]
            if "VLLM_CACHE_ROOT" in env:
                assert env["VLLM_CACHE_ROOT"] == "/data/vllm", c["name"]


@pytest.mark.parametrize("uid", [0, 4242])
def test_run_as_user_chooses_the_user_and_zero_is_root_under_baseline(uid: int) -> None:
    pods = every_pod({**HUB, "pod": {"runAsUser": uid}})
    for kind, pod in pods:
        names = " ".join(c["name"] for c in pod["containers"])
        if "facts" in names:
            assert restricted_violations(pod) == [], kind  # never root, whatever the spec
            continue
        if uid:
            assert restricted_violations(pod) == [], kind
            assert pod["securityContext"]["runAsUser"] == uid
            continue
        # Root: what `baseline` allows (no privilege, only the default capabilities root
        # needs for caches written by another user), and no HOME of ours.
        assert "runAsUser" not in pod["securityContext"]
        for c in (*pod.get("initContainers", []), *pod["containers"]):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert set(sc["capabilities"]["add"]) <= {"CHOWN", "DAC_OVERRIDE", "FOWNER"}
            assert "HOME" not in {e["name"] for e in c.get("env", [])}, c["name"]
        assert any("runAsNonRoot" in v for v in restricted_violations(pod)), kind

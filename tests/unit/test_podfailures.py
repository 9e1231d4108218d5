"""A server pod that cannot start or cannot be created, on the LLMService (pure): each
case's condition reason, the pod and container, the kubelet's or controller's own words
(the messages below are the kubelet's and controllers' formats), and the fix."""

from __future__ import annotations

from typing import Any

from llm_operator.health.podfailures import creating, replica_failure
from llm_operator.health.podscheduling import (
    PodScheduling,
    crash_condition,
    creation_condition,
    with_volume_events,
)
from llm_operator.health.status import get_condition

NOW = 1_800_000_000.0
IMAGE = "vllm/vllm-openai:v9.9.9"


def waiting_pod(name: str, reason: str, message: str, *, container: str = "vllm",
                init: bool = False) -> dict[str, Any]:
    status = {"name": container, "image": IMAGE, "restartCount": 0,
              "state": {"waiting": {"reason": reason, "message": message}}}
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "vllm", "image": IMAGE}]},
            "status": {"phase": "Pending", key: [status]}}


def containers_running(*pods: dict[str, Any], before: list[Any] | None = None
                       ) -> tuple[dict[str, Any], Any, list[Any]]:
    conds, notice = crash_condition(before or [], [PodScheduling.from_pod(p) for p in pods],
                                    generation=2, now=NOW)
    cond = get_condition(conds, "ContainersRunning")
    assert cond is not None
    return dict(cond), notice, conds


def test_an_image_that_cannot_be_pulled_names_the_image_and_the_pull_secret() -> None:
    pulled = ('rpc error: code = NotFound desc = failed to pull and unpack image '
              f'"docker.io/{IMAGE}": failed to resolve reference "docker.io/{IMAGE}": not found')
    cond, notice, conds = containers_running(waiting_pod("qwen-abc", "ErrImagePull", pulled))
    assert cond["status"] == "False" and cond["reason"] == "ImagePullBackOff"
    assert cond["message"].startswith("1 of 1 server pods cannot start; pod qwen-abc, "
                                      "container vllm: ErrImagePull: rpc error")
    assert f"Fix: check that image {IMAGE} exists" in cond["message"]
    assert "spec.pod.imagePullSecrets" in cond["message"]
    assert notice is not None and notice.type == "Warning" and notice.reason == "ImagePullBackOff"
    # The kubelet backs off: ImagePullBackOff next. Same condition reason, no second Event.
    backoff = waiting_pod("qwen-abc", "ImagePullBackOff", f'Back-off pulling image "{IMAGE}"')
    cond2, notice2, _ = containers_running(backoff, before=conds)
    assert cond2["reason"] == "ImagePullBackOff" and notice2 is None
    assert "ImagePullBackOff: Back-off pulling image" in cond2["message"]
    assert cond2["lastTransitionTime"] == cond["lastTransitionTime"]


def test_an_invalid_image_name_says_the_reference_grammar() -> None:
    said = ('Failed to apply default image tag "vllm/VLLM:latest": couldn\'t parse image name '
            '"vllm/VLLM:latest": invalid reference format: repository name must be lowercase')
    pod = waiting_pod("qwen-abc", "InvalidImageName", said, container="download-model",
                      init=True)
    cond, notice, _ = containers_running(pod)
    assert cond["reason"] == "InvalidImageName"
    assert "container download-model: InvalidImageName: Failed to apply" in cond["message"]
    assert "[registry/]repository[:tag][@digest]" in cond["message"]
    assert notice is not None and notice.reason == "InvalidImageName"


def test_a_missing_token_secret_says_how_to_create_it() -> None:
    cond, notice, conds = containers_running(
        waiting_pod("qwen-abc", "CreateContainerConfigError", 'secret "hf-token" not found'))
    assert cond["reason"] == "CreateContainerConfigError"
    assert ('pod qwen-abc, container vllm: CreateContainerConfigError: secret "hf-token" '
            "not found. Fix: Secret ml/hf-token not found: create it with `kubectl create "
            "secret generic hf-token -n ml --from-literal=token=...`") in cond["message"]
    assert notice is not None
    # The Secret exists but lacks the key: the reason stays, the fix changes, no Event.
    cond2, notice2, conds2 = containers_running(waiting_pod(
        "qwen-abc", "CreateContainerConfigError", "couldn't find key token in Secret ml/hf-token"),
        before=conds)
    assert "Secret ml/hf-token has no key token" in cond2["message"]
    assert "spec.model.tokenSecretRef.key" in cond2["message"] and notice2 is None
    # A change of reason is a change of the condition: one more Event.
    _, notice3, _ = containers_running(
        waiting_pod("qwen-abc", "ErrImagePull", "not found"), before=conds2)
    assert notice3 is not None and notice3.reason == "ImagePullBackOff"


def test_a_crash_loop_comes_before_a_pod_that_cannot_start() -> None:
    crash = waiting_pod("b", "CrashLoopBackOff", "back-off 40s")
    crash["status"]["containerStatuses"][0]["lastState"] = {
        "terminated": {"exitCode": 1, "reason": "Error", "message": "boom"}}
    cond, _, _ = containers_running(
        waiting_pod("a", "CreateContainerConfigError", 'secret "x" not found'), crash)
    assert cond["reason"] == "CrashLoopBackOff" and "pod b:" in cond["message"]


def creating_pod(name: str, claim: str | None = "hf-cache", *, init: bool = True
                 ) -> dict[str, Any]:
    waiting = {"state": {"waiting": {"reason": "PodInitializing" if init else
                                     "ContainerCreating"}}}
    status: dict[str, Any] = {"phase": "Pending",
                              "containerStatuses": [{"name": "vllm", **waiting}]}
    if init:
        status["initContainerStatuses"] = [{"name": "download-model", **waiting}]
    spec: dict[str, Any] = {"nodeName": f"node-{name}", "containers": [{"name": "vllm"}]}
    if claim:
        spec["volumes"] = [{"name": "model-cache",
                            "persistentVolumeClaim": {"claimName": claim}}]
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": spec, "status": status}


def event(reason: str, message: str, at: str = "2026-11-27T10:00:00Z") -> dict[str, Any]:
    return {"type": "Warning", "reason": reason, "message": message, "lastTimestamp": at}


def test_creating_means_bound_and_no_container_yet() -> None:
    assert creating(creating_pod("a")) and creating(creating_pod("a", init=False))
    unbound = creating_pod("a")
    del unbound["spec"]["nodeName"]
    assert not creating(unbound)
    downloading = creating_pod("a")
    downloading["status"]["initContainerStatuses"][0]["state"] = {"running": {}}
    assert not creating(downloading)  # the init container runs: past the volumes
    assert not creating(waiting_pod("a", "ErrImagePull", "x"))


def test_a_volume_that_fails_to_mount_is_read_from_the_pods_events() -> None:
    pods = [PodScheduling.from_pod(creating_pod("qwen-abc", claim=None))]
    said = 'MountVolume.SetUp failed for volume "token" : secret "hf-token" not found'
    found = with_volume_events(pods, now=NOW, events={"qwen-abc": [
        {"type": "Normal", "reason": "Scheduled", "message": "assigned"},
        event("FailedMount", said)]})
    conds, notice = crash_condition([], found, generation=1, now=NOW)
    cond = get_condition(conds, "ContainersRunning")
    assert cond is not None and cond["reason"] == "FailedMount"
    assert f"pod qwen-abc: FailedMount: {said}. Fix: Secret ml/hf-token not found" in cond[
        "message"]
    assert notice is not None and notice.reason == "FailedMount"
    # No Warning Event yet: the pod is just being set up.
    conds2, _ = crash_condition(
        [], with_volume_events(pods, now=NOW, events={"qwen-abc": []}), generation=1, now=NOW)
    assert get_condition(conds2, "ContainersRunning")["status"] == "True"  # type: ignore[index]


def test_a_failed_mount_counts_after_the_grace_a_multi_attach_at_once() -> None:
    """A FailedMount also shows while a volume still attaches on a healthy start: only
    a pod bound for VOLUME_GRACE_SECONDS (45 s) without a container is reported."""
    from llm_operator.api.timestamps import rfc3339

    def bound(seconds_ago: float) -> list[PodScheduling]:
        pod = creating_pod("qwen-abc")
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                        "lastTransitionTime": rfc3339(NOW - seconds_ago)}]
        return [PodScheduling.from_pod(pod)]

    mount = {"qwen-abc": [event("FailedMount", "MountVolume.WaitForAttach failed")]}
    assert with_volume_events(bound(10), mount, now=NOW)[0].problem is None
    late = with_volume_events(bound(50), mount, now=NOW)[0].problem
    assert late is not None and late.reason == "FailedMount"
    multi = {"qwen-abc": [event("FailedAttachVolume", 'Multi-Attach error for volume "pv"')]}
    early = with_volume_events(bound(1), multi, now=NOW)[0].problem
    assert early is not None and early.reason == "FailedAttachVolume"


def test_a_missing_claim_names_the_spec_fields() -> None:
    pods = [PodScheduling.from_pod(creating_pod("qwen-abc"))]
    said = ("Unable to attach or mount volumes: unmounted volumes=[model-cache]: error "
            'processing PVC ml/hf-cache: persistentvolumeclaim "hf-cache" not found')
    found = with_volume_events(pods, now=NOW,
                               events={"qwen-abc": [event("FailedMount", said)]})
    problem = found[0].problem
    assert problem is not None and problem.reason == "FailedMount"
    assert problem.fix.startswith("PersistentVolumeClaim ml/hf-cache not found")
    assert "spec.cache.claimName" in problem.fix


def test_two_replicas_on_a_read_write_once_claim_is_a_multi_attach() -> None:
    pods = [PodScheduling.from_pod(p) for p in (creating_pod("qwen-a"), creating_pod("qwen-b"))]
    pods[0] = PodScheduling("qwen-a", False, volumes=pods[0].volumes)  # attached, running
    said = ('Multi-Attach error for volume "pvc-0b1c" Volume is already used by pod(s) '
            "qwen-a")
    found = with_volume_events(pods, now=NOW, events={"qwen-b": [
        event("FailedMount", "Unable to attach or mount volumes: timed out", "2026-11-27T10:02Z"),
        event("FailedAttachVolume", said)]})
    conds, _ = crash_condition([], found, generation=1, now=NOW)
    cond = get_condition(conds, "ContainersRunning")
    assert cond is not None and cond["reason"] == "FailedAttachVolume"
    assert "1 of 2 server pods cannot start; pod qwen-b: FailedAttachVolume: Multi-Attach" in (
        cond["message"])
    assert ("claim hf-cache is ReadWriteOnce and 2 replicas share it: use a ReadWriteMany "
            "class or 1 replica") in cond["message"]


PRIORITY = ('pods "qwen-7f9c6d5b8-" is forbidden: no PriorityClass with name '
            "inference-critical was found")
QUOTA = ('pods "qwen-7f9c6d5b8-x2x" is forbidden: exceeded quota: gpu-quota, requested: '
         "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=2, limited: "
         "requests.nvidia.com/gpu=2")


def deployment_status(message: str | None) -> dict[str, Any]:
    conds = [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}]
    if message:
        conds.append({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                      "message": message})
    return {"conditions": conds}


def pods_created(message: str | None, before: list[Any] | None = None
                 ) -> tuple[dict[str, Any], Any, list[Any]]:
    conds, notice = creation_condition(
        before or [], replica_failure(deployment_status(message)), kind="Deployment",
        name="qwen", namespace="ml", generation=1, now=NOW)
    cond = get_condition(conds, "PodsCreated")
    assert cond is not None
    return dict(cond), notice, conds


def test_a_missing_priority_class_says_create_it_or_remove_the_field() -> None:
    cond, notice, conds = pods_created(PRIORITY)
    assert cond["status"] == "False" and cond["reason"] == "FailedCreate"
    assert f"Deployment qwen cannot create its pods: FailedCreate: {PRIORITY}" in cond["message"]
    assert ("Fix: PriorityClass inference-critical does not exist: create it (`kubectl "
            "create priorityclass inference-critical") in cond["message"]
    assert "or remove spec.scheduling.priorityClassName" in cond["message"]
    assert notice is not None and notice.type == "Warning" and notice.reason == "FailedCreate"
    _, again, conds = pods_created(PRIORITY, conds)
    assert again is None  # the next Deployment event: no second Event
    fixed, notice3, _ = pods_created(None, conds)
    assert fixed["status"] == "True" and fixed["reason"] == "Created" and notice3 is None


def test_an_exceeded_quota_names_the_quota_and_its_figures() -> None:
    cond, _, _ = pods_created(QUOTA)
    assert cond["reason"] == "FailedCreate"
    assert ("ResourceQuota ml/gpu-quota has no room for another pod (requested "
            "requests.nvidia.com/gpu=1, used requests.nvidia.com/gpu=2, limited "
            "requests.nvidia.com/gpu=2)") in cond["message"]
    assert "lower spec.replicas" in cond["message"]


def test_another_creation_failure_points_at_the_replica_sets_events() -> None:
    cond, _, _ = pods_created('pods "x" is forbidden: maximum cpu usage per Container is 2')
    assert "kubectl describe replicaset -n ml" in cond["message"]


def test_the_schedulers_missing_claim_gets_the_claims_fix() -> None:
    from llm_operator.health.podscheduling import scheduling_condition

    said = ('0/3 nodes are available: persistentvolumeclaim "hf-cache" not found. preemption: '
            "0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
    pod = {"metadata": {"name": "qwen-abc", "namespace": "ml"}, "spec": {},
           "status": {"phase": "Pending", "conditions": [
               {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": said}]}}
    conds, _ = scheduling_condition([], [PodScheduling.from_pod(pod)],
                                    placement="GPU class 'nvidia': x", generation=1, now=NOW)
    cond = get_condition(conds, "PodsScheduled")
    assert cond is not None and cond["reason"] == "Unschedulable"
    assert f"pod qwen-abc: {said} Fix: PersistentVolumeClaim ml/hf-cache not found" in (
        cond["message"])
    assert "placed by" not in cond["message"]  # the GPU label is not the problem

"""A server pod that cannot start or cannot be created, on the LLMService (pure): each
case's condition reason, the pod and container, the kubelet's or controller's own words
(the messages below are the kubelet's and controllers' formats), and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.health.podfailures import creating, replica_failure
from llm_operator.health.podscheduling import (
    PodScheduling,
    crash_condition,
    creation_condition,
    with_events,
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
    found = with_events(pods, now=NOW, events={"qwen-abc": [
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
        [], with_events(pods, now=NOW, events={"qwen-abc": []}), generation=1, now=NOW)
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
    assert with_events(bound(10), mount, now=NOW)[0].problem is None
    late = with_events(bound(50), mount, now=NOW)[0].problem
    assert late is not None and late.reason == "FailedMount"
    for said in ('Multi-Attach error for volume "pv" Volume is already used by pod(s) q-1',
                 'Waiting for detach for volume "pv" Volume is already used by pod(s) q-1'):
        multi = {"qwen-abc": [event("FailedAttachVolume", said)]}
        early = with_events(bound(1), multi, now=NOW)[0].problem
        assert early is not None and early.reason == "FailedAttachVolume", said
    # Still detaching from a node whose pod is gone (a rollout): not said before the grace.
    detaching = {"qwen-abc": [event("FailedAttachVolume", 'Waiting for detach for volume "pv" '
                                    "Volume is already exclusively attached to one node, "
                                    "waiting on detach before it can be attached to another "
                                    "node")]}
    assert with_events(bound(10), detaching, now=NOW)[0].problem is None
    assert with_events(bound(50), detaching, now=NOW)[0].problem is not None


def test_a_missing_claim_names_the_spec_fields() -> None:
    pods = [PodScheduling.from_pod(creating_pod("qwen-abc"))]
    said = ("Unable to attach or mount volumes: unmounted volumes=[model-cache]: error "
            'processing PVC ml/hf-cache: persistentvolumeclaim "hf-cache" not found')
    found = with_events(pods, now=NOW,
                               events={"qwen-abc": [event("FailedMount", said)]})
    problem = found[0].problem
    assert problem is not None and problem.reason == "FailedMount"
    assert problem.fix.startswith("PersistentVolumeClaim ml/hf-cache not found")
    assert "spec.cache.claimName" in problem.fix


@pytest.mark.parametrize("wording", ["Multi-Attach error", "Waiting for detach"])
def test_two_replicas_on_a_read_write_once_claim_is_a_multi_attach(wording: str) -> None:
    """The attach-detach controller's Event in either wording: Kubernetes 1.37's (read on
    two real nodes here) and the earlier releases'."""
    pods = [PodScheduling.from_pod(p) for p in (creating_pod("qwen-a"), creating_pod("qwen-b"))]
    pods[0] = PodScheduling("qwen-a", False, volumes=pods[0].volumes)  # attached, running
    said = f'{wording} for volume "pvc-0b1c" Volume is already used by pod(s) qwen-a'
    found = with_events(pods, now=NOW, events={"qwen-b": [
        event("FailedMount", "Unable to attach or mount volumes: timed out", "2026-11-27T10:02Z"),
        event("FailedAttachVolume", said)]})
    conds, _ = crash_condition([], found, generation=1, now=NOW)
    cond = get_condition(conds, "ContainersRunning")
    assert cond is not None and cond["reason"] == "FailedAttachVolume"
    assert f"1 of 2 server pods cannot start; pod qwen-b: FailedAttachVolume: {wording}" in (
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


# A startup probe that runs out: the kubelet's words (pkg/kubelet/kuberuntime and
# pkg/kubelet/prober, v1.37.2); the container's status says only "restarted, exit 137".
RUN_AT, KILLED_AT = "2026-12-06T10:00:00Z", "2026-12-06T10:10:21Z"
UNHEALTHY = ('Startup probe failed: Get "http://10.88.0.7:8000/health": dial tcp '
             "10.88.0.7:8000: connect: connection refused")


def probe_killed_pod(*, started: bool = False, run_at: str = RUN_AT) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10,
             "failureThreshold": 62, "timeoutSeconds": 5}
    status = {"name": "vllm", "image": IMAGE, "restartCount": 2, "started": started,
              "state": {"waiting": {"reason": "CrashLoopBackOff",
                                    "message": "back-off 20s restarting failed container"}},
              "lastState": {"terminated": {"exitCode": 137, "reason": "Error",
                                           "startedAt": run_at, "finishedAt": KILLED_AT,
                                           "message": "Loading safetensors shards: 40%"}}}
    return {"metadata": {"name": "llama-abc", "namespace": "ml", "uid": "uid-llama-abc"},
            "spec": {"nodeName": "gpu-1", "containers": [
                {"name": "vllm", "image": IMAGE, "startupProbe": probe,
                 "livenessProbe": {**probe, "periodSeconds": 15, "failureThreshold": 4,
                                   "timeoutSeconds": 10}}]},
            "status": {"phase": "Running", "containerStatuses": [status]}}


def kubelet_event(reason: str, message: str, at: str = KILLED_AT) -> dict[str, Any]:
    return {"involvedObject": {"kind": "Pod", "name": "llama-abc", "uid": "uid-llama-abc",
                               "fieldPath": "spec.containers{vllm}"},
            "reason": reason, "type": "Normal" if reason == "Killing" else "Warning",
            "message": message, "lastTimestamp": at}


def running_with_events(pod: dict[str, Any], events: list[dict[str, Any]]
                        ) -> tuple[dict[str, Any], Any]:
    found = with_events([PodScheduling.from_pod(pod)], {"llama-abc": events}, now=NOW)
    conds, notice = crash_condition([], found, generation=2, now=NOW)
    cond = get_condition(conds, "ContainersRunning")
    assert cond is not None
    return dict(cond), notice


def test_a_startup_probe_that_ran_out_is_named_with_its_budget_and_the_fix() -> None:
    cond, notice = running_with_events(probe_killed_pod(), [
        kubelet_event("Unhealthy", UNHEALTHY, "2026-12-06T10:10:20Z"),
        kubelet_event("Killing", "Container vllm failed startup probe, will be restarted")])
    assert cond["status"] == "False" and cond["reason"] == "StartupProbeFailed", cond
    message = cond["message"]
    assert message.startswith("1 of 1 server pods cannot start; pod llama-abc, container "
                               "vllm: StartupProbeFailed: the kubelet killed it when its "
                               "startup probe on /health ran out (62 failures 10 s apart: "
                               "620 s) and restarted it, 2 times so far"), message
    assert "connect: connection refused" in message  # the kubelet's last Unhealthy word
    assert "Fix: vLLM did not finish starting" in message
    assert "set spec.model.loadBandwidth" in message
    assert "kubectl logs llama-abc -c vllm --previous -n ml" in message
    assert notice is not None and notice.reason == "StartupProbeFailed"


def test_without_the_kubelets_event_it_stays_a_crash_loop() -> None:
    """The Killing Event can come after the restart's pod event; an Unhealthy word alone
    does not say the container was killed."""
    cond, _ = running_with_events(probe_killed_pod(), [
        kubelet_event("Unhealthy", UNHEALTHY, "2026-12-06T10:10:20Z")])
    assert cond["reason"] == "CrashLoopBackOff", cond
    assert "exit code 137" in cond["message"], cond


def test_a_probe_kill_before_the_last_run_is_not_its_cause() -> None:
    """The container was killed by its startup probe once, then its last run (begun
    after that kill) ended for another reason: the crash loop, not the old kill."""
    pod = probe_killed_pod(run_at="2026-12-06T10:11:00Z")
    cond, _ = running_with_events(pod, [
        kubelet_event("Killing", "Container vllm failed startup probe, will be restarted")])
    assert cond["reason"] == "CrashLoopBackOff", cond


def test_a_started_container_is_not_read_for_probe_kills() -> None:
    pod = probe_killed_pod(started=True)
    pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": KILLED_AT}}
    assert PodScheduling.from_pod(pod).restarted == ()
    cond, _ = running_with_events(pod, [
        kubelet_event("Killing", "Container vllm failed startup probe, will be restarted")])
    assert cond["status"] == "True", cond


def test_a_liveness_probe_kill_names_its_threshold() -> None:
    cond, _ = running_with_events(probe_killed_pod(), [
        kubelet_event("Unhealthy", "Liveness probe failed: HTTP probe failed with "
                      "statuscode: 503", "2026-12-06T10:10:20Z"),
        kubelet_event("Killing", "Container vllm failed liveness probe, will be restarted")])
    assert cond["reason"] == "LivenessProbeFailed", cond
    assert ("its liveness probe on /health failed (4 failures 15 s apart, 10 s each)"
            in cond["message"]), cond
    assert "statuscode: 503" in cond["message"] and "--previous" in cond["message"], cond

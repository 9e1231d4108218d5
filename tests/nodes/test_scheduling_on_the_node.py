"""Scheduling on the REAL node (Kubernetes' kubelet with containerd, node ``node-1``, its 8
``nvidia.com/gpu`` from the device plugin): what the operator says when the real
kube-scheduler places, or cannot place, the pods it renders. The operator runs in the
chart's pod; a test that needs another setting changes it the way a user would, by
``helm upgrade`` of the release, and sets it back after.

These ran on the cluster tier's process kubelet (two registered 8 x L4 nodes and a CPU
node) until 2026-12-07; the scheduler's messages now count this tier's one node.

No vLLM server starts here: the LLMServices name an image the registry does not hold, so
a pod the scheduler places goes no further than its pull, and the pods that hold the GPUs
are ``sleep`` in the operator's image.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from llm_operator.knowledge.gpuclass import PRESETS
from llm_operator_sandbox.cluster import run_tool
from llm_operator_sandbox.nodes import GPU_RESOURCE, RealNodes
from tests.cluster.conftest import CHART, ClusterKubectl, helm_binary
from tests.cluster.test_control_plane import NOT_READY, condition, forbidden_lines
from tests.support.emulator import wait_for

from .conftest import RELEASE_NAMESPACE, OperatorImage, operator_pod, pod_of
from .test_real_containers import apply_until_false, small_service

pytestmark = [pytest.mark.nodes, pytest.mark.timeout(420)]

GPUS = 8  # what the device plugin registers on node-1


def unpulled_service(name: str, nodes: RealNodes) -> dict[str, Any]:
    """The demo's tiny Llama on an image of the registry it does not hold: the admission
    policy allows it (the registry's host), and no server starts if a pod is placed."""
    svc = small_service(name)
    svc["spec"]["image"] = f"{nodes.registry.host}/vllm/vllm-openai:v0.32.0"  # never pushed
    svc["spec"]["pod"] = {"imagePullSecrets": [{"name": "regcred"}]}
    return svc


def spare_service(name: str, nodes: RealNodes) -> dict[str, Any]:
    svc = unpulled_service(name, nodes)
    svc["spec"]["tuning"] = {"mode": "OnRollout", "placement": "Spare", "maxTrials": 1,
                             "maxDurationMinutes": 4}
    return svc


def filler(image: str) -> dict[str, Any]:
    """Another team's serving pod that takes all the node's GPUs (priority 0, as pods
    without a class have), running ``sleep`` in a container."""
    labels = {"app": "filler"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "filler"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "imagePullSecrets": [{"name": "regcred"}],
                     "terminationGracePeriodSeconds": 1,
                     "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists",
                                      "effect": "NoSchedule"}],
                     "containers": [{"name": "serve", "image": image,
                                     "command": ["sleep", "3600"],
                                     "resources": {"limits": {GPU_RESOURCE: str(GPUS)}}}]}}}}


@contextmanager
def node_filled(admin: ClusterKubectl, namespace: str, image: str) -> Iterator[set[str]]:
    """The filler's pod bound and running, every GPU of the node taken; its pod's UID. The
    filler goes after (the namespace's teardown deletes LLMServices only)."""
    admin.apply_obj(filler(image), namespace)

    def running() -> list[dict[str, Any]] | None:
        pods = [p for p in admin.items("pods", namespace, "app=filler")
                if (p.get("status") or {}).get("phase") == "Running"]
        return pods or None
    try:
        yield {p["metadata"]["uid"] for p in wait_for(running, 90, "the filler running with "
                                                       f"{GPUS} GPUs", interval=1)}
    finally:
        admin.run("delete", "deployment", "filler", "-n", namespace, "--wait=false",
                  check=False)


def placed_on(admin: ClusterKubectl, namespace: str, name: str, timeout: float,
              what: str) -> str:
    """The node the scheduler bound pod ``name`` to; else fail with its PodScheduled
    condition and the node's allocated resources (what the scheduler counted)."""
    def placed() -> str | None:
        return ((admin.get("pod", name, namespace) or {}).get("spec") or {}).get("nodeName")
    try:
        return wait_for(placed, timeout, what, interval=1)
    except AssertionError as e:
        pod = admin.get("pod", name, namespace) or {}
        requests = [c.get("resources") for c in (pod.get("spec") or {}).get("containers") or []]
        described = admin.run("describe", "nodes", check=False).stdout
        raise AssertionError(f"{e}\nPodScheduled: {condition(pod, 'PodScheduled')}\n"
                             f"requests: {requests}\nnodes: {described[-2500:]}") from e


def operator_log(admin: ClusterKubectl) -> str:
    return admin.run("logs", "-n", RELEASE_NAMESPACE, operator_pod(admin)["metadata"]["name"]
                     ).stdout


def operator_env(admin: ClusterKubectl) -> dict[str, str]:
    (container,) = operator_pod(admin)["spec"]["containers"]
    return {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}


@contextmanager
def chart_settings(admin: ClusterKubectl, nodes: RealNodes, **settings: Any) -> Iterator[None]:
    """``helm upgrade --reuse-values`` of the release with these ``settings.*`` values (the
    chart's Deployment recreates the operator's pod), then back to the values before."""
    # Every value in force (--all: the chart's defaults too): a value set back to the
    # chart's default is written out, since --reuse-values keeps one merely removed.
    before = json.loads(run_tool([helm_binary(), "get", "values", "llm-operator", "-n",
                                  RELEASE_NAMESPACE, "--all", "-o", "json"],
                                 nodes.cluster.admin_kubeconfig))
    old = {k: before["settings"][k] for k in settings}

    def upgrade(values: dict[str, Any]) -> None:
        previous = operator_pod(admin)["metadata"]["name"]
        set_args = [a for k, v in values.items()
                    for a in ("--set-json", f"settings.{k}={json.dumps(v)}")]
        run_tool([helm_binary(), "upgrade", "llm-operator", str(CHART), "-n", RELEASE_NAMESPACE,
                  "--reuse-values", *set_args, "--wait", "--timeout", "120s"],
                 nodes.cluster.admin_kubeconfig)
        operator_pod(admin, other_than=previous)
        wait_for(lambda: "Initial authentication has finished" in operator_log(admin), 60,
                 "the new operator pod's log to say it authenticated", interval=1)
    upgrade(settings)
    try:
        yield
    finally:
        upgrade(old)


def test_the_node_is_ready_with_its_gpus_and_untainted(admin: ClusterKubectl,
                                                       nodes: RealNodes) -> None:
    """The kubelet's Ready condition and its GPUs; the node lifecycle controller leaves the
    node untainted (the kubelet's heartbeats count)."""
    node = wait_for(lambda: (lambda n: n if condition(n, "Ready").get("status") == "True"
                             and not {t["key"] for t in n["spec"].get("taints") or []}
                             & NOT_READY else None)(admin.get("nodes", nodes.node.name)),
                    60, f"{nodes.node.name} Ready without the not-ready taint", interval=1)
    assert [n["metadata"]["name"] for n in admin.items("nodes")] == [nodes.node.name]
    assert node["status"]["allocatable"].get(GPU_RESOURCE) == str(GPUS), node["status"]
    assert not node["spec"].get("taints"), node["spec"]
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")


def test_a_pod_no_node_can_take_reports_the_schedulers_message(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes) -> None:
    """A service asking for a GPU product the node does not carry stays Pending; the
    LLMService says so with the real scheduler's own message."""
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    svc = unpulled_service("nowhere", nodes)
    svc["spec"]["gpus"] = {**svc["spec"]["gpus"], "product": "H100"}
    cond = apply_until_false(admin, namespace, svc, "PodsScheduled", "no H100 node")
    assert cond["reason"] == "Unschedulable"
    assert "0/1 nodes are available" in cond["message"], cond["message"]
    assert "node affinity/selector" in cond["message"], cond["message"]
    assert any(e.get("reason") == "FailedScheduling" and e["involvedObject"]["kind"] == "Pod"
               for e in admin.items("events", namespace))


def test_a_missing_claim_is_unschedulable_with_the_claims_fix(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes) -> None:
    """The REAL scheduler refuses a pod whose claim does not exist (the VolumeBinding
    plugin, which it reaches once a node exists); the LLMService quotes it and names the
    spec fields."""
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    svc = unpulled_service("nocache", nodes)
    svc["spec"]["cache"] = {"claimName": "hf-cache"}
    cond = apply_until_false(admin, namespace, svc, "PodsScheduled", "missing claim")
    assert cond["reason"] == "Unschedulable"
    assert 'persistentvolumeclaim "hf-cache" not found' in cond["message"], cond
    assert (f"Fix: PersistentVolumeClaim {namespace}/hf-cache not found: create it, or fix "
            "spec.cache.claimName") in cond["message"]


def test_a_spare_tuning_job_waits_and_never_preempts_serving(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes,
        operator_image: OperatorImage) -> None:
    """A tuning Job on spare GPUs (placement Spare, the chart's PriorityClass: below
    serving, preemptionPolicy Never) never preempts a serving pod when every GPU is taken;
    it waits. When the GPUs free up, the service's own serving pod is placed first; on this
    2-CPU node the tuning pod then waits for CPU (each pod's download-model asks for 1), and
    is placed once the service is scaled to zero (its scale subresource, as a user would)."""
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    with node_filled(admin, namespace, operator_image.ref) as uids:
        admin.apply_obj(spare_service("spare", nodes), namespace)

        def tuning_pod() -> dict[str, Any] | None:
            pods = [p for p in admin.items("pods", namespace)
                    if p["metadata"]["name"].startswith("spare-tune-")]
            return pods[0] if pods else None
        pod = wait_for(tuning_pod, 60, "the tuning Job's pod")
        name = pod["metadata"]["name"]
        priority_class = operator_env(admin).get("LLMOP_TUNING_PRIORITY_CLASS")
        assert priority_class and pod["spec"].get("priorityClassName") == priority_class
        assert pod["spec"].get("preemptionPolicy") == "Never"
        assert pod["spec"].get("priority", 0) < 0

        def unschedulable(reason: str) -> dict[str, Any] | None:
            c = condition(admin.get("pod", name, namespace), "PodScheduled")
            return c if c.get("reason") == "Unschedulable" and reason in c["message"] else None
        wait_for(lambda: unschedulable(f"Insufficient {GPU_RESOURCE}"), 60,
                 "the scheduler to find no GPU for the tuning pod")
        time.sleep(15)  # long enough for a preemption to have happened, were it allowed
        still = {p["metadata"]["uid"] for p in admin.items("pods", namespace, "app=filler")
                 if not p["metadata"].get("deletionTimestamp")}
        assert still == uids, "the tuning pod preempted a serving pod"
        waiting = admin.get("pod", name, namespace)
        assert waiting is not None and not waiting["spec"].get("nodeName")
        assert not (waiting.get("status") or {}).get("nominatedNodeName")

        # The filler goes: serving before tuning.
        admin.run("scale", "deployment", "filler", "-n", namespace, "--replicas=0")
        server = pod_of(admin, namespace, "llmops.dev/llmservice=spare,"
                                          "llmops.dev/component=server")
        assert placed_on(admin, namespace, server["metadata"]["name"], 90,
                         "the serving pod placed once the GPUs are free") == nodes.node.name
        wait_for(lambda: unschedulable("Insufficient cpu"), 60,
                 "the tuning pod to wait for the CPU the serving pod took")
        assert not (admin.get("pod", name, namespace) or {})["spec"].get("nodeName")

    # The service scaled to zero: its serving pod goes, the tuning pod is placed.
    admin.run("scale", "llms", "spare", "-n", namespace, "--replicas=0")
    assert placed_on(admin, namespace, name, 180,
                     "the tuning pod placed once the serving pod is gone") == nodes.node.name
    admin.run("delete", "llms", "spare", "-n", namespace, "--wait=false")


def test_a_second_tuning_job_waits_for_the_gpu_budget_and_starts_after(
        admin: ClusterKubectl, namespace: str, nodes: RealNodes,
        operator_image: OperatorImage) -> None:
    """With the Helm value settings.tuningGpuBudget at 1, a second service's tuning Job is
    not created while the first service's Job holds that GPU; the second service says so in
    its Tuned condition (what tuning holds, the budget, the Helm value that raises it), and
    its Job is created once the first one is gone. Both tuning pods wait for the node (the
    filler holds its GPUs): a Job whose pod waits still holds its GPUs against the budget."""
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    with node_filled(admin, namespace, operator_image.ref):
        budget_queues_then_starts(admin, namespace, nodes)


def budget_queues_then_starts(admin: ClusterKubectl, namespace: str, nodes: RealNodes) -> None:
    """The budget test's steps while the filler holds every GPU."""
    def tuning_jobs(service: str) -> list[dict[str, Any]]:
        return admin.items("jobs", namespace,
                           f"llmops.dev/llmservice={service},llmops.dev/component=tuning")

    with chart_settings(admin, nodes, tuningGpuBudget=1):
        assert operator_env(admin)["LLMOP_TUNING_GPU_BUDGET"] == "1"
        admin.apply_obj(spare_service("first", nodes), namespace)
        first_job = wait_for(lambda: (tuning_jobs("first") or [None])[0], 60,
                             "the first service's tuning Job")
        assert first_job["metadata"]["annotations"]["llmops.dev/tuning-on-spare"] == "true"

        admin.apply_obj(spare_service("second", nodes), namespace)

        def queued() -> dict[str, Any] | None:
            obj = admin.get("llms", "second", namespace)
            tuning = ((obj or {}).get("status") or {}).get("tuning") or {}
            return obj if tuning.get("state") == "Queued" else None
        second = wait_for(queued, 60, "the second service's run queued for the budget")
        tuning = second["status"]["tuning"]
        assert tuning["queued"]["heldGpus"] == 1 and tuning["queued"]["needGpus"] == 1
        assert tuning["queued"]["budgetGpus"] == 1
        cond = condition(second, "Tuned")
        assert cond["status"] == "Unknown" and cond["reason"] == "TuningQueued"
        assert cond["message"] == (
            f"Tuning Job {tuning['jobName']} is not created yet: tuning Jobs on spare GPUs "
            "hold 1 of the 1-GPU tuning budget and this run needs 1; it starts when enough "
            "of them end, or raise Helm value settings.tuningGpuBudget "
            "(LLMOP_TUNING_GPU_BUDGET) to 2 or more")
        reasons = {e.get("reason") for e in admin.items("events", namespace)
                   if (e.get("involvedObject") or {}).get("name") == "second"}
        assert "TuningQueued" in reasons and "TuningStarted" not in reasons
        assert tuning_jobs("second") == []

        # The first service goes, and its Job with it: the budget frees, the queued run
        # starts within the operator's 20-second recheck.
        admin.run("delete", "llms", "first", "-n", namespace, "--wait=false")
        job = wait_for(lambda: (tuning_jobs("second") or [None])[0], 90,
                       "the second service's tuning Job once the budget freed", interval=1)
        assert job["metadata"]["name"] == tuning["jobName"]
        started = admin.get("llms", "second", namespace) or {}
        assert started["status"]["tuning"]["state"] == "Running"
        assert "queued" not in started["status"]["tuning"]
        assert condition(started, "Tuned")["reason"] in ("TuningInProgress", "TuningPending")
        assert "the tuning GPU budget has room" in operator_log(admin)
        admin.run("delete", "llms", "second", "-n", namespace, "--wait=false")


@pytest.mark.parametrize("class_name", ["gke", "eks"])
def test_the_class_label_places_the_pod(class_name: str, admin: ClusterKubectl,
                                        namespace: str, nodes: RealNodes) -> None:
    """With the Helm value settings.gpuClass at GKE's or EKS's class, a service asking for
    an L4 waits while the node names its L4 the GPU feature discovery way only, and is
    placed once the node carries that provider's label for an L4 (GKE's
    ``cloud.google.com/gke-accelerator: nvidia-l4``, Karpenter's
    ``karpenter.k8s.aws/instance-gpu-name``) and the GPU pools' taint, which the rendered
    pod tolerates (docs/production/gpu-placement-and-prometheus.md)."""
    gpu_class = PRESETS[class_name]
    assert gpu_class.product_label is not None
    value = gpu_class.label_value("L4")
    assert value, f"the {class_name} class names no L4"
    node = nodes.node.name
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    name = f"on-{class_name}"
    with chart_settings(admin, nodes, gpuClass=class_name):
        svc = unpulled_service(name, nodes)
        svc["spec"]["gpus"] = {"product": "L4", "count": 1}
        cond = apply_until_false(admin, namespace, svc, "PodsScheduled",
                                 f"no node with {class_name}'s label")
        assert "node affinity/selector" in cond["message"], cond["message"]
        # The node carries the provider's label and the GPU pools' taint (after the
        # operator's pod rolled: it does not tolerate the taint).
        admin.run("label", "node", node, f"{gpu_class.product_label}={value}")
        admin.run("taint", "node", node, f"{GPU_RESOURCE}=present:NoSchedule")
        try:
            (pod,) = admin.items("pods", namespace, selector=f"llmops.dev/llmservice={name}")
            assert placed_on(admin, namespace, pod["metadata"]["name"], 90,
                             f"the server pod bound by the scheduler ({class_name})") == node
            assert pod["spec"]["nodeSelector"].get(gpu_class.product_label) == value
            assert forbidden_lines(operator_log(admin)) == []
        finally:
            admin.run("delete", "llms", name, "-n", namespace, "--wait=false", check=False)
            admin.run("taint", "node", node, f"{GPU_RESOURCE}=present:NoSchedule-", check=False)
            admin.run("label", "node", node, f"{gpu_class.product_label}-", check=False)

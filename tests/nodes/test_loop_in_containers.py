"""The operator's loop in REAL containers (containerd and runc under Kubernetes' own
kubelet, node ``node-1``), in a namespace that enforces the ``restricted`` Pod Security
Standard. One LLMService that tunes before serving and adapts live:

1. the tuning Job runs in a container of the vLLM CPU image built here, the tuner copied
   from the operator's image by its init container (both pulled from the registry with
   the pod's secret); its result lands in ``status.tuning``;
2. the Deployment rolls out onto the tuned cap through the real controllers (the
   operator's server-side apply, the Deployment controller's ReplicaSet, the scheduler's
   binding with the planned GPU): ``download-model`` fetches the model from
   the Hub stand-in on the bridge, the server pod's ``copy-engine`` init container copies
   the scheduler class from the operator's image, vLLM loads it and runs as uid 1000, and
   a completion comes back through the Service's cluster IP (kube-proxy);
3. a real Prometheus scrapes the pod on its pod IP because the operator's PodMonitor
   selects it;
4. the user narrows ``spec.adaptation.maxMaxNumSeqs`` below the cap in force: the
   operator (in its chart pod) writes the new cap to the ConfigMap, **the real kubelet
   refreshes the ConfigMap volume** in the running pod (the one step the other tiers do
   by hand), the engine reads and reports it, Prometheus scrapes the report, and the
   operator writes ``capInForce``: the same pod and container throughout, no restart;
5. a spec change re-plans and re-renders the Deployment;
6. delete: the garbage collector removes every child and pod (every object of the
   namespace that has an owner), and Prometheus scrapes no pod of the namespace.

While the tuning pod runs, the operator's own pod is deleted at once (``--grace-period 0
--force``, as a node that dies takes it): the chart's Deployment starts another, which
adopts the running Job (one Job UID, never a second). The chart's RBAC covers every call
of the loop: no ``forbidden`` in the operator's log. (These steps ran on the process
kubelet in the e2e tier before, the chain of controllers and the garbage collection in the
cluster tier; the adaptation under a real load is test_adaptation_in_containers.py.)

The figures it prints (ConfigMap write -> engine's report -> ``capInForce``) are the
propagation docs/production/live-admission-cap.md quotes, measured in real containers.
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any

import pytest
import yaml

from llm_operator.inpod.engine.cap import METRIC_CAP
from llm_operator.inpod.tuner.server import engine_metrics
from llm_operator.rendering.admission import ADMISSION_CONFIG_MAP_SUFFIX, ADMISSION_KEY
from llm_operator_sandbox.prometheus import PodMonitorDiscovery
from tests.cluster.conftest import ClusterKubectl
from tests.cluster.test_control_plane import OWNED_KINDS, condition, managers, owned_by
from tests.nodes.conftest import (
    RELEASE_NAMESPACE,
    HeldLock,
    OperatorImage,
    VllmImage,
    operator_pod,
    pod_of,
)
from tests.nodes.test_real_containers import container_status
from tests.nodes.test_vllm_in_containers import (
    ENFORCE,
    READY_WITHIN_SECONDS,
    ROOT_POD,
    post,
    ready_or_explain,
    uid_of,
    vllm_service,
)
from tests.support.emulator import wait_for

pytestmark = [pytest.mark.nodes]

NAME = "looped"
# Two short trials (the tuner's own bounds), on one CPU of this 2-CPU node.
TUNING = {"mode": "OnRollout", "placement": "BeforeServing", "maxTrials": 2,
          "maxDurationMinutes": 3}
# Pull (6.7 GB from the local registry), download, the tuner's server start and its trials.
TUNED_WITHIN_SECONDS = 1200
# The kubelet refreshes a ConfigMap volume at its next sync of the pod: its sync period
# (1 min) plus jitter; the bound leaves room for a slow machine. Measured figures print.
REFRESH_WITHIN_SECONDS = 240
# A vLLM pod's grace period is 140 s (its preStop and vLLM's --shutdown-timeout).
GONE_WITHIN_SECONDS = 180


def engine_cap(pod_ip: str) -> int | None:
    """The cap the engine reports on its own /metrics (pod IP, vLLM's port)."""
    value = engine_metrics(f"http://{pod_ip}:8000").get(METRIC_CAP)
    return None if value is None else int(value)


def image_ids(pod: dict[str, Any]) -> dict[str, str]:
    """Each container's (init containers too) image as containerd resolved it."""
    status = pod.get("status") or {}
    return {s["name"]: s.get("imageID", "") for key in ("initContainerStatuses",
            "containerStatuses") for s in status.get(key) or []}


@pytest.mark.timeout(3000)
def test_tuned_in_a_job_served_and_capped_live_all_in_containers(
        vllm_lock: HeldLock, admin: ClusterKubectl, namespace: str, nodes: Any,
        vllm_image: VllmImage, operator_image: OperatorImage, hub: Any,
        prometheus: PodMonitorDiscovery) -> None:
    admin.apply_obj(nodes.registry.pull_secret("regcred"), namespace)
    # The API server enforces the `restricted` Pod Security Standard on the namespace: a
    # pod that breaks it is never created (shown first on a root pod, a server-side dry run).
    admin.run("label", "namespace", namespace, f"{ENFORCE}=restricted")
    refused = admin.run("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                        stdin=yaml.safe_dump(ROOT_POD), check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused
    svc = vllm_service(NAME, vllm_image, hub.endpoint)
    svc["spec"]["tuning"] = TUNING
    svc["spec"]["adaptation"] = {"mode": "Apply", "intervalSeconds": 5, "cooldownSeconds": 0}
    operator_ref = f"{operator_image.registry}/llm-operator@{operator_image.digest}"
    vllm_ref = f"{nodes.registry.host}/vllm-cpu@{vllm_image.digest}"
    started = time.monotonic()
    admin.apply_obj(svc, namespace)
    uid = wait_for(lambda: admin.get("llms", NAME, namespace), 30, "the LLMService")[
        "metadata"]["uid"]

    # 1. The tuning Job, in a container: the tuner from the operator's image, run by the
    # vLLM image's Python, measuring servers it starts in its own pod.
    # The operator deletes the Job once it has read the result: its pod is read while it runs,
    # and every Job seen is kept (the list at the end alone would not show a second one).
    job_pods: dict[str, dict[str, Any]] = {}
    jobs_seen: set[str] = set()
    tuning = f"llmops.dev/llmservice={NAME},llmops.dev/component=tuning"

    def tuned() -> dict[str, Any] | None:
        for p in admin.items("pods", namespace, tuning):
            job_pods[p["metadata"]["name"]] = p
        jobs_seen.update(j["metadata"]["uid"] for j in admin.items("jobs", namespace))
        s = admin.get("llms", NAME, namespace) or {}
        state = ((s.get("status") or {}).get("tuning") or {}).get("state")
        return s if condition(s, "Tuned").get("status") == "True" or state == "Failed" else None

    # The operator's pod dies while the tuning pod runs; the Deployment's next pod adopts
    # the running Job.
    wait_for(lambda: any((p.get("status") or {}).get("phase") == "Running"
                         for p in admin.items("pods", namespace, tuning)),
             TUNED_WITHIN_SECONDS, "the tuning pod running", interval=2)
    (job,) = admin.items("jobs", namespace)
    jobs_seen.add(job["metadata"]["uid"])
    old_operator = operator_pod(admin)["metadata"]["name"]
    admin.run("delete", "pod", old_operator, "-n", RELEASE_NAMESPACE, "--grace-period=0",
              "--force")
    killed = time.monotonic()
    new_operator = operator_pod(admin, other_than=old_operator)
    sys.stderr.write(f"operator pod {old_operator} deleted; {new_operator['metadata']['name']}"
                     f" Ready {time.monotonic() - killed:.1f} s later\n")
    try:
        svc_now = wait_for(tuned, TUNED_WITHIN_SECONDS, "Tuned=True", interval=2)
    except AssertionError as e:
        pods = [(p["metadata"]["name"], p.get("status")) for p in admin.items("pods", namespace)]
        raise AssertionError(f"{e}\npods: {pods}") from e
    result = svc_now["status"]["tuning"]
    assert result["state"] == "Succeeded" and result["source"] == "job", result
    assert result["trials"] >= 1, result
    # The image built here is a custom spec.image named by its digest (no release tag): the
    # Job sweeps the caps live on one server, as the server pods run the live cap, rather
    # than starting vLLM once per value (which it did for any spec.image before).
    assert (result.get("sweep") or "").startswith("max-num-seqs swept live"), result
    assert 1 <= result["serverStarts"] <= result["trials"], result
    assert jobs_seen == {job["metadata"]["uid"]}, jobs_seen  # adopted, never a second Job
    tuned_at = time.monotonic()
    (job_pod,) = job_pods.values()  # one run, one pod
    tuner = container_status(job_pod, "tuner")
    assert tuner["containerID"].startswith("containerd://"), tuner
    assert job_pod["spec"]["nodeName"] == nodes.node.name
    assert image_ids(job_pod) == {"copy-tuner": operator_ref, "download-model": vllm_ref,
                                  "tuner": vllm_ref}, image_ids(job_pod)
    tuned_cap = svc_now["status"]["engine"]["maxNumSeqs"]

    # 2. The rollout onto the tuned cap: the live cap's pieces, in containers.
    ready_or_explain(admin, namespace, NAME, READY_WITHIN_SECONDS)
    served_at = time.monotonic()
    pod = pod_of(admin, namespace, f"llmops.dev/llmservice={NAME},llmops.dev/component=server")
    pod_name, pod_ip = pod["metadata"]["name"], pod["status"]["podIP"]
    vllm = container_status(pod, "vllm")
    assert vllm["containerID"].startswith("containerd://"), vllm

    # The scheduler class came from the operator's image, by the registry's digest.
    init = {s["name"]: s for s in pod["status"]["initContainerStatuses"]}
    assert init["copy-engine"]["state"]["terminated"]["exitCode"] == 0, init
    assert image_ids(pod)["copy-engine"] == operator_ref, image_ids(pod)
    assert image_ids(pod)["vllm"] == vllm_ref, image_ids(pod)
    assert pod["spec"]["nodeName"] == nodes.node.name
    # The chain of real controllers: the operator's Deployment (server-side apply, field
    # manager llm-operator, owned by the LLMService), the Deployment controller's
    # ReplicaSet, its pod with the planned GPU; the Deployment counts it available.
    dep = admin.get("deployment", NAME, namespace) or {}
    assert owned_by(dep, uid), dep["metadata"].get("ownerReferences")
    assert managers(admin, "deployment", NAME, namespace)["llm-operator"]["operation"] == "Apply"
    (rs,) = [r for r in admin.items("replicasets", namespace)
             if owned_by(r, dep["metadata"]["uid"]) and r["status"].get("replicas")]
    assert owned_by(pod, rs["metadata"]["uid"]), pod["metadata"].get("ownerReferences")
    assert dep["status"].get("availableReplicas") == 1, dep["status"]
    limits = next(c for c in pod["spec"]["containers"] if c["name"] == "vllm")["resources"][
        "limits"]
    assert limits.get("nvidia.com/gpu") == "1", limits
    log = admin.run("logs", pod_name, "-n", namespace, "-c", "download-model").stdout
    assert "Downloaded llmops-demo/tiny-llama" in log, log
    assert any("/resolve/" in r and r.endswith("model.safetensors") for r in hub.requests), \
        hub.requests
    # Not root: vLLM's process runs as the pods' user (spec.pod.runAsUser, default 1000), as
    # the kernel sees it.
    assert uid_of(nodes, vllm["containerID"]) == 1000
    # The pod's one GPU (spec.gpus.count) was allocated by the kubelet from the device
    # plugin's devices: the plugin's Allocate named it in the container's environment.
    device = admin.run("exec", pod_name, "-n", namespace, "-c", "vllm", "--", "printenv",
                       "NVIDIA_VISIBLE_DEVICES").stdout.strip()
    assert re.fullmatch(r"gpu-[0-7]", device), device
    # The container's command is the rendered one, untouched: the live cap's wrapper, then
    # `vllm serve MODEL ...`.
    spec = next(c for c in pod["spec"]["containers"] if c["name"] == "vllm")
    assert spec["command"][:2] == ["/bin/sh", "-c"] and "vllm serve" in spec["command"][2]
    assert spec["args"][0] == "llmops-demo/tiny-llama", spec["args"]
    # A completion through the Service's cluster IP: kube-proxy's rules, then the pod.
    service = admin.get("services", NAME, namespace) or {}
    ip = service["spec"]["clusterIP"]
    port = next(p["port"] for p in service["spec"]["ports"])
    answer = wait_for(lambda: post(f"http://{ip}:{port}/v1/completions", {
        "model": "llmops-demo/tiny-llama", "prompt": "hello", "max_tokens": 8}), 60,
        "a completion through the Service", interval=2)
    assert answer["usage"]["completion_tokens"] == 8, answer

    start = engine_cap(pod_ip)
    assert start == tuned_cap, (start, tuned_cap)  # the engine starts on the tuned cap
    assert start is not None and start >= 2, start
    narrowed_to = start // 2
    # Prometheus scrapes the pod on its pod IP, as the operator's PodMonitor selects it.
    assert prometheus.prometheus is not None
    wait_for(lambda: prometheus.prometheus.query(  # type: ignore[union-attr]
        f'{METRIC_CAP}{{llmservice="{NAME}",namespace="{namespace}"}} == {start}'), 60,
        "Prometheus to scrape the engine's cap through the PodMonitor", interval=1)
    targets = [t for t in prometheus.prometheus.targets()
               if t["labels"].get("namespace") == namespace]
    assert [t["scrapeUrl"] for t in targets] == [f"http://{pod_ip}:8000/metrics"], targets
    def in_force(cap: int) -> dict[str, Any] | None:
        status = (admin.get("llms", NAME, namespace) or {}).get("status") or {}
        return status if (status.get("adaptation") or {}).get("capInForce") == cap else None

    wait_for(lambda: in_force(start), 120, f"capInForce {start} on the LLMService", interval=1)

    # The user narrows the bounds: the cap moves inside them at once, live.
    cm_name = f"{NAME}{ADMISSION_CONFIG_MAP_SUFFIX}"
    narrowed = time.monotonic()
    admin.run("patch", "llms", NAME, "-n", namespace, "--type", "merge", "-p",
              json.dumps({"spec": {"adaptation": {"maxMaxNumSeqs": narrowed_to}}}))
    def written_cap() -> str | None:
        cm = admin.get("configmaps", cm_name, namespace) or {}
        return (cm.get("data") or {}).get(ADMISSION_KEY)

    wait_for(lambda: written_cap() == str(narrowed_to), 60,
             f"the ConfigMap {cm_name} to say {narrowed_to}", interval=0.5)
    written = time.monotonic()
    wait_for(lambda: engine_cap(pod_ip) == narrowed_to, REFRESH_WITHIN_SECONDS,
             f"the engine in pod {pod_name} to report {narrowed_to} (the kubelet's refresh "
             "of the ConfigMap volume)", interval=0.5)
    in_engine = time.monotonic()
    status = wait_for(lambda: in_force(narrowed_to), 120,
                      f"capInForce {narrowed_to} on the LLMService", interval=0.5)
    in_status = time.monotonic()

    # Same pod, same container, never restarted; the Deployment did not roll.
    after = admin.get("pods", pod_name, namespace) or {}
    again = container_status(after, "vllm")
    assert again["containerID"] == vllm["containerID"] and again["restartCount"] == 0, again
    assert [p["metadata"]["name"] for p in admin.items(
        "pods", namespace, f"llmops.dev/llmservice={NAME}")] == [pod_name]
    assert status["adaptation"].get("actuation") == "Live", status["adaptation"]
    live_cap = condition(admin.get("llms", NAME, namespace), "LiveCap")
    assert live_cap.get("reason") == "EngineReportsCap", live_cap
    # The image's reference (a digest; its tag 0.32.0-HASH is no release tag) names no vLLM
    # release: the engine's own report (llmop_engine_vllm_info) does, on the status.
    release = vllm_image.local.rsplit(":", 1)[1].split("-")[0]
    assert status["adaptation"].get("engineVllmVersions") == [release], status["adaptation"]
    assert f"The engines report vLLM {release} (llmop_engine_vllm_info), which the live " \
        "cap supports" in live_cap.get("message", ""), live_cap
    # The engine still serves, under the new cap.
    answer = post(f"http://{pod_ip}:8000/v1/completions",
                  {"model": "llmops-demo/tiny-llama", "prompt": "hi", "max_tokens": 4})
    assert answer["usage"]["completion_tokens"] == 4, answer
    sys.stderr.write(
        f"tuned in a Job in {tuned_at - started:.0f} s ({result['trials']} trials, "
        f"{result['serverStarts']} vLLM start(s), cap {tuned_cap}); served "
        f"{served_at - tuned_at:.0f} s later\n")
    sys.stderr.write(
        f"live cap {start} -> {narrowed_to} in real containers: ConfigMap written "
        f"{written - narrowed:.1f} s after the patch; the kubelet's volume refresh reached "
        f"the engine {in_engine - written:.1f} s after the write; capInForce "
        f"{in_status - in_engine:.1f} s after the engine's report "
        f"({in_status - narrowed:.1f} s in all)\n")

    # 5. A spec change re-plans and re-renders the Deployment.
    generation = (admin.get("llms", NAME, namespace) or {})["metadata"]["generation"]
    admin.run("patch", "llms", NAME, "-n", namespace, "--type", "merge", "-p",
              json.dumps({"spec": {"engine": {"maxModelLen": 512},
                                   "tuning": {"mode": "Manual"}}}))
    replanned = wait_for(lambda: (s := admin.get("llms", NAME, namespace) or {}) and condition(
        s, "Planned").get("observedGeneration", 0) > generation and s, 60,
        "a plan for the new generation", interval=1)
    assert replanned["status"]["plan"]["maxModelLen"] == 512, replanned["status"]["plan"]
    wait_for(lambda: has_args(admin.get("deployment", NAME, namespace) or {},
                              ["--max-model-len", "512"]), 60,
             "the Deployment rendered with --max-model-len 512", interval=1)

    # 6. Delete: every child and pod goes (the kubelet stops the containers), and Prometheus
    # drops the pod's target (the PodMonitor went with the LLMService). The garbage
    # collector follows the owner references: every object of the namespace that has an
    # owner (the service's children and theirs, the ReplicaSets among them) goes.
    kinds = ("deployments", "jobs", "pods", "podmonitors", "configmaps", "services")
    children = f"llmops.dev/llmservice={NAME}"
    present = {kind for kind in kinds if admin.items(kind, namespace, children)}
    assert {"deployments", "pods", "podmonitors", "configmaps", "services"} <= present, present

    def owned_objects() -> set[tuple[str, str]]:
        return {(o["kind"], o["metadata"]["name"]) for o in admin.items(OWNED_KINDS, namespace)
                if o["metadata"].get("ownerReferences")}
    owned_before = owned_objects()
    assert {"Deployment", "ReplicaSet", "Pod", "Service"} <= {k for k, _ in owned_before}, \
        owned_before
    admin.run("delete", "llms", NAME, "-n", namespace, "--wait=false")
    deleted = time.monotonic()
    wait_for(lambda: not any(admin.items(kind, namespace, children) for kind in kinds)
             and not owned_objects(), GONE_WITHIN_SECONDS,
             f"every child and pod of the LLMService gone (owned: {sorted(owned_before)})",
             interval=1)
    gone = time.monotonic()
    wait_for(lambda: not [t for t in prometheus.prometheus.targets()  # type: ignore[union-attr]
                          if t["labels"].get("namespace") == namespace], 60,
             "Prometheus to scrape no pod of the namespace", interval=1)
    sys.stderr.write(f"deleted: every child and pod gone in {gone - deleted:.1f} s\n")
    # The chart's RBAC covered every call the operator made since its pod restarted.
    log = admin.run("logs", "-n", RELEASE_NAMESPACE, new_operator["metadata"]["name"]).stdout
    forbidden = [line for line in log.splitlines() if "forbidden" in line.lower()]
    assert forbidden == [], forbidden[:5]


def has_args(workload: dict[str, Any], pair: list[str]) -> bool:
    """A container of the workload's pod template has ``pair`` among its args."""
    template = (workload.get("spec") or {}).get("template") or {}
    return any(args[i:i + len(pair)] == pair
               for c in (template.get("spec") or {}).get("containers") or []
               for args in [c.get("args") or []] for i in range(len(args)))


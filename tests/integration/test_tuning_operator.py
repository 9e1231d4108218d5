"""Tuning on rollout, end to end: the real operator process against the EMULATED API
server (not a cluster), driven by the real kubectl.

Nothing runs the tuning Job here (no kubelet, no Job controller): the test plays both.
It creates the Job's Pod with a terminated ``tuner`` container whose termination
message is a result JSON produced by the tuner's own result code
(``tests/support/tuning_results.py``), then sets the Job's ``Complete`` or ``Failed``
condition, as the Job controller would. That the rendered Job really runs the tuner
against vLLM is shown in tests/vllm/test_tuner.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from llm_operator.api.timestamps import rfc3339
from tests.integration.conftest import NAMESPACE
from tests.integration.test_operator import cap_value
from tests.support.emulator import EmulatorProcess, Kubectl, OperatorProcess, wait_for
from tests.support.tuning_results import kv_constrained_result

NAME = "llama"
TUNED_MAX_NUM_SEQS = 24  # what the recorded search found best
MANIFEST = {
    "apiVersion": "llmops.dev/v1alpha1",
    "kind": "LLMService",
    "metadata": {"name": NAME},
    "spec": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "gpus": {"product": "L4"},
        "workload": {"inputTokens": 128, "outputTokens": 256, "concurrency": 48},
        "tuning": {"maxTrials": 6, "maxDurationMinutes": 30, "maxRetries": 1},
    },
}
SELECTOR = f"llmops.dev/llmservice={NAME},llmops.dev/component=tuning"


# --------------------------------------------------------------------------- helpers
def apply(kubectl: Kubectl, tmp_path: Path, manifest: dict[str, Any] = MANIFEST) -> None:
    path = tmp_path / "llms.yaml"
    path.write_text(yaml.safe_dump(manifest))
    kubectl.apply(path, NAMESPACE)


def jobs(kubectl: Kubectl) -> list[dict[str, Any]]:
    out = kubectl.run("get", "jobs", "-n", NAMESPACE, "-l", SELECTOR, "-o", "json").stdout
    return list(json.loads(out)["items"])


def wait_job(kubectl: Kubectl, other_than: str | None = None,
             timeout: float = 60) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = [j for j in jobs(kubectl) if j["metadata"]["uid"] != other_than]
        return found[0] if found else None
    return wait_for(probe, timeout, "the tuning Job")


def tuning(kubectl: Kubectl) -> dict[str, Any]:
    svc = kubectl.get("llms", NAME, NAMESPACE) or {}
    return dict((svc.get("status") or {}).get("tuning") or {})


def wait_tuning(kubectl: Kubectl, state: str, timeout: float = 60) -> dict[str, Any]:
    return wait_for(lambda: (t := tuning(kubectl)).get("state") == state and t, timeout,
                    f"status.tuning.state {state}")


def condition(kubectl: Kubectl, ctype: str) -> dict[str, Any] | None:
    svc = kubectl.get("llms", NAME, NAMESPACE) or {}
    for cond in (svc.get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return dict(cond)
    return None


def server_args(kubectl: Kubectl) -> list[str]:
    dep = kubectl.get("deployment", NAME, NAMESPACE) or {}
    containers = dep.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
    return list(containers[0]["args"]) if containers else []


def arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def without_cap(args: list[str]) -> list[str]:
    """The arguments without the cap's flags and their values."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in ("--max-num-seqs", "--max-num-active-seqs"):
            skip = True
        else:
            out.append(a)
    return out




def events(kubectl: Kubectl) -> list[dict[str, Any]]:
    items = (kubectl.get("events", namespace=NAMESPACE) or {}).get("items", [])
    return [e for e in items if e["involvedObject"].get("name") == NAME]


def finish_job(kubectl: Kubectl, job: dict[str, Any], *, message: str | None,
               failed: str | None = None) -> None:
    """Play the kubelet and the Job controller: the Job's pod terminates with
    ``message``, then the Job gets its Complete (or Failed, reason ``failed``) condition."""
    name = job["metadata"]["name"]
    template = job["spec"]["template"]
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-x7k2p", "namespace": NAMESPACE,
                     "labels": {**template["metadata"]["labels"], "job-name": name,
                                "batch.kubernetes.io/job-name": name,
                                "controller-uid": job["metadata"]["uid"]},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                          "uid": job["metadata"]["uid"], "controller": True}]},
        "spec": template["spec"],
    }
    kubectl.run("apply", "--validate=false", "-f", "-", stdin=yaml.safe_dump(pod))
    terminated: dict[str, Any] = {"exitCode": 1 if failed else 0,
                                  "reason": "Error" if failed else "Completed"}
    if message is not None:
        terminated["message"] = message
    pod_status = {"phase": "Failed" if failed else "Succeeded", "containerStatuses": [
        {"name": "tuner", "ready": False, "restartCount": 0, "image": "vllm",
         "imageID": "", "state": {"terminated": terminated}}]}
    kubectl.run("patch", "pod", pod["metadata"]["name"], "-n", NAMESPACE, "--subresource",
                "status", "--type", "merge", "-p", json.dumps({"status": pod_status}))
    now = rfc3339(time.time())
    cond = ({"type": "Failed", "status": "True", "reason": failed,
             "message": "Job has reached the specified backoff limit"
             if failed == "BackoffLimitExceeded" else "Job was active longer than specified "
             "deadline", "lastTransitionTime": now} if failed else
            {"type": "Complete", "status": "True", "lastTransitionTime": now})
    job_status = {"conditions": [cond], "startTime": now,
                  **({"failed": 1} if failed else {"succeeded": 1, "completionTime": now})}
    kubectl.run("patch", "job", name, "-n", NAMESPACE, "--subresource", "status",
                "--type", "merge", "-p", json.dumps({"status": job_status}))


# --------------------------------------------------------------------------- tests
def test_a_new_service_is_tuned_and_a_recreated_one_uses_the_cache(
    kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    apply(kubectl, tmp_path)
    job = wait_job(kubectl)
    running = wait_tuning(kubectl, "Running")
    svc = kubectl.get("llms", NAME, NAMESPACE) or {}
    plan = svc["status"]["plan"]

    # The Job: ours, labelled, on the GPUs of one replica, for this fingerprint.
    meta = job["metadata"]
    fingerprint = running["fingerprint"]
    assert meta["name"] == running["jobName"] == f"{NAME}-tune-{fingerprint[:8]}"
    assert meta["labels"]["llmops.dev/component"] == "tuning"
    assert meta["labels"]["llmops.dev/llmservice"] == NAME
    assert meta["annotations"]["llmops.dev/tuning-fingerprint"] == fingerprint
    assert meta["ownerReferences"][0]["uid"] == svc["metadata"]["uid"]
    tuner = job["spec"]["template"]["spec"]["containers"][0]
    assert tuner["resources"]["requests"]["nvidia.com/gpu"] == str(plan["gpusPerReplica"])
    assert tuner["resources"]["limits"]["nvidia.com/gpu"] == str(plan["gpusPerReplica"])
    assert running["tunable"] == ["maxNumSeqs", "maxNumBatchedTokens"]
    assert condition(kubectl, "Tuned")["status"] == "Unknown"  # type: ignore[index]
    assert "TuningStarted" in {e["reason"] for e in events(kubectl)}
    before = server_args(kubectl)
    # The pods start on the plan's start (the SLO sizing's; the memory limit without one).
    start = plan.get("startMaxNumSeqs") or plan["maxNumSeqs"]
    assert cap_value(before) == str(start) != str(TUNED_MAX_NUM_SEQS)

    # The Job finishes with the tuner's result.
    result = kv_constrained_result(fingerprint, best_max_num_seqs=TUNED_MAX_NUM_SEQS)
    finish_job(kubectl, job, message=result.to_message())
    done = wait_tuning(kubectl, "Succeeded")
    wait_for(lambda: cap_value(server_args(kubectl)) == str(TUNED_MAX_NUM_SEQS),
             15, "the Deployment to run with the tuned --max-num-seqs")

    assert done["applied"] == {"maxNumSeqs": TUNED_MAX_NUM_SEQS}
    assert done["best"]["maxNumSeqs"] == TUNED_MAX_NUM_SEQS
    assert done["best"]["goodput"] == result.best.goodput  # type: ignore[union-attr]
    assert done["baseline"]["goodput"] == result.baseline.goodput  # type: ignore[union-attr]
    assert done["improvement"] == result.improvement and done["trials"] == result.trials
    assert done["fingerprint"] == fingerprint and done["finishedAt"]
    assert len(done["table"]) == result.trials
    tuned = condition(kubectl, "Tuned")
    assert tuned is not None and tuned["status"] == "True"
    assert f"--max-num-seqs {TUNED_MAX_NUM_SEQS}" in tuned["message"]
    # `kubectl get llms` shows the value the server runs with, and that it was tuned.
    columns = kubectl.run("get", "llms", NAME, "-n", NAMESPACE, "--no-headers").stdout.split()
    assert str(TUNED_MAX_NUM_SEQS) in columns, columns
    engine = (kubectl.get("llms", NAME, NAMESPACE) or {})["status"]["engine"]
    assert engine["maxNumSeqs"] == TUNED_MAX_NUM_SEQS and engine["maxNumSeqsSource"] == "tuned"
    # Only the tuned cap moved (as --max-num-active-seqs where the image's vLLM takes it,
    # the runner's --max-num-seqs then unchanged).
    after = server_args(kubectl)
    assert without_cap(after) == without_cap(before), (before, after)
    assert cap_value(after) == str(TUNED_MAX_NUM_SEQS)
    if "--max-num-active-seqs" in after:
        assert arg(after, "--max-num-seqs") == arg(before, "--max-num-seqs"), (before, after)
    wait_for(lambda: "TuningSucceeded" in {e["reason"] for e in events(kubectl)}, 10,
             "the TuningSucceeded Event")
    wait_for(lambda: not jobs(kubectl), 10, "the finished Job to be deleted")
    cache = kubectl.get("configmap", "llm-operator-tuning-cache", NAMESPACE)
    assert cache is not None and fingerprint in cache["data"]
    assert json.loads(cache["data"][fingerprint])["result"]["best"]["settings"] == {
        "maxNumSeqs": TUNED_MAX_NUM_SEQS}
    table = kubectl.run("get", "llms", NAME, "-n", NAMESPACE).stdout
    assert NAME in table

    # Deleted and re-created with the same spec: the cached result, no new Job.
    kubectl.run("delete", "llms", NAME, "-n", NAMESPACE, "--wait=false")
    wait_for(lambda: kubectl.get("llms", NAME, NAMESPACE) is None, 30, "the LLMService gone")
    created_jobs = operator.log().count("Created Job")
    apply(kubectl, tmp_path)
    cached = wait_tuning(kubectl, "Succeeded")
    assert cached["source"] == "cache" and cached["fingerprint"] == fingerprint
    assert cached["applied"] == {"maxNumSeqs": TUNED_MAX_NUM_SEQS}
    wait_for(lambda: cap_value(server_args(kubectl)) == str(TUNED_MAX_NUM_SEQS),
             15, "the re-created Deployment to run with the cached --max-num-seqs")
    assert condition(kubectl, "Tuned")["reason"] == "TuningCached"  # type: ignore[index]
    time.sleep(2)  # a Job the operator were to create would be there by now
    assert jobs(kubectl) == []
    assert operator.log().count("Created Job") == created_jobs

    # A rollout that changes the workload changes the fingerprint: a new run, and the
    # settings measured for the old workload are dropped until it reports.
    def rollout(concurrency: int) -> dict[str, Any]:
        kubectl.run("patch", "llms", NAME, "-n", NAMESPACE, "--type", "merge", "-p",
                    json.dumps({"spec": {"workload": {"concurrency": concurrency}}}))
        return wait_for(lambda: (t := tuning(kubectl)).get("state") == "Running" and (
            t["fingerprint"] not in seen) and t, 30, "a run for the new fingerprint")

    seen = {fingerprint}
    rerun = rollout(64)
    seen.add(rerun["fingerprint"])
    assert "applied" not in rerun
    plan = (kubectl.get("llms", NAME, NAMESPACE) or {})["status"]["plan"]
    planned = plan.get("startMaxNumSeqs") or plan["maxNumSeqs"]
    assert planned != TUNED_MAX_NUM_SEQS
    wait_for(lambda: cap_value(server_args(kubectl)) == str(planned), 15,
             "the Deployment back on the planned --max-num-seqs")
    assert [j["metadata"]["name"] for j in jobs(kubectl)] == [rerun["jobName"]]
    # Another rollout while that run goes on: its Job is superseded and deleted.
    latest = rollout(96)
    wait_for(lambda: [j["metadata"]["name"] for j in jobs(kubectl)] == [latest["jobName"]],
             15, "only the latest fingerprint's Job")


def test_failures_retry_bounded_and_restart_makes_no_second_job(
    api: EmulatorProcess, kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    apply(kubectl, tmp_path)
    first = wait_job(kubectl)
    wait_tuning(kubectl, "Running")
    before = server_args(kubectl)
    assert before

    # The operator restarts mid-run: it finds the Job it started instead of making another.
    operator.stop()
    operator.start()
    operator.wait_log("Resuming is processed", timeout=30)
    time.sleep(1)
    assert [j["metadata"]["uid"] for j in jobs(kubectl)] == [first["metadata"]["uid"]]
    assert "Created Job" not in operator.log()
    assert tuning(kubectl)["jobUid"] == first["metadata"]["uid"]

    # The tuner crashes (the kubelet falls back to the log's tail): one retry follows.
    finish_job(kubectl, first, message="Traceback (most recent call last):\n"
               "RuntimeError: Engine core initialization failed", failed="BackoffLimitExceeded")
    second = wait_job(kubectl, other_than=first["metadata"]["uid"])
    assert second["metadata"]["name"] == first["metadata"]["name"]  # deterministic name
    retrying = wait_tuning(kubectl, "Running")
    assert retrying["attempts"] == 2 and retrying["failures"] == 1
    assert "Engine core initialization failed" in retrying["lastFailure"]["reason"]
    assert server_args(kubectl) == before

    # The retry runs out of time as well: retries are exhausted, settings unchanged.
    finish_job(kubectl, second, message=None, failed="DeadlineExceeded")
    failed = wait_tuning(kubectl, "Failed")
    assert failed["failures"] == 2 and "DeadlineExceeded" in failed["reason"]
    tuned = condition(kubectl, "Tuned")
    assert tuned is not None and tuned["status"] == "False"
    assert tuned["reason"] == "TuningFailed" and "DeadlineExceeded" in tuned["message"]
    assert server_args(kubectl) == before
    wait_for(lambda: not jobs(kubectl), 10, "the failed Job to be deleted")
    warnings = [e for e in events(kubectl) if e["reason"] == "TuningFailed"]
    assert len(warnings) == 2 and all(e["type"] == "Warning" for e in warnings)
    time.sleep(2)  # no third attempt
    assert jobs(kubectl) == [] and operator.log().count("Created Job") == 1


# --------------------------------------------------------------------------- placement
def with_spec(**sections: Any) -> dict[str, Any]:
    manifest = json.loads(json.dumps(MANIFEST))
    for key, value in sections.items():
        if isinstance(value, dict):
            manifest["spec"].setdefault(key, {}).update(value)
        else:
            manifest["spec"][key] = value
    return manifest


def deployment_replicas(kubectl: Kubectl) -> int | None:
    dep = kubectl.get("deployment", NAME, NAMESPACE)
    return None if dep is None else int(dep["spec"]["replicas"])


def pending_pod(kubectl: Kubectl, job: dict[str, Any], since: float) -> str:
    """Play the scheduler: the Job's pod exists and cannot be scheduled (since ``since``)."""
    name = job["metadata"]["name"]
    template = job["spec"]["template"]
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-p3nd1", "namespace": NAMESPACE,
                     "labels": {**template["metadata"]["labels"], "job-name": name}},
        "spec": template["spec"],
    }
    kubectl.run("apply", "--validate=false", "-f", "-", stdin=yaml.safe_dump(pod))
    set_unschedulable(kubectl, pod["metadata"]["name"], since)
    return str(pod["metadata"]["name"])


SCHEDULER_MESSAGE = ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: "
                     "not eligible due to preemptionPolicy=Never.")


def set_unschedulable(kubectl: Kubectl, pod: str, since: float) -> None:
    status = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": SCHEDULER_MESSAGE, "lastTransitionTime": rfc3339(since)}]}
    kubectl.run("patch", "pod", pod, "-n", NAMESPACE, "--subresource", "status", "--type",
                "merge", "-p", json.dumps({"status": status}))


def test_spare_tuning_is_low_priority_and_a_pod_without_gpus_is_reported_then_given_up(
    kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    apply(kubectl, tmp_path, with_spec(tuning={"maxPendingMinutes": 2},
                                       scheduling={"priorityClassName": "serving"}))
    job = wait_job(kubectl)
    wait_tuning(kubectl, "Running")
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["priorityClassName"] == "llm-operator-tuning"  # not the service's
    dep = kubectl.get("deployment", NAME, NAMESPACE) or {}
    assert dep["spec"]["template"]["spec"]["priorityClassName"] == "serving"

    # The scheduler finds no spare GPU: within a minute the Tuned condition says so.
    pod = pending_pod(kubectl, job, time.time())
    t0 = time.monotonic()
    tuned = wait_for(lambda: (c := condition(kubectl, "Tuned")) and c["reason"] ==
                     "TuningPending" and c, 60, "the Tuned condition to report the pending pod")
    assert time.monotonic() - t0 < 60
    assert tuned["status"] == "Unknown" and SCHEDULER_MESSAGE in tuned["message"]
    assert tuning(kubectl)["pending"]["reason"] == "Unschedulable"

    # Past spec.tuning.maxPendingMinutes: the run is given up, once, with the reason.
    set_unschedulable(kubectl, pod, time.time() - 3 * 60)
    failed = wait_tuning(kubectl, "Failed", timeout=60)
    assert failed["unschedulable"] is True and "not scheduled within 2 min" in failed["reason"]
    tuned = condition(kubectl, "Tuned")
    assert tuned is not None and tuned["reason"] == "TuningUnschedulable"
    assert SCHEDULER_MESSAGE in tuned["message"] and "placement" in tuned["message"]
    wait_for(lambda: not jobs(kubectl), 15, "the given-up Job to be deleted")
    time.sleep(3)  # no retry: it would wait for the same GPUs
    assert jobs(kubectl) == [] and operator.log().count("Created Job") == 1


def test_borrow_replica_lends_one_replica_and_returns_it(
    kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    apply(kubectl, tmp_path, with_spec(replicas=3, tuning={"placement": "BorrowReplica"}))
    job = wait_job(kubectl)
    running = wait_tuning(kubectl, "Running")
    assert running["borrowedReplicas"] == 1
    wait_for(lambda: deployment_replicas(kubectl) == 2, 15, "serving to lend one replica")
    assert "priorityClassName" not in job["spec"]["template"]["spec"]  # the service's own

    result = kv_constrained_result(running["fingerprint"], best_max_num_seqs=TUNED_MAX_NUM_SEQS)
    finish_job(kubectl, job, message=result.to_message())
    wait_tuning(kubectl, "Succeeded")
    wait_for(lambda: deployment_replicas(kubectl) == 3, 15, "the replica to be returned")
    assert cap_value(server_args(kubectl)) == str(TUNED_MAX_NUM_SEQS)


def test_borrow_replica_with_one_replica_refuses_tuning_not_serving(
    kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    apply(kubectl, tmp_path, with_spec(tuning={"placement": "BorrowReplica"}))
    skipped = wait_tuning(kubectl, "Skipped")
    assert "spec.tuning.placement" in skipped["reason"] and "spec.replicas" in skipped["reason"]
    tuned = condition(kubectl, "Tuned")
    assert tuned is not None and tuned["reason"] == "InvalidTuningSpec"
    assert deployment_replicas(kubectl) == 1 and jobs(kubectl) == []


def test_before_serving_starts_the_server_on_the_tuned_settings(
    kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    apply(kubectl, tmp_path, with_spec(tuning={"placement": "BeforeServing"}))
    job = wait_job(kubectl)
    running = wait_tuning(kubectl, "Running")
    assert running["beforeServing"] is True
    ready = wait_for(lambda: (c := condition(kubectl, "Ready")) and c["reason"] ==
                     "TuningBeforeServing" and c, 20, "Ready to say the server waits")
    assert ready["status"] == "False"
    time.sleep(2)
    assert kubectl.get("deployment", NAME, NAMESPACE) is None  # no server competes
    assert kubectl.get("service", NAME, NAMESPACE) is not None

    result = kv_constrained_result(running["fingerprint"], best_max_num_seqs=TUNED_MAX_NUM_SEQS)
    finish_job(kubectl, job, message=result.to_message())
    wait_tuning(kubectl, "Succeeded")
    wait_for(lambda: cap_value(server_args(kubectl)) == str(TUNED_MAX_NUM_SEQS),
             20, "the server created on the tuned settings")

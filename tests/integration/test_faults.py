"""Faults, end to end: the real operator process against the EMULATED API server (not a
cluster), which injects them (``POST /emulator/faults``, see
llm_operator_sandbox.emulator): API 500s and 409s, slow and closed watches, the
operator killed (SIGKILL) mid-tuning, mid-rollout and mid-status-write, a tuning pod
evicted or OOM-killed. No kubelet or Job controller runs here: the tests write the Job's
and the Pod's status as they would (as tests/integration/test_tuning_operator.py does).
Each test checks convergence: no duplicate Job, no orphan, no user value lost. The table
of faults is in docs/production/faults.md.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from llm_operator.api.timestamps import rfc3339
from llm_operator.controller.resync import RESYNC_INTERVAL_SECONDS
from tests.integration.conftest import NAMESPACE
from tests.integration.test_tuning_operator import (
    MANIFEST,
    NAME,
    apply,
    condition,
    events,
    jobs,
    server_args,
    tuning,
    wait_job,
    wait_tuning,
)
from tests.support.emulator import EmulatorProcess, Kubectl, OperatorProcess, wait_for


def inject(api: EmulatorProcess, **spec: Any) -> None:
    req = urllib.request.Request(api.url + "/emulator/faults", method="POST",
                                 data=json.dumps(spec).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).close()


def injected(api: EmulatorProcess) -> dict[str, Any]:
    with urllib.request.urlopen(api.url + "/emulator/faults", timeout=10) as resp:
        return dict(json.loads(resp.read()))


def kill(operator: OperatorProcess) -> None:
    """SIGKILL: no cleanup handler, no graceful stop; whatever was in flight is cut."""
    assert operator.proc is not None
    operator.proc.send_signal(signal.SIGKILL)
    operator.proc.wait(10)


def restart(operator: OperatorProcess) -> None:
    operator.start()
    operator.wait_log("Initial authentication has finished", timeout=60)


def manifest(**spec: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(MANIFEST))
    out["spec"].update(spec)
    return out


# A request the test kills the operator during hangs this long, then fails (500): the
# kill must land while it hangs. 3 s was too short on 4 test workers sharing 2 cores,
# where the test can notice the request seconds late and the operator has had its 500
# and retried by then. Well under the operator's 30 s API timeout.
HANG_S = 10.0


USER = {"pod": {"labels": {"team": "search"}, "annotations": {"owner": "ana"},
                "env": [{"name": "USER_VALUE", "value": "kept"}]},
        "scheduling": {"nodeSelector": {"pool": "gpu-a"}}}


def converged(kubectl: Kubectl, max_num_seqs: int | None = None) -> dict[str, Any] | None:
    """The service when its status is current and its Deployment carries every user
    value (None otherwise)."""
    svc = kubectl.get("llms", NAME, NAMESPACE)
    dep = kubectl.get("deployment", NAME, NAMESPACE)
    if not svc or not dep:
        return None
    status = svc.get("status") or {}
    if status.get("observedGeneration") != svc["metadata"]["generation"]:
        return None
    conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
    if conds.get("SpecValid") != "True" or conds.get("ChildrenApplied") != "True":
        return None
    template = dep["spec"]["template"]
    args = template["spec"]["containers"][0]["args"]
    env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0].get("env", [])}
    ok = (template["metadata"]["labels"].get("team") == "search"
          and template["metadata"].get("annotations", {}).get("owner") == "ana"
          and env.get("USER_VALUE") == "kept"
          and template["spec"].get("nodeSelector", {}).get("pool") == "gpu-a"
          and (max_num_seqs is None
               or args[args.index("--max-num-seqs") + 1] == str(max_num_seqs)))
    return svc if ok else None


def no_orphans(kubectl: Kubectl) -> None:
    svc = kubectl.get("llms", NAME, NAMESPACE)
    uid = svc["metadata"]["uid"] if svc else None
    for kind in ("deployments", "services", "jobs"):
        for obj in (kubectl.get(kind, namespace=NAMESPACE) or {}).get("items", []):
            refs = obj["metadata"].get("ownerReferences") or []
            assert [r["uid"] for r in refs] == [uid], f"{kind} {obj['metadata']['name']}"


# --------------------------------------------------------------------------- API faults
def test_api_500s_409s_and_slow_and_closed_watches_converge(
    api: EmulatorProcess, kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    inject(api, method="PATCH", plural="deployments", code=500, times=2)  # the apply
    inject(api, method="PATCH", plural="llmservices", subresource="status", code=500, times=1)
    inject(api, method="PATCH", plural="llmservices", subresource="status", code=409, times=2)
    inject(api, method="POST", plural="jobs", code=500, times=1)
    inject(api, method="WATCH", plural="llmservices", close=True, times=1)
    inject(api, method="WATCH", plural="deployments", delay=2.0, times=1)
    t0 = time.monotonic()
    apply(kubectl, tmp_path, manifest(**USER))
    svc = wait_for(lambda: converged(kubectl), 45, "convergence under API faults")
    assert time.monotonic() - t0 < 40  # retried within seconds, not kopf's 60 s backoff
    ready = {c["type"]: c["status"] for c in svc["status"]["conditions"]}
    assert ready["SpecValid"] == "True" and ready["ChildrenApplied"] == "True"
    wait_for(lambda: len(jobs(kubectl)) == 1 and tuning(kubectl).get("jobUid"), 30,
             "the tuning Job after a failed create")
    assert injected(api)["faults"] == []  # every fault fired
    time.sleep(2)
    assert len(jobs(kubectl)) == 1 and operator.log().count("Created Job") == 1
    no_orphans(kubectl)


def test_a_retry_kopf_could_not_record_is_resynced_without_a_finalizer(
    api: EmulatorProcess, kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    """Both handlers fail on their status write, then kopf's own write of their retries
    is refused (409): kopf waits for an event that never comes (nothing else writes the
    service). The resync loop finds it stalled and touches it; kopf runs the retries."""
    inject(api, method="PATCH", plural="llmservices", subresource="status", code=500, times=2)
    inject(api, method="PATCH", plural="llmservices", code=409, times=1)  # kopf's progress
    apply(kubectl, tmp_path, manifest(**USER))
    wait_for(lambda: not injected(api)["faults"], 20, "the faults to fire")
    time.sleep(3)
    assert not (kubectl.get("llms", NAME, NAMESPACE) or {}).get("status"), "not stalled"
    svc = wait_for(lambda: converged(kubectl), 75, "convergence after the resync")
    assert f"Resync: kopf's handling of {NAMESPACE}/{NAME} stalled" in operator.log()
    assert not svc["metadata"].get("finalizers")  # the resync is no kopf timer
    wait_for(lambda: len(jobs(kubectl)) == 1 and tuning(kubectl).get("jobUid"), 30,
             "the tuning step's retry")
    assert operator.log().count("Created Job") == 1
    no_orphans(kubectl)
    # Steady state: two more rounds of the loop and it acts on nothing.
    resyncs = operator.log().count("Resync")
    time.sleep(2 * RESYNC_INTERVAL_SECONDS + 5)
    assert operator.log().count("Resync") == resyncs


# --------------------------------------------------------------------------- kills
def test_killed_mid_tuning_a_restart_adopts_the_job(
    api: EmulatorProcess, kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    apply(kubectl, tmp_path, manifest(**USER))
    first = wait_job(kubectl)
    wait_tuning(kubectl, "Running")
    kill(operator)
    restart(operator)
    operator.wait_log("Resuming is processed", timeout=30)
    time.sleep(2)
    assert [j["metadata"]["uid"] for j in jobs(kubectl)] == [first["metadata"]["uid"]]
    assert "Created Job" not in operator.log()
    assert tuning(kubectl)["jobUid"] == first["metadata"]["uid"]
    assert converged(kubectl) is not None
    no_orphans(kubectl)


def test_killed_mid_rollout_and_mid_status_write_a_restart_converges(
    api: EmulatorProcess, kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    apply(kubectl, tmp_path, manifest(**USER, engine={"maxNumSeqs": 40}))
    wait_for(lambda: converged(kubectl, 40), 30, "the first rollout")
    wait_job(kubectl)
    # Mid-rollout: the Deployment's apply hangs, the operator dies while it waits.
    inject(api, method="PATCH", plural="deployments", delay=HANG_S, code=500, times=1)
    kubectl.run("patch", "llms", NAME, "-n", NAMESPACE, "--type", "merge", "-p",
                json.dumps({"spec": {"engine": {"maxNumSeqs": 56}}}))
    wait_for(lambda: not injected(api)["faults"], 20, "the rollout's apply to start")
    kill(operator)
    assert "--max-num-seqs" in server_args(kubectl)
    assert server_args(kubectl)[server_args(kubectl).index("--max-num-seqs") + 1] == "40"
    # Mid-status-write: the next operator's status write hangs, and it dies too.
    inject(api, method="PATCH", plural="llmservices", subresource="status", delay=HANG_S,
           code=500, times=1)
    restart(operator)
    wait_for(lambda: not injected(api)["faults"], 30, "the status write to start")
    kill(operator)
    restart(operator)
    wait_for(lambda: converged(kubectl, 56), 45, "convergence after two kills")
    wait_for(lambda: len(jobs(kubectl)) == 1, 30, "one tuning Job for the new fingerprint")
    assert len((kubectl.get("deployments", namespace=NAMESPACE) or {})["items"]) == 1
    no_orphans(kubectl)


def test_killed_between_the_new_job_and_the_superseded_ones_delete_a_restart_deletes_it(
    api: EmulatorProcess, kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    """A rollout while the service tunes: the operator creates the new fingerprint's Job,
    then deletes the old one. Killed between the two, the next operator finds the new Job
    running and adopts it; the superseded Job must not stay and hold its GPUs. (The likely
    cause of CI's failure of the test above on 2026-12-02, whose kill can land there
    when 4 test workers share 2 cores; reproduced here, not traced in that run.)"""
    apply(kubectl, tmp_path, manifest(**USER, engine={"maxNumSeqs": 40}))
    wait_for(lambda: converged(kubectl, 40), 30, "the first rollout")
    first = wait_job(kubectl)
    inject(api, method="DELETE", plural="jobs", delay=HANG_S, code=500, times=1)
    kubectl.run("patch", "llms", NAME, "-n", NAMESPACE, "--type", "merge", "-p",
                json.dumps({"spec": {"engine": {"maxNumSeqs": 56}}}))
    wait_for(lambda: not injected(api)["faults"], 30, "the superseded Job's delete to start")
    kill(operator)
    assert len(jobs(kubectl)) == 2, "the kill was meant to land between create and delete"
    restart(operator)
    wait_for(lambda: converged(kubectl, 56), 45, "convergence after the kill")

    def one_job() -> dict[str, Any] | None:
        found = jobs(kubectl)
        return found[0] if len(found) == 1 else None

    job = wait_for(one_job, 30, "the superseded Job deleted")
    assert job["metadata"]["uid"] != first["metadata"]["uid"]
    assert wait_for(lambda: tuning(kubectl).get("jobUid") == job["metadata"]["uid"],
                    30, "status.tuning following the new Job")
    no_orphans(kubectl)


# --------------------------------------------------------------------------- tuning pods
def fail_job(kubectl: Kubectl, job: dict[str, Any], pod_status: dict[str, Any],
             suffix: str) -> None:
    """Play the kubelet (the pod's end) and the Job controller (BackoffLimitExceeded)."""
    name = job["metadata"]["name"]
    template = job["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{name}-{suffix}", "namespace": NAMESPACE,
                        "labels": {**template["metadata"]["labels"], "job-name": name},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                             "name": name, "uid": job["metadata"]["uid"],
                                             "controller": True}]},
           "spec": template["spec"]}
    kubectl.run("apply", "--validate=false", "-f", "-", stdin=yaml.safe_dump(pod))
    kubectl.run("patch", "pod", pod["metadata"]["name"], "-n", NAMESPACE, "--subresource",
                "status", "--type", "merge", "-p", json.dumps({"status": pod_status}))
    now = rfc3339(time.time())
    kubectl.run("patch", "job", name, "-n", NAMESPACE, "--subresource", "status", "--type",
                "merge", "-p", json.dumps({"status": {"failed": 1, "startTime": now,
                                                      "conditions": [{
                    "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": now}]}}))


EVICTED = {"phase": "Failed", "reason": "Evicted",
           "message": "The node was low on resource: memory. Threshold quantity: 100Mi."}
OOM_KILLED = {"phase": "Failed", "containerStatuses": [
    {"name": "tuner", "ready": False, "restartCount": 0, "image": "vllm", "imageID": "",
     "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}


def test_a_tuning_pod_evicted_then_oom_killed_is_said_and_retried_bounded(
    api: EmulatorProcess, kubectl: Kubectl, operator: OperatorProcess, tmp_path: Path
) -> None:
    apply(kubectl, tmp_path, manifest(**USER))  # maxRetries 1: two attempts in all
    first = wait_job(kubectl)
    before = server_args(kubectl)
    fail_job(kubectl, first, EVICTED, "ev1ct")
    second = wait_job(kubectl, other_than=first["metadata"]["uid"])
    retrying = wait_tuning(kubectl, "Running")
    assert retrying["failures"] == 1
    assert "Evicted: The node was low on resource: memory" in retrying["lastFailure"]["reason"]
    fail_job(kubectl, second, OOM_KILLED, "00mk1")
    failed = wait_tuning(kubectl, "Failed")
    assert "OOMKilled (exit code 137)" in failed["reason"]
    assert "spec.resources.memory" in failed["reason"]
    tuned = condition(kubectl, "Tuned")
    assert tuned is not None and tuned["status"] == "False" and "OOMKilled" in tuned["message"]
    warnings = [e for e in events(kubectl) if e["reason"] == "TuningFailed"]
    assert any("Evicted" in e["message"] for e in warnings)
    assert any("OOMKilled" in e["message"] for e in warnings)
    wait_for(lambda: not jobs(kubectl), 10, "the failed Job to be deleted")
    time.sleep(2)  # bounded: no third attempt, and the serving settings are unchanged
    assert jobs(kubectl) == [] and operator.log().count("Created Job") == 2
    assert server_args(kubectl) == before
    no_orphans(kubectl)

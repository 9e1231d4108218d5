"""A LOCAL node agent for the EMULATED API server: it runs the pods the operator renders
as local processes, with the CPU build of vLLM. Never used against a cluster.

It plays the parts a cluster has and the emulator has not (:mod:`.emulator`): the
Deployment and Job controllers and the kubelet, for the operator's own children only
(label ``app.kubernetes.io/managed-by=llm-operator``):

- **Deployments**: pods owned by the Deployment directly (no ReplicaSet object; label
  ``pod-template-hash``), replaced on a template change as the rendered strategy says
  (``maxSurge``/``maxUnavailable``); status ``replicas``, ``updatedReplicas``,
  ``readyReplicas``, ``availableReplicas``, ``observedGeneration`` and the conditions
  ``Available`` and ``Progressing`` written back.
- **Jobs**: one pod per Job (the operator renders ``backoffLimit: 0``); status
  ``active``/``succeeded``/``failed`` and ``Complete``/``Failed`` conditions;
  ``activeDeadlineSeconds`` enforced.
- **the kubelet**: init containers in order, then the containers, each a local process
  (:func:`.local_plan.plan_container` says what is substituted; :data:`SUBSTITUTIONS`
  lists every kind and is printed at start); startup/readiness/liveness ``httpGet``
  probes; a container that exits is restarted (``restartCount``, ``lastState``,
  ``CrashLoopBackOff`` with back-off) or ends the pod (``restartPolicy: Never``), with
  its termination message (or log tail under ``FallbackToLogsOnError``); a container
  that cannot run becomes ``StartError`` (a failed pod for a Job); ConfigMap volumes
  are refreshed with the kubelet's atomic ``..data`` symlink swap; on delete the
  processes get SIGTERM, then SIGKILL (every descendant) after the grace period.

The pods are ``v1`` Pods in the API with ``status.podIP: 127.0.0.1`` and the annotation
:data:`PORTS_ANNOTATION` (JSON: declared port by name and by number -> the local port the
process listens on), which Prometheus discovery reads.

Use::

    with NodeAgent(kubeconfig, "ml", workdir, vllm_python=Path(".venv-vllm/bin/python"),
                   models={"tiny": Path("models/tiny")}):
        ...
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import math
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from kubernetes import client, config, watch

from llm_operator.api.constants import LABEL_MANAGED_BY, MANAGED_BY

from .kubelet_faults import PULL_BACKOFF_SECONDS, pull_error
from .local_plan import (
    DEFAULT_KV_CACHE_BYTES,
    SUBSTITUTIONS,
    CannotRun,
    ProcessPlan,
    Substitution,
    plan_container,
    port_annotation,
    vllm_cli_script,
)
from .processes import stop_all

__all__ = ["NodeAgent", "SUBSTITUTIONS", "Substitution", "PORTS_ANNOTATION",
           "substitutions_table"]

JSON = dict[str, Any]
log = logging.getLogger("llm_operator_sandbox.node_agent")

PORTS_ANNOTATION = "sandbox.llmops.dev/ports"
AGENT_ANNOTATION = "sandbox.llmops.dev/node-agent"  # marks the pods this agent runs
SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
NODE_NAME = "sandbox-node"
TERMINATION_LIMIT = 4096  # bytes of a termination message (the kubelet's)
LOG_TAIL_LINES, LOG_TAIL_BYTES = 80, 2048  # FallbackToLogsOnError
MAX_GRACE_SECONDS = 30.0
CONFIG_RETRY_SECONDS = 5.0  # a container waiting in CreateContainerConfigError tries again
PULL_ERROR_SHOWN_SECONDS = 2.0  # ErrImagePull, then ImagePullBackOff until the next pull
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0  # the kubelet's crash back-off
SYNC_SECONDS = 1.0
MIN_SYNC_GAP_SECONDS = 0.5
DEFAULT_LOCK = "/tmp/llmop-vllm.lock"


def substitutions_table() -> str:
    """:data:`SUBSTITUTIONS` as a Markdown table (docs/production/node-agent.md)."""
    rows = ["| What the pod says | What the local agent does | What a cluster does |",
            "|---|---|---|"]
    rows += [f"| {s.what_the_pod_says} | {s.what_the_agent_does} | {s.what_a_cluster_does} |"
             for s in SUBSTITUTIONS]
    return "\n".join(rows) + "\n"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _suffix(n: int = 5) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet
    return "".join(secrets.choice(alphabet) for _ in range(n))


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def template_hash(template: Mapping[str, Any]) -> str:
    """The pod template's hash (``pod-template-hash``; canonical JSON)."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc), children first."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        kids: list[int] = []
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{p}/task").iterdir():
                with contextlib.suppress(OSError):
                    kids += [int(k) for k in (task / "children").read_text().split()]
        out += kids
        todo += kids
    return out


def _start_time(pid: int) -> str | None:
    """A process's start time (/proc/PID/stat field 22): tells it from a later process
    that reuses its pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def snapshot(pids: list[int]) -> dict[int, str]:
    """``pids`` with their start times (the ones still running)."""
    return {p: t for p in pids if (t := _start_time(p)) is not None}


def kill_known(family: Mapping[int, str]) -> None:
    """SIGKILL the processes of a :func:`snapshot` that still are those processes."""
    for pid, started in family.items():
        if _start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def kill_tree(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM ``proc`` (its process group), wait up to ``grace`` seconds, then SIGKILL it
    and every descendant it had (the tuner's vLLM servers run in sessions of their own,
    so a process group is not enough). Nothing to do once it has exited."""
    if proc.poll() is not None:
        return
    family = snapshot(descendants(proc.pid))
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(grace)
    if proc.poll() is None:
        family |= snapshot(descendants(proc.pid))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    kill_known(family)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


def int_or_percent(value: Any, total: int, round_up: bool) -> int:
    """A rolling-update bound: an int, or a percentage of ``total`` (maxSurge rounds up,
    maxUnavailable down, as the Deployment controller does)."""
    if isinstance(value, str) and value.endswith("%"):
        frac = total * float(value[:-1]) / 100
        return math.ceil(frac) if round_up else math.floor(frac)
    return int(value)


def log_tail(path: Path) -> str:
    """The last :data:`LOG_TAIL_LINES` lines (at most :data:`LOG_TAIL_BYTES`) of a log."""
    if not path.exists():
        return ""
    data = path.read_bytes()[-64_000:].decode(errors="replace")
    text = "\n".join(data.rstrip("\n").splitlines()[-LOG_TAIL_LINES:])
    return text.encode()[-LOG_TAIL_BYTES:].decode(errors="replace")


# ------------------------------------------------------------------------------ API
class Api:
    """The few calls the agent makes, through the kubernetes client, as plain JSON."""

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self.api_client = config.new_client_from_config(str(kubeconfig))
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.ns = namespace

    @staticmethod
    def _json(resp: Any) -> JSON:
        return dict(json.loads(resp.data))

    def list(self, kind: str, selector: str | None = None) -> list[JSON]:
        fn = {"deployments": self.apps.list_namespaced_deployment,
              "jobs": self.batch.list_namespaced_job,
              "pods": self.core.list_namespaced_pod,
              "configmaps": self.core.list_namespaced_config_map}[kind]
        kwargs: dict[str, Any] = {"_preload_content": False}
        if selector:
            kwargs["label_selector"] = selector
        return list(self._json(fn(self.ns, **kwargs)).get("items") or [])

    def create_pod(self, pod: JSON) -> JSON:
        resp = self.core.create_namespaced_pod(self.ns, pod,  # type: ignore[arg-type]
                                               _preload_content=False)
        return self._json(resp)

    def delete_pod(self, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, self.ns, _preload_content=False)
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def patch_status(self, kind: str, name: str, status: JSON) -> None:
        fn = {"pods": self.core.patch_namespaced_pod_status,
              "deployments": self.apps.patch_namespaced_deployment_status,
              "jobs": self.batch.patch_namespaced_job_status}[kind]
        try:
            fn(name, self.ns, {"status": status}, _preload_content=False,
               _content_type="application/merge-patch+json")
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def lookup(self, kind: str, name: str, key: str) -> str | None:
        """A key of a Secret or ConfigMap (None when absent)."""
        import base64

        try:
            if kind == "Secret":
                obj = self._json(self.core.read_namespaced_secret(name, self.ns,
                                                                  _preload_content=False))
                raw = (obj.get("data") or {}).get(key)
                if raw is not None:
                    return base64.b64decode(raw).decode()
                return (obj.get("stringData") or {}).get(key)
            obj = self._json(self.core.read_namespaced_config_map(name, self.ns,
                                                                  _preload_content=False))
            value = (obj.get("data") or {}).get(key)
            return None if value is None else str(value)
        except client.ApiException as exc:
            if exc.status == 404:  # the kubelet's words
                raise CannotRun("CreateContainerConfigError",
                                f'{kind.lower()} "{name}" not found') from None
            raise

    def claim(self, name: str) -> JSON | None:
        """A PersistentVolumeClaim of the namespace, or None."""
        try:
            return self._json(self.core.read_namespaced_persistent_volume_claim(
                name, self.ns, _preload_content=False))
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def event(self, pod: JSON, type_: str, reason: str, message: str, component: str) -> None:
        """An Event on ``pod`` as the kubelet (or a controller) posts it."""
        meta = pod["metadata"]
        now = _now()
        body = {"metadata": {"generateName": f"{meta['name']}."},
                "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                                   "namespace": self.ns, "uid": meta.get("uid")},
                "type": type_, "reason": reason, "message": message,
                "source": {"component": component,
                           "host": (pod.get("spec") or {}).get("nodeName")},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        try:
            self.core.create_namespaced_event(self.ns, body,  # type: ignore[arg-type]
                                              _preload_content=False)
        except client.ApiException as exc:
            log.warning("event %s on pod %s: %s", reason, meta["name"], exc)


# --------------------------------------------------------------------- the kubelet
@dataclass
class ContainerRun:
    """One container of a pod as the kubelet tracks it."""

    spec: JSON
    init: bool
    plan: ProcessPlan | None = None
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: str | None = None
    started_mono: float = 0.0
    started: bool = False  # the startup probe passed
    ready: bool = False
    state: JSON = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last_state: JSON = field(default_factory=dict)
    backoff_until: float = 0.0
    pull_failures: int = 0  # failed image pulls (kubelet_faults.pull_error)
    pull_failed_at: float = 0.0
    done: bool = False  # terminated for good (init succeeded, or restartPolicy Never)
    probe_fail_since: float | None = None
    ready_failures: int = 0
    next_probe: float = 0.0
    family: dict[int, str] = field(default_factory=dict)  # descendants seen while it ran

    def status(self) -> JSON:
        return {"name": self.spec["name"], "image": str(self.spec.get("image") or ""),
                "imageID": "", "ready": self.ready, "started": self.started,
                "restartCount": self.restarts, "state": self.state,
                "lastState": self.last_state}


class PodWorker:
    """The kubelet for one pod: a thread that runs its containers and writes its status."""

    def __init__(self, agent: NodeAgent, pod: JSON) -> None:
        self.agent = agent
        self.pod = pod
        self.name = pod["metadata"]["name"]
        self.dir = agent.workdir / "pods" / self.name
        spec = pod["spec"]
        self.restart_policy = spec.get("restartPolicy", "Always")
        self.grace = min(float(spec.get("terminationGracePeriodSeconds", 30)), MAX_GRACE_SECONDS)
        self.ports: dict[int, int] = {}
        annotated = json.loads((pod["metadata"].get("annotations") or {}).get(
            PORTS_ANNOTATION, "{}"))
        for c in spec.get("containers") or []:
            for p in c.get("ports") or []:
                self.ports[int(p["containerPort"])] = int(annotated[str(p["containerPort"])])
        self.inits = [ContainerRun(copy.deepcopy(c), True)
                      for c in spec.get("initContainers") or []]
        self.mains = [ContainerRun(copy.deepcopy(c), False) for c in spec.get("containers") or []]
        for c in self.mains:
            c.state = {"waiting": {"reason": "PodInitializing" if self.inits
                                   else "ContainerCreating"}}
        self.phase = "Pending"
        self.initialized = not self.inits
        self.start_time = _now()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.name}", daemon=True)
        self.api = Api(agent.kubeconfig, pod["metadata"].get("namespace") or agent.namespace)
        self._written: JSON | None = None
        self._cm_versions: dict[str, str] = {}
        self._reason: str | None = None
        self._posted: set[tuple[str, str]] = set()  # Events posted: once each
        self._attached = False  # its ReadWriteOnce claims are attached to its node
        self.key = f"{self.api.ns}/{self.name}"
        self.lock = threading.Lock()

    # ---------------------------------------------------------------- life cycle
    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop every process of the pod (SIGTERM, grace, SIGKILL) and the thread."""
        self.stop_event.set()
        self.thread.join(timeout=self.grace + 30)
        self._kill_all()
        attachments = getattr(self.agent, "attachments", None)
        if attachments is not None:
            attachments.detach(self.key)
        import shutil

        for c in [*self.inits, *self.mains]:  # the containers' /tmp (outside the workdir)
            if c.plan is not None and c.plan.tmp_dir.name.startswith("llmop-"):
                shutil.rmtree(c.plan.tmp_dir, ignore_errors=True)

    def _kill_all(self) -> None:
        with self.lock:
            procs = [c.proc for c in [*self.inits, *self.mains] if c.proc is not None]
        threads = [threading.Thread(target=kill_tree, args=(p, self.grace)) for p in procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _run(self) -> None:
        try:
            self._volumes()
            self._write()
            while not self.stop_event.is_set():
                self._step()
                self._write()
                if self.phase in ("Succeeded", "Failed"):
                    break
                self.stop_event.wait(0.5)
        except Exception as exc:  # the pod fails with the reason; never a hung test
            log.exception("pod %s: the agent failed", self.name)
            self.phase = "Failed"
            self._reason = f"the sandbox agent failed: {exc}"
            with contextlib.suppress(Exception):
                self._write()

    # ---------------------------------------------------------------- volumes
    def _volumes(self) -> None:
        for vol in self.pod["spec"].get("volumes") or []:
            (self.dir / "volumes" / vol["name"]).mkdir(parents=True, exist_ok=True)
        self.refresh_config_maps(None)

    def refresh_config_maps(self, config_maps: Mapping[str, JSON] | None) -> None:
        """Write each ConfigMap volume (the kubelet's layout: ``..data`` -> a timestamped
        folder, one symlink per key), swapping ``..data`` atomically when the data
        changed. ``config_maps``: name -> object (None: read them from the API)."""
        for vol in self.pod["spec"].get("volumes") or []:
            ref = vol.get("configMap")
            if ref is None:
                continue
            if config_maps is None:
                found = [c for c in self.api.list("configmaps")
                         if c["metadata"]["name"] == ref["name"]]
                cm = found[0] if found else None
            else:
                cm = config_maps.get(ref["name"])
            if cm is None:
                continue
            data = {str(k): str(v) for k, v in (cm.get("data") or {}).items()}
            items = ref.get("items")
            files = ({i["path"]: data[i["key"]] for i in items if i["key"] in data}
                     if items else data)
            digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
            if self._cm_versions.get(vol["name"]) == digest:
                continue
            self._swap(self.dir / "volumes" / vol["name"], files)
            self._cm_versions[vol["name"]] = digest

    @staticmethod
    def _swap(root: Path, files: Mapping[str, str]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        stamp = root / f"..{datetime.now(UTC).strftime('%Y_%m_%d_%H_%M_%S.%f')}"
        stamp.mkdir()
        for rel, text in files.items():
            (stamp / rel).parent.mkdir(parents=True, exist_ok=True)
            (stamp / rel).write_text(text)
        data = root / "..data"
        old = data.resolve() if data.is_symlink() else None
        tmp = root / "..data_tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(stamp.name)
        os.replace(tmp, data)  # the atomic swap
        for rel in files:
            top = rel.split("/", 1)[0]
            link = root / top
            if not link.is_symlink():
                link.symlink_to(Path("..data") / top)
        if old is not None and old != stamp and old.exists():
            import shutil

            shutil.rmtree(old, ignore_errors=True)

    def _has_config_maps(self) -> bool:
        want = [v["name"] for v in self.pod["spec"].get("volumes") or [] if "configMap" in v]
        return all(w in self._cm_versions for w in want)

    # ---------------------------------------------------------------- containers
    def _plan(self, run: ContainerRun) -> ProcessPlan:
        agent = self.agent
        return plan_container(
            self.pod, run.spec, pod_dir=self.dir, vllm_python=agent.vllm_python,
            operator_python=Path(sys.executable), operator_pythonpath=agent.operator_pythonpath,
            models=agent.models, ports=self.ports, lookup=self.api.lookup,
            kv_cache_bytes=agent.kv_cache_bytes, vllm_lock=agent.vllm_lock,
            path_env=os.environ.get("PATH", ""), vllm_cli_dir=agent.vllm_cli_dir)

    def _post(self, type_: str, reason: str, message: str,
              component: str = "kubelet") -> None:
        if (reason, message) not in self._posted:
            self._posted.add((reason, message))
            self.api.event(self.pod, type_, reason, message, component)

    def _multi_attach(self) -> bool:
        """A ReadWriteOnce claim of the pod is attached to another node: the pod stays in
        ContainerCreating with the attach-detach controller's Event (kubelet_faults)."""
        attachments = getattr(self.agent, "attachments", None)
        if attachments is None:
            return False
        for vol in self.pod["spec"].get("volumes") or []:
            name = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            claim = self.api.claim(name) if name else None
            modes = set(((claim or {}).get("spec") or {}).get("accessModes") or [])
            if not claim or modes != {"ReadWriteOnce"}:
                continue
            holders = attachments.attach(self.api.ns, name, self.pod["spec"]["nodeName"],
                                         self.key)
            if holders:
                volume = claim["spec"].get("volumeName") or name
                pods = ", ".join(h.split("/", 1)[1] for h in holders)
                self._post("Warning", "FailedAttachVolume",
                           f'Multi-Attach error for volume "{volume}" Volume is already used '
                           f"by pod(s) {pods}", component="attachdetach-controller")
                return True
        return False

    def _pull(self, run: ContainerRun) -> bool:
        """Pull the container's image (kubelet_faults.pull_error): False while it fails
        (waiting ErrImagePull, then ImagePullBackOff until the next try)."""
        image = str(run.spec.get("image") or "")
        error = pull_error(image)
        if error is None:
            return True
        run.state = {"waiting": {"reason": "ErrImagePull", "message": error}}
        delay = PULL_BACKOFF_SECONDS[min(run.pull_failures, len(PULL_BACKOFF_SECONDS) - 1)]
        run.pull_failures += 1
        run.pull_failed_at = time.monotonic()
        run.backoff_until = run.pull_failed_at + delay
        self._post("Warning", "Failed", f'Failed to pull image "{image}": {error}')
        self._post("Warning", "Failed", "Error: ErrImagePull")
        return False

    def _backing_off(self, run: ContainerRun) -> None:
        """After a failed pull the kubelet says ImagePullBackOff until its next try."""
        waiting = run.state.get("waiting") or {}
        if (waiting.get("reason") == "ErrImagePull"
                and time.monotonic() - run.pull_failed_at >= PULL_ERROR_SHOWN_SECONDS):
            image = str(run.spec.get("image") or "")
            run.state = {"waiting": {"reason": "ImagePullBackOff",
                                     "message": f'Back-off pulling image "{image}"'}}
            self._post("Normal", "BackOff", f'Back-off pulling image "{image}"')
            self._post("Warning", "Failed", "Error: ImagePullBackOff")

    def _launch(self, run: ContainerRun) -> None:
        now = _now()
        if not self._pull(run):
            return
        try:
            plan = self._plan(run)
        except CannotRun as exc:
            if exc.reason == "CreateContainerConfigError":  # waits, retried; no restart
                run.state = {"waiting": {"reason": exc.reason, "message": exc.message}}
                run.backoff_until = time.monotonic() + CONFIG_RETRY_SECONDS
                self._post("Warning", "Failed", f"Error: {exc.message}")
                return
            self._terminated(run, 128, exc.reason, exc.message, now)
            return
        run.plan = plan
        if plan.skip:
            for note in plan.notes:
                self.agent.say(f"pod {self.name}: {note}")
            self._terminated(run, 0, "Completed", "skipped by the sandbox node agent", now)
            return
        for d in [plan.cwd, plan.log_path.parent, Path(plan.env.get("HOME", plan.cwd)),
                  plan.tmp_dir, *plan.volume_dirs.values()]:
            d.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            plan.termination_path.unlink()
        for note in plan.notes:
            self.agent.say(f"pod {self.name}, container {plan.container}: {note}")
        self.agent.say(f"pod {self.name}: starting {plan.container}: "
                       f"{' '.join(plan.argv)[:300]}")
        logf = plan.log_path.open("ab")
        try:
            with self.lock:
                if self.stop_event.is_set():
                    return
                run.proc = subprocess.Popen(plan.argv, env=plan.env, cwd=plan.cwd,
                                            stdout=logf, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            self._terminated(run, 128, "StartError", f"{exc.strerror or exc}: {plan.argv[0]}",
                             now)
            return
        finally:
            logf.close()
        run.started_at = now
        run.started_mono = time.monotonic()
        run.started = run.ready = False
        run.probe_fail_since = None
        run.ready_failures = 0
        run.state = {"running": {"startedAt": now}}

    def _message(self, run: ContainerRun, exit_code: int) -> str:
        plan = run.plan
        if plan is None:
            return ""
        msg = ""
        if plan.termination_path.exists():
            msg = plan.termination_path.read_bytes()[:TERMINATION_LIMIT].decode(
                errors="replace")
        policy = run.spec.get("terminationMessagePolicy", "File")
        if not msg and exit_code != 0 and policy == "FallbackToLogsOnError":
            msg = log_tail(plan.log_path)
        return msg

    def _terminated(self, run: ContainerRun, code: int, reason: str, message: str,
                    started: str | None) -> None:
        term: JSON = {"exitCode": code, "reason": reason, "startedAt": started or _now(),
                      "finishedAt": _now(), "containerID": ""}
        if message:
            term["message"] = message
        run.proc = None
        run.started = run.ready = False
        never = self.restart_policy == "Never" or (
            self.restart_policy == "OnFailure" and code == 0) or (run.init and code == 0)
        if never:
            run.state = {"terminated": term}
            run.done = True
            return
        # Restarted: the first time at once, then after a doubling back-off.
        run.last_state = {"terminated": term}
        run.restarts += 1
        delay = 0.0 if run.restarts == 1 else min(BACKOFF_MAX,
                                                  BACKOFF_START * 2 ** (run.restarts - 2))
        run.backoff_until = time.monotonic() + delay
        reason_w = "RunContainerError" if reason == "StartError" else "CrashLoopBackOff"
        run.state = {"waiting": {"reason": reason_w if delay else "ContainerCreating",
                                 "message": f"back-off {delay:.0f}s restarting failed "
                                            f"container={run.spec['name']} pod={self.name}"}}
        if delay:
            self.agent.say(f"pod {self.name}: container {run.spec['name']} exited "
                           f"({code}, {reason}); {reason_w}, restart in {delay:.0f} s")

    def _poll(self, run: ContainerRun) -> None:
        """A running container: did it exit? Probes."""
        assert run.proc is not None
        code = run.proc.poll()
        if code is None:
            run.family |= snapshot(descendants(run.proc.pid))
        else:
            # The container is gone: so are its processes (the runtime removes its cgroup).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.proc.pid, signal.SIGKILL)
            kill_known(run.family)
            run.family = {}
            if code < 0:
                code = 128 - code  # killed by a signal: 128 + signal, as runtimes report
            reason = "Completed" if code == 0 else "Error"
            self.agent.say(f"pod {self.name}: container {run.spec['name']} exited with {code}")
            self._terminated(run, code, reason, self._message(run, code), run.started_at)
            return
        if not run.init:
            self._probe(run)

    def _probe(self, run: ContainerRun) -> None:
        now = time.monotonic()
        if now < run.next_probe:
            return
        spec = run.spec
        startup, readiness, liveness = (spec.get("startupProbe"), spec.get("readinessProbe"),
                                        spec.get("livenessProbe"))
        if not run.started:
            run.next_probe = now + 1.0
            if startup is None or self._http(startup):
                run.started = True
                run.probe_fail_since = None
            else:
                budget = (float(startup.get("periodSeconds", 10))
                          * int(startup.get("failureThreshold", 3))
                          + float(startup.get("initialDelaySeconds", 0)))
                if now - run.started_mono > budget:
                    self._restart_unhealthy(run, "startup", budget)
                return
        if readiness is None:
            run.ready = True
        else:
            ok = self._http(readiness)
            run.ready_failures = 0 if ok else run.ready_failures + 1
            if ok:
                run.ready = True
            elif run.ready_failures >= int(readiness.get("failureThreshold", 3)):
                run.ready = False
        if liveness is not None:
            if self._http(liveness):
                run.probe_fail_since = None
            else:
                run.probe_fail_since = run.probe_fail_since or now
                budget = (float(liveness.get("periodSeconds", 10))
                          * int(liveness.get("failureThreshold", 3)))
                if now - run.probe_fail_since > budget:
                    self._restart_unhealthy(run, "liveness", budget)
                    return
        period = min(float((readiness or {}).get("periodSeconds", 10)), 2.0)
        run.next_probe = now + period

    def _restart_unhealthy(self, run: ContainerRun, which: str, budget: float) -> None:
        self.agent.say(f"pod {self.name}: container {run.spec['name']} failed its {which} "
                       f"probe for {budget:.0f} s; killing it (the kubelet restarts it)")
        assert run.proc is not None
        kill_tree(run.proc, self.grace)
        self._terminated(run, 137, "Error", f"{which} probe failed for {budget:.0f} s",
                         run.started_at)

    def _http(self, probe: Mapping[str, Any]) -> bool:
        get = probe.get("httpGet")
        if get is None:
            return True  # exec/tcp probes are not emulated: taken as passing
        port = get.get("port")
        local: int | None = None
        if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
            local = self.ports.get(int(port))
        else:
            for c in self.pod["spec"].get("containers") or []:
                for p in c.get("ports") or []:
                    if p.get("name") == port:
                        local = self.ports.get(int(p["containerPort"]))
        if local is None:
            return False
        url = f"http://127.0.0.1:{local}{get.get('path', '/')}"
        try:
            with urllib.request.urlopen(url, timeout=float(probe.get("timeoutSeconds", 1))) as r:
                return 200 <= int(r.status) < 400
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _step(self) -> None:
        if not self._has_config_maps():
            self.refresh_config_maps(None)
            for c in [*self.inits, *self.mains]:
                c.state = {"waiting": {"reason": "ContainerCreating",
                                       "message": "waiting for the ConfigMap volume"}}
            return
        if not self._attached:
            if self._multi_attach():
                for c in [*self.inits, *self.mains]:
                    c.state = {"waiting": {"reason": "ContainerCreating"}}
                return
            self._attached = True
        if not self.initialized:
            for run in self.inits:
                if not run.done:
                    if run.proc is None:
                        if time.monotonic() >= run.backoff_until:
                            self._launch(run)
                        else:
                            self._backing_off(run)
                    else:
                        self._poll(run)
                if not run.done:
                    return  # running, or waiting to be restarted
                if run.state["terminated"]["exitCode"] != 0:
                    self.phase = "Failed"  # restartPolicy Never: the pod fails
                    return
            self.initialized = True
            for c in self.mains:
                c.state = {"waiting": {"reason": "ContainerCreating"}}
        for run in self.mains:
            if run.done:
                continue
            if run.proc is None:
                if time.monotonic() >= run.backoff_until:
                    self._launch(run)
                else:
                    self._backing_off(run)
            else:
                self._poll(run)
        if all(c.done for c in self.mains):
            codes = [c.state["terminated"]["exitCode"] for c in self.mains]
            self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        elif any("running" in c.state or c.restarts for c in self.mains):
            self.phase = "Running"

    # ---------------------------------------------------------------- status
    def status(self) -> JSON:
        now = _now()
        ready = self.phase == "Running" and all(c.ready for c in self.mains)
        cready = all(c.ready for c in self.mains)

        def cond(ctype: str, ok: bool) -> JSON:
            return {"type": ctype, "status": "True" if ok else "False",
                    "lastTransitionTime": now}
        st: JSON = {
            "phase": self.phase,
            "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}], "hostIP": "127.0.0.1",
            "startTime": self.start_time,
            "conditions": [cond("PodScheduled", True), cond("Initialized", self.initialized),
                           cond("ContainersReady", cready), cond("Ready", ready)],
            "containerStatuses": [c.status() for c in self.mains],
        }
        if self.inits:
            st["initContainerStatuses"] = [c.status() for c in self.inits]
        if self._reason:
            st["message"] = self._reason
        return st

    def _write(self) -> None:
        st = self.status()
        key = json.loads(json.dumps(st))
        if self._written is not None:
            old = copy.deepcopy(self._written)
            for c in [*old["conditions"], *key["conditions"]]:
                c.pop("lastTransitionTime", None)
            if old == key:
                return
            # Conditions keep their transition time while their status stays.
            before = {c["type"]: c for c in self._written["conditions"]}
            for c in st["conditions"]:
                prev = before.get(c["type"])
                if prev is not None and prev["status"] == c["status"]:
                    c["lastTransitionTime"] = prev["lastTransitionTime"]
        self.api.patch_status("pods", self.name, st)
        self._written = st
        self.agent.wake()


# ------------------------------------------------------------------------- the agent
class NodeAgent:
    """Runs the operator's Deployments and Jobs in ``namespace`` of the EMULATED API server
    at ``kubeconfig`` as local processes (see the module docstring).

    ``models``: the served model name of a rendered container (``--served-model-name``,
    i.e. ``spec.model.name``) -> a local directory holding a generated model.
    ``kv_cache_bytes``: the CPU KV cache each vLLM server gets (``--kv-cache-memory-bytes``).
    ``out``: where the agent says what it does (default: stderr).
    """

    def __init__(self, kubeconfig: Path, namespace: str, workdir: Path, *, vllm_python: Path,
                 models: Mapping[str, Path], kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES,
                 vllm_lock: str = DEFAULT_LOCK,
                 out: Callable[[str], None] | None = None) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.namespace = namespace
        self.workdir = Path(workdir)
        self.vllm_python = Path(vllm_python)
        self.vllm_cli_dir = self.workdir / "bin"  # `vllm` for shell commands (start())
        self.models = {k: Path(v) for k, v in models.items()}
        self.kv_cache_bytes = kv_cache_bytes
        self.vllm_lock = vllm_lock
        self._out = out
        import llm_operator

        self.operator_pythonpath = str(Path(llm_operator.__file__).resolve().parents[1])
        self.workers: dict[str, PodWorker] = {}
        self._stopping: list[PodWorker] = []  # deleted pods whose processes are stopping
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = False
        self._stopped = False
        self._deploy_status: dict[str, JSON] = {}
        self._job_status: dict[str, JSON] = {}
        self._progress: dict[str, float] = {}
        self.api: Api | None = None

    # ---------------------------------------------------------------- public
    def say(self, text: str) -> None:
        """Print what the agent does (prefixed, one line)."""
        line = f"[node-agent] {text}"
        if self._out is not None:
            self._out(line)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def start(self) -> NodeAgent:
        """Print the substitutions and start the background threads; returns at once."""
        if self._started:
            return self
        self._started = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.vllm_cli_dir.mkdir(exist_ok=True)
        cli = self.vllm_cli_dir / "vllm"
        cli.write_text(vllm_cli_script(self.vllm_python.absolute()))
        cli.chmod(0o755)
        self.api = Api(self.kubeconfig, self.namespace)
        self.say("LOCAL node agent for the EMULATED API server (not a cluster); it "
                 "substitutes:")
        for s in SUBSTITUTIONS:
            self.say(f"  - {s.what_the_pod_says} -> {s.what_the_agent_does}")
        self._threads = [threading.Thread(target=self._loop, name="node-agent", daemon=True)]
        for kind in ("deployments", "jobs", "pods", "configmaps"):
            self._threads.append(threading.Thread(target=self._watch, args=(kind,),
                                                  name=f"node-agent-watch-{kind}", daemon=True))
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Stop every process the agent started and wait for them (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=15)
        workers = [*self.workers.values(), *self._stopping]
        self.workers.clear()
        stop_all(w.stop for w in workers)

    def __enter__(self) -> NodeAgent:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def wake(self) -> None:
        """Sync now (a pod's status changed)."""
        self._wake.set()

    def container_pid(self, pod: str, container: str) -> int | None:
        """The pid of the process that runs ``container`` of ``pod`` now (None if none)."""
        worker = self.workers.get(pod)
        for c in [*worker.inits, *worker.mains] if worker else []:
            if c.spec["name"] == container and c.proc is not None and c.proc.poll() is None:
                return c.proc.pid
        return None

    def pids(self) -> list[int]:
        """The pids of every process the agent runs now (containers and their children)."""
        out: list[int] = []
        for w in [*self.workers.values(), *self._stopping]:
            for c in [*w.inits, *w.mains]:
                if c.proc is not None and c.proc.poll() is None:
                    out += [c.proc.pid, *descendants(c.proc.pid)]
        return out

    # ---------------------------------------------------------------- threads
    def _watch(self, kind: str) -> None:
        api = Api(self.kubeconfig, self.namespace)
        fn = {"deployments": api.apps.list_namespaced_deployment,
              "jobs": api.batch.list_namespaced_job, "pods": api.core.list_namespaced_pod,
              "configmaps": api.core.list_namespaced_config_map}[kind]
        while not self._stop.is_set():
            try:
                for _ in watch.Watch().stream(fn, self.namespace, timeout_seconds=5,
                                              deserialize=False):
                    self._wake.set()
                    if self._stop.is_set():
                        return
            except Exception:  # the loop's own listing carries on; retry the watch
                self._stop.wait(1)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(SYNC_SECONDS)
            # At most two passes a second: watch events come in bursts (and each pass's
            # own writes are events too); a pass sees everything that changed meanwhile.
            self._stop.wait(MIN_SYNC_GAP_SECONDS)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sync()
            except Exception as exc:
                log.warning("node agent sync failed: %s", exc)
                self.say(f"sync failed (retrying): {exc}")

    # ---------------------------------------------------------------- controllers
    def sync(self) -> None:
        """One pass: Deployments and Jobs -> pods; pods -> workers; statuses."""
        assert self.api is not None
        api = self.api
        deployments = api.list("deployments", SELECTOR)
        jobs = api.list("jobs", SELECTOR)
        pods = [p for p in api.list("pods")
                if AGENT_ANNOTATION in (p["metadata"].get("annotations") or {})]
        config_maps = {c["metadata"]["name"]: c for c in api.list("configmaps")}
        owners = {o["metadata"]["uid"]: o for o in [*deployments, *jobs]}
        live: list[JSON] = []
        for pod in pods:
            refs = pod["metadata"].get("ownerReferences") or []
            if refs and not any(r.get("uid") in owners for r in refs):
                self.say(f"pod {pod['metadata']['name']}: its owner is gone; deleting it")
                api.delete_pod(pod["metadata"]["name"])  # the garbage collector would
                continue
            live.append(pod)
        for dep in deployments:
            owned = [p for p in live if self._owned(p, dep)]
            self._sync_deployment(dep, owned)
        for job in jobs:
            owned = [p for p in live if self._owned(p, job)]
            self._sync_job(job, owned)
        # Pods -> workers (the kubelet's part).
        pods = api.list("pods")
        names = {p["metadata"]["name"] for p in pods}
        for name in [n for n in self.workers if n not in names]:
            worker = self.workers.pop(name)
            self.say(f"pod {name} deleted: stopping its processes")
            self._stopping.append(worker)
            threading.Thread(target=worker.stop, daemon=True).start()
        for pod in pods:
            meta = pod["metadata"]
            name = meta["name"]
            if AGENT_ANNOTATION not in (meta.get("annotations") or {}):
                continue
            if meta.get("deletionTimestamp"):
                continue
            if name not in self.workers and (pod.get("status") or {}).get("phase") not in (
                    "Succeeded", "Failed"):
                worker = PodWorker(self, pod)
                self.workers[name] = worker
                worker.start()
            elif name in self.workers:
                self.workers[name].refresh_config_maps(config_maps)

    @staticmethod
    def _owned(pod: JSON, owner: JSON) -> bool:
        return any(r.get("uid") == owner["metadata"]["uid"]
                   for r in pod["metadata"].get("ownerReferences") or [])

    def _new_pod(self, owner: JSON, name: str, labels: Mapping[str, str]) -> JSON:
        template = copy.deepcopy(owner["spec"]["template"])
        meta = template.get("metadata") or {}
        spec = template["spec"]
        spec["nodeName"] = NODE_NAME
        containers = spec.get("containers") or []
        local = {int(p["containerPort"]): free_port()
                 for c in containers for p in c.get("ports") or []}
        annotations = {**(meta.get("annotations") or {}),
                       AGENT_ANNOTATION: "local processes (sandbox, not a cluster)",
                       PORTS_ANNOTATION: json.dumps(port_annotation(containers, local),
                                                    sort_keys=True)}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": self.namespace,
                            "labels": {**(meta.get("labels") or {}), **labels},
                            "annotations": annotations,
                            "ownerReferences": [{
                                "apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                "name": owner["metadata"]["name"],
                                "uid": owner["metadata"]["uid"], "controller": True,
                                "blockOwnerDeletion": True}]},
               "spec": spec,
               "status": {"phase": "Pending", "conditions": [
                   {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}]}}
        created = self.api.create_pod(pod)  # type: ignore[union-attr]
        self.say(f"{owner['kind']} {owner['metadata']['name']}: created pod {name} "
                 f"(ports {annotations[PORTS_ANNOTATION]})")
        return created

    def _sync_deployment(self, dep: JSON, pods: list[JSON]) -> None:
        spec = dep["spec"]
        name = dep["metadata"]["name"]
        want = int(spec.get("replicas", 1))
        phash = template_hash(spec["template"])
        strategy = spec.get("strategy") or {}
        ru = strategy.get("rollingUpdate") or {}
        if strategy.get("type") == "Recreate":
            surge, unavailable = 0, want
        else:
            surge = int_or_percent(ru.get("maxSurge", "25%"), want, True)
            unavailable = int_or_percent(ru.get("maxUnavailable", "25%"), want, False)
            if surge == 0 and unavailable == 0:
                unavailable = 1
        alive = [p for p in pods if not p["metadata"].get("deletionTimestamp")
                 and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        new = [p for p in alive if p["metadata"]["labels"].get("pod-template-hash") == phash]
        old = [p for p in alive if p not in new]

        def ready(p: JSON) -> bool:
            return any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (p.get("status") or {}).get("conditions") or [])
        # Scale the new pods down to want, then remove old pods while enough stay available.
        for p in sorted(new, key=ready)[:max(0, len(new) - want)]:
            self.api.delete_pod(p["metadata"]["name"])  # type: ignore[union-attr]
            new.remove(p)
        available = sum(1 for p in alive if ready(p))
        for p in sorted(old, key=ready):
            if ready(p) and available - 1 < want - unavailable:
                break
            self.say(f"Deployment {name}: replacing pod {p['metadata']['name']} "
                     f"(rolling update, maxSurge {surge}, maxUnavailable {unavailable})")
            self.api.delete_pod(p["metadata"]["name"])  # type: ignore[union-attr]
            old.remove(p)
            available -= 1 if ready(p) else 0
        while len(new) < want and len(new) + len(old) < want + surge:
            pod_name = f"{name}-{phash}-{_suffix()}"
            new.append(self._new_pod(dep, pod_name, {"pod-template-hash": phash}))
        # Status, as the Deployment controller writes it.
        current = [*new, *old]
        ready_n = sum(1 for p in current if ready(p))
        updated = len(new)
        ready_new = sum(1 for p in new if ready(p))
        now = time.monotonic()
        key = f"{dep['metadata']['uid']}/{phash}"
        if key not in self._progress or ready_new > self._progress.get(key + "#", -1):
            self._progress[key] = now
            self._progress[key + "#"] = ready_new
        complete = updated == want and ready_new == want and not old
        deadline = float(spec.get("progressDeadlineSeconds", 600))
        if complete:
            prog = ("True", "NewReplicaSetAvailable",
                    f'ReplicaSet "{name}-{phash}" has successfully progressed.')
        elif now - self._progress[key] > deadline:
            prog = ("False", "ProgressDeadlineExceeded",
                    f'ReplicaSet "{name}-{phash}" has timed out progressing.')
        else:
            prog = ("True", "ReplicaSetUpdated", f'ReplicaSet "{name}-{phash}" is progressing.')
        avail_ok = ready_n >= want - unavailable
        conditions = [
            {"type": "Available", "status": "True" if avail_ok else "False",
             "reason": "MinimumReplicasAvailable" if avail_ok else "MinimumReplicasUnavailable",
             "message": "Deployment has minimum availability." if avail_ok
             else "Deployment does not have minimum availability."},
            {"type": "Progressing", "status": prog[0], "reason": prog[1], "message": prog[2]},
        ]
        status: JSON = {"observedGeneration": dep["metadata"].get("generation"),
                        "replicas": len(current), "updatedReplicas": updated,
                        "readyReplicas": ready_n, "availableReplicas": ready_n,
                        "unavailableReplicas": max(0, want - ready_n),
                        "conditions": conditions}
        self._write_status("deployments", dep, status, self._deploy_status)

    def _write_status(self, kind: str, obj: JSON, status: JSON, memo: dict[str, JSON]) -> None:
        uid = obj["metadata"]["uid"]
        prev = memo.get(uid)
        if prev is None:  # after a restart of the agent: what the API has
            prev = obj.get("status") or {}
        strip = json.loads(json.dumps(prev))
        for c in strip.get("conditions") or []:
            for k in ("lastTransitionTime", "lastUpdateTime", "lastProbeTime"):
                c.pop(k, None)
        if {k: strip.get(k) for k in status} == status:
            memo[uid] = prev
            return
        now = _now()
        before = {c["type"]: c for c in prev.get("conditions") or []}
        out = copy.deepcopy(status)
        for c in out.get("conditions") or []:
            p = before.get(c["type"])
            same = p is not None and p.get("status") == c["status"]
            c["lastTransitionTime"] = p.get("lastTransitionTime", now) if same and p else now
            c["lastUpdateTime"] = now
        if kind == "jobs":
            for c in out.get("conditions") or []:
                c.pop("lastUpdateTime", None)
                c["lastProbeTime"] = now
        full = {**prev, **out}
        self.api.patch_status(kind, obj["metadata"]["name"], full)  # type: ignore[union-attr]
        memo[uid] = full

    def _sync_job(self, job: JSON, pods: list[JSON]) -> None:
        name = job["metadata"]["name"]
        status = dict(job.get("status") or {})
        finished = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                       for c in status.get("conditions") or [])
        if finished:
            return
        if not pods:
            self._new_pod(job, f"{name}-{_suffix()}",
                          {"job-name": name, "batch.kubernetes.io/job-name": name,
                           "controller-uid": job["metadata"]["uid"],
                           "batch.kubernetes.io/controller-uid": job["metadata"]["uid"]})
            out: JSON = {"active": 1, "startTime": status.get("startTime") or _now(),
                         "ready": 0}
            self._write_status("jobs", job, out, self._job_status)
            return
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        succeeded = phases.count("Succeeded")
        failed = phases.count("Failed")
        active = len(pods) - succeeded - failed
        start = status.get("startTime") or _now()
        out = {"active": active, "succeeded": succeeded, "failed": failed, "startTime": start,
               "ready": sum(1 for p in pods if any(
                   c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (p.get("status") or {}).get("conditions") or []))}
        deadline = job["spec"].get("activeDeadlineSeconds")
        started = datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp()
        if succeeded:
            out["conditions"] = [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods"}]
            out["completionTime"] = _now()
            self.say(f"Job {name}: Complete")
        elif failed > int(job["spec"].get("backoffLimit", 6)):
            out["conditions"] = [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit"},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit"}]
            self.say(f"Job {name}: Failed (BackoffLimitExceeded)")
        elif deadline is not None and time.time() - started > float(deadline):
            for p in pods:
                self.api.delete_pod(p["metadata"]["name"])  # type: ignore[union-attr]
            out["conditions"] = [
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                 "message": "Job was active longer than specified deadline"}]
            out["active"] = 0
            self.say(f"Job {name}: Failed (DeadlineExceeded)")
        elif failed and not active:
            # A failed pod below the backoff limit: the Job controller makes another.
            self._new_pod(job, f"{name}-{_suffix()}",
                          {"job-name": name, "batch.kubernetes.io/job-name": name,
                           "controller-uid": job["metadata"]["uid"],
                           "batch.kubernetes.io/controller-uid": job["metadata"]["uid"]})
        self._write_status("jobs", job, out, self._job_status)


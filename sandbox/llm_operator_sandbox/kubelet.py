"""A LOCAL kubelet for the REAL control plane (:mod:`.cluster`): it registers Nodes,
keeps their Ready condition and Leases, and runs the pods the real scheduler bound to
them as local processes (the CPU build of vLLM for vLLM containers). It plays the
kubelet's part only: the Deployment, ReplicaSet and Job controllers, the scheduler and
the garbage collector are Kubernetes' own.

- **Nodes**: each :class:`NodeSpec` becomes a Node with ``cpu``, ``memory``, ``pods``
  and the GPU resource (``nvidia.com/gpu``) as capacity and allocatable, the labels of
  a GPU class (GPU feature discovery's ``nvidia.com/gpu.product``, GKE's, Karpenter's)
  and the usual GPU taint; its ``Ready`` condition and its Lease in ``kube-node-lease``
  are renewed every :data:`HEARTBEAT_SECONDS`, as a kubelet does, so the node lifecycle
  controller keeps it Ready.
- **Pods**: a pod bound to one of these nodes (``spec.nodeName``) gets the local ports
  its declared ports map to (annotation ``sandbox.llmops.dev/ports``; every pod shares
  this machine's network), then a :class:`.node_agent.PodWorker` runs its init
  containers and containers and writes its status through the status subresource.
- **Failures as a kubelet reports them** (:mod:`.kubelet_faults`): an image under a
  ``.invalid`` registry host cannot be pulled (``ErrImagePull``/``ImagePullBackOff``),
  a missing Secret keeps the container in ``CreateContainerConfigError``, a
  ReadWriteOnce claim already attached to another node keeps the pod in
  ``ContainerCreating`` with a ``FailedAttachVolume`` "Multi-Attach" Event; each with
  the Events a kubelet posts.
- **Graceful deletion**: a pod with ``deletionTimestamp`` has its processes stopped
  (SIGTERM, its grace period, SIGKILL), then the kubelet deletes it for good
  (``gracePeriodSeconds: 0``), which is what lets the API server drop it.

It talks to the API server with the admin kubeconfig (a real kubelet has a node
identity limited by the Node authorizer; one process serving several nodes has none).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from kubernetes import client, config, watch

from .kubelet_faults import Attachments
from .local_plan import DEFAULT_KV_CACHE_BYTES, port_annotation
from .node_agent import DEFAULT_LOCK, PORTS_ANNOTATION, PodWorker, descendants, free_port
from .processes import stop_all

JSON = dict[str, Any]
log = logging.getLogger("llm_operator_sandbox.kubelet")

HEARTBEAT_SECONDS = 10.0
LEASE_SECONDS = 40
GPU_TAINT: JSON = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
KUBELET_ANNOTATION = "sandbox.llmops.dev/kubelet"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class NodeSpec:
    """One node: its name, GPUs (count and the labels that name them), size, taints."""

    name: str
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    cpu: str = "64"
    memory: str = "512Gi"
    pods: str = "110"
    gpu_resource: str = "nvidia.com/gpu"

    def manifest(self) -> JSON:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": self.pods,
                    "ephemeral-storage": "1000Gi"}
        if self.gpus:
            capacity[self.gpu_resource] = str(self.gpus)
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64", **self.labels}
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": labels,
                             "annotations": {KUBELET_ANNOTATION: "local processes"}},
                "spec": {"taints": [dict(t) for t in self.taints]},
                "status": {"capacity": capacity, "allocatable": dict(capacity)}}


def gpu_nodes(product_label: str = "nvidia.com/gpu.product",
              product: str = "NVIDIA-L4", count: int = 2, gpus: int = 8,
              cpu_nodes: int = 1) -> list[NodeSpec]:
    """The default set: ``count`` GPU nodes of ``gpus`` GPUs each, labelled
    ``product_label: product`` and tainted ``nvidia.com/gpu=present:NoSchedule`` (as
    GKE and most GPU node pools are), and ``cpu_nodes`` CPU nodes without either."""
    nodes = [NodeSpec(f"gpu-node-{i + 1}", gpus=gpus, labels={product_label: product},
                      taints=(GPU_TAINT,)) for i in range(count)]
    nodes += [NodeSpec(f"cpu-node-{i + 1}") for i in range(cpu_nodes)]
    return nodes


class LocalKubelet:
    """Registers ``nodes`` on the API server at ``kubeconfig`` and runs their pods.

    ``models``: the served model name of a rendered vLLM container -> a local directory
    holding a model. ``vllm_python``: the Python that has vLLM (the CPU build).
    """

    def __init__(self, kubeconfig: Path, nodes: list[NodeSpec], workdir: Path, *,
                 vllm_python: Path, models: Mapping[str, Path] | None = None,
                 kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES, vllm_lock: str = DEFAULT_LOCK,
                 out: Callable[[str], None] | None = None) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.nodes = list(nodes)
        self.node_names = {n.name for n in self.nodes}
        self.workdir = Path(workdir)
        self.vllm_python = Path(vllm_python)
        self.vllm_cli_dir = self.workdir / "bin"
        self.models = {k: Path(v) for k, v in (models or {}).items()}
        self.kv_cache_bytes = kv_cache_bytes
        self.vllm_lock = vllm_lock
        self.namespace = "default"  # PodWorker's fallback; each pod uses its own
        self._out = out
        import llm_operator

        self.operator_pythonpath = str(Path(llm_operator.__file__).resolve().parents[1])
        self.workers: dict[str, PodWorker] = {}  # "namespace/name" -> worker
        self.attachments = Attachments()  # ReadWriteOnce claims -> their node
        self._stopping: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self.api_client = config.new_client_from_config(str(self.kubeconfig))
        self.core = client.CoreV1Api(self.api_client)
        self.coord = client.CoordinationV1Api(self.api_client)

    # ---------------------------------------------------------------- public
    def say(self, text: str) -> None:
        line = f"[kubelet] {text}"
        if self._out is not None:
            self._out(line)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def start(self) -> LocalKubelet:
        from .local_plan import vllm_cli_script

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.vllm_cli_dir.mkdir(exist_ok=True)
        cli = self.vllm_cli_dir / "vllm"
        cli.write_text(vllm_cli_script(self.vllm_python.absolute()))
        cli.chmod(0o755)
        for node in self.nodes:
            self._register(node)
        self.say(f"registered {len(self.nodes)} nodes: " + ", ".join(
            f"{n.name} ({n.gpus} GPU)" if n.gpus else n.name for n in self.nodes))
        self._threads = [
            threading.Thread(target=self._heartbeat, name="kubelet-heartbeat", daemon=True),
            threading.Thread(target=self._loop, name="kubelet-sync", daemon=True),
            threading.Thread(target=self._watch, name="kubelet-watch", daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Stop every pod's processes and the threads (the Nodes stay registered)."""
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=15)
        with self._lock:
            workers = list(self.workers.values())
            self.workers.clear()
        stop_all(w.stop for w in workers)

    def __enter__(self) -> LocalKubelet:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def wake(self) -> None:
        self._wake.set()

    def pids(self) -> list[int]:
        """Every process the kubelet runs now (containers and their children)."""
        out: list[int] = []
        with self._lock:
            workers = list(self.workers.values())
        for w in workers:
            for c in [*w.inits, *w.mains]:
                if c.proc is not None and c.proc.poll() is None:
                    out += [c.proc.pid, *descendants(c.proc.pid)]
        return out

    def container_pid(self, namespace: str, pod: str, container: str) -> int | None:
        """The pid of the process that runs ``container`` of pod ``namespace/pod`` now
        (None if none)."""
        with self._lock:
            worker = self.workers.get(f"{namespace}/{pod}")
        for c in [*worker.inits, *worker.mains] if worker else []:
            if c.spec["name"] == container and c.proc is not None and c.proc.poll() is None:
                return c.proc.pid
        return None

    # ---------------------------------------------------------------- nodes
    def _register(self, node: NodeSpec) -> None:
        body = node.manifest()
        try:
            self.core.create_node(body, _preload_content=False)  # type: ignore[arg-type]
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        self._node_status(node)

    def _node_status(self, node: NodeSpec) -> None:
        now = _now()
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "local kubelet (processes, not containers) is posting ready "
                            "status", "lastHeartbeatTime": now, "lastTransitionTime": now}
        cap = node.manifest()["status"]
        status = {**cap, "conditions": [ready],
                  "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                {"type": "Hostname", "address": node.name}],
                  "nodeInfo": {"kubeletVersion": "local", "kubeProxyVersion": "",
                               "operatingSystem": "linux", "architecture": "amd64",
                               "containerRuntimeVersion": "local-processes://0",
                               "osImage": "", "kernelVersion": "", "machineID": node.name,
                               "systemUUID": node.name, "bootID": node.name}}
        self.core.patch_node_status(node.name, {"status": status},
                                    _content_type="application/merge-patch+json",
                                    _preload_content=False)

    def _lease(self, node: NodeSpec) -> None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node.name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": node.name, "leaseDurationSeconds": LEASE_SECONDS,
                         "renewTime": _micro_now()}}
        try:
            self.coord.patch_namespaced_lease(
                node.name, "kube-node-lease", {"spec": body["spec"]},
                _content_type="application/merge-patch+json", _preload_content=False)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            self.coord.create_namespaced_lease("kube-node-lease", body,  # type: ignore[arg-type]
                                               _preload_content=False)

    def _heartbeat(self) -> None:
        while not self._stop.is_set():
            for node in self.nodes:
                try:
                    self._lease(node)
                    self._node_status(node)
                except Exception as exc:  # the API server may be restarting
                    log.warning("heartbeat for %s failed: %s", node.name, exc)
            self._stop.wait(HEARTBEAT_SECONDS)

    # ---------------------------------------------------------------- pods
    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                for _ in watch.Watch().stream(self.core.list_pod_for_all_namespaces,
                                              timeout_seconds=5, deserialize=False):
                    self._wake.set()
                    if self._stop.is_set():
                        return
            except Exception:  # the sync loop's own listing carries on
                self._stop.wait(1)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._stop.wait(0.3)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sync()
            except Exception as exc:
                log.warning("kubelet sync failed: %s", exc)

    def _mine(self) -> list[JSON]:
        resp = self.core.list_pod_for_all_namespaces(_preload_content=False)
        pods = json.loads(resp.data).get("items") or []  # type: ignore[attr-defined]
        return [p for p in pods if (p.get("spec") or {}).get("nodeName") in self.node_names]

    def sync(self) -> None:
        """One pass: start workers for newly bound pods, stop and finish deleted ones."""
        pods = self._mine()
        seen = set()
        for pod in pods:
            meta = pod["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            seen.add(key)
            if meta.get("deletionTimestamp"):
                self._delete(key, pod)
                continue
            phase = (pod.get("status") or {}).get("phase")
            with self._lock:
                running = key in self.workers
            if running:
                with self._lock:
                    worker = self.workers.get(key)
                if worker is not None:
                    worker.refresh_config_maps(None)
                continue
            if phase in ("Succeeded", "Failed"):
                continue
            self._run(key, pod)
        with self._lock:
            gone = [k for k in self.workers if k not in seen]
        for key in gone:  # deleted with no grace (force): stop what still runs
            with self._lock:
                worker = self.workers.pop(key)
            threading.Thread(target=worker.stop, daemon=True).start()

    def _run(self, key: str, pod: JSON) -> None:
        meta = pod["metadata"]
        containers = pod["spec"].get("containers") or []
        annotations = meta.get("annotations") or {}
        if PORTS_ANNOTATION not in annotations:
            local = {int(p["containerPort"]): free_port()
                     for c in containers for p in c.get("ports") or []}
            ports = json.dumps(port_annotation(containers, local), sort_keys=True)
            resp = self.core.patch_namespaced_pod(
                meta["name"], meta["namespace"],
                {"metadata": {"annotations": {PORTS_ANNOTATION: ports}}},
                _content_type="application/merge-patch+json", _preload_content=False)
            pod = json.loads(resp.data)  # type: ignore[attr-defined]
        worker = PodWorker(self, pod)  # type: ignore[arg-type]
        with self._lock:
            self.workers[key] = worker
        self.say(f"pod {key} on {pod['spec']['nodeName']}: starting "
                 f"(ports {pod['metadata']['annotations'][PORTS_ANNOTATION]})")
        worker.start()

    def _delete(self, key: str, pod: JSON) -> None:
        with self._lock:
            if key in self._stopping:
                return
            self._stopping.add(key)
            worker = self.workers.pop(key, None)

        def finish() -> None:
            try:
                if worker is not None:
                    worker.stop()
                meta = pod["metadata"]
                with contextlib.suppress(client.ApiException):
                    self.core.delete_namespaced_pod(
                        meta["name"], meta["namespace"], grace_period_seconds=0,
                        body=client.V1DeleteOptions(
                            grace_period_seconds=0,
                            preconditions=client.V1Preconditions(uid=meta["uid"])),
                        _preload_content=False)
                self.say(f"pod {key}: stopped and deleted")
            finally:
                with self._lock:
                    self._stopping.discard(key)

        threading.Thread(target=finish, name=f"kubelet-delete-{key}", daemon=True).start()

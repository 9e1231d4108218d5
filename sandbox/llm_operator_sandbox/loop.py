"""The whole loop on one machine: an API server, the operator, pods running the real vLLM
CPU engine, and a real Prometheus finding them through the rendered PodMonitor. Never
used against a cluster.

:class:`LocalLoop` starts and stops the parts (``llm-operator demo`` shows it), on one of
three backends (:data:`BACKENDS`):

- ``nodes``: the REAL control plane and a REAL node (Kubernetes' kubelet, containerd,
  runc, a CNI bridge, kube-proxy, CoreDNS, a registry with a login); the operator runs in
  the chart's pod and vLLM in containers, from images built here; nothing is substituted;
- ``cluster``: the REAL control plane, the operator as a local process with the chart's
  ServiceAccount token, and the LOCAL kubelet (:mod:`.kubelet`) running each pod's
  containers as local processes, with the substitutions it prints;
- ``emulated``: the EMULATED API server (:mod:`.emulator`, in this process) and the node
  agent (:mod:`.node_agent`: the Deployment and Job controllers and the kubelet).

Real in all three: ``kubectl``, the operator, vLLM (CPU build, serving a generated model),
the tuner in the tuning Job, vLLM's benchmark as the load, and Prometheus (scraping the
pods the rendered PodMonitor selects, see :mod:`.podmonitor_sd`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llm_operator.inpod.tuner.server import free_port
from llm_operator.rendering.admission import ADMISSION_CONFIG_MAP_SUFFIX

from .processes import stop as stop_process
from .prometheus import PodMonitorDiscovery, podmonitor_crd, prometheus_available
from .tiny_model import ensure_tiny_llama

CRD_FILE = "llmservices.llmops.dev.yaml"
EXAMPLE_FILE = "tiny-llama-local.yaml"
# The manifest on real nodes: the wide-KV stand-in, the vLLM CPU image, a 1 GiB KV cache.
NODES_EXAMPLE_FILE = "tiny-llama-nodes.yaml"
# The wide-KV stand-in's dimensions (demo/tiny-llama-nodes.yaml says why).
WIDE_KV_MODEL = {"heads": 128, "kv_heads": 128, "head_dim": 256}
# The filled-in values' marker in that manifest.
FILLED_IN = "filled-in-by-the-demo"
MODEL_CACHE = Path(os.environ.get("LLMOP_TEST_MODELS", "/tmp/llmop-models"))
# The CPU KV cache the agent gives each vLLM server: 4,096 tokens of the tiny Llama,
# so 32 clients preempt and the adaptation has something to act on.
KV_CACHE_BYTES = 2 * 1024 * 1024
# Where the loop's API server comes from and what runs its pods: the REAL control plane
# built from Kubernetes' Go modules with REAL nodes (:mod:`.nodes`: Kubernetes' kubelet,
# containerd, runc; images built here), the same control plane with the local kubelet
# (:mod:`.cluster`, pods as processes), or the EMULATED one (:mod:`.emulator`, with the
# node agent playing the controllers too).
BACKENDS = ("nodes", "cluster", "emulated")


def default_vllm_python(project: Path) -> Path:
    """``LLMOP_VLLM_PYTHON`` or the project's ``.venv-vllm/bin/python``."""
    env = os.environ.get("LLMOP_VLLM_PYTHON")
    return Path(env) if env else project / ".venv-vllm" / "bin" / "python"


def missing_parts(project: Path, vllm_python: Path, kubectl: str | None) -> list[str]:
    """What the loop needs and this machine lacks, each with how to get it."""
    missing = []
    if not vllm_python.exists():
        missing.append(f"vLLM's CPU build at {vllm_python} (bash tools/setup.sh --engine)")
    if not prometheus_available():
        missing.append("Prometheus (/usr/bin/prometheus: apt-get install prometheus, "
                       "or bash tools/setup.sh --engine)")
    if kubectl is None:
        missing.append("kubectl (pip install 'llm-operator[demo]')")
    try:
        from . import node_agent  # noqa: F401
    except ImportError as exc:
        missing.append(f"the local node agent (llm_operator_sandbox.node_agent): {exc}")
    return missing


@dataclass
class Settings:
    """The loop's knobs (short, so the loop runs in minutes on 2 cores)."""

    namespace: str = "default"
    scrape_interval_seconds: int = 1
    adaptation_window_seconds: int = 10
    kv_cache_bytes: int = KV_CACHE_BYTES
    # One vLLM at a time on this machine: the lock every vLLM of the tests and the tuner
    # takes (LLMOP_VLLM_LOCK, as in the tests).
    vllm_lock: str = os.environ.get("LLMOP_VLLM_LOCK") or "/tmp/llmop-vllm.lock"


class LocalLoop:
    """The parts of the loop, started in order by :meth:`start`, stopped in reverse by
    :meth:`stop` (idempotent; every process the loop started is gone afterwards)."""

    def __init__(self, project: Path, workdir: Path, kubectl: str, *, vllm_python: Path,
                 settings: Settings | None = None,
                 say: Callable[[str], None] | None = None, backend: str = "emulated",
                 helm: str | None = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
        self.backend = backend
        self.helm = helm
        self.project = project
        self.workdir = workdir
        self.kubectl_path = kubectl
        self.vllm_python = vllm_python
        self.settings = settings or Settings()
        self.say = say or (lambda text: None)
        self.kubeconfig = workdir / "kubeconfig.yaml"
        self.env = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
                    "KUBECACHEDIR": str(workdir / "kube-cache")}
        self.model_dir: Path | None = None
        self.model_name = ""
        self._stack = contextlib.ExitStack()
        self.api: Any = None
        self.discovery: PodMonitorDiscovery | None = None
        self.operator: subprocess.Popen[bytes] | None = None
        self.agent: Any = None
        self.operator_log = workdir / "operator.log"
        self.operator_kubeconfig = self.kubeconfig
        self.cluster: Any = None
        self.installed: Any = None
        self.nodes: Any = None
        self.hub: Any = None
        self.vllm_ref = ""  # the vLLM CPU image in the registry (nodes)
        self.validate = "--validate=false"  # the emulator serves no OpenAPI
        self.example_file = NODES_EXAMPLE_FILE if backend == "nodes" else EXAMPLE_FILE

    # --- parts -------------------------------------------------------------------------
    def example(self) -> dict[str, Any]:
        """The example LLMService the loop applies (``demo/tiny-llama-local.yaml``; on real
        nodes ``demo/tiny-llama-nodes.yaml`` with its image and Hub endpoint filled in
        once they are known)."""
        doc: dict[str, Any] = yaml.safe_load((self.project / "demo" / self.example_file)
                                             .read_text())
        if self.backend == "nodes" and self.vllm_ref and self.hub is not None:
            fill_in(doc, self.vllm_ref, self.hub.endpoint)
        return doc

    def filled_in(self) -> list[str]:
        """What the loop set in the example, to print beside its apply."""
        if self.backend != "nodes":
            return []
        return [f"spec.image: {self.vllm_ref}", f"HF_ENDPOINT: {self.hub.endpoint}"]

    def start(self) -> LocalLoop:
        """Model, API server, CRDs, Prometheus with discovery, operator, node agent."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.model_name = self.example()["spec"]["model"]["name"]
        self.say(f"Generating the tiny model for {self.model_name} (cached in {MODEL_CACHE})")
        self.model_dir = ensure_tiny_llama(
            MODEL_CACHE, self.vllm_python, **(WIDE_KV_MODEL if self.backend == "nodes" else {}))
        self._stack.callback(self._forget_parts)
        if self.backend == "nodes":
            return self._start_on_nodes()
        if self.backend == "cluster":
            return self._start_on_cluster()
        return self._start_emulated()

    def _start_on_cluster(self) -> LocalLoop:
        """The REAL control plane (:mod:`.cluster`), the chart installed by helm with the
        operator running under its ServiceAccount's token, the local kubelet."""
        from .cluster import LocalCluster, helm_install, run_tool
        from .kubelet import LocalKubelet, gpu_nodes

        assert self.model_dir is not None
        if self.helm is None:
            raise RuntimeError("the cluster backend installs the chart with helm: pass its "
                               "path (python tools/install_helm.py installs one)")
        ns = self.settings.namespace
        self.validate = "--validate=strict"
        self.cluster = self._stack.enter_context(
            LocalCluster(self.workdir / "cluster", out=self.say))
        self.kubeconfig.write_text(self.cluster.admin_kubeconfig.read_text())
        self.say(f"REAL Kubernetes control plane on {self.cluster.url} "
                 f"(KUBECONFIG={self.kubeconfig}, the admin)")
        self.agent = LocalKubelet(self.kubeconfig, gpu_nodes(), self.workdir / "agent",
                                  vllm_python=self.vllm_python,
                                  models={self.model_name: self.model_dir},
                                  kv_cache_bytes=self.settings.kv_cache_bytes,
                                  vllm_lock=self.settings.vllm_lock, out=self.say)
        self.agent.start()
        self._stack.callback(self.agent.stop)
        self.kubectl("apply", "--server-side", "-f", "-",
                     stdin=yaml.safe_dump(podmonitor_crd()))
        if ns != "default":
            run_tool([self.kubectl_path, "create", "namespace", ns], self.kubeconfig)
        self.installed = helm_install(
            self.cluster, self.helm, self.kubectl_path,
            self.project / "charts" / "llm-operator",
            # The namespace-scoped install: a Role in the watched namespace (and the
            # namespace list kopf then needs), as `-n` below runs the operator.
            values={"replicaCount": 0, "watchNamespaces": [ns]})
        self.operator_kubeconfig = self.installed.kubeconfig
        self.say(f"helm install {self.installed.release}: the operator runs as "
                 f"system:serviceaccount:{self.installed.namespace}:"
                 f"{self.installed.service_account} (the chart's RBAC)")
        self.discovery = PodMonitorDiscovery(
            self.kubeconfig, self.workdir / "prometheus", namespaces=[ns], interval_s=1.0,
            scrape_interval=f"{self.settings.scrape_interval_seconds}s").start()
        self._stack.callback(self.discovery.stop)
        self.start_operator()
        self._stack.callback(self.stop_operator)
        return self

    def _start_on_nodes(self) -> LocalLoop:
        """The REAL control plane with a REAL node (:mod:`.nodes`): Kubernetes' kubelet,
        containerd and runc, a CNI bridge, kube-proxy, CoreDNS, a device plugin with 8
        stand-in GPUs, and a registry that requires a login, holding the operator's image
        and the vLLM CPU image built here (``tools/build_images.sh``). The chart is
        installed by helm from that registry: the operator runs in its pod."""
        from .cluster import LocalCluster, helm_install, run_tool
        from .hub import LocalHub, folder_files
        from .nodes import NodeNetwork, RealNodes, built_images

        assert self.model_dir is not None
        if self.helm is None:
            raise RuntimeError("the nodes backend installs the chart with helm: pass its "
                               "path (python tools/install_helm.py installs one)")
        images = built_images()
        missing = [n for n in ("operator", "vllm") if n not in images]
        if missing:
            raise RuntimeError(f"no {' and no '.join(missing)} image built: run "
                               "`bash tools/setup.sh --nodes` (tools/build_images.sh --vllm)")
        ns = self.settings.namespace
        self.validate = "--validate=strict"
        net = self._stack.enter_context(NodeNetwork(roots=(self.workdir,)))
        self.cluster = self._stack.enter_context(
            LocalCluster(self.workdir / "cluster", host=net.gateway, out=self.say))
        self.kubeconfig.write_text(self.cluster.admin_kubeconfig.read_text())
        self.say(f"REAL Kubernetes control plane on {self.cluster.url} "
                 f"(KUBECONFIG={self.kubeconfig}, the admin)")
        self.nodes = self._stack.enter_context(
            RealNodes(self.cluster, self.workdir / "nodes", out=self.say))
        t0 = time.monotonic()
        operator_ref = self.nodes.registry.push(images["operator"], "llm-operator")
        self.say(f"pushed {operator_ref} to the registry in {time.monotonic() - t0:.0f} s; "
                 "the vLLM image goes on beside the install")
        # The vLLM image (6 GB, about a minute) is pushed while helm installs the
        # operator, which needs only its own image; the LLMService waits for both.
        pushing = ThreadPoolExecutor(1, thread_name_prefix="push-vllm")
        self._stack.callback(pushing.shutdown, wait=False)
        vllm_push = pushing.submit(self.nodes.registry.push, images["vllm"], "vllm-cpu",
                                   compression="zstd")
        self.hub = self._stack.enter_context(
            LocalHub({self.model_name: folder_files(self.model_dir)}, host=self.cluster.host))
        self.kubectl("apply", "--server-side", "-f", "-",
                     stdin=yaml.safe_dump(podmonitor_crd()))
        self.discovery = PodMonitorDiscovery(
            self.kubeconfig, self.workdir / "prometheus", namespaces=[ns], interval_s=1.0,
            scrape_interval=f"{self.settings.scrape_interval_seconds}s",
            host=self.cluster.host).start()
        self._stack.callback(self.discovery.stop)
        assert self.discovery.prometheus is not None
        release_ns = "llm-operator"
        run_tool([self.kubectl_path, "create", "namespace", release_ns], self.kubeconfig)
        for namespace in {ns, release_ns}:
            self.kubectl("apply", "-n", namespace, "-f", "-",
                         stdin=yaml.safe_dump(self.nodes.registry.pull_secret("regcred")))
        registry, digest = self.nodes.registry.host, operator_ref.split("@")[1]
        self.installed = helm_install(
            self.cluster, self.helm, self.kubectl_path,
            self.project / "charts" / "llm-operator", namespace=release_ns,
            values={"image": {"registry": registry, "repository": "llm-operator",
                              "digest": digest},
                    "imagePullSecrets": [{"name": "regcred"}],
                    "watchNamespaces": [ns],
                    "admission": {"allowedImages": [f"{registry}/"]},
                    "settings": {
                        "hfEndpoint": self.hub.endpoint,
                        "prometheusUrl": self.discovery.prometheus.url,
                        "scrapeIntervalSeconds": self.settings.scrape_interval_seconds,
                        "adaptationWindowSeconds": self.settings.adaptation_window_seconds}})
        self.say(f"helm install {self.installed.release}: the operator runs in the chart's "
                 f"pod from {operator_ref}")
        self.vllm_ref = vllm_push.result()
        self.say(f"pushed {self.vllm_ref} to the registry {time.monotonic() - t0:.0f} s "
                 "after the first push began")
        return self

    def _start_emulated(self) -> LocalLoop:
        from .emulator import EmulatorThread
        from .node_agent import NodeAgent

        assert self.model_dir is not None
        ns = self.settings.namespace
        self.api = self._stack.enter_context(
            EmulatorThread(manifests=[podmonitor_crd()], namespaces=[ns]))
        self.api.write_kubeconfig(self.kubeconfig, ns)
        self.say(f"EMULATED API server on {self.api.url} (KUBECONFIG={self.kubeconfig})")
        self.kubectl("apply", "--validate=false", "-f", str(self.project / "crds" / CRD_FILE))
        self.discovery = PodMonitorDiscovery(
            self.kubeconfig, self.workdir / "prometheus", namespaces=[ns], interval_s=1.0,
            scrape_interval=f"{self.settings.scrape_interval_seconds}s").start()
        self._stack.callback(self.discovery.stop)
        assert self.discovery.prometheus is not None
        self.say(f"Prometheus on {self.discovery.prometheus.url}, discovering pods through "
                 "the rendered PodMonitors")
        self.start_operator()
        self._stack.callback(self.stop_operator)
        self.agent = NodeAgent(self.kubeconfig, ns, self.workdir / "agent",
                               vllm_python=self.vllm_python,
                               models={self.model_name: self.model_dir},
                               kv_cache_bytes=self.settings.kv_cache_bytes,
                               vllm_lock=self.settings.vllm_lock, out=self.say)
        self.agent.start()
        self._stack.callback(self.agent.stop)
        return self

    def _forget_parts(self) -> None:
        self.api = self.discovery = self.agent = self.cluster = None

    def start_operator(self) -> None:
        """The operator as its own process (``llm-operator run``), pointed at Prometheus."""
        assert self.discovery is not None and self.discovery.prometheus is not None
        chart_env = dict(self.installed.env) if self.installed is not None else {}
        # The operator's own /metrics (decisions, the cap it set), scraped by the same
        # Prometheus: `llm-operator plot timeline` draws the decisions from them.
        metrics_port = free_port()
        self.discovery.add_static_job("llm-operator", f"127.0.0.1:{metrics_port}")
        env = {**self.env, **chart_env, "KUBECONFIG": str(self.operator_kubeconfig),
               "PYTHONUNBUFFERED": "1",
               "LLMOP_HEALTH_PORT": "0", "LLMOP_METRICS_PORT": str(metrics_port),
               "LLMOP_POD_MONITOR": "enabled",
               "LLMOP_PROMETHEUS_URL": self.discovery.prometheus.url,
               "LLMOP_SCRAPE_INTERVAL_SECONDS": str(self.settings.scrape_interval_seconds),
               "LLMOP_ADAPTATION_WINDOW_SECONDS": str(self.settings.adaptation_window_seconds)}
        seen = self.operator_log.stat().st_size if self.operator_log.exists() else 0
        with self.operator_log.open("ab") as log:
            self.operator = subprocess.Popen(
                [sys.executable, "-m", "llm_operator.cli", "run", "--standalone",
                 "-n", self.settings.namespace],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.operator.poll() is not None:
                raise RuntimeError("the operator exited:\n" + self.operator_log.read_text()[-3000:])
            with self.operator_log.open("rb") as f:  # this start's lines, not a former one's
                f.seek(seen)
                if b"Initial authentication has finished" in f.read():
                    return
            time.sleep(0.3)
        raise TimeoutError("the operator did not start within 60 s")

    def stop_operator(self) -> None:
        """Stop the operator process (SIGTERM, then SIGKILL)."""
        stop_process(self.operator, 15)

    def stop(self) -> None:
        """Stop every part, in reverse order."""
        self._stack.close()

    def __enter__(self) -> LocalLoop:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the API through kubectl --------------------------------------------------------
    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None) -> str:
        """Run the real kubectl against the emulated API server; its output."""
        proc = subprocess.run([self.kubectl_path, *args], env=self.env, text=True,
                              capture_output=True, timeout=60, input=stdin)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return (proc.stdout + proc.stderr).rstrip()

    def get(self, kind: str, name: str | None = None) -> dict[str, Any]:
        """``kubectl get KIND [NAME] -o json`` in the loop's namespace ({} when absent)."""
        return self.get_in(self.settings.namespace, kind, name)

    def get_in(self, namespace: str, kind: str, name: str | None = None) -> dict[str, Any]:
        """``kubectl get KIND [NAME] -n NAMESPACE -o json`` ({} when absent)."""
        args = ["get", kind, *([name] if name else []), "-n", namespace, "-o", "json"]
        out = self.kubectl(*args, check=False)
        try:
            doc: dict[str, Any] = json.loads(out)
        except ValueError:
            return {}
        return doc

    def apply(self, obj: dict[str, Any]) -> str:
        """``kubectl apply`` of one object."""
        return self.kubectl("apply", self.validate, "-n", self.settings.namespace,
                            "-f", "-", stdin=yaml.safe_dump(obj))

    def pod_url(self, pod: dict[str, Any], port_name: str = "http") -> str | None:
        """The URL of a pod's port: on real nodes (Kubernetes' kubelet) its pod IP (the
        bridge routes it from this machine) and the container's port; else from the ports
        annotation the process kubelet (cluster) or the node agent (emulated) writes."""
        if self.backend == "nodes":
            ip = (pod.get("status") or {}).get("podIP")
            port = next((p["containerPort"] for c in pod["spec"].get("containers") or []
                         for p in c.get("ports") or [] if p.get("name") == port_name), None)
            return f"http://{ip}:{port}" if ip and port else None
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(
            "sandbox.llmops.dev/ports")
        if not raw:
            return None
        ports = json.loads(raw)
        port = ports.get(port_name)
        ip = (pod.get("status") or {}).get("podIP") or "127.0.0.1"
        return f"http://{ip}:{port}" if port else None

    def pids(self) -> list[int]:
        """Processes the node agent runs now."""
        return list(self.agent.pids()) if self.agent is not None else []


def fill_in(doc: dict[str, Any], image: str, hub_endpoint: str) -> dict[str, Any]:
    """``demo/tiny-llama-nodes.yaml`` as the demo applies it: ``spec.image`` and every env
    value marked :data:`FILLED_IN` (``HF_ENDPOINT``) set; the rest as written."""
    doc["spec"]["image"] = image
    for var in doc["spec"]["pod"]["env"]:
        if var["value"] == FILLED_IN:
            var["value"] = hub_endpoint
    return doc


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    """A status condition of ``obj`` by type ({} when absent)."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return {}


def server_pods(loop: LocalLoop, name: str) -> list[dict[str, Any]]:
    """The serving pods of LLMService ``name`` (running, newest first)."""
    pods = loop.get("pods").get("items") or []
    mine = [p for p in pods
            if (p["metadata"].get("labels") or {}).get("llmops.dev/llmservice") == name
            and (p["metadata"].get("labels") or {}).get("llmops.dev/component") == "server"
            and not p["metadata"].get("deletionTimestamp")]
    return sorted(mine, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)


def ready_server(loop: LocalLoop, name: str) -> dict[str, Any] | None:
    """A Ready serving pod of ``name`` (None while there is none)."""
    for pod in server_pods(loop, name):
        if condition(pod, "Ready").get("status") == "True":
            return pod
    return None


def cap_arg(args: list[str]) -> int | None:
    """The admission cap vLLM's arguments set: ``--max-num-active-seqs`` where it is given
    (the operator renders it after ``--max-num-seqs``, then the runner's capacity, on vLLM
    releases that take it), else ``--max-num-seqs``; None when neither is there."""
    found: dict[str, int] = {}
    for i, a in enumerate(args):
        for flag in ("--max-num-seqs", "--max-num-active-seqs"):
            if a == flag and i + 1 < len(args):
                found[flag] = int(args[i + 1])
            elif a.startswith(flag + "="):
                found[flag] = int(a.split("=", 1)[1])
    return found.get("--max-num-active-seqs", found.get("--max-num-seqs"))


def max_num_seqs_arg(pod: dict[str, Any]) -> int | None:
    """The cap a pod's vLLM container runs with (:func:`cap_arg`)."""
    for c in pod["spec"].get("containers") or []:
        cap = cap_arg([str(a) for a in (c.get("command") or []) + (c.get("args") or [])])
        if cap is not None:
            return cap
    return None


def serves_cap(loop: LocalLoop, name: str, pod: dict[str, Any], want: int | None) -> bool:
    """Whether ``pod`` serves with the cap ``want``: its ``--max-num-seqs``, or, with the
    live admission cap, the cap its ConfigMap carries (``--max-num-seqs`` is then the
    runner capacity, which a tuned cap below it does not change)."""
    if want is None:
        return False
    if max_num_seqs_arg(pod) == want:
        return True
    cm = loop.get("configmap", f"{name}{ADMISSION_CONFIG_MAP_SUFFIX}")
    return str(want) in [str(v).strip() for v in ((cm.get("data") or {}).values())]


# The tuner's log lines the demo shows: its trials, its result, and waiting for the
# machine's one vLLM (another vLLM on this machine holds the lock).
TUNER_WORDS = ("trial", "best", "waiting for the vllm lock", "result")


def tuner_log_lines(loop: LocalLoop, seen: set[str]) -> list[str]:
    """New lines of the tuning pods' tuner logs (what ``kubectl logs`` would show), for
    the trials as they finish: from Kubernetes' kubelet through ``kubectl logs`` on real
    nodes, else from the log files of the process kubelet (cluster) or the node agent
    (emulated)."""
    if loop.backend == "nodes":
        logs = {pod["metadata"]["name"]: loop.kubectl(
                    "logs", pod["metadata"]["name"], "-c", "tuner", "-n",
                    loop.settings.namespace, check=False)
                for pod in loop.get("pods").get("items") or []
                if (pod["metadata"].get("labels") or {}).get("llmops.dev/component")
                == "tuning"}
    else:
        logs = {}
        for log in sorted((loop.workdir / "agent" / "pods").glob("*tun*/containers/*/log")):
            with contextlib.suppress(OSError):
                logs[str(log)] = log.read_text(errors="replace")
    out = []
    for source, text in logs.items():
        for line in text.splitlines():
            key = f"{source}:{line}"
            if key not in seen and any(w in line.lower() for w in TUNER_WORDS):
                seen.add(key)
                out.append(line.strip())
    return out

"""A REAL Kubernetes control plane on this machine: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, built from the Go modules pinned in
``tools/cluster`` (``bash tools/setup.sh --cluster``), started on loopback.

What is real here is Kubernetes' own code: authentication by client certificates and
ServiceAccount tokens, ``--authorization-mode=Node,RBAC``, admission (Priority,
NodeRestriction, ServiceAccount, ...), CRD structural schemas and CEL, server-side apply,
and the Deployment, ReplicaSet, Job, garbage-collector, namespace and
serviceaccount-token controllers and the scheduler. There is no kubelet: nodes are
registered and pods run by :mod:`.kubelet` (local processes, not containers).

Use::

    with LocalCluster(workdir) as cluster:
        cluster.admin_kubeconfig   # system:masters
        ...

Every process's output is kept in ``workdir/logs/NAME.log``; on a start failure the
error carries the log's tail. :meth:`stop` leaves no process behind.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # the PKI needs `cryptography` (the demo and test extras), not the CLI
    from .pki import Pair

KUBERNETES_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.3"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# A /16 as clusters have (kubeadm's default is 10.96.0.0/12): a /24 ran out of Service
# IPs at 254 services in the churn on this control plane ("range is full").
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the first address of the range: the `kubernetes` Service
ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMISSION = ("NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultTolerationSeconds,"
             "Priority,NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
             "ResourceQuota")
CONTROLLERS = "*"  # every default controller (deployment, replicaset, job, garbage
# collector, namespace, serviceaccount(-token), disruption, node lifecycle, ...)


def cache_root() -> Path:
    """The project's build cache outside the checkout: ``$LLMOP_CACHE`` or
    ``~/.cache/llm-operator`` (the tools/build_*.sh scripts use the same)."""
    return Path(os.environ.get("LLMOP_CACHE") or Path.home() / ".cache" / "llm-operator")


def cache_dir() -> Path:
    """Where ``tools/setup.sh --cluster`` puts the binaries (keyed by version)."""
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}" / "bin"


def binaries_present(bin_dir: Path | None = None) -> bool:
    """True when every control-plane binary is built."""
    d = bin_dir or cache_dir()
    return all((d / b).is_file() and os.access(d / b, os.X_OK) for b in BINARIES)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 below Linux's ephemeral range (32768-60999 by
    default), so that no outgoing connection takes it before the server binds it (the
    control plane opens many: a port the OS handed out as free was seen taken that way)."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000 on 127.0.0.1")


def kubeconfig(server: str, ca: Path, user: str, *, client: Pair | None = None,
               token: str | None = None) -> str:
    """A kubeconfig (YAML) for ``user`` by client certificate or bearer token."""
    creds: dict[str, str] = {}
    if client is not None:
        creds = {"client-certificate": str(client.cert), "client-key": str(client.key)}
    if token is not None:
        creds = {"token": token}
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {
            "server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
    }, sort_keys=False)


@dataclass
class Component:
    """One control-plane process and its log."""

    name: str
    args: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    env: dict[str, str] | None = None  # added to this process's environment

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"\n==== start {self.starts + 1}: {' '.join(self.args)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env={**os.environ, **self.env} if self.env else None)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler in ``workdir``."""

    workdir: Path
    bin_dir: Path | None = None
    out: Callable[[str], None] | None = None
    components: dict[str, Component] = field(default_factory=dict)
    # Where the API server listens. Loopback unless real nodes run pods in containers:
    # those reach it from their own network namespaces, on the node bridge's gateway
    # address (:mod:`.nodes`), and then the `kubernetes` Service gets that endpoint.
    host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).absolute()
        self.bin = self.bin_dir or cache_dir()
        self.etcd_port = free_port()
        self.peer_port = free_port()
        self.port = free_port()
        self.url = f"https://{self.host}:{self.port}"
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self._started = False

    # ---------------------------------------------------------------- life cycle
    def say(self, text: str) -> None:
        line = f"[local-cluster] {text}"
        if self.out is not None:
            self.out(line)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def start(self, timeout: float = 120) -> LocalCluster:
        """Generate the PKI, start the four processes in order and wait until the API
        server is ready and the built-in objects (default namespace, ServiceAccount
        token signing, RBAC bootstrap) are there."""
        if not binaries_present(self.bin):
            raise RuntimeError(f"the control-plane binaries are not in {self.bin}: run "
                               "`bash tools/setup.sh --cluster` (builds them once)")
        if self._started:
            return self
        self._started = True
        t0 = time.monotonic()
        try:
            self._pki()
            self._define()
            self.components["etcd"].start()
            self._wait(lambda: self._etcd_healthy(), 30, "etcd")
            self.components["kube-apiserver"].start()
            self._wait(self.ready, timeout, "kube-apiserver /readyz")
            self.components["kube-controller-manager"].start()
            self.components["kube-scheduler"].start()
            self._wait(self._default_service_account, 60,
                       "the serviceaccount controller (default/default)")
        except BaseException:
            self.stop()
            raise
        self.say(f"Kubernetes {KUBERNETES_VERSION} up at {self.url} in "
                 f"{time.monotonic() - t0:.1f} s; admin kubeconfig {self.admin_kubeconfig}")
        return self

    def stop(self) -> None:
        """Stop every process (reverse order); idempotent."""
        for name in reversed(BINARIES):
            comp = self.components.get(name)
            if comp is not None:
                comp.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def restart(self, name: str, down_seconds: float = 0.0, timeout: float = 90) -> None:
        """Stop one component (``etcd``, ``kube-apiserver``, ...), stay down for
        ``down_seconds``, start it again and wait until the API server is ready."""
        comp = self.components[name]
        comp.stop()
        time.sleep(down_seconds)
        comp.start()
        self._wait(self.ready, timeout, f"kube-apiserver /readyz after restarting {name}")

    def pids(self) -> list[int]:
        """The pids of the running components."""
        return [c.proc.pid for c in self.components.values() if c.proc and c.alive()]

    def logs(self) -> Path:
        return self.workdir / "logs"

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One JSON request to the API server as the admin (``path`` from ``/api`` or
        ``/apis``); raises ``urllib.error.HTTPError`` on an error status."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10, context=self._admin_ssl) as r:
            return json.loads(r.read())

    # ---------------------------------------------------------------- readiness
    def ready(self) -> bool:
        """``GET /readyz`` answers 200 (as the admin)."""
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=5,
                                        context=self._admin_ssl) as r:
                return int(r.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health",
                                        timeout=3) as r:
                return b'"true"' in r.read()
        except (urllib.error.URLError, OSError):
            return False

    def _default_service_account(self) -> bool:
        req = urllib.request.Request(
            f"{self.url}/api/v1/namespaces/default/serviceaccounts/default")
        try:
            with urllib.request.urlopen(req, timeout=5, context=self._admin_ssl) as r:
                return int(r.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def _wait(self, probe: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [c for c in self.components.values() if c.proc is not None and not c.alive()]
            if dead:
                c = dead[0]
                raise RuntimeError(f"{c.name} exited while waiting for {what}; its log "
                                   f"({c.log}) ends:\n{c.tail()}")
            if probe():
                return
            time.sleep(0.3)
        tails = "\n".join(f"--- {c.name}:\n{c.tail(15)}" for c in self.components.values())
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")

    # ---------------------------------------------------------------- set-up
    def _pki(self) -> None:
        from .pki import Pki

        pki_dir = self.workdir / "pki"
        if pki_dir.exists():
            shutil.rmtree(pki_dir)
        pki = self.pki = Pki(pki_dir)
        self.ca = pki.ca
        # The API server's client certificate for the kubelets' logs, exec, port-forward.
        self.kubelet_client = pki.issue("apiserver-kubelet-client",
                                        "kube-apiserver-kubelet-client", ("system:masters",))
        self.serving = pki.issue("apiserver", "kube-apiserver", server=True, hosts=(
            "127.0.0.1", self.host, "localhost", SERVICE_IP, "kubernetes", "kubernetes.default",
            "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"))
        self.sa = pki.service_account_keys()
        clients = {
            "admin": ("kubernetes-admin", ("system:masters",)),
            "controller-manager": ("system:kube-controller-manager", ()),
            "scheduler": ("system:kube-scheduler", ()),
        }
        for name, (cn, orgs) in clients.items():
            pair = pki.issue(name, cn, orgs)
            path = self.workdir / f"{name}.kubeconfig"
            path.write_text(kubeconfig(self.url, self.ca.cert, cn, client=pair))
        self._admin_ssl = ssl.create_default_context(cafile=str(self.ca.cert))
        self._admin_ssl.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))

    def _define(self) -> None:
        b, w, logs = self.bin, self.workdir, self.workdir / "logs"
        etcd_data = w / "etcd"
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        self.components = {
            "etcd": Component("etcd", [
                str(b / "etcd"), "--name=local", f"--data-dir={etcd_data}",
                f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=local={peer}", "--log-level=warn",
                "--unsafe-no-fsync",  # a throwaway store: no fsync on each write
            ], logs / "etcd.log"),
            "kube-apiserver": Component("kube-apiserver", [
                str(b / "kube-apiserver"), f"--etcd-servers={client}",
                f"--bind-address={self.host}", f"--advertise-address={self.host}",
                f"--kubelet-client-certificate={self.kubelet_client.cert}",
                f"--kubelet-client-key={self.kubelet_client.key}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--secure-port={self.port}", f"--cert-dir={w / 'pki'}",
                f"--tls-cert-file={self.serving.cert}",
                f"--tls-private-key-file={self.serving.key}",
                f"--client-ca-file={self.ca.cert}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={self.sa.cert}",
                f"--service-account-signing-key-file={self.sa.key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC", f"--enable-admission-plugins={ADMISSION}",
                "--allow-privileged=true", "--event-ttl=1h", "--v=1",
                # A loopback advertise address the endpoint reconciler refuses (no pod
                # reaches the API through the `kubernetes` Service on the process kubelet);
                # on the node bridge, pods in containers do, through kube-proxy.
                "--endpoint-reconciler-type="
                + ("none" if self.host == "127.0.0.1" else "lease"),
            ], logs / "kube-apiserver.log"),
            "kube-controller-manager": Component("kube-controller-manager", [
                str(b / "kube-controller-manager"),
                f"--kubeconfig={w / 'controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={w / 'controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={w / 'controller-manager.kubeconfig'}",
                "--secure-port=0",  # no serving port: nothing here reads its /metrics
                "--leader-elect=false", f"--controllers={CONTROLLERS}",
                f"--service-account-private-key-file={self.sa.key}",
                f"--root-ca-file={self.ca.cert}", "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={self.ca.cert}",
                f"--cluster-signing-key-file={self.ca.cert.with_suffix('.key')}",
                "--v=1",
            ], logs / "kube-controller-manager.log"),
            "kube-scheduler": Component("kube-scheduler", [
                str(b / "kube-scheduler"), f"--kubeconfig={w / 'scheduler.kubeconfig'}",
                f"--authentication-kubeconfig={w / 'scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={w / 'scheduler.kubeconfig'}",
                "--secure-port=0", "--leader-elect=false", "--v=1",
            ], logs / "kube-scheduler.log"),
        }


# ------------------------------------------------------------------ install the operator
def run_tool(argv: list[str], kubeconfig: Path, *, stdin: str | None = None,
             timeout: float = 180) -> str:
    """Run ``kubectl``/``helm`` with ``KUBECONFIG``; raise with its stderr on failure."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig),
           "KUBECACHEDIR": str(Path(kubeconfig).parent / "kube-cache"),
           "HELM_CACHE_HOME": str(Path(kubeconfig).parent / "helm-cache"),
           "HELM_CONFIG_HOME": str(Path(kubeconfig).parent / "helm-config"),
           "HELM_DATA_HOME": str(Path(kubeconfig).parent / "helm-data")}
    proc = subprocess.run(argv, env=env, input=stdin, text=True, capture_output=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} ... failed ({proc.returncode}): "
                           f"{proc.stderr.strip()[-2000:]}")
    return proc.stdout


@dataclass(frozen=True)
class Installed:
    """The chart's release in the cluster and the operator's own identity."""

    release: str
    namespace: str
    service_account: str
    kubeconfig: Path  # the ServiceAccount's token (TokenRequest): the chart's RBAC applies
    env: dict[str, str]  # the operator container's environment as the chart renders it


def helm_install(cluster: LocalCluster, helm: str, kubectl: str, chart: Path, *,
                 release: str = "llm-operator", namespace: str = "llm-operator",
                 values: dict[str, object] | None = None,
                 token_seconds: int = 4 * 3600) -> Installed:
    """``helm install`` the chart into ``cluster`` (as the admin), then mint a token for
    the chart's ServiceAccount (``kubectl create token``: the TokenRequest API) and write a
    kubeconfig with it, so an operator process run with it has exactly the chart's RBAC.

    ``values`` go to ``helm install -f``; the chart's operator Deployment is usually set
    to ``replicaCount: 0`` here, since no container image can run on this machine: the
    operator runs as a local process with the ServiceAccount's token instead."""
    admin = cluster.admin_kubeconfig
    args = [helm, "install", release, str(chart), "--namespace", namespace,
            "--create-namespace", "--wait", "--timeout", "120s"]
    if values:
        args += ["-f", "-"]
    run_tool(args, admin, stdin=yaml.safe_dump(values) if values else None)
    out = run_tool([kubectl, "get", "serviceaccounts", "-n", namespace, "-l",
                    f"app.kubernetes.io/instance={release}", "-o",
                    "jsonpath={.items[*].metadata.name}"], admin)
    names = out.split()
    if len(names) != 1:
        raise RuntimeError(f"expected one ServiceAccount of release {release}, got {names}")
    token = run_tool([kubectl, "create", "token", names[0], "-n", namespace,
                      f"--duration={token_seconds}s"], admin).strip()
    path = cluster.workdir / f"{release}-operator.kubeconfig"
    path.write_text(kubeconfig(cluster.url, cluster.ca.cert,
                               f"system:serviceaccount:{namespace}:{names[0]}", token=token))
    deployments = json.loads(run_tool(
        [kubectl, "get", "deployments", "-n", namespace, "-l",
         f"app.kubernetes.io/instance={release}", "-o", "json"], admin))["items"]
    env = {e["name"]: str(e["value"]) for d in deployments
           for c in d["spec"]["template"]["spec"]["containers"]
           for e in c.get("env") or [] if "value" in e}
    return Installed(release, namespace, names[0], path, env)


# ------------------------------------------------------------------------------ CLI
def add_parser(sub: object) -> None:
    """Register ``llm-operator cluster`` on the CLI's subparsers."""
    p = sub.add_parser(  # type: ignore[attr-defined]
        "cluster", help="start a REAL Kubernetes control plane on this machine (etcd, "
        "kube-apiserver, controller-manager, scheduler; built by `bash tools/setup.sh "
        "--cluster`) with local GPU nodes, print its kubeconfig, and keep it up until Ctrl-C")
    p.add_argument("--workdir", default=None, help="state and logs (default: a new temp dir)")
    p.add_argument("--gpu-nodes", type=int, default=2, help="GPU nodes (8 GPUs each)")
    p.add_argument("--gpu-product", default="NVIDIA-L4",
                   help="value of the GPU product label on the GPU nodes")
    p.add_argument("--gpu-label", default="nvidia.com/gpu.product",
                   help="the label naming the product (GFD's; GKE: "
                        "cloud.google.com/gke-accelerator)")
    p.add_argument("--vllm-python", default=None,
                   help="Python with vLLM for the pods (default: .venv-vllm/bin/python)")
    p.add_argument("--for-seconds", type=float, default=None,
                   help="stop after this long instead of waiting for Ctrl-C")
    p.set_defaults(func=_cmd_cluster)


def _cmd_cluster(args: object) -> int:
    import signal
    import tempfile

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds the `with`: every component stops

    signal.signal(signal.SIGTERM, terminate)

    from .kubelet import LocalKubelet, gpu_nodes

    a = vars(args)
    workdir = Path(a["workdir"] or tempfile.mkdtemp(prefix="llmop-cluster-"))
    vllm_python = Path(a["vllm_python"] or Path.cwd() / ".venv-vllm" / "bin" / "python")
    nodes = gpu_nodes(a["gpu_label"], a["gpu_product"], count=a["gpu_nodes"])
    with LocalCluster(workdir) as cluster, LocalKubelet(
            cluster.admin_kubeconfig, nodes, workdir / "kubelet", vllm_python=vllm_python):
        sys.stdout.write(f"export KUBECONFIG={cluster.admin_kubeconfig}\n"
                         f"# logs: {cluster.logs()}; Ctrl-C stops every process\n")
        sys.stdout.flush()
        try:
            if a["for_seconds"] is not None:
                time.sleep(float(a["for_seconds"]))
            else:
                while all(c.alive() for c in cluster.components.values()):
                    time.sleep(1)
                sys.stderr.write("a component exited: see its log\n")
                return 1
        except KeyboardInterrupt:
            pass
    return 0

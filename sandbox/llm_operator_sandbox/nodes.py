"""REAL nodes for the REAL control plane (:mod:`.cluster`): Kubernetes' own kubelet and
kube-proxy (built from the same Go module), containerd and runc (Debian's packages), a
CNI bridge (Debian's plugins), and an OCI registry that requires a login
(``distribution``, built from its Go module), all on this machine. Pods run in
containers from images built here (``tools/build_images.sh``), pulled by containerd from
the registry with the pod's ``imagePullSecrets``, exactly as rendered: nothing in a pod
is rewritten, unlike the process kubelet (:mod:`.kubelet`).

Use::

    with NodeNetwork() as net, LocalCluster(workdir, host=net.gateway) as cluster, \\
            RealNodes(cluster, workdir / "nodes") as nodes:
        image = nodes.registry.push("localhost/llm-operator:src-...", "llm-operator")
        ...

What differs from a GPU cluster, and why:

- **GPUs**: there are none. A device plugin (``tools/device-plugin``, on the kubelet's
  device-plugin API as NVIDIA's plugin is) registers 8 stand-in ``nvidia.com/gpu`` with
  the kubelet, which advertises them in the node's capacity, admits pods against them and
  allocates them per container (``NVIDIA_VISIBLE_DEVICES`` names the IDs, as NVIDIA's
  plugin sets it); the node carries the label NVIDIA's GPU feature discovery sets
  (``nvidia.com/gpu.product``), so the scheduler places GPU pods for real. No device is
  mounted into them. The plugin registers again when the kubelet restarts.
- **Further nodes on the same machine** (:class:`JoinedNode`): each with its own bridge
  and pod subnet, containerd, kubelet (in a mount namespace of its own, where its
  device-plugin folder is its own), cgroup root and pod-log folder; one CoreDNS and one
  kube-proxy serve every node's pods from the host, and the host routes between the
  bridges. The nodes tier joins ``node-2`` for the tests that need a pod on a second node.
- **The machine's state**: the kubelet sets ``vm.overcommit_memory``, ``kernel.panic``
  and ``kernel.panic_on_oops`` (unless ``protectKernelDefaults``), the bridge plugin
  ``net.ipv4.ip_forward``, kube-proxy and the kubelet add iptables chains, and both
  write under ``/var/lib/kubelet`` and ``/var/log``. :class:`HostState` records all of
  it at the start and :meth:`RealNodes.stop` puts it back, with the cgroups, mounts and
  network namespaces the pods left.
- **Cluster DNS**: CoreDNS, built from its Go module, runs on the host and listens on
  the bridge's gateway (the kubelet's ``clusterDNS``), as kube-proxy runs on the host
  here; a cluster runs it as a Deployment behind the ``kube-dns`` Service. Pods resolve
  ``NAME.NAMESPACE.svc.cluster.local`` to the Service's cluster IP either way.
- **No traffic leaves the machine**: the bridges have no masquerade and no uplink; the API
  server, the registry and every pod listen on loopback or on a bridge.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from .cluster import SERVICE_CIDR, Component, LocalCluster, cache_root, free_port, kubeconfig

POD_SUBNET = "10.244.0.0/24"
GATEWAY = "10.244.0.1"  # the bridge's address: the node IP, the API server's on this tier
POD_CIDR = "10.244.0.0/16"  # every node's pod subnet: node N has 10.244.N.0/24 on llmopN
CLUSTER_DOMAIN = "cluster.local"  # CoreDNS (on the gateway) answers for it
CNI_BIN = Path("/usr/lib/cni")
CONTAINERD = "/usr/bin/containerd"
CTR = "/usr/bin/ctr"
SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops",
           "net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables")
HOST_PATHS = (Path("/var/lib/kubelet"), Path("/var/log/containers"), Path("/var/log/pods"))
CGROUP_ROOT = Path("/sys/fs/cgroup")
PAUSE_IMAGE = "localhost/llmop/pause:3.10"
GPU_RESOURCE = "nvidia.com/gpu"
# runc, the shim, iptables and mount are found on PATH, where /usr/sbin may be missing.
SBIN_PATH = {"PATH": os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"}


@dataclass(frozen=True)
class NodeAddress:
    """Where node ``index``'s pods live: its bridge ``llmopN``, pod subnet 10.244.N.0/24
    and gateway 10.244.N.1, the node's IP (node 0's is the API server's address too).
    The host routes between the bridges, as a cluster's network routes between nodes."""

    index: int = 0

    @property
    def bridge(self) -> str:
        return f"llmop{self.index}"

    @property
    def subnet(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def gateway(self) -> str:
        return f"10.244.{self.index}.1"


def add_bridge(net: NodeAddress) -> None:
    run(["ip", "link", "del", net.bridge], check=False)
    run(["ip", "link", "add", net.bridge, "type", "bridge"])
    run(["ip", "addr", "add", f"{net.gateway}/{net.subnet.split('/')[1]}", "dev", net.bridge])
    run(["ip", "link", "set", net.bridge, "up"])


def remove_bridges() -> None:
    """Every node's bridge (``llmop0``, ``llmop1``, ...)."""
    for link in Path("/sys/class/net").iterdir():
        if link.name.startswith("llmop") and link.name[5:].isdigit():
            run(["ip", "link", "del", link.name], check=False)


def images_store() -> Path:
    """Where ``tools/build_images.sh`` keeps its images (buildah's store)."""
    return cache_root() / "images"


def buildah() -> list[str]:
    store = images_store()
    return ["buildah", "--root", str(store / "storage"), "--runroot", str(store / "run"),
            "--storage-driver", "overlay"]


def built_images() -> dict[str, str]:
    """The images of the last ``tools/build_images.sh`` run: ``base``, ``pause`` and
    ``operator`` -> local name; ``vllm`` too once ``build_images.sh --vllm`` built it."""
    lines = (images_store() / "built.txt").read_text().split()
    images = dict(zip(("base", "pause", "operator"), lines, strict=True))
    vllm = images_store() / "vllm.txt"
    if vllm.exists():
        images["vllm"] = vllm.read_text().strip()
    return images


def run(argv: list[str], *, check: bool = True, timeout: float = 300,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=stdin,
                          env={**os.environ, **SBIN_PATH})
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc


# ------------------------------------------------------------------ the machine's state
@dataclass
class HostState:
    """What the nodes change on the machine, recorded before and put back after."""

    sysctls: dict[str, str] = field(default_factory=dict)
    iptables: dict[str, str] = field(default_factory=dict)
    absent_paths: list[Path] = field(default_factory=list)
    netns: set[str] = field(default_factory=set)

    @classmethod
    def record(cls) -> HostState:
        state = cls()
        for key in SYSCTLS:
            p = Path("/proc/sys") / key
            if p.exists():
                state.sysctls[key] = p.read_text().strip()
        for tool in ("iptables", "ip6tables"):
            if shutil.which(f"{tool}-save", path=SBIN_PATH["PATH"]):
                state.iptables[tool] = run([f"{tool}-save"]).stdout
        state.absent_paths = [p for p in HOST_PATHS if not p.exists()]
        state.netns = set(os.listdir("/run/netns")) if Path("/run/netns").is_dir() else set()
        return state

    def restore(self) -> list[str]:
        """Put everything back; returns what could not be (for the log)."""
        failed: list[str] = []
        for key, value in self.sysctls.items():
            p = Path("/proc/sys") / key
            try:
                if p.read_text().strip() != value:
                    p.write_text(value)
            except OSError as e:
                failed.append(f"sysctl {key}: {e}")
        for tool, saved in self.iptables.items():
            saved_tables = {line[1:].strip() for line in saved.splitlines()
                            if line.startswith("*")}
            for table in ("filter", "nat", "mangle", "raw"):
                if table not in saved_tables:  # created by the nodes: empty it
                    run([tool, "-t", table, "-F"], check=False)
                    run([tool, "-t", table, "-X"], check=False)
            proc = run([f"{tool}-restore"], stdin=saved, check=False)
            if proc.returncode != 0:
                failed.append(f"{tool}-restore: {proc.stderr.strip()}")
        for p in self.absent_paths:
            unmount_under(p)
            shutil.rmtree(p, ignore_errors=True)
        if Path("/run/netns").is_dir():
            for name in set(os.listdir("/run/netns")) - self.netns:
                if name.startswith("cni-"):
                    run(["ip", "netns", "delete", name], check=False)
        return failed


# What a run changed, kept while it runs, so that the next run puts the machine back
# first when this one was killed before its own clean-up (a Ctrl-C twice, a CI timeout):
# /run is emptied on reboot, as the sysctls and mounts themselves are.
STATE_FILE = Path("/run/llmop-nodes/host-state.json")


def save_state(state: HostState, roots: list[Path]) -> None:
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    STATE_FILE.write_text(json.dumps({
        "sysctls": state.sysctls, "iptables": state.iptables,
        "absent_paths": [str(p) for p in state.absent_paths], "netns": sorted(state.netns),
        "roots": [str(r) for r in roots]}))


def recover_interrupted_run(say: Callable[[str], None] | None = None) -> list[str]:
    """Undo what a killed run left: its containers' processes (every process in the
    kubelet's cgroups), its components (by their working directories), its mounts, the
    cgroups, the bridge, the pods' network namespaces, iptables and sysctls."""
    if not STATE_FILE.exists():
        return []
    saved = json.loads(STATE_FILE.read_text())
    roots = [Path(r) for r in saved.get("roots", [])]
    if say:
        say(f"putting back what an interrupted run left ({', '.join(map(str, roots))})")
    tops = ["kubepods", *joined_cgroup_roots()]
    for hierarchy in CGROUP_ROOT.iterdir():
        for top in tops:
            for procs in (hierarchy / top).rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    for pid in procs.read_text().split():
                        os.kill(int(pid), signal.SIGKILL)
    for root in roots:
        run(["pkill", "-KILL", "-f", str(root)], check=False)
    time.sleep(1)
    for root in roots:
        unmount_under(root)
    for top in tops:
        remove_cgroups(top)
    remove_bridges()
    state = HostState(sysctls=saved["sysctls"], iptables=saved["iptables"],
                      absent_paths=[Path(p) for p in saved["absent_paths"]],
                      netns=set(saved["netns"]))
    failed = state.restore()
    STATE_FILE.unlink()
    return failed


def unmount_under(root: Path) -> None:
    """Unmount every mount at or under ``root``, deepest first (lazily: a pod's mount may
    still be busy for a moment after its processes died)."""
    prefix = str(root.absolute())
    for _ in range(3):  # the kubelet's root is rshared: a lazy unmount of a parent may
        mounts = []     # leave a propagated copy of a child behind for the next pass
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].replace("\\040", " ")
                if point == prefix or point.startswith(prefix + "/"):
                    mounts.append(point)
        if not mounts:
            return
        for point in sorted(set(mounts), key=len, reverse=True):
            run(["umount", "-l", point], check=False)


JOINED_CGROUP_PREFIX = "llmop-"  # a joined node's cgroupRoot: /llmop-NAME


def joined_cgroup_roots() -> list[str]:
    """The cgroup roots of joined nodes (:class:`JoinedNode`) present in any hierarchy."""
    return sorted({d.name for h in CGROUP_ROOT.iterdir() if h.is_dir()
                   for d in h.iterdir() if d.is_dir()
                   and d.name.startswith(JOINED_CGROUP_PREFIX)})


def remove_cgroups(name: str = "kubepods") -> None:
    """Remove the kubelet's cgroup tree in every v1 hierarchy, leaves first."""
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / name
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


class NodeNetwork:
    """The nodes' bridge ``llmop0`` with the gateway address (made before the API server
    starts, since the API server listens on it), and the machine state recorded."""

    def __init__(self, gateway: str = GATEWAY, subnet: str = POD_SUBNET,
                 roots: tuple[Path, ...] = ()) -> None:
        """``roots``: the directories the control plane and the nodes run from and mount
        under, which a later run cleans up if this one is killed."""
        self.gateway = gateway
        self.subnet = subnet
        self.roots = [Path(r).absolute() for r in roots]
        self.state: HostState | None = None

    def start(self) -> NodeNetwork:
        if os.geteuid() != 0:
            raise RuntimeError("real nodes need root (containerd, the kubelet, iptables)")
        recover_interrupted_run(print)
        self.state = HostState.record()
        save_state(self.state, self.roots)
        add_bridge(NodeAddress(0))
        # Pod -> Service -> pod on the same bridge goes through kube-proxy's rules only
        # when bridged traffic meets iptables (kubeadm's preflight asks for the same).
        nf = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
        if nf.exists():  # absent where br_netfilter is not loaded: pod -> pod via Service
            nf.write_text("1")  # on one bridge then bypasses kube-proxy (not used here)
        return self

    def stop(self) -> list[str]:
        remove_bridges()
        failed = self.state.restore() if self.state else []
        STATE_FILE.unlink(missing_ok=True)
        return failed

    def __enter__(self) -> NodeNetwork:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------ the registry
class Registry:
    """An OCI registry (``distribution``) on loopback over TLS (the cluster's CA) that
    requires a login (htpasswd, bcrypt): a pull without the pod's pull secret is
    refused, as on a private registry."""

    def __init__(self, workdir: Path, cluster: LocalCluster, binary: Path) -> None:
        self.dir = Path(workdir)
        self.cluster = cluster
        self.binary = binary
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.user = "llmop"
        self.password = secrets.token_hex(12)
        self.component: Component | None = None

    def start(self) -> Registry:
        self.dir.mkdir(parents=True, exist_ok=True)
        serving = self.cluster.pki.issue("registry", "registry", server=True,
                                         hosts=("127.0.0.1", "localhost"))
        htpasswd = run(["htpasswd", "-Bbn", self.user, self.password]).stdout
        (self.dir / "htpasswd").write_text(htpasswd)
        self.certs = self.dir / "certs"  # buildah's --cert-dir: the CA as ca.crt
        self.certs.mkdir(exist_ok=True)
        shutil.copy(self.cluster.ca.cert, self.certs / "ca.crt")
        config = {
            "version": 0.1, "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(self.dir / "data")},
                        "delete": {"enabled": True}},
            "http": {"addr": self.host, "secret": secrets.token_hex(16),
                     "tls": {"certificate": str(serving.cert), "key": str(serving.key)}},
            "auth": {"htpasswd": {"realm": "llmop-local", "path": str(self.dir / "htpasswd")}},
        }
        path = self.dir / "config.yml"
        path.write_text(yaml.safe_dump(config))
        self.component = Component("registry", [str(self.binary), "serve", str(path)],
                                   self.dir / "registry.log",
                                   env={"OTEL_TRACES_EXPORTER": "none"})
        self.component.start()
        ctx = ssl.create_default_context(cafile=str(self.cluster.ca.cert))
        wait(lambda: _status(f"https://{self.host}/v2/", ctx) == 401, 30,
             "the registry to answer /v2/ with 401", self.component)
        return self

    def stop(self) -> None:
        if self.component:
            self.component.stop()

    def push(self, local: str, repository: str, *, compression: str = "gzip") -> str:
        """Push a built image (buildah's store) as ``repository`` (with ``local``'s tag);
        returns the reference with its digest, ``HOST/REPO:TAG@sha256:...``.
        ``compression="zstd"`` for the vLLM image: measured here, 54 s on 2 cores and 3.1
        GB in the registry for the 6.7 GB image, 59-76 s for the 6.5 GB one without
        Triton (2026-12-07, 5 runs; bound by compression), where uncompressed layers
        take the image's size (gzip not measured). The machine's disk is CI's too: it
        ran out there (2026-12-06)."""
        tag = local.rsplit(":", 1)[1]
        ref = f"{self.host}/{repository}:{tag}"
        digest_file = self.dir / "digest"
        run([*buildah(), "push", "--quiet", "--creds", f"{self.user}:{self.password}",
             "--cert-dir", str(self.certs), "--digestfile", str(digest_file),
             "--compression-format", compression,
             local, f"docker://{ref}"], timeout=900)
        return f"{ref}@{digest_file.read_text().strip()}"

    def pull_secret(self, name: str = "regcred") -> dict[str, Any]:
        """A ``kubernetes.io/dockerconfigjson`` Secret with this registry's login."""
        import base64
        auth = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        cfg = {"auths": {self.host: {"username": self.user, "password": self.password,
                                     "auth": auth}}}
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                "type": "kubernetes.io/dockerconfigjson",
                "stringData": {".dockerconfigjson": json.dumps(cfg)}}


# ------------------------------------------------------------------ containerd
class Containerd:
    """containerd with its CRI plugin, runc and the CNI bridge, all state under
    ``workdir``. The registry is trusted through its CA (``certs.d``), never logged in
    to: credentials come from each pod's pull secret through the kubelet."""

    def __init__(self, workdir: Path, registry: Registry, net: NodeAddress | None = None
                 ) -> None:
        self.dir = Path(workdir)
        self.registry = registry
        self.net = net or NodeAddress()
        self.socket = self.dir / "containerd.sock"
        self.component: Component | None = None

    def start(self) -> Containerd:
        d = self.dir
        (d / "net.d").mkdir(parents=True, exist_ok=True)
        hosts = d / "certs.d" / self.registry.host
        hosts.mkdir(parents=True, exist_ok=True)
        # The CA for the host entry and for `server` too: on a 404 from the host entry
        # containerd falls back to `server`, which without the CA would turn "not found"
        # into "certificate signed by unknown authority".
        ca = self.registry.cluster.ca.cert
        (hosts / "hosts.toml").write_text(
            f'server = "https://{self.registry.host}"\n'
            f'ca = "{ca}"\n\n'
            f'[host."https://{self.registry.host}"]\n'
            f'  capabilities = ["pull", "resolve"]\n'
            f'  ca = "{ca}"\n')
        (d / "net.d" / "10-llmop.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "llmop", "plugins": [
                {"type": "bridge", "bridge": self.net.bridge, "isGateway": True,
                 "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(d / "ipam"),
                          "ranges": [[{"subnet": self.net.subnet,
                                       "gateway": self.net.gateway}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        (d / "config.toml").write_text(f"""version = 2
root = "{d / 'root'}"
state = "{d / 'state'}"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # This machine's capability bounding set lacks CAP_SYS_RESOURCE: runc could not
  # lower a container's oom_score_adj below its parent's, and every sandbox would fail.
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    # A pulled layer's blob goes once it is unpacked into the snapshot, as kubespray sets
    # it: the vLLM image would otherwise sit twice in containerd (3.1 GB zstd + 6.7 GB).
    discard_unpacked_layers = true
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's state per containerd: two nodes' containerds never share it
        Root = "{d / 'runc'}"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{d / 'net.d'}"
  [{cri}.registry]
    config_path = "{d / 'certs.d'}"
""")
        self.component = Component("containerd", [CONTAINERD, "--config",
                                                  str(d / "config.toml")],
                                   d / "containerd.log", env=SBIN_PATH)
        self.component.start()
        wait(lambda: self.ctr("version", check=False).returncode == 0, 30,
             "containerd's socket", self.component)
        # The pause image is loaded, not pulled, as node images preload it.
        # Once here (2026-12-07) containerd answered the import "content digest ...: not
        # found" on a fresh root, and the next session's node started: the archive is
        # written again and imported once more before the node gives up.
        archive = d / "pause.tar"
        for attempt in (1, 2):
            archive.unlink(missing_ok=True)
            run([*buildah(), "push", "--quiet", PAUSE_IMAGE,
                 f"oci-archive:{archive}:{PAUSE_IMAGE}"])
            imported = self.ctr("images", "import", "--index-name", PAUSE_IMAGE, str(archive),
                                check=attempt == 2)
            if imported.returncode == 0:
                break
            sys.stderr.write("containerd refused the pause image "
                             f"({imported.stderr.strip()[-300:]}); importing it again\n")
        return self

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run([CTR, "--address", str(self.socket), "-n", "k8s.io", *args], check=check)

    def stop(self) -> None:
        if self.component is None:
            return
        if self.component.alive():  # the pods' processes: containers outlive the kubelet
            tasks = self.ctr("tasks", "ls", "-q", check=False).stdout.split()
            for t in tasks:
                self.ctr("tasks", "kill", "-s", "SIGKILL", t, check=False)
            deadline = time.monotonic() + 20
            while tasks and time.monotonic() < deadline:
                time.sleep(0.5)
                states = self.ctr("tasks", "ls", check=False).stdout
                if "RUNNING" not in states:
                    break
        self.component.stop()
        # The shims outlive containerd: end those of this socket.
        for pid in _pids_with(f"-address {self.socket}"):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)


def _pids_with(needle: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if needle in cmd:
                    found.append(int(entry.name))
    return found


# ------------------------------------------------------------------ kubelet, kube-proxy
@dataclass(frozen=True)
class RealNodeSpec:
    """One real node: its name, labels and the GPUs its status advertises."""

    name: str = "node-1"
    gpus: int = 8
    labels: dict[str, str] = field(default_factory=lambda: {
        "nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.present": "true"})


class RealNodes:
    """The registry, containerd, one kubelet and kube-proxy against ``cluster`` (whose
    API server must listen on the bridge: ``LocalCluster(host=GATEWAY)``)."""

    def __init__(self, cluster: LocalCluster, workdir: Path,
                 node: RealNodeSpec | None = None,
                 out: Callable[[str], None] | None = None) -> None:
        self.cluster = cluster
        self.dir = Path(workdir).absolute()
        self.node = node or RealNodeSpec()
        self.out = out
        self.bin = cluster.bin
        registry_bin = registry_binary()
        self.registry = Registry(self.dir / "registry", cluster, registry_bin)
        self.containerd = Containerd(self.dir / "containerd", self.registry)
        self.kubelet: Component | None = None
        self.proxy: Component | None = None
        self.dns: Component | None = None
        self.plugin: Component | None = None

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's ``--root-dir`` (its pods' volumes, its ``plugins_registry``)."""
        return self.dir / "kubelet" / "root"

    def say(self, text: str) -> None:
        if self.out:
            self.out(f"[real-nodes] {text}")

    def start(self, timeout: float = 120) -> RealNodes:
        if self.cluster.host == "127.0.0.1":
            raise RuntimeError("real nodes need the API server on the bridge: "
                               "LocalCluster(..., host=NodeNetwork().gateway)")
        t0 = time.monotonic()
        try:
            self.registry.start()
            self.containerd.start()
            self._dns()
            self._kubelet()
            wait(self.node_ready, timeout, f"node {self.node.name} Ready", self.kubelet)
            self._advertise_gpus()
            self._proxy()
            wait(self._services_routed, 60, "kube-proxy's rules for the `kubernetes` "
                 "Service", self.proxy)
        except BaseException:
            self.stop()
            raise
        self.say(f"node {self.node.name} Ready with containerd, runc, the CNI bridge, CoreDNS and "
                 f"kube-proxy in {time.monotonic() - t0:.1f} s; registry {self.registry.host}")
        return self

    def __enter__(self) -> RealNodes:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        for comp in (self.proxy, self.plugin, self.kubelet, self.dns):
            if comp is not None:
                comp.stop()
        self.containerd.stop()
        self.registry.stop()
        unmount_under(self.dir)
        remove_cgroups()
        # The image stores (the registry's blobs and containerd's snapshots: about 10 GB
        # once the vLLM image ran), not the logs: a later run starts empty anyway.
        for store in (self.registry.dir / "data", self.containerd.dir / "root"):
            shutil.rmtree(store, ignore_errors=True)

    def stop_kubelet(self) -> None:
        """Stop the node's kubelet (SIGTERM), as when its service dies: containerd and the
        containers it started keep running; the node stops reporting to the API server."""
        if self.kubelet is not None:
            self.kubelet.stop()
        self.say(f"kubelet of {self.node.name} stopped")

    def start_kubelet(self, timeout: float = 120) -> None:
        """Start the same kubelet again (its config, root dir, certificates and ports) and
        wait for the node to report Ready."""
        assert self.kubelet is not None, "start() the node first"
        registered = self.plugin_registrations()
        self.kubelet.start()
        wait(self.node_ready, timeout, f"node {self.node.name} Ready again", self.kubelet)
        # The restarted kubelet removed the plugin's socket: the plugin serves and registers
        # again, and the kubelet counts the GPUs allocatable again.
        if self.node.gpus:
            wait(lambda: self.plugin_registrations() > registered and self._gpus_allocatable(),
                 60, f"the device plugin's new registration and {GPU_RESOURCE} allocatable "
                 f"on {self.node.name} again", self.plugin)
        self.say(f"kubelet of {self.node.name} back, node Ready")

    # ------------------------------------------------------------ pieces
    def _dns(self, timeout: float = 60) -> None:
        """CoreDNS (built by tools/build_images.sh) serving ``cluster.local`` from the API
        server on the bridge's gateway, port 53: the nameserver the kubelet writes into
        every pod's resolv.conf (``clusterDNS``). It runs on the host, as kube-proxy does
        here, not as the usual Deployment behind the ``kube-dns`` Service; its rights are
        those of kubeadm's ``system:coredns`` ClusterRole."""
        d = self.dir / "coredns"
        d.mkdir(parents=True, exist_ok=True)
        user = "system:coredns"
        for kind, body in (("clusterroles", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": user},
                "rules": [{"apiGroups": [""], "resources": ["services", "pods", "namespaces"],
                           "verbs": ["list", "watch"]},
                          {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                           "verbs": ["list", "watch"]}]}), ("clusterrolebindings", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": user},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": user},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": user}]})):
            try:
                self._api("POST", f"/apis/rbac.authorization.k8s.io/v1/{kind}", body)
            except urllib.error.HTTPError as e:
                if e.code != 409:  # already there (a second start)
                    raise
        client = self.cluster.pki.issue("coredns", user)
        kc = d / "coredns.kubeconfig"
        kc.write_text(kubeconfig(self.cluster.url, self.cluster.ca.cert, user, client=client))
        ready = free_port()
        corefile = d / "Corefile"
        corefile.write_text(f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {GATEWAY}
    ready 127.0.0.1:{ready}
    errors
    loadbalance
    cache 30
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kc}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
}}
.:53 {{
    bind {GATEWAY}
    errors
    cache 30
    forward . /etc/resolv.conf
}}
""")
        self.dns = Component("coredns", [str(coredns_binary()), "-conf", str(corefile)],
                             d / "coredns.log")
        self.dns.start()
        ctx = ssl.create_default_context()  # unused by plain http; _status's signature
        wait(lambda: _status(f"http://127.0.0.1:{ready}/ready", ctx) == 200, timeout,
             "CoreDNS ready (its kubernetes plugin synced)", self.dns)

    def _kubelet(self) -> None:
        self.kubelet = kubelet_component(self.cluster, self.node, self.dir / "kubelet",
                                         self.containerd)
        self.kubelet.start()

    def _proxy(self) -> None:
        d = self.dir / "kube-proxy"
        d.mkdir(parents=True, exist_ok=True)
        pki = self.cluster.pki
        client = pki.issue("kube-proxy", "system:kube-proxy", ("system:node-proxier",))
        kc = d / "kube-proxy.kubeconfig"
        kc.write_text(kubeconfig(self.cluster.url, self.cluster.ca.cert, "system:kube-proxy",
                                 client=client))
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration", "mode": "iptables",
            "clientConnection": {"kubeconfig": str(kc)},
            "hostnameOverride": self.node.name, "clusterCIDR": POD_CIDR,
            "bindAddress": "127.0.0.1",
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            # no sysctl writes for conntrack: the machine's table is large enough
            "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            "iptables": {"localhostNodePorts": False},
            "nodePortAddresses": [f"{GATEWAY}/32"],
        }
        cfg = d / "config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        self.proxy = Component("kube-proxy", [str(self.bin / "kube-proxy"), f"--config={cfg}",
                                              "--v=1"], d / "kube-proxy.log",
                               env=SBIN_PATH)
        self.proxy.start()

    def _services_routed(self) -> bool:
        out = run(["iptables-save", "-t", "nat"], check=False).stdout
        return "KUBE-SERVICES" in out and "default/kubernetes:https" in out

    def _api(self, method: str, path: str, body: Any = None) -> Any:
        return self.cluster.api(method, path, body)

    def node_ready(self, name: str | None = None) -> bool:
        try:
            node = self._api("GET", f"/api/v1/nodes/{name or self.node.name}")
        except (urllib.error.URLError, OSError):
            return False
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in node.get("status", {}).get("conditions") or [])

    def _advertise_gpus(self) -> None:
        """The device plugin (built by tools/build_images.sh) registers ``nvidia.com/gpu``
        with the kubelet, which puts it in the node's capacity and allocatable."""
        if not self.node.gpus:
            return
        d = self.dir / "device-plugin"
        self.plugin = Component("device-plugin", [
            str(device_plugin_binary()), "-resource", GPU_RESOURCE,
            "-count", str(self.node.gpus)], d / "device-plugin.log")
        self.plugin.start()
        wait(self._gpus_allocatable, 60, f"{GPU_RESOURCE} allocatable on {self.node.name}",
             self.plugin)

    def plugin_registrations(self) -> int:
        """How many times the device plugin registered with a kubelet (its log says)."""
        if self.plugin is None or not self.plugin.log.exists():
            return 0
        return sum(" registered " in line and "with the kubelet" in line
                   for line in self.plugin.log.read_text(errors="replace").splitlines())

    def _gpus_allocatable(self) -> bool:
        return self.gpus_allocatable(self.node)

    def gpus_allocatable(self, node: RealNodeSpec) -> bool:
        got = self._api("GET", f"/api/v1/nodes/{node.name}")
        return str(got["status"].get("allocatable", {}).get(GPU_RESOURCE)) == str(node.gpus)

    def logs(self) -> Iterator[Path]:
        yield from self.dir.rglob("*.log")


def kubelet_component(cluster: LocalCluster, node: RealNodeSpec, d: Path,
                      containerd: Containerd, *, cgroup_root: str | None = None,
                      pod_logs: Path | None = None,
                      wrapper: tuple[str, ...] = ()) -> Component:
    """Kubernetes' kubelet for ``node``, its state under ``d``, on ``containerd``'s socket
    and serving on its node's gateway (``containerd.net``); ``cgroup_root`` and
    ``pod_logs`` (``podLogsDir``) where they are not the machine's; ``wrapper`` runs
    before it (a joined node's own mount namespace)."""
    d.mkdir(parents=True, exist_ok=True)
    pki = cluster.pki
    name = node.name
    address = containerd.net.gateway
    client = pki.issue(f"kubelet-{name}", f"system:node:{name}", ("system:nodes",))
    serving = pki.issue(f"kubelet-{name}-serving", name, server=True, hosts=(address, name))
    kc = d / "kubelet.kubeconfig"
    kc.write_text(kubeconfig(cluster.url, cluster.ca.cert, f"system:node:{name}",
                             client=client))
    port, healthz = free_port(), free_port()
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        # cgroup v1 (this machine's hybrid layout) is deprecated, still served in 1.37.
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"], "oomScoreAdj": 0, "failSwapOn": False,
        "address": address, "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(cluster.ca.cert)}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(serving.cert), "tlsPrivateKeyFile": str(serving.key),
        "containerRuntimeEndpoint": f"unix://{containerd.socket}",
        # CoreDNS listens on the first node's gateway; every node's pods reach it there.
        "clusterDomain": CLUSTER_DOMAIN, "clusterDNS": [GATEWAY],
        "serializeImagePulls": False, "imageGCHighThresholdPercent": 100,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "nodeStatusUpdateFrequency": "5s", "syncFrequency": "10s",
        "fileCheckFrequency": "5s", "maxPods": 30,
    }
    if cgroup_root:
        config["cgroupRoot"] = cgroup_root
    if pod_logs:
        config["podLogsDir"] = str(pod_logs)
    cfg = d / "config.yaml"
    cfg.write_text(yaml.safe_dump(config))
    labels = ",".join(f"{k}={v}" for k, v in node.labels.items())
    return Component("kubelet", [
        *wrapper, str(cluster.bin / "kubelet"), f"--config={cfg}", f"--kubeconfig={kc}",
        f"--root-dir={d / 'root'}", f"--cert-dir={d / 'pki'}",
        f"--hostname-override={name}", f"--node-ip={address}",
        f"--node-labels={labels}", "--v=1",
    ], d / "kubelet.log", env=SBIN_PATH)


# The kubelet's device-plugin folder: fixed, whatever --root-dir says, and emptied by a
# kubelet when it starts (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1.DevicePluginPath).
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")


class JoinedNode:
    """A further real node on this machine, beside :class:`RealNodes`' first one, as a
    second machine would join a cluster: its own bridge and pod subnet
    (:class:`NodeAddress` ``index``), containerd (its own state, runc root and CNI
    configuration), kubelet and device plugin; it pulls from the first node's registry,
    its pods resolve names through the same CoreDNS and reach Services through the same
    kube-proxy (both serve every bridge from the host).

    What a kubelet keeps per machine is kept apart, so the two never touch each other's
    pods:

    - the device-plugin folder (:data:`DEVICE_PLUGIN_DIR`, fixed, emptied at start): the
      kubelet runs in a mount namespace of its own (``unshare --mount``) where a folder of
      this node's is bound over it; its device plugin registers there;
    - the pods' mounts: the kubelet's root dir is made a shared mount before, so what the
      kubelet mounts in its namespace (Secrets, projected tokens, emptyDirs) propagates to
      the host, where containerd starts the containers;
    - the ``kubepods`` cgroups: ``cgroupRoot`` is ``/llmop-NAME``, since a kubelet kills
      the processes of pod cgroups it does not know under its own root;
    - the pods' logs: ``podLogsDir`` is a folder of this node's, since a kubelet removes
      the log folders of pods it does not know from its own (``/var/log/pods`` by
      default); only the links in ``/var/log/containers`` stay shared (a kubelet removes
      a link there only when what it points to is gone);
    - the ports: its own kubelet and healthz ports, on its own node IP (the gateway).
    """

    def __init__(self, nodes: RealNodes, node: RealNodeSpec, index: int) -> None:
        if index < 1:
            raise ValueError("index 0 is the first node's (RealNodes)")
        self.nodes = nodes
        self.node = node
        self.net = NodeAddress(index)
        # Short: a unix socket's path holds 107 bytes, and the CSI driver's registration
        # socket is under the kubelet's root dir (:mod:`.csi`).
        self.dir = nodes.dir / node.name
        self.containerd = Containerd(self.dir / "containerd", nodes.registry, self.net)
        self.cgroup_root = f"{JOINED_CGROUP_PREFIX}{node.name}"
        self.plugin_dir = self.dir / "device-plugins"
        self.kubelet: Component | None = None
        self.plugin: Component | None = None

    def start(self, timeout: float = 120) -> JoinedNode:
        t0 = time.monotonic()
        try:
            add_bridge(self.net)
            self.containerd.start()
            self._cgroups()
            root = self.kubelet_root
            root.mkdir(parents=True, exist_ok=True)
            run(["mount", "--bind", str(root), str(root)])
            run(["mount", "--make-rshared", str(root)])
            self.plugin_dir.mkdir(parents=True, exist_ok=True)
            DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
            wrapper = ("unshare", "--mount", "--propagation", "unchanged", "--",
                       "/bin/sh", "-c", f'mount --bind "$0" {DEVICE_PLUGIN_DIR} && exec "$@"',
                       str(self.plugin_dir))
            self.kubelet = kubelet_component(self.nodes.cluster, self.node,
                                             self.dir / "kubelet", self.containerd,
                                             cgroup_root=f"/{self.cgroup_root}",
                                             pod_logs=self.dir / "pod-logs",
                                             wrapper=wrapper)
            self.kubelet.start()
            wait(self.node_ready, timeout, f"node {self.node.name} Ready", self.kubelet)
            if self.node.gpus:
                self.plugin = Component("device-plugin", [
                    str(device_plugin_binary()), "-resource", GPU_RESOURCE,
                    "-count", str(self.node.gpus), "-dir", str(self.plugin_dir)],
                    self.dir / "device-plugin" / "device-plugin.log")
                self.plugin.start()
                wait(self._gpus_allocatable, 60,
                     f"{GPU_RESOURCE} allocatable on {self.node.name}", self.plugin)
        except BaseException:
            self.stop()
            raise
        self.nodes.say(f"node {self.node.name} joined, Ready on {self.net.bridge} "
                       f"({self.net.subnet}) in {time.monotonic() - t0:.1f} s")
        return self

    def __enter__(self) -> JoinedNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _cgroups(self) -> None:
        """``/llmop-NAME`` in every v1 hierarchy; cpuset's with its parent's CPUs and
        memory nodes (a new cpuset is empty)."""
        for hierarchy in CGROUP_ROOT.iterdir():
            if hierarchy.name == "unified" or not (hierarchy / "cgroup.procs").exists():
                continue
            top = hierarchy / self.cgroup_root
            top.mkdir(exist_ok=True)
            for key in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / key).exists() and not (top / key).read_text().strip():
                    (top / key).write_text((hierarchy / key).read_text())

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's ``--root-dir``, a shared mount (see the class)."""
        return self.dir / "kubelet" / "root"

    def node_ready(self) -> bool:
        return self.nodes.node_ready(self.node.name)

    def _gpus_allocatable(self) -> bool:
        return self.nodes.gpus_allocatable(self.node)

    def stop(self) -> None:
        """Stop the kubelet, its containers and containerd, put the machine back (mounts,
        cgroups, the bridge) and delete the Node (the cluster forgets it, as after a
        ``kubectl delete node`` of a machine taken away)."""
        for comp in (self.plugin, self.kubelet):
            if comp is not None:
                comp.stop()
        self.containerd.stop()
        unmount_under(self.dir)
        remove_cgroups(self.cgroup_root)
        run(["ip", "link", "del", self.net.bridge], check=False)
        with contextlib.suppress(urllib.error.URLError, OSError):
            self.nodes._api("DELETE", f"/api/v1/nodes/{self.node.name}")
        shutil.rmtree(self.containerd.dir / "root", ignore_errors=True)


def device_plugin_binary() -> Path:
    """The nodes' device plugin (tools/device-plugin), built by ``tools/build_images.sh``."""
    return images_store() / "bin" / "device-plugin"


def coredns_binary() -> Path:
    """CoreDNS (tools/coredns), built by ``tools/build_images.sh``."""
    return images_store() / "bin" / "coredns"


def registry_binary() -> Path:
    """``distribution``'s registry, built by ``tools/build_images.sh``."""
    return images_store() / "bin" / "registry"


def _status(url: str, ctx: ssl.SSLContext) -> int:
    try:
        with urllib.request.urlopen(url, timeout=3, context=ctx) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, OSError):
        return 0


def wait(probe: Callable[[], bool], timeout: float, what: str,
         comp: Component | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if comp is not None and comp.proc is not None and not comp.alive():
            raise RuntimeError(f"{comp.name} exited while waiting for {what}; its log "
                               f"({comp.log}) ends:\n{comp.tail()}")
        try:
            if probe():
                return
        except (urllib.error.URLError, OSError, KeyError):
            pass
        time.sleep(0.5)
    tail = f"\n{comp.name}'s log ends:\n{comp.tail(25)}" if comp is not None else ""
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}{tail}")


__all__ = ["GATEWAY", "SERVICE_CIDR", "HostState", "JoinedNode", "NodeAddress", "NodeNetwork",
           "RealNodeSpec", "RealNodes", "Registry", "built_images", "registry_binary"]

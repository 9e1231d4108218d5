"""An ATTACHABLE volume for the real nodes (:mod:`.nodes`): a CSI driver whose volumes a
node must attach before its pods mount them, as a cloud disk (EBS, a persistent disk)
must, so that Kubernetes' attach-detach controller enforces ``ReadWriteOnce`` across
nodes for real: the second node's pod gets the controller's ``FailedAttachVolume``
"Multi-Attach error" while the first node holds the volume.

The parts, as a cluster runs them:

- the driver (``tools/csi-driver``, built here on the CSI spec's Go bindings): its
  controller service, and its node service on each node, registered with that node's
  kubelet through the kubelet's plugin registration (``plugins_registry``), as
  node-driver-registrar registers a driver;
- Kubernetes' CSI ``external-attacher`` (``github.com/kubernetes-csi/external-attacher``,
  built from its Go module by ``tools/build_csi.sh``): it watches the VolumeAttachments
  the attach-detach controller creates and calls the driver's ControllerPublishVolume;
- the ``CSIDriver`` object with ``attachRequired: true``.

What differs from a cluster, and why: the processes run on this machine with the
admin's kubeconfig (no Deployment, no DaemonSet, no RBAC of their own); a volume is a
folder on this machine (``data_dir/VOLUME``), bound into the pod by the node service,
so every node could reach every volume: only the attach-detach controller keeps a
``ReadWriteOnce`` volume on one node, which is what the tests look at.

Use::

    with LocalCSI(cluster, workdir, [(name, kubelet_root), ...]) as csi:
        pv = csi.persistent_volume("hf-cache-pv", claim=("ns", "hf-cache"))
"""

from __future__ import annotations

import urllib.error
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from .cluster import Component, LocalCluster, cache_root

DRIVER = "hostdir.csi.llmops.dev"
ATTACHER_VERSION = "v4.13.0"  # keep in step with tools/build_csi.sh
REGISTRATION_SOCKET = "llmop-csi-reg.sock"  # tools/csi-driver's, in plugins_registry


def csi_bin() -> Path:
    """Where ``tools/build_csi.sh`` puts the driver and the attacher."""
    return cache_root() / "csi" / "bin"


def csi_present() -> bool:
    return all((csi_bin() / name).exists() for name in ("csi-driver", "csi-attacher"))


class LocalCSI:
    """The driver's controller and the external-attacher, and the driver's node service on
    each of ``nodes`` (``(node name, that kubelet's --root-dir)``)."""

    def __init__(self, cluster: LocalCluster, workdir: Path, nodes: list[tuple[str, Path]],
                 out: Callable[[str], None] | None = None) -> None:
        self.cluster = cluster
        self.dir = Path(workdir).absolute()
        self.nodes = nodes
        self.out = out or (lambda _line: None)
        self.data_dir = self.dir / "volumes"
        self.components: list[Component] = []

    def start(self, timeout: float = 60) -> LocalCSI:
        """Start every part and wait for each node's kubelet to list the driver; stops
        what started when a part fails."""
        try:
            return self._start_all(timeout)
        except BaseException:
            self.stop()
            raise

    def _start_all(self, timeout: float) -> LocalCSI:
        from .nodes import wait
        if not csi_present():
            raise RuntimeError(f"the CSI driver and attacher are not in {csi_bin()}: run "
                               "`bash tools/setup.sh --nodes`")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.cluster.api("POST", "/apis/storage.k8s.io/v1/csidrivers", {
                "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": DRIVER},
                "spec": {"attachRequired": True, "podInfoOnMount": False,
                         "volumeLifecycleModes": ["Persistent"]}})
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise
        controller_sock = self.dir / "controller" / "csi.sock"
        self._start("csi-controller", [str(csi_bin() / "csi-driver"), "-mode", "controller",
                                       "-endpoint", str(controller_sock)])
        self._start("csi-attacher", [
            str(csi_bin() / "csi-attacher"), f"--csi-address={controller_sock}",
            f"--kubeconfig={self.cluster.admin_kubeconfig}", "--leader-election=false",
            "--timeout=15s", "--v=2"])
        for name, kubelet_root in self.nodes:
            registration = kubelet_root / "plugins_registry" / REGISTRATION_SOCKET
            if len(str(registration)) > 107:
                raise ValueError(f"{registration} is longer than a unix socket's path may "
                                 "be (107 bytes): run the nodes from a shorter folder")
            self._start(f"csi-node-{name}", [
                str(csi_bin() / "csi-driver"), "-mode", "node",
                "-endpoint", str(self.dir / name / "csi.sock"), "-node-id", name,
                "-data-dir", str(self.data_dir),
                "-registration-dir", str(kubelet_root / "plugins_registry")])
        for name, _ in self.nodes:
            wait(lambda n=name: self._registered(n), timeout,  # type: ignore[misc]
                 f"the CSI driver registered with {name}'s kubelet (its CSINode)",
                 self.components[-1])
        self.out(f"[csi] {DRIVER} on {', '.join(n for n, _ in self.nodes)}, with the "
                 f"external-attacher {ATTACHER_VERSION}")
        return self

    def _start(self, name: str, argv: list[str]) -> None:
        comp = Component(name, argv, self.dir / "logs" / f"{name}.log")
        comp.start()
        self.components.append(comp)

    def _registered(self, node: str) -> bool:
        try:
            got = self.cluster.api("GET", f"/apis/storage.k8s.io/v1/csinodes/{node}")
        except urllib.error.HTTPError:
            return False
        return any(d.get("name") == DRIVER for d in got["spec"].get("drivers") or [])

    def persistent_volume(self, name: str, *, claim: tuple[str, str],
                          storage: str = "1Gi") -> dict[str, Any]:
        """A ``ReadWriteOnce`` PersistentVolume of this driver, bound ahead to the claim
        ``(namespace, name)`` (as an admin pre-binds a disk)."""
        return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                "spec": {"capacity": {"storage": storage}, "accessModes": ["ReadWriteOnce"],
                         "storageClassName": "manual", "persistentVolumeReclaimPolicy": "Retain",
                         "csi": {"driver": DRIVER, "volumeHandle": name},
                         "claimRef": {"namespace": claim[0], "name": claim[1]}}}

    def attachments(self) -> list[dict[str, Any]]:
        """The cluster's VolumeAttachments of this driver."""
        items = self.cluster.api("GET", "/apis/storage.k8s.io/v1/volumeattachments")["items"]
        return [a for a in items if a["spec"]["attacher"] == DRIVER]

    def stop(self) -> None:
        for comp in reversed(self.components):
            comp.stop()
        self.components.clear()
        try:
            self.cluster.api("DELETE", f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}")
        except (urllib.error.URLError, OSError):
            pass

    def logs(self) -> str:
        return "\n".join(f"--- {c.name}\n{c.tail(15)}" for c in self.components)

    def __enter__(self) -> LocalCSI:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


__all__ = ["DRIVER", "LocalCSI", "csi_bin", "csi_present"]

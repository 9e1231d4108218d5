"""The REAL LeaderWorkerSet controller against a :class:`~.cluster.LocalCluster`: the
manager ``tools/build_lws.sh`` builds from the release's Go module (``sigs.k8s.io/lws``),
its CRD as that release ships it, and its webhooks served to the API server as in a
cluster, run as a local process with a kubeconfig.

It does on this control plane what it does on a cluster: for each LeaderWorkerSet it
creates the leader StatefulSet and headless Service, then for each leader pod the workers'
StatefulSet; its pod webhook labels the pods and injects ``LWS_LEADER_ADDRESS``,
``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``; its LeaderWorkerSet webhook defaults and
validates the object; it recreates a group when one of its pods restarts
(``RecreateGroupOnPodRestart``) and writes the object's status. The StatefulSet
controller, the scheduler and the garbage collector are Kubernetes' own; the pods run
under the local kubelet (:mod:`.kubelet`).

What differs from a cluster, and why:

- the webhooks' ``clientConfig`` is a ``url`` (``https://127.0.0.1:PORT/...``) instead of
  the release's in-cluster Service, with a serving certificate from the sandbox's CA
  (:mod:`.pki`) in the ``caBundle``: the manager runs as a local process, and its
  internal certificate rotation (which writes a Secret and patches the webhooks for the
  Service's DNS name) is turned off in its configuration file;
- the manager runs with the cluster admin's kubeconfig, not the release's RBAC;
- leader election is off (one manager).

Use::

    with LocalLWS(cluster.admin_kubeconfig, workdir, kubectl=...) as lws:
        ...
"""

from __future__ import annotations

import base64
import copy
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from .cluster import Component, free_port, run_tool
from .pki import Pki

LWS_VERSION = "v0.7.0"
"""The release built (``tools/build_lws.sh``; fetchable by exact version from the Go
module proxy here on 2026-11-27)."""

CRD_NAME = "leaderworkersets.leaderworkerset.x-k8s.io"
WEBHOOK_NAMES = ("mutating-webhook-configuration", "validating-webhook-configuration")


def lws_dir() -> Path:
    """Where the build puts it, beside the control plane: ``$LLMOP_CACHE`` or
    ``~/.cache/llm-operator``, then ``lws-<version>/`` with ``bin/lws-manager`` and
    ``config/`` (the release's CRD and webhook manifests)."""
    root = Path(os.environ.get("LLMOP_CACHE") or Path.home() / ".cache" / "llm-operator")
    return root / f"lws-{LWS_VERSION}"


def lws_present() -> bool:
    d = lws_dir()
    return (d / "bin" / "lws-manager").is_file() and (d / "config" / "crd.yaml").is_file()


def webhook_configurations(config_dir: Path, base_url: str, ca_pem: bytes
                           ) -> list[dict[str, Any]]:
    """The release's two webhook configurations (``config/webhook/manifests.yaml`` with its
    kustomize patches applied: the pod webhooks only for pods labelled
    ``leaderworkerset.sigs.k8s.io/name``), each ``clientConfig.service`` replaced by the
    ``url`` under ``base_url`` with the same path, and ``ca_pem`` as the ``caBundle``
    (pure, given the files)."""
    docs = [d for d in yaml.safe_load_all((config_dir / "webhooks.yaml").read_text()) if d]
    patches = {"MutatingWebhookConfiguration": config_dir / "mutating-patch.yaml",
               "ValidatingWebhookConfiguration": config_dir / "validating-patch.yaml"}
    ca = base64.b64encode(ca_pem).decode()
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        for op in yaml.safe_load(patches[doc["kind"]].read_text()):
            if op.get("op") != "replace" or not op["path"].startswith("/webhooks/"):
                raise ValueError(f"unexpected patch {op} for {doc['kind']}")
            doc["webhooks"][int(op["path"].rsplit("/", 1)[1])] = op["value"]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": base_url.rstrip("/") + path, "caBundle": ca}
        out.append(doc)
    return out


def manager_config(webhook_port: int, cert_dir: Path, metrics_port: int,
                   health_port: int) -> dict[str, Any]:
    """The manager's ``--config`` (``config.lws.x-k8s.io/v1alpha1`` Configuration): the
    webhook server on 127.0.0.1 with certificates from ``cert_dir``, no internal
    certificate management, no leader election."""
    return {"apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
            "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"}}


class LocalLWS:
    """The LeaderWorkerSet release's manager, CRD and webhooks on the cluster whose admin
    kubeconfig is ``kubeconfig``; ``kubectl`` installs them."""

    def __init__(self, kubeconfig: Path, workdir: Path, *, kubectl: str,
                 out: Callable[[str], None] | None = None) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.workdir = Path(workdir).absolute()
        self.kubectl = kubectl
        self.out = out or (lambda _line: None)
        self.webhook_port = free_port()
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.cert_dir = self.workdir / "certs"
        config_path = self.workdir / "lws-config.yaml"
        self.component = Component(
            "lws-manager",
            [str(lws_dir() / "bin" / "lws-manager"), f"--config={config_path}",
             f"--kubeconfig={self.kubeconfig}", "--zap-log-level=info"],
            self.workdir / "logs" / "lws-manager.log")
        self._config_path = config_path

    def _kubectl(self, *args: str, stdin: str | None = None) -> str:
        return run_tool([self.kubectl, *args], self.kubeconfig, stdin=stdin)

    def start(self, timeout: float = 90) -> LocalLWS:
        if not lws_present():
            raise RuntimeError(f"the LeaderWorkerSet controller is not in {lws_dir()}: run "
                               "`bash tools/setup.sh --controllers`")
        self.out(f"Starting the LeaderWorkerSet controller {LWS_VERSION}")
        pki = Pki(self.workdir / "pki")
        serving = pki.issue("lws-webhook", "lws-webhook", server=True,
                            hosts=("127.0.0.1", "localhost"))
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        (self.cert_dir / "tls.crt").write_bytes(serving.cert.read_bytes())
        (self.cert_dir / "tls.key").write_bytes(serving.key.read_bytes())
        self._config_path.write_text(yaml.safe_dump(manager_config(
            self.webhook_port, self.cert_dir, self.metrics_port, self.health_port)))
        config_dir = lws_dir() / "config"
        self._wait_crd_not_terminating(120)
        # The CRD is larger than client-side apply's last-applied annotation allows.
        self._kubectl("apply", "--server-side", "-f", str(config_dir / "crd.yaml"))
        self._wait_established(60)
        self.component.start()
        self._wait_healthy(timeout)
        hooks = webhook_configurations(config_dir, f"https://127.0.0.1:{self.webhook_port}",
                                       pki.ca.cert.read_bytes())
        self._kubectl("apply", "--server-side", "-f", "-",
                      stdin="\n---\n".join(yaml.safe_dump(h) for h in hooks))
        self._wait_webhook(timeout)
        return self

    def _crd(self) -> dict[str, Any] | None:
        out = self._kubectl("get", "crd", CRD_NAME, "--ignore-not-found", "-o", "json")
        return json.loads(out) if out.strip() else None

    def _poll(self, probe: Callable[[], bool], timeout: float, what: str,
              interval: float = 0.5) -> None:
        """Until ``probe()`` is true; raises after ``timeout`` s, or at once when the
        manager (once started) has exited, with the end of its log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.component.proc is not None and not self.component.alive():
                raise RuntimeError(f"the LWS manager exited while waiting for {what}:\n"
                                   f"{self.component.tail()}")
            if probe():
                return
            time.sleep(interval)
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}:\n"
                           f"{self.component.tail()}")

    def _wait_crd_not_terminating(self, timeout: float) -> None:
        """Until a LeaderWorkerSet CRD another test deleted is gone (applying over one
        that is terminating fails)."""
        def gone() -> bool:
            crd = self._crd()
            return crd is None or not crd["metadata"].get("deletionTimestamp")
        self._poll(gone, timeout, f"the terminating CRD {CRD_NAME} to go", interval=1)

    def _wait_established(self, timeout: float) -> None:
        """Until the CRD is served (``kubectl wait`` fails while it has no conditions)."""
        def established() -> bool:
            crd = self._crd() or {}
            return any(c.get("type") == "Established" and c.get("status") == "True"
                       for c in (crd.get("status") or {}).get("conditions") or [])
        self._poll(established, timeout, f"the CRD {CRD_NAME} to be Established")

    def _wait_healthy(self, timeout: float) -> None:
        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz",
                                            timeout=2) as r:
                    return bool(r.status == 200)
            except (urllib.error.URLError, OSError):
                return False
        self._poll(ready, timeout, "the LWS manager's /readyz")

    def _wait_webhook(self, timeout: float) -> None:
        """Until the API server reaches the webhooks: a server-side dry-run create of a
        valid LeaderWorkerSet passes them (it fails while they cannot be called)."""
        probe = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                 "metadata": {"name": "webhook-probe", "namespace": "default"},
                 "spec": {"replicas": 1, "leaderWorkerTemplate": {
                     "size": 1, "workerTemplate": {"spec": {"containers": [
                         {"name": "c", "image": "busybox"}]}}}}}

        def admitted() -> bool:
            try:
                self._kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                              stdin=json.dumps(probe))
                return True
            except RuntimeError:
                return False
        self._poll(admitted, timeout, "the API server to reach the LWS webhooks", interval=1)

    def stop(self) -> None:
        """Remove the webhook configurations (they would refuse every LeaderWorkerSet and
        its pods once nothing serves them), stop the manager, and remove the CRD (and so
        every LeaderWorkerSet left): the cluster is as it was before :meth:`start`."""
        try:
            self._kubectl("delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                          *WEBHOOK_NAMES, "--ignore-not-found")
        except RuntimeError as exc:
            self.out(f"could not remove the LWS webhooks: {exc}")
        self.component.stop()
        try:
            self._kubectl("delete", "crd", CRD_NAME, "--ignore-not-found", "--timeout=60s")
        except RuntimeError as exc:
            self.out(f"could not remove the LeaderWorkerSet CRD: {exc}")

    def log(self) -> str:
        return self.component.log.read_text(errors="replace") if self.component.log.exists() \
            else ""

    def __enter__(self) -> LocalLWS:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

"""A real Prometheus for local trials, finding pods through the rendered PodMonitors.

:func:`start_prometheus` runs Debian's ``/usr/bin/prometheus`` (``LLMOP_PROMETHEUS_BIN``)
on 127.0.0.1 (or the host address given: the node bridge's gateway, where pods in real
containers reach it) with a throwaway TSDB. :class:`PodMonitorDiscovery` keeps it pointed at the
pods of the (emulated) API server: every ``interval_s`` it lists the PodMonitors and Pods,
writes the scrape jobs the Prometheus Operator would write (through
:mod:`llm_operator_sandbox.podmonitor_sd`, with file-based discovery) and, when the jobs
changed, reloads Prometheus (``POST /-/reload``). It never talks to the node agent: what
Prometheus scrapes follows from the API objects alone, as on a cluster.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llm_operator.inpod.tuner.server import free_port

from . import podmonitor_sd
from .processes import stop as stop_process

log = logging.getLogger(__name__)

PROMETHEUS_BIN = os.environ.get("LLMOP_PROMETHEUS_BIN", "/usr/bin/prometheus")


def prometheus_available() -> bool:
    """True when the Prometheus binary is installed."""
    return shutil.which(PROMETHEUS_BIN) is not None or Path(PROMETHEUS_BIN).exists()


@dataclass
class PrometheusServer:
    """A running Prometheus: ``url``, ``query()``, ``reload()`` and ``stop()``."""

    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path
    owns_workdir: bool = True
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://{self.host}:{self.port}"

    @property
    def config_file(self) -> Path:
        """The prometheus.yml it reads (rewrite it, then :meth:`reload`)."""
        return self.workdir / "prometheus.yml"

    def query(self, promql: str) -> list[dict[str, object]]:
        """An instant query through the HTTP API (raw)."""
        data = urllib.parse.urlencode({"query": promql}).encode()
        with urllib.request.urlopen(f"{self.url}/api/v1/query", data=data, timeout=10) as r:
            body = json.loads(r.read())
        result: list[dict[str, object]] = body["data"]["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        """The active targets (``/api/v1/targets``): labels, scrape URL, health."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets?state=active", timeout=10) as r:
            body = json.loads(r.read())
        active: list[dict[str, Any]] = body["data"]["activeTargets"]
        return active

    def wait_for_series(self, promql: str, timeout_s: float = 30.0) -> list[dict[str, object]]:
        """Poll until ``promql`` returns a non-empty vector; raise TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(urllib.error.URLError, OSError, KeyError):
                result = self.query(promql)
                if result:
                    return result
            time.sleep(0.5)
        raise TimeoutError(f"no series for {promql!r} after {timeout_s:.0f} s")

    def reload(self) -> None:
        """Make Prometheus read its configuration file again (raises on a bad file)."""
        req = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    def log_tail(self, chars: int = 2000) -> str:
        """The end of its log."""
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self) -> None:
        """Stop the server and delete its TSDB (and its folder, when it made it)."""
        stop_process(self.proc, 15)
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            shutil.rmtree(self.workdir / "data", ignore_errors=True)


def start_prometheus_with(config: Mapping[str, Any], workdir: Path | None = None,
                          timeout_s: float = 30.0, host: str = "127.0.0.1") -> PrometheusServer:
    """Start Prometheus on a free port of ``host`` with ``config`` (a prometheus.yml as a
    dict) in ``workdir`` (a new temporary folder by default); wait until it is ready."""
    owns = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="llmop-prom-")) if workdir is None else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    port = free_port()
    log_file = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(
        [PROMETHEUS_BIN, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'data'}",
         "--storage.tsdb.retention.time=1h", f"--web.listen-address={host}:{port}",
         "--web.enable-lifecycle"],
        stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
    )
    log_file.close()
    server = PrometheusServer(proc=proc, port=port, workdir=workdir, owns_workdir=owns,
                              host=host)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = server.log_tail()
            if owns:
                shutil.rmtree(workdir, ignore_errors=True)
            raise RuntimeError(f"prometheus exited with {proc.returncode}:\n{text}")
        with contextlib.suppress(urllib.error.URLError, OSError):
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return server
        time.sleep(0.2)
    server.stop()
    raise TimeoutError(f"prometheus not ready after {timeout_s:.0f} s")


def podmonitor_crd() -> dict[str, Any]:
    """A schemaless CustomResourceDefinition for ``monitoring.coreos.com/v1`` PodMonitor,
    so the emulated API server serves the kind (and the operator, seeing the group,
    renders PodMonitors as on a cluster with the Prometheus Operator). A cluster installs
    the Prometheus Operator's own CRD, with its schema."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "podmonitors.monitoring.coreos.com"},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                 "names": {"kind": "PodMonitor", "plural": "podmonitors",
                           "singular": "podmonitor", "listKind": "PodMonitorList"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {
                                   "type": "object",
                                   "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


def _write_atomically(path: Path, text: str) -> None:
    """Prometheus' file discovery watches the folder: a half-written file would be read
    as an error, so write beside it and rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class PodMonitorDiscovery:
    """Keeps a Prometheus scraping what the API's PodMonitors select (a thread).

    Each pass lists PodMonitors (``monitoring.coreos.com/v1``) and Pods in ``namespaces``
    (every namespace when None) through the Kubernetes client, writes one file-discovery
    file per job into ``workdir/sd/`` and, when the set of jobs changed, rewrites
    prometheus.yml and reloads. A PodMonitor the translation cannot reproduce is skipped
    and its reason kept in :attr:`errors` (and logged), never silently half-translated.
    """

    def __init__(self, kubeconfig: Path, workdir: Path, *, namespaces: list[str] | None = None,
                 interval_s: float = 1.0, scrape_interval: str = "30s",
                 host: str = "127.0.0.1") -> None:
        self.kubeconfig = kubeconfig
        self.host = host  # where Prometheus listens
        self.workdir = workdir
        self.sd_dir = workdir / "sd"
        self.namespaces = namespaces
        self.interval_s = interval_s
        self.scrape_interval = scrape_interval
        self.errors: dict[str, str] = {}
        # Scrape jobs besides the PodMonitors' (e.g. the operator process run outside a
        # pod: its /metrics); set with :meth:`add_static_job`.
        self.static_jobs: list[dict[str, Any]] = []
        self.prometheus: PrometheusServer | None = None
        self._monitors: list[dict[str, Any]] = []
        self._config_key: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._api: Any = None

    # --- reading the API -----------------------------------------------------------
    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import config

            self._api = config.new_client_from_config(config_file=str(self.kubeconfig))
        return self._api

    def list_monitors(self) -> list[dict[str, Any]]:
        """Every PodMonitor the discovery watches (none while the kind is not served)."""
        from kubernetes import client

        api = client.CustomObjectsApi(self._client())
        group, version, plural = "monitoring.coreos.com", "v1", "podmonitors"
        items: list[dict[str, Any]] = []
        try:
            lists: list[Any] = [api.list_cluster_custom_object(group, version, plural)] \
                if self.namespaces is None else \
                [api.list_namespaced_custom_object(group, version, ns, plural)
                 for ns in self.namespaces]
            for listed in lists:
                items += listed.get("items") or []
        except client.ApiException as exc:
            if exc.status != 404:  # 404: the kind is not served (yet)
                raise
        return items

    def list_pods(self) -> list[dict[str, Any]]:
        """Every Pod the discovery watches, as the API serves them (camelCase JSON)."""
        from kubernetes import client

        api = client.CoreV1Api(self._client())
        responses: list[Any] = [api.list_pod_for_all_namespaces(_preload_content=False)] \
            if self.namespaces is None else \
            [api.list_namespaced_pod(ns, _preload_content=False) for ns in self.namespaces]
        items: list[dict[str, Any]] = []
        for resp in responses:
            items += json.loads(resp.data).get("items") or []
        return items

    # --- one pass --------------------------------------------------------------------
    def sync(self) -> bool:
        """Read the API once and bring the files (and Prometheus) up to date. Returns
        True when the scrape jobs changed."""
        monitors = []
        errors = {}
        for monitor in self.list_monitors():
            ident = "{}/{}".format(monitor["metadata"].get("namespace", "default"),
                                   monitor["metadata"]["name"])
            try:
                podmonitor_sd.check_supported(monitor)
            except podmonitor_sd.UnsupportedMonitor as exc:
                errors[ident] = str(exc)
                if self.errors.get(ident) != str(exc):
                    log.warning("Skipped %s", exc)
                continue
            monitors.append(monitor)
        self.errors = errors
        self._monitors = monitors
        pods = self.list_pods()
        self.sd_dir.mkdir(parents=True, exist_ok=True)
        files = podmonitor_sd.discovery_files(monitors, pods)
        for name, groups in files.items():
            path = self.sd_dir / name
            text = json.dumps(groups, indent=1, sort_keys=True)
            if not path.exists() or path.read_text() != text:
                _write_atomically(path, text)
        for stale in self.sd_dir.glob("podMonitor_*.json"):
            if stale.name not in files:
                stale.unlink()
        config = self.config()
        key = json.dumps(config, sort_keys=True)
        if key == self._config_key:
            return False
        if self.prometheus is not None:
            _write_atomically(self.prometheus.config_file, yaml.safe_dump(config, sort_keys=False))
            self.prometheus.reload()  # raises on a config Prometheus refuses: retried next pass
        self._config_key = key
        return True

    def config(self) -> dict[str, Any]:
        """The prometheus.yml for the monitors read last (and the static jobs)."""
        config = podmonitor_sd.prometheus_config(
            self._monitors, self.sd_dir, scrape_interval=self.scrape_interval,
            evaluation_interval=self.scrape_interval)
        config["scrape_configs"] += self.static_jobs
        return config

    def add_static_job(self, job: str, address: str) -> None:
        """Scrape ``address`` (``host:port``, ``/metrics``) as ``job`` from the next pass on
        (the series keep their own labels)."""
        self.static_jobs = [j for j in self.static_jobs if j["job_name"] != job] + [
            {"job_name": job, "honor_labels": True,
             "static_configs": [{"targets": [address]}]}]

    # --- lifecycle -------------------------------------------------------------------
    def start(self, prometheus: bool = True) -> PodMonitorDiscovery:
        """First pass, then Prometheus (unless ``prometheus=False``), then the thread."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(Exception):
            self.sync()
        if prometheus:
            self.prometheus = start_prometheus_with(self.config(), self.workdir, host=self.host)
            self._config_key = json.dumps(self.config(), sort_keys=True)
        self._thread = threading.Thread(target=self._run, name="podmonitor-sd", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sync()
            except Exception as exc:  # noqa: BLE001 - the next pass retries
                log.warning("PodMonitor discovery pass failed (retrying): %s", exc)

    def stop(self) -> None:
        """Stop the thread and Prometheus (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self.prometheus is not None:
            self.prometheus.stop()
            self.prometheus = None

    def __enter__(self) -> PodMonitorDiscovery:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

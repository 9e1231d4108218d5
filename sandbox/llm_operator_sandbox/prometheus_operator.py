"""The REAL Prometheus Operator against a :class:`~.cluster.LocalCluster`: the binary
``bash tools/setup.sh --controllers`` builds from the Go module proxy
(``tools/build_prometheus_operator.sh``), its CRDs as that release ships them, run as a
local process with a kubeconfig.

It does on this control plane what it does on a cluster with kube-prometheus-stack: it
reads Prometheus objects, selects ServiceMonitors, PodMonitors and PrometheusRules by
their selectors, and writes the generated Prometheus configuration (a Secret,
``prometheus-<name>``, key ``prometheus.yaml.gz``) and the selected rules (ConfigMaps
``prometheus-<name>-rulefiles-<n>``). The StatefulSet it creates for the Prometheus
never runs (no image runs here, and the local kubelet runs only the project's pods):
what is read back is what that Prometheus would load.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from .cluster import Component, free_port, run_tool

PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
"""The release built (the newest the Go module proxy served here on 2026-11-26)."""


def operator_dir() -> Path:
    """Where the build puts it, beside the control plane: ``$LLMOP_CACHE`` or
    ``~/.cache/llm-operator``, then ``prometheus-operator-<version>/`` with ``bin/operator``
    and ``crds/`` (the release's ``example/prometheus-operator-crd``)."""
    root = Path(os.environ.get("LLMOP_CACHE") or Path.home() / ".cache" / "llm-operator")
    return root / f"prometheus-operator-{PROMETHEUS_OPERATOR_VERSION}"


def operator_present() -> bool:
    d = operator_dir()
    return (d / "bin" / "operator").is_file() and any((d / "crds").glob("*.yaml"))


def install_crds(kubectl: str, kubeconfig: Path) -> list[str]:
    """Create the release's CRDs (server-side: the Prometheus CRD is larger than the
    annotation client-side apply keeps) and wait until each is served; their names."""
    names = []
    for path in sorted((operator_dir() / "crds").glob("*.yaml")):
        run_tool([kubectl, "apply", "--server-side", "-f", str(path)], kubeconfig)
        names.append(f"crd/{path.stem.removeprefix('monitoring.coreos.com_')}"
                     ".monitoring.coreos.com")
    run_tool([kubectl, "wait", "--for=condition=Established", "--timeout=60s", *names],
             kubeconfig)
    return names


class PrometheusOperator:
    """``operator`` of the Prometheus Operator release, as the cluster's admin."""

    def __init__(self, kubeconfig: Path, workdir: Path,
                 out: Callable[[str], None] | None = None) -> None:
        self.port = free_port()
        self.out = out or (lambda _line: None)
        binary = operator_dir() / "bin" / "operator"
        self.component = Component(
            "prometheus-operator",
            [str(binary), f"--web.listen-address=127.0.0.1:{self.port}", "--log-level=info"],
            workdir / "logs" / "prometheus-operator.log",
            env={"KUBECONFIG": str(kubeconfig)})

    def start(self, timeout: float = 60) -> PrometheusOperator:
        self.out(f"Starting the Prometheus Operator {PROMETHEUS_OPERATOR_VERSION}")
        self.component.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.component.alive():
                raise RuntimeError(f"the Prometheus Operator exited:\n{self.component.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz",
                                            timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the Prometheus Operator did not answer /healthz in {timeout:.0f}"
                           f" s:\n{self.component.tail()}")

    def stop(self) -> None:
        self.component.stop()

    def log(self) -> str:
        return self.component.log.read_text(errors="replace") if self.component.log.exists() \
            else ""

    def __enter__(self) -> PrometheusOperator:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def generated_config(kubectl: str, kubeconfig: Path, namespace: str, prometheus: str
                     ) -> str | None:
    """The Prometheus configuration the operator generated for ``prometheus`` (YAML
    text), or None while there is none."""
    out = run_tool([kubectl, "get", "secret", f"prometheus-{prometheus}", "-n", namespace,
                    "--ignore-not-found", "-o", "json"], kubeconfig)
    data = ((json.loads(out) if out.strip() else {}).get("data") or {}).get(
        "prometheus.yaml.gz")
    return gzip.decompress(base64.b64decode(data)).decode() if data else None


def generated_rule_files(kubectl: str, kubeconfig: Path, namespace: str, prometheus: str
                         ) -> dict[str, str]:
    """The rule files the operator selected for ``prometheus``: file name -> text."""
    out = run_tool([kubectl, "get", "configmaps", "-n", namespace, "-o", "json"], kubeconfig)
    files: dict[str, str] = {}
    for item in json.loads(out)["items"]:
        if item["metadata"]["name"].startswith(f"prometheus-{prometheus}-rulefiles-"):
            files.update(item.get("data") or {})
    return files

"""The REAL InferencePool CRD of the Gateway API Inference Extension
(kubernetes-sigs/gateway-api-inference-extension, ``inference.networking.k8s.io/v1``) on a
:class:`~.cluster.LocalCluster`: the file its release ships in ``config/crd/bases``, taken
from the release's Go module by ``tools/fetch_inference_extension.sh`` (checksum pinned),
installed and removed by ``kubectl`` as on a cluster. No gateway and no endpoint picker
run here: the API server's schema and CEL rules are what is checked.

Use::

    install_crd(kubectl, kubeconfig)   # applied, Established, served
    remove_crd(kubectl, kubeconfig)    # deleted, and gone from discovery
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cluster import cache_root, run_tool

VERSION = "v1.6.2"
"""The release (``tools/fetch_inference_extension.sh``; the newest v1 the Go module proxy
served here on 2026-12-05; v1.6.3 and v1.7.0 answer 403)."""

CRD_NAME = "inferencepools.inference.networking.k8s.io"
CRD_FILE = "inference.networking.k8s.io_inferencepools.yaml"


def extension_dir() -> Path:
    """``$LLMOP_CACHE`` (or ``~/.cache/llm-operator``)
    ``/gateway-api-inference-extension-<version>/crds``."""
    return cache_root() / f"gateway-api-inference-extension-{VERSION}" / "crds"


def crd_path() -> Path:
    return extension_dir() / CRD_FILE


def crd_present() -> bool:
    return crd_path().is_file()


def _crd(kubectl: str, kubeconfig: Path) -> dict[str, Any] | None:
    try:
        out = run_tool([kubectl, "get", "crd", CRD_NAME, "-o", "json", "--ignore-not-found"],
                       kubeconfig)
    except RuntimeError:
        return None
    return json.loads(out) if out.strip() else None


def _poll(probe: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def install_crd(kubectl: str, kubeconfig: Path, timeout: float = 60) -> None:
    """Apply the release's InferencePool CRD (after one another test deleted has gone)
    and wait until the API server serves the kind."""
    if not crd_present():
        raise RuntimeError(f"the Inference Extension's CRD is not in {extension_dir()}: run "
                           "`bash tools/setup.sh --controllers`")

    def not_terminating() -> bool:
        crd = _crd(kubectl, kubeconfig)
        return crd is None or not crd["metadata"].get("deletionTimestamp")
    _poll(not_terminating, timeout, f"the terminating CRD {CRD_NAME} to go")
    run_tool([kubectl, "apply", "--server-side", "-f", str(crd_path())], kubeconfig)

    def established() -> bool:
        crd = _crd(kubectl, kubeconfig) or {}
        return any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (crd.get("status") or {}).get("conditions") or [])
    _poll(established, timeout, f"the CRD {CRD_NAME} to be Established")


def remove_crd(kubectl: str, kubeconfig: Path, timeout: float = 60) -> None:
    """Delete the CRD (its pools go with it) and wait until it is gone."""
    run_tool([kubectl, "delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=false"],
             kubeconfig)
    _poll(lambda: _crd(kubectl, kubeconfig) is None, timeout, f"the CRD {CRD_NAME} to go")

"""The control plane's versions are pinned once: the Go modules in tools/cluster say
which Kubernetes and etcd are built, and the Python side looks for those binaries."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llm_operator_sandbox.cluster import ETCD_VERSION, KUBERNETES_VERSION, cache_dir

pytestmark = pytest.mark.unit
TOOLS = Path(__file__).resolve().parents[2] / "tools" / "cluster"


def test_go_modules_pin_the_versions_the_cluster_runs() -> None:
    k8s = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", (TOOLS / "go.mod").read_text(), re.M)
    etcd = re.search(r"go\.etcd\.io/etcd/server/v3 (v\S+)",
                     (TOOLS / "etcd" / "go.mod").read_text())
    assert k8s and k8s.group(1) == KUBERNETES_VERSION
    assert etcd and etcd.group(1) == ETCD_VERSION
    assert cache_dir().parent.name == f"kubernetes-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}"


def test_every_staging_module_is_replaced_by_its_published_twin() -> None:
    """k8s.io/kubernetes points its staging modules at ./staging; each must be replaced
    by the v0 release of the same minor, or `go build` cannot resolve them."""
    text = (TOOLS / "go.mod").read_text()
    minor = KUBERNETES_VERSION.split(".", 1)[1]
    replaced = re.findall(r"^\s*(k8s\.io/[\w-]+) => (k8s\.io/[\w-]+) (v\S+)$", text, re.M)
    assert len(replaced) >= 30
    for old, new, version in replaced:
        assert old == new and version == f"v0.{minor}", (old, new, version)


def test_the_prometheus_operator_build_and_its_users_name_one_version() -> None:
    """tools/build_prometheus_operator.sh builds the release the Python side looks for."""
    from llm_operator_sandbox.prometheus_operator import PROMETHEUS_OPERATOR_VERSION

    script = (TOOLS.parent / "build_prometheus_operator.sh").read_text()
    built = re.search(r"^VERSION=(v\S+)", script, re.M)
    assert built and built.group(1) == PROMETHEUS_OPERATOR_VERSION


def test_the_lws_build_and_its_users_name_one_version() -> None:
    """tools/build_lws.sh builds the LeaderWorkerSet release the sandbox looks for, and
    pins the module's checksum."""
    from llm_operator_sandbox.lws import LWS_VERSION

    script = (TOOLS.parent / "build_lws.sh").read_text()
    built = re.search(r"^VERSION=(v\S+)", script, re.M)
    assert built and built.group(1) == LWS_VERSION
    assert re.search(r'^SUM="h1:[A-Za-z0-9+/=]{44}"', script, re.M)


def test_the_device_plugin_speaks_the_api_of_the_kubelet_built() -> None:
    """tools/device-plugin builds against k8s.io/kubelet of the same minor as the kubelet
    tools/cluster builds (the device-plugin API the nodes' kubelet serves)."""
    text = (TOOLS.parent / "device-plugin" / "go.mod").read_text()
    kubelet = re.search(r"^\s*k8s\.io/kubelet (v\S+)", text, re.M)
    assert kubelet and kubelet.group(1) == "v0." + KUBERNETES_VERSION.split(".", 1)[1]

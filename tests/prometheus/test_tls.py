"""The operator's Prometheus client verifies TLS (a real Prometheus serving HTTPS with a
certificate of a local CA, through its --web.config.file): with the CA given it queries;
without it the query fails on the certificate, as a man in the middle would; only the
explicit insecure setting skips the check. The bearer token file is read per request."""

from __future__ import annotations

import contextlib
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from llm_operator.adaptation import prometheus
from llm_operator.adaptation.prometheus import _BearerTokenFile
from llm_operator_sandbox.cluster import free_port
from llm_operator_sandbox.pki import Pki
from tests.support.prometheus import prometheus_available

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(120)]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


@pytest.fixture
def https_prometheus(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real Prometheus answering only HTTPS, its certificate signed by a local CA;
    (its URL, the CA file)."""
    if not prometheus_available():
        pytest.fail("Prometheus is not installed: bash tools/setup.sh --engine")
    pki = Pki(tmp_path / "pki")
    pair = pki.issue("prometheus", "prometheus", server=True, hosts=("127.0.0.1",))
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"tls_server_config": {
        "cert_file": str(pair.cert), "key_file": str(pair.key)}}))
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}}))
    port = free_port()
    with (tmp_path / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={cfg}", f"--web.config.file={web}",
             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"https://127.0.0.1:{port}"
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            with contextlib.suppress(urllib.error.URLError, OSError):
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2, context=ctx) as r:
                    if r.status == 200:
                        break
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.2)
        yield url, pki.ca.cert
    finally:
        proc.terminate()
        proc.wait(15)


def test_tls_is_verified_against_the_given_ca(https_prometheus: tuple[str, Path]) -> None:
    url, ca = https_prometheus
    client = prometheus.connect(url, ca_file=str(ca))
    result = client.custom_query("vector(7)")
    assert float(result[0]["value"][1]) == 7.0

    # The system's CAs do not know this one: the certificate is refused, not ignored.
    with pytest.raises(requests.exceptions.SSLError):
        prometheus.connect(url).custom_query("vector(7)")

    # Only when asked for explicitly.
    insecure = prometheus.connect(url, insecure_skip_verify=True)
    assert float(insecure.custom_query("vector(7)")[0]["value"][1]) == 7.0


def test_the_bearer_token_file_is_read_on_every_request(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    auth = _BearerTokenFile(str(token))
    one = auth(requests.Request("POST", "https://example.invalid/api/v1/query").prepare())
    token.write_text("rotated")
    two = auth(requests.Request("POST", "https://example.invalid/api/v1/query").prepare())
    assert one.headers["Authorization"] == "Bearer first"
    assert two.headers["Authorization"] == "Bearer rotated"

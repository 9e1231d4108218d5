"""A throwaway real Prometheus (Debian's ``/usr/bin/prometheus``) for tests.

It listens on 127.0.0.1, keeps its TSDB in a temporary folder and scrapes static
targets every second. Each target carries the labels the rendered PodMonitor's
relabelling would give a vLLM pod (``llmservice``, ``namespace``), so queries written
for a cluster work unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from llm_operator.sandbox.processes import stop as stop_process
from llm_operator.tuner.server import free_port

PROMETHEUS_BIN = os.environ.get("LLMOP_PROMETHEUS_BIN", "/usr/bin/prometheus")


@dataclass(frozen=True)
class Target:
    """One scrape target: ``host:port`` and the labels put on its series."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)


def prometheus_available() -> bool:
    """True when the Prometheus binary is installed."""
    return shutil.which(PROMETHEUS_BIN) is not None or Path(PROMETHEUS_BIN).exists()


def config_for(targets: Sequence[Target], scrape_interval: str = "1s") -> dict[str, object]:
    """The prometheus.yml for ``targets`` (pure)."""
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval,
                   "scrape_timeout": scrape_interval},
        "scrape_configs": [{
            "job_name": "vllm",
            "metrics_path": "/metrics",
            "static_configs": [{"targets": [t.address], "labels": dict(t.labels)}
                               for t in targets],
        }],
    }


@dataclass
class PrometheusServer:
    """A running Prometheus: ``url``, ``query()`` and ``stop()``."""

    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://127.0.0.1:{self.port}"

    def query(self, promql: str) -> list[dict[str, object]]:
        """An instant query through the HTTP API (raw, for test assertions)."""
        data = urllib.parse.urlencode({"query": promql}).encode()
        with urllib.request.urlopen(f"{self.url}/api/v1/query", data=data, timeout=10) as r:
            body = json.loads(r.read())
        result: list[dict[str, object]] = body["data"]["result"]
        return result

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

    def stop(self) -> None:
        """Stop the server and delete its TSDB."""
        stop_process(self.proc, 15)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_prometheus(targets: Sequence[Target], timeout_s: float = 30.0) -> PrometheusServer:
    """Start Prometheus scraping ``targets`` every second; wait until it is ready."""
    workdir = Path(tempfile.mkdtemp(prefix="llmop-prom-"))
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config_for(targets)))
    port = free_port()
    log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(
        [PROMETHEUS_BIN, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'data'}",
         "--storage.tsdb.retention.time=1h", f"--web.listen-address=127.0.0.1:{port}",
         "--web.enable-lifecycle"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    log.close()
    server = PrometheusServer(proc=proc, port=port, workdir=workdir)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = (workdir / "prometheus.log").read_text(errors="replace")[-2000:]
            shutil.rmtree(workdir, ignore_errors=True)
            raise RuntimeError(f"prometheus exited with {proc.returncode}:\n{text}")
        with contextlib.suppress(urllib.error.URLError, OSError):
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return server
        time.sleep(0.2)
    server.stop()
    raise TimeoutError(f"prometheus not ready after {timeout_s:.0f} s")


@contextlib.contextmanager
def running_prometheus(targets: Sequence[Target]) -> Iterator[PrometheusServer]:
    """Context manager around :func:`start_prometheus`."""
    server = start_prometheus(targets)
    try:
        yield server
    finally:
        server.stop()


"""The operator's API client with kubeconfig credentials that expire: an exec plugin (as
``aws eks get-token`` or ``gke-gcloud-auth-plugin``), a real subprocess handing out a new
token on each run, and an HTTP server that records the ``Authorization`` header of every
request. A burst runs the plugin once, every request carries the token, and an expiring
token is renewed while the client runs (kubernetes_asyncio's loader, run again by
``controller/kube.py``), not after the API server has refused it."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp.web
import pytest
import yaml
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import kube_config

from llm_operator.controller import kube as kube_module
from llm_operator.controller.kube import KubeClient

EXEC_API = "client.authentication.k8s.io/v1"
# Each run: the next token, expiring in a minute (inside the library's five-minute margin,
# so every renewal runs the plugin again).
PLUGIN = """
import datetime, json, pathlib, sys
runs, api_version = pathlib.Path(sys.argv[1]), sys.argv[2]
n = len(runs.read_text().splitlines()) + 1 if runs.exists() else 1
with runs.open("a") as f:
    f.write(f"{n}\\n")
expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=1)
print(json.dumps({"apiVersion": api_version, "kind": "ExecCredential", "status": {
    "token": f"t-{n}", "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
"""


async def recording_server(seen: list[str]) -> tuple[aiohttp.web.AppRunner, str]:
    async def answer(request: aiohttp.web.Request) -> aiohttp.web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return aiohttp.web.json_response({"kind": "Status", "code": 404, "reason": "NotFound",
                                          "details": {"kind": "configmaps"}}, status=404)

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def write_kubeconfig(path: Path, server: str, plugin: Path, runs: Path) -> None:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": EXEC_API, "command": sys.executable,
            "args": [str(plugin), str(runs), EXEC_API], "interactiveMode": "Never"}}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))


REFRESH_S = 1.0


def test_an_exec_plugins_token_is_sent_and_renewed_before_it_expires(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin, runs, config = tmp_path / "plugin.py", tmp_path / "runs", tmp_path / "kubeconfig"
    plugin.write_text(PLUGIN)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod
    # 1 s: at 0.3 s a burst of 200 requests on a loaded 2-core machine outlasted one
    # interval and a renewal legitimately ran during it (2 runs, 2026-11-27).
    monkeypatch.setattr(kube_module, "CREDENTIALS_REFRESH_SECONDS", REFRESH_S)
    seen: list[str] = []

    def plugin_runs() -> int:
        return len(runs.read_text().splitlines())

    async def scenario() -> dict[str, Any]:
        runner, url = await recording_server(seen)
        write_kubeconfig(config, url, plugin, runs)
        # $KUBECONFIG as the library read it at import (a process started with it set)
        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))
        try:
            kube = await KubeClient.from_environment()
            try:
                burst = await asyncio.gather(
                    *(kube.get("v1", "ConfigMap", "default", f"cm-{i}") for i in range(200)))
                burst_runs = plugin_runs()
                # Renewals while the client runs: a third run of the plugin means the
                # second one's token is in place.
                deadline = time.monotonic() + 30
                while plugin_runs() < 3:
                    assert time.monotonic() < deadline, "the token was never renewed"
                    await asyncio.sleep(0.05)
                later = await kube.get("v1", "ConfigMap", "default", "cm-later")
            finally:
                await kube.close()
            await asyncio.sleep(2.0)  # a plugin started just before close() has written
            runs_at_close = plugin_runs()
            await asyncio.sleep(3 * REFRESH_S)  # closed: no more renewals (3 intervals)
            return {"burst": burst, "burst_runs": burst_runs, "later": later,
                    "runs_at_close": runs_at_close, "runs_after": plugin_runs()}
        finally:
            await runner.cleanup()

    out = asyncio.run(scenario())
    assert out["burst"] == [None] * 200 and out["later"] is None  # 404: absent
    assert out["burst_runs"] == 1, "the plugin ran per request, not once for the burst"
    assert seen[:200] == ["Bearer t-1"] * 200
    renewed = {f"Bearer t-{n}" for n in range(2, out["runs_at_close"] + 1)}
    assert seen[200] in renewed, seen[200]  # the request after the burst: a renewed token
    assert out["runs_after"] == out["runs_at_close"], "renewals went on after close()"


def test_proxy_variables_in_the_environment_do_not_divert_api_calls(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As the transport before it: the client talks to the API server the kubeconfig or
    the pod names, not through a proxy some variable of the environment names (the
    library's session would; controller/kube.py gives it one that does not)."""
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    for var in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens on port 9
    seen: list[str] = []

    async def scenario() -> Any:
        runner, url = await recording_server(seen)
        cfg = Configuration()
        cfg.host = url
        kube = KubeClient(cfg, timeout=5)
        try:
            return await kube.get("v1", "ConfigMap", "default", "cm")
        finally:
            await kube.close()
            await runner.cleanup()

    assert asyncio.run(scenario()) is None  # the server's 404, not a proxy's refusal
    assert len(seen) == 1

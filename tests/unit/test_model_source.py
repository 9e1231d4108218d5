"""`llm-operator plan --model-config` (issue 33): a model's facts from a local folder, and
from a Hub that a local HTTP server plays (HF_ENDPOINT; no test reaches the internet).

The server answers the two routes huggingface_hub uses, ``/api/models/{repo}/revision/
{rev}`` and ``/{repo}/resolve/{rev}/{file}``, with the ETag and X-Repo-Commit headers the
Hub sends; a gated repository answers 401 without a token.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator import cli
from llm_operator.cli.modelsource import facts_from_folder, facts_from_hub

pytestmark = pytest.mark.unit

pytest.importorskip("huggingface_hub")

# Mirrors openai/gpt-oss-20b's config.json (the fields that matter).
GPT_OSS_20B: dict[str, Any] = {
    "model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 24,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "intermediate_size": 2880, "num_local_experts": 32, "experts_per_token": 4,
    "sliding_window": 128, "attention_bias": True, "vocab_size": 201088,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    "rope_scaling": {"rope_type": "yarn", "factor": 32.0,
                     "original_max_position_embeddings": 4096},
    "quantization_config": {"quant_method": "mxfp4"},
}
INDEX = {"metadata": {"total_size": 13_761_300_000}, "weight_map": {}}
COMMIT = "a" * 40
TOKEN = "hf_test_token"
REPOS = {"openai/gpt-oss-20b": False, "gated/gpt-oss-20b": True}  # name -> gated


class _Hub(BaseHTTPRequestHandler):
    requests: list[str] = []

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _files(self, repo: str) -> dict[str, bytes]:
        files = {"config.json": json.dumps(GPT_OSS_20B).encode()}
        if repo != "nosafetensors/gpt-oss-20b":
            files["model.safetensors.index.json"] = json.dumps(INDEX).encode()
        return files

    def _route(self, body: bool) -> None:
        _Hub.requests.append(self.path)
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[:2] == ["api", "models"]:
            repo, rev = "/".join(parts[2:4]), parts[5] if len(parts) > 5 else "main"
            file = None
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo, rev, file = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        else:
            return self._send(404, b"{}", {})
        if repo not in REPOS and repo != "nosafetensors/gpt-oss-20b":
            return self._send(404, b'{"error": "Repository not found"}',
                              {"X-Error-Code": "RepoNotFound"})
        if REPOS.get(repo) and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._send(401, b'{"error": "gated"}', {"X-Error-Code": "GatedRepo"})
        if rev not in ("main", COMMIT):
            return self._send(404, b'{"error": "Revision not found"}',
                              {"X-Error-Code": "RevisionNotFound"})
        if file is None:
            payload = json.dumps({"id": repo, "sha": COMMIT, "siblings": [
                {"rfilename": f} for f in self._files(repo)]}).encode()
            return self._send(200, payload if body else b"", {}, len(payload))
        data = self._files(repo).get(file)
        if data is None:
            return self._send(404, b'{"error": "Entry not found"}',
                              {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
        etag = '"' + hashlib.sha256(data).hexdigest() + '"'
        self._send(200, data if body else b"", {"ETag": etag, "X-Repo-Commit": COMMIT},
                   len(data))

    def _send(self, code: int, data: bytes, headers: dict[str, str],
              length: int | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length if length is not None else len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if data:
            self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._route(True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._route(False)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    from llm_operator.cli import modelsource
    monkeypatch.setattr(modelsource, "_READ", {})
    _Hub.requests = []
    yield endpoint
    server.shutdown()


def test_facts_from_the_hub_at_a_revision_and_cached(hub: str) -> None:
    facts = facts_from_hub("openai/gpt-oss-20b", COMMIT)
    assert facts.source == "config.json" and facts.quantization == "mxfp4"
    assert facts.weight_bytes == 13_761_300_000
    assert (facts.full_attention_layers, facts.sliding_window_layers) == (12, 12)
    asked = len(_Hub.requests)
    assert asked and all(COMMIT in r or "/api/" in r for r in _Hub.requests)
    assert facts_from_hub("openai/gpt-oss-20b", COMMIT) is facts  # once per repo+revision
    assert len(_Hub.requests) == asked


def test_gated_repository_needs_the_token(hub: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(cli.InputError) as exc:
        facts_from_hub("gated/gpt-oss-20b", None)
    assert "gated" in exc.value.problem and "HF_TOKEN" in exc.value.fix
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert facts_from_hub("gated/gpt-oss-20b", None).num_layers == 24


def test_missing_revision_and_missing_index(hub: str) -> None:
    with pytest.raises(cli.InputError) as exc:
        facts_from_hub("openai/gpt-oss-20b", "v9")
    assert "spec.model.revision" in exc.value.fix
    # No safetensors index: the facts stand; the weight bytes are estimated.
    facts = facts_from_hub("nosafetensors/gpt-oss-20b", None)
    assert facts.weight_bytes is None and facts.quantization == "mxfp4"


def _service(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "llmops.dev/v1alpha1", "kind": "LLMService",
        "metadata": {"name": "oss", "namespace": "ml"},
        "spec": {"model": {"name": name}, "gpus": {"product": "NVIDIA-H100-80GB-HBM3"},
                 "workload": {"concurrency": 32, "inputTokens": 1536, "outputTokens": 512}}}))
    return path


def test_plan_command_reads_a_local_folder(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "gpt-oss-20b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GPT_OSS_20B))
    (folder / "model.safetensors.index.json").write_text(json.dumps(INDEX))
    svc = _service(tmp_path, "openai/gpt-oss-20b")
    # Without the config the model is not in the catalog: refused, naming the field.
    assert cli.main(["plan", str(svc), "--no-curve"]) == 2
    assert "spec.model.architecture" in capsys.readouterr().err
    assert cli.main(["plan", str(svc), "--no-curve", "--model-config", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "weightBytes from model.safetensors.index.json" in out
    assert facts_from_folder(folder, "x").weight_bytes == 13_761_300_000
    # render plans the same way: the manifests of a model the catalog does not know.
    assert cli.main(["render", str(svc), "--model-config", str(folder)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert "openai/gpt-oss-20b" in json.dumps(deployment)


def test_plan_command_from_the_hub(hub: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    svc = _service(tmp_path, "openai/gpt-oss-20b")
    assert cli.main(["plan", str(svc), "--model-config", "hub"]) == 0
    out = capsys.readouterr().out
    assert "architecture from config.json" in out
    assert "performance model does not read" in out
    # A folder without config.json: a clear error naming the option.
    assert cli.main(["plan", str(svc), "--model-config", str(tmp_path)]) == 2
    assert "has no config.json" in " ".join(capsys.readouterr().err.split())

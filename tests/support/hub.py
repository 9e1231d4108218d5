"""A local stand-in for the Hugging Face Hub (HF_ENDPOINT), for the tests that read a
model's config.json: ``llm-operator plan --model-config hub`` (tests/unit) and the
operator's facts Job (tests/integration). No test reaches the internet.

The server answers the two routes huggingface_hub uses, ``/api/models/{repo}/revision/
{rev}`` and ``/{repo}/resolve/{rev}/{file}``, with the ETag and X-Repo-Commit headers the
Hub sends; a gated repository answers 401 without the right token.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

# openai/gpt-oss-20b's config.json as published (the committed corpus fixture).
GPT_OSS_20B: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "model_configs"
     / "openai--gpt-oss-20b_config.json").read_text())
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



class LocalHub:
    """The stand-in on a free local port, in a thread: ``with LocalHub() as hub:``
    ``hub.endpoint`` is the HF_ENDPOINT; ``_Hub.requests`` the paths asked for."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        _Hub.requests = []
        self.thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()

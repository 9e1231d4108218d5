"""A local stand-in for the Hugging Face Hub (what ``HF_ENDPOINT`` points at), so that
no test and no demo reaches the internet: the facts Job reads a model's ``config.json``
from it, and on the real nodes the vLLM pod's ``download-model`` init container downloads
the demo's model from it with the Hugging Face client the image ships, exactly as it
would from huggingface.co.

It answers the routes ``huggingface_hub`` uses: ``/api/models/{repo}/revision/{rev}``
(``repo_info``, ``snapshot_download``), ``/api/models/{repo}/tree/{rev}``
(``list_repo_files``) and ``/{repo}/resolve/{rev}/{file}`` (``hf_hub_download``), with the
ETag and X-Repo-Commit headers the Hub sends. A gated repository answers 401 without the
right token; an unknown repository, revision or file answers 404 with the Hub's error code.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote

COMMIT = "a" * 40
Files = Mapping[str, "bytes | Path"]


def folder_files(folder: Path) -> dict[str, bytes | Path]:
    """A model folder's files, by their path in the repository (read when asked for)."""
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))
            if p.is_file()}


class LocalHub:
    """The stand-in on a free port of ``host``, in a thread: ``with LocalHub(repos) as
    hub:``; ``hub.endpoint`` is the HF_ENDPOINT, ``hub.requests`` the paths asked for.

    ``repos``: repository name -> its files (bytes, or a path read when asked for);
    ``gated``: the names that need ``Authorization: Bearer TOKEN``."""

    def __init__(self, repos: Mapping[str, Files], *, host: str = "127.0.0.1",
                 gated: frozenset[str] = frozenset(), token: str | None = None) -> None:
        self.repos = repos
        self.gated = gated
        self.token = token
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                hub._route(self, body=True)

            def do_HEAD(self) -> None:  # noqa: N802
                hub._route(self, body=False)

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.endpoint = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self.thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ routes
    def _route(self, req: BaseHTTPRequestHandler, *, body: bool) -> None:
        self.requests.append(req.path)
        parts = [unquote(p) for p in req.path.split("?")[0].strip("/").split("/")]
        if parts[:2] == ["api", "models"] and len(parts) >= 6:
            repo, kind, rev, file = "/".join(parts[2:4]), parts[4], parts[5], None
            if kind not in ("revision", "tree"):
                return _send(req, 404, b"{}", body=body)
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo, kind, rev, file = "/".join(parts[:2]), "resolve", parts[3], "/".join(parts[4:])
        else:
            return _send(req, 404, b"{}", body=body)
        files = self.repos.get(repo)
        if files is None:
            return _send(req, 404, b'{"error": "Repository not found"}', body=body,
                         headers={"X-Error-Code": "RepoNotFound"})
        if repo in self.gated and req.headers.get("Authorization") != f"Bearer {self.token}":
            return _send(req, 401, b'{"error": "gated"}', body=body,
                         headers={"X-Error-Code": "GatedRepo"})
        if rev not in ("main", COMMIT):
            return _send(req, 404, b'{"error": "Revision not found"}', body=body,
                         headers={"X-Error-Code": "RevisionNotFound"})
        if kind == "revision":
            payload = json.dumps({"id": repo, "sha": COMMIT, "siblings": [
                {"rfilename": f} for f in files]}).encode()
            return _send(req, 200, payload, body=body)
        if kind == "tree":
            entries = []
            for name in files:
                data = _read(files[name])
                entries.append({"type": "file", "path": name, "size": len(data),
                                "oid": hashlib.sha1(data).hexdigest()})  # noqa: S324
            return _send(req, 200, json.dumps(entries).encode(), body=body)
        assert file is not None
        if file not in files:
            return _send(req, 404, b'{"error": "Entry not found"}', body=body,
                         headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
        data = _read(files[file])
        etag = '"' + hashlib.sha256(data).hexdigest() + '"'
        _send(req, 200, data, body=body, headers={"ETag": etag, "X-Repo-Commit": COMMIT},
              content_type="application/octet-stream")


def _read(item: bytes | Path) -> bytes:
    return item.read_bytes() if isinstance(item, Path) else item


def _send(req: BaseHTTPRequestHandler, code: int, data: bytes, *, body: bool,
          headers: Mapping[str, str] | None = None,
          content_type: str = "application/json") -> None:
    req.send_response(code)
    req.send_header("Content-Type", content_type)
    req.send_header("Content-Length", str(len(data)))
    for key, value in (headers or {}).items():
        req.send_header(key, value)
    req.end_headers()
    if body and data:
        req.wfile.write(data)

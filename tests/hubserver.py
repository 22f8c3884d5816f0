"""A stand-in for the Hugging Face Hub on 127.0.0.1, for download tests without a network.

It serves only the endpoints huggingface-hub's `list_repo_tree` and `hf_hub_download`
call (read from huggingface_hub 2.x: hf_api._iter_repo_tree_pages, file_download
.get_hf_file_metadata and .http_get):

    GET  /api/models/<owner>/<name>/tree/<revision>?recursive=True   JSON list of files
    HEAD /<owner>/<name>/resolve/<revision>/<path>                    X-Repo-Commit, ETag, Content-Length
    GET  /<owner>/<name>/resolve/<revision>/<path>                    the bytes; honours Range

Errors carry the X-Error-Code header the client turns into RepositoryNotFoundError,
GatedRepoError or RemoteEntryNotFoundError. Faults can be injected per file: `cut[path] = n`
sends the full Content-Length but closes after n bytes (once); `fail[path] = status`
answers GET with that status until removed. Every request is recorded.

    hub = FakeHub(); hub.add("me/tiny-GGUF", {"tiny-q8_0.gguf": b"GGUF..."})
    with hub.serving() as url: ...   # HF_ENDPOINT=url
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FakeHub:
    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    cut: dict[str, int] = field(default_factory=dict)  # "repo/path" -> bytes sent before closing (once)
    fail: dict[str, int] = field(default_factory=dict)  # "repo/path" -> HTTP status for GET
    requests: list[Request] = field(default_factory=list)

    def add(self, repo: str, files: dict[str, bytes]) -> None:
        self.repos[repo] = dict(files)

    def downloads(self, repo: str, path: str) -> list[Request]:
        """GET requests for one file's bytes."""
        return [r for r in self.requests if r.method == "GET" and r.path.endswith(f"/{repo}/resolve/main/{path}")]

    @contextlib.contextmanager
    def serving(self) -> Iterator[str]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_HEAD(self) -> None:
                hub._handle(self, body=False)

            def do_GET(self) -> None:
                hub._handle(self, body=True)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()

    # -- request handling -------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        url = urlsplit(h.path)
        path = unquote(url.path)
        self.requests.append(Request(h.command, path, {k.lower(): v for k, v in h.headers.items()}))
        if path.startswith("/api/models/"):
            return self._tree(h, path[len("/api/models/") :])
        parts = path.lstrip("/").split("/")
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._file(h, f"{parts[0]}/{parts[1]}", "/".join(parts[4:]), body)
        self._error(h, 404, None, body)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str | None, body: bool = True) -> None:
        payload = json.dumps({"error": code or "not found"}).encode()
        h.send_response(status)
        if code:
            h.send_header("X-Error-Code", code)
            h.send_header("X-Error-Message", code)
        h.send_header("X-Repo-Commit", COMMIT)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        if body:
            h.wfile.write(payload)

    def _repo_or_error(self, h: BaseHTTPRequestHandler, repo: str, body: bool) -> dict[str, bytes] | None:
        if repo not in self.repos:
            self._error(h, 404, "RepoNotFound", body)
            return None
        if repo in self.gated and "authorization" not in {k.lower() for k in h.headers.keys()}:
            self._error(h, 403, "GatedRepo", body)
            return None
        return self.repos[repo]

    def _tree(self, h: BaseHTTPRequestHandler, rest: str) -> None:
        owner, name, *_ = rest.split("/")
        files = self._repo_or_error(h, f"{owner}/{name}", True)
        if files is None:
            return
        listing = [
            {"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": path}
            for path, data in sorted(files.items())
        ]
        payload = json.dumps(listing).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    def _file(self, h: BaseHTTPRequestHandler, repo: str, path: str, body: bool) -> None:
        files = self._repo_or_error(h, repo, body)
        if files is None:
            return
        if path not in files:
            return self._error(h, 404, "EntryNotFound", body)
        key = f"{repo}/{path}"
        if body and key in self.fail:
            return self._error(h, self.fail[key], None, body)
        data = files[path]
        start = 0
        status = 200
        ranged = h.headers.get("Range")
        if body and ranged and ranged.startswith("bytes="):
            start = int(ranged[len("bytes=") :].split("-")[0])
            status = 206
        h.send_response(status)
        h.send_header("X-Repo-Commit", COMMIT)
        h.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(len(data) - start))
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if not body:
            return
        if key in self.cut:
            n = self.cut.pop(key)
            h.wfile.write(data[start : start + n])
            h.wfile.flush()
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(2)
            return
        h.wfile.write(data[start:])

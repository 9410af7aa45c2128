"""TEST DOUBLE: a stand-in for the Hugging Face Hub, serving checkpoint folders from disk.

The real hub cannot be reached from this machine or from CI. This server speaks the parts of the
hub's HTTP protocol that huggingface_hub uses to read a model: HEAD/GET on
`/{org}/{name}/resolve/{revision}/{file}` with the X-Repo-Commit / ETag / X-Linked-Size
headers, HTTP range requests (206 + Content-Range), and the hub's error headers
(X-Error-Code: RepoNotFound / EntryNotFound / GatedRepo). Point HF_ENDPOINT at it.

It also serves the model API that huggingface_hub's HfApi calls for discovery: the listing
`GET /api/models?filter=base_model:quantized:ORG/NAME&sort=downloads&direction=-1&limit=N` (the hub's
model-tree relation, from each repo's `models` metadata) and `GET /api/models/{repo}` (model info
with sha, siblings, gated, tags, library_name, downloads).

It records every request and the bytes it sent, so tests can prove that only headers were read.
Ranges are read from disk as asked (sparse test checkpoints of many GB on paper stay cheap).
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_PATH = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")


class HubStandIn:
    def __init__(self, repos: dict[str, Path], *, gated: set[str] = frozenset(), ignore_range: bool = False,
                 models: dict[str, dict] | None = None, commits: dict[str, str] | None = None,
                 latency_s: float = 0.0):
        self.repos = repos
        self.gated = set(gated)
        self.ignore_range = ignore_range
        # repo -> {"base_model": "org/name", "relation": "quantized", "downloads": n, "tags": [...],
        #          "library_name": "...", "files": [...] (listed instead of the folder's)}
        self.models = models or {}
        self.commits = commits or {}
        self.latency_s = latency_s  # added to every answer: a hub across a WAN, for benchmarks
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, range)
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address
        return f"http://{host}:{port}"

    def __enter__(self) -> "HubStandIn":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _error(self, status: int, code: str) -> None:
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _json(self, payload) -> None:
                body = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _model_info(self, repo: str) -> dict:
                meta = hub.models.get(repo, {})
                folder = hub.repos.get(repo)
                files = meta.get("files") or (sorted(p.name for p in folder.iterdir() if p.is_file()) if folder else [])
                base = meta.get("base_model")
                tags = list(meta.get("tags", [])) + ([f"base_model:{meta.get('relation', 'quantized')}:{base}"]
                                                     if base else [])
                return {"id": repo, "modelId": repo, "sha": hub.commits.get(repo, COMMIT), "private": False,
                        "gated": "manual" if repo in hub.gated else False, "downloads": meta.get("downloads", 0),
                        "likes": 0, "tags": tags, "library_name": meta.get("library_name"),
                        "siblings": [{"rfilename": f} for f in files]}

            def _api(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                if url.path == "/api/models":
                    wanted = query.get("filter", [])
                    rows = []
                    for repo in hub.repos:
                        tags = self._model_info(repo)["tags"]
                        if all(f in tags for f in wanted):
                            rows.append(self._model_info(repo))
                    if query.get("sort") == ["downloads"]:
                        rows.sort(key=lambda r: r["downloads"], reverse=query.get("direction") != ["1"])
                    limit = int(query.get("limit", ["1000"])[0])
                    return self._json(rows[:limit])
                m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/[^/]+)?$", url.path)
                if not m or m[1] not in hub.repos:
                    return self._error(404, "RepoNotFound")
                return self._json(self._model_info(m[1]))

            def _serve(self, send_body: bool) -> None:
                with hub._lock:
                    hub.requests.append((self.command, self.path, self.headers.get("Range")))
                if hub.latency_s:
                    time.sleep(hub.latency_s)
                if self.path.startswith("/api/"):
                    return self._api()
                match = _PATH.match(self.path.split("?")[0])
                if not match:
                    return self._error(404, "RepoNotFound")
                repo, file = match["repo"], match["file"]
                if repo in hub.gated:
                    return self._error(403, "GatedRepo")
                if repo not in hub.repos:
                    return self._error(401, "RepoNotFound")
                path = hub.repos[repo] / file
                if ".." in file or not path.is_file():
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("X-Repo-Commit", COMMIT)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                size = path.stat().st_size
                etag = hashlib.sha256(f"{repo}/{file}:{size}:{path.stat().st_mtime_ns}".encode()).hexdigest()
                status, start, end = 200, 0, size - 1
                spec = self.headers.get("Range")
                if spec and not hub.ignore_range:
                    m = re.match(r"bytes=(\d+)-(\d*)$", spec)
                    start = int(m[1])
                    end = min(int(m[2]) if m[2] else size - 1, size - 1)
                    status = 206
                with open(path, "rb") as fh:
                    fh.seek(start)
                    body = fh.read(end + 1 - start) if send_body else b""
                length = end + 1 - start
                self.send_response(status)
                self.send_header("X-Repo-Commit", hub.commits.get(repo, COMMIT))
                self.send_header("ETag", f'"{etag}"')
                self.send_header("X-Linked-Size", str(size))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.send_header("Content-Length", str(length))
                self.end_headers()
                if send_body:
                    self.wfile.write(body)
                    with hub._lock:
                        hub.bytes_sent += len(body)

            def do_HEAD(self):
                self._serve(send_body=False)

            def do_GET(self):
                self._serve(send_body=True)

        return Handler

"""TEST DOUBLE: a stand-in for the Hugging Face Hub, serving checkpoint folders from disk.

The real hub cannot be reached from this machine or from CI. This server speaks the parts of the
hub's HTTP protocol that huggingface_hub uses to read a model: HEAD/GET on
`/{org}/{name}/resolve/{revision}/{file}` with the X-Repo-Commit / ETag / X-Linked-Size
headers, HTTP range requests (206 + Content-Range), and the hub's error headers
(X-Error-Code: RepoNotFound / EntryNotFound / GatedRepo). Point HF_ENDPOINT at it.

It records every request and the bytes it sent, so tests can prove that only headers were read.
"""
from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_PATH = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")


class HubStandIn:
    def __init__(self, repos: dict[str, Path], *, gated: set[str] = frozenset(), ignore_range: bool = False):
        self.repos = repos
        self.gated = set(gated)
        self.ignore_range = ignore_range
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

            def _serve(self, send_body: bool) -> None:
                with hub._lock:
                    hub.requests.append((self.command, self.path, self.headers.get("Range")))
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
                data = path.read_bytes()
                etag = hashlib.sha256(data).hexdigest()
                status, body = 200, data
                spec = self.headers.get("Range")
                if spec and not hub.ignore_range:
                    m = re.match(r"bytes=(\d+)-(\d*)$", spec)
                    start = int(m[1])
                    end = min(int(m[2]) if m[2] else len(data) - 1, len(data) - 1)
                    status, body = 206, data[start:end + 1]
                self.send_response(status)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{etag}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(body)))
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

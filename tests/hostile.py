"""TEST DOUBLES that misbehave on purpose: an OpenAI-style server and a hub that lie, hang, flood
or attack, as real HTTP servers on 127.0.0.1 (raw sockets, so any byte can be sent), each with a
bounded lifetime (a server stops itself after `lifetime_s` whatever the test does).

No real server can be made to send these answers on demand; the well-behaved paths run against
real vLLM (tests/test_server_e2e.py, tests/test_doctor_vllm.py) and the hub stand-in
(tests/hub_standin.py).

HostileServer(routes): routes maps a request path (without the query), or "METHOD path", to a behaviour, a function
(send) -> None that writes whatever it likes with send(bytes) and may sleep; the connection closes
when it returns. Helpers build the common answers.
"""
from __future__ import annotations

import json
import socket
import threading
import time

PROMETHEUS_COUNTERS = """# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{model_name="m"}} {generated}
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{model_name="m"}} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {draft_tokens}
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted}
"""


def http_head(status: int = 200, content_type: str = "application/json", length: int | None = None,
              extra: dict | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def json_answer(payload, extra: dict | None = None):
    body = json.dumps(payload).encode()

    def behave(send):
        send(http_head(length=len(body), extra=extra) + body)
    return behave


def text_answer(text: str):
    body = text.encode()

    def behave(send):
        send(http_head(content_type="text/plain", length=len(body)) + body)
    return behave


def endless(prefix: bytes = b'{"data": [', piece: bytes = b'{"id": "m"},' * 1000):
    """A 200 answer whose body never ends, sent as fast as the client reads."""
    def behave(send):
        send(http_head() + prefix)
        while True:
            send(piece)
    return behave


def drip(body: bytes, every_s: float = 0.2):
    """A 200 answer that sends one byte every `every_s` seconds (never a read timeout)."""
    def behave(send):
        send(http_head(length=len(body)))
        for i in range(len(body)):
            send(body[i:i + 1])
            time.sleep(every_s)
    return behave


def raw(data: bytes):
    """Bytes that are not HTTP at all."""
    def behave(send):
        send(data)
    return behave


def sse(events: list[bytes], then=None):
    """A streamed completion: each event sent as given (no chunked framing), then `then(send)`."""
    def behave(send):
        send(http_head(content_type="text/event-stream"))
        for event in events:
            send(event)
        if then:
            then(send)
    return behave


def token_event(text: str = "x", usage: dict | None = None) -> bytes:
    chunk = {"choices": [{"index": 0, "text": text, "finish_reason": None}]}
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class HostileServer:
    def __init__(self, routes: dict, lifetime_s: float = 60.0):
        self.routes = dict(routes)
        self.hits: list[str] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.deadline = time.monotonic() + lifetime_s
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()
        timer = threading.Timer(lifetime_s, self.stop)
        timer.daemon = True
        timer.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket):
        try:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                piece = conn.recv(4096)
                if not piece:
                    return
                data += piece
            method, path = (data.split(b" ", 2)[:2] if data.count(b" ") >= 2 else (b"GET", b"/"))
            method, path = method.decode("latin-1"), path.decode("latin-1")
            self.hits.append(path)
            bare = path.split("?")[0]
            behave = (self.routes.get(f"{method} {bare}") or self.routes.get(bare) or self.routes.get("*")
                      or json_answer({"error": "no"}))

            def send(chunk: bytes):
                if self.stopped.is_set() or time.monotonic() > self.deadline:
                    raise OSError("the hostile server's lifetime is over")
                conn.sendall(chunk)
            behave(send)
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self):
        self.stopped.set()
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def hub_page(rows: list[dict], next_url: str | None):
    """One page of the hub's model listing, with a Link: next header when next_url is given."""
    extra = {"Link": f'<{next_url}>; rel="next"'} if next_url else None
    return json_answer(rows, extra)


def listed(repo: str, sha: str, files=("config.json", "model.safetensors")) -> dict:
    return {"id": repo, "sha": sha, "downloads": 1, "gated": False, "tags": [], "library_name": "transformers",
            "siblings": [{"rfilename": f} for f in files]}

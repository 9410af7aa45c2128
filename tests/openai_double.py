"""A TEST DOUBLE of an OpenAI-compatible streaming server (used by test_bench and test_doctor).

A real HTTP server on 127.0.0.1 (its own thread) that speaks server-sent events the way vLLM does
(chunked transfer, `data: {...}` events, per-chunk usage when asked, `data: [DONE]`), and
misbehaves on demand: HTTP errors, streams cut mid-way, error events, stalls. It exists because a
real server cannot be made to fail in these ways on purpose, and because a non-vLLM OpenAI server
(no /metrics, or metrics of other names) is what it stands for; the happy path against the real
`vllm serve` is tests/test_server_e2e.py and tests/test_doctor_vllm.py.
"""
from __future__ import annotations

import http.server
import json
import socket
import threading
import time


class FakeOpenAIServer:
    """Test double of an OpenAI-compatible server. The request's `model` picks the behaviour:

    ok            one token per chunk, per-chunk usage when asked (vLLM), 5 ms per token
    prefill       as ok, after a 300 ms pause before the first token (a long prefill)
    plain         no per-chunk usage even when asked; final usage block (OpenAI style)
    multi         three tokens per chunk, no per-chunk usage, final usage says the true total
    eos           stops at 4 tokens with finish_reason "stop" (ignores ignore_eos)
    strict        HTTP 400 when a vLLM-only field (ignore_eos) is sent
    http500       HTTP 500 with an OpenAI error body
    cut           chunked stream that breaks (socket closed) after 3 tokens
    nodone        stream that ends cleanly after 3 tokens but never sends [DONE]
    error-event   `data: {"error": ...}` after 2 tokens, then [DONE] (vLLM's engine-death path)
    stall         2 tokens, then silence for 3 s
    flaky         every second request is cut after 2 tokens
    """

    def __init__(self, models=("ok",), metrics: str | None = None):
        self.models = list(models)
        self.metrics = metrics  # Prometheus text served at /metrics; None: no /metrics (404)
        self.requests: list[dict] = []
        self.counter = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _json(self, status, payload):
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in outer.models]})
                elif self.path == "/version":
                    self._json(200, {"version": "double-1.0"})
                elif self.path == "/metrics" and outer.metrics is not None:
                    body = outer.metrics.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def _event(self, payload, chunked=True):
                data = b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n"
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                else:
                    self.wfile.write(data)
                self.wfile.flush()

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                    outer.counter += 1
                    count = outer.counter
                mode = body.get("model")
                chat = self.path.endswith("/chat/completions")
                n = body.get("max_tokens", 16)
                continuous = (body.get("stream_options") or {}).get("continuous_usage_stats") and mode in (
                    "ok", "prefill", "eos", "strict", "cut", "nodone", "error-event", "stall", "flaky")
                if mode == "strict" and "ignore_eos" in body:
                    return self._json(400, {"error": {"message": "Unrecognized request argument supplied: ignore_eos"}})
                if mode == "http500":
                    return self._json(500, {"error": {"message": "engine exploded", "type": "InternalServerError"}})
                if mode not in outer.models:
                    return self._json(404, {"error": {"message": f"The model `{mode}` does not exist."}})
                chunked = mode != "nodone"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                if mode == "prefill":
                    time.sleep(0.3)
                stop_at = {"eos": 4, "cut": 3, "nodone": 3, "error-event": 2, "stall": 2}.get(mode, n)
                if mode == "flaky" and count % 2 == 0:
                    stop_at = 2
                per_chunk = 3 if mode == "multi" else 1
                produced = 0
                if chat:  # vLLM's first chat chunk: the role, no content
                    self._event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, chunked)
                while produced < min(n, stop_at):
                    step = min(per_chunk, n - produced)
                    produced += step
                    text = " w" * step
                    choice = ({"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text})
                    finish = None
                    if produced >= n:
                        finish = "length"
                    elif mode == "eos" and produced >= stop_at:
                        finish = "stop"
                    choice["finish_reason"] = finish
                    chunk = {"object": "text_completion", "choices": [choice]}
                    if continuous:
                        chunk["usage"] = {"prompt_tokens": 7, "completion_tokens": produced,
                                          "total_tokens": 7 + produced}
                    self._event(chunk, chunked)
                    time.sleep(0.005)
                if mode in ("cut", "flaky") and produced < n:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if mode == "error-event":
                    self._event({"error": {"message": "EngineCore encountered an issue.", "code": 500}}, chunked)
                if mode == "stall":
                    time.sleep(3)
                    return
                if mode != "error-event":
                    self._event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": produced,
                                                          "total_tokens": 7 + produced}}, chunked)
                if mode != "nodone":
                    self._event(b"[DONE]", chunked)
                if chunked:
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.close_connection = True

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class QuietServer(http.server.ThreadingHTTPServer):
    """A client that hangs up (a bench that timed out, a cancelled stream) is what some cases test: its
    broken pipe is not an error worth printing, where the print lands in whichever test runs next."""

    def handle_error(self, request, client_address):
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

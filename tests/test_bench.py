"""roofline bench against a TEST DOUBLE of an OpenAI-compatible streaming server.

The double below is a real HTTP server on 127.0.0.1 (its own thread) that speaks server-sent
events the way vLLM does (chunked transfer, `data: {...}` events, per-chunk usage when asked,
`data: [DONE]`), and misbehaves on demand: HTTP errors, streams cut mid-way, error events,
stalls. It exists because a real server cannot be made to fail in these ways on purpose; the
happy path against the real `vllm serve` is tests/test_server_e2e.py.
"""
from __future__ import annotations

import http.server
import io
import json
import re
import socket
import threading
import time

import pytest

from roofline.cli import main
from roofline.errors import RooflineError
from roofline.live.bench import (
    BenchConfig,
    iter_sse_data,
    run_bench,
    split_url,
    stream_once,
)


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

    def __init__(self, models=("ok",)):
        self.models = list(models)
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

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


ALL_MODES = ("ok", "prefill", "plain", "multi", "eos", "strict", "cut", "nodone", "error-event", "stall", "flaky")


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(ALL_MODES) as srv:
        yield srv


def cfg(server, model, **kw):
    base = dict(url=server.url, model=model, max_tokens=12, runs=2, warmup=1, timeout_s=5.0)
    return BenchConfig(**(base | kw)).validate()


def test_decode_rate_excludes_prefill_and_counts_every_token(server):
    run = stream_once(cfg(server, "prefill"), "prefill")
    assert run.ok, run.error
    assert run.completion_tokens == 12 and run.prompt_tokens == 7
    assert run.ttft_s >= 0.3  # the 300 ms prefill lands in TTFT ...
    # ... and not in decode: 11 tokens after the first, >= 5 ms apart (sleep never returns early)
    assert run.decode_tok_s <= 1 / 0.005 * 1.02
    span = run.arrivals[-1][0] - run.arrivals[0][0]
    assert run.decode_tok_s == pytest.approx(11 / span)
    assert span < 0.3  # the decode span does not contain the prefill pause


def test_vllm_fields_are_sent(server):
    stream_once(cfg(server, "ok"), "ok")
    body = server.requests[-1]
    assert body["ignore_eos"] is True and body["temperature"] == 0 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["max_tokens"] == 12 and "prompt" in body


def test_plain_openai_stream_counts_chunks(server):
    run = stream_once(cfg(server, "plain"), "plain")
    assert run.ok and run.completion_tokens == 12 and len(run.arrivals) == 12


def test_multi_token_chunks_use_the_final_usage_total(server):
    run = stream_once(cfg(server, "multi"), "multi")
    assert run.ok, run.error
    assert run.completion_tokens == 12
    assert len(run.arrivals) == 4 and run.arrivals[-1][1] == 12 and run.arrivals[0][1] == 3


def test_chat_api(server):
    run = stream_once(cfg(server, "ok", api="chat"), "ok")
    assert run.ok and run.completion_tokens == 12
    assert server.requests[-1]["messages"][0]["role"] == "user"


def test_http_error_is_one_clear_error(server):
    with pytest.raises(RooflineError, match=r"HTTP 500 .*engine exploded"):
        run_bench(BenchConfig(url=server.url, model="http500", max_tokens=4, runs=2))


def test_unknown_model_is_a_clear_error(server):
    with pytest.raises(RooflineError, match="HTTP 404 .*does not exist"):
        run_bench(BenchConfig(url=server.url, model="nope", max_tokens=4, runs=1))


def test_refused_connection():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(RooflineError, match=f"connection refused by 127.0.0.1:{port}"):
        run_bench(BenchConfig(url=f"http://127.0.0.1:{port}/v1", model="m", max_tokens=4))


@pytest.mark.parametrize("mode, message", [
    # http.client reads a broken chunked stream as its end: the missing [DONE] is what tells
    ("cut", "stream ended after 3 tokens without \\[DONE\\]"),
    ("nodone", "stream ended after 3 tokens without \\[DONE\\]"),
    ("error-event", "server error mid-stream after 2 tokens: EngineCore encountered an issue"),
])
def test_stream_that_stops_midway(server, mode, message):
    run = stream_once(cfg(server, mode), mode)
    assert not run.ok
    assert run.decode_tok_s is None
    assert re.search(message, run.error), run.error


def test_stall_times_out(server):
    start = time.monotonic()
    run = stream_once(cfg(server, "stall", timeout_s=0.5), "stall")
    assert not run.ok and run.error == "timed out: no data for 0.5 s after 2 tokens"
    assert time.monotonic() - start < 2.5  # did not wait for the server's 3 s stall


def test_slow_stream_hits_the_overall_deadline(server):
    # tokens keep coming every 5 ms, but 60 of them take longer than a 0.1 s timeout
    run = stream_once(cfg(server, "ok", max_tokens=60, timeout_s=0.1), "ok")
    assert not run.ok and run.error.startswith("stream still running after 0.1 s")


def test_failed_runs_are_kept_and_completed_runs_measured(server):
    server.counter = 0
    result = run_bench(BenchConfig(url=server.url, model="flaky", max_tokens=8, runs=4, warmup=1))
    assert len(result.runs) == 4
    assert 0 < len(result.completed) < 4
    assert result.decode.n == len(result.completed)
    payload = result.to_json()
    assert payload["failed"] == 4 - len(result.completed)
    assert any("without [DONE]" in (r["error"] or "") for r in payload["runs"])


def test_all_runs_failing_raises(server):
    with pytest.raises(RooflineError, match="no run completed .*without \\[DONE\\]"):
        run_bench(BenchConfig(url=server.url, model="nodone", max_tokens=8, runs=2, warmup=0))


def test_strict_server_gets_a_retry_without_vllm_fields(server):
    result = run_bench(BenchConfig(url=server.url, model="strict", max_tokens=6, runs=1))
    assert result.completed and result.ignore_eos_applied is False
    assert "ignore_eos" not in server.requests[-1]
    assert any("refused vLLM's extra fields" in n for n in result.notes)


def test_eos_stop_is_reported(server):
    result = run_bench(BenchConfig(url=server.url, model="eos", max_tokens=8, runs=1))
    assert result.completion_tokens == 4
    assert any("did not honour ignore_eos" in n for n in result.notes)


def test_model_resolution():
    with FakeOpenAIServer(("only",)) as one:
        result = run_bench(BenchConfig(url=one.url, max_tokens=4, runs=1))
        assert result.model == "only" and result.server_version == "double-1.0"
    with FakeOpenAIServer(("a", "b")) as two:
        with pytest.raises(RooflineError, match="serves 2 models \\(a, b\\); pick one with --model"):
            run_bench(BenchConfig(url=two.url, max_tokens=4, runs=1))


def test_concurrency_sweep(server):
    result = run_bench(BenchConfig(url=server.url, model="ok", max_tokens=10, runs=1,
                                   concurrency=(1, 2, 4), sweep_rounds=2))
    assert [level.concurrency for level in result.sweep] == [1, 2, 4]
    for level in result.sweep:
        assert len(level.runs) == 2 * level.concurrency and all(r.ok for r in level.runs)
        assert level.aggregate_tok_s > 0 and level.per_stream_decode.n == 2 * level.concurrency
    # a server that handles streams in parallel: 4 streams move more tokens per second than 1
    assert result.sweep[2].aggregate_tok_s > result.sweep[0].aggregate_tok_s


def test_sse_parsing_follows_the_spec():
    stream = io.BytesIO(b": comment\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nid: 3\ndata:[DONE]\n\n"
                        b"data: tail-without-blank-line")
    assert list(iter_sse_data(stream, time.monotonic() + 5)) == ['{"a":\n1}', "[DONE]", "tail-without-blank-line"]


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://x/v1", "http://:80/v1", "http://h:notaport/v1"])
def test_bad_url(url):
    with pytest.raises(RooflineError, match="--url"):
        split_url(url)


def test_url_without_path_gets_v1():
    assert split_url("http://127.0.0.1:8000") == ("http", "127.0.0.1", 8000, "/v1")


@pytest.mark.parametrize("args, message", [
    (["--max-tokens", "1"], "'--max-tokens': 1 is not in the range 2<="),
    (["--runs", "0"], "'--runs': 0 is not in the range 1<="),
    (["--concurrency", "1,x"], "--concurrency: 'x' is not a whole number"),
    (["--concurrency", "1,2,2"], "repeats a value"),
    (["--concurrency", "0"], "0 is out of range 1..4096"),
    (["--timeout", "0"], "'--timeout': 0 is out of range"),
    (["--timeout", "nan"], "'--timeout': 'nan' is not a finite number"),
])
def test_cli_bad_options(args, message, capsys):
    assert main(["bench", "--url", "http://127.0.0.1:9/v1", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_cli_json_and_table(server, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--url", server.url, "--model", "ok", "--max-tokens", "8", "--runs", "2",
                 "--concurrency", "1,2", "--sweep-rounds", "1", "--json-out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "decode tok/s" in text and "TTFT ms" in text and "2 of 2 runs completed" in text
    assert "concurrency" in text
    saved = json.loads(out.read_text())
    assert saved["schema"] == "roofline.bench/1" and saved["completed"] == 2
    assert saved["decode_tok_s"]["n"] == 2 and saved["mean_context"] == 7 + 4
    assert [lvl["concurrency"] for lvl in saved["sweep"]] == [1, 2]
    assert main(["bench", "--url", server.url, "--model", "ok", "--max-tokens", "4", "--runs", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "ok"


def test_cli_refused_connection_is_one_line(capsys):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    assert main(["bench", "--url", f"http://127.0.0.1:{port}/v1", "--model", "m"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: connection refused by 127.0.0.1:{port}: is the server running?"

"""roofline bench against a TEST DOUBLE of an OpenAI-compatible streaming server.

The double (tests/openai_double.py) is a real HTTP server on 127.0.0.1 (its own thread) that speaks server-sent
events the way vLLM does (chunked transfer, `data: {...}` events, per-chunk usage when asked,
`data: [DONE]`), and misbehaves on demand: HTTP errors, streams cut mid-way, error events,
stalls. It exists because a real server cannot be made to fail in these ways on purpose; the
happy path against the real `vllm serve` is tests/test_server_e2e.py.
"""
from __future__ import annotations

import io
import json
import re
import socket
import time

import pytest

from openai_double import FakeOpenAIServer
from roofline.cli import main
from roofline.errors import RooflineError
from roofline.live.bench import (
    BenchConfig,
    iter_sse_data,
    run_bench,
    split_url,
    stream_once,
)


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
    # ... and not in decode: 11 tokens after the first over their own span (the client's arrival times, which a busy
    # host can bunch: no bound from the server's 5 ms gaps), far above the 11 / 0.3 s the prefill would leave
    assert run.decode_tok_s > 2 * 11 / 0.3
    span = run.arrivals[-1][0] - run.arrivals[0][0]
    assert run.decode_tok_s == pytest.approx(11 / span)
    assert span < 0.3  # the decode span does not contain the prefill pause


def test_tokens_sent_together_cannot_time_decode(server, monkeypatch):
    """A server whose frontend falls behind its engine sends several steps' tokens together (a 2-core CI host gave 64
    tokens within 0.26 ms: 247,400 tok/s): tokens after the first that arrive sooner than one engine step can follow
    are not timed as decode. The floor is the shortest engine step the tables know (launch.toml [step_host]); the
    fake server's 5 ms gaps stand for such a burst once the floor is set above the whole stream."""
    import roofline.live.bench as bench
    from roofline.data import load_table

    fixed = min(row["fixed_us"] for row in load_table("launch")["step_host"].values())
    assert bench.fastest_engine_step_s() == pytest.approx(fixed * 1e-6)
    assert stream_once(cfg(server, "ok"), "ok").ok  # 11 tokens over ~55 ms: decode is timed
    monkeypatch.setattr(bench, "fastest_engine_step_s", lambda: 10.0)
    run = stream_once(cfg(server, "ok"), "ok")
    assert not run.ok and run.decode_tok_s is None
    assert re.search(r"the 11 tokens after the first arrived within [\d.]+ ms, less than one engine step .*"
                     r"decode cannot be timed from the client", run.error), run.error
    assert run.delivered and run.completion_tokens == 12  # the stream itself ended whole


def test_untimed_streams_still_count_toward_a_rounds_aggregate(server, monkeypatch):
    """A sweep round's aggregate is the tokens its streams delivered over its wall time: a stream whose decode could
    not be timed (its tokens sent together) still delivered them, and counts; its per-stream decode does not."""
    import roofline.live.bench as bench

    calls = []

    def floor() -> float:  # the single-stream runs (warm-up 1 + 2 runs) are timed, the sweep's streams are not
        calls.append(1)
        return 0.0 if len(calls) <= 3 else 10.0

    monkeypatch.setattr(bench, "fastest_engine_step_s", floor)
    result = run_bench(cfg(server, "ok", concurrency=(2,), sweep_rounds=1))
    level = result.sweep[0]
    assert not any(r.ok for r in level.runs) and all(r.delivered for r in level.runs)
    assert level.per_stream_decode is None
    assert level.aggregate_tok_s == pytest.approx(2 * 12 / level.walls_s[0])
    assert {k: level.to_json()[k] for k in ("completed", "timed", "failed")} == {"completed": 2, "timed": 0, "failed": 0}


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
    # a chunked stream cut mid-way: read1 sees the chunk that never ends
    ("cut", "stream broke after 3 tokens: IncompleteRead"),
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
    assert not run.ok and run.error == "timed out: no more data within the 0.5 s timeout after 2 tokens"
    assert time.monotonic() - start < 2.5  # did not wait for the server's 3 s stall


def test_slow_stream_hits_the_overall_deadline(server):
    # tokens keep coming every 5 ms, but 60 of them take longer than a 0.1 s timeout
    run = stream_once(cfg(server, "ok", max_tokens=60, timeout_s=0.1), "ok")
    assert not run.ok and run.error.startswith("stream still running after 0.1 s")


def test_failed_runs_are_kept_and_completed_runs_measured(server):
    server.counter = 0
    result = run_bench(BenchConfig(url=server.url, model="flaky", max_tokens=8, runs=4, warmup=1))
    assert len(result.runs) == 4
    assert 0 < len(result.timed) < 4
    assert result.decode.n == len(result.timed)
    payload = result.to_json()
    # the flaky server breaks its streams: not ended, so failed, neither completed nor timed
    assert payload["failed"] == 4 - len(result.timed) == 4 - payload["completed"] and payload["timed"] == len(result.timed)
    assert any("stream broke" in (r["error"] or "") for r in payload["runs"])


def test_all_runs_failing_raises(server):
    with pytest.raises(RooflineError, match="no run completed .*without \\[DONE\\]"):
        run_bench(BenchConfig(url=server.url, model="nodone", max_tokens=8, runs=2, warmup=0))


def test_strict_server_gets_a_retry_without_vllm_fields(server):
    result = run_bench(BenchConfig(url=server.url, model="strict", max_tokens=6, runs=1))
    assert result.timed and result.ignore_eos_applied is False
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
    lines = (line.rstrip(b"\r") for line in stream.read().split(b"\n"))
    assert list(iter_sse_data(lines)) == ['{"a":\n1}', "[DONE]", "tail-without-blank-line"]


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
    assert "decode tok/s" in text and "TTFT ms" in text and "2 of 2 runs completed, 2 timed" in text
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


def test_progress_never_goes_to_a_pipe():
    """The README's promise: progress only on a terminal. bench, validate and doctor printed their
    per-run lines to a piped stderr."""
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent
    with FakeOpenAIServer(("ok",)) as srv:
        runs = [["bench", "--url", srv.url, "--runs", "2", "--max-tokens", "8"],
                ["validate", str(here / "reference_configs" / "Qwen__Qwen3-8B"), "--url", srv.url, "--runs", "2",
                 "--max-tokens", "8", "--no-record", "--bandwidth", "100000"],  # a fast double: a ceiling above it
                ["doctor", "--url", srv.url, str(here / "reference_configs" / "Qwen__Qwen3-8B"), "--runs", "2",
                 "--max-tokens", "8", "--hardware", "gb10"]]
        for args in runs:
            proc = subprocess.run([sys.executable, "-m", "roofline.cli", *args], capture_output=True, text=True,
                                  timeout=300)
            assert proc.returncode in (0, 3), proc.stderr
            # doctor's partial lines (no /metrics on this server) are findings, not progress
            assert [line for line in proc.stderr.splitlines() if not line.startswith("partial: ")] == [], proc.stderr

"""Servers, hubs and files that lie, hang or attack: every class gives one clear line and a
non-zero exit (or a correct answer where the input is merely unusual), within its deadline, with no
credential or raw control byte printed and nothing written outside its root.

The servers are real HTTP servers on 127.0.0.1 with a bounded lifetime (tests/hostile.py); the hub
listing attacks run through huggingface_hub's own client (HF_ENDPOINT); the files are written by
the libraries that write them (json, tomli-w) or by hand where the point is that they are broken.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile import (
    PROMETHEUS_COUNTERS,
    HostileServer,
    drip,
    endless,
    hub_page,
    json_answer,
    listed,
    raw,
    sse,
    text_answer,
    token_event,
)

HERE = Path(__file__).parent
ROOT = HERE.parent
QWEN = ROOT / "examples" / "Qwen3-8B"
CONTROL = set(range(0x00, 0x20)) - {0x0A} | {0x7F}  # bytes no output line may carry (newline aside)


def roofline(*args, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    environment = {**os.environ, "HF_HUB_OFFLINE": "0", **(env or {})}
    return subprocess.run([sys.executable, "-m", "roofline.cli", *map(str, args)], capture_output=True,
                          timeout=timeout, env=environment, cwd=ROOT)


def one_line_error(proc: subprocess.CompletedProcess, *needles: str, code: int = 1) -> str:
    """The process failed with `code` and one clean line on stderr naming every needle."""
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == code, (proc.returncode, err, proc.stdout[-2000:])
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def clean(data: bytes) -> None:
    """No control byte other than a newline, no raw ESC / NUL / CR / DEL."""
    bad = sorted({b for b in data if b in CONTROL})
    assert not bad, (bad, data[:400])


# ------------------------------------------------------------------ 1. hangs despite --timeout

@pytest.mark.parametrize("routes, needle", [
    ({"/v1/models": endless()}, "answer larger than"),
    ({"/v1/models": drip(b'{"data": [{"id": "m"}]}' * 4, every_s=0.2)}, "still arriving after 2 s"),
])
def test_models_body_that_never_ends_or_drips(routes, needle):
    with HostileServer(routes) as server:
        started = time.monotonic()
        proc = roofline("bench", "--url", f"{server.url}/v1", "--timeout", "2")
        elapsed = time.monotonic() - started
    one_line_error(proc, needle)
    assert elapsed < 15, elapsed


def _drip_bytes(data: bytes, every_s: float = 1.0):
    def behave(send):
        for i in range(len(data)):
            send(data[i:i + 1])
            time.sleep(every_s)
    return behave


def _head_that_drips(send):  # the status line at once, then a header one byte a second
    send(b"HTTP/1.1 200 OK\r\n")
    _drip_bytes(b"X-Slow: " + b"a" * 100)(send)


def _status_line_that_drips(send):
    _drip_bytes(b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100)(send)


@pytest.mark.parametrize("command", ["bench", "doctor"])
@pytest.mark.parametrize("behave", [_head_that_drips, _status_line_that_drips], ids=["headers", "status-line"])
def test_a_server_that_drips_its_head_is_cut_off_at_the_deadline(command, behave):
    """The deadline runs from connect to the last byte: http.client's own reading of the status line and
    headers included (#36)."""
    with HostileServer({"/v1/models": behave}) as server:
        started = time.monotonic()
        args = ("--no-bench", "--hardware", "gb10") if command == "doctor" else ()
        proc = roofline(command, "--url", f"{server.url}/v1", "--timeout", "3", *args)
        elapsed = time.monotonic() - started
    assert elapsed < 15, elapsed
    assert proc.returncode != 0 and b"Traceback" not in proc.stderr
    assert b"within 3 s" in proc.stderr or b"after 3 s" in proc.stderr, proc.stderr


def test_metrics_that_drip_end_at_the_deadline():
    routes = {"/v1/models": json_answer({"data": [{"id": "m", "root": str(QWEN)}]}),
              "/metrics": drip(b"# TYPE x counter\n" * 100, every_s=0.2)}
    with HostileServer(routes) as server:
        started = time.monotonic()
        proc = roofline("doctor", "--url", f"{server.url}/v1", "--no-bench", "--timeout", "2", "--hardware", "gb10")
        elapsed = time.monotonic() - started
    err = proc.stderr.decode()
    assert proc.returncode == 3, err  # partial: diagnosed from the checkpoint without metrics
    assert "no metrics: /metrics: still arriving after 2 s" in err, err
    assert elapsed < 20


@pytest.mark.parametrize("tail, needle", [
    # an event line that never ends: each line is capped, whatever the deadline
    (lambda send: [send(b"data: " + b"x" * 65536) for _ in range(64)], "a line longer than 1024 KiB"),
    # a line that drips: the whole stream's deadline ends it
    (lambda send: [(send(b"x"), time.sleep(0.2)) for _ in range(100)], "stream still running after 2 s"),
])
def test_stream_event_that_never_ends(tail, needle):
    routes = {"/v1/models": json_answer({"data": [{"id": "m"}]}),
              "/v1/completions": sse([token_event(), token_event()], then=tail)}
    with HostileServer(routes) as server:
        started = time.monotonic()
        proc = roofline("bench", "--url", f"{server.url}/v1", "--timeout", "2", "--runs", "1", "--warmup", "0",
                        "--json")
        elapsed = time.monotonic() - started
    err = one_line_error(proc, "no run completed")
    assert needle in err, err
    assert elapsed < 20


def _hub_env(server: HostileServer, tmp_path: Path) -> dict:
    return {"HF_ENDPOINT": server.url, "HF_HOME": str(tmp_path / "hf"), "ROOFLINE_CACHE": str(tmp_path / "cache"),
            "HF_HUB_DISABLE_TELEMETRY": "1"}


def test_hub_listing_whose_next_page_never_ends(tmp_path):
    holder = {}

    def page(send):  # an empty page that always points at another
        hub_page([], f"{holder['url']}/api/models?page=again")(send)
    with HostileServer({"/api/models": page}) as server:
        holder["url"] = server.url
        proc = roofline("compare", "--variants", "org/base", "--filter", "nvfp4", env=_hub_env(server, tmp_path))
        pages = sum(1 for hit in server.hits if hit.startswith("/api/models"))
    # empty pages end the listing at once; and no listing goes past its page bound
    one_line_error(proc, "org/base: the hub lists no quantized variants")
    assert pages <= 50


def test_hub_listing_that_keeps_paging(tmp_path):
    holder = {"n": 0}

    def page(send):  # one new variant per page, forever
        holder["n"] += 1
        hub_page([listed(f"org/v{holder['n']}", "a" * 40, files=("model.gguf",))],
                 f"{holder['url']}/api/models?page={holder['n']}")(send)
    with HostileServer({"/api/models": page}) as server:
        holder["url"] = server.url
        proc = roofline("compare", "--variants", "org/base", "--filter", "v", env=_hub_env(server, tmp_path))
    one_line_error(proc, "the hub's listing ran past 50 pages")


def test_hub_listing_that_drips(tmp_path, monkeypatch):
    with HostileServer({"/api/models": drip(b"[" + b" " * 4000 + b"]", every_s=0.05)}) as server:
        started = time.monotonic()
        # the listing's deadline is the hub client's (120 s); a test lowers it through the module
        proc = subprocess.run(
            [sys.executable, "-c", "import roofline.sources.hub_http as h; h.DEADLINE_S = 2; "
                                   "from roofline.cli import main; raise SystemExit(main())",
             "compare", "--variants", "org/base"], capture_output=True, timeout=60, cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "0", **_hub_env(server, tmp_path)})
        elapsed = time.monotonic() - started
    one_line_error(proc, "still arriving after 2 s")
    assert elapsed < 20


def test_a_hub_file_that_drips(tmp_path):
    # huggingface_hub's own download of config.json, through the bounded client
    commit = "c" * 40
    head = {"X-Repo-Commit": commit, "ETag": '"e"', "X-Linked-Size": "4000", "Content-Length": "4000"}

    def answer_head(send):
        send(("HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
              + "Connection: close\r\n\r\n").encode())
    config = "/org/model/resolve/main/config.json"
    routes = {f"HEAD {config}": answer_head, f"GET {config}": drip(b"{" + b" " * 3998 + b"}", every_s=0.05),
              f"GET /org/model/resolve/{commit}/config.json": drip(b"{" + b" " * 3998 + b"}", every_s=0.05)}
    with HostileServer(routes) as server:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", "import roofline.sources.hub_http as h; h.DEADLINE_S = 2; "
                                   "from roofline.cli import main; raise SystemExit(main())",
             "audit", "org/model"], capture_output=True, timeout=90, cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "0", **_hub_env(server, tmp_path)})
        elapsed = time.monotonic() - started
    one_line_error(proc, "org/model", "still arriving after 2 s")
    assert elapsed < 30, elapsed


@pytest.mark.parametrize("route", ["HEAD /org/model/resolve/main/config.json", "/api/models"],
                         ids=["config-head", "variant-listing"])
def test_a_hub_whose_headers_drip_is_cut_off_at_the_deadline(tmp_path, route):
    """The hub client's deadline runs from connect to the last byte: a HEAD of config.json (or a listing)
    whose status line comes at once and whose headers then drip a byte a second is cut off (#36)."""
    args = ["compare", "--variants", "org/base"] if route == "/api/models" else ["audit", "org/model"]
    with HostileServer({route: _head_that_drips}) as server:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", "import roofline.sources.hub_http as h; h.DEADLINE_S = 3; "
                                   "from roofline.cli import main; raise SystemExit(main())", *args],
            capture_output=True, timeout=90, cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "0", **_hub_env(server, tmp_path)})
        elapsed = time.monotonic() - started
    one_line_error(proc, "still arriving after 3 s")
    assert elapsed < 30, elapsed


# ------------------------------------------------------------------ 2. values used without bounds

def _capture(tmp_path: Path, **facts) -> Path:
    """A capture file of Qwen3-8B as the hook writes it (one rank; a few modules), with engine facts."""
    config = json.loads((QWEN / "config.json").read_text())
    hidden, vocab, inter = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    fields = ["attr", "kind", "dtype", "shape", "nbytes", "shard_dim", "shared_with", "fingerprint"]

    def param(shape):
        count = 1
        for d in shape:
            count *= d
        return ["weight", "parameter", "bfloat16", list(shape), 2 * count, None, None, None]
    modules = [{"name": "model.embed_tokens", "quant_method": "none", "tensors": [param((vocab, hidden))]},
               {"name": "lm_head", "quant_method": "UnquantizedEmbeddingMethod", "tensors": [param((vocab, hidden))]}]
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}"
        modules += [
            {"name": f"{prefix}.self_attn.qkv_proj", "quant_method": "UnquantizedLinearMethod",
             "tensors": [param((6144, hidden))]},
            {"name": f"{prefix}.self_attn.o_proj", "quant_method": "UnquantizedLinearMethod",
             "tensors": [param((hidden, 4096))]},
            {"name": f"{prefix}.mlp.gate_up_proj", "quant_method": "UnquantizedLinearMethod",
             "tensors": [param((2 * inter, hidden))]},
            {"name": f"{prefix}.mlp.down_proj", "quant_method": "UnquantizedLinearMethod",
             "tensors": [param((hidden, inter))]},
        ]
    record = {"format": "roofline-vllm-capture", "version": 1, "tensor_fields": fields, "rank": 0, "world_size": 1,
              "tp_size": 1, "pp_size": 1, "run_id": "r", "model": str(QWEN), "vllm_version": "0.32.0",
              "enforce_eager": False, "max_model_len": 4096, "kv_cache_dtype": "auto", "block_size": 16,
              "cudagraph_mode": "FULL_AND_PIECEWISE", "hf_config": config, "aliases": {}, "modules": modules}
    record.update(facts)
    path = tmp_path / f"capture-{abs(hash(json.dumps(facts, sort_keys=True))) % 10**8}.json"
    path.write_text(json.dumps(record))
    return path


def test_a_valid_hand_built_capture_is_read(tmp_path):
    proc = roofline("doctor", "--capture", _capture(tmp_path), "--hardware", "h100-sxm", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["server"]["tp"] == 1


@pytest.mark.parametrize("facts, needles", [
    ({"speculative": {"method": "mtp", "num_speculative_tokens": 10**9}}, ["num_speculative_tokens", "<= 1024"]),
    ({"tp_size": 1_000_000, "world_size": 1_000_000}, ["world_size", "<= 65536"]),
    ({"tp_size": 64, "world_size": 64, "rank": 0}, ["incomplete capture"]),
    ({"tp_size": "two"}, ["tp_size", "Expected `int | null`, got `str`"]),
    ({"world_size": "abc"}, ["world_size", "got `str`"]),
    ({"modules": [{"name": "x", "tensors": [["weight", "parameter", "bfloat16", [-1], 2]]}]},
     ["shape", ">= 0"]),
])
def test_capture_values_out_of_bounds(tmp_path, facts, needles):
    proc = roofline("doctor", "--capture", _capture(tmp_path, **facts), "--hardware", "gb10")
    one_line_error(proc, *needles)


def test_capture_claiming_a_split_vllm_refuses(tmp_path):
    # a merged capture of 16 ranks of a 32-head model at TP 64 is refused as vLLM refuses it
    path = _capture(tmp_path, tp_size=48, world_size=48)
    record = json.loads(path.read_text())
    merged = {"format": "roofline-vllm-capture", "version": 1, "kind": "merged", "run_id": "r", "world_size": 48,
              "complete": True, "ranks": [dict(record, rank=i) for i in range(48)]}
    path.write_text(json.dumps(merged))
    proc = roofline("doctor", "--capture", path, "--hardware", "gb10", timeout=120)
    one_line_error(proc, "tensor parallel 48: vLLM refuses it")


def test_one_bad_capture_is_a_skipped_row_of_compare(tmp_path):
    bad = _capture(tmp_path, tp_size="two")
    proc = roofline("compare", QWEN, bad, "--hardware", "gb10", "--json")
    # the table of what could be read, then a failure for the checkpoint named that could not (#35)
    assert proc.returncode == 1 and b"1 of 2 checkpoints named could not be read" in proc.stderr, proc.stderr
    result = json.loads(proc.stdout)
    assert len(result["rows"]) == 1
    assert any("tp_size" in row["reason"] for row in result["skipped"]), result["skipped"]


def _metrics(**values) -> str:
    return PROMETHEUS_COUNTERS.format(**{"generated": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0, **values})


class _Sequence:
    """Answers that change from one request to the next (a counter before and after a bench)."""

    def __init__(self, *behaviours):
        self.behaviours, self.index = list(behaviours), 0

    def __call__(self, send):
        behave = self.behaviours[min(self.index, len(self.behaviours) - 1)]
        self.index += 1
        behave(send)


def _doctor_server(metrics_before: str, metrics_after: str, usage_total: int | None = None):
    events = [token_event(usage={"prompt_tokens": 3, "completion_tokens": n + 1}
                          if usage_total is None else {"prompt_tokens": 3, "completion_tokens": usage_total})
              for n in range(8)]
    return {"/v1/models": json_answer({"data": [{"id": "m", "root": str(QWEN), "max_model_len": 4096}]}),
            "/version": json_answer({"version": "0.32.0"}),
            "/metrics": _Sequence(text_answer(metrics_before), text_answer(metrics_after)),
            "/v1/completions": sse(events + [b"data: [DONE]\n\n"])}


def test_counters_from_minus_to_plus_max_float(tmp_path):
    routes = _doctor_server(_metrics(generated=-1.7e308), _metrics(generated=1.7e308))
    with HostileServer(routes) as server:
        proc = roofline("doctor", "--url", f"{server.url}/v1", "--runs", "1", "--warmup", "0", "--max-tokens", "8",
                        "--hardware", "gb10", "--json")
    err = proc.stderr.decode()
    assert proc.returncode == 3, err
    assert "Traceback" not in err and "not a count of this bench" in err, err
    json.loads(proc.stdout)  # still a valid diagnosis


def test_negative_speculative_counters_are_left_out(tmp_path):
    routes = _doctor_server(_metrics(drafts=10, draft_tokens=30, accepted=100),
                            _metrics(drafts=20, draft_tokens=60, accepted=0))
    with HostileServer(routes) as server:
        proc = roofline("doctor", "--url", f"{server.url}/v1", "--runs", "1", "--warmup", "0", "--max-tokens", "8",
                        "--hardware", "gb10")
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 3, out
    assert "acceptance -" not in out and "spec_decode_num_accepted_tokens" in out, out


def test_a_usage_count_beyond_max_tokens_is_not_a_measurement():
    routes = _doctor_server(_metrics(), _metrics(), usage_total=10**15)
    with HostileServer(routes) as server:
        proc = roofline("bench", "--url", f"{server.url}/v1", "--runs", "1", "--warmup", "0", "--max-tokens", "8")
    one_line_error(proc, "usage.completion_tokens = 1000000000000000 is not a count in [0, 8]")


# ------------------------------------------------------------------ 3. credentials and raw bytes

def test_credentials_are_never_printed():
    secret_url = "http://user:s3cret@127.0.0.1:9/v1?token=abc123"
    for args in (["doctor", "--url", secret_url, "--hardware", "gb10"],
                 ["doctor", "--url", "http://user:s3cret@127.0.0.1:notaport/v1"],
                 ["bench", "--url", secret_url]):
        proc = roofline(*args)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and b"s3cret" not in out and b"abc123" not in out, out
        assert b"user" not in out or b"***" in out, out


def test_connection_reset_does_not_print_credentials():
    with HostileServer({"*": raw(b"")}) as server:
        url = server.url.replace("http://", "http://user:s3cret@") + "/v1"
        proc = roofline("bench", "--url", url, "--timeout", "2")
    assert proc.returncode == 1 and b"s3cret" not in proc.stdout + proc.stderr, proc.stderr


def test_report_of_a_server_reached_with_credentials_redacts_them(tmp_path):
    routes = _doctor_server(_metrics(), _metrics())
    with HostileServer(routes) as server:
        url = server.url.replace("http://", "http://user:s3cret@") + "/v1"
        proc = roofline("doctor", "--url", url, "--runs", "1", "--warmup", "0", "--max-tokens", "8",
                        "--hardware", "gb10", "--html", tmp_path / "r.html")
        as_json = roofline("doctor", "--url", url, "--no-bench", "--hardware", "gb10", "--json")
    assert b"s3cret" not in proc.stdout + proc.stderr + as_json.stdout
    assert b"s3cret" not in (tmp_path / "r.html").read_bytes()
    assert proc.stdout.decode().splitlines()[0].startswith("doctor: m at http://***@127.0.0.1")


def test_model_ids_with_escape_sequences_are_escaped():
    evil = "m\x1b[2J\x1b]0;owned\x07\nsecond line\r\x00"
    routes = {"/v1/models": json_answer({"data": [{"id": evil}, {"id": "other"}]})}
    with HostileServer(routes) as server:
        proc = roofline("bench", "--url", f"{server.url}/v1")
    err = one_line_error(proc, "\\x1b[2J", "\\n", "\\r")
    clean(proc.stderr)
    assert "second line" in err


@pytest.mark.parametrize("garbage", [b"\x00\xff\r\x1b[31mNOT HTTP\r\n\r\n", b"HTTP/1.1 200 \x1b[2J\r\n\x00\r\n\r\n"])
def test_a_server_that_is_not_http(garbage):
    with HostileServer({"*": raw(garbage)}) as server:
        proc = roofline("bench", "--url", f"{server.url}/v1", "--timeout", "2")
    assert proc.returncode == 1, proc.stderr
    clean(proc.stderr)
    assert proc.stderr.count(b"\n") == 1


# ------------------------------------------------------------------ 4. files written where they must not be

def test_a_hostile_sha_never_becomes_a_path_or_a_request(tmp_path):
    evil = "../../../../escaped"
    rows = [listed("org/evil-NVFP4", evil), listed("org/fine-NVFP4", "b" * 40)]
    with HostileServer({"/api/models": hub_page(rows, None), "*": json_answer({"error": "no"})}) as server:
        proc = roofline("compare", "--variants", "org/base", "--json", env=_hub_env(server, tmp_path))
        requests = list(server.hits)
    result = json.loads(proc.stdout) if proc.returncode == 0 else None
    assert not any("escaped" in hit for hit in requests), requests
    escaped = [p for p in tmp_path.rglob("*") if "escaped" in p.name]
    assert not escaped and not (tmp_path.parent / "escaped.json").exists()
    reasons = (result or {}).get("skipped", []) if result else []
    if result is not None:
        assert any("not a commit id" in row["reason"] for row in reasons), reasons
    else:
        assert b"not a commit id" in proc.stderr or b"nothing to compare" in proc.stderr, proc.stderr
    clean(proc.stderr)


# ------------------------------------------------------------------ 5. files that must read back

@pytest.mark.parametrize("args, needle", [
    (["--save", "gpu\u00e9"], "hardware key"),
    (["--save", "ok-key", "--name", "evil\x1b[2Jname"], "--name"),
    (["--save", "ok-key", "--name", "two\nlines"], "--name"),
])
def test_calibrate_save_refuses_what_toml_cannot_hold(tmp_path, args, needle):
    hw = tmp_path / "hardware.toml"
    proc = roofline("calibrate", "--device", "cpu", "--size-mb", "16", "--repetitions", "2", "--hardware-file", hw,
                    *args, env={"ROOFLINE_HARDWARE_FILE": str(hw)})
    one_line_error(proc, needle)
    assert not hw.exists()


def test_calibrate_save_writes_a_file_that_reads_back(tmp_path):
    import tomllib

    hw = tmp_path / "hardware.toml"
    hw.write_text(_entry_fields("old", name='kept "quoted" entry'))
    proc = roofline("calibrate", "--device", "cpu", "--size-mb", "16", "--repetitions", "2", "--save", "MyBox",
                    "--name", 'a "quoted" \u00fcber name', env={"ROOFLINE_HARDWARE_FILE": str(hw)})
    assert proc.returncode == 0, proc.stderr
    table = tomllib.loads(hw.read_text())
    assert set(table) == {"old", "mybox"} and table["mybox"]["name"] == 'a "quoted" \u00fcber name'
    assert roofline("audit", QWEN, "--hardware", "mybox", env={"ROOFLINE_HARDWARE_FILE": str(hw)}).returncode == 0


def _entry_fields(key: str = "x", **override) -> str:
    """A hardware file of one entry, written by tomli-w."""
    import tomli_w

    fields = {"name": "x", "bandwidth_gbps": 100.0, "bandwidth_source": "test", "memory_gb": 64.0, "usable_memory_gb": 60.0,
              "compute_capability": "", "tensor_tflops": {}, "host": "cpu", "efficiency": 0.7,
              "efficiency_kind": "prior", "efficiency_source": "test"}
    fields.update(override)
    return tomli_w.dumps({key: fields})


def test_bench_json_with_a_median_of_1e308_is_refused_and_nothing_recorded(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"decode_tok_s": {"median": 1e308, "min": 1, "max": 1e308, "n": 1}}))
    record = tmp_path / "record.jsonl"
    proc = roofline("validate", QWEN, "--bench-json", bench, "--record", record)
    one_line_error(proc, "decode_tok_s.median", "<= 1000000000")
    assert not record.exists()


# ------------------------------------------------------------------ 6. absurd answers with exit 0

@pytest.mark.parametrize("args, needles", [
    (["capacity", QWEN, "--kv-cache-memory-bytes", "1", "--hardware", "gb10"], ["vLLM refuses to start"]),
    (["capacity", QWEN, "--kv-cache-memory-bytes", str(1 << 50), "--hardware", "gb10"], ["does not fit", "128"]),
    (["plan", QWEN, "--hardware", "gb10", "--gpus", "16"], ["holds 1 device"]),
    (["plan", QWEN, "--hardware", "gb10", "--boxes", "64"], ["no split of", "works"]),
    (["plan", QWEN, "--hardware", "h100-sxm", "--boxes", "2", "--gpus", "2", "--link", "nope"], ["unknown in-box link 'nope'"]),
    (["plan", QWEN, "--hardware", "h100-sxm", "--boxes", "2", "--network", "nope"], ["unknown network link 'nope'"]),
])
def test_absurd_requests_are_refused(args, needles):
    one_line_error(roofline(*args), *needles)


def test_plan_refusals_agree_on_their_exit_code():
    assert roofline("plan", QWEN, "--tp", "1024", "--hardware", "h100-sxm").returncode == 1
    assert roofline("plan", QWEN, "--hardware", "gb10", "--boxes", "64").returncode == 1


def test_one_folder_named_three_ways_is_one_row():
    proc = roofline("compare", "examples/Qwen3-8B", "./examples/Qwen3-8B", "examples/Qwen3-8B/", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert len(result["rows"]) == 1 and len(result["skipped"]) == 2
    assert all("the same checkpoint as examples/Qwen3-8B" == row["reason"] for row in result["skipped"])


def test_bench_json_with_an_absurd_context_is_refused(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"decode_tok_s": {"median": 30.0}, "mean_context": 10**12}))
    one_line_error(roofline("validate", QWEN, "--bench-json", bench, "--no-record"), "mean_context", "<= 16777216")


@pytest.mark.parametrize("text, needles", [
    ("x = 1\n", ["[x] is not a table"]),
    (_entry_fields(bandwidth_gbps="fast"), ["bandwidth_gbps", "got `str`"]),
    (_entry_fields().replace("bandwidth_gbps = 100.0", "bandwidth_gbps = inf"), ["bandwidth_gbps", "<= 1000000.0"]),
    (_entry_fields(usable_memory_gb=100.0), ["usable_memory_gb 100 is more than memory_gb 64"]),
    (_entry_fields("../evil"), ["hardware key"]),
])
def test_hardware_files_that_lie(tmp_path, text, needles):
    hw = tmp_path / "hardware.toml"
    hw.write_text(text)
    one_line_error(roofline("audit", QWEN, env={"ROOFLINE_HARDWARE_FILE": str(hw)}), str(hw), *needles)


# ------------------------------------------------------------------ 7. well-formed files, wrong types

def _trace(tmp_path: Path, **event) -> Path:
    base = {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 1.0, "pid": 0, "tid": 0,
            "args": {"correlation": 1}}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [dict(base, **event)]}))
    return path


@pytest.mark.parametrize("event, needle", [
    ({"name": 5}, "name"), ({"args": "x"}, "args"), ({"cat": ["kernel"]}, "cat"), ({"ts": "soon"}, "ts"),
    ({"args": {"correlation": [1]}}, None),
])
def test_traces_with_wrong_types(tmp_path, event, needle):
    proc = roofline("kernels", QWEN, "--trace", _trace(tmp_path, **event), "--hardware", "h100-sxm")
    if needle is None:  # an odd correlation id is an unattributed kernel, not an error
        assert proc.returncode == 0, proc.stderr
    else:
        one_line_error(proc, "complete events", needle)


def test_bench_json_whose_sweep_is_a_string(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"decode_tok_s": {"median": 30.0}, "sweep": "fast"}))
    one_line_error(roofline("validate", QWEN, "--bench-json", bench, "--no-record"), "sweep", "Expected `array`")

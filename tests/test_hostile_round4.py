"""The fourth hostile set (#46): the surfaces added last round (serve lines, recipe files, result files,
doctor's what-if, the Python API) tried as an attacker or a careless user would. Each cause is checked at
its root with a real part: a real FIFO and character device, real 127.0.0.1 servers (tests/hostile.py),
the real API, recipes written by a YAML writer, the real CLI (in this process: tests/inprocess.py).

Every failure is one line on stderr starting with "error: ", a non-zero exit, no traceback, and nothing a
user typed that carries a secret is printed, written to a report or stored."""
from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import pytest
import yaml

import roofline
from hostile import PROMETHEUS_COUNTERS, HostileServer, json_answer, sse, text_answer, token_event
from inprocess import Ran, run
from roofline.errors import RooflineError

ROOT = Path(__file__).resolve().parents[1]
QWEN = ROOT / "examples" / "Qwen3-8B"
HYBRID = ROOT / "examples" / "Qwen3.6-35B-A3B-NVFP4"
SECRETS = ("hf_abcdefghijklmnopqrstuvwxyz012345", "sk-proj-0123456789abcdefXYZ", "second-api-key-value",
           "supersecret-vllm-key", "hunter2hunter2")


def one_line_error(ran: Ran, *needles: str, code: int | tuple[int, ...] = (1, 2)) -> str:
    codes = (code,) if isinstance(code, int) else code
    assert ran.returncode in codes, (ran.returncode, ran.err, ran.out[-2000:])
    assert "Traceback" not in ran.err, ran.err
    assert ran.err.count("\n") == 1 and ran.err.startswith("error: "), ran.err
    for needle in needles:
        assert needle in ran.err, (needle, ran.err)
    return ran.err


def no_secret(*texts) -> None:
    for text in texts:
        text = text if isinstance(text, str) else text.decode("utf-8", "replace")
        for secret in SECRETS:
            assert secret not in text, (secret, text[:3000])


def recipe(tmp_path: Path, command: str, env: dict | None = None, defaults: dict | None = None,
           name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"name": "hostile", "recipe_version": "1", "container": "vllm-node",
                                    "model": str(QWEN), "env": env or {}, "defaults": defaults or {"port": 8000},
                                    "command": command}))
    return path


# ------------------------------------------------------------------ 1. credentials

def test_a_serve_lines_credentials_are_never_printed_or_stored(tmp_path):
    line = ["vllm", "serve", str(QWEN), "--hf-token", SECRETS[0], "--api-key", SECRETS[1], SECRETS[2],
            "--served-model-name", SECRETS[0], "--max-num-seqs", "8"]
    html = tmp_path / "report.html"
    text = run("preflight", "--env", f"HF_TOKEN={SECRETS[4]}", "--html", html, "--", *line)
    as_json = run("preflight", "--json", "--", *line)
    assert text.returncode == 0 and as_json.returncode == 0, (text.err, as_json.err)
    no_secret(text.out, text.err, as_json.out, as_json.err, html.read_text())
    flags = json.loads(as_json.out)["deployment"]
    assert "--hf-token" in flags["ignored"] and "--api-key" in flags["ignored"], flags


def test_a_recipes_credentials_are_never_printed_or_stored(tmp_path):
    path = recipe(tmp_path, f"vllm serve {QWEN} --port {{port}} --api-key {SECRETS[1]} {SECRETS[2]}",
                  env={"HF_TOKEN": SECRETS[0], "VLLM_API_KEY": SECRETS[3], "VLLM_CPU_KVCACHE_SPACE": "4"})
    html = tmp_path / "report.html"
    text = run("preflight", "--recipe", path, "--html", html)
    as_json = run("preflight", "--recipe", path, "--json")
    assert text.returncode == 0 and as_json.returncode == 0, (text.err, as_json.err)
    no_secret(text.out, text.err, as_json.out, html.read_text())
    payload = json.loads(as_json.out)
    assert payload["recipe"]["env"]["HF_TOKEN"] == "***" and payload["recipe"]["env"]["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert "--api-key *** ***" in payload["recipe"]["serve_line"]
    assert "runs: " in text.out and "--api-key ***" in text.out


def test_an_error_quoting_a_line_never_prints_its_credentials(tmp_path):
    path = recipe(tmp_path, f"vllm serve {QWEN} --api-key {SECRETS[1]} --max-model-len {{port}}",
                  defaults={"port": "not-a-number"})
    no_secret(one_line_error(run("preflight", "--recipe", path), "--max-model-len"))
    no_secret(one_line_error(run("preflight", "--", "vllm", "serve", str(QWEN), "--api-key", SECRETS[1],
                                 "--kv-cache-dtype", SECRETS[0]), "--kv-cache-dtype"))


# ------------------------------------------------------------------ 2. numbers without bounds

BIG, HUGE = "9" * 400, "9" * 5000


@pytest.mark.parametrize("args, needle", [
    (["--max-model-len", BIG], "larger than any value vLLM takes"),
    (["--max-model-len", HUGE], "larger than any value vLLM takes"),
    (["--max-model-len", BIG + "k"], "larger than any value vLLM takes"),
    (["--max-num-seqs", BIG], "larger than any value vLLM takes"),
    (["--gpu-memory-utilization", BIG], "not a number vLLM takes"),
])
def test_numbers_without_bounds_on_a_serve_line(args, needle):
    one_line_error(run("preflight", "--", "vllm", "serve", str(QWEN), *args), needle)


def test_a_unicode_digit_in_the_environment_is_one_line_everywhere(tmp_path):
    one_line_error(run("preflight", "--", "VLLM_CPU_KVCACHE_SPACE=²", "vllm", "serve", str(QWEN)),
                   "VLLM_CPU_KVCACHE_SPACE", "not a whole number")
    path = recipe(tmp_path, f"vllm serve {QWEN}", env={"VLLM_CPU_KVCACHE_SPACE": "²"})
    one_line_error(run("preflight", "--recipe", path), "VLLM_CPU_KVCACHE_SPACE")
    # the user's own shell: a plain audit reads the environment too
    one_line_error(run("audit", QWEN, "--rows", "1", env={"VLLM_CPU_KVCACHE_SPACE": "²"}), "VLLM_CPU_KVCACHE_SPACE")
    one_line_error(run("audit", QWEN, "--rows", "1", env={"VLLM_CPU_KVCACHE_SPACE": BIG}), "VLLM_CPU_KVCACHE_SPACE")


def test_numbers_without_bounds_in_the_api_and_doctors_what_if():
    with pytest.raises(RooflineError, match="larger than any value"):
        roofline.audit(str(QWEN), max_model_len=10 ** 400)
    with pytest.raises(RooflineError, match="VLLM_CPU_KVCACHE_SPACE"):
        roofline.audit(str(QWEN), env={"VLLM_CPU_KVCACHE_SPACE": "²"})
    with HostileServer(_doctor_routes(_metrics())) as server:
        one_line_error(run("doctor", "--url", f"{server.url}/v1", "--no-bench", "--hardware", "gb10",
                           "--max-model-len", BIG + "k"), "--max-model-len")


# ------------------------------------------------------------------ 3. recursion

def test_env_repeated_three_thousand_times_is_a_serve_line():
    ran = run("preflight", "--json", "--", *(["env"] * 3000), "vllm", "serve", str(QWEN))
    assert ran.returncode == 0, ran.err
    assert json.loads(ran.out)["model"] == str(QWEN)


@pytest.fixture
def deep_json(tmp_path) -> Path:
    path = tmp_path / "deep.json"
    path.write_text('{"decode_tok_s": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return path


def test_a_json_file_nested_100k_deep_is_one_line_in_every_reader(deep_json):
    for args in (["validate", QWEN, "--bench-json", deep_json, "--no-record"],
                 ["doctor", QWEN, "--bench-json", deep_json, "--hardware", "gb10"],
                 ["calibrate", "--from-results", f"{QWEN}={deep_json}"]):
        one_line_error(run(*args), "nested deeper than")


# ------------------------------------------------------------------ 4. files that never end

def bounded(seconds: float, *args, env: dict | None = None) -> Ran:
    """run(*args), failing the test (not hanging it) if it does not end within `seconds`."""
    done: list[Ran] = []
    worker = threading.Thread(target=lambda: done.append(run(*args, env=env)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert done, f"still running after {seconds} s: roofline {' '.join(map(str, args))}"
    return done[0]


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def test_a_fifo_is_refused_by_every_file_option(fifo, tmp_path):
    for args in (["preflight", "--recipe", fifo],
                 ["validate", QWEN, "--bench-json", fifo, "--no-record"],
                 ["doctor", QWEN, "--bench-json", fifo, "--hardware", "gb10"],
                 ["calibrate", "--from-results", f"{QWEN}={fifo}"]):
        one_line_error(bounded(60, *args), "FIFO")
    one_line_error(bounded(60, "audit", QWEN, "--rows", "1", env={"ROOFLINE_HARDWARE_FILE": str(fifo)}), "FIFO")
    (tmp_path / "config.json").unlink(missing_ok=True)
    folder = tmp_path / "model"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    one_line_error(bounded(60, "audit", folder, "--config-only"), "FIFO")


def test_an_unbounded_device_as_the_hardware_file_leaves_nothing_behind(tmp_path):
    lock = Path("/dev/zero.lock")
    existed = lock.exists()
    one_line_error(bounded(60, "audit", QWEN, "--rows", "1", env={"ROOFLINE_HARDWARE_FILE": "/dev/zero"}),
                   "character device")
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"decode_tok_s": {"median": 10.0}, "concurrency": 1, "mean_context": 640}))
    one_line_error(bounded(120, "calibrate", "--from-results", f"{QWEN}={bench}", "--save", "mine",
                           "--hardware-file", "/dev/zero"), "character device")
    assert lock.exists() == existed


# ------------------------------------------------------------------ 5. recipe templates

@pytest.mark.parametrize("command, needle", [
    ("vllm serve M --port {port} {", "'{'"),
    ("vllm serve M --port {port} }", "'}'"),
    ("vllm serve M --port {port:>9999999999999}", "{port:>9999999999999}"),
    ("vllm serve M --port {port.real}", "{port.real}"),
    ("vllm serve M --port {port[0]}", "{port[0]}"),
])
def test_recipe_templates_fill_only_plain_names(tmp_path, command, needle):
    one_line_error(run("preflight", "--recipe", recipe(tmp_path, command)), needle, "only plain {name}")


def test_a_recipe_whose_filled_command_would_be_huge(tmp_path):
    path = recipe(tmp_path, "vllm serve M " + "{x}" * 100_000, defaults={"x": "a" * 500_000})
    one_line_error(bounded(60, "preflight", "--recipe", path), "longer than")


def test_escaped_braces_are_braces(tmp_path):
    path = recipe(tmp_path, f"vllm serve {QWEN} --port {{port}} --speculative-config "
                            "'{{\"method\": \"ngram\", \"num_speculative_tokens\": 2}}'")
    ran = run("preflight", "--recipe", path, "--json")
    assert ran.returncode == 0, ran.err
    assert json.loads(ran.out)["deployment"]["speculative_config"]["method"] == "ngram"


# ------------------------------------------------------------------ 6. preflight judged as vLLM judges

def test_a_positional_model_wins_over_model_as_vllm_serves_it():
    ran = run("preflight", "--json", "--", "vllm", "serve", str(QWEN), "--model", str(HYBRID))
    assert ran.returncode == 0, ran.err
    assert json.loads(ran.out)["model"] == str(QWEN)


def test_a_budget_below_max_num_seqs_is_refused_as_vllm_refuses_it():
    ran = run("preflight", "--", "vllm", "serve", str(QWEN), "--max-num-batched-tokens", "1")
    assert ran.returncode == 1
    assert "max_num_batched_tokens (1) must be greater than or equal to max_num_seqs (256)" in ran.out
    ran = run("preflight", "--", "vllm", "serve", str(QWEN), "--no-enable-chunked-prefill",
              "--max-num-batched-tokens", "4096", "--max-num-seqs", "8")
    assert ran.returncode == 1 and "is smaller than max_model_len (40960)" in ran.out, ran.out


@pytest.mark.parametrize("config, needle", [
    ({"method": "mtp", "num_speculative_tokens": 2, "acceptance_rate": 0.5}, "Extra inputs are not permitted"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": -5}, "greater than or equal to 1"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 6, "prompt_lookup_max": 3},
     "prompt_lookup_min=6 must be <= prompt_lookup_max=3"),
    ({"method": "mtp", "num_speculative_tokens": 0}, "greater than 0"),
    ({"method": "eagle3", "num_speculative_tokens": 2}, "without speculative model"),
    ({"method": "mtp", "num_speculative_tokens": 2, "moe_backend": "no-such"}, "one of"),
])
def test_speculative_configs_vllm_refuses(config, needle):
    one_line_error(run("preflight", "--", "vllm", "serve", str(HYBRID), "--speculative-config", json.dumps(config)),
                   needle)


def test_speculative_configs_vllm_takes():
    config = {"method": "mtp", "num_speculative_tokens": 3, "moe_backend": "triton", "draft_tensor_parallel_size": 1}
    ran = run("preflight", "--json", "--", "vllm", "serve", str(HYBRID), "--speculative-config", json.dumps(config))
    assert ran.returncode == 0, ran.err
    spec = json.loads(ran.out)["deployment"]["speculative_config"]
    assert spec["method"] == "mtp" and spec["moe_backend"] == "triton"


@pytest.mark.parametrize("value", ["auto", "-1"])
def test_max_model_len_auto_is_taken_as_vllm_takes_it(value):
    ran = run("preflight", "--json", "--hardware", "rtx-4090", "--prompt-len", "512", "--", "vllm", "serve",
              str(QWEN), "--max-model-len", value, "--gpu-memory-utilization", "0.85")
    assert ran.returncode == 0, ran.err
    payload = json.loads(ran.out)
    fitted = payload["capacity"]["kv_cache"]["max_model_len"]
    assert 512 < fitted < 40960  # the model's 40,960 do not fit 85% of a 24 GB card beside 16 GB of weights
    assert any("fits it to" in note for note in payload["capacity"]["notes"])


# ------------------------------------------------------------------ 7. doctor's what-if

def _metrics(**values) -> str:
    return PROMETHEUS_COUNTERS.format(**{"generated": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0, **values})


def _doctor_routes(before: str, after: str | None = None, root: Path = QWEN):
    answers = [text_answer(before), text_answer(after or before)]
    state = {"n": 0}

    def metrics(send):
        answers[min(state["n"], 1)](send)
        state["n"] += 1
    events = [token_event(usage={"prompt_tokens": 3, "completion_tokens": n + 1}) for n in range(8)]
    return {"/v1/models": json_answer({"data": [{"id": "m", "root": str(root), "max_model_len": 4096}]}),
            "/version": json_answer({"version": "0.32.0"}), "/metrics": metrics,
            "/v1/completions": sse(events + [b"data: [DONE]\n\n"])}


def test_a_server_that_speculates_without_mtp_layers_can_still_be_asked_what_if():
    routes = _doctor_routes(_metrics(), _metrics(generated=20, drafts=6, draft_tokens=18, accepted=9))
    with HostileServer(routes) as server:
        ran = run("doctor", "--url", f"{server.url}/v1", "--runs", "1", "--warmup", "0", "--max-tokens", "8",
                  "--hardware", "gb10", "--json", "--kv-cache-dtype", "fp8")
    assert ran.returncode in (0, 3), ran.err
    payload = json.loads(ran.out)
    assert payload["what_if"] and not payload["what_if"]["refusals"], payload["what_if"]
    assert any("reads no weights" in line for line in payload["unseen"]), payload["unseen"]


def test_a_refused_what_if_says_why_on_stderr():
    with HostileServer(_doctor_routes(_metrics())) as server:
        ran = run("doctor", "--url", f"{server.url}/v1", "--no-bench", "--hardware", "gb10", "--speculative", "2")
    assert ran.returncode == 1
    assert "vLLM refuses it" in ran.err and "no MTP layers" in ran.err, ran.err


def test_a_forged_bytes_estimate_is_not_shown_as_vllms():
    forged = "# TYPE vllm:estimated_read_bytes_per_gpu counter\nvllm:estimated_read_bytes_per_gpu_total{{model_name=\"m\"}} {}\n"
    routes = _doctor_routes(_metrics() + forged.format(0), _metrics(generated=9) + forged.format(float(2 ** 52)))
    with HostileServer(routes) as server:
        ran = run("doctor", "--url", f"{server.url}/v1", "--runs", "1", "--warmup", "0", "--max-tokens", "8",
                  "--hardware", "gb10", "--json")
    payload = json.loads(ran.out)
    assert payload.get("vllm_estimate") is None, payload.get("vllm_estimate")
    assert "not believable" in ran.err, ran.err


# ------------------------------------------------------------------ 8. calibrate --from-results

def _benchy(levels) -> dict:
    return {"latency_mode": "generation", "model": "m",
            "benchmarks": [{"concurrency": c, "context_size": 0, "prompt_size": 1024, "response_size": 256,
                            "tg_req_throughput": {"mean": rate}} for c, rate in levels]}


def test_one_impossible_level_refuses_the_whole_fit(tmp_path):
    path = tmp_path / "benchy.json"
    path.write_text(json.dumps(_benchy([(1, 12.0), (2, 11.0), (4, 1e6)])))
    hardware_file = tmp_path / "hardware.toml"
    one_line_error(run("calibrate", "--from-results", f"{QWEN}={path}", "--save", "mine", "--hardware-file",
                       hardware_file), "no engine decodes that fast", "nothing fitted")
    assert not hardware_file.exists()


def test_a_file_of_many_levels_fits_in_seconds(tmp_path):
    import time

    path = tmp_path / "benchy.json"
    path.write_text(json.dumps(_benchy([(c, 14.0 / (1 + c / 64)) for c in range(1, 513)])))
    started = time.monotonic()
    ran = run("calibrate", "--from-results", f"{QWEN}={path}", "--json")
    assert time.monotonic() - started < 240
    assert ran.returncode in (0, 1), ran.err
    assert "Traceback" not in ran.err


# ------------------------------------------------------------------ 9. errors that name the wrong thing

def test_errors_name_what_the_user_wrote(tmp_path):
    path = recipe(tmp_path, f"vllm serve {QWEN} --port {{port}}")
    one_line_error(run("preflight", "--recipe", path, "--set", "=5"), "--set '=5'")
    result = tmp_path / "vllm.json"
    result.write_text(json.dumps({"completed": 4, "total_input_tokens": 400, "total_output_tokens": 400,
                                  "median_tpot_ms": 1e-12, "max_concurrency": 1}))
    err = one_line_error(run("validate", QWEN, "--bench-json", result, "--no-record"), "median_tpot_ms")
    assert "$.decode_tok_s" not in err


# ------------------------------------------------------------------ 10. the Python API's boundary

@pytest.mark.parametrize("call, needle", [
    (lambda: roofline.audit(123), "model"),
    (lambda: roofline.audit(str(QWEN), batch="8"), "batch"),
    (lambda: roofline.audit(str(QWEN), hardware=["gb10"]), "hardware"),
    (lambda: roofline.audit(str(QWEN), env=5), "env"),
    (lambda: roofline.audit(str(QWEN), bandwidth=math.nan), "bandwidth"),
    (lambda: roofline.audit(str(QWEN), bandwidth=math.inf), "bandwidth"),
    (lambda: roofline.audit(str(QWEN), batch=2.5), "batch"),
    (lambda: roofline.capacity(str(QWEN), concurrency=()), "concurrency"),
    (lambda: roofline.capacity(str(QWEN), prompt_len=-5), "prompt_len"),
    (lambda: roofline.plan(str(QWEN), formats=None), "formats"),
    (lambda: roofline.audit(str(QWEN), speculative_config={"method": "mtp", "num_speculative_tokens": 2,
                                                          "model": {1, 2}}), "speculative_config"),
    (lambda: roofline.preflight(recipe=1), "recipe"),
    (lambda: roofline.preflight(recipe=0), "recipe"),
])
def test_the_api_refuses_at_its_boundary(call, needle):
    with pytest.raises(RooflineError) as caught:
        call()
    assert needle in str(caught.value)

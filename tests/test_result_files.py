"""validate reads the measurement files users already have. vLLM's own `vllm bench serve --save-result`
file is made by vLLM against a real server in tests/test_server_e2e.py; the guidellm and llama-benchy
files here (tests/fixtures/results/) carry the fields of those tools' published schemas
(guidellm GenerativeMetrics, llama-benchy benchmark_report_schema.json) with illustrative figures: neither
tool runs in the test environment."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.live.result_files import measurement_from

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "tests" / "fixtures" / "results"
MODEL = REPO / "examples" / "Qwen3-8B"


def validate(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofline.cli", "validate", str(MODEL), "--bench-json", str(path),
                           "--hardware", "gb10", "--no-record", "--json", *extra], capture_output=True, text=True,
                          timeout=120)


def test_llama_benchy_maps_its_generation_rate_and_lengths():
    bench, tool = measurement_from(json.loads((RESULTS / "llama-benchy.json").read_text()), "benchy")
    assert tool == "llama-benchy"
    assert bench["decode_tok_s"]["median"] == pytest.approx(13.0)  # concurrency 1, context 0
    assert bench["mean_context"] == 1024 + 512
    assert [lvl["concurrency"] for lvl in bench["sweep"]] == [1, 4]
    assert bench["sweep"][1]["aggregate_tok_s"]["median"] == pytest.approx(46.0)
    assert any("other context sizes" in note for note in bench["notes"])
    proc = validate(RESULTS / "llama-benchy.json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["measured_tok_s"] == pytest.approx(13.0) and out["scenario"]["context"] == 1536
    assert out["record"]["measured_by"].startswith("llama-benchy")
    assert [row["concurrency"] for row in out["curve"]] == [1, 4]


def test_guidellm_maps_inter_token_latency_and_concurrency():
    bench, tool = measurement_from(json.loads((RESULTS / "guidellm.json").read_text()), "guidellm")
    assert tool == "guidellm"
    assert bench["decode_tok_s"]["median"] == pytest.approx(1000 / 80.0)
    assert bench["mean_context"] == 512 + 128
    proc = validate(RESULTS / "guidellm.json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["measured_tok_s"] == pytest.approx(12.5)


def test_a_vllm_bench_serve_file_at_several_streams_sets_the_batch(tmp_path):
    saved = {"date": "20261101-100000", "backend": "vllm", "model_id": "Qwen/Qwen3-8B", "num_prompts": 64,
             "request_rate": "inf", "max_concurrency": 8, "completed": 64, "total_input_tokens": 64 * 1000,
             "total_output_tokens": 64 * 200, "median_tpot_ms": 100.0, "output_throughput": 70.0}
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(saved))
    out = json.loads(validate(path).stdout)
    assert out["scenario"]["batch"] == 8 and out["scenario"]["context"] == 1100
    assert out["measured_tok_s"] == pytest.approx(8 * 10.0)


@pytest.mark.parametrize("data, fragment", [
    ({"benchmarks": [{"metrics": {}}]}, "inter_token_latency_ms"),
    ({"latency_mode": "generation", "benchmarks": []}, "no generation runs"),
    ({"median_tpot_ms": -3, "total_output_tokens": 10, "completed": 1, "total_input_tokens": 1}, "median_tpot_ms"),
    ({"something": 1}, "not a result file"),
    ([1, 2], "expected a JSON object"),
])
def test_a_file_it_cannot_read_is_one_line(tmp_path, data, fragment):
    with pytest.raises(RooflineError, match=fragment):
        measurement_from(data, "file")
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    proc = validate(path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_an_open_loop_file_is_no_single_stream_but_validate_replays_it(tmp_path):
    """vllm bench serve at a --request-rate without --max-concurrency: no fixed number of streams to read a decode
    rate at (doctor's and the closed-loop readers' one line), but validate sets its latencies beside the load
    model's run of the same rate."""
    data = {"median_tpot_ms": 5.0, "mean_tpot_ms": 5.0, "mean_ttft_ms": 40.0, "total_output_tokens": 10,
            "completed": 1, "total_input_tokens": 1, "request_rate": 4.0}
    with pytest.raises(RooflineError, match="open-loop"):
        measurement_from(data, "file")
    path = tmp_path / "rate.json"
    path.write_text(json.dumps(data))
    proc = validate(path)
    assert proc.returncode == 0, proc.stderr
    (run,) = json.loads(proc.stdout)["runs"]
    assert run["rate"] == 4.0 and run["metrics"]["ttft"]["mean"]["measured_ms"] == 40.0


# --------------------------------------------------------------------------- calibrate --from-results

NVFP4 = REPO / "examples" / "Qwen3.6-35B-A3B-NVFP4"


def _vllm_file(path: Path, tok_s: float, prompt: int = 1024, output: int = 128) -> str:
    path.write_text(json.dumps({"backend": "vllm", "num_prompts": 8, "request_rate": "inf", "max_concurrency": 1,
                                "completed": 8, "total_input_tokens": 8 * prompt, "total_output_tokens": 8 * output,
                                "median_tpot_ms": 1000 / tok_s}))
    return str(path)


def calibrate(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofline.cli", "calibrate", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def test_calibrate_fits_an_entry_to_result_files_and_audit_prices_with_it(tmp_path):
    """calibrate --from-results: two models' files (llama-benchy's levels of a BF16 dense model, a vLLM bench
    of an NVFP4 hybrid MoE) fit the base entry's efficiency; each model is left out in turn; the saved entry
    prices a file's own scenario in audit exactly as the fit did."""
    hw_file = tmp_path / "hardware.toml"
    bench = _vllm_file(tmp_path / "nvfp4.json", 60.0)
    proc = calibrate("--from-results", f"{MODEL}={RESULTS / 'llama-benchy.json'}", "--from-results", f"{NVFP4}={bench}",
                     "--hardware", "gb10", "--kv-cache-dtype", "fp8", "--save", "my-spark", "--hardware-file",
                     str(hw_file), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["schema"] == "roofline.calibrate_results/1" and out["base_hardware"] == "gb10"
    assert 0.05 < out["efficiency"] < 1 and out["entry"]["efficiency_kind"] == "calibrated"
    assert [(p["streams"], p["context"]) for p in out["points"]] == [(1, 1536), (4, 1536), (1, 1088)]
    assert all(p["left_out_error"] is not None for p in out["points"])
    assert "fitted to 3 measured levels" in out["entry"]["efficiency_source"]
    # still a DGX Spark: the tables keyed by hardware (GB10's graph floor, its ConnectX-7 pair) apply to it
    assert out["entry"]["derived_from"] == "gb10" and \
        out["entry"]["graph_floor_us_per_kernel"] == load_table("launch")["floor"]["gb10"]["graph_floor_us_per_kernel"]
    assert out["saved"]["key"] == "my-spark" and hw_file.exists()
    audit = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", str(MODEL), "--hardware", "my-spark",
                            "--context", "1536", "--kv-cache-dtype", "fp8", "--json"], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "ROOFLINE_HARDWARE_FILE": str(hw_file)}, check=True)
    assert json.loads(audit.stdout)["expected_tok_s"] == pytest.approx(out["points"][0]["predicted_tok_s"], rel=1e-9)


def test_calibrate_refuses_files_the_device_cannot_have_measured(tmp_path):
    too_fast = _vllm_file(tmp_path / "fast.json", 900.0)  # a BF16 8B model at 900 tok/s on 273 GB/s
    hw_file = tmp_path / "hardware.toml"
    proc = calibrate("--from-results", f"{MODEL}={too_fast}", "--hardware", "gb10", "--save", "x", "--hardware-file",
                     str(hw_file))
    # the one check of a measurement (predict/verdict.impossible), made before any fit
    assert proc.returncode == 1 and "no engine decodes that fast" in proc.stderr
    assert "nothing fitted" in proc.stderr and not hw_file.exists() and "Traceback" not in proc.stderr
    bad = calibrate("--from-results", str(too_fast))
    assert bad.returncode == 1 and "give MODEL=FILE" in bad.stderr
    mixed = calibrate("--from-results", f"{MODEL}={too_fast}", "--engine", "vllm")
    assert mixed.returncode == 1 and "measures nothing" in mixed.stderr
    flags_alone = calibrate("--kv-cache-dtype", "fp8")
    assert flags_alone.returncode == 1 and "give them with --from-results" in flags_alone.stderr

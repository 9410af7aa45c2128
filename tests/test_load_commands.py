"""The first token and the server under load in the commands users run (#42): capacity / preflight / plan with
--request-rate, --burst, --trace and targets; validate against recorded open-loop runs of real vLLM 0.26 on an
H200 (benchmarks/results/vllm_h200_serving: `vllm bench serve --request-rate`, the real client); the Python API;
bad input as one line.

Inputs: the bundled examples (real config.json and safetensors headers), the reference configs, the recorded
GPU runs (raw `vllm bench serve --save-detailed` results)."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from inprocess import run

import roofline

REPO = Path(__file__).resolve().parents[1]
QWEN3_8B = str(REPO / "examples" / "Qwen3-8B")
HYBRID = str(REPO / "examples" / "Qwen3.6-35B-A3B-NVFP4")
RUNS = REPO / "benchmarks" / "results" / "vllm_h200_serving"
CONFIG_8B = str(REPO / "tests" / "reference_configs" / "Qwen__Qwen3-8B")


def _json(*args) -> dict:
    ran = run(*args) if "--json" in args else run(*args, "--json")
    assert ran.returncode == 0, ran.err
    return json.loads(ran.out)


def test_capacity_sweeps_rates_and_latency_grows_with_them():
    out = _json("capacity", QWEN3_8B, "--hardware", "h200", "--max-model-len", "8192", "--prompt-len", "1024",
                "--request-rate", "2", "--request-rate", "30", "--num-prompts", "120")
    load = out["load"]
    assert load["schema"] == "roofline.load/1"
    low, high = load["runs"]
    assert (low["rate"], high["rate"]) == (2, 30)
    for key in ("ttft", "itl", "tpot", "e2e"):
        assert set(low[key]) >= {"mean_ms", "p50_ms", "p90_ms", "p99_ms"}
    assert high["ttft"]["p90_ms"] > low["ttft"]["p90_ms"] and high["itl"]["mean_ms"] > low["itl"]["mean_ms"]
    assert load["saturation_rate"] > 0
    curve = load["curve"]
    assert len(curve) >= 8 and curve[-1]["ttft"]["p90_ms"] > curve[0]["ttft"]["p90_ms"]
    # the first token alone: the same figure capacity prints beside the curve, from the same prompt steps
    first = out["first_token"]
    assert first["ttft_ms"] == pytest.approx(out["ttft_ms"])
    assert load["first_token_alone_ms"] == pytest.approx(first["ttft_ms"])
    assert load["scheduler"]["max_num_batched_tokens"] == 8192  # vLLM's H200 serve default


def test_capacity_answers_the_spark_owners_question_with_its_band():
    """How many requests per second does a Spark serve with TTFT p90 <= 2 s and >= 20 tok/s each: one command."""
    args = ("capacity", HYBRID, "--max-model-len", "32768", "--kv-cache-dtype", "fp8", "--ttft-p90", "2",
            "--min-tok-s", "20", "--prompt-len", "2048", "--output-len", "256", "--num-prompts", "100")
    answer = _json(*args)["load"]["answer"]
    assert answer["rate"] is not None and answer["low"] < answer["rate"] < answer["high"]
    assert answer["rate"] <= answer["saturation_rate"]
    ran = run(*args)
    assert ran.returncode == 0
    assert "requests/s keep TTFT p90 <= 2,000 ms and >= 20 tok/s per request" in ran.out.replace("\n  ", " ")


def test_a_trace_is_replayed_at_its_own_times(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 250 * i, "input_length": 600 + 10 * i, "output_length": 40})
                             + "\n" for i in range(30)))
    load = _json("capacity", QWEN3_8B, "--hardware", "h200", "--max-model-len", "4096", "--trace", str(trace))["load"]
    (label, *_), = [(r["label"], r) for r in load["runs"]]
    assert "30" in label and load["runs"][0]["requests"] == 30
    timeless = tmp_path / "timeless.jsonl"
    timeless.write_text("".join(json.dumps({"prompt_tokens": 500, "output_tokens": 20}) + "\n" for _ in range(5)))
    ran = run("capacity", QWEN3_8B, "--max-model-len", "4096", "--trace", str(timeless))
    assert ran.returncode != 0 and "give a request rate" in ran.err and "Traceback" not in ran.err
    assert run("capacity", QWEN3_8B, "--max-model-len", "4096", "--trace", str(timeless), "--request-rate", "3",
               "--json").returncode == 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_trace_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    ran = run("capacity", QWEN3_8B, "--trace", str(fifo))
    assert ran.returncode != 0 and "not a regular file" in ran.err


@pytest.mark.parametrize("args, says", [
    (("--request-rate", "0"), "--request-rate"),
    (("--request-rate", "nan"), "--request-rate"),
    (("--burst", "-3"), "--burst"),
    (("--random-range-ratio", "1"), "--random-range-ratio"),
    (("--ttft-p90", "inf"), "--ttft-p90"),
])
def test_bad_load_options_are_one_line(args, says):
    ran = run("capacity", QWEN3_8B, *args)
    assert ran.returncode == 2 and says in ran.err and "Traceback" not in ran.err


def test_preflight_prices_the_serve_lines_scheduler_under_a_burst():
    line = f"vllm serve {QWEN3_8B} --max-model-len 8192 --max-num-batched-tokens 1024 --max-num-seqs 32".split()
    out = _json("preflight", "--hardware", "h200", "--burst", "16", "--prompt-len", "3000", "--json", "--", *line)
    assert out["scheduler"]["max_num_batched_tokens"] == 1024 and out["scheduler"]["max_num_seqs"] == 32
    assert len(out["first_token"]["prompt_steps_ms"]) == 3  # 3,000 tokens in chunks of 1,024
    burst = out["load"]["runs"][0]
    assert burst["label"] == "burst of 16"
    assert burst["ttft"]["p90_ms"] > 3 * out["first_token"]["ttft_ms"]
    bigger = _json("preflight", "--hardware", "h200", "--burst", "16", "--prompt-len", "3000", "--json", "--",
                   *[w.replace("1024", "8192") for w in line])
    assert len(bigger["first_token"]["prompt_steps_ms"]) == 1


def test_plan_ranks_rows_under_a_load_and_its_targets():
    out = _json("plan", QWEN3_8B, "--hardware", "gb10", "--formats", "bf16,fp8,nvfp4-w4a4", "--recipe", "default",
                "--request-rate", "1", "--ttft-p90", "1", "--min-tok-s", "15", "--num-prompts", "80")
    load = out["workload"]["load"]
    assert load["rate"] == 1 and load["targets"] == {"ttft_p90_ms": 1000.0, "min_tok_s": 15}
    rows = out["recommendations"]
    assert all(r["load"] is not None for r in rows)
    keys = [(r["fits"] and r["load"]["keeps_targets"], r["load"]["highest_rate"] or 0.0) for r in rows]
    firsts = [k[0] for k in keys]
    assert firsts == sorted(firsts, reverse=True)  # the rows keeping the targets first
    kept = [k[1] for k in keys if k[0]]
    bf16 = next(r for r in rows if r["format"] == "bf16")
    assert (bf16["load"]["highest_rate"] or 0.0) < max(kept)  # BF16 reads twice FP8's bytes a step: it keeps a lower rate
    assert any(reason.startswith("under 1 requests/s") and "TTFT p90" in reason for reason in rows[0]["reasons"])
    text = run("plan", QWEN3_8B, "--hardware", "gb10", "--formats", "bf16,fp8", "--recipe", "default",
               "--ttft-p90", "1").out
    assert "max req/s" in text and "ranked under the highest rate keeping the targets" in text.replace("\n", " ")
    ran = run("plan", QWEN3_8B, "--request-rate", "1", "--request-rate", "2")
    assert ran.returncode != 0 and "one request rate" in ran.err


def test_the_python_api_answers_as_the_cli():
    result = roofline.capacity(QWEN3_8B, hardware="h200", max_model_len=8192, prompt_len=1024,
                               request_rate=[4.0], num_prompts=120)
    cli = _json("capacity", QWEN3_8B, "--hardware", "h200", "--max-model-len", "8192", "--prompt-len", "1024",
                "--request-rate", "4", "--num-prompts", "120")
    assert result.load["runs"][0]["ttft"] == cli["load"]["runs"][0]["ttft"]
    plan = roofline.plan(QWEN3_8B, formats=("fp8",), recipes=("default",), request_rate=1.0, num_prompts=60)
    assert plan.recommendations[0].load.result.ttft.p90 > 0
    from roofline.errors import RooflineError

    with pytest.raises(RooflineError):
        roofline.capacity(QWEN3_8B, request_rate=-1.0)


# ----------------------------------------------------------------------------- recorded runs of real vLLM

def _recorded(tmp_path, name: str) -> str:
    path = tmp_path / name.replace(".gz", "")
    path.write_bytes(gzip.decompress((RUNS / name).read_bytes()))
    return str(path)


def test_validate_sets_a_recorded_open_loop_run_beside_the_load_model(tmp_path):
    """Qwen3-8B BF16 on an H200 (vLLM 0.26.0, dummy weights, prefix caching off), Poisson at 24 requests/s, 150
    requests of 1,024 + 256 tokens, sent by `vllm bench serve`: the recorded errors are the model's at the time
    the run was recorded; a change to the step or load model that moves them shows here."""
    out = _json("validate", CONFIG_8B, "--config-only", "--hardware", "h200", "--bench-json",
                _recorded(tmp_path, "qwen3-8b-rate-24.json.gz"), "--max-model-len", "20480",
                "--no-enable-prefix-caching")
    assert out["schema"] == "roofline.validate_load/1"
    (row,) = out["runs"]
    assert row["tool"] == "vllm bench serve" and row["requests"] == 150
    metrics = row["metrics"]
    # the benchmark's table of every recorded run (benchmarks/serving/load_check.py) says the same of this one
    recorded = next(r for r in json.loads((REPO / "benchmarks" / "serving" / "load_check.json").read_text())["rows"]
                    if r["file"] == "qwen3-8b-rate-24.json.gz")
    for key, ours in (("ttft", "ttft"), ("itl", "itl"), ("tpot", "tpot"), ("e2el", "e2e")):
        for q, field in (("mean", "mean"), ("median", "p50"), ("p90", "p90")):
            assert metrics[ours][field]["error"] == pytest.approx(recorded[f"{key}_{q}"]["error"], abs=1e-6)
    assert abs(metrics["itl"]["p50"]["error"]) < 0.20  # recorded 2026-11-26: -14%
    assert abs(metrics["e2e"]["mean"]["error"]) < 0.20  # -15%
    assert abs(metrics["ttft"]["mean"]["error"]) < 0.40  # -34%: under-predicted under load (the host's share)
    assert row["throughput"]["predicted"] == pytest.approx(row["throughput"]["measured"], rel=0.10)
    text = run("validate", CONFIG_8B, "--config-only", "--hardware", "h200", "--bench-json",
               _recorded(tmp_path, "qwen3-8b-rate-24.json.gz"), "--max-model-len", "20480",
               "--no-enable-prefix-caching").out
    assert "TTFT ms" in text and "ITL ms" in text


def test_validate_reads_a_recorded_burst(tmp_path):
    out = _json("validate", CONFIG_8B, "--config-only", "--hardware", "h200", "--bench-json",
                _recorded(tmp_path, "qwen3-8b-burst-64.json.gz"), "--max-model-len", "20480",
                "--no-enable-prefix-caching")
    (row,) = out["runs"]
    assert row["requests"] == 64
    assert abs(row["metrics"]["ttft"]["mean"]["error"]) < 0.35


def test_calibrate_fits_the_efficiency_to_recorded_open_loop_runs(tmp_path):
    """calibrate --from-results on two models' open-loop runs: each run's requests through the load model at each
    efficiency tried, its TPOT against the file's; each model left out in turn."""
    dense = _recorded(tmp_path, "qwen3-8b-rate-16.json.gz")
    moe = _recorded(tmp_path, "qwen3-30b-a3b-rate-16.json.gz")
    moe_config = str(REPO / "tests" / "reference_configs" / "Qwen__Qwen3-30B-A3B")
    out = _json("calibrate", "--from-results", f"{CONFIG_8B}={dense}", "--from-results", f"{moe_config}={moe}",
                "--hardware", "h200", "--no-enable-prefix-caching", "--max-model-len", "20480")
    assert 0.5 < out["efficiency"] < 1.0
    assert len(out["points"]) == 2 and all(p["left_out_error"] is not None for p in out["points"])
    for point, path in zip(out["points"], (dense, moe)):
        saved = json.loads(Path(path).read_text())
        assert point["measured_tok_s"] == pytest.approx(1e3 / saved["mean_tpot_ms"])
        assert point["streams"] > 1  # requests in flight at 16 requests/s
    assert out["mean_abs_error"] < 0.15
    assert "open loop" in out["entry"]["efficiency_source"]


def test_audit_prints_the_first_token_capacity_and_preflight_print():
    """One pricing: audit's first token of a prompt of its context is capacity's and preflight's of that prompt."""
    audit = _json("audit", QWEN3_8B, "--hardware", "h200", "--context", "3000", "--max-num-batched-tokens", "1024")
    capacity = _json("capacity", QWEN3_8B, "--hardware", "h200", "--max-model-len", "4096", "--prompt-len", "3000",
                     "--max-num-batched-tokens", "1024")
    assert audit["first_token"]["ttft_ms"] == pytest.approx(capacity["first_token"]["ttft_ms"])
    assert len(audit["first_token"]["prompt_steps_ms"]) == 3
    text = run("audit", QWEN3_8B, "--hardware", "h200", "--context", "3000", "--max-num-batched-tokens", "1024").out
    assert "first token" in text and "3,000-token prompt alone (3 prompt steps of up to 1,024 tokens" in text

"""The decode step's kernels timed one by one on an H200 (benchmarks/gpu_vllm/decode_kernels.py, recorded under
benchmarks/results/vllm_h200_decode_kernels) and what RESULTS-gpu.md and preflight's note say of them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu_vllm"))

import decode_rates  # noqa: E402  (benchmarks/gpu_vllm/decode_rates.py)


@pytest.fixture(scope="module")
def summary():
    return decode_rates.summarize()


def test_decode_rates_json_is_what_the_runs_give(summary):
    recorded = json.loads((decode_rates.RESULTS / "decode_rates.json").read_text())
    assert json.loads(json.dumps(summary)) == recorded


def test_the_kernels_alone_account_for_tritons_longer_steps(summary):
    """Qwen3-8B's engine steps on Triton's attention less FlashAttention 3's, at 16k tokens, against the two kernels'
    difference times its 36 layers: the attention kernel is the whole difference (within 20%)."""
    long = [e for e in summary["engine"] if e["context"] == 16384]
    assert len(long) == 3
    for e in long:
        assert e["step_difference_ms"] > 1.0
        assert e["kernel_difference_ms"] == pytest.approx(e["step_difference_ms"], rel=0.2)


def test_triton_reads_kv_at_about_half_the_bandwidth_and_fp8_buys_a_third(summary):
    """What vllm_args.toml's TRITON_ATTN note tells a user: about half an H200's 4.8 TB/s below 64 sequences where
    FlashAttention 3 reaches ~90%; an FP8 cache, its query in FP8 as vLLM gives it, about a third faster on the 3D
    path, no faster on the 2D (the harness's first sweep, a BF16 query on an FP8 cache, ran no faster than BF16: not what vLLM launches)."""
    rows = [r for r in decode_rates.rows() if r["kind"] == "attention" and r["model"] == "qwen3-8b"]
    at = {(r["impl"], r["kv_dtype"], r["batch"], r["context"]): r for r in rows}
    triton, flash = "triton unified_attention", "flash_attn_varlen fa3"
    for batch in (8, 16, 32):
        assert 0.4 < at[(triton, "bf16", batch, 16384)]["gbps"] / 4800 < 0.6
        assert at[(flash, "bf16", batch, 16384)]["gbps"] / 4800 > 0.8
        assert at[(triton, "fp8", batch, 16384)]["query"] == "float8_e4m3fn"
        fp8_over_bf16 = at[(triton, "fp8", batch, 16384)]["ms"] / at[(triton, "bf16", batch, 16384)]["ms"]
        # on its 3D path (up to 16 sequences for 8 KV heads); its 2D path past it gains nothing from FP8
        assert 0.55 < fp8_over_bf16 < 0.75 if batch <= 16 else 0.9 < fp8_over_bf16 < 1.1


def test_gemma4_global_layers_run_2d_past_the_models_threshold():
    """Gemma 4 31B's global layers (4 KV heads) take the model's 3D threshold (16 KV heads: 8 sequences): at 16
    sequences of 16k tokens its 2D kernel, a chain per sequence and head, runs several times the 3D kernel's time
    at 8, as vLLM's steps did (37.8 ms of attention at 10 streams against 5.9 at 5)."""
    rows = [r for r in decode_rates.rows() if r["kind"] == "attention" and r["model"] == "gemma4-31b-global"
            and r["impl"] == "triton unified_attention" and r["context"] == 16384 and r["kv_dtype"] == "fp8"]
    by_batch = {r["batch"]: r for r in rows}
    assert (by_batch[8]["path"], by_batch[16]["path"]) == ("3d", "2d")
    assert by_batch[16]["ms"] > 5 * by_batch[8]["ms"]



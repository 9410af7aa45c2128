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


def test_triton_reads_kv_at_about_half_the_bandwidth_and_fp8_buys_it_nothing(summary):
    """What vllm_args.toml's TRITON_ATTN note tells a user: about half an H200's 4.8 TB/s below 64 sequences where
    FlashAttention 3 reaches ~90%, and an FP8 cache no faster than BF16."""
    rows = [r for r in decode_rates.rows() if r["kind"] == "attention" and r["model"] == "qwen3-8b"]
    at = {(r["impl"], r["kv_dtype"], r["batch"], r["context"]): r for r in rows}
    triton, flash = "triton unified_attention", "flash_attn_varlen fa3"
    for batch in (8, 16, 32):
        assert 0.4 < at[(triton, "bf16", batch, 16384)]["gbps"] / 4800 < 0.6
        assert at[(flash, "bf16", batch, 16384)]["gbps"] / 4800 > 0.8
        assert at[(triton, "fp8", batch, 16384)]["ms"] == pytest.approx(at[(triton, "bf16", batch, 16384)]["ms"],
                                                                      rel=0.1)

"""vLLM's CUDA-graph sizes (roofline/predict/cuda_graphs.py): a decode batch padded past --max-num-seqs has no FULL
graph and runs piecewise, its attention launched by the host every layer; priced so, and a real step so measured."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from roofline.audit import load_inventory
from roofline.predict.cuda_graphs import capture_sizes, full_decode_tokens
from roofline.predict.hardware import get_hardware
from roofline.predict.step import StepConfig, price_step

ROOT = Path(__file__).resolve().parent.parent
GEMMA4_31B = str(ROOT / "benchmarks" / "gpu_vllm" / "configs" / "gemma-4-31B-text")


@pytest.mark.parametrize("largest, batched, sizes", [
    (8, 8192, [1, 2, 4, 8]),  # --max-num-seqs 4 or 5: 2 x 5 = 10 tokens, every 8 below it
    (20, 8192, [1, 2, 4, 8, 16]),
    (2, 8192, [1, 2]),
    (300, 8192, [1, 2, 4] + list(range(8, 256, 8)) + [256, 272, 288]),
    (512, 100, None),  # the token budget is captured where it is within the largest
])
def test_capture_sizes_are_vllms(largest, batched, sizes):
    got = capture_sizes(largest, batched)
    if sizes is not None:
        assert got == sizes
    else:
        assert 100 in got and got[-1] == 512


@pytest.mark.parametrize("seqs, drafts, largest, full", [
    (5, 0, 10, 4),  # a batch of 5 pads to 8: 8 requests are more than 5
    (10, 0, 20, 8),
    (8, 0, 16, 8),
    (256, 0, 512, 256),
    (4, 1, 10, 8),  # MTP: 2 tokens a request, 4 requests
])
def test_the_largest_full_decode_graph_fits_max_num_seqs(seqs, drafts, largest, full):
    assert full_decode_tokens(seqs, drafts, largest) == full


def test_a_batch_past_max_num_seqs_graphs_is_host_bound_as_measured():
    """Gemma 4 31B with --max-num-seqs 5 on an H200 (real vLLM 0.26 steps, profiled): 5 streams ran 37.8 ms a step
    while its kernels ran 19.4; the same batch under --max-num-seqs 10 ran 19.4 ms. Priced: the first host-bound,
    the second not."""
    inventory = load_inventory(GEMMA4_31B)
    h200 = get_hardware("h200")
    base = StepConfig(batch=5, context=1536, kv_cache_dtype="fp8", attention_backend="TRITON_ATTN")
    runs = ROOT / "benchmarks" / "results" / "vllm_h200_triton_fp8"
    at = {name: next(d["step_ms"] for d in json.loads((runs / f"{name}.json").read_text())["decode"]
                     if (d["batch"], d["context"]) == (5, 1536))
          for name in ("gemma4-31b-fp8kv-again", "gemma4-31b-fp8kv-prof")}
    piecewise = price_step(inventory, h200, replace(base, full_decode_tokens=4))
    full = price_step(inventory, h200, replace(base, full_decode_tokens=8))
    assert piecewise.step_ms > 1.5 * full.step_ms
    assert piecewise.step_ms == pytest.approx(at["gemma4-31b-fp8kv-again"], rel=0.15)
    assert full.step_ms == pytest.approx(at["gemma4-31b-fp8kv-prof"], rel=0.10)


def test_preflight_prices_max_num_seqs_as_vllm_captures_it():
    """The serve line's --max-num-seqs decides it: 5 streams of a 5-sequence server are host-bound, 8 of an
    8-sequence server are not."""
    def preflight(seqs: int) -> str:
        out = subprocess.run([sys.executable, "-m", "roofline.cli", "preflight", "--hardware", "h200", "--",
                              "vllm", "serve", GEMMA4_31B, "--kv-cache-dtype", "fp8", "--attention-backend",
                              "TRITON_ATTN", "--max-num-seqs", str(seqs), "--max-model-len", "16640"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def streams(out: str, seqs: int) -> str:
        return next(line for line in out.splitlines() if f"{seqs} streams" in line)

    five, eight = preflight(5), preflight(8)
    assert "host-bound" in streams(five, 5) and "full decode graphs of up to 4 sequences" in five
    assert "memory-bound" in streams(eight, 8) and "full decode graphs" not in eight


@pytest.mark.parametrize("seqs, full, captured, said", [
    (5, 4, 10, True), (8, 8, 16, False), (264, 256, 512, True),
    (1024, 512, 512, False),  # past the capture itself: no graph at all, not this note's case
])
def test_the_note_says_when_max_num_seqs_leaves_batches_without_a_full_graph(seqs, full, captured, said):
    from roofline.predict.cuda_graphs import past_full_note

    assert (past_full_note(seqs, full, captured) is not None) == said

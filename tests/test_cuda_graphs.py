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
from roofline.predict.launch import launch_costs
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


CONFIGS = ROOT / "benchmarks" / "gpu_vllm" / "configs"
PIECEWISE_RUNS = ROOT / "benchmarks" / "results" / "vllm_h200_piecewise"


def _piecewise_rows() -> dict[str, float]:
    import tomllib

    table = tomllib.loads((ROOT / "roofline" / "data" / "prefill.toml").read_text())
    return {row["split"]: row["launches"] for row in table["piecewise"]["split"]}


def test_a_piecewise_decode_is_priced_by_what_its_graph_is_split_at():
    """Past the FULL graphs each layer vLLM splits the graph at costs the host that layer's own figure: a GDN
    layer, an attention layer on its backend, and once a step a hybrid's own host time; in a FULL graph none."""
    h200 = get_hardware("h200")
    rows = _piecewise_rows()
    host_us = launch_costs(h200).host_us_per_kernel  # launch.toml [host.x86_server]
    hybrid = load_inventory(str(CONFIGS / "Qwen3-Next-80B-A3B-12layers"), config_only=True)
    step = price_step(hybrid, h200, StepConfig(batch=3, context=256, full_decode_tokens=2,
                                               attention_backend="FLASH_ATTN"))
    assert step.main.piecewise_splits == {"attention": 3, "gdn": 9, "recurrent_step": 1}
    pieces = sum(seg.piecewise_host_s for seg in step.main.segments)
    assert pieces == pytest.approx((3 * rows["FLASH_ATTN"] + 9 * rows["gdn"] + rows["recurrent_step"]) * host_us * 1e-6)
    assert step.main.host_s > pieces
    full = price_step(hybrid, h200, StepConfig(batch=2, context=256, full_decode_tokens=2,
                                               attention_backend="FLASH_ATTN"))
    assert full.main.piecewise_splits == {}

    dense = load_inventory(str(ROOT / "tests" / "reference_configs" / "Qwen__Qwen3-8B"), config_only=True)
    by_backend = {name: price_step(dense, h200, StepConfig(batch=3, context=256, full_decode_tokens=2,
                                                           attention_backend=name))
                  for name in ("FLASH_ATTN", "TRITON_ATTN", "FLASHINFER")}
    spent = {name: sum(seg.piecewise_host_s for seg in s.main.segments) for name, s in by_backend.items()}
    assert spent["FLASH_ATTN"] == pytest.approx(36 * rows["FLASH_ATTN"] * host_us * 1e-6)
    assert spent["TRITON_ATTN"] == pytest.approx(36 * rows["TRITON_ATTN"] * host_us * 1e-6)
    # a backend no piecewise step measured takes the table's row for one
    assert spent["FLASHINFER"] == pytest.approx(36 * rows["attention"] * host_us * 1e-6)
    assert rows["FLASH_ATTN"] < rows["TRITON_ATTN"]


@pytest.mark.parametrize("run, architecture, attention", [
    ("q8b-pw", "Qwen__Qwen3-8B", None), ("qnext12-pw", "Qwen3-Next-80B-A3B-12layers", None),
    ("nemo13-pw", "Nemotron-3-Nano-13layers", None), ("qnext12l-pw-b", "Qwen3-Next-80B-A3B-12layers", None),
    ("q8b12l-triton-pw", "Qwen3-8B-12layers", "TRITON_ATTN"),
])
def test_piecewise_decode_steps_the_fit_never_saw_are_priced_within_a_quarter(run, architecture, attention):
    """Real vLLM 0.26 steps on an H200 (3 sequences, --max-num-seqs 3: padded to 4, piecewise) that did not set the
    table's rows (benchmarks/gpu_vllm/piecewise.py fits on another start's and other depths' steps): a dense model,
    a GDN hybrid on two starts, a Mamba hybrid whose layer figure is GDN's estimate, and Triton's attention row
    (calibrated on Gemma 4) on Qwen3-8B."""
    result = json.loads((PIECEWISE_RUNS / f"{run}.json").read_text())
    folder = ROOT / "tests" / "reference_configs" / architecture
    folder = folder if folder.exists() else CONFIGS / architecture
    measured = next(d["step_ms"] for d in result["decode"] if d["batch"] == 3)
    step = price_step(load_inventory(str(folder), config_only=True), get_hardware("h200"),
                      StepConfig(batch=3, context=256, full_decode_tokens=2, attention_backend=attention))
    assert step.main.piecewise_splits
    assert step.step_ms == pytest.approx(measured, rel=0.25)


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

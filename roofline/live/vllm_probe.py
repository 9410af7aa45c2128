"""One case of real vLLM, offline and weightless: decode step time and vLLM's own start-up figures, as
JSON. A process of its own per case: `roofline calibrate --engine vllm` starts it with the user's vLLM
(roofline/live/engine_calibrate.py), the GPU harness on an H100 / H200 the same way
(benchmarks/gpu_vllm/run_probe.sh). Imports nothing of roofline beyond the standard library, so that
it runs wherever vLLM does.

    python -m roofline.live.vllm_probe --config tests/reference_configs/meta-llama__Llama-3.1-8B-Instruct \
        --mode graphs --batches 1,8,32,128 --context 1024 --out $OUT/llama8b-graphs.json

The engine: vllm.LLM(model=<folder with config.json>, load_format="dummy", skip_tokenizer_init=True):
the architecture at full size with random weights, no download; prompts as token ids. In-process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) so that vLLM's log records can be read here.

Decode step time, prefill cancelled: for each batch, the same prompts generate `short` and then
`long` tokens (ignore_eos); step = (t_long - t_short) / (long - short), the median of `repeats`.
Start-up figures are parsed from vLLM's own log lines (model loading GiB, available KV cache GiB,
KV cache tokens, maximum concurrency, CUDA-graph pool GiB).

With --memory-trace, the CUDA allocations of vLLM's memory-profiling run are recorded (torch's memory history,
Python stacks): the blocks alive at its peak, summed by the vLLM code that allocated them (what the "peak activation"
vLLM logs consists of; roofline/advise/profile_run.py prices it).

With --profile-batches, one decode step per named batch is profiled the same way (torch profiler, CUDA
activity, two generation lengths, the difference per step): GPU kernels per step by launcher (the
LAUNCHERS table, by kernel name), the kernels' own GPU time per step, the host's kernel and graph
launches per step, and the most frequent kernel names.

With --router-bias zero, every MoE router's bias and score-correction bias is set to zero after the engine started
(in place: the captured CUDA graphs read the same tensors). vLLM's dummy loader fills them with the same small noise
as the weights, and a router that adds a bias to its logits (gpt-oss's) or to its scores before the top-k
(Nemotron-H's, DeepSeek-V3's correction) then picks by the bias alone: the same experts for every token of a step,
whatever the batch. Zeroed, the logits are the router's weights times the token's hidden state, which differ token
by token where nothing else adds the same vector to every token (DeepSeek-V3's and Nemotron-H's layers have no other
bias: their steps then read the experts of distinct tokens); gpt-oss's attention and expert biases do, and its tokens
still share most experts (benchmarks/results/vllm_h200_router_bias). With --router-bias zero-all every bias of the
model is zeroed, so that nothing common to every token is left in its hidden state.
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import platform
import re
import statistics
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")

# vLLM 0.26's start-up lines, and the figure each gives (GiB unless said)
LOG_FIGURES = {
    "weights_gib": r"Model loading took ([\d.]+) GiB",
    "available_kv_gib": r"Available KV cache memory: ([\d.]+) GiB",
    "kv_tokens": r"KV cache size: ([\d,]+) tokens",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
    "cuda_graph_gib": r"Graph capturing finished in [\d.]+ secs?, took ([\d.-]+) GiB",
    "cuda_graph_estimate_gib": r"Estimated CUDA graph memory: ([\d.]+) GiB total",
    "activation_peak_gib": r"([\d.]+) GiB for peak activation",
    "non_torch_gib": r"([\d.]+) GiB for non-torch memory",
    "block_size": r"Setting attention block size to (\d+) tokens",
}


# which library launched a kernel, by its name (first match wins); CUPTI names a hand-written Triton
# kernel by its bare Python function name, a compiled CUDA kernel by its demangled signature
LAUNCHERS = [
    ("triton", r"^triton_"),  # torch.compile (Inductor) kernels
    ("cublas", r"^nvjet|^sm\d+_xmma|^ampere_|^sm\d+_gemm"),  # cuBLAS's own kernels have bare names too
    ("triton", r"^[A-Za-z_][A-Za-z0-9_]*$"),  # any other bare identifier: a hand-written Triton kernel
    ("flash_attention", r"flash|fmha|FlashAttn|flashmla|mla_|attention"),
    ("cutlass", r"cutlass|sm90_|Sm90|Sm100"),
    ("cublas", r"gemv|gemm|splitKreduce|cublas|xmma"),
    ("marlin", r"marlin|Marlin"),
    ("vllm_custom_op", r"vllm::|_C::|moe|topk|rms_norm|rotary|silu_and_mul|act_and_mul|reshape_and_cache|scaled_fp8|per_token"),
    ("aten", r"at::|elementwise|reduce_kernel|index|copy|fill|cat"),
    ("other", r"."),
]


def launcher(name: str) -> str:
    return next(kind for kind, pattern in LAUNCHERS if re.search(pattern, name))


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


# vLLM 0.26 found torch.compile's output of an earlier start in its cache: the profile run then compiles nothing, and
# its logged activation peak (hence the KV cache) differs from a first start's (benchmarks/RESULTS-gpu.md, 2026-12-02)
COMPILE_CACHE_HIT = "Directly load the compiled graph"


def figures(lines: list[str]) -> dict:
    out = {}
    for key, pattern in LOG_FIGURES.items():
        for line in lines:
            match = re.search(pattern, line)
            if match:
                out[key] = float(match.group(1).replace(",", ""))
    out["compile_cache_hit"] = any(COMPILE_CACHE_HIT in line for line in lines)
    return out


def profile_step(run, batch: int, short: int = 4, long: int = 20) -> dict:
    """One decode step's kernels: the profiled difference of two generation lengths, per step."""
    from collections import Counter

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    def counted(tokens: int):
        run(batch, tokens)  # warm: the same path without the profiler first
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run(batch, tokens)
        kernels, busy_us, host = Counter(), Counter(), Counter()
        for event in prof.events():
            if event.device_type == DeviceType.CUDA:
                if "Memcpy" in event.name or "Memset" in event.name:
                    continue
                kernels[event.name] += 1
                busy_us[event.name] += event.time_range.elapsed_us()
            elif event.name in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                                "cudaGraphLaunch", "cuGraphLaunch"):
                host[event.name] += 1
        return kernels, busy_us, host

    (k_short, busy_short, host_short), (k_long, busy_long, host_long) = counted(short), counted(long)
    steps = long - short
    names = set(k_long) | set(k_short)
    per_name = {name: (k_long[name] - k_short[name]) / steps for name in names}
    # each kernel's own GPU time per step (the attention kernel's against its KV bytes, a GEMM's against its weights)
    ms_per_name = {name: (busy_long[name] - busy_short[name]) / steps / 1e3 for name in names}
    per_name = {name: n for name, n in per_name.items() if abs(n) > 1e-9}
    by_launcher = Counter()
    for name, n in per_name.items():
        by_launcher[launcher(name)] += n
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:60]
    busiest = sorted(ms_per_name.items(), key=lambda kv: -kv[1])[:30]
    return {"batch": batch, "steps": steps, "kernels_per_step": sum(per_name.values()),
            "by_launcher": dict(by_launcher),
            "kernel_busy_ms_per_step": sum(ms_per_name.values()),
            "host_launches_per_step": {k: (host_long[k] - host_short[k]) / steps for k in set(host_long) | set(host_short)},
            "top_kernels": [{"name": name[:200], "launcher": launcher(name), "per_step": n,
                             "ms_per_step": ms_per_name[name]} for name, n in top],
            "busiest_kernels": [{"name": name[:200], "launcher": launcher(name), "per_step": per_name.get(name, 0.0),
                                 "ms_per_step": ms} for name, ms in busiest]}


def host_step(host_runs: dict, batch: int, short: int, long: int, context: int) -> dict:
    """Each timed host method's milliseconds and calls per decode step: the long runs' totals less the short runs'
    over the extra tokens (the prefill and warm-up drop out, as in step_ms), the median over the repeats."""
    longs, shorts = host_runs[(batch, long, context)], host_runs[(batch, short, context)][1:]  # [0]: the warm-up
    out = {}
    for name in longs[0]:
        per_step = [(lr[name][0] - sr.get(name, (0.0, 0))[0]) / (long - short) for lr, sr in zip(longs, shorts)]
        calls = [(lr[name][1] - sr.get(name, (0.0, 0))[1]) / (long - short) for lr, sr in zip(longs, shorts)]
        out[name] = {"ms": 1e3 * statistics.median(per_step), "calls": statistics.median(calls)}
    return out


def speculative_step(spec_runs: list[dict], batch: int, short: int, long: int) -> dict:
    """With speculation a generated token is not a step: one verify step per draft (vLLM counts a draft
    per request and step). The step time is the long run's extra time over its extra drafts, per
    request; tokens per step is what each step kept (1 + accepted per draft)."""
    pairs = [(s, l) for s, l in zip(spec_runs, spec_runs[1:])
             if s["batch"] == l["batch"] == batch and s["tokens"] == short and l["tokens"] == long]
    steps = [(l["s"] - s["s"]) / ((l.get("num_drafts", 0) - s.get("num_drafts", 0)) / batch)
             for s, l in pairs if l.get("num_drafts", 0) > s.get("num_drafts", 0)]
    drafts = sum(l.get("num_drafts", 0) for _, l in pairs)
    accepted = sum(l.get("num_accepted_tokens", 0) for _, l in pairs)
    drafted = sum(l.get("num_draft_tokens", 0) for _, l in pairs)
    return {"verify_step_ms": 1e3 * statistics.median(steps) if steps else None,
            "verify_step_ms_runs": [1e3 * s for s in steps],
            "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
            "acceptance_rate": accepted / drafted if drafted else None}


# vLLM 0.26's two GPU model runners (V1 for MoE / hybrid / speculative engines, V2 for the rest): each has its own
# load_model and profile_run, so each is traced where it exists
RUNNERS = ("vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner")


def _runner_classes() -> list:
    import importlib
    found = []
    for module in RUNNERS:
        try:
            found.append(importlib.import_module(module).GPUModelRunner)
        except (ImportError, AttributeError):
            pass
    return found


def _traced(method, into: dict, at_peak: bool):
    """`method` run under torch's memory history; into `into`: the allocator's peak and current bytes on entry
    (what vLLM's own accounting measures from), and the blocks alive at the traced peak (at_peak) or at the end,
    by the vLLM code that allocated them."""
    import torch

    def traced(self, *a, **k):
        stats = torch.cuda.memory_stats()
        into["entry"] = {"allocated_bytes": stats.get("allocated_bytes.all.current", 0),
                         "peak_allocated_bytes": stats.get("allocated_bytes.all.peak", 0),
                         "runner": type(self).__module__}
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
        try:
            return method(self, *a, **k)
        finally:
            try:  # a trace that cannot be read must not stop the engine: its error is the result
                torch.cuda.synchronize()
                snapshot = torch.cuda.memory._snapshot()
                torch.cuda.memory._record_memory_history(enabled=None)
                into.update(peak_blocks(snapshot["device_traces"][torch.cuda.current_device()], at_peak=at_peak))
                if not at_peak:
                    into["block_overhang"] = block_overhang(
                        [s for s in snapshot["segments"] if s.get("device") == torch.cuda.current_device()])
                stats = torch.cuda.memory_stats()
                into["exit"] = {"allocated_bytes": stats.get("allocated_bytes.all.current", 0),
                                "peak_allocated_bytes": stats.get("allocated_bytes.all.peak", 0)}
            except Exception as exc:  # noqa: BLE001
                into["error"] = repr(exc)[:500]

    return traced


def trace_profile_run(into: dict) -> None:
    """Record the CUDA allocations of vLLM's memory-profiling run (profile_run of either model runner, which sets
    the "peak activation" vLLM logs) and put into `into` the blocks alive at its peak, summed by the vLLM code
    that allocated them (innermost vllm frames), the largest first."""
    for runner in _runner_classes():
        runner.profile_run = _traced(runner.profile_run, into, at_peak=True)


def trace_load_model(into: dict) -> None:
    """Record the CUDA allocations of vLLM's model loading (load_model, what "Model loading took X GiB" measures)
    and put into `into` the blocks still alive when it returns, by the vLLM code that allocated them, and the
    load's own peak."""
    for runner in _runner_classes():
        runner.load_model = _traced(runner.load_model, into, at_peak=False)


# the model runner's per-step host work, timed by --time-host: the whole step's Python (execute_model and sample_tokens
# under async scheduling, where neither waits on the GPU) and, inside it, the parts that grow with the model's layout
# (_build_attention_metadata loops over the KV cache groups)
HOST_METHODS = ("execute_model", "sample_tokens", "_prepare_inputs", "_build_attention_metadata", "_update_states")


def time_host(into: dict) -> None:
    """Accumulate, per model-runner method of HOST_METHODS, the seconds spent in it and its calls into `into`
    (the engine in this process: VLLM_ENABLE_V1_MULTIPROCESSING=0, one GPU)."""
    def timed(method, name):
        def wrapper(self, *a, **k):
            t0 = time.perf_counter()
            try:
                return method(self, *a, **k)
            finally:
                total = into.setdefault(name, [0.0, 0])
                total[0] += time.perf_counter() - t0
                total[1] += 1
        return wrapper

    for runner in _runner_classes():
        for name in HOST_METHODS:
            if hasattr(runner, name):
                setattr(runner, name, timed(getattr(runner, name), name))


# the router of a MoE layer, by its module's name in vLLM's models (gpt-oss: mlp.router; Qwen3-MoE, Mixtral, Nemotron-H,
# DeepSeek-V3: mlp.gate / block_sparse_moe.gate / mixer.gate); the score correction is an attribute of the gate
ROUTER_NAMES = ("router", "gate")


def zero_all_biases(model) -> dict:
    """Zero, in place, every bias of `model` (parameters and buffers named *bias: linear layers', experts' w13_bias /
    w2_bias, score corrections): then nothing adds the same vector to every token's hidden state, and a MoE router
    follows the tokens themselves (gpt-oss: benchmarks/results/vllm_h200_router_bias); what was zeroed, by name's end."""
    import torch

    zeroed: dict[str, int] = {}
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if name.endswith("bias") and isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                tensor.zero_()
                kind = name.rsplit(".", 1)[-1]
                zeroed[kind] = zeroed.get(kind, 0) + 1
    return {"all_biases": {"layers": sum(zeroed.values()), "by_name": zeroed}}


def zero_router_biases(model) -> dict:
    """Zero, in place, the bias of every MoE router of `model` (a module named ROUTER_NAMES whose bias has one entry
    per output: its experts) and every router's score-correction bias; what was zeroed, by kind."""
    import torch

    zeroed = {"router_bias": [], "score_correction_bias": []}
    with torch.no_grad():
        for name, module in model.named_modules():
            if name.rsplit(".", 1)[-1] not in ROUTER_NAMES:
                continue
            # vLLM's linear layers say their output size (a CPU build repacks the weight itself after loading)
            weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
            outputs = getattr(module, "output_size", None) or (
                weight.shape[0] if isinstance(weight, torch.Tensor) and weight.dim() == 2 else None)
            if isinstance(bias, torch.Tensor) and bias.dim() == 1 and outputs and bias.numel() == outputs:
                bias.zero_()
                zeroed["router_bias"].append(name)
            correction = getattr(module, "e_score_correction_bias", None)
            if isinstance(correction, torch.Tensor):
                correction.zero_()
                zeroed["score_correction_bias"].append(name)
    return {kind: {"layers": len(names), "first": names[:1]} for kind, names in zeroed.items()}


def _site(frames: list[dict]) -> str:
    """Where an allocation was made: its innermost vllm frames, else its innermost frame."""
    ours = [f for f in frames if "vllm/" in f.get("filename", "")][:3]
    return " < ".join(f"{f['filename'].split('vllm/', 1)[1]}:{f['line']} {f['name']}" for f in ours) or (
        f"{frames[0]['filename']}:{frames[0]['line']} {frames[0]['name']}" if frames else "?")


def block_overhang(segments: list[dict], top: int = 20) -> dict:
    """The caching allocator's active blocks beyond the bytes asked of them (torch counts a block's size in
    allocated_bytes, the trace the request), summed by where the block was allocated."""
    by_site: dict[str, list] = {}
    for segment in segments:
        for block in segment.get("blocks", []):
            if block.get("state") != "active_allocated":
                continue
            extra = block["size"] - block.get("requested_size", block["size"])
            site = by_site.setdefault(_site(block.get("frames", [])), [0, 0, 0])
            site[0] += extra
            site[1] += 1
            site[2] = max(site[2], extra)
    sites = sorted(by_site.items(), key=lambda kv: -kv[1][0])
    return {"bytes": sum(v[0] for v in by_site.values()),
            "by_site": [{"bytes": b, "blocks": n, "largest": m, "site": site} for site, (b, n, m) in sites[:top]]}


def peak_blocks(events: list[dict], top: int = 40, at_peak: bool = True) -> dict:
    """Replay a device trace (alloc / free_completed): the peak of the bytes allocated during it and the blocks
    alive then (or at its end), summed by where they were allocated."""
    def replay(stop: int | None):
        live, total, peak, at = {}, 0, 0, -1
        for i, event in enumerate(events if stop is None else events[:stop + 1]):
            if event["action"] == "alloc":
                live[event["addr"]] = event
                total += event["size"]
            elif event["action"] == "free_completed" and event["addr"] in live:
                total -= live.pop(event["addr"])["size"]
            if total > peak:
                peak, at = total, i
        return live, peak, at

    live, peak, at = replay(None)
    if at_peak:
        live, _, _ = replay(at)
    by_site: dict[str, list] = {}
    for event in live.values():
        site = by_site.setdefault(_site(event.get("frames", [])), [0, 0, []])
        site[0] += event["size"]
        site[1] += 1
    sites = sorted(by_site.items(), key=lambda kv: -kv[1][0])
    return {"peak_bytes": peak, "events": len(events), "peak_event": at,
            "live_bytes": sum(event["size"] for event in live.values()),
            ("live_at_peak" if at_peak else "live_at_end"): [
                {"bytes": b, "blocks": n, "site": site} for site, (b, n, _) in sites[:top]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="folder with config.json")
    parser.add_argument("--mode", choices=["graphs", "eager"], default="graphs")
    parser.add_argument("--batches", default="1,8,32,128")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--contexts", default=None,
                        help="several contexts on one engine, e.g. 1536,16384 (each with every batch; overrides --context)")
    parser.add_argument("--prefix-caching", action="store_true",
                        help="keep vLLM's prefix cache on: the runs' repeated prompts are then prefilled once (long "
                             "contexts at many streams), the short and long runs alike, so the difference is decode")
    parser.add_argument("--short", type=int, default=8)
    parser.add_argument("--long", type=int, default=72)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--quantization", default=None, help="e.g. fp8 (online W8A8 from BF16 weights)")
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--max-num-batched-tokens", type=int, default=None,
                        help="vLLM's token budget per step (default: vLLM's own): sets the activation peak")
    parser.add_argument("--max-num-seqs", type=int, default=None,
                        help="vLLM's request limit (default: the largest batch): sets the sampler's profile")
    parser.add_argument("--gpu-memory-utilization", type=float, default=None,
                        help="vLLM's share of the device (default: vLLM's own), e.g. another GPU's budget")
    parser.add_argument("--memory-trace", action="store_true",
                        help="record the CUDA allocations of vLLM's profile run: the live blocks at its peak, "
                             "by the vLLM code that allocated them (profile_peak in the JSON)")
    parser.add_argument("--load-trace", action="store_true",
                        help="record the CUDA allocations of vLLM's model loading: the blocks alive when it ends, "
                             "by the vLLM code that allocated them (load_blocks in the JSON)")
    parser.add_argument("--hf-overrides", default=None, help="JSON, e.g. '{\"num_hidden_layers\": 4}'")
    parser.add_argument("--attention-backend", default=None,
                        help="vLLM's attention backend by name (e.g. TRITON_ATTN); default: vLLM's choice")
    parser.add_argument("--moe-backend", default=None,
                        help="vLLM's MoE backend (e.g. marlin: the path GB10 takes for MXFP4 and NVFP4 experts); "
                             "default: vLLM's choice")
    parser.add_argument("--additional-config", default=None,
                        help="JSON for vLLM's additional_config, e.g. '{\"gdn_prefill_backend\": \"triton\"}' "
                             "(GDN hybrids on Hopper without FlashInfer)")
    parser.add_argument("--language-model-only", action="store_true",
                        help="vLLM's --language-model-only: a multimodal checkpoint's text model alone (its decode "
                             "step is the same; no processor to build from a folder with only config.json)")
    parser.add_argument("--profile-batches", default="", help="batches to profile one decode step of, e.g. 1,32")
    parser.add_argument("--speculative-config", default=None,
                        help="JSON as vLLM takes it, e.g. '{\"method\": \"mtp\", \"num_speculative_tokens\": 2}': "
                             "a step is then one verify and its drafts, counted by vLLM's spec-decode counters")
    parser.add_argument("--async-scheduling", choices=["on", "off"], default=None,
                        help="vLLM's --async-scheduling / --no-async-scheduling (default: vLLM's choice, recorded)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1,
                        help="vLLM's --tensor-parallel-size: ranks on this host's GPUs (its multiprocess executor)")
    parser.add_argument("--time-host", action="store_true",
                        help="time the model runner's per-step host work (HOST_METHODS) beside each decode step")
    parser.add_argument("--router-bias", choices=["zero", "zero-all"], default=None,
                        help="zero every MoE router's bias and score correction after start-up (zero-all: every bias "
                             "of the model): dummy weights then route by token where no other bias is common to every "
                             "token (zero-all: everywhere)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch
    import vllm
    from vllm import LLM, SamplingParams

    cuda = torch.cuda.is_available()
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)

    # after vLLM's import: its logging setup (vllm/logger.py) configures the "vllm" logger then
    handler = Lines()
    logging.getLogger("vllm").addHandler(handler)

    batches = [int(b) for b in args.batches.split(",")]
    profile_peak: dict = {}
    if args.memory_trace:
        trace_profile_run(profile_peak)
    load_blocks: dict = {}
    if args.load_trace:
        trace_load_model(load_blocks)
    host_totals: dict = {}
    if args.time_host:
        time_host(host_totals)
    started = time.perf_counter()
    llm = LLM(model=args.config, load_format="dummy", skip_tokenizer_init=True, enforce_eager=args.mode == "eager",
              max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs or max(batches),
              quantization=args.quantization,
              **({"gpu_memory_utilization": args.gpu_memory_utilization} if args.gpu_memory_utilization else {}),
              kv_cache_dtype=args.kv_cache_dtype, seed=0, tensor_parallel_size=args.tensor_parallel_size,
              # the same prompts run again: a prefix-cache hit would shorten one run's prefill only
              # (unless every run hits it: --prefix-caching, after the warm-up run)
              enable_prefix_caching=args.prefix_caching,
              **({"max_num_batched_tokens": args.max_num_batched_tokens} if args.max_num_batched_tokens else {}),
              hf_overrides=json.loads(args.hf_overrides) if args.hf_overrides else None,
              **({"attention_backend": args.attention_backend} if args.attention_backend else {}),
              **({"moe_backend": args.moe_backend} if args.moe_backend else {}),
              **({"language_model_only": True} if args.language_model_only else {}),
              **({"speculative_config": json.loads(args.speculative_config),
                  # the spec-decode counters (vllm:spec_decode_num_drafts ...) are kept only with stats on
                  "disable_log_stats": False} if args.speculative_config else {}),
              **({"additional_config": json.loads(args.additional_config)} if args.additional_config else {}),
              **({"async_scheduling": args.async_scheduling == "on"} if args.async_scheduling else {}))
    start_s = time.perf_counter() - started
    zeroing = {"zero": zero_router_biases, "zero-all": zero_all_biases}.get(args.router_bias)
    routers = llm.apply_model(zeroing)[0] if zeroing else None
    if routers is not None and not any(kind["layers"] for kind in routers.values()):
        raise SystemExit(f"--router-bias {args.router_bias}: this model has no bias to zero")
    vocab = llm.llm_engine.model_config.get_vocab_size()

    def counters() -> dict:
        """vLLM's spec-decode counters so far (drafts = verify steps that drafted, per request)."""
        if not args.speculative_config:
            return {}
        out = {}
        for metric in llm.get_metrics():
            for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
                if metric.name.endswith("spec_decode_" + key) or metric.name.endswith("spec_decode_" + key + "_total"):
                    out[key] = out.get(key, 0) + float(getattr(metric, "value", 0) or 0)
        return out

    spec_runs: list[dict] = []

    contexts = [int(c) for c in args.contexts.split(",")] if args.contexts else [args.context]

    host_runs: dict = {}  # (batch, tokens, context) -> the host methods' seconds and calls in that run

    def run(batch: int, tokens: int, context: int) -> float:
        prompts = [{"prompt_token_ids": [(7 + 13 * i + 31 * j) % (vocab - 1) + 1 for j in range(context)]}
                   for i in range(batch)]
        params = SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, detokenize=False, temperature=0)
        before = counters()
        host_before = {name: tuple(total) for name, total in host_totals.items()}
        synchronize()
        t0 = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        synchronize()
        elapsed = time.perf_counter() - t0
        assert all(len(o.outputs[0].token_ids) == tokens for o in outputs)
        if host_totals:
            host_runs.setdefault((batch, tokens, context), []).append(
                {name: (s - host_before.get(name, (0.0, 0))[0], n - host_before.get(name, (0.0, 0))[1])
                 for name, (s, n) in host_totals.items()})
        if args.speculative_config:
            after = counters()
            spec_runs.append({"batch": batch, "tokens": tokens, "s": elapsed,
                              **{k: after.get(k, 0) - before.get(k, 0) for k in after}})
        return elapsed

    rows = []
    profiles = []
    for context in contexts:
        for batch in batches:
            run(batch, args.short, context)  # warm-up: compile caches, graph replay paths
            steps = []
            for _ in range(args.repeats):
                short, long = run(batch, args.short, context), run(batch, args.long, context)
                steps.append((long - short) / (args.long - args.short))
            step = statistics.median(steps)
            row = {"batch": batch, "context": context, "step_ms": 1e3 * step, "per_stream_tok_s": 1 / step,
                   "aggregate_tok_s": batch / step, "step_ms_runs": [1e3 * s for s in steps]}
            if args.speculative_config:
                row.update(speculative_step(spec_runs, batch, args.short, args.long))
            if host_totals:  # per decode step, as the step: the long runs' less the short runs', over the extra tokens
                row["host_ms_per_step"] = host_step(host_runs, batch, args.short, args.long, context)
            rows.append(row)
            print(f"context {context}, batch {batch:4d}: {1e3 * step:7.3f} ms/step, {batch / step:9.1f} tok/s",
                  file=sys.stderr, flush=True)
        at_context = functools.partial(run, context=context)
        profiles += [{**profile_step(at_context, batch), "context": context} for batch in
                     (int(b) for b in args.profile_batches.split(",") if b)]
    result = {
        "schema": "roofline.vllm_probe/1", "config": args.config, "mode": args.mode,
        "quantization": args.quantization, "kv_cache_dtype": args.kv_cache_dtype,
        "max_model_len": args.max_model_len, "vllm_version": vllm.__version__, "torch_version": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.processor() or platform.machine()})",
        "device": "cuda" if cuda else "cpu", "python": platform.python_version(), "start_s": start_s,
        "startup": figures(handler.lines), "decode": rows, "profiles": profiles,
        "engine": {"max_num_batched_tokens": llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens,
                   "max_num_seqs": llm.llm_engine.vllm_config.scheduler_config.max_num_seqs,
                   "gpu_memory_utilization": llm.llm_engine.vllm_config.cache_config.gpu_memory_utilization},
        "profile_peak": profile_peak or None,
        "load_blocks": load_blocks or None,
        "hf_overrides": json.loads(args.hf_overrides) if args.hf_overrides else None,
        "speculative_config": json.loads(args.speculative_config) if args.speculative_config else None,
        "speculative_runs": spec_runs,
        # vLLM resolves it (off by default for draft-model and n-gram speculation, vllm/config/vllm.py)
        "async_scheduling": bool(llm.llm_engine.vllm_config.scheduler_config.async_scheduling),
        "additional_config": json.loads(args.additional_config) if args.additional_config else None,
        "moe_backend": args.moe_backend,
        "tensor_parallel_size": args.tensor_parallel_size,
        "gpus": torch.cuda.device_count() if cuda else 0,
        "attention_backend": args.attention_backend,
        "language_model_only": args.language_model_only,
        "time_host": args.time_host,
        "router_bias": args.router_bias,
        "routers_zeroed": routers,
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    with open(args.out.replace(".json", ".log"), "w") as fh:
        fh.write("\n".join(handler.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The kernels a prompt's step runs, timed one by one on the GPU with vLLM's own ops: what each kind of prefill
work reaches at the large M of a prompt, measured on shapes, never fitted to a first token.

    PYTHONPATH=/tmp/site python3 benchmarks/gpu_vllm/prefill_kernels.py --out $OUT/prefill_kernels.json
    (on the lent GPU: benchmarks/gpu_vllm/run_probe.sh kernels)

Each row: the kind of work, the implementation vLLM 0.26 picks for it on this GPU, the shape, the tokens M (or
the prompt length T), the kernels' device time per call (torch's profiler; the wall time between CUDA events
beside it), and the FLOPs by roofline's own count (predict/step.py: 2 x params per token for a GEMM, 2 x params
x top_k / experts per token for a MoE, 4 x heads x head_dim per (query, key) pair for causal attention, 8 x state
elements per token for a scan).
benchmarks/serving/kernel_rates.py reads the rows into the shares of roofline/data/prefill.toml.

Shapes: the layers of the models the H200's first tokens were measured on (Qwen3-8B, Qwen3-30B-A3B, Qwen3-Next,
Nemotron-3-Nano, gpt-oss-20b), of Qwen3.6-35B-A3B and Mixtral-8x7B; a kind that fails to run is one row (or one
entry of "errors") with its error. Marlin's NVFP4 kernels take FP4 weights vLLM's own test helper packs.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback

import torch

TOKENS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
PROMPTS = [512, 1024, 2048, 4096, 8192, 16384]

# (model, layer, N out, K in)
GEMMS = [("qwen3-8b", "qkv", 6144, 4096), ("qwen3-8b", "o", 4096, 4096), ("qwen3-8b", "gate_up", 24576, 4096),
         ("qwen3-8b", "down", 4096, 12288), ("qwen3-30b-a3b", "qkv", 5120, 2048), ("qwen3-30b-a3b", "o", 2048, 4096),
         ("gpt-oss-20b", "qkv", 5120, 2880), ("gpt-oss-20b", "o", 2880, 4096),
         ("nemotron-3-nano", "in_proj", 10304, 2688), ("nemotron-3-nano", "out_proj", 2688, 4096),
         ("qwen3-next", "in_proj_qkvz", 12288, 2048), ("qwen3-next", "out_proj", 2048, 4096),
         ("mixtral-8x7b", "qkv", 6144, 4096)]
# (model, query heads, kv heads, head dim, sliding window or 0)
ATTENTION = [("qwen3-8b", 32, 8, 128, 0), ("qwen3-30b-a3b", 32, 4, 128, 0), ("qwen3-next", 16, 2, 256, 0),
             ("nemotron-3-nano", 32, 2, 128, 0), ("gpt-oss-20b", 64, 8, 64, 0), ("gpt-oss-20b-sliding", 64, 8, 64, 128)]
# (model, experts, top_k, hidden, intermediate, activation)
MOES = [("qwen3-30b-a3b", 128, 8, 2048, 768, "silu"), ("qwen3-next", 512, 10, 2048, 512, "silu"),
        ("qwen3.6-35b-a3b", 256, 8, 2048, 512, "silu"), ("nemotron-3-nano", 128, 6, 2688, 1856, "relu2_no_mul"),
        ("mixtral-8x7b", 8, 2, 4096, 14336, "silu")]
# GDN (model, k heads, v heads, k dim, v dim); Mamba2 (model, heads, head dim, groups, state, chunk)
GDNS = [("qwen3-next", 16, 32, 128, 128)]
MAMBAS = [("nemotron-3-nano", 64, 64, 8, 128, 128)]


def timed(fn, reps: int = 10, warmup: int = 3) -> float:
    """Milliseconds of fn()'s kernels on the GPU, per call: the sum of their device times over `reps` calls under
    torch's profiler (the launches' host time and the gaps between kernels left out: the step model prices the
    host's launches on their own). Also kept (LAST_WALL_MS): the median wall time between CUDA events around one
    call, which a host-bound small call inflates."""
    global LAST_WALL_MS
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    LAST_WALL_MS = statistics.median(times)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    device_us = sum(getattr(e, "self_device_time_total", 0.0) or getattr(e, "self_cuda_time_total", 0.0)
                    for e in prof.key_averages())
    return device_us / 1e3 / reps if device_us > 0 else LAST_WALL_MS


LAST_WALL_MS = 0.0


def gemm_rows(dev, gemms=GEMMS, tokens=TOKENS) -> list[dict]:
    from vllm import _custom_ops as ops
    rows = []
    for model, layer, n, k in gemms:
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k ** 0.5
        wq, sw = ops.scaled_fp8_quant(w)
        for m in tokens:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            flops = 2.0 * m * n * k
            ms = timed(lambda: torch.nn.functional.linear(x, w))
            rows.append({"kind": "gemm", "format": "bf16", "impl": "cublas", "model": model, "layer": layer,
                         "n": n, "k": k, "m": m, "ms": ms, "wall_ms": LAST_WALL_MS, "flops": flops})
            xq, sx = ops.scaled_fp8_quant(x)
            mm = timed(lambda: ops.cutlass_scaled_mm(xq, wq.t(), sx, sw, torch.bfloat16))
            total = timed(lambda: _fp8(ops, x, wq, sw))  # vLLM's online FP8: the activation quantized each step
            wall = LAST_WALL_MS
            rows.append({"kind": "gemm", "format": "fp8", "impl": "cutlass_scaled_mm + dynamic per-tensor quant",
                         "model": model, "layer": layer, "n": n, "k": k, "m": m, "ms": total, "mm_ms": mm,
                         "wall_ms": wall,
                         "flops": flops})
        del w, wq
    return rows


def _fp8(ops, x, wq, sw):
    xq, sx = ops.scaled_fp8_quant(x)
    return ops.cutlass_scaled_mm(xq, wq.t(), sx, sw, torch.bfloat16)


def attention_rows(dev) -> list[dict]:
    from vllm.vllm_flash_attn import flash_attn_varlen_func
    rows = []
    for model, hq, hkv, d, window in ATTENTION:
        for t in PROMPTS:
            q = torch.randn(t, hq, d, device=dev, dtype=torch.bfloat16)
            k = torch.randn(t, hkv, d, device=dev, dtype=torch.bfloat16)
            v = torch.randn(t, hkv, d, device=dev, dtype=torch.bfloat16)
            cu = torch.tensor([0, t], device=dev, dtype=torch.int32)
            ws = [window - 1, 0] if window else [-1, -1]
            version = 3
            fn = lambda: flash_attn_varlen_func(q, k, v, max_seqlen_q=t, cu_seqlens_q=cu, max_seqlen_k=t,  # noqa: E731
                                                cu_seqlens_k=cu, causal=True, window_size=ws, fa_version=version)
            try:
                ms = timed(fn)
            except Exception:  # FA3 missing: vLLM falls back to FA2
                version = 2
                ms = timed(fn)
            pairs = sum(min(i + 1, window or i + 1) for i in range(t))  # causal (query, key) pairs
            rows.append({"kind": "attention", "format": "bf16", "impl": f"flash_attn_varlen fa{version}",
                         "model": model, "q_heads": hq, "kv_heads": hkv, "head_dim": d, "window": window, "t": t,
                         "ms": ms, "wall_ms": LAST_WALL_MS, "flops": 4.0 * hq * d * pairs})
    return rows


def moe_rows(dev, moes=MOES, tokens=TOKENS) -> list[dict]:
    from vllm.model_executor.layers.fused_moe import fused_experts
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    rows = []
    for model, e, top, h, inter, act in moes:
        gated = not act.endswith("_no_mul")
        w1 = torch.randn(e, (2 if gated else 1) * inter, h, device=dev, dtype=torch.bfloat16) / h ** 0.5
        w2 = torch.randn(e, h, inter, device=dev, dtype=torch.bfloat16) / inter ** 0.5
        params = e * ((2 if gated else 1) * inter * h + h * inter)
        for m in tokens:
            x = torch.randn(m, h, device=dev, dtype=torch.bfloat16)
            # independent uniform routing: what dummy weights give (the H200's first tokens ran dummy weights)
            ids = torch.stack([torch.randperm(e, device=dev)[:top] for _ in range(m)]).to(torch.int32)
            weights = torch.rand(m, top, device=dev, dtype=torch.float32)
            ms = timed(lambda: fused_experts(x, w1, w2, weights, ids, activation=MoEActivation(act)))
            rows.append({"kind": "moe", "format": "bf16", "impl": "fused_moe triton", "model": model, "experts": e,
                         "top_k": top, "hidden": h, "intermediate": inter, "m": m, "ms": ms, "wall_ms": LAST_WALL_MS,
                         "flops": 2.0 * params * top / e * m})
        del w1, w2
    return rows


def gdn_rows(dev) -> list[dict]:
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import fi_chunk_gated_delta_rule
    from vllm.third_party.flash_linear_attention.ops.chunk import chunk_gated_delta_rule
    rows = []
    for model, hk, hv, dk, dv in GDNS:
        for t in PROMPTS:
            q = torch.nn.functional.normalize(torch.randn(1, t, hk, dk, device=dev, dtype=torch.bfloat16), dim=-1)
            k = torch.nn.functional.normalize(torch.randn(1, t, hk, dk, device=dev, dtype=torch.bfloat16), dim=-1)
            v = torch.randn(1, t, hv, dv, device=dev, dtype=torch.bfloat16)
            g = -torch.rand(1, t, hv, device=dev, dtype=torch.float32) * 0.1
            beta = torch.rand(1, t, hv, device=dev, dtype=torch.float32).to(torch.bfloat16)
            state = torch.zeros(1, hv, dv, dk, device=dev, dtype=torch.bfloat16)
            cu = torch.tensor([0, t], device=dev, dtype=torch.int32)
            for impl, fn in (("flashinfer gdn_prefill", lambda: fi_chunk_gated_delta_rule(
                    q, k, v, g, beta, state, True, cu, use_qk_l2norm_in_kernel=False)),
                    ("fla chunk_gated_delta_rule", lambda: chunk_gated_delta_rule(
                        q, k, v, g, beta, initial_state=state, output_final_state=True, cu_seqlens=cu,
                        use_qk_l2norm_in_kernel=False))):
                row = {"kind": "scan", "format": "gdn", "impl": impl, "model": model, "k_heads": hk, "v_heads": hv,
                       "k_dim": dk, "v_dim": dv, "t": t, "flops": 8.0 * hv * dk * dv * t}
                try:
                    row["ms"] = timed(fn)
                    row["wall_ms"] = LAST_WALL_MS
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                rows.append(row)
    return rows


def mamba_rows(dev) -> list[dict]:
    from vllm.model_executor.layers.mamba.ops.ssd_combined import mamba_chunk_scan_combined_varlen
    rows = []
    for model, heads, hd, groups, state, chunk in MAMBAS:
        a = -torch.rand(heads, device=dev, dtype=torch.float32)
        d = torch.ones(heads, device=dev, dtype=torch.float32)
        dt_bias = torch.zeros(heads, device=dev, dtype=torch.float32)
        for t in PROMPTS:
            chunks = t // chunk
            x = torch.randn(t, heads, hd, device=dev, dtype=torch.bfloat16)
            dt = torch.randn(t, heads, device=dev, dtype=torch.bfloat16)
            b = torch.randn(t, groups, state, device=dev, dtype=torch.bfloat16)
            c = torch.randn(t, groups, state, device=dev, dtype=torch.bfloat16)
            cu = torch.tensor([0, t], device=dev, dtype=torch.int32)
            cu_chunks = torch.arange(0, t + 1, chunk, device=dev, dtype=torch.int32)
            last = torch.tensor([chunks - 1], device=dev, dtype=torch.int32)
            seq_idx = torch.zeros(chunks, device=dev, dtype=torch.int32)
            out = torch.empty(t, heads, hd, device=dev, dtype=torch.bfloat16)
            ms = timed(lambda: mamba_chunk_scan_combined_varlen(
                x, dt, a, b, c, chunk, cu, cu_chunks, last, seq_idx, out, D=d, dt_bias=dt_bias, dt_softplus=True,
                state_dtype=torch.float32))
            rows.append({"kind": "scan", "format": "mamba", "impl": "mamba_chunk_scan_combined_varlen", "model": model,
                         "heads": heads, "head_dim": hd, "groups": groups, "state": state, "chunk": chunk, "t": t,
                         "ms": ms, "wall_ms": LAST_WALL_MS, "flops": 8.0 * heads * hd * state * t})
    return rows


# Marlin's NVFP4 weight-only kernels (FP4 weights dequantized to BF16 tiles: Hopper has no FP4 tensor cores):
# dense (model, layer, N, K) and fused MoE (model, experts, top_k, hidden, intermediate)
MARLIN_GEMMS = [("qwen3-8b", "qkv", 6144, 4096), ("qwen3-8b", "gate_up", 24576, 4096), ("qwen3-8b", "down", 4096, 12288),
                ("qwen3-30b-a3b", "qkv", 5120, 2048), ("qwen3-30b-a3b", "o", 2048, 4096)]
MARLIN_MOES = [("qwen3-30b-a3b", 128, 8, 2048, 768)]


def marlin_rows(dev, gemms=MARLIN_GEMMS, moes=MARLIN_MOES, tokens=TOKENS) -> list[dict]:
    from vllm.model_executor.layers.fused_moe.experts.marlin_moe import fused_marlin_moe
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_make_workspace_new
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp4 import (
        apply_fp4_marlin_linear,
        rand_marlin_weight_nvfp4_like,
    )
    from vllm.scalar_type import scalar_types
    rows = []
    workspace = marlin_make_workspace_new(dev)
    for model, layer, n, k in gemms:
        _, qw, scales, gscale = rand_marlin_weight_nvfp4_like(torch.randn(n, k, device=dev, dtype=torch.bfloat16), 16)
        for m in tokens:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            ms = timed(lambda: apply_fp4_marlin_linear(x, qw, scales, gscale, workspace, n, k))
            rows.append({"kind": "gemm", "format": "nvfp4-marlin", "impl": "marlin_gemm (fp4 weights, bf16 MMA)",
                         "model": model, "layer": layer, "n": n, "k": k, "m": m, "ms": ms, "wall_ms": LAST_WALL_MS,
                         "flops": 2.0 * m * n * k})
    for shape in moes:  # each on its own: a shape the kernel refuses is one error row, not the others lost
        try:
            rows += _marlin_moe_rows(dev, fused_marlin_moe, rand_marlin_weight_nvfp4_like, scalar_types,
                                     marlin_make_workspace_new(dev, 4), shape, tokens)  # the MoE kernel's 4 blocks an SM
        except Exception as exc:  # e.g. gpt-oss's 2880-wide experts at M = 4: no thread config (2026-11-28, H200)
            rows.append({"kind": "moe", "format": "nvfp4-marlin", "model": shape[0],
                         "error": f"{type(exc).__name__}: {exc}"[:300]})
        torch.cuda.empty_cache()
    return rows


def _marlin_moe_rows(dev, fused_marlin_moe, rand_marlin_weight_nvfp4_like, scalar_types, workspace, shape,
                     tokens) -> list[dict]:
    rows = []
    model, e, top, h, inter = shape
    packed = {1: [], 2: []}
    for _ in range(e):
        packed[1].append(rand_marlin_weight_nvfp4_like(torch.randn(2 * inter, h, device=dev, dtype=torch.bfloat16), 16))
        packed[2].append(rand_marlin_weight_nvfp4_like(torch.randn(h, inter, device=dev, dtype=torch.bfloat16), 16))
    w1, w2 = (torch.stack([p[1] for p in packed[i]]) for i in (1, 2))
    s1, s2 = (torch.stack([p[2] for p in packed[i]]) for i in (1, 2))
    g1, g2 = (torch.stack([p[3].reshape(()) for p in packed[i]]) for i in (1, 2))
    del packed
    params = e * 3 * h * inter
    for m in tokens:
        x = torch.randn(m, h, device=dev, dtype=torch.bfloat16)
        ids = torch.stack([torch.randperm(e, device=dev)[:top] for _ in range(m)]).to(torch.int32)
        weights = torch.rand(m, top, device=dev, dtype=torch.float32)
        ms = timed(lambda: fused_marlin_moe(x, w1, w2, None, None, s1, s2, weights, ids,
                                            scalar_types.float4_e2m1f.id, global_num_experts=e,
                                            global_scale1=g1, global_scale2=g2, workspace=workspace))
        rows.append({"kind": "moe", "format": "nvfp4-marlin", "impl": "fused_marlin_moe (fp4 weights, bf16 MMA)",
                     "model": model, "experts": e, "top_k": top, "hidden": h, "intermediate": inter, "m": m,
                     "ms": ms, "wall_ms": LAST_WALL_MS, "flops": 2.0 * params * top / e * m})
    return rows


def main() -> int:
    kinds = {"gemm": gemm_rows, "attention": attention_rows, "moe": moe_rows, "gdn": gdn_rows, "mamba": mamba_rows,
             "marlin": marlin_rows}
    return main_for(__doc__, "roofline.prefill_kernels/1", kinds, _show)


def main_for(doc: str, schema: str, kinds: dict, show, sms: bool = False) -> int:
    """A kernel-timing script's command line (--out PATH, --only KINDS) over its kinds of rows."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="", help="comma-separated kinds: " + ",".join(kinds))
    args = parser.parse_args()
    import vllm
    dev = torch.device("cuda")
    torch.manual_seed(0)
    out = {"schema": schema, "device": torch.cuda.get_device_name(0),
           **({"sms": torch.cuda.get_device_properties(0).multi_processor_count} if sms else {}),
           "vllm": vllm.__version__, "torch": torch.__version__, "rows": [], "errors": {}}
    run_kinds(kinds, [k for k in args.only.split(",") if k] or list(kinds), dev, out, args.out, show)
    return 0


def _show(kind: str, rows: list[dict], seconds: float) -> None:
    print(f"{kind}: {len(rows)} rows in {seconds:.0f} s", flush=True)
    for r in rows[:: max(1, len(rows) // 8)]:
        if "ms" in r:
            print(f"  {r['model']:18} {r.get('layer', r.get('impl', '')):28} "
                  f"{r.get('m', r.get('t'))!s:>6} {r['ms']:8.3f} ms ({r.get('wall_ms', 0):.3f} wall) "
                  f"{r['flops'] / r['ms'] / 1e9:8.1f} TFLOP/s")


def run_kinds(kinds: dict, chosen: list[str], dev, out: dict, path: str, show) -> None:
    """Each chosen kind's rows into out (its traceback into out["errors"] where it fails), `show` printing them,
    and out written to `path` after every kind: a later failure keeps what ran."""
    for kind in chosen:
        began = time.time()
        try:
            rows = kinds[kind](dev)
            out["rows"] += rows
            show(kind, rows, time.time() - began)
        except Exception:
            out["errors"][kind] = traceback.format_exc()[-1500:]
            print(f"{kind} failed:\n{out['errors'][kind]}", flush=True)
        torch.cuda.empty_cache()
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    raise SystemExit(main())

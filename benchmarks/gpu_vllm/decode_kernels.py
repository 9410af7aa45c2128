"""The kernels a decode step runs, timed one by one on the GPU with vLLM's own ops: what each access pattern reaches
at the small M of a decode (a few large GEMVs, many small expert GEMMs, Marlin's dequantizing kernels, the paged
attention kernels reading a KV cache), measured on shapes, never fitted to a step.

    PYTHONPATH=/tmp/site python3 benchmarks/gpu_vllm/decode_kernels.py --out $OUT/decode_kernels.json
    (on the lent GPU: benchmarks/gpu_vllm/run_probe.sh decode-kernels)

Rows as prefill_kernels.py's (its timer: the kernels' device time per call under torch's profiler, the wall time
between CUDA events beside it), at the tokens of a decode step (M 1-32), each with the bytes it must read:
- gemm / moe: the weights the call touches (a MoE's: the experts its tokens route to, uniform independent routing).
- attention: paged decode attention as vLLM 0.26 launches it (one query a sequence, 16-token KV blocks; 32 for a
  Gemma 4 global layer, whose page vLLM unifies with its sliding layers'), Triton's unified attention (its 3D
  split-KV path below vLLM's sequence threshold, with the segment reduction) and FlashAttention 3, BF16 and FP8 KV
  caches; the bytes are the KV the batch reads (window-capped). Triton reads the cache as vLLM's backend lays it
  out (K and V packed on the last axis of one (blocks, block, heads, 2 x head dim) tensor) and, with an FP8 cache,
  takes the query in FP8 with the per-tensor scales, as vLLM's attention layer quantizes it for a CUDA Triton
  backend (`Attention.query_quant`; the kernel's KV_QUANT_MODE 1 with an FP8 query: FP8 dots, 32-token tiles).
"""
from __future__ import annotations

import os

import prefill_kernels as pk
import torch

DECODE_TOKENS = [1, 2, 4, 8, 16, 32]
BATCHES = [1, 2, 4, 8, 16, 32, 64]
CONTEXTS = [1024, 4096, 16384, 32768]
MAX_KV_TOKENS = 1 << 20  # batch x context above this is skipped (memory and time)
BLOCK = 16  # vLLM's KV block on CUDA
# Gemma 4's global layers hold half the sliding layers' bytes a token: vLLM unifies the pages with 32-token blocks
BLOCK_OF = {"gemma4-31b-global": 32, "gemma4-26b-global": 32}
# Triton's 3D threshold is the model's (TritonAttentionMetadataBuilder: model_config.get_num_kv_heads, the config's
# num_key_value_heads): a Gemma 4 global layer takes its sliding layers' count, not its own
THRESHOLD_KV_HEADS = {"gemma4-31b-global": 16, "gemma4-26b-global": 8}
# DECODE_ATTENTION_MODELS=a,b times only those layouts (a rerun of a few)
ONLY_MODELS = [m for m in os.environ.get("DECODE_ATTENTION_MODELS", "").split(",") if m]
# (model, query heads, kv heads, head dim, sliding window or 0, attention sinks)
ATTENTION = [("qwen3-8b", 32, 8, 128, 0, False), ("qwen3-next", 16, 2, 256, 0, False),
             ("gemma4-31b-sliding", 32, 16, 256, 1024, False), ("gemma4-31b-global", 32, 4, 512, 0, False),
             ("gemma4-26b-sliding", 16, 8, 256, 1024, False), ("gemma4-26b-global", 16, 2, 512, 0, False),
             ("gpt-oss-full", 64, 8, 64, 0, True), ("gpt-oss-sliding", 64, 8, 64, 128, True)]
# vLLM 0.26's default CUDA-graph capture sizes (the Triton backend's 3D threshold snaps to the nearest)
CAPTURE_SIZES = [1, 2, 4] + list(range(8, 513, 8))
DECODE_GEMMS = [("qwen3-8b", "qkv", 6144, 4096), ("qwen3-8b", "gate_up", 24576, 4096),
                ("qwen3-8b", "down", 4096, 12288), ("qwen3-30b-a3b", "qkv", 5120, 2048),
                ("gpt-oss-20b", "qkv", 5120, 2880), ("gemma4-31b", "gate_up", 43008, 5376),
                ("lm_head-qwen3", "lm_head", 151936, 4096)]
# (model, experts, top_k, hidden, intermediate): expert widths from 512 to 14336
DECODE_MOES = [("qwen3.6-35b-a3b", 256, 8, 2048, 512), ("qwen3-30b-a3b", 128, 8, 2048, 768),
               ("gemma4-26b-a4b", 128, 8, 2816, 704), ("gpt-oss-20b", 32, 4, 2880, 2880),
               ("gpt-oss-120b", 128, 4, 2880, 2880), ("mixtral-8x7b", 8, 2, 4096, 14336)]


def _moe_bytes(e: int, top: int, h: int, inter: int, m: int, bytes_per_param: float) -> float:
    # distinct experts of m independent uniform tokens, the expectation roofline's traffic.distinct_experts prices;
    # written out here because this script runs on the GPU image, where roofline's own requirements are absent
    touched = e * (1.0 - (1.0 - top / e) ** m)
    return touched * 3 * h * inter * bytes_per_param


def weight_rows(dev) -> list[dict]:
    """Dense GEMMs (cuBLAS BF16, CUTLASS FP8, Marlin NVFP4) and fused MoE (Triton BF16, Marlin NVFP4) at decode's M,
    through prefill_kernels' own row builders."""
    moes = [(model, e, top, h, inter, "silu") for model, e, top, h, inter in DECODE_MOES]
    rows = pk.gemm_rows(dev, DECODE_GEMMS, DECODE_TOKENS) + pk.moe_rows(dev, moes, DECODE_TOKENS) \
        + pk.marlin_rows(dev, DECODE_GEMMS, DECODE_MOES, DECODE_TOKENS)
    per_param = {"bf16": 2.0, "fp8": 1.0, "nvfp4-marlin": 0.5 + 1.0 / 16}  # FP4 and its FP8 scale a 16-group
    for r in rows:
        if "ms" not in r:
            continue
        b = per_param[r["format"]]
        r["bytes"] = _moe_bytes(r["experts"], r["top_k"], r["hidden"], r["intermediate"], r["m"], b) \
            if r["kind"] == "moe" else r["n"] * r["k"] * b
        r["gbps"] = r["bytes"] / r["ms"] / 1e6
    return rows


def _threshold_3d(kv_heads: int) -> int:
    """vLLM's TritonAttentionMetadataBuilder: 128 // KV heads sequences, snapped to the nearest capture size."""
    return min(CAPTURE_SIZES, key=lambda x: abs(x - 128 // kv_heads))


def attention_rows(dev) -> list[dict]:
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention
    from vllm.v1.kv_cache_interface import get_kv_quant_mode
    try:
        from vllm.vllm_flash_attn import flash_attn_varlen_func
    except Exception:  # no FlashAttention build: Triton's rows alone
        flash_attn_varlen_func = None
    fp8 = torch.float8_e4m3fn
    rows = []
    for model, hq, hkv, d, window, sinks in ATTENTION:
        if ONLY_MODELS and model not in ONLY_MODELS:
            continue
        threshold = _threshold_3d(THRESHOLD_KV_HEADS.get(model, hkv))
        segments = 16
        segm_out = torch.empty(threshold, hq, segments, d, device=dev, dtype=torch.float32)
        segm_max = torch.empty(threshold, hq, segments, device=dev, dtype=torch.float32)
        segm_sum = torch.empty(threshold, hq, segments, device=dev, dtype=torch.float32)
        sink = torch.randn(hq, device=dev, dtype=torch.float32) if sinks else None
        ws = (window - 1, 0) if window else (-1, -1)
        for ctx in CONTEXTS:
            for batch in BATCHES:
                if batch * ctx > MAX_KV_TOKENS:
                    continue
                block = BLOCK_OF.get(model, BLOCK)
                blocks_per_seq = -(-ctx // block)
                nblocks = batch * blocks_per_seq
                kc = torch.randn(nblocks, block, hkv, d, device=dev, dtype=torch.bfloat16)
                vc = torch.randn(nblocks, block, hkv, d, device=dev, dtype=torch.bfloat16)
                packed = torch.cat([kc, vc], dim=-1)  # Triton's cache: K and V side by side, one tensor
                bt = torch.randperm(nblocks, device=dev, dtype=torch.int32).reshape(batch, blocks_per_seq)
                q = torch.randn(batch, hq, d, device=dev, dtype=torch.bfloat16)
                out = torch.empty_like(q)
                cu_q = torch.arange(batch + 1, device=dev, dtype=torch.int32)
                seqlens = torch.full((batch,), ctx, device=dev, dtype=torch.int32)
                span = min(ctx, window) if window else ctx
                for kv_dtype in ("bf16", "fp8"):
                    k, v = (kc, vc) if kv_dtype == "bf16" else (kc.to(fp8), vc.to(fp8))
                    tk, tv = (packed if kv_dtype == "bf16" else packed.to(fp8)).split(d, dim=-1)
                    scale = torch.ones(batch, hkv, device=dev, dtype=torch.float32)
                    q_scale = torch.ones((), device=dev, dtype=torch.float32)
                    tq = q if kv_dtype == "bf16" else (q / q_scale).to(fp8)
                    tout = torch.empty_like(q)
                    kv_bytes = 2.0 * batch * span * hkv * d * (2 if kv_dtype == "bf16" else 1)
                    base = {"kind": "attention", "model": model, "q_heads": hq, "kv_heads": hkv, "head_dim": d,
                            "window": window, "sinks": sinks, "batch": batch, "context": ctx, "kv_dtype": kv_dtype,
                            "bytes": kv_bytes}

                    def triton():
                        unified_attention(q=tq, k=tk, v=tv, out=tout, cu_seqlens_q=cu_q, max_seqlen_q=1,
                                          seqused_k=seqlens, max_seqlen_k=ctx, softmax_scale=d ** -0.5, causal=True,
                                          window_size=ws, block_table=bt, softcap=0.0,
                                          q_descale=None if kv_dtype == "bf16" else q_scale,
                                          k_descale=None if kv_dtype == "bf16" else scale,
                                          v_descale=None if kv_dtype == "bf16" else scale,
                                          seq_threshold_3D=threshold, num_par_softmax_segments=segments,
                                          softmax_segm_output=segm_out, softmax_segm_max=segm_max,
                                          softmax_segm_expsum=segm_sum, sinks=sink,
                                          kv_quant_mode=get_kv_quant_mode("auto" if kv_dtype == "bf16" else "fp8"))
                    rows.append(_timed_row(triton, dict(base, impl="triton unified_attention", block=block,
                                                        kv_layout="packed", query=str(tq.dtype).removeprefix("torch."),
                                                        path="3d" if batch <= threshold else "2d")))
                    if flash_attn_varlen_func is None or d > 256:
                        continue

                    qf = q if kv_dtype == "bf16" else q.to(fp8)  # vLLM's FA quantizes the query with an FP8 cache

                    def flash():
                        flash_attn_varlen_func(qf, k, v, max_seqlen_q=1, cu_seqlens_q=cu_q, max_seqlen_k=ctx,
                                               seqused_k=seqlens, softmax_scale=d ** -0.5, causal=True,
                                               window_size=list(ws), block_table=bt, out=out, fa_version=3,
                                               q_descale=None if kv_dtype == "bf16" else scale,
                                               k_descale=None if kv_dtype == "bf16" else scale,
                                               v_descale=None if kv_dtype == "bf16" else scale,
                                               s_aux=None if sink is None else sink.to(torch.bfloat16))
                    rows.append(_timed_row(flash, dict(base, impl="flash_attn_varlen fa3")))
                del kc, vc, packed
                torch.cuda.empty_cache()
    return rows


def _timed_row(fn, row: dict) -> dict:
    try:
        row["ms"] = pk.timed(fn)
        row["wall_ms"] = pk.LAST_WALL_MS
        row["gbps"] = row["bytes"] / row["ms"] / 1e6
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return row


def _show(kind: str, rows: list[dict], seconds: float) -> None:
    failed = [r for r in rows if "error" in r]
    print(f"{kind}: {len(rows)} rows ({len(failed)} failed) in {seconds:.0f} s", flush=True)
    for r in failed[:3]:
        print("  failed:", r.get("model"), r.get("impl"), r["error"][:200], flush=True)
    for r in [r for r in rows if "gbps" in r][:: max(1, len(rows) // 12)]:
        print(f"  {r['model']:20} {r.get('impl', ''):28} {r.get('m', r.get('batch'))!s:>4} "
              f"{r.get('context', '')!s:>6} {r.get('kv_dtype', r.get('format', '')):>6} "
              f"{r['ms'] * 1e3:9.1f} us {r['gbps']:8.0f} GB/s", flush=True)


def main() -> int:
    return pk.main_for(__doc__, "roofline.decode_kernels/1", {"attention": attention_rows, "weights": weight_rows},
                       _show, sms=True)


if __name__ == "__main__":
    raise SystemExit(main())

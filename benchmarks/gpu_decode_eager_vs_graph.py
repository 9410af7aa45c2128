"""Single-stream decode, PyTorch eager vs one CUDA graph per step, on real-architecture models
with random weights: a dense Qwen3-8B, a Qwen3-30B-A3B MoE and a Qwen3.6-35B-A3B-style hybrid
(Gated DeltaNet + gated attention + 256-expert MoE with a shared expert).

Each model is written out op for op the way transformers' modelling code runs it at batch 1
(unfused RMSNorm, rotate-half RoPE, SDPA over a static KV cache, the GDN recurrent decode step,
softmax-top-k routing), at the real hidden sizes, head counts, expert counts and vocabulary,
bf16, with a KV cache filled to --context tokens. Routed experts run through a small Triton
batch-1 MoE GEMV (reads only the top-k experts, like vLLM's fused MoE kernel at batch 1); if
Triton is missing it falls back to gather + bmm and says so (that path moves 3x the expert bytes).

Per model it reports: kernels per step and per layer (torch.profiler, kernels attributed to
layers through record_function ranges), GPU busy time per step (sum of kernel durations),
bytes read per step (weights touched + KV + recurrent state), eager ms/step (wall, with the
host sync a sampler needs), graph ms/step (replay of the captured step), and the prediction
of roofline's CUDA-graph model from the per-kernel numbers of gpu_launch_cost.py.

Tensor parallelism (started with torchrun, one process per GPU): every layer is split the way
vLLM's Megatron-style layers split it — q/k/v, gate/up, the GDN in-projections, every expert's
intermediate and the vocab are column-parallel (each rank holds 1/TP), o_proj / out_proj / down /
the experts' w2 are row-parallel and followed by one all-reduce of the hidden state (two per
layer: mixer and MLP; the MoE's routed and shared experts are summed before their one
all-reduce, as vLLM's Qwen MoE blocks do), the vocab-parallel embedding ends in an all-reduce and
the vocab-parallel lm_head in an all-gather of the logits. KV heads split while there are enough
of them, then replicate (max(1, kv_heads // TP) per rank), like QKVParallelLinear. Routers and
norms are replicated. Collectives are NCCL through torch.distributed (vLLM would use its custom
all-reduce on NVLink inside one box; this measures NCCL, the collective it uses across boxes).

Run on the GPU machine:
  python3 benchmarks/gpu_decode_eager_vs_graph.py --out DIR [--launch-json DIR/launch.json]
  torchrun --nproc-per-node 2 benchmarks/gpu_decode_eager_vs_graph.py --out DIR   # TP=2
Writes DIR/decode.json (DIR/decode_tp<N>.json under torchrun) and DIR/trace_<model>.json.gz
(torch profiler trace of one eager step, rank 0).
Check the code on a CPU: --smoke (TP=1), or under torchrun with --smoke (gloo, TP=N).
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import shutil
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

DTYPE = torch.bfloat16
DEVICE = "cuda"  # --smoke runs the model code on the CPU (no timing) to check it before a GPU run
ANNOTATE = False  # record_function ranges only while profiling (they cost host time)
TP_SIZE = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun sets it: one process per GPU
TP_RANK = int(os.environ.get("RANK", "0"))


def region(name: str):
    return torch.profiler.record_function(name) if ANNOTATE else contextlib.nullcontext()


# ---------------------------------------------------------------- batch-1 MoE GEMV (Triton)
try:
    import triton
    import triton.language as tl

    @triton.jit
    def _moe_gemv_kernel(x_ptr, w_ptr, ids_ptr, out_ptr, N, K, x_slot_stride, w_expert_stride,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        slot = tl.program_id(0)
        pid_n = tl.program_id(1)
        expert = tl.load(ids_ptr + slot).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = offs_n < N
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        w_base = w_ptr + expert * w_expert_stride
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k < K
            w = tl.load(w_base + offs_n[:, None] * K + offs_k[None, :],
                        mask=mask_n[:, None] & mask_k[None, :], other=0.0)
            xv = tl.load(x_ptr + slot * x_slot_stride + offs_k, mask=mask_k, other=0.0)
            acc += tl.sum(w.to(tl.float32) * xv.to(tl.float32)[None, :], axis=1)
        tl.store(out_ptr + slot * N + offs_n, acc.to(out_ptr.dtype.element_ty), mask=mask_n)

    HAVE_TRITON = True
except Exception:  # noqa: BLE001 - any import/JIT failure means: use the fallback
    HAVE_TRITON = False

MOE_PATH = "triton" if HAVE_TRITON else "gather_bmm"


def moe_gemv(x: torch.Tensor, w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """out[s] = w[ids[s]] @ x[s] (x: [S, K] or [1, K] shared), w: [E, N, K] -> [S, N]."""
    slots = ids.numel()
    _, n, k = w.shape
    if MOE_PATH == "triton":
        out = torch.empty(slots, n, device=w.device, dtype=w.dtype)
        grid = (slots, triton.cdiv(n, 16))
        _moe_gemv_kernel[grid](x, w, ids, out, n, k, 0 if x.shape[0] == 1 else k, n * k,
                               BLOCK_N=16, BLOCK_K=256)
        return out
    picked = w.index_select(0, ids)  # [S, N, K]: copies the experts, 3x their bytes
    xs = x.expand(slots, k) if x.shape[0] == 1 else x
    return torch.bmm(picked, xs.unsqueeze(-1)).squeeze(-1)


# ---------------------------------------------------------------- building blocks
def param(*shape, scale=0.02):
    return (torch.randn(*shape, device=DEVICE, dtype=DTYPE) * scale)


def rms_norm(x, weight, eps=1e-6):
    dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return weight * x.to(dtype)


def shard(size: int) -> int:
    """This rank's part of a dimension vLLM splits across TP ranks (its divide() refuses a remainder)."""
    if size % TP_SIZE:
        raise SystemExit(f"error: {size} is not divisible by TP={TP_SIZE}")
    return size // TP_SIZE


def all_reduce(x, name):
    """The all-reduce that ends a row-parallel linear (a no-op at TP=1)."""
    if TP_SIZE > 1:
        with region(name):
            dist.all_reduce(x)
    return x


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention:
    """Qwen3 attention (q/k RMSNorm, RoPE) with optional Qwen3.5/3.6 output gate and partial
    rotary, over a static bf16 KV cache of `context` tokens."""

    def __init__(self, hidden, heads, kv_heads, head_dim, context, rotary_dim=None, gated=False):
        heads, kv_heads = shard(heads), max(1, kv_heads // TP_SIZE)
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.gated = gated
        self.rotary_dim = rotary_dim or head_dim
        self.q_proj = param(heads * head_dim * (2 if gated else 1), hidden)
        self.k_proj = param(kv_heads * head_dim, hidden)
        self.v_proj = param(kv_heads * head_dim, hidden)
        self.o_proj = param(hidden, heads * head_dim)
        self.q_norm = torch.ones(head_dim, device=DEVICE, dtype=DTYPE)
        self.k_norm = torch.ones(head_dim, device=DEVICE, dtype=DTYPE)
        self.k_cache = torch.randn(1, kv_heads, context + 1, head_dim, device=DEVICE, dtype=DTYPE)
        self.v_cache = torch.randn(1, kv_heads, context + 1, head_dim, device=DEVICE, dtype=DTYPE)

    def weight_bytes(self):
        return sum(t.numel() * t.element_size() for t in (self.q_proj, self.k_proj, self.v_proj, self.o_proj))

    def state_bytes(self):
        return 2 * self.k_cache.numel() * self.k_cache.element_size()

    def rope(self, x, cos, sin):
        if self.rotary_dim == self.head_dim:
            return x * cos + rotate_half(x) * sin
        rot, keep = x[..., :self.rotary_dim], x[..., self.rotary_dim:]
        return torch.cat((rot * cos + rotate_half(rot) * sin, keep), dim=-1)

    def __call__(self, x, cos, sin, position, prefix):
        with region(prefix + "self_attn.q_proj"):
            q = F.linear(x, self.q_proj)
        if self.gated:
            q, gate = q.view(1, self.heads, 2 * self.head_dim).chunk(2, dim=-1)
            gate = gate.reshape(1, self.heads * self.head_dim)
        with region(prefix + "self_attn.k_proj"):
            k = F.linear(x, self.k_proj)
        with region(prefix + "self_attn.v_proj"):
            v = F.linear(x, self.v_proj)
        with region(prefix + "self_attn.attn"):
            q = rms_norm(q.reshape(1, self.heads, 1, self.head_dim), self.q_norm)
            k = rms_norm(k.view(1, self.kv_heads, 1, self.head_dim), self.k_norm)
            v = v.view(1, self.kv_heads, 1, self.head_dim)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            self.k_cache.index_copy_(2, position, k)
            self.v_cache.index_copy_(2, position, v)
            out = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, enable_gqa=True)
            out = out.reshape(1, self.heads * self.head_dim)
            if self.gated:
                out = out * torch.sigmoid(gate)
        with region(prefix + "self_attn.o_proj"):
            return F.linear(out, self.o_proj)


class GatedDeltaNet:
    """Qwen3-Next / Qwen3.5 linear attention, one decode step (transformers' torch recurrent
    path): causal-conv update, l2-normalised q/k, decay gate, delta-rule state update in fp32,
    gated RMSNorm, out projection."""

    def __init__(self, hidden, key_heads, value_heads, key_dim, value_dim, conv_kernel):
        key_heads, value_heads = shard(key_heads), shard(value_heads)
        self.nk, self.nv, self.dk, self.dv = key_heads, value_heads, key_dim, value_dim
        self.conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
        self.in_proj_qkvz = param(self.conv_dim + value_heads * value_dim, hidden)
        self.in_proj_ba = param(2 * value_heads, hidden)
        self.conv_weight = param(self.conv_dim, conv_kernel, scale=0.5)
        self.conv_state = torch.randn(self.conv_dim, conv_kernel, device=DEVICE, dtype=DTYPE)
        self.dt_bias = torch.ones(value_heads, device=DEVICE, dtype=DTYPE)
        self.A_log = torch.zeros(value_heads, device=DEVICE, dtype=torch.float32)
        self.norm_weight = torch.ones(value_dim, device=DEVICE, dtype=DTYPE)
        self.out_proj = param(hidden, value_heads * value_dim)
        self.state = torch.randn(value_heads, key_dim, value_dim, device=DEVICE, dtype=torch.float32) * 0.01

    def weight_bytes(self):
        return sum(t.numel() * t.element_size() for t in (self.in_proj_qkvz, self.in_proj_ba, self.conv_weight, self.out_proj))

    def state_bytes(self):
        # the recurrent state and the conv window are read and written every token
        return 2 * (self.state.numel() * 4 + self.conv_state.numel() * self.conv_state.element_size())

    def __call__(self, x, prefix):
        with region(prefix + "linear_attn.in_proj_qkvz"):
            qkvz = F.linear(x, self.in_proj_qkvz)
        with region(prefix + "linear_attn.in_proj_ba"):
            ba = F.linear(x, self.in_proj_ba)
        with region(prefix + "linear_attn.core"):
            mixed, z = qkvz[:, :self.conv_dim], qkvz[:, self.conv_dim:]
            b, a = ba[:, :self.nv], ba[:, self.nv:]
            window = torch.cat((self.conv_state[:, 1:], mixed.t()), dim=-1)
            self.conv_state.copy_(window)
            mixed = F.silu((window * self.conv_weight).sum(-1)).unsqueeze(0)
            q, k, v = torch.split(mixed, [self.nk * self.dk, self.nk * self.dk, self.nv * self.dv], dim=-1)
            q = q.reshape(self.nk, self.dk).float()
            k = k.reshape(self.nk, self.dk).float()
            v = v.reshape(self.nv, self.dv).float()
            q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
            k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
            repeat = self.nv // self.nk
            q = q.repeat_interleave(repeat, dim=0) * (self.dk ** -0.5)
            k = k.repeat_interleave(repeat, dim=0)
            beta = torch.sigmoid(b.float()).view(self.nv, 1)
            g = -self.A_log.exp() * F.softplus(a.float().view(self.nv) + self.dt_bias.float())
            self.state.mul_(g.exp().view(self.nv, 1, 1))
            kv_mem = (self.state * k.unsqueeze(-1)).sum(-2)
            delta = (v - kv_mem) * beta
            self.state.add_(k.unsqueeze(-1) * delta.unsqueeze(-2))
            out = (self.state * q.unsqueeze(-1)).sum(-2)  # [nv, dv]
            out = rms_norm(out.to(DTYPE), self.norm_weight)
            out = out * F.silu(z.view(self.nv, self.dv))
        with region(prefix + "linear_attn.out_proj"):
            return F.linear(out.reshape(1, self.nv * self.dv), self.out_proj)


class DenseMLP:
    def __init__(self, hidden, inter):
        inter = shard(inter)
        self.gate, self.up, self.down = param(inter, hidden), param(inter, hidden), param(hidden, inter)

    def weight_bytes(self):
        return 3 * self.gate.numel() * 2

    def __call__(self, x, prefix):
        with region(prefix + "mlp"):
            return F.linear(F.silu(F.linear(x, self.gate)) * F.linear(x, self.up), self.down)


class MoE:
    """Qwen3-MoE sparse block (softmax, top-k, renormalised), optional shared expert with a
    sigmoid gate (Qwen3-Next / 3.5 / 3.6)."""

    def __init__(self, hidden, experts, top_k, inter, shared_inter=0):
        inter = shard(inter)  # every expert is split; DenseMLP splits the shared expert itself
        self.top_k, self.inter = top_k, inter
        self.router = param(experts, hidden)
        self.w13 = param(experts, 2 * inter, hidden)
        self.w2 = param(experts, hidden, inter)
        self.shared = DenseMLP(hidden, shared_inter) if shared_inter else None
        self.shared_gate = param(1, hidden) if shared_inter else None

    def weight_bytes(self):
        per_expert = (self.w13[0].numel() + self.w2[0].numel()) * 2
        total = self.router.numel() * 2 + self.top_k * per_expert
        if self.shared is not None:
            total += self.shared.weight_bytes() + self.shared_gate.numel() * 2
        return total

    def resident_bytes(self):
        return (self.w13.numel() + self.w2.numel() + self.router.numel()) * 2

    def __call__(self, x, prefix):
        with region(prefix + "mlp.gate"):
            logits = F.linear(x, self.router)
            probs = torch.softmax(logits.float(), dim=-1)
            weights, ids = torch.topk(probs, self.top_k, dim=-1)
            weights = (weights / weights.sum(-1, keepdim=True)).to(DTYPE)
        with region(prefix + "mlp.experts"):
            ids = ids.view(-1)
            h = moe_gemv(x, self.w13, ids)  # [k, 2I]
            act = F.silu(h[:, :self.inter]) * h[:, self.inter:]
            out = moe_gemv(act.contiguous(), self.w2, ids)  # [k, H]
            out = (out * weights.view(-1, 1)).sum(0, keepdim=True)
        if self.shared is not None:
            with region(prefix + "mlp.shared_expert"):
                shared = self.shared(x, prefix + "mlp.shared_expert.")
            with region(prefix + "mlp.shared_expert_gate"):
                out = out + torch.sigmoid(F.linear(x, self.shared_gate)) * shared
        return out


class Model:
    def __init__(self, spec: dict, layers: int, context: int):
        hidden, vocab = spec["hidden"], spec["vocab"]
        self.spec, self.context = spec, context
        self.vocab_start = TP_RANK * shard(vocab)
        self.embed = param(shard(vocab), hidden)
        self.lm_head = param(shard(vocab), hidden)
        self.final_norm = torch.ones(hidden, device=DEVICE, dtype=DTYPE)
        head_dim = spec["head_dim"]
        rotary = int(head_dim * spec.get("partial_rotary", 1.0))
        inv_freq = 1.0 / (1e6 ** (torch.arange(0, rotary, 2, device=DEVICE).float() / rotary))
        freqs = torch.outer(torch.arange(context + 1, device=DEVICE).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos().to(DTYPE), emb.sin().to(DTYPE)
        self.layers = []
        for i in range(layers):
            linear = spec.get("full_attention_interval") and (i + 1) % spec["full_attention_interval"] != 0
            if linear:
                mixer = GatedDeltaNet(hidden, spec["lin_key_heads"], spec["lin_value_heads"],
                                      spec["lin_key_dim"], spec["lin_value_dim"], spec["conv_kernel"])
            else:
                mixer = Attention(hidden, spec["heads"], spec["kv_heads"], head_dim, context,
                                  rotary_dim=rotary, gated=spec.get("attn_gate", False))
            if spec.get("experts"):
                mlp = MoE(hidden, spec["experts"], spec["top_k"], spec["moe_inter"], spec.get("shared_inter", 0))
            else:
                mlp = DenseMLP(hidden, spec["inter"])
            norms = (torch.ones(hidden, device=DEVICE, dtype=DTYPE), torch.ones(hidden, device=DEVICE, dtype=DTYPE))
            self.layers.append((mixer, mlp, norms))
        self.token = torch.zeros(1, dtype=torch.long, device=DEVICE)
        self.position = torch.full((1,), context, dtype=torch.long, device=DEVICE)

    def bytes_per_step(self) -> dict:
        weights = self.lm_head.numel() * 2 + self.embed.shape[1] * 2  # one embedding row
        state = 0
        for mixer, mlp, norms in self.layers:
            weights += mixer.weight_bytes() + mlp.weight_bytes() + 2 * norms[0].numel() * 2
            state += mixer.state_bytes()
        return {"weights": weights, "state": state, "total": weights + state}

    def resident_bytes(self) -> int:
        total = (self.lm_head.numel() + self.embed.numel()) * 2
        for mixer, mlp, _ in self.layers:
            total += mixer.weight_bytes() + (mlp.resident_bytes() if isinstance(mlp, MoE) else mlp.weight_bytes())
        return total

    def step(self):
        with region("model.embed_tokens"):
            if TP_SIZE > 1:  # vocab-parallel: the rank holding the row looks it up, the others add zeros
                local = self.token - self.vocab_start
                inside = (local >= 0) & (local < self.embed.shape[0])
                x = F.embedding(local.clamp(0, self.embed.shape[0] - 1), self.embed) * inside.unsqueeze(-1)
            else:
                x = F.embedding(self.token, self.embed)
        x = all_reduce(x, "model.embed_tokens.all_reduce")
        with region("model.rotary"):
            cos = self.cos.index_select(0, self.position).view(1, 1, 1, -1)
            sin = self.sin.index_select(0, self.position).view(1, 1, 1, -1)
        for i, (mixer, mlp, (norm_in, norm_post)) in enumerate(self.layers):
            prefix = f"model.layers.{i}."
            with region(prefix + "input_layernorm"):
                h = rms_norm(x, norm_in)
            if isinstance(mixer, Attention):
                h = mixer(h, cos, sin, self.position, prefix)
            else:
                h = mixer(h, prefix)
            h = all_reduce(h, prefix + "mixer.all_reduce")
            with region(prefix + "residual"):
                x = x + h
            with region(prefix + "post_attention_layernorm"):
                h = rms_norm(x, norm_post)
            h = mlp(h, prefix)
            h = all_reduce(h, prefix + "mlp.all_reduce")
            with region(prefix + "residual"):
                x = x + h
        with region("model.norm"):
            x = rms_norm(x, self.final_norm)
        with region("lm_head"):
            logits = F.linear(x, self.lm_head)
        if TP_SIZE > 1:
            with region("lm_head.all_gather"):
                parts = [torch.empty_like(logits) for _ in range(TP_SIZE)]
                dist.all_gather(parts, logits)
                logits = torch.cat(parts, dim=-1)
        with region("sampler"):
            self.token.copy_(torch.argmax(logits, dim=-1))
        return self.token


SPECS = {
    # reference/configs/Qwen__Qwen3-8B/config.json
    "dense_qwen3_8b": dict(hidden=4096, inter=12288, heads=32, kv_heads=8, head_dim=128, vocab=151936, layers=36),
    # reference/configs/Qwen__Qwen3-30B-A3B/config.json
    "moe_qwen3_30b_a3b": dict(hidden=2048, heads=32, kv_heads=4, head_dim=128, vocab=151936, experts=128,
                              top_k=8, moe_inter=768, layers=48),
    # reference/configs/Qwen__Qwen3.6-35B-A3B/config.json (40 layers; fewer by default to fit 80 GB)
    "hybrid_qwen3_6_35b_a3b": dict(hidden=2048, heads=16, kv_heads=2, head_dim=256, vocab=248320,
                                   partial_rotary=0.25, attn_gate=True, full_attention_interval=4,
                                   lin_key_heads=16, lin_value_heads=32, lin_key_dim=128, lin_value_dim=128,
                                   conv_kernel=4, experts=256, top_k=8, moe_inter=512, shared_inter=512,
                                   layers=24),
}


def attribute_trace(trace: dict) -> dict:
    """Kernels of a chrome trace (torch.profiler export), each attributed to the innermost
    record_function range around the host call that launched it (matched by correlation id).
    The same rule as roofline.live.profiler_trace.parse_trace, kept inline so this script needs only torch."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    launches = {}
    ranges = []
    kernels = []
    for e in events:
        cat = e.get("cat", "")
        if cat in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e
        elif cat == "user_annotation":
            ranges.append(e)
        elif cat == "kernel":
            kernels.append(e)
    per_range: dict[str, list[float]] = {}
    for k in kernels:
        launch = launches.get(k.get("args", {}).get("correlation"))
        owner = "unattributed"
        if launch is not None:
            best = None
            for r in ranges:
                if (r.get("tid") == launch.get("tid") and r["ts"] <= launch["ts"] <= r["ts"] + r["dur"]
                        and (best is None or r["dur"] < best["dur"])):
                    best = r
            if best is not None:
                owner = best["name"]
        per_range.setdefault(owner, []).append(float(k.get("dur", 0.0)))
    per_layer: dict[str, int] = {}
    per_part: dict[str, int] = {}
    gpu_us_layer: dict[str, float] = {}
    gpu_us_part: dict[str, float] = {}
    for name, durations in per_range.items():
        if name.startswith("model.layers."):
            layer, part = name.split(".")[2], ".".join(name.split(".")[3:])
        else:
            layer = part = name
        per_layer[layer] = per_layer.get(layer, 0) + len(durations)
        per_part[part] = per_part.get(part, 0) + len(durations)
        gpu_us_layer[layer] = gpu_us_layer.get(layer, 0.0) + sum(durations)
        gpu_us_part[part] = gpu_us_part.get(part, 0.0) + sum(durations)
    collective_us = sum(us for part, us in gpu_us_part.items() if part.endswith(("all_reduce", "all_gather")))
    return {"kernels_total": len(kernels), "gpu_busy_us": sum(float(k.get("dur", 0.0)) for k in kernels),
            "per_layer": per_layer, "per_part_summed_over_layers": per_part, "gpu_us_per_layer": gpu_us_layer,
            "gpu_us_per_part_summed_over_layers": gpu_us_part, "collective_gpu_us": collective_us}


def profile_step(model: Model, trace_path: str) -> dict:
    """Profile one eager step with record_function ranges on; save the trace (gzip)."""
    global ANNOTATE
    from torch.profiler import ProfilerActivity, profile

    ANNOTATE = True
    model.step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        model.step()
        torch.cuda.synchronize()
    ANNOTATE = False
    raw = f"{trace_path[:-3]}.rank{TP_RANK}"
    prof.export_chrome_trace(raw)
    with open(raw, encoding="utf-8") as f:
        trace = json.load(f)
    if TP_RANK == 0:
        with open(raw, "rb") as src, gzip.open(trace_path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    os.remove(raw)
    return attribute_trace(trace)


def time_steps(fn, steps: int) -> dict:
    walls, issues = [], []
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()  # a sampler reads the token back every step
        t2 = time.perf_counter()
        issues.append(t1 - t0)
        walls.append(t2 - t0)
    return {"wall_ms": statistics.median(walls) * 1e3, "issue_ms": statistics.median(issues) * 1e3,
            "wall_ms_p10": sorted(walls)[len(walls) // 10] * 1e3,
            "wall_ms_p90": sorted(walls)[len(walls) * 9 // 10] * 1e3}


def capture(model: Model) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model.step()
    return graph


def predict(profile: dict, nbytes: int, launch: dict | None, bandwidth_gbps: float | None) -> dict | None:
    """roofline's model: graph = bytes/bw + kernels x floor; eager = sum over layers of
    max(layer GPU time, layer kernels x host cost) (and the whole-step variant)."""
    if not launch or not bandwidth_gbps:
        return None
    host_us = launch["cases"]["hf_rmsnorm_module"]["eager_issue_us_per_kernel"]
    floor_us = launch["cases"]["tensor_add_"]["graph_replay_us_per_kernel"]
    kernels = profile["kernels_total"]
    graph_ms = nbytes / (bandwidth_gbps * 1e9) * 1e3 + kernels * floor_us / 1e3
    # split the GPU time over layers in proportion to each layer's measured-free estimate:
    # here per-layer GPU time = the layer's share of bytes is not known per layer, so use the
    # measured per-layer kernel counts with the graph time spread by kernel-weighted bytes.
    layers = profile["per_layer"]
    total_k = sum(layers.values()) or 1
    eager_ms = 0.0
    for name, count in layers.items():
        gpu_share_ms = graph_ms * profile["gpu_us_per_layer"].get(name, 0.0) / max(profile["gpu_busy_us"], 1e-9)
        eager_ms += max(gpu_share_ms, count * host_us / 1e3)
    whole_ms = max(graph_ms, kernels * host_us / 1e3)
    return {"host_us_per_kernel": host_us, "graph_floor_us_per_kernel": floor_us,
            "bandwidth_gbps": bandwidth_gbps, "graph_ms": graph_ms, "eager_ms_sum_of_layer_max": eager_ms,
            "eager_ms_whole_step_max": whole_ms, "kernels_per_layer_mean": total_k / max(len(layers), 1)}


def smoke(names) -> None:
    global DEVICE, DTYPE, MOE_PATH
    DEVICE, DTYPE = "cpu", torch.float32
    if TP_SIZE > 1:
        dist.init_process_group(backend="gloo")
    for path in ("gather_bmm",) + (("triton",) if HAVE_TRITON and os.environ.get("TRITON_INTERPRET") else ()):
        MOE_PATH = path
        for name in names:
            spec = dict(SPECS[name], vocab=1000)
            spec["experts"] = min(spec.get("experts", 0), 16)
            model = Model(spec, 4, 16)
            for _ in range(2):
                token = model.step()
            if TP_SIZE > 1:  # every rank must sample the same token from the gathered logits
                tokens = [torch.zeros_like(token) for _ in range(TP_SIZE)]
                dist.all_gather(tokens, token)
                if len({int(t) for t in tokens}) != 1:
                    raise SystemExit(f"error: ranks sampled different tokens: {[int(t) for t in tokens]}")
            if TP_RANK == 0:
                print(name, path, f"tp={TP_SIZE}", "ok", int(token), model.bytes_per_step())
    if TP_SIZE > 1:
        dist.destroy_process_group()


def main() -> None:
    global MOE_PATH
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--launch-json", help="launch.json from gpu_launch_cost.py, for predictions")
    parser.add_argument("--models", default=",".join(SPECS))
    parser.add_argument("--layers", type=int, default=0, help="override the layer count of every model")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="run 2 layers of each model on the CPU, no timing")
    args = parser.parse_args()
    if args.smoke:
        smoke(args.models.split(","))
        return
    if not torch.cuda.is_available():
        raise SystemExit("error: needs a CUDA GPU")
    if TP_SIZE > 1:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl")
        dist.all_reduce(torch.ones(1, device=DEVICE))  # bring NCCL's communicator up before any capture
    launch = None
    if args.launch_json and os.path.exists(args.launch_json):
        with open(args.launch_json, encoding="utf-8") as f:
            launch = json.load(f)
    bandwidth = launch["gemv_bandwidth"]["gbps"] if launch else None
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    results = {"moe_path": MOE_PATH, "context": args.context, "steps": args.steps, "tp": TP_SIZE,
               "collectives": "nccl (torch.distributed)" if TP_SIZE > 1 else None,
               "nccl_env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")},
               "models": {}}
    out_name = "decode.json" if TP_SIZE == 1 else f"decode_tp{TP_SIZE}.json"

    # check the Triton MoE GEMV against gather + bmm once; fall back if it is wrong or fails
    if MOE_PATH == "triton":
        try:
            w = param(16, 96, 512)
            x = param(1, 512, scale=1.0)
            ids = torch.tensor([3, 7, 11], device=DEVICE)
            got = moe_gemv(x, w, ids).float()
            MOE_PATH = "gather_bmm"
            ref = moe_gemv(x, w, ids).float()
            MOE_PATH = "triton"
            err = ((got - ref).norm() / ref.norm()).item()
            results["moe_gemv_rel_err"] = err
            if not err < 1e-2:
                MOE_PATH = "gather_bmm"
        except Exception as exc:  # noqa: BLE001
            results["moe_gemv_error"] = repr(exc)
            MOE_PATH = "gather_bmm"
        results["moe_path"] = MOE_PATH

    for name in args.models.split(","):
        spec = SPECS[name]
        layers = args.layers or spec["layers"]
        t0 = time.perf_counter()
        model = Model(spec, layers, args.context)
        torch.cuda.synchronize()
        nbytes = model.bytes_per_step()
        prof = profile_step(model, os.path.join(args.out, f"trace_{name}.json.gz"))
        eager = time_steps(model.step, args.steps)
        graph = capture(model)
        graph_t = time_steps(graph.replay, args.steps)
        row = {
            "layers": layers, "spec": spec, "resident_gb": model.resident_bytes() / 1e9,
            "bytes_per_step": nbytes, "profile": prof, "eager": eager, "graph": graph_t,
            "eager_tok_s": 1e3 / eager["wall_ms"], "graph_tok_s": 1e3 / graph_t["wall_ms"],
            "benefit": eager["wall_ms"] / graph_t["wall_ms"],
            "achieved_gbps_graph": nbytes["total"] / (graph_t["wall_ms"] / 1e3) / 1e9,
            "prediction": predict(prof, nbytes["total"], launch, bandwidth),
            "build_s": time.perf_counter() - t0,
        }
        results["models"][name] = row
        if TP_RANK:
            del graph, model
            torch.cuda.empty_cache()
            continue
        print(f"{name}: tp={TP_SIZE} layers={layers} kernels/step={prof['kernels_total']} "
              f"bytes/step={nbytes['total'] / 1e9:.3f} GB gpu_busy={prof['gpu_busy_us'] / 1e3:.2f} ms "
              f"eager={eager['wall_ms']:.2f} ms (issue {eager['issue_ms']:.2f}) graph={graph_t['wall_ms']:.2f} ms "
              f"benefit={row['benefit']:.2f}x", flush=True)
        if row["prediction"]:
            p = row["prediction"]
            print(f"   predicted: graph={p['graph_ms']:.2f} ms eager={p['eager_ms_sum_of_layer_max']:.2f} ms "
                  f"(whole-step max {p['eager_ms_whole_step_max']:.2f})", flush=True)
        del graph, model
        torch.cuda.empty_cache()
        with open(os.path.join(args.out, out_name), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    if TP_RANK:
        dist.destroy_process_group()
        return

    print(f"\nMoE path: {results['moe_path']}, TP={TP_SIZE}")
    print(f"{'model':<24} {'layers':>6} {'k/step':>7} {'k/layer':>8} {'GB/step':>8} {'eager ms':>9} "
          f"{'graph ms':>9} {'benefit':>8} {'pred eager':>10} {'pred graph':>10}")
    for name, row in results["models"].items():
        p = row["prediction"] or {}
        print(f"{name:<24} {row['layers']:>6} {row['profile']['kernels_total']:>7} "
              f"{row['profile']['kernels_total'] / row['layers']:>8.1f} {row['bytes_per_step']['total'] / 1e9:>8.3f} "
              f"{row['eager']['wall_ms']:>9.2f} {row['graph']['wall_ms']:>9.2f} {row['benefit']:>8.2f} "
              f"{p.get('eager_ms_sum_of_layer_max', math.nan):>10.2f} {p.get('graph_ms', math.nan):>10.2f}"
              f"  collectives {row['profile']['collective_gpu_us'] / 1e3:.2f} ms GPU")
    if TP_SIZE > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

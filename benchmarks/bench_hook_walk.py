"""Overhead of the vLLM capture walk (roofline.hooks.walk) on a model of ~50k modules.

    .venv/bin/python benchmarks/bench_hook_walk.py [--modules 50000] [--repeat 3]

Target (issue 4): the walk adds <= 1 s to model load for a 50k-module model. The hook walks
twice per rank (the pre-repack snapshot and the post-load record) and then writes JSON; each
part is timed separately, plus their sum.

The model is built from real vLLM layer classes where they can be built without an engine
(vLLM's UnquantizedLinearMethod / UnquantizedEmbeddingMethod objects as each module's
quant_method) on plain torch modules; tensors are small CPU tensors, because the walk reads
metadata only and its cost is per module and per tensor, not per byte.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def build_model(target_modules: int):
    import torch
    from torch import nn

    try:
        from vllm.model_executor.layers.linear import UnquantizedLinearMethod
        from vllm.model_executor.layers.vocab_parallel_embedding import (
            UnquantizedEmbeddingMethod,
        )
        linear_method, embed_method = UnquantizedLinearMethod(), UnquantizedEmbeddingMethod()
        real = True
    except Exception:  # noqa: BLE001 - vLLM not installed: the walk still runs on torch alone
        linear_method = embed_method = None
        real = False

    def linear(i, o):
        layer = nn.Linear(i, o, bias=False)
        if linear_method is not None:
            layer.quant_method = linear_method
        return layer

    class Layer(nn.Module):
        # 24 modules per decoder layer: attention (4 projections + 2 norms), an MoE block of
        # 16 expert-like linears + router, 2 layer norms, and the layer itself
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = (linear(16, 16) for _ in range(4))
            self.q_norm, self.k_norm = nn.LayerNorm(16), nn.LayerNorm(16)
            self.experts = nn.ModuleList(linear(16, 16) for _ in range(15))
            self.gate = linear(16, 4)
            self.input_layernorm, self.post_attention_layernorm = nn.LayerNorm(16), nn.LayerNorm(16)

    per_layer = sum(1 for _ in Layer().modules())
    layers = max(1, (target_modules - 3) // per_layer)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(64, 16)
            if embed_method is not None:
                self.embed_tokens.quant_method = embed_method
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.lm_head = self.embed_tokens  # tied: an alias, as vLLM ties Qwen3

    with torch.no_grad():
        model = Model()
    return model, real


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from roofline.hooks import walk

    build_started = time.perf_counter()
    model, real = build_model(args.modules)
    count = sum(1 for _ in model.modules())
    tensors = sum(1 for _ in model.parameters())
    built = time.perf_counter() - build_started

    # wall time and this process's CPU time: on a shared machine (CI, 2 cores, other jobs)
    # wall time includes waiting for a core; CPU time is what the walk itself costs
    parts = ("pre-repack snapshot", "post-load record", "JSON write", "total")
    wall = {p: [] for p in parts}
    cpu = {p: [] for p in parts}
    size = 0
    for _ in range(args.repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        loaded = walk.snapshot_tensors(model, multi_rank=False)
        w1, c1 = time.perf_counter(), time.process_time()
        record = walk.build_record(model, None, loaded, {})
        w2, c2 = time.perf_counter(), time.process_time()
        text = json.dumps(record, separators=(",", ":"))
        w3, c3 = time.perf_counter(), time.process_time()
        size = len(text)
        spans = [(w1 - w0, c1 - c0), (w2 - w1, c2 - c1), (w3 - w2, c3 - c2), (w3 - w0, c3 - c0)]
        for part, (wall_s, cpu_s) in zip(parts, spans):
            wall[part].append(wall_s)
            cpu[part].append(cpu_s)

    print(f"model: {count} modules, {tensors} parameters (built in {built:.1f} s); "
          f"vLLM quant-method objects: {'yes' if real else 'no (vLLM not importable)'}")
    print(f"capture JSON: {size / 1e6:.1f} MB; {args.repeat} repeats")
    print(f"{'part':<22} {'wall median s':>14} {'wall min s':>11} {'CPU median s':>13}")
    for part in parts:
        print(f"{part:<22} {statistics.median(wall[part]):14.3f} {min(wall[part]):11.3f} "
              f"{statistics.median(cpu[part]):13.3f}")
    total = statistics.median(cpu["total"])
    verdict = "PASS" if total <= 1.0 else "FAIL"
    print(f"target: walk + JSON CPU time <= 1.0 s for {args.modules} modules -> {verdict} "
          f"({total:.3f} s CPU, {statistics.median(wall['total']):.3f} s wall)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())

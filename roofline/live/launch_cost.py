"""This host's per-kernel launch cost and this GPU's CUDA-graph replay floor, measured on the small
kernels a decode step is made of (roofline/predict/cuda_graph.py's two per-kernel costs).

Cases, each at decode width (hidden 4096, one token, bf16): an HF-style RMSNorm module, MoE routing
(softmax + top-8 of 128 + renormalise), a small projection GEMV (4096 -> 512, the size of a k / v
projection), and a gated activation (silu(g) * u over 1536). For each:
  kernels per call  counted by torch.profiler over a few calls;
  eager             wall(N calls + sync) / (N x kernels): the loop is host-bound, so this is what
                    the host pays per kernel;
  graph             the same N calls captured in one CUDA graph, replayed, timed with CUDA events,
                    / (N x kernels), less the bytes each kernel must move at the measured bandwidth:
                    what a kernel costs beyond its bytes when nothing is launched from the host.
The saved figures are the kernel-weighted means over the cases (a decode step mixes them).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field

from roofline.errors import RooflineError

CALLS = 400  # per timed loop / per graph
TRIALS = 5
HIDDEN, EXPERTS, TOP_K, INTER, KV_OUT = 4096, 128, 8, 1536, 512


@dataclass
class LaunchCase:
    name: str
    kernels_per_call: float
    bytes_per_call: int
    eager_us_per_kernel: float
    graph_us_per_kernel: float  # replay time per kernel, bytes included
    floor_us_per_kernel: float  # replay time per kernel beyond its bytes


@dataclass
class LaunchCalibration:
    host_us_per_kernel: float
    graph_floor_us_per_kernel: float
    cases: list[LaunchCase] = field(default_factory=list)
    bandwidth_gbps: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def _cases(torch, dev):
    bf16 = torch.bfloat16
    weight = torch.ones(HIDDEN, device=dev, dtype=bf16)
    x = torch.randn(1, HIDDEN, device=dev, dtype=bf16)

    def rmsnorm():  # as transformers' Qwen3RMSNorm.forward runs it
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + 1e-6)
        return weight * h.to(bf16)

    logits = torch.randn(1, EXPERTS, device=dev, dtype=bf16)

    def routing():  # Qwen3-MoE: softmax, top-k, renormalise
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        top, ids = torch.topk(probs, TOP_K, dim=-1)
        return top / top.sum(dim=-1, keepdim=True), ids

    w_small = torch.randn(KV_OUT, HIDDEN, device=dev, dtype=bf16)

    def projection():
        return torch.nn.functional.linear(x, w_small)

    gate, up = (torch.randn(1, INTER, device=dev, dtype=bf16) for _ in range(2))

    def activation():
        return torch.nn.functional.silu(gate) * up

    return [("rmsnorm", rmsnorm, 2 * HIDDEN * 2), ("routing", routing, EXPERTS * 2),
            ("projection", projection, KV_OUT * HIDDEN * 2), ("activation", activation, 3 * INTER * 2)]


def _kernels_per_call(torch, fn, calls: int = 10) -> float:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA" and "memcpy" not in e.name.lower()
                  and "memset" not in e.name.lower())
    return kernels / calls


def _eager_us_per_call(torch, fn) -> float:
    trials = []
    for _ in range(TRIALS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        trials.append((time.perf_counter() - start) / CALLS * 1e6)
    return statistics.median(trials)


def _graph_us_per_call(torch, fn) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up off the default stream, as capture requires
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    trials = []
    for _ in range(TRIALS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        trials.append(start.elapsed_time(end) * 1e3 / CALLS)
    return statistics.median(trials)


def measure_launch(device: str, bandwidth_gbps: float, progress=None) -> LaunchCalibration:
    """Run the cases on a CUDA device; `bandwidth_gbps` (measured by calibrate) prices the bytes."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        raise RooflineError("launch costs are measured on a CUDA device (--device cuda)")
    say = progress or (lambda message: None)
    dev = torch.device(device)
    with torch.cuda.device(dev):
        cases = []
        for name, fn, nbytes in _cases(torch, dev):
            kernels = _kernels_per_call(torch, fn)
            if kernels <= 0:
                raise RooflineError(f"launch case {name}: the profiler saw no CUDA kernel")
            eager = _eager_us_per_call(torch, fn) / kernels
            graph = _graph_us_per_call(torch, fn) / kernels
            bytes_us = nbytes / (bandwidth_gbps * 1e9) * 1e6 / kernels
            floor = max(graph - bytes_us, 0.0)
            cases.append(LaunchCase(name, kernels, nbytes, eager, graph, floor))
            say(f"launch {name:10} {kernels:4.0f} kernels/call  eager {eager:6.2f} us/kernel  "
                f"graph {graph:5.2f} us/kernel (floor {floor:5.2f})")
    total = sum(c.kernels_per_call for c in cases)
    host = sum(c.eager_us_per_kernel * c.kernels_per_call for c in cases) / total
    floor = sum(c.floor_us_per_kernel * c.kernels_per_call for c in cases) / total
    return LaunchCalibration(host, floor, cases, bandwidth_gbps)

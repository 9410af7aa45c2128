"""Per-kernel costs on a CUDA GPU: the host launch cost of PyTorch eager and the per-kernel
floor inside a CUDA-graph replay, plus the device-to-device copy bandwidth.

These are the three numbers roofline's CUDA-graph model needs (roofline/predict/cuda_graph.py,
roofline/data/launch.toml):

- eager cost per kernel: wall time of a long loop of tiny kernels issued from Python, divided by
  the kernels the profiler counts. The GPU work is a few microseconds per kernel, so the loop is
  host-bound and the quotient is what the host pays per kernel. Measured three ways: a bare
  tensor op, a tiny matmul, and an HF-style RMSNorm nn.Module (several kernels per call, with
  the module-call overhead a real model pays).
- graph floor per kernel: the same tiny kernels captured in one torch.cuda.CUDAGraph and
  replayed; replay time / kernels is what a kernel costs when nothing is launched from the host.
- copy bandwidth: a 2 GiB device-to-device copy, bytes read + written over time.

Run on the GPU machine: python3 benchmarks/gpu_launch_cost.py --out DIR
Writes DIR/launch.json and prints a table. Needs torch with CUDA; nothing else.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch


def host_info() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cpu": cpu,
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def count_kernels(fn, repeat: int = 1) -> tuple[int, float]:
    """(CUDA kernels launched by `repeat` calls of fn, their summed GPU time in us), by the
    torch profiler."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(repeat):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))]
    gpu_us = sum(e.device_time for e in kernels)
    return len(kernels), gpu_us


def time_eager(fn, calls: int, trials: int = 7) -> dict:
    """Median over trials of: wall time of `calls` calls then one sync, and the host time to
    issue them (before the sync)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    walls, issues = [], []
    for _ in range(trials):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        issues.append(t1 - t0)
        walls.append(t2 - t0)
    return {"wall_s": statistics.median(walls), "issue_s": statistics.median(issues)}


def time_graph(fn, calls: int, trials: int = 7) -> dict:
    """Capture `calls` calls of fn in one CUDA graph; median replay time (CUDA events)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return {"replay_s": statistics.median(times)}


class HFRMSNorm(torch.nn.Module):
    """The RMSNorm of transformers' Llama/Qwen modelling code, op for op (unfused)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden, device="cuda", dtype=torch.bfloat16))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + 1e-6)
        return self.weight * x.to(dtype)


def copy_bandwidth() -> dict:
    n = 1 << 30  # 1 Gi bf16 elements = 2 GiB
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    seconds = statistics.median(times)
    moved = 2 * src.numel() * src.element_size()
    del src, dst
    torch.cuda.empty_cache()
    return {"bytes_read_plus_written": moved, "seconds": seconds, "gbps": moved / seconds / 1e9}


def gemv_bandwidth() -> dict:
    """A decode-shaped read: x[1, 4096] @ W[4096, 14336]^T bf16 over 8 rotating weights, so
    the 50 MB L2 does not hold them. Bytes = weights read; this is what decode GEMMs see."""
    weights = [torch.randn(14336, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(8)]
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    for w in weights:
        torch.nn.functional.linear(x, w)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for w in weights:
            torch.nn.functional.linear(x, w)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    seconds = statistics.median(times)
    moved = sum(w.numel() * w.element_size() for w in weights)
    del weights
    torch.cuda.empty_cache()
    return {"bytes_read": moved, "seconds": seconds, "gbps": moved / seconds / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder for launch.json")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: needs a CUDA GPU")
    torch.manual_seed(0)
    calls = args.calls

    tiny = torch.randn(256, device="cuda", dtype=torch.float32)
    a = torch.randn(1, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    out_mm = torch.empty(1, 256, device="cuda", dtype=torch.bfloat16)
    norm = HFRMSNorm(4096)
    hidden = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)

    cases = {
        "tensor_add_": lambda: tiny.add_(1e-3),
        "mm_1x256x256": lambda: torch.mm(a, b, out=out_mm),
        "hf_rmsnorm_module": lambda: norm(hidden),
    }
    rows = {}
    for name, fn in cases.items():
        kernels_per_call, gpu_us = count_kernels(fn, repeat=50)
        kernels_per_call //= 50
        eager = time_eager(fn, calls)
        graph = time_graph(fn, calls)
        kernels = kernels_per_call * calls
        rows[name] = {
            "kernels_per_call": kernels_per_call,
            "gpu_us_per_kernel": gpu_us / (50 * kernels_per_call),
            "eager_wall_us_per_kernel": eager["wall_s"] / kernels * 1e6,
            "eager_issue_us_per_kernel": eager["issue_s"] / kernels * 1e6,
            "graph_replay_us_per_kernel": graph["replay_s"] / kernels * 1e6,
        }
    result = {
        "host": host_info(),
        "method": ("eager: median of 7 trials of wall(calls x fn + sync) / kernels; issue: host "
                   "time before the sync; graph: median of 7 CUDA-event-timed replays of one graph "
                   f"holding the same {calls} calls, / kernels; kernels per call from torch.profiler"),
        "calls_per_loop": calls,
        "cases": rows,
        "copy_bandwidth": copy_bandwidth(),
        "gemv_bandwidth": gemv_bandwidth(),
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "launch.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)

    print(f"# {result['host']['gpu']} | {result['host']['cpu']} | torch {result['host']['torch']}")
    print(f"{'case':<20} {'k/call':>6} {'gpu us/k':>9} {'eager us/k':>11} {'issue us/k':>11} {'graph us/k':>11}")
    for name, row in rows.items():
        print(f"{name:<20} {row['kernels_per_call']:>6} {row['gpu_us_per_kernel']:>9.2f} "
              f"{row['eager_wall_us_per_kernel']:>11.2f} {row['eager_issue_us_per_kernel']:>11.2f} "
              f"{row['graph_replay_us_per_kernel']:>11.2f}")
    print(f"copy bandwidth (read+write): {result['copy_bandwidth']['gbps']:.0f} GB/s; "
          f"decode GEMV read bandwidth: {result['gemv_bandwidth']['gbps']:.0f} GB/s")


if __name__ == "__main__":
    main()

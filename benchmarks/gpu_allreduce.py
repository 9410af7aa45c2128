"""All-reduce latency and bus bandwidth at decode sizes, eager and inside a CUDA graph.

One process per device, started with torchrun:

  torchrun --nproc-per-node 2 benchmarks/gpu_allreduce.py --out DIR      # NCCL on two GPUs
  torchrun --nproc-per-node 2 benchmarks/gpu_allreduce.py --out DIR --device cpu   # gloo (CPU check)

Sizes are the hidden state a tensor-parallel layer all-reduces per decode step: hidden size x
tokens in the step x 2 bytes (bf16), 4 KB to 8 MB by default. Per size:
- eager: `iters` back-to-back all-reduces launched from Python, then one synchronize; the median of
  `trials` of wall / iters. That is what a decode step pays per all-reduce when it runs eagerly
  (launch + NCCL's own latency + bytes);
- graph (CUDA only): the same `iters` all-reduces captured in one CUDA graph, timed with CUDA
  events over replays: what a step pays inside vLLM's captured decode graph;
- chain (CUDA only, up to 1 MB): what one all-reduce adds to a decode step, where it sits between
  dependent kernels: a graph of `iters` x (GEMV -> all-reduce of its output) minus a graph of the
  same GEMVs alone, per all-reduce. Back-to-back collectives (above) pay the peers' handshake in
  full; in a step, ranks arrive together after the same work;
- --impl symm_mem: torch's symmetric-memory one-shot all-reduce (peer-to-peer loads over NVLink),
  the kind of collective vLLM's own custom / symmetric-memory all-reduce runs inside one NVLink box
  (vLLM keeps NCCL across boxes), instead of NCCL;
- bus bandwidth = bytes x 2 (n-1)/n / time, NCCL's own definition (nccl-tests' busbw), so it is
  comparable across rank counts and with the link's bandwidth.

Rank 0 writes DIR/allreduce.json (with the NCCL environment and the GPU topology it ran on) and
prints a table. The sum is checked once per size (a wrong collective is not timed).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

import torch
import torch.distributed as dist

DEFAULT_SIZES = [4096 * 2 ** i for i in range(12)]  # 4 KB .. 8 MB
NCCL_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
            "NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE")


def bus_gbps(nbytes: int, seconds: float, ranks: int) -> float:
    return nbytes * 2 * (ranks - 1) / ranks / seconds / 1e9 if seconds > 0 else float("nan")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def check_sum(buffer: torch.Tensor, rank: int, ranks: int, device: str, reduce) -> None:
    buffer.fill_(rank + 1)
    reduce(buffer)
    sync(device)
    expected = ranks * (ranks + 1) / 2
    if not torch.all(buffer == expected):
        raise SystemExit(f"error: all-reduce gave {buffer.flatten()[0].item()} where {expected} was due")


def time_eager(reduce, buffer: torch.Tensor, iters: int, trials: int, device: str) -> float:
    for _ in range(5):
        reduce(buffer)
    sync(device)
    per_call = []
    for _ in range(trials):
        dist.barrier()
        sync(device)
        start = time.perf_counter()
        for _ in range(iters):
            reduce(buffer)
        sync(device)
        per_call.append((time.perf_counter() - start) / iters)
    return statistics.median(per_call)


def graph_of(body, iters: int) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            body()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def replay_seconds(graph: torch.cuda.CUDAGraph, trials: int) -> float:
    per_replay = []
    for _ in range(trials):
        dist.barrier()
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        per_replay.append(begin.elapsed_time(end) / 1e3)
    return statistics.median(per_replay)


def time_graph(reduce, buffer: torch.Tensor, iters: int, trials: int) -> float:
    return replay_seconds(graph_of(lambda: reduce(buffer), iters), trials) / iters


CHAIN_HIDDEN = 4096  # the GEMV before each all-reduce reads CHAIN_HIDDEN x (message elements)
CHAIN_MAX_BYTES = 1 << 20  # past 1 MB the GEMV's weight alone would be GBs


def time_chain(reduce, buffer: torch.Tensor, iters: int, trials: int) -> tuple[float, float] | None:
    """(seconds one all-reduce adds between dependent GEMVs, seconds of one GEMV alone)."""
    if buffer.numel() * buffer.element_size() > CHAIN_MAX_BYTES:
        return None
    weight = torch.randn(buffer.numel(), CHAIN_HIDDEN, device="cuda", dtype=buffer.dtype) * 0.01
    x = torch.randn(1, CHAIN_HIDDEN, device="cuda", dtype=buffer.dtype)

    def gemv():
        torch.matmul(x, weight.t(), out=buffer.view(1, -1))

    def gemv_then_reduce():
        gemv()
        reduce(buffer)

    alone = replay_seconds(graph_of(gemv, iters), trials)
    both = replay_seconds(graph_of(gemv_then_reduce, iters), trials)
    return (both - alone) / iters, alone / iters


def nccl_reduce(buffer: torch.Tensor) -> None:
    dist.all_reduce(buffer)


def symm_mem_reducer(max_bytes: int, dtype):
    """One-shot all-reduce over symmetric memory (peer loads over NVLink; no multicast)."""
    import torch.distributed._symmetric_memory as symm_mem

    group = dist.group.WORLD.group_name
    symm = symm_mem.empty(max_bytes // (torch.finfo(dtype).bits // 8), device="cuda", dtype=dtype)
    symm_mem.rendezvous(symm, group)

    def reduce(buffer: torch.Tensor) -> None:
        staged = symm[:buffer.numel()]
        staged.copy_(buffer.view(-1))
        torch.ops.symm_mem.one_shot_all_reduce_out(staged, "sum", group, buffer.view(-1))
    return reduce


def topology() -> str:
    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi topo -m failed: {exc}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="bytes, comma-separated")
    parser.add_argument("--iters", type=int, default=200, help="all-reduces per timed trial")
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--impl", choices=["nccl", "symm_mem"], default="nccl")
    args = parser.parse_args()
    device = args.device
    if device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("error: --device cuda needs a CUDA GPU (use --device cpu for gloo)")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend="nccl" if device == "cuda" else "gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.impl == "symm_mem" and device != "cuda":
        raise SystemExit("error: --impl symm_mem needs CUDA GPUs")
    reduce = symm_mem_reducer(max(sizes), dtype) if args.impl == "symm_mem" else nccl_reduce
    rows = []
    for nbytes in sizes:
        element = torch.finfo(dtype).bits // 8
        buffer = torch.empty(max(nbytes // element, 1), dtype=dtype, device=device)
        check_sum(buffer, rank, ranks, device, reduce)
        buffer.normal_()
        eager = time_eager(reduce, buffer, args.iters, args.trials, device)
        graph = chain = None
        if device == "cuda":
            graph = time_graph(reduce, buffer, args.iters, args.trials)
            chain = time_chain(reduce, buffer, args.iters, args.trials)
        row = {"bytes": nbytes, "eager_us": eager * 1e6, "eager_bus_gbps": bus_gbps(nbytes, eager, ranks),
               "graph_us": graph * 1e6 if graph else None,
               "graph_bus_gbps": bus_gbps(nbytes, graph, ranks) if graph else None,
               "chain_added_us": chain[0] * 1e6 if chain else None,
               "chain_gemv_us": chain[1] * 1e6 if chain else None}
        rows.append(row)
        del buffer
    if rank == 0:
        result = {
            "backend": dist.get_backend(), "impl": args.impl, "ranks": ranks, "device": device, "dtype": str(dtype),
            "iters": args.iters, "trials": args.trials, "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if device == "cuda" else None,
            "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
            "env": {k: os.environ.get(k) for k in NCCL_ENV},
            "topology": topology() if device == "cuda" else None,
            "rows": rows,
        }
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"allreduce_{args.impl}.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
        print(f"all-reduce ({args.impl}), {ranks} ranks, {result['backend']} {result['nccl'] or ''} "
              f"on {result['gpu'] or 'cpu'}")
        print(f"{'bytes':>9} {'eager us':>9} {'eager busbw GB/s':>17} {'graph us':>9} {'graph busbw GB/s':>17} "
              f"{'in chain +us':>12} {'gemv us':>8}")

        def cell(value, width, digits):
            return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"
        for row in rows:
            print(f"{row['bytes']:>9} {row['eager_us']:9.2f} {row['eager_bus_gbps']:17.2f} "
                  f"{cell(row['graph_us'], 9, 2)} {cell(row['graph_bus_gbps'], 17, 1)} "
                  f"{cell(row['chain_added_us'], 12, 2)} {cell(row['chain_gemv_us'], 8, 2)}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

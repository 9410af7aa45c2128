"""The parallel part of a `vllm serve` line and the Ray commands that start a multi-box topology:
one home for them, shared by plan's rows (--tp) and the scale-out plans (--boxes / --gpus)."""
from __future__ import annotations

from roofline.data import load_table
from roofline.predict.hardware import Hardware
from roofline.predict.links import Link
from roofline.predict.topology import Topology

RAY_PORT = 6379


def workload_flags(context: int, concurrency: int, kv_cache_dtype: str) -> list[str]:
    """vLLM's flags for the workload a plan was made for: the context it was priced at, the
    sequences it runs at once, and an FP8 KV cache as vLLM spells it (bf16 / auto: vLLM's default)."""
    flags = [f"--max-model-len={context}"]
    if concurrency > 1:
        flags.append(f"--max-num-seqs={concurrency}")
    if kv_cache_dtype.startswith("fp8"):
        flags.append(f"--kv-cache-dtype={kv_cache_dtype}")
    return flags


def unified_memory_flags(hardware: Hardware, weight_bytes_per_rank: float) -> list[str]:
    """A fixed --kv-cache-memory-bytes on a unified-memory box, whose memory profile vLLM misjudges
    (serving.toml [unified]): the usable memory less a safety margin, the weights on a rank and
    vLLM's overhead (rules.toml [memory]). Every serve line for such a box carries it."""
    unified = load_table("serving")["unified"]
    if hardware.key not in unified["hardware"]:
        return []
    kv_bytes = int(hardware.usable_memory_gb * 1e9 * (1 - unified["safety_margin"]) - weight_bytes_per_rank
                   - load_table("rules")["memory"]["overhead_gb"] * 1e9)
    return [f"--kv-cache-memory-bytes={kv_bytes}"] if kv_bytes > 0 else []


def parallel_flags(topology: Topology, boxes: int) -> list[str]:
    """vLLM's flags for this split (none for one device); Ray as the executor across boxes."""
    flags = []
    if topology.tp > 1 or topology.devices > 1:
        flags.append(f"--tensor-parallel-size={topology.tp}")
    if topology.pp > 1:
        flags.append(f"--pipeline-parallel-size={topology.pp}")
    if topology.dp > 1:
        flags.append(f"--data-parallel-size={topology.dp}")
    if topology.expert_parallel:
        flags.append("--enable-expert-parallel")
    if boxes > 1:
        flags.append("--distributed-executor-backend=ray")
        if topology.dp > 1:
            flags.append("--data-parallel-backend=ray")
    return flags


def ray_setup(boxes: int, network: Link | None) -> list[str]:
    """The commands to run on each box before `vllm serve` on the head (none for one box)."""
    if boxes <= 1:
        return []
    out = []
    if network is not None and network.key.startswith("cx7"):
        out.append("export NCCL_SOCKET_IFNAME=<ConnectX-7 interface> NCCL_IB_HCA=<its RoCE devices>"
                   "   # every box, before ray start (else NCCL takes the management port)")
    return out + [f"ray start --head --port={RAY_PORT}   # box 1 (head)",
                  f"ray start --address=<head-ip>:{RAY_PORT}   # " + (f"boxes 2..{boxes}" if boxes > 2 else "box 2")]

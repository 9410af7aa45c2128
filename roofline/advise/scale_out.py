"""Which split of a model over N devices helps: every TP x PP x DP (x EP) topology vLLM can run,
refused ones with vLLM's reason, the rest ranked by predicted tok/s, each with the commands that
start it (Ray for more than one box)."""
from __future__ import annotations

from dataclasses import dataclass, field

from roofline.errors import RooflineError
from roofline.model.inventory import Inventory
from roofline.predict.hardware import Hardware
from roofline.predict.kernels import KernelProfile
from roofline.predict.scale_out import Placement, StepCost, Topology, place, refusal, step_cost, topologies
from roofline.predict.tensor_parallel import Link, default_link, links, network_link

SCHEMA = "roofline.scaleout/1"
RAY_PORT = 6379


@dataclass
class TopologyResult:
    topology: Topology
    boxes: int
    refused_reason: str | None
    placement: Placement | None = None
    single: StepCost | None = None
    per_rank_weight_bytes: float = 0.0
    per_rank_bytes_per_token: float = 0.0
    comm_bytes_per_token: float = 0.0
    comm_ms_per_token: float = 0.0
    single_stream_tok_s: float = 0.0
    aggregate_tok_s: float = 0.0
    pipeline_bubble: float = 0.0
    commands: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        t = self.topology
        out = {
            "label": t.label, "tp": t.tp, "pp": t.pp, "ep": t.ep, "dp": t.dp, "expert_parallel": t.expert_parallel,
            "devices": t.devices, "boxes": self.boxes,
            "per_rank_weight_bytes": self.per_rank_weight_bytes,
            "per_rank_bytes_per_token": self.per_rank_bytes_per_token,
            "comm_bytes_per_token": self.comm_bytes_per_token, "comm_ms_per_token": self.comm_ms_per_token,
            "single_stream_tok_s": self.single_stream_tok_s, "aggregate_tok_s": self.aggregate_tok_s,
            "pipeline_bubble": self.pipeline_bubble, "refused_reason": self.refused_reason,
            "commands": self.commands, "links": {}, "collectives": [], "stages": [],
        }
        if self.placement is not None:
            out["links"] = {group: link.key for group, link in (
                ("tp", self.placement.tp_link), ("pp", self.placement.pp_link), ("ep", self.placement.ep_link))
                if link is not None}
        if self.single is not None:
            out["collectives"] = [c.to_json() for s in self.single.stages for c in s.collectives]
            if self.single.handoff:
                out["collectives"].append(self.single.handoff.to_json())
            out["stages"] = [{"layers": [s.layers.start, s.layers.stop], "weight_bytes": s.weight_bytes,
                              "bytes_per_token": s.bytes_per_step, "kernels": s.kernels,
                              "memory_ms": s.memory_s * 1e3, "launch_ms": s.launch_s * 1e3,
                              "comm_ms": s.comm_s * 1e3, "compute_ms": s.compute_s * 1e3}
                             for s in self.single.stages]
        return out


@dataclass
class ScaleOutPlan:
    model_id: str
    hardware: Hardware
    boxes: int
    devices_per_box: int
    concurrency: int
    context: int
    in_box: Link | None
    network: Link | None
    results: list[TopologyResult]
    kernel_origin: str

    @property
    def ranked(self) -> list[TopologyResult]:
        return [r for r in self.results if r.refused_reason is None]

    @property
    def refused(self) -> list[TopologyResult]:
        return [r for r in self.results if r.refused_reason is not None]

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA, "model": self.model_id, "hardware": self.hardware.key,
            "hardware_name": self.hardware.name, "boxes": self.boxes, "devices_per_box": self.devices_per_box,
            "devices": self.boxes * self.devices_per_box, "concurrency": self.concurrency, "context": self.context,
            "rank_by": "single_stream_tok_s" if self.concurrency == 1 else "aggregate_tok_s",
            "kernel_counts": self.kernel_origin,
            "links": [link.to_json() for link in (self.in_box, self.network) if link is not None],
            "topologies": [r.to_json() for r in self.ranked + self.refused],
        }


def _named_link(name: str, scope: str) -> Link:
    """--link / --network by its hardware.toml key, of the scope it is asked for."""
    link = links().get(name)
    if link is None or link.scope != scope:
        known = ", ".join(k for k, v in links().items() if v.scope == scope)
        raise RooflineError(f"unknown {'in-box' if scope == 'box' else 'network'} link {name!r}; known: {known}")
    return link


def _in_box_link(hardware: Hardware, name: str | None) -> Link:
    if name:
        return _named_link(name, "box")
    link = default_link(hardware)
    return link if link.scope == "box" else links()["pcie5"]


def _network_link(hardware: Hardware, name: str | None, boxes: int) -> Link:
    return _named_link(name, "network") if name else network_link(hardware, boxes)


def commands(model_id: str, topology: Topology, boxes: int, network: Link | None) -> list[str]:
    """The commands that start this topology: Ray on each box when there is more than one, then
    the vllm serve line (on the head box)."""
    flags = [f"--tensor-parallel-size {topology.tp}"]
    if topology.pp > 1:
        flags.append(f"--pipeline-parallel-size {topology.pp}")
    if topology.dp > 1:
        flags.append(f"--data-parallel-size {topology.dp}")
    if topology.expert_parallel:
        flags.append("--enable-expert-parallel")
    if boxes == 1:
        return [f"vllm serve {model_id} " + " ".join(flags)]
    flags.append("--distributed-executor-backend ray")
    if topology.dp > 1:
        flags.append("--data-parallel-backend ray")
    out = []
    if network is not None and network.key.startswith("cx7"):
        out.append("export NCCL_SOCKET_IFNAME=<ConnectX-7 interface> NCCL_IB_HCA=<its RoCE devices>"
                   "   # every box, before ray start (else NCCL takes the management port)")
    return out + [f"ray start --head --port={RAY_PORT}   # box 1 (head)",
                  f"ray start --address=<head-ip>:{RAY_PORT}   # " + (f"boxes 2..{boxes}" if boxes > 2 else "box 2"),
                  f"vllm serve {model_id} " + " ".join(flags) + "   # box 1"]


def _replica_batches(concurrency: int, dp: int) -> list[int]:
    return [concurrency // dp + (1 if i < concurrency % dp else 0) for i in range(dp)]


def evaluate(inventory: Inventory, hardware: Hardware, topology: Topology, devices_per_box: int,
             in_box: Link | None, network: Link | None, concurrency: int, context: int,
             kv_cache_dtype: str, kernels: KernelProfile | None) -> TopologyResult:
    boxes = -(-topology.devices // devices_per_box)
    reason = refusal(inventory.config or {}, topology)
    if reason is None and boxes > 1 and network is not None and boxes > network.max_ranks:
        reason = (f"{boxes} boxes over {network.name}, which joins at most {network.max_ranks} "
                  f"(roofline/data/hardware.toml [link.{network.key}])")
    result = TopologyResult(topology, boxes, reason)
    if reason is not None:
        return result
    placement = place(topology, devices_per_box, in_box, network)
    single = step_cost(inventory, hardware, topology, placement, 1, context, kv_cache_dtype, kernels)
    result.placement, result.single = placement, single
    result.per_rank_weight_bytes = max(s.weight_bytes for s in single.stages)
    usable = hardware.usable_memory_gb * 1e9
    if result.per_rank_weight_bytes > usable:
        result.refused_reason = (f"does not fit: {result.per_rank_weight_bytes / 1e9:.1f} GB of weights per rank, "
                                 f"{hardware.name} has {hardware.usable_memory_gb:g} GB usable")
        return result
    result.per_rank_bytes_per_token = max(s.bytes_per_step for s in single.stages)
    result.comm_bytes_per_token = single.comm_bytes()
    result.comm_ms_per_token = single.comm_s() * 1e3
    result.single_stream_tok_s = single.tok_s(1)
    result.pipeline_bubble = 1.0 - 1.0 / topology.pp
    batches = [b for b in _replica_batches(concurrency, topology.dp) if b > 0]
    steps = {b: (single if b == 1 else step_cost(inventory, hardware, topology, placement, b, context,
                                                 kv_cache_dtype, kernels)) for b in set(batches)}
    if topology.expert_parallel and topology.dp > 1:
        # the replicas step together through the MoE layers: the slowest sets every replica's pace
        period = max(b / steps[b].tok_s(b) for b in batches)
        result.aggregate_tok_s = sum(batches) / period
    else:
        result.aggregate_tok_s = sum(steps[b].tok_s(b) for b in batches)
    result.commands = commands(inventory.model_id, topology, boxes, network if boxes > 1 else None)
    return result


def scale_out(inventory: Inventory, hardware: Hardware, *, boxes: int = 1, devices_per_box: int = 1,
              concurrency: int = 1, context: int = 4096, kv_cache_dtype: str = "auto",
              in_box_link: str | None = None, network: str | None = None,
              kernels: KernelProfile | None = None) -> ScaleOutPlan:
    if boxes < 1 or devices_per_box < 1:
        raise RooflineError("--boxes and --gpus must be at least 1")
    devices = boxes * devices_per_box
    in_box = _in_box_link(hardware, in_box_link) if devices_per_box > 1 else None
    net = _network_link(hardware, network, boxes) if boxes > 1 else None
    moe = bool(inventory.shape.num_experts)
    results = [evaluate(inventory, hardware, topology, devices_per_box, in_box, net, concurrency, context,
                        kv_cache_dtype, kernels) for topology in topologies(devices, moe)]
    key = (lambda r: r.single_stream_tok_s) if concurrency == 1 else (lambda r: r.aggregate_tok_s)
    ranked = sorted((r for r in results if r.refused_reason is None), key=key, reverse=True)
    refused = [r for r in results if r.refused_reason is not None]
    origin = kernels.origin if kernels is not None else "table"
    return ScaleOutPlan(inventory.model_id, hardware, boxes, devices_per_box, concurrency, context, in_box, net,
                        ranked + refused, origin)

"""Which split of a model over N devices helps: every TP x PP x DP (x EP) topology vLLM can run,
refused ones with vLLM's reason, the rest ranked by the step model's tok/s (roofline.predict.step),
each with the commands that start it (Ray for more than one box)."""
from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field, replace

from roofline.errors import RooflineError
from roofline.model.inventory import Inventory
from roofline.model.limits import check_max_model_len
from roofline.predict.hardware import Hardware
from roofline.predict.kernels import KernelProfile
from roofline.predict.links import Link, box_devices, in_box_link, named_link, network_link
from roofline.predict.step import StepConfig, StepTime, price_step
from roofline.predict.topology import Placement, Topology, place, refusal, topologies

from .serve import parallel_flags, ray_setup, unified_memory_flags, workload_flags

SCHEMA = "roofline.scaleout/1"


@dataclass
class TopologyResult:
    topology: Topology
    boxes: int
    refused_reason: str | None
    placement: Placement | None = None
    single: StepTime | None = None
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
            out["collectives"] = [c.to_json() for c in self.single.collectives]
            out["stages"] = [{"layers": t["layers"], "weight_bytes": t["weight_bytes"],
                              "bytes_per_token": t["bytes_per_step"], "kernels": t["kernels"],
                              "memory_ms": t["memory_ms"], "launch_ms": t["launch_ms"],
                              "comm_ms": t["comm_ms"], "compute_ms": t["compute_ms"]}
                             for t in self.single.stage_totals()]
            out["step"] = self.single.to_json()
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


def commands(model: str, topology: Topology, boxes: int, network: Link | None, workload: list[str]) -> list[str]:
    """The commands that start this topology: Ray on each box when there is more than one, then
    the vllm serve line (on the head box): the model as the user named it, the workload's flags as
    the single-box plan prints them, then the split's."""
    serve = " ".join(["vllm", "serve", shlex.quote(model), *workload, *parallel_flags(topology, boxes)])
    return ray_setup(boxes, network) + [serve + ("   # box 1" if boxes > 1 else "")]


def evaluate(inventory: Inventory, hardware: Hardware, topology: Topology, devices_per_box: int,
             in_box: Link | None, network: Link | None, concurrency: int, context: int,
             kv_cache_dtype: str, kernels: KernelProfile | None, served_as: str | None = None) -> TopologyResult:
    boxes = -(-topology.devices // devices_per_box)
    reason = refusal(inventory.config or {}, topology)
    if reason is None and boxes > 1 and network is not None and boxes > network.max_ranks:
        reason = (f"{boxes} boxes over {network.name}, which joins at most {network.max_ranks} "
                  f"(roofline/data/hardware.toml [link.{network.key}])")
    result = TopologyResult(topology, boxes, reason)
    if reason is not None:
        return result
    placement = place(topology, devices_per_box, in_box, network)
    config = StepConfig(batch=1, context=context, kv_cache_dtype=kv_cache_dtype, topology=topology,
                        placement=placement, kernels=kernels)
    single = price_step(inventory, hardware, config)
    result.placement, result.single = placement, single
    result.per_rank_weight_bytes = single.weight_bytes_per_rank
    usable = hardware.usable_memory_gb * 1e9
    if result.per_rank_weight_bytes > usable:
        result.refused_reason = (f"does not fit: {result.per_rank_weight_bytes / 1e9:.1f} GB of weights per rank, "
                                 f"{hardware.name} has {hardware.usable_memory_gb:g} GB usable")
        return result
    result.per_rank_bytes_per_token = single.bytes_per_step_per_rank
    result.comm_bytes_per_token = single.comm_bytes
    result.comm_ms_per_token = single.comm_s * 1e3
    result.single_stream_tok_s = single.tok_s
    result.pipeline_bubble = single.pipeline_bubble
    result.aggregate_tok_s = single.tok_s if concurrency == 1 else \
        price_step(inventory, hardware, replace(config, batch=concurrency)).tok_s
    result.commands = commands(served_as or inventory.model_id, topology, boxes, network if boxes > 1 else None,
                               workload_flags(context, concurrency, kv_cache_dtype)
                               + unified_memory_flags(hardware, single.weight_bytes_per_rank))
    return result


def scale_out(inventory: Inventory, hardware: Hardware, *, boxes: int = 1, devices_per_box: int = 1,
              concurrency: int = 1, context: int = 4096, kv_cache_dtype: str = "auto",
              in_box_link_name: str | None = None, network: str | None = None,
              kernels: KernelProfile | None = None, served_as: str | None = None) -> ScaleOutPlan:
    """Every split of boxes x devices_per_box ranked (refusals after). `served_as`: the model as the
    user named it (a path or hub id), for the serve lines; the inventory's id otherwise."""
    if boxes < 1 or devices_per_box < 1:
        raise RooflineError("--boxes and --gpus must be at least 1")
    per_box = box_devices(hardware)
    if per_box is not None and devices_per_box > per_box:
        raise RooflineError(f"--gpus {devices_per_box}: one {hardware.name} box holds {per_box} device"
                            f"{'s' if per_box != 1 else ''} (roofline/data/hardware.toml links); use --boxes for more")
    # a link named is checked whether or not this split crosses it: a typo is never ignored
    if in_box_link_name is not None:
        named_link(in_box_link_name, "box")
        if devices_per_box == 1:
            raise RooflineError(f"--link {in_box_link_name} joins GPUs inside one box, and each box has one "
                                "(--gpus 1); the link between boxes is --network")
    if network is not None:
        named_link(network, "network")
        if boxes == 1:
            raise RooflineError(f"--network {network} joins boxes, and this is one box (--boxes 1)")
    check_max_model_len(inventory.config, context, "--context")
    devices = boxes * devices_per_box
    in_box = in_box_link(hardware, in_box_link_name) if devices_per_box > 1 else None
    net = network_link(hardware, boxes, network) if boxes > 1 else None
    moe = bool(inventory.shape.num_experts)
    results = [evaluate(inventory, hardware, topology, devices_per_box, in_box, net, concurrency, context,
                        kv_cache_dtype, kernels, served_as) for topology in topologies(devices, moe)]
    key = (lambda r: r.single_stream_tok_s) if concurrency == 1 else (lambda r: r.aggregate_tok_s)
    ranked = sorted((r for r in results if r.refused_reason is None), key=key, reverse=True)
    refused = [r for r in results if r.refused_reason is not None]
    if not ranked:
        reasons = Counter(r.refused_reason for r in refused).most_common(2)
        raise RooflineError(f"no split of {inventory.model_id} over {boxes} box{'es' if boxes > 1 else ''} x "
                            f"{devices_per_box} GPU{'s' if devices_per_box > 1 else ''} works: {len(refused)} refused, "
                            f"e.g. {'; '.join(reason for reason, _ in reasons)}")
    origin = kernels.origin if kernels is not None else "table"
    return ScaleOutPlan(inventory.model_id, hardware, boxes, devices_per_box, concurrency, context, in_box, net,
                        ranked + refused, origin)

"""Scale-out: a model over N devices as vLLM splits it — TP x PP x DP, with or without expert
parallelism — and what one decode step then costs on each rank (pure arithmetic).

vLLM's rank order puts TP innermost, then PP, then DP (global rank = (dp x pp + pp_rank) x tp +
tp_rank), so a TP group is consecutive ranks and crosses boxes only when it is wider than a box.
With --enable-expert-parallel the experts of each PP stage are spread whole over its tp x dp
ranks (ep = tp x dp); attention and dense MLPs stay tensor-parallel inside each DP replica.

One step of a replica that holds b sequences runs k = min(b, pp) micro-batches of m = ceil(b / k)
through the stages. A stage costs, per rank,

    max(bytes / (bandwidth x efficiency), FLOPs / tensor peak) + kernels x graph floor + collectives

and a micro-batch's round trip is the sum of the stages plus (pp - 1) hand-offs of the hidden
state and residual. With k micro-batches in flight a replica decodes b / max(round trip,
k x slowest stage) tokens per second: one stream over pp stages leaves (pp - 1) / pp of them idle
(the pipeline bubble). Every collective costs latency + factor x message / bandwidth on the link it
crosses (roofline/data/hardware.toml [link.*]). The experts a rank reads under expert parallelism
are the mean over ranks (uniform routing); the busiest rank reads more.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.inventory import Inventory

from .cuda_graph import applies_to as graphs_apply
from .cuda_graph import launch_costs
from .hardware import Hardware
from .kernels import KernelProfile, estimate_kernels
from .tensor_parallel import (
    ACTIVATION_BYTES,
    KV_PROJECTIONS,
    SHARDED_ROLES,
    Link,
    allreduce_factor,
    SIZE_RULES,
    config_value,
    tp_refusal,
)
from .traffic import Scenario, Traffic, compute_traffic

EXPERT_ROLES = ("moe_experts",)
MIXER_OUT = ("attention_out", "linear_attn_out", "mamba_out")
MLP_ROLES = ("mlp", "moe_experts", "shared_expert")
FIRST_STAGE_ROLES = ("embedding",)  # everything outside the layers but these sits on the last stage
RESIDUAL_COPIES = 2  # a stage hands over the hidden state and the residual (IntermediateTensors)


@dataclass(frozen=True)
class Topology:
    tp: int
    pp: int
    dp: int
    expert_parallel: bool = False

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def ep(self) -> int:
        return self.tp * self.dp if self.expert_parallel else 1

    @property
    def label(self) -> str:
        parts = [f"{name}{size}" for name, size in (("TP", self.tp), ("PP", self.pp), ("DP", self.dp)) if size > 1]
        label = " x ".join(parts) or "1 device"
        return label + (f" + EP{self.ep}" if self.expert_parallel else "")


def topologies(devices: int, moe: bool) -> list[Topology]:
    """Every TP x PP x DP product of `devices`, each MoE one also with expert parallelism."""
    if devices < 1:
        raise RooflineError("a topology needs at least one device")
    out = []
    for tp in range(1, devices + 1):
        if devices % tp:
            continue
        for pp in range(1, devices // tp + 1):
            if (devices // tp) % pp:
                continue
            dp = devices // tp // pp
            out.append(Topology(tp, pp, dp))
            if moe and tp * dp > 1:
                out.append(Topology(tp, pp, dp, expert_parallel=True))
    return out


def refusal(config: dict, topology: Topology) -> str | None:
    """vLLM's reason for refusing this split of the config (roofline/data/parallel.toml), or None."""
    reason = tp_refusal(config, topology.tp, expert_parallel=topology.expert_parallel)
    if reason:
        return reason
    table = load_table("parallel")
    checks = [(rule, topology.pp, "pp") for rule in table.get("pp_rule", ())]
    if topology.expert_parallel:
        checks += [(rule, topology.ep, "ep") for rule in table.get("ep_rule", ())]
    for rule, size, name in checks:
        value = config_value(config, rule["fields"])
        if value is not None and size > 1 and not SIZE_RULES[rule["rule"]](value, size):
            return rule["message"].format(value=value, **{name: size})
    return None


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """vLLM's get_pp_indices: num_layers // pp per stage, the remainder one each to the stages
    just before the last."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    out, start = [], 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out


@dataclass(frozen=True)
class Placement:
    """Which link each group's collectives cross, given devices per box (TP innermost)."""
    ranks_per_box: int
    boxes: int
    tp_link: Link | None
    pp_link: Link | None
    ep_link: Link | None


def place(topology: Topology, ranks_per_box: int, in_box: Link | None, network: Link | None) -> Placement:
    def box(rank: int) -> int:
        return rank // ranks_per_box

    def link_for(ranks: list[int]) -> Link | None:
        if len(ranks) < 2:
            return None
        return network if len({box(r) for r in ranks}) > 1 else in_box

    tp, pp, dp = topology.tp, topology.pp, topology.dp
    tp_link = link_for(list(range(tp)))
    pp_link = None
    if pp > 1:  # the hand-off between stage s and s + 1 of replica 0, the widest crossing wins
        hops = [link_for([s * tp, (s + 1) * tp]) for s in range(pp - 1)]
        pp_link = network if any(h is network for h in hops) else in_box
    ep_link = None
    if topology.expert_parallel and dp > 1:  # the EP group: one PP stage's tp x dp ranks
        ep_link = link_for([(d * pp) * tp + t for d in range(dp) for t in range(tp)])
    return Placement(ranks_per_box, -(-topology.devices // ranks_per_box), tp_link, pp_link, ep_link)


@dataclass
class Collective:
    group: str  # tp | pp | ep
    kind: str  # all_reduce | all_gather | reduce_scatter | send
    where: str
    per_step: int
    message_bytes: float
    link: str
    seconds_each: float

    def to_json(self) -> dict:
        return {"group": self.group, "kind": self.kind, "where": self.where, "per_step": self.per_step,
                "message_bytes": self.message_bytes, "link": self.link, "us_each": self.seconds_each * 1e6}


@dataclass
class StageCost:
    layers: range
    weight_bytes: float  # resident on each rank of the stage
    bytes_per_step: float  # read by each rank per step
    flops_per_step: float
    kernels: float
    collectives: list[Collective] = field(default_factory=list)
    memory_s: float = 0.0
    compute_s: float = 0.0
    launch_s: float = 0.0

    @property
    def comm_s(self) -> float:
        return sum(c.per_step * c.seconds_each for c in self.collectives)

    @property
    def seconds(self) -> float:
        return max(self.memory_s, self.compute_s) + self.launch_s + self.comm_s


@dataclass
class StepCost:
    stages: list[StageCost]
    handoff: Collective | None
    micro_batches: int
    micro_batch: int

    @property
    def round_trip_s(self) -> float:
        hand = self.handoff.per_step * self.handoff.seconds_each if self.handoff else 0.0
        return sum(s.seconds for s in self.stages) + hand

    def tok_s(self, sequences: int) -> float:
        slowest = max(s.seconds for s in self.stages)
        hand = self.handoff.seconds_each if self.handoff else 0.0
        period = max(self.round_trip_s, self.micro_batches * (slowest + hand))
        return sequences / period if period > 0 else float("inf")

    def comm_s(self) -> float:
        hand = self.handoff.per_step * self.handoff.seconds_each if self.handoff else 0.0
        return sum(s.comm_s for s in self.stages) + hand

    def comm_bytes(self) -> float:
        total = sum(c.per_step * c.message_bytes for s in self.stages for c in s.collectives)
        return total + (self.handoff.per_step * self.handoff.message_bytes if self.handoff else 0.0)


def _divisor(module, topology: Topology, kv_split: int) -> float:
    """How many ranks of one stage share this module's bytes (1: replicated on each)."""
    if module.role in EXPERT_ROLES:
        return topology.ep if topology.expert_parallel else topology.tp
    if module.role == "attention_qkv" and module.name.endswith(KV_PROJECTIONS):
        return kv_split
    return topology.tp if module.role in SHARDED_ROLES else 1


def _stage_of(layer: int | None, role: str, stages: list[range]) -> int:
    if layer is not None and role != "mtp":
        for index, layers in enumerate(stages):
            if layer in layers:
                return index
        return len(stages) - 1
    return 0 if role in FIRST_STAGE_ROLES else len(stages) - 1


def _active_params(module, inventory: Inventory) -> float:
    if module.role in EXPERT_ROLES and inventory.shape.num_experts:
        return module.params * inventory.shape.experts_per_token / inventory.shape.num_experts
    return module.params


def step_cost(inventory: Inventory, hardware: Hardware, topology: Topology, placement: Placement,
              sequences: int, context: int, kv_cache_dtype: str = "auto",
              kernels: KernelProfile | None = None) -> StepCost:
    """One decode step of one replica holding `sequences` streams."""
    shape = inventory.shape
    pp = topology.pp
    stages_layers = stage_layers(shape.num_layers, pp)
    micro_batches = max(1, min(sequences, pp))
    micro = max(1, math.ceil(sequences / micro_batches))
    # with DP + EP the MoE layers see every replica's micro-batch (vLLM steps the replicas together)
    traffic = compute_traffic(inventory, Scenario(batch=micro, context=context, kv_cache_dtype=kv_cache_dtype))
    expert_batch = micro * topology.dp if topology.expert_parallel else micro
    expert_traffic = traffic if expert_batch == micro else compute_traffic(
        inventory, Scenario(batch=expert_batch, context=context, kv_cache_dtype=kv_cache_dtype))
    kv_heads = min((a.kv_heads for a in shape.attention), default=topology.tp)
    kv_split = min(topology.tp, max(kv_heads, 1))
    stages = [StageCost(layers, 0.0, 0.0, 0.0, 0.0) for layers in stages_layers]
    for module, moved, expert_moved in zip(inventory.modules, traffic.modules, expert_traffic.modules):
        stage = stages[_stage_of(module.layer, module.role, stages_layers)]
        divisor = _divisor(module, topology, kv_split)
        stage.weight_bytes += module.nbytes / divisor
        if module.role in EXPERT_ROLES:
            stage.bytes_per_step += expert_moved.bytes_per_token * expert_batch / divisor
            stage.flops_per_step += 2 * _active_params(module, inventory) * expert_batch / divisor
        else:
            stage.bytes_per_step += moved.bytes_per_token * micro / divisor
            stage.flops_per_step += 2 * _active_params(module, inventory) * micro / divisor
    # KV cache and recurrent state: by each stage's share of the layers that hold them
    attention_layers = [a.layer for a in shape.attention] or [None]
    recurrent_layers = [r.layer for r in shape.recurrent] or [None]
    for stage in stages:
        kv_share = sum(1 for layer in attention_layers if layer in stage.layers) / len(attention_layers)
        state_share = sum(1 for layer in recurrent_layers if layer in stage.layers) / len(recurrent_layers)
        stage.bytes_per_step += traffic.kv_bytes_per_token * micro * kv_share / kv_split
        stage.bytes_per_step += traffic.state_bytes_per_token * micro * state_share / topology.tp
    # kernels: the layers' counts per stage; what runs outside the layers on the first / last stage
    profile = kernels or estimate_kernels(inventory)
    for layer, count in profile.per_layer().items():
        index = _stage_of(layer, "", stages_layers) if layer is not None else pp - 1
        stages[index].kernels += count
    graphs = graphs_apply(hardware)
    floor_s = launch_costs(hardware).graph_floor_us_per_kernel * 1e-6 if graphs else 0.0
    bandwidth = hardware.bandwidth_gbps * 1e9 * hardware.efficiency
    peak = hardware.tensor_tflops.get("bf16", 0.0) * 1e12  # 0: none stated, no compute roof
    message = shape.hidden_size * ACTIVATION_BYTES * micro
    for index, stage in enumerate(stages):
        stage.memory_s = stage.bytes_per_step / bandwidth
        stage.compute_s = stage.flops_per_step / peak if peak else 0.0
        stage.launch_s = stage.kernels * floor_s
        stage.collectives = _collectives(inventory, topology, placement, stage, index, pp, message, micro)
    handoff = None
    if pp > 1 and placement.pp_link is not None:
        hand_bytes = RESIDUAL_COPIES * message
        handoff = Collective("pp", "send", "stage hand-off (hidden state + residual)", pp - 1, hand_bytes,
                             placement.pp_link.key, placement.pp_link.collective_seconds(hand_bytes, 1.0))
    return StepCost(stages, handoff, micro_batches, micro)


def _layer_kinds(inventory: Inventory, layers: range) -> tuple[int, int, int]:
    """(mixer all-reduces, dense-MLP all-reduces, MoE layers) of the layers of one stage."""
    mixers, mlps, moe = set(), set(), set()
    for module in inventory.modules:
        if module.layer is None or module.layer not in layers or module.role == "mtp":
            continue
        if module.role in MIXER_OUT:
            mixers.add(module.layer)
        elif module.role in EXPERT_ROLES:
            moe.add(module.layer)
        elif module.role in MLP_ROLES:
            mlps.add(module.layer)
    return len(mixers), len(mlps - moe), len(moe)


def _collectives(inventory: Inventory, topology: Topology, placement: Placement, stage: StageCost,
                 index: int, pp: int, message: float, micro: int) -> list[Collective]:
    out: list[Collective] = []
    tp_link, ep_link = placement.tp_link, placement.ep_link
    mixers, mlps, moe_layers = _layer_kinds(inventory, stage.layers)
    if tp_link is not None:
        reduce = allreduce_factor(topology.tp)
        each = tp_link.collective_seconds(message, reduce)
        if index == 0:
            out.append(Collective("tp", "all_reduce", "vocab-parallel embedding", 1, message, tp_link.key, each))
        out.append(Collective("tp", "all_reduce", "after each token mixer (row-parallel out projection)",
                              mixers, message, tp_link.key, each))
        moe_by_tp = moe_layers if ep_link is None else 0
        if mlps + moe_by_tp:
            out.append(Collective("tp", "all_reduce", "after each MLP / MoE (row-parallel down projection)",
                                  mlps + moe_by_tp, message, tp_link.key, each))
        if index == pp - 1:
            logits = inventory.shape.vocab_size * ACTIVATION_BYTES * micro
            gather = (topology.tp - 1) / topology.tp
            out.append(Collective("tp", "all_gather", "vocab-parallel logits", 1, logits, tp_link.key,
                                  tp_link.collective_seconds(logits, gather)))
    if ep_link is not None and moe_layers:
        tokens_bytes = message * topology.dp  # every replica's micro-batch meets in the MoE layer
        factor = (topology.ep - 1) / topology.ep
        each = ep_link.collective_seconds(tokens_bytes, factor)
        out.append(Collective("ep", "all_gather", "MoE dispatch (allgather_reducescatter)", moe_layers,
                              tokens_bytes, ep_link.key, each))
        out.append(Collective("ep", "reduce_scatter", "MoE combine (allgather_reducescatter)", moe_layers,
                              tokens_bytes, ep_link.key, each))
    return [c for c in out if c.per_step > 0]

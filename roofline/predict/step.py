"""One decode step of a serving configuration: the one time model behind every tok/s roofline prints
(audit, kernels, plan and its recommendations, plan --tp / --boxes / --gpus, capacity's curve,
doctor, compare, validate). Pure arithmetic.

A step of a data-parallel replica holding b sequences runs k = min(b, pp) micro-batches of
m = ceil(b / k) sequences through its pipeline stages. Each stage is a list of segments, one per
decoder layer plus what runs outside the layers (the embedding on the first stage, the final norm,
lm_head, MTP head and the step's own kernels on the last), and every segment costs, on each rank:

    memory   = bytes / (bandwidth x efficiency x backend's relative efficiency)
               bytes: the weights its modules read (MoE experts by the routing), the KV cache of its
               attention layer, the recurrent state of its GDN / Mamba layer, each divided over the
               ranks that share it (roofline/predict/topology.py), + an emulated kernel's BF16 copy;
               the weights of a weight-only kernel that streams them slower than that (Marlin /
               Machete on Hopper: Backend.weight_gbps) at its own rate instead
    compute  = 2 x active params x tokens / (tensor throughput of the format's compute x utilization,
               a weight-only backend's own share for its GEMMs: Backend.gemm_utilization)
               + attention over the context
    graphs:  max(memory, compute) + kernels x graph floor                      + collectives
    eager:   max(max(memory, compute) + kernels x graph floor, kernels x host cost) + collectives

A micro-batch's round trip is the sum of the stages plus (pp - 1) hand-offs; with k micro-batches in
flight the replica's step period is max(round trip, k x (slowest stage + hand-off)). Tokens per
second follow: b x tokens per sequence per step (1, or 1 + a + ... + a^n with n draft tokens) /
period, summed over the replicas (in lockstep under expert parallelism). Every coefficient comes
with where it came from (StepTime.coefficients).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.architecture import config_int, text_config
from roofline.model.formats import formats, get_format
from roofline.model.inventory import Inventory
from roofline.model.roles import role_properties

from .backends import Backend, default_backend
from .bands import model_family
from .hardware import Hardware
from .kernels import KernelProfile, estimate_kernels
from .launch import LaunchCosts, launch_costs
from .links import allreduce_factor
from .topology import (
    ACTIVATION_BYTES,
    RESIDUAL_COPIES,
    SINGLE,
    SINGLE_DEVICE,
    Placement,
    Topology,
    in_box_link,
    kv_split,
    place,
    sharing_ranks,
    stage_layers,
)
from .traffic import Scenario, Traffic, compute_traffic, kv_bytes_by_layer, state_bytes_by_layer


@dataclass(frozen=True)
class StepConfig:
    """What a decode step depends on besides the checkpoint and the hardware."""

    batch: int = 1  # concurrent sequences, over all data-parallel replicas
    context: int = 1024  # tokens in each sequence's KV cache
    kv_cache_dtype: str = "auto"
    graphs: bool = True  # CUDA graphs (vLLM's default) or eager (--enforce-eager)
    backend: Backend | None = None  # GEMM / MoE backend of the main format; None: vLLM's default here
    topology: Topology = SINGLE
    placement: Placement | None = None  # which link each group crosses; None: one box of topology.devices
    speculative_tokens: int = 0
    acceptance_rate: float = 0.7
    routing: str = "uniform"  # MoE: uniform | shared (traffic.Scenario)
    kernels: KernelProfile | None = None  # a measured profile replaces the kernel table
    host_us_per_kernel: float | None = None  # --launch-us

    def scenario(self, batch: int) -> Scenario:
        return Scenario(batch=batch, context=self.context, kv_cache_dtype=self.kv_cache_dtype,
                        speculative_tokens=self.speculative_tokens, acceptance_rate=self.acceptance_rate,
                        routing=self.routing).validate()


@dataclass(frozen=True)
class Coefficient:
    name: str
    value: float | None  # None: the figure is unknown (and the term it feeds is left out)
    unit: str
    kind: str  # datasheet | calibrated | measured | estimate | prior | user | table | trace
    source: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Collective:
    group: str  # tp | pp | ep
    kind: str  # all_reduce | all_gather | reduce_scatter | send
    where: str
    per_step: int
    message_bytes: float
    link: str
    seconds_each: float

    @property
    def seconds(self) -> float:
        return self.per_step * self.seconds_each

    def to_json(self) -> dict:
        return {"group": self.group, "kind": self.kind, "where": self.where, "per_step": self.per_step,
                "message_bytes": self.message_bytes, "link": self.link, "us_each": self.seconds_each * 1e6}


@dataclass
class Segment:
    """One decoder layer (or the work outside the layers) on one rank of its stage."""

    layer: int | None  # None: outside the decoder layers
    where: str  # "layer" | "head" (embedding, first stage) | "tail" (final norm, lm_head, MTP, step)
    stage: int
    weight_bytes: float = 0.0  # read per step by each rank
    kv_bytes: float = 0.0
    state_bytes: float = 0.0
    extra_bytes: float = 0.0  # an emulated kernel's dequantized copy, written and read back
    backend_weight_bytes: float = 0.0  # of weight_bytes: the backend's format's (at its rate, where it has one)
    memory_at_datasheet_s: float = 0.0  # every byte at the datasheet bandwidth (x the backend's): what a fit scales
    backend_weights_at_datasheet_s: float = 0.0  # of those: the backend format's weights
    resident_bytes: float = 0.0  # weights held by each rank
    compute_s: float = 0.0
    kernels: float = 0.0  # launched with CUDA graphs (replayed)
    eager_kernels: float = 0.0  # launched one by one under --enforce-eager
    host_equiv: float = 0.0  # the host's other Python work in eager mode, in kernel launches' worth
    collectives: list[Collective] = field(default_factory=list)
    memory_s: float = 0.0
    compute_at_peak_s: float = 0.0  # the FLOPs at the datasheet tensor rate (no utilization): what a fit scales
    backend_compute_at_peak_s: float = 0.0  # of those: the backend format's GEMMs
    floor_s: float = 0.0
    host_s: float = 0.0

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes + self.state_bytes + self.extra_bytes

    @property
    def comm_s(self) -> float:
        return sum(c.seconds for c in self.collectives)

    def seconds(self, graphs: bool, memory_s: float | None = None) -> float:
        """`memory_s`: the segment's memory time at another efficiency (StepTime.per_stream_tok_s_at)."""
        memory = self.memory_s if memory_s is None else memory_s
        device = max(memory, self.compute_s) + self.floor_s
        return (device if graphs else max(device, self.host_s)) + self.comm_s

    def parts(self, graphs: bool) -> dict[str, float]:
        """The segment's seconds as additive parts: the roof that binds it, launches, collectives."""
        roof = max(self.memory_s, self.compute_s)
        if not graphs and self.host_s > roof + self.floor_s:  # the host cannot issue kernels fast enough
            return {"memory": 0.0, "compute": 0.0, "launch": self.host_s, "communication": self.comm_s}
        bound = "memory" if self.memory_s >= self.compute_s else "compute"
        parts = {"memory": 0.0, "compute": 0.0, "launch": self.floor_s, "communication": self.comm_s}
        parts[bound] = roof
        return parts


@dataclass
class ReplicaStep:
    """One step of one data-parallel replica holding `batch` sequences."""

    batch: int
    micro_batches: int
    micro_batch: int
    tokens_per_sequence: float  # tokens each sequence gains per step
    stages: list[list[Segment]]
    handoff: Collective | None
    traffic: Traffic  # of one micro-batch

    def stage_seconds(self, graphs: bool) -> list[float]:
        return [sum(s.seconds(graphs) for s in stage) for stage in self.stages]

    def round_trip_s(self, graphs: bool) -> float:
        return sum(self.stage_seconds(graphs)) + (self.handoff.seconds if self.handoff else 0.0)

    def period_s(self, graphs: bool) -> float:
        hand = self.handoff.seconds_each if self.handoff else 0.0
        return max(self.round_trip_s(graphs), self.micro_batches * (max(self.stage_seconds(graphs)) + hand))

    def tok_s(self, graphs: bool) -> float:
        return self.batch * self.tokens_per_sequence / self.period_s(graphs)

    @property
    def segments(self) -> list[Segment]:
        return [s for stage in self.stages for s in stage]


@dataclass
class Breakdown:
    """One micro-batch's round trip through the pipeline on one rank per stage: bytes, kernels and
    the step's seconds as additive parts (they sum to the step period), and the part that wins."""

    weight_bytes: float
    kv_bytes: float
    state_bytes: float
    extra_bytes: float
    kernels: float
    collectives: int
    memory_s: float
    compute_s: float
    launch_s: float
    communication_s: float
    pipeline_s: float  # micro-batches waiting for the slowest stage beyond one round trip
    memory_time_s: float  # raw terms, not split by which binds: all bytes at the achievable bandwidth,
    compute_time_s: float  # all FLOPs at the achievable rate, all kernels x the mode's launch cost
    launch_time_s: float

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes + self.state_bytes + self.extra_bytes

    @property
    def seconds(self) -> float:
        return self.memory_s + self.compute_s + self.launch_s + self.communication_s + self.pipeline_s

    @property
    def bound(self) -> str:
        parts = {"memory": self.memory_s, "compute": self.compute_s, "launch": self.launch_s,
                 "communication": self.communication_s, "pipeline": self.pipeline_s}
        return max(parts, key=parts.get)

    def to_json(self) -> dict:
        return {"weight_bytes": self.weight_bytes, "kv_bytes": self.kv_bytes, "state_bytes": self.state_bytes,
                "extra_bytes": self.extra_bytes, "kernels": self.kernels, "collectives": self.collectives,
                "memory_ms": self.memory_s * 1e3, "compute_ms": self.compute_s * 1e3, "launch_ms": self.launch_s * 1e3,
                "communication_ms": self.communication_s * 1e3, "pipeline_ms": self.pipeline_s * 1e3,
                "step_ms": self.seconds * 1e3, "bound": self.bound,
                "memory_time_ms": self.memory_time_s * 1e3, "compute_time_ms": self.compute_time_s * 1e3,
                "launch_time_ms": self.launch_time_s * 1e3}


@dataclass
class StepTime:
    """The priced step: tok/s in both graph modes, the breakdown, and every coefficient's source."""

    config: StepConfig
    hardware: Hardware
    backend: Backend
    placement: Placement
    replica_batches: list[int]  # sequences per data-parallel replica (the busy ones)
    replicas: dict[int, ReplicaStep]  # by batch
    profile: KernelProfile
    costs: LaunchCosts
    coefficients: list[Coefficient]
    family_relative: float = 1.0  # Hardware.family_efficiency of the model's family

    @property
    def datasheet_gbps(self) -> float:
        """The bandwidth memory_at_datasheet_s prices at: the datasheet's x the backend's relative efficiency
        x the family's (Hardware.family_efficiency)."""
        return self.hardware.bandwidth_gbps * self.relative

    # ---------------------------------------------------------------- tok/s
    def aggregate_tok_s(self, graphs: bool | None = None) -> float:
        graphs = self.config.graphs if graphs is None else graphs
        steps = [self.replicas[b] for b in self.replica_batches]
        if self.config.topology.expert_parallel and len(steps) > 1:
            # the replicas step together through the MoE layers: the slowest sets every replica's pace
            period = max(step.period_s(graphs) for step in steps)
            return sum(step.batch * step.tokens_per_sequence for step in steps) / period
        return sum(step.tok_s(graphs) for step in steps)

    @property
    def tok_s(self) -> float:
        """Aggregate tok/s in the configuration's own graph mode."""
        return self.aggregate_tok_s()

    @property
    def per_stream_tok_s(self) -> float:
        return self.tok_s / self.config.batch

    @property
    def graph_tok_s(self) -> float:
        return self.aggregate_tok_s(graphs=True)

    @property
    def eager_tok_s(self) -> float:
        return self.aggregate_tok_s(graphs=False)

    @property
    def graph_benefit(self) -> float:
        """CUDA-graph tok/s over eager tok/s (1.0 where there are no launches to save)."""
        return self.graph_tok_s / self.eager_tok_s

    def per_stream_tok_s_at(self, efficiency: float) -> float:
        """Per-stream tok/s of this step were the hardware's efficiency `efficiency`: every segment's bytes
        re-timed (a weight-only backend's weights at the lesser of the new bandwidth and its own rate), nothing
        else re-priced. What a fit of the efficiency alone scales (advise/result_fit.py)."""
        graphs = self.config.graphs
        bandwidth = self.hardware.bandwidth_gbps * 1e9 * efficiency * self.relative
        weight_gbps = self.backend.weight_gbps(self.hardware)
        rate = None if weight_gbps is None else min(bandwidth, weight_gbps * 1e9)
        total, periods = 0.0, []
        for batch in self.replica_batches:
            step = self.replicas[batch]
            memory = [s.memory_at_datasheet_s / efficiency if rate is None else
                      (s.bytes - s.backend_weight_bytes) / bandwidth + s.backend_weight_bytes / rate
                      for s in step.segments]
            index = iter(memory)
            stages = [sum(s.seconds(graphs, next(index)) for s in stage) for stage in step.stages]
            hand = step.handoff.seconds_each if step.handoff else 0.0
            period = max(sum(stages) + (step.handoff.seconds if step.handoff else 0.0),
                         step.micro_batches * (max(stages) + hand))
            periods.append(period)
            total += step.batch * step.tokens_per_sequence
        if self.config.topology.expert_parallel and len(periods) > 1:
            return total / max(periods) / self.config.batch
        return sum(self.replicas[b].batch * self.replicas[b].tokens_per_sequence / p
                   for b, p in zip(self.replica_batches, periods)) / self.config.batch

    @property
    def achievable_bandwidth_gbps(self) -> float:
        """The bandwidth bytes are priced at: datasheet x efficiency x the backend's relative efficiency."""
        return self.hardware.bandwidth_gbps * self.hardware.efficiency * self.relative

    @property
    def relative(self) -> float:
        """The share of the hardware's achievable bandwidth this backend and model family reach."""
        return self.backend.relative(self.hardware) * self.family_relative

    # ---------------------------------------------------------------- the headline replica
    @property
    def main(self) -> ReplicaStep:
        """The busiest replica (all replicas alike unless the batch does not divide)."""
        return self.replicas[max(self.replica_batches)]

    @property
    def traffic(self) -> Traffic:
        return self.main.traffic

    @property
    def step_ms(self) -> float:
        return self.main.period_s(self.config.graphs) * 1e3

    @property
    def ceiling_tok_s(self) -> float:
        """The bandwidth roof: every rank reading its bytes at the datasheet bandwidth, nothing else
        (no efficiency, launches, collectives or pipeline): no engine beats it without speculation."""
        out = 0.0
        for batch in self.replica_batches:
            step = self.replicas[batch]
            seconds = sum(s.bytes for s in step.segments) / (self.hardware.bandwidth_gbps * 1e9)
            out += step.batch * step.tokens_per_sequence / seconds if seconds > 0 else math.inf
        return out

    def breakdown(self, graphs: bool | None = None) -> Breakdown:
        graphs = self.config.graphs if graphs is None else graphs
        step = self.main
        parts = {"memory": 0.0, "compute": 0.0, "launch": 0.0, "communication": 0.0}
        for segment in step.segments:
            for name, seconds in segment.parts(graphs).items():
                parts[name] += seconds
        if step.handoff:
            parts["communication"] += step.handoff.seconds
        segments = step.segments
        kernels = sum(s.kernels if graphs else s.eager_kernels for s in segments)
        launch_time_s = sum(s.floor_s if graphs else s.host_s for s in segments)
        return Breakdown(
            weight_bytes=sum(s.weight_bytes for s in segments), kv_bytes=sum(s.kv_bytes for s in segments),
            state_bytes=sum(s.state_bytes for s in segments), extra_bytes=sum(s.extra_bytes for s in segments),
            kernels=kernels,
            collectives=sum(c.per_step for s in segments for c in s.collectives) + (
                step.handoff.per_step if step.handoff else 0),
            memory_s=parts["memory"], compute_s=parts["compute"], launch_s=parts["launch"],
            communication_s=parts["communication"],
            pipeline_s=max(0.0, step.period_s(graphs) - step.round_trip_s(graphs)),
            memory_time_s=sum(s.memory_s for s in segments), compute_time_s=sum(s.compute_s for s in segments),
            launch_time_s=launch_time_s)

    @property
    def bound(self) -> str:
        return self.breakdown().bound

    @property
    def extra_bytes_per_token(self) -> float:
        """An emulated kernel's dequantized copy per decoded token, over every TP rank (the emulated
        formats' linears are all sharded)."""
        main = self.main
        return self.breakdown().extra_bytes * self.config.topology.tp / (main.batch * main.tokens_per_sequence)

    # ---------------------------------------------------------------- per rank
    def stage_totals(self) -> list[dict]:
        step = self.main
        out = []
        for index, stage in enumerate(step.stages):
            out.append({"stage": index, "weight_bytes": sum(s.resident_bytes for s in stage),
                        "bytes_per_step": sum(s.bytes for s in stage), "kernels": sum(s.kernels for s in stage),
                        "memory_ms": 1e3 * sum(s.memory_s for s in stage),
                        "compute_ms": 1e3 * sum(s.compute_s for s in stage),
                        "launch_ms": 1e3 * sum(s.floor_s for s in stage),
                        "comm_ms": 1e3 * sum(s.comm_s for s in stage),
                        "layers": [min((s.layer for s in stage if s.layer is not None), default=0),
                                   1 + max((s.layer for s in stage if s.layer is not None), default=-1)]})
        return out

    @property
    def weight_bytes_per_rank(self) -> float:
        """Weights held by the fullest rank."""
        return max(t["weight_bytes"] for t in self.stage_totals())

    @property
    def bytes_per_step_per_rank(self) -> float:
        return max(t["bytes_per_step"] for t in self.stage_totals())

    @property
    def collectives(self) -> list[Collective]:
        out = []
        seen: dict[tuple, Collective] = {}
        for segment in self.main.segments:  # one line per kind of collective, counts summed
            for c in segment.collectives:
                key = (c.group, c.kind, c.where, c.link, round(c.message_bytes))
                if key in seen:
                    seen[key].per_step += c.per_step
                else:
                    seen[key] = Collective(c.group, c.kind, c.where, c.per_step, c.message_bytes, c.link,
                                           c.seconds_each)
                    out.append(seen[key])
        if self.main.handoff:
            out.append(self.main.handoff)
        return out

    @property
    def comm_s(self) -> float:
        return sum(c.seconds for c in self.collectives)

    @property
    def comm_bytes(self) -> float:
        return sum(c.per_step * c.message_bytes for c in self.collectives)

    @property
    def pipeline_bubble(self) -> float:
        """Share of a stage's time it idles while one stream's token passes the other stages."""
        return 1.0 - 1.0 / self.config.topology.pp

    def to_json(self) -> dict:
        config = self.config
        return {
            "batch": config.batch, "context": config.context, "kv_cache_dtype": self.traffic.kv_dtype,
            "graphs": config.graphs, "topology": config.topology.label,
            "backend": self.backend.name, "linear_backend": self.backend.linear_backend,
            "moe_backend": self.backend.moe_backend, "gemm_compute": self.backend.compute,
            "speculative_tokens": config.speculative_tokens, "routing": config.routing,
            "aggregate_tok_s": self.tok_s, "per_stream_tok_s": self.per_stream_tok_s,
            "graph_tok_s": self.graph_tok_s, "eager_tok_s": self.eager_tok_s, "ceiling_tok_s": self.ceiling_tok_s,
            "step_ms": self.step_ms, "breakdown": self.breakdown().to_json(),
            "kernel_counts": self.profile.origin,
            "collectives": [c.to_json() for c in self.collectives],
            "coefficients": [c.to_json() for c in self.coefficients],
        }


# --------------------------------------------------------------------------- pricing

def _tflops(hardware: Hardware, compute: str) -> float:
    """Tensor throughput of a compute format; a device without it runs the GEMM in BF16. An entry
    that states no throughput at all (a CPU saved before calibrate measured GEMMs) has no compute
    roof: infinite, so compute never binds, rather than an invented figure."""
    return hardware.tensor_tflops.get(compute) or hardware.tensor_tflops.get("bf16") or math.inf


def _compute_format(module_format: str, backend: Backend) -> str:
    if module_format == backend.format:
        return backend.compute
    return get_format(module_format).compute if module_format in formats() else "bf16"


def _replica_batches(batch: int, dp: int) -> list[int]:
    batches = [batch // dp + (1 if i < batch % dp else 0) for i in range(dp)]
    return [b for b in batches if b > 0]


def compute_utilization(hardware: Hardware) -> tuple[float, str, str, str]:
    """(share of the datasheet tensor rate a decode GEMM reaches, unit, kind, source): the hardware's
    measured figure where it has one, else the rules table's estimate."""
    if hardware.compute_utilization is not None:
        return hardware.compute_utilization, "share of tensor peak", "measured", hardware.compute_utilization_source
    compute = load_table("rules")["compute"]
    return compute["utilization"], "share of tensor peak", "estimate", compute["source"]


def price_step(inventory: Inventory, hardware: Hardware, config: StepConfig = StepConfig()) -> StepTime:
    """One decode step of `config` on `hardware`: the one step model."""
    if config.batch < 1:
        raise RooflineError("the batch must be at least 1 sequence")
    topology = config.topology
    placement = config.placement
    if placement is None:
        placement = SINGLE_DEVICE if topology.devices == 1 else \
            place(topology, topology.devices, in_box_link(hardware), None)
    backend = config.backend or default_backend(inventory.main_format(), hardware)
    profile = config.kernels or estimate_kernels(inventory, backend.linear_backend, backend.moe_backend)
    family = model_family(inventory)
    costs = launch_costs(hardware, config.host_us_per_kernel, family)
    family_relative = hardware.family_efficiency.get(family, 1.0)
    bandwidth = hardware.bandwidth_gbps * 1e9 * hardware.efficiency * backend.relative(hardware) * family_relative
    if bandwidth <= 0:
        raise RooflineError(f"hardware {hardware.key}: bandwidth must be positive")
    batches = _replica_batches(config.batch, topology.dp)
    weight_gbps = backend.weight_gbps(hardware)
    weight_rate = None if weight_gbps is None else min(bandwidth, weight_gbps * 1e9)
    replicas = {b: _replica(inventory, hardware, config, topology, placement, backend, profile, costs, bandwidth,
                            weight_rate, b)
                for b in set(batches)}
    coefficients = _coefficients(hardware, backend, costs, profile, placement)
    if family in hardware.family_efficiency:
        coefficients.insert(2, Coefficient("family_relative_efficiency", family_relative, f"x efficiency ({family})",
                                           hardware.efficiency_kind, hardware.family_efficiency_source))
    step = StepTime(config, hardware, backend, placement, batches, replicas, profile, costs, coefficients,
                    family_relative)
    if step.main.period_s(config.graphs) <= 0:
        raise RooflineError("nothing to time: no bytes and no kernels per step")
    return step


# kernels.toml [python.*] kinds by the role whose count carries them: a calibrated entry's own figure wins
PYTHON_KIND_OF_ROLE = {"moe_experts": "moe", "mamba_core": "mamba"}


def _host_equiv(hardware: Hardware, count) -> float:
    """A count's eager Python beyond its launches: the table's, or what `calibrate --engine vllm` fitted on this
    host for a MoE / Mamba layer."""
    kind = PYTHON_KIND_OF_ROLE.get(count.role)
    return hardware.layer_python_launches.get(kind, count.host_equiv) if kind else count.host_equiv


def _replica(inventory: Inventory, hardware: Hardware, config: StepConfig, topology: Topology,
             placement: Placement, backend: Backend, profile: KernelProfile, costs: LaunchCosts,
             bandwidth: float, weight_rate: float | None, batch: int) -> ReplicaStep:
    shape = inventory.shape
    pp = topology.pp
    micro_batches = max(1, min(batch, pp))
    micro = math.ceil(batch / micro_batches)
    scenario = config.scenario(micro)
    traffic = compute_traffic(inventory, scenario)
    tokens_in = micro * (1 + scenario.speculative_tokens)  # the target model verifies 1 + n per sequence
    tokens_out = micro * traffic.tokens_per_step
    # with DP + EP the MoE layers see every replica's micro-batch (vLLM steps the replicas together)
    expert_batch = micro * topology.dp if topology.expert_parallel else micro
    expert_traffic = traffic if expert_batch == micro else compute_traffic(inventory, config.scenario(expert_batch))
    expert_scale = expert_batch / micro
    kv_ranks = kv_split(inventory, topology.tp)
    layers = stage_layers(shape.num_layers, pp)
    segments: dict[tuple, Segment] = {}

    def segment(layer: int | None, outside_first: bool) -> Segment:
        if layer is not None and layer < shape.num_layers:
            key, where = ("layer", layer), "layer"
            stage = next((i for i, r in enumerate(layers) if layer in r), pp - 1)
        elif outside_first:
            key, where, stage = ("head",), "head", 0
        else:
            key, where, stage = ("tail",), "tail", pp - 1
        if key not in segments:
            segments[key] = Segment(layer if where == "layer" else None, where, stage)
        return segments[key]

    utilization = compute_utilization(hardware)[0]
    backend_utilization = backend.gemm_utilization(hardware) or utilization
    for module, moved, expert_moved in zip(inventory.modules, traffic.modules, expert_traffic.modules):
        props = role_properties(module.role)
        inside = module.layer if props.read != "none" and module.role != "mtp" else None
        target = segment(inside, props.stage == "first")
        ranks = sharing_ranks(module, topology, kv_ranks)
        routed = props.read == "routed"
        step_bytes = (expert_moved if routed else moved).bytes_per_token * tokens_out * (expert_scale if routed else 1)
        target.weight_bytes += step_bytes / ranks
        if module.format == backend.format:
            target.backend_weight_bytes += step_bytes / ranks
        target.resident_bytes += module.nbytes / ranks
        if backend.dequantized_bytes_per_weight and module.format == backend.format:
            fraction = (expert_moved if routed else moved).read_fraction
            target.extra_bytes += module.params * fraction * backend.dequantized_bytes_per_weight / ranks
        if props.flops and module.params:
            active = module.params
            if routed and shape.num_experts and shape.experts_per_token:
                active = module.params * shape.experts_per_token / shape.num_experts  # top-k of E per token
            tokens = tokens_in * (expert_scale if routed else 1)
            peak = _tflops(hardware, _compute_format(module.format, backend)) * 1e12
            at_peak = 2 * active * tokens / ranks / peak
            target.compute_at_peak_s += at_peak
            if module.format == backend.format:
                target.backend_compute_at_peak_s += at_peak
                target.compute_s += at_peak / backend_utilization
            else:
                target.compute_s += at_peak / utilization
    for layer, per_sequence in kv_bytes_by_layer(inventory, scenario).items():
        segment(layer, False).kv_bytes += per_sequence * micro / kv_ranks
    for layer, per_sequence in state_bytes_by_layer(inventory).items():
        segment(layer, False).state_bytes += per_sequence * micro / topology.tp
    # attention over the context: QK^T and PV per query head (heads split over TP)
    attention_flops = load_table("rules")["compute"]["attention_flops_per_head_dim"]
    q_heads = config_int(text_config(inventory.config), "num_attention_heads")
    for layer in shape.attention:
        span = min(config.context, layer.window or config.context)
        at_peak = attention_flops * q_heads * layer.head_dim * span * tokens_in / topology.tp \
            / (_tflops(hardware, "bf16") * 1e12)
        segment(layer.layer, False).compute_at_peak_s += at_peak
        segment(layer.layer, False).compute_s += at_peak / utilization
    for count in profile.counts:
        target = segment(count.layer, count.role == "embedding")
        target.kernels += count.kernels
        target.eager_kernels += count.eager
        target.host_equiv += _host_equiv(hardware, count)
    if scenario.speculative_tokens:  # the drafts' own kernels and the proposer's (kernels.toml [core.draft])
        draft, further = load_table("kernels")["core"]["draft"], scenario.speculative_tokens - 1
        tail = segment(None, False)
        tail.kernels += draft["first_kernels"] + further * draft["per_kernels"]
        tail.eager_kernels += draft["first_eager_kernels"] + further * draft["per_eager_kernels"]
    _collectives(inventory, topology, placement, segments, tokens_in, micro)
    for target in segments.values():
        target.memory_at_datasheet_s = target.bytes / bandwidth * hardware.efficiency
        target.backend_weights_at_datasheet_s = target.backend_weight_bytes / bandwidth * hardware.efficiency
        target.memory_s = target.bytes / bandwidth if weight_rate is None else \
            (target.bytes - target.backend_weight_bytes) / bandwidth + target.backend_weight_bytes / weight_rate
        target.floor_s = target.kernels * costs.graph_floor_us_per_kernel * 1e-6
        target.host_s = (target.eager_kernels + target.host_equiv) * costs.host_us_per_kernel * 1e-6
    stages: list[list[Segment]] = [[] for _ in range(pp)]
    for key in sorted(segments, key=lambda k: (k[0] != "head", k[0] == "tail", k[1] if len(k) > 1 else 0)):
        stages[segments[key].stage].append(segments[key])
    handoff = None
    if pp > 1 and placement.pp_link is not None:
        hand_bytes = RESIDUAL_COPIES * shape.hidden_size * ACTIVATION_BYTES * tokens_in
        handoff = Collective("pp", "send", "stage hand-off (hidden state + residual)", pp - 1, hand_bytes,
                             placement.pp_link.key, placement.pp_link.collective_seconds(hand_bytes, 1.0))
    return ReplicaStep(batch, micro_batches, micro, traffic.tokens_per_step, stages, handoff, traffic)


def _collectives(inventory: Inventory, topology: Topology, placement: Placement, segments: dict,
                 tokens_in: int, micro: int) -> None:
    """vLLM's collectives, on the segment each belongs to: under TP one all-reduce of the hidden state
    after each token mixer and each MLP / MoE (the row-parallel projections), one for the
    vocab-parallel embedding and an all-gather of the vocab-parallel logits; under expert parallelism
    with DP the MoE layers dispatch and combine every replica's tokens (allgather_reducescatter)."""
    tp_link, ep_link = placement.tp_link, placement.ep_link
    if tp_link is None and ep_link is None:
        return
    message = inventory.shape.hidden_size * ACTIVATION_BYTES * tokens_in
    kinds: dict[int, set[str]] = {}
    for module in inventory.modules:
        if module.layer is None or module.role == "mtp":
            continue
        kind = role_properties(module.role).all_reduce
        if kind:
            kinds.setdefault(module.layer, set()).add("moe" if module.role == "moe_experts" else kind)
    for key, target in segments.items():
        out: list[Collective] = []
        if tp_link is not None:
            each = tp_link.collective_seconds(message, allreduce_factor(topology.tp))
            if target.where == "head":
                out.append(Collective("tp", "all_reduce", "vocab-parallel embedding", 1, message, tp_link.key, each))
            elif target.where == "tail":
                logits = inventory.shape.vocab_size * ACTIVATION_BYTES * tokens_in
                out.append(Collective("tp", "all_gather", "vocab-parallel logits", 1, logits, tp_link.key,
                                      tp_link.collective_seconds(logits, (topology.tp - 1) / topology.tp)))
            else:
                present = kinds.get(target.layer, set())
                if "mixer" in present:
                    out.append(Collective("tp", "all_reduce", "after each token mixer (row-parallel out projection)",
                                          1, message, tp_link.key, each))
                if "moe" in present and ep_link is None or ("mlp" in present and "moe" not in present):
                    out.append(Collective("tp", "all_reduce", "after each MLP / MoE (row-parallel down projection)",
                                          1, message, tp_link.key, each))
        if ep_link is not None and target.where == "layer" and "moe" in kinds.get(target.layer, set()):
            tokens_bytes = message * topology.dp  # every replica's micro-batch meets in the MoE layer
            each = ep_link.collective_seconds(tokens_bytes, (topology.ep - 1) / topology.ep)
            out.append(Collective("ep", "all_gather", "MoE dispatch (allgather_reducescatter)", 1, tokens_bytes,
                                  ep_link.key, each))
            out.append(Collective("ep", "reduce_scatter", "MoE combine (allgather_reducescatter)", 1, tokens_bytes,
                                  ep_link.key, each))
        target.collectives = out


def _tensor_coefficient(hardware: Hardware, compute: str) -> Coefficient:
    rate = _tflops(hardware, compute)
    if math.isinf(rate):  # an entry that states no tensor rate (calibrate measured none): no compute bound
        return Coefficient("tensor_tflops", None, f"TFLOP/s {compute}", "unknown",
                           f"{hardware.key} states no tensor rate; decode is priced without a compute bound")
    return Coefficient("tensor_tflops", rate, f"TFLOP/s {compute}", "datasheet",
                       hardware.tensor_source or "roofline/data/hardware.toml")


def _relative_coefficient(hardware: Hardware, backend: Backend) -> Coefficient:
    rate = backend.rate(hardware)
    if rate and rate.relative_efficiency is not None:
        return Coefficient("backend_relative_efficiency", rate.relative_efficiency, "x efficiency", rate.kind,
                           f"{backend.name}: {rate.source}")
    return Coefficient("backend_relative_efficiency", backend.relative_efficiency, "x efficiency", "table",
                       f"{backend.name}: {backend.source}")


def _coefficients(hardware: Hardware, backend: Backend, costs: LaunchCosts, profile: KernelProfile,
                  placement: Placement) -> list[Coefficient]:
    out = [
        Coefficient("bandwidth", hardware.bandwidth_gbps, "GB/s", hardware.bandwidth_kind, hardware.bandwidth_source),
        Coefficient("efficiency", hardware.efficiency, "share of bandwidth", hardware.efficiency_kind,
                    hardware.efficiency_source),
        _relative_coefficient(hardware, backend),
        _tensor_coefficient(hardware, backend.compute),
        Coefficient("compute_utilization", *compute_utilization(hardware)),
        Coefficient("kernels_per_step", profile.kernels_per_token, "kernels", profile.origin,
                    "; ".join(profile.notes) or "roofline/data/kernels.toml"),
        Coefficient("eager_kernels_per_step", profile.eager_kernels_per_token, "kernels", profile.origin,
                    "kernels launched one by one under --enforce-eager (no Inductor fusion)"),
        Coefficient("graph_floor", costs.graph_floor_us_per_kernel, "us per kernel", costs.floor_kind, costs.floor_source),
        Coefficient("host_launch", costs.host_us_per_kernel, "us per kernel", costs.host_kind, costs.host_source),
    ]
    rate = backend.rate(hardware)
    if rate and rate.weight_gbps is not None:
        out.append(Coefficient("weight_only_rate", rate.weight_gbps, "GB/s (the format's weights)", rate.kind,
                               f"{backend.name}: {rate.source}"))
    if rate and rate.gemm_utilization is not None:
        out.append(Coefficient("backend_gemm_utilization", rate.gemm_utilization,
                               "share of tensor peak (the format's GEMMs)", rate.kind, f"{backend.name}: {rate.source}"))
    for group, link in (("tp", placement.tp_link), ("pp", placement.pp_link), ("ep", placement.ep_link)):
        if link is not None:
            out.append(Coefficient(f"{group}_link_latency", link.latency_us, f"us per collective ({link.key})",
                                   link.latency_kind, link.source))
            out.append(Coefficient(f"{group}_link_bandwidth", link.bandwidth_gbps, f"GB/s ({link.key})",
                                   "datasheet", link.source))
    return out

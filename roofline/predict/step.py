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
             + what the attention backend's decode kernels take beyond the KV at that bandwidth (vLLM's choice
               or --attention-backend, by the kernels timed on an H200: predict/attention.py; 0 where unmeasured)
    compute  = 2 x active params x tokens / (tensor throughput of the format's compute x utilization,
               a weight-only backend's own share for its GEMMs: Backend.gemm_utilization)
               + attention over the context
    graphs:  max(memory, compute) + kernels x graph floor                      + collectives
    eager:   max((max(memory, compute) + kernels x graph floor) x overlap, kernels x host cost) + collectives
             (over a pipeline stage's layers at once: the host runs ahead of the GPU through slow layers and falls
             behind through quick ones, stage_seconds; overlap: 1 + the loss measured where the host's launches
             take that share of the GPU's time, the GPU waiting on the host's stalls: launch.toml [eager_overlap])

With CUDA graphs a step also takes at least the engine's host time per step (scheduling, input preparation,
output processing: fixed + per request the step holds, launch.toml [step_host]): vLLM's async scheduling forms
step n + 1 on the host while the GPU runs step n, so the longer of the two sets the pace. An eager step's host
cost per kernel was fitted on whole steps and holds it.

A micro-batch's round trip is the sum of the stages plus (pp - 1) hand-offs; with k micro-batches in
flight the replica's step period is max(round trip, k x (slowest stage + hand-off)). Tokens per
second follow: b x tokens per sequence per step (1, or 1 + a + ... + a^n with n draft tokens) /
period, summed over the replicas (in lockstep under expert parallelism). Every coefficient comes
with where it came from (StepTime.coefficients).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.architecture import config_int, text_config
from roofline.model.formats import formats, get_format
from roofline.model.inventory import Inventory
from roofline.model.roles import role_properties

from .attention import AttentionChoice, choose as choose_attention, kernels_source as attention_source, \
    layer_us as attention_layer_us, layouts_of, triton_3d_threshold
from .backends import Backend, default_backend
from .bands import model_family
from .cuda_graphs import capture_sizes
from .hardware import Hardware
from .kernels import KernelProfile, estimate_kernels
from .kv_capacity import kv_cache_group_kinds
from .launch import LaunchCosts, eager_overlap_factor, launch_costs
from .links import allreduce_factor
from .scheduler_config import async_refusal, async_scheduling
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
from .drafting import DraftReads, draft_method_run, launches as draft_launches, pass_tokens, routed_reads
from .prefill import PrefillRates
from .traffic import (
    Scenario,
    Traffic,
    compute_traffic,
    distinct_experts,
    dtype_bytes,
    kv_dtype_and_bytes,
    state_bytes_by_layer,
)


@dataclass(frozen=True)
class Chunk:
    """A prompt's chunk in a step: `tokens` of it computed now, after `context` of it computed before (their KV
    cached); `samples`: the chunk ends the prompt, so the step samples its first token (vLLM computes logits
    only for positions it samples)."""

    tokens: int
    context: int = 0
    samples: bool = True


@dataclass(frozen=True)
class StepConfig:
    """What a step depends on besides the checkpoint and the hardware."""

    batch: int = 1  # concurrent sequences, over all data-parallel replicas
    context: int = 1024  # tokens in each sequence's KV cache
    kv_cache_dtype: str = "auto"
    graphs: bool = True  # CUDA graphs (vLLM's default) or eager (--enforce-eager)
    backend: Backend | None = None  # GEMM / MoE backend of the main format; None: vLLM's default here
    topology: Topology = SINGLE
    placement: Placement | None = None  # which link each group crosses; None: one box of topology.devices
    speculative_tokens: int = 0
    acceptance_rate: float = 0.7
    # vLLM's speculative method (mtp: the checkpoint's MTP layers) and, for a draft of its own (EAGLE heads, draft
    # models), what its forwards read (predict/drafting.py: audit.attach_drafter reads the draft's checkpoint)
    draft_method: str = "mtp"
    drafter: DraftReads | None = None
    routing: str = "uniform"  # MoE: uniform | shared (traffic.Scenario)
    kernels: KernelProfile | None = None  # a measured profile replaces the kernel table
    host_us_per_kernel: float | None = None  # --launch-us
    chunks: tuple[Chunk, ...] = ()  # prompt chunks computed in the step beside the `batch` decoding sequences
    # the largest step (tokens) vLLM captures a CUDA graph of: a larger one launches its compiled kernels from the
    # host (None: no ceiling, every step of graph mode replays a graph: the decode tables' view)
    capture_tokens: int | None = None
    # the largest decode step (tokens) vLLM replays a FULL graph of (cuda_graphs.full_decode_tokens: the capture sizes
    # whose requests fit --max-num-seqs); a decode step past it runs piecewise under full_and_piecewise, without a
    # graph under full_decode_only (None: every captured decode step is FULL)
    full_decode_tokens: int | None = None
    # vLLM's CUDA-graph mode (deployment.CUDAGRAPH_MODES): full_and_piecewise (vLLM's default: decodes in a full
    # graph, prompt and mixed steps in piecewise graphs), full (both full), full_decode_only (prompt and mixed steps
    # without a graph), piecewise (every step piecewise: attention launched by the host); none is graphs=False
    cudagraph_mode: str = "full_and_piecewise"
    # how many of a prompt's tokens route to experts independently (None: data/prefill.toml [routing], real text;
    # 1.0: every token on its own, as random dummy weights route)
    prompt_routing: float | None = None
    # vLLM's async scheduling: the host forms the next step while the GPU runs this one, so a graph step takes the
    # longer of the two; off, the host's time adds to the GPU's. None: vLLM's default for the speculation and the
    # placement (scheduler_config.async_scheduling: on on GPUs, off for a draft model or ngram, over Ray's boxes)
    async_scheduling: bool | None = None
    attention_backend: str | None = None  # --attention-backend (None: vLLM's choice here, predict/attention.py)

    def scenario(self, batch: int) -> Scenario:
        return Scenario(batch=batch, context=self.context, kv_cache_dtype=self.kv_cache_dtype,
                        speculative_tokens=self.speculative_tokens, acceptance_rate=self.acceptance_rate,
                        draft_method=self.draft_method,
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
    # of floor_s's kernels: the routed experts' grouped GEMMs in the backend's format (rules.toml [compute]
    # moe_grouped_gemms a MoE layer), each taking the backend's routed_call_us beyond its bytes (in floor_s)
    routed_calls: float = 0.0
    # a decode step in piecewise graphs: the host's work at each layer between them (the backend's forward, its
    # launches), while the GPU runs what it was given (in the step's host time, ReplicaStep.host_s)
    piecewise_host_s: float = 0.0
    piecewise_splits: dict = field(default_factory=dict)  # what those are, by kind: split layers ("recurrent_step": 1)
    # of floor_s: the drafts' launches outside CUDA graphs, the host's, what its speed moves (priced in line with the
    # GPU's work, as MTP heads ran them; a draft model's ran under the GPU's: benchmarks/RESULTS-gpu.md 2026-12-02)
    draft_launch_s: float = 0.0
    host_s: float = 0.0
    # a step larger than vLLM's CUDA-graph capture: its compiled kernels launched one by one from the host
    uncaptured_host_s: float | None = None
    scan_host_s: float = 0.0  # a prompt's recurrent layers: the host's time launching their chunked scans
    # the attention backend's decode kernels beyond the KV bytes at the bandwidth (predict/attention.py; in memory_s)
    attention_kernel_s: float = 0.0

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
        if graphs and (self.uncaptured_host_s is not None or self.scan_host_s):
            # the host launching what no graph covers, while the GPU runs what it already launched
            return max(device, (self.uncaptured_host_s or 0.0) + self.scan_host_s) + self.comm_s
        return (device if graphs else max(device, self.host_s + self.scan_host_s)) + self.comm_s

    def parts(self, graphs: bool) -> dict[str, float]:
        """The segment's seconds as additive parts: the roof that binds it, launches, collectives."""
        roof = max(self.memory_s, self.compute_s)
        host_bound = self.seconds(graphs) - self.comm_s
        if host_bound > roof + self.floor_s + 1e-15:  # the host cannot issue kernels fast enough
            return {"memory": 0.0, "compute": 0.0, "launch": host_bound, "communication": self.comm_s}
        bound = "memory" if self.memory_s >= self.compute_s else "compute"
        parts = {"memory": 0.0, "compute": 0.0, "launch": self.floor_s, "communication": self.comm_s}
        parts[bound] = roof
        return parts


def stage_seconds(segments, graphs: bool, memory: list[float] | None = None,
                  counts: list[float] | None = None) -> float:
    """A pipeline stage's time from its segments (`counts`: how many times each is there; `memory`: each one's
    memory time at another efficiency). With CUDA graphs, each segment's own. Eager, the host's launches and the
    GPU's kernels of the whole stage overlap: vLLM launches without waiting, so the host runs ahead through a layer
    whose kernels are slow and the GPU catches up through one whose are small; the longer total sets the pace, the
    collectives add (the model's own formula above, and the one the fits' rows price: live/engine_fit.Row)."""
    counts = counts or [1.0] * len(segments)
    memory = memory or [None] * len(segments)
    if graphs:
        return sum(n * s.seconds(True, m) for s, n, m in zip(segments, counts, memory))
    device, host = eager_totals(segments, counts, memory)
    return max(device * eager_overlap_factor(host, device), host) + sum(n * s.comm_s for s, n in zip(segments, counts))


def eager_totals(segments, counts: list[float] | None = None, memory: list[float] | None = None
                  ) -> tuple[float, float]:
    """(the GPU's, the host's) seconds of an eager stage: each segment's roof and kernel floor, and its launches."""
    counts = counts or [1.0] * len(segments)
    memory = memory or [None] * len(segments)
    device = sum(n * (max(s.memory_s if m is None else m, s.compute_s) + s.floor_s)
                 for s, n, m in zip(segments, counts, memory))
    return device, sum(n * (s.host_s + s.scan_host_s) for s, n in zip(segments, counts))


def stage_parts(segments, graphs: bool) -> dict[str, float]:
    """A stage's seconds as additive parts (stage_seconds's): the roof that binds each segment and its launches,
    or, eager and host-bound, the host's launches; the collectives."""
    parts = {"memory": 0.0, "compute": 0.0, "launch": 0.0, "communication": 0.0}
    device, host = eager_totals(segments)
    waits = eager_waits(segments)  # eager: the GPU waiting on the host's stalls
    if not graphs and host > device + waits + 1e-15:  # the host cannot issue the stage's kernels fast enough
        parts["launch"] = host
        parts["communication"] = sum(s.comm_s for s in segments)
        return parts
    for segment in segments:
        if graphs:
            for name, seconds in segment.parts(True).items():
                parts[name] += seconds
            continue
        # eager and the GPU's pace: each segment's roof and kernel floor (stage_seconds's device total)
        parts["memory" if segment.memory_s >= segment.compute_s else "compute"] += max(segment.memory_s,
                                                                                      segment.compute_s)
        parts["launch"] += segment.floor_s
        parts["communication"] += segment.comm_s
    if not graphs:
        parts["launch"] += waits
    return parts


def eager_waits(segments) -> float:
    """Eager and the GPU's pace: the seconds the GPU waits on the host's stalls beyond its own (stage_seconds's
    overlap loss); 0 where the host sets the pace."""
    device, host = eager_totals(segments)
    waits = device * (eager_overlap_factor(host, device) - 1.0)
    return 0.0 if host > device + waits + 1e-15 else waits


@dataclass
class ReplicaStep:
    """One step of one data-parallel replica holding `batch` sequences."""

    batch: int
    micro_batches: int
    micro_batch: int
    tokens_per_sequence: float  # tokens each sequence gains per step
    stages: list[list[Segment]]
    handoff: Collective | None
    traffic: Traffic | None  # of one micro-batch of decodes (None: a step of prompt chunks alone)
    host_s: float = 0.0  # the engine's host time per step (its micro-batches'): with graphs, the step's least time
    host_overlaps: bool = True  # async scheduling: the host's time overlaps the GPU's (else it adds to it)
    kv_groups: tuple[str, ...] = ()  # the KV cache groups' kinds whose metadata the host builds a step (in host_s)

    def stage_seconds(self, graphs: bool) -> list[float]:
        return [stage_seconds(stage, graphs) for stage in self.stages]

    def round_trip_s(self, graphs: bool) -> float:
        return sum(self.stage_seconds(graphs)) + (self.handoff.seconds if self.handoff else 0.0)

    @property
    def piecewise_splits(self) -> dict[str, int]:
        """The layers the step's piecewise graphs are split at, by kind (and "recurrent_step": 1): {} in a FULL
        graph, eager, or a prompt step (whose attention layers' host time is in their floor)."""
        out: dict[str, int] = {}
        for seg in self.segments:
            for kind, n in seg.piecewise_splits.items():
                out[kind] = out.get(kind, 0) + n
        return out

    @property
    def draft_launch_s(self) -> float:
        """One micro-batch's drafts' launches outside CUDA graphs (in its segments' floors): the host's time."""
        return sum(s.draft_launch_s for s in self.segments)

    def device_period_s(self, graphs: bool) -> float:
        """The step's period on the devices alone: the round trip, or the slowest stage's turn per micro-batch."""
        hand = self.handoff.seconds_each if self.handoff else 0.0
        return max(self.round_trip_s(graphs), self.micro_batches * (max(self.stage_seconds(graphs)) + hand))

    def period_s(self, graphs: bool) -> float:
        return host_floor(self.device_period_s(graphs), self.host_s, graphs, self.host_overlaps)

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
    host_s: float  # the engine's host time per step beyond the devices' (async scheduling: the longer sets the pace)
    memory_time_s: float  # raw terms, not split by which binds: all bytes at the achievable bandwidth,
    compute_time_s: float  # all FLOPs at the achievable rate, all kernels x the mode's launch cost
    launch_time_s: float
    # eager and the GPU's pace: of launch_s, the GPU waiting on the host's stalls (launch.toml [eager_overlap])
    eager_wait_s: float = 0.0

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes + self.state_bytes + self.extra_bytes

    @property
    def seconds(self) -> float:
        return self.memory_s + self.compute_s + self.launch_s + self.communication_s + self.pipeline_s + self.host_s

    @property
    def bound(self) -> str:
        parts = {"memory": self.memory_s, "compute": self.compute_s, "launch": self.launch_s,
                 "communication": self.communication_s, "pipeline": self.pipeline_s, "host": self.host_s}
        return max(parts, key=parts.get)

    def to_json(self) -> dict:
        return {"weight_bytes": self.weight_bytes, "kv_bytes": self.kv_bytes, "state_bytes": self.state_bytes,
                "extra_bytes": self.extra_bytes, "kernels": self.kernels, "collectives": self.collectives,
                "memory_ms": self.memory_s * 1e3, "compute_ms": self.compute_s * 1e3, "launch_ms": self.launch_s * 1e3,
                "communication_ms": self.communication_s * 1e3, "pipeline_ms": self.pipeline_s * 1e3,
                "host_ms": self.host_s * 1e3, "eager_wait_ms": self.eager_wait_s * 1e3,
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
    attention: AttentionChoice | None = None  # the attention backend priced (predict/attention.py)

    @property
    def datasheet_gbps(self) -> float:
        """The bandwidth memory_at_datasheet_s prices at: the datasheet's x the backend's relative efficiency
        x the family's (Hardware.family_efficiency)."""
        return self.hardware.bandwidth_gbps * self.relative

    def attention_json(self) -> dict | None:
        """The attention backend priced, and what its decode kernels add to the busiest replica's step beyond the
        KV cache at the bandwidth (measured kernels only; 0 where unmeasured)."""
        if self.attention is None:
            return None
        extra = sum(s.attention_kernel_s for s in self.main.segments)
        return self.attention.to_json() | {"label": self.attention.label, "kernels_ms_per_step": extra * 1e3}

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
            memory = [(s.memory_at_datasheet_s / efficiency if rate is None else
                       (s.bytes - s.backend_weight_bytes) / bandwidth + s.backend_weight_bytes / rate)
                      + s.attention_kernel_s for s in step.segments]
            index = iter(memory)
            stages = [stage_seconds(stage, graphs, [next(index) for _ in stage]) for stage in step.stages]
            hand = step.handoff.seconds_each if step.handoff else 0.0
            period = host_floor(max(sum(stages) + (step.handoff.seconds if step.handoff else 0.0),
                                    step.micro_batches * (max(stages) + hand)), step.host_s, graphs,
                                step.host_overlaps)
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
        for stage in step.stages:
            for name, seconds in stage_parts(stage, graphs).items():
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
            pipeline_s=max(0.0, step.device_period_s(graphs) - step.round_trip_s(graphs)),
            host_s=step.period_s(graphs) - step.device_period_s(graphs),
            memory_time_s=sum(s.memory_s for s in segments), compute_time_s=sum(s.compute_s for s in segments),
            launch_time_s=launch_time_s,
            eager_wait_s=0.0 if graphs else sum(eager_waits(stage) for stage in step.stages))

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
            "async_scheduling": config.async_scheduling,
            "aggregate_tok_s": self.tok_s, "per_stream_tok_s": self.per_stream_tok_s,
            "graph_tok_s": self.graph_tok_s, "eager_tok_s": self.eager_tok_s, "ceiling_tok_s": self.ceiling_tok_s,
            "step_ms": self.step_ms, "breakdown": self.breakdown().to_json(),
            "kernel_counts": self.profile.origin,
            "collectives": [c.to_json() for c in self.collectives],
            "coefficients": [c.to_json() for c in self.coefficients],
            "attention": self.attention_json(),
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
    """One step of `config` on `hardware`: the one step model. `config.batch` sequences decode; the prompt chunks
    `config.chunks` are computed beside them (a step of chunks alone has batch 0)."""
    if config.batch < 1 and not config.chunks:
        raise RooflineError("the batch must be at least 1 sequence")
    if config.chunks and config.topology.dp > 1:
        raise RooflineError("a step with prompt chunks is one engine's: price it for one data-parallel replica")
    topology = config.topology
    placement = config.placement
    if placement is None:
        placement = SINGLE_DEVICE if topology.devices == 1 else \
            place(topology, topology.devices, in_box_link(hardware), None)
    method = draft_method_run(config.draft_method, config.speculative_tokens)
    refused = async_refusal(hardware, config.async_scheduling, method, placement.boxes)
    if refused:  # what vLLM refuses is never priced
        raise RooflineError(refused)
    config = replace(config, async_scheduling=async_scheduling(hardware, config.async_scheduling, method,
                                                               placement.boxes).on)
    backend = config.backend or default_backend(inventory.main_format(), hardware)
    profile = config.kernels or estimate_kernels(inventory, backend.linear_backend, backend.moe_backend)
    family = model_family(inventory)
    costs = launch_costs(hardware, config.host_us_per_kernel, family)
    family_relative = hardware.family_efficiency.get(family, 1.0)
    bandwidth = hardware.bandwidth_gbps * 1e9 * hardware.efficiency * backend.relative(hardware) * family_relative
    if bandwidth <= 0:
        raise RooflineError(f"hardware {hardware.key}: bandwidth must be positive")
    batches = _replica_batches(config.batch, topology.dp) if config.batch else [0]
    weight_gbps = backend.weight_gbps(hardware)
    weight_rate = None if weight_gbps is None else min(bandwidth, weight_gbps * 1e9)
    terms = _terms(inventory, hardware, config, topology, placement, backend, profile, costs, bandwidth, weight_rate)
    replicas = {}
    for b in set(batches):
        replicas[b] = _fill(terms, config, b)
        if replicas[b].micro_batch:
            replicas[b].traffic = compute_traffic(inventory, config.scenario(replicas[b].micro_batch))
    coefficients = _coefficients(hardware, backend, costs, profile, placement)
    if family in hardware.family_efficiency:
        coefficients.insert(2, Coefficient("family_relative_efficiency", family_relative, f"x efficiency ({family})",
                                           hardware.efficiency_kind, hardware.family_efficiency_source))
    coefficients.append(_attention_coefficient(terms.attention, replicas[max(batches)]))
    step = StepTime(config, hardware, backend, placement, batches, replicas, profile, costs, coefficients,
                    family_relative, terms.attention)
    if step.main.period_s(config.graphs) <= 0:
        raise RooflineError("nothing to time: no bytes and no kernels per step")
    return step


class StepPricer:
    """The step model kept for one serving configuration: its terms gathered once (as price_step gathers them),
    every step's work priced with them by the same arithmetic (`_fill`), layers of one kind priced once and
    counted (on one pipeline stage). The load model's one seam (predict/load.py): it never prices a step itself.
    One engine: a data-parallel deployment's replicas each take their share of the requests."""

    def __init__(self, inventory: Inventory, hardware: Hardware, config: StepConfig = StepConfig()):
        topology = config.topology
        if topology.dp > 1:
            raise RooflineError("the step pricer prices one engine: give it one data-parallel replica")
        probe = price_step(inventory, hardware, replace(config, batch=max(config.batch, 1), chunks=()))
        config = replace(config, async_scheduling=probe.config.async_scheduling)  # as vLLM resolves it here
        self.config = config
        self.graphs = config.graphs
        self.scale = 1.0  # every price times this (a band's end)
        self.step = probe  # the serving configuration's coefficients (StepTime.coefficients) and backend
        bandwidth = hardware.bandwidth_gbps * 1e9 * hardware.efficiency * probe.relative
        weight_gbps = probe.backend.weight_gbps(hardware)
        weight_rate = None if weight_gbps is None else min(bandwidth, weight_gbps * 1e9)
        terms = _terms(inventory, hardware, config, topology, probe.placement, probe.backend, probe.profile,
                       probe.costs, bandwidth, weight_rate)
        groups: dict[tuple, list] = {}
        for key, segment in terms.segments.items():
            signature = _signature(segment) if topology.pp == 1 else key  # stages are summed apart
            groups.setdefault(signature, [key, 0])[1] += 1
        self._terms = replace(terms, segments={key: terms.segments[key] for key, _ in groups.values()})
        self._counts = {(terms.segments[key].where, terms.segments[key].layer): count for key, count in groups.values()}
        self.segments = len(terms.segments)

    def seconds(self, decodes: int, context: float, chunks: tuple[Chunk, ...] = ()) -> float:
        """The step's time: `decodes` sequences decoding at a mean `context` of tokens (KV read and attention are
        linear in it), and the prompt chunks beside them."""
        config = replace(self.config, batch=decodes, context=max(0, int(round(context))), chunks=chunks)
        replica = _fill(self._terms, config, decodes)
        if self._terms.stages > 1:
            return self.scale * replica.period_s(self.graphs)
        device = stage_seconds(replica.segments, self.graphs,
                               counts=[self._counts[(segment.where, segment.layer)] for segment in replica.segments])
        return self.scale * host_floor(device, replica.host_s, self.graphs, replica.host_overlaps)


def host_floor(device_s: float, host_s: float, graphs: bool, overlaps: bool = True) -> float:
    """A step's time given the engine's host time per step: with CUDA graphs and async scheduling the host forms
    the next step while the GPU runs this one, so the longer of the two; without async scheduling the host's
    time comes before and after the GPU's; eager, the fitted host cost per kernel holds it already."""
    if not graphs:
        return device_s
    return max(device_s, host_s) if overlaps else device_s + host_s


def _signature(segment) -> tuple:
    """What prices a segment, without where it sits: equal signatures price alike."""
    return tuple((name, repr(value)) for name, value in segment.__dict__.items() if name not in ("layer",))


# kernels.toml [python.*] kinds by the role whose count carries them: a calibrated entry's own figure wins
PYTHON_KIND_OF_ROLE = {"moe_experts": "moe", "mamba_core": "mamba"}


def _host_equiv(hardware: Hardware, count) -> float:
    """A count's eager Python beyond its launches: the table's, or what `calibrate --engine vllm` fitted on this
    host for a MoE / Mamba layer (not for a backend whose own Python the table measured: the calibration ran
    another)."""
    kind = None if count.host_own else PYTHON_KIND_OF_ROLE.get(count.role)
    return hardware.layer_python_launches.get(kind, count.host_equiv) if kind else count.host_equiv


# ----------------------------------------------------------------------------- a step's terms
# A step's price is a pure function of what it computes: `_terms` gathers, once per serving configuration,
# what each segment holds (weights by how a step reads them, the FLOPs of a token, its KV and state shapes, its
# kernels and collectives); `_fill` prices one step's work with them: the decoding sequences (micro-batch,
# context, draft tokens) and the prompt chunks beside them. price_step is the two together; the load model
# (predict/load.py) keeps the terms and fills many steps (StepPricer).

@dataclass
class _ModuleRead:
    """Weights of one segment a step reads by one rule (roles.toml `read`)."""
    nbytes: float  # per rank: the bytes a whole read reads
    backend_bytes: float  # of those: the backend format's
    dequant_params: float  # an emulated kernel's weights (params / ranks) that it dequantizes to BF16
    experts: int = 0  # routed: experts of the module, top_k of them per token
    top_k: int = 0
    rows: int = 0  # row: one row per token


@dataclass
class _Flops:
    """Seconds at the datasheet tensor rate per token of one segment's GEMMs, by what prices them."""
    backend_s: float = 0.0  # the backend format's GEMMs (not routed)
    other: dict = field(default_factory=dict)  # compute format -> seconds at its peak (other formats, not routed)
    routed_backend_s: float = 0.0  # routed experts in the backend format
    routed_other: dict = field(default_factory=dict)
    sampled_s: float = 0.0  # lm_head: only a sampled position computes it in a prompt chunk
    sampled_backend: bool = False
    sampled_compute: str = "bf16"


@dataclass
class _SegmentTerms:
    layer: int | None
    where: str
    stage: int
    full: _ModuleRead = field(default_factory=lambda: _ModuleRead(0.0, 0.0, 0.0))
    routed: list = field(default_factory=list)  # [_ModuleRead]
    rows: list = field(default_factory=list)
    draft: DraftReads | None = None  # the tail: one drafter forward's reads (predict/drafting.py)
    draft_backend_share: float = 0.0  # of the drafter's whole-read bytes, the share in the backend's format
    resident: float = 0.0
    flops: _Flops = field(default_factory=_Flops)
    kv_per_token: float = 0.0  # KV bytes per token of context of one sequence (per rank)
    window: int | None = None
    attention_s: float = 0.0  # attention seconds at the bf16 peak per query token per token of context (per rank)
    head_dim: int = 128  # the attention layer's (a prompt's attention reaches less with narrow heads)
    state_bytes: float = 0.0  # recurrent state read and written per sequence (per rank)
    scan_s: dict = field(default_factory=dict)  # kind -> a prompt token's chunked scan at the bf16 peak (per rank)
    scan_bytes: float = 0.0  # a prompt token's share of the scan's fp32 chunk states, written and read (per rank)
    scan_layers: dict = field(default_factory=dict)  # kind -> recurrent layers here (their prompt kernels' host time)
    kernels: float = 0.0
    eager_kernels: float = 0.0
    host_equiv: float = 0.0
    attention_layers: int = 0
    attention_layouts: tuple = ()  # (attention.Layout, ...) of its softmax-attention layer, on one rank
    routed_calls: float = 0.0  # grouped GEMMs of routed experts in the backend's format (Segment.routed_calls)
    collectives: list = field(default_factory=list)  # [(group, kind, where, bytes per token in, link, factor)]


@dataclass
class _Terms:
    """What a serving configuration's step holds, segment by segment (one replica, one rank per stage)."""
    segments: dict  # key -> _SegmentTerms
    stages: int
    expert_scale: float  # with DP + EP the MoE layers see every replica's micro-batch
    handoff_bytes_per_token: float  # PP: hidden state + residual per token in
    backend_utilization: float
    utilization: float
    bandwidth: float
    weight_rate: float | None
    floor_us: float
    routed_call_us: float  # each routed grouped GEMM on the backend beyond its bytes (Backend.routed_call_us)
    host_us: float
    step_host: LaunchCosts  # the engine's host time per step (LaunchCosts.step_host_s)
    kv_groups: tuple[str, ...]  # the KV cache groups' kinds vLLM makes of the layers: the host builds each a step
    uncaptured_us: float  # a compiled kernel launched from the host when no CUDA graph covers the step
    scan_host_us: dict  # kind -> the host's time of one recurrent layer's prompt kernels (outside vLLM's graphs)
    rates: "PrefillRates"
    # the host's work between piecewise graphs, in launches' worth: per split layer by kind ("attention", a recurrent
    # kind) and "recurrent_step" once a step (prefill.piecewise_launches): a decode's past the FULL graphs, and
    # a prompt step's attention layers
    piecewise_launches: dict
    dequant_bytes_per_weight: float  # an emulated kernel's BF16 copy, per weight it dequantizes
    backend_compute: str  # the tensor format the backend's GEMMs compute in
    backend_format: str  # the weights' format the backend runs
    routed_share: float  # top_k / experts: the share of a step's tokens each expert gets under uniform routing
    weight_only: bool  # the backend dequantizes weights (Marlin / Machete): its prompt GEMMs at weight_only's share
    efficiency: float  # the hardware's (what memory_at_datasheet_s is scaled back by)
    placement: Placement
    attention: AttentionChoice  # the attention backend vLLM runs, whose decode kernels price each layer's
    model_kv_heads: int = 1  # the config's KV heads a rank (what Triton's 3D threshold counts)


def _terms(inventory: Inventory, hardware: Hardware, config: StepConfig, topology: Topology, placement: Placement,
           backend: Backend, profile: KernelProfile, costs: LaunchCosts, bandwidth: float,
           weight_rate: float | None) -> _Terms:
    from .prefill import (
        SCAN_CHUNK_TOKENS,
        SCAN_FLOPS_PER_STATE_ELEMENT,
        piecewise_launches,
        prefill_rates,
        scan_host_us_per_layer,
        uncaptured_us_per_kernel,
    )

    shape = inventory.shape
    pp = topology.pp
    kv_ranks = kv_split(inventory, topology.tp)
    layers = stage_layers(shape.num_layers, pp)
    segments: dict[tuple, _SegmentTerms] = {}

    def segment(layer: int | None, outside_first: bool) -> _SegmentTerms:
        if layer is not None and layer < shape.num_layers:
            key, where = ("layer", layer), "layer"
            stage = next((i for i, r in enumerate(layers) if layer in r), pp - 1)
        elif outside_first:
            key, where, stage = ("head",), "head", 0
        else:
            key, where, stage = ("tail",), "tail", pp - 1
        if key not in segments:
            segments[key] = _SegmentTerms(layer if where == "layer" else None, where, stage)
        return segments[key]

    by_name = inventory.by_name()
    dequant = backend.dequantized_bytes_per_weight
    grouped_gemms = load_table("rules")["compute"]["moe_grouped_gemms"]
    for module in inventory.modules:
        props = role_properties(module.role)
        inside = module.layer if props.read != "none" and module.role != "mtp" else None
        target = segment(inside, props.stage == "first")
        ranks = sharing_ranks(module, topology, kv_ranks)
        if props.read == "per_draft":  # read by the drafter's forwards (predict/drafting.py), held all the same
            target.resident += module.nbytes / ranks
            continue
        source = by_name[module.tied_to].nbytes if module.tied_to and module.tied_to in by_name else module.nbytes
        in_backend = module.format == backend.format
        read = _ModuleRead(source / ranks, source / ranks if in_backend else 0.0,
                           module.params / ranks if dequant and in_backend else 0.0)
        target.resident += module.nbytes / ranks
        if props.read == "routed" and (module.experts or shape.num_experts) and shape.experts_per_token:
            read.experts, read.top_k = module.experts or shape.num_experts, shape.experts_per_token
            target.routed.append(read)
            if in_backend:
                target.routed_calls = grouped_gemms
        elif props.read == "row":
            read.rows = _rows(module)
            target.rows.append(read)
        elif props.read != "none":
            target.full = _add(target.full, read)
        if props.flops and module.params:
            routed = props.read == "routed" and shape.num_experts and shape.experts_per_token
            active = module.params * shape.experts_per_token / shape.num_experts if routed else module.params
            compute = _compute_format(module.format, backend)
            at_peak = 2 * active / ranks / (_tflops(hardware, compute) * 1e12)  # seconds per token
            flops = target.flops
            if module.role == "lm_head":
                flops.sampled_s += at_peak
                flops.sampled_backend, flops.sampled_compute = in_backend, compute
            elif routed:
                if in_backend:
                    flops.routed_backend_s += at_peak
                else:
                    flops.routed_other[compute] = flops.routed_other.get(compute, 0.0) + at_peak
            elif in_backend:
                flops.backend_s += at_peak
            else:
                flops.other[compute] = flops.other.get(compute, 0.0) + at_peak
    kv_dtype, kv_bytes = kv_dtype_and_bytes(inventory, config.scenario(1))
    attention = choose_attention(inventory, hardware, kv_dtype, config.attention_backend)
    layouts = layouts_of(inventory, kv_ranks)
    attention_flops = load_table("rules")["compute"]["attention_flops_per_head_dim"]
    q_heads = config_int(text_config(inventory.config), "num_attention_heads")
    bf16_peak = _tflops(hardware, "bf16") * 1e12
    for layer in shape.attention:
        target = segment(layer.layer, False)
        target.kv_per_token += layer.kv_elements_per_token() * kv_bytes / kv_ranks
        target.window = layer.window
        target.head_dim = layer.head_dim
        target.attention_s += attention_flops * q_heads * layer.head_dim / topology.tp / bf16_peak
        target.attention_layers += 1
        if layer.layer in layouts:
            target.attention_layouts += (layouts[layer.layer],)
    state_bytes = dtype_bytes(shape.state_dtype)
    for layer, per_sequence in state_bytes_by_layer(inventory).items():
        segment(layer, False).state_bytes += per_sequence / topology.tp
    for layer in shape.recurrent:
        target = segment(layer.layer, False)
        target.scan_s[layer.kind] = target.scan_s.get(layer.kind, 0.0) \
            + SCAN_FLOPS_PER_STATE_ELEMENT * layer.state_elements / topology.tp / bf16_peak
        target.scan_bytes += 2 * layer.state_elements * state_bytes / SCAN_CHUNK_TOKENS.get(layer.kind, 64) / topology.tp
        target.scan_layers[layer.kind] = target.scan_layers.get(layer.kind, 0) + 1
    for count in profile.counts:
        target = segment(count.layer, count.role == "embedding")
        target.kernels += count.kernels
        target.eager_kernels += count.eager
        target.host_equiv += _host_equiv(hardware, count)
    if config.speculative_tokens:  # the drafts: their reads by mechanism, their kernels ([draft.*] of kernels.toml)
        tail = segment(None, False)
        tail.draft = drafter_reads(inventory, config, topology.tp)
        full = tail.draft.full_bytes
        tail.draft_backend_share = dict(tail.draft.full_by_format).get(backend.format, 0.0) / full if full else 0.0
        kernels, _, _ = draft_launches(tail.draft, config.speculative_tokens)
        eager, _, _ = draft_launches(tail.draft, config.speculative_tokens, eager=True)
        tail.kernels += kernels
        tail.eager_kernels += eager
    _collective_terms(inventory, topology, placement, segments)
    utilization = compute_utilization(hardware)[0]
    return _Terms(segments=segments, stages=pp, expert_scale=float(topology.dp if topology.expert_parallel else 1),
                  handoff_bytes_per_token=RESIDUAL_COPIES * shape.hidden_size * ACTIVATION_BYTES,
                  backend_utilization=backend.gemm_utilization(hardware) or utilization, utilization=utilization,
                  bandwidth=bandwidth, weight_rate=weight_rate, floor_us=costs.graph_floor_us_per_kernel,
                  routed_call_us=backend.routed_call_us(hardware),
                  host_us=costs.host_us_per_kernel, step_host=costs, kv_groups=kv_cache_group_kinds(shape),
                  rates=prefill_rates(hardware),
                  uncaptured_us=uncaptured_us_per_kernel(hardware)[0] if costs.host_us_per_kernel else 0.0,
                  scan_host_us=scan_host_us_per_layer(hardware)[0] if costs.host_us_per_kernel else {},
                  piecewise_launches=piecewise_launches(attention.backend),
                  dequant_bytes_per_weight=dequant, backend_compute=backend.compute, backend_format=backend.format,
                  routed_share=shape.experts_per_token / shape.num_experts if shape.num_experts else 0.0,
                  weight_only=backend.weight_only, efficiency=hardware.efficiency, placement=placement,
                  attention=attention, model_kv_heads=max(1, config_int(
                      text_config(inventory.config), "num_key_value_heads", "num_attention_heads") // kv_ranks))


def drafter_reads(inventory: Inventory, config: StepConfig, ranks: int) -> DraftReads:
    """One drafter forward's reads for this step's speculation: a draft of its own as given, else by method
    (the checkpoint's MTP layers, or none for a host-side proposer)."""
    from .drafting import mechanism_of, mtp_reads, no_weight_reads

    if config.drafter is not None:
        return config.drafter
    _, kv_bytes = kv_dtype_and_bytes(inventory, config.scenario(1))
    return mtp_reads(inventory, ranks, kv_bytes) if mechanism_of(config.draft_method) == "mtp" \
        else no_weight_reads(config.draft_method)


def _add(a: _ModuleRead, b: _ModuleRead) -> _ModuleRead:
    return _ModuleRead(a.nbytes + b.nbytes, a.backend_bytes + b.backend_bytes, a.dequant_params + b.dequant_params)


def _rows(module) -> int:
    weights = [t for t in module.tensors if len(t.shape) == 2]
    return max((t.shape[0] for t in weights), default=0)


def _collective_terms(inventory: Inventory, topology: Topology, placement: Placement, segments: dict) -> None:
    """vLLM's collectives, on the segment each belongs to, by the bytes a token puts on them: under TP one
    all-reduce of the hidden state after each token mixer and each MLP / MoE (the row-parallel projections), one
    for the vocab-parallel embedding and an all-gather of the vocab-parallel logits; under expert parallelism
    with DP the MoE layers dispatch and combine every replica's tokens (allgather_reducescatter)."""
    tp_link, ep_link = placement.tp_link, placement.ep_link
    if tp_link is None and ep_link is None:
        return
    hidden = inventory.shape.hidden_size * ACTIVATION_BYTES
    kinds: dict[int, set[str]] = {}
    for module in inventory.modules:
        if module.layer is None or module.role == "mtp":
            continue
        kind = role_properties(module.role).all_reduce
        if kind:
            kinds.setdefault(module.layer, set()).add("moe" if module.role == "moe_experts" else kind)
    all_reduce = allreduce_factor(topology.tp)
    for target in segments.values():
        out = []
        if tp_link is not None:
            if target.where == "head":
                out.append(("tp", "all_reduce", "vocab-parallel embedding", hidden, tp_link, all_reduce))
            elif target.where == "tail":
                out.append(("tp", "all_gather", "vocab-parallel logits",
                            inventory.shape.vocab_size * ACTIVATION_BYTES, tp_link, (topology.tp - 1) / topology.tp))
            else:
                present = kinds.get(target.layer, set())
                if "mixer" in present:
                    out.append(("tp", "all_reduce", "after each token mixer (row-parallel out projection)", hidden,
                                tp_link, all_reduce))
                if "moe" in present and ep_link is None or ("mlp" in present and "moe" not in present):
                    out.append(("tp", "all_reduce", "after each MLP / MoE (row-parallel down projection)", hidden,
                                tp_link, all_reduce))
        if ep_link is not None and target.where == "layer" and "moe" in kinds.get(target.layer, set()):
            factor = (topology.ep - 1) / topology.ep  # every replica's micro-batch meets in the MoE layer
            out.append(("ep", "all_gather", "MoE dispatch (allgather_reducescatter)", hidden * topology.dp, ep_link,
                        factor))
            out.append(("ep", "reduce_scatter", "MoE combine (allgather_reducescatter)", hidden * topology.dp,
                        ep_link, factor))
        target.collectives = out


def _fill(terms: _Terms, config: StepConfig, batch: int) -> ReplicaStep:
    """One replica's step: `batch` decoding sequences (in micro-batches over the pipeline stages) of
    `config.context` tokens, `config.speculative_tokens` drafts each, and the prompt chunks `config.chunks`
    beside them, priced with the terms."""
    pp = terms.stages
    micro_batches = max(1, min(batch, pp)) if batch else 1
    micro = math.ceil(batch / micro_batches) if batch else 0
    spec = config.speculative_tokens
    a = config.acceptance_rate
    tokens_per_sequence = (1.0 - a ** (spec + 1)) / (1.0 - a)
    decode_in = micro * (1 + spec)  # the target model verifies 1 + n per sequence
    chunks = config.chunks
    chunk_tokens = sum(c.tokens for c in chunks)
    sampled_chunks = sum(1 for c in chunks if c.samples)
    tokens_in = decode_in + chunk_tokens
    expert_scale = terms.expert_scale
    # tokens whose expert choices are independent: all, or with shared routing (one prompt to every stream)
    # one sequence's decode tokens; a prompt's tokens route independently
    independence = terms.rates.prompt_independence if config.prompt_routing is None else config.prompt_routing
    routed_tokens = ((1 + spec) if config.routing == "shared" and micro else decode_in * expert_scale) \
        + chunk_tokens * independence
    rates = terms.rates
    prefill_backend = rates.weight_only if terms.weight_only else rates.gemm_share(terms.backend_compute)
    mode = config.cudagraph_mode
    # a decode step padded past the largest FULL graph (its requests past --max-num-seqs): vLLM's next choice
    past_full = config.graphs and not chunk_tokens and config.full_decode_tokens is not None \
        and tokens_in > config.full_decode_tokens
    uncaptured = (config.capture_tokens is not None and tokens_in > config.capture_tokens) or \
        ((chunk_tokens > 0 or past_full) and mode == "full_decode_only")
    piecewise = mode == "piecewise" or ((chunk_tokens > 0 or past_full) and mode == "full_and_piecewise")
    # Triton's 3D threshold snaps to the capture sizes where graphs run (vLLM's default ceiling where none is given)
    triton_3d = triton_3d_threshold(terms.model_kv_heads, capture_sizes(
        config.capture_tokens or load_table("serving")["cuda_graph_capture"]["ceiling"]) if config.graphs else None)
    segments = []
    for key, t in terms.segments.items():
        seg = Segment(t.layer, t.where, t.stage)
        weight = t.full.nbytes
        backend_w = t.full.backend_bytes
        dequant_params = t.full.dequant_params
        for read in t.routed:
            fraction = distinct_experts(read.experts, read.top_k, routed_tokens) / read.experts if routed_tokens else 0.0
            weight += read.nbytes * fraction
            backend_w += read.backend_bytes * fraction
            dequant_params += read.dequant_params * fraction
        for read in t.rows:
            fraction = min(1.0, tokens_in / read.rows) if read.rows else 0.0
            weight += read.nbytes * fraction
            backend_w += read.backend_bytes * fraction
            dequant_params += read.dequant_params * fraction
        draft_host_s = draft_launch_s = 0.0
        if spec and t.draft is not None:  # the drafter's forwards: whole modules each, experts as routed
            passes = pass_tokens(micro, spec)
            weight += t.draft.full_bytes * len(passes)
            backend_w += t.draft.full_bytes * t.draft_backend_share * len(passes)
            for fmt, bank in t.draft.routed:
                read = bank.nbytes * routed_reads(bank.experts, bank.top_k, passes, config.routing == "shared", micro)
                weight += read
                backend_w += read if fmt == terms.backend_format else 0.0
            _, host_launches, host_ms = draft_launches(t.draft, spec)
            draft_launch_s = host_launches * terms.host_us * 1e-6 if config.graphs else 0.0
            draft_host_s = draft_launch_s + host_ms * 1e-3
        seg.weight_bytes, seg.backend_weight_bytes, seg.resident_bytes = weight, backend_w, t.resident
        seg.extra_bytes = dequant_params * terms.dequant_bytes_per_weight
        # KV: each decoding sequence reads its context; a chunk reads its prompt's earlier KV and writes its own
        if t.kv_per_token:
            span = min(config.context, t.window or config.context)
            seg.kv_bytes = t.kv_per_token * span * micro
            for c in chunks:
                seg.kv_bytes += t.kv_per_token * (min(c.context, t.window or c.context) + c.tokens)
        if spec and t.draft is not None and t.draft.kv_bytes_per_context_token:  # the drafter's own KV, each forward
            seg.kv_bytes += t.draft.kv_bytes_per_context_token * config.context * micro * spec
        # with drafts a GDN / Mamba layer keeps the state after every verified position, so that vLLM can roll
        # back to the last accepted one (gdn_attn: spec_state_indices, 1 + n slots a sequence): n more writes
        seg.state_bytes = t.state_bytes * (micro + len(chunks)) + t.scan_bytes * chunk_tokens \
            + t.state_bytes / 2 * spec * micro
        # compute: decode tokens at decode's utilization, a prompt's tokens at the prefill rates
        f = t.flops
        decode_at_peak = (f.backend_s + sum(f.other.values())) * decode_in \
            + (f.routed_backend_s + sum(f.routed_other.values())) * decode_in * expert_scale + f.sampled_s * decode_in
        decode_backend_at_peak = (f.backend_s + f.routed_backend_s * expert_scale
                                  + (f.sampled_s if f.sampled_backend else 0.0)) * decode_in
        seg.compute_at_peak_s = decode_at_peak
        seg.backend_compute_at_peak_s = decode_backend_at_peak
        seg.compute_s = decode_backend_at_peak / terms.backend_utilization \
            + (decode_at_peak - decode_backend_at_peak) / terms.utilization
        if chunk_tokens:
            # a step with a prompt's tokens: every token of it in GEMMs of M = all the step's tokens, at the share
            # of the tensor rate such GEMMs reach (ramping up with M; a MoE's with the tokens each expert gets);
            # the decodes riding along in the same GEMMs at that rate too
            # (a weight-only backend's GEMMs at its own ramp: Marlin's, measured, reaches its share at a smaller M)
            own = terms.backend_format if terms.weight_only else None
            dense, dense_backend = (tokens_in / (tokens_in + rates.ramp("gemm", fmt)) for fmt in (None, own))
            per_expert = tokens_in * expert_scale * terms.routed_share
            moe, moe_backend = (per_expert / (per_expert + rates.ramp("moe", fmt)) if per_expert else 1.0
                                for fmt in (None, own))
            samples = decode_in + sampled_chunks
            head = samples / (samples + rates.ramp_tokens["gemm"]) if samples else 1.0
            gemm = sum(s / rates.gemm_share(c) for c, s in f.other.items()) / dense \
                + f.backend_s / prefill_backend / dense_backend
            routed = f.routed_backend_s / (rates.moe_weight_only_share(terms.backend_format) if terms.weight_only
                                           else rates.moe_share(terms.backend_compute)) / moe_backend \
                + sum(s / rates.moe_share(c) for c, s in f.routed_other.items()) / moe
            prompt_at_peak = (f.backend_s + sum(f.other.values()) + f.routed_backend_s
                              + sum(f.routed_other.values())) * chunk_tokens + f.sampled_s * sampled_chunks
            seg.compute_at_peak_s += prompt_at_peak
            seg.compute_s = gemm * tokens_in + routed * tokens_in * expert_scale \
                + f.sampled_s * samples / rates.gemm_share(f.sampled_compute) / head
        if t.attention_s:
            span = min(config.context, t.window or config.context)
            at_peak = t.attention_s * span * decode_in
            seg.compute_at_peak_s += at_peak
            seg.compute_s += at_peak / terms.utilization
            for c in chunks:  # causal: the i-th token of a chunk attends to the prompt before it and to itself
                work = c.tokens * min(c.context + (c.tokens + 1) / 2, t.window or math.inf)
                sliding = bool(t.window) and t.window < c.context + c.tokens
                seg.compute_at_peak_s += t.attention_s * work
                seg.compute_s += t.attention_s * work / rates.attention_share(t.head_dim, sliding, c.tokens)
        if t.scan_s and chunk_tokens:
            for kind, at_peak in t.scan_s.items():
                seg.compute_at_peak_s += at_peak * chunk_tokens
                seg.compute_s += at_peak * chunk_tokens / rates.scan_share(kind, chunk_tokens)
            # the chunked scan runs outside vLLM's graphs: its Python wrapper launches a dozen kernels a layer
            seg.scan_host_s = sum(n * terms.scan_host_us.get(kind, 0.0) for kind, n in t.scan_layers.items()) * 1e-6
        seg.kernels, seg.eager_kernels, seg.host_equiv = t.kernels, t.eager_kernels, t.host_equiv
        seg.collectives = [Collective(group, kind, where, 1, per_token * tokens_in, link.key,
                                      link.collective_seconds(per_token * tokens_in, factor))
                           for group, kind, where, per_token, link, factor in t.collectives]
        seg.memory_at_datasheet_s = seg.bytes / terms.bandwidth * terms.efficiency
        seg.backend_weights_at_datasheet_s = seg.backend_weight_bytes / terms.bandwidth * terms.efficiency
        seg.memory_s = seg.bytes / terms.bandwidth if terms.weight_rate is None else \
            (seg.bytes - seg.backend_weight_bytes) / terms.bandwidth + seg.backend_weight_bytes / terms.weight_rate
        if t.attention_layouts and micro:  # the backend's decode kernels, beyond the KV at the bandwidth
            extra = sum(attention_layer_us(terms.attention, layout, micro, config.context, triton_3d)
                        for layout in t.attention_layouts) * 1e-6
            seg.attention_kernel_s = max(extra, -seg.kv_bytes / terms.bandwidth)
            seg.memory_s += seg.attention_kernel_s
        seg.routed_calls = t.routed_calls
        seg.floor_s = seg.kernels * terms.floor_us * 1e-6 + seg.routed_calls * terms.routed_call_us * 1e-6
        if uncaptured:  # no graph of this size: the compiled kernels launched one by one
            seg.uncaptured_host_s = seg.kernels * terms.uncaptured_us * 1e-6
        elif config.graphs and piecewise and not chunk_tokens and (t.attention_layers or t.scan_layers):
            # a decode's pieces: the host's Python between them, at every layer vLLM splits its graph (attention,
            # and a hybrid's recurrent mixers: CompilationConfig.splitting_ops)
            seg.piecewise_splits = {"attention": t.attention_layers, **t.scan_layers} if t.attention_layers \
                else dict(t.scan_layers)
        elif piecewise and t.attention_layers:  # piecewise graphs: attention launched by the host between them
            seg.floor_s += t.attention_layers * terms.piecewise_launches["attention"] * terms.host_us * 1e-6
        seg.floor_s += draft_host_s  # the drafts' launches outside graphs, the proposer's host time
        seg.draft_launch_s = draft_launch_s
        seg.host_s = (seg.eager_kernels + seg.host_equiv) * terms.host_us * 1e-6
        segments.append((key, seg))
    if any(set(seg.piecewise_splits) - {"attention"} for _, seg in segments):
        # a hybrid's piecewise step: its host time beyond its layers', once a step (carried by the step's segment)
        tail = next((seg for key, seg in segments if key == ("tail",)), segments[-1][1])
        tail.piecewise_splits = {**tail.piecewise_splits, "recurrent_step": 1}
    for _, seg in segments:
        seg.piecewise_host_s = sum(n * terms.piecewise_launches[split] for split, n
                                   in seg.piecewise_splits.items()) * terms.host_us * 1e-6
    stages: list[list[Segment]] = [[] for _ in range(pp)]
    for key, seg in sorted(segments, key=lambda ks: (ks[0][0] != "head", ks[0][0] == "tail",
                                                     ks[0][1] if len(ks[0]) > 1 else 0)):
        stages[seg.stage].append(seg)
    handoff = None
    placement = terms.placement
    if pp > 1 and placement.pp_link is not None:
        hand_bytes = terms.handoff_bytes_per_token * tokens_in
        handoff = Collective("pp", "send", "stage hand-off (hidden state + residual)", pp - 1, hand_bytes,
                             placement.pp_link.key, placement.pp_link.collective_seconds(hand_bytes, 1.0))
    # the engine's host time: each micro-batch is a step vLLM schedules, of its decodes and the prompt chunks
    host_s = micro_batches * (terms.step_host.step_host_s(micro + len(chunks), terms.kv_groups)
                              + sum(seg.piecewise_host_s for _, seg in segments))
    return ReplicaStep(batch, micro_batches, micro, tokens_per_sequence, stages, handoff, None, host_s,
                       config.async_scheduling, terms.kv_groups)


def _attention_coefficient(choice: AttentionChoice, replica: ReplicaStep) -> Coefficient:
    """The attention backend's decode kernels beyond the KV bytes at the bandwidth, over the step's layers."""
    extra_us = sum(s.attention_kernel_s for s in replica.segments) * 1e6
    unit = f"us per step beyond the KV at the bandwidth ({choice.label}, {choice.kv_dtype} KV)"
    if choice.measured:
        return Coefficient("attention_kernels", extra_us, unit, "measured",
                           f"vLLM's decode kernels timed on an H200, scaled by bandwidth ({choice.reason}): "
                           f"{attention_source()}")
    return Coefficient("attention_kernels", 0.0, unit, "estimate",
                       f"{choice.label}'s decode kernels with a {choice.kv_dtype} cache are unmeasured on this GPU: "
                       f"its KV priced at the device's bandwidth ({choice.reason})")


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
        Coefficient("step_host", costs.step_host_us, "us per step", costs.step_host_kind, costs.step_host_source),
        Coefficient("step_host_per_request", costs.step_host_us_per_request, "us per request a step",
                    costs.step_host_kind, costs.step_host_source),
        Coefficient("step_host_per_kv_group", costs.step_host_us_per_kv_group,
                    "us per KV cache group past the first, a step", costs.step_host_kind, costs.step_host_source),
        *(Coefficient(f"step_host_per_{kind}_kv_group", us, f"us per {kind} KV cache group past the first, a step",
                      costs.step_host_kind, costs.step_host_source)
          for kind, us in costs.step_host_us_per_kv_group_by_kind),
    ]
    rate = backend.rate(hardware)
    if rate and rate.weight_gbps is not None:
        out.append(Coefficient("weight_only_rate", rate.weight_gbps, "GB/s (the format's weights)", rate.kind,
                               f"{backend.name}: {rate.source}"))
    if rate and rate.routed_call_us is not None:
        out.append(Coefficient("routed_gemm_call", rate.routed_call_us,
                               "us per grouped expert GEMM beyond its bytes and the floor", rate.kind,
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

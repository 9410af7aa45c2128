"""How much CUDA graphs buy single-stream decode (pure arithmetic).

Per layer (and one segment for what runs outside the layers: embedding, final norm, lm_head,
sampling):

    t_graph(layer) = bytes(layer) / effective bandwidth + kernels(layer) x graph floor
    t_eager(layer) = max(t_graph(layer), kernels(layer) x host cost per kernel)

summed over the segments. Effective bandwidth = the hardware's bandwidth x its decode efficiency
(hardware.toml); the graph floor (per kernel, per GPU) and the host cost (per kernel, per host
class) come from roofline/data/launch.toml, each with its provenance. A layer of a few big GEMMs
is bandwidth-bound either way; a layer of dozens of small kernels is host-bound in eager mode.
Measured beside this model on an H200: benchmarks/RESULTS-gpu.md.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.inventory import Inventory

from .hardware import Hardware
from .kernels import KernelProfile, estimate_kernels


@dataclass(frozen=True)
class LaunchCosts:
    host_us_per_kernel: float
    host_kind: str
    host_source: str
    graph_floor_us_per_kernel: float
    floor_kind: str
    floor_source: str


def launch_costs(hardware: Hardware, host_us_per_kernel: float | None = None) -> LaunchCosts:
    table = load_table("launch")
    host = table["host"].get(hardware.host) or table["host"]["unknown"]
    floor = table["floor"].get(hardware.key) or table["floor"]["default"]
    # a calibrated entry carries what was measured on that host and GPU: it wins over the table
    if hardware.host_us_per_kernel is not None:
        host = {"host_us_per_kernel": hardware.host_us_per_kernel, "kind": "calibrated", "source": hardware.launch_source}
    if hardware.graph_floor_us_per_kernel is not None:
        floor = {"graph_floor_us_per_kernel": hardware.graph_floor_us_per_kernel, "kind": "calibrated",
                 "source": hardware.launch_source}
    if host_us_per_kernel is not None:
        if host_us_per_kernel <= 0:
            raise RooflineError("host launch cost must be positive")
        host = {"host_us_per_kernel": host_us_per_kernel, "kind": "user", "source": "user (--launch-us)"}
    return LaunchCosts(host["host_us_per_kernel"], host["kind"], host["source"],
                       floor["graph_floor_us_per_kernel"], floor["kind"], floor["source"])


@dataclass
class LayerTime:
    layer: int | None
    bytes_per_token: float
    kernels: float
    graph_us: float
    eager_us: float

    @property
    def host_bound(self) -> bool:
        return self.eager_us > self.graph_us * 1.000001


@dataclass
class CudaGraphEstimate:
    kernels_per_token: float
    eager_tok_s: float
    graph_tok_s: float
    benefit: float  # graph tok/s over eager tok/s
    advice: str
    kernel_origin: str  # "table" | "trace"
    costs: LaunchCosts
    per_layer: list[LayerTime] = field(default_factory=list)
    kernels: KernelProfile | None = None

    @property
    def eager_loss(self) -> float:
        """Share of the graph speed --enforce-eager gives up."""
        return 1.0 - 1.0 / self.benefit if self.benefit > 0 else 0.0

    def to_json(self) -> dict:
        return {
            "kernels_per_token": self.kernels_per_token,
            "eager_tok_s": self.eager_tok_s,
            "graph_tok_s": self.graph_tok_s,
            "benefit": self.benefit,
            "enforce_eager_loss": self.eager_loss,
            "advice": self.advice,
            "kernel_counts": self.kernel_origin,
            "host_us_per_kernel": self.costs.host_us_per_kernel,
            "host_cost_kind": self.costs.host_kind,
            "host_cost_source": self.costs.host_source,
            "graph_floor_us_per_kernel": self.costs.graph_floor_us_per_kernel,
            "graph_floor_kind": self.costs.floor_kind,
            "graph_floor_source": self.costs.floor_source,
            "host_bound_layers_eager": sum(1 for t in self.per_layer if t.host_bound and t.layer is not None),
            "per_layer": [{"layer": t.layer, "bytes_per_token": t.bytes_per_token, "kernels": t.kernels,
                           "graph_us": t.graph_us, "eager_us": t.eager_us} for t in self.per_layer],
        }


def _bytes_per_layer(inventory: Inventory, traffic) -> dict[int | None, float]:
    """Per-token bytes of each decoder layer (weights + its KV / recurrent state); None holds the
    rest (lm_head, embedding row, final norm, MTP)."""
    num_layers = inventory.shape.num_layers
    out: dict[int | None, float] = defaultdict(float)
    for line in traffic.modules:
        layer = line.layer if line.layer is not None and line.layer < num_layers and line.role not in (
            "vision", "audio", "mtp") else None
        out[layer] += line.bytes_per_token
    kv = getattr(traffic, "kv_bytes_per_token", 0.0)
    state = getattr(traffic, "state_bytes_per_token", 0.0)
    # spread KV and state over their layers by each layer's share of elements
    if inventory.shape.attention and kv:
        context = getattr(getattr(traffic, "scenario", None), "context", 0) or 1
        weights = {a.layer: a.kv_elements_per_token() * min(context, a.window or context) for a in inventory.shape.attention}
        total = sum(weights.values()) or 1
        for layer, w in weights.items():
            out[layer] += kv * w / total
    if inventory.shape.recurrent and state:
        weights = {r.layer: r.state_elements + r.conv_elements for r in inventory.shape.recurrent}
        total = sum(weights.values()) or 1
        for layer, w in weights.items():
            out[layer] += state * w / total
    return dict(out)


def advice_for(benefit: float, eager_tok_s: float, graph_tok_s: float) -> str:
    loss = 1.0 - 1.0 / benefit if benefit > 0 else 0.0
    if benefit >= 1.10:
        return (f"keep CUDA graphs on; --enforce-eager costs ~{loss:.0%} "
                f"({graph_tok_s:.1f} -> {eager_tok_s:.1f} tok/s): the host cannot launch this model's "
                f"small kernels as fast as the GPU runs them")
    if benefit >= 1.02:
        return (f"keep CUDA graphs on; --enforce-eager costs ~{loss:.0%} "
                f"({graph_tok_s:.1f} -> {eager_tok_s:.1f} tok/s)")
    return ("CUDA graphs change little here (the GPU, not kernel launches, sets the pace): "
            "--enforce-eager costs under 2% and is safe where graphs cause trouble")


def applies_to(hardware: Hardware) -> bool:
    """CUDA graphs are a GPU matter: a CPU host (a `calibrate --save` entry) has none."""
    return hardware.host != "cpu"


def estimate(inventory: Inventory, traffic, hardware: Hardware, backend: str | None = None, *,
             kernels: KernelProfile | None = None, host_us_per_kernel: float | None = None) -> CudaGraphEstimate:
    """Eager and CUDA-graph decode tok/s of one stream, and the advice.

    inventory / traffic: the core's Inventory and compute_traffic() result (per-module
    bytes_per_token lines). kernels: a measured profile (parse_trace) replaces the table estimate.
    Batch B > 1: each step reads the traffic's bytes for B tokens and launches the kernels once,
    so tok/s are aggregate (bytes per token already divide by the tokens of a step).
    """
    profile = kernels or estimate_kernels(inventory, backend)
    costs = launch_costs(hardware, host_us_per_kernel)
    bandwidth = hardware.bandwidth_gbps * 1e9 * hardware.efficiency
    if bandwidth <= 0:
        raise RooflineError(f"hardware {hardware.key}: bandwidth must be positive")
    tokens_per_step = traffic.scenario.batch * traffic.tokens_per_step if hasattr(traffic, "scenario") else 1.0
    bytes_by_layer = _bytes_per_layer(inventory, traffic)
    kernels_by_layer = profile.per_layer()
    # kernels of layers the inventory does not know (a trace of another model depth) stay as counted
    segments = sorted(set(bytes_by_layer) | set(kernels_by_layer), key=lambda k: (k is None, k or 0))
    per_layer = []
    graph_us_total = eager_us_total = 0.0
    for layer in segments:
        step_bytes = bytes_by_layer.get(layer, 0.0) * tokens_per_step
        n = kernels_by_layer.get(layer, 0.0)
        graph_us = step_bytes / bandwidth * 1e6 + n * costs.graph_floor_us_per_kernel
        eager_us = max(graph_us, n * costs.host_us_per_kernel)
        per_layer.append(LayerTime(layer, bytes_by_layer.get(layer, 0.0), n, graph_us, eager_us))
        graph_us_total += graph_us
        eager_us_total += eager_us
    if graph_us_total <= 0:
        raise RooflineError("nothing to time: no bytes and no kernels per token")
    graph_tok_s = tokens_per_step / (graph_us_total / 1e6)
    eager_tok_s = tokens_per_step / (eager_us_total / 1e6)
    benefit = graph_tok_s / eager_tok_s
    return CudaGraphEstimate(
        kernels_per_token=profile.kernels_per_token / tokens_per_step,
        eager_tok_s=eager_tok_s, graph_tok_s=graph_tok_s, benefit=benefit,
        advice=advice_for(benefit, eager_tok_s, graph_tok_s), kernel_origin=profile.origin,
        costs=costs, per_layer=per_layer, kernels=profile,
    )

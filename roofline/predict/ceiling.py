"""The single-stream decode ceiling: bandwidth / bytes read per token (pure)."""
from __future__ import annotations

from dataclasses import dataclass

from .hardware import Hardware
from .traffic import Traffic


@dataclass(frozen=True)
class Ceiling:
    bytes_per_token: float
    ceiling_tok_s: float  # aggregate over the batch: no engine beats it without speculation
    ceiling_tok_s_per_stream: float
    expected_tok_s: float  # ceiling x the hardware's measured (or prior) efficiency
    efficiency: float
    efficiency_kind: str
    efficiency_source: str


def compute_ceiling(traffic: Traffic, hardware: Hardware) -> Ceiling:
    bandwidth = hardware.bandwidth_gbps * 1e9
    per_token = traffic.bytes_per_token
    ceiling = bandwidth / per_token if per_token > 0 else float("inf")
    batch = traffic.scenario.batch
    return Ceiling(
        bytes_per_token=per_token,
        ceiling_tok_s=ceiling,
        ceiling_tok_s_per_stream=ceiling / batch,
        expected_tok_s=ceiling * hardware.efficiency,
        efficiency=hardware.efficiency,
        efficiency_kind=hardware.efficiency_kind,
        efficiency_source=hardware.efficiency_source,
    )

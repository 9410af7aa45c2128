"""The interconnects vLLM's collectives cross (roofline/data/hardware.toml [link.*]), and what one
collective costs on them (pure)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from roofline.data import load_table
from roofline.errors import RooflineError

from .hardware import Hardware


@dataclass(frozen=True)
class Link:
    key: str
    name: str
    bandwidth_gbps: float
    latency_us: float
    engine: str
    source: str
    max_ranks: int = 2  # the most devices this link joins, as the table describes it
    ranks_per_box: int = 1  # devices in one box (GB10: one; an HGX board: eight)
    scope: str = "box"  # "box": inside one box; "network": between boxes
    latency_kind: str = "estimate"
    collective: str = "NCCL"
    network_for: tuple[str, ...] = ()

    def boxes(self, ranks: int) -> int:
        return -(-ranks // self.ranks_per_box)

    def collective_seconds(self, message_bytes: float, factor: float) -> float:
        """One collective on this link: its latency plus `factor` x message / bandwidth (factor:
        2(n-1)/n for an all-reduce, (n-1)/n for an all-gather, 1 for a send)."""
        return self.latency_us * 1e-6 + factor * message_bytes / (self.bandwidth_gbps * 1e9)

    def to_json(self) -> dict:
        return {"key": self.key, "name": self.name, "scope": self.scope, "bandwidth_gbps": self.bandwidth_gbps,
                "latency_us": self.latency_us, "latency_kind": self.latency_kind, "collective": self.collective,
                "source": self.source}


def allreduce_factor(ranks: int) -> float:
    return 2 * (ranks - 1) / ranks


@functools.lru_cache(maxsize=1)
def links() -> dict[str, Link]:
    out = {}
    for key, entry in load_table("hardware").get("link", {}).items():
        out[key] = Link(key, entry["name"], float(entry["bandwidth_gbps"]), float(entry["latency_us"]),
                        entry["engine"], entry["source"], int(entry["max_ranks"]), int(entry["ranks_per_box"]),
                        entry["scope"], entry["latency_kind"], entry["collective"],
                        tuple(entry.get("network_for", ())))
    return out


def _names(hardware: Hardware) -> set[str]:
    """The keys the link table may name this hardware by: its own, and the entry it was derived from (an
    entry `calibrate --from-results` fitted over gb10 is still a DGX Spark, cabled as one)."""
    return {hardware.key, hardware.derived_from} - {""}


def default_link(hardware: Hardware) -> Link:
    """The link this hardware's collectives take by default (hardware.toml default_for)."""
    for key, entry in load_table("hardware").get("link", {}).items():
        if _names(hardware) & set(entry.get("default_for", ())):
            return links()[key]
    return links()["pcie5"]


def in_box_link(hardware: Hardware, name: str | None = None) -> Link:
    """The link inside one box: --link by name, else the hardware's default when it is one."""
    if name:
        return named_link(name, "box")
    link = default_link(hardware)
    return link if link.scope == "box" else links()["pcie5"]


def network_link(hardware: Hardware, boxes: int = 2, name: str | None = None) -> Link:
    """The link between boxes of this hardware: --network by name, else the first of hardware.toml's
    network_for that joins `boxes` of them (two Sparks: the direct cable; more: through a switch)."""
    if name:
        return named_link(name, "network")
    candidates = [link for link in links().values()
                  if link.scope == "network" and _names(hardware) & set(link.network_for)]
    for link in candidates:
        if link.max_ranks >= boxes:
            return link
    return candidates[0] if candidates else links()["ethernet-100g"]


def named_link(name: str, scope: str | None = None) -> Link:
    """A link by its hardware.toml key (of the scope asked for, when one is)."""
    link = links().get(name)
    if link is None or (scope is not None and link.scope != scope):
        known = ", ".join(k for k, v in links().items() if scope is None or v.scope == scope)
        what = {"box": "in-box link", "network": "network link"}.get(scope or "", "link")
        raise RooflineError(f"unknown {what} {name!r}; known: {known}")
    return link


def box_devices(hardware: Hardware) -> int | None:
    """The most devices one box of this hardware holds, as hardware.toml's links describe its boxes
    (ranks_per_box of the links that join them: a DGX Spark holds one GB10), or None when no link
    states it."""
    sizes = [link.ranks_per_box for link in links().values() if _names(hardware) & set(link.network_for)]
    return max(sizes) if sizes else None


def link_refusal(link: Link, ranks: int) -> str | None:
    """Why the hardware table cannot build `ranks` devices over `link`, or None."""
    if ranks <= link.max_ranks:
        return None
    return (f"TP={ranks} needs {link.boxes(ranks)} box{'es' if link.boxes(ranks) > 1 else ''}, but "
            f"{link.name} joins at most {link.max_ranks} devices as roofline/data/hardware.toml describes it "
            f"(add a [link.*] entry to roofline/data/hardware.toml for a larger topology)")

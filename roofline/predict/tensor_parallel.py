"""Tensor parallelism: per-rank bytes, all-reduce cost per layer, and the resulting ceiling (pure).

vLLM's tensor parallelism (Megatron style) shards every column / row parallel linear, the
vocab-parallel embedding and lm_head, the routed experts (each rank holds a slice of every
expert) and the attention KV heads; it replicates norms, MoE routers, shared-expert gates
and anything it does not know how to split. Each decoder layer ends its token mixer (attention,
GDN, Mamba) and its MLP / MoE with a row-parallel linear followed by one all-reduce of the
hidden state, so a step pays two all-reduces per layer (one for layers with a single mixer,
NemotronH), each `latency + 2 (n-1)/n x bytes / bandwidth` for a ring all-reduce.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.inventory import Inventory

from .hardware import Hardware
from .traffic import Traffic

# roles vLLM splits across ranks; everything else is replicated on each rank
SHARDED_ROLES = frozenset({
    "attention_qkv", "attention_out", "linear_attn_in", "linear_attn_out", "mamba_in", "mamba_out",
    "conv1d", "moe_experts", "shared_expert", "mlp", "embedding", "lm_head", "mtp",
})
ACTIVATION_BYTES = 2  # the hidden state is all-reduced in the model dtype (BF16)


@dataclass(frozen=True)
class Link:
    key: str
    name: str
    bandwidth_gbps: float
    latency_us: float
    engine: str
    source: str


@functools.lru_cache(maxsize=1)
def links() -> dict[str, Link]:
    out = {}
    for key, entry in load_table("rules").get("link", {}).items():
        out[key] = Link(key, entry["name"], float(entry["bandwidth_gbps"]), float(entry["latency_us"]),
                        entry["engine"], entry["source"])
    return out


def default_link(hardware: Hardware) -> Link:
    for key, entry in load_table("rules").get("link", {}).items():
        if hardware.key in entry.get("default_for", ()):
            return links()[key]
    return links()["pcie5"]


def get_link(name: str | None, hardware: Hardware) -> Link:
    if not name:
        return default_link(hardware)
    table = links()
    if name not in table:
        raise RooflineError(f"unknown link {name!r}; known: {', '.join(table)}")
    return table[name]


@dataclass
class TensorParallel:
    ranks: int
    link: Link
    bytes_per_rank: float  # resident weights on each rank
    replicated_bytes: float  # of which replicated on every rank
    bytes_per_token_per_rank: float  # read by each rank per token (weights + KV + state)
    allreduces_per_token: int
    allreduce_bytes: float  # one all-reduce, per step
    comm_seconds_per_step: float
    ceiling_tok_s: float  # bandwidth-only, all ranks reading in parallel, plus the link
    expected_tok_s: float
    single_rank_ceiling_tok_s: float
    engine: str

    def to_json(self) -> dict:
        return {
            "ranks": self.ranks, "link": self.link.key, "link_name": self.link.name,
            "link_bandwidth_gbps": self.link.bandwidth_gbps, "link_latency_us": self.link.latency_us,
            "link_source": self.link.source, "bytes_per_rank": self.bytes_per_rank,
            "replicated_bytes": self.replicated_bytes, "bytes_per_token_per_rank": self.bytes_per_token_per_rank,
            "allreduces_per_token": self.allreduces_per_token, "allreduce_bytes": self.allreduce_bytes,
            "comm_seconds_per_step": self.comm_seconds_per_step, "ceiling_tok_s": self.ceiling_tok_s,
            "expected_tok_s": self.expected_tok_s, "single_rank_ceiling_tok_s": self.single_rank_ceiling_tok_s,
            "engine": self.engine,
        }


def allreduces_per_step(inventory: Inventory) -> int:
    """Two per decoder layer (mixer + MLP), one for layers that have only one of them."""
    per_layer: dict[int, set[str]] = {}
    for m in inventory.modules:
        if m.layer is None or m.role == "mtp":
            continue
        if m.role in ("attention_out", "linear_attn_out", "mamba_out"):
            per_layer.setdefault(m.layer, set()).add("mixer")
        elif m.role in ("mlp", "moe_experts", "shared_expert"):
            per_layer.setdefault(m.layer, set()).add("mlp")
    return sum(len(kinds) for kinds in per_layer.values())


def tensor_parallel(inventory: Inventory, traffic: Traffic, hardware: Hardware, ranks: int,
                    link: Link | None = None) -> TensorParallel:
    if ranks < 1:
        raise RooflineError("--tp must be at least 1")
    link = link or default_link(hardware)
    kv_heads = min((a.kv_heads for a in inventory.shape.attention), default=ranks)
    sharded = replicated = 0.0
    read_sharded = read_replicated = 0.0
    for module, moved in zip(inventory.modules, traffic.modules):
        if module.role in SHARDED_ROLES:
            sharded += module.nbytes
            read_sharded += moved.bytes_per_token
        else:
            replicated += module.nbytes
            read_replicated += moved.bytes_per_token
    # KV heads split across ranks while there are enough of them; below that vLLM replicates
    kv_split = min(ranks, max(kv_heads, 1))
    per_token = (read_sharded / ranks + read_replicated + traffic.kv_bytes_per_token / kv_split
                 + traffic.state_bytes_per_token / ranks)
    batch = traffic.scenario.batch
    tokens_in_step = batch * (1 + traffic.scenario.speculative_tokens)
    tokens_out = batch * traffic.tokens_per_step
    count = allreduces_per_step(inventory) if ranks > 1 else 0
    message = inventory.shape.hidden_size * ACTIVATION_BYTES * tokens_in_step
    one = link.latency_us * 1e-6 + 2 * (ranks - 1) / ranks * message / (link.bandwidth_gbps * 1e9) if ranks > 1 else 0.0
    comm = count * one
    bandwidth = hardware.bandwidth_gbps * 1e9
    memory_seconds = per_token * tokens_out / bandwidth
    step = memory_seconds + comm
    ceiling = tokens_out / step if step > 0 else float("inf")
    expected_step = memory_seconds / hardware.efficiency + comm
    return TensorParallel(
        ranks=ranks, link=link, bytes_per_rank=sharded / ranks + replicated, replicated_bytes=replicated,
        bytes_per_token_per_rank=per_token, allreduces_per_token=count, allreduce_bytes=message,
        comm_seconds_per_step=comm, ceiling_tok_s=ceiling,
        expected_tok_s=tokens_out / expected_step if expected_step > 0 else float("inf"),
        single_rank_ceiling_tok_s=bandwidth / traffic.bytes_per_token if traffic.bytes_per_token else float("inf"),
        engine=link.engine,
    )

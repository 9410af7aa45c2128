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
KV_PROJECTIONS = (".k_proj", ".v_proj")  # replicated, not split, once ranks outnumber the KV heads


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


def config_value(config: dict, fields: list[str]):
    inner = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    for section in (inner, config):
        for field in fields:
            value = section.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


SIZE_RULES = {
    "divides": lambda value, tp: value % tp == 0,
    "kv_heads": lambda value, tp: value % tp == 0 if tp <= value else tp % value == 0,
    "at_least": lambda value, tp: value >= tp,
}


def tp_refusal(config: dict, ranks: int, expert_parallel: bool = False) -> str | None:
    """vLLM's reason for refusing tensor parallelism over `ranks` for this config (the rules of
    roofline/data/parallel.toml, from vLLM's own checks), or None when vLLM accepts it. With expert
    parallelism the rules that split experts do not apply (each rank holds whole experts)."""
    if ranks <= 1:
        return None
    for rule in load_table("parallel")["tp_rule"]:
        if expert_parallel and rule.get("experts"):
            continue
        value = config_value(config, rule["fields"])
        if value is not None and not SIZE_RULES[rule["rule"]](value, ranks):
            return rule["message"].format(value=value, tp=ranks)
    return None


def link_refusal(link: Link, ranks: int) -> str | None:
    """Why the hardware table cannot build `ranks` devices over `link`, or None."""
    if ranks <= link.max_ranks:
        return None
    return (f"TP={ranks} needs {link.boxes(ranks)} box{'es' if link.boxes(ranks) > 1 else ''}, but "
            f"{link.name} joins at most {link.max_ranks} devices as roofline/data/hardware.toml describes it "
            f"(add a [link.*] entry to roofline/data/hardware.toml for a larger topology)")


def default_link(hardware: Hardware) -> Link:
    for key, entry in load_table("hardware").get("link", {}).items():
        if hardware.key in entry.get("default_for", ()):
            return links()[key]
    return links()["pcie5"]


def network_link(hardware: Hardware, boxes: int = 2) -> Link:
    """The link between boxes of this hardware (hardware.toml [link.*] network_for): the first
    that joins `boxes` of them (two Sparks: the direct cable; more: through a switch)."""
    candidates = [link for link in links().values() if link.scope == "network" and hardware.key in link.network_for]
    for link in candidates:
        if link.max_ranks >= boxes:
            return link
    return candidates[0] if candidates else links()["ethernet-100g"]


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
            "engine": self.engine, "boxes": self.link.boxes(self.ranks),
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
    # KV heads split across ranks while there are enough of them; past that vLLM replicates them
    # (each rank holds max(1, kv_heads // ranks)): the KV cache and the k / v projections
    kv_split = min(ranks, max(kv_heads, 1))
    sharded = replicated = 0.0
    read_sharded = read_replicated = 0.0
    for module, moved in zip(inventory.modules, traffic.modules):
        if module.role == "attention_qkv" and module.name.endswith(KV_PROJECTIONS) and kv_split < ranks:
            share = ranks / kv_split  # each rank holds 1/kv_split of it, counted as ranks/kv_split shards
            sharded += module.nbytes * share
            read_sharded += moved.bytes_per_token * share
        elif module.role in SHARDED_ROLES:
            sharded += module.nbytes
            read_sharded += moved.bytes_per_token
        else:
            replicated += module.nbytes
            read_replicated += moved.bytes_per_token
    per_token = (read_sharded / ranks + read_replicated + traffic.kv_bytes_per_token / kv_split
                 + traffic.state_bytes_per_token / ranks)
    batch = traffic.scenario.batch
    tokens_in_step = batch * (1 + traffic.scenario.speculative_tokens)
    tokens_out = batch * traffic.tokens_per_step
    count = allreduces_per_step(inventory) if ranks > 1 else 0
    message = inventory.shape.hidden_size * ACTIVATION_BYTES * tokens_in_step
    one = link.collective_seconds(message, allreduce_factor(ranks)) if ranks > 1 else 0.0
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

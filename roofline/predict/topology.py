"""How vLLM splits a model over devices: TP x PP x DP, with or without expert parallelism, the
splits it refuses (roofline/data/parallel.toml), pipeline stages, which link each group's
collectives cross, and how many ranks share a module's bytes (pure).

vLLM's rank order puts TP innermost, then PP, then DP (global rank = (dp x pp + pp_rank) x tp +
tp_rank), so a TP group is consecutive ranks and crosses boxes only when it is wider than a box.
With --enable-expert-parallel the experts of each PP stage are spread whole over its tp x dp ranks
(ep = tp x dp); attention and dense MLPs stay tensor-parallel inside each DP replica. Under TP vLLM
(Megatron style) shards column / row-parallel linears, the vocab-parallel embedding and lm_head, the
routed experts and the KV heads, and replicates the rest (roofline/data/roles.toml `tp`).
"""
from __future__ import annotations

from dataclasses import dataclass

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.inventory import Inventory
from roofline.model.roles import role_properties

from .hardware import Hardware
from .links import Link, default_link, in_box_link, link_refusal, named_link

ACTIVATION_BYTES = 2  # the hidden state travels in the model dtype (BF16)
KV_PROJECTIONS = (".k_proj", ".v_proj")  # split by KV head: replicated once ranks outnumber them
RESIDUAL_COPIES = 2  # a stage hands over the hidden state and the residual (IntermediateTensors)


@dataclass(frozen=True)
class Topology:
    tp: int = 1
    pp: int = 1
    dp: int = 1
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


SINGLE = Topology()


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


# --------------------------------------------------------------------------- vLLM's refusals

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


def refusal(config: dict, topology: Topology) -> str | None:
    """vLLM's reason for refusing this split of the config, or None."""
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


# --------------------------------------------------------------------------- links

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


def tensor_parallel_placement(hardware: Hardware, ranks: int, link_name: str | None = None) -> Placement:
    """TP over `ranks` devices joined by one link (plan --tp, a server's TP): a link between boxes
    puts one rank in each box (two Sparks over ConnectX-7), a link inside a box holds them all."""
    link = named_link(link_name) if link_name else default_link(hardware)
    reason = link_refusal(link, ranks)
    if reason:
        raise RooflineError(f"--tp {ranks}: {reason}")
    if link.scope == "box":
        return place(Topology(tp=ranks), ranks, link, None)
    return place(Topology(tp=ranks), link.ranks_per_box, in_box_link(hardware), link)


SINGLE_DEVICE = Placement(1, 1, None, None, None)


# --------------------------------------------------------------------------- who holds what

def kv_split(inventory: Inventory, tp: int) -> int:
    """Ranks the KV heads (cache and k / v projections) are split over: all TP ranks while there are
    enough heads; past that vLLM replicates them (each rank holds max(1, kv_heads // tp))."""
    kv_heads = min((a.kv_heads for a in inventory.shape.attention), default=tp)
    return min(tp, max(kv_heads, 1))


def sharing_ranks(module, topology: Topology, kv_ranks: int) -> int:
    """How many ranks of one stage share this module's bytes (1: replicated on each)."""
    split = role_properties(module.role).tp
    if split == "experts":
        return topology.ep if topology.expert_parallel else topology.tp
    if module.role == "attention_qkv" and module.name.endswith(KV_PROJECTIONS):
        return kv_ranks
    return 1 if split == "replicated" else topology.tp


def stage_of(layer: int | None, role: str, stages: list[range]) -> int:
    """The pipeline stage a module (or a kernel count) of this layer and role sits on."""
    if layer is not None and role != "mtp":
        for index, layers in enumerate(stages):
            if layer in layers:
                return index
        return len(stages) - 1
    return 0 if role and role_properties(role).stage == "first" else len(stages) - 1

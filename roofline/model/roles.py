"""Module name -> role, by the first matching rule of roofline/data/roles.toml, and each role's
properties (the table's [role.*] rows): the one vocabulary every stage reads."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from roofline.data import load_table

# A decoder layer's index in a module name: "model.layers.3.mlp", "transformer.h.3.attn",
# "backbone.layers.3.mixer". The one pattern for it: grouping, traces and the hook's records use it.
LAYER_CONTAINERS = r"(?:layers|h|blocks|layer|decoder_layers)"
LAYER_INDEX = re.compile(rf"(?:^|\.)({LAYER_CONTAINERS})\.(\d+)(?:\.|$)")


@dataclass(frozen=True)
class RoleProperties:
    name: str
    linear: bool
    residual: bool
    vllm_unquantized: bool
    format_vote: bool
    read: str  # all | none | row | routed | per_draft
    flops: bool
    kernels: str  # gemm | moe | gather | none
    tp: str  # column | row | vocab | experts | replicated
    all_reduce: str  # mixer | mlp | ""
    stage: str  # first | last

    @property
    def sharded(self) -> bool:
        return self.tp != "replicated"


_READS = {"all", "none", "row", "routed", "per_draft"}
_KERNELS = {"gemm", "moe", "gather", "none"}
_TP = {"column", "row", "vocab", "experts", "replicated"}


@functools.lru_cache(maxsize=1)
def properties() -> dict[str, RoleProperties]:
    out = {}
    for name, row in load_table("roles")["role"].items():
        props = RoleProperties(name=name, **row)
        if props.read not in _READS or props.kernels not in _KERNELS or props.tp not in _TP:
            raise ValueError(f"roles.toml [role.{name}]: read / kernels / tp outside their vocabulary")
        out[name] = props
    return out


def role_properties(role: str) -> RoleProperties:
    return properties()[role]


def roles_where(**wanted) -> frozenset[str]:
    """The roles whose properties equal every keyword given: roles_where(linear=True)."""
    return frozenset(name for name, props in properties().items()
                     if all(getattr(props, key) == value for key, value in wanted.items()))


ROLES = tuple(properties())
# roles whose weights a decoded token does not read at all (vision / audio towers)
NOT_READ_IN_TEXT_DECODE = roles_where(read="none")


@functools.lru_cache(maxsize=1)
def _rules() -> tuple[tuple[re.Pattern, str], ...]:
    rules = []
    for rule in load_table("roles")["rule"]:
        if rule["role"] not in ROLES:
            raise ValueError(f"roles.toml: unknown role {rule['role']!r}")
        rules.append((re.compile(rule["pattern"]), rule["role"]))
    return tuple(rules)


@functools.lru_cache(maxsize=65536)
def role_of(module_name: str) -> str:
    for pattern, role in _rules():
        if pattern.search(module_name):
            return role
    return "other"


def layer_of(module_name: str) -> int | None:
    match = LAYER_INDEX.search(module_name)
    return int(match.group(2)) if match else None


def classify(module_name: str, num_layers: int | None = None) -> tuple[str, int | None]:
    """(role, layer). Decoder layers numbered past num_hidden_layers are MTP / next-token
    prediction layers (DeepSeek-V3 stores its MTP block as model.layers.61)."""
    role, layer = role_of(module_name), layer_of(module_name)
    if (num_layers and layer is not None and layer >= num_layers
            and role not in NOT_READ_IN_TEXT_DECODE and ".mtp." not in f".{module_name}."):
        role = "mtp"
    return role, layer

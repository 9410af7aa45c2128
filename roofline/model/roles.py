"""Module name -> role, by the first matching rule of roofline/data/roles.toml."""
from __future__ import annotations

import functools
import re

from roofline.data import load_table

ROLES = (
    "attention_qkv", "attention_out", "linear_attn_in", "linear_attn_out", "conv1d",
    "mamba_in", "mamba_out", "moe_experts", "shared_expert", "router", "shared_expert_gate",
    "mlp", "norm", "embedding", "lm_head", "mtp", "vision", "audio", "other",
)

# roles whose weights a decoded token does not read at all
NOT_READ_IN_TEXT_DECODE = {"vision", "audio"}

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer|decoder_layers)\.(\d+)(?:\.|$)")


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
    match = _LAYER.search(module_name)
    return int(match.group(1)) if match else None


def classify(module_name: str, num_layers: int | None = None) -> tuple[str, int | None]:
    """(role, layer). Decoder layers numbered past num_hidden_layers are MTP / next-token
    prediction layers (DeepSeek-V3 stores its MTP block as model.layers.61)."""
    role, layer = role_of(module_name), layer_of(module_name)
    if (num_layers and layer is not None and layer >= num_layers
            and role not in ("vision", "audio") and ".mtp." not in f".{module_name}."):
        role = "mtp"
    return role, layer

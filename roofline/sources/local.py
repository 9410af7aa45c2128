"""Source: a local checkpoint directory (single model.safetensors or sharded with
model.safetensors.index.json). Reads config files and safetensors headers only."""
from __future__ import annotations

import gc
import json
import os
from contextlib import contextmanager

from roofline.errors import RooflineError
from roofline.files import MAX_DEPTH, read_regular, too_deep
from roofline.model.assemble import inventory_from_tensors
from roofline.model.inventory import Inventory, Tensor

from .safetensors_header import read_local_header

INDEX = "model.safetensors.index.json"


MAX_CONFIG_BYTES = 64 * 1024 * 1024


def read_json(path: str, what: str | None = None) -> dict:
    """A config file (config.json, hf_quant_config.json, an index) as transformers reads it: Python's JSON,
    which takes the NaN / Infinity / -Infinity some real configs hold (Nemotron-3-Super's), from a regular
    file of at most 64 MB, nested no deeper than files.MAX_DEPTH."""
    if not os.path.exists(path) and not os.path.islink(path):
        raise RooflineError(f"{what or path}: not found")
    raw = read_regular(path, what or path, MAX_CONFIG_BYTES)
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RooflineError(f"{path}: invalid JSON ({exc})") from None
    except RecursionError:
        raise RooflineError(f"{path}: nested deeper than {MAX_DEPTH} levels, not a config file") from None
    if too_deep(value):
        raise RooflineError(f"{path}: nested deeper than {MAX_DEPTH} levels, not a config file")
    if not isinstance(value, dict):
        raise RooflineError(f"{path}: expected a JSON object")
    return value


def shard_names(index: dict, where: str) -> list[str]:
    """Shard file names of an index, in a stable order, refusing names that leave the folder."""
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise RooflineError(f"{where}: no weight_map")
    shards = set(weight_map.values())  # a handful of names, checked once each
    for shard in shards:
        if not isinstance(shard, str) or not shard.endswith(".safetensors"):
            raise RooflineError(f"{where}: a tensor maps to {shard!r}, not a .safetensors file")
        if "/" in shard or "\\" in shard or shard.startswith("."):
            raise RooflineError(f"{where}: shard name {shard!r} is not a plain file name")
    return sorted(shards)


def merge_shards(per_shard: list[tuple[str, list[Tensor]]], index: dict | None) -> list[Tensor]:
    tensors: list[Tensor] = []
    seen: dict[str, str] = {}
    for shard, shard_tensors in per_shard:
        for tensor in shard_tensors:
            if tensor.name in seen:
                raise RooflineError(f"tensor {tensor.name!r} appears in both {seen[tensor.name]} and {shard}")
            seen[tensor.name] = shard
        tensors.extend(shard_tensors)
    if index:
        missing = [name for name, shard in index["weight_map"].items() if seen.get(name) != shard]
        if missing:
            name = missing[0]
            raise RooflineError(f"{INDEX} maps {name!r} to {index['weight_map'][name]} but that shard's header "
                                f"lacks it ({len(missing)} such tensors)")
    return tensors


def optional_json(path: str) -> dict | None:
    return read_json(path) if os.path.isfile(path) else None


@contextmanager
def gc_paused():
    """Headers make ~10 small acyclic objects per tensor; the cyclic GC would rescan the growing
    heap many times over (2-3x the whole audit on 100k tensors) to find nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_local(directory: str, model_id: str | None = None) -> Inventory:
    with gc_paused():
        return _load_local(directory, model_id)


def _load_local(directory: str, model_id: str | None) -> Inventory:
    if not os.path.isdir(directory):
        raise RooflineError(f"{directory}: not a directory")
    config = read_json(os.path.join(directory, "config.json"), f"{directory}/config.json")
    hf_quant = optional_json(os.path.join(directory, "hf_quant_config.json"))
    index_path = os.path.join(directory, INDEX)
    index = read_json(index_path) if os.path.isfile(index_path) else None
    if index is not None:
        files = shard_names(index, index_path)
    else:
        files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
    if not files:
        raise RooflineError(f"{directory}: no .safetensors files (use --config-only to audit from config.json)")
    per_shard, bytes_read, total = [], 0, 0
    for name in files:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise RooflineError(f"{path}: shard listed in {INDEX} is missing")
        tensors, read = read_local_header(path)
        per_shard.append((name, tensors))
        bytes_read += read
        total += os.path.getsize(path)
    tensors = merge_shards(per_shard, index)
    if not tensors:
        raise RooflineError(f"{directory}: the safetensors files hold no tensors")
    inventory = inventory_from_tensors(model_id or os.path.basename(os.path.abspath(directory)),
                                       "safetensors", config, tensors, hf_quant)
    inventory.bytes_read = bytes_read
    inventory.checkpoint_bytes = total
    return inventory

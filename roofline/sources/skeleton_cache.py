"""Content-addressed cache of config skeletons, so that the config path pays for torch and
transformers once per distinct config, not once per command.

Key: sha256 of the config as transformers builds it (quantization_config removed: the skeleton
is the unquantized checkpoint, so a BF16 release and its FP8 / NVFP4 variants share one entry),
the installed transformers version (read from its metadata, not imported), and the source of
the code that builds skeletons (a change to it is a new key, never a stale hit).

Where: roofline.sources.cache_files.cache_root() ($ROOFLINE_CACHE, else $XDG_CACHE_HOME/roofline,
else ~/.cache/roofline: the XDG convention huggingface_hub's cache follows too), skeletons/<key>.json. An entry is data
from disk, checked like a safetensors header before use: a corrupt, truncated, foreign or
implausible entry is ignored and rebuilt, never trusted. Writing is atomic (temp file +
rename); a cache that cannot be written is skipped silently.

Within one process the same key is built or read once (plan's recipes, compare's rows).
"""
from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

from roofline.model.quant_config import without_quantization
from roofline.model.skeleton import Skeleton

from .cache_files import cache_root, tensor_rows, tensors_from_rows
from .cache_files import read_entry as read_json
from .cache_files import write_entry as write_json

SCHEMA = "roofline.skeleton/1"
# an entry is refused beyond these (far above any real checkpoint: DeepSeek-V3 holds ~92k tensors
# in its header, ~150k per-expert weights after unfusing)
MAX_TENSORS = 4_000_000
MAX_DIM = 1 << 31
MAX_ENTRY_BYTES = 1 << 30
# the code whose output is cached: its source is part of the key
_BUILDERS = ("transformers_meta.py", "../model/skeleton.py")

_memo: dict[str, Skeleton] = {}


def cache_dir() -> Path:
    return cache_root() / "skeletons"


# transformers 5 writes the floats JSON has no word for as {"__float__": "Infinity"} (PreTrainedConfig.
# _encode_special_floats: Granite 4.0-H's time_step_limit [0.0, inf]); from_pretrained decodes them, for_model does not
SPECIAL_FLOATS = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


def _decoded_floats(value):
    if isinstance(value, dict):
        if set(value) == {"__float__"} and value["__float__"] in SPECIAL_FLOATS:
            return SPECIAL_FLOATS[value["__float__"]]
        return {k: _decoded_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded_floats(v) for v in value]
    return value


def buildable_config(config: dict) -> dict:
    """The config without quantization_config (roofline applies it itself; transformers would try
    to load a quantizer, and some, like MXFP4, need a GPU) and without auto_map, its special floats
    decoded as transformers' from_pretrained decodes them."""
    return {k: _decoded_floats(v) for k, v in without_quantization(config).items() if k != "auto_map"}


def _transformers_version() -> str:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "none"


def _builder_digest() -> bytes:
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _BUILDERS:
        digest.update((here / name).read_bytes())
    return digest.digest()


def skeleton_key(config: dict) -> str:
    canonical = json.dumps(buildable_config(config), sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256()
    for part in (SCHEMA.encode(), _transformers_version().encode(), _builder_digest(), canonical.encode()):
        digest.update(part + b"\0")
    return digest.hexdigest()


def cached_skeleton(config: dict, build, *, use_cache: bool = True) -> Skeleton:
    """The skeleton of `config`: from this process, from the disk cache, or `build()` (which
    imports torch and transformers) and stored."""
    if not use_cache:
        return build()
    key = skeleton_key(config)
    skeleton = _memo.get(key)
    if skeleton is None:
        path = cache_dir() / f"{key}.json"
        skeleton = read_entry(path, key)
        if skeleton is None:
            skeleton = build()
            write_entry(path, key, skeleton)
        _memo[key] = skeleton
    return skeleton


def read_entry(path: Path, key: str) -> Skeleton | None:
    """The cached skeleton, or None when there is none or it fails any check."""
    try:
        return _checked(read_json(path, MAX_ENTRY_BYTES), key)
    except (ValueError, TypeError, KeyError, IndexError):
        return None


def _checked(entry, key: str) -> Skeleton | None:
    if not isinstance(entry, dict) or entry.get("schema") != SCHEMA or entry.get("key") != key:
        return None
    linear = entry["linear"]
    tensors = tensors_from_rows(entry["tensors"], MAX_TENSORS, MAX_DIM)
    if tensors is None or not isinstance(linear, list):
        return None
    if not all(type(i) is int and 0 <= i < len(tensors) for i in linear):
        return None
    return Skeleton(tensors, {tensors[i].name for i in linear})


def write_entry(path: Path, key: str, skeleton: Skeleton) -> None:
    index = {t.name: i for i, t in enumerate(skeleton.tensors)}
    entry = {"schema": SCHEMA, "key": key, "transformers": _transformers_version(),
             "tensors": tensor_rows(skeleton.tensors),
             "linear": sorted(index[name] for name in skeleton.linear_weights if name in index)}
    write_json(path, entry)

"""A vLLM capture JSON (written by the roofline.hooks plugin inside every vLLM worker) ->
Inventory. No vLLM, no torch: the capture JSON is the whole contract.

What the live inventory counts
- The tensors vLLM *loaded*: every Parameter of every module at the moment just before vLLM's
  `process_weights_after_loading` repacks weights into kernel layouts (the CPU backend then
  hides unquantized weights inside oneDNN handles and leaves `layer.weight` empty; GPU
  kernels shuffle, pad or re-scale). These are the checkpoint's bytes as vLLM holds them:
  after fusing (q/k/v -> qkv_proj, gate/up -> gate_up_proj, the experts -> one fused MoE
  module) and after tensor-parallel sharding (merged back here, below).
- Buffers and plain tensor attributes (rotary cos/sin caches, attention k/v scale buffers,
  kernel workspaces) are vLLM runtime state, not weights; they are left out of the modules'
  bytes and summed in one note per module. When a capture has no pre-repack snapshot
  (a model loader that bypasses it) the runtime tensors are used instead, with a note.
- Module.quant_method is the vLLM quant method class name (`UnquantizedLinearMethod`,
  `CompressedTensorsLinearMethod`, ...), "none" for modules without one (norms, GDN A_log).
  Module.kernel lists what vLLM chose (`scheme.kernel`, `fp8_linear`, `moe_kernel`,
  `*_backend`), when it exposes it.

Merging ranks (tensor / pipeline parallel), per tensor name:
- held by one rank only (pipeline stages, expert-parallel slices): counted as it is;
- sharded (the walk saw a column/row-parallel linear, a vocab-parallel embedding or fused MoE
  weights split by TP): the ranks' slices add up; the shape is concatenated along the shard
  dim;
- replicated (norms, replicated linears such as routers, per-tensor scales): counted once;
- sharding unknown to the walk's rules (e.g. GDN A_log / dt_bias): replicated when every rank's
  content fingerprint is equal, otherwise sharded along dim 0.
So the whole model's bytes == sum over ranks of sharded bytes + replicated bytes once, and
`rank_bytes(capture)` gives what each rank actually holds (replicated tensors on every rank).
"""
from __future__ import annotations

import glob
import os
from typing import Annotated, Any, Union

import msgspec
from msgspec import Meta

from roofline.errors import RooflineError
from roofline.files import decode_json, read_regular
from roofline.schema import Count, Name, Positive, checked
from roofline.untrusted import printable
from roofline.model.architecture import shape_from_config
from roofline.model.detect import detect_format
from roofline.model.formats import TORCH_DTYPES, dtype_nbytes
from roofline.model.inventory import Inventory, Module, QuantSummary, Tensor
from roofline.model.quant_config import parse_quant_config
from roofline.model.roles import classify

FORMAT = "roofline-vllm-capture"
SUPPORTED_VERSIONS = (1,)

# vLLM's fused-MoE parameter prefixes; stripped for format detection so that
# w13_weight_scale reads as weight_scale (detect.py knows checkpoint suffixes)
_MOE_PREFIXES = ("w13_", "w2_", "w1_", "w3_")
# (format the tensors suggest, format the quantization config states) where the config is right:
# vLLM's CompressedTensorsW4A4Nvfp4MoEMethod registers w13/w2_input_global_scale on a fused MoE layer
# even when the scheme is weight-only (use_a16), so a W4A16 checkpoint's experts carry the tensor
# that marks W4A4 on disk
ACTIVATIONS_FROM_CONFIG = {("nvfp4-w4a4", "nvfp4-w4a16")}

# ---------------------------------------------------------------------------------------------
# The file format, checked with msgspec before anything reads it (hooks/walk.py writes it). Fields a
# newer writer adds pass; a field of the wrong type or out of range is one error naming it.

MAX_WORLD = 65_536  # ranks of one vLLM deployment; a larger world is damage, not a cluster
MAX_DRAFT_TOKENS = 1_024  # speculative tokens per step (vLLM's drafters propose a handful)
MAX_CAPTURE_BYTES = 1 << 30  # a capture of a 100k-module model is tens of MB
Dim = Annotated[int, Meta(ge=0, lt=1 << 40)]
World = Annotated[int, Meta(ge=1, le=MAX_WORLD)]
RankIndex = Annotated[int, Meta(ge=0, lt=MAX_WORLD)]


class TensorRecord(msgspec.Struct):
    name: Name
    dtype: Name
    shape: Annotated[list[Dim], Meta(max_length=8)]
    kind: Name | None = None
    nbytes: Count = 0
    shard_dim: Union[Annotated[int, Meta(ge=0, lt=8)], Annotated[str, Meta(pattern="^unknown$")], None] = None
    shared_with: Name | None = None
    fingerprint: Any = None


class ModuleRecord(msgspec.Struct):
    name: Annotated[str, Meta(max_length=4096)]
    tensors: list[TensorRecord] | None = None
    runtime_tensors: list[TensorRecord] | None = None
    quant_method: Name | None = None
    scheme: Name | None = None
    kernels: dict[Name, Any] | None = None
    global_num_experts: Annotated[int, Meta(ge=0, le=1 << 20)] | None = None


class Speculative(msgspec.Struct):
    method: Name | None = None
    num_speculative_tokens: Annotated[int, Meta(ge=0, le=MAX_DRAFT_TOKENS)] | None = None
    model: Name | None = None


class EngineFacts(msgspec.Struct):
    """One worker's engine facts: what the rest of the tool reads of a rank record."""

    rank: RankIndex = 0
    world_size: World = 1
    tp_size: World | None = None
    pp_size: World | None = None
    dp_size: World | None = None
    tp_rank: RankIndex | None = None
    pp_rank: RankIndex | None = None
    run_id: Name | None = None
    model: Name | None = None
    vllm_version: Name | None = None
    enforce_eager: bool = False
    max_model_len: Positive | None = None
    kv_cache_dtype: Name | None = None
    block_size: Annotated[int, Meta(ge=1, le=1 << 20)] | None = None
    cudagraph_mode: Name | None = None
    speculative: Speculative | None = None
    hf_config: dict[str, Any] = {}
    quant_config: dict[str, Any] | None = None
    aliases: dict[Name, Name] = {}
    tensor_fields: Annotated[list[Name], Meta(max_length=64)] | None = None
    modules: Annotated[list[dict[str, Any]], Meta(max_length=1 << 22)] = []


class RankRecord(EngineFacts):
    """A rank record after its tensor rows became records (`_normalise`)."""

    modules: list[ModuleRecord] = []


def _check_records(data: dict, where: str) -> None:
    """Every rank record against the schema, and the ranks against each other (vLLM's rules: a
    rank inside its world, TP x PP within it)."""
    for index, record in enumerate(data["ranks"]):
        if not isinstance(record, dict):
            raise RooflineError(f"{where}: rank record {index} is not an object")
        checked(record, RankRecord, f"{where} (rank record {index})")
        rank, world = record.get("rank") or 0, record.get("world_size") or 1
        if rank >= world:
            raise RooflineError(f"{where}: rank {rank} of a world of {world}")
        tp, pp = record.get("tp_size") or 1, record.get("pp_size") or 1
        if tp * pp > world:
            raise RooflineError(f"{where}: tensor parallel {tp} x pipeline parallel {pp} is more than the "
                                f"world of {world} ranks")


def load_capture(path: str, normalise: bool = True) -> dict:
    """The merged capture (tensor records as dicts with full names unless normalise=False). Accepts the merged file, or (for a `vllm serve` still running or
    killed) the per-rank part files `<stem>.rank<R>.json` next to it."""
    if os.path.isfile(path):
        data = _read(path)
    else:
        stem = path[:-5] if path.endswith(".json") else path
        parts = sorted(glob.glob(glob.escape(stem) + ".rank*.json"))
        if not parts:
            raise RooflineError(f"{path}: no such capture file")
        ranks = [_read(p) for p in parts]
        for part, record in zip(parts, ranks):
            checked(record, EngineFacts, part)
        run_ids = {r.get("run_id") for r in ranks}
        if len(run_ids) > 1:
            raise RooflineError(f"{path}: rank files from different vLLM runs ({len(run_ids)} run ids)")
        world = max(int(r.get("world_size") or 1) for r in ranks)
        data = {"format": FORMAT, "version": ranks[0].get("version"), "kind": "merged",
                "run_id": ranks[0].get("run_id"), "world_size": world,
                "complete": len({r.get("rank") for r in ranks}) >= world, "ranks": ranks}
    if data.get("format") != FORMAT:
        raise RooflineError(f"{path}: not a roofline vLLM capture (format {printable(repr(data.get('format')), 60)})")
    if data.get("version") not in SUPPORTED_VERSIONS:
        raise RooflineError(f"{path}: capture version {printable(repr(data.get('version')), 40)} not supported "
                            f"(this roofline reads {', '.join(map(str, SUPPORTED_VERSIONS))})")
    if data.get("kind") != "merged":  # a single rank's part, given directly
        world = checked(data, EngineFacts, path).world_size
        data = {"format": FORMAT, "version": data["version"], "kind": "merged",
                "run_id": data.get("run_id"), "world_size": world, "complete": world == 1, "ranks": [data]}
    ranks = data.get("ranks")
    if not isinstance(ranks, list) or not ranks:
        raise RooflineError(f"{path}: capture holds no rank records")
    if len(ranks) > MAX_WORLD:
        raise RooflineError(f"{path}: {len(ranks)} rank records; more than any vLLM deployment")
    if not all(isinstance(r, dict) for r in ranks):
        raise RooflineError(f"{path}: a rank record is not an object")
    for index, record in enumerate(ranks):
        checked(record, EngineFacts, f"{path} (rank record {index})")
    if not data.get("complete"):
        have = sorted(r.get("rank") or 0 for r in ranks)
        raise RooflineError(f"{path}: incomplete capture: ranks {have[:16]} of {printable(data.get('world_size'), 20)} "
                            "(did every vLLM worker finish loading?)")
    if not normalise:
        return data
    try:
        _normalise(data, path)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise RooflineError(f"{path}: malformed capture ({type(exc).__name__}: {printable(str(exc), 120)})") from None
    _check_records(data, path)
    return data


def _read(path: str) -> dict:
    data = decode_json(read_regular(path, path, MAX_CAPTURE_BYTES), path)  # standard JSON: no NaN / Infinity
    if not isinstance(data, dict):
        raise RooflineError(f"{path}: not a roofline vLLM capture")
    return data


_FIELDS = ("attr", "kind", "dtype", "shape", "nbytes", "shard_dim", "shared_with", "fingerprint")


def _normalise(data: dict, where: str) -> None:
    """Tensor records arrive as arrays (fields in the record's `tensor_fields`); turn them
    into dicts with the full tensor name, once, in place."""
    for record in data["ranks"]:
        fields = record.get("tensor_fields") or _FIELDS
        if "attr" not in fields or "nbytes" not in fields:
            raise RooflineError(f"{where}: capture tensor records lack attr / nbytes fields")
        for entry in record.get("modules", []):
            prefix = f"{entry['name']}." if entry.get("name") else ""
            for key in ("tensors", "runtime_tensors"):
                rows = entry.get(key)
                if rows is None:  # absent and null read alike
                    entry.pop(key, None)
                    continue
                out = []
                for row in rows:
                    if isinstance(row, dict):
                        out.append(row)
                        continue
                    t = dict(zip(fields, row))
                    t["name"] = prefix + str(t.pop("attr"))
                    if t.get("shared_with") is None:
                        t.pop("shared_with", None)
                    out.append(t)
                entry[key] = out


def _dtype(name: str) -> str:
    if name in TORCH_DTYPES:
        return TORCH_DTYPES[name]
    raise RooflineError(f"capture: unknown tensor dtype {name!r}")


def _weights(entry: dict) -> tuple[list[dict], str]:
    """The tensor records that stand for a module's weights, and which moment they are from."""
    if "tensors" in entry:
        return [t for t in entry["tensors"] if t.get("kind") == "parameter"], "loaded"
    return [t for t in entry.get("runtime_tensors", []) if t.get("kind") == "parameter"], "runtime"


def _merge_tensor(records: list[dict]) -> tuple[Tensor, str]:
    """One tensor name as held by several ranks -> the whole tensor, and how it was merged."""
    first = records[0]
    dtype = _dtype(first["dtype"])
    if len(records) == 1:
        shape = tuple(first["shape"])
        return Tensor(first["name"], dtype, shape, dtype_nbytes(dtype, shape)), "single"
    shard = first.get("shard_dim")
    if shard == "unknown":
        prints = {r.get("fingerprint") for r in records}
        shard = None if len(prints) == 1 and None not in prints and "none" not in prints else 0
    if shard is None:
        shape = tuple(first["shape"])
        return Tensor(first["name"], dtype, shape, dtype_nbytes(dtype, shape)), "replicated"
    shape = list(first["shape"])
    if not shape:
        return Tensor(first["name"], dtype, (), dtype_nbytes(dtype, ())), "replicated"
    shape[int(shard)] = sum(int(r["shape"][int(shard)]) for r in records)
    return Tensor(first["name"], dtype, tuple(shape), dtype_nbytes(dtype, shape)), "sharded"


def _detect_name(name: str) -> str:
    module, _, attr = name.rpartition(".")
    for prefix in _MOE_PREFIXES:
        if attr.startswith(prefix):
            return f"{module}.{attr[len(prefix):]}"
    return name


def _kernel_label(kernels: dict | None) -> str | None:
    if not kernels:
        return None
    return ", ".join(f"{attr}={value}" for attr, value in sorted(kernels.items()))


def rank_bytes(capture: dict) -> dict[int, int]:
    """Weight bytes each rank holds (loaded parameters, shared tensors once per rank)."""
    out = {}
    for record in capture["ranks"]:
        total = 0
        for entry in record.get("modules", []):
            weights, _ = _weights(entry)
            total += sum(int(t.get("nbytes", 0)) for t in weights if "shared_with" not in t)
        out[int(record.get("rank", 0))] = total
    return out


def inventory_from_capture(path: str) -> Inventory:
    capture = load_capture(path)
    return inventory_from_capture_data(capture, where=path)


def inventory_from_capture_data(capture: dict, where: str = "capture") -> Inventory:
    ranks = sorted(capture["ranks"], key=lambda r: int(r.get("rank", 0)))
    lead = ranks[0]
    config = lead.get("hf_config") or {}
    if not config:
        raise RooflineError(f"{where}: capture has no model config (hf_config)")
    try:
        shape = shape_from_config(config)
    except RooflineError as exc:
        raise RooflineError(f"{where}: {exc}") from None

    # name -> per-rank entries (module order of the first rank that has it)
    entries: dict[str, list[dict]] = {}
    aliases: dict[str, str] = {}
    for record in ranks:
        for entry in record.get("modules", []):
            entries.setdefault(entry["name"], []).append(entry)
        for alias, target in (record.get("aliases") or {}).items():
            aliases.setdefault(alias, target)

    quant, _ = parse_quant_config(config)
    modules: list[Module] = []
    owner_of: dict[str, str] = {}  # tensor name -> module that owns its bytes
    shared: dict[str, str] = {}  # module -> module whose tensor it shares (tied lm_head)
    runtime_only = False
    for name, per_rank in entries.items():
        info = per_rank[0]
        by_tensor: dict[str, list[dict]] = {}
        moment = "loaded"
        extra_bytes = 0
        for entry in per_rank:
            weights, moment = _weights(entry)
            for t in weights:
                if "shared_with" in t:
                    shared.setdefault(name, t["shared_with"].rpartition(".")[0])
                    continue
                by_tensor.setdefault(t["name"], []).append(t)
            pool = entry.get("tensors", entry.get("runtime_tensors", []))
            extra_bytes += sum(int(t.get("nbytes", 0)) for t in pool
                               if t.get("kind") != "parameter" and "shared_with" not in t)
        runtime_only = runtime_only or moment == "runtime"
        tensors, merged_how = [], set()
        for tensor_name, records in by_tensor.items():
            tensor, how = _merge_tensor(records)
            tensors.append(tensor)
            merged_how.add(how)
            owner_of[tensor_name] = name
        if not tensors and name not in shared:
            continue
        role, layer = classify(name, shape.num_layers)
        detected = detect_format([Tensor(_detect_name(t.name), t.dtype, t.shape, t.nbytes) for t in tensors])
        notes = []
        fmt = detected.format
        configured = quant.expected(name, role) if quant is not None else None
        if configured is not None and (fmt, configured.format) in ACTIVATIONS_FROM_CONFIG:
            fmt = configured.format
            notes.append(f"activations as the quantization config states them ({configured.format}): vLLM "
                         f"registers an input scale for this layer either way")
        if info.get("scheme"):
            notes.append(f"scheme {info['scheme']}")
        if extra_bytes:
            notes.append(f"{extra_bytes} bytes of vLLM runtime buffers (not weights) left out")
        if len(ranks) > 1 and tensors:
            if merged_how == {"replicated"}:
                notes.append(f"replicated on each of {len(per_rank)} ranks")
            elif "sharded" in merged_how:
                notes.append(f"sharded across {len(per_rank)} ranks")
        repacked = _repacked(per_rank)
        if repacked:
            notes.append(repacked)
        experts = int(info.get("global_num_experts") or 0)
        if not experts and role == "moe_experts":
            experts = max((t.shape[0] for t in tensors if len(t.shape) == 3), default=0)
        modules.append(Module(
            name=name, layer=layer, role=role, format=fmt,
            quant_method=info.get("quant_method") or "none", params=detected.params,
            tensors=tensors, experts=experts, kernel=_kernel_label(info.get("kernels")),
            notes=notes))

    by_name = {m.name: m for m in modules}
    # a tied lm_head: vLLM either makes it the embedding module itself (an alias) or a
    # module whose weight shares the embedding's storage; either way it owns no bytes
    for alias, target in aliases.items():
        if alias not in by_name and target in by_name and classify(alias)[0] == "lm_head":
            shared[alias] = target
    for name, target in shared.items():
        target = owner_of.get(target, target) if target not in by_name else target
        source = by_name.get(target)
        if source is None:
            continue
        module = by_name.get(name)
        if module is None:
            module = Module(name=name, layer=None, role=classify(name)[0], format=source.format,
                            quant_method=source.quant_method, params=source.params,
                            kernel=source.kernel)
            modules.append(module)
            by_name[name] = module
        module.tied_to = target
        module.format, module.params = source.format, source.params
        module.notes.append(f"tied to {target}: shares its tensor")

    inventory = Inventory(
        model_id=str(lead.get("model") or "vllm-capture"), source="vllm", config=config,
        shape=shape, modules=modules, disagreements=[])
    if quant is not None:
        inventory.quant = quant.summary()
    elif lead.get("quant_config"):
        inventory.quant = QuantSummary(method=str(lead["quant_config"].get("name") or "unknown"))
    if runtime_only:
        inventory.disagreements.append(
            "the capture has no pre-repack snapshot; bytes are what modules hold after load, "
            "which misses weights a kernel repacked out of sight (CPU backend)")
    return inventory


def _repacked(per_rank: list[dict]) -> str | None:
    """A note when vLLM's post-load processing changed the module's parameters."""
    entry = per_rank[0]
    if "tensors" not in entry:
        return None
    loaded = {t["name"]: t for t in entry["tensors"] if t.get("kind") == "parameter"}
    if "runtime_tensors" not in entry:  # unchanged by post-load processing
        return None
    runtime = {t["name"]: t for t in entry["runtime_tensors"] if t.get("kind") == "parameter"}
    emptied = [n.rpartition(".")[2] for n, t in loaded.items()
               if t.get("nbytes") and n in runtime and not runtime[n].get("nbytes")
               and "shared_with" not in runtime[n]]
    changed = [n.rpartition(".")[2] for n, t in loaded.items()
               if n in runtime and runtime[n].get("nbytes") and
               (runtime[n]["dtype"], runtime[n]["shape"]) != (t["dtype"], t["shape"])]
    parts = []
    if emptied:
        parts.append(f"{', '.join(emptied)} repacked by the kernel after load (held out of sight)")
    if changed:
        parts.append(f"{', '.join(changed)} re-laid-out after load")
    return "; ".join(parts) or None


def quant_method_groups(inventory: Inventory) -> dict[str, tuple[int, int]]:
    """{vLLM quant method class: (modules, bytes)} — the grouping of the hand-made audit
    (`type(module.quant_method).__name__` over `model.named_modules()`)."""
    out: dict[str, tuple[int, int]] = {}
    for module in inventory.modules:
        count, total = out.get(module.quant_method, (0, 0))
        out[module.quant_method] = (count + 1, total + module.nbytes)
    return out

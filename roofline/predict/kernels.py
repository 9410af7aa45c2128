"""Kernels per decode step, per layer, by role and backend, estimated from the kernel table.

estimate_kernels(inventory) reads roofline/data/kernels.toml per (role, format, backend), each
count carrying the table's source. The measured counterpart, the same KernelProfile from a
torch-profiler trace, is roofline.live.profiler_trace.parse_trace.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.inventory import Inventory
from roofline.model.roles import ROLES, roles_where

from .backends import vllm_backend_names
from .memo import IdentityMemo

# roles whose modules are GEMMs counted by kernels.toml [role.*] (roles.toml `kernels`), in the
# order a layer runs them
GEMM_ROLES = tuple(role for role in ROLES if role in roles_where(kernels="gemm"))
# per-head norms of q and k inside the attention (Qwen3's q_norm / k_norm), by module name
QK_NORMS = frozenset({"q_norm", "k_norm"})


@dataclass
class KernelCount:
    layer: int | None  # None: outside the decoder layers (embedding, final norm, lm_head, step)
    role: str  # a module role, or a core: attention_core, gdn_core, mamba_core, norms, step
    backend: str  # cublas, flashinfer_cutlass, marlin, triton, vllm, measured kernel family...
    kernels: float  # launched per step with CUDA graphs (torch.compile's fused path)
    source: str  # the table entry's source, or "trace"
    names: list[str] = field(default_factory=list)  # kernel names, when measured
    eager_kernels: float | None = None  # launched one by one under --enforce-eager (unfused); None: as kernels
    # the host's Python work of the entry in eager mode beyond its launches, in kernel launches' worth
    # of host time (so that it scales with the host class's cost per kernel)
    host_equiv: float = 0.0
    gemms: float = 0.0  # the GEMMs among the kernels (a linear layer's; none for cores and MoE)
    # host_equiv is the entry's own (a backend's Python measured for it, e.g. triton_kernels' MoE), not the layer
    # kind's [python.*] figure that a calibration of another backend refits
    host_own: bool = False
    # each eager launch's share of the host's cost per kernel where the entry is PyTorch's own ops run one after
    # another inside one module's forward (a Gemma-style norm: none of a layer's Python around them; None: a full
    # launch's). What they save is in host_equiv (negative), so that every caller sums launches and Python alike
    host_share: float | None = None

    @property
    def eager(self) -> float:
        return self.kernels if self.eager_kernels is None else self.eager_kernels

    def to_json(self) -> dict:
        out = {"layer": self.layer, "role": self.role, "backend": self.backend, "kernels": self.kernels,
               "eager_kernels": self.eager, "host_equiv": self.host_equiv, "source": self.source}
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

    @property
    def eager_kernels_per_token(self) -> float:
        return sum(c.eager for c in self.counts)

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
            "kernels_per_token": self.kernels_per_token, "eager_kernels_per_token": self.eager_kernels_per_token,
            "per_layer": [{"layer": layer, "kernels": n} for layer, n in
                          sorted(layers.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))],
            "by_role": self.by_role(),
            "counts": [c.to_json() for c in self.counts],
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- table estimate
def _entry(kind: str, fmt: str, backend: str | None) -> dict:
    """kernels.toml [[gemm]] / [[moe]] for a format on a backend (vLLM's name); the format's
    default (first listed) where the table has no row for that backend."""
    entries = [e for e in load_table("kernels")[kind] if e["format"] == fmt]
    if not entries:
        entries = [e for e in load_table("kernels")[kind] if e["format"] == "bf16"]
    if backend:
        for e in entries:
            if e["backend"] == backend:
                return e
    return entries[0]


def _main_format(modules) -> str:
    """The format holding most parameters among a role's modules in one layer."""
    weight: Counter = Counter()
    for m in modules:
        weight[m.format] += max(m.params, 1)
    return weight.most_common(1)[0][0]


_MEMO = IdentityMemo(64)


def estimate_kernels(inventory: Inventory, backend: str | None = None, moe_backend: str | None = None) -> KernelProfile:
    """Kernels per decode step from kernels.toml. `backend` (vLLM's --linear-backend spelling, e.g.
    "marlin", "flashinfer_cutlass") picks that GEMM backend wherever the table has it for a format;
    `moe_backend` the routed experts' (default: the same name). A backend the table does not count
    for a format (emulation, a backend not measured) keeps the format's default row."""
    moe_backend = moe_backend or backend
    for name in {backend, moe_backend} - {None}:
        if name not in vllm_backend_names():
            raise RooflineError(f"unknown kernel backend {name!r}; vLLM's names: {', '.join(sorted(vllm_backend_names()))}")
    # memoised per inventory object and backends: the profile is shared, read-only
    return _MEMO.get(inventory, (backend, moe_backend), lambda: _estimate(inventory, backend, moe_backend))


def _count(layer, role, backend, entry: dict, times: float = 1.0, source: str | None = None,
           python: dict | None = None) -> KernelCount:
    """A table entry's kernels (graphs) and eager kernels, `times` over, with the host's Python of the entry's
    own eager_host_equiv, else of a kernels.toml [python.*] entry where the layer kind has one, less what its eager
    launches save where they are PyTorch's own ops at the entry's eager_host_share of a launch each."""
    eager = entry.get("eager_kernels", entry["kernels"])
    host_equiv = entry.get("eager_host_equiv", python["eager_host_equiv"] if python else 0.0)  # the entry's own first
    share = entry.get("eager_host_share")
    return KernelCount(layer, role, backend, times * entry["kernels"], source or entry["source"],
                       eager_kernels=times * eager, host_equiv=host_equiv + times * eager * ((share or 1.0) - 1),
                       host_own="eager_host_equiv" in entry, host_share=share)


def _of_model_type(entry: dict, model_type: str) -> dict:
    """A core entry as a model type whose layer launches its own count runs it (kernels_by_model_type with CUDA
    graphs, eager_kernels_by_model_type one by one: Qwen3.5's GDN layer without Qwen3-Next's reorder)."""
    graph = entry.get("kernels_by_model_type", {}).get(model_type)
    eager = entry.get("eager_kernels_by_model_type", {}).get(model_type)
    out = dict(entry)
    if graph is not None:
        out.update(kernels=graph, source=f"{entry['source']}; {model_type}: {entry['by_model_type_source']}")
        if "eager_kernels" not in entry:  # the entry's eager count is its graph count: keep it
            out["eager_kernels"] = entry["kernels"]
    if eager is not None:
        out["eager_kernels"] = eager
    return out


def _estimate(inventory: Inventory, backend: str | None, moe_backend: str | None) -> KernelProfile:
    table = load_table("kernels")
    roles_table, core, python = table["role"], table["core"], table["python"]
    shape = inventory.shape
    attention_layers = {a.layer for a in shape.attention}
    mla_layers = {a.layer for a in shape.attention if a.value_dim == 0}  # K and V one latent tensor
    # the block's norms: vLLM's fused RMSNorm, or the Gemma-style one it runs op by op in eager mode
    gemma_norm = shape.model_type in core["block_norm_gemma"]["model_types"]
    block_norm = core["block_norm_gemma"] if gemma_norm else core["block_norm"]
    without_residual = dict(block_norm, eager_kernels=block_norm.get("eager_kernels_without_residual",
                                                                     block_norm.get("eager_kernels", 1)))
    gemma_qk_norm = gemma_norm and shape.model_type in block_norm.get("qk_norm_model_types", ())
    gdn_python = dict(python["gdn"], eager_host_equiv=python["gdn"].get("eager_host_equiv_by_model_type", {}).get(
        shape.model_type, python["gdn"]["eager_host_equiv"]))
    recurrent_kind = {r.layer: r.kind for r in shape.recurrent}
    gated = bool(inventory.config.get("attn_output_gate")
                 or (inventory.config.get("text_config") or {}).get("attn_output_gate"))

    by_layer: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    outside: dict[str, list] = defaultdict(list)
    norms: dict[int, list[str]] = defaultdict(list)  # each layer's norm modules, by their path below the layer
    counted = roles_where(kernels="gemm") | roles_where(kernels="moe") | roles_where(kernels="gather")
    for m in inventory.modules:
        if m.role == "norm" and m.layer is not None:
            norms[m.layer].append(m.name.split(f"layers.{m.layer}.", 1)[-1])
        if m.role not in counted:
            continue
        if m.layer is None or m.layer >= shape.num_layers:
            outside[m.role].append(m)
        else:
            by_layer[m.layer][m.role].append(m)

    counts: list[KernelCount] = []
    for layer in range(shape.num_layers):
        roles = by_layer.get(layer, {})
        qk_norm = any(path.rsplit(".", 1)[-1] in QK_NORMS for path in norms.get(layer, []))
        # vLLM fuses the residual add into each of the block's own norms (not a mixer's inner norm):
        # one kernel per norm the block holds (two in a pre-norm mixer + MLP block, one in a
        # single-mixer block such as Nemotron-H's); an inventory without norm modules counts two
        own_norms = [path for path in norms.get(layer, []) if "." not in path]
        layer_norms = len(own_norms) or 2  # the block's own
        # norms that add no residual: the first layer's first, and a sandwich block's post-norms (Gemma 2/3)
        plain = (layer == 0) + (sum(path in block_norm.get("sandwich_without_residual", ()) for path in own_norms)
                                if "pre_feedforward_layernorm" in own_norms else 0)
        if plain and "eager_kernels_without_residual" in block_norm:
            counts.append(_count(layer, "norms", "vllm", without_residual, times=plain))
            layer_norms -= plain
        if layer_norms:
            counts.append(_count(layer, "norms", "vllm", block_norm, times=layer_norms))
        if layer in mla_layers:
            counts.append(_count(layer, "attention_core", "vllm", core["mla"]))
        elif layer in attention_layers:
            counts.append(_count(layer, "attention_core", "vllm", _of_model_type(core["attention"], shape.model_type)))
            if qk_norm and gemma_qk_norm:  # two Gemma-style norms op by op eager, in the attention's fusion with graphs
                counts.append(_count(layer, "attention_core", "vllm",
                                     dict(without_residual, kernels=core["qk_norm"]["kernels"]), times=2))
            elif qk_norm:
                counts.append(_count(layer, "attention_core", "vllm", core["qk_norm"]))
            if gated:
                counts.append(_count(layer, "attention_core", "vllm", core["attention_output_gate"]))
        elif recurrent_kind.get(layer) == "gdn":
            counts.append(_count(layer, "gdn_core", "triton", _of_model_type(core["gdn"], shape.model_type),
                                 python=gdn_python))
        elif recurrent_kind.get(layer) == "mamba":
            counts.append(_count(layer, "mamba_core", "triton", _of_model_type(core["mamba"], shape.model_type),
                                 python=python["mamba"]))
        for role in GEMM_ROLES:
            if role not in roles:
                continue
            spec = roles_table[role]
            fmt = _main_format(roles[role])
            gemm = _entry("gemm", fmt, backend)
            eager = spec["gemms"] * gemm["kernels"] + spec["other"]
            # a quantization whose activation quant torch.compile fuses away under graphs ([[gemm]] fused_quant_*)
            methods = {m.quant_method for m in roles[role] if m.format == fmt}
            fused = bool(methods) and methods <= set(gemm.get("fused_quant_methods", ()))
            kernels = spec["gemms"] * gemm["fused_quant_kernels"] + spec["other"] if fused else eager
            source = gemm["fused_quant_source"] if fused else gemm["source"]
            # a GEMM path's Python in eager mode beyond its launches ([[gemm]] eager_host_equiv, per GEMM)
            counts.append(KernelCount(layer, role, gemm["backend"], kernels, f"{spec['source']}; {fmt}: {source}",
                                      eager_kernels=eager, gemms=spec["gemms"],
                                      host_equiv=spec["gemms"] * gemm.get("eager_host_equiv", 0.0)))
        if "moe_experts" in roles:
            fmt = _main_format(roles["moe_experts"])
            moe = _entry("moe", fmt, moe_backend)
            # a row counted with moe_align_block_size's one small-batch kernel: past its experts, two
            if shape.num_experts > moe.get("align_small_batch_max_experts", shape.num_experts):
                moe = dict(moe, kernels=moe["kernels_past_small_batch_align"])
            counts.append(_count(layer, "moe_experts", moe["backend"], moe, source=f"{fmt}: {moe['source']}",
                                 python=python["moe"]))

    # the token's embedding row is gathered whether or not the inventory lists the table
    counts.append(KernelCount(None, "embedding", "vllm", roles_table["embedding"]["other"],
                              roles_table["embedding"]["source"]))
    counts.append(_count(None, "norms", "vllm", block_norm if gemma_norm else core["final_norm"]))
    # what an architecture's decoder layer launches beyond its roles and cores (kernels.toml [layer.*]), in each layer
    # (a pipeline stage holds its own layers' share)
    moe_model = any(m.role == "moe_experts" for m in inventory.modules)
    for entry in table.get("layer", {}).values():  # an entry may hold for the MoE or the dense models alone
        if shape.model_type in entry["model_types"] and entry.get("moe", moe_model) == moe_model:
            counts.extend(_count(layer, "layer_structure", "vllm", entry) for layer in range(shape.num_layers))
    lm_head = outside.get("lm_head")
    fmt = _main_format(lm_head) if lm_head else "bf16"
    gemm = _entry("gemm", fmt, backend)
    counts.append(KernelCount(None, "lm_head", gemm["backend"], roles_table["lm_head"]["gemms"] * gemm["kernels"],
                              f"{roles_table['lm_head']['source']}; {fmt}: {gemm['source']}"))
    counts.append(_count(None, "step", "vllm", core["step"]))
    notes = ["estimated from roofline/data/kernels.toml (vLLM's decode path; counts checked against torch-profiler "
             "steps of vLLM 0.26 on an H200, benchmarks/results/vllm_h200); a profiler trace gives measured counts"]
    return KernelProfile(inventory.model_id, "table", "cuda", counts, notes)

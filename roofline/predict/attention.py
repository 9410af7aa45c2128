"""Which attention backend vLLM runs a checkpoint's layers on (roofline/data/attention.toml: vLLM 0.26's order and
each backend's limits), and what its decode kernels cost beyond what the step model prices for the KV cache
(roofline/data/attention_kernels.toml: vLLM's kernels timed one by one on an H200). Pure arithmetic.

The step model prices a layer's KV read at the device's achieved bandwidth: that is FlashAttention 3's decode
with a BF16 cache on Hopper (checked within 5% in real steps, benchmarks/RESULTS-gpu.md). Another backend or KV
dtype runs other kernels: Triton's unified attention reads the cache at about half the bandwidth and runs one
sequence's long context as a chain of small tiles (split 16 ways up to its 3D threshold of sequences, one chain
per sequence and KV head above it: Gemma 4's 512-wide global layers with an FP8 cache take 3.3 ms a layer at 10
streams of 16k tokens); FlashAttention 3 with an FP8 cache runs 1.3x faster than with BF16 at 128-wide heads, not
the 2x its bytes say. A layer's extra time is the measured kernel's less the reference
the step model already prices (FlashAttention 3 on BF16 at the same shape, less the bytes the cache's dtype saves
at the achieved bandwidth), at the layer's sequences and context, on the nearest measured head layout. On another
Hopper GPU FlashAttention's times scale with its bandwidth and Triton's stay (its blocks bind, not its bytes). Off
Hopper the kernels are unmeasured: the choice is named, its KV priced at the device's rate.
"""
from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass

from roofline.data import load_table

from .hardware import Hardware, get_hardware

# the resolved KV dtype (traffic.kv_dtype_and_bytes) in vLLM's spelling, and the kernel rows that time it
VLLM_KV_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
KERNEL_KV_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
KV_BYTES = {"bf16": 2, "fp8": 1}
REFERENCE = "FLASH_ATTN/bf16"  # what the step model's KV pricing is (see the module's docstring)


@dataclass(frozen=True)
class Layout:
    """An attention layer's shape on one rank, as its decode kernel sees it."""

    kv_heads: float
    head_dim: int
    window: int  # 0: full attention
    sinks: bool


@dataclass(frozen=True)
class AttentionChoice:
    """The backend vLLM runs the model's attention on here, why, and whether its kernels were measured."""

    backend: str  # vLLM's name (--attention-backend): FLASH_ATTN, FLASHINFER, TRITON_ATTN, ... ("" on a CPU)
    version: int | None  # FlashAttention's version, for FLASH_ATTN
    reason: str
    kv_dtype: str  # the resolved cache dtype (bf16, fp8, ...)
    measured: bool  # attention_kernels.toml times this backend and dtype on this GPU's family
    scale: float  # the measuring GPU's bandwidth over this one's (a bandwidth-bound kernel's time scales with it)

    @property
    def label(self) -> str:
        version = f" (FlashAttention {self.version})" if self.version else ""
        return f"{self.backend}{version}" if self.backend else "no attention kernel"

    def to_json(self) -> dict:
        return {"backend": self.backend, "flash_attn_version": self.version, "reason": self.reason,
                "kv_cache_dtype": self.kv_dtype, "kernels_measured": self.measured}


def _cc(hardware: Hardware) -> tuple[int, float]:
    text = hardware.compute_capability or "0.0"
    return int(text.split(".")[0]), float(text)


def _supports(name: str, entry: dict, layouts: set[Layout], kv_dtype: str, major: int, cc: float,
              version: int | None) -> str | None:
    """Why backend `name` (FLASH_ATTN: at FlashAttention `version`) cannot run these layers here (None: it can)."""
    if cc < entry["min_cc"] or ("max_cc" in entry and cc > entry["max_cc"]):
        return f"{name} does not run on compute capability {cc:g}"
    if entry.get("installed") is False:
        return f"{name} is not installed"
    label = f"{name} (FlashAttention {version})" if version else name
    widest = entry["max_head_dim"][str(version)] if version else entry.get("max_head_dim", math.inf)
    for layout in layouts:
        if "head_dims" in entry and layout.head_dim not in entry["head_dims"] or layout.head_dim > widest:
            return f"{label} does not take {layout.head_dim}-wide heads"
        sinks_ok = version in entry["sinks_versions"] if version else major in entry.get("sinks_cc_majors", [major])
        if layout.sinks and not sinks_ok:
            return f"{label} does not take attention sinks on compute capability {cc:g}"
    spelled = VLLM_KV_DTYPE.get(kv_dtype, kv_dtype)
    fp8_ok = version in entry["fp8_kv_versions"] if version else major in entry["fp8_kv_cc_majors"]
    if spelled not in entry["kv_dtypes"] and not (spelled.startswith("fp8") and fp8_ok):
        return f"{label} does not take a {kv_dtype} KV cache"
    return None


def _flash_version(flash: dict, major: int, widths: set[int]) -> int:
    """FlashAttention's version vLLM runs here: the GPU's, moved to FA4 where FA4 runs for heads FA3 cannot take
    and for every layer of a model of several head widths (fa_utils.get_flash_attn_version, Gemma4Config)."""
    version = flash["versions"].get(str(major), flash["versions"]["default"])
    if major in flash["fa4_cc_majors"] and (len(widths) > 1 or max(widths) > flash["max_head_dim"][str(version)]):
        return 4
    return version


def layouts_of(inventory, kv_ranks: int = 1) -> dict[int, Layout]:
    """Each softmax-attention layer's layout on one rank (an MLA latent cache is not one of these kernels)."""
    sinks = (inventory.shape.model_type or "") in load_table("attention")["sinks"]["model_types"]
    return {a.layer: Layout(a.kv_heads / kv_ranks, a.head_dim, a.window or 0, sinks)
            for a in inventory.shape.attention if a.value_dim}


def choose(inventory, hardware: Hardware, kv_dtype: str, requested: str | None = None) -> AttentionChoice:
    """vLLM's attention backend for this checkpoint here: the one asked for (--attention-backend), else the first
    of vLLM's order that supports every layer."""
    table = load_table("attention")
    major, cc = _cc(hardware)
    layouts = set(layouts_of(inventory).values())
    widths = {layout.head_dim for layout in layouts}
    fa4 = major in table["backend"]["FLASH_ATTN"]["fa4_cc_majors"]
    if hardware.host == "cpu":
        return AttentionChoice("CPU_ATTN", None, "vLLM-CPU's attention", kv_dtype, False, 1.0)
    if not layouts:  # no softmax KV cache of K and V: MLA's latent (vLLM's MLA backends), or no attention at all
        return AttentionChoice("MLA" if inventory.shape.attention else "", None,
                               "a latent (MLA) cache: vLLM's MLA backends, unmeasured" if inventory.shape.attention
                               else "no attention layer", kv_dtype, False, 1.0)
    version = _flash_version(table["backend"]["FLASH_ATTN"], major, widths)
    if requested:
        backend, reason = requested, "--attention-backend"
    elif len(widths) > 1 and not fa4:  # Gemma 4 without FA4: one backend for every layer
        backend = table["heterogeneous_head_dims"]["otherwise"]
        reason = "vLLM runs a model of more than one head width on Triton where FlashAttention 4 does not run"
    else:
        order = table["order"].get(str(major), table["order"]["default"])
        refusals = []
        backend = order[-1]
        for name in order:
            why = _supports(name, table["backend"][name], layouts, kv_dtype, major, cc,
                            version if name == "FLASH_ATTN" else None)
            if why is None:
                backend = name
                break
            refusals.append(why)
        reason = "vLLM's first choice here" if not refusals else "; ".join(refusals)
    kernels = _kernels()
    dtype = KERNEL_KV_DTYPE.get(kv_dtype, "")
    measured = major == kernels.major and (backend, version if backend == "FLASH_ATTN" else None) in kernels.versions \
        and any(f"{backend}/{dtype}" in layout.us for layout in kernels.layouts)
    return AttentionChoice(backend, version if backend == "FLASH_ATTN" else None, reason, kv_dtype, measured,
                           kernels.bandwidth_gbps / hardware.bandwidth_gbps if measured else 1.0)


def refusal(inventory, hardware: Hardware, kv_dtype: str, requested: str) -> str | None:
    """vLLM's refusal of --attention-backend `requested` for this checkpoint here (None: it runs, or the table does
    not know the backend's limits)."""
    table = load_table("attention")
    entry = table["backend"].get(requested)
    layouts = set(layouts_of(inventory).values())
    if entry is None or hardware.host == "cpu" or not layouts:
        return None
    major, cc = _cc(hardware)
    version = _flash_version(entry, major, {layout.head_dim for layout in layouts}) if requested == "FLASH_ATTN" \
        else None
    why = _supports(requested, entry, layouts, kv_dtype, major, cc, version)
    return None if why is None else (f"--attention-backend {requested}: Selected backend {requested} is not valid "
                                     f"for this configuration. Reason: {why}")


# ----------------------------------------------------------------------------- the measured kernels

def triton_3d_threshold(model_kv_heads: int, sizes: list[int] | None) -> int:
    """The most sequences Triton's unified attention decodes on its 3D (split-KV) path: 128 // the model's KV heads a
    rank, snapped to the nearest CUDA-graph capture size where graphs run (`sizes`; None: eager)."""
    threshold = load_table("attention")["backend"]["TRITON_ATTN"]["min_launch_grid_2d"] // max(1, model_kv_heads)
    return min(sizes, key=lambda s: abs(s - threshold)) if sizes else threshold


@dataclass(frozen=True)
class _Measured:
    layout: Layout
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    us: dict  # "BACKEND/dtype" -> tuple of rows (by context) of times (by batch; nan: not measured)
    triton_3d_max: int | None  # the most sequences the sweep ran Triton's 3D path at (more: its 2D path)


@dataclass(frozen=True)
class _Kernels:
    major: int
    bandwidth_gbps: float  # the measuring GPU's datasheet bandwidth
    achieved_gbps: float  # and what the step model prices its KV reads at (its fitted efficiency)
    versions: frozenset  # (backend, FlashAttention version or None) timed
    layouts: tuple[_Measured, ...]
    source: str
    shortest_context: int  # the least context timed


@functools.lru_cache(maxsize=None)
def _kernels() -> _Kernels:
    table = load_table("attention_kernels")
    device = get_hardware(table["hardware"])
    layouts = tuple(_Measured(Layout(float(e["kv_heads"]), e["head_dim"], e["window"], e["sinks"]),
                              tuple(e["batches"]), tuple(e["contexts"]),
                              {key: tuple(tuple(row) for row in rows) for key, rows in e["us"].items()},
                              e.get("triton_3d_max"))
                    for e in table["layout"])
    return _Kernels(int(table["compute_capability"].split(".")[0]), device.bandwidth_gbps,
                    device.bandwidth_gbps * device.efficiency,
                    frozenset({("TRITON_ATTN", None), ("FLASH_ATTN", 3)}), layouts,
                    f"{table['source']}; {table['command']}", min(c for m in layouts for c in m.contexts))


def kernels_source() -> str:
    return _kernels().source


@functools.lru_cache(maxsize=4096)
def _nearest(layout: Layout, key: str) -> _Measured:
    """The measured layout closest to `layout` among those timing `key`: windowed or not first, then sinks,
    then head width, then window size."""
    def distance(m: _Measured) -> tuple:
        return (bool(m.layout.window) != bool(layout.window), m.layout.sinks != layout.sinks,
                abs(math.log2(m.layout.head_dim / layout.head_dim)),
                abs(math.log2((m.layout.window or 1) / (layout.window or 1))))
    return min((m for m in _kernels().layouts if key in m.us), key=distance)


def _along(xs: tuple, ys: list, x: float, linear_beyond: bool) -> float:
    """ys at x, interpolated in log x between measured points; below the first the first; beyond the last the
    last, scaled by x / last where the work grows with x (`linear_beyond`)."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1] * (x / xs[-1] if linear_beyond else 1.0)
    i = bisect.bisect_right(xs, x)
    w = math.log(x / xs[i - 1]) / math.log(xs[i] / xs[i - 1])
    return ys[i - 1] + w * (ys[i] - ys[i - 1])


def _kernel_us(m: _Measured, key: str, sequences: float, context: float, windowed: bool,
               three_d: bool | None = None) -> float:
    """The measured kernel's time at `sequences` x `context`: along the sequences at each measured context (past
    the most sequences measured there, linear in them: the kernel is saturated), then along the context (past the
    longest, linear in it; a sliding window's flat). Triton's on the path it runs (`three_d`; None: any): its 2D
    kernel is a chain per sequence and KV head, as long below the fewest sequences timed on it."""
    on_path = [b <= m.triton_3d_max if three_d else b > m.triton_3d_max for b in m.batches] \
        if three_d is not None and m.triton_3d_max is not None and key.startswith("TRITON_ATTN/") else None
    if on_path is not None and not any(on_path):
        on_path = None
    per_context = []
    for row in m.us[key]:
        points = [(b, t) for i, (b, t) in enumerate(zip(m.batches, row))
                  if not math.isnan(t) and (on_path is None or on_path[i])]
        per_context.append(_along(tuple(b for b, _ in points), [t for _, t in points], sequences, True))
    return _along(m.contexts, per_context, context, not windowed)


def layer_us(choice: AttentionChoice, layout: Layout, sequences: int, context: int,
             triton_3d: int | None = None) -> float:
    """One layer's decode attention time beyond what the step model prices for its KV (us; negative where the
    kernel beats the reference's time less the bytes the cache's dtype saves); `triton_3d`: the model's
    triton_3d_threshold (None: the sweep's own path at each measured point)."""
    if not choice.measured or sequences <= 0 or context <= 0:
        return 0.0
    dtype = KERNEL_KV_DTYPE[choice.kv_dtype]
    key = f"{choice.backend}/{dtype}"
    if key == REFERENCE:
        return 0.0
    kernels = _kernels()
    timed = max(context, kernels.shortest_context)  # priced at the shortest context timed, then scaled down
    span = min(timed, layout.window) if layout.window else timed

    def at(k: str) -> float:
        m = _nearest(layout, k)
        # the layer's sequences x KV heads over the measured layout's KV heads (a kernel's blocks run per head),
        # its time scaled by the head width (bytes per token) and a sliding window's span
        equivalent = sequences * layout.kv_heads / m.layout.kv_heads
        us = _kernel_us(m, k, equivalent, timed, bool(layout.window),
                        None if triton_3d is None else sequences <= triton_3d)
        if layout.window and m.layout.window:
            us *= span / min(timed, m.layout.window)
        # on another GPU of the family: FlashAttention's reads run near the bandwidth, so its time scales with it;
        # Triton's do not (half of it at long contexts: its chains of small tiles bind, not its bytes), so it stays
        return us * layout.head_dim / m.layout.head_dim * (choice.scale if k.startswith("FLASH_ATTN/") else 1.0)

    # the step model prices this cache as the reference less the bytes its dtype saves, at the achieved bandwidth
    bf16_bytes = 2 * sequences * span * layout.kv_heads * layout.head_dim * 2
    saved_us = bf16_bytes * (1 - KV_BYTES[dtype] / 2) / kernels.achieved_gbps / 1e3 * choice.scale
    # below the shortest context timed, the difference shrinks with the KV read (toward none at none: the two
    # kernels' fixed times are the launch floor the fit holds)
    return (at(key) - at(REFERENCE) + saved_us) * min(1.0, context / kernels.shortest_context)

"""The one data model every source produces: tensors grouped into modules with a role, a
layer index and a storage format. Nothing downstream knows which source made it."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .architecture import ModelShape


@dataclass(slots=True)
class Tensor:
    name: str
    dtype: str  # safetensors dtype name: BF16, F8_E4M3, U8, I32, ...
    shape: tuple[int, ...]
    nbytes: int


@dataclass
class Module:
    name: str
    layer: int | None
    role: str
    format: str  # key of roofline/data/formats.toml
    quant_method: str  # how it is quantized, e.g. "compressed-tensors", "modelopt", "none"
    params: int  # logical weights (unpacked), for bytes/weight and simulation
    tensors: list[Tensor] = field(default_factory=list)
    experts: int = 0  # routed experts held in this module (moe_experts only)
    tied_to: str | None = None  # lm_head that shares the embedding's tensor
    kernel: str | None = None  # chosen GEMM / MoE kernel, when a live source knows it
    notes: list[str] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Bytes resident for this module (a tied lm_head owns none: the embedding does)."""
        return sum(t.nbytes for t in self.tensors)


@dataclass
class QuantSummary:
    """What the checkpoint's quantization config says, in one place, for display."""

    method: str = "none"  # compressed-tensors | modelopt | fp8 | mxfp4 | awq | gptq | none
    algo: str = ""  # e.g. NVFP4, FP8, MIXED_PRECISION, nvfp4-pack-quantized
    kv_cache: str = ""  # e.g. FP8 when the checkpoint ships KV-cache scales
    config_file: str = ""  # config.json / hf_quant_config.json


@dataclass
class Inventory:
    model_id: str
    source: str  # "safetensors" | "hub" | "config" | "vllm"
    config: dict
    shape: ModelShape
    modules: list[Module]
    quant: QuantSummary = field(default_factory=QuantSummary)
    # tensors vs quantization config disagreements, one sentence each; never hidden
    disagreements: list[str] = field(default_factory=list)
    # bytes fetched from disk / network to build this inventory (headers + configs)
    bytes_read: int = 0
    checkpoint_bytes: int = 0

    @property
    def weight_bytes(self) -> int:
        return sum(m.nbytes for m in self.modules)

    def by_name(self) -> dict[str, Module]:
        return {m.name: m for m in self.modules}


def module_to_dict(module: Module, with_tensors: bool = False) -> dict:
    out = {
        "name": module.name, "layer": module.layer, "role": module.role, "format": module.format,
        "quant_method": module.quant_method, "params": module.params, "bytes": module.nbytes,
        "experts": module.experts, "tied_to": module.tied_to, "kernel": module.kernel,
        "notes": list(module.notes),
    }
    if with_tensors:
        out["tensors"] = [asdict(t) | {"shape": list(t.shape)} for t in module.tensors]
    return out

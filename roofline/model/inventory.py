"""The one data model every source produces: tensors grouped into modules with a role, a
layer index and a storage format. Nothing downstream knows which source made it."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from .architecture import ModelShape
from .formats import PLAIN_FORMATS, TORCH_DTYPES
from .roles import role_properties


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

    @functools.cached_property
    def nbytes(self) -> int:
        """Bytes resident for this module (a tied lm_head owns none: the embedding does). Kept once summed: a
        module's tensors are fixed when it is made (a changed module is a new one, dataclasses.replace), and a
        MoE's thousands of expert tensors were summed anew on every step priced."""
        return sum(t.nbytes for t in self.tensors)


@dataclass
class QuantSummary:
    """What the checkpoint's quantization config says, in one place, for display."""

    method: str = "none"  # compressed-tensors | modelopt | fp8 | mxfp4 | awq | gptq | none
    algo: str = ""  # e.g. NVFP4, FP8, MIXED_PRECISION, nvfp4-pack-quantized
    kv_cache: str = ""  # e.g. FP8 when the checkpoint ships KV-cache scales
    config_file: str = ""  # config.json / hf_quant_config.json
    # what vLLM runs for --kv-cache-dtype auto by the checkpoint's word ("fp8_e4m3", "fp8"); "": the
    # model's dtype (quant_config.vllm_auto_kv_dtype)
    auto_kv_cache_dtype: str = ""


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

    def main_quantized_format(self) -> str | None:
        """The quantized format holding most weight bytes among the modules that vote on it (roles.toml
        format_vote: not embeddings, norms or lm_head); None: an unquantized checkpoint."""
        totals: dict[str, int] = {}
        for module in self.modules:
            if module.format not in PLAIN_FORMATS.values() and module.params and \
                    role_properties(module.role).format_vote:
                totals[module.format] = totals.get(module.format, 0) + module.nbytes
        return max(totals, key=totals.get) if totals else None

    def main_format(self) -> str:
        """The main quantized format, else the plain format of the model dtype."""
        plain = PLAIN_FORMATS.get(TORCH_DTYPES.get(self.shape.dtype.replace("torch.", ""), "BF16"), "bf16")
        return self.main_quantized_format() or plain

"""Weight storage formats as data (roofline/data/formats.toml), plus the dtype table of
safetensors. Detection of a module's format from its tensors lives in detect.py."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from roofline.data import load_table
from roofline.errors import RooflineError, unknown

# safetensors dtype -> bits per element (safetensors' Dtype enum, including the sub-byte and
# FP8 scale types added for NVFP4 / MXFP4 checkpoints)
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

# torch / config dtype names -> safetensors dtype
TORCH_DTYPES: dict[str, str] = {
    "bfloat16": "BF16", "float16": "F16", "half": "F16", "float32": "F32", "float": "F32",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "int8": "I8", "uint8": "U8",
    "int32": "I32", "int64": "I64", "float64": "F64", "bool": "BOOL",
    "float8_e8m0fnu": "F8_E8M0", "float4_e2m1fn_x2": "U8",
}

# plain floating dtype -> format key (an unquantized tensor's format is its dtype)
PLAIN_FORMATS = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}


def dtype_nbytes(dtype: str, shape: tuple[int, ...] | list[int]) -> int:
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise RooflineError(f"unknown tensor dtype {dtype!r}")
    count = 1
    for dim in shape:
        count *= int(dim)
    return (count * bits + 7) // 8


@dataclass(frozen=True)
class Format:
    key: str
    label: str
    weights: int  # bits of the stored weight
    activations: int  # bits of the activation operand (16: weight-only, dequantized)
    bytes_per_weight: float
    group_size: int
    compute: str  # tensor-core format the GEMM runs in
    source: str

    @property
    def quantized(self) -> bool:
        return self.weights < 16


@functools.lru_cache(maxsize=None)
def formats() -> dict[str, Format]:
    """The table, built once per process (simulation looks formats up per tensor). Read-only."""
    return {key: Format(key=key, **entry) for key, entry in load_table("formats").items()}


def get_format(key: str) -> Format:
    table = formats()
    if key not in table:
        raise unknown("format", key, {name: () for name in table})
    return table[key]


def format_label(key: str) -> str:
    table = formats()
    return table[key].label if key in table else key.upper()

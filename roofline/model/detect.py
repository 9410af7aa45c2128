"""A module's storage format from its tensors alone (dtypes, packed shapes, scale tensors).

Layouts, as the producers write them (checked against compressed-tensors, ModelOpt export,
AutoAWQ / GPTQ and gpt-oss checkpoints):
- compressed-tensors NVFP4: weight_packed U8 [out, in/2], weight_scale F8_E4M3 [out, in/16],
  weight_global_scale F32 [1]; W4A4 adds input_global_scale.
- ModelOpt NVFP4: weight U8 [out, in/2], weight_scale F8_E4M3 [out, in/16], weight_scale_2 F32;
  W4A4 adds input_scale.
- MXFP4: gpt-oss *_blocks U8 [..., in/32, 16] + *_scales U8 (E8M0); compressed-tensors
  weight_packed U8 + weight_scale U8/F8_E8M0 per 32.
- FP8: weight F8_E4M3 + weight_scale (per tensor / channel), or weight_scale_inv F32
  [out/128, in/128] (block, DeepSeek / Qwen).
- INT4: compressed-tensors weight_packed I32 [out, in/8] + weight_scale; AWQ qweight I32
  [in, out/8] + qzeros + scales; GPTQ qweight I32 [in/8, out] + g_idx.
- INT8 W8A8: weight I8 + weight_scale.
"""
from __future__ import annotations

from dataclasses import dataclass

from .formats import PLAIN_FORMATS
from .inventory import Tensor


@dataclass(frozen=True)
class Detected:
    format: str
    params: int  # logical (unpacked) weights
    quantized_activations: bool | None  # None: the tensors do not say


def _numel(t: Tensor) -> int:
    n = 1
    for d in t.shape:
        n *= d
    return n


def detect_format(tensors: list[Tensor]) -> Detected:
    by_suffix: dict[str, list[Tensor]] = {}
    for t in tensors:
        by_suffix.setdefault(t.name.rpartition(".")[2], []).append(t)
    has = by_suffix.__contains__

    def dtypes(suffix: str) -> set[str]:
        return {t.dtype for t in by_suffix.get(suffix, ())}

    def count(suffix: str, factor: int = 1) -> int:
        return sum(_numel(t) for t in by_suffix.get(suffix, ())) * factor

    if has("weight_packed"):
        packed = dtypes("weight_packed")
        scales = dtypes("weight_scale")
        if packed <= {"U8"} and "F8_E4M3" in scales:
            return Detected("nvfp4-w4a4" if has("input_global_scale") else "nvfp4-w4a16",
                            count("weight_packed", 2), has("input_global_scale"))
        if packed <= {"U8"} and scales & {"U8", "F8_E8M0"}:
            return Detected("mxfp4", count("weight_packed", 2), has("input_global_scale"))
        if packed <= {"I32"}:
            return Detected("int4", count("weight_packed", 8), False)
        if packed <= {"U8"}:
            return Detected("nvfp4-w4a16", count("weight_packed", 2), None)
    if has("qweight"):
        method = "int4-gptq" if has("g_idx") else "int4-awq"
        return Detected(method, count("qweight", 8), False)
    blocks = [s for s in by_suffix if s.endswith("_blocks")]
    if blocks:  # gpt-oss MXFP4: 16 bytes of packed E2M1 per 32-weight block
        params = sum(count(s, 2) for s in blocks)
        return Detected("mxfp4", params, False)
    weight_dtypes = dtypes("weight")
    if weight_dtypes == {"U8"} and "F8_E4M3" in dtypes("weight_scale"):
        return Detected("nvfp4-w4a4" if has("input_scale") else "nvfp4-w4a16", count("weight", 2), has("input_scale"))
    if weight_dtypes and weight_dtypes <= {"F8_E4M3", "F8_E5M2"}:
        scale = by_suffix.get("weight_scale_inv") or by_suffix.get("weight_scale") or []
        blockwise = has("weight_scale_inv") or any(
            len(s.shape) == 2 and s.shape[1] > 1 for s in scale)
        return Detected("fp8-block" if blockwise else "fp8", count("weight"), has("input_scale") or None)
    if weight_dtypes == {"I8"}:
        return Detected("int8", count("weight"), None)
    # unquantized: the dtype of the weights (or of whatever float tensors the module holds)
    float_tensors = [t for t in tensors if t.dtype in PLAIN_FORMATS]
    main = [t for t in float_tensors if t.name.endswith(".weight")] or float_tensors
    if main:
        dtype = max({t.dtype for t in main}, key=lambda d: sum(_numel(t) for t in main if t.dtype == d))
        return Detected(PLAIN_FORMATS[dtype], sum(_numel(t) for t in float_tensors), False)
    # integer-only buffers and the like: report the dtype itself
    return Detected(tensors[0].dtype.lower() if tensors else "unknown", 0, None)

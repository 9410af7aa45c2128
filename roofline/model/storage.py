"""What a producer stores for one weight in a format: the tensors on disk, scales included.

Layouts as roofline.model.detect documents them (and reads them back): NVFP4 packed weight + E4M3
group scales + fp32 global scale, FP8 + per-channel or 128x128 block scales, gpt-oss MXFP4
blocks + E8M0 scales, AWQ / GPTQ qweight + qzeros + scales, ... Used by the config-only source
(roofline.model.quantize) and by format simulation (roofline.advise.simulate) alike.
"""
from __future__ import annotations

import math

from roofline.errors import RooflineError

from .formats import dtype_nbytes
from .inventory import Tensor


def _per_expert(tensor: Tensor) -> list[Tensor]:
    """Split a fused 3-D expert weight [E, out, in] into per-expert 2-D weights, named as the
    per-expert checkpoints name them (`experts.{e}.gate_up_proj.weight`)."""
    prefix, _, proj = tensor.name.rpartition(".")
    experts, rows, cols = tensor.shape
    return [Tensor(f"{prefix}.{e}.{proj}.weight", tensor.dtype, (rows, cols), dtype_nbytes(tensor.dtype, (rows, cols)))
            for e in range(experts)]


def _t(name: str, dtype: str, shape: tuple[int, ...]) -> Tensor:
    shape = tuple(int(d) for d in shape)
    return Tensor(name, dtype, shape, dtype_nbytes(dtype, shape))


def stored_tensors(weight: Tensor, fmt: str, producer: str, *, model_type: str = "", group_size: int = 128) -> list[Tensor]:
    """The tensors a producer stores for one weight in format `fmt`, scales included.

    `weight` is the unquantized `....weight` [out, in] (or a fused 3-D expert weight). Layouts
    as detect.py documents them; `producer` is a QuantConfig.method (compressed-tensors,
    modelopt, fp8, mxfp4, awq, gptq).
    """
    if len(weight.shape) == 3:
        if fmt == "mxfp4" and producer == "mxfp4":
            # gpt-oss: `experts.gate_up_proj` is [E, in, out] in transformers; the checkpoint
            # stores `gate_up_proj_blocks` U8 [E, out, in/32, 16] + `_scales` U8 [E, out, in/32]
            experts, inp, outp = weight.shape
            blocks = math.ceil(inp / 32)
            return [_t(f"{weight.name}_blocks", "U8", (experts, outp, blocks, 16)),
                    _t(f"{weight.name}_scales", "U8", (experts, outp, blocks))]
        return [t for w in _per_expert(weight) for t in stored_tensors(w, fmt, producer, model_type=model_type,
                                                                        group_size=group_size)]
    if fmt in ("bf16", "fp16", "fp32"):
        dtype = {"bf16": "BF16", "fp16": "F16", "fp32": "F32"}[fmt]
        return [_t(weight.name, dtype, weight.shape)]
    out, inp = weight.shape
    base = weight.name[: -len(".weight")] if weight.name.endswith(".weight") else weight.name
    model_dtype = weight.dtype if weight.dtype in ("BF16", "F16") else "BF16"
    if fmt in ("nvfp4-w4a4", "nvfp4-w4a16"):
        packed, scales = (out, math.ceil(inp / 2)), (out, math.ceil(inp / 16))
        if producer == "modelopt":
            tensors = [_t(f"{base}.weight", "U8", packed), _t(f"{base}.weight_scale", "F8_E4M3", scales),
                       _t(f"{base}.weight_scale_2", "F32", ())]
            return tensors + ([_t(f"{base}.input_scale", "F32", ())] if fmt == "nvfp4-w4a4" else [])
        tensors = [_t(f"{base}.weight_packed", "U8", packed), _t(f"{base}.weight_scale", "F8_E4M3", scales),
                   _t(f"{base}.weight_global_scale", "F32", (1,))]
        return tensors + ([_t(f"{base}.input_global_scale", "F32", (1,))] if fmt == "nvfp4-w4a4" else [])
    if fmt == "mxfp4":
        return [_t(f"{base}.weight_packed", "U8", (out, math.ceil(inp / 2))),
                _t(f"{base}.weight_scale", "U8", (out, math.ceil(inp / 32)))]
    if fmt == "fp8":
        if producer == "modelopt":
            return [_t(f"{base}.weight", "F8_E4M3", (out, inp)), _t(f"{base}.weight_scale", "F32", ()),
                    _t(f"{base}.input_scale", "F32", ())]
        # compressed-tensors FP8_DYNAMIC: one scale per output channel, in the model dtype
        return [_t(f"{base}.weight", "F8_E4M3", (out, inp)), _t(f"{base}.weight_scale", model_dtype, (out, 1))]
    if fmt == "fp8-block":
        blocks = (math.ceil(out / 128), math.ceil(inp / 128))
        if producer == "compressed-tensors":
            return [_t(f"{base}.weight", "F8_E4M3", (out, inp)), _t(f"{base}.weight_scale", model_dtype, blocks)]
        return [_t(f"{base}.weight", "F8_E4M3", (out, inp)), _t(f"{base}.weight_scale_inv", "F32", blocks)]
    if fmt == "int8":
        return [_t(f"{base}.weight", "I8", (out, inp)), _t(f"{base}.weight_scale", model_dtype, (out, 1))]
    if fmt == "int4":  # compressed-tensors pack-quantized, symmetric
        return [_t(f"{base}.weight_packed", "I32", (out, math.ceil(inp / 8))),
                _t(f"{base}.weight_scale", model_dtype, (out, math.ceil(inp / group_size))),
                _t(f"{base}.weight_shape", "I64", (2,))]
    if fmt == "int4-awq":
        groups = math.ceil(inp / group_size)
        return [_t(f"{base}.qweight", "I32", (inp, math.ceil(out / 8))),
                _t(f"{base}.qzeros", "I32", (groups, math.ceil(out / 8))),
                _t(f"{base}.scales", "F16", (groups, out))]
    if fmt == "int4-gptq":
        groups = math.ceil(inp / group_size)
        return [_t(f"{base}.qweight", "I32", (math.ceil(inp / 8), out)),
                _t(f"{base}.qzeros", "I32", (groups, math.ceil(out / 8))),
                _t(f"{base}.scales", "F16", (groups, out)), _t(f"{base}.g_idx", "I32", (inp,))]
    raise RooflineError(f"no storage layout for format {fmt!r}")

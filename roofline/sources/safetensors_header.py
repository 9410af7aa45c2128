"""Safetensors headers: parse and validate, never touching tensor data.

Format (safetensors docs): 8-byte little-endian header length N, N bytes of JSON mapping
tensor name -> {dtype, shape, data_offsets: [begin, end]} (offsets relative to the data
section that follows the header), plus an optional "__metadata__" string map.

Every check here exists because a header is untrusted input: a hub file can be truncated,
hostile or simply wrong, and a wrong header must give one clear error, not a wrong number.
"""
from __future__ import annotations

import os
import struct

from roofline.errors import RooflineError
from roofline.files import open_regular
from roofline.model.formats import DTYPE_BITS
from roofline.model.inventory import Tensor

# The safetensors library refuses headers over 100 MB (safetensors MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100 * 1024 * 1024


def header_length(prefix: bytes, where: str) -> int:
    if len(prefix) < 8:
        raise RooflineError(f"{where}: truncated safetensors file ({len(prefix)} bytes, no header length)")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length == 0:
        raise RooflineError(f"{where}: safetensors header length is 0")
    if length > MAX_HEADER_BYTES:
        raise RooflineError(f"{where}: safetensors header length {length} exceeds the 100 MB limit")
    return length


def loads_json(raw: bytes):
    """JSON of untrusted bytes; any decoding problem is a ValueError."""
    try:
        return _fast_loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(str(exc)) from None


try:  # orjson parses a 100k-tensor header set ~5x faster than the stdlib
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - the stdlib is exact, only slower
    from json import loads as _fast_loads


def parse_header(raw: bytes, where: str, data_size: int | None = None) -> list[Tensor]:
    """Tensors of one file from its JSON header. `data_size` is the size of the data section
    when known (local file: file size - 8 - header length; hub: Content-Range total).

    The loop is the hot path of a large audit (100k tensors), so it checks cheaply and hands
    anything odd to _explain, which names the exact problem."""
    try:
        header = loads_json(raw)
    except ValueError as exc:
        raise RooflineError(f"{where}: invalid safetensors header JSON ({exc})") from None
    if not isinstance(header, dict):
        raise RooflineError(f"{where}: safetensors header is not a JSON object")
    tensors: list[Tensor] = []
    spans: list[tuple[int, int, str]] = []
    bits_of = DTYPE_BITS.get
    limit = data_size if data_size is not None else float("inf")
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            bits = bits_of(dtype)
            count = 1
            for dim in shape:
                if type(dim) is not int or dim < 0:
                    raise TypeError
                count *= dim
            nbytes = (count * bits + 7) // 8
            ok = (type(begin) is int and type(end) is int and 0 <= begin and end - begin == nbytes
                  and end <= limit and len(shape) <= 16)
        except (TypeError, ValueError, KeyError):
            ok = False
        if not ok:
            _explain(name, info, where, data_size)
        tensors.append(Tensor(name, dtype, tuple(shape), nbytes))
        spans.append((begin, end, name))
    spans.sort()
    for (b1, e1, n1), (b2, e2, n2) in zip(spans, spans[1:]):
        if b2 < e1 and e2 > b2:  # empty tensors may share an offset
            raise RooflineError(f"{where}: tensors {n1!r} and {n2!r} overlap in the data section")
    return tensors


def _explain(name: str, info, where: str, data_size: int | None) -> None:
    """Raise the precise error for a tensor entry the fast path rejected."""
    if not isinstance(info, dict):
        raise RooflineError(f"{where}: tensor {name!r} has no dtype/shape/data_offsets object")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    bits = DTYPE_BITS.get(dtype) if isinstance(dtype, str) else None
    if bits is None:
        raise RooflineError(f"{where}: tensor {name!r} has unknown dtype {dtype!r}")
    if (not isinstance(shape, list) or len(shape) > 16
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise RooflineError(f"{where}: tensor {name!r} has an invalid shape {shape!r}")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise RooflineError(f"{where}: tensor {name!r} has invalid data_offsets {offsets!r}")
    begin, end = offsets
    count = 1
    for dim in shape:
        count *= dim
    nbytes = (count * bits + 7) // 8
    if begin < 0 or end < begin:
        raise RooflineError(f"{where}: tensor {name!r} has invalid data_offsets {offsets!r}")
    if end - begin != nbytes:
        raise RooflineError(f"{where}: tensor {name!r} spans {end - begin} bytes but {dtype} {shape} needs {nbytes}")
    if data_size is not None and end > data_size:
        raise RooflineError(f"{where}: tensor {name!r} data_offsets {offsets!r} run past the end of the file "
                            f"({data_size} data bytes): truncated or corrupt")
    raise RooflineError(f"{where}: tensor {name!r} has an invalid entry")


def read_local_header(path: str) -> tuple[list[Tensor], int]:
    """(tensors, bytes read) of a local .safetensors file, reading only its header."""
    try:
        with open_regular(path, path) as fh:
            size = os.fstat(fh.fileno()).st_size
            length = header_length(fh.read(8), path)
            if 8 + length > size:
                raise RooflineError(f"{path}: safetensors header length {length} runs past the end of the "
                                    f"file ({size} bytes): truncated")
            raw = fh.read(length)
    except OSError as exc:
        raise RooflineError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return parse_header(raw, path, data_size=size - 8 - length), 8 + length

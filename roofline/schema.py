"""Checking data read from outside (a capture, a bench JSON, a hardware file, a profiler trace, a
hub or server answer) against a declared schema, with msgspec.

Each reader declares its format once as msgspec Structs next to itself (types, ranges, finiteness
through `Annotated[..., Meta(...)]`); `checked(value, Type, where)` converts, and any mismatch is
one RooflineError naming the file or server and the field: "bench.json: $.sweep: Expected `array`,
got `str`". Unknown fields are kept out, not refused (newer writers add fields).
"""
from __future__ import annotations

import math
from typing import Annotated, TypeVar

import msgspec
from msgspec import Meta

from roofline.errors import RooflineError
from roofline.untrusted import printable

T = TypeVar("T")

# Reusable constrained numbers. A float Meta with bounds also refuses NaN and the infinities.
Count = Annotated[int, Meta(ge=0, le=2**53)]
Positive = Annotated[int, Meta(ge=1, le=2**53)]
Finite = Annotated[float, Meta(ge=-1e300, le=1e300)]
NonNegative = Annotated[float, Meta(ge=0, le=1e300)]
PositiveFloat = Annotated[float, Meta(gt=0, le=1e300)]
Fraction = Annotated[float, Meta(ge=0, le=1)]
Name = Annotated[str, Meta(max_length=4096)]


def checked(value, kind: type[T], where: str) -> T:
    """`value` (parsed JSON / TOML / dicts) as `kind`, or one error naming where and which field."""
    try:
        return msgspec.convert(value, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise RooflineError(f"{where}: {printable(str(exc), 300)}") from None


def decoded_json(raw: bytes, kind: type[T], where: str) -> T:
    """JSON bytes straight into `kind` (one pass, no intermediate dicts for large files)."""
    try:
        return msgspec.json.decode(raw, type=kind, strict=True)
    except msgspec.ValidationError as exc:
        raise RooflineError(f"{where}: {printable(str(exc), 300)}") from None
    except msgspec.DecodeError as exc:
        raise RooflineError(f"{where}: not valid JSON ({printable(str(exc), 200)})") from None


def finite_number(value, where: str, low: float = 0.0, high: float = 1e300) -> float:
    """A number from outside, checked finite and in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RooflineError(f"{where}: expected a number, got {printable(repr(value), 60)}")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise RooflineError(f"{where}: {printable(repr(value), 60)} is out of range [{low:g}, {high:g}]")
    return number

"""Checking data read from outside (a capture, a bench JSON, a hardware file, a profiler trace, a
hub or server answer) against a declared schema, with msgspec.

Each reader declares its format once as msgspec Structs next to itself (types, ranges, finiteness
through `Annotated[..., Meta(...)]`); `checked(value, Type, where)` converts, and any mismatch is
one RooflineError naming the file or server and the field: "bench.json: $.sweep: Expected `array`,
got `str`". Unknown fields are left out, not refused (newer writers add fields), unless a Struct
forbids them (hardware entries: a misspelt field is an error there).
"""
from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec
from msgspec import Meta

from roofline.errors import RooflineError
from roofline.untrusted import printable

T = TypeVar("T")

# Reusable constrained values (a float Meta with bounds also refuses NaN and the infinities).
Count = Annotated[int, Meta(ge=0, le=2**53)]
Positive = Annotated[int, Meta(ge=1, le=2**53)]
Name = Annotated[str, Meta(max_length=4096)]


def checked(value, kind: type[T], where: str) -> T:
    """`value` (parsed JSON / TOML / dicts) as `kind`, or one error naming where and which field."""
    try:
        return msgspec.convert(value, kind, strict=True)
    except msgspec.ValidationError as exc:
        raise RooflineError(f"{where}: {printable(str(exc), 300)}") from None

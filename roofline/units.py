"""Units for people: byte counts as text. Below every layer (like errors.py), so that a
sentence built anywhere (a validation suspect, a table cell) formats bytes one way."""
from __future__ import annotations


def human_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """"1 checkpoint", "2 checkpoints": a count and its noun, agreed."""
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"


def milliseconds(ms: float) -> str:
    """A duration in ms people read at a glance: three significant figures, never an exponent
    ("2710 ms", not "2.71e+03 ms")."""
    if ms != ms or ms in (float("inf"), float("-inf")):
        return f"{ms} ms"
    if abs(ms) >= 100:
        return f"{ms:,.0f} ms"
    return f"{ms:.3g} ms" if abs(ms) >= 0.001 or ms == 0 else f"{ms:.1e} ms"


def provenance(kind: str, source: str) -> str:
    """"estimate: the H200's 2.2 us rounded up": a figure's kind before its source, once (a source that
    already opens with its kind is not prefixed again: never "estimate: estimate: ...")."""
    if not kind:
        return source
    if source.lower().startswith(kind.lower()):
        return source
    return f"{kind}: {source}" if source else kind

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

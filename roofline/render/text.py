"""Plain-text tables for the terminal renderers."""
from __future__ import annotations


def text_table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:  # a column without a heading (a marker column) gets no rule either
            lines.append("  ".join(("-" * w) if c else " " * w for c, w in zip(row, widths)).rstrip())
    return lines

"""Plain-text tables for the terminal renderers, fitted to the terminal's width."""
from __future__ import annotations

import os
import shutil
import sys
import textwrap


def text_table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:  # a column without a heading (a marker column) gets no rule either
            lines.append("  ".join(("-" * w) if c else " " * w for c, w in zip(row, widths)).rstrip())
    return lines


def terminal_width() -> int | None:
    """The width tables must fit: $COLUMNS when set, else the terminal's when stdout is one; None
    (no limit) when the output goes to a file or a pipe."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def fitted_table(rows: list[list[str]], right: set[int], width: int | None, drop_first: list[str],
                 indent: int = 0) -> tuple[list[str], list[str]]:
    """text_table, with columns left out in `drop_first` order (by heading) until the table fits
    `width` characters (None: all columns). Returns the lines and the headings left out."""
    keep = list(range(len(rows[0])))
    dropped: list[str] = []

    def table_width(columns: list[int]) -> int:
        return indent + sum(max(len(r[i]) for r in rows) for i in columns) + 2 * (len(columns) - 1)
    for heading in drop_first:
        if width is None or table_width(keep) <= width:
            break
        if heading in rows[0] and rows[0].index(heading) in keep:
            keep.remove(rows[0].index(heading))
            dropped.append(heading)
    kept_rows = [[row[i] for i in keep] for row in rows]
    kept_right = {keep.index(i) for i in right if i in keep}
    return text_table(kept_rows, kept_right), dropped


def wrapped(text: str, width: int | None, indent: str = "", hang: str = "  ") -> list[str]:
    """One line, or several of at most `width` characters (continuations indented by `hang` more)."""
    if width is None or len(indent) + len(text) <= width:
        return [indent + text]
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + hang,
                         break_on_hyphens=False) or [indent]


def attention_text(attention: dict | None) -> str:
    """One line on the attention backend a figure was priced with (StepTime.attention_json)."""
    if not attention:
        return "none priced"
    head = f"{attention['label']}, {attention['kv_cache_dtype']} KV ({attention['reason']})"
    if attention["kernels_measured"]:
        return (f"{head}: its decode kernels as timed on an H200, {attention['kernels_ms_per_step']:+.2f} ms a step "
                f"beyond the KV at the bandwidth")
    return f"{head}: its decode kernels unmeasured here, the KV priced at the device's bandwidth"

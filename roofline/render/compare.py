"""Terminal presentation of a comparison: one row per checkpoint, then what separates them."""
from __future__ import annotations


from roofline.advise.compare import Comparison
from roofline.model.formats import format_label
from roofline.units import human_bytes, plural

from .text import fitted_table, terminal_width, wrapped

# columns left out first when the table is wider than the terminal (--wide keeps them all)
DROP_FIRST = ["state", "KV", "weights", "on disk", "graphs", "vLLM backend", "BF16 residuals", "ceiling"]


def render_compare(comparison: Comparison, wide: bool = False) -> str:
    hw = comparison.hardware
    first = comparison.rows[0].result.scenario
    width = None if wide else terminal_width()
    lines = wrapped(f"{plural(len(comparison.rows), 'checkpoint')} on {hw.name}, {hw.bandwidth_gbps:g} GB/s; batch {first.batch}, "
                    f"context {first.context}, kv cache {first.kv_cache_dtype}"
                    f"{f', routing {first.routing}' if first.batch > 1 and any(r.result.inventory.shape.num_experts for r in comparison.rows) else ''}"
                    "; ranked by "
                    f"{'hub downloads' if comparison.sort == 'downloads' else 'expected tok/s'}", width) + [""]
    rows = [["#", "checkpoint", "format", "on disk", "bytes/token", "weights", "KV", "state", "ceiling", "expected",
             "graphs", "BF16 residuals", "fits", "vLLM backend"]]
    for row in comparison.rows:
        r, t = row.result, row.result.traffic
        cg = r.cuda_graph
        residual = ", ".join(f"{label} {human_bytes(b)}" for label, b in row.residual_top()) or "-"
        rows.append([str(row.rank), row.name, format_label(row.main_format), human_bytes(r.inventory.weight_bytes),
                     human_bytes(t.bytes_per_token), human_bytes(t.weight_bytes_per_token),
                     human_bytes(t.kv_bytes_per_token), human_bytes(t.state_bytes_per_token),
                     f"{r.ceiling_tok_s:.1f}", f"{r.expected_tok_s:.1f}",
                     f"x{cg['benefit']:.2f}" if cg else "-", residual, "yes" if row.fits else "NO", row.backend])
    table, dropped = fitted_table(rows, {0, 3, 4, 5, 6, 7, 8, 9, 10}, width, DROP_FIRST, indent=2)
    lines += ["  " + line for line in table]
    if dropped:
        lines += wrapped(f"({', '.join(dropped)} left out to fit the terminal; --wide shows every column)", width,
                         "  ", " ")
    explained = [row for row in comparison.rows if row.differences]
    if explained:
        lines += ["", "why the others read more:"]
        for row in explained:
            lines += [out for line in row.differences for out in wrapped(f"- {line}", width, "  ")]
    if comparison.skipped:
        lines += ["", "skipped:"]
        lines += [out for label, reason in comparison.skipped
                  for out in wrapped(f"- {label}: {reason.removeprefix(label + ': ')}", width, "  ")]
    return "\n".join(lines)

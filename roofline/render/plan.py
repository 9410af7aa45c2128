"""Terminal presentation of a plan: simulated formats, the ranked table, the top pick."""
from __future__ import annotations

from roofline.advise.recommend import plan_band, tie_tolerance
from roofline.advise.ties import tie_marks
from roofline.predict.bands import band_text
from roofline.model.formats import format_label
from roofline.units import human_bytes

from .text import fitted_table, terminal_width, wrapped


def _drop_first(concurrency: int) -> list[str]:
    """Columns of the ranked table left out first when it is wider than the terminal (--wide keeps
    them): at one stream the total is the stream's figure again; at more, the total ranks and the
    single-stream figure goes last."""
    if concurrency == 1:
        return [f"total @{concurrency}", "bound", "resident"]
    return ["bound", "resident", "1-stream tok/s"]


def _tie_span(label: str, members, workload) -> str:
    if workload.load is not None and workload.load.targets.any:
        values = [r.load.highest_rate or 0.0 for r in members]
        return f"{label} {min(values):.2f}-{max(values):.2f} requests/s"
    if workload.load is not None:
        values = [r.load.result.e2e.p90 for r in members if r.load.result and r.load.result.e2e]
        return f"{label} {min(values):.2f}-{max(values):.2f} s end-to-end p90" if values else label
    values = [r.single_stream_tok_s if workload.concurrency == 1 else r.aggregate_tok_s for r in members]
    return f"{label} {min(values):.1f}-{max(values):.1f} tok/s"


_LOAD_COLUMNS = ["TTFT p90", "TPOT p90", "E2E p90", "max req/s", "keeps"]


def _targets_text(targets) -> str:
    said = [f"TTFT p90 <= {targets.ttft_p90_s * 1e3:,.0f} ms" if targets.ttft_p90_s is not None else "",
            f">= {targets.min_tok_s:g} tok/s per request" if targets.min_tok_s is not None else ""]
    said = [s for s in said if s]
    return f"; targets {' and '.join(said)}" if said else ""


def _load_cells(row, targeted: bool) -> list[str]:
    """A row's cells under the plan's load: its TTFT / TPOT / end-to-end p90 at the load and, with targets, the
    highest rate keeping them and whether the load does."""
    r = row.result if row is not None else None
    cells = [f"{r.ttft.p90 * 1e3:,.0f} ms" if r and r.ttft else "-",
             f"{r.tpot.p90 * 1e3:.1f} ms" if r and r.tpot else "-",
             f"{r.e2e.p90:.2f} s" if r and r.e2e else "-"]
    if targeted:
        cells += [f"{row.highest_rate:.2f}" if row is not None and row.highest_rate is not None else "-",
                  "yes" if row is not None and row.keeps else "NO"]
    return cells


def render_plan(plan, top: int = 12, wide: bool = False) -> str:
    """Fitted to the terminal ($COLUMNS or its width): the least telling columns left out and named,
    long lines wrapped; `wide` keeps every column. Serve lines stay whole, to be copied."""
    inv, hw, w = plan.inventory, plan.hardware, plan.workload
    width = None if wide else terminal_width()
    heading = [
        f"{inv.model_id}  ({inv.shape.architecture}, source: {inv.source})",
        f"hardware: {hw.name}, {hw.bandwidth_text()}, SM {hw.compute_capability}, "
        f"efficiency {hw.efficiency:.2f} ({hw.efficiency_kind})",
        f"workload: {w.concurrency} concurrent x {w.context} tokens"
        f"{f', routing {w.routing}' if w.concurrency > 1 and inv.shape.num_experts else ''}"
        f"{f', TP={w.tp}' if w.tp > 1 else ''}"
        f"{f', memory budget {w.memory_budget_gb:g} GB' if w.memory_budget_gb else ''}",
    ]
    lines = [line for text in heading for line in wrapped(text, width)] + ["", "simulated formats (single stream):"]
    rows = [["recipe", "format", "weights", "bytes/token", "ceiling tok/s", "expected tok/s"]]
    for s in plan.simulated:
        rows.append([s.recipe, format_label(s.format), human_bytes(s.weight_bytes), human_bytes(s.bytes_per_token),
                     f"{s.ceiling_tok_s:.1f}", f"{s.expected_tok_s:.1f}"])
    table, dropped_simulated = fitted_table(rows, {2, 3, 4, 5}, width, ["weights", "ceiling tok/s"], indent=2)
    lines += ["  " + line for line in table]
    if w.load is not None:
        lines += [""] + wrapped(f"ranked under {w.load.label} ({w.load.arrivals.prompt_len:,} prompt + "
                                f"{w.load.arrivals.output_len:,} output tokens a request{_targets_text(w.load.targets)}):"
                                + (" the rows keeping the targets first, then the highest request rate keeping "
                                   "them" if w.load.targets.any else " by end-to-end latency p90"), width)
    else:
        lines += ["", f"ranked for {w.concurrency} concurrent sequence{'s' if w.concurrency > 1 else ''}"
                      f"{f' (total @{w.concurrency}: tok/s of all {w.concurrency} together)' if w.concurrency > 1 else ''}:"]
    # at one stream the stream's tok/s is the figure: its heading need not say so
    rows = [["#", "format", "recipe", "backend", "tok/s" if w.concurrency == 1 else "1-stream tok/s",
             f"total @{w.concurrency}", "bound", "resident", "fits"]]
    load = w.load
    if load is not None:
        rows[0] += _LOAD_COLUMNS[:3] + (_LOAD_COLUMNS[3:] if load.targets.any else [])
    groups = tie_marks(r.tie_group for r in plan.recommendations[:top])
    for r in plan.recommendations[:top]:
        rows.append([f"{r.rank}{groups.get(r.tie_group, '')}", format_label(r.format), r.recipe, r.backend.name,
                     f"{r.single_stream_tok_s:.1f}",
                     f"{r.aggregate_tok_s:.0f}", r.aggregate_bound, f"{r.resident_gb:.1f} GB",
                     "yes" if r.fits else "NO"] + (_load_cells(r.load, load.targets.any) if load is not None else []))
    numeric = {0, 4, 5, 7} | ({9, 10, 11, 12} if load is not None else set())
    table, dropped = fitted_table(rows, numeric, width, _drop_first(w.concurrency), indent=2)
    lines += ["  " + line for line in table]
    lines += wrapped(f"tok/s validated {band_text(plan_band(inv, hw, w, plan.lead))}", width, "  ")
    dropped = dropped_simulated + dropped
    if dropped:
        lines += wrapped(f"({', '.join(dropped)} left out to fit the terminal; --wide shows every column)", width,
                         "  ", " ")
    if groups:
        tol, _ = tie_tolerance(plan.inventory, plan.hardware, plan.workload, plan.lead)
        spans = "; ".join(_tie_span(label, [r for r in plan.recommendations[:top] if r.tie_group == group], w)
                          for group, label in groups.items())
        lines += wrapped(f"{', '.join(groups.values())}: ties, each within {100 * tol:.0f}% of its best row (the "
                         f"leading row's validated error here), ordered by evidence ({spans})", width, "  ")
    best = plan.top
    if best is not None:
        lines += ["", f"top pick: {format_label(best.format)}, recipe {best.recipe}, {best.backend.name}"]
        if plan.pick_change():
            lines += wrapped(f"! {plan.pick_change()}", width, "  ")
        lines += [line for reason in best.reasons for line in wrapped(f"- {reason}", width, "  ")]
        if best.quantize_with:
            lines += wrapped(f"quantize with: {best.quantize_with}", width, "  ")
        lines += ["", "  " + best.serve_command()]
        others = [r for r in plan.recommendations[1:4] if r.format != best.format]
        for r in others[:2]:
            lines += ["", f"#{r.rank} {format_label(r.format)} ({r.recipe}, {r.backend.name}):"]
            lines += [line for reason in r.reasons[:3] for line in wrapped(f"- {reason}", width, "  ")]
    for note in plan.notes:
        lines += wrapped(f"note: {note}", width)
    for note in inv.disagreements:
        lines += wrapped(f"! tensors vs config: {note}", width)
    return "\n".join(lines)

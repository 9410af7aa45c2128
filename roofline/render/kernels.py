"""Terminal presentation of a kernel profile and the CUDA-graph estimate."""
from __future__ import annotations


def render_kernels(profile, graph, hardware) -> str:
    lines = [f"{profile.model_id}: {profile.kernels_per_token:.0f} "
             f"{'kernels' if profile.device == 'cuda' else 'CPU ops'} per decode step "
             f"({'measured from a trace' if profile.origin == 'trace' else 'estimated from roofline/data/kernels.toml'})"]
    # layers with the same count print as one row
    rows: list[tuple[str, float]] = []
    per_layer = profile.per_layer()
    run_start = run_end = None
    run_value = None
    for layer in sorted(k for k in per_layer if k is not None):
        value = per_layer[layer]
        if run_value == value and run_end == layer - 1:
            run_end = layer
            continue
        if run_start is not None:
            rows.append((_span(run_start, run_end), run_value))
        run_start = run_end = layer
        run_value = value
    if run_start is not None:
        rows.append((_span(run_start, run_end), run_value))
    if None in per_layer:
        rows.append(("outside layers", per_layer[None]))
    lines.append("")
    lines.append(f"  {'layers':<16} {'kernels/layer':>13}")
    for label, value in rows:
        lines.append(f"  {label:<16} {value:>13.0f}")
    lines.append("")
    lines.append("  by role: " + ", ".join(f"{role} {n:.0f}" for role, n in profile.by_role().items()))
    if graph is not None:
        lines += [
            "",
            f"  on {hardware.name}: CUDA graphs {graph['graph_tok_s']:.1f} tok/s, eager {graph['eager_tok_s']:.1f} tok/s, "
            f"benefit {graph['benefit']:.2f}x",
            f"  host cost {graph['host_us_per_kernel']:g} us/kernel ({graph['host_cost_kind']}), graph floor "
            f"{graph['graph_floor_us_per_kernel']:g} us/kernel ({graph['graph_floor_kind']}); sources: "
            "roofline/data/launch.toml",
            f"  advice: {graph['advice']}",
        ]
    for note in profile.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def _span(start: int, end: int) -> str:
    return f"{start}" if start == end else f"{start}-{end}"

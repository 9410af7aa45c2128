"""What CUDA graphs buy: the same priced step (roofline.predict.step) read in both graph modes, per
segment, with the advice it supports. No arithmetic of its own beyond reading the step."""
from __future__ import annotations

from .launch import graphs_apply
from .step import StepTime, eager_totals


def advice_for(benefit: float, eager_tok_s: float, graph_tok_s: float, host_share: float = 0.0,
               host_bound: bool = True) -> str:
    """`host_share`: the eager host's launches over the GPU's time; `host_bound`: they set the eager step's pace
    (else the GPU does, waiting on the host's stalls: launch.toml [eager_overlap])."""
    loss = 1.0 - 1.0 / benefit if benefit > 0 else 0.0
    if benefit >= 1.10:
        why = ("the host cannot launch this model's small kernels as fast as the GPU runs them" if host_bound
               else f"eager, the host's launches take {host_share:.0%} of the GPU's time and the GPU waits on every "
                    "stall of the host (measured: launch.toml [eager_overlap])")
        return (f"keep CUDA graphs on; --enforce-eager costs ~{loss:.0%} "
                f"({graph_tok_s:.1f} -> {eager_tok_s:.1f} tok/s): {why}")
    if benefit >= 1.02:
        return (f"keep CUDA graphs on; --enforce-eager costs ~{loss:.0%} "
                f"({graph_tok_s:.1f} -> {eager_tok_s:.1f} tok/s)")
    return ("CUDA graphs change little here (the GPU, not kernel launches, sets the pace): "
            "--enforce-eager costs under 2% and is safe where graphs cause trouble")


def cuda_graph_summary(step: StepTime) -> dict | None:
    """The eager vs CUDA-graph figures of a step, as audit / kernels print them; None on a CPU host
    (no kernel launches, no graphs)."""
    if not graphs_apply(step.hardware):
        return None
    main = step.main
    tokens = main.batch * main.tokens_per_sequence
    graph, eager = step.graph_tok_s, step.eager_tok_s
    benefit = graph / eager
    device_s, host_s = eager_totals(main.segments)
    share = host_s / device_s if device_s > 0 else 0.0
    eager_step = step.breakdown(graphs=False)  # the host's launches set its pace where they are the launch part
    costs = step.costs
    per_layer = [{"layer": s.layer, "where": s.where, "stage": s.stage, "bytes_per_token": s.bytes / tokens,
                  "kernels": s.kernels, "graph_us": s.seconds(True) * 1e6, "eager_us": s.seconds(False) * 1e6}
                 for s in main.segments]
    return {
        "kernels_per_token": step.profile.kernels_per_token / tokens,
        "eager_tok_s": eager, "graph_tok_s": graph, "benefit": benefit,
        "enforce_eager_loss": 1.0 - 1.0 / benefit if benefit > 0 else 0.0,
        "eager_host_share": share,
        "advice": advice_for(benefit, eager, graph, share, eager_step.launch_s >= eager_step.launch_time_s - 1e-12),
        "kernel_counts": step.profile.origin,
        "host_us_per_kernel": costs.host_us_per_kernel, "host_cost_kind": costs.host_kind,
        "host_cost_source": costs.host_source,
        "graph_floor_us_per_kernel": costs.graph_floor_us_per_kernel, "graph_floor_kind": costs.floor_kind,
        "graph_floor_source": costs.floor_source,
        "host_bound_layers_eager": sum(1 for s in main.segments if s.where == "layer"
                                       and s.seconds(False) > s.seconds(True) * 1.000001),
        "per_layer": per_layer,
    }

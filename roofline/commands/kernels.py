"""roofline kernels MODEL | --trace TRACE"""
from __future__ import annotations

from dataclasses import replace

import click


from . import types
from .options import no_cache_option, quiet_option, scenario_from, scenario_options
from .output import echo, print_json


@click.command(name="kernels")
@click.argument("model", required=False)
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
              help="A torch-profiler chrome trace (.json or .json.gz) of one decode step: measured counts.")
@click.option("--layers", "num_layers", type=types.LAYERS, default=None,
              help="With --trace alone: decoder layers of the traced model (ignore layer indices past it).")
@click.option("--backend", default=None, help="Kernel backend for the table estimate (vLLM's spelling: marlin, flashinfer_cutlass, ...).")
@click.option("--launch-us", "launch_us", type=types.LAUNCH_US, default=None,
              help="Override the host launch cost per kernel, microseconds.")
@click.option("--revision", default=None, help="Hub revision (branch, tag or commit).")
@click.option("--config-only", is_flag=True, help="Build the inventory from config.json alone (no safetensors).")
@no_cache_option
@quiet_option
@click.option("--from-vllm", "from_vllm", type=click.Path(dir_okay=False), default=None,
              help="Use a live inventory written by `roofline capture`.")
@scenario_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def command(model, trace_path, num_layers, backend, launch_us, revision, config_only, no_cache, from_vllm, as_json, **kwargs):
    """Kernels per decode step per layer (from a profiler trace, or estimated from the kernel
    table for MODEL), and with MODEL the eager vs CUDA-graph decode speed on --hardware."""
    from roofline.live.profiler_trace import parse_trace

    if not model and not trace_path and not from_vllm:
        raise click.UsageError("give MODEL (a folder or org/name), --from-vllm CAPTURE.json, or --trace TRACE")
    scenario, hardware, deployment = scenario_from(kwargs, model)
    inventory = None
    if model or from_vllm:
        from roofline.audit import load_inventory
        inventory = load_inventory(model, revision=revision, config_only=config_only, from_vllm=from_vllm,
                                   use_cache=not no_cache)
        num_layers = num_layers or inventory.shape.num_layers
        from roofline.model.limits import check_max_model_len
        check_max_model_len(inventory.config, scenario.context, "--context")
    profile = None
    if trace_path:
        profile = parse_trace(trace_path, num_layers=num_layers,
                              model_id=inventory.model_id if inventory else None)
    graph = step = None
    if inventory is not None:
        from roofline.advise.deploy import priced
        from roofline.predict.backends import backend_named
        from roofline.predict.graphs import cuda_graph_summary
        from roofline.predict.step import price_step

        from .options import draft_inventory
        inventory, config = priced(inventory, deployment, hardware, batch=scenario.batch, context=scenario.context,
                                   acceptance_rate=scenario.acceptance_rate, routing=scenario.routing,
                                   draft=draft_inventory(deployment, not no_cache))
        # without a trace the step counts the kernels of the backend it runs (vLLM's default for the
        # format on this device, --linear-backend / --moe-backend, or --backend): the table and the tok/s
        # are of one backend
        config = replace(config, kernels=profile, host_us_per_kernel=launch_us)
        if backend:
            config = replace(config, backend=backend_named(inventory.main_format(), backend, hardware))
        step = price_step(inventory, hardware, config)
        graph = cuda_graph_summary(step)
        profile = step.profile
    if as_json:
        payload = {"schema": "roofline.kernels/1", "hardware": hardware.key, "kernels": profile.to_json(),
                   "deployment": deployment.to_json()}
        if graph is not None:
            payload["cuda_graph"] = graph
        if step is not None:
            payload["step"] = step.to_json()
        print_json(payload)
        return
    from roofline.render.kernels import render_kernels

    echo(render_kernels(profile, graph, hardware))

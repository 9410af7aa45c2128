"""Options shared by audit, plan and validate: the scenario and the hardware."""
from __future__ import annotations

import click

from roofline.predict.hardware import DEFAULT_HARDWARE, get_hardware
from roofline.predict.traffic import Scenario

from . import types


# which experts a step of several MoE streams reads: every command that prices a batch says which it assumed
routing_option = click.option(
    "--routing", type=click.Choice(["uniform", "shared"]), default="uniform", show_default=True,
    help="MoE experts per step of several streams: uniform (distinct prompts: E x (1 - (1 - k/E)^B) experts) or "
         "shared (one prompt sent to every stream at temperature 0, as many benchmarks do: one token's experts).")


def scenario_options(func):
    for option in reversed([
        click.option("--hardware", "hardware_name", default=DEFAULT_HARDWARE, show_default=True,
                     help="Target from the hardware catalogue (gb10, h100-sxm, h200, b200, rtx-pro-6000, ...)."),
        click.option("--bandwidth", type=types.BANDWIDTH_GBPS, default=None, help="Override the memory bandwidth, GB/s."),
        click.option("--batch", type=types.SEQUENCES, default=1, show_default=True, help="Sequences decoded together."),
        click.option("--context", type=types.CONTEXT_TOKENS, default=1024, show_default=True, help="Tokens in each sequence's KV cache."),
        click.option("--kv-cache-dtype", type=types.KV_CACHE_DTYPE, default="auto",
                     show_default=True, help="KV cache dtype (auto: the model dtype, as vLLM)."),
        click.option("--speculative", "speculative_tokens", type=types.DRAFT_TOKENS, default=0, show_default=True,
                     help="MTP draft tokens per step (0: off)."),
        click.option("--acceptance-rate", type=types.ACCEPTANCE, default=0.7, show_default=True,
                     help="Draft-token acceptance rate when --speculative is on."),
        routing_option,
    ]):
        func = option(func)
    return func


def scenario_from(kwargs: dict) -> tuple[Scenario, object]:
    scenario = Scenario(batch=kwargs.pop("batch"), context=kwargs.pop("context"),
                        kv_cache_dtype=kwargs.pop("kv_cache_dtype"),
                        speculative_tokens=kwargs.pop("speculative_tokens"),
                        acceptance_rate=kwargs.pop("acceptance_rate"), routing=kwargs.pop("routing")).validate()
    hardware = get_hardware(kwargs.pop("hardware_name"), kwargs.pop("bandwidth"))
    return scenario, hardware


no_cache_option = click.option(
    "--no-cache", is_flag=True,
    help="Config-only path: build the skeleton afresh instead of reading the cache ($ROOFLINE_CACHE, else "
         "$XDG_CACHE_HOME/roofline or ~/.cache/roofline).")


def _set_quiet(ctx, param, value):
    from roofline import progress

    progress.set_quiet(value)
    return value


quiet_option = click.option("--quiet", "-q", is_flag=True, expose_value=False, callback=_set_quiet,
                            help="No progress on stderr (shown only when stderr is a terminal).")


def source_options(func):
    """Where MODEL's inventory comes from: shared by audit and capacity."""
    for option in reversed([
        click.option("--revision", default=None, help="Hub revision (branch, tag or commit)."),
        click.option("--config-only", is_flag=True, help="Build the inventory from config.json alone (no safetensors)."),
        no_cache_option,
        quiet_option,
        click.option("--from-vllm", "from_vllm", type=click.Path(dir_okay=False), default=None,
                     help="Use a live inventory written by `roofline capture` instead of MODEL."),
    ]):
        func = option(func)
    return func

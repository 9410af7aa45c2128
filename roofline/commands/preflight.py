"""roofline preflight -- vllm serve MODEL --flags ...  |  --recipe FILE"""
from __future__ import annotations

import click

from roofline.errors import RooflineError
from roofline.predict.hardware import DEFAULT_HARDWARE

from . import types
from .options import load_from, load_options, no_cache_option, quiet_option, routing_option
from .output import echo, print_json


@click.command(name="preflight", context_settings={"ignore_unknown_options": True})
@click.argument("serve_line", nargs=-1, type=click.UNPROCESSED)
@click.option("--recipe", "recipe_path", type=click.Path(dir_okay=False), default=None,
              help="A recipe YAML: the Spark community's (eugr/spark-vllm-docker recipes/: model, defaults, env, "
                   "command), vLLM's own (vllm-project/recipes models/ORG/MODEL.yaml: variants, features, hardware "
                   "overrides; read for --hardware's profile) or a compose file (the service running vLLM). Words "
                   "after -- are appended to its command as the recipe runner's extra arguments.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override one of the recipe's defaults (tensor_parallel, max_model_len, ...), as its runner does; "
                   "for vLLM's recipes variant=, hardware=, strategy=, features=a,b and FEATURE=MODE; for a compose "
                   "file service=.")
@click.option("--hardware", "hardware_name", default=DEFAULT_HARDWARE, show_default=True,
              help="Target from the hardware catalogue or a `calibrate --save` entry.")
@click.option("--bandwidth", type=types.BANDWIDTH_GBPS, default=None, help="Override the memory bandwidth, GB/s.")
@click.option("--prompt-len", type=types.PROMPT_TOKENS, default=1024, show_default=True,
              help="Prompt tokens of a request (TTFT, and the context the steps are priced at).")
@click.option("--output-len", type=types.PROMPT_TOKENS, default=256, show_default=True,
              help="Generated tokens of a request.")
@click.option("--acceptance-rate", type=types.ACCEPTANCE, default=None,
              help="Speculation's acceptance as vLLM reports it: accepted / drafted tokens [default: 0.5].")
@click.option("--mean-acceptance-length", type=types.MEAN_ACCEPTANCE_LENGTH, default=None,
              help="Or vLLM's mean acceptance length: 1 + accepted tokens per draft.")
@routing_option
@load_options
@click.option("--min-tok-s", type=types.TOK_S, default=None,
              help="Target under load: tok/s each request still decodes at (90% of them); with --ttft-p90 the highest "
                   "request rate keeping both.")
@click.option("--env", "env_assignments", multiple=True, metavar="KEY=VALUE",
              help="An environment switch of the server (added to the line's and the recipe's).")
@click.option("--config-only", is_flag=True, help="Build the inventory from config.json alone (no safetensors).")
@no_cache_option
@quiet_option
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON (schema roofline.preflight/1).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Add the preflight section to this HTML report, or write one.")
def command(serve_line, recipe_path, overrides, hardware_name, bandwidth, prompt_len, output_len, acceptance_rate,
            mean_acceptance_length, routing, min_tok_s, env_assignments, config_only, no_cache, as_json, html_path,
            **load_kwargs):
    """What a written-down vLLM deployment will do, before it starts: a whole serve line after --
    (`vllm serve MODEL --flags`, or `python -m vllm.entrypoints.openai.api_server --model MODEL`,
    KEY=VALUE assignments before it) or a --recipe file. Memory per GPU and whether it fits, the KV
    tokens and concurrency vLLM will log, bytes per token and what stayed BF16, tok/s at one stream and
    at --max-num-seqs, TTFT, the validated band, what vLLM would refuse, and what each flag costs or
    buys against vLLM's default. Under load (--request-rate, --burst, --trace; targets --ttft-p90,
    --min-tok-s): the deployment's latencies at each, its saturation rate and the highest rate keeping the
    targets."""
    from roofline.advise.preflight import Workload, preflight
    from roofline.audit import load_inventory
    from roofline.predict.deployment import acceptance_for, parse_env_assignments, parse_serve_line
    from roofline.predict.hardware import get_hardware

    from .options import draft_inventory

    recipe = None
    words = list(serve_line)
    if recipe_path:
        from roofline.sources.recipe import read_recipe

        recipe = read_recipe(recipe_path, parse_env_assignments(overrides, "--set"), extra_args=words,
                             hardware=get_hardware(hardware_name, bandwidth).key)
        env = dict(recipe.env)
        line = recipe.serve_line
    else:
        if overrides:
            raise click.UsageError("--set overrides a recipe's defaults: give --recipe FILE")
        if not words:
            raise click.UsageError("give the serve line after -- (roofline preflight -- vllm serve MODEL ...) or "
                                   "--recipe FILE")
        env, line = {}, words
    env.update(parse_env_assignments(env_assignments))
    deployment = parse_serve_line(line, env)
    hardware = get_hardware(hardware_name, bandwidth)
    per_token = acceptance_for(deployment, acceptance_rate, mean_acceptance_length)
    inventory = load_inventory(deployment.model, config_only=config_only, use_cache=not no_cache)
    answer = preflight(inventory, deployment, hardware,
                       Workload(prompt_len=prompt_len, output_len=output_len, routing=routing,
                                acceptance_rate=per_token),
                       draft=draft_inventory(deployment, not no_cache),
                       recipe=recipe.to_json() if recipe else None)
    load = load_from(load_kwargs, prompt_len, output_len, min_tok_s)
    if load is not None and answer.priced is not None:
        from roofline.advise.load import load_json

        workload, rates, burst, targets, notes = load
        answer.load = load_json(answer.priced.capacity.server, answer.priced.capacity.band, workload, rates, burst,
                                targets, notes)
    elif min_tok_s is not None:
        raise click.UsageError("--min-tok-s is a target under load: give --ttft-p90, --request-rate, --burst or --trace")
    payload = answer.to_json()
    if html_path:
        from roofline.reports import update_report

        if answer.priced is None:
            raise RooflineError(f"no report: {answer.error}")
        update_report(html_path, answer.priced.audit, preflight=payload)
    if as_json:
        print_json(payload)
    else:
        from roofline.render.preflight import render_preflight

        echo(render_preflight(payload))
        if html_path:
            echo(f"report: {html_path}")
    if answer.refusals:
        raise RooflineError("vLLM would not start this deployment as written (see above)")
    if answer.error is not None:  # it starts, but cannot serve what was asked (a request too long, no memory left)
        raise RooflineError("this deployment cannot serve the workload as asked (see above)")

"""roofline plan MODEL"""
from __future__ import annotations

import click

from roofline.errors import RooflineError
from roofline.predict.hardware import DEFAULT_HARDWARE

from . import types
from .options import (
    deployment_from,
    deployment_options,
    load_from,
    load_options,
    no_cache_option,
    quiet_option,
    routing_option,
)
from .output import echo, print_json

DEFAULT_FORMATS = "bf16,fp8,nvfp4-w4a16,nvfp4-w4a4,mxfp4,int4-awq"
# "aggressive" (lm_head in 4 bits too) trades accuracy for bytes: compared only when asked for
DEFAULT_RECIPES = "default,modelopt,hybrid-safe"
DEFAULT_CONTEXT = 4096
# the deployment flags plan answers its own way: it simulates formats (--quantization), takes --tp and
# --kv-cache-dtype as options of its own, and prices the rows at --context / --concurrency (a serve
# line's --max-model-len / --max-num-seqs are what its rows print)
PLAN_OWN = ("quantization", "tp", "kv_cache_dtype", "max_model_len", "max_num_seqs", "pp", "dp", "expert_parallel",
            "max_num_batched_tokens", "block_size", "prefix_caching", "kv_cache_memory_bytes",
            "gpu_memory_utilization", "attention_backend")


def _split(value: str, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise RooflineError(f"--{what} is empty")
    return list(dict.fromkeys(items))


@click.command(name="plan")
@click.argument("model")
@click.option("--revision", default=None, help="Hub revision (branch, tag or commit).")
@click.option("--config-only", is_flag=True, help="Build the inventory from config.json alone (no safetensors).")
@no_cache_option
@quiet_option
@click.option("--trust-remote-code", is_flag=True, help="Allow the config's own code (config-only path). Off by default.")
@click.option("--formats", default=DEFAULT_FORMATS, show_default=True,
              help="Formats to simulate, comma-separated (keys of roofline/data/formats.toml).")
@click.option("--recipe", "recipes", default=DEFAULT_RECIPES, show_default=True,
              help="Quantization recipes, comma-separated (roofline/data/recipes.toml).")
@click.option("--hardware", "hardware_name", default=DEFAULT_HARDWARE, show_default=True, help="Target from the hardware catalogue.")
@click.option("--bandwidth", type=types.BANDWIDTH_GBPS, default=None, help="Override the memory bandwidth, GB/s.")
@click.option("--concurrency", type=types.SEQUENCES, default=1, show_default=True, help="Concurrent sequences to serve.")
@click.option("--context", type=types.CONTEXT_TOKENS, default=None,
              help=f"Tokens per sequence (KV cache length; the serve line's --max-model-len) [default: "
                   f"{DEFAULT_CONTEXT}, or the model's limit where shorter].")
@click.option("--kv-cache-dtype", type=types.KV_CACHE_DTYPE, default="auto", show_default=True,
              help="KV cache dtype; auto lets the rules pick fp8 where it pays.")
@routing_option
@click.option("--memory-budget", type=types.MEMORY_GB, default=None, help="GB of device memory vLLM may use (default: rules).")
@click.option("--tp", "-tp", "--tensor-parallel-size", "tp", type=types.TP_RANKS, default=1, show_default=True,
              help="Tensor-parallel ranks (2: e.g. two GB10 boxes); -tp and --tensor-parallel-size as vLLM spells it.")
@click.option("--link", default=None, help="Interconnect for --tp (hardware.toml [link.*]; default per hardware).")
@click.option("--boxes", type=types.BOXES, default=None,
              help="Scale out over this many boxes of --hardware (e.g. 2 or 4 DGX Sparks): rank every TP x PP x DP "
                   "(x EP) split vLLM can run, with the Ray and vllm serve commands.")
@click.option("--gpus", type=types.DEVICES_PER_BOX, default=None,
              help="GPUs per box for the scale-out (one box of N GPUs unless --boxes is given too).")
@click.option("--network", default=None,
              help="Link between boxes for --boxes (hardware.toml [link.*] of scope network; default per hardware).")
@click.option("--prompt-len", type=types.PROMPT_TOKENS, default=None,
              help="Under a load: prompt tokens per request [default: 512].")
@click.option("--output-len", type=types.PROMPT_TOKENS, default=256, show_default=True,
              help="Under a load: generated tokens per request.")
@click.option("--min-tok-s", type=types.TOK_S, default=None,
              help="Target under a load: 90% of requests decode at least this fast; rows ranked by the highest request "
                   "rate keeping it (with --ttft-p90: both).")
@load_options
@deployment_options(skip=PLAN_OWN)
@click.option("--top", type=types.ROWS, default=12, show_default=True, help="Rows of the ranked table.")
@click.option("--record", "record_path", type=click.Path(dir_okay=False), default=None,
              help="Validation record whose measurements break near-ties (default: `roofline validate`'s "
                   "record in the user data folder, or $ROOFLINE_RECORD, when it exists).")
@click.option("--wide", is_flag=True, help="Every column, however wide the terminal ($COLUMNS or its width).")
@click.option("--json", "as_json", is_flag=True, help="Print the simulation and the ranked rows as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Add the format comparison to this HTML report (written by `audit --html`), or write one.")
def command(model, revision, config_only, no_cache, trust_remote_code, formats, recipes, hardware_name, bandwidth, concurrency,
            context, kv_cache_dtype, routing, memory_budget, tp, link, boxes, gpus, network, prompt_len, output_len,
            min_tok_s, top, record_path, wide, as_json, html_path, **kwargs):
    """Simulate quantization formats on MODEL (a checkpoint folder, a hub id, or a folder with
    only config.json) and recommend format, recipe, vLLM backend and flags for a device and a
    workload.

    Under a load (--request-rate R, --trace FILE or --burst N, and / or the targets --ttft-p90 / --min-tok-s):
    each row that fits is served as its serve line says and run by the load model; the rows keeping the
    targets come first, ranked by the highest rate that keeps them (without targets: by end-to-end latency
    p90 at the load)."""
    from roofline.advise.recommend import build_plan
    from roofline.audit import is_quantized, load_inventory
    from roofline.predict.hardware import get_hardware
    from roofline.sources.config import base_inventory

    if boxes is not None or gpus is not None:
        if tp != 1:
            raise RooflineError("--tp and --boxes / --gpus do not go together: the scale-out ranks every TP size itself")
        if html_path:
            raise RooflineError("--html is not written for a scale-out plan yet; use --json")
        ctx = click.get_current_context()
        simulated = [f"--{name}" for name in ("formats", "recipe")
                     if ctx.get_parameter_source("recipes" if name == "recipe" else name)
                     != click.core.ParameterSource.DEFAULT]
        if simulated:
            raise RooflineError(f"{' and '.join(simulated)}: --boxes / --gpus plan the checkpoint as it is (its own "
                                "format); simulate formats on one box first (plan without --boxes / --gpus)")
    elif network:
        raise RooflineError("--network applies to --boxes")
    hardware = get_hardware(hardware_name, bandwidth)
    deployment, per_token = deployment_from(kwargs, model)
    given = load_inventory(model, revision=revision, config_only=config_only,
                           trust_remote_code=trust_remote_code, use_cache=not no_cache)
    from roofline.advise.deploy import check

    check(deployment, given, hardware)
    from roofline.advise.deploy import plan_workload

    fixed = plan_workload(deployment, per_token)
    load = _plan_load(kwargs, prompt_len, output_len, min_tok_s)
    if load is not None and (boxes is not None or gpus is not None):
        raise RooflineError("--boxes / --gpus rank splits at a concurrency; rank formats under a load without them")
    if context is None:
        from roofline.model.limits import default_context
        context = default_context(given.config, DEFAULT_CONTEXT)
    if boxes is not None or gpus is not None:
        _scale_out(given, hardware, boxes or 1, gpus or 1, concurrency, context, kv_cache_dtype, link, network,
                   top, as_json, served_as=model)
        return
    inventory, base_of = given, None
    if is_quantized(given) and given.config:
        # simulate from the base the quantization config was applied to, not from the quantized tensors
        inventory, base_of = base_inventory(given, use_cache=not no_cache), given
    from roofline.model.naming import base_model_name
    from roofline.sources.variants import cached_published

    plan = build_plan(inventory, hardware, formats=_split(formats, "formats"), recipes=_split(recipes, "recipe"),
                      concurrency=concurrency, context=context, kv_cache_dtype=kv_cache_dtype,
                      memory_budget_gb=memory_budget, tp=tp, link=link,
                      record_rows=_record_rows(record_path), base_of=base_of, served_as=model,
                      published=cached_published(base_model_name(inventory.model_id)), routing=routing,
                      deployment=fixed, load=load)
    payload = plan.to_json() if (as_json or html_path) else None
    if html_path:
        from roofline.audit import run_audit
        from roofline.predict.traffic import Scenario
        from roofline.reports import update_report

        # the report is of the checkpoint given (a quantized one too), whose plan this is
        audit = run_audit(given, Scenario(context=context, kv_cache_dtype=kv_cache_dtype), hardware)
        update_report(html_path, audit, plan=payload)
    if as_json:
        print_json(payload)
    else:
        from roofline.render.plan import render_plan

        echo(render_plan(plan, top=top, wide=wide))
        if html_path:
            echo(f"report: {html_path}")


def _scale_out(inventory, hardware, boxes, gpus, concurrency, context, kv_cache_dtype, link, network, top,
               as_json, served_as: str) -> None:
    """plan --boxes / --gpus: the model as given (its own format) split over boxes x gpus devices."""
    from roofline.advise.scale_out import scale_out

    result = scale_out(inventory, hardware, boxes=boxes, devices_per_box=gpus, concurrency=concurrency,
                       context=context, kv_cache_dtype=kv_cache_dtype, in_box_link_name=link, network=network,
                       served_as=served_as)
    if as_json:
        print_json(result.to_json())
        return
    from roofline.render.scale_out import render_scale_out

    echo(render_scale_out(result.to_json(), top=top))


def _plan_load(kwargs: dict, prompt_len: int | None, output_len: int, min_tok_s: float | None):
    """The load the rows are ranked under (advise/plan_load.plan_load), or None where no option asks for one."""
    from roofline.advise.deploy import DEFAULT_PROMPT
    from roofline.advise.plan_load import plan_load

    return plan_load(load_from(kwargs, prompt_len or DEFAULT_PROMPT, output_len, min_tok_s, targets_alone=True))


def _record_rows(path: str | None) -> list[dict]:
    """The user's measurements (roofline validate), evidence for ties; unreadable lines skipped."""
    import os

    from roofline.live.records import default_record, read_records

    path = path or (default_record() if os.path.isfile(default_record()) else None)
    if not path:
        return []
    records = read_records(path)
    if records.unreadable:
        echo(f"note: {records.note(path)}", err=True)
    return records.rows

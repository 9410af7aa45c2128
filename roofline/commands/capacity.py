"""roofline capacity MODEL"""
from __future__ import annotations

import click

from roofline.advise.deploy import DEFAULT_PROMPT
from roofline.errors import RooflineError
from roofline.predict.hardware import DEFAULT_HARDWARE

from . import types
from .options import (
    deployment_from,
    deployment_options,
    draft_inventory,
    load_from,
    load_options,
    routing_option,
    source_options,
)
from .output import echo, print_json

DEFAULT_CONCURRENCY = "1,2,4,8,16,32,64,128,256"


@click.command(name="capacity")
@click.argument("model", required=False)
@source_options
@click.option("--hardware", "hardware_name", default=DEFAULT_HARDWARE, show_default=True,
              help="Target from the hardware catalogue or a `calibrate --save` entry.")
@click.option("--bandwidth", type=types.BANDWIDTH_GBPS, default=None, help="Override the memory bandwidth, GB/s.")
@click.option("--concurrency", "concurrency_text", default=DEFAULT_CONCURRENCY, show_default=True,
              help="Concurrency levels of the decode curve.")
@click.option("--prompt-len", type=types.PROMPT_TOKENS, default=None,
              help=f"Prompt tokens per request [default: --max-model-len less --output-len when --max-model-len is "
                   f"given (the curve at the requests the KV answer counts), else {DEFAULT_PROMPT}].")
@click.option("--output-len", type=types.PROMPT_TOKENS, default=256, show_default=True, help="Generated tokens per request.")
@click.option("--tp", "-tp", "--tensor-parallel-size", "tp", type=types.TP_RANKS, default=1, show_default=True,
              help="Tensor-parallel ranks (vLLM's --tensor-parallel-size): weights, KV heads and memory per GPU, "
                   "KV heads replicated when TP exceeds them, as vLLM does.")
@click.option("--link", default=None, help="Interconnect of the --tp ranks, or of the GPUs in a box with --gpus "
                                           "(hardware.toml [link.*]; default per hardware).")
@click.option("--gpus", type=types.DEVICES_PER_BOX, default=None,
              help="GPUs per box: size the split `plan --gpus` ranks first (TP x PP x DP), per-rank weights and "
                   "KV, pipeline stages holding their own layers, data-parallel engines their own cache.")
@click.option("--boxes", type=types.BOXES, default=None, help="Boxes of --hardware (with --gpus each), as plan --boxes.")
@click.option("--network", default=None, help="Link between boxes for --boxes (hardware.toml [link.*] of scope network).")
@click.option("--min-tok-s", type=types.TOK_S, default=None,
              help="SLO: tok/s each stream must still get; answers with the most concurrent requests that keep it "
                   "and what stops one more.")
@click.option("--max-ttft", "max_ttft_s", type=types.SECONDS, default=None,
              help="SLO: seconds to a new request's first token (its prefill plus one step of the running batch).")
@routing_option
@load_options
@deployment_options(skip=("tp",))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (schema roofline.capacity/1).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Add the capacity section to this HTML report, or write one.")
def command(model, revision, config_only, no_cache, from_vllm, hardware_name, bandwidth, concurrency_text, prompt_len,
            output_len, tp, link, gpus, boxes, network, min_tok_s, max_ttft_s, routing, as_json, html_path, **kwargs):
    """How many concurrent requests fit in vLLM's KV cache on this hardware (the token count and
    maximum concurrency vLLM logs at start-up), and the decode curve: aggregate and per-stream tok/s
    per concurrency, what bounds each point, the knee where decode turns compute-bound, and TTFT.

    Under load (--request-rate R ..., --burst N, --trace FILE): vLLM's scheduler stepping the step model
    request by request: TTFT, inter-token latency, time per output token and end-to-end latency (mean, p50,
    p90, p99), throughput, the queue, the saturation rate; with --ttft-p90 / --min-tok-s the highest rate
    that keeps them and what breaks first."""
    from roofline.advise.capacity import capacity
    from roofline.advise.deploy import capacity_request, check, deployed_inventory
    from roofline.audit import load_inventory
    from roofline.predict.hardware import get_hardware
    from roofline.render.capacity import render_capacity

    if not model and not from_vllm:
        raise click.UsageError("give MODEL (a folder or hub id) or --from-vllm CAPTURE")
    levels = types.parse_int_list(concurrency_text, "--concurrency", 1, 1 << 16)
    if (gpus is not None or boxes is not None) and tp != 1:
        raise RooflineError("--tp and --gpus / --boxes do not go together: --gpus / --boxes take the split plan "
                            "ranks first")
    if network is not None and boxes is None:
        raise RooflineError("--network applies to --boxes")
    hardware = get_hardware(hardware_name, bandwidth)
    deployment, per_token = deployment_from(kwargs, model)
    inventory = load_inventory(model, revision=revision, config_only=config_only, from_vllm=from_vllm,
                               use_cache=not no_cache)
    check(deployment, inventory, hardware)
    deployed = deployed_inventory(inventory, deployment, draft_inventory(deployment, not no_cache))
    request = capacity_request(deployment, inventory, hardware, per_token, levels=levels, prompt_len=prompt_len,
                               output_len=output_len, routing=routing, min_tok_s=min_tok_s, max_ttft_s=max_ttft_s,
                               tp=tp, link=link, gpus=gpus, boxes=boxes, network=network)
    inventory = deployed
    result = capacity(inventory, hardware, request)
    load = load_from(kwargs, request.prompt_len, request.output_len, min_tok_s)
    if load is not None:
        from roofline.advise.load import load_json

        workload, rates, burst, targets, notes = load
        result.load = load_json(result.server, result.band, workload, rates, burst,
                                targets if targets.ttft_p90_s is not None else None, notes)
    payload = result.to_json()
    if as_json:
        print_json(payload)
    else:
        echo(render_capacity(payload))
    if html_path:
        from roofline.audit import run_audit
        from roofline.predict.traffic import Scenario
        from roofline.reports import update_report

        audit = run_audit(inventory, Scenario(context=result.context, kv_cache_dtype=deployment.kv_cache_dtype),
                          hardware)
        update_report(html_path, audit, capacity=payload)
        if not as_json:
            echo(f"report: {html_path}")

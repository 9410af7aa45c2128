"""roofline plan MODEL"""
from __future__ import annotations

import json
import sys

import click

from ..errors import RooflineError

DEFAULT_FORMATS = "bf16,fp8,nvfp4-w4a16,nvfp4-w4a4,mxfp4,int4-awq"
# "aggressive" (lm_head in 4 bits too) trades accuracy for bytes: compared only when asked for
DEFAULT_RECIPES = "default,modelopt,hybrid-safe"


def _split(value: str, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise RooflineError(f"--{what} is empty")
    return list(dict.fromkeys(items))


@click.command(name="plan")
@click.argument("model")
@click.option("--revision", default=None, help="Hub revision (branch, tag or commit).")
@click.option("--config-only", is_flag=True, help="Build the inventory from config.json alone (no safetensors).")
@click.option("--trust-remote-code", is_flag=True, help="Allow the config's own code (config-only path). Off by default.")
@click.option("--formats", default=DEFAULT_FORMATS, show_default=True,
              help="Formats to simulate, comma-separated (keys of roofline/data/formats.toml).")
@click.option("--recipe", "recipes", default=DEFAULT_RECIPES, show_default=True,
              help="Quantization recipes, comma-separated (roofline/data/recipes.toml).")
@click.option("--hardware", "hardware_name", default="gb10", show_default=True, help="Target from the hardware catalogue.")
@click.option("--bandwidth", type=float, default=None, help="Override the memory bandwidth, GB/s.")
@click.option("--concurrency", type=int, default=1, show_default=True, help="Concurrent sequences to serve.")
@click.option("--context", type=int, default=4096, show_default=True, help="Tokens per sequence (KV cache length).")
@click.option("--kv-cache-dtype", type=click.Choice(["auto", "bf16", "fp16", "fp8"]), default="auto", show_default=True,
              help="KV cache dtype; auto lets the rules pick fp8 where it pays.")
@click.option("--memory-budget", type=float, default=None, help="GB of device memory vLLM may use (default: rules).")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel ranks (2: e.g. two GB10 boxes).")
@click.option("--link", default=None, help="Interconnect for --tp (rules.toml [link.*]; default per hardware).")
@click.option("--top", default=12, show_default=True, help="Rows of the ranked table.")
@click.option("--json", "as_json", is_flag=True, help="Print the simulation and the ranked rows as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Add the format comparison to this HTML report (written by `audit --html`), or write one.")
def command(model, revision, config_only, trust_remote_code, formats, recipes, hardware_name, bandwidth, concurrency,
            context, kv_cache_dtype, memory_budget, tp, link, top, as_json, html_path):
    """Simulate quantization formats on MODEL (a checkpoint folder, a hub id, or a folder with
    only config.json) and recommend format, recipe, vLLM backend and flags for a device and a
    workload."""
    from ..audit import load_inventory
    from ..hardware import get_hardware
    from ..recommend import build_plan

    hardware = get_hardware(hardware_name, bandwidth)
    inventory = load_inventory(model, revision=revision, config_only=config_only,
                               trust_remote_code=trust_remote_code)
    plan = build_plan(inventory, hardware, formats=_split(formats, "formats"), recipes=_split(recipes, "recipe"),
                      concurrency=concurrency, context=context, kv_cache_dtype=kv_cache_dtype,
                      memory_budget_gb=memory_budget, tp=tp, link=link)
    payload = plan.to_json() if (as_json or html_path) else None
    if html_path:
        from ..audit import run_audit
        from ..reports import update_report
        from ..traffic import Scenario

        audit = run_audit(inventory, Scenario(context=context, kv_cache_dtype=kv_cache_dtype), hardware)
        update_report(html_path, audit, plan=payload)
    if as_json:
        json.dump(payload, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        click.echo(render_plan(plan, top=top))
        if html_path:
            click.echo(f"report: {html_path}")


def render_plan(plan, top: int = 12) -> str:
    from ..formats import format_label
    from ..render import human_bytes, text_table

    inv, hw, w = plan.inventory, plan.hardware, plan.workload
    lines = [
        f"{inv.model_id}  ({inv.shape.architecture}, source: {inv.source})",
        f"hardware: {hw.name}, {hw.bandwidth_gbps:g} GB/s, SM {hw.compute_capability}, "
        f"efficiency {hw.efficiency:.2f} ({hw.efficiency_kind})",
        f"workload: {w.concurrency} concurrent x {w.context} tokens"
        f"{f', TP={w.tp}' if w.tp > 1 else ''}"
        f"{f', memory budget {w.memory_budget_gb:g} GB' if w.memory_budget_gb else ''}",
        "",
        "simulated formats (single stream):",
    ]
    rows = [["recipe", "format", "weights", "bytes/token", "ceiling tok/s", "expected tok/s"]]
    for s in plan.simulated:
        rows.append([s.recipe, format_label(s.format), human_bytes(s.weight_bytes), human_bytes(s.bytes_per_token),
                     f"{s.ceiling_tok_s:.1f}", f"{s.expected_tok_s:.1f}"])
    lines += ["  " + line for line in text_table(rows, {2, 3, 4, 5})]
    lines += ["", f"ranked for {w.concurrency} concurrent sequence{'s' if w.concurrency > 1 else ''}:"]
    rows = [["#", "format", "recipe", "backend", "1-stream tok/s", f"total tok/s @{w.concurrency}", "bound",
             "resident", "fits"]]
    for r in plan.recommendations[:top]:
        rows.append([str(r.rank), format_label(r.format), r.recipe, r.backend.name, f"{r.single_stream_tok_s:.1f}",
                     f"{r.aggregate_tok_s:.0f}", r.aggregate_bound, f"{r.resident_gb:.1f} GB",
                     "yes" if r.fits else "NO"])
    lines += ["  " + line for line in text_table(rows, {0, 4, 5, 7})]
    best = plan.top
    if best is not None:
        lines += ["", f"top pick: {format_label(best.format)}, recipe {best.recipe}, {best.backend.name}"]
        lines += [f"  - {reason}" for reason in best.reasons]
        if best.quantize_with:
            lines.append(f"  quantize with: {best.quantize_with}")
        lines += ["", "  " + best.serve_command()]
        others = [r for r in plan.recommendations[1:4] if r.format != best.format]
        for r in others[:2]:
            lines += ["", f"#{r.rank} {format_label(r.format)} ({r.recipe}, {r.backend.name}):"]
            lines += [f"  - {reason}" for reason in r.reasons[:3]]
    for note in plan.notes:
        lines.append(f"note: {note}")
    for note in inv.disagreements:
        lines.append(f"! tensors vs config: {note}")
    return "\n".join(lines)

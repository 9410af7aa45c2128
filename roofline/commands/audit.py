"""roofline audit MODEL"""
from __future__ import annotations

import click

from roofline.files import write_json

from . import types
from .options import priced_audit, scenario_from, scenario_options, source_options
from .output import echo, print_json


@click.command(name="audit")
@click.argument("model", required=False)
@source_options
@click.option("--trust-remote-code", is_flag=True, help="Allow the config's own code (config-only path). Off by default.")
@scenario_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (schema: README).")
@click.option("--json-out", type=click.Path(dir_okay=False), default=None, help="Also write the JSON to a file.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None, help="Write the HTML report.")
@click.option("--cdn", is_flag=True, help="HTML: load plotly.js from its CDN instead of inlining it.")
@click.option("--rows", type=types.ROWS, default=25, show_default=True, help="Rows of the terminal table.")
def command(model, revision, config_only, no_cache, from_vllm, trust_remote_code, as_json, json_out, html_path, cdn, rows,
            **kwargs):
    """Bytes per decoded token, BF16 residuals and the decode ceiling of MODEL: a local
    checkpoint folder, a Hugging Face id (org/name; headers only, no weights), or a folder with
    just config.json."""
    from roofline.audit import load_inventory

    if not model and not from_vllm:
        raise click.UsageError("give MODEL (a folder or org/name) or --from-vllm CAPTURE.json")
    scenario, hardware, deployment = scenario_from(kwargs, model)
    inventory = load_inventory(model, revision=revision, config_only=config_only, from_vllm=from_vllm,
                               trust_remote_code=trust_remote_code, use_cache=not no_cache)
    result = priced_audit(inventory, scenario, hardware, deployment, use_cache=not no_cache)
    payload = None
    if as_json or json_out:
        payload = result.to_json()
    if json_out:
        write_json(json_out, payload, indent=1)
    if html_path:
        from roofline.reports import write_audit_report
        write_audit_report(result, html_path, cdn=cdn)
    if as_json:
        print_json(payload)
    else:
        from roofline.render.audit import render_audit
        echo(render_audit(result, max_rows=rows))
        if html_path:
            echo(f"report: {html_path}")

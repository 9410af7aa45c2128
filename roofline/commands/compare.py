"""roofline compare A B C ... | --variants BASE"""
from __future__ import annotations

import os

import click

from roofline.errors import RooflineError

from . import types
from .options import no_cache_option, priced_audit, quiet_option, scenario_from, scenario_options
from .output import echo, print_json


@click.command(name="compare")
@click.argument("models", nargs=-1)
@click.option("--variants", "base", default=None, metavar="BASE",
              help="Discover the hub's quantized variants of BASE (org/name) and compare them.")
@click.option("--limit", type=types.count(1, 1000), default=30, show_default=True,
              help="--variants: at most this many, by downloads.")
@click.option("--filter", "name_filter", default=None,
              help="--variants: keep repositories whose name or tags contain this (case-insensitive), e.g. nvfp4.")
@click.option("--sort", type=click.Choice(["expected", "downloads"]), default="expected", show_default=True,
              help="Rank by expected tok/s, or by hub downloads.")
@click.option("--pool", type=types.count(1, 64), default=8, show_default=True,
              help="--variants: headers fetched in parallel (repositories at once).")
@click.option("--revision", default=None, help="Hub revision for hub ids given as MODELS.")
@click.option("--config-only", is_flag=True, help="Build every local folder from config.json alone.")
@no_cache_option
@quiet_option
@scenario_options
@click.option("--wide", is_flag=True, help="Every column, however wide the terminal ($COLUMNS or its width).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON (schema roofline.compare/1).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Add the comparison to this HTML report, or write one (with the best row's audit).")
def command(models, base, limit, name_filter, sort, pool, revision, config_only, no_cache, wide, as_json, html_path,
            **kwargs):
    """Compare checkpoints of one model: local folders, hub ids, config-only folders and capture
    files (.json from `roofline capture`), in one table ranked by expected tok/s, with what makes
    each slower than the best. With --variants BASE, the hub's quantized variants of BASE."""
    from roofline.advise.compare import compare
    from roofline.audit import load_inventory

    if bool(models) == bool(base):
        raise click.UsageError("give checkpoints to compare (two or more) or --variants BASE, not both")
    if models and len(models) < 2:
        raise RooflineError("compare needs at least two checkpoints")
    scenario, hardware, deployment = scenario_from(kwargs)

    def run_audit(inventory, scenario, hardware):
        return priced_audit(inventory, scenario, hardware, deployment, use_cache=not no_cache)
    inputs, skipped, unreadable = [], [], []
    if base:
        from roofline.sources.variants import audit_variants, list_variants

        variants, origin = list_variants(base, limit=None if name_filter else limit)
        if name_filter:
            wanted = name_filter.lower()
            variants = [v for v in variants if wanted in v.repo.lower() or any(wanted in t.lower() for t in v.tags)]
            variants = variants[:limit]
        if not variants:
            raise RooflineError(f"{base}: the hub lists no quantized variants"
                                + (f" matching {name_filter!r}" if name_filter else ""))
        from huggingface_hub import constants

        for variant, inventory in audit_variants(variants, pool=pool, offline=constants.HF_HUB_OFFLINE):
            if inventory is None:
                skipped.append((variant.repo, variant.skipped or "not audited"))
            else:
                inputs.append((variant.repo, run_audit(inventory, scenario, hardware), variant.downloads))
        if origin == "cache":
            echo("note: the list of variants comes from the cache (offline)", err=True)
    else:
        seen: dict[str, str] = {}
        for model in models:
            # one checkpoint named twice (base, ./base, base/) is one row
            identity = os.path.realpath(model) if os.path.exists(model) else model
            if identity in seen:
                skipped.append((model, f"the same checkpoint as {seen[identity]}"))
                continue
            seen[identity] = model
            try:
                if model.endswith(".json") and os.path.isfile(model):
                    inventory = load_inventory(None, from_vllm=model)
                else:
                    inventory = load_inventory(model, revision=revision, config_only=config_only,
                                               use_cache=not no_cache)
                inputs.append((model, run_audit(inventory, scenario, hardware), None))
            except RooflineError as exc:  # one bad checkpoint or capture is a skipped row, not the table
                skipped.append((model, str(exc)))
                unreadable.append(model)
    if not inputs:
        raise RooflineError("nothing to compare: " + "; ".join(f"{label}: {reason}" for label, reason in skipped))
    comparison = compare(inputs, hardware, skipped, sort=sort)
    payload = comparison.to_json() | {"deployment": deployment.to_json()} if (as_json or html_path) else None
    if html_path:
        from roofline.reports import update_report

        best = max(comparison.rows, key=lambda r: r.result.expected_tok_s)
        update_report(html_path, best.result, compare=payload)
    if as_json:
        print_json(payload)
    else:
        from roofline.render.compare import render_compare

        echo(render_compare(comparison, wide=wide))
        if html_path:
            echo(f"report: {html_path}")
    if unreadable:  # a checkpoint the user named and that could not be read is a failure, table or not
        raise RooflineError(f"{len(unreadable)} of {len(models)} checkpoints named could not be read: "
                            + ", ".join(unreadable) + " (see skipped)")

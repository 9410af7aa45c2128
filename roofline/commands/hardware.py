"""roofline hardware [KEY]"""
from __future__ import annotations

import click

from .output import echo, print_json


@click.command(name="hardware")
@click.argument("key", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue as JSON (schema roofline.hardware/1).")
def command(key, as_json):
    """The hardware catalogue: every device --hardware takes (keys and aliases), its bandwidth,
    memory, tensor throughput, host class and decode efficiency, each figure with its kind
    (datasheet, measured, calibrated, prior, estimate) and source; the entries `roofline calibrate
    --save` wrote beside the shipped ones; the interconnects scale-out plans over. With KEY, that
    device alone, with every source in full."""
    from roofline.predict.hardware import catalogue, get_hardware
    from roofline.predict.links import links
    from roofline.render.hardware import catalogue_json, render_catalogue, render_entry

    devices = [get_hardware(key)] if key else list(catalogue().values())
    payload = catalogue_json(devices, list(links().values()) if not key else [])
    if as_json:
        print_json(payload)
    elif key:
        echo(render_entry(payload["hardware"][0]))
    else:
        echo(render_catalogue(payload))

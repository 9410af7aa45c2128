"""What every command prints: text through `echo` (control characters a server, hub or file put
into a string escaped, URL credentials redacted), --json as one indented JSON document (control
characters escaped by JSON itself; NaN and infinities refused; credentials redacted) and a newline on stdout."""
from __future__ import annotations

import json
import sys

import click

from roofline.errors import RooflineError
from roofline.untrusted import redacted, terminal_text


def echo(text="", err: bool = False) -> None:
    click.echo(terminal_text(str(text)), err=err)


def print_json(payload) -> None:
    try:
        text = json.dumps(redacted(payload), indent=1, allow_nan=False)
    except ValueError:
        raise RooflineError("the answer holds a number that is not finite (NaN or infinity); "
                            "an input was out of range") from None
    sys.stdout.write(text + "\n")

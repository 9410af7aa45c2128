"""What every command's --json prints: one indented JSON document and a newline on stdout."""
from __future__ import annotations

import json
import sys


def print_json(payload) -> None:
    json.dump(payload, sys.stdout, indent=1)
    sys.stdout.write("\n")

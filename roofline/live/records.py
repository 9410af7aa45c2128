"""The validation record: one JSON object per line, predicted beside measured, with the versions
and the hardware that produced each row. Append-only, so a history accumulates across
checkpoints, engines and roofline versions; the HTML report shows the rows as they are (flat keys:
`measured_tok_s`, `expected_tok_s`, `bytes_per_token` are the ones it plots).
"""
from __future__ import annotations

import json
import os
import platform
import time

from roofline import __version__
from roofline.errors import RooflineError

SCHEMA = "roofline.validation/1"
DEFAULT_RECORD = "roofline-validation.jsonl"


def record_row(validation, *, measured_by: str, bench: dict | None = None, audit: dict | None = None) -> dict:
    """A flat row: what was predicted, what was measured, and what made each number."""
    v = validation
    scenario = v.scenario
    bench = bench or {}
    decode = bench.get("decode_tok_s") or {}
    ttft = bench.get("ttft_s") or {}
    audit = audit or {}
    return {
        "label": f"{v.model} on {v.hardware}",
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": v.model,
        "hardware": v.hardware,
        "measured_tok_s": v.measured_tok_s,
        "expected_tok_s": v.expected_tok_s,
        "ceiling_tok_s": v.ceiling_tok_s,
        "ratio_to_ceiling": v.ratio_to_ceiling,
        "ratio_to_expected": v.ratio_to_expected,
        "bandwidth_utilisation": v.bandwidth_utilisation,
        "verdict": v.verdict,
        "bytes_per_token": v.bytes_per_token,
        "bandwidth_gbps": v.bandwidth_gbps,
        "batch": scenario.get("batch"),
        "context": scenario.get("context"),
        "kv_cache_dtype": scenario.get("kv_cache_dtype_resolved") or scenario.get("kv_cache_dtype"),
        "speculative_tokens": scenario.get("speculative_tokens"),
        "measured_by": measured_by,
        "measured_min_tok_s": decode.get("min"),
        "measured_max_tok_s": decode.get("max"),
        "measured_runs": decode.get("n"),
        "ttft_ms": ttft.get("median") * 1e3 if isinstance(ttft.get("median"), (int, float)) else None,
        "max_tokens": (bench.get("config") or {}).get("max_tokens"),
        "prompt_tokens": bench.get("prompt_tokens"),
        "server_version": bench.get("server_version"),
        "served_model": bench.get("model"),
        "hardware_name": v.hardware_name,
        "bandwidth_source": (audit.get("hardware") or {}).get("bandwidth_source"),
        "efficiency_kind": (audit.get("efficiency") or {}).get("kind"),
        "model_source": audit.get("source"),
        "suspects": "; ".join(v.suspects),
        "roofline_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "schema": SCHEMA,
    }


def append_record(path: str, row: dict) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise RooflineError(f"--record {path}: folder {directory} does not exist")
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, sort_keys=False) + "\n")
    except OSError as exc:
        raise RooflineError(f"--record {path}: cannot append: {exc.strerror or exc}") from None
    return path


def read_records(path: str) -> list[dict]:
    """Every row of a record file; a line that is not a JSON object is an error naming it."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        raise RooflineError(f"{path}: no such validation record") from None
    except OSError as exc:
        raise RooflineError(f"{path}: cannot read: {exc.strerror or exc}") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise RooflineError(f"{path}:{number}: not a JSON line") from None
        if not isinstance(row, dict):
            raise RooflineError(f"{path}:{number}: a record row must be a JSON object")
        rows.append(row)
    return rows

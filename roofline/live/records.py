"""The validation record: one JSON object per line, predicted beside measured, with the versions
and the hardware that produced each row. Append-only, so a history accumulates across
checkpoints, engines and roofline versions; the HTML report shows the rows as they are (flat keys:
`measured_tok_s`, `expected_tok_s`, `bytes_per_token` are the ones it plots).
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import platform
import time
from dataclasses import dataclass

from roofline import __version__
from roofline.errors import RooflineError
from roofline.files import json_bytes

SCHEMA = "roofline.validation/1"
RECORD_NAME = "validation.jsonl"


def default_record() -> str:
    """Where the record accumulates unless --record moves it: $ROOFLINE_RECORD, else the user data
    folder as platformdirs names it ($XDG_DATA_HOME/roofline or ~/.local/share/roofline on Linux,
    ~/Library/Application Support/roofline on macOS), never the folder the user happens to be in."""
    explicit = os.environ.get("ROOFLINE_RECORD")
    if explicit:
        return explicit
    import platformdirs

    return os.path.join(platformdirs.user_data_dir("roofline", appauthor=False), RECORD_NAME)


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
        "weight_format": main_weight_format(audit),
        "suspects": "; ".join(v.suspects),
        "roofline_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "schema": SCHEMA,
    }


def main_weight_format(audit: dict) -> str | None:
    """The format of the weights that dominate the bytes per token (what a plan compares)."""
    groups = [g for g in audit.get("groups") or () if g.get("role") not in ("embedding", "norm", "lm_head")]
    top = max(groups, key=lambda g: g.get("bytes_per_token") or 0, default=None)
    return top.get("format") if top else None


def append_record(path: str, row: dict, create_folder: bool = False) -> str:
    """Append one row as one line. A crash or a full disk can leave a torn last line; the next
    append must not continue it (that would make the new row unreadable too), so a file that does
    not end in a newline gets one first. The line goes out in one write() under an exclusive
    lock, so concurrent appenders never interleave."""
    directory = os.path.dirname(os.path.abspath(path))
    if create_folder:  # the default record's folder is ours to make; a --record folder is the user's
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise RooflineError(f"{directory}: cannot create the validation record's folder: "
                                f"{exc.strerror or exc}") from None
    if not os.path.isdir(directory):
        raise RooflineError(f"--record {path}: folder {directory} does not exist")
    line = json_bytes(row, f"--record {path}") + b"\n"  # NaN / Infinity are refused, never written
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            if os.write(fd, line) != len(line):
                raise OSError(errno.ENOSPC, "short write")
        finally:
            os.close(fd)  # closing releases the lock
    except OSError as exc:
        raise RooflineError(f"--record {path}: cannot append: {exc.strerror or exc}") from None
    return path


@dataclass
class Records:
    rows: list[dict]
    unreadable: int = 0  # lines that are not a JSON object (torn by a crash, edited by hand)

    def note(self, path: str) -> str | None:
        if not self.unreadable:
            return None
        return f"{path}: {self.unreadable} unreadable line{'s' if self.unreadable != 1 else ''} skipped"


def read_records(path: str) -> Records:
    """Every readable row of a record file; unreadable lines are skipped and counted, never fatal:
    one torn line must not hide the good rows around it."""
    try:
        with open(path, "rb") as fh:
            lines = fh.read().split(b"\n")
    except FileNotFoundError:
        raise RooflineError(f"{path}: no such validation record") from None
    except OSError as exc:
        raise RooflineError(f"{path}: cannot read: {exc.strerror or exc}") from None
    records = Records([])
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError is a ValueError too
            row = None
        if isinstance(row, dict):
            records.rows.append(row)
        else:
            records.unreadable += 1
    return records

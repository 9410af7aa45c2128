"""A JSON file a user names on the command line (a saved result, an audit): read once, one line when it
cannot be."""
from __future__ import annotations

from roofline.errors import RooflineError

MAX_JSON_BYTES = 64 << 20  # a result file or an audit is kilobytes to a few megabytes


def load_json(path: str, what: str) -> dict:
    """The JSON object in `path` (standard JSON: no NaN / Infinity), or one line naming the option."""
    import msgspec

    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise RooflineError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise RooflineError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_JSON_BYTES:
        raise RooflineError(f"{what} {path}: larger than {MAX_JSON_BYTES >> 20} MiB, not a result file")
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise RooflineError(f"{what} {path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RooflineError(f"{what} {path}: expected a JSON object")
    return data

"""A JSON file a user names on the command line (a saved result, an audit): read once, one line when it
cannot be (roofline/files.py: a regular file, size-capped, not nested past its depth)."""
from __future__ import annotations

from roofline.errors import RooflineError
from roofline.files import decode_json, read_regular

MAX_JSON_BYTES = 64 << 20  # a result file or an audit is kilobytes to a few megabytes


def load_json(path: str, what: str) -> dict:
    """The JSON object in `path` (standard JSON: no NaN / Infinity), or one line naming the option."""
    where = f"{what} {path}"
    data = decode_json(read_regular(path, where, MAX_JSON_BYTES), where)
    if not isinstance(data, dict):
        raise RooflineError(f"{where}: expected a JSON object")
    return data


def load_result(path: str, what: str) -> dict:
    """A result file: JSON (vllm bench serve, guidellm, llama-benchy --format json, roofline bench), or
    llama-benchy's markdown table (its default output: live/result_files.benchy_markdown), as its JSON."""
    from roofline.live.result_files import benchy_markdown

    where = f"{what} {path}"
    text = read_regular(path, where, MAX_JSON_BYTES).decode("utf-8", "replace")
    if text.lstrip()[:1] in ("{", "["):
        return load_json(path, what)
    table = benchy_markdown(text, where)
    if table is None:
        raise RooflineError(f"{where}: neither JSON nor llama-benchy's markdown table (a result file of vllm bench "
                            "serve, guidellm, llama-benchy or roofline bench)")
    return table

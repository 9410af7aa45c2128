"""The user cache's files: where they live, and reading / writing one JSON entry. An entry is data
from disk: the readers check it before use; a write is atomic and a cache that cannot be written
is skipped (the answer is the same, only slower next time)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import orjson


def cache_root() -> Path:
    """$ROOFLINE_CACHE, else $XDG_CACHE_HOME/roofline, else ~/.cache/roofline."""
    explicit = os.environ.get("ROOFLINE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "roofline"


def read_entry(path: Path, max_bytes: int = 1 << 30):
    """The parsed JSON at path, or None (missing, too large, not JSON)."""
    try:
        if path.stat().st_size > max_bytes:
            return None
        return orjson.loads(path.read_bytes())
    except (OSError, ValueError):  # orjson.JSONDecodeError is a ValueError
        return None


def write_entry(path: Path, entry: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(orjson.dumps(entry))
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError:
        return

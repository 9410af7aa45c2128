"""The user cache's files: where they live, and reading / writing one JSON entry. An entry is data
from disk: the readers check it before use; a write is atomic and a cache that cannot be written
is skipped (the answer is the same, only slower next time)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import orjson

from roofline.model.formats import DTYPE_BITS, dtype_nbytes
from roofline.model.inventory import Tensor

MAX_DIM = 1 << 40  # any larger dimension in a cached tensor row is damage, not a model


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


def tensor_rows(tensors: list[Tensor]) -> list[list]:
    """Tensors as compact rows [name, dtype, shape]; bytes are not stored (recomputed on reading)."""
    return [[t.name, t.dtype, list(t.shape)] for t in tensors]


def tensors_from_rows(rows, max_tensors: int | None = None, max_dim: int = MAX_DIM) -> list[Tensor] | None:
    """The rows checked like a safetensors header (names, known dtypes, whole non-negative bounded
    dims), bytes recomputed; None when anything is off."""
    if not isinstance(rows, list) or (max_tensors is not None and len(rows) > max_tensors):
        return None
    tensors = []
    try:
        for name, dtype, shape in rows:
            if (not isinstance(name, str) or not name or dtype not in DTYPE_BITS or not isinstance(shape, list)
                    or len(shape) > 8 or not all(type(d) is int and 0 <= d < max_dim for d in shape)):
                return None
            shape = tuple(shape)
            tensors.append(Tensor(name, dtype, shape, dtype_nbytes(dtype, shape)))
    except (TypeError, ValueError):
        return None
    return tensors

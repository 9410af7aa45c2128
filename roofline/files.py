"""Writing files the tool reads back: with a real writer, atomically, and checked.

Every file goes to a temporary file in the same folder, is read back with the matching parser and
compared with what was meant, and only then renamed over the target: a crash, a full disk or a
value the format cannot hold never leaves a half-written or unreadable file. JSON is written with
allow_nan=False (NaN and Infinity are not JSON); TOML with tomli-w (tomllib reads it back).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
import tomllib

from roofline.errors import RooflineError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic(path: str, data: bytes, check, make_parent: bool = False) -> str:
    """`make_parent`: create the folder (the tool's own files); a user's output path whose folder is missing is
    refused (a typo must not create /nonexistent/dir)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not make_parent and not os.path.isdir(directory):
        raise RooflineError(f"{path}: no such directory: {directory}")
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as exc:
        raise RooflineError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would create it: mkstemp's 0600 is for secrets
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        with open(tmp, "rb") as fh:
            check(fh.read())
        os.replace(tmp, path)
    except OSError as exc:
        raise RooflineError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def json_bytes(value, where: str, indent: int | None = None) -> bytes:
    """`value` as JSON; a NaN or infinity anywhere is refused naming `where` (never written)."""
    try:
        return json.dumps(value, indent=indent, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except ValueError:
        raise RooflineError(f"{where}: a value is not finite (NaN or infinity); refusing to write it") from None
    except TypeError as exc:
        raise RooflineError(f"{where}: cannot write as JSON ({exc})") from None


def write_json(path: str, value, indent: int | None = 2, make_parent: bool = False) -> str:
    data = json_bytes(value, path, indent) + b"\n"

    def check(raw: bytes) -> None:
        if json.loads(raw) != json.loads(data):
            raise RooflineError(f"{path}: the JSON written does not read back as written")
    return _atomic(path, data, check, make_parent)


def toml_bytes(table: dict, where: str, header: str = "") -> bytes:
    """`table` as TOML through tomli-w; values TOML cannot hold faithfully are refused."""
    import tomli_w

    _check_finite(table, where)
    try:
        text = tomli_w.dumps(table)
    except (TypeError, ValueError) as exc:
        raise RooflineError(f"{where}: cannot write as TOML ({exc})") from None
    return ((header + "\n") if header else "").encode("utf-8") + text.encode("utf-8")


def write_toml(path: str, table: dict, header: str = "", make_parent: bool = False) -> str:
    data = toml_bytes(table, path, header)

    def check(raw: bytes) -> None:
        try:
            back = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise RooflineError(f"{path}: the TOML written does not read back ({exc})") from None
        if back != table:
            raise RooflineError(f"{path}: the TOML written does not read back as written")
    return _atomic(path, data, check, make_parent)


@contextlib.contextmanager
def locked(path: str):
    """An exclusive lock for updating `path` in place (read, change, write): held on `path`.lock beside it, so
    that N concurrent writers keep N changes; whoever holds it re-reads the file under it."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
    except OSError as exc:
        raise RooflineError(f"{path}: cannot lock for writing: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _check_finite(value, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise RooflineError(f"{where}: a value is not finite ({value}); refusing to write it")
    if isinstance(value, dict):
        for item in value.values():
            _check_finite(item, where)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_finite(item, where)

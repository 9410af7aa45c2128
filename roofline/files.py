"""Reading the files a user names, and writing files the tool reads back: with a real writer, atomically,
and checked.

Every file read from a path a user, a recipe or an environment gave goes through `read_regular`: a
regular file only (a FIFO, a device such as /dev/zero or a folder is refused before a byte is read: it
could never end), opened without blocking, its size capped before reading; JSON through `decode_json`
(a document nested past MAX_DEPTH is refused, never a RecursionError).

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
import stat
import tempfile
import tomllib

from roofline.errors import RooflineError
from roofline.untrusted import redacted


MAX_DEPTH = 64  # a result file, a config or a recipe nests a handful of levels


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str, what: str):
    """The regular file at `path` opened for reading in binary (without blocking on a FIFO while opening),
    or one line: a FIFO, a device, a folder or a socket is refused before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise RooflineError(f"{what}: no such file") from None
    except OSError as exc:
        raise RooflineError(f"{what}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RooflineError(f"{what}: {_kind(info.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_regular(path: str, what: str, limit: int) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them, or one line naming `what`."""
    handle = open_regular(path, what)
    fd = handle.fileno()
    try:
        info = os.fstat(fd)
        if info.st_size > limit:
            raise RooflineError(f"{what}: {info.st_size:,} bytes, more than the {limit:,} such a file can hold")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise RooflineError(f"{what}: cannot read: {exc.strerror or exc}") from None
    finally:
        handle.close()
    if size > limit:
        raise RooflineError(f"{what}: more than the {limit:,} bytes such a file can hold")
    return b"".join(chunks)


def too_deep(value, limit: int = MAX_DEPTH) -> bool:
    """Whether a decoded document nests more than `limit` containers deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return False


def decode_json(raw: bytes, what: str):
    """Standard JSON (no NaN / Infinity) decoded, or one line: not JSON, or nested deeper than MAX_DEPTH."""
    import msgspec

    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise RooflineError(f"{what}: not JSON ({exc})") from None
    except RecursionError:
        value = None
    if value is None and raw.strip() != b"null" or too_deep(value):
        raise RooflineError(f"{what}: nested deeper than {MAX_DEPTH} levels, not a file roofline reads")
    return value


def refuse_special(path: str, what: str) -> None:
    """A path the tool is about to update in place (a lock beside it, a file renamed over it): refused when
    something that is not a regular file is there (a device, a FIFO, a folder)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RooflineError(f"{what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise RooflineError(f"{what}: {_kind(info.st_mode)}, not a file roofline writes")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic(path: str, data: bytes, check, make_parent: bool = False) -> str:
    """`make_parent`: create the folder (the tool's own files); a user's output path whose folder is missing is
    refused (a typo must not create /nonexistent/dir)."""
    directory = os.path.dirname(os.path.abspath(path))
    refuse_special(path, path)
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
    value = redacted(value)  # nothing a user typed stores a credential
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
    table = redacted(table)
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
    refuse_special(path, path)  # no lock left beside /dev/zero
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


def read_yaml(path: str, what: str, limit: int, kind: str):
    """A user's YAML file (a recipe, a compose file): a regular file of at most `limit` bytes, loaded safely (no
    tags, no code) and depth-checked; anything else is one line naming the `kind` expected."""
    import yaml

    from roofline.untrusted import printable

    raw = read_regular(path, what, limit)
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except RecursionError:
        raise RooflineError(f"{path}: nested too deep, not a {kind}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise RooflineError(f"{path}: not a YAML {kind} ({printable(str(exc).splitlines()[0], 200)})") from None
    if too_deep(data):
        raise RooflineError(f"{path}: nested too deep, not a {kind}")
    return data

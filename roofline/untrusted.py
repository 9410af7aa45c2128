"""Strings and names that come from outside (a server, a hub, a file, a URL the user typed) made safe
to print, store or build a path from.

- `redact_url`: a URL without its userinfo and without secret-looking query values, for every place
  a URL is printed or stored (error lines, reports, JSON, records).
- `printable`: control characters (ESC, NUL, CR, LF, DEL, the C1 range, bidirectional overrides)
  escaped as \\xNN / \\uNNNN and the text cut to a sane length, so a remote string is one line
  that cannot move the cursor or rewrite the terminal.
- `is_commit_id`: a commit is 40 hex digits; anything else is refused before it reaches a path or
  a request.
- `under_root`: a path built from remote or file data, checked to stay inside its root.
"""
from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

from roofline.errors import RooflineError

MAX_SHOWN = 200  # characters of one untrusted string shown; the rest is cut with "…"

# scheme://userinfo@ (userinfo: anything up to the first @ before the host's path)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s?#]*@")
# query values whose names suggest a secret (?token=…, &api_key=…, &sig=…)
_SECRET_QUERY = re.compile(r"(?i)([?&](?:[a-z0-9_.-]*(?:token|key|secret|password|passwd|pwd|sig|signature|auth)"
                           r"[a-z0-9_.-]*)=)[^&#\s]*")
_COMMIT = re.compile(r"[0-9a-f]{40}")


def redact_url(text: str) -> str:
    """`text` (a URL, or a message holding URLs) with credentials replaced by ***."""
    text = _USERINFO.sub(r"\1***@", str(text))
    return _SECRET_QUERY.sub(r"\1***", text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x20 or code == 0x7F:
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char, f"\\x{code:02x}")
    if 0x80 <= code < 0xA0:
        return f"\\x{code:02x}"
    # format characters (bidi overrides, zero-width joiners) reorder or hide text on a terminal
    if unicodedata.category(char) in ("Cf", "Cs", "Co", "Cn") and char not in "\u200d":
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return char


def printable(value, limit: int = MAX_SHOWN) -> str:
    """One line of text safe for a terminal or HTML body: control characters escaped, cut to
    `limit` characters. Bytes are decoded as UTF-8 with undecodable bytes shown as \\xNN."""
    if isinstance(value, (bytes, bytearray)):
        text = bytes(value).decode("utf-8", "backslashreplace")
    else:
        text = str(value)
    if len(text) > limit * 4:  # escaping can only lengthen; no need to walk megabytes
        text = text[:limit * 4]
    out = "".join(_escape(c) for c in text)
    return out if len(out) <= limit else out[:limit - 1] + "…"


def terminal_text(text: str) -> str:
    """A whole screen of the tool's own text with any control character a remote string smuggled
    in escaped (line ends and tabs kept) and URL credentials redacted: the last guard before a
    terminal, behind the escaping each reader already does."""
    lines = redact_url(text).split("\n")
    return "\n".join("\t".join("".join(_escape(c) for c in part) for part in line.split("\t")) for line in lines)


def shown(value, limit: int = MAX_SHOWN) -> str:
    """An untrusted string quoted for a message: printable and redacted."""
    return printable(redact_url(value) if isinstance(value, str) else value, limit)


def is_commit_id(value) -> bool:
    return isinstance(value, str) and bool(_COMMIT.fullmatch(value))


def under_root(root: Path, *parts: str) -> Path:
    """root / parts, refused when the result would leave root (.., absolute parts, links out)."""
    root_resolved = Path(os.path.realpath(root))
    path = Path(os.path.realpath(root_resolved.joinpath(*parts)))
    if path != root_resolved and root_resolved not in path.parents:
        raise RooflineError(f"refusing a path outside {root}: {shown('/'.join(parts), 80)}")
    return path

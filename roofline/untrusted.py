"""Strings and names that come from outside (a server, a hub, a file, a URL the user typed) made safe
to print, store or build a path from.

- `redact_url`: a URL without its userinfo and without secret-looking query values, for every place
  a URL is printed or stored (error lines, reports, JSON, records).
- `printable`: control characters (ESC, NUL, CR, LF, DEL, the C1 range, bidirectional overrides)
  escaped as \\xNN / \\uNNNN and the text cut to a sane length, so a remote string is one line
  that cannot move the cursor or rewrite the terminal.
- `redact_secrets` / `redact_args` / `redact_env` / `redacted`: credentials (the values of --api-key,
  --hf-token, HF_TOKEN=..., any token-shaped word) replaced by *** in free text, a command's words, an
  environment and a whole JSON document: one redaction (data/vllm_args.toml [secrets]) behind every
  line printed, every JSON document and report written.
- `is_commit_id`: a commit is 40 hex digits; anything else is refused before it reaches a path or
  a request.
- `under_root`: a path built from remote or file data, checked to stay inside its root.
"""
from __future__ import annotations

import functools
import os
import re
import unicodedata
from pathlib import Path

from roofline.data import load_table
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


SECRET = "***"


@functools.lru_cache(maxsize=1)
def _secrets() -> tuple[dict[str, str], frozenset[str], re.Pattern, re.Pattern, re.Pattern]:
    """(secret flag -> its nargs, the words of secret names, token shapes, `--flag value` and `NAME=value`
    in free text), from data/vllm_args.toml [secrets]."""
    table = load_table("vllm_args")["secrets"]
    flags = dict(table["flags"])
    words = frozenset(w.upper() for w in table["name_words"])
    shapes = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(table["value_shapes"]) + r")")
    flag_text = re.compile(r"(?<![\w-])(" + "|".join(re.escape(f) for f in flags) + r")(=|\s+)(?!-)(\S+)")
    # NAME=value or "NAME": "value" (a JSON string) where NAME is a secret's name
    name_text = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)(=|\"\s*:\s*\")([^\s\"',;&]+)")
    return flags, words, shapes, flag_text, name_text


def secret_flags() -> dict[str, str]:
    """The options that carry a credential, with how many values each takes (argparse's nargs)."""
    return dict(_secrets()[0])


def secret_name(name: str) -> bool:
    """An environment variable, option or field name that carries a credential: HF_TOKEN, api_key,
    --api-key, VLLM_API_KEY, AWS_SECRET_ACCESS_KEY (its words split at '_', '-' and '.'; KEY only as the
    last word and after another, so num_key_value_heads and a bare key are none; max_num_batched_tokens is none: TOKENS is not TOKEN)."""
    flags, words, *_ = _secrets()
    text = str(name)
    if text in flags or text.split("=", 1)[0] in flags:
        return True
    parts = [p for p in re.split(r"[_\-.]+", text.strip("-").upper()) if p]
    # KEY only after another word (API_KEY, ACCESS_KEY): a bare "key" names a table's entry
    return bool(parts) and ((parts[-1] in words and parts != ["KEY"]) or any(p in words - {"KEY"} for p in parts))


def redact_secrets(text: str) -> str:
    """Free text with every credential as ***: token-shaped words, the value after a secret flag
    (`--api-key X`, `--hf-token=X`) and after a secret name (`HF_TOKEN=X`, `"api_key": "X"`)."""
    _, _, shapes, flag_text, name_text = _secrets()
    text = shapes.sub(SECRET, str(text))
    text = flag_text.sub(lambda m: m.group(1) + m.group(2) + SECRET, text)
    return name_text.sub(lambda m: m.group(1) + m.group(2) + SECRET if secret_name(m.group(1)) and
                         m.group(3) != SECRET else m.group(0), text)


def redact_args(words) -> list[str]:
    """A command line's words with every credential's value as ***: the values a secret flag takes
    (--api-key K1 K2, --hf-token T, --api-key=K), secret assignments (HF_TOKEN=..., `-e HF_TOKEN=...`)
    and any token-shaped word; everything else as it was."""
    flags = _secrets()[0]
    out, words, i = [], [str(w) for w in words], 0
    while i < len(words):
        word = words[i]
        i += 1
        name, eq, value = word.partition("=")
        if name in flags:
            out.append(f"{name}={SECRET}" if eq else word)
            if not eq:  # its values follow: one ('1', '?': if one is there), or all up to the next option
                nargs = flags[name]
                while i < len(words) and not words[i].startswith("-"):
                    out.append(SECRET)
                    i += 1
                    if nargs != "+":
                        break
            continue
        if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and secret_name(name):
            out.append(f"{name}={SECRET}")
            continue
        out.append(redact_secrets(word))
    return out


def redact_command(text: str) -> str:
    """A shell command line for display with every credential as *** (its words through redact_args;
    a line that does not split as a shell's through redact_secrets)."""
    import shlex

    try:
        words = shlex.split(str(text))
    except ValueError:
        return redact_secrets(str(text))
    return " ".join(w if w == SECRET else shlex.quote(w) for w in redact_args(words))


def redact_env(env) -> dict[str, str]:
    """An environment with the values of secret names (and token-shaped values) as ***."""
    return {str(k): SECRET if secret_name(k) and str(v) else redact_secrets(str(v)) for k, v in dict(env).items()}


def redacted(value):
    """A JSON-like document (dicts, lists, strings, numbers) with every credential as ***: the values of
    secret keys and every string through redact_secrets. What every --json, report and stored file passes."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, dict):
        return {k: (SECRET if isinstance(k, str) and secret_name(k) and isinstance(v, str) and v
                    else redacted(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(v) for v in value]
    return value


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
    lines = redact_secrets(redact_url(text)).split("\n")
    return "\n".join("\t".join("".join(_escape(c) for c in part) for part in line.split("\t")) for line in lines)


def shown(value, limit: int = MAX_SHOWN) -> str:
    """An untrusted string quoted for a message: printable and redacted."""
    return printable(redact_secrets(redact_url(value)) if isinstance(value, str) else value, limit)


def is_commit_id(value) -> bool:
    return isinstance(value, str) and bool(_COMMIT.fullmatch(value))


def under_root(root: Path, *parts: str) -> Path:
    """root / parts, refused when the result would leave root (.., absolute parts, links out)."""
    root_resolved = Path(os.path.realpath(root))
    path = Path(os.path.realpath(root_resolved.joinpath(*parts)))
    if path != root_resolved and root_resolved not in path.parents:
        raise RooflineError(f"refusing a path outside {root}: {shown('/'.join(parts), 80)}")
    return path

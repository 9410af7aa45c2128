"""Progress on stderr while a command works for more than a moment (a cold skeleton build, hub
header fetches, variants), as huggingface_hub and vLLM show theirs: only when stderr is a terminal,
and never with --quiet. Output on stdout is never touched."""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager

_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = bool(quiet)


def shown() -> bool:
    """Whether progress goes to stderr now: a terminal, and no --quiet."""
    return not _quiet and sys.stderr.isatty()


@contextmanager
def step(message: str):
    """`message…` on stderr while the block runs, then how long it took."""
    if not shown():
        yield
        return
    started = time.monotonic()
    sys.stderr.write(f"{message}…")
    sys.stderr.flush()
    try:
        yield
    finally:
        sys.stderr.write(f" {time.monotonic() - started:.1f} s\n")
        sys.stderr.flush()


def say(message: str) -> None:
    """One progress line (a bench run, a doctor step), on the same terms as step()."""
    if shown():
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def reporter(quiet: bool = False):
    """The progress callback a long command hands to the work it starts: None when nothing may be
    shown (--quiet, --json, or stderr not a terminal: a pipe or a file never gets progress)."""
    return None if quiet or not shown() else say

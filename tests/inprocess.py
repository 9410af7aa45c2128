"""The real `roofline` CLI (roofline.cli.main: its error lines and exit codes included) run in this process,
its stdout and stderr captured: the same code a user's shell runs, without a new interpreter and its imports
per call (a subprocess costs 2-6 s on the CI's two cores). Tests that need a process of their own (a hang
bounded by a timeout, signals, a child's environment) start one instead."""
from __future__ import annotations

import sys
from dataclasses import dataclass

from click.testing import CliRunner


@dataclass
class Ran:
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")


def run(*args, env: dict | None = None, stdin: str | bytes | None = None) -> Ran:
    from roofline.cli import main

    runner = CliRunner()
    with runner.isolation(input=stdin, env=env) as (out, err, _):
        try:
            code = main([str(a) for a in args])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return Ran(code, out.getvalue(), err.getvalue())

"""The ranges of the tool's own arguments, in one place: the CLI's option types (commands/types.py) and the
Python API's schema (roofline/api.py) are both made from them, so a value one refuses the other refuses too.
Each bound is far beyond any real use, so that only nonsense is refused."""
from __future__ import annotations

from dataclasses import dataclass

from .traffic import BATCH_LIMIT, CONTEXT_LIMIT, DRAFT_TOKENS_LIMIT


@dataclass(frozen=True)
class Range:
    low: float | None
    high: float | None
    low_open: bool = False
    integer: bool = False


RANGES = {
    "bandwidth_gbps": Range(0, 100_000, low_open=True),  # the fastest HBM parts are ~10-20 TB/s
    "context": Range(1, CONTEXT_LIMIT, integer=True),  # 16M tokens
    "sequences": Range(1, BATCH_LIMIT, integer=True),  # batch / concurrency
    "draft_tokens": Range(0, DRAFT_TOKENS_LIMIT, integer=True),
    "acceptance": Range(0, 1),
    "mean_acceptance_length": Range(1, 65),
    "prompt_tokens": Range(1, 1 << 24, integer=True),
    "request_rate": Range(0, 1e6, low_open=True),  # requests per second
    "requests": Range(1, 1_000_000, integer=True),  # requests of one simulated load
    "seconds": Range(0, 7 * 24 * 3600, low_open=True),
    "tok_s": Range(0, 1e9, low_open=True),
}

"""Option types that refuse nonsense at the CLI edge: every number finite and in its range, so
a bad value is one line and exit code 2, never a wrong number further down."""
from __future__ import annotations

import math

import click

from roofline.errors import RooflineError
from roofline.predict.arguments import RANGES
from roofline.predict.traffic import KV_SPELLINGS


class Number(click.ParamType):
    """A finite float in [low, high] (open at either end when asked)."""

    name = "number"

    def __init__(self, low: float | None = None, high: float | None = None, *, low_open: bool = False,
                 high_open: bool = False):
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.low is not None and (number <= self.low if self.low_open else number < self.low):
            self.fail(f"{number:g} is out of range: {self.describe()}", param, ctx)
        if self.high is not None and (number >= self.high if self.high_open else number > self.high):
            self.fail(f"{number:g} is out of range: {self.describe()}", param, ctx)
        return number

    def describe(self) -> str:
        low = "" if self.low is None else f"{self.low:g} {'<' if self.low_open else '<='} "
        high = "" if self.high is None else f" {'<' if self.high_open else '<='} {self.high:g}"
        return f"{low}x{high}".strip()


def positive(high: float) -> Number:
    return Number(0, high, low_open=True)


def fraction(low_open: bool = False) -> Number:
    return Number(0, 1, low_open=low_open)


def count(low: int, high: int) -> click.IntRange:
    return click.IntRange(low, high)


class Tokens(click.IntRange):
    """A token count as vLLM's arguments take one (vllm.utils.argparse_utils.human_readable_int):
    plain digits, or a number with a suffix, lower case decimal (32k = 32,000; 1.5m) and upper case
    binary (32K = 32,768; decimals not allowed), then bounded like any count."""

    name = "tokens"

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            from roofline.predict.deployment import TOKEN_SUFFIX, human_readable_int

            text = value.strip()
            if TOKEN_SUFFIX.fullmatch(text):  # plain digits go to the range check as they are
                try:
                    value = human_readable_int("", text)
                except RooflineError as exc:
                    self.fail(str(exc).lstrip(": "), param, ctx)
        return super().convert(value, param, ctx)


class KvCacheDtype(click.ParamType):
    """--kv-cache-dtype as vLLM spells it (auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, ...), read as the
    tool's one name for it (predict/traffic.py KV_SPELLINGS)."""

    name = "kv-cache-dtype"

    def convert(self, value, param, ctx):
        if value in KV_SPELLINGS.values():
            return value
        resolved = KV_SPELLINGS.get(str(value).strip().lower())
        if resolved is None:
            self.fail(f"{value!r}: use one of {', '.join(KV_SPELLINGS)}", param, ctx)
        return resolved

    def get_metavar(self, param, ctx=None):
        return "[auto|bf16|fp16|fp8|fp8_e4m3|fp8_e5m2]"


def parse_int_list(text: str | None, option: str, low: int, high: int) -> tuple[int, ...]:
    """"1,2,4,8" -> (1, 2, 4, 8), strictly: integers only, each in [low, high], no duplicates."""
    if text is None:
        return ()
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in parts):
        raise click.BadParameter(f"{text!r}: give comma-separated integers such as 1,2,4,8", param_hint=option)
    values = []
    for part in parts:
        if not part.lstrip("+").isdigit():
            raise click.BadParameter(f"{part!r} is not a whole number (in {text!r})", param_hint=option)
        value = int(part)
        if not low <= value <= high:
            raise click.BadParameter(f"{value} is out of range {low}..{high}", param_hint=option)
        values.append(value)
    if len(set(values)) != len(values):
        raise click.BadParameter(f"{text!r} repeats a value", param_hint=option)
    return tuple(values)


def ranged(name: str):
    """The option type of one of the tool's ranges (predict/arguments.py RANGES, which the Python API's
    schema is made from too)."""
    r = RANGES[name]
    if r.integer:
        return Tokens(int(r.low), int(r.high)) if name in ("context", "prompt_tokens") else count(int(r.low), int(r.high))
    return Number(r.low, r.high, low_open=r.low_open)


# The ranges, in one place. Each bound is far beyond any real use, so that only nonsense is refused.
BANDWIDTH_GBPS = ranged("bandwidth_gbps")
# a scenario's bounds are the step model's own, so an option and a value read from a file agree
CONTEXT_TOKENS = ranged("context")
SEQUENCES = ranged("sequences")  # batch / concurrency
DRAFT_TOKENS = ranged("draft_tokens")
ACCEPTANCE = ranged("acceptance")
MEAN_ACCEPTANCE_LENGTH = ranged("mean_acceptance_length")
REQUEST_RATE = ranged("request_rate")
REQUESTS = ranged("requests")
MEMORY_GB = positive(1_000_000)
TP_RANKS = count(1, 1024)
BOXES = count(1, 64)  # boxes joined by a network (scale-out)
DEVICES_PER_BOX = count(1, 16)  # GPUs in one box (an HGX board: 8)
ROWS = count(1, 100_000)
LAYERS = count(1, 100_000)
LAUNCH_US = positive(1_000_000)
SECONDS = ranged("seconds")
DECODE_TOKENS = Tokens(2, 1 << 24)  # decode speed needs two token arrivals
RUNS = count(1, 100_000)
WARMUP = count(0, 100_000)
BUFFER_MIB = positive(1 << 20)
THREADS = count(1, 4096)
EFFICIENCY = fraction(low_open=True)
TOK_S = ranged("tok_s")
MEMORY_BYTES = count(1, 1 << 50)  # 1 PiB
BLOCK_TOKENS = count(1, 1 << 16)
PROMPT_TOKENS = ranged("prompt_tokens")
BATCHED_TOKENS = Tokens(1, 1 << 24)
KV_CACHE_DTYPE = KvCacheDtype()

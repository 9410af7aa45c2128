"""Request traces read from files (`--trace FILE`), checked, as the load model's requests (predict/workload.py):

- JSONL, one request a line, in the field names the public traces and tools use: the arrival as `timestamp`
  (milliseconds: Mooncake's traces), `arrival_time` or `arrival_s` (seconds); the prompt's tokens as
  `input_length`, `prompt_tokens`, `input_tokens` or `prompt_len`; the output's as `output_length`,
  `output_tokens`, `completion_tokens` or `max_tokens`; Mooncake's `hash_ids` (one id per 512-token block of
  the prompt: a block id seen before is a prefix the cache can hold); and vLLM's custom dataset
  (`{"prompt": TEXT, "output_tokens": N}`: the prompt's tokens estimated from its UTF-8 bytes, said so).
  A line without an arrival time arrives at the rate given (--request-rate), or all at once.
- a `vllm bench serve --save-result --save-detailed` file: the run's own requests, each at the time the client
  sent it, with its lengths (replaying a measured run).

Regular files only, size-capped (roofline/files.py), every value within bounds (roofline/schema.py)."""
from __future__ import annotations

import json
from typing import Annotated

import msgspec
from msgspec import Meta

from roofline.errors import RooflineError
from roofline.files import decode_json, read_regular
from roofline.predict.traffic import CONTEXT_LIMIT
from roofline.predict.workload import Request
from roofline.schema import checked

MAX_TRACE_BYTES = 256 << 20
MAX_REQUESTS = 1_000_000
MOONCAKE_BLOCK = 512  # tokens of one hash id in Mooncake's traces
BYTES_PER_TOKEN = 4  # a text prompt's tokens, estimated: about 4 bytes of English text per token

Tokens = Annotated[int, Meta(ge=0, le=CONTEXT_LIMIT)]
Seconds = Annotated[float, Meta(ge=0, le=1e9)]

ARRIVAL_KEYS = (("timestamp", 1e-3), ("arrival_time", 1.0), ("arrival_s", 1.0))
PROMPT_KEYS = ("input_length", "prompt_tokens", "input_tokens", "prompt_len")
OUTPUT_KEYS = ("output_length", "output_tokens", "completion_tokens", "max_tokens")


class Line(msgspec.Struct, forbid_unknown_fields=False):
    timestamp: Seconds | None = None
    arrival_time: Seconds | None = None
    arrival_s: Seconds | None = None
    input_length: Tokens | None = None
    prompt_tokens: Tokens | None = None
    input_tokens: Tokens | None = None
    prompt_len: Tokens | None = None
    output_length: Tokens | None = None
    output_tokens: Tokens | None = None
    completion_tokens: Tokens | None = None
    max_tokens: Tokens | None = None
    hash_ids: Annotated[list[Annotated[int, Meta(ge=0, le=2**62)]], Meta(max_length=65536)] | None = None
    prompt: Annotated[str, Meta(max_length=64 << 20)] | None = None


class BenchDetailed(msgspec.Struct, forbid_unknown_fields=False):
    start_times: Annotated[list[Seconds], Meta(min_length=1, max_length=MAX_REQUESTS)]
    input_lens: Annotated[list[Tokens], Meta(min_length=1, max_length=MAX_REQUESTS)]
    output_lens: Annotated[list[Tokens], Meta(min_length=1, max_length=MAX_REQUESTS)]


def read_trace(path: str, what: str = "--trace") -> tuple[list[Request], bool, list[str]]:
    """(the requests, whether they carry their own arrival times, notes) of a trace file."""
    where = f"{what} {path}"
    raw = read_regular(path, where, MAX_TRACE_BYTES)
    text = raw.decode("utf-8", "replace").lstrip()
    if text.startswith("{") and "\n{" not in text.strip():
        data = decode_json(raw, where)
        if isinstance(data, dict) and "start_times" in data:
            return _bench_file(data, where)
    return _jsonl(text, where)


def _bench_file(data: dict, where: str) -> tuple[list[Request], bool, list[str]]:
    run = checked(data, BenchDetailed, where)
    if not len(run.start_times) == len(run.input_lens) == len(run.output_lens):
        raise RooflineError(f"{where}: start_times, input_lens and output_lens differ in length")
    start = min(run.start_times)
    requests = [Request(t - start, max(1, n), max(1, o))
                for t, n, o in zip(run.start_times, run.input_lens, run.output_lens)]
    return requests, True, [f"vllm bench serve run: {len(requests)} requests replayed at the times they were sent"]


def _jsonl(text: str, where: str) -> tuple[list[Request], bool, list[str]]:
    requests, timed, untimed, estimated = [], 0, 0, 0
    seen_blocks: dict[int, int] = {}
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise RooflineError(f"{where}: no requests")
    if len(lines) > MAX_REQUESTS:
        raise RooflineError(f"{where}: {len(lines):,} requests, more than {MAX_REQUESTS:,}")
    for number, line in enumerate(lines, 1):
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            raise RooflineError(f"{where}: line {number} is not JSON") from None
        if not isinstance(value, dict):
            raise RooflineError(f"{where}: line {number} is not a JSON object")
        record = checked(value, Line, f"{where}: line {number}")
        arrival = next((getattr(record, k) * scale for k, scale in ARRIVAL_KEYS if getattr(record, k) is not None),
                       None)
        prompt = next((getattr(record, k) for k in PROMPT_KEYS if getattr(record, k) is not None), None)
        if prompt is None and record.prompt is not None:
            prompt = max(1, len(record.prompt.encode("utf-8")) // BYTES_PER_TOKEN)
            estimated += 1
        output = next((getattr(record, k) for k in OUTPUT_KEYS if getattr(record, k) is not None), None)
        if prompt is None or output is None:
            raise RooflineError(f"{where}: line {number} has no prompt length ({', '.join(PROMPT_KEYS)} or prompt) "
                                f"or no output length ({', '.join(OUTPUT_KEYS)})")
        shared, group = 0, 0
        if record.hash_ids:
            group = record.hash_ids[0]
            for i, block in enumerate(record.hash_ids):  # the leading blocks an earlier request already had
                if block not in seen_blocks:
                    break
                shared = min(prompt, (i + 1) * MOONCAKE_BLOCK)
            for block in record.hash_ids:
                seen_blocks.setdefault(block, number)
        timed += arrival is not None
        untimed += arrival is None
        requests.append(Request(arrival or 0.0, max(1, prompt), max(1, output), shared, group))
    if timed and untimed:
        raise RooflineError(f"{where}: {timed} requests have an arrival time and {untimed} have none: give all or none")
    notes = []
    if estimated:
        notes.append(f"{estimated} prompt(s) given as text: their tokens estimated as UTF-8 bytes / {BYTES_PER_TOKEN}")
    if timed:
        start = min(r.arrival_s for r in requests)
        requests = [Request(r.arrival_s - start, r.prompt, r.output, r.shared_prefix, r.prefix_group) for r in requests]
    return requests, bool(timed), notes

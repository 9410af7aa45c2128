"""Measured decode speed of a running OpenAI-compatible server (vLLM, SGLang, llama.cpp, ...).

One request = one streamed completion with a fixed `max_tokens`, temperature 0 and, where the
server takes it, `ignore_eos`, so every run decodes the same number of tokens. Times come from
when each streamed chunk arrives here:

    TTFT          request sent -> first token             (prefill + queueing + network)
    decode tok/s  tokens after the first / (last arrival - first arrival)

so prefill never dilutes the decode rate. Token counts come from the server's per-chunk usage
(`stream_options.continuous_usage_stats`, vLLM) where it sends it; otherwise each chunk that
carries text counts as one token and the final `usage` block, when present, corrects the total.

http.client and threads (roofline.live.http: every request within --timeout in all, every body and
stream line within a size cap): the client must not perturb the measurement, and `roofline bench`
must run in the smallest environment. What the server sends is checked before it is counted: a token
count beyond max_tokens, or one that is not a whole number, fails the run instead of inflating it.
"""
from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from roofline.errors import RooflineError
from roofline.predict.traffic import BATCH_LIMIT, CONTEXT_LIMIT
from roofline.schema import Name, checked
from roofline.untrusted import printable, redact_url

from .http import Connection, Overrun, not_json, get_json, http_error, served_models, split_url

SCHEMA = "roofline.bench/1"
# A prompt of common words; its token count is whatever the server's tokenizer makes of it
# (reported back from `usage.prompt_tokens`).
DEFAULT_PROMPT = "The history of the printing press begins"
# vLLM-only request fields; a strict server answers 400 to them and the bench retries without
VLLM_EXTRAS = ("ignore_eos", "stream_options.continuous_usage_stats")


@dataclass(frozen=True)
class BenchConfig:
    url: str  # base URL of the API, e.g. http://127.0.0.1:8000/v1
    model: str | None = None  # served model name; None: the only one /models lists
    api: str = "completions"  # completions | chat
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = 128
    runs: int = 5
    warmup: int = 1
    timeout_s: float = 60.0  # per request: connect, every read, and the whole stream
    ignore_eos: bool = True
    concurrency: tuple[int, ...] = ()  # sweep levels beyond single-stream, e.g. (1, 2, 4)
    sweep_rounds: int = 3  # times each concurrency level is run (median aggregate reported)
    # concurrent streams get distinct prompts (each its own routing through a MoE); True sends every
    # stream the same prompt, the common benchmark habit, which makes all streams pick the same experts
    same_prompt: bool = False

    def validate(self) -> "BenchConfig":
        if self.api not in ("completions", "chat"):
            raise RooflineError(f"unknown --api {self.api!r}; use completions or chat")
        if self.max_tokens < 2:
            raise RooflineError("--max-tokens must be at least 2 (decode speed needs two token arrivals)")
        if self.runs < 1:
            raise RooflineError("--runs must be at least 1")
        if self.warmup < 0:
            raise RooflineError("--warmup must be non-negative")
        if self.timeout_s <= 0:
            raise RooflineError("--timeout must be positive")
        if self.sweep_rounds < 1:
            raise RooflineError("--sweep-rounds must be at least 1")
        if any(c < 1 for c in self.concurrency):
            raise RooflineError("--concurrency levels must be at least 1")
        split_url(self.url)
        return self


@dataclass
class RunResult:
    """One streamed request. `error` is None for a run that completed."""

    ok: bool  # the stream completed and its decode was timed
    error: str | None = None
    delivered: bool = False  # the stream ended with [DONE]: its tokens count toward a round's aggregate, timed or not
    ttft_s: float | None = None
    decode_tok_s: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    total_s: float | None = None
    chunks: int = 0
    finish_reason: str | None = None
    # (seconds since the request was sent, completion tokens so far) per chunk that had tokens
    arrivals: list[tuple[float, int]] = field(default_factory=list)

    def to_json(self, with_arrivals: bool = False) -> dict:
        out = asdict(self)
        if not with_arrivals:
            out.pop("arrivals")
        return out


@dataclass
class Stats:
    median: float
    min: float
    max: float
    n: int


def stats(values: list[float]) -> Stats | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return Stats(statistics.median(values), min(values), max(values), len(values))


@dataclass
class LevelResult:
    """One concurrency level: `concurrency` requests released together, a few rounds."""

    concurrency: int
    runs: list[RunResult]
    walls_s: list[float]  # per round: first request sent -> last stream ended
    aggregate: Stats | None  # per round: all completion tokens / wall time (prefill included)
    per_stream_decode: Stats | None

    @property
    def aggregate_tok_s(self) -> float | None:
        return self.aggregate.median if self.aggregate else None

    def to_json(self) -> dict:
        return {
            "concurrency": self.concurrency, "rounds": len(self.walls_s), "walls_s": self.walls_s,
            "aggregate_tok_s": asdict(self.aggregate) if self.aggregate else None,
            "per_stream_decode_tok_s": asdict(self.per_stream_decode) if self.per_stream_decode else None,
            # completed: the streams that ended (their tokens are in the aggregate); timed: those whose decode was
            "completed": sum(r.delivered for r in self.runs), "timed": sum(r.ok for r in self.runs),
            "failed": sum(not r.delivered for r in self.runs),
            "errors": sorted({r.error for r in self.runs if r.error}),
        }


@dataclass
class BenchResult:
    config: BenchConfig
    model: str
    runs: list[RunResult]
    server_version: str | None = None
    ignore_eos_applied: bool = True
    sweep: list[LevelResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started_at: str = ""
    warmup_tokens: int = 0  # completion tokens of the unrecorded warm-up requests (server counters see them)

    @property
    def delivered(self) -> int:
        """How many runs' streams ended (timed or not)."""
        return sum(r.delivered for r in self.runs)

    @property
    def timed(self) -> list[RunResult]:
        """The runs whose decode the client timed: the figures are theirs."""
        return [r for r in self.runs if r.ok]

    @property
    def decode(self) -> Stats | None:
        return stats([r.decode_tok_s for r in self.timed])

    @property
    def ttft(self) -> Stats | None:
        return stats([r.ttft_s for r in self.timed])

    @property
    def prompt_tokens(self) -> int | None:
        values = [r.prompt_tokens for r in self.timed if r.prompt_tokens is not None]
        return int(statistics.median(values)) if values else None

    @property
    def completion_tokens(self) -> int | None:
        values = [r.completion_tokens for r in self.timed]
        return int(statistics.median(values)) if values else None

    @property
    def mean_context(self) -> int | None:
        """Tokens in the KV cache averaged over the decode: prompt + half the completion."""
        if self.prompt_tokens is None or self.completion_tokens is None:
            return None
        return self.prompt_tokens + self.completion_tokens // 2

    def to_json(self) -> dict:
        cfg = asdict(self.config)
        cfg["concurrency"] = list(self.config.concurrency)
        cfg["url"] = redact_url(self.config.url)
        return {
            "schema": SCHEMA,
            "started_at": self.started_at,
            "url": redact_url(self.config.url),
            "model": self.model,
            "server_version": self.server_version,
            "config": cfg,
            "ignore_eos_applied": self.ignore_eos_applied,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "mean_context": self.mean_context,
            "decode_tok_s": asdict(self.decode) if self.decode else None,
            "ttft_s": asdict(self.ttft) if self.ttft else None,
            # as each sweep level counts them: completed, the streams that ended; timed, those whose decode the
            # client could time (the figures above are theirs); failed, the streams that did not end
            "completed": self.delivered, "timed": len(self.timed), "failed": len(self.runs) - self.delivered,
            "runs": [r.to_json() for r in self.runs],
            "sweep": [level.to_json() for level in self.sweep],
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------
# HTTP (roofline.live.http: deadlines, size caps, redaction)

def resolve_model(url: str, model: str | None, timeout_s: float) -> str:
    """The served model: the one given, else the only one /models lists."""
    if model:
        return model
    names = [entry.id for entry in served_models(url, timeout_s)]
    if len(names) == 1:
        return names[0]
    if not names:
        raise RooflineError(f"{redact_url(url)}/models lists no model; give --model")
    raise RooflineError(f"the server serves {len(names)} models ({', '.join(printable(n, 80) for n in names[:8])}"
                        f"{', ...' if len(names) > 8 else ''}); pick one with --model")


def server_version(url: str, timeout_s: float) -> str | None:
    """vLLM answers /version (outside /v1); other servers may not: then None."""
    try:
        version = get_json(url, "/version", min(timeout_s, 5.0), base="").get("version")
    except (RooflineError, AttributeError):
        return None
    return printable(version, 60) if isinstance(version, (str, int, float)) and str(version) else None


# ---------------------------------------------------------------------------------------------
# Streaming

def request_body(cfg: BenchConfig, model: str, vllm_extras: bool) -> dict:
    body: dict = {"model": model, "max_tokens": cfg.max_tokens, "temperature": 0, "stream": True,
                  "stream_options": {"include_usage": True}}
    if cfg.api == "chat":
        body["messages"] = [{"role": "user", "content": cfg.prompt}]
    else:
        body["prompt"] = cfg.prompt
    if vllm_extras:
        body["stream_options"]["continuous_usage_stats"] = True
        if cfg.ignore_eos:
            body["ignore_eos"] = True
    return body


def iter_sse_data(lines):
    """The `data:` payloads of a server-sent-event stream given as its lines (bytes, without
    their ends), as each event completes (lines joined per the SSE spec; comments and other fields
    skipped). Ends with the lines; Connection.lines bounds them in time and size."""
    data_lines: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace")
        if line == "":
            if data_lines:
                yield "\n".join(data_lines)
                data_lines = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data_lines.append(value[1:] if value.startswith(" ") else value)
    if data_lines:
        yield "\n".join(data_lines)


def _chunk_text(chunk: dict) -> tuple[bool, str | None]:
    """(chunk carries generated text or token ids, finish_reason)."""
    has_tokens, finish = False, None
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        if choice.get("text") or choice.get("token_ids"):
            has_tokens = True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")
                                        or delta.get("reasoning")):
            has_tokens = True
        finish = choice.get("finish_reason") or finish
    return has_tokens, finish


class BadStream(Exception):
    """An event whose numbers cannot be true (a count that is not a whole number in range)."""


def _usage_count(usage: dict, key: str, high: int) -> int | None:
    """usage[key] as a count in [0, high]; None when absent; BadStream when it is no such count."""
    value = usage.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or not 0 <= value <= high or int(value) != value:
        raise BadStream(f"usage.{key} = {printable(repr(value), 40)} is not a count in [0, {high}]")
    return int(value)


def stream_once(cfg: BenchConfig, model: str, vllm_extras: bool = True) -> RunResult:
    """One streamed request; every failure is a RunResult with `error` set, never an exception,
    so one bad run does not lose the others. The whole stream shares one deadline (--timeout) and
    each line a size cap; a token count beyond max_tokens is a server that lies, not a fast one."""
    conn = Connection(cfg.url, cfg.timeout_s)
    path = "/chat/completions" if cfg.api == "chat" else "/completions"
    run = RunResult(ok=False)
    t0 = time.monotonic()
    done = False
    usage_counts = False  # the server sends cumulative completion_tokens per chunk
    counted = 0
    try:
        try:
            resp = conn.request("POST", path, request_body(cfg, model, vllm_extras))
        except RooflineError as exc:
            run.error = str(exc)
            return run
        if resp.status != 200:
            run.error = str(http_error(conn, resp, conn.base + path))
            run.finish_reason = f"http_{resp.status}"
            return run
        try:
            for data in iter_sse_data(conn.lines(resp, f"the stream of {conn.base + path}")):
                now = time.monotonic() - t0
                if data.strip() == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(data, parse_constant=not_json)
                except ValueError:
                    run.error = f"malformed stream event after {counted} tokens: {printable(data, 80)!r}"
                    return run
                if not isinstance(chunk, dict):
                    continue
                if "error" in chunk:
                    err = chunk["error"]
                    msg = err.get("message", err) if isinstance(err, dict) else err
                    run.error = (f"server error mid-stream after {counted} tokens: "
                                 f"{printable(' '.join(str(msg).split()), 300)}")
                    return run
                run.chunks += 1
                usage = chunk.get("usage") if isinstance(chunk.get("usage"), dict) else {}
                has_tokens, finish = _chunk_text(chunk)
                if finish:
                    run.finish_reason = printable(finish, 40)
                prompt_tokens = _usage_count(usage, "prompt_tokens", CONTEXT_LIMIT)
                if prompt_tokens is not None:
                    run.prompt_tokens = prompt_tokens
                total = _usage_count(usage, "completion_tokens", cfg.max_tokens)
                if total is not None and chunk.get("choices"):
                    # per-chunk usage (vLLM continuous_usage_stats): exact cumulative counts,
                    # empty-text tokens included
                    usage_counts = True
                    if total > counted:
                        counted = total
                        run.arrivals.append((now, counted))
                elif has_tokens and not usage_counts:
                    counted += 1
                    if counted > cfg.max_tokens:
                        raise BadStream(f"more than max_tokens ({cfg.max_tokens}) token chunks arrived")
                    run.arrivals.append((now, counted))
                elif total is not None:
                    # the final usage-only chunk: the true total
                    if not usage_counts and total != counted and run.arrivals and counted:
                        # chunks carried several tokens each (or some were empty): scale the
                        # arrival counts so the last equals the server's total
                        scale = total / counted
                        run.arrivals = [(t, round(n * scale)) for t, n in run.arrivals]
                    counted = max(counted, total) if usage_counts else total
        except BadStream as exc:
            run.error = f"the server's stream cannot be true after {counted} tokens: {exc}"
            return run
        except Overrun as exc:
            if exc.stalled:
                run.error = f"timed out: no more data within the {cfg.timeout_s:g} s timeout after {counted} tokens"
            elif "still arriving" in str(exc):
                run.error = f"stream still running after {cfg.timeout_s:g} s, {counted} tokens received (raise --timeout)"
            else:
                run.error = f"{exc}, after {counted} tokens"
            return run
        except (OSError, http.client.HTTPException) as exc:
            run.error = (f"stream broke after {counted} tokens: {exc.__class__.__name__}: "
                         f"{printable(str(exc), 120)}").rstrip(": ")
            return run
        run.total_s = time.monotonic() - t0
        run.completion_tokens = counted
        if not done:
            run.error = f"stream ended after {counted} tokens without [DONE]"
            return run
        run.delivered = True
        if len(run.arrivals) < 2 or run.arrivals[-1][1] <= run.arrivals[0][1]:
            run.error = f"only {counted} token(s) arrived; need at least two token arrivals to time decode"
            return run
        t_first, n_first = run.arrivals[0]
        t_last, n_last = run.arrivals[-1]
        run.ttft_s = t_first
        if t_last <= t_first:
            run.error = "all tokens arrived at once (the server buffers its stream); cannot time decode"
            return run
        step_s = fastest_engine_step_s()
        if t_last - t_first < step_s:
            # tokens of later steps cannot follow the first chunk sooner than a step: they were held and sent together
            run.error = (f"the {n_last - n_first} tokens after the first arrived within {1e3 * (t_last - t_first):.2f} "
                         f"ms, less than one engine step takes on the fastest host known ({1e3 * step_s:.2f} ms, "
                         "launch.toml [step_host]): the server sent its steps' tokens together (its frontend behind "
                         "its engine); decode cannot be timed from the client")
            return run
        run.decode_tok_s = (n_last - n_first) / (t_last - t_first)
        run.ok = True
        return run
    finally:
        conn.close()


def fastest_engine_step_s() -> float:
    """The shortest step an engine's own host work allows on any host the tables know (launch.toml [step_host]
    fixed_us: vLLM's scheduling, input preparation and output processing, before any model work)."""
    from roofline.data import load_table

    return min(row["fixed_us"] for row in load_table("launch")["step_host"].values()) * 1e-6


def stream_prompt(prompt: str, stream: int) -> str:
    """Stream i's prompt in a sweep with distinct prompts: the prompt behind a stream-specific
    opening, so no two streams decode the same text (stream 0 keeps the single-stream prompt)."""
    return prompt if stream == 0 else f"Part {stream}. {prompt}"


def _concurrent(cfg: BenchConfig, model: str, n: int, vllm_extras: bool) -> tuple[list[RunResult], float]:
    """n requests released together (a barrier), each on its own thread; distinct prompts unless
    cfg.same_prompt."""
    results: list[RunResult | None] = [None] * n
    barrier = threading.Barrier(n)

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=cfg.timeout_s)
        except threading.BrokenBarrierError:
            pass
        own = cfg if cfg.same_prompt else replace(cfg, prompt=stream_prompt(cfg.prompt, i))
        try:
            results[i] = stream_once(own, model, vllm_extras)
        except Exception as exc:  # a thread must never die silently: record it
            results[i] = RunResult(ok=False, error=f"{exc.__class__.__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(cfg.timeout_s + 5)
    wall = time.monotonic() - t0
    return [r or RunResult(ok=False, error="request thread did not finish") for r in results], wall


def run_bench(cfg: BenchConfig, progress=None) -> BenchResult:
    """Warm-up, `runs` single-stream requests, then the optional concurrency sweep.
    Raises RooflineError only when nothing could be measured; failed runs are kept and counted."""
    cfg = cfg.validate()
    say = progress or (lambda message: None)
    model = resolve_model(cfg.url, cfg.model, cfg.timeout_s)
    result = BenchResult(config=cfg, model=model, runs=[], server_version=server_version(cfg.url, cfg.timeout_s),
                         started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    # The first request also finds out whether the server takes vLLM's extra fields.
    vllm_extras = True
    for i in range(max(cfg.warmup, 1)):
        run = stream_once(cfg, model, vllm_extras)
        if not run.ok and vllm_extras and run.finish_reason in ("http_400", "http_422"):
            vllm_extras = False
            result.ignore_eos_applied = False
            result.notes.append(f"server refused vLLM's extra fields ({', '.join(VLLM_EXTRAS)}): "
                                f"{run.error}; measuring without them")
            run = stream_once(cfg, model, vllm_extras)
        if not run.ok and run.error and run.error.startswith(("connection refused", "cannot reach", "HTTP")):
            raise RooflineError(run.error)
        if i < cfg.warmup:
            result.warmup_tokens += run.completion_tokens
            say(f"warm-up {i + 1}/{cfg.warmup}: " + (f"{run.completion_tokens} tokens" if run.ok else run.error))
        else:  # --warmup 0: the probe request is a measured run
            result.runs.append(run)
    if not cfg.ignore_eos:
        result.ignore_eos_applied = False

    while len(result.runs) < cfg.runs:
        run = stream_once(cfg, model, vllm_extras)
        result.runs.append(run)
        if run.ok:
            say(f"run {len(result.runs)}/{cfg.runs}: {run.decode_tok_s:.1f} tok/s decode, "
                f"TTFT {run.ttft_s * 1000:.0f} ms, {run.completion_tokens} tokens")
        else:
            say(f"run {len(result.runs)}/{cfg.runs} failed: {run.error}")

    timed = result.timed
    if not timed:  # none ended, or every one that ended reached the client too bunched to time
        what = "was timed" if result.delivered else "completed"
        raise RooflineError(f"no run {what} ({len(result.runs)} tried): {result.runs[0].error}")
    short = [r for r in timed if r.completion_tokens < cfg.max_tokens]
    if short:
        result.notes.append(f"{len(short)} run(s) stopped before max_tokens ({cfg.max_tokens}), "
                            f"finish_reason {short[0].finish_reason!r}: the server did not honour ignore_eos; "
                            "decode tok/s is over the tokens that did arrive")
    if result.ignore_eos_applied is False and not short and cfg.ignore_eos:
        result.notes.append("ignore_eos was not sent; every run still reached max_tokens")

    for level in cfg.concurrency:
        runs, walls, aggregates = [], [], []
        for _ in range(cfg.sweep_rounds):
            round_runs, wall = _concurrent(cfg, model, level, vllm_extras)
            runs += round_runs
            walls.append(wall)
            # every stream that ended delivered its tokens inside the round's wall time, timed or not
            tokens = sum(r.completion_tokens for r in round_runs if r.delivered)
            if tokens and wall > 0:
                aggregates.append(tokens / wall)
        done = [r for r in runs if r.ok]
        level_result = LevelResult(level, runs, walls, stats(aggregates), stats([r.decode_tok_s for r in done]))
        result.sweep.append(level_result)
        agg = f"{level_result.aggregate_tok_s:.1f} tok/s aggregate" if level_result.aggregate_tok_s else "no tokens"
        say(f"concurrency {level}: {agg}, {sum(r.delivered for r in runs)}/{len(runs)} streams completed, "
            f"{len(done)} timed")
    return result


# ---------------------------------------------------------------------------------------------
# A saved bench result (`roofline bench --json`), read back by `validate --bench-json`: what the
# reader uses, checked (types, finite, in range) before any number is believed.

TOK_S_LIMIT = 1e9  # no engine decodes a billion tokens a second


class StatsRecord(msgspec.Struct):
    median: Annotated[float, Meta(gt=0, le=TOK_S_LIMIT)]
    min: Annotated[float, Meta(ge=0, le=TOK_S_LIMIT)] | None = None
    max: Annotated[float, Meta(ge=0, le=TOK_S_LIMIT)] | None = None
    n: Annotated[int, Meta(ge=0, le=1 << 20)] | None = None


class LevelRecord(msgspec.Struct):
    concurrency: Annotated[int, Meta(ge=1, le=BATCH_LIMIT)]
    aggregate_tok_s: StatsRecord | None = None
    per_stream_decode_tok_s: StatsRecord | None = None


class ConfigRecord(msgspec.Struct):
    max_tokens: Annotated[int, Meta(ge=2, le=CONTEXT_LIMIT)] | None = None
    same_prompt: bool = False


class BenchFile(msgspec.Struct):
    decode_tok_s: StatsRecord | None = None
    ttft_s: Annotated[dict[str, Any], Meta(max_length=16)] | None = None
    mean_context: Annotated[int, Meta(ge=0, le=CONTEXT_LIMIT)] | None = None
    prompt_tokens: Annotated[int, Meta(ge=0, le=CONTEXT_LIMIT)] | None = None
    completion_tokens: Annotated[int, Meta(ge=0, le=CONTEXT_LIMIT)] | None = None
    config: ConfigRecord | None = None
    sweep: Annotated[list[LevelRecord], Meta(max_length=4096)] = []
    notes: Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(max_length=1024)] = []
    model: Name | None = None
    server_version: Name | None = None


def check_bench_file(data, where: str) -> dict:
    """A bench result read from a file, checked; the dict itself (the reader keeps working with it)."""
    if not isinstance(data, dict):
        raise RooflineError(f"{where}: not a bench result (expected a JSON object)")
    bench = checked(data, BenchFile, where)
    if bench.decode_tok_s is None:
        raise RooflineError(f"{where}: the bench result has no measured decode tok/s")
    ttft = (bench.ttft_s or {}).get("median")
    if ttft is not None and (isinstance(ttft, bool) or not isinstance(ttft, (int, float))
                             or not 0 <= ttft <= 7 * 24 * 3600):
        raise RooflineError(f"{where}: ttft_s.median {printable(repr(ttft), 40)} is not a time in seconds")
    levels = [level.concurrency for level in bench.sweep]
    if len(set(levels)) != len(levels):
        raise RooflineError(f"{where}: the sweep repeats a concurrency level")
    return data

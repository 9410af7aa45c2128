"""Measurements in the ecosystem's own files, read as a `roofline bench` result: `vllm bench serve
--save-result` JSON, guidellm's benchmarks report, llama-benchy's JSON output (the bench most published
DGX Spark figures come from). Each is recognised by the keys its tool writes, checked against the schema
of the fields read, and mapped onto the scenario: the decode rate of a stream (vLLM's TPOT, guidellm's
inter-token latency, llama-benchy's per-request generation rate: none counts the prefill), the
concurrency and the mean context a step decoded at (prompt + half the output).

Sources of the formats: vllm/benchmarks/serve.py (vLLM 0.32: the result_json written by
--save-result); guidellm src/guidellm/benchmark/schemas/generative/metrics.py (GenerativeMetrics:
StatusDistributionSummary per metric, "successful" requests); llama-benchy
schemas/benchmark_report_schema.json (BenchmarkReport, BenchmarkRun, BenchmarkMetric)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from roofline.errors import RooflineError
from roofline.predict.traffic import BATCH_LIMIT, CONTEXT_LIMIT
from roofline.schema import checked
from roofline.untrusted import printable

Positive = Annotated[float, Meta(gt=0, le=1e12)]
Count = Annotated[float, Meta(ge=0, le=1e12)]


# ----------------------------------------------------------------------------- vllm bench serve

class VllmBenchServe(msgspec.Struct, forbid_unknown_fields=False):
    completed: Annotated[int, Meta(ge=1, le=1 << 40)]
    total_input_tokens: Annotated[int, Meta(ge=0, le=1 << 50)]
    total_output_tokens: Annotated[int, Meta(ge=1, le=1 << 50)]
    median_tpot_ms: Positive
    num_prompts: Annotated[int, Meta(ge=1, le=1 << 40)] | None = None
    max_concurrency: Annotated[int, Meta(ge=1, le=BATCH_LIMIT)] | None = None
    request_rate: float | str | None = None
    model_id: Annotated[str, Meta(max_length=512)] | None = None
    output_throughput: Count | None = None
    spec_decode_acceptance_rate: Annotated[float, Meta(ge=0, le=100)] | None = None


def _from_vllm(data: dict, where: str) -> dict:
    run = checked(data, VllmBenchServe, where)
    closed_loop = run.request_rate in (None, "inf") or run.request_rate == float("inf")
    concurrency = run.max_concurrency or (min(run.num_prompts or run.completed, BATCH_LIMIT) if closed_loop else None)
    if concurrency is None:
        raise RooflineError(f"{where}: an open-loop run (--request-rate {run.request_rate}) without "
                            "--max-concurrency has no fixed number of streams to compare with")
    prompt = run.total_input_tokens / run.completed
    output = run.total_output_tokens / run.completed
    per_stream = 1e3 / run.median_tpot_ms
    notes = [f"vllm bench serve: {run.completed} requests at concurrency {concurrency}, median TPOT "
             f"{run.median_tpot_ms:.2f} ms (the decode rate of a stream, first token excluded)"]
    return _bench(per_stream, [(concurrency, per_stream)], prompt, output, run.model_id, notes)


# ----------------------------------------------------------------------------- guidellm

class Distribution(msgspec.Struct, forbid_unknown_fields=False):
    mean: Count | None = None
    median: Count | None = None


class ByStatus(msgspec.Struct, forbid_unknown_fields=False):
    successful: Distribution | None = None


class GuidellmMetrics(msgspec.Struct, forbid_unknown_fields=False):
    inter_token_latency_ms: ByStatus
    request_concurrency: ByStatus
    prompt_token_count: ByStatus
    output_token_count: ByStatus


class GuidellmBenchmark(msgspec.Struct, forbid_unknown_fields=False):
    metrics: GuidellmMetrics


class GuidellmReport(msgspec.Struct, forbid_unknown_fields=False):
    benchmarks: Annotated[list[GuidellmBenchmark], Meta(min_length=1, max_length=4096)]


def _successful(summary: ByStatus, what: str, where: str, key: str = "median") -> float:
    value = getattr(summary.successful, key, None) if summary.successful else None
    if not value:
        raise RooflineError(f"{where}: no successful requests' {what} in the report")
    return value


def _from_guidellm(data: dict, where: str) -> dict:
    report = checked(data, GuidellmReport, where)
    levels, prompt, output = [], None, None
    for bench in report.benchmarks:
        m = bench.metrics
        itl = _successful(m.inter_token_latency_ms, "inter-token latency", where)
        concurrency = max(1, round(_successful(m.request_concurrency, "concurrency", where, "mean")))
        levels.append((concurrency, 1e3 / itl))
        if prompt is None:
            prompt = _successful(m.prompt_token_count, "prompt tokens", where, "mean")
            output = _successful(m.output_token_count, "output tokens", where, "mean")
    notes = [f"guidellm: {len(levels)} benchmark(s); a stream's decode rate from the median inter-token latency, "
             "the concurrency from the mean of requests in flight"]
    return _bench(min(levels)[1], levels, prompt, output, None, notes)


# ----------------------------------------------------------------------------- llama-benchy

class BenchyMetric(msgspec.Struct, forbid_unknown_fields=False):
    mean: Count


class BenchyRun(msgspec.Struct, forbid_unknown_fields=False):
    concurrency: Annotated[int, Meta(ge=1, le=BATCH_LIMIT)]
    context_size: Annotated[int, Meta(ge=0, le=CONTEXT_LIMIT)]
    prompt_size: Annotated[int, Meta(ge=0, le=CONTEXT_LIMIT)]
    response_size: Annotated[int, Meta(ge=1, le=CONTEXT_LIMIT)]
    is_context_prefill_phase: bool = False
    tg_req_throughput: BenchyMetric | None = None
    tg_throughput: BenchyMetric | None = None  # at one stream the only figure llama-benchy writes (req is None)

    @property
    def per_request(self) -> float | None:
        """A stream's generation rate: tg_req_throughput, or at one stream tg_throughput (the same request's)."""
        if self.tg_req_throughput is not None:
            return self.tg_req_throughput.mean
        return self.tg_throughput.mean if self.concurrency == 1 and self.tg_throughput is not None else None


class BenchyReport(msgspec.Struct, forbid_unknown_fields=False):
    latency_mode: Annotated[str, Meta(max_length=64)]
    benchmarks: Annotated[list[BenchyRun], Meta(max_length=4096)]
    model: Annotated[str, Meta(max_length=512)] | None = None


def _from_llama_benchy(data: dict, where: str) -> dict:
    report = checked(data, BenchyReport, where)
    runs = [r for r in report.benchmarks if not r.is_context_prefill_phase and r.per_request]
    if not runs:
        raise RooflineError(f"{where}: no generation runs (tg_req_throughput) in the llama-benchy report")
    # one scenario: the smallest context and prompt measured, at every concurrency it was measured at
    first = min(runs, key=lambda r: (r.context_size, r.prompt_size, r.concurrency))
    same = [r for r in runs if (r.context_size, r.prompt_size, r.response_size)
            == (first.context_size, first.prompt_size, first.response_size)]
    levels = sorted({r.concurrency: r.per_request for r in same}.items())
    notes = [f"llama-benchy ({report.latency_mode} latency mode): context {first.context_size} + prompt "
             f"{first.prompt_size}, {first.response_size} tokens generated; a stream's rate is tg_req_throughput"]
    if len(runs) > len(same):
        notes.append(f"{len(runs) - len(same)} runs at other context sizes left out (validate each with --context)")
    return _bench(levels[0][1], levels, first.context_size + first.prompt_size, first.response_size, report.model,
                  notes)


# llama-benchy --format md (its default, what published results are): a pipe table of model | test | t/s (or
# "t/s (total)") | [t/s (req)] | ttfr (ms) | est_ppt (ms) | e2e_ttft (ms), each figure "mean ± std"; tests named
# pp{P} / tg{N}, " @ d{D}" for a context depth, " (c{C})" for a concurrency when several ran, ctx_pp / ctx_tg for
# the context's own prefill (llama_benchy/results.py _generate_rows, _generate_md_report)
_BENCHY_TEST = re.compile(r"(?P<ctx>ctx_)?(?P<kind>pp|tg)(?P<size>\d+)?(?: @ d(?P<depth>\d+))?(?: \(c(?P<c>\d+)\))?")
_BENCHY_VALUE = re.compile(r"(-?[0-9.]+)(?:\s*±\s*[0-9.]+)?")
MAX_BENCHY_ROWS = 4096


def benchy_markdown(text: str, where: str) -> dict | None:
    """llama-benchy's markdown table as the JSON report it writes with --format json (the fields the reader above
    takes: latency_mode, model, benchmarks[].concurrency / context_size / prompt_size / response_size /
    tg_throughput / tg_req_throughput), or None where `text` holds no such table."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.strip().startswith("|")]
    if len(rows) < 3:
        return None
    header = [h.lower() for h in rows[0]]
    if "test" not in header or not any(h.startswith("t/s") for h in header):
        return None
    test = header.index("test")
    total = next(i for i, h in enumerate(header) if h.startswith("t/s") and "req" not in h)
    per_request = header.index("t/s (req)") if "t/s (req)" in header else None
    model = header.index("model") if "model" in header else None
    if len(rows) - 2 > MAX_BENCHY_ROWS:
        raise RooflineError(f"{where}: more than {MAX_BENCHY_ROWS} rows in the llama-benchy table")
    prompts: dict[tuple[int, int], int] = {}  # (depth, concurrency) -> the prompt size of its pp row
    runs, name = [], None
    for cells in rows[2:]:  # the header, then tabulate's alignment row
        if len(cells) != len(header):
            raise RooflineError(f"{where}: a row of {len(cells)} cells under a header of {len(header)}")
        found = _BENCHY_TEST.fullmatch(cells[test])
        if not found:
            raise RooflineError(f"{where}: test {printable(cells[test], 40)!r} is not one llama-benchy writes "
                                "(pp512, tg128 @ d4096, ctx_tg @ d4096 (c2), ...)")
        depth, concurrency = int(found["depth"] or 0), int(found["c"] or 1)
        name = name or (cells[model] if model is not None else None)
        if found["kind"] == "pp":
            prompts[(depth, concurrency)] = int(found["size"] or 0)
            continue
        if found["ctx"]:
            continue  # the context's own generation: not a run at a prompt
        rate = _benchy_value(cells[per_request] if per_request is not None else "", where) if concurrency > 1 \
            else _benchy_value(cells[total], where)
        if rate is None and concurrency > 1:  # no per-request column: the total shared by the streams
            whole = _benchy_value(cells[total], where)
            rate = whole / concurrency if whole is not None else None
        if rate is None or int(found["size"] or 0) < 1:
            continue
        runs.append({"concurrency": concurrency, "context_size": depth,
                     "prompt_size": prompts.get((depth, concurrency), 0), "response_size": int(found["size"]),
                     "is_context_prefill_phase": False, "tg_req_throughput": {"mean": rate}})
    if not runs:
        raise RooflineError(f"{where}: the llama-benchy table has no generation (tg) rows")
    return {"latency_mode": "not in the markdown table", "model": name, "benchmarks": runs}


def _benchy_value(cell: str, where: str) -> float | None:
    if not cell:
        return None
    found = _BENCHY_VALUE.fullmatch(cell)
    if not found:
        raise RooflineError(f"{where}: {printable(cell, 40)!r} is not a llama-benchy figure (mean ± std)")
    value = float(found.group(1))
    if not 0 <= value <= 1e9:
        raise RooflineError(f"{where}: {value:g} tok/s is not a rate")
    return value


# ----------------------------------------------------------------------------- one shape

def _bench(per_stream: float, levels: list[tuple[int, float]], prompt: float, output: float, model, notes) -> dict:
    """The roofline bench result these figures make: the lowest concurrency as the measurement (its
    aggregate: streams x a stream's rate), every level as the sweep, the mean context a step decoded at."""
    levels = sorted(dict(levels).items())
    concurrency, rate = levels[0]
    out: dict[str, Any] = {
        "decode_tok_s": {"median": rate * concurrency},
        "concurrency": concurrency,
        "mean_context": int(round(prompt + output / 2)),
        "prompt_tokens": int(round(prompt)), "completion_tokens": int(round(output)),
        "sweep": [{"concurrency": c, "aggregate_tok_s": {"median": r * c}, "per_stream_decode_tok_s": {"median": r}}
                  for c, r in levels] if len(levels) > 1 else [],
        "notes": notes,
    }
    if model:
        out["model"] = str(model)[:256]
    return out


READERS = (  # the keys each tool writes that no other does, and its reader
    (("median_tpot_ms", "total_output_tokens"), "vllm bench serve", _from_vllm),
    (("latency_mode", "benchmarks"), "llama-benchy", _from_llama_benchy),
    (("benchmarks",), "guidellm", _from_guidellm),
)


def measurement_from(data, where: str) -> tuple[dict, str | None]:
    """(a roofline bench result, the tool that wrote it: None for roofline's own) of a result file."""
    if not isinstance(data, dict):
        raise RooflineError(f"{where}: not a bench result (expected a JSON object)")
    if "decode_tok_s" in data:
        return data, None
    for keys, tool, reader in READERS:
        if all(k in data for k in keys):
            return reader(data, where), tool
    raise RooflineError(f"{where}: not a result file roofline reads (roofline bench --json, vllm bench serve "
                        "--save-result, guidellm's report, llama-benchy's JSON)")


@dataclass(frozen=True)
class SavedStream:
    """One stream's decode read from a result file (doctor diagnoses one stream)."""

    tok_s: float
    mean_context: int | None
    prompt_tokens: int | None
    completion_tokens: int | None
    tool: str  # the tool that wrote it
    notes: tuple[str, ...] = ()


# the user's fields behind each field of the converted record, per tool: an error names what the user wrote
USER_FIELDS = {
    "vllm bench serve": {"decode_tok_s": "median_tpot_ms", "sweep": "median_tpot_ms",
                         "mean_context": "total_input_tokens / total_output_tokens",
                         "prompt_tokens": "total_input_tokens", "completion_tokens": "total_output_tokens",
                         "concurrency": "max_concurrency"},
    "guidellm": {"decode_tok_s": "metrics.inter_token_latency_ms.successful.median",
                 "sweep": "metrics.inter_token_latency_ms.successful.median",
                 "concurrency": "metrics.request_concurrency.successful.mean",
                 "mean_context": "metrics.prompt_token_count / output_token_count",
                 "prompt_tokens": "metrics.prompt_token_count", "completion_tokens": "metrics.output_token_count"},
    "llama-benchy": {"decode_tok_s": "benchmarks[].tg_req_throughput.mean",
                     "sweep": "benchmarks[].tg_req_throughput.mean", "concurrency": "benchmarks[].concurrency",
                     "mean_context": "benchmarks[].context_size / prompt_size / response_size",
                     "prompt_tokens": "benchmarks[].prompt_size", "completion_tokens": "benchmarks[].response_size"},
}


def checked_measurement(data, where: str) -> tuple[dict, str | None]:
    """`measurement_from`, then checked as any bench result (live/bench.check_bench_file): what validate,
    doctor and calibrate read of a file. A converted file's error names the tool's own field."""
    from .bench import check_bench_file

    converted, tool = measurement_from(data, where)
    if tool is None:
        return check_bench_file(converted, where), tool
    try:
        return check_bench_file(converted, where), tool
    except RooflineError as exc:
        text = str(exc)
        for converted_field, user_field in USER_FIELDS.get(tool, {}).items():
            if f"$.{converted_field}" in text:
                raise RooflineError(f"{where}: {tool}'s {user_field} gives a figure out of range "
                                    f"({text.split(': ', 1)[-1].split(' - at ')[0]})") from None
        raise


def single_stream(data, where: str) -> SavedStream:
    """The single-stream decode of a result file (`measurement_from`, checked as a bench result): its
    one-stream level; a file that never measured one stream alone is one line."""
    bench, tool = checked_measurement(data, where)
    streams = bench.get("concurrency")
    rate = (bench.get("decode_tok_s") or {}).get("median")
    if isinstance(streams, int) and streams > 1:
        raise RooflineError(f"{where}: measured {streams} streams at least, no single stream: doctor diagnoses one "
                            "stream (roofline validate --bench-json compares a file of several)")
    mean_context = bench.get("mean_context")
    return SavedStream(float(rate), mean_context if isinstance(mean_context, int) else None,
                       bench.get("prompt_tokens") if isinstance(bench.get("prompt_tokens"), int) else None,
                       bench.get("completion_tokens") if isinstance(bench.get("completion_tokens"), int) else None,
                       tool or "roofline bench", tuple(str(n) for n in bench.get("notes") or ()))


def measured_levels(data, where: str) -> tuple[str, list[tuple[int, int, float]]]:
    """(the tool, [(streams, mean context, a stream's decode tok/s)]) of a result file: every level it
    measured, for a fit (calibrate --from-results)."""
    bench, tool = checked_measurement(data, where)
    context = bench.get("mean_context")
    if not isinstance(context, int) or context < 1:
        raise RooflineError(f"{where}: no prompt / output lengths: the context each step decoded at is unknown")
    streams = bench.get("concurrency") if isinstance(bench.get("concurrency"), int) else 1
    levels = {streams: float(bench["decode_tok_s"]["median"]) / streams}  # its figure: the lowest level's sum
    for level in bench.get("sweep") or []:
        per_stream = (level.get("per_stream_decode_tok_s") or {}).get("median")
        aggregate = (level.get("aggregate_tok_s") or {}).get("median")
        if per_stream is None and aggregate is not None:
            per_stream = aggregate / level["concurrency"]
        if per_stream is not None:
            levels[int(level["concurrency"])] = float(per_stream)
    return tool or "roofline bench", [(c, context, rate) for c, rate in sorted(levels.items())]


# ----------------------------------------------------------------------------- open-loop loads

LOAD_METRICS = ("ttft", "itl", "tpot", "e2e")  # roofline's names; vLLM's e2el is e2e


@dataclass(frozen=True)
class LoadRun:
    """One open-loop (or burst) run of a result file: how its requests arrived and what each latency measured."""

    tool: str
    label: str
    arrival: str  # trace (every request's own start time) | poisson | constant | burst
    rate: float | None
    requests: tuple  # predict.workload.Request of a replayable run (its start times), else ()
    num_prompts: int
    prompt_len: int
    output_len: int
    measured: dict  # metric -> {"mean_ms", "p50_ms", "p90_ms", "p99_ms"} (None where the file has none)
    throughput: float | None  # completed requests per second


class VllmOpenLoop(msgspec.Struct, forbid_unknown_fields=False):
    completed: Annotated[int, Meta(ge=1, le=1 << 40)]
    total_input_tokens: Annotated[int, Meta(ge=0, le=1 << 50)]
    total_output_tokens: Annotated[int, Meta(ge=1, le=1 << 50)]
    request_rate: Annotated[float, Meta(gt=0, le=1e9)] | Annotated[str, Meta(max_length=16)]
    max_concurrency: Annotated[int, Meta(ge=1, le=BATCH_LIMIT)] | None = None
    request_throughput: Annotated[float, Meta(ge=0, le=1e9)] | None = None
    start_times: Annotated[list[Annotated[float, Meta(ge=0, le=1e12)]], Meta(max_length=1 << 20)] | None = None
    input_lens: Annotated[list[Annotated[int, Meta(ge=0, le=CONTEXT_LIMIT)]], Meta(max_length=1 << 20)] | None = None
    output_lens: Annotated[list[Annotated[int, Meta(ge=0, le=CONTEXT_LIMIT)]], Meta(max_length=1 << 20)] | None = None


def _ms(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and \
        0 <= value <= 1e10 else None


def open_loop_runs(data, where: str) -> list[LoadRun] | None:
    """The open-loop runs of a result file (vllm bench serve at a --request-rate without --max-concurrency, or a
    burst; guidellm's poisson / constant benchmarks), or None where it holds none (a closed-loop file)."""
    from roofline.predict.workload import Request

    if not isinstance(data, dict):
        return None
    if "median_tpot_ms" in data and "request_rate" in data and data.get("max_concurrency") in (None, 0):
        run = checked(data, VllmOpenLoop, where)
        rate = None if isinstance(run.request_rate, str) else float(run.request_rate)
        if isinstance(run.request_rate, str) and run.request_rate != "inf":
            raise RooflineError(f"{where}: request_rate {run.request_rate[:16]!r} is not a rate")
        prompt, output = run.total_input_tokens / run.completed, run.total_output_tokens / run.completed
        requests = ()
        if run.start_times and run.input_lens and run.output_lens and \
                len(run.start_times) == len(run.input_lens) == len(run.output_lens):
            start = min(run.start_times)
            requests = tuple(Request(t - start, max(1, n), max(1, o))
                             for t, n, o in zip(run.start_times, run.input_lens, run.output_lens))
        measured = {ours: {f"{q}_ms": _ms(data.get(f"{key}_{theirs}_ms"))
                           for q, key in (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99"))
                           for theirs in [name]}
                    for ours, name in (("ttft", "ttft"), ("itl", "itl"), ("tpot", "tpot"), ("e2e", "e2el"))}
        arrival = "trace" if requests else ("burst" if rate is None else "poisson")
        label = "burst" if rate is None else f"{rate:g} req/s"
        return [LoadRun("vllm bench serve", label, arrival, rate, requests, run.completed, round(prompt),
                        round(output), measured, run.request_throughput)]
    if "benchmarks" in data and "latency_mode" not in data:
        return _guidellm_loads(data, where)
    return None


class _Percentiles(msgspec.Struct, forbid_unknown_fields=False):
    p50: Count | None = None
    p90: Count | None = None
    p99: Count | None = None


class _Summary(msgspec.Struct, forbid_unknown_fields=False):
    mean: Count | None = None
    median: Count | None = None
    percentiles: _Percentiles | None = None


class _Status(msgspec.Struct, forbid_unknown_fields=False):
    successful: _Summary | None = None


class _LoadMetrics(msgspec.Struct, forbid_unknown_fields=False):
    time_to_first_token_ms: _Status | None = None
    inter_token_latency_ms: _Status | None = None
    time_per_output_token_ms: _Status | None = None
    request_latency: _Status | None = None  # seconds
    requests_per_second: _Status | None = None
    prompt_token_count: _Status | None = None
    output_token_count: _Status | None = None


class _Strategy(msgspec.Struct, forbid_unknown_fields=False):
    type_: Annotated[str, Meta(max_length=64)] | None = None
    rate: Annotated[float, Meta(gt=0, le=1e9)] | None = None


class _Config(msgspec.Struct, forbid_unknown_fields=False):
    strategy: _Strategy | None = None


class _GuidellmLoad(msgspec.Struct, forbid_unknown_fields=False):
    metrics: _LoadMetrics
    config: _Config | None = None


class _GuidellmLoads(msgspec.Struct, forbid_unknown_fields=False):
    benchmarks: Annotated[list[_GuidellmLoad], Meta(min_length=1, max_length=4096)]


def _guidellm_loads(data: dict, where: str) -> list[LoadRun] | None:
    report = checked(data, _GuidellmLoads, where)
    out = []
    for bench in report.benchmarks:
        strategy = bench.config.strategy if bench.config else None
        kind = (strategy.type_ or "") if strategy else ""
        if kind not in ("poisson", "constant") or not strategy.rate:
            continue
        m = bench.metrics

        def summary(status: _Status | None, scale: float = 1.0) -> dict:
            s = status.successful if status else None
            p = s.percentiles if s else None
            median = s.median if s and s.median is not None else (p.p50 if p else None)

            def scaled(value):
                return None if value is None else value * scale
            return {"mean_ms": scaled(s.mean if s else None), "p50_ms": scaled(median),
                    "p90_ms": scaled(p.p90 if p else None), "p99_ms": scaled(p.p99 if p else None)}
        prompt = (m.prompt_token_count.successful.mean if m.prompt_token_count and m.prompt_token_count.successful
                  else None)
        output = (m.output_token_count.successful.mean if m.output_token_count and m.output_token_count.successful
                  else None)
        if not prompt or not output:
            raise RooflineError(f"{where}: a {kind} benchmark without its prompt and output token counts")
        rps = m.requests_per_second.successful.mean if m.requests_per_second and m.requests_per_second.successful \
            else None
        out.append(LoadRun("guidellm", f"{strategy.rate:g} req/s ({kind})", kind, float(strategy.rate), (), 200,
                           round(prompt), round(output),
                           {"ttft": summary(m.time_to_first_token_ms), "itl": summary(m.inter_token_latency_ms),
                            "tpot": summary(m.time_per_output_token_ms), "e2e": summary(m.request_latency, 1e3)},
                           rps))
    return out or None

"""roofline bench --url URL"""
from __future__ import annotations

import json
import sys

import click

from ..errors import RooflineError


def parse_levels(text: str | None) -> tuple[int, ...]:
    """"1,2,4,8" -> (1, 2, 4, 8)."""
    if not text:
        return ()
    try:
        levels = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise RooflineError(f"--concurrency {text!r}: give comma-separated integers such as 1,2,4,8") from None
    if any(level < 1 for level in levels):
        raise RooflineError("--concurrency levels must be at least 1")
    return levels


def bench_options(func):
    """The request shape, shared with `roofline validate --url`."""
    for option in reversed([
        click.option("--url", required=False, default=None,
                     help="API base of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1."),
        click.option("--model", "served_model", default=None,
                     help="Served model name (default: the only one the server lists)."),
        click.option("--api", type=click.Choice(["completions", "chat"]), default="completions", show_default=True,
                     help="Endpoint: /completions (raw prompt) or /chat/completions (chat template)."),
        click.option("--prompt", default=None, help="Prompt text (default: a short fixed sentence)."),
        click.option("--max-tokens", type=int, default=128, show_default=True, help="Tokens decoded per request."),
        click.option("--runs", type=int, default=5, show_default=True, help="Measured single-stream requests."),
        click.option("--warmup", type=int, default=1, show_default=True, help="Unmeasured requests first."),
        click.option("--timeout", "timeout_s", type=float, default=60.0, show_default=True,
                     help="Seconds per request (connect, each read, and the whole stream)."),
        click.option("--no-ignore-eos", is_flag=True,
                     help="Do not ask the server to decode past the end-of-sequence token."),
    ]):
        func = option(func)
    return func


def config_from(url: str, kwargs: dict, concurrency: tuple[int, ...] = (), sweep_rounds: int = 3):
    from ..bench import DEFAULT_PROMPT, BenchConfig

    return BenchConfig(
        url=url, model=kwargs.pop("served_model"), api=kwargs.pop("api"),
        prompt=kwargs.pop("prompt") or DEFAULT_PROMPT, max_tokens=kwargs.pop("max_tokens"),
        runs=kwargs.pop("runs"), warmup=kwargs.pop("warmup"), timeout_s=kwargs.pop("timeout_s"),
        ignore_eos=not kwargs.pop("no_ignore_eos"), concurrency=concurrency, sweep_rounds=sweep_rounds,
    ).validate()


def render_bench(result) -> str:
    lines = [f"model {result.model} at {result.config.url}"
             + (f" (server {result.server_version})" if result.server_version else "")]
    lines.append(f"prompt {result.prompt_tokens} tokens, {result.completion_tokens} decoded per run, "
                 f"{result.config.api} API, temperature 0, "
                 f"ignore_eos {'on' if result.ignore_eos_applied else 'off'}")
    decode, ttft = result.decode, result.ttft
    lines.append(f"{'':24}{'median':>10}{'min':>10}{'max':>10}")
    lines.append(f"{'decode tok/s':24}{decode.median:>10.2f}{decode.min:>10.2f}{decode.max:>10.2f}")
    lines.append(f"{'TTFT ms':24}{ttft.median * 1e3:>10.1f}{ttft.min * 1e3:>10.1f}{ttft.max * 1e3:>10.1f}")
    failed = len(result.runs) - len(result.completed)
    lines.append(f"{len(result.completed)} of {len(result.runs)} runs completed"
                 + (f"; failures: {'; '.join(sorted({r.error for r in result.runs if r.error}))}" if failed else ""))
    if result.sweep:
        lines.append("")
        lines.append(f"{'concurrency':>12}{'aggregate tok/s':>18}{'per-stream decode':>20}{'completed':>11}")
        for level in result.sweep:
            agg = f"{level.aggregate_tok_s:.1f}" if level.aggregate_tok_s else "-"
            per = f"{level.per_stream_decode.median:.1f}" if level.per_stream_decode else "-"
            done = sum(r.ok for r in level.runs)
            lines.append(f"{level.concurrency:>12}{agg:>18}{per:>20}{f'{done}/{len(level.runs)}':>11}")
        lines.append("aggregate = completion tokens / wall time of the round (prefill included)")
    for note in result.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


@click.command(name="bench")
@bench_options
@click.option("--concurrency", "concurrency_text", default=None,
              help="Also sweep these concurrent-stream counts, e.g. 1,2,4,8 (aggregate tok/s).")
@click.option("--sweep-rounds", type=int, default=3, show_default=True, help="Rounds per concurrency level.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--json-out", type=click.Path(dir_okay=False), default=None, help="Also write the JSON to a file.")
@click.option("--quiet", "-q", is_flag=True, help="No per-run progress lines.")
def command(url, concurrency_text, sweep_rounds, as_json, json_out, quiet, **kwargs):
    """Measure single-stream decode tok/s of an OpenAI-compatible server (vLLM or any other):
    fixed max_tokens, temperature 0, ignore_eos where the server takes it; TTFT and decode
    speed from token arrival times, so prefill is excluded."""
    from ..bench import run_bench

    if not url:
        raise RooflineError("give --url, the API base of the server, e.g. http://127.0.0.1:8000/v1")
    cfg = config_from(url, kwargs, parse_levels(concurrency_text), sweep_rounds)
    progress = None if (quiet or as_json) else (lambda message: click.echo(message, err=True))
    result = run_bench(cfg, progress=progress)
    payload = result.to_json()
    if json_out:
        with open(json_out, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=1)
    if as_json:
        json.dump(payload, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        click.echo(render_bench(result))

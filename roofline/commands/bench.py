"""roofline bench --url URL"""
from __future__ import annotations

import click

from roofline.errors import RooflineError
from roofline.files import write_json

from . import types
from .output import echo, print_json


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
        click.option("--max-tokens", type=types.DECODE_TOKENS, default=128, show_default=True, help="Tokens decoded per request."),
        click.option("--runs", type=types.RUNS, default=5, show_default=True, help="Measured single-stream requests."),
        click.option("--warmup", type=types.WARMUP, default=1, show_default=True, help="Unmeasured requests first."),
        click.option("--timeout", "timeout_s", type=types.SECONDS, default=60.0, show_default=True,
                     help="Seconds per request (connect, each read, and the whole stream)."),
        click.option("--no-ignore-eos", is_flag=True,
                     help="Do not ask the server to decode past the end-of-sequence token."),
    ]):
        func = option(func)
    return func


def config_from(url: str, kwargs: dict, concurrency: tuple[int, ...] = (), sweep_rounds: int = 3,
                same_prompt: bool = False):
    from roofline.live.bench import DEFAULT_PROMPT, BenchConfig

    return BenchConfig(
        url=url, model=kwargs.pop("served_model"), api=kwargs.pop("api"),
        prompt=kwargs.pop("prompt") or DEFAULT_PROMPT, max_tokens=kwargs.pop("max_tokens"),
        runs=kwargs.pop("runs"), warmup=kwargs.pop("warmup"), timeout_s=kwargs.pop("timeout_s"),
        ignore_eos=not kwargs.pop("no_ignore_eos"), concurrency=concurrency, sweep_rounds=sweep_rounds,
        same_prompt=same_prompt,
    ).validate()


@click.command(name="bench")
@bench_options
@click.option("--concurrency", "concurrency_text", default=None,
              help="Also sweep these concurrent-stream counts, e.g. 1,2,4,8 (aggregate tok/s).")
@click.option("--sweep-rounds", type=types.RUNS, default=3, show_default=True, help="Rounds per concurrency level.")
@click.option("--same-prompt", is_flag=True,
              help="Sweep: send every stream the same prompt (the common benchmark habit; a MoE then reads one "
                   "token's experts per step). Default: distinct prompts.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--json-out", type=click.Path(dir_okay=False), default=None, help="Also write the JSON to a file.")
@click.option("--quiet", "-q", is_flag=True, help="No per-run progress lines.")
def command(url, concurrency_text, sweep_rounds, same_prompt, as_json, json_out, quiet, **kwargs):
    """Measure single-stream decode tok/s of an OpenAI-compatible server (vLLM or any other):
    fixed max_tokens, temperature 0, ignore_eos where the server takes it; TTFT and decode
    speed from token arrival times, so prefill is excluded."""
    from roofline.live.bench import run_bench

    if not url:
        raise RooflineError("give --url, the API base of the server, e.g. http://127.0.0.1:8000/v1")
    cfg = config_from(url, kwargs, types.parse_int_list(concurrency_text, "--concurrency", 1, 4096), sweep_rounds,
                      same_prompt)
    from roofline.progress import reporter

    progress = reporter(quiet or as_json)
    result = run_bench(cfg, progress=progress)
    payload = result.to_json()
    if json_out:
        write_json(json_out, payload, indent=1)
    if as_json:
        print_json(payload)
    else:
        from roofline.render.bench import render_bench

        echo(render_bench(result))

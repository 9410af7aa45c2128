"""roofline doctor --url URL [MODEL] [--capture FILE]"""
from __future__ import annotations

import click

from roofline.errors import RooflineError
from roofline.predict.hardware import DEFAULT_HARDWARE

from . import types
from .options import deployment_from, deployment_options, draft_inventory, no_cache_option
from .output import echo, print_json

EPILOG = ("Exit codes: 0 diagnosed; 1 nothing to diagnose (server or checkpoint unreadable), or vLLM would refuse "
          "the what-if flags; 2 bad usage; "
          "3 partial (printed, but on less than was asked for: no /metrics, other metric names, a bench that "
          "failed or a server that stopped mid-bench).")


@click.command(name="doctor", epilog=EPILOG)
@click.argument("model", required=False)
@click.option("--url", default=None, help="API base of the vLLM server, e.g. http://127.0.0.1:8000/v1.")
@click.option("--served-model", default=None, help="Served model name (default: the only one the server lists).")
@click.option("--capture", "capture_path", type=click.Path(dir_okay=False), default=None,
              help="The capture file the server's roofline plugin wrote at load time "
                   "(ROOFLINE_CAPTURE=FILE when starting vLLM): kernels, graph mode, TP, speculation.")
@click.option("--hardware", "hardware_name", default=DEFAULT_HARDWARE, show_default=True,
              help="The server's hardware, from the catalogue or a `calibrate --save` entry.")
@click.option("--bandwidth", type=types.BANDWIDTH_GBPS, default=None, help="Override the memory bandwidth, GB/s.")
@click.option("--context", type=types.CONTEXT_TOKENS, default=1024, show_default=True,
              help="Tokens in the KV cache when nothing is measured (a bench sets it from its requests).")
@click.option("--max-tokens", type=types.DECODE_TOKENS, default=128, show_default=True, help="Tokens decoded per bench request.")
@click.option("--runs", type=types.RUNS, default=3, show_default=True, help="Measured single-stream requests.")
@click.option("--warmup", type=types.WARMUP, default=1, show_default=True, help="Unmeasured requests first.")
@click.option("--timeout", "timeout_s", type=types.SECONDS, default=60.0, show_default=True,
              help="Seconds per HTTP request (and per streamed completion).")
@click.option("--no-bench", is_flag=True, help="Do not measure: diagnose from what the server reports.")
@click.option("--bench-json", type=click.Path(dir_okay=False), default=None,
              help="Do not measure: read the single-stream decode from a result file already saved (vllm bench "
                   "serve --save-result, guidellm's report, llama-benchy's JSON, roofline bench --json).")
@click.option("--json", "as_json", is_flag=True, help="Print the diagnosis as JSON (schema roofline.doctor/1).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Add a doctor section to this HTML report, or write one (with the audit of the served checkpoint).")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
@click.option("--revision", default=None, help="Hub revision of MODEL (branch, tag or commit).")
@click.option("--config-only", is_flag=True, help="Read MODEL from its config.json alone (no safetensors), as audit "
                                                  "--config-only does: offline with a cached config.")
@no_cache_option
@deployment_options
def command(model, url, served_model, capture_path, hardware_name, bandwidth, context, max_tokens, runs, warmup,
            timeout_s, no_bench, bench_json, as_json, html_path, quiet, revision, config_only, no_cache, **vllm_flags):
    """Why a running vLLM server decodes below its roof: reads what the server says about itself
    (/v1/models, /version, /metrics, and the plugin's capture file), measures single-stream decode,
    predicts what this configuration and the best configuration of the same weights reach, and
    ranks the causes with the tok/s each fix gains.

    What if: any of vLLM's serve flags given here (--kv-cache-dtype fp8, --speculative-config ...,
    --quantization fp8, -tp 2) are priced over the server's own configuration, beside it."""
    from roofline.advise.doctor import Context, diagnose
    from roofline.live.bench import BenchConfig, split_url
    from roofline.live.doctor import observe
    from roofline.predict.hardware import get_hardware
    from roofline.render.doctor import doctor_json, render_doctor

    if not url and not capture_path and not (bench_json and model):
        raise click.UsageError("give --url (the server's API base, e.g. http://127.0.0.1:8000/v1), --capture FILE, "
                               "or MODEL with --bench-json FILE")
    if bench_json and no_bench:
        raise click.UsageError("--bench-json is a measurement: it does not go with --no-bench")
    saved = None
    if bench_json:
        from roofline.live.result_files import single_stream

        from .files import load_result

        saved = single_stream(load_result(bench_json, "--bench-json"), f"--bench-json {bench_json}")
    if url:
        split_url(url)
    hardware = get_hardware(hardware_name, bandwidth)
    acceptance_given = vllm_flags.get("acceptance_rate") is not None or \
        vllm_flags.get("mean_acceptance_length") is not None
    changes, per_token = deployment_from(vllm_flags, model)
    draft = draft_inventory(changes)
    from roofline.progress import reporter

    progress = reporter(quiet or as_json)
    bench = None
    if url and not no_bench and saved is None:
        bench = BenchConfig(url=url, model=served_model, max_tokens=max_tokens, runs=runs, warmup=warmup,
                            timeout_s=timeout_s).validate()
    obs = observe(url=url, served_model=served_model, model=model, capture_path=capture_path, bench=bench,
                  context=context, timeout_s=timeout_s, progress=progress, saved=saved,
                  source={"revision": revision, "config_only": config_only, "use_cache": not no_cache})
    measured = obs.measured_tok_s
    ctx = Context(hardware=hardware, evidence=obs.evidence, kv_fp8_supported=_kv_fp8_supported(obs, hardware),
                  graphs_off_by="cudagraph_mode" if obs.engine and not obs.engine.get("enforce_eager") else
                  "enforce_eager")
    diagnosis = diagnose(obs.inventory, hardware, obs.serving, measured, ctx)
    if measured is not None:  # the one check of a measurement validate and calibrate make too
        from roofline.predict.verdict import impossible

        refused = impossible(measured, diagnosis.ceiling_tok_s, obs.serving.speculative_tokens)
        if refused and saved is not None:
            raise RooflineError(f"--bench-json {bench_json}: {refused}")
        if refused:  # a server whose tokens outrun the model it names: the diagnosis goes on without them
            obs.problems.append(f"the bench: {refused}; diagnosed without a measurement")
            obs.bench, measured = None, None
            diagnosis = diagnose(obs.inventory, hardware, obs.serving, None, ctx)
    changed = None
    if changes.spelled:
        from roofline.advise.doctor import what_if

        changed = what_if(obs.inventory, hardware, obs.serving, changes, per_token if acceptance_given else None,
                          draft=draft)
    payload = doctor_json(obs, diagnosis, hardware, what_if=changed, under_load=_under_load(obs, hardware))
    if as_json:
        print_json(payload)
    else:
        echo(render_doctor(payload))
    if html_path:
        from roofline.audit import run_audit
        from roofline.reports import update_report

        audit = run_audit(obs.inventory, obs.serving.scenario(), hardware)
        update_report(html_path, audit, doctor=payload)
        if not as_json:
            echo(f"report: {html_path}")
    for line in obs.problems:
        echo(f"partial: {line}", err=True)
    if changed is not None and changed.refusals:
        first = changed.refusals[0] + (f" (and {len(changed.refusals) - 1} more)" if len(changed.refusals) > 1 else "")
        raise RooflineError(f"what if {'  '.join(given for _, given in changes.spelled)}: vLLM refuses it: {first}")
    if obs.problems:
        raise click.exceptions.Exit(3)


def _under_load(obs, hardware) -> dict | None:
    """The server's own latency histograms beside the load model of its configuration (advise/load.py)."""
    facts = obs.facts
    if facts is None or facts.metrics is None or not facts.num_kv_blocks or not facts.block_size:
        return None
    import math

    from roofline.advise.load import server_for, server_under_load
    from roofline.predict.scheduler_config import scheduler_settings

    block = facts.block_size
    server = server_for(obs.inventory, hardware, obs.serving.step_config(obs.inventory, hardware),
                        scheduler_settings(obs.serving.deployment(), hardware), num_blocks=facts.num_kv_blocks,
                        blocks_for=lambda tokens: math.ceil(tokens / block),
                        max_model_len=facts.max_model_len or 1 << 20)
    return server_under_load(server, facts.metrics)


def _kv_fp8_supported(obs, hardware) -> bool:
    """fp8 KV needs FP8 support: a GPU with FP8 (hardware.toml tensor formats) or, on a CPU server,
    vLLM's CPU backend with AVX-512 / AMX (it refuses fp8 KV otherwise) - a CPU entry stands for the
    host the calibration ran on, so its flags are this machine's."""
    if hardware.host == "cpu":
        from roofline.predict.deployment import CPU_FP8_KV_FLAGS
        from roofline.sources.host import cpu_flags

        return bool(CPU_FP8_KV_FLAGS & cpu_flags())
    return hardware.supports("fp8")

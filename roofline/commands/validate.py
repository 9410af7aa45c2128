"""roofline validate MODEL (--measured TOKS | --url URL | --bench-json FILE)"""
from __future__ import annotations

import os

import click
from click.core import ParameterSource

from roofline.errors import RooflineError
from roofline.predict.verdict import impossible

from . import types
from .output import echo, print_json
from .bench import bench_options, config_from
from .files import load_json, load_result
from .options import no_cache_option, priced_audit, scenario_from, scenario_options


def _scenario_params() -> tuple[str, ...]:
    """Every option that sets the scenario or the deployment (refused beside --audit-json)."""
    from roofline.predict.deployment import flags

    return ("hardware_name", "bandwidth", "batch", "context", "routing", "speculative_tokens", "acceptance_rate",
            "mean_acceptance_length", "env_assignments", *(f.field for f in flags()))



@click.command(name="validate")
@click.argument("model", required=False)
@click.option("--measured", "measured_tok_s", type=types.TOK_S, default=None,
              help="Measured single-stream decode tok/s (from any benchmark).")
@click.option("--bench-json", type=click.Path(dir_okay=False), default=None,
              help="A saved result: `roofline bench --json`, `vllm bench serve --save-result`, guidellm's report "
                   "or llama-benchy's JSON (recognised by their keys).")
@bench_options
@click.option("--audit-json", type=click.Path(dir_okay=False), default=None,
              help="A saved `roofline audit --json` result instead of auditing MODEL.")
@click.option("--revision", default=None, help="Hub revision of MODEL.")
@click.option("--config-only", is_flag=True, help="Audit MODEL from config.json alone.")
@no_cache_option
@scenario_options
@click.option("--record", "record_path", default=None, type=click.Path(dir_okay=False),
              help="Validation record to append to (JSON lines). [default: $ROOFLINE_RECORD, else validation.jsonl "
                   "in the user data folder, e.g. ~/.local/share/roofline]")
@click.option("--no-record", is_flag=True, help="Do not append to the validation record.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Write an HTML report of the audit with this model's validation rows.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def command(model, measured_tok_s, bench_json, url, audit_json, revision, config_only, no_cache, record_path, no_record,
            html_path, as_json, **kwargs):
    """Set a measured decode tok/s beside the ceiling and the expected speed of MODEL for the
    same scenario: bandwidth utilisation and a verdict, with suspects when it falls short.
    The measurement comes from --measured, a live server (--url: runs `roofline bench`), or a
    saved bench result (--bench-json). Without --context, a bench's mean context is used."""
    from roofline.live.records import (
        default_record,
        append_record,
        read_records,
        record_row,
    )
    from roofline.live.validate import validate
    from roofline.render.validate import render_validation

    ctx = click.get_current_context()
    sources = [s for s in (measured_tok_s is not None, url, bench_json) if s]
    if len(sources) != 1:
        raise RooflineError("give exactly one of --measured TOKS, --url URL or --bench-json FILE")
    if not model and not audit_json:
        raise click.UsageError("give MODEL (a folder or org/name) or --audit-json FILE")
    if model and audit_json:
        raise RooflineError("give MODEL or --audit-json, not both")
    explicit = {name for name in _scenario_params()
                if name in ctx.params and ctx.get_parameter_source(name) != ParameterSource.DEFAULT}
    if audit_json and explicit:
        raise RooflineError(f"--audit-json carries its own scenario and hardware; drop "
                            f"{', '.join('--' + n.replace('_name', '').replace('_', '-') for n in sorted(explicit))}")

    bench = None
    if url:
        from roofline.live.bench import run_bench

        cfg = config_from(url, kwargs)
        from roofline.progress import reporter

        progress = reporter(as_json)
        bench = run_bench(cfg, progress=progress).to_json()
        from roofline.untrusted import redact_url

        measured_by = f"roofline bench {redact_url(url)}"
    elif bench_json:
        from roofline.live.result_files import checked_measurement, open_loop_runs

        where = f"--bench-json {bench_json}"
        data = load_result(bench_json, "--bench-json")
        runs = open_loop_runs(data, where)
        if runs:
            if not model:
                raise click.UsageError("an open-loop result is validated against MODEL's load model: give MODEL")
            return _validate_load(model, runs, bench_json, kwargs, revision, config_only, no_cache, as_json)
        bench, tool = checked_measurement(data, where)
        measured_by = f"{tool or 'roofline bench'} (saved: {os.path.basename(bench_json)})"
        streams = bench.get("concurrency")
        if isinstance(streams, int) and streams > 1 and "batch" not in explicit:
            kwargs["batch"] = streams  # the file's figure is of that many streams together
    else:
        for name in ("served_model", "api", "prompt", "max_tokens", "runs", "warmup", "timeout_s", "no_ignore_eos"):
            kwargs.pop(name, None)
        if measured_tok_s <= 0:
            raise RooflineError("--measured must be a positive tok/s")
        measured_by = "user (--measured)"
    if bench is not None:
        median = (bench.get("decode_tok_s") or {}).get("median")
        if not isinstance(median, (int, float)) or median <= 0:
            raise RooflineError("the bench result has no measured decode tok/s")
        measured_tok_s = float(median)
        if "context" not in explicit and isinstance(bench.get("mean_context"), int):
            kwargs["context"] = bench["mean_context"]  # the scenario the server really decoded

    if audit_json:
        audit = load_json(audit_json, "--audit-json")
        for name in _scenario_params():
            kwargs.pop(name, None)
    else:
        from roofline.audit import load_inventory

        scenario, hardware, deployment = scenario_from(kwargs, model)
        inventory = load_inventory(model, revision=revision, config_only=config_only, use_cache=not no_cache)
        audited = priced_audit(inventory, scenario, hardware, deployment, use_cache=not no_cache)
        inventory, audit = audited.inventory, audited.to_json()

    result = validate(audit, measured_tok_s)
    drafts = int((audit.get("scenario") or {}).get("speculative_tokens") or 0)
    refused = impossible(measured_tok_s, result.ceiling_tok_s, drafts)
    if refused:  # even every draft token accepted cannot read the weights fewer times than this
        raise RooflineError(refused + " (give --batch)")
    curve, knee = None, None
    if bench is not None and bench.get("sweep") and not audit_json:
        curve, knee = _curve(inventory, hardware, scenario, bench)
    row = record_row(result, measured_by=measured_by, bench=bench, audit=audit)
    recorded, not_recorded = None, None
    if result.verdict == "above_ceiling":  # a finding to report, never evidence for plan's ties
        not_recorded = "above the ceiling: kept out of the validation record plan reads"
    elif not no_record:
        recorded = append_record(record_path or default_record(), row, create_folder=record_path is None)
    if html_path:
        from roofline.reports import update_report

        if os.path.isfile(html_path):
            rows = [row]  # the report already holds the earlier rows
        else:
            rows = [row]
            if recorded:
                records = read_records(recorded)
                if records.unreadable:
                    echo(f"note: {records.note(recorded)}", err=True)
                rows = [r for r in records.rows if r.get("model") == result.model] or [row]
        update_report(html_path, audit, validation=rows)
    if as_json:
        payload = result.to_json() | {"record": row, "recorded_in": recorded, "not_recorded": not_recorded}
        if bench is not None:
            payload["bench"] = bench
        if curve is not None:
            payload["curve"] = curve
            payload["knee_concurrency"] = knee
        print_json(payload)
        return
    echo(render_validation(result))
    if curve:
        from roofline.render.validate import render_curve

        echo(render_curve(curve, knee))
    if bench is not None and bench.get("notes"):
        for note in bench["notes"]:
            echo(f"bench note: {note}")
    if recorded:
        echo(f"recorded in {recorded}")
    if not_recorded and not no_record:
        echo(f"not recorded: {not_recorded}")
    if html_path:
        echo(f"report: {html_path}")


def _validate_load(model, runs, bench_json, kwargs, revision, config_only, no_cache, as_json) -> None:
    """An open-loop (or burst) result file beside the load model: each run's requests (replayed at their own start
    times where the file has them, else arriving at its rate as its tool sent them) through the deployment the
    options say, its TTFT, inter-token latency, time per output token and end-to-end latency beside the file's."""
    from roofline.advise.deploy import check
    from roofline.advise.load import compare_run, run_workload, runs_server, serve
    from roofline.audit import load_inventory
    from roofline.render.validate import render_load_validation

    scenario, hardware, deployment = scenario_from(kwargs, model)
    inventory = load_inventory(model, revision=revision, config_only=config_only, use_cache=not no_cache)
    check(deployment, inventory, hardware)
    server = runs_server(inventory, deployment, hardware, runs, context=scenario.context,
                         acceptance=scenario.acceptance_rate, routing=scenario.routing)
    rows = [compare_run(run, serve(server, run_workload(run))) for run in runs]
    payload = {"schema": "roofline.validate_load/1", "model": model, "hardware": hardware.key, "file": bench_json,
               "deployment": deployment.to_json(), "runs": rows,
               "first_token_alone": server.first_token_json(runs[0].prompt_len)}
    if as_json:
        print_json(payload)
    else:
        echo(render_load_validation(payload))


def _curve(inventory, hardware, scenario, bench: dict) -> tuple[list[dict], int | None]:
    """The bench's concurrency sweep beside the predicted decode curve at the bench's own context,
    with the routing its prompts imply (distinct: uniform; --same-prompt: shared)."""
    from roofline.advise.capacity import decode_curve
    from roofline.live.validate import compare_curve

    levels = [level["concurrency"] for level in bench["sweep"] if isinstance(level.get("concurrency"), int)]
    routing = "shared" if (bench.get("config") or {}).get("same_prompt") else "uniform"
    points, knee, *_ = decode_curve(inventory, hardware, levels, scenario.context, scenario.kv_cache_dtype, routing)
    return compare_curve([p.to_json() for p in points], bench["sweep"]), knee

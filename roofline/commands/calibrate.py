"""roofline calibrate"""
from __future__ import annotations

import click

from roofline.errors import RooflineError

from roofline.predict.hardware import DEFAULT_HARDWARE

from . import types
from .options import deployment_from, deployment_options, quiet_option
from .output import echo, print_json


@click.command(name="calibrate")
@click.argument("models", nargs=-1, metavar="[MODEL ...]")
@click.option("--engine", type=click.Choice(["torch", "vllm"]), default="torch", show_default=True,
              help="torch: bandwidth (and launch costs on a GPU) from plain torch kernels. vllm: also run the "
                   "installed vLLM offline with dummy weights on MODELs (bundled shapes, config folders or hub ids; "
                   "default: qwen3-0.6b on a CPU; on a GPU a dense, a MoE and a hybrid model: qwen3-8b, "
                   "qwen3-30b-a3b, nemotron-3-nano, each where it fits) and fit the step model's coefficients to its "
                   "decode steps, a floor per family (minutes, no download).")
@click.option("--batches", "batches_text", default="1,4", show_default=True,
              help="--engine vllm: concurrent sequences per run, comma-separated (1-1024).")
@click.option("--context", type=types.CONTEXT_TOKENS, default=256, show_default=True,
              help="--engine vllm: prompt tokens per sequence.")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:N, or auto (a GPU if torch sees one).")
@click.option("--size-mb", "buffer_mb", type=types.BUFFER_MIB, default=512, show_default=True,
              help="MiB per buffer; must be far larger than the last-level cache.")
@click.option("--repetitions", type=types.RUNS, default=10, show_default=True, help="Timed repetitions per kernel.")
@click.option("--threads", type=types.THREADS, default=None, help="CPU threads for torch (default: torch's choice).")
@click.option("--save", "save_key", default=None, metavar="KEY",
              help="Save the result as hardware entry KEY, usable as --hardware KEY.")
@click.option("--hardware-file", type=click.Path(dir_okay=False), default=None,
              help="File to save into (default: $ROOFLINE_HARDWARE_FILE or ~/.config/roofline/hardware.toml).")
@click.option("--name", default=None, help="Display name of the saved entry.")
@click.option("--efficiency", type=types.EFFICIENCY, default=0.75, show_default=True,
              help="Saved entry: prior share of the roof a decode engine reaches on this host.")
@click.option("--from-results", "results", multiple=True, metavar="MODEL=FILE",
              help="Measure nothing: fit --hardware's efficiency to result files you already have (vllm bench serve "
                   "--save-result, guidellm's report, llama-benchy's JSON, roofline bench --json), each with the "
                   "model it measured; repeat for several. vLLM's flags below say how they were served.")
@click.option("--hardware", "hardware_name", default=DEFAULT_HARDWARE, show_default=True,
              help="--from-results: the catalogue entry the files were measured on (the fitted entry derives from it).")
@click.option("--config-only", is_flag=True,
              help="--from-results: read each MODEL from its config.json alone (no safetensors), as audit "
                   "--config-only does.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@quiet_option
@deployment_options
def command(models, engine, batches_text, context, device, buffer_mb, repetitions, threads, save_key, hardware_file,
            name, efficiency, results, hardware_name, config_only, as_json, **vllm_flags):
    """Measure this host's achievable memory bandwidth (large copy and GEMV), so a CPU or GPU
    host can be validated against its own roof. The roof is the best kernel's best repetition.
    With --engine vllm, also time the installed vLLM's decode and fit the step model to it."""
    from roofline.live.calibrate import check_key, check_name, hardware_entry, measure, save_entry

    if config_only and not results:
        raise RooflineError("--config-only applies to --from-results (the models of the files)")
    if results:
        if models or engine != "torch":
            raise RooflineError("--from-results measures nothing: it takes no MODEL arguments or --engine (give each "
                                "model with its file, MODEL=FILE)")
        _from_results(results, hardware_name, vllm_flags, save_key=save_key, hardware_file=hardware_file, name=name,
                      as_json=as_json, config_only=config_only)
        return
    given = [f for f, v in vllm_flags.items() if v not in (None, False, 0, ())]
    if given:
        raise RooflineError("vLLM's serve flags describe how result files were served: give them with --from-results")
    if models and engine != "vllm":
        raise RooflineError("MODEL arguments are for --engine vllm")
    batches = types.parse_int_list(batches_text, "--batches", 1, 1024)
    if context > 32768:
        raise RooflineError("--context: at most 32768 tokens for a calibration run")

    if not 0 < efficiency <= 1:
        raise RooflineError("--efficiency must be in (0, 1]")
    if hardware_file and not save_key:
        raise RooflineError("--hardware-file needs --save KEY")
    if save_key:
        save_key = check_key(save_key)
    check_name(name)
    from roofline.progress import shown as progress_shown

    # each kernel as it is timed, on stderr: a terminal only, never with --quiet (or --json's stdout)
    progress = (lambda message: echo(message, err=True)) if progress_shown() else None
    if engine == "vllm":
        from roofline.live.engine_calibrate import vllm_version

        vllm_version()  # one clear line before minutes of measuring, where there is no vLLM
    calibration = measure(device=device, buffer_mb=buffer_mb, repetitions=repetitions, threads=threads,
                          progress=progress)
    payload = calibration.to_json()
    entry = hardware_entry(calibration, name=name, efficiency=efficiency)
    engine_result = None
    if engine == "vllm":
        from roofline.live.engine_calibrate import calibrate_engine, engine_fields
        from roofline.predict.hardware import Hardware

        measured = Hardware(key=save_key or "calibrating", **(entry | {"aliases": ()}))
        engine_result = calibrate_engine(measured, "cuda" if calibration.device.startswith("cuda") else "cpu",
                                         tuple(models), tuple(batches), context, progress)
        entry |= engine_fields(engine_result, entry.get("bandwidth_gbps"))
        payload["engine"] = engine_result.to_json()
    saved = None
    if save_key:
        saved = save_entry(save_key, entry, hardware_file)
        payload["saved"] = {"key": save_key, "file": saved}
    if as_json:
        print_json(payload)
        return
    echo(f"{calibration.device_name} ({calibration.device}"
               + (f", {calibration.threads} threads" if calibration.threads else "") + ")")
    echo(f"{'kernel':12}{'best GB/s':>12}{'median GB/s':>14}")
    for k in calibration.kernels:
        echo(f"{k.kernel:12}{k.best_gbps:>12.2f}{k.median_gbps:>14.2f}")
    echo(f"achievable bandwidth: {calibration.bandwidth_gbps:.2f} GB/s ({calibration.best.kernel})")
    if calibration.gemm_tflops:
        echo(f"compute roof: {calibration.gemm_tflops['bf16']:.3f} TFLOP/s dense bf16 GEMM")
    if calibration.launch is not None:
        launch = calibration.launch
        echo(f"{'launch case':12}{'kernels':>9}{'eager us/k':>12}{'graph us/k':>12}{'floor us/k':>12}")
        for c in launch.cases:
            echo(f"{c.name:12}{c.kernels_per_call:>9.1f}{c.eager_us_per_kernel:>12.2f}"
                       f"{c.graph_us_per_kernel:>12.2f}{c.floor_us_per_kernel:>12.2f}")
        echo(f"host launch cost {launch.host_us_per_kernel:.2f} us/kernel, CUDA-graph floor "
                   f"{launch.graph_floor_us_per_kernel:.2f} us/kernel (used by audit / plan / kernels "
                   f"with --hardware of the saved entry)")
    if engine_result is not None:
        _echo_engine(engine_result)
    for note in calibration.notes:
        echo(f"note: {note}")
    if saved:
        echo(f"saved as hardware '{save_key}' in {saved}: use --hardware {save_key}"
                   + (f" (with ROOFLINE_HARDWARE_FILE={saved})" if hardware_file else ""))


def _echo_engine(result) -> None:
    from roofline.live.engine_calibrate import held_python
    from roofline.predict.bands import spread

    echo(f"vLLM {result.vllm_version} on {result.device_name}: decode steps measured and fitted")
    echo(f"  {'model':20}{'family':8}{'mode':8}{'batch':>6}{'context':>9}{'measured ms':>13}{'fitted ms':>11}"
         f"{'error':>8}{'left out':>10}")
    for i, row in enumerate(result.rows()):
        fitted = result.fit.predict_ms(row)
        left_out = f"{100 * result.left_out[i]:>+9.0f}%" if i in result.left_out else f"{'-':>10}"
        echo(f"  {row.case[:20]:20}{row.family:8}{row.mode:8}{row.batch:>6}{row.context:>9}{row.measured_ms:>13.2f}"
             f"{fitted:>11.2f}{100 * (fitted / row.measured_ms - 1):>+7.0f}%{left_out}")
    fit = result.fit
    text = f"  efficiency {fit.efficiency:.3f} of the measured bandwidth"
    if result.device == "cuda":
        text += f", graph floor {fit.floor_us:.2f} us per kernel"
        if fit.family_floor_us:
            text += " (" + ", ".join(f"{k} {v:.2f}" for k, v in fit.family_floor_us.items()) + ")"
        if fit.host_us is not None:
            text += f", host {fit.host_us:.1f} us per eager kernel"
    echo(text)
    if fit.host_us is not None:
        echo("  eager Python per layer beyond its launches, held at kernels.toml's (the host's cost above carries "
             "it): " + ", ".join(f"{kind} {value:g}" for kind, value in held_python(fit).items()) + " launches' worth")
    echo("  the entry's own bands (commands print these with --hardware KEY):")
    for band in result.bands():
        echo(f"    {band.family:7}{band.mode:7}{spread(band.band)} (mean {100 * band.mean_abs:.0f}%, max "
             f"{100 * band.max_abs:.0f}%, {band.points} points, {band.basis}: {', '.join(band.models)}; "
             f"{band.band_basis})")
    echo("  never measured: " + "; ".join(result.unmeasured())
         + " (a family or mode not run takes the nearest validated class's band, widened)")


def _load_point(model: str, path: str, run, where: str):
    """An open-loop run as a fit's point: its decode rate 1 / TPOT mean, the mean number of requests in flight
    (throughput x mean end-to-end latency, Little's law), the context of its mean request."""
    from roofline.advise.result_fit import ResultPoint

    tpot = (run.measured.get("tpot") or {}).get("mean_ms")
    e2e = (run.measured.get("e2e") or {}).get("mean_ms")
    if not tpot:
        raise RooflineError(f"{where}: run {run.label} has no mean time per output token to fit")
    in_flight = max(1, round(run.throughput * e2e / 1e3)) if run.throughput and e2e else 1
    return ResultPoint(model, f"{run.tool} {path} ({run.label})", in_flight, run.prompt_len + run.output_len // 2,
                       1e3 / tpot, run=run)


def _from_results(results, hardware_name, vllm_flags, *, save_key, hardware_file, name, as_json,
                  config_only: bool = False) -> None:
    """calibrate --from-results: the files' levels, the fit, the entry (advise/result_fit)."""
    from roofline.advise.result_fit import ResultPoint, fit_results, fitted_entry
    from roofline.audit import load_inventory
    from roofline.live.calibrate import check_key, check_name, save_entry
    from roofline.live.result_files import measured_levels, open_loop_runs
    from roofline.predict.hardware import entry_of, get_hardware

    from .files import load_result

    if hardware_file and not save_key:
        raise RooflineError("--hardware-file needs --save KEY")
    save_key = check_key(save_key) if save_key else None
    check_name(name)
    hardware = get_hardware(hardware_name)
    deployment, per_token = deployment_from(vllm_flags)
    points, inventories, sources = [], {}, []
    for given in results:
        model, sep, path = given.partition("=")
        if not sep or not model or not path:
            raise RooflineError(f"--from-results {given!r}: give MODEL=FILE (the model the file measured, then the file)")
        where = f"--from-results {path}"
        data = load_result(path, "--from-results")
        if model not in inventories:
            inventories[model] = load_inventory(model, config_only=config_only)
        runs = open_loop_runs(data, where)
        if runs:  # open loop: each run's requests through the load model, its TPOT against the file's
            points += [_load_point(model, path, run, where) for run in runs]
            sources.append(f"{runs[0].tool} (open loop): {path.rsplit('/', 1)[-1]}")
            continue
        tool, levels = measured_levels(data, where)
        sources.append(f"{tool}: {path.rsplit('/', 1)[-1]}")
        points += [ResultPoint(model, f"{tool} {path}", streams, ctx, rate) for streams, ctx, rate in levels]
    fit = fit_results(points, inventories, hardware, deployment, per_token)
    entry = fitted_entry(fit, entry_of(hardware), name=name, sources=sources)
    payload = {"schema": "roofline.calibrate_results/1", **fit.to_json(), "deployment": deployment.to_json(),
               "entry": entry, "saved": None}
    if save_key:
        payload["saved"] = {"key": save_key, "file": save_entry(save_key, entry, hardware_file)}
    if as_json:
        print_json(payload)
        return
    echo(f"{hardware.name}: efficiency fitted to {len(points)} measured levels "
         f"({', '.join(sorted(inventories))})")
    echo(f"  {'model':28}{'streams':>8}{'context':>9}{'measured':>10}{'fitted':>9}{'error':>8}{'left out':>10}")
    for point in payload["points"]:
        left = f"{100 * point['left_out_error']:+9.0f}%" if point["left_out_error"] is not None else f"{'-':>10}"
        shown = point["model"].rstrip("/").rsplit("/", 1)[-1]  # a folder's name, never a path cut from the left
        shown = shown if len(shown) <= 28 else shown[:27] + "…"
        echo(f"  {shown:28}{point['streams']:>8}{point['context']:>9}{point['measured_tok_s']:>10.1f}"
             f"{point['predicted_tok_s']:>9.1f}{100 * point['error']:>+7.0f}%{left}")
    echo(f"  efficiency {fit.efficiency:.3f} of {hardware.bandwidth_gbps:g} GB/s (the entry's was {hardware.efficiency:g}); "
         f"mean |error| {100 * fit.mean_abs_error:.1f}% in sample"
         + (f", {100 * fit.left_out_mean_abs_error:.1f}% leaving each model out"
            if fit.left_out_mean_abs_error is not None else ""))
    for note in fit.notes:
        echo(f"  note: {note}")
    if payload["saved"]:
        echo(f"saved as hardware '{save_key}' in {payload['saved']['file']}: use --hardware {save_key}"
             + (f" (with ROOFLINE_HARDWARE_FILE={payload['saved']['file']})" if hardware_file else ""))

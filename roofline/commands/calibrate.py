"""roofline calibrate"""
from __future__ import annotations

import click

from roofline.errors import RooflineError

from . import types
from .options import quiet_option
from .output import echo, print_json


@click.command(name="calibrate")
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
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@quiet_option
def command(device, buffer_mb, repetitions, threads, save_key, hardware_file, name, efficiency, as_json):
    """Measure this host's achievable memory bandwidth (large copy and GEMV), so a CPU or GPU
    host can be validated against its own roof. The roof is the best kernel's best repetition."""
    from roofline.live.calibrate import check_key, check_name, hardware_entry, measure, save_entry

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
    calibration = measure(device=device, buffer_mb=buffer_mb, repetitions=repetitions, threads=threads,
                          progress=progress)
    payload = calibration.to_json()
    saved = None
    if save_key:
        entry = hardware_entry(calibration, name=name, efficiency=efficiency)
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
    for note in calibration.notes:
        echo(f"note: {note}")
    if saved:
        echo(f"saved as hardware '{save_key}' in {saved}: use --hardware {save_key}"
                   + (f" (with ROOFLINE_HARDWARE_FILE={saved})" if hardware_file else ""))

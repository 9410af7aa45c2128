"""roofline capture MODEL [-- vllm engine args...]"""
from __future__ import annotations

import click

from . import types
from .options import quiet_option
from .output import echo


@click.command(name="capture", context_settings={"ignore_unknown_options": True})
@click.argument("model")
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED)
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), default="capture.json",
              show_default=True, help="Capture JSON to write.")
@click.option("--timeout", type=types.SECONDS, default=1800.0, show_default=True,
              help="Seconds to wait for vLLM to load the model.")
@click.option("--tp", type=types.TP_RANKS, default=None,
              help="Tensor-parallel ranks (vLLM's --tensor-parallel-size); one record per rank, merged.")
@click.option("-v", "--verbose", is_flag=True, help="Stream vLLM's output.")
@quiet_option
def command(model, vllm_args, out, timeout, tp, verbose):
    """Load MODEL in vLLM (offline engine) with the roofline plugin, record what every worker
    (each TP / PP rank) loaded: per module the quant method, scheme, chosen kernels and every
    tensor's dtype, shape and bytes; then shut vLLM down and write one JSON.

    Engine arguments after `--` go to vLLM unchanged, e.g.

        roofline capture Qwen/Qwen3-8B --tp 2 -- --max-model-len 4096
        roofline capture Qwen/Qwen3-8B --tp 2 -- --distributed-executor-backend ray   # on a Ray cluster

    Then: roofline audit --from-vllm capture.json
    """
    from roofline.errors import RooflineError
    from roofline.live.capture import run_capture

    vllm_args = list(vllm_args)
    if tp is not None:
        if any(a == "--tensor-parallel-size" or a.startswith(("--tensor-parallel-size=", "-tp")) for a in vllm_args):
            raise RooflineError("give the TP size once: --tp or vLLM's --tensor-parallel-size after --")
        vllm_args += ["--tensor-parallel-size", str(tp)]
    from contextlib import nullcontext

    from roofline.progress import step

    # vLLM's own output is hidden unless --verbose: say what is happening while it loads (minutes)
    with nullcontext() if verbose else step(f"capture: vLLM loads {model} with the roofline plugin "
                                            "(its log: --verbose)"):
        result = run_capture(model, vllm_args, out, timeout=timeout, verbose=verbose)
    echo(f"wrote {result.path}: {result.world_size} rank(s), {result.modules} modules "
               f"({result.seconds:.0f} s)")

"""Fit GB10's single-stream efficiency (roofline/data/hardware.toml [gb10].efficiency) and the
per-backend relative efficiencies (roofline/data/rules.toml [[backend]]) to the published GB10
measurements (roofline/data/measurements.toml) through the one step model, and print every
measured row beside what the step model now predicts for it.

    .venv/bin/python benchmarks/calibrate_gb10.py [--context 1024 ...]

The checkpoints (RedHatAI/Qwen3-8B-FP8-dynamic, RedHatAI/Qwen3-8B-NVFP4, ELVISIO/Qwen3-8B-NVFP4A16)
are Qwen/Qwen3-8B quantized with ignore lm_head, so their inventories are the Qwen3-8B reference
config simulated under the "default" recipe (lm_head kept BF16). The KV cache was fp8; the measured
context is not recorded (the table shows how little it moves the fit).

The fit: the step model prices each graph-mode row with efficiency and relative efficiency 1, which
splits its step into the bytes' time at the datasheet bandwidth (M) and the rest (launch floor,
compute: O). A row measured at t seconds per token reaches the share s = M / (t - O) of the
bandwidth; the hardware's efficiency is the mean share, each backend's relative efficiency its
share over that mean. The eager row is held out of the fit: it checks the host launch cost.
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from statistics import mean

from roofline.advise.simulate import get_recipe, simulate
from roofline.data import load_table
from roofline.predict.backends import backends_for
from roofline.predict.hardware import get_hardware
from roofline.predict.step import StepConfig, price_step
from roofline.sources.config import load_config_only

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tests" / "reference_configs" / "Qwen__Qwen3-8B"
HYBRID = ROOT / "examples" / "Qwen3.6-35B-A3B-NVFP4"
ROWS = [r for r in load_table("measurements")["measured"] if r["hardware"] == "gb10"]


def backend_of(row: dict, hardware):
    return next(b for b in backends_for(row["format"], hardware) if b.name == row["backend"])


def fit(base, hardware, context: int) -> tuple[float, dict[str, float]]:
    shares = {}
    neutral = replace(hardware, efficiency=1.0)
    for row in ROWS:
        if not row.get("graphs", True):
            continue
        backend = replace(backend_of(row, hardware), relative_efficiency=1.0)
        step = price_step(simulate(base, row["format"], get_recipe("default")), neutral,
                          StepConfig(context=context, kv_cache_dtype="fp8", backend=backend))
        b = step.breakdown()
        memory, rest = b.memory_time_s, b.seconds - b.memory_s
        shares[row["backend"]] = memory / (1 / row["tok_s"] - rest)
    efficiency = mean(shares.values())
    return efficiency, {name: share / efficiency for name, share in shares.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, nargs="*", default=[256, 1024, 4096])
    args = parser.parse_args()
    hardware = get_hardware("gb10")
    base = load_config_only(str(CONFIG))
    print("fit through the step model (graph-mode rows):")
    for context in args.context:
        efficiency, relative = fit(base, hardware, context)
        print(f"  context {context:>5}: efficiency {efficiency:.3f}   "
              + "   ".join(f"{name} {value:.3f}" for name, value in relative.items()))
    print(f"\nstored: efficiency {hardware.efficiency:.3f}; predictions with the stored tables, context 1024:")
    print(f"  {'checkpoint':34} {'path':32} {'mode':6} {'measured':>8} {'predicted':>9} {'error':>7}")
    for row in ROWS:
        graphs = row.get("graphs", True)
        step = price_step(simulate(base, row["format"], get_recipe("default")), hardware,
                          StepConfig(context=1024, kv_cache_dtype="fp8", backend=backend_of(row, hardware),
                                     graphs=graphs))
        print(f"  {row['checkpoint']:34} {row['backend']:32} {'graphs' if graphs else 'eager':6} "
              f"{row['tok_s']:8.2f} {step.tok_s:9.2f} {100 * (step.tok_s / row['tok_s'] - 1):+6.1f}%")
    print("\nCUDA-graph benefit (graph tok/s over eager), context 1024:")
    hybrid = load_config_only(str(HYBRID))
    dense = simulate(base, "nvfp4-w4a4", get_recipe("default"))
    for label, inventory in (("hybrid nvidia/Qwen3.6-35B-A3B-NVFP4 (reported ~2.9x: -65% eager)", hybrid),
                             ("dense Qwen3-8B NVFP4 W4A4 (measured 38.59 / 39.62 = 0.97x)", dense)):
        step = price_step(inventory, hardware, StepConfig(context=1024, kv_cache_dtype="fp8"))
        print(f"  {label}: {step.graph_tok_s:.1f} vs {step.eager_tok_s:.1f} tok/s = {step.graph_benefit:.2f}x")


if __name__ == "__main__":
    main()

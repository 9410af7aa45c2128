"""Recompute the GB10 single-stream efficiency (roofline/data/hardware.toml [gb10].efficiency)
and the per-backend relative efficiencies (roofline/data/rules.toml [[backend]]) from the
measurements of BRIEF §7 and roofline's own config-only bytes/token of those checkpoints.

    .venv/bin/python benchmarks/calibrate_gb10.py [--context 1024]

The checkpoints (RedHatAI/Qwen3-8B-FP8-dynamic, RedHatAI/Qwen3-8B-NVFP4, ELVISIO/Qwen3-8B-NVFP4A16)
are Qwen/Qwen3-8B quantized with ignore lm_head, so their inventories are the Qwen3-8B
reference config simulated under the "default" recipe (lm_head kept BF16). The KV cache was
fp8. The measured context is not recorded; the table shows how little it moves the result.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from statistics import mean

from roofline.advise.simulate import get_recipe, simulate
from roofline.data import load_table
from roofline.predict.hardware import get_hardware
from roofline.predict.traffic import Scenario, compute_traffic
from roofline.sources.config import load_config_only

CONFIG = Path(__file__).resolve().parent.parent / "tests" / "reference_configs" / "Qwen__Qwen3-8B"

# BRIEF §7: GB10, single stream, kv fp8 (roofline/data/measurements.toml, the one copy)
MEASURED = [(r["checkpoint"] + ("" if r.get("graphs", True) else " (eager)"), r["format"],
             r["backend"] if r.get("graphs", True) else "(eager, not a backend)", r["tok_s"])
            for r in load_table("measurements")["measured"] if r["hardware"] == "gb10"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, nargs="*", default=[256, 1024, 4096])
    args = parser.parse_args()
    hardware = get_hardware("gb10")
    base = load_config_only(str(CONFIG))
    recipe = get_recipe("default")
    print(f"{'context':>7}  {'checkpoint':34} {'backend':32} {'GB/token':>8} {'ceiling':>8} {'measured':>8} {'share':>6}")
    for context in args.context:
        shares = {}
        for name, fmt, backend, tok_s in MEASURED:
            traffic = compute_traffic(simulate(base, fmt, recipe), Scenario(context=context, kv_cache_dtype="fp8"))
            ceiling = hardware.bandwidth_gbps * 1e9 / traffic.bytes_per_token
            shares[(name, backend)] = tok_s / ceiling
            print(f"{context:>7}  {name:34} {backend:32} {traffic.bytes_per_token / 1e9:8.3f} {ceiling:8.2f} "
                  f"{tok_s:8.2f} {tok_s / ceiling:6.3f}")
        graph_paths = {k: v for k, v in shares.items() if "eager" not in k[1]}
        efficiency = mean(graph_paths.values())
        print(f"{context:>7}  efficiency (mean of the graph-mode paths) = {efficiency:.3f}"
              f"   stored: {hardware.efficiency:.3f}")
        for (name, backend), share in graph_paths.items():
            print(f"{'':>7}    relative_efficiency {backend:32} = {share / efficiency:.3f}")
        print()


if __name__ == "__main__":
    main()

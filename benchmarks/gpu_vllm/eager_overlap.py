"""How much an eager step loses where the host's launches take about as long as the GPU's kernels: launch.toml
[eager_overlap], from real vLLM on the H200 (benchmarks/results/vllm_h200_eager_overlap; RESULTS-gpu.md, 2026-11-29
fifth and sixth).

vLLM launches eager kernels without waiting, so the step model prices an eager step at the longer of the GPU's time
and the host's launches (predict/step.stage_seconds). Measured with layers whose weights take the GPU about as long
to read as the host takes to launch their kernels (Llama-3.1-70B's shape cut to 8 and 16 layers, and at 8 layers
with its MLP widened to 45,056, 65,536 and 98,304: no public model, a synthetic shape for the ratio), eager and
CUDA graphs on the same machine start, the eager step comes out longer than the graph step by a loss that grows as
the two sides near each other. Here each model's loss is the mean over its eager runs and batches of eager / graph
- 1 (the median of each run's timed generations); its share is the host's priced launches over the GPU's priced
step (kernels.toml's eager counts at the H200 host's cost per launch). Models whose shares lie within 0.03 are one
point. Below the lowest share the anchor: a dense 8B in NVFP4 on a DGX Spark whose eager step was measured no
slower than its graph step (roofline/data/measurements.toml), its share priced with GB10's own figures.

    .venv/bin/python benchmarks/gpu_vllm/eager_overlap.py            # the points
    .venv/bin/python benchmarks/gpu_vllm/eager_overlap.py --table    # and write launch.toml [eager_overlap]
    .venv/bin/python benchmarks/gpu_vllm/eager_overlap.py --check    # exit 1 when launch.toml differs
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from roofline.data import load_table  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "vllm_h200_eager_overlap"
LAUNCH = REPO / "roofline" / "data" / "launch.toml"
# each model's eager runs, and the graph run of the same machine start it is set against
PAIRS = {"Llama-3.1-70B-8layers": (("l70-8l-eager-1129f", "l70-8l-eager-1129g"), "l70-8l-graphs-1129f"),
         "Llama-3.1-70B-16layers": (("l70-16l-eager-1129f", "l70-16l-eager-1129g"), "l70-16l-graphs-1129g"),
         "Llama-3.1-70B-8layers-mlp45056": (("l70m45-eager-1129h",), "l70m45-graphs-1129h"),
         "Llama-3.1-70B-8layers-mlp65536": (("l70m64-eager-1129h",), "l70m64-graphs-1129h"),
         "Llama-3.1-70B-8layers-mlp98304": (("l70m96-eager-1129h",), "l70m96-graphs-1129h")}
GROUP = 0.03  # shares closer than this are one point (the two depths of the 70B shape)
ANCHOR = ("RedHatAI/Qwen3-8B-NVFP4", "NVFP4 W4A4 FlashInfer CUTLASS")  # measurements.toml's eager / graph pair


def _steps(case: str) -> dict[int, float]:
    result = json.loads((RESULTS / f"{case}.json").read_text())
    return {d["batch"]: d["step_ms"] for d in result["decode"]}


def host_share(inventory, hardware, **config) -> float:
    """The host's priced eager launches over the GPU's priced step, at batch 1 (what the factor is read at)."""
    from roofline.predict.step import StepConfig, eager_totals, price_step

    step = price_step(inventory, hardware, StepConfig(**config))
    device, host = eager_totals(step.main.segments)
    return host / device


def measured_points() -> list[dict]:
    from roofline.audit import load_inventory
    from roofline.predict.hardware import get_hardware

    points = []
    for config, (eager_cases, graph_case) in PAIRS.items():
        graph = _steps(graph_case)
        losses = [step / graph[batch] - 1 for case in eager_cases for batch, step in _steps(case).items()]
        share = host_share(load_inventory(str(REPO / "benchmarks" / "gpu_vllm" / "configs" / config)),
                           get_hardware("h200"), batch=1, context=256)
        points.append({"model": config, "share": share, "loss": statistics.mean(losses),
                       "losses": losses, "runs": [*eager_cases, graph_case]})
    return points


def anchor_point() -> dict:
    """The GB10 dense seed: eager and graphs measured alike (its loss none: eager ran faster, the host's noise)."""
    from roofline.predict.hardware import get_hardware
    from roofline.sources.config import inventory_from_config

    rows = {r["graphs"]: r["tok_s"] for r in load_table("measurements")["measured"]
            if (r["checkpoint"], r["backend"]) == ANCHOR and "graphs" in r}
    config = json.loads((REPO / "tests" / "reference_configs" / "Qwen__Qwen3-8B" / "config.json").read_text())
    inventory = inventory_from_config("Qwen3-8B-NVFP4", config, {
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}})
    share = host_share(inventory, get_hardware("gb10"), batch=1, context=1024, kv_cache_dtype="fp8")
    return {"model": ANCHOR[0] + " on GB10", "share": share, "loss": max(0.0, rows[True] / rows[False] - 1),
            "losses": [rows[True] / rows[False] - 1], "runs": ["roofline/data/measurements.toml"]}


def table_points(points: list[dict]) -> list[list[float]]:
    """[share, loss] pairs: points within GROUP of each other averaged, sorted by share."""
    groups: list[list[dict]] = []
    for point in sorted(points, key=lambda p: p["share"]):
        if groups and point["share"] - groups[-1][0]["share"] < GROUP:
            groups[-1].append(point)
        else:
            groups.append([point])
    return [[round(statistics.mean(p["share"] for p in g), 2), round(statistics.mean(p["loss"] for p in g), 3)]
            for g in groups]


def source(points: list[dict]) -> str:
    measured = "; ".join(f"{p['model']} at {p['share']:.2f}: {100 * p['loss']:+.0f}% "
                         f"({', '.join(f'{100 * x:+.0f}%' for x in p['losses'])})" for p in points)
    return ("eager step over the graph step of the same machine start, less 1, the mean over each model's eager runs "
            "at batches 1 and 4 (the median of 3-5 timed generations each), at the share of the GPU's priced step the "
            "host's priced launches take (real vLLM 0.26.0 on an H200, dummy weights, 256 tokens, "
            f"benchmarks/results/vllm_h200_eager_overlap, 2026-11-29): {measured}; models within {GROUP} of each "
            "other averaged (benchmarks/gpu_vllm/eager_overlap.py). The spread between runs and batches is wide "
            "(single generations 3% to 2.0x): the eager bands carry it")


def rendered(points: list[dict]) -> str:
    pairs = ", ".join(f"[{share}, {loss}]" for share, loss in table_points(points))
    return (f"[eager_overlap]\nloss_by_host_share = [{pairs}]\nkind = \"measured\"\n"
            f"source = {json.dumps(source(points))}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="write launch.toml [eager_overlap]")
    parser.add_argument("--check", action="store_true", help="exit 1 when launch.toml's [eager_overlap] differs")
    args = parser.parse_args()
    points = [anchor_point(), *measured_points()]
    print(f"{'model':40}{'share':>7}{'loss':>8}  each run and batch")
    for p in points:
        print(f"{p['model']:40}{p['share']:>7.2f}{100 * p['loss']:>+7.0f}%  "
              + " ".join(f"{100 * x:+.0f}%" for x in p["losses"]))
    text = LAUNCH.read_text()
    block = re.search(r"^\[eager_overlap\]\n(?:(?!\n\[).)*\n", text, re.S | re.M)
    if block is None:
        print("launch.toml has no [eager_overlap] table")
        return 1
    wanted = rendered(points)
    if args.check:
        if block.group(0) != wanted:
            print("launch.toml's [eager_overlap] differs from the runs: run eager_overlap.py --table")
            return 1
        print("launch.toml holds the eager overlap")
        return 0
    if args.table:
        tmp = LAUNCH.with_suffix(".toml.tmp")  # written whole, then moved over the table
        tmp.write_text(text[:block.start()] + wanted + text[block.end():])
        tmp.replace(LAUNCH)
        load_table.cache_clear()
        if load_table("launch")["eager_overlap"]["loss_by_host_share"] != table_points(points):
            print("launch.toml did not read back as written")
            return 1
        print(f"wrote {LAUNCH.relative_to(REPO)} [eager_overlap]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

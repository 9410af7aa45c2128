"""The host's cost of PyTorch's own ops launched one after another inside one module's forward, as a share of its
cost per eager kernel: kernels.toml [core.block_norm_gemma] eager_host_share, from real vLLM on the H200
(benchmarks/results/vllm_h200_gemma3; RESULTS-gpu.md, 2026-12-01).

The H200 host's cost per eager kernel (launch.toml, fitted by fit.py) is what a vLLM layer costs the host per kernel
it launches: its modules' Python, custom-op dispatch and attention metadata spread over a dozen kernels a layer. A
Gemma-style RMSNorm has no fused kernel in vLLM: eager runs its float32 form op by op (13 PyTorch ops with the
residual, 10 without), with nothing around them. Gemma 3's layers are mostly such ops (66 of 78 launches a layer,
its torch profile): its eager step says what one costs. For each of Gemma 3 12B's eager steps (two engines, batches 1
and 4: the host sets the pace, the GPU's priced step is a tenth of it) the share solves

    measured step = host cost per kernel x (other launches + layers' Python + share x the norms' launches)

and the table takes their mean. Gemma 3 27B's eager steps and Qwen3-Next's and Qwen3.6's (the same norms) are
priced with it, never fitted on.

    .venv/bin/python benchmarks/gpu_vllm/native_ops.py            # the steps and their shares
    .venv/bin/python benchmarks/gpu_vllm/native_ops.py --table    # and write kernels.toml's eager_host_share
    .venv/bin/python benchmarks/gpu_vllm/native_ops.py --check    # exit 1 when kernels.toml differs
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

RESULTS = REPO / "benchmarks" / "results" / "vllm_h200_gemma3"
KERNELS = REPO / "roofline" / "data" / "kernels.toml"
CONFIGS = REPO / "benchmarks" / "gpu_vllm" / "configs"
HOST_CHECK = REPO / "tests" / "reference_configs" / "Qwen__Qwen3-8B"
# the machine start whose host was checked: Qwen3-8B eager before and after (its cost per launch), the 12B's steps
# between them set the share, the 27B's check it
CHECKS = ("q8b-eager-1201b", "q8b-eager-1201c")
SETS = ("g3-12b-eager-1201b", "gemma-3-12b-text")
CHECKED = ("g3-27b-eager-1201b", "gemma-3-27b-text")


def _launches(inventory, hardware, batch: int, context: int) -> tuple[float, float, float]:
    """(the eager step's other launches and Python at a share of 0, the norms' launches, the GPU's priced seconds
    over the host's) by the step model's eager counts."""
    from roofline.predict.step import StepConfig, eager_totals, price_step

    step = price_step(inventory, hardware, StepConfig(batch=batch, context=context, graphs=False))
    native = [c for c in step.profile.counts if c.host_share is not None]
    launches = sum(s.eager_kernels + s.host_equiv for s in step.main.segments)
    device, host = eager_totals(step.main.segments)
    return launches - sum(c.eager * c.host_share for c in native), sum(c.eager for c in native), device / host


def _decode(case: str) -> list[dict]:
    return json.loads((RESULTS / f"{case}.json").read_text())["decode"]


def host_cost_us() -> float:
    """The checked start's host cost per launch: its Qwen3-8B eager steps over their priced launches (the mean)."""
    from roofline.audit import load_inventory
    from roofline.predict.hardware import get_hardware

    inventory, hardware = load_inventory(str(HOST_CHECK)), get_hardware("h200")
    return statistics.mean(d["step_ms"] * 1e3 / _launches(inventory, hardware, d["batch"], d["context"])[0]
                           for case in CHECKS for d in _decode(case))


def shares() -> list[dict]:
    """Each Gemma 3 eager step of the checked start: the norms' launches' worth that closes its time at the start's
    cost per launch."""
    from roofline.audit import load_inventory
    from roofline.predict.hardware import get_hardware

    cost, hardware = host_cost_us(), get_hardware("h200")
    out = []
    for case, config in (SETS, CHECKED):
        inventory = load_inventory(str(CONFIGS / config))
        for d in _decode(case):
            others, norms, gpu_share = _launches(inventory, hardware, d["batch"], d["context"])
            out.append({"case": case, "batch": d["batch"], "step_ms": d["step_ms"], "host_us": cost,
                        "share": (d["step_ms"] * 1e3 / cost - others) / norms, "sets": case == SETS[0],
                        "norm_launches": norms, "other_launches": others, "gpu_over_host": gpu_share})
    return out


def source(points: list[dict]) -> str:
    each = "; ".join(f"{p['case']} batch {p['batch']}: {p['step_ms']:.1f} ms, {p['share']:.2f}" for p in points)
    fitted = [p for p in points if p["sets"]]
    p = fitted[0]
    return ("the host's cost of one such op over its cost per eager kernel, the mean over Gemma 3 12B's eager decode "
            "steps (48 layers, dummy weights, 1.5k tokens, real vLLM 0.26.0 on an H200, "
            "benchmarks/results/vllm_h200_gemma3, 2026-12-01) on a machine start whose cost per launch Qwen3-8B's "
            f"eager steps before and after them gave ({', '.join(CHECKS)}: {p['host_us']:.1f} us), each solving step "
            f"= cost x ({round(p['other_launches'], 1):g} other launches and Python + share x "
            f"{p['norm_launches']:.0f} norm ops): {each} (Gemma 3 27B's, on the same start, checking it; "
            "benchmarks/gpu_vllm/native_ops.py). Applied to Gemma 2/3's norms only: Qwen3-Next's and Qwen3.6's "
            "eager steps priced with it come out 26-40% too fast, their GDN layers' own Python uncounted")


def rendered_lines(points: list[dict]) -> tuple[str, str]:
    share = round(statistics.mean(p["share"] for p in points if p["sets"]), 2)
    return f"eager_host_share = {share}", f"eager_host_share_source = {json.dumps(source(points))}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--table", action="store_true", help="write kernels.toml's eager_host_share")
    group.add_argument("--check", action="store_true", help="exit 1 when kernels.toml differs")
    args = parser.parse_args()
    points = shares()
    print(f"the start's cost per launch (Qwen3-8B eager): {points[0]['host_us']:.1f} us")
    for p in points:
        print(f"{p['case']:<26} batch {p['batch']}  {p['step_ms']:6.1f} ms  share {p['share']:.3f}  "
              f"(GPU {100 * p['gpu_over_host']:.0f}% of the host's priced step){'' if p['sets'] else '  (check)'}")
    lines = rendered_lines(points)
    text = KERNELS.read_text()
    block = re.search(r"^\[core\.block_norm_gemma\]\n(?:(?!^\[).*\n)*", text, re.M)
    current = [line for line in block.group(0).splitlines() if line.startswith("eager_host_share")]
    if args.check:
        if current != list(lines):
            print("kernels.toml [core.block_norm_gemma] eager_host_share is stale: run native_ops.py --table")
            return 1
        print("kernels.toml holds the native ops' host share")
        return 0
    if args.table:
        body = "".join(line + "\n" for line in block.group(0).splitlines() if not line.startswith("eager_host_share"))
        KERNELS.write_text(text[:block.start()] + body.rstrip("\n") + "\n" + "\n".join(lines) + "\n\n"
                           + text[block.end():].lstrip("\n"))
        print(f"wrote {KERNELS.relative_to(REPO)}: {lines[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

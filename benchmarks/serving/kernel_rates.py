"""The prompt rates of the step model's Hopper row (roofline/data/prefill.toml, cc 9.0) from vLLM's kernels timed
one by one on the lent GPU (benchmarks/gpu_vllm/prefill_kernels.py), never from a first token:

    .venv/bin/python benchmarks/serving/kernel_rates.py           # print the fit, write kernel_rates.json
    .venv/bin/python benchmarks/serving/kernel_rates.py --check   # exit 1 if kernel_rates.json is stale

Per kind of work the step model prices at the prefill rates, the share of the card's datasheet tensor rate
(hardware.toml) it reaches and how that share ramps up with the tokens of a step, in the step model's own form:

    time = FLOPs / (share x peak x M / (M + ramp))

M: a GEMM's rows (the step's tokens), the tokens each expert of a fused MoE gets (M x top_k / experts), the prompt
tokens attention and the scans run over. Fitted (least squares of log time) only on the points that took 1.5x longer than
reading their weights at the card's bandwidth: below that a step is priced by its bytes, and a share fitted there
would charge the bytes twice. Attention by head dim (FlashAttention 3 reaches less with 64-wide heads: gpt-oss),
a sliding window's on its own.

The host's time of one recurrent layer's prompt kernels (the GDN / Mamba2 chunked scan: a Python wrapper
launching a dozen Triton kernels, run outside vLLM's CUDA graphs) is the wall time of the smallest prompts, where
the kernels take a tenth of it: the mean over the three runs (x86 hosts of two H200s and an H100).

Inputs: benchmarks/results/vllm_kernels/h200_profiled.json (device times under torch's profiler, the H200 the
first tokens ran on), h100_profiled.json (the same kernels but Marlin's on an H100 80GB HBM3: the cross-check
column) and h200_wall.json (wall times between CUDA events only, an earlier H200: the scans' host time).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from roofline.data import load_table  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "vllm_kernels"
PROFILED = RESULTS / "h200_profiled.json"  # the card the first tokens were measured on
CROSS_CHECK = RESULTS / "h100_profiled.json"  # the same kernels on an H100 (no Marlin rows)
WALL = RESULTS / "h200_wall.json"
# bytes a weight of each kernel format takes (NVFP4: 4 bits and an FP8 scale per 16)
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "nvfp4-marlin": 0.5625}
OUT = HERE / "kernel_rates.json"
HOST_PROMPTS = (512, 1024)  # the scans' wall time here is the host's: their kernels take a tenth of it


def _card(name: str) -> dict:
    hardware = load_table("hardware")
    key = "h100-sxm" if "H100" in name else "h200"
    return hardware[key]


def _memory_s(row: dict, card: dict) -> float:
    """Seconds to read the row's weights once at the card's bandwidth (its efficiency applied)."""
    bw = card["bandwidth_gbps"] * 1e9 * card.get("efficiency", 0.86)
    if row["kind"] == "gemm":
        return row["n"] * row["k"] * WEIGHT_BYTES[row["format"]] / bw
    if row["kind"] == "moe":
        per_expert = 3 * row["hidden"] * row["intermediate"] * WEIGHT_BYTES[row["format"]]
        touched = row["experts"] * (1 - (1 - row["top_k"] / row["experts"]) ** row["m"])
        return per_expert * touched / bw
    return 0.0


def _tokens(row: dict) -> float:
    if row["kind"] == "moe":
        return row["m"] * row["top_k"] / row["experts"]
    return row.get("m") or row["t"]


def _fit(points: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """(share, ramp, mean |error|) minimising sum(t x log(time / model)^2) over (tokens, FLOPs at peak s, time s):
    each point weighted by its time, so that the long kernels a long prompt's first token waits on decide (a short
    prompt's attention is a small part of its first token); the share has a closed form given the ramp, the ramp
    a grid search (0 to 4,096 tokens)."""
    best = None
    total = sum(t for _, _, t in points)
    for ramp in [0.0] + [2 ** (i / 8) for i in range(0, 8 * 12 + 1)]:
        logs = [(t, math.log(at_peak * (m + ramp) / m / t)) for m, at_peak, t in points]
        mean = sum(t * lg for t, lg in logs) / total
        loss = sum(t * (lg - mean) ** 2 for t, lg in logs)
        if best is None or loss < best[0] - 1e-15:
            best = (loss, math.exp(mean), ramp)
    _, share, ramp = best
    error = statistics.fmean(abs(at_peak * (m + ramp) / m / share / t - 1) for m, at_peak, t in points)
    return share, ramp, error


def rates(path: Path = PROFILED) -> dict:
    profiled = json.loads(path.read_text())
    card = _card(profiled["device"])
    peaks = {fmt: tf * 1e12 for fmt, tf in card["tensor_tflops"].items()}
    groups: dict[str, list] = {}
    kept = dropped = 0
    for row in profiled["rows"]:
        if "ms" not in row:
            continue
        fmt = row["format"]
        at_peak = row["flops"] / peaks["fp8" if fmt == "fp8" else "bf16"]
        seconds = row["ms"] / 1e3
        if seconds < 1.5 * _memory_s(row, card):  # the weights' bytes bound the kernel here, not its FLOPs
            dropped += 1
            continue
        key = {"gemm": f"gemm.{fmt}", "moe": f"moe.{fmt}", "attention": "attention", "scan": f"scan.{fmt}"}[row["kind"]]
        if row["kind"] == "attention":  # by head dim (FlashAttention's tiles), and a sliding window's own
            key = "attention.sliding" if row.get("window") else f"attention.head_dim_{min(row['head_dim'], 128)}"
        groups.setdefault(key, []).append((_tokens(row), at_peak, seconds))
        kept += 1
    fitted = {}
    for key, points in sorted(groups.items()):
        share, ramp, error = _fit(points)
        fitted[key] = {"share": share, "ramp_tokens": ramp, "points": len(points), "mean_abs_error": error}
    host = {}
    for kind in ("gdn", "mamba"):
        walls = [r.get("wall_ms", r["ms"]) for f in (PROFILED, CROSS_CHECK, WALL) for r in json.loads(f.read_text())["rows"]
                 if r["kind"] == "scan" and r["format"] == kind and r.get("t") in HOST_PROMPTS and "ms" in r]
        host[kind] = {"us": 1e3 * statistics.fmean(walls), "points": len(walls),
                      "walls_ms": [round(w, 3) for w in walls]}
    return {"schema": "roofline.prefill_kernel_rates/1", "card": profiled["device"], "vllm": profiled["vllm"],
            "source": str(path.relative_to(REPO)), "points_kept": kept, "points_bytes_bound": dropped,
            "rates": fitted, "scan_host_per_layer": host}


def build() -> dict:
    """The rates of the card the first tokens ran on, with the other card's beside them."""
    out = rates()
    cross = rates(CROSS_CHECK)
    out["cross_check"] = {"card": cross["card"], "source": cross["source"],
                          "rates": {k: {"share": v["share"], "ramp_tokens": v["ramp_tokens"]}
                                    for k, v in cross["rates"].items()}}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    out = build()
    print(f"{out['card']}, vLLM {out['vllm']}: {out['points_kept']} points compute-bound, "
          f"{out['points_bytes_bound']} bound by their bytes (left out)")
    print(f"{'kind':24}{'share':>8}{'ramp tokens':>13}{'points':>8}{'mean |error|':>14}")
    for key, r in out["rates"].items():
        other = out["cross_check"]["rates"].get(key)
        print(f"{key:24}{r['share']:>8.3f}{r['ramp_tokens']:>13.0f}{r['points']:>8}{100 * r['mean_abs_error']:>13.1f}%"
              + (f"   {out['cross_check']['card']}: {other['share']:.3f}, {other['ramp_tokens']:.0f}" if other else ""))
    for kind, h in out["scan_host_per_layer"].items():
        print(f"host time of one {kind} layer's prompt kernels: {h['us']:.0f} us (walls {h['walls_ms']} ms)")
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    if args.check:
        stale = not OUT.exists() or OUT.read_text() != text
        print("kernel_rates.json is " + ("stale" if stale else "current"))
        return 1 if stale else 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

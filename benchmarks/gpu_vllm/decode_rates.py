"""What a decode step's kernels reach on the H200, from vLLM's own kernels timed one by one
(benchmarks/gpu_vllm/decode_kernels.py -> benchmarks/results/vllm_h200_decode_kernels/decode_kernels*.json, SOURCES), and
whether those times carry to a real engine's step (the same directory's Qwen3-8B runs with CUDA graphs on
Triton's attention and on FlashAttention 3).

    python3 benchmarks/gpu_vllm/decode_rates.py            (prints the tables; --json writes decode_rates.json)

Tables:
- attention: the KV bytes a call reads over its kernels' device time, by backend, head width and KV dtype: at one
  sequence (the longest context) and at the most KV measured (the kernel's saturated rate).
- engine: Triton's step less FlashAttention's, measured by the engine, against the kernels' difference times the
  model's 36 attention layers.
- moe: the fused MoE op at one token by expert shape; its fixed time and marginal rate (least squares over the
  shapes, time = fixed + touched expert bytes / rate), BF16 Triton against NVFP4 Marlin.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / "results" / "vllm_h200_decode_kernels"
QWEN3_8B_LAYERS = 36
ENGINE = {"triton unified_attention": "q8b-triton-ctx-graphs.json", "flash_attn_varlen fa3": "q8b-fa3-ctx-graphs.json"}


# the attention rows of the first run; the GEMM and MoE rows of the second (the same start's rerun with each Marlin
# MoE shape on its own: in the first, gpt-oss's shape, which the NVFP4 Marlin kernel refuses, ended the MoE rows)
SOURCES = {"decode_kernels.json": {"attention"}, "decode_kernels_weights.json": {"gemm", "moe"}}


def rows() -> list[dict]:
    out = []
    for name, kinds in SOURCES.items():
        data = json.loads((RESULTS / name).read_text())
        out += [dict(r, device=data["device"]) for r in data["rows"] if "ms" in r and r["kind"] in kinds]
    return out


def attention_table(data: list[dict]) -> list[dict]:
    table = []
    keys = sorted({(r["model"], r["impl"], r["kv_dtype"]) for r in data if r["kind"] == "attention"})
    for model, impl, dtype in keys:
        mine = [r for r in data if r["kind"] == "attention" and (r["model"], r["impl"], r["kv_dtype"]) == (model, impl, dtype)]
        longest = max((r for r in mine if r["batch"] == 1), key=lambda r: r["context"])
        most = max(mine, key=lambda r: (r["bytes"], -r["ms"]))
        table.append({"model": model, "impl": impl, "kv_dtype": dtype, "head_dim": mine[0]["head_dim"],
                      "kv_heads": mine[0]["kv_heads"], "window": mine[0]["window"],
                      "one_sequence": {"context": longest["context"], "us": longest["ms"] * 1e3,
                                       "gbps": longest["gbps"]},
                      "most_kv": {"batch": most["batch"], "context": most["context"], "us": most["ms"] * 1e3,
                                  "gbps": most["gbps"]}})
    return table


def engine_table(data: list[dict]) -> list[dict]:
    kernel = {(r["impl"], r["batch"], r["context"]): r["ms"] for r in data
              if r["kind"] == "attention" and r["model"] == "qwen3-8b" and r["kv_dtype"] == "bf16"}
    steps = {impl: {(d["batch"], d["context"]): d["step_ms"] for d in json.loads((RESULTS / name).read_text())["decode"]}
             for impl, name in ENGINE.items()}
    triton, flash = ENGINE
    return [{"batch": b, "context": c, "triton_ms": steps[triton][(b, c)], "flash_ms": steps[flash][(b, c)],
             "step_difference_ms": steps[triton][(b, c)] - steps[flash][(b, c)],
             "kernel_difference_ms": QWEN3_8B_LAYERS * (kernel[(triton, b, c)] - kernel[(flash, b, c)])}
            for b, c in sorted(steps[triton])]


def moe_table(data: list[dict]) -> list[dict]:
    out = []
    for fmt in ("bf16", "nvfp4-marlin"):
        ones = [r for r in data if r["kind"] == "moe" and r["format"] == fmt and r["m"] == 1]
        if len(ones) < 2:
            continue
        x = np.array([r["bytes"] / 1e6 for r in ones])
        y = np.array([r["ms"] * 1e3 for r in ones])
        fixed, us_per_mb = np.linalg.lstsq(np.vstack([np.ones_like(x), x]).T, y, rcond=None)[0]
        out.append({"format": fmt, "impl": ones[0]["impl"], "fixed_us": float(fixed), "marginal_gbps": 1e3 / us_per_mb,
                    "shapes": [{"model": r["model"], "intermediate": r["intermediate"], "mb": r["bytes"] / 1e6,
                                "us": r["ms"] * 1e3, "gbps": r["gbps"]} for r in ones]})
    return out


def summarize() -> dict:
    data = rows()
    return {"device": sorted({r["device"] for r in data}), "attention": attention_table(data),
            "engine": engine_table(data), "moe": moe_table(data)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="write decode_rates.json beside the results")
    args = parser.parse_args()
    summary = summarize()
    print(f"decode kernels on {', '.join(summary['device'])} (device time under torch's profiler)\n")
    print("| kernel | KV | shape (kv heads x head dim, window) | one sequence: context, us, GB/s | most KV: batch x context, us, GB/s |")
    print("|---|---|---|---|---|")
    for a in summary["attention"]:
        one, most = a["one_sequence"], a["most_kv"]
        print(f"| {a['impl']} | {a['kv_dtype']} | {a['model']}: {a['kv_heads']} x {a['head_dim']}"
              f"{', ' + str(a['window']) if a['window'] else ''} | {one['context']:,}, {one['us']:.0f}, {one['gbps']:,.0f} | "
              f"{most['batch']} x {most['context']:,}, {most['us']:.0f}, {most['gbps']:,.0f} |")
    print("\n| context | streams | Triton step ms | FlashAttention step ms | step difference | kernels' difference x 36 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for e in summary["engine"]:
        print(f"| {e['context']:,} | {e['batch']} | {e['triton_ms']:.2f} | {e['flash_ms']:.2f} | "
              f"{e['step_difference_ms']:.2f} | {e['kernel_difference_ms']:.2f} |")
    ratio = [e["kernel_difference_ms"] / e["step_difference_ms"] for e in summary["engine"]]
    print(f"kernels' difference over the step's: median {statistics.median(ratio):.2f}, "
          f"{min(ratio):.2f}-{max(ratio):.2f}")
    for m in summary["moe"]:
        print(f"\n{m['impl']} at one token: {m['fixed_us']:.1f} us fixed + the touched experts at "
              f"{m['marginal_gbps']:,.0f} GB/s")
        for s in m["shapes"]:
            print(f"  {s['model']:18} experts {s['intermediate']:>6} wide: {s['mb']:7.1f} MB in {s['us']:6.1f} us "
                  f"({s['gbps']:,.0f} GB/s)")
    if args.json:
        (RESULTS / "decode_rates.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a decode step's kernels reach on the H200, from vLLM's own kernels timed one by one
(benchmarks/gpu_vllm/decode_kernels.py -> benchmarks/results/vllm_h200_decode_kernels/decode_kernels_weights.json and
benchmarks/results/vllm_h200_triton_fp8/decode_kernels_*.json, SOURCES), and whether those times carry to a real
engine's step (the first directory's Qwen3-8B runs with CUDA graphs on Triton's attention and on FlashAttention 3).

    python3 benchmarks/gpu_vllm/decode_rates.py            (prints the tables; --json writes decode_rates.json)
    python3 benchmarks/gpu_vllm/decode_rates.py --table    (also writes roofline/data/attention_kernels.toml, the
                                                             attention kernels' times the step model prices; --check:
                                                             exit 1 if that file is not what the runs give)

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

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "vllm_h200_decode_kernels"
KERNEL_TABLE = REPO / "roofline" / "data" / "attention_kernels.toml"
# the kernels' names in the runs -> vLLM's backend (--attention-backend) and the FlashAttention version it ran
BACKEND_OF = {"triton unified_attention": "TRITON_ATTN", "flash_attn_varlen fa3": "FLASH_ATTN"}
QWEN3_8B_LAYERS = 36
ENGINE = {"triton unified_attention": "q8b-triton-ctx-graphs.json", "flash_attn_varlen fa3": "q8b-fa3-ctx-graphs.json"}


TRITON_FP8 = REPO / "benchmarks" / "results" / "vllm_h200_triton_fp8"
# each file's kinds of rows; a later file's rows of a layout replace an earlier one's. The attention rows: the sixth
# session's sweep, Triton's call as vLLM's backend makes it (its packed K|V cache; with an FP8 cache the query in FP8,
# KV_QUANT_MODE 1), then Gemma 4's global layers again at the model's 3D threshold (its sliding layers' KV heads).
# The GEMM and MoE rows: the fourth session's rerun with each Marlin MoE shape on its own.
SOURCES = ((TRITON_FP8 / "decode_kernels_attention.json", {"attention"}),
           (TRITON_FP8 / "decode_kernels_gemma_global.json", {"attention"}),
           (RESULTS / "decode_kernels_weights.json", {"gemm", "moe"}))


def rows() -> list[dict]:
    out: list[dict] = []
    for path, kinds in SOURCES:
        data = json.loads(path.read_text())
        mine = [dict(r, device=data["device"]) for r in data["rows"] if "ms" in r and r["kind"] in kinds]
        replaced = {(r["kind"], r.get("model")) for r in mine}
        out = [r for r in out if (r["kind"], r.get("model")) not in replaced] + mine
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


def kernel_table(data: list[dict]) -> str:
    """roofline/data/attention_kernels.toml: each measured attention layout's kernel time (us) by backend and KV
    dtype on a grid of sequences x context (nan: not measured, more KV than the sweep allowed)."""
    attention = [r for r in data if r["kind"] == "attention"]
    meta = json.loads(SOURCES[0][0].read_text())
    lines = ["# Written by benchmarks/gpu_vllm/decode_rates.py --table from the runs below; do not edit.",
             "# vLLM 0.26's paged decode attention kernels timed one by one (torch's profiler, GPU kernel time): one query",
             "# token per sequence, every sequence at `context` tokens, KV blocks of 16 (32 for a Gemma 4 global layer)",
             "# in a random order; Triton's as vLLM's backend calls it (packed K|V cache, an FP8 query with an FP8",
             "# cache, the model's 3D threshold). The step model (roofline/predict/attention.py) prices a backend's",
             "# and KV dtype's kernel time against these.",
             "", f'device = "{meta["device"]}"', 'hardware = "h200"', 'compute_capability = "9.0"',
             f'sms = {meta["sms"]}', f'vllm = "{meta["vllm"]}"', 'kind = "measured"',
             'command = "bash benchmarks/gpu_vllm/run_probe.sh decode-kernels --only attention; '
             'DECODE_ATTENTION_MODELS=gemma4-31b-global,gemma4-26b-global bash benchmarks/gpu_vllm/run_probe.sh '
             'decode-kernels --only attention"',
             'source = "benchmarks/results/vllm_h200_triton_fp8/decode_kernels_attention.json, '
             'decode_kernels_gemma_global.json (benchmarks/RESULTS-gpu.md, 2026-11-28: Triton\'s attention as vLLM runs it)"', ""]
    layouts = sorted({(r["model"], r["q_heads"], r["kv_heads"], r["head_dim"], r["window"], r["sinks"])
                      for r in attention})
    for model, hq, hkv, d, window, sinks in layouts:
        mine = [r for r in attention if r["model"] == model]
        batches = sorted({r["batch"] for r in mine})
        contexts = sorted({r["context"] for r in mine})
        three_d = [r["batch"] for r in mine if r.get("path") == "3d"]
        lines += ["[[layout]]", f'name = "{model}"', f"q_heads = {hq}", f"kv_heads = {hkv}", f"head_dim = {d}",
                  f"window = {window}", f"sinks = {str(sinks).lower()}", f"batches = {batches}",
                  f"contexts = {contexts}"]
        if three_d:  # Triton's 3D (split-KV) path up to these sequences, its 2D path above
            lines.append(f"triton_3d_max = {max(three_d)}")
        lines.append("[layout.us]  # by context (rows), then sequences (columns)")
        for impl, backend in BACKEND_OF.items():
            for dtype in ("bf16", "fp8"):
                times = {(r["batch"], r["context"]): r["ms"] * 1e3 for r in mine
                         if r["impl"] == impl and r["kv_dtype"] == dtype}
                if not times:
                    continue
                grid = ", ".join("[" + ", ".join(f"{times[(b, c)]:.2f}" if (b, c) in times else "nan"
                                                 for b in batches) + "]" for c in contexts)
                lines.append(f'"{backend}/{dtype}" = [{grid}]')
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="write decode_rates.json beside the results")
    parser.add_argument("--table", action="store_true", help="write roofline/data/attention_kernels.toml")
    parser.add_argument("--check", action="store_true", help="exit 1 if attention_kernels.toml is stale")
    args = parser.parse_args()
    if args.check or args.table:
        text = kernel_table(rows())
        if args.check:
            stale = not KERNEL_TABLE.exists() or KERNEL_TABLE.read_text() != text
            print(f"{KERNEL_TABLE.relative_to(REPO)}: {'stale' if stale else 'up to date'}")
            return 1 if stale else 0
        tmp = KERNEL_TABLE.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(KERNEL_TABLE)
        print(f"wrote {KERNEL_TABLE.relative_to(REPO)}")
        return 0
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

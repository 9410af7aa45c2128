"""Speed of the config path (issue 18): cold and warm whole-process times of config-only audits
and plans, each as a ratio to a header audit of a small local checkpoint timed in the same run.

    .venv/bin/python benchmarks/bench_config_path.py [--repeat 3] [--tree DIR]

cold: an empty skeleton cache (ROOFLINE_CACHE points at a fresh directory for every run), so the
skeleton is built with torch + transformers; warm: the cache holds the entry. --tree DIR times
another checkout's roofline (put on PYTHONPATH), e.g. a worktree of an older commit, for a
before / after table. Targets: warm config-only audit and warm plan within 2x of the header
audit; a cold plan of the Qwen3.6-35B-A3B config within 2x of a cold config-only audit of it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "tests" / "reference_configs"
DENSE = CONFIGS / "Qwen__Qwen3-8B"
MOE = CONFIGS / "Qwen__Qwen3.6-35B-A3B"
# five configs for `compare` (two share a skeleton: the cache builds four)
COMPARE = ["Qwen__Qwen3-8B", "Qwen__Qwen3-30B-A3B", "Qwen__Qwen3-30B-A3B-FP8", "nvidia__Qwen3-30B-A3B-NVFP4",
           "meta-llama__Llama-3.1-8B-Instruct"]


def write_header_checkpoint(directory: Path) -> None:
    """A small dense BF16 checkpoint (2 layers of Qwen3-8B's shapes) as one safetensors file whose
    data section is sparse: a header audit reads only the header."""
    config = json.loads((DENSE / "config.json").read_text()) | {"num_hidden_layers": 2}
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv, head_dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "lm_head.weight": [vocab, hidden],
              "model.norm.weight": [hidden]}
    for layer in range(2):
        p = f"model.layers.{layer}"
        shapes |= {f"{p}.self_attn.q_proj.weight": [heads * head_dim, hidden],
                   f"{p}.self_attn.k_proj.weight": [kv * head_dim, hidden],
                   f"{p}.self_attn.v_proj.weight": [kv * head_dim, hidden],
                   f"{p}.self_attn.o_proj.weight": [hidden, heads * head_dim],
                   f"{p}.self_attn.q_norm.weight": [head_dim], f"{p}.self_attn.k_norm.weight": [head_dim],
                   f"{p}.mlp.gate_proj.weight": [inter, hidden], f"{p}.mlp.up_proj.weight": [inter, hidden],
                   f"{p}.mlp.down_proj.weight": [hidden, inter],
                   f"{p}.input_layernorm.weight": [hidden], f"{p}.post_attention_layernorm.weight": [hidden]}
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2
        for d in shape:
            size *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    (directory / "config.json").write_text(json.dumps(config))


def config_dir(source: Path, root: Path) -> Path:
    """A folder holding only config.json (the reference folders are config-only already)."""
    out = root / source.name
    if not out.exists():
        out.mkdir(parents=True)
        for f in source.iterdir():
            (out / f.name).write_bytes(f.read_bytes())
    return out


def timed(argv: list[str], env: dict, cache: Path | None) -> float:
    env = dict(env)
    # `python -m` puts the working directory first on sys.path: run inside the tree being timed
    cwd = env.get("PYTHONPATH") or str(REPO)
    if cache is not None:
        env["ROOFLINE_CACHE"] = str(cache)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "roofline.cli", *argv], check=True, env=env, cwd=cwd,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(argv: list[str], env: dict, work: Path, repeat: int, warm: bool) -> float:
    times = []
    for i in range(repeat):
        cache = work / f"cache-{time.monotonic_ns()}"
        if warm:
            timed(argv, env, cache)  # fill it
        times.append(timed(argv, env, cache))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tree", default=None, help="time this checkout's roofline instead (PYTHONPATH)")
    parser.add_argument("--cold-only", action="store_true", help="skip warm rows (a tree without a cache)")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.tree:
        env["PYTHONPATH"] = os.path.abspath(args.tree)
    with tempfile.TemporaryDirectory(prefix="roofline-bench-config-") as tmp:
        work = Path(tmp)
        header = work / "header-qwen3"
        write_header_checkpoint(header)
        dense, moe = config_dir(DENSE, work), config_dir(MOE, work)
        rows = [("header audit, small local checkpoint (reference)", ["audit", str(header), "--json"], False),
                ("roofline --help", ["--help"], False)]
        for label, model in (("Qwen3-8B", dense), ("Qwen3.6-35B-A3B", moe)):
            for command in ("audit", "plan"):
                argv = [command, str(model), "--json"]
                rows.append((f"{command} {label} config-only, cold", argv, False))
                if not args.cold_only:
                    rows.append((f"{command} {label} config-only, warm", argv, True))
        if not args.cold_only:  # compare arrived with the cache; an older tree has no such command
            argv = ["compare", *(str(config_dir(CONFIGS / name, work)) for name in COMPARE), "--json"]
            rows.append(("compare of 5 configs, cold", argv, False))
            rows.append(("compare of 5 configs, warm", argv, True))
        results = [(label, measure(argv, env, work, args.repeat, warm)) for label, argv, warm in rows]
    reference = results[0][1]
    width = max(len(label) for label, _ in results)
    print(f"{'run'.ljust(width)}  {'seconds':>8}  {'x header audit':>14}")
    for label, seconds in results:
        print(f"{label.ljust(width)}  {seconds:8.2f}  {seconds / reference:14.2f}")
    by_label = dict(results)
    if not args.cold_only:
        cold_plan, cold_audit = by_label["plan Qwen3.6-35B-A3B config-only, cold"], \
            by_label["audit Qwen3.6-35B-A3B config-only, cold"]
        print(f"cold MoE plan / cold MoE config-only audit: {cold_plan / cold_audit:.2f} (target <= 2)")
    print(f"(median of {args.repeat}; python {sys.version.split()[0]}, {os.cpu_count()} cpus; "
          f"tree {args.tree or REPO})")


if __name__ == "__main__":
    main()

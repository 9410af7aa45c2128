"""Audit speed and bytes read, on a generated 40-shard, ~100k-tensor NVFP4 MoE header set.

Targets (issue "roofline audit"): audit <= 0.5 s; `roofline --help` <= 0.3 s; bytes read from
disk <= 0.1% of the checkpoint size.

The shards are real safetensors layouts (8-byte length, JSON header, data section) whose data
sections are sparse (the file is truncated up to its full size without writing the data), so
the checkpoint is ~200 GB on paper and a few MB on disk. Only headers are ever read.

    .venv/bin/python benchmarks/bench_audit.py [--keep DIR]
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

LAYERS, EXPERTS, SHARDS = 40, 208, 40
HIDDEN, MOE_INTER, VOCAB = 4096, 1536, 151936


def nvfp4(name: str, out: int, inp: int) -> list[tuple[str, str, list[int]]]:
    return [(f"{name}.weight_packed", "U8", [out, inp // 2]),
            (f"{name}.weight_scale", "F8_E4M3", [out, inp // 16]),
            (f"{name}.weight_global_scale", "F32", [1]),
            (f"{name}.input_global_scale", "F32", [1])]


def tensors() -> list[tuple[str, str, list[int]]]:
    out = [("model.embed_tokens.weight", "BF16", [VOCAB, HIDDEN]), ("lm_head.weight", "BF16", [VOCAB, HIDDEN]),
           ("model.norm.weight", "BF16", [HIDDEN])]
    for layer in range(LAYERS):
        p = f"model.layers.{layer}"
        for proj, o in (("q_proj", 4096), ("k_proj", 512), ("v_proj", 512)):
            out += nvfp4(f"{p}.self_attn.{proj}", o, HIDDEN)
        out += nvfp4(f"{p}.self_attn.o_proj", HIDDEN, 4096)
        out += [(f"{p}.input_layernorm.weight", "BF16", [HIDDEN]),
                (f"{p}.post_attention_layernorm.weight", "BF16", [HIDDEN]),
                (f"{p}.mlp.gate.weight", "BF16", [EXPERTS, HIDDEN])]
        for e in range(EXPERTS):
            for proj, o, i in (("gate_proj", MOE_INTER, HIDDEN), ("up_proj", MOE_INTER, HIDDEN),
                               ("down_proj", HIDDEN, MOE_INTER)):
                out += nvfp4(f"{p}.mlp.experts.{e}.{proj}", o, i)
    return out


def nbytes(dtype: str, shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}[dtype]


def write_checkpoint(directory: str) -> int:
    all_tensors = tensors()
    per_shard = (len(all_tensors) + SHARDS - 1) // SHARDS
    weight_map, total = {}, 0
    for s in range(SHARDS):
        name = f"model-{s + 1:05d}-of-{SHARDS:05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for tname, dtype, shape in all_tensors[s * per_shard:(s + 1) * per_shard]:
            size = nbytes(dtype, shape)
            header[tname] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
            weight_map[tname] = name
            offset += size
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        path = os.path.join(directory, name)
        with open(path, "wb") as fh:
            fh.write(struct.pack("<Q", len(raw)) + raw)
            fh.truncate(8 + len(raw) + offset)  # sparse data section
        total += 8 + len(raw) + offset
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh)
    config = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": LAYERS,
              "hidden_size": HIDDEN, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
              "vocab_size": VOCAB, "num_experts": EXPERTS, "num_experts_per_tok": 8,
              "moe_intermediate_size": MOE_INTER, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
              "quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                                      "config_groups": {"group_0": {
                                          "targets": ["Linear"],
                                          "weights": {"num_bits": 4, "type": "float", "group_size": 16},
                                          "input_activations": {"num_bits": 4, "type": "float", "group_size": 16}}},
                                      "ignore": ["lm_head", "re:.*mlp.gate$"]}}
    with open(os.path.join(directory, "config.json"), "w") as fh:
        json.dump(config, fh)
    return len(all_tensors)


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", default=None, help="write the header set here and keep it")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    directory = args.keep or tempfile.mkdtemp(prefix="roofline-bench-")
    os.makedirs(directory, exist_ok=True)
    count = write_checkpoint(directory)

    from roofline.audit import run_audit
    from roofline.predict.hardware import get_hardware
    from roofline.predict.traffic import Scenario
    from roofline.sources.local import load_local

    state = {}

    def audit_in_process():
        inventory = load_local(directory)
        state["result"] = run_audit(inventory, Scenario(), get_hardware("gb10"))
        state["result"].to_json()

    in_process = timed(audit_in_process, args.repeat)
    roofline = os.path.join(os.path.dirname(sys.executable), "roofline")
    cli_audit = timed(lambda: subprocess.run([roofline, "audit", directory, "--json"], check=True,
                                             stdout=subprocess.DEVNULL), args.repeat)
    cli_help = timed(lambda: subprocess.run([roofline, "--help"], check=True, stdout=subprocess.DEVNULL),
                     args.repeat)
    inventory = state["result"].inventory
    ratio = inventory.bytes_read / inventory.checkpoint_bytes
    rows = [
        ("tensors / shards", f"{count} / {SHARDS}", ""),
        ("checkpoint size (sparse)", f"{inventory.checkpoint_bytes / 1e9:.1f} GB", ""),
        ("audit, in process (median)", f"{statistics.median(in_process):.3f} s", "<= 0.5 s"),
        ("roofline audit --json, whole process (median)", f"{statistics.median(cli_audit):.3f} s", "(incl. start-up)"),
        ("roofline --help (median)", f"{statistics.median(cli_help):.3f} s", "<= 0.3 s"),
        ("bytes read", f"{inventory.bytes_read / 1e6:.2f} MB = {100 * ratio:.4f}%", "<= 0.1%"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(width)}  {'value':>26}  target")
    for name, value, target in rows:
        print(f"{name.ljust(width)}  {value:>26}  {target}")
    print(f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus, {args.repeat} repeats)")


if __name__ == "__main__":
    main()

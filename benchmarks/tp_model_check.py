"""Does the scale-out model predict TP=2 decode? The measured TP=1 and TP=2 CUDA-graph step times of
gpu_decode_eager_vs_graph.py (two GPUs, torchrun) beside roofline's prediction for the same shapes.

The prediction is the step model, `roofline.predict.step.price_step` — what every command prices — on the
reference config of each shape (bf16, config-only inventory), on the catalogue's H200 entry
(bandwidth x decode efficiency, launch.toml's graph floor) with its NVLink link from
hardware.toml, at the benchmark's context. Kernel counts per layer are the TP=1 run's measured
ones (the model is given TP=1's kernels and must predict TP=2 from them: same kernels per rank,
1/2 of the bytes, plus vLLM's collectives at the link's per-collective latency).

    .venv/bin/python benchmarks/tp_model_check.py benchmarks/results/h200x2_decode_tp1.json \\
        benchmarks/results/h200x2_decode_tp2.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from roofline.audit import load_inventory
from roofline.predict.hardware import get_hardware
from roofline.predict.kernels import KernelCount, KernelProfile
from roofline.predict.links import default_link
from roofline.predict.step import StepConfig, price_step
from roofline.predict.topology import Topology, place

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "reference_configs"
SHAPES = {"dense_qwen3_8b": "Qwen__Qwen3-8B", "moe_qwen3_30b_a3b": "Qwen__Qwen3-30B-A3B",
          "hybrid_qwen3_6_35b_a3b": "Qwen__Qwen3.6-35B-A3B"}


def measured_profile(name: str, per_layer: dict[str, int]) -> KernelProfile:
    counts = [KernelCount(int(key) if key.isdigit() else None, "measured", "trace", float(count), "trace")
              for key, count in per_layer.items()]
    return KernelProfile(name, "trace", "cuda", counts)


def predict_ms(inventory, hardware, tp: int, context: int, kernels: KernelProfile) -> tuple[float, float]:
    """(step ms, of which collectives ms) of one stream at TP=tp in one box."""
    topology = Topology(tp, 1, 1)
    step = price_step(inventory, hardware, StepConfig(
        batch=1, context=context, topology=topology, placement=place(topology, 8, default_link(hardware), None),
        kernels=kernels))
    return step.step_ms, step.comm_s * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tp1_json")
    parser.add_argument("tp2_json")
    parser.add_argument("--hardware", default="h200")
    args = parser.parse_args()
    tp1 = json.loads(Path(args.tp1_json).read_text())
    tp2 = json.loads(Path(args.tp2_json).read_text())
    hardware = get_hardware(args.hardware)
    link = default_link(hardware)
    print(f"{hardware.name}: {hardware.bandwidth_gbps:g} GB/s x {hardware.efficiency:g}; link {link.key} "
          f"{link.latency_us:g} us/collective ({link.latency_kind}); context {tp1['context']}")
    print(f"{'shape':<24}{'TP1 ms':>8}{'TP2 ms':>8}{'speedup':>9}{'pred TP1':>10}{'pred TP2':>10}{'(comm)':>8}"
          f"{'pred speedup':>14}{'error':>8}{'eager TP1':>11}{'eager TP2':>11}")
    for name, one in tp1["models"].items():
        two = tp2["models"].get(name)
        if two is None or name not in SHAPES:
            continue
        layers = one["layers"]
        inventory = load_inventory(str(REFERENCE / SHAPES[name]), config_only=True)
        if layers != inventory.shape.num_layers:
            print(f"{name}: the run has {layers} of {inventory.shape.num_layers} layers; skipped")
            continue
        kernels = measured_profile(name, one["profile"]["per_layer"])
        p1, _ = predict_ms(inventory, hardware, 1, tp1["context"], kernels)
        p2, comm = predict_ms(inventory, hardware, 2, tp1["context"], kernels)
        m1, m2 = one["graph"]["wall_ms"], two["graph"]["wall_ms"]
        measured, predicted = m1 / m2, p1 / p2
        print(f"{name:<24}{m1:>8.2f}{m2:>8.2f}{measured:>8.2f}x{p1:>10.2f}{p2:>10.2f}{comm:>8.2f}"
              f"{predicted:>13.2f}x{100 * (predicted / measured - 1):>+7.1f}%"
              f"{one['eager']['wall_ms']:>11.2f}{two['eager']['wall_ms']:>11.2f}")


if __name__ == "__main__":
    main()

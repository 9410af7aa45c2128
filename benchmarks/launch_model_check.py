"""Does a calibrated host launch cost and graph floor (`roofline calibrate --device cuda`) close the
gap between the CUDA-graph model and measured decode steps? Reads the decode benchmark's output
(gpu_decode_eager_vs_graph.py: bytes, kernels per layer, measured eager / graph step times) and a
calibrate JSON from the same GPU machine, and prints measured beside the model with

  table:       launch.toml's figures for the host class and device (what audit uses by default)
  calibrated:  the figures calibrate measured on that machine (what --hardware <saved key> uses)

both pricing bytes at calibrate's measured GEMV bandwidth, so only the per-kernel terms differ.
model: graph = bytes / bandwidth + kernels x floor; eager = sum over layers of max(that layer's
graph time, its kernels x host cost).

    .venv/bin/python benchmarks/launch_model_check.py benchmarks/results/h100_decode.json \\
        benchmarks/results/h100_calibrate.json --hardware h100-sxm
"""
from __future__ import annotations

import argparse
import json

from roofline.data import load_table


def model_ms(result: dict, bandwidth_gbps: float, host_us: float, floor_us: float) -> tuple[float, float]:
    total_bytes = result["bytes_per_step"]["total"]
    per_layer = result["profile"]["per_layer"]
    kernels = sum(per_layer.values())
    graph_ms = total_bytes / (bandwidth_gbps * 1e9) * 1e3 + kernels * floor_us / 1e3
    eager_ms = 0.0
    for count in per_layer.values():  # bytes spread over the layers by kernel share, as the benchmark does
        layer_graph = graph_ms * count / kernels
        eager_ms += max(layer_graph, count * host_us / 1e3)
    return graph_ms, eager_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("decode_json")
    parser.add_argument("calibrate_json")
    parser.add_argument("--hardware", default="h100-sxm", help="catalogue key whose table figures to compare")
    args = parser.parse_args()
    with open(args.decode_json, encoding="utf-8") as fh:
        decode = json.load(fh)
    with open(args.calibrate_json, encoding="utf-8") as fh:
        calibration = json.load(fh)
    launch = load_table("launch")
    hardware = load_table("hardware")[args.hardware]
    table_host = launch["host"][hardware["host"]]["host_us_per_kernel"]
    table_floor = (launch["floor"].get(args.hardware) or launch["floor"]["default"])["graph_floor_us_per_kernel"]
    measured = calibration["launch"]
    bandwidth = max(k["best_gbps"] for k in calibration["kernels"] if k["kernel"].startswith("gemv"))
    sets = {"table": (table_host, table_floor),
            "calibrated": (measured["host_us_per_kernel"], measured["graph_floor_us_per_kernel"])}
    print(f"bytes priced at {bandwidth:.0f} GB/s (calibrate's GEMV); "
          + "; ".join(f"{name}: host {h:.2f} us/kernel, floor {f:.2f} us/kernel" for name, (h, f) in sets.items()))
    header = f"{'model':24}{'kernels':>8}{'graph ms':>10}" + "".join(
        f"{name + ' graph':>18}{'err':>7}" for name in sets) + f"{'eager ms':>10}{'(p10)':>8}" + "".join(
        f"{name + ' eager':>18}{'err':>7}" for name in sets)
    print(header)
    for name, result in decode["models"].items():
        graph, eager = result["graph"]["wall_ms"], result["eager"]["wall_ms"]
        row = f"{name:24}{sum(result['profile']['per_layer'].values()):>8}{graph:>10.2f}"
        eager_cells = ""
        for host, floor in sets.values():
            g, e = model_ms(result, bandwidth, host, floor)
            row += f"{g:>18.2f}{100 * (g / graph - 1):>+6.0f}%"
            eager_cells += f"{e:>18.2f}{100 * (e / eager - 1):>+6.0f}%"
        print(row + f"{eager:>10.2f}{result['eager']['wall_ms_p10']:>8.2f}" + eager_cells)


if __name__ == "__main__":
    main()

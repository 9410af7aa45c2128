"""Fit the step model's GPU coefficients to real vLLM: every probe result in benchmarks/results/vllm_h200
(probe.py's JSON), the fit set, and the error of the fitted model in sample and leaving one
architecture out.

    .venv/bin/python benchmarks/gpu_vllm/fit.py            # tables, and benchmarks/results/vllm_h200/fit.json

What is fitted, and from which points:
- CUDA-graph mode (every graphs row): the H200's achievable share of its datasheet bandwidth and the
  floor per replayed kernel, step = sum over segments of max(bytes / (bandwidth x efficiency), compute)
  + graph kernels x floor (roofline/predict/step.py), least squares on log(predicted / measured).
- eager mode (every eager row; every one is host-bound, 3-19x its graph step): the host's cost per
  kernel launched one by one and the Python work of a MoE and of a Mamba layer beyond their launches,
  in launches' worth, host = (eager kernels + MoE layers x m + Mamba layers x a) x cost per kernel.
Kernel counts are the table's (roofline/data/kernels.toml), itself checked against the profiled steps.

The data tables carry the result (roofline/data/hardware.toml [h200] efficiency, launch.toml
[floor.h200] and [host.x86_server], kernels.toml [python.*]), each naming this file and fit.json;
tests/test_gpu_fit.py fails when they and fit.json part.

Dummy weights and MoE routing: vLLM's dummy loader fills every parameter with small uniform noise. A
softmax router (Qwen3-MoE, Mixtral) then picks experts by tiny, token-dependent logit differences,
spread as real routing is (priced "uniform"); a router that adds a learned score-correction bias before
its top-k (Nemotron-H's sigmoid router, DeepSeek-V3's) picks by the bias alone, the same experts for
every token (priced "shared", ROUTING below). gpt-oss's biased softmax router with MXFP4 Marlin experts
fits neither and is left out of the fit (shown in VALIDATION.md).
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent.parent
RESULTS = REPO / "benchmarks" / "results" / "vllm_h200"
FIT_FILE = RESULTS / "fit.json"
sys.path.insert(0, str(REPO))

# model_type -> how dummy weights route (see the docstring)
ROUTING = {"nemotron_h": "shared", "deepseek_v3": "shared"}
LEFT_OUT = {"gpt_oss": "biased softmax router under dummy weights and MXFP4 Marlin experts: routing unknown"}
HARDWARE = "h200"


@dataclass
class Row:
    case: str
    architecture: str  # model_type
    config: str
    quantization: str | None
    mode: str  # graphs | eager
    batch: int
    context: int
    measured_ms: float
    vllm_version: str
    gpu: str
    routing: str = "uniform"
    # the step's terms independent of the fitted coefficients, per segment
    memory_at_full_s: list[float] = field(default_factory=list)  # bytes / (datasheet bandwidth x backend)
    compute_s: list[float] = field(default_factory=list)
    kernels: float = 0.0
    eager_kernels: float = 0.0
    moe_layers: int = 0
    mamba_layers: int = 0

    def graphs_s(self, efficiency: float, floor_us: float) -> float:
        return sum(max(m / efficiency, c) for m, c in zip(self.memory_at_full_s, self.compute_s)) \
            + self.kernels * floor_us * 1e-6

    def eager_s(self, efficiency: float, floor_us: float, host_us: float, moe_equiv: float,
                mamba_equiv: float) -> float:
        host = (self.eager_kernels + self.moe_layers * moe_equiv + self.mamba_layers * mamba_equiv) * host_us * 1e-6
        return max(self.graphs_s(efficiency, floor_us), host)


def load_rows() -> list[Row]:
    """Every decode row of every probe result, with the step model's terms for it."""
    from roofline.advise.simulate import get_recipe, simulate
    from roofline.audit import load_inventory
    from roofline.model.architecture import text_config
    from roofline.predict.hardware import get_hardware
    from roofline.predict.step import StepConfig, price_step

    hardware = get_hardware(HARDWARE)
    rows = []
    for path in sorted(RESULTS.glob("*.json")):
        if path == FIT_FILE:
            continue
        result = json.loads(path.read_text())
        inventory = load_inventory(str(REPO / result["config"]))
        if result.get("quantization") == "fp8":
            inventory = simulate(inventory, "fp8", get_recipe("default"))
        architecture = text_config(inventory.config).get("model_type") or inventory.config.get("model_type")
        routing = ROUTING.get(architecture, "uniform")
        recurrent = [r.kind for r in inventory.shape.recurrent]
        moe_layers = len({m.layer for m in inventory.modules if m.role == "moe_experts" and m.layer is not None})
        for decode in result["decode"]:
            step = price_step(inventory, hardware, StepConfig(batch=decode["batch"], context=decode["context"],
                                                              routing=routing))
            segments = step.main.segments
            rows.append(Row(
                case=path.stem, architecture=architecture, config=result["config"],
                quantization=result.get("quantization"), mode=result["mode"], batch=decode["batch"],
                context=decode["context"], measured_ms=decode["step_ms"], vllm_version=result["vllm_version"],
                gpu=result["gpu"], routing=routing,
                memory_at_full_s=[s.memory_s * hardware.efficiency for s in segments],
                compute_s=[s.compute_s for s in segments],
                kernels=sum(s.kernels for s in segments), eager_kernels=sum(s.eager_kernels for s in segments),
                moe_layers=moe_layers, mamba_layers=recurrent.count("mamba")))
    return rows


EFFICIENCIES = np.arange(500, 1001, 5) / 1000  # the grids searched
FLOORS_US = np.arange(0, 401, 5) / 100
HOSTS_US = np.arange(100, 801, 5) / 10
MOE_EQUIVS = np.arange(0, 81) / 2
MAMBA_EQUIVS = np.arange(0, 121) / 2


def _device_s(row: Row) -> np.ndarray:
    """The graph step over the grid: [efficiency, floor]."""
    memory = np.asarray(row.memory_at_full_s)[:, None] / EFFICIENCIES[None, :]
    roofs = np.maximum(memory, np.asarray(row.compute_s)[:, None]).sum(axis=0)
    return roofs[:, None] + row.kernels * FLOORS_US[None, :] * 1e-6


def fit_graphs(rows: list[Row]) -> tuple[float, float]:
    """(efficiency, floor us per kernel) minimizing the squared log error of the graph rows."""
    loss = sum(np.log(_device_s(r) * 1e3 / r.measured_ms) ** 2 for r in rows)
    i, j = np.unravel_index(np.argmin(loss), loss.shape)
    return float(EFFICIENCIES[i]), float(FLOORS_US[j])


def fit_eager(rows: list[Row], efficiency: float, floor_us: float) -> tuple[float, float, float]:
    """(host us per kernel, MoE layer's Python, Mamba layer's Python in launches' worth), the rest fixed."""
    moe = MOE_EQUIVS if any(r.moe_layers for r in rows) else MOE_EQUIVS[:1]
    mamba = MAMBA_EQUIVS if any(r.mamba_layers for r in rows) else MAMBA_EQUIVS[:1]
    loss = 0.0
    for r in rows:
        device = r.graphs_s(efficiency, floor_us)
        launches = r.eager_kernels + r.moe_layers * moe[:, None] + r.mamba_layers * mamba[None, :]
        host = launches[None, :, :] * HOSTS_US[:, None, None] * 1e-6
        loss = loss + np.log(np.maximum(host, device) * 1e3 / r.measured_ms) ** 2
    h, m, a = np.unravel_index(np.argmin(loss), loss.shape)
    return float(HOSTS_US[h]), float(moe[m]), float(mamba[a])


@dataclass
class Fit:
    efficiency: float
    floor_us: float
    host_us: float
    moe_equiv: float
    mamba_equiv: float

    def predict_ms(self, row: Row) -> float:
        seconds = row.graphs_s(self.efficiency, self.floor_us) if row.mode == "graphs" else \
            row.eager_s(self.efficiency, self.floor_us, self.host_us, self.moe_equiv, self.mamba_equiv)
        return seconds * 1e3


def fit(rows: list[Row]) -> Fit:
    graphs = [r for r in rows if r.mode == "graphs" and r.architecture not in LEFT_OUT]
    eager = [r for r in rows if r.mode == "eager" and r.architecture not in LEFT_OUT]
    efficiency, floor_us = fit_graphs(graphs)
    host_us, moe_equiv, mamba_equiv = fit_eager(eager, efficiency, floor_us) if eager else (math.nan, 0.0, 0.0)
    return Fit(efficiency, floor_us, host_us, moe_equiv, mamba_equiv)


def errors(rows: list[Row], model: Fit) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"graphs": [], "eager": []}
    for r in rows:
        out[r.mode].append(model.predict_ms(r) / r.measured_ms - 1)
    return out


def summary(values: list[float]) -> dict:
    if not values:
        return {"points": 0}
    return {"points": len(values), "mean_abs": statistics.mean(abs(v) for v in values),
            "max_abs": max(abs(v) for v in values)}


def main() -> int:
    rows = load_rows()
    in_fit = [r for r in rows if r.architecture not in LEFT_OUT]
    model = fit(in_fit)
    print(f"fit on {len(in_fit)} points of {len({r.case for r in in_fit})} cases "
          f"({', '.join(sorted({r.architecture for r in in_fit}))}); left out: "
          + "; ".join(f"{a} ({why})" for a, why in LEFT_OUT.items()))
    print(f"  H200 efficiency {model.efficiency:.3f} of 4800 GB/s, graph floor {model.floor_us:.2f} us per kernel")
    print(f"  host (x86, vLLM eager) {model.host_us:.1f} us per kernel; Python per MoE layer "
          f"{model.moe_equiv:g} launches' worth, per Mamba layer {model.mamba_equiv:g}")

    # leave one architecture out: fit on the others, predict it
    held_out: dict[str, dict[str, list[float]]] = {}
    for architecture in sorted({r.architecture for r in in_fit}):
        others = [r for r in in_fit if r.architecture != architecture]
        if not any(r.mode == "eager" for r in others):
            continue
        partial = fit(others)
        held_out[architecture] = errors([r for r in in_fit if r.architecture == architecture], partial)

    print(f"\n{'case':26}{'batch':>6}{'ctx':>6}{'measured ms':>13}{'fitted ms':>11}{'error':>8}")
    for r in rows:
        predicted = model.predict_ms(r)
        mark = "  (left out)" if r.architecture in LEFT_OUT else ""
        print(f"{r.case:26}{r.batch:>6}{r.context:>6}{r.measured_ms:>13.3f}{predicted:>11.3f}"
              f"{100 * (predicted / r.measured_ms - 1):>+7.0f}%{mark}")
    fitted = errors(in_fit, model)
    loao = {"graphs": [e for v in held_out.values() for e in v["graphs"]],
            "eager": [e for v in held_out.values() for e in v["eager"]]}
    print()
    for mode in ("graphs", "eager"):
        s, h = summary(fitted[mode]), summary(loao[mode])
        print(f"{mode:7} in sample: mean |error| {100 * s['mean_abs']:.1f}%, max {100 * s['max_abs']:.0f}% "
              f"({s['points']} points); leaving one architecture out: mean |error| {100 * h['mean_abs']:.1f}%, "
              f"max {100 * h['max_abs']:.0f}% ({h['points']} points)")
    payload = {
        "schema": "roofline.vllm_fit/1",
        "command": ".venv/bin/python benchmarks/gpu_vllm/fit.py",
        "hardware": HARDWARE,
        "vllm_version": sorted({r.vllm_version for r in rows}),
        "gpu": sorted({r.gpu for r in rows}),
        "cases": sorted({r.case for r in in_fit}),
        "left_out": LEFT_OUT,
        "routing": ROUTING,
        "coefficients": {"efficiency": model.efficiency, "graph_floor_us_per_kernel": model.floor_us,
                         "host_us_per_kernel": model.host_us, "moe_layer_host_equiv": model.moe_equiv,
                         "mamba_layer_host_equiv": model.mamba_equiv},
        "in_sample": {mode: summary(v) for mode, v in fitted.items()},
        "leave_one_architecture_out": {mode: summary(v) for mode, v in loao.items()},
        "leave_one_architecture_out_by_architecture": {
            a: {mode: summary(v) for mode, v in e.items()} for a, e in held_out.items()},
    }
    FIT_FILE.write_text(json.dumps(payload, indent=1, allow_nan=False) + "\n")
    print(f"\nwrote {FIT_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

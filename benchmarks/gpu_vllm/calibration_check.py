"""Refit a `roofline calibrate --engine vllm --json` result's decode steps with the current fit, as the
command would: the same rows, the entry's own bands. For a calibration run on the lent GPU whose steps
were recorded (benchmarks/results/vllm_h200_calibrate3/calibrate.json) and, optionally, probe results of
more shapes run the calibration's way (--context 256, batches 1 and 4, --short 8 --long 56), to see what
adding them to the default set changes.

    .venv/bin/python benchmarks/gpu_vllm/calibration_check.py benchmarks/results/vllm_h200_calibrate3/calibrate.json \\
        [benchmarks/results/vllm_h200_calibrate3/q06-cal-graphs.json ...]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from roofline.audit import load_inventory  # noqa: E402
from roofline.commands.calibrate import _echo_engine  # noqa: E402
from roofline.live import engine_fit  # noqa: E402
from roofline.live.engine_calibrate import EngineRun, fit_runs, model_folder, refusal  # noqa: E402
from roofline.predict.hardware import Hardware  # noqa: E402


def device_entry(calibration: dict) -> Hardware:
    """The device half of the calibration (bandwidth, GEMM rate) as a Hardware, as calibrate builds it."""
    return Hardware(key="calibrating", name=calibration["device_name"], bandwidth_gbps=calibration["bandwidth_gbps"],
                    bandwidth_source="measured", memory_gb=calibration["memory_gb"],
                    usable_memory_gb=calibration["memory_gb"], compute_capability=calibration["compute_capability"],
                    tensor_tflops=calibration["gemm_tflops"], host="x86_server", efficiency=1.0,
                    efficiency_kind="measured", efficiency_source="")


# the shapes cut to a few layers that calibrate3 ran (then bundled; now the harness's configs)
CUT_SHAPES = {"qwen3-30b-a3b-8l": "benchmarks/gpu_vllm/configs/Qwen3-30B-A3B-8layers",
              "nemotron-3-nano-13l": "benchmarks/gpu_vllm/configs/Nemotron-3-Nano-13layers"}


def runs_of(calibration: dict, hardware: Hardware, extra: list[Path]) -> list[EngineRun]:
    engine = calibration["engine"]
    grouped: dict[tuple[str, str], list[dict]] = {}
    for row in engine["runs"]:
        grouped.setdefault((row["model"], row["mode"]), []).append(
            {"batch": row["batch"], "context": row["context"], "step_ms": row["measured_ms"]})
    results = [(model, {"config": CUT_SHAPES.get(model) or model_folder(model, "/nonexistent"), "mode": mode, "decode": decode,
                        "vllm_version": engine["vllm_version"], "gpu": engine["device_name"]})
               for (model, mode), decode in grouped.items()]
    for path in extra:
        result = json.loads(path.read_text())
        results.append((Path(result["config"]).name, result))
    runs = []
    for model, result in results:
        inventory = load_inventory(str(REPO / result["config"]) if not Path(result["config"]).is_absolute()
                                   else result["config"])
        runs.append(EngineRun(model, result["mode"], result,
                              engine_fit.rows_for(result, inventory, hardware, model, None)))
    return runs


# the fields of a saved entry that the engine's fit writes (engine_fields): a refit replaces them all
ENGINE_FIELDS = ("efficiency", "efficiency_kind", "efficiency_source", "vllm_version", "bandwidth_gbps",
                 "bandwidth_kind", "bandwidth_source", "graph_floor_us_per_kernel", "graph_floor_us_by_family",
                 "launch_source", "host_us_per_kernel", "layer_python_launches", "bands")


def entry_today(folder: Path, key: str) -> Hardware:
    """The hardware entry that `calibrate --engine vllm --save KEY` makes today from a recorded
    calibration (FOLDER/calibrate.json): the device half as it saved it (FOLDER/hardware.toml), the engine's
    coefficients and bands refitted from its steps by the current fit, saved and read back as any entry."""
    import os
    import tempfile
    import tomllib

    from roofline.live.calibrate import save_entry
    from roofline.live.engine_calibrate import engine_fields
    from roofline.predict.hardware import get_hardware

    recorded = json.loads((folder / "calibrate.json").read_text())
    device = device_entry(recorded)
    engine = recorded["engine"]
    result = fit_runs(runs_of(recorded, device, []), device, engine["vllm_version"], engine["device"],
                      engine["device_name"])
    saved = tomllib.loads((folder / "hardware.toml").read_text())[key]
    entry = {k: v for k, v in saved.items() if k not in ENGINE_FIELDS}
    entry |= {"bandwidth_gbps": recorded["bandwidth_gbps"], "bandwidth_kind": "measured",
              "bandwidth_source": f"roofline calibrate {recorded['measured_at']}: {recorded['bandwidth_kernel']}"}
    entry |= engine_fields(result, recorded["bandwidth_gbps"])
    before = os.environ.get("ROOFLINE_HARDWARE_FILE")
    with tempfile.TemporaryDirectory(prefix="roofline-entry-") as tmp:
        os.environ["ROOFLINE_HARDWARE_FILE"] = save_entry(key, entry, os.path.join(tmp, "hardware.toml"))
        try:
            return get_hardware(key)
        finally:
            if before is None:
                del os.environ["ROOFLINE_HARDWARE_FILE"]
            else:
                os.environ["ROOFLINE_HARDWARE_FILE"] = before


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    calibration = json.loads(Path(argv[0]).read_text())
    hardware = device_entry(calibration)
    engine = calibration["engine"]
    result = fit_runs(runs_of(calibration, hardware, [Path(p) for p in argv[1:]]), hardware,
                      engine["vllm_version"], engine["device"], engine["device_name"])
    _echo_engine(result)
    print(f"calibrate would {'refuse it: ' + refusal(result) if refusal(result) else 'save this entry'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

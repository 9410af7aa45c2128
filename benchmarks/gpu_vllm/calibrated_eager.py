"""Eager steps after `roofline calibrate --engine vllm`, on the host the calibration measured: the entry it
saved (its hardware.toml) prices decode steps of models it never ran, measured on the same machine start the
calibration's way (run_probe.sh run ... with the calibration's probe arguments), and each error is set beside
the band the tool prints for that step with the entry.

    .venv/bin/python benchmarks/gpu_vllm/calibrated_eager.py --hardware-file DIR/hardware.toml --key h200-here \\
        DIR/llama8b-cal-eager.json DIR/gptoss20b-cal-eager.json ...       [--json]

Prints one row per step: the model, its family, batch, the measured and priced step, the error, and the
printed band (the entry's own for a family it measured, else the nearest validated class's, widened).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from roofline.audit import load_inventory  # noqa: E402
from roofline.live.engine_fit import dummy_routing  # noqa: E402
from roofline.predict.bands import band_for, model_family  # noqa: E402
from roofline.predict.step import StepConfig, price_step  # noqa: E402


def rows(paths: list[Path], hardware) -> list[dict]:
    out = []
    for path in paths:
        result = json.loads(path.read_text())
        config = result["config"] if os.path.isabs(result["config"]) else str(REPO / result["config"])
        inventory = load_inventory(config)
        for decode in result["decode"]:
            step = price_step(inventory, hardware, replace(StepConfig(), batch=decode["batch"],
                                                           context=decode["context"], graphs=result["mode"] == "graphs",
                                                           routing=dummy_routing(inventory, decode["batch"],
                                                                                 hardware)))
            band = band_for(inventory, hardware, result["mode"] == "graphs", decode["batch"])
            error = step.step_ms / decode["step_ms"] - 1
            out.append({"case": path.stem, "architecture": inventory.shape.model_type, "family": model_family(inventory),
                        "mode": result["mode"], "batch": decode["batch"], "context": decode["context"],
                        "measured_ms": round(decode["step_ms"], 3), "priced_ms": round(step.step_ms, 3),
                        "error": round(error, 4), "band": None if band is None else round(band.error, 4),
                        "band_text": None if band is None else band.short(),
                        "band_from": None if band is None else band.reference,
                        "held": None if band is None else abs(error) <= band.error})
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware-file", help="the hardware.toml the calibration saved (none: the catalogue's)")
    parser.add_argument("--key", required=True, help="the entry's key (calibrate --save KEY)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("results", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.hardware_file:
        os.environ["ROOFLINE_HARDWARE_FILE"] = str(Path(args.hardware_file).resolve())
    from roofline.predict.hardware import get_hardware

    table = rows(args.results, get_hardware(args.key))
    if args.json:
        print(json.dumps(table, indent=1))
        return 0
    print(f"{'case':28} {'family':7} {'mode':6} {'batch':>5} {'measured ms':>11} {'priced ms':>9} {'error':>7}  band")
    for r in table:
        print(f"{r['case']:28} {r['family']:7} {r['mode']:6} {r['batch']:5d} {r['measured_ms']:11.2f} "
              f"{r['priced_ms']:9.2f} {100 * r['error']:+6.0f}%  {r['band_text'] or '-'}"
              f"{'' if r['held'] is None else (' holds' if r['held'] else ' MISSED')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

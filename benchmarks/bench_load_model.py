"""How fast the load model runs: simulated requests per second of wall time (the issue's aim: >= 10,000 on the
development machine), for a dense and a MoE model, a hybrid, at a trickle, near saturation, a burst, and with
speculative decoding (every step drawn on its own). Also the time of the answers users wait for: the saturation
rate, and `highest_rate` (a bisection of runs) with and without its band.

    .venv/bin/python benchmarks/bench_load_model.py            # the table
    .venv/bin/python benchmarks/bench_load_model.py --json     # the same as JSON
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from roofline.advise.capacity import Request, capacity  # noqa: E402
from roofline.advise.load import Targets, highest_rate, saturation, serve  # noqa: E402
from roofline.predict.hardware import get_hardware  # noqa: E402
from roofline.predict.workload import Workload  # noqa: E402
from roofline.sources.config import load_config_only  # noqa: E402

CONFIGS = REPO / "tests" / "reference_configs"
MODELS = (("dense", "Qwen__Qwen3-8B", "h200"), ("moe", "Qwen__Qwen3-30B-A3B", "h200"),
          ("hybrid", "nvidia__Qwen3.6-35B-A3B-NVFP4", "gb10"))


def _server(config: str, hardware: str, speculative: int = 0):
    inventory = load_config_only(str(CONFIGS / config))
    request = Request(max_model_len=8192, concurrency=(1,), prompt_len=1024, output_len=256,
                      speculative_tokens=speculative, acceptance_rate=0.7)
    return capacity(inventory, get_hardware(hardware), request).server


def _timed(fn, repeat: int = 3):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for kind, config, hardware in MODELS:
        server = _server(config, hardware)
        base = Workload(arrival="poisson", rate=1.0, requests=1000, prompt_len=1024, output_len=256, seed=0)
        sat = saturation(server, base)
        cases = [("trickle (0.2 x saturation)", server, replace(base, rate=0.2 * sat)),
                 ("near saturation (0.9 x)", server, replace(base, rate=0.9 * sat)),
                 ("burst of 1,000", server, replace(base, arrival="burst", rate=None))]
        if kind == "dense":
            cases.append(("MTP x3, 0.5 x saturation", _server(config, hardware, speculative=3),
                          replace(base, rate=0.5 * sat)))
        for label, at, workload in cases:
            seconds, result = _timed(lambda: serve(at, workload))
            rows.append({"model": config, "hardware": hardware, "case": label, "requests": workload.requests,
                         "steps": result.steps, "priced": result.priced, "seconds": seconds,
                         "requests_per_s": workload.requests / seconds})
        small = replace(base, requests=200)
        for label, band in (("highest_rate (200 requests a run)", None), ("highest_rate with its band", 0.3)):
            seconds, _ = _timed(lambda: highest_rate(server, small, Targets(ttft_p90_s=0.5), band), repeat=1)
            rows.append({"model": config, "hardware": hardware, "case": label, "requests": None, "steps": None,
                         "priced": None, "seconds": seconds, "requests_per_s": None})
    machine = {"machine": platform.machine(), "processor": platform.processor() or platform.machine(),
               "cpus": os.cpu_count(), "python": platform.python_version()}
    if args.json:
        print(json.dumps({"schema": "roofline.bench_load_model/1", "machine": machine, "rows": rows}, indent=1))
        return 0
    print(f"load model speed on {machine['cpus']} CPUs ({machine['machine']}, Python {machine['python']})")
    print(f"{'model':32}{'hw':6}{'case':36}{'requests':>9}{'steps':>10}{'priced':>8}{'seconds':>9}{'req/s':>10}")
    for r in rows:
        rate = f"{r['requests_per_s']:,.0f}" if r["requests_per_s"] else ""
        print(f"{r['model'][-32:]:32}{r['hardware']:6}{r['case']:36}{r['requests'] or '':>9}{r['steps'] or '':>10}"
              f"{r['priced'] or '':>8}{r['seconds']:9.3f}{rate:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

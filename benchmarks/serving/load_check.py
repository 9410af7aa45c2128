"""The load model against real vLLM under open-loop load: every H200 run of vllm bench serve
(benchmarks/results/vllm_h200_serving: Poisson arrivals at 8-40 requests/s and a burst of 64, 150 requests of
1,024 prompt and 256 output tokens, Qwen3-8B and Qwen3-30B-A3B BF16, dummy weights) replayed as a trace, each
request at the time the client sent it, through roofline's load model (advise/load: vLLM's scheduler, the step
model, the host's time per request). Nothing is fitted here: the step model's decode coefficients are the
H200's decode fit, its prompt rates the first-token fit (benchmarks/serving/fit.py).

    .venv/bin/python benchmarks/serving/load_check.py          # the table; writes benchmarks/serving/load_check.json

The first run of each server (its first load after the TTFT sweep) pays one-time JIT compiles of kernels for
new batch sizes; it is marked and left out of the summary (the prediction is printed beside it all the same).
"""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from points import CASES, h200_loads  # noqa: E402
from predict import server  # noqa: E402

from roofline.advise.load import serve  # noqa: E402
from roofline.predict.workload import Request, Workload  # noqa: E402

OUT = HERE / "load_check.json"
METRICS = (("ttft", "ttft"), ("itl", "itl"), ("tpot", "tpot"), ("e2el", "e2e"))
WARM_FIRST = {"qwen3-8b-rate-8.json.gz", "qwen3-30b-a3b-rate-8.json.gz"}  # each server's first load run


def trace(run: dict) -> Workload:
    starts = run["start_times"]
    t0 = min(starts)
    requests = tuple(Request(s - t0, n, o) for s, n, o in zip(starts, run["input_lens"], run["output_lens"]))
    return Workload(arrival="trace", trace=requests, prompt_len=requests[0].prompt, output_len=requests[0].output)


def main() -> int:
    rows = []
    for case, name, run in h200_loads():
        config, flags, _ = CASES[case]
        s = server("h200", config, flags)
        pricer = s.pricer
        pricer.config = replace(pricer.config, prompt_routing=1.0)  # dummy weights: each token routes on its own
        result = serve(s, trace(run))
        row = {"case": case, "file": name, "rate": run["request_rate"], "first_run": name in WARM_FIRST,
               "measured_throughput": run["request_throughput"], "predicted_throughput": result.request_throughput}
        for key, ours in METRICS:
            stat = getattr(result, ours)
            for q, field in (("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p99", "p99")):
                measured = run.get(f"{q}_{key}_ms")
                predicted = getattr(stat, field) * 1e3
                row[f"{key}_{q}"] = {"measured_ms": measured, "predicted_ms": predicted,
                                     "error": predicted / measured - 1 if measured else None}
        rows.append(row)
    print(f"{'run':30}{'thr meas/pred':>16}  " + "  ".join(f"{k + ' p50':>14}{k + ' p90':>14}" for k, _ in METRICS))
    for row in rows:
        cells = "  ".join(f"{row[f'{k}_median']['measured_ms']:6.0f}/{row[f'{k}_median']['predicted_ms']:<6.0f}"
                          f"{row[f'{k}_p90']['measured_ms']:7.0f}/{row[f'{k}_p90']['predicted_ms']:<6.0f}"
                          for k, _ in METRICS)
        mark = " (first run)" if row["first_run"] else ""
        print(f"{row['file'][:-8] + mark:30}{row['measured_throughput']:7.1f}/{row['predicted_throughput']:<7.1f}  {cells}")
    summary = {}
    counted = [r for r in rows if not r["first_run"]]
    for key, _ in METRICS:
        for q in ("mean", "median", "p90", "p99"):
            errors = [r[f"{key}_{q}"]["error"] for r in counted if r[f"{key}_{q}"]["error"] is not None]
            summary[f"{key}_{q}"] = {"mean_abs_error": statistics.fmean(abs(e) for e in errors),
                                     "worst": max(errors, key=abs), "runs": len(errors)}
    print("\nmean |error| over the runs (first runs left out):")
    for key, value in summary.items():
        print(f"  {key:14} {100 * value['mean_abs_error']:5.1f}%  (worst {100 * value['worst']:+.0f}%, {value['runs']} runs)")
    OUT.write_text(json.dumps({"schema": "roofline.load_check/1", "rows": rows, "summary": summary}, indent=1,
                              sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

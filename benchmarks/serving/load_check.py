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
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from points import CASES, GB10_MODELS, HELD_OUT, gb10_bursts, h200_loads, h200_ttft  # noqa: E402
from predict import server  # noqa: E402

from roofline.advise.load import serve  # noqa: E402
from roofline.predict.workload import Request, Workload  # noqa: E402

OUT = HERE / "load_check.json"
METRICS = (("ttft", "ttft"), ("itl", "itl"), ("tpot", "tpot"), ("e2el", "e2e"))
WARM_FIRST = {"qwen3-8b-rate-8.json.gz", "qwen3-30b-a3b-rate-8.json.gz",  # each server's first load run
              "llama31-8b-rate-12.json.gz", "mixtral-8x7b-8l-rate-16.json.gz",
              "mixtral-8x7b-8l-host-rate-12.json.gz", "qwen3-06b-2l-load-rate-10.json.gz"}
# a 2-layer model whose steps are the engine's host time alone: a probe of the host, summed apart from the models
HOST_PROBES = {"qwen3-06b-2l-load"}
# a server stall: the TTFT of one Poisson arrival more than this above the one before it. No step priced for these
# runs is a fifth of it; a one-time compile stops the server that long (a Triton fused-MoE kernel at a token count
# new to the server: vLLM's JIT monitor logs only the first of them, warning_once). Such runs are left out of the
# summary as first runs are (the same compiles), and summed with it apart.
STALL_S = 1.0


def stall_s(run: dict) -> float:
    """The largest rise in TTFT from one arrival to the next of an open-loop run (0 for a burst: its requests
    arrive together and wait for each other's prompts)."""
    if run["request_rate"] in (None, "inf") or not math.isfinite(float(run["request_rate"])):
        return 0.0
    order = sorted(range(len(run["start_times"])), key=lambda i: run["start_times"][i])
    ttfts = [run["ttfts"][i] for i in order]
    return max((b - a for a, b in zip(ttfts, ttfts[1:])), default=0.0)


def before_stall(run: dict, result) -> dict:
    """The requests that arrived before the stall: how many, and their mean TTFT measured and priced."""
    order = sorted(range(len(run["start_times"])), key=lambda i: run["start_times"][i])
    ttfts = [run["ttfts"][i] for i in order]
    first = max(range(1, len(ttfts)), key=lambda i: ttfts[i] - ttfts[i - 1])  # the first request the stall held
    priced = [ttft for _, ttft, _, _ in sorted(result.per_request)][:first]
    measured = ttfts[:first]
    return {"requests": first, "measured_ttft_ms": 1e3 * statistics.fmean(measured),
            "predicted_ttft_ms": 1e3 * statistics.fmean(priced),
            "error": statistics.fmean(priced) / statistics.fmean(measured) - 1}


def trace(run: dict) -> Workload:
    starts = run["start_times"]
    t0 = min(starts)
    requests = tuple(Request(s - t0, n, o) for s, n, o in zip(starts, run["input_lens"], run["output_lens"]))
    return Workload(arrival="trace", trace=requests, prompt_len=requests[0].prompt, output_len=requests[0].output)


def main() -> int:
    rows = []
    for case, name, run in h200_loads():
        config, flags, _ = {**CASES, **HELD_OUT}[case]
        s = server("h200", config, flags)
        pricer = s.pricer
        pricer.config = replace(pricer.config, prompt_routing=1.0)  # dummy weights: each token routes on its own
        result = serve(s, trace(run))
        stall = stall_s(run)
        row = {"case": case, "file": name, "rate": run["request_rate"], "first_run": name in WARM_FIRST,
               "host_probe": case in HOST_PROBES, "stall_s": stall,
               "stalled": stall > STALL_S and name not in WARM_FIRST,
               "before_stall": before_stall(run, result) if stall > STALL_S else None,
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
        mark = " (first run)" if row["first_run"] else " (stall)" if row["stalled"] else ""
        print(f"{row['file'][:-8] + mark:30}{row['measured_throughput']:7.1f}/{row['predicted_throughput']:<7.1f}  {cells}")
    bursts = gb10()
    summary = errors_over([r for r in rows if not r["first_run"] and not r["host_probe"] and not r["stalled"]])
    print("\nmean |error| over the models' runs (first runs, stalls and the host probe left out):")
    for key, value in summary.items():
        print(f"  {key:14} {100 * value['mean_abs_error']:5.1f}%  (worst {100 * value['worst']:+.0f}%, {value['runs']} runs)")
    summary["with_host_probe"] = errors_over([r for r in rows if not r["first_run"] and not r["stalled"]])
    summary["with_stalls"] = errors_over([r for r in rows if not r["first_run"] and not r["host_probe"]])
    print("with the stalled runs: " + ", ".join(
        f"{key} {100 * value['mean_abs_error']:.1f}%" for key, value in summary["with_stalls"].items()
        if key.endswith("_mean") or key.endswith("_median")))
    print("with the 2-layer host probe's runs: " + ", ".join(
        f"{key} {100 * value['mean_abs_error']:.1f}%" for key, value in summary["with_host_probe"].items()
        if key.endswith("_mean") or key.endswith("_median")))
    errors = [b["error"] for b in bursts]
    summary["gb10_burst_ttft_mean"] = {"mean_abs_error": statistics.fmean(abs(e) for e in errors),
                                       "worst": max(errors, key=abs), "runs": len(errors)}
    print(f"  {'gb10 bursts':14} {100 * summary['gb10_burst_ttft_mean']['mean_abs_error']:5.1f}%  (worst "
          f"{100 * summary['gb10_burst_ttft_mean']['worst']:+.0f}%, {len(errors)} bursts: the mean TTFT of N prompts "
          "sent at once)")
    held_out = held_out_ttft()
    OUT.write_text(json.dumps({"schema": "roofline.load_check/1", "rows": rows, "gb10_bursts": bursts,
                               "held_out_ttft": held_out, "summary": summary}, indent=1, sort_keys=True) + "\n")
    return 0


def errors_over(rows: list[dict]) -> dict:
    """Mean |error| and the worst error of each metric over `rows`."""
    out = {}
    for key, _ in METRICS:
        for q in ("mean", "median", "p90", "p99"):
            errors = [r[f"{key}_{q}"]["error"] for r in rows if r[f"{key}_{q}"]["error"] is not None]
            out[f"{key}_{q}"] = {"mean_abs_error": statistics.fmean(abs(e) for e in errors),
                                 "worst": max(errors, key=abs), "runs": len(errors)}
    return out


def held_out_ttft() -> list[dict]:
    """First tokens of the cases no fit saw (points.HELD_OUT: Qwen3-8B with a 2,048-token step budget, its prompts
    in chunks), beside the same model at vLLM's default budget (fitted) and the model's."""
    fitted = {(p.case, p.prompt): p.ttft_s for p in h200_ttft()}
    out = []
    print(f"\n{'held out (never fitted)':26}{'prompt':>8}{'measured':>10}{'predicted':>11}{'error':>8}"
          f"{'default budget':>16}")
    for p in h200_ttft(HELD_OUT):
        s = server("h200", p.model, p.serve)
        predicted = s.first_token_s(p.prompt)
        base = fitted.get((p.case.split("-b")[0], p.prompt))
        out.append({"case": p.case, "serve": p.serve, "prompt": p.prompt, "measured_ms": p.ttft_s * 1e3,
                    "predicted_ms": predicted * 1e3, "error": predicted / p.ttft_s - 1,
                    "default_budget_measured_ms": base * 1e3 if base else None, "source": p.source})
        print(f"{p.case:26}{p.prompt:>8}{p.ttft_s * 1e3:>10.1f}{predicted * 1e3:>11.1f}"
              f"{100 * (predicted / p.ttft_s - 1):>+7.0f}%{base * 1e3 if base else float('nan'):>16.1f}")
    return out


def gb10() -> list[dict]:
    """The published GB10 bursts (N requests of one prompt length sent at once, llama-benchy): the mean TTFT over
    the requests against the load model's (real weights: the table's prompt routing)."""
    out = []
    print(f"\n{'GB10 burst (published)':58}{'N':>4}{'prompt':>8}{'TTFT mean meas':>16}{'pred':>8}{'error':>8}")
    for row in gb10_bursts():
        config, flags, _ = GB10_MODELS[row["model"]]
        s = server("gb10", config, f"--kv-cache-dtype {row['kv_dtype']} " + flags, max_model_len=131072)
        n, prompt = int(row["concurrency"]), int(row["prompt_tokens_est"])
        burst = Workload(arrival="burst", requests=n, prompt_len=prompt, output_len=int(row["output_len"]))
        result = serve(s, burst)
        measured = float(row["ttfr_ms"]) / 1e3
        out.append({"model": row["model"], "test": row["test"], "burst": n, "prompt": prompt,
                    "measured_ttft_mean_ms": measured * 1e3, "predicted_ttft_mean_ms": result.ttft.mean * 1e3,
                    "error": result.ttft.mean / measured - 1})
        print(f"{row['model'][:40] + ' ' + row['test']:58}{n:>4}{prompt:>8}{measured * 1e3:>16.0f}"
              f"{result.ttft.mean * 1e3:>8.0f}{100 * (result.ttft.mean / measured - 1):>+7.0f}%")
    return out


if __name__ == "__main__":
    sys.exit(main())

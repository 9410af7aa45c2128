"""A load's answer in the terminal (advise/load.py LoadAnswer's JSON, roofline.load/1): one row per run (a rate,
a burst, a trace) with TTFT, inter-token latency, time per output token and end-to-end latency, throughput and
the queue; the saturation rate; the highest rate that keeps the targets and what breaks first."""
from __future__ import annotations

from roofline.units import milliseconds

from .text import text_table, wrapped


def _ms(stat: dict | None, key: str) -> str:
    return "-" if not stat else milliseconds(stat[key])


def render_load(load: dict, width: int) -> list[str]:
    w = load["workload"]
    lines = wrapped(f"under load: prompts {w['prompt_len']:,} + outputs {w['output_len']:,} tokens"
                    + (f" (lengths x 1 -/+ {w['range_ratio']:g})" if w["range_ratio"] else "")
                    + (f", {100 * w['shared_prefix']:.0f}% of every prompt shared" if w["shared_prefix"] else "")
                    + f"; one request alone: first token in {milliseconds(load['first_token_alone_ms'])} "
                      f"(the host's {milliseconds(load['request_overhead']['ms'])} per request included)", width, "  ")
    scheduler = load["scheduler"]
    lines += wrapped(f"vLLM's scheduler: {scheduler['max_num_batched_tokens']:,} tokens a step, at most "
                     f"{scheduler['max_num_seqs']:,} requests, chunked prefill "
                     f"{'on' if scheduler['chunked_prefill'] else 'off'}, prefix caching "
                     f"{'on' if scheduler['prefix_caching'] else 'off'}, async scheduling "
                     f"{'on' if scheduler['async_scheduling'] else 'off'}", width, "  ")
    if load["runs"]:
        rows = [["load", "req/s done", "TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "ITL p90", "TPOT p50",
                 "E2E p50", "E2E p90", "queue max"]]
        for run in load["runs"]:
            rows.append([run["label"], f"{run['request_throughput']:.2f}", _ms(run["ttft"], "p50_ms"),
                         _ms(run["ttft"], "p90_ms"), _ms(run["ttft"], "p99_ms"), _ms(run["itl"], "p50_ms"),
                         _ms(run["itl"], "p90_ms"), _ms(run["tpot"], "p50_ms"), _ms(run["e2e"], "p50_ms"),
                         _ms(run["e2e"], "p90_ms"), str(run["max_waiting"])])
        lines += ["    " + line for line in text_table(rows, right=set(range(1, 11)))]
    if load.get("saturation_rate"):
        lines += wrapped(f"saturation: {load['saturation_rate']:.2f} requests/s complete with the queue never "
                         "empty; above it the queue and TTFT grow without end", width, "  ")
    if load.get("answer"):
        lines += wrapped(load["answer"]["sentence"], width, "  ")
    for note in load.get("notes") or []:
        lines += wrapped(f"note: {note}", width, "  ")
    return lines

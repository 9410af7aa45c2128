"""Terminal presentation of a validation: measured beside ceiling and expected, verdict, suspects."""
from __future__ import annotations

from roofline.live.validate import Validation
from roofline.units import human_bytes


def render_validation(v: Validation) -> str:
    s = v.scenario
    lines = [
        f"{v.model} on {v.hardware_name} ({v.bandwidth_gbps:g} GB/s)",
        f"scenario: batch {s.get('batch', 1)}, context {s.get('context', '?')}, "
        f"kv cache {s.get('kv_cache_dtype_resolved') or s.get('kv_cache_dtype', '?')}"
        + (f", speculative {s['speculative_tokens']}" if s.get("speculative_tokens") else ""),
        f"  bytes / token          {human_bytes(v.bytes_per_token)}",
        f"  ceiling                {v.ceiling_tok_s:12.2f} tok/s",
        f"  expected               {v.expected_tok_s:12.2f} tok/s",
        f"  measured               {v.measured_tok_s:12.2f} tok/s  ({v.ratio_to_ceiling:.3f} of the ceiling, "
        f"{v.ratio_to_expected:.3f} of expected)",
        f"  bandwidth utilisation  {100 * v.bandwidth_utilisation:11.1f} %",
        f"verdict: {v.verdict_text}",
    ]
    if v.suspects:
        lines.append("suspects:")
        lines += [f"  - {s}" for s in v.suspects]
    return "\n".join(lines)


def render_curve(rows: list[dict], knee: int | None) -> str:
    """The measured sweep beside the predicted decode curve."""
    from .text import text_table

    table = [["concurrency", "measured agg tok/s", "predicted agg", "ratio", "measured/stream", "predicted/stream",
              "predicted bound"]]
    for r in rows:
        table.append([str(r["concurrency"]), f"{r['measured_aggregate_tok_s']:.1f}", f"{r['predicted_aggregate_tok_s']:.1f}",
                      f"{r['ratio']:.2f}" if r["ratio"] is not None else "-",
                      f"{r['measured_per_stream_tok_s']:.1f}" if r["measured_per_stream_tok_s"] else "-",
                      f"{r['predicted_per_stream_tok_s']:.1f}", r["predicted_bound"]])
    lines = ["concurrency sweep beside the predicted curve"
             + (f" (predicted knee: compute-bound from {knee})" if knee else " (no predicted knee in this range)") + ":"]
    return "\n".join(lines + ["  " + line for line in text_table(table, right={0, 1, 2, 3, 4, 5})])


def render_load_validation(payload: dict) -> str:
    """An open-loop result beside the load model (commands/validate.py _validate_load)."""
    from .text import text_table

    lines = [f"validate under load: {payload['model']} on {payload['hardware']} ({payload['file']})"]
    first = payload["first_token_alone"]
    lines.append(f"  one request alone: first token in {first['ttft_ms']:.1f} ms (prompt {first['prompt_len']:,})")
    rows = [["run", "metric", "mean", "p50", "p90", "p99"]]

    def cell(q: dict) -> str:
        if q["measured_ms"] is None or q["predicted_ms"] is None:
            return "-" if q["predicted_ms"] is None else f"- / {q['predicted_ms']:.1f}"
        return f"{q['measured_ms']:.1f} / {q['predicted_ms']:.1f} ({100 * q['error']:+.0f}%)"
    for run in payload["runs"]:
        for key, name in (("ttft", "TTFT ms"), ("itl", "ITL ms"), ("tpot", "TPOT ms"), ("e2e", "E2E ms")):
            m = run["metrics"][key]
            rows.append([run["label"], name, cell(m["mean"]), cell(m["p50"]), cell(m["p90"]), cell(m["p99"])])
        thr = run["throughput"]
        if thr["measured"] is not None:
            rows.append([run["label"], "req/s done", "", f"{thr['measured']:.2f} / {thr['predicted']:.2f}", "", ""])
    lines += ["  measured / predicted (error)"] + ["  " + line for line in text_table(rows, right={2, 3, 4, 5})]
    return "\n".join(lines)

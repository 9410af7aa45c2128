"""Terminal presentation of a bench result."""
from __future__ import annotations


def render_bench(result) -> str:
    lines = [f"model {result.model} at {result.config.url}"
             + (f" (server {result.server_version})" if result.server_version else "")]
    lines.append(f"prompt {result.prompt_tokens} tokens, {result.completion_tokens} decoded per run, "
                 f"{result.config.api} API, temperature 0, "
                 f"ignore_eos {'on' if result.ignore_eos_applied else 'off'}")
    decode, ttft = result.decode, result.ttft
    lines.append(f"{'':24}{'median':>10}{'min':>10}{'max':>10}")
    lines.append(f"{'decode tok/s':24}{decode.median:>10.2f}{decode.min:>10.2f}{decode.max:>10.2f}")
    lines.append(f"{'TTFT ms':24}{ttft.median * 1e3:>10.1f}{ttft.min * 1e3:>10.1f}{ttft.max * 1e3:>10.1f}")
    delivered, timed = result.delivered, len(result.timed)
    lines.append(f"{delivered} of {len(result.runs)} runs completed, {timed} timed"
                 + (f"; not timed: {'; '.join(sorted({r.error for r in result.runs if r.error}))}"
                    if timed < len(result.runs) else ""))
    if result.sweep:
        lines.append("")
        lines.append(f"{'concurrency':>12}{'aggregate tok/s':>18}{'per-stream decode':>20}{'completed':>11}"
                     f"{'timed':>7}")
        for level in result.sweep:
            agg = f"{level.aggregate_tok_s:.1f}" if level.aggregate_tok_s else "-"
            per = f"{level.per_stream_decode.median:.1f}" if level.per_stream_decode else "-"
            done = sum(r.delivered for r in level.runs)
            lines.append(f"{level.concurrency:>12}{agg:>18}{per:>20}{f'{done}/{len(level.runs)}':>11}"
                         f"{sum(r.ok for r in level.runs):>7}")
        lines.append("aggregate = completion tokens / wall time of the round (prefill included); timed: the streams "
                     "whose decode the client could time")
    for note in result.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)

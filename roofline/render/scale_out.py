"""`roofline plan --boxes / --gpus` in the terminal, made from its JSON (roofline.scaleout/1)."""
from __future__ import annotations

from roofline.units import human_bytes

from .text import text_table


def _where(payload: dict) -> str:
    if payload["boxes"] > 1 and payload["devices_per_box"] > 1:
        return f"{payload['boxes']} boxes x {payload['devices_per_box']} {payload['hardware_name']}"
    if payload["boxes"] > 1:
        return f"{payload['boxes']} x {payload['hardware_name']}"
    return f"one box of {payload['devices_per_box']} {payload['hardware_name']}"


def render_scale_out(payload: dict, top: int = 12) -> str:
    ranked = [t for t in payload["topologies"] if t["refused_reason"] is None]
    refused = [t for t in payload["topologies"] if t["refused_reason"] is not None]
    by = "single-stream tok/s" if payload["rank_by"] == "single_stream_tok_s" else \
        f"aggregate tok/s at {payload['concurrency']} streams"
    lines = [f"scale-out: {payload['model']} over {_where(payload)} ({payload['devices']} devices), "
             f"{payload['context']:,} tokens of context, ranked by {by}"]
    for link in payload["links"]:
        lines.append(f"  link {link['key']}: {link['name']}, {link['bandwidth_gbps']:g} GB/s, {link['latency_us']:g} us "
                     f"per collective ({link['latency_kind']}; {link['collective']})")
    rows = [["#", "topology", "boxes", "weights/rank", "read/rank/token", "comm/token", "comm ms", "single tok/s",
             "aggregate tok/s", "links"]]
    for index, t in enumerate(ranked[:top], 1):
        rows.append([str(index), t["label"], str(t["boxes"]), human_bytes(t["per_rank_weight_bytes"]),
                     human_bytes(t["per_rank_bytes_per_token"]), human_bytes(t["comm_bytes_per_token"]),
                     f"{t['comm_ms_per_token']:.2f}", f"{t['single_stream_tok_s']:.1f}", f"{t['aggregate_tok_s']:.1f}",
                     ", ".join(f"{group}:{key}" for group, key in t["links"].items()) or "-"])
    lines += ["  " + line for line in text_table(rows, right={0, 2, 3, 4, 5, 6, 7, 8})]
    if len(ranked) > top:
        lines.append(f"  ... {len(ranked) - top} more (--top)")
    if ranked:
        best = ranked[0]
        lines.append(f"  best: {best['label']} — {best['single_stream_tok_s']:.1f} tok/s single-stream, "
                     f"{best['aggregate_tok_s']:.1f} aggregate; per decoded token:")
        for c in best["collectives"]:
            lines.append(f"    {c['per_step']:>3} x {c['kind']:<14} {human_bytes(c['message_bytes']):>9} on {c['link']:<14} "
                         f"{c['us_each']:7.1f} us each  ({c['where']})")
        if best["pp"] > 1:
            lines.append(f"    pipeline bubble at one stream: {best['pipeline_bubble']:.0%} of the stages idle")
        lines.append("  start it:")
        lines += [f"    {command}" for command in best["commands"]]
    if refused:
        lines.append("  refused:")
        lines += [f"    {t['label']}: {t['refused_reason']}" for t in refused]
    return "\n".join(lines)

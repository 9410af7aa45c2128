"""`roofline capacity` in the terminal, made from its JSON (roofline.capacity/1)."""
from __future__ import annotations

from roofline.units import human_bytes, provenance

from .text import terminal_width, text_table, wrapped


def render_capacity(payload: dict) -> str:
    """Lines longer than the terminal ($COLUMNS or its width) wrap; the curve's table is narrow."""
    kv, request = payload["kv_cache"], payload["request"]
    width = terminal_width()
    resolved = request.get("kv_cache_dtype_resolved")
    kv_text = request["kv_cache_dtype"] + (f" ({resolved})" if resolved not in (None, request["kv_cache_dtype"]) else "")
    lines = wrapped(f"capacity: {payload['model']} on {payload['hardware']['name']}, max_model_len "
                    f"{request['max_model_len']:,}, KV {kv_text}", width)
    tp = request.get("tp") or 1
    split = payload.get("split")
    if split:
        lines += wrapped(f"split over {split['devices']} GPUs ({split['boxes']} box{'es' if split['boxes'] > 1 else ''}): "
                         f"{split['label']}, the split `plan --gpus / --boxes` ranks first "
                         f"({split['ranked_by']})"
                         + (f"; next: {', '.join(split['alternatives'])}" if split["alternatives"] else ""), width, "  ")
        lines += wrapped("memory for the KV cache, per GPU (the fullest rank; the KV tokens are one engine's"
                         + (f", each of {split['dp']} data-parallel engines" if split["dp"] > 1 else "") + "):",
                         width, "  ")
    else:
        lines += wrapped("memory for the KV cache:" if tp == 1 else
                         f"memory for the KV cache, per GPU of {tp} (tensor parallel; the KV tokens are the engine's):",
                         width, "  ")
    for name, term in payload["memory_terms"].items():
        sign = "" if name in ("requested", "kv_cache") else "- "
        lines += wrapped(f"{sign + name:<20} {human_bytes(term['bytes']):>11}  ({provenance(term['kind'], term['source'])})",
                         width, "    ", " " * 35)
    groups = ", ".join(f"{g['layers']} {g['kind']}" for g in kv["groups"])
    other_blocks = ", ".join(f"{kind} {size}" for kind, size in kv.get("block_sizes", {}).items()
                             if size != kv["block_size"])
    block_text = f"block {kv['block_size']} tokens" + (f" ({other_blocks})" if other_blocks else "")
    lines += wrapped(f"KV cache: {block_text}, page {human_bytes(kv['page_size_bytes'])}, "
                     f"groups [{groups}], {kv['num_blocks']:,} blocks of {human_bytes(kv['bytes_per_block'])}", width, "  ")
    lines += wrapped(f"KV cache size: {kv['tokens']:,} tokens, Maximum concurrency for {kv['max_model_len']:,} tokens "
                     f"per request: {kv['max_concurrency']:.2f}x   (as vLLM logs it)", width, "  ")
    lines += wrapped(f"decode curve at {payload['context']:,} tokens of context (prompt {request['prompt_len']} + "
                     f"output {request['output_len']} / 2), routing {request['routing']}; TTFT {payload['ttft_ms']:.1f} ms:",
                     width, "  ")
    rows = [["concurrency", "step ms", "aggregate tok/s", "per stream", "bound", "fits"]]
    for p in payload["curve"]:
        rows.append([str(p["concurrency"]), f"{p['step_ms']:.2f}", f"{p['aggregate_tok_s']:.1f}",
                     f"{p['per_stream_tok_s']:.2f}", p["bound"] + (" <- knee" if p["concurrency"] == payload["knee_concurrency"] else ""),
                     "yes" if p["fits"] else "no"])
    lines += ["    " + line for line in text_table(rows, right={0, 1, 2, 3})]
    if payload.get("band"):
        lines += wrapped(f"tok/s validated {payload['band']['text']}", width, "    ")
    lines += wrapped(payload["verdict"], width, "  ")
    if payload.get("slo"):
        lines += wrapped(f"SLO: {payload['slo']['sentence']}", width, "  ")
    if payload.get("load"):
        from .load import render_load

        lines += render_load(payload["load"], width)
    lines += [line for note in payload["notes"] for line in wrapped(f"note: {note}", width, "  ")]
    return "\n".join(lines)

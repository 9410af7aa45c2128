"""`roofline preflight` in the terminal, made from its JSON (roofline.preflight/1)."""
from __future__ import annotations

from roofline.units import human_bytes, milliseconds, plural

from .text import attention_text, terminal_width, text_table, wrapped


def _times(change: float | None) -> str:
    """A change in requests that fit: a factor where it doubles or more, else a percentage."""
    if change is not None and change >= 1.0:
        return f"x{1 + change:.1f}"
    return _percent(change)


def _percent(change: float | None) -> str:
    return "" if change is None else f"{100 * change:+.0f}%"


def render_preflight(payload: dict) -> str:
    width = terminal_width()
    deployment = payload["deployment"]
    lines = []
    if payload.get("recipe"):
        recipe = payload["recipe"]
        lines += wrapped(f"recipe: {recipe['name']} ({recipe['path']})", width)
        if recipe.get("chosen"):
            lines += wrapped("chosen: " + "  ".join(f"{k}={v}" for k, v in recipe["chosen"].items())
                             + "  (--set KEY=VALUE to change)", width, "", "  ")
        lines += wrapped(f"runs: {recipe['serve_line']}", width, "", "  ")
    lines += wrapped(f"preflight: {payload['model']} on {payload['hardware']}", width)
    flags = [f["given"] for f in deployment["flags"]]
    if flags:
        lines += wrapped("priced with: " + "  ".join(flags), width, "", "  ")
    if deployment["not_modelled"]:
        lines += wrapped("not modelled (read, not priced): " + ", ".join(deployment["not_modelled"]), width, "", "  ")
    if deployment.get("ignored"):  # every flag is accounted for: these move nothing the step prices
        lines += wrapped("read, moving nothing priced (server, API, parsers, credentials): "
                         + ", ".join(dict.fromkeys(deployment["ignored"])), width, "", "  ")
    for note in deployment.get("notes") or []:
        lines += wrapped(f"note: {note}", width, "", "  ")
    for reason in payload["refusals"]:
        lines += wrapped(f"vLLM refuses: {reason}", width, "", "  ")
    if payload["error"]:
        lines += wrapped(f"cannot be served: {payload['error']}", width, "", "  ")
    if not payload["figures"]:
        return "\n".join(lines)
    audit, cap, figures = payload["audit"], payload["capacity"], payload["figures"]
    one, many, work = payload["one_stream"], payload["at_max_num_seqs"], payload["workload"]
    kv = cap["kv_cache"]
    many_label = plural(many["concurrency"], "stream") + ("" if many["concurrency"] == payload["scheduler"]["max_num_seqs"]
                                                          else " (all fit)")
    terms = cap["memory_terms"]
    weights = terms["weights"]["bytes"]
    per_gpu = " per GPU" if (deployment["tp"] * deployment["pp"] * deployment["dp"]) > 1 else ""
    band = audit["expected_band"]
    band_text = "" if band.get("error") is None else " unknown within 2x" if band.get("says_nothing") else \
        f" ±{100 * band['error']:.0f}%"
    lines += [
        "",
        f"  weights{per_gpu:<9}    {human_bytes(weights)}  ({audit['quantization']['method']}"
        f"{', ' + audit['quantization']['algo'] if audit['quantization'].get('algo') else ''})",
        f"  KV cache{per_gpu:<8}    {human_bytes(terms['kv_cache']['bytes'])}: {kv['tokens']:,} tokens, "
        f"maximum concurrency {kv['max_concurrency']:.2f}x for {kv['max_model_len']:,} tokens per request "
        f"(as vLLM logs it)",
        f"  bytes / token       {human_bytes(audit['bytes_per_token'])}  (weights "
        f"{human_bytes(audit['weight_bytes_per_token'])}, KV {human_bytes(audit['kv_bytes_per_token'])}, state "
        f"{human_bytes(audit['state_bytes_per_token'])}) at {cap['context']:,} tokens of context",
        f"  ceiling             {audit['ceiling_tok_s']:.1f} tok/s one stream",
        f"  1 stream            {one['aggregate_tok_s']:.1f} tok/s{band_text}  ({one['bound']}-bound, step "
        f"{milliseconds(one['step_ms'])})",
        f"  {many_label:<19} {many['aggregate_tok_s']:.1f} tok/s, {many['per_stream_tok_s']:.1f} each  "
        f"({many['bound']}-bound)",
        f"  TTFT                {milliseconds(cap['ttft_ms'])} for a {work['prompt_len']:,}-token prompt",
    ]
    lines += wrapped(f"validated: {band['text']}", width, "  ", "    ")
    if audit.get("attention"):
        lines += wrapped(f"attention: {attention_text(audit['attention'])}", width, "  ", "    ")
    residuals = audit["residuals"]
    if residuals:
        total = sum(r["bytes_per_token"] for r in residuals)
        lines += wrapped(f"stayed BF16: {human_bytes(total)} per token in " + ", ".join(
            f"{r['label']} x{r['count']}" for r in residuals[:6]), width, "  ", "    ")
    if work.get("vllm_acceptance_rate") is not None:
        even, rate = payload["break_even_acceptance"], work["vllm_acceptance_rate"]
        verdict = ("it never pays here, at any acceptance" if even is None else
                   f"it pays above {even:.0%}, so it {'gains' if rate >= even else 'loses'} here")
        lines += wrapped(f"speculation: {rate:.0%} of drafted tokens accepted (as vLLM reports it); {verdict}. Not "
                         "validated: the band above is of decoding without speculation", width, "  ", "    ")
    if payload.get("load"):
        from .load import render_load

        lines += [""] + render_load(payload["load"], width)
    if payload["effects"]:
        lines += ["", "what each flag costs or buys against vLLM's default (the same pricing without it):"]
        rows = []
        for effect in payload["effects"]:
            change = effect["change"]
            rows.append([effect["given"], _percent(change["tok_s_one_stream"]),
                         _percent(change["tok_s_aggregate"]), _times(change["max_concurrency"]),
                         effect["note"] or effect["meaning"]])
        # the requests of --max-model-len that fit (vLLM's "maximum concurrency"): what a user sizes by; KV tokens
        # alone read as a loss where a shorter --max-model-len lets many more requests in
        header = ["flag", "1 stream", plural(many["concurrency"], "stream"), "requests that fit", ""]
        lines += ["  " + line for line in text_table([header] + rows, right={1, 2, 3})]
    return "\n".join(lines)

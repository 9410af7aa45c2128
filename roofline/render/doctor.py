"""`roofline doctor`: the result as JSON (schema roofline.doctor/1) and as terminal text made
from that JSON, so the two never say different things."""
from __future__ import annotations

from roofline import __version__
from roofline.advise.doctor import Diagnosis, WhatIf, vllm_estimate_misses
from roofline.live.doctor import Observation
from roofline.predict.hardware import Hardware
from roofline.untrusted import redact_url

from .text import text_table

SCHEMA = "roofline.doctor/1"

def doctor_json(obs: Observation, diagnosis: Diagnosis, hardware: Hardware, what_if: WhatIf | None = None,
                under_load: dict | None = None) -> dict:
    facts, engine, serving = obs.facts, obs.engine, obs.serving
    bench = obs.bench
    measured = obs.measured_tok_s
    estimate = None
    per_token = obs.counters.get("vllm_estimated_read_bytes_per_token")
    if per_token is not None:
        estimate = {"vllm_read_bytes_per_token": per_token, "roofline_bytes_per_token": diagnosis.bytes_per_token,
                    "ratio": per_token / diagnosis.bytes_per_token if diagnosis.bytes_per_token else None,
                    "note": "vLLM's counter covers the bench's prefill steps too, and sizes every weight by one "
                            "byte count per quantization method",
                    "misses": vllm_estimate_misses(obs.inventory, diagnosis.traffic)}
    return {
        "schema": SCHEMA,
        "roofline_version": __version__,
        "url": redact_url(facts.url) if facts else None,
        "hardware": {"key": hardware.key, "name": hardware.name, "bandwidth_gbps": hardware.bandwidth_gbps,
                     "bandwidth_source": hardware.bandwidth_source},
        "inventory_source": obs.inventory_source,
        "server": {
            "model": (facts.model if facts else engine.get("model")) or obs.inventory.model_id,
            "version": facts.version if facts else engine.get("vllm_version"),
            "max_model_len": facts.max_model_len if facts else engine.get("max_model_len"),
            "kv_cache_dtype": (facts.kv_cache_dtype if facts else None) or engine.get("kv_cache_dtype"),
            "block_size": (facts.block_size if facts else None) or engine.get("block_size"),
            "num_kv_blocks": facts.num_kv_blocks if facts else None,
            "kv_cache_tokens": facts.kv_cache_tokens if facts else None,
            "speculative": obs.speculative,
            "graph_mode": obs.graph_mode,
            "tp": int(engine["tp_size"]) if engine.get("tp_size") else None,
        },
        "serving_modelled": {"kv_cache_dtype": serving.kv_cache_dtype, "context": serving.context,
                             "speculative_tokens": serving.speculative_tokens,
                             "acceptance_per_token": serving.acceptance, "cuda_graphs": serving.graphs,
                             "tp": serving.tp, "backend": serving.backend},
        "measured_tok_s": measured,
        "predicted_tok_s": diagnosis.predicted_tok_s,
        "best_tok_s": diagnosis.best_tok_s,
        "bytes_per_token": diagnosis.bytes_per_token,
        "best_bytes_per_token": diagnosis.best_bytes_per_token,
        "timing": diagnosis.timing,
        "verdict": diagnosis.verdict,
        "verdict_id": diagnosis.verdict_id,
        "ceiling_tok_s": diagnosis.ceiling_tok_s,
        "causes": [cause.to_json() for cause in diagnosis.causes],
        "what_if": what_if.to_json() if what_if is not None else None,
        "under_load": under_load,
        "unseen": list(dict.fromkeys(obs.unseen)),
        "problems": list(obs.problems),
        "notes": list(obs.notes) + list(diagnosis.notes),
        "evidence": dict(obs.evidence),
        "counters": dict(obs.counters),
        "vllm_estimate": estimate,
        "saved_measurement": None if obs.saved is None else {
            "tool": obs.saved.tool, "decode_tok_s": obs.saved.tok_s, "prompt_tokens": obs.saved.prompt_tokens,
            "completion_tokens": obs.saved.completion_tokens, "mean_context": obs.saved.mean_context},
        "bench": None if bench is None else {
            "runs": len(bench.runs), "completed": bench.delivered, "timed": len(bench.timed),
            "decode_tok_s": None if not bench.decode else {"median": bench.decode.median, "min": bench.decode.min,
                                                          "max": bench.decode.max},
            "prompt_tokens": bench.prompt_tokens, "completion_tokens": bench.completion_tokens,
            "mean_context": bench.mean_context},
    }


def _tok_s(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def render_doctor(payload: dict) -> str:
    server = payload["server"]
    spec = server.get("speculative")
    where = payload.get("url") or ("(no server: a saved result)" if payload.get("saved_measurement")
                                   else "(no server: capture only)")
    lines = [f"doctor: {server.get('model')} at {where}"
             f" on {payload['hardware']['name']} ({payload['hardware']['bandwidth_gbps']:g} GB/s)"]
    config = [f"KV {server.get('kv_cache_dtype') or '?'}",
              f"block {server.get('block_size') or '?'}",
              f"{server['num_kv_blocks']} blocks" if server.get("num_kv_blocks") is not None else None,
              f"max_model_len {server.get('max_model_len') or '?'}",
              f"graphs {server.get('graph_mode') or '?'}",
              f"TP {server.get('tp') or '?'}",
              (f"speculative {spec['num_draft']} ({spec.get('method') or '?'}, acceptance "
               f"{'?' if spec.get('acceptance_rate') is None else format(spec['acceptance_rate'], '.2f')})")
              if spec else "no speculation"]
    lines.append("  server: " + ", ".join(c for c in config if c))
    lines.append(f"  measured {_tok_s(payload['measured_tok_s'])} tok/s | this configuration "
                 f"{_tok_s(payload['predicted_tok_s'])} tok/s ({payload['timing']}) | best configuration "
                 f"{_tok_s(payload['best_tok_s'])} tok/s")
    lines.append(f"  {payload['verdict']}")
    if payload["causes"]:
        rows = [[str(i), c["id"], f"{c['expected_gain_tok_s']:+.1f}" if c["kind"] == "configuration"
                 else f"({c['expected_gain_tok_s']:.1f})",
                 c["fix"] + (f" (pays with #{i + 1}: alone, the other limit binds)" if c.get("joint_with") else ""),
                 c["evidence"]]
                for i, c in enumerate(payload["causes"], 1)]
        lines.append("")
        lines += ["  " + line for line in text_table([["#", "cause", "tok/s", "fix", "evidence"], *rows], right={0, 2})]
    else:
        lines.append("  no configuration cause found")
    lines += _what_if_lines(payload.get("what_if"))
    lines += _under_load_lines(payload.get("under_load"))
    estimate = payload.get("vllm_estimate")
    if estimate:
        lines.append(f"  vLLM's own estimate: {estimate['vllm_read_bytes_per_token'] / 1e6:.3g} MB/token read vs "
                     f"roofline {estimate['roofline_bytes_per_token'] / 1e6:.3g} MB/token")
        lines += [f"    vLLM's estimator misses {line}" for line in estimate["misses"]]
    for title, key in (("could not see", "unseen"), ("partial", "problems"), ("note", "notes")):
        lines += [f"  {title}: {line}" for line in payload.get(key) or []]
    return "\n".join(lines)


def _under_load_lines(load: dict | None) -> list[str]:
    """What the server's own latency histograms say, beside the load model of its configuration."""
    if not load:
        return []
    m, p = load["measured"], load["predicted"]
    parts = [f"first token {m['ttft_mean_ms']:,.0f} ms on average"]
    if m["queue_mean_ms"] is not None:
        parts.append(f"{m['queue_mean_ms']:,.0f} ms of it queued")
    if m["prefill_mean_ms"] is not None:
        parts.append(f"{m['prefill_mean_ms']:,.0f} ms in the prompt's steps")
    lines = [f"  under load (the server's histograms since it started, requests of {m['prompt_mean']:,.0f} + "
             f"{m['output_mean']:,.0f} tokens): " + ", ".join(parts) + f"; alone such a request's first token takes "
             f"{p['first_token_alone_ms']:,.0f} ms, and the server completes at most {p['saturation_rate']:.2f} "
             "requests/s of them"]
    return lines + [f"    {line}" for line in load["findings"]]


def _what_if_lines(what: dict | None) -> list[str]:
    if not what:
        return []
    said = " ".join(what["flags"])
    if what["refusals"]:
        return [f"  what if {said}: vLLM would refuse it"] + [f"    refused: {line}" for line in what["refusals"]]
    gain = what["gain_tok_s"]
    share = f" ({100 * gain / what['served_tok_s']:+.0f}%)" if what["served_tok_s"] else ""
    rate = what.get("acceptance_rate")
    lines = [f"  what if {said}: {what['what_if_tok_s']:.1f} tok/s against {what['served_tok_s']:.1f} as served, "
             f"{gain:+.1f} tok/s{share}" + (f" at acceptance {rate:.2f} (accepted / drafted)" if rate is not None
                                             else "")]
    return lines + [f"    note: {line}" for line in what["notes"]]

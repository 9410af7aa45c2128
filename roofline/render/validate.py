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

"""A measured decode speed set beside the prediction for the same scenario (pure functions over
an audit's JSON form, so a saved `roofline audit --json` file works as well as a fresh audit).

    bandwidth utilisation = measured tok/s x bytes per token / bandwidth
    verdict               = where measured falls against the ceiling and the expected speed

The ceiling is physics (no engine reads fewer bytes than the model holds per token, unless it
decodes several tokens per weight read: speculation); the expected speed is the ceiling times
the hardware's efficiency, a calibration. Measured above the ceiling is therefore a finding to
report, never a success.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from roofline.errors import RooflineError
from roofline.predict.verdict import verdict_of


@dataclass
class Validation:
    model: str
    hardware: str
    hardware_name: str
    bandwidth_gbps: float
    scenario: dict
    bytes_per_token: float
    ceiling_tok_s: float
    expected_tok_s: float
    measured_tok_s: float
    ratio_to_ceiling: float
    ratio_to_expected: float
    bandwidth_utilisation: float  # of the hardware's bandwidth: equals ratio_to_ceiling
    verdict: str
    verdict_text: str
    suspects: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _number(audit: dict, key: str) -> float:
    value = audit.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1e300:
        raise RooflineError(f"audit JSON has no positive {key!r}: is it the output of `roofline audit --json`?")
    return float(value)


def suspects_above(audit: dict) -> list[str]:
    scenario = audit.get("scenario") or {}
    out = []
    if not scenario.get("speculative_tokens"):
        out.append("speculative decoding (MTP / a draft model) on the server: it decodes several tokens per "
                   "weight read; audit with --speculative N to predict it")
    out.append("the hardware: is the server on the device whose bandwidth the audit used "
               f"({(audit.get('hardware') or {}).get('name', '?')})?")
    out.append("a model error: bytes per token over-counted; report it with the audit JSON and the bench JSON")
    return out


def suspects_below(audit: dict, measured: float, ceiling: float) -> list[str]:
    """Causes named from the inventory, most specific first."""
    out = []
    residuals = [g for g in audit.get("residuals") or [] if isinstance(g, dict)]
    if residuals:
        share = sum(float(g.get("share") or 0) for g in residuals)
        top = sorted(residuals, key=lambda g: -float(g.get("bytes_per_token") or 0))[:3]
        named = ", ".join(f"{g.get('label')} x{g.get('count')} ({g.get('format_label') or g.get('format')}, "
                          f"{100 * float(g.get('share') or 0):.0f}%)" for g in top)
        out.append(f"BF16 fallback layers in a quantized model read {100 * share:.0f}% of the bytes per token: "
                   f"{named}; they also run on unquantized GEMMs")
    arch = audit.get("architecture") or {}
    moe = int(arch.get("num_experts") or 0) > 0
    hybrid = int(arch.get("recurrent_layers") or 0) > 0
    host = (audit.get("hardware") or {}).get("host", "")
    if (moe or hybrid) and host != "cpu":
        what = " and ".join(w for w, on in (("MoE", moe), ("hybrid recurrent", hybrid)) if on)
        graph = audit.get("cuda_graph") or {}
        eager = graph.get("eager_tok_s") if isinstance(graph, dict) else None
        cost = (f" (the kernel model predicts {eager:.1f} tok/s eager vs {graph.get('graph_tok_s', 0):.1f} "
                "with CUDA graphs)") if isinstance(eager, (int, float)) else ""
        out.append(f"eager mode on a {what} model: dozens of small kernels per layer make launches dominate; "
                   f"drop --enforce-eager so CUDA graphs are captured{cost}")
    kernels = sorted({str(m.get("kernel")) for m in audit.get("modules") or []
                      if isinstance(m, dict) and m.get("kernel")})
    slow = [k for k in kernels if any(w in k.lower() for w in ("emulat", "naive", "reference", "fallback"))]
    if slow:
        out.append(f"slow kernels chosen by the engine: {', '.join(slow)}")
    if moe and host != "cpu":
        out.append("untuned MoE kernels: vLLM logs 'Using default MoE config' when no tuned config exists for "
                   "this GPU and expert shape (benchmarks/kernels/benchmark_moe.py --tune writes one)")
    elif host != "cpu":
        out.append("untuned or generic GEMM kernels for this format on this GPU: check which kernel vLLM logs "
                   "('Using ... for ... GEMM') and try --linear-backend")
    gap_ms = (1 / measured - 1 / ceiling) * 1e3
    where = ("the scheduler, sampling, detokenisation and HTTP on the CPU host, and GEMMs that are compute-bound "
             "there" if host == "cpu" else "kernel launches, host-side scheduling and sampling")
    out.append(f"time outside weight reads: {1e3 / measured:.3f} ms per token measured against {1e3 / ceiling:.3f} ms "
               f"of memory traffic at the roof, so {gap_ms:.3f} ms per token go to {where}")
    out.append("other requests on the server at the same time: they share the bandwidth (bench alone)")
    return out


def validate(audit: dict, measured_tok_s: float) -> Validation:
    """Measured decode tok/s (single stream unless the audit's scenario says otherwise) against
    the audit of the same model, scenario and hardware."""
    if not isinstance(audit, dict):
        raise RooflineError("the audit must be a JSON object (the output of `roofline audit --json`)")
    if isinstance(measured_tok_s, bool) or not isinstance(measured_tok_s, (int, float)) \
            or not 0 < measured_tok_s <= 1e9:
        raise RooflineError("measured tok/s must be a positive number (at most 1e9)")
    bytes_per_token = _number(audit, "bytes_per_token")
    ceiling = _number(audit, "ceiling_tok_s")
    expected = _number(audit, "expected_tok_s")
    hardware = audit.get("hardware") or {}
    if not isinstance(hardware, dict) or "bandwidth_gbps" not in hardware:
        raise RooflineError("audit JSON has no hardware bandwidth")
    bandwidth = _number(hardware, "bandwidth_gbps")

    measured = float(measured_tok_s)
    band = audit.get("expected_band") if isinstance(audit.get("expected_band"), dict) else {}
    band_error = band.get("error") if isinstance(band.get("error"), (int, float)) and \
        not isinstance(band.get("error"), bool) and 0 <= band.get("error") < 1 else None
    judged = verdict_of(measured, ceiling, expected, band_error)
    verdict = judged.id
    if verdict == "above_ceiling":
        suspects = suspects_above(audit)
    elif verdict in ("near_expected", "above_expected"):
        suspects = []
    else:
        suspects = suspects_below(audit, measured, ceiling)
    return Validation(
        model=str(audit.get("model", "?")), hardware=str(hardware.get("key", "?")),
        hardware_name=str(hardware.get("name", "?")), bandwidth_gbps=bandwidth,
        scenario=dict(audit.get("scenario") or {}), bytes_per_token=bytes_per_token,
        ceiling_tok_s=ceiling, expected_tok_s=expected, measured_tok_s=measured,
        ratio_to_ceiling=measured / ceiling, ratio_to_expected=measured / expected,
        bandwidth_utilisation=measured * bytes_per_token / (bandwidth * 1e9),
        verdict=verdict, verdict_text=judged.text, suspects=suspects,
    )


def compare_curve(predicted: list[dict], sweep: list[dict]) -> list[dict]:
    """The measured concurrency sweep (`roofline bench --concurrency`) beside the predicted decode curve
    (roofline.advise.capacity.decode_curve points as dicts), one row per level measured. The measured
    aggregate counts every completion token over each round's wall time (prefill included), so it sits
    below a decode-only prediction by the prefill share."""
    by_level = {p["concurrency"]: p for p in predicted}
    rows = []
    for level in sweep:
        n = level.get("concurrency")
        point = by_level.get(n)
        aggregate = (level.get("aggregate_tok_s") or {}).get("median")
        per_stream = (level.get("per_stream_decode_tok_s") or {}).get("median")
        if point is None or aggregate is None:
            continue
        rows.append({"concurrency": n, "measured_aggregate_tok_s": aggregate, "measured_per_stream_tok_s": per_stream,
                     "predicted_aggregate_tok_s": point["aggregate_tok_s"],
                     "predicted_per_stream_tok_s": point["per_stream_tok_s"], "predicted_bound": point["bound"],
                     "ratio": aggregate / point["aggregate_tok_s"] if point["aggregate_tok_s"] else None})
    return rows

"""What a prompt's work reaches on a device (roofline/data/prefill.toml): the share of the tensor rate a long
prompt's GEMMs, MoE experts, attention and recurrent scan reach, and what the server spends per request and
per prompt step beside the GPU. Read by the step model (predict/step.py) for every token a step computes for a
prompt; decode's fitted coefficients are never reused for it."""
from __future__ import annotations

from dataclasses import dataclass

from roofline.data import load_table

from .hardware import Hardware

# roofline's count of a recurrent layer's chunked-scan FLOPs per prompt token, per element of its state: the
# state update (2), its read by the queries (2), and the intra-chunk products that prepare them (4)
SCAN_FLOPS_PER_STATE_ELEMENT = 8
# the chunk of vLLM's chunked scans: fla's chunked delta rule (GDN) and Mamba2's SSD (its config's chunk_size)
SCAN_CHUNK_TOKENS = {"gdn": 64, "mamba": 256}


def format_family(fmt: str) -> str:
    """A weight format's family, the key of its weight-only rows: nvfp4-w4a16 -> nvfp4."""
    return fmt.split("-")[0]


@dataclass(frozen=True)
class PrefillRates:
    gemm: dict[str, float]  # tensor format -> share of its datasheet rate
    weight_only: float
    moe: dict[str, float]  # tensor format -> share of its datasheet rate
    moe_weight_only: dict[str, float]  # the experts' format family (nvfp4, mxfp4, int4, fp8) -> share of bf16
    attention: float
    scan: dict[str, float]  # recurrent kind -> share of the bf16 rate
    kind: str
    source: str
    where: str  # the table row: "cc 9.0", "gb10", "default"
    prompt_independence: float = 1.0  # predict/prefill.toml [routing]
    band: float | None = None  # the error the fit showed on models it was not fitted to (90% of them within it)
    ramp_tokens: dict = None  # kind -> the M (tokens; a MoE's: per expert) at which its kernels reach half their share
    attention_narrow: float | None = None  # attention with heads of 64 or fewer dims (None: as `attention`)
    attention_sliding: float | None = None  # a sliding window's attention over a longer prompt (None: as `attention`)

    def attention_share(self, head_dim: int, sliding: bool, tokens: float) -> float:
        """The share a chunk of `tokens` prompt tokens' attention reaches, by the layer's kind (FlashAttention's
        tiles do less with narrow heads and little with a short window), ramping up with the chunk's tokens."""
        if sliding and self.attention_sliding:
            share, ramp = self.attention_sliding, self.ramp_tokens.get("attention_sliding", 0.0)
        elif head_dim <= 64 and self.attention_narrow:
            share, ramp = self.attention_narrow, self.ramp_tokens.get("attention_narrow", 0.0)
        else:
            share, ramp = self.attention, self.ramp_tokens.get("attention", 0.0)
        return share * tokens / (tokens + ramp) if tokens else share

    def scan_share(self, kind: str, tokens: float) -> float:
        ramp = self.ramp_tokens.get(f"scan_{kind}", 0.0)
        return self.scan[kind] * tokens / (tokens + ramp)

    def ramp(self, kind: str, weight_only_format: str | None = None) -> float:
        """The tokens at which `kind`'s GEMMs (gemm, moe) reach half their share. A weight-only backend's at its own
        where measured (`weight_only` for the dense GEMMs, `moe_<family>` for the experts: Marlin dequantizes its
        tiles while it loads them and gets there at a smaller M), else its kind's."""
        if weight_only_format:
            key = "weight_only" if kind == "gemm" else f"moe_{format_family(weight_only_format)}"
            return self.ramp_tokens.get(key, self.ramp_tokens[kind])
        return self.ramp_tokens[kind]

    def gemm_share(self, compute: str) -> float:
        return self.gemm.get(compute) or self.gemm["bf16"]

    def moe_share(self, compute: str) -> float:
        return self.moe.get(compute) or self.moe["bf16"]

    def moe_weight_only_share(self, fmt: str) -> float:
        return self.moe_weight_only.get(format_family(fmt)) or min(self.moe_weight_only.values())


def prefill_rates(hardware: Hardware) -> PrefillRates:
    """The row of the table for `hardware`: its own key (or the entry it was derived from), else its compute
    capability, else the default (an estimate)."""
    table = load_table("prefill")
    rows = table.get("rate", [])
    keys = {hardware.key, hardware.derived_from}
    row = next((r for r in rows if r.get("hardware") in keys), None) or \
        next((r for r in rows if r.get("cc") and r["cc"] == (hardware.compute_capability or "")), None)
    where = (f"{row['hardware']}" if row and row.get("hardware") else f"cc {row['cc']}") if row else "default"
    row = row or table["default"]
    default = table["default"]
    return PrefillRates(gemm=dict(default["gemm"]) | dict(row.get("gemm", {})),
                        weight_only=row.get("weight_only", default["weight_only"]),
                        moe=dict(default["moe"]) | dict(row.get("moe", {})),
                        moe_weight_only=dict(default["moe_weight_only"]) | dict(row.get("moe_weight_only", {})),
                        attention=row.get("attention", default["attention"]),
                        scan=dict(default["scan"]) | dict(row.get("scan", {})), kind=row["kind"],
                        source=row["source"], where=where,
                        ramp_tokens=dict(default["ramp_tokens"]) | dict(row.get("ramp_tokens", {})),
                        band=row.get("band", default.get("band")),
                        attention_narrow=row.get("attention_narrow", default.get("attention_narrow")),
                        attention_sliding=row.get("attention_sliding", default.get("attention_sliding")),
                        prompt_independence=table["routing"]["prompt_independence"])


def _host_figure(section: str, field: str, hardware: Hardware) -> tuple:
    """(value, kind, source) of a host figure of prefill.toml [section]: a measured row for this hardware (or the
    entry it was derived from), else for its host class, else the section's estimate by host class."""
    table = load_table("prefill")[section]
    rows = table.get("measured", [])
    row = next((r for r in rows if r.get("hardware") in (hardware.key, hardware.derived_from)), None) or \
        next((r for r in rows if r.get("host") == hardware.host), None)
    if row:
        return row[field], row["kind"], row["source"]
    return table.get(hardware.host, table["unknown"]), table["kind"], table["source"]


def request_overhead_s(hardware: Hardware) -> tuple[float, str, str]:
    """(seconds, kind, source) a request spends on the server's host outside the steps before its first token."""
    ms, kind, source = _host_figure("request", "ms", hardware)
    return ms / 1e3, kind, source


def uncaptured_us_per_kernel(hardware: Hardware) -> tuple[float, str, str]:
    """(microseconds, kind, source) the host spends per compiled kernel of a step no CUDA graph covers."""
    return _host_figure("uncaptured", "us", hardware)


def scan_host_us_per_layer(hardware: Hardware) -> tuple[dict[str, float], str, str]:
    """({kind: microseconds}, kind, source) the host spends launching one recurrent layer's prompt kernels (the
    GDN / Mamba2 chunked scan, run outside vLLM's CUDA graphs), by host class."""
    per_kind, kind, source = _host_figure("scan_host", "us", hardware)
    return dict(per_kind), kind, source


def piecewise_launches(attention_backend: str) -> dict[str, float]:
    """A step's host work between piecewise graphs (a prompt or mixed step's, a decode's past the FULL graphs), in
    launches' worth, by what the graph is split at: "attention" (a layer on `attention_backend`: its own measured
    row, else the row for a backend no step measured), each recurrent kind, and "recurrent_step" (once a step,
    where recurrent layers are)."""
    rows = {row["split"]: row["launches"] for row in load_table("prefill")["piecewise"]["split"]}
    return {**{split: n for split, n in rows.items() if split.islower()},
            "attention": rows.get(attention_backend, rows["attention"])}

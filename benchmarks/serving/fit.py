"""The prefill rates of the step model (roofline/data/prefill.toml) fitted to measured first tokens: one request
at a time, prompts of 225 to 22,628 tokens, on real vLLM.

    .venv/bin/python benchmarks/serving/fit.py            # fit, print the table, write benchmarks/serving/fit.json
    .venv/bin/python benchmarks/serving/fit.py --check    # exit 1 if fit.json is not what the points give
    .venv/bin/python benchmarks/serving/fit.py --table    # also write the fitted rows of roofline/data/prefill.toml

Per device, the shares of the tensor rate a prompt's work reaches (dense GEMMs by format, weight-only GEMMs,
MoE experts, weight-only MoE, attention, the GDN and Mamba scans) and the host's time per request, by
coordinate descent on the mean squared log error of TTFT (each coefficient a golden-section search, sweeps until
nothing moves). The H200's shares are fixed to vLLM's kernels timed one by one (kernel_rates.json); GB10's are
those times two factors of its own, one for the tensor-core kernels and one for Marlin's (run_carried). GB10 also
fits how independently a prompt's tokens route to experts (real weights: the published runs); the H200's runs had
random dummy weights, which route every token independently (1.0).

Validation: each model left out in turn, the others refit, the left-out model priced (a coefficient only it
determined falls back to the table's default estimate): the error a model the fit never saw gets.
Points: benchmarks/serving/points.py (H200: benchmarks/results/vllm_h200_serving; GB10: the published fit set).
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from points import gb10_ttft, h200_ttft  # noqa: E402
from predict import server  # noqa: E402

from roofline.data import load_table  # noqa: E402
from roofline.predict.first_token import prompt_chunks  # noqa: E402
from roofline.predict.prefill import PrefillRates  # noqa: E402

FIT_JSON = HERE / "fit.json"
KERNEL_RATES = HERE / "kernel_rates.json"
TABLE = HERE.parent.parent / "roofline" / "data" / "prefill.toml"
MARKER = "# ---------------------------------------------------------------------------- fitted rows"
# coefficient -> (lowest, highest) searched
# a share may pass 1 where the device's tensor rate in hardware.toml is an estimate (GB10's bf16): the fit then
# says the estimate is low, not that a kernel beats its peak
BOUNDS = {"gemm.bf16": (0.05, 2.0), "gemm.fp8": (0.05, 2.0), "weight_only": (0.02, 2.0), "moe.bf16": (0.02, 2.0),
          "moe_weight_only.nvfp4": (0.01, 2.0), "moe_weight_only.mxfp4": (0.01, 2.0), "attention": (0.05, 2.0),
          "scan.gdn": (0.002, 2.0), "scan.mamba": (0.002, 2.0), "ramp.gemm": (1.0, 4096.0), "ramp.moe": (1.0, 1024.0),
          "uncaptured_us": (1.0, 200.0), "request_ms": (0.0, 300.0), "prompt_independence": (0.02, 1.0),
          "sustained": (0.5, 1.2), "scan_host_scale": (0.5, 4.0), "tensor_factor": (0.1, 8.0),
          "marlin_factor": (0.1, 8.0)}
# never searched: from vLLM's kernels timed one by one (kernel_rates.py) on Hopper, carried to GB10 as ratios
KERNEL_ONLY = ("attention_narrow", "attention_sliding", "ramp.attention", "ramp.attention_narrow",
               "ramp.attention_sliding", "ramp.scan_gdn", "ramp.scan_mamba")
# a weight-only kernel's own ramp (Marlin's, timed): the dense GEMMs', the experts' by format family
WEIGHT_ONLY_RAMPS = ("weight_only", "moe_nvfp4", "moe_mxfp4")
SENSITIVE = 1e-5  # a coefficient moves the loss by less than this when doubled: the points do not determine it
SWEEPS = 6


def defaults() -> dict:
    table = load_table("prefill")
    d = table["default"]
    return {"gemm.bf16": d["gemm"]["bf16"], "gemm.fp8": d["gemm"]["fp8"], "weight_only": d["weight_only"],
            "moe.bf16": d["moe"]["bf16"], "moe_weight_only.nvfp4": d["moe_weight_only"]["nvfp4"],
            "moe_weight_only.mxfp4": d["moe_weight_only"]["mxfp4"], "attention": d["attention"],
            "scan.gdn": d["scan"]["gdn"], "scan.mamba": d["scan"]["mamba"], "ramp.gemm": d["ramp_tokens"]["gemm"],
            "ramp.moe": d["ramp_tokens"]["moe"], "uncaptured_us": 10.5, "request_ms": 20.0, "prompt_independence": 1.0,
            "attention_narrow": None, "attention_sliding": None, "ramp.attention": 0.0, "sustained": 1.0, "scan_host_scale": 1.0,
            "ramp.attention_narrow": 0.0, "ramp.attention_sliding": 0.0, "ramp.scan_gdn": 0.0, "ramp.scan_mamba": 0.0,
            "ramp.weight_only": None, "ramp.moe_nvfp4": None, "ramp.moe_mxfp4": None}


def kernel_params() -> dict:
    """The coefficients vLLM's kernels give, timed one by one on a Hopper GPU (kernel_rates.json): fixed for the
    Hopper row, never fitted to a first token."""
    k = json.loads(KERNEL_RATES.read_text())["rates"]
    pairs = {"gemm.bf16": ("gemm.bf16", "ramp.gemm"), "gemm.fp8": ("gemm.fp8", None), "moe.bf16": ("moe.bf16", "ramp.moe"),
             "attention.head_dim_128": ("attention", "ramp.attention"),
             "attention.head_dim_64": ("attention_narrow", "ramp.attention_narrow"),
             "attention.sliding": ("attention_sliding", "ramp.attention_sliding"),
             "scan.gdn": ("scan.gdn", "ramp.scan_gdn"), "scan.mamba": ("scan.mamba", "ramp.scan_mamba"),
             "gemm.nvfp4-marlin": ("weight_only", None), "moe.nvfp4-marlin": ("moe_weight_only.nvfp4", None)}
    out = {}
    for key, (share, ramp) in pairs.items():
        out[share] = k[key]["share"]
        if ramp:
            out[ramp] = k[key]["ramp_tokens"]
    return out


# the shares a kernel measured (kernel_params), each scaled by the sustained clock
SUSTAINED = ("gemm.bf16", "gemm.fp8", "moe.bf16", "attention", "scan.gdn", "scan.mamba", "attention_narrow",
             "attention_sliding", "weight_only", "moe_weight_only.nvfp4")


def sustained(params: dict) -> dict:
    """The kernels' shares at the clock a whole prompt's work sustains: one factor for every kind, fitted to the
    device's first tokens pooled over its models (the kernels were timed in bursts of ~1 ms, a long prompt runs
    the tensor cores for a quarter to half a second)."""
    factor = params.get("sustained", 1.0)
    if factor == 1.0:
        return params
    return params | {k: params[k] * factor for k in SUSTAINED if params.get(k) is not None}


def rates_of(params: dict, base: PrefillRates) -> PrefillRates:
    params = sustained(params)
    return replace(base, gemm=base.gemm | {"bf16": params["gemm.bf16"], "fp8": params["gemm.fp8"]},
                   weight_only=params["weight_only"], moe=base.moe | {"bf16": params["moe.bf16"]},
                   moe_weight_only=base.moe_weight_only | {"nvfp4": params["moe_weight_only.nvfp4"],
                                                           "mxfp4": params["moe_weight_only.mxfp4"]},
                   attention=params["attention"], attention_narrow=params["attention_narrow"],
                   attention_sliding=params["attention_sliding"],
                   scan={"gdn": params["scan.gdn"], "mamba": params["scan.mamba"]},
                   ramp_tokens={"gemm": params["ramp.gemm"], "moe": params["ramp.moe"],
                                "attention": params["ramp.attention"], "attention_narrow": params["ramp.attention_narrow"],
                                "attention_sliding": params["ramp.attention_sliding"],
                                "scan_gdn": params["ramp.scan_gdn"], "scan_mamba": params["ramp.scan_mamba"]}
                   | {k: params[f"ramp.{k}"] for k in WEIGHT_ONLY_RAMPS if params.get(f"ramp.{k}") is not None},
                   prompt_independence=params["prompt_independence"])


# GB10's prompt work runs the kernels timed on Hopper (cuBLAS, Triton's fused MoE, Marlin, the scans; FlashAttention
# 2 where Hopper ran 3): its shares are the H200's measured ones (at its sustained clock) times one factor for the
# tensor-core kernels and one for Marlin's dequantizing ones, fitted to its first tokens; the ramps, and the host's
# time of the scans (through launch.toml's host ratio), as measured on Hopper. MXFP4 experts run Marlin's MoE there.
TENSOR_KINDS = ("gemm.bf16", "gemm.fp8", "moe.bf16", "attention", "attention_narrow", "attention_sliding",
                "scan.gdn", "scan.mamba")
MARLIN_KINDS = ("weight_only", "moe_weight_only.nvfp4", "moe_weight_only.mxfp4")
CARRIED_FACTORS = ("tensor_factor", "marlin_factor")
CARRIED_FREE = [*CARRIED_FACTORS, "request_ms", "prompt_independence", "uncaptured_us"]


@functools.lru_cache(maxsize=None)
def marlin_ramps() -> dict:
    """Marlin's own ramps, timed on its kernels (kernel_rates.json): the dense W4A16 GEMM's, and the MoE's for the
    NVFP4 and MXFP4 experts GB10 runs on it. The H200's row keeps its kinds' ramps: its one NVFP4 model's first
    tokens (8 layers, 512-16,384 tokens) are priced closer at the fused MoE's (in sample -4..+16% against -10..-3%
    at Marlin's, its other models' fit pulled along)."""
    k = json.loads(KERNEL_RATES.read_text())["rates"]
    moe = k["moe.nvfp4-marlin"]["ramp_tokens"]
    return {"ramp.weight_only": k["gemm.nvfp4-marlin"]["ramp_tokens"], "ramp.moe_nvfp4": moe, "ramp.moe_mxfp4": moe}


def carried_shares(params: dict) -> dict:
    """The full coefficients of a device priced as the measured device's kernels x its own factors."""
    base = sustained(params["base"])
    out = dict(base, sustained=1.0, **{k: params[k] for k in ("request_ms", "prompt_independence", "uncaptured_us")})
    out["moe_weight_only.mxfp4"] = base["moe_weight_only.nvfp4"]
    out |= marlin_ramps()  # (read once: out is a new dict)
    for names, factor in ((TENSOR_KINDS, "tensor_factor"), (MARLIN_KINDS, "marlin_factor")):
        for name in names:
            if out.get(name) is not None:
                out[name] = out[name] * params[factor]
    return out


def price(point, params: dict) -> float:
    if "base" in params:
        params = carried_shares(params)
    s = server(point.device, point.model, point.serve)
    pricer = s.pricer
    terms, config = pricer._terms, pricer.config
    pricer._terms = replace(terms, rates=rates_of(params, terms.rates), uncaptured_us=params["uncaptured_us"],
                            scan_host_us=scan_host_us(params["scan_host_scale"], point.device))
    if point.device != "gb10":  # dummy weights: every token routes on its own
        pricer.config = replace(config, prompt_routing=1.0)
    try:
        return params["request_ms"] / 1e3 + sum(pricer.seconds(0, 0, (chunk,))
                                                for chunk in prompt_chunks(point.prompt, s.settings))
    finally:
        pricer._terms, pricer.config = terms, config


@functools.lru_cache(maxsize=None)
def _scan_host_measured() -> dict:
    return {k: v["us"] for k, v in json.loads(KERNEL_RATES.read_text())["scan_host_per_layer"].items()}


def host_ratio(device: str) -> float:
    """GB10's Grace host against the x86 hosts the scans were timed on: launch.toml's host cost per kernel."""
    hosts = load_table("launch")["host"]
    return hosts["grace_arm"]["host_us_per_kernel"] / hosts["x86_server"]["host_us_per_kernel"] \
        if device == "gb10" else 1.0


def scan_host_us(scale: float, device: str) -> dict:
    """The host's time of one recurrent layer's prompt kernels: the scans' measured wrapper time x the mixer's
    fitted scale, on GB10 through the host ratio."""
    return {k: v * scale * host_ratio(device) for k, v in _scan_host_measured().items()}


def loss(points, params: dict) -> float:
    return statistics.fmean(math.log(price(p, params) / p.ttft_s) ** 2 for p in points)


def fit(points, free: list[str], start: dict) -> dict:
    """Coordinate descent from `start` and from the table's default estimates (with `start`'s fixed values): the
    better of the two (a device fitted from another's values can stall in a poor valley)."""
    other = defaults() | {k: v for k, v in start.items() if k not in free}
    runs = [_descend(points, free, s) for s in ((start, other) if other != start else (start,))]
    return min(runs, key=lambda p: loss(points, p))


def _descend(points, free: list[str], start: dict) -> dict:
    params = dict(start)
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(SWEEPS):
        moved = 0.0
        for name in free:
            low, high = BOUNDS[name]
            log = name != "request_ms"
            lo, hi = (math.log(low), math.log(high)) if log else (low, high)

            def f(x: float) -> float:
                return loss(points, params | {name: math.exp(x) if log else x})
            a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
            fa, fb = f(a), f(b)
            for _ in range(28):
                if fa <= fb:
                    hi, b, fb = b, a, fa
                    a = hi - ratio * (hi - lo)
                    fa = f(a)
                else:
                    lo, a, fa = a, b, fb
                    b = lo + ratio * (hi - lo)
                    fb = f(b)
            best = (lo + hi) / 2
            value = math.exp(best) if log else best
            moved = max(moved, abs(value - params[name]) / max(abs(params[name]), 1e-9))
            params[name] = value
        if moved < 1e-3:
            break
    return params


def free_for(points, device: str, fixed: dict | None = None) -> list[str]:
    """The coefficients these points determine: those whose doubling moves the loss (the rest stay at the table's
    default estimate; the GB10 prompt-routing coefficient only on GB10, whose runs had real weights), less the
    `fixed` ones (measured on kernels)."""
    start = defaults() | (fixed or {})
    base = loss(points, start)
    out = []
    for name in BOUNDS:
        if name in CARRIED_FACTORS:  # run_carried's
            continue
        if name == "prompt_independence" and device != "gb10" or name in (fixed or {}) or \
                name in ("sustained", "scan_host_scale") and not fixed:  # they scale what kernels measured
            continue
        trial = start | {name: start[name] * 2 if name != "request_ms" else start[name] + 20}
        if name == "uncaptured_us":
            trial = start | {name: 100.0}
        if name == "prompt_independence":
            trial = start | {name: 0.5}
        if abs(loss(points, trial) - base) > SENSITIVE:
            out.append(name)
    return out


def evaluate(points, params: dict) -> list[float]:
    return [price(p, params) / p.ttft_s - 1 for p in points]


SHARES = [name for name in BOUNDS if name not in ("request_ms", "prompt_independence", "ramp.gemm", "ramp.moe",
                                                  "uncaptured_us", "sustained", "scan_host_scale")]


# a weight-only kernel dequantizes its tiles and runs BF16 MMA (no FP4 / INT4 tensor cores in Hopper): a format no
# first token of the device determined runs at the device's BF16 share of its kind
KIN = {"weight_only": "gemm.bf16", "moe_weight_only.nvfp4": "moe.bf16", "moe_weight_only.mxfp4": "moe.bf16"}


def kin(params: dict, free: list[str], fixed: dict) -> dict:
    """On a device whose shares were measured on kernels: the weight-only shares its points do not determine, at
    the BF16 share of their kind (at the sustained clock)."""
    if not fixed:
        return params
    scaled = sustained(params)
    return params | {name: scaled[bf16] for name, bf16 in KIN.items() if name not in free and name not in fixed}


def run_device(device: str, points, fixed: dict | None = None) -> dict:
    """Fit `device`'s free coefficients to its first tokens; `fixed` (measured on kernels) stays as it is."""
    fixed = fixed or {}
    start = defaults() | fixed
    free = free_for(points, device, fixed)
    params = kin(fit(points, free, start), free, fixed)
    errors = evaluate(points, params)
    left = {}
    for case in sorted({p.case for p in points}):
        rest = [p for p in points if p.case != case]
        mine = [p for p in points if p.case == case]
        rest_free = free_for(rest, device, fixed)
        refit = kin(fit(rest, rest_free, start), rest_free, fixed)
        left[case] = evaluate(mine, refit)
    left_errors = [e for p in points for e in [left[p.case][[q for q in points if q.case == p.case].index(p)]]]
    return {"device": device, "free": free, "params": {k: params[k] for k in free}, "fixed": fixed,
            "carried": {},  # every share is its own (fitted or measured on kernels)
            "all": params, **scored(points, errors, left_errors)}


def scored(points, errors: list[float], left_errors: list[float]) -> dict:
    """Each point's fitted and left-out error, and the device's figures over them."""
    return {"points": [{"case": p.case, "family": p.family, "prompt": p.prompt, "measured_ms": p.ttft_s * 1e3,
                        "fitted_ms": (1 + e) * p.ttft_s * 1e3, "error": e, "left_out_error": lo,
                        "source": p.source} for p, e, lo in zip(points, errors, left_errors)],
            "mean_abs_error": statistics.fmean(abs(e) for e in errors),
            "left_out_mean_abs_error": statistics.fmean(abs(e) for e in left_errors),
            "within_25_left_out": sum(abs(e) <= 0.25 for e in left_errors) / len(left_errors),
            # the band a TTFT of this device prints: 90% of the left-out points within it
            "band90_left_out": sorted(abs(e) for e in left_errors)[math.ceil(0.9 * len(left_errors)) - 1],
            "worst_left_out": max(left_errors, key=abs)}


def run_carried(device: str, points, measured: dict) -> dict:
    """Fit `device`'s factors over the measured device's kernels (carried_shares) to its first tokens; each model
    left out in turn, the factors refit on the others."""
    start = {"base": measured, "tensor_factor": 1.0, "marlin_factor": 1.0, "request_ms": 20.0,
             "prompt_independence": 0.3, "uncaptured_us": 20.0}
    params = _descend(points, CARRIED_FREE, start)
    errors = evaluate(points, params)
    left = {}
    for case in sorted({p.case for p in points}):
        refit = _descend([p for p in points if p.case != case], CARRIED_FREE, params)
        left[case] = iter(evaluate([p for p in points if p.case == case], refit))
    left_errors = [next(left[p.case]) for p in points]
    full = carried_shares(params)
    return {"device": device, "free": CARRIED_FREE, "params": {k: params[k] for k in CARRIED_FREE}, "fixed": {},
            "carried": {k: full[k] for k in SHARES if full.get(k) is not None}, "all": full,
            **scored(points, errors, left_errors)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--table", action="store_true", help="write the fitted rows of roofline/data/prefill.toml")
    args = parser.parse_args()
    h200 = run_device("h200", h200_ttft(), fixed=kernel_params())
    out = {"schema": "roofline.prefill_fit/1", "devices": [h200, run_carried("gb10", gb10_ttft(), h200["all"])]}
    for device in out["devices"]:
        print(f"\n{device['device']}: " + ", ".join(f"{k} {v:.3g}" for k, v in device["params"].items()))
        print(f"  {'case':34}{'prompt':>8}{'measured':>10}{'fitted':>9}{'error':>8}{'left out':>10}")
        for p in device["points"]:
            print(f"  {p['case'][:34]:34}{p['prompt']:>8}{p['measured_ms']:>10.1f}{p['fitted_ms']:>9.1f}"
                  f"{100 * p['error']:>+7.0f}%{100 * p['left_out_error']:>+9.0f}%")
        print(f"  mean |error| {100 * device['mean_abs_error']:.1f}% in sample, "
              f"{100 * device['left_out_mean_abs_error']:.1f}% each model left out; "
              f"{100 * device['within_25_left_out']:.0f}% of points within 25% left out, worst "
              f"{100 * device['worst_left_out']:+.0f}%")
    text = json.dumps(out, indent=1, sort_keys=True)
    if args.check:
        stale = not FIT_JSON.exists() or json.loads(FIT_JSON.read_text()) != json.loads(text)
        print("fit.json is " + ("stale" if stale else "current"))
        return 1 if stale else 0
    FIT_JSON.write_text(text + "\n")
    if args.table:
        write_table(out)
    return 0


def _g(x: float) -> float:
    return float(f"{x:.3g}")


def _row(device: dict, where: str, kind: str, source: str) -> str:
    p = sustained(device["all"])
    optional = "".join(f"{name} = {_g(p[name])}\n" for name in ("attention_narrow", "attention_sliding")
                       if p.get(name) is not None)
    return (f"[[rate]]\n{where}\n"
            f"gemm = {{ bf16 = {_g(p['gemm.bf16'])}, fp8 = {_g(p['gemm.fp8'])} }}\n"
            f"weight_only = {_g(p['weight_only'])}\nmoe = {{ bf16 = {_g(p['moe.bf16'])} }}\n"
            f"moe_weight_only = {{ nvfp4 = {_g(p['moe_weight_only.nvfp4'])}, mxfp4 = {_g(p['moe_weight_only.mxfp4'])} }}\n"
            f"attention = {_g(p['attention'])}\n{optional}"
            f"scan = {{ gdn = {_g(p['scan.gdn'])}, mamba = {_g(p['scan.mamba'])} }}\n"
            f"ramp_tokens = {{ gemm = {_g(p['ramp.gemm'])}, moe = {_g(p['ramp.moe'])}, "
            f"attention = {_g(p['ramp.attention'])}, attention_narrow = {_g(p['ramp.attention_narrow'])}, "
            f"attention_sliding = {_g(p['ramp.attention_sliding'])}, scan_gdn = {_g(p['ramp.scan_gdn'])}, "
            f"scan_mamba = {_g(p['ramp.scan_mamba'])}"
            + "".join(f", {k} = {_g(p['ramp.' + k])}" for k in WEIGHT_ONLY_RAMPS
                      if p.get("ramp." + k) is not None) + " }\n"
            f"band = {_g(device['band90_left_out'])}\n"
            f"kind = \"{kind}\"\nsource = \"{source}\"\n")


SCAN_HOST_SOURCE = ("measured and scaled: the host's time of vLLM 0.26.0's chunked-scan kernels alone, called as vLLM "
                    "calls them for 512- and 1,024-token prompts on the x86 hosts of roofline's H100 / H200 benchmark runs (GDN {gdn} us, Mamba2 "
                    "{mamba} us a layer; benchmarks/serving/kernel_rates.py -> kernel_rates.json), times {scale} for "
                    "the rest of the mixer launched beside them outside the graphs (its causal conv, gating, norms and "
                    "metadata), fitted to the first tokens of the H200's two hybrids (benchmarks/serving/fit.py)")


def write_table(out: dict) -> None:
    """The fitted rows of prefill.toml (below its marker), the hosts' request times and the prompt routing."""
    import re

    h200, gb10 = out["devices"]
    error = lambda d: (f"mean |error| {100 * d['mean_abs_error']:.1f}% in sample, "  # noqa: E731
                       f"{100 * d['left_out_mean_abs_error']:.1f}% leaving each model out")
    rows = [MARKER, "# written by benchmarks/serving/fit.py --table from benchmarks/serving/fit.json", "",
            _row(h200, 'cc = "9.0"', "measured",
                 "measured on vLLM 0.26.0's own kernels, timed one by one under torch's profiler on the H200 the first "
                 "tokens ran on (benchmarks/gpu_vllm/prefill_kernels.py, benchmarks/results/vllm_kernels; an H100 "
                 "within 0-10% of it; benchmarks/serving/kernel_rates.py -> kernel_rates.json): the dense GEMMs "
                 "(cuBLAS BF16, CUTLASS FP8 with its activation quantization, Marlin's NVFP4 W4A16), the fused MoE "
                 "(Triton BF16, Marlin NVFP4), FlashAttention 3 varlen by head dim and window, FLA's GDN and Mamba2's "
                 "chunked scans; each share times one sustained-clock factor "
                 f"({_g(h200['all']['sustained'])}: the kernels ran in bursts of about a millisecond, a long prompt "
                 "keeps the tensor cores busy for a quarter second). Fitted to first tokens (benchmarks/serving/fit.py "
                 f"-> fit.json; real vLLM 0.26.0 on an H200, benchmarks/results/vllm_h200_serving, "
                 f"{len(h200['points'])} first tokens of 7 models, dummy weights): that factor, MXFP4's MoE on Triton "
                 f"(no kernel timed) and the host's times; {error(h200)}. Compute capability 9.0: the H100's and "
                 "H200's tensor cores are one design"),
            _row(gb10, 'hardware = "gb10"', "calibrated",
                 "the H200's shares, measured on vLLM's kernels (the row above, at its sustained clock), times two "
                 f"factors of GB10's own: {_g(gb10['params']['tensor_factor'])} for the tensor-core kernels (cuBLAS, "
                 f"Triton's fused MoE, FlashAttention, the scans) and {_g(gb10['params']['marlin_factor'])} for "
                 "Marlin's dequantizing ones (NVFP4 W4A16 and, on GB10, MXFP4 experts too); ramps as the kernels "
                 "measured them (Marlin's its own); fitted with the host's times and the prompt routing to the "
                 "published vLLM 0.26.0 first tokens of the GB10 fit set (benchmarks/gb10/results_prefill.csv: gpt-oss-20b MXFP4, "
                 "Nemotron-3-Nano-30B-A3B BF16 and NVFP4 on Marlin, Qwen3.6-35B-A3B BF16; "
                 f"{len(gb10['points'])} single requests of 225-22,628 prompt tokens) by benchmarks/serving/fit.py -> "
                 f"benchmarks/serving/fit.json: {error(gb10)}, the factors refit without the model. Shares above 1: "
                 "GB10's bf16 tensor rate in hardware.toml is an estimate below what its prompts reach")]
    text = TABLE.read_text()
    text = text[:text.index(MARKER)] + "\n".join(rows)
    for table, field, name in (("request", "ms", "request_ms"), ("uncaptured", "us", "uncaptured_us")):
        for key, device in (("x86_server", h200), ("gb10", gb10)):
            text = re.sub(rf'(\[\[{table}\.measured\]\]\n(?:host|hardware) = "{key}"\n{field} = )[0-9.]+',
                          lambda m: m.group(1) + str(_g(device["all"][name])), text)
    rates = json.loads(KERNEL_RATES.read_text())["scan_host_per_layer"]
    scale = h200["all"]["scan_host_scale"]
    text = re.sub(r'(\[\[scan_host\.measured\]\]\nhost = "x86_server"\nus = )\{[^}]*\}',
                  lambda m: m.group(1) + "{ " + ", ".join(f"{k} = {_g(v['us'] * scale)}" for k, v in rates.items())
                  + " }", text)
    text = re.sub(r'(\[\[scan_host\.measured\]\]\nhost = "x86_server"\nus = [^\n]*\nkind = "calibrated"\nsource = ")'
                  r'[^"]*"', lambda m: m.group(1) + SCAN_HOST_SOURCE.format(
                      gdn=_g(rates["gdn"]["us"]), mamba=_g(rates["mamba"]["us"]), scale=_g(scale)) + '"', text)
    grace = scan_host_us(scale, "gb10")
    text = re.sub(r'(\[\[scan_host\.measured\]\]\nhardware = "gb10"\nus = )\{[^}]*\}',
                  lambda m: m.group(1) + "{ " + ", ".join(f"{k} = {_g(v)}" for k, v in grace.items()) + " }", text)
    text = re.sub(r'(\[scan_host\]\nx86_server = )\{[^}]*\}(\ngrace_arm = )\{[^}]*\}(\ncpu = [^\n]*\nunknown = )\{[^}]*\}',
                  lambda m: m.group(1) + "{ " + ", ".join(f"{k} = {_g(v['us'] * scale)}" for k, v in rates.items())
                  + " }" + m.group(2) + "{ " + ", ".join(f"{k} = {_g(v)}" for k, v in grace.items()) + " }"
                  + m.group(3) + "{ " + ", ".join(f"{k} = {_g(v['us'] * scale)}" for k, v in rates.items()) + " }",
                  text)
    text = re.sub(r"(prompt_independence = )[0-9.]+", lambda m: m.group(1) + str(_g(gb10["all"]["prompt_independence"])),
                  text)
    TABLE.write_text(text)


if __name__ == "__main__":
    sys.exit(main())

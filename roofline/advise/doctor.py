"""Why a running server decodes below its roof: the pure part of `roofline doctor`.

Given the checkpoint's inventory (from the server's own capture, or the checkpoint), the hardware
and the serving configuration the server reported (`Serving`), this module

1. predicts what that exact configuration should reach (single stream): the step model
   (roofline.predict.step) of the server's KV dtype, context, speculative settings, graph mode, TP
   split and GEMM backend (an emulated kernel's extra bytes included);
2. finds each configuration cause (CUDA graphs off, a BF16 KV cache, BF16 residual linears, an
   emulated or slower backend, speculation below break-even), each as a fix that changes the
   inventory or the configuration;
3. ranks the fixes greedily: next is the one that gains most on top of the fixes ranked above it,
   and that is its expected gain; so the best configuration's prediction is this configuration's
   plus the causes' gains, exactly (each cause also states what it would gain alone);
4. sets the measured figure beside the prediction (the engine gap, a "measurement" cause).

Every fix text and threshold lives in roofline/data/doctor.toml.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from roofline.data import load_table
from roofline.model.formats import PLAIN_FORMATS, format_label
from roofline.model.grouping import short_label
from roofline.model.inventory import Inventory
from roofline.predict.backends import backend_named, backends_for
from roofline.predict.deployment import Deployment
from roofline.predict.bands import band_for, step_regime
from roofline.predict.hardware import Hardware
from roofline.predict.launch import graphs_apply
from roofline.predict.serving import Serving
from roofline.predict.speculation import break_even, vllm_acceptance_rate
from roofline.predict.step import price_step
from roofline.predict.topology import Topology
from roofline.predict.traffic import Traffic, compute_traffic
from roofline.predict.verdict import min_gain, verdict_of
from roofline.units import milliseconds

from .simulate import get_recipe, simulate

PLAIN = set(PLAIN_FORMATS.values())


@dataclass
class Prediction:
    tok_s: float
    ceiling_tok_s: float  # the bytes per token at the device's bandwidth
    bytes_per_token: float
    traffic: Traffic
    timing: str  # how the time was modelled
    regime: str = ""  # bands.step_regime: "host" where the engine's host time per step sets the step
    kernel: str = ""  # what the main format runs on (Backend.kernel): the band is of the pair


@dataclass
class Cause:
    id: str
    kind: str  # configuration | measurement
    evidence: str
    fix: str
    expected_gain_tok_s: float  # on top of the causes ranked above it (configuration causes)
    alone_gain_tok_s: float  # if it were the only fix
    joint_with: str | None = None  # a fix that pays only together with this one (two limits bind at once)

    def to_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "evidence": self.evidence, "fix": self.fix,
                "expected_gain_tok_s": self.expected_gain_tok_s, "alone_gain_tok_s": self.alone_gain_tok_s,
                "joint_with": self.joint_with}


@dataclass
class Diagnosis:
    predicted_tok_s: float
    ceiling_tok_s: float
    best_tok_s: float
    measured_tok_s: float | None
    bytes_per_token: float
    best_bytes_per_token: float
    causes: list[Cause]
    verdict: str
    timing: str
    traffic: Traffic  # of the server's own configuration
    verdict_id: str | None = None  # roofline.predict.verdict.VERDICTS; None when nothing was measured
    notes: list[str] = field(default_factory=list)

    @property
    def configuration_gain_tok_s(self) -> float:
        return sum(c.expected_gain_tok_s for c in self.causes if c.kind == "configuration")


# --------------------------------------------------------------------------- prediction

def _table() -> dict:
    return load_table("doctor")


def predict(inventory: Inventory, hardware: Hardware, serving: Serving) -> Prediction:
    """Single-stream decode tok/s this configuration should reach on this hardware (the step model)."""
    step = price_step(inventory, hardware, serving.step_config(inventory, hardware))
    traffic = step.traffic
    extra = step.extra_bytes_per_token
    if not graphs_apply(hardware):
        timing = "bandwidth x efficiency (no CUDA graphs on a CPU)"
    else:
        timing = "CUDA graphs" if serving.graphs else "eager (a host launch per kernel)"
    if serving.tp > 1:
        timing = f"tensor parallel x{serving.tp} over {step.placement.tp_link.name}, {timing}"
    if extra:
        timing += f", + {extra / 1e9:.3g} GB/token of emulated dequantization"
    return Prediction(step.tok_s, step.ceiling_tok_s, traffic.bytes_per_token + extra, traffic, timing,
                      step_regime(step), step.backend.kernel)


# --------------------------------------------------------------------------- causes

@dataclass
class Fix:
    """One thing to change; `apply` returns the fixed (inventory, serving)."""

    id: str
    evidence: str
    fields: dict
    apply: Callable[[Inventory, Serving], tuple[Inventory, Serving]]


@dataclass(frozen=True)
class Context:
    hardware: Hardware
    evidence: dict  # fact -> where it was seen ("capture: cudagraph_mode=NONE", ...)
    kv_fp8_supported: bool
    # what turned CUDA graphs off: --enforce-eager, or a compilation config whose cudagraph_mode is NONE
    # (then dropping --enforce-eager, which was never given, is no fix)
    graphs_off_by: str = "enforce_eager"


def _graphs(inventory: Inventory, serving: Serving, ctx: Context) -> list[Fix]:
    if serving.graphs or not graphs_apply(ctx.hardware):
        return []
    return [Fix("cuda_graphs", ctx.evidence.get("graphs", "graph mode: eager"),
                {"how": _table()["cause"]["cuda_graphs"]["how"][ctx.graphs_off_by]},
                lambda inv, s: (inv, replace(s, graphs=True)))]


def _kv_dtype(inventory: Inventory, serving: Serving, ctx: Context) -> list[Fix]:
    if serving.kv_cache_dtype.startswith("fp8") or not ctx.kv_fp8_supported or not inventory.shape.attention:
        return []
    resolved = compute_traffic(inventory, serving.scenario()).kv_dtype
    return [Fix("kv_cache_dtype", ctx.evidence.get("kv_cache_dtype", f"KV cache dtype {resolved}"),
                {"current": resolved}, lambda inv, s: (inv, replace(s, kv_cache_dtype="fp8")))]


def _residuals(inventory: Inventory, serving: Serving, ctx: Context) -> list[Fix]:
    """BF16 linears of a quantized checkpoint that the default recipe would quantize: one fix per
    kind of module ("linear_attn.in_proj_qkvz"), worth it above rules' residual share."""
    target = inventory.main_quantized_format()
    if target is None:
        return []
    simulated = simulate(inventory, target, get_recipe("default"))
    by_name = {m.name: m for m in simulated.modules}
    traffic = compute_traffic(inventory, serving.scenario())
    min_share = load_table("rules")["residual"]["min_share"]
    groups: dict[str, list] = {}
    for module, moved in zip(inventory.modules, traffic.modules):
        changed = by_name.get(module.name)
        if module.format in PLAIN and changed is not None and changed.format != module.format:
            groups.setdefault(short_label(module.name), []).append((module, moved))
    fixes = []
    for label, members in sorted(groups.items()):
        per_token = sum(moved.bytes_per_token for _, moved in members)
        if per_token < min_share * traffic.bytes_per_token:
            continue
        names = {module.name for module, _ in members}
        fmt = members[0][0].format
        methods = sorted({module.quant_method for module, _ in members})
        evidence = (f"{ctx.evidence.get('inventory', 'checkpoint')}: {label} x{len(members)} "
                    f"{'/'.join(methods)} in {format_label(fmt)}, {per_token / 1e9:.3g} GB/token "
                    f"({100 * per_token / traffic.bytes_per_token:.0f}% of bytes/token)")

        def apply(inv: Inventory, s: Serving, names=names) -> tuple[Inventory, Serving]:
            modules = [by_name[m.name] if m.name in names else m for m in inv.modules]
            return replace(inv, modules=modules), s
        fixes.append(Fix("bf16_residual", evidence, {"label": f"{label} x{len(members)}",
                                                      "gb_per_token": per_token / 1e9,
                                                      "format": format_label(fmt), "target": format_label(target)},
                         apply))
    return fixes


def _backend(inventory: Inventory, serving: Serving, ctx: Context) -> list[Fix]:
    """The main format runs on a backend that rules.toml rates below the best one here, or emulated."""
    fmt = inventory.main_quantized_format()
    if fmt is None or serving.backend is None:
        return []
    here = backends_for(fmt, ctx.hardware)
    # a weight-only fallback (W4A4 on Marlin) trades the format's own tensor cores for single-stream speed:
    # a choice of workload, not a cause, where the format runs natively here
    native = [b for b in here if not b.weight_only]
    candidates = [b for b in (native or here) if not b.requires]
    if not candidates:
        return []
    best = max(candidates, key=lambda b: b.relative(ctx.hardware))
    best_name = best.linear_backend or best.moe_backend
    if best_name is None or best_name == serving.backend:
        return []
    if serving.backend != "emulation" and \
            backend_named(fmt, serving.backend, ctx.hardware).relative(ctx.hardware) >= best.relative(ctx.hardware):
        return []
    moe = inventory.shape.num_experts and best.moe_backend
    flags = " ".join(filter(None, [f"--linear-backend {best.linear_backend}" if best.linear_backend else "",
                                   f"--moe-backend {best.moe_backend}" if moe else ""]))
    evidence = ctx.evidence.get("backend", f"{format_label(fmt)} runs on {serving.backend}")
    return [Fix("kernel_backend", evidence, {"flags": flags, "backend": best_name},
                lambda inv, s: (inv, replace(s, backend=best_name)))]


def break_even_acceptance(inventory: Inventory, hardware: Hardware, serving: Serving) -> float | None:
    """The per-draft-token acceptance at which this server's speculation neither gains nor loses
    (roofline.predict.speculation.break_even)."""
    plain = predict(inventory, hardware, replace(serving, speculative_tokens=0, acceptance=0.0)).tok_s
    return break_even(lambda a: predict(inventory, hardware, replace(serving, acceptance=a)).tok_s, plain,
                      serving.speculative_tokens)


def _speculation(inventory: Inventory, serving: Serving, ctx: Context) -> list[Fix]:
    if not serving.speculative_tokens:
        return []
    even = break_even_acceptance(inventory, ctx.hardware, serving)
    if even is not None and serving.acceptance >= even:
        return []
    n = serving.speculative_tokens
    fields = {"acceptance": vllm_acceptance_rate(serving.acceptance, n),
              "break_even": vllm_acceptance_rate(even, n) if even is not None else 1.0}
    return [Fix("speculative_below_break_even", ctx.evidence.get("speculative", f"{n} draft tokens"), fields,
                lambda inv, s: (inv, replace(s, speculative_tokens=0, acceptance=0.0)))]


FINDERS = (_graphs, _backend, _residuals, _kv_dtype, _speculation)


def _fix_text(fix: Fix) -> str:
    return _table()["cause"][fix.id]["fix"].format(**fix.fields)


def _tok_s_after(fix: Fix, inventory: Inventory, serving: Serving, hardware: Hardware) -> float:
    fixed_inventory, fixed_serving = fix.apply(inventory, serving)
    return predict(fixed_inventory, hardware, fixed_serving).tok_s


def _joint_fixes(fixes: list[Fix], inventory: Inventory, serving: Serving, hardware: Hardware, tok_s: float,
                 floor: float) -> tuple[Fix, Fix] | None:
    """The two fixes that gain most applied together, where that is worth a fix and neither alone is (the caller
    found no single one), ordered so that the first gains the more on its own; None where no pair pays."""
    best = None
    for i, a in enumerate(fixes):
        for b in fixes[i + 1:]:
            inv, cfg = a.apply(inventory, serving)
            inv, cfg = b.apply(inv, cfg)
            gain = predict(inv, hardware, cfg).tok_s - tok_s
            if gain >= floor and (best is None or gain > best[0]):
                best = (gain, a, b)
    if best is None:
        return None
    _, a, b = best
    a_first = _tok_s_after(a, inventory, serving, hardware) >= _tok_s_after(b, inventory, serving, hardware)
    return (a, b) if a_first else (b, a)


def diagnose(inventory: Inventory, hardware: Hardware, serving: Serving, measured_tok_s: float | None,
             ctx: Context) -> Diagnosis:
    here = predict(inventory, hardware, serving)
    fixes = [fix for finder in FINDERS for fix in finder(inventory, serving, ctx)]
    alone = {id(fix): _tok_s_after(fix, inventory, serving, hardware) - here.tok_s for fix in fixes}
    # Greedy: the fix that gains most on top of those already applied goes next, so a cause that a
    # bigger one masks (KV bytes do not matter while eager launches bind) still gets its share
    causes, inv, cfg, tok_s = [], inventory, serving, here.tok_s
    remaining, floor = list(fixes), max(min_gain(here.tok_s), 1e-9)
    while remaining:
        gains = [(_tok_s_after(fix, inv, cfg, hardware) - tok_s, n) for n, fix in enumerate(remaining)]
        gain, n = max(gains, key=lambda item: (item[0], -item[1]))
        if gain < floor:  # a change that buys nothing worth printing (+0.0 tok/s) is no fix ...
            pair = _joint_fixes(remaining, inv, cfg, hardware, tok_s, floor)
            if pair is None:
                break
            # ... unless it pays together with another: two limits bind at once (either alone leaves the other
            # setting the pace), the pair goes next, in its better order
            first, second = pair
            for fix, partner in ((first, second), (second, None)):
                remaining.remove(fix)
                inv, cfg = fix.apply(inv, cfg)
                after = predict(inv, hardware, cfg).tok_s
                causes.append(Cause(fix.id, "configuration", fix.evidence, _fix_text(fix), after - tok_s,
                                    alone[id(fix)], partner.id if partner else None))
                tok_s = after
            continue
        fix = remaining.pop(n)
        inv, cfg = fix.apply(inv, cfg)
        after = predict(inv, hardware, cfg).tok_s
        causes.append(Cause(fix.id, "configuration", fix.evidence, _fix_text(fix), after - tok_s, alone[id(fix)]))
        tok_s = after
    best = predict(inv, hardware, cfg)
    judged = None
    if measured_tok_s is None:
        verdict = "not measured: the prediction and the causes stand on what the server reported"
    else:
        band = band_for(inventory, hardware, graphs=serving.graphs and graphs_apply(hardware), regime=here.regime,
                        kernel=here.kernel)
        judged = verdict_of(measured_tok_s, here.ceiling_tok_s, here.tok_s, band.error if band else None)
        verdict = (f"{judged.text}: measured {measured_tok_s:.1f} tok/s is {100 * measured_tok_s / here.tok_s:.0f}% "
                   f"of the {here.tok_s:.1f} tok/s this configuration allows (ceiling {here.ceiling_tok_s:.1f})")
        lift = causes[0] if causes else None
        if judged.id == "near_expected":
            verdict += ("; the roof itself rises with: " + f"{lift.fix} (+{lift.expected_gain_tok_s:.1f} tok/s)"
                        if lift else "; no configuration change lifts it: only fewer bytes per token (another "
                                     "checkpoint) or faster memory would")
    if judged is not None and judged.engine_gap:
        outside_ms = 1000 / measured_tok_s - 1000 / here.tok_s
        evidence = (f"bench: {measured_tok_s:.1f} tok/s = {milliseconds(1000 / measured_tok_s)}/token against "
                    f"{milliseconds(1000 / here.tok_s)} modelled ({here.timing}): {milliseconds(outside_ms)} of every token go "
                    "to something the model of this configuration does not count")
        causes.append(Cause("engine_gap", "measurement", evidence, _table()["cause"]["engine_gap"]["fix"],
                            here.tok_s - measured_tok_s, here.tok_s - measured_tok_s))
    return Diagnosis(predicted_tok_s=here.tok_s, ceiling_tok_s=here.ceiling_tok_s, best_tok_s=best.tok_s,
                     measured_tok_s=measured_tok_s,
                     verdict_id=judged.id if judged else None,
                     bytes_per_token=here.bytes_per_token, best_bytes_per_token=best.bytes_per_token,
                     causes=causes, verdict=verdict, timing=here.timing, traffic=here.traffic)


def vllm_estimate_misses(inventory: Inventory, traffic: Traffic) -> list[str]:
    """What vLLM's --enable-mfu-metrics estimator cannot see: it sizes every weight by one byte
    count per quantization method (vllm/v1/metrics/perf.py _QUANT_WEIGHT_BYTE_SIZE) and knows no
    ignore list, so modules stored in another format than the main one are mis-sized there."""
    fmt = inventory.main_quantized_format()
    if fmt is None:
        return []
    odd: dict[str, float] = {}
    for module, moved in zip(inventory.modules, traffic.modules):
        if module.format != fmt and module.params and moved.bytes_per_token:
            key = f"{short_label(module.name)} ({format_label(module.format)})"
            odd[key] = odd.get(key, 0.0) + moved.bytes_per_token
    ranked = sorted(odd.items(), key=lambda item: -item[1])
    return [f"{label}: {per_token / 1e9:.3g} GB/token in another format than {format_label(fmt)}"
            for label, per_token in ranked[:5]]


# --------------------------------------------------------------------------- what if

@dataclass
class WhatIf:
    """The server as it runs, beside the same server with the vLLM flags given (doctor's "what if"):
    both priced by one path (advise/deploy.priced -> the step model) at one stream of the server's
    context."""

    flags: list[str]  # the changes, as vLLM spells them
    deployment: Deployment  # the server's configuration with the changes
    served_tok_s: float
    what_if_tok_s: float | None  # None when vLLM would refuse the changed deployment
    refusals: list[str]
    acceptance_rate: float | None  # vLLM's accepted / drafted the what-if was priced at
    notes: list[str]

    @property
    def gain_tok_s(self) -> float | None:
        return None if self.what_if_tok_s is None else self.what_if_tok_s - self.served_tok_s

    def to_json(self) -> dict:
        return {"flags": self.flags, "deployment": self.deployment.to_json(), "served_tok_s": self.served_tok_s,
                "what_if_tok_s": self.what_if_tok_s, "gain_tok_s": self.gain_tok_s, "refusals": self.refusals,
                "acceptance_rate": self.acceptance_rate, "notes": self.notes}


def what_if(inventory: Inventory, hardware: Hardware, serving: Serving, changes: Deployment,
            acceptance: float | None, draft: Inventory | None = None) -> WhatIf:
    """`changes` (only the flags it was given: Deployment.spelled) over the server's own deployment.
    `acceptance`: the per-token chance given with the changes; None keeps the server's measured one
    (or vLLM's default figure when the server does not speculate)."""
    from roofline.predict.deployment import acceptance_for
    from roofline.predict.speculation import vllm_acceptance_rate

    from .deploy import priced, vllm_refusals

    served = serving.deployment()
    given = dict(changes.spelled)
    changed = replace(served, **{name: getattr(changes, name) for name in given}, spelled=changes.spelled,
                      env=changes.env, notes=changes.notes, not_modelled=changes.not_modelled, model=changes.model)
    flags = list(given.values())
    base = predict(inventory, hardware, serving).tok_s
    refused = vllm_refusals(changed, inventory, hardware)
    spec = changed.speculative
    if acceptance is None and spec:
        acceptance = serving.acceptance if serving.speculative_tokens else acceptance_for(changed)
    rate = vllm_acceptance_rate(acceptance, spec.tokens) if spec else None
    if refused:
        return WhatIf(flags, changed, base, None, refused, rate, list(changed.notes))
    deployed, config = priced(inventory, changed, hardware, batch=1, context=serving.context,
                              acceptance_rate=acceptance if spec else 0.7, draft=draft)
    if changed.topology == Topology(tp=changed.tp) and changed.tp > 1:
        config = replace(config, placement=replace(serving, tp=changed.tp).placement(hardware))
    step = price_step(deployed, hardware, config)
    notes = list(changed.notes)
    if abs(step.tok_s - base) < 1e-9:
        notes.append(f"{', '.join(flags)}: moves memory or concurrency, not one stream's decode "
                     "(roofline capacity / preflight price that)")
    return WhatIf(flags, changed, base, step.tok_s, [], rate, notes)


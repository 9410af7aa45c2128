"""docs/VALIDATION.md and roofline/data/validation.toml from the real-vLLM results: every measured decode
step beside the step model's prediction of it (the tables as shipped), per GPU x architecture x format x
mode x batch, the error of each class in sample and with its architecture left out of the fit, and the
band every printed tok/s carries (roofline/predict/bands.py).

    .venv/bin/python benchmarks/gpu_vllm/validation.py           # write both files
    .venv/bin/python benchmarks/gpu_vllm/validation.py --check   # exit 1 when either is stale

tests/test_gpu_fit.py runs the check: a results file, a table or the step model that changes without a
regenerated VALIDATION.md fails CI.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import fit  # noqa: E402


def _load(name: str, path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gb10_fit = _load("gb10_fit", REPO / "benchmarks" / "gb10" / "fit.py")

MARKDOWN = REPO / "docs" / "VALIDATION.md"
TABLE = REPO / "roofline" / "data" / "validation.toml"

# the band rule (roofline/predict/bands.py): 90% of the class's out-of-sample errors, pooled under MIN_POINTS or
# MIN_FAMILIES
from roofline.predict.bands import COVERAGE, MIN_FAMILIES, MIN_POINTS, band_rule, quantile  # noqa: E402,F401


def band_of(own: tuple[list[float], set[str]], pools: list[tuple[str, tuple[list[float], set[str]]]]) \
        -> tuple[float, str]:
    """(band, basis) by the band rule (bands.band_rule) over (errors, the model families they are of), rounded up to
    the whole percent the tables print."""
    band, basis = band_rule(own[0], [(name, errors) for name, (errors, _) in pools],
                            families=[len(own[1])] + [len(lineages) for _, (_, lineages) in pools])
    return _ceil(band), basis


def coverage(values: list[float], band: float) -> str:
    return f"{sum(abs(v) <= band + 1e-9 for v in values)}/{len(values)}" if values else "-"


def family_of(config: str) -> str:
    from roofline.predict.bands import model_family

    return model_family(fit.inventory_of(config))


def leave_group_out(in_fit: list, group) -> dict[int, float]:
    """id(row) -> the row's error priced by a fit without its group (every row with its group(row) at once);
    a group whose absence leaves no point of a mode to fit gets none, and neither does a row on a weight-only
    backend whose rate only its own group's rows set (fit.fit_weight_only: in sample whatever is left out)."""
    rated_by: dict[str, set] = {}  # weight-only backend -> the groups whose rows set its rate
    for r in in_fit:
        if r.weight_only:
            rated_by.setdefault(r.backend, set()).add(group(r))
    out: dict[int, float] = {}
    for name in sorted({group(r) for r in in_fit}):
        others = [r for r in in_fit if group(r) != name]
        if not any(r.mode == "eager" for r in others) or not any(r.mode == "graphs" for r in others):
            continue
        partial = fit.fit(others)
        out.update({id(r): partial.predict_ms(r) / r.measured_ms - 1 for r in in_fit
                    if group(r) == name and not (r.weight_only and rated_by[r.backend] == {name})})
    return out


def layouts_of(config: str) -> list[str]:
    from roofline.predict.bands import layouts

    return sorted(layouts(fit.inventory_of(config)))


def made_of_lines(layouts, widths, kernels) -> list[str]:
    """A class's [[band]] lines of what its models were made of: their layouts, the narrowest and widest routed
    experts (empty: none had experts) and the kernels they ran; a model with something else is widened
    (predict/bands.py)."""
    widths = {w for w in widths if w}

    def strings(values) -> str:
        return "[" + ", ".join(f'"{v}"' for v in sorted(set(values))) + "]"

    return [f"layouts = {strings(layouts)}",
            f"expert_widths = [{min(widths)}, {max(widths)}]" if widths else "expert_widths = []",
            f"kernels = {strings(kernels)}"]


def kv_note(row) -> str:
    """A run's KV cache dtype and attention backend where it set them (--kv-cache-dtype, --attention-backend),
    beside the weights' format."""
    return ("" if row.kv_cache_dtype == "auto" else f", {row.kv_cache_dtype} KV") \
        + (f", {row.attention_backend}" if row.attention_backend else "")


def format_of(config: str, quantization: str | None) -> str:
    if quantization == "fp8":
        return "fp8 (online W8A8)"
    return fit.inventory_of(config).main_format()


def build() -> tuple[str, str]:
    from roofline.predict.hardware import get_hardware

    rows = fit.load_rows()
    in_fit = [r for r in rows if fit.fitted(r)]
    model = fit.fit(in_fit)
    # an architecture left out of the fit (fit.LEFT_OUT: its routing under dummy weights unknown) is no class's
    # point, held out or not: its one-stream steps would count its favourable backend and not the other
    held = [r for r in rows if r.case in fit.HELD_OUT and not fit.left_out(r)
            and r.case not in fit.SET_A_TERM]
    held_out = leave_group_out(in_fit, lambda r: r.architecture)  # id(row) -> error, its architecture left out
    from roofline.predict.backends import kernel_named
    from roofline.predict.bands import lineage, model_family

    inventories = {config: fit.inventory_of(config) for config in {r.config for r in rows}}
    families = {config: model_family(inventory) for config, inventory in inventories.items()}
    lineages = {config: lineage(inventory) for config, inventory in inventories.items()}
    # id(row) -> error with every architecture of its model family (lineage.toml: Qwen's dense, MoE and GDN
    # models at once) left out: the models a band speaks for are new ones of a kind the fit has seen
    family_out = leave_group_out(in_fit, lambda r: lineages[r.config])
    # and with its whole kind left out (no dense model at all in the fit): reported, not a band's -- a kind
    # is never unseen, and without it the host's cost per kernel and the kind's own terms are one unknown
    kind_out = leave_group_out(in_fit, lambda r: families[r.config])
    formats = {key: format_of(*key) for key in {(r.config, r.quantization) for r in rows}}
    layout = {config: layouts_of(config) for config in {r.config for r in rows}}
    width = {config: inventory.shape.expert_width for config, inventory in inventories.items()}
    hardware = get_hardware(fit.HARDWARE)
    spread = host_spread(rows)

    lines = [
        "# Validation: the step model against real vLLM",
        "",
        "Generated by `benchmarks/gpu_vllm/validation.py` from the probe results in `benchmarks/results/vllm_h200/`",
        "and the later machine starts' in their own folders (vLLM run offline with dummy weights on an H200,",
        "`benchmarks/gpu_vllm/probe.py`; RESULTS-gpu.md has the commands). The fit uses the first start's points and",
        f"later starts' steps ({', '.join(sorted(fit.FITTED_LATER))}: a Mamba hybrid's eager steps with the host",
        "checked, gpt-oss's graph steps with every bias zeroed, which set the MXFP4 backends' H200 rates); every other",
        "later case is held out. A row on a weight-only backend whose rate only its own model's steps set counts as no",
        "left-out error. With CUDA graphs",
        "a step is priced at least the engine's host time per step (`roofline/data/launch.toml` [step_host], measured",
        "under `vllm serve`: `benchmarks/serving/step_host.py`). Do not edit: `tests/test_gpu_fit.py` fails when this",
        "file is stale.",
        "",
        f"Coefficients fitted on these points (`benchmarks/gpu_vllm/fit.py`): efficiency {model.efficiency:.3f} of the",
        f"datasheet bandwidth, graph floor {model.floor_us:.2f} us per kernel, host {model.host_us:.1f} us per eager kernel,",
        f"a MoE layer's Python {model.moe_equiv:g} and a Mamba layer's {model.mamba_equiv:g} launches' worth. Predicted:",
        "`price_step` with the shipped tables (the same numbers). Left out of the fit: "
        + "; ".join(f"{a} ({why})" for a, why in fit.LEFT_OUT.items()) + ". MoE routing under dummy weights: "
        + ", ".join(f"{a} {r}" for a, r in fit.ROUTING.items()) + ", the rest uniform; deepseek_v3 uniform up to "
        + f"{fit.engine_fit.DUMMY_FLOAT32_ROUTER_TOKENS['deepseek_v3']['9']} tokens on Hopper, where vLLM computes its "
        "router's logits in float32 (fit.py says why).",
        "",
        "## Classes and bands",
        "",
        f"The band a predicted tok/s is printed with: the error that covers {COVERAGE:.0%} of the class's out-of-sample errors",
        "(not their mean): its points with their architecture left out of the fit in turn and with every architecture of",
        "their model family left out at once (`roofline/data/lineage.toml`: Qwen's dense, MoE and GDN models are one",
        "family), each point once at the larger of its two errors, and the held-out cases (measured after the fit, never",
        "fitted on:",
        f"{', '.join(sorted(set(fit.HELD_OUT) - set(fit.SET_A_TERM)))}; measured after it but in no band: "
        + "; ".join(f"{', '.join(sorted(c for c, w in fit.SET_A_TERM.items() if w == why))} ({why})"
                    for why in dict.fromkeys(fit.SET_A_TERM.values()))
        + f"). A class with fewer than {MIN_POINTS} such errors, or with them from fewer than {MIN_FAMILIES} model "
        "families (one family's steps are one trial of how the fit carries to a family it never saw, however many "
        "there are), takes the quantile of the",
        "pooled class (the GPU's mode), never less than its own worst point, as marked. Coverage: how many of the",
        "class's own left-out errors the band holds. Eager bands are wide: the host's own speed moved the same case",
        f"{1 + spread['error']:.1f}x between two machine starts (host_spread below), and a MoE or Mamba layer's Python is",
        "learnt from one architecture each.",
        "A graph step whose GPU time is under 1.25x the engine's host time per step (`roofline/data/launch.toml`",
        "[step_host]) is the host's: those points, of every family, are one class (\"any, host-set steps\"), whose band",
        "a step the tool prices in that regime prints (`predict/bands.step_regime`); the host's speed moved one batch's",
        "step up to 1.6x between two server starts on one machine. Points: fitted and held out. \"Kind out\": the",
        "errors with the class's whole kind left out (no dense model in the fit at all), shown and not in the band:",
        "a kind is never new to the tool, and without it the host's cost per kernel and the kind's own terms are one",
        "unknown.",
        "",
        "| GPU | vLLM | mode | family | points | in sample mean / max | model out mean / max | family out mean / max | "
        "held out mean / max | band | coverage | basis | kind out mean / max |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    toml = [
        "# Generated by benchmarks/gpu_vllm/validation.py from benchmarks/results/vllm_h200 (see docs/VALIDATION.md);",
        "# do not edit. One [[band]] per validated class: GPU x graph mode x model family.",
        "",
    ]
    from roofline.predict.bands import HOST_EXPOSED, HOST_REGIME, regime_of

    def regime(r) -> str:  # the host's regime: the step's device time under HOST_EXPOSED x the host's per step
        return regime_of(r.device_s(model.efficiency, model.floor_for(r), model.utilization), r.host_floor_s,
                         r.mode == "graphs")

    def family_class(r) -> str:  # the host regime's steps pooled over the families
        return "any" if regime(r) else families[r.config]

    classes = sorted({(r.mode, family_class(r)) for r in in_fit + held}, key=lambda k: (k[0] != "graphs", k[1] == "any", k[1]))
    versions = ", ".join(sorted({r.vllm_version for r in rows}))
    def left_out(members) -> list[float]:
        """One error per fitted point: the larger of its errors with its architecture and with its whole family left
        out (one point is one piece of evidence, however many fits leave it out)."""
        return [worst(held_out.get(id(r)), family_out.get(id(r))) for r in members
                if id(r) in held_out or id(r) in family_out]

    def out_of_sample(members, later_rows) -> tuple[list[float], set[str]]:
        """Fitted points' left-out errors and held-out cases' errors, and the model families they are of."""
        left = [r for r in members if id(r) in held_out or id(r) in family_out]
        return (left_out(left) + [model.predict_ms(r) / r.measured_ms - 1 for r in later_rows],
                {lineages[r.config] for r in left + later_rows})

    def stats(values):
        return f"{100 * statistics.mean(map(abs, values)):.1f}% / {100 * max(map(abs, values)):.0f}%" if values else "-"

    for mode, family in classes:
        members = [r for r in in_fit if r.mode == mode and family_class(r) == family]
        fitted = [abs(model.predict_ms(r) / r.measured_ms - 1) for r in members]
        left = [held_out[id(r)] for r in members if id(r) in held_out]
        whole = [family_out[id(r)] for r in members if id(r) in family_out]
        later_rows = [r for r in held if r.mode == mode and family_class(r) == family]
        later = [model.predict_ms(r) / r.measured_ms - 1 for r in later_rows]
        points = members + later_rows
        own, own_lineages = out_of_sample(members, later_rows)
        basis = "out of sample" if own else "in sample"
        if own:
            mode_pool = out_of_sample([r for r in in_fit if r.mode == mode], [r for r in held if r.mode == mode])
            band, why = band_of((own, own_lineages), [(f"{hardware.key.upper()} {mode}", mode_pool)])
        else:
            band, why = _ceil(max(fitted)), "in sample: no left-out point"
        shown = f"any, host-set steps" if family == "any" else family
        lines.append(f"| {hardware.key.upper()} | {versions} | {mode} | {shown} | {len(points)} | "
                     f"{stats(fitted)} | {stats(left)} | {stats(whole)} | {stats(later)} | "
                     f"±{100 * band:.0f}% | {coverage(own, band)} | {why} | "
                     f"{stats([kind_out[id(r)] for r in members if id(r) in kind_out])} |")
        toml += ["[[band]]", f'hardware = "{hardware.key}"', f'compute_capability = "{hardware.compute_capability}"',
                 f'vllm_version = "{versions}"', f'mode = "{mode}"', f'family = "{family}"',
                 f"points = {len(points)}", f"error = {band:.2f}", f'basis = "{basis}"',
                 "formats = [" + ", ".join(f'"{f}"' for f in sorted({formats[(r.config, r.quantization)].split(" ")[0]
                                                                       for r in points})) + "]",
                 *made_of_lines([x for r in points for x in layout[r.config]], [width[r.config] for r in points],
                                [kernel_named(r.backend) for r in points])] \
            + ([f'regime = "{HOST_REGIME}"'] if family == "any" else [])
        toml += ["host_measured = true", ""] if mode == "eager" else [""]
    lines += [
        "",
        "## Every point",
        "",
        "| GPU | vLLM | architecture | family | format | mode | batch | context | measured ms | predicted ms | error | left out |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: (r.architecture, r.case, r.batch, r.context)):
        predicted = model.predict_ms(r)
        left = f"{100 * held_out[id(r)]:+.0f}%" if id(r) in held_out else (
            "not fitted" if fit.left_out(r) else "sets a term" if r.case in fit.SET_A_TERM
            else "held out" if r.case in fit.HELD_OUT else "-")
        lines.append(f"| {hardware.key.upper()} | {r.vllm_version} | {r.architecture} | {families[r.config]} | "
                     f"{formats[(r.config, r.quantization)]}{kv_note(r)} | {r.mode} | {r.batch} | {r.context} | {r.measured_ms:.3f} | "
                     f"{predicted:.3f} | {100 * (predicted / r.measured_ms - 1):+.1f}% | {left} |")
    gb10_lines, gb10_toml = gb10_section()
    spec_lines, spec_toml = speculative_section()
    gb10_lines, gb10_toml = spec_lines + gb10_lines, spec_toml + gb10_toml
    transfer = transfer_error(model)
    calibrated = calibrated_transfer(model)
    lines += gb10_lines + first_token_section() + load_section() + kv_tokens_section() + [
        "",
        "## Off the validated GPUs and hosts",
        "",
        "- **Another GPU** prints the band of the nearest class (same generation first) widened by the transfer error,",
        f"  ±{100 * transfer['error']:.0f}%: {transfer['what']} ({transfer['points']} runs, mean |error|;",
        "  `benchmarks/gpu_vllm/validation.py transfer_error`).",
        "- **Eager mode on another host** than the one measured (every host but the H200's, the Grace host included:",
        f"  its cost is calibrated to one report) adds the host-to-host spread, ±{100 * spread['error']:.0f}%: {spread['what']}.",
        "  `roofline calibrate --engine vllm` measures the user's own host and narrows it.",
        f"- **Eager after `roofline calibrate --engine vllm`**: the entry's band for a class it ran is {COVERAGE:.0%} of",
        f"  its own errors with each model left out (a class of fewer than {MIN_POINTS}: of every class of the mode, never",
        "  below its own worst), and in eager mode never below the error on the host it measured of models it never",
        f"  ran, ±{100 * calibrated['error']:.0f}%: {calibrated['what']}.",
        "",
        "Not validated: GDN hybrids on a GPU beyond the cut Qwen3-Next and whole Qwen3.6-35B-A3B with CUDA graphs above,",
        "MLA beyond the 4-layer DeepSeek-V3 cut, tensor parallelism under vLLM. A family and mode no GPU validated prints",
        "\"no validation for this class\".",
        "",
    ]
    unseen = [family_out[id(r)] for r in in_fit if id(r) in family_out and r.mode == "graphs"]
    novelty = _ceil(quantile(unseen))
    lines += [
        "- **What no validated model had** (a format or the kernel it runs on -- `Backend.kernel`: GB10's NVFP4",
        "  hybrids ran Marlin alone --, an attention layout -- MLA, sliding windows -- or a recurrent",
        "  mixer no model of the class ran, routed experts outside the widths its models had -- a MoE kernel's rate",
        "  moves with them, `decode_rates.py` -- or a concurrency its points never ran on the GPU: GB10's dense seeds",
        f"  are single streams) widens the band by ±{100 * novelty:.0f}%, named beside it: 90% of the",
        f"  {len(unseen)} H200 graph-mode errors with the point's whole model family (lineage.toml) left out of the fit.",
        "",
    ]
    toml += gb10_toml + [
        "[novelty]", f"error = {novelty:.2f}", f"points = {len(unseen)}",
        'what = "90% of the H200 graph-mode errors with the whole model family (lineage.toml) left out of the fit"', "",
        "[transfer]", f"error = {transfer['error']:.2f}", f"points = {transfer['points']}",
        f'what = "{transfer["what"]}"', "",
        "[host_spread]", f"error = {spread['error']:.2f}", f'what = "{spread["what"]}"', "",
        "[calibrated_transfer]", f"error = {calibrated['error']:.2f}", f"points = {calibrated['points']}",
        f'what = "{calibrated["what"]}"', "",
    ]
    return "\n".join(lines), "\n".join(toml)


SPEC_STEPS = HERE / "spec_steps.json"  # benchmarks/gpu_vllm/spec_steps.py --table


def speculative_section() -> tuple[list[str], list[str]]:
    """The class of speculative steps (CUDA graphs, drafts): every such step measured on real vLLM beside its price
    (benchmarks/gpu_vllm/spec_steps.py: nothing of them fitted), its band by the band rule, and what it held."""
    from roofline.predict.bands import SPEC_REGIME, band_rule, lineage

    rows = [r for r in json.loads(SPEC_STEPS.read_text())["rows"] if r["mode"] == "graphs" and r["drafts"]]
    errors = [r["error"] for r in rows]
    # the model families of the runs' targets (lineage.toml), as the decode classes count theirs
    lineages = {lineage(fit.inventory_of(config)) for config in {r["config"] for r in rows}}
    band, why = band_rule(errors, [], errors="steps priced out of sample", families=[len(lineages)])
    band = _ceil(band)
    cards = sorted({r["card"] for r in rows})
    lines = ["", "## Speculative steps", "",
             f"Every speculative step measured on real vLLM 0.26.0 ({', '.join(c.upper() for c in cards)}; "
             "`benchmarks/gpu_vllm/spec_steps.py`, dummy weights, no draft accepted but ngram's, three H200 machine "
             "starts and one H100's) beside its price, none of them fitted: one class of every method, the band a "
             "drafted step prints (`predict/bands.step_regime`). The host's speed moves a drafted step far more than a "
             "plain one (the same draft-model step took 17-27 ms on three starts and 15-23 ms within one, the plain "
             "step 5.2 on all), so the band is the class's spread, said in words past ±50%.", "",
             "| method | points | mean / max error | within the band |", "|---|---:|---:|---:|"]
    for method in sorted({r["method"] for r in rows}):
        own = [r["error"] for r in rows if r["method"] == method]
        lines.append(f"| {method} | {len(own)} | {100 * statistics.mean(map(abs, own)):.1f}% / "
                     f"{100 * max(map(abs, own)):.0f}% | {coverage(own, band)} |")
    lines.append(f"| every method | {len(rows)} | {100 * statistics.mean(map(abs, errors)):.1f}% / "
                 f"{100 * max(map(abs, errors)):.0f}% | {coverage(errors, band)} |")
    lines += ["", f"Band: ±{100 * band:.0f}% ({why}).", ""]
    toml = ["[[band]]", 'hardware = "h200"', 'compute_capability = "9.0"', 'vllm_version = "0.26.0"',
            'mode = "graphs"', 'family = "any"', f'regime = "{SPEC_REGIME}"', f"points = {len(rows)}",
            f"error = {band:.2f}", 'basis = "out of sample"', 'formats = ["bf16"]', ""]
    return lines, toml


def worst(*errors: float | None) -> float:
    """The error of largest magnitude among those a point has (None: not computed)."""
    return max((e for e in errors if e is not None), key=abs)


def _ceil(value: float) -> float:
    return math.ceil(100 * value) / 100


def gb10_section() -> tuple[list[str], list[str]]:
    """GB10's classes (family x format x mode x streams) from benchmarks/gb10/fit.py, in sample and leaving
    each model out, and their bands."""
    payload = gb10_fit.run_fit()
    c = payload["coefficients"]
    lines = [
        "",
        "## GB10 (DGX Spark): published vLLM 0.26.0 runs",
        "",
        "Fitted by `benchmarks/gb10/fit.py` to `benchmarks/gb10/results.csv` (16 runs of one bench on one DGX Spark,",
        "sources in the file) and the seeds' Qwen3-8B figures (`roofline/data/measurements.toml`): efficiency",
        f"{c['efficiency']:.3f} of 273 GB/s, graph floor {c['graph_floor_us_per_kernel']:.2f} us per kernel, Grace host",
        f"{c['host_us_per_kernel']:.1f} us per eager kernel (calibrated to one report), Marlin's FP4 GEMMs at",
        f"{c['weight_only']['FP4 Marlin']['gemm_utilization']:g} of the BF16 tensor rate, MXFP4 Marlin's weights at",
        f"{c['weight_only']['MXFP4 Marlin']['weight_gbps']:g} GB/s and GEMMs at {c['weight_only']['MXFP4 Marlin']['gemm_utilization']:g}",
        "(`benchmarks/gb10/fit.json` names the runs each rests on). Errors are of tok/s (+: the model is too fast);",
        "\"left out\" refits everything without the run's model. The bench ran every stream with its own prompt:",
        "MoE routing priced \"uniform\".",
        "",
        f"Bands as the H200's: {COVERAGE:.0%} of the class's left-out errors (each run's model left out of the fit, and",
        "each model family's (lineage.toml: Qwen3.6 with the Qwen3-8B seeds) where it has more than one model), a class",
        f"under {MIN_POINTS} of them or of fewer than {MIN_FAMILIES} model families pooled with its family and mode, "
        "then its mode, then every GB10 run, never below its own worst point. The",
        "device's efficiency rests on the BF16 hybrids (Nemotron-3-Nano and Qwen3.6, one left out at a time), so a",
        "model family the bench never ran (a GDN hybrid that is not MoE, a dense model at several streams) is outside",
        "what these bands measured: such a model's band is widened for it (`predict/bands.py`).",
        "",
        "| family | format | mode | streams | points | in sample mean / max | left out mean / max | family out mean / max "
        "| band | coverage | basis |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    toml = []

    def cell(s):
        return f"{100 * s['mean_abs']:.1f}% / {100 * s['max_abs']:.0f}%" if s["points"] else "-"

    runs = payload["runs"]

    def left_errors(keep) -> tuple[list[float], set[str]]:
        """One error per run, the larger of its errors with its model and with its family left out; and the model
        families they are of."""
        kept = [r for r in runs if r["left_out"] is not None and keep(r)]
        return [worst(r["left_out"], r.get("family_out")) for r in kept], {r["lineage"] for r in kept}

    for key, entry in payload["classes"].items():
        left = entry["left_out"]
        basis = "out of sample" if left["points"] else "in sample"
        own = left_errors(lambda r: r["class"] == key)
        if own[0]:
            band, why = band_of(own, [
                (f"GB10 {entry['family']} {entry['mode']}",
                 left_errors(lambda r: r["family"] == entry["family"] and r["mode"] == entry["mode"])),
                (f"GB10 {entry['mode']}", left_errors(lambda r: r["mode"] == entry["mode"])),
                ("GB10", left_errors(lambda r: True))])
        else:
            band, why = _ceil(entry["in_sample"]["max_abs"]), "in sample: no left-out point"
        lines.append(f"| {entry['family']} | {entry['format']} | {entry['mode']} | {entry['concurrency']} | "
                     f"{entry['in_sample']['points']} | {cell(entry['in_sample'])} | {cell(left)} | "
                     f"{cell(entry['family_out'])} | ±{100 * band:.0f}% | "
                     f"{coverage(own[0], band)} | {why} |")
        toml += ["[[band]]", 'hardware = "gb10"', 'compute_capability = "12.1"', 'vllm_version = "0.26.0"',
                 f'mode = "{entry["mode"]}"', f'family = "{entry["family"]}"', f"points = {entry['in_sample']['points']}",
                 f"error = {band:.2f}", f'basis = "{basis}"', f'formats = ["{entry["format"]}"]',
                 f'streams = "{entry["concurrency"]}"',
                 *made_of_lines(entry["layouts"], entry["expert_widths"], entry["kernels"]), ""]
    lines += ["", "| run | backend | streams | context | measured tok/s | predicted | error | left out |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in payload["runs"]:
        left = "-" if r["left_out"] is None else f"{100 * r['left_out']:+.0f}%"
        lines.append(f"| {r['model']} ({r['mode']}) | {r['backend']} | {r['concurrency']} | {r['context']} | "
                     f"{r['measured_tok_s']:.2f} | {r['predicted_tok_s']:.2f} | {100 * r['in_sample']:+.1f}% | {left} |")
    s, h = payload["in_sample"], payload["left_out"]
    lines += ["", f"The bench's runs: in sample mean |error| {100 * s['mean_abs']:.1f}% (max {100 * s['max_abs']:.0f}%), "
              f"leaving the model out {100 * h['mean_abs']:.1f}% (max {100 * h['max_abs']:.0f}%). The bench ran no dense",
              "model: dense models read at the Marlin seed's share (family efficiency "
              f"{c['family_efficiency'].get('dense', 1.0):.3f}), and with the seeds left out 6-12% slow: the dense bands say so."]
    return lines, toml


SERVING = REPO / "benchmarks" / "serving"


def _errors(values) -> str:
    values = list(values)
    return f"{100 * statistics.fmean(abs(e) for e in values):.1f}% / {100 * max(values, key=abs):+.0f}%"


# an H100's memory on the H200: vLLM's default 0.92 of an H100's 79.18 GiB over the H200's 139.8 GiB
H100_SHARE = 0.5211


def kv_tokens_section() -> list[str]:
    """KV cache tokens at start-up: `roofline capacity` for each engine the project started against the line vLLM
    logged (benchmarks/gpu_vllm/compare.py), by class and by the memory the engine had."""
    import compare

    folders = [("H200", compare.RESULTS), ("H200", compare.ACTIVATION), ("H200", compare.STARTUP),
               ("H200", compare.MEMORY), ("H200", compare.LOADTRACE)] + [("H100", folder) for folder in compare.H100]
    groups: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for device, folder in folders:
        results = {path.stem: result for path, result, _, _ in fit.results(folder)}
        for name, theirs, ours, _, _ in compare.compared(folder)[1]:
            if ours is None:
                continue
            result = results[name]
            utilization = (result.get("engine") or {}).get("gpu_memory_utilization") or 0.92
            memory = ("an H100's memory" if device == "H100" or abs(utilization - H100_SHARE) < 1e-3 else
                      "an H200's memory" if utilization > 0.6 else f"{utilization:g} of its memory")
            key = (f"{device}, {memory}", family_of(result["config"]))
            groups.setdefault(key, []).append((name, ours / theirs - 1))
    lines = ["", "## KV cache tokens at start-up", "",
             "`roofline capacity` for every engine the project started (same max_model_len, max_num_seqs, token budget,",
             "memory utilization, graphs or eager), against `KV cache size: N tokens` in vLLM 0.26.0's log",
             "(`benchmarks/gpu_vllm/compare.py`). The profile run is priced by vLLM's model runner",
             "(`roofline/advise/profile_run.py`); on an H100's memory the KV cache is a few GiB, so the memory terms",
             "decide it. \"An H100's memory\" on the H200: gpu_memory_utilization 0.5211 of its 139.8 GiB, an H100's",
             "0.92 x 79.18 GiB (`benchmarks/results/vllm_h200_memory`).", "",
             "| engines | family | engines | mean abs error | most below | most above | above +1% |",
             "|---|---|---:|---:|---:|---:|---|"]
    for (where, family), rows in sorted(groups.items()):
        errors = [e for _, e in rows]
        above = [f"{n} ({100 * e:+.1f}%)" for n, e in rows if e > 0.01]
        lines.append(f"| {where} | {family} | {len(rows)} | {100 * sum(abs(e) for e in errors) / len(errors):.2f}% | "
                     f"{100 * min(errors):+.1f}% | {100 * max(errors):+.1f}% | {', '.join(above) or 'none'} |")
    lines += ["", "The weights are priced as vLLM holds them (`roofline/advise/held_layout.py`): the checkpoint's",
              "tensors, the layout a MoE kernel gives the experts (gpt-oss's MXFP4 on Hopper: padded scale tiles,",
              "float32 biases) and the caching allocator's blocks while vLLM loads (every tensor above 10 MiB rounded",
              "up to 2 MiB); gpt-oss-120b at an H100's memory was +8.7% before them. A cold torch.compile's copy of the",
              "embedding table is priced (`qwen3-8b-warm`, the engine's second start from vLLM's compile cache, gets",
              "0.9% more than priced). Above +1%: DeepSeek-V3's MLA cut with CUDA graphs (its compiled profile",
              "peaks 1 GiB above the eager one; not traced)."]
    return lines


def first_token_section() -> list[str]:
    """The first token of one request: the prefill rates' fit (benchmarks/serving/fit.json) per device and class,
    in sample and with each model left out, and the band a TTFT prints."""
    fit = json.loads((SERVING / "fit.json").read_text())
    lines = ["", "## The first token: one request at a time", "",
             "TTFT of one request (prefix caching off) from the step model's prompt steps and the server's time per",
             "request (`roofline/data/prefill.toml`). On Hopper the share of the tensor rate each kind of prompt work",
             "reaches is measured on vLLM's own kernels timed one by one on the H200 (`benchmarks/gpu_vllm/",
             "prefill_kernels.py` -> `benchmarks/results/vllm_kernels`, `benchmarks/serving/kernel_rates.py`: dense",
             "GEMMs BF16 / FP8 / Marlin NVFP4, fused MoE Triton BF16 / Marlin NVFP4, FlashAttention 3 by head dim and",
             "window, the GDN and Mamba2 scans); fitted to the H200's first tokens (`benchmarks/serving/fit.py`, real",
             "vLLM 0.26.0, `benchmarks/results/vllm_h200_serving`, dummy weights) are only what no kernel measured: one",
             "sustained-clock factor over every share, MXFP4's MoE on Triton, the host's time per request, per",
             "uncaptured kernel and per hybrid layer. The GB10 runs the same kernels (FlashAttention 2 for 3): its",
             "rates are the H200's measured shares times two factors of its own, one for the tensor-core kernels and one",
             "for Marlin's (its NVFP4 and MXFP4 experts), with the host's time per request and the prompt routing of real",
             "weights, fitted to the published first tokens of the fit set (`benchmarks/gb10/results_prefill.csv`).",
             "\"Left out\" refits everything without the point's model. Errors of TTFT (+: the model is slower), mean",
             "|error| / worst.", "",
             "| device | class | models | points | in sample | left out | within ±25% left out |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for device in fit["devices"]:
        classes: dict[str, list] = {}
        for point in device["points"]:
            classes.setdefault(point["family"], []).append(point)
        for family, points in sorted(classes.items()):
            within = sum(abs(p["left_out_error"]) <= 0.25 for p in points) / len(points)
            lines.append(f"| {device['device'].upper()} | {family} | {len({p['case'] for p in points})} | {len(points)} | "
                         f"{_errors(p['error'] for p in points)} | {_errors(p['left_out_error'] for p in points)} | "
                         f"{100 * within:.0f}% |")
        lines.append(f"| {device['device'].upper()} | all | {len({p['case'] for p in device['points']})} | "
                     f"{len(device['points'])} | {_errors(p['error'] for p in device['points'])} | "
                     f"{_errors(p['left_out_error'] for p in device['points'])} | "
                     f"{100 * device['within_25_left_out']:.0f}% |")
    lines += ["", "The band a TTFT prints is the device's 90th percentile of the left-out errors: " + ", ".join(
        f"{d['device'].upper()} ±{100 * d['band90_left_out']:.0f}%" for d in fit["devices"]) + " (an unfitted device: "
        "the table's default estimate, ±100%). On the H200 the aim of ±25% on 80% of points out of sample is met",
        "leaving each model out and on the two models measured after the fit was frozen (below, \"Held out\"); the",
        "class it misses is gpt-oss's MXFP4 MoE on Triton (no kernel of it timed: its share rests on the one model).",
        "On the GB10 it is met leaving each model out: its four models are four classes, and what one of them",
        "leaves undetermined is the H200 kernels' ratio, not a coefficient of its own (before, with every GB10 share",
        "fitted on its own, 40% of the points were within ±25% left out and the worst was +77%)."]
    return lines


def load_section() -> list[str]:
    """Under open-loop load: every recorded vllm bench serve run replayed through the load model
    (benchmarks/serving/load_check.json; nothing fitted to them)."""
    check = json.loads((SERVING / "load_check.json").read_text())
    rows = [r for r in check["rows"] if not r["first_run"] and not r.get("host_probe") and not r.get("stalled")]
    lines = ["", "## Under load: arrival rates and bursts", "",
             "Every `vllm bench serve` run of the H200 harness (Poisson at 8-40 requests/s and a burst of 64, 150",
             "requests of 1,024 + 256 tokens, Qwen3-8B and Qwen3-30B-A3B BF16; Llama-3.1-8B and the 8-layer",
             "Mixtral-8x7B, held out, the Mixtral again on a later machine start) replayed request by request at the",
             "client's own start times through the load model (`benchmarks/serving/load_check.py`): vLLM's scheduler,",
             "the step model's mixed steps, the fitted time per request. Nothing is fitted to these runs. Each server's",
             "first load run (one-time JIT compiles at new batch sizes) is left out, and so is any later run the same",
             "compiles stalled (below), and the 2-layer host probe (below).", "",
             "| metric | runs | mean | p50 | p90 | p99 |", "|---|---:|---:|---:|---:|---:|"]
    for key, name in (("ttft", "TTFT"), ("itl", "inter-token latency"), ("tpot", "time per output token"),
                      ("e2el", "end-to-end latency")):
        cells = []
        for q in ("mean", "median", "p90", "p99"):
            errors = [r[f"{key}_{q}"]["error"] for r in rows if r[f"{key}_{q}"]["error"] is not None]
            cells.append(_errors(errors))
        lines.append(f"| {name} | {len(rows)} | " + " | ".join(cells) + " |")
    throughput = [r["predicted_throughput"] / r["measured_throughput"] - 1 for r in rows]
    lines.append(f"| requests/s completed | {len(rows)} | {_errors(throughput)} | | | |")
    lines += ["", "| run | rate | TTFT mean | ITL p50 | TPOT mean | E2E mean | requests/s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in check["rows"]:
        mark = " (first run, left out)" if r["first_run"] else " (host probe, apart)" if r.get("host_probe") else \
            f" (stalled {r['stall_s']:.1f} s, left out)" if r.get("stalled") else ""
        rate = "burst" if r["rate"] in (None, "inf") or (isinstance(r["rate"], float) and math.isinf(r["rate"])) \
            else f"{r['rate']:g}"
        lines.append(f"| {r['file'].removesuffix('.json.gz')}{mark} | {rate} | {100 * r['ttft_mean']['error']:+.0f}% | "
                     f"{100 * r['itl_median']['error']:+.0f}% | {100 * r['tpot_mean']['error']:+.0f}% | "
                     f"{100 * r['e2el_mean']['error']:+.0f}% | "
                     f"{100 * (r['predicted_throughput'] / r['measured_throughput'] - 1):+.0f}% |")
    held = check.get("held_out_ttft") or []
    if held:
        within = sum(abs(h["error"]) <= 0.25 for h in held)
        lines += ["", "Held out of every fit: Qwen3-8B with `--max-num-batched-tokens 2048` (its prompts in chunks of 2,048"
                  " tokens; the fit saw vLLM's default 8,192 only), and two models of families no fit saw, run on the",
                  "H200 after the prompt rates were frozen (`benchmarks/results/vllm_h200_heldout`, 2026-11-27):",
                  "Llama-3.1-8B-Instruct BF16 and Mixtral-8x7B cut to 8 layers (8 experts of 14,336, top-2); one",
                  "request at a time, and at the rates above:", "",
                  "| case | prompt | measured ms | predicted ms | error | the same at the default budget, measured |",
                  "|---|---:|---:|---:|---:|---:|"]
        for h in held:
            base = f"{h['default_budget_measured_ms']:.1f}" if h["default_budget_measured_ms"] else "-"
            lines.append(f"| {h['case']} | {h['prompt']:,} | {h['measured_ms']:.1f} | {h['predicted_ms']:.1f} | "
                         f"{100 * h['error']:+.0f}% | {base} |")
        lines += ["", f"{within} of {len(held)} held-out first tokens within ±25% (mean |error| "
                  f"{100 * statistics.fmean(abs(h['error']) for h in held):.1f}%). The step budget's 1,024-token",
                  "prompt: 33 ms measured where the default budget's took 45, priced alike (a step above the",
                  "512-token graph capture launched from the host): torch.compile's range ends at the budget (2,048",
                  "vs 8,192), which is not modelled."]
    gb10 = check["summary"]["gb10_burst_ttft_mean"]
    lines += ["", f"GB10: the published bursts of the fit set (5-20 requests at once, {gb10['runs']} runs of four models), "
              f"mean TTFT within {100 * gb10['mean_abs_error']:.1f}% on average (worst {100 * gb10['worst']:+.0f}%); "
              "their single requests are in the fit above, the bursts are not.",
              "TTFT under load comes out early: the model's server spends the measured time per request whatever the "
              "load, while the real API server, streaming every running request's tokens, answers later as the load "
              "grows. The inter-token latency's p90 is the step that carries a prompt's chunk; its error is the widest "
              "(the chunk's rate at mixed batch sizes). The held-out 8-layer Mixtral served fewer requests per second than "
              "the model in two runs (20.8 at 32 offered where the model serves 23.9; 16.4 at 24 where it serves "
              "19.6): both are the stalled runs below, whose 1.6-2 s stop is in their duration; its decode step alone "
              "is priced within 6% at batch 1-128 on both machine starts and its warm run at 16 requests/s within "
              "11% on every metric."]
    stalls = check["summary"].get("with_stalls")
    stalled = [r for r in check["rows"] if r.get("stalled")]
    if stalls and stalled:
        lines += ["", f"Stalls: in {len(stalled)} later runs ("
                  + ", ".join(r["file"].removesuffix(".json.gz") for r in stalled)
                  + ") the TTFT of one Poisson arrival is 1.6-2.0 s above the one before it, and the "
                  "requests after it drain that backlog: the server stopped, for as long as a Triton kernel takes to "
                  "compile (the fused MoE at a token count new to the server; vLLM's JIT monitor logs only the first "
                  "compile, `warning_once`). Before it, their mean TTFT was priced "
                  + ", ".join(f"{100 * r['before_stall']['error']:+.0f}% ({r['before_stall']['requests']} requests, "
                              f"{r['before_stall']['measured_ttft_ms']:.0f} ms measured)"
                              for r in stalled)
                  + ". The model prices a warm server; those runs are left out with the first "
                  "runs (`load_check.py STALL_S`). Counted, TTFT mean "
                  f"{100 * stalls['ttft_mean']['mean_abs_error']:.1f}%, p90 {100 * stalls['ttft_p90']['mean_abs_error']:.1f}%, "
                  f"inter-token latency median {100 * stalls['itl_median']['mean_abs_error']:.1f}%, end-to-end "
                  f"{100 * stalls['e2el_mean']['mean_abs_error']:.1f}%."]
    probe = check["summary"].get("with_host_probe")
    probes = [r for r in check["rows"] if r.get("host_probe") and not r["first_run"]]
    if probe and probes:
        tpot = sorted(-100 * r["tpot_mean"]["error"] for r in probes)
        late = sorted(r["ttft_mean"]["measured_ms"] - r["ttft_mean"]["predicted_ms"] for r in probes)
        lines += ["", "The host probe (`qwen3-06b-2l-load`, `benchmarks/results/vllm_h200_host`): Qwen3-0.6B cut to 2 "
                  "layers, whose GPU step is ~0.3 ms, at 10-80 requests/s of 1,024 + 256 tokens. The engine's host time "
                  "per step (`roofline/data/launch.toml` [step_host]) was fitted on the same machine's closed-loop runs "
                  "(four server starts, ±25% between them); under these arrivals the time per output token is priced "
                  f"{tpot[0]:.0f}-{tpot[-1]:.0f}% short and the first token {late[0]:.0f}-{late[-1]:.0f} ms early: "
                  "host work beside the step (each arriving request's, ~3-5 ms of it serial: a burst of N closed-loop "
                  "requests gets its first tokens over N x 3-5 ms) that the model does not have. With these runs "
                  f"counted, TTFT mean {100 * probe['ttft_mean']['mean_abs_error']:.1f}%, inter-token latency median "
                  f"{100 * probe['itl_median']['mean_abs_error']:.1f}%, time per output token "
                  f"{100 * probe['tpot_mean']['mean_abs_error']:.1f}%, end-to-end "
                  f"{100 * probe['e2el_mean']['mean_abs_error']:.1f}%."]
    return lines


def transfer_error(model) -> dict:
    """What a GPU without its own fit gets: GB10's bench runs priced with the H200's fitted device
    coefficients (efficiency, floor, utilization) and no backend figures, mean |error| of tok/s."""
    runs = [r for r in gb10_fit.read_runs(gb10_fit.RESULTS) if not r.seed]
    gb10_fit.price_runs(runs)
    errors = [r.measured_ms / (1e3 * r.row.graphs_s(model.efficiency, model.floor_us, model.utilization)) - 1
              for r in runs]
    return {"error": _ceil(statistics.mean(abs(e) for e in errors)), "points": len(errors),
            "what": f"the published GB10 runs (benchmarks/gb10/results.csv) priced with the H200's efficiency "
                    f"{model.efficiency:.2f}, floor {model.floor_us:.1f} us and no GB10 figure: mean |error| of tok/s"}


# one machine start (H200, 2026-11-27): `roofline calibrate --engine vllm` as a user runs it, the entry it saved
# (its hardware.toml), then models it never ran and its own models again, eager, with its probe arguments on the
# same host (benchmarks/gpu_vllm/calibrated_eager.sh)
CALIBRATED_HOST = "vllm_h200_caleager2"
CALIBRATION_KEY = "h200-here"


def calibrated_transfer(model) -> dict:
    """Eager after a calibration, on the host it measured: the entry `calibrate --engine vllm` makes today from
    that start's recorded steps (calibration_check.entry_today: the current fit, not the coefficients saved then)
    prices the eager steps of models it never ran (every family), as every command prices with --hardware KEY
    (benchmarks/gpu_vllm/calibrated_eager.py); 90% of their errors is the error a calibrated entry's eager band
    never goes below (roofline/live/engine_calibrate.py). Its own models' second engine start is said beside."""
    import calibrated_eager
    import calibration_check

    folder = fit.RESULTS.parent / CALIBRATED_HOST
    calibration = json.loads((folder / "calibrate.json").read_text())["engine"]
    ran = {run["model"] for run in calibration["runs"]}
    hardware = calibration_check.entry_today(folder, CALIBRATION_KEY)
    cases = sorted(folder.glob("*-cal-eager.json"))
    rows = calibrated_eager.rows(cases, hardware)
    again = {path.stem for path in cases if json.loads(path.read_text())["config"].rstrip("/").split("/")[-1] in ran}
    unseen = [r for r in rows if r["case"] not in again]
    errors = [r["error"] for r in unseen]

    def listed(chosen):
        return "; ".join(f"{r['architecture']} batch {r['batch']}: {100 * r['error']:+.0f}%" for r in chosen)

    return {"error": _ceil(quantile(errors)), "points": len(errors), "host_us": hardware.host_us_per_kernel,
            "what": f"eager steps of models the calibration never ran, measured right after it on the same host and "
                    f"priced with the entry calibrate makes from its recorded steps today ({listed(unseen)}; its own models on a second engine start: "
                    f"{listed([r for r in rows if r['case'] in again])}; benchmarks/results/{CALIBRATED_HOST})"}


def host_spread(rows) -> dict:
    """The largest spread of one eager case (same model, backends, KV dtype, batch, context) measured on two machine
    starts."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        if r.mode == "eager":
            groups.setdefault((r.config, r.quantization, r.backend, r.attention_backend, r.kv_cache_dtype, r.batch,
                               r.context), []).append(r.measured_ms)
    spreads = {key: max(v) / min(v) - 1 for key, v in groups.items() if len(v) > 1}
    key = max(spreads, key=spreads.get)
    config, batch = key[0], key[-2]
    return {"error": _ceil(spreads[key]),
            "what": f"vLLM's eager step of one case ({Path(config).name}, batch {batch}) on two starts of the same "
                    f"kind of x86 machine: {min(groups[key]):.1f} vs {max(groups[key]):.1f} ms (docs/VALIDATION.md, "
                    f"every point)"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a generated file is stale")
    args = parser.parse_args()
    markdown, toml = build()
    stale = [p for p, text in ((MARKDOWN, markdown), (TABLE, toml)) if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"stale: {p.relative_to(REPO)} (run benchmarks/gpu_vllm/validation.py)")
        return 1 if stale else 0
    for p, text in ((MARKDOWN, markdown), (TABLE, toml)):
        p.write_text(text)
        print(f"wrote {p.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

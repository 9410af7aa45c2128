"""How far a predicted tok/s is to be trusted: the error band of the nearest validated class
(roofline/data/validation.toml, generated with docs/VALIDATION.md from the real-vLLM measurements by
benchmarks/gpu_vllm/validation.py). A class is a GPU, a graph mode and a model family (on GB10 also the
weight format and one stream or several), and in graph mode the regime of the step: a step whose GPU time is
shorter than HOST_EXPOSED x the engine's host time per step is the host's (its speed moved one batch's step up to
1.6x between two `vllm serve` starts on one host: benchmarks/results/vllm_h200_host, benchmarks/serving/step_host.py),
pooled over the families in one class of its own; the band is the error that covers 90% of the step model's errors
on that class's points with each model (and, on the H200, each model family) left out of the fit in turn and on
held-out cases -- a class with fewer than 5 such points takes the quantile of its pooled class, never less than
its own worst point -- or in sample where no point was left out, as the table says.

Off the validated GPUs the band is the nearest class's widened: on another GPU by the transfer error
(validation.toml [transfer]: the error on the published GB10 runs in benchmarks/gb10/results.csv of the
coefficients fitted on the H200, what a GPU without its own fit gets), and in eager mode on any host but the x86
host of the H200 runs (benchmarks/results/vllm_h200) by the host-to-host spread (validation.toml [host_spread]),
which `roofline calibrate --engine vllm` narrows. A calibrated entry's own band follows the same rule over its
steps, and in eager mode never goes below the error measured on the host a calibration ran of a model it never ran
(validation.toml [calibrated_transfer], docs/VALIDATION.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from roofline.data import load_table
from roofline.model.inventory import Inventory

from .backends import weight_family
from .hardware import Hardware
from .launch import graphs_apply


# A band is the error that covers COVERAGE of its class's out-of-sample errors (not their mean); a class with
# fewer than MIN_POINTS of them, or with them from fewer than MIN_FAMILIES model families, takes the quantile of a
# pooled class (wider, said), never less than its own worst. One family's steps at four batches are one trial of how
# the fit carries to a family it never saw, not four: a quantile over two families' errors measures those two.
COVERAGE = 0.9
MIN_POINTS = 5
MIN_FAMILIES = 3


def quantile(values: list[float], q: float = COVERAGE) -> float:
    """The nearest-rank quantile of |values|: the smallest value at or above a share q of them."""
    ordered = sorted(abs(v) for v in values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def band_rule(own: list[float], pools: list[tuple[str, list[float]]], errors: str = "left-out errors",
              families: list[int] | None = None) -> tuple[float, str]:
    """(band, basis): the COVERAGE quantile of the class's own out-of-sample errors where it has MIN_POINTS of
    them, else of the first pool that has (the class's own worst point kept inside), else the worst of them all,
    saying which (`errors`: what the errors are). Where `families` gives how many model families the errors of
    `own` and of each pool come from (in that order), a list from fewer than MIN_FAMILIES does not stand alone
    either. The validation tables' classes and a calibrated entry's alike (a calibration's models: no families)."""
    spans = families or [MIN_FAMILIES] * (1 + len(pools))

    def enough(values: list[float], span: int) -> bool:
        return len(values) >= MIN_POINTS and span >= MIN_FAMILIES

    def of_own() -> str:
        return f"{len(own)} of its own" + (f", from {spans[0]} famil{'y' if spans[0] == 1 else 'ies'}"
                                            if families and len(own) >= MIN_POINTS else "")
    if enough(own, spans[0]):
        return quantile(own), f"90% of its {len(own)} {errors}" + (f" from {spans[0]} families" if families else "")
    for (name, pool), span in zip(pools, spans[1:]):
        if enough(pool, span):
            worst = max((abs(v) for v in own), default=0.0)
            return max(quantile(pool), worst), (f"pooled ({of_own()}): 90% of the {len(pool)} {errors} of {name}"
                                                + (f" ({span} families)" if families else ""))
    everything = [v for _, pool in pools for v in pool] + own
    return max(abs(v) for v in everything), f"pooled: the worst of {len(everything)} {errors}"


# a graph step whose GPU time is under this many times the engine's host time per step is in the host's regime
HOST_EXPOSED = 1.25  # the host time per step moved up to ~25% between server starts (step_host.py)
HOST_REGIME = "host"  # validation.toml [[band]] regime of such steps (pooled over families: family "any")
# a graph step with drafts: the class of speculative steps, every method's (benchmarks/gpu_vllm/spec_steps.py), whose
# drafts' launches and proposer the host's speed moves far more than it moves a plain step
SPEC_REGIME = "speculative"


def regime_of(device_s: float, host_s: float, graphs: bool) -> str:
    """The step's regime: "host" where the engine's host time per step sets or shares its pace, else ""."""
    return HOST_REGIME if graphs and host_s > 0 and device_s < HOST_EXPOSED * host_s else ""


def step_regime(step) -> str:
    """A priced step's (predict/step.StepTime) regime, at its own graph mode: a graph step with drafts is a
    speculative step (its class measured apart: the drafts' launches outside CUDA graphs and the proposer are the
    host's, whose speed moved the same drafted step 1.6x between machine starts where the plain step held); else
    the host's where the engine's host time per step sets or shares its pace."""
    main = step.main
    graphs = step.config.graphs
    if graphs and step.config.speculative_tokens:
        return SPEC_REGIME
    return regime_of(main.device_period_s(graphs), main.host_s, graphs)


def model_family(inventory: Inventory) -> str:
    """dense | moe | hybrid (recurrent layers beside attention, MoE or not): the validation classes."""
    if inventory.shape.recurrent:
        return "hybrid"
    if any(m.role == "moe_experts" for m in inventory.modules):
        return "moe"
    return "dense"


def lineage(inventory: Inventory) -> str:
    """The model family an architecture belongs to by descent (roofline/data/lineage.toml: Qwen's dense, MoE and
    GDN models are one): what validation leaves out of the fit at once. Unlisted: its model_type alone."""
    model_type = inventory.shape.model_type or "unknown"
    return load_table("lineage")["family"].get(model_type, model_type)


def layouts(inventory: Inventory) -> set[str]:
    """What a model's layers are made of, beyond its family, that moves the step model's error: an MLA latent KV
    cache, sliding-window attention, a GDN or Mamba mixer."""
    shape = inventory.shape
    out = {"mla" for a in shape.attention if a.value_dim == 0} | {"sliding" for a in shape.attention if a.window}
    return out | {r.kind for r in shape.recurrent}


@dataclass(frozen=True)
class Band:
    error: float  # e.g. 0.08 for +-8%
    family: str
    mode: str  # graphs | eager
    validated_on: str  # the hardware key of the class
    exact: bool  # False: the nearest class (another GPU of the same architecture generation)
    points: int
    vllm_version: str
    basis: str  # "out of sample" | "in sample"
    formats: tuple[str, ...] = ()  # the weight formats the class's points ran
    streams: str = ""  # "1" | "2-16" where the class is split by concurrency
    widened: tuple[tuple[str, float], ...] = ()  # (why, by how much) added to the class's error
    reference: str = "docs/VALIDATION.md"  # where the class's points are: the table's, or a calibrated entry's file
    note: str = ""  # e.g. which class a calibrated entry never measured, where the band comes from elsewhere
    regime: str = ""  # "host": steps the engine's host time sets (HOST_EXPOSED); "speculative": steps with drafts

    @property
    def class_error(self) -> float:
        return self.error - sum(by for _, by in self.widened)

    @property
    def says_nothing(self) -> bool:
        """A band past ±50% is no figure a user can act on: said in words, not as a number."""
        return self.error > WORDS_ABOVE

    def short(self) -> str:
        return spread(self.error)

    def text(self) -> str:
        where = self.validated_on.upper() if self.exact else f"nearest: {self.validated_on.upper()}"
        if self.says_nothing and self.regime == SPEC_REGIME:
            on = self.validated_on.upper() + ("" if self.exact else " (the nearest validated GPU)")
            return (f"{UNKNOWN_WITHIN_2X}: a speculative step ({self.points} such steps of every method measured on "
                    f"{on}, none fitted: 90% of them within ±{100 * self.class_error:.0f}%"
                    + "".join(f", +{100 * by:.0f}% {why}" for why, by in self.widened)
                    + f"; the host's speed moves its drafts; {self.reference})")
        if self.says_nothing:
            why = ", ".join(why for why, _ in self.widened) or "its class's own spread"
            return (f"{UNKNOWN_WITHIN_2X}: run `roofline calibrate --engine vllm` on this machine (the {self.family} "
                    f"{self.mode} class measured on {self.validated_on.upper()}, widened for {why}; "
                    f"{self.reference})" + (f"; {self.note}" if self.note else ""))
        streams = f", {self.streams} stream{'s' if self.streams != '1' else ''}" if self.streams else ""
        if self.regime == HOST_REGIME:
            text = (f"±{100 * self.error:.0f}% ({where}, vLLM {self.vllm_version}, {self.mode}, a step the engine's "
                    f"host time sets: {self.points} such points of every family")
        elif self.regime == SPEC_REGIME:
            text = (f"±{100 * self.error:.0f}% ({where}, vLLM {self.vllm_version}, {self.mode}, a speculative step: "
                    f"{self.points} such steps of every method")
        else:
            text = (f"±{100 * self.error:.0f}% ({where}, vLLM {self.vllm_version}, {self.mode}{streams}, {self.points} "
                    f"{self.family} point{'s' if self.points != 1 else ''} in {', '.join(self.formats)}")
        if self.widened:
            text += f": ±{100 * self.class_error:.0f}% there, " + ", ".join(
                f"+{100 * by:.0f}% {why}" for why, by in self.widened)
        if self.basis != "out of sample":
            text += f", {self.basis}"
        return text + f"; {self.reference})" + (f"; {self.note}" if self.note else "")

    def to_json(self) -> dict:
        return {"error": self.error, "family": self.family, "mode": self.mode, "validated_on": self.validated_on,
                "exact": self.exact, "points": self.points, "vllm_version": self.vllm_version, "basis": self.basis,
                "formats": list(self.formats), "streams": self.streams, "class_error": self.class_error,
                "widened": [{"why": why, "by": by} for why, by in self.widened],
                "reference": self.reference, "note": self.note, "says_nothing": self.says_nothing,
                "regime": self.regime,
                "text": self.text()}


NO_VALIDATION = "no validation for this class"
WORDS_ABOVE = 0.5  # a band wider than this is said in words
UNKNOWN_WITHIN_2X = "unknown within 2x"


def _streams_cover(entry: dict, batch: int) -> bool:
    streams = entry.get("streams", "")
    if not streams:
        return True
    low, _, high = streams.partition("-")
    return int(low) <= batch <= int(high or low)


def _best(entries: list[dict], fmt: str, batch: int) -> dict | None:
    """The entry of the format and concurrency asked, else of the concurrency, else of the format, else the
    widest band of the rest (a class that does not match is not the place to be optimistic)."""
    family = weight_family(fmt)

    def has(e: dict) -> bool:
        return family in {weight_family(f) for f in e["formats"]}
    for keep in (lambda e: has(e) and _streams_cover(e, batch), lambda e: _streams_cover(e, batch), has):
        found = [e for e in entries if keep(e)]
        if found:
            return max(found, key=lambda e: e["error"])
    return max(entries, key=lambda e: e["error"]) if entries else None


def band_for(inventory: Inventory, hardware: Hardware, graphs: bool, batch: int = 1, regime: str = "",
             fmt: str | None = None, kernel: str | None = None) -> Band | None:
    """The band of the class (hardware, mode, family, format, streams, regime: step_regime of the priced step);
    else of the same mode and family on a validated GPU of the same architecture generation (compute capability
    major), else on any validated GPU, either widened by the transfer error; in eager mode off the measured host,
    widened by the host spread. `fmt`: the weights the band is for (a plan's leading row), else the inventory's;
    `kernel`: what the priced step runs them on (Backend.kernel). None: no class of this family and mode was
    validated anywhere."""
    family, mode = model_family(inventory), "graphs" if graphs else "eager"
    own = _calibrated_band(hardware, family, mode)
    if own is not None:
        return own
    band = _table_band(inventory, hardware, family, mode, batch, regime, fmt, kernel)
    if band is not None and hardware.bands:  # a calibrated entry that never ran this class says so
        band = replace(band, note=f"{hardware.key} was calibrated on "
                                  f"{', '.join(f'{b.family} {b.mode}' for b in hardware.bands)}, never {family} {mode}")
    return band


def uncalibrated_error(family: str, mode: str) -> float:
    """The widest band a GPU without its own fit can be given for a class: the widest validated class of the
    family and mode (of any, where none is), widened by the transfer error and, in eager mode, the host spread,
    as band_for widens the nearest class off the validated GPUs."""
    table = load_table("validation")
    classes = [e["error"] for e in table.get("band", []) if e["family"] == family and e["mode"] == mode] \
        or [e["error"] for e in table.get("band", [])]
    return max(classes) + table["transfer"]["error"] + (table["host_spread"]["error"] if mode == "eager" else 0.0)


def _calibrated_band(hardware: Hardware, family: str, mode: str) -> Band | None:
    """A `calibrate --engine vllm` entry's own band for the class, where its runs measured it (BF16 shapes)."""
    own = next((b for b in hardware.bands if b.family == family and b.mode == mode), None)
    if own is None:
        return None
    return Band(own.error, family, mode, hardware.key, True, own.points, hardware.vllm_version or "?", own.basis,
                ("bf16",), reference=f"calibrate --engine vllm, {hardware.origin}", note=own.band_basis)


def _table_band(inventory: Inventory, hardware: Hardware, family: str, mode: str, batch: int,
                regime: str = "", fmt: str | None = None, kernel: str | None = None) -> Band | None:
    graphs = mode == "graphs"
    table = load_table("validation")
    bands = table.get("band", [])
    # a step the host's time sets takes the host regime's class (every family's such points) where one was measured
    entries = [e for e in bands if e.get("regime", "") == regime and regime and e["mode"] == mode] or \
        [e for e in bands if e["family"] == family and e["mode"] == mode and not e.get("regime")]
    fmt = fmt or inventory.main_format()
    exact = [e for e in entries if e["hardware"] == hardware.key]
    generation = (hardware.compute_capability or "").split(".")[0]
    near = [e for e in entries if generation and e["compute_capability"].split(".")[0] == generation]
    # a CPU host runs no GPU kernels: no GPU's class says anything about it
    chosen = _best(exact or near or (entries if graphs_apply(hardware) else []), fmt, batch)
    if chosen is None:
        return None
    widened = []
    if not exact:
        transfer = table["transfer"]
        widened.append((f"another GPU ({transfer['what']})", transfer["error"]))
    # the weights' format, by family (the class's backend is named beside it)
    # 16-bit weights are no exception: GB10's MoE class ran MXFP4 experts on Marlin alone, its dense class FP8 and
    # NVFP4 seeds, so a BF16 model there runs GEMMs no point of its class measured
    seen_formats = {_stored(f) for f in chosen["formats"]}
    # the same weights on a kernel no point of the class ran (GB10's NVFP4 hybrids ran Marlin alone; vLLM's default
    # there is another): the rate is the kernel's, so the pair is what was validated
    new_pair = bool(kernel and exact and "kernels" in chosen and kernel not in chosen["kernels"])
    unseen = ([f"{fmt} weights"] if _stored(fmt) not in seen_formats
              else [f"{kernel} (the class ran {', '.join(chosen['kernels'])})"] if new_pair else []) \
        + sorted(layouts(inventory) - set(chosen.get("layouts", layouts(inventory)))) + _unseen_experts(inventory, chosen)
    if unseen and "novelty" in table:
        widened.append((f"what no validated model of the class had: {', '.join(unseen)}", table["novelty"]["error"]))
    if not _streams_cover(chosen, batch) and "novelty" in table:
        # a concurrency no validated model of the family ran on this GPU (GB10's dense seeds are single streams):
        # its steps read the KV and run the attention of many streams, which no point of the class measured here
        widened.append((f"{batch} streams, where the class's points ran {chosen['streams']}", table["novelty"]["error"]))
    if not graphs and not (exact and chosen.get("host_measured", False)):
        spread = table["host_spread"]
        widened.append((f"another host ({spread['what']}; `roofline calibrate --engine vllm` narrows it)",
                        spread["error"]))
    return Band(chosen["error"] + sum(by for _, by in widened), family, mode, chosen["hardware"], bool(exact),
                chosen["points"], chosen["vllm_version"], chosen["basis"], tuple(chosen["formats"]),
                chosen.get("streams", ""), tuple(widened), regime=chosen.get("regime", ""))


def _unseen_experts(inventory: Inventory, chosen: dict) -> list[str]:
    """The model's routed experts where no validated model of the class had experts that wide: a MoE kernel's rate
    moves with its GEMMs' width (Marlin's at one token on an H200: 475 GB/s at 512 wide, 716 at 768, 1,956 at
    14,336; benchmarks/gpu_vllm/decode_rates.py), so a width outside the class's measured range is extrapolated."""
    width, seen = inventory.shape.expert_width, chosen.get("expert_widths")
    if not width or seen is None:  # no experts, or a class that did not record its widths
        return []
    if not seen:
        return ["experts (the class's models had none)"]
    low, high = min(seen), max(seen)
    if low <= width <= high:
        return []
    ran = f"{low:,}" if low == high else f"{low:,}-{high:,}"
    return [f"experts {width:,} wide (the class's ran {ran})"]


def _stored(fmt: str) -> str:
    """The weights a format stores, as a class's formats are compared: one family for NVFP4 W4A4 / W4A16
    (weight_family), one for the 16-bit floats."""
    return "bf16" if fmt in ("bf16", "fp16") else weight_family(fmt)


def spread(error: float) -> str:
    """A fractional error as users read it: "±7%", or in words past ±50%."""
    return UNKNOWN_WITHIN_2X if error > WORDS_ABOVE else f"±{100 * error:.0f}%"


def band_text(band: Band | None) -> str:
    return band.text() if band else NO_VALIDATION


def band_short(band: Band | None) -> str:
    """"±7%" beside a figure ("unknown within 2x" past ±50%); nothing where no class was validated (the validated
    line says so)."""
    return band.short() if band else ""


def band_json(band: Band | None) -> dict:
    return band.to_json() if band else {"text": NO_VALIDATION}

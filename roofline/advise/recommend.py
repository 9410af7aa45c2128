"""Rank (format, recipe, vLLM backend, flags) for a device and a workload.

For each simulated format (roofline.advise.simulate) and each GEMM backend that runs it on the device
(roofline/data/rules.toml [[backend]]), the step model (roofline.predict.step) prices one decode step
of one sequence and of N sequences at context L, on one device or tensor-parallel over --tp ranks:
single-stream and aggregate tok/s, and the bound. W4A4 runs its GEMMs on FP4 tensor cores; W4A16 /
MXFP4 / AWQ dequantize to BF16 and run on BF16 tensor cores: that is what moves the best pick from
W4A16 to W4A4 as concurrency grows. Resident memory is weights + KV cache for N sequences of L tokens
+ recurrent state + vLLM's own overhead, against the device memory vLLM may take (or --memory-budget).

Every threshold, backend and flag comes from rules.toml, with its source; the reasons are the
plain-language form of the rules that fired.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace

from roofline import __version__
from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.formats import PLAIN_FORMATS, format_label, get_format
from roofline.model.grouping import short_label
from roofline.model.inventory import Inventory
from roofline.model.limits import check_max_model_len
from roofline.model.naming import base_model_name
from roofline.model.roles import role_properties
from roofline.predict.backends import Backend, backends_for
from roofline.predict.bands import band_for, band_json
from roofline.predict.hardware import Hardware
from roofline.predict.speculation import break_even, vllm_acceptance_rate
from roofline.predict.step import StepConfig, StepTime, price_step
from roofline.predict.topology import SINGLE, Topology, kv_split, sharing_ranks, tensor_parallel_placement, tp_refusal
from roofline.predict.traffic import ROUTINGS, Scenario, Traffic, compute_traffic, kv_dtype_and_bytes

from .serve import parallel_flags, ray_setup, unified_memory_flags, workload_flags
from .simulate import get_recipe, producer, simulate, simulate_all
from .plan_load import PlanLoad, RowLoad, row_load, row_request, start_refusal
from .ties import Evidence, break_ties, tolerance

PLAIN = set(PLAIN_FORMATS.values())


def rules() -> dict:
    return load_table("rules")


@dataclass
class Workload:
    concurrency: int = 1
    context: int = 4096
    kv_cache_dtype: str = "auto"  # as vLLM's --kv-cache-dtype: auto is the model's dtype
    memory_budget_gb: float | None = None
    tp: int = 1
    link: str | None = None
    routing: str = "uniform"  # MoE experts per step of several streams (traffic.Scenario)
    # what a vLLM deployment fixes of every row (roofline/predict/deployment.py): eager or CUDA graphs,
    # speculation (vLLM's --speculative-config JSON and the per-token acceptance), backends asked for
    graphs: bool = True
    cudagraph_mode: str = "full_and_piecewise"  # vLLM's CUDA-graph mode (step.StepConfig.cudagraph_mode)
    async_scheduling: bool | None = None  # vLLM's --[no-]async-scheduling; None: its default (step.StepConfig)
    speculative_config: str | None = None
    speculative_tokens: int = 0
    draft_method: str = "mtp"  # --speculative-config's method (step.StepConfig.draft_method)
    acceptance_rate: float = 0.7
    backend_names: tuple[str, ...] = ()  # --linear-backend / --moe-backend given: only rows on them
    load: PlanLoad | None = None  # a request rate / trace / burst and targets: rows ranked under it (plan_load.py)

    def validate(self) -> "Workload":
        if self.concurrency < 1:
            raise RooflineError("--concurrency must be at least 1")
        if self.context < 1:
            raise RooflineError("--context must be at least 1")
        if self.memory_budget_gb is not None and self.memory_budget_gb <= 0:
            raise RooflineError("--memory-budget must be positive")
        if self.tp < 1:
            raise RooflineError("--tp must be at least 1")
        if self.routing not in ROUTINGS:
            raise RooflineError(f"--routing {self.routing!r}: use uniform or shared")
        return self


@dataclass
class Recommendation:
    format: str
    recipe: str
    backend: Backend
    single_stream_tok_s: float
    aggregate_tok_s: float
    aggregate_bound: str  # "memory" | "compute"
    weight_bytes: int
    bytes_per_token: float  # single stream
    ceiling_tok_s: float  # single stream, bandwidth only
    resident_gb: float
    kv_cache_gb: float
    budget_gb: float
    fits: bool
    kv_cache_dtype: str
    flags: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    checkpoint: str = ""
    quantize_with: str = ""
    tensor_parallel: dict | None = None  # per-rank figures of a --tp row
    rank: int = 0
    tie_group: int = 0  # > 0: within the prediction's uncertainty of the others of its group
    tied_with: list[str] = field(default_factory=list)
    decided_by: str = ""  # the evidence that put this one first in its tie
    given: bool = False  # the checkpoint the user gave, priced as it is (not a simulated format)
    load: RowLoad | None = None  # the row under the plan's load, when one is asked for
    leads: bool = False  # the fastest row before ties were broken: the plan's band and tie tolerance are its

    def serve_command(self) -> str:
        env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(self.env.items()))
        parts = ["vllm", "serve", shlex.quote(self.checkpoint)] + [shlex.quote(f) for f in self.flags]
        return (env + " " if env else "") + " ".join(parts)

    def to_json(self) -> dict:
        out = {
            "rank": self.rank, "format": self.format, "format_label": format_label(self.format),
            "recipe": self.recipe, "backend": self.backend.name, "backend_source": self.backend.source,
            "linear_backend": self.backend.linear_backend, "moe_backend": self.backend.moe_backend,
            "gemm_compute": self.backend.compute,
            "single_stream_tok_s": self.single_stream_tok_s, "aggregate_tok_s": self.aggregate_tok_s,
            "aggregate_bound": self.aggregate_bound, "weight_bytes": self.weight_bytes,
            "bytes_per_token": self.bytes_per_token, "ceiling_tok_s": self.ceiling_tok_s,
            "resident_gb": self.resident_gb, "kv_cache_gb": self.kv_cache_gb, "budget_gb": self.budget_gb,
            "fits": self.fits, "kv_cache_dtype": self.kv_cache_dtype, "flags": list(self.flags),
            "env": dict(self.env), "reasons": list(self.reasons), "checkpoint": self.checkpoint,
            "quantize_with": self.quantize_with, "serve_command": self.serve_command(), "given": self.given,
            "leads": self.leads,
        }
        if self.tensor_parallel is not None:
            out["tensor_parallel"] = self.tensor_parallel
        out["load"] = self.load.to_json() if self.load is not None else None
        out["tie"] = ({"group": self.tie_group, "tied_with": self.tied_with, "decided_by": self.decided_by}
                      if self.tie_group else None)
        return out


# --------------------------------------------------------------------------- pricing

def row_config(workload: "Workload", backend: Backend | None, kv: str, hardware: Hardware, batch: int) -> StepConfig:
    """The serving configuration of one plan row at `batch` sequences (CUDA graphs on)."""
    topology, placement = SINGLE, None
    if workload.tp > 1:
        topology, placement = Topology(tp=workload.tp), tensor_parallel_placement(hardware, workload.tp, workload.link)
    return StepConfig(batch=batch, context=workload.context, kv_cache_dtype=kv, backend=backend,
                      topology=topology, placement=placement, routing=workload.routing, graphs=workload.graphs,
                      cudagraph_mode=workload.cudagraph_mode, async_scheduling=workload.async_scheduling,
                      speculative_tokens=workload.speculative_tokens, acceptance_rate=workload.acceptance_rate,
                      draft_method=workload.draft_method)


# --------------------------------------------------------------------------- reasons

def _kind(inventory: Inventory) -> str:
    shape = inventory.shape
    kinds = {r.kind for r in shape.recurrent}
    label = []
    if "gdn" in kinds:
        label.append("GDN hybrid")
    if "mamba" in kinds:
        label.append("Mamba hybrid")
    if shape.num_experts:
        label.append("MoE")
    return " ".join(label) if label else "dense"


def _residual_reasons(sim: Inventory, traffic: Traffic, target: str, fp8_bpt: float | None) -> list[str]:
    if not get_format(target).quantized or get_format(target).weights > 4:
        return []
    threshold = rules()["residual"]["min_share"]
    total = traffic.bytes_per_token or 1.0
    by_label: dict[tuple[str, str], list[float]] = {}
    for module, moved in zip(sim.modules, traffic.modules):
        if module.format == target or module.role in ("embedding", "vision", "audio"):
            continue
        key = (short_label(module.name) if module.role != "moe_experts" else "experts", module.format)
        entry = by_label.setdefault(key, [0.0, 0.0])
        entry[0] += module.nbytes if not module.tied_to else 0
        entry[1] += moved.bytes_per_token
    kept = [(label, fmt, resident, per_token) for (label, fmt), (resident, per_token) in by_label.items()
            if per_token / total >= threshold]
    kept.sort(key=lambda item: -item[3])
    out = []
    for label, fmt, resident, per_token in kept[:2]:
        sentence = (f"{label} stays {format_label(fmt)}: {per_token / 1e9:.2f} GB = {100 * per_token / total:.0f}% "
                    f"of bytes/token")
        if fp8_bpt:
            sentence += f"; {format_label(target)} buys only +{100 * (fp8_bpt / total - 1):.0f}% over FP8"
        out.append(sentence)
    return out


def _cuda_graph_reason(sim: Inventory, single: StepTime) -> tuple[str, bool]:
    """(reason, keep graphs on matters), from the priced step's eager vs graph tok/s."""
    cfg = rules()["cuda_graphs"]
    kind = _kind(sim)
    gain = single.graph_benefit - 1
    matters = gain >= cfg["min_gain"] if single.costs.host_us_per_kernel else kind != "dense"
    if matters:
        reason = cfg["reason_moe"].format(kind=kind)
        if single.costs.host_us_per_kernel:
            reason += f" (modelled: eager would lose {100 * gain / (1 + gain):.0f}%)"
        return reason, True
    return cfg["reason_dense"], False


# --------------------------------------------------------------------------- the ranking

def _checkpoint_name(base: Inventory, target: str, recipe: str) -> tuple[str, str]:
    """(what to serve, how to make it)."""
    base_formats = {m.format for m in base.modules if m.params and role_properties(m.role).format_vote}
    quantized = {f for f in base_formats if f not in PLAIN}
    if target in PLAIN and not quantized:
        return base.model_id, ""
    if quantized == {target}:
        return base.model_id, ""
    name = base_model_name(base.model_id)
    made = producer(target)
    # one folder per (format, recipe): two recipes of one format never write the same folder
    folder = f"./{name}-{made.suffix or target}" + ("" if recipe == "default" else f"-{recipe}")
    return folder, f"{made.tool}; recipe {recipe}"


# the recipe column of the rows that price the checkpoint the user gave, as it is
GIVEN_RECIPE = "as given"


def recommend(base: Inventory, hardware: Hardware, workload: Workload, formats: list[str],
              recipe_names: list[str], simulated: dict[tuple[str, str], Inventory] | None = None,
              evidence: Evidence | None = None, given: Inventory | None = None,
              given_as: str = "") -> tuple[list[Recommendation], list[str]]:
    """Ranked recommendations, best first, and notes about combinations that were dropped.
    `simulated`: inventories already simulated, by (format, recipe), reused instead of redone.
    `given`: a quantized checkpoint the user gave (base is its unquantized base): ranked too, as it
    is, with its real bytes, served as `given_as`."""
    simulated = simulated or {}
    workload = workload.validate()
    notes: list[str] = []
    _check_split(base, hardware, workload)
    results: list[Recommendation] = []
    seen: dict[tuple, str] = {}
    sims: dict[tuple[str, str], tuple[Inventory, Traffic]] = {}
    def rows(sim: Inventory, owner: Inventory, fmt: str, recipe_name: str, unservable: str) -> list[Recommendation]:
        """One row per vLLM backend for `fmt` on this hardware, priced on `sim` (note when there is none)."""
        kv = workload.kv_cache_dtype
        traffic1 = compute_traffic(sim, Scenario(batch=1, context=workload.context, kv_cache_dtype=kv))
        sims[(fmt, recipe_name)] = (sim, traffic1)
        candidates = backends_for(fmt, hardware)
        if workload.backend_names and candidates:  # the deployment's --linear-backend / --moe-backend only
            candidates = [b for b in candidates
                          if {b.linear_backend, b.moe_backend} & set(workload.backend_names)
                          or not b.linear_backend and not b.moe_backend]
            if not candidates:
                notes.append(f"{unservable}: none of its vLLM kernels on {hardware.name} is "
                             f"{' / '.join(workload.backend_names)} (the backend flags given)")
                return []
        if not candidates:
            notes.append(f"{unservable}: no vLLM kernel for it on {hardware.name} "
                         f"(compute capability {hardware.compute_capability})")
        return [_evaluate(owner, sim, traffic1, hardware, workload, fmt, recipe_name, backend, kv)
                for backend in candidates]

    if given is not None:
        fmt = given.main_format()
        for rec in rows(given, given, fmt, GIVEN_RECIPE, f"{given_as or given.model_id} ({format_label(fmt)})"):
            rec.given, rec.checkpoint, rec.quantize_with = True, given_as or given.model_id, ""
            rec.reasons.insert(0, "the checkpoint given, as it is: its own tensors' bytes, nothing to quantize")
            results.append(rec)
    for recipe_name in recipe_names:
        recipe = get_recipe(recipe_name)
        for fmt in formats:
            sim = simulated.get((fmt, recipe_name)) or simulate(base, fmt, recipe)
            signature = (fmt, tuple(m.format for m in sim.modules))
            if signature in seen:  # e.g. BF16 is the same under every recipe
                continue
            seen[signature] = recipe_name
            results += rows(sim, base, fmt, recipe_name, format_label(fmt))
    results = _without_copies_of_given(results)
    # reasons that compare candidates
    for rec in results:
        sim, traffic1 = sims[(rec.format, rec.recipe)]
        fp8 = sims.get(("fp8", rec.recipe))
        rec.reasons[:0] = _residual_reasons(sim, traffic1, rec.format, fp8[1].bytes_per_token if fp8 else None)
    for rec in results:  # a row whose memory fits but whose serve line vLLM would refuse (capacity's checks)
        if rec.fits and (refused := start_refusal(sims[(rec.format, rec.recipe)][0], hardware,
                                                  _row_request(workload, rec, hardware, None))):
            rec.fits = False
            rec.reasons.insert(0, f"does not start: {refused}")
    key = (lambda r: (r.fits, r.aggregate_tok_s, r.single_stream_tok_s)) if workload.concurrency > 1 else \
        (lambda r: (r.fits, r.single_stream_tok_s, r.aggregate_tok_s))
    if workload.load is not None:  # under a load: the rows keeping its targets, then the highest rate keeping them
        for rec in results:
            rec.load = _under_load(sims[(rec.format, rec.recipe)][0], hardware, workload, rec)
        key = lambda r: (r.fits and r.load.keeps, r.load.merit, r.single_stream_tok_s)  # noqa: E731
    results.sort(key=key, reverse=True)
    evidence = evidence or Evidence.gather(base_model_name(base.model_id), hardware.key)
    if results:
        results[0].leads = True
    tol, _ = tie_tolerance(base, hardware, workload, results[0] if results else None)
    results = break_ties(results, key, evidence, tol)
    for i, rec in enumerate(results, 1):
        rec.rank = i
    top = results[0] if results else None
    if top is not None and top.decided_by:
        top.reasons.insert(0, f"a tie within ±{100 * tol:.0f}% (the leading row's validated error here) with "
                              f"{', '.join(top.tied_with)}; decided by: {top.decided_by}")
    return results, list(dict.fromkeys(notes))  # a format under several recipes says its note once


def _under_load(sim: Inventory, hardware: Hardware, workload: Workload, rec: Recommendation) -> RowLoad:
    """The row served as its serve line says (capacity sizes its KV cache), run at the plan's load; a row that does
    not fit is not run; the top rows say how it went in their reasons."""
    if not rec.fits:
        return RowLoad(None, False, [], refused="does not fit the memory budget or does not start")
    out = row_load(sim, hardware, _row_request(workload, rec, hardware, workload.load), workload.load)
    rec.reasons.insert(0, _load_reason(workload.load, out))
    return out


def _row_request(workload: Workload, rec: Recommendation, hardware: Hardware, load: PlanLoad | None):
    """The capacity Request of the row's serve line (at the load's request lengths under a load)."""
    utilization = min(0.95, workload.memory_budget_gb / hardware.usable_memory_gb) if workload.memory_budget_gb \
        else None
    return row_request(load, context=workload.context, kv_cache_dtype=rec.kv_cache_dtype, backend=rec.backend,
                       tp=workload.tp, link=workload.link, graphs=workload.graphs,
                       speculative_tokens=workload.speculative_tokens, acceptance_rate=workload.acceptance_rate,
                       gpu_memory_utilization=utilization, cudagraph_mode=workload.cudagraph_mode,
                       async_scheduling=workload.async_scheduling, draft_method=workload.draft_method)


def _load_reason(load: PlanLoad, row: RowLoad) -> str:
    if row.result is None:
        return (f"under {load.label}: not run ({row.refused})" if row.refused else
                f"no rate keeps the targets: {'; '.join(row.broken) or 'even a trickle misses them'}")
    r = row.result
    said = (f"under {load.label}: TTFT p90 {r.ttft.p90 * 1e3:,.0f} ms"
            + (f", TPOT p90 {r.tpot.p90 * 1e3:.1f} ms" if r.tpot else "")
            + f", end-to-end p90 {r.e2e.p90:.2f} s")
    if row.broken:
        said += f"; misses the targets: {'; '.join(row.broken)}"
    if row.highest_rate is not None:
        said += f"; keeps them up to {row.highest_rate:.2f} requests/s (saturation {row.saturation:.2f})"
    elif load.targets.any:
        said += "; no rate keeps them"
    return said


def _check_split(base: Inventory, hardware: Hardware, workload: Workload) -> None:
    """A --tp split vLLM refuses (heads, experts), or no link can carry, is one line."""
    if workload.tp > 1:
        refusal = tp_refusal(base.config, workload.tp)
        if refusal:
            raise RooflineError(f"--tp {workload.tp}: vLLM refuses this split of {base.model_id}: {refusal}")
        tensor_parallel_placement(hardware, workload.tp, workload.link)  # the link refuses it in one line


def plan_band(base: Inventory, hardware: Hardware, workload: "Workload", lead: "Recommendation | None"):
    """The band a plan's figures carry: its class's (family, device, mode, concurrency) for the weights of the row
    it leads with (the base's own where it has none): the rows differ in format, which is what a plan compares,
    and two rows tie within the leading row's error."""
    return band_for(base, hardware, graphs=workload.graphs, batch=workload.concurrency,
                    fmt=lead.format if lead is not None else None, kernel=lead.backend.kernel if lead else None)


def tie_tolerance(base: Inventory, hardware: Hardware, workload: "Workload",
                  lead: "Recommendation | None") -> tuple[float, str]:
    """The tie tolerance of this plan: the validated band of its leading row (plan_band), ties.tolerance."""
    return tolerance(plan_band(base, hardware, workload, lead))


def _without_copies_of_given(results: list[Recommendation]) -> list[Recommendation]:
    """A simulated row that only repeats the given checkpoint (same format and backend, weights
    within 0.5%: the recipe reproduced what its maker did) is left out; the given row, priced from
    the real tensors, stands for it."""
    given = [r for r in results if r.given]

    def repeats(rec: Recommendation) -> bool:
        return any(rec.format == g.format and rec.backend.name == g.backend.name
                   and abs(rec.weight_bytes - g.weight_bytes) <= 0.005 * g.weight_bytes for g in given)

    return [r for r in results if r.given or not repeats(r)]


def _kv_share(sim: Inventory, context: int) -> float:
    traffic = compute_traffic(sim, Scenario(batch=1, context=context))
    return traffic.kv_bytes_per_token / traffic.bytes_per_token if traffic.bytes_per_token else 0.0


def _priced_options(sim: Inventory, hardware: Hardware, config: StepConfig, tok_s: float) -> list[str]:
    """What a flag this row does not carry would buy, each priced by the step model at the row's own
    scenario (rules.toml [kv_cache], [speculative]): said as advice, never folded into the row's
    figures or its serve line."""
    cfg, out = rules(), []
    n, context = config.batch, config.context
    resolved, _ = kv_dtype_and_bytes(sim, config.scenario(1))
    share = _kv_share(sim, context)
    if resolved.startswith("fp8") and config.kv_cache_dtype.startswith("fp8"):
        out.append(cfg["kv_cache"]["reason_asked"].format(share=100 * share, context=context))
    elif not resolved.startswith("fp8") and hardware.supports("fp8") and share >= cfg["kv_cache"]["min_share"]:
        fp8 = price_step(sim, hardware, replace(config, kv_cache_dtype="fp8")).tok_s
        out.append(cfg["kv_cache"]["reason"].format(share=100 * share, context=context, gain=100 * (fp8 / tok_s - 1),
                                                    streams=_streams(n)))
    spec = cfg["speculative"]
    if sim.shape.mtp_layers and not config.speculative_tokens:
        draft = json.loads(spec["config"])["num_speculative_tokens"]
        even = break_even(lambda a: price_step(sim, hardware, replace(config, speculative_tokens=draft,
                                                                      acceptance_rate=a)).tok_s, tok_s, draft)
        if even is None:
            out.append(spec["reason_never"].format(config=spec["config"], streams=_streams(n)))
        else:
            out.append(spec["reason"].format(config=spec["config"], streams=_streams(n),
                                             break_even=100 * vllm_acceptance_rate(even, draft)))
    return out


def _streams(n: int) -> str:
    return "1 stream" if n == 1 else f"{n} streams"


def _evaluate(base: Inventory, sim: Inventory, traffic1: Traffic, hardware: Hardware, workload: Workload, fmt: str,
              recipe: str, backend: Backend, kv: str) -> Recommendation:
    cfg = rules()
    n, context = workload.concurrency, workload.context
    config = row_config(workload, backend, kv, hardware, 1)
    single = price_step(sim, hardware, config)
    at_n = single if n == 1 else price_step(sim, hardware, replace(config, batch=n))
    # memory: weights on a rank + KV cache and state for n sequences (state is read and written each
    # step, resident once) + vLLM overhead
    weights_on_rank = single.weight_bytes_per_rank
    cache_bytes = at_n.breakdown()
    cache = cache_bytes.kv_bytes + cache_bytes.state_bytes / 2
    memory_cfg = cfg["memory"]
    utilization = load_table("serving")["memory"]["gpu_memory_utilization"]
    budget = workload.memory_budget_gb or hardware.usable_memory_gb * utilization
    resident = (weights_on_rank + cache) / 1e9 + memory_cfg["overhead_gb"]
    fits = resident <= budget
    checkpoint, quantize_with = _checkpoint_name(base, fmt, recipe)
    rec = Recommendation(
        format=fmt, recipe=recipe, backend=backend, single_stream_tok_s=single.tok_s,
        aggregate_tok_s=at_n.tok_s, aggregate_bound=at_n.bound, weight_bytes=sim.weight_bytes,
        bytes_per_token=traffic1.bytes_per_token, ceiling_tok_s=single.ceiling_tok_s,
        resident_gb=resident, kv_cache_gb=cache / 1e9, budget_gb=budget, fits=fits, kv_cache_dtype=kv,
        checkpoint=checkpoint, quantize_with=quantize_with)
    flags = workload_flags(context, n, kv)
    rec.reasons += _priced_options(sim, hardware, replace(config, batch=n), at_n.tok_s)
    if backend.linear_backend:
        flags.append(f"--linear-backend={backend.linear_backend}")
    if backend.moe_backend and sim.shape.num_experts:
        flags.append(f"--moe-backend={backend.moe_backend}")
    if workload.memory_budget_gb:
        flags.append(f"--gpu-memory-utilization={min(0.95, workload.memory_budget_gb / hardware.usable_memory_gb):.2f}")
    flags += unified_memory_flags(hardware, weights_on_rank)
    boxes = single.placement.boxes
    flags += parallel_flags(config.topology, boxes) if workload.tp > 1 else []
    if not workload.graphs:
        flags.append("--enforce-eager")
    if workload.async_scheduling is not None:  # as given and priced (None: vLLM's default, priced as it resolves it)
        flags.append("--async-scheduling" if workload.async_scheduling else "--no-async-scheduling")
    if workload.speculative_config:
        flags.append(f"--speculative-config={workload.speculative_config}")
    rec.flags = flags
    if backend.reason:
        rec.reasons.append(backend.reason)
    if backend.requires:
        rec.reasons.append(f"needs {backend.requires}")
    graph_reason, _ = _cuda_graph_reason(sim, single)
    rec.reasons.append(graph_reason)
    if n > 1:
        rec.reasons.append(f"at {n} concurrent sequences the step is {at_n.bound}-bound "
                           f"({format_label(fmt)} GEMMs run on {backend.compute.upper()} tensor cores)")
    if not fits:
        rec.reasons.append(f"does not fit: {resident:.1f} GB needed (weights {weights_on_rank / 1e9:.1f} GB + "
                           f"KV/state {cache / 1e9:.1f} GB at {n} x {context} tokens) > {budget:.1f} GB")
    if workload.tp > 1:
        rec.tensor_parallel = _tensor_parallel_json(sim, single, workload.tp)
        tp = rec.tensor_parallel
        rec.reasons.append(
            f"TP={workload.tp} over {tp['link_name']}: {tp['allreduces_per_step']} all-reduces per step cost "
            f"{1e3 * tp['comm_seconds_per_step']:.2f} ms; {tp['bytes_per_rank'] / 1e9:.1f} GB weights per rank "
            f"({tp['replicated_bytes'] / 1e9:.2f} GB replicated)")
        if boxes > 1:
            rec.reasons.append(f"needs {boxes} boxes: " + "; ".join(
                line.split("   #")[0] for line in ray_setup(boxes, single.placement.tp_link))
                + "; then the vllm serve line on the head")
    return rec


def _tensor_parallel_json(sim: Inventory, single: StepTime, ranks: int) -> dict:
    """The per-rank figures of a tensor-parallel row, read off its priced step."""
    topology = single.config.topology
    link = single.placement.tp_link
    kv_ranks = kv_split(sim, ranks)
    replicated = sum(m.nbytes for m in sim.modules if sharing_ranks(m, topology, kv_ranks) == 1)
    tokens = single.main.batch * single.main.tokens_per_sequence
    allreduces = sum(c.per_step for c in single.collectives if c.kind == "all_reduce")
    return {"ranks": ranks, "link": link.key, "link_name": link.name, "link_bandwidth_gbps": link.bandwidth_gbps,
            "link_latency_us": link.latency_us, "link_source": link.source,
            "bytes_per_rank": single.weight_bytes_per_rank, "replicated_bytes": replicated,
            "bytes_per_token_per_rank": single.bytes_per_step_per_rank / tokens,
            "allreduces_per_step": allreduces, "comm_seconds_per_step": single.comm_s,
            "expected_tok_s": single.tok_s, "ceiling_tok_s": single.ceiling_tok_s,
            "engine": link.engine, "boxes": single.placement.boxes}


# --------------------------------------------------------------------------- the plan

SCHEMA = "roofline.plan/1"


@dataclass
class Plan:
    inventory: Inventory
    hardware: Hardware
    workload: Workload
    simulated: list  # roofline.advise.simulate.SimulatedFormat, single stream
    recommendations: list[Recommendation]
    notes: list[str] = field(default_factory=list)
    base_of: str | None = None  # the quantized checkpoint this plan's base was derived from

    @property
    def top(self) -> Recommendation | None:
        return self.recommendations[0] if self.recommendations else None

    @property
    def lead(self) -> Recommendation | None:
        """The row the plan's band is for (Recommendation.leads)."""
        return next((r for r in self.recommendations if r.leads), self.top)

    @property
    def pick_at_one(self) -> Recommendation | None:
        """What one stream would pick (fastest single stream among the rows that fit)."""
        fitting = [r for r in self.recommendations if r.fits] or self.recommendations
        return max(fitting, key=lambda r: r.single_stream_tok_s) if fitting else None

    def pick_change(self) -> str | None:
        """A sentence when the pick at this concurrency differs from the single-stream pick."""
        one, top = self.pick_at_one, self.top
        if self.workload.concurrency <= 1 or one is None or top is None or \
                (one.format, one.recipe) == (top.format, top.recipe):
            return None
        n = self.workload.concurrency
        if top.aggregate_tok_s <= one.aggregate_tok_s:  # put first by a tie's evidence, not by speed
            return (f"at {n} streams {format_label(top.format)} ({top.aggregate_tok_s:.1f} tok/s aggregate) ties with "
                    f"the single-stream pick {format_label(one.format)} ({one.aggregate_tok_s:.1f}); decided by: "
                    f"{top.decided_by}")
        return (f"the pick changes with concurrency: one stream is fastest on {format_label(one.format)} "
                f"({one.single_stream_tok_s:.1f} tok/s, {one.recipe}), {n} streams on {format_label(top.format)} "
                f"({top.aggregate_tok_s:.1f} tok/s aggregate vs {one.aggregate_tok_s:.1f})")

    def to_json(self) -> dict:
        inv, hw, w = self.inventory, self.hardware, self.workload
        tol, tol_source = tie_tolerance(inv, hw, w, self.lead)
        return {
            "schema": SCHEMA, "roofline_version": __version__, "model": inv.model_id, "source": inv.source,
            "architecture": inv.shape.architecture,
            "hardware": {"key": hw.key, "name": hw.name, "bandwidth_gbps": hw.bandwidth_gbps,
                         "compute_capability": hw.compute_capability, "usable_memory_gb": hw.usable_memory_gb,
                         "efficiency": hw.efficiency, "efficiency_kind": hw.efficiency_kind},
            "workload": {"concurrency": w.concurrency, "context": w.context, "kv_cache_dtype": w.kv_cache_dtype,
                         "memory_budget_gb": w.memory_budget_gb, "tp": w.tp, "link": w.link, "routing": w.routing,
                         "load": w.load.to_json() if w.load is not None else None},
            "simulated": [
                {"format": s.format, "format_label": format_label(s.format), "recipe": s.recipe,
                 "weight_bytes": s.weight_bytes, "bytes_per_token": s.bytes_per_token,
                 "ceiling_tok_s": s.ceiling_tok_s, "expected_tok_s": s.expected_tok_s}
                for s in self.simulated
            ],
            "recommendations": [r.to_json() for r in self.recommendations],
            "band": band_json(plan_band(inv, hw, w, self.lead)),
            "top_pick": self.top.to_json() if self.top else None,
            "pick_at_one": ({"format": self.pick_at_one.format, "recipe": self.pick_at_one.recipe,
                             "single_stream_tok_s": self.pick_at_one.single_stream_tok_s}
                            if self.pick_at_one else None),
            "pick_change": self.pick_change(),
            "base_of": self.base_of,
            "tie_tolerance": tol,
            "tie_tolerance_source": tol_source,
            "notes": list(self.notes),
        }


def build_plan(inventory: Inventory, hardware: Hardware, *, formats: list[str], recipes: list[str],
               concurrency: int = 1, context: int = 4096, kv_cache_dtype: str = "auto",
               memory_budget_gb: float | None = None, tp: int = 1, link: str | None = None,
               record_rows: list[dict] | None = None, base_of: Inventory | None = None,
               served_as: str | None = None, published: list[dict] | None = None, routing: str = "uniform",
               deployment: dict | None = None, load: PlanLoad | None = None) -> Plan:
    """The plan for `inventory` (an unquantized base). `base_of`: the quantized checkpoint the base
    was derived from, when the user gave one; `record_rows`: the user's validation record, evidence
    for breaking ties; `served_as`: the model as the user named it (a path or hub id), which the
    serve lines of rows that serve it as it is name instead of the inventory's id; `published`:
    quantized variants of the base known to exist beyond the measurements table (the hub's
    listing), named instead of a checkpoint to make."""
    for fmt in formats:
        get_format(fmt)
    for name in recipes:
        get_recipe(name)
    # deployment: the Workload fields a vLLM deployment fixes for every row (graphs, speculation, backends)
    workload = Workload(concurrency, context, kv_cache_dtype, memory_budget_gb, tp, link, routing,
                        **(deployment or {}), load=load).validate()
    check_max_model_len(inventory.config, context, "--context")
    _check_split(inventory, hardware, workload)
    simulated = simulate_all(inventory, formats, recipes, hardware,
                             row_config(workload, None, kv_cache_dtype, hardware, 1))
    evidence = Evidence.gather(base_model_name(inventory.model_id), hardware.key, record_rows, published)
    recommendations, notes = recommend(inventory, hardware, workload, formats, recipes,
                                       simulated={(s.format, s.recipe): s.inventory for s in simulated},
                                       evidence=evidence, given=base_of, given_as=served_as or "")
    for rec in recommendations:
        if rec.given or rec.checkpoint != inventory.model_id:
            continue
        if base_of is None:  # the checkpoint given, served as the user named it
            rec.checkpoint = served_as or rec.checkpoint
        else:  # the unquantized base of a quantized checkpoint: a folder the user fetches, never a bare name
            rec.checkpoint = f"./{inventory.model_id}"
            rec.quantize_with = f"the unquantized base of {served_as or base_of.model_id} (its model card's base_model)"
    _name_published(recommendations, evidence, base_of)
    if base_of is not None:
        _say_what_the_publisher_kept(recommendations, base_of,
                                     {(s.format, s.recipe): s.inventory for s in simulated})
    if base_of is not None:
        q = base_of.quant
        notes.insert(0, f"{base_of.model_id} is quantized ({q.method}{' ' + q.algo if q.algo else ''}): ranked as "
                        f"given (recipe \"{GIVEN_RECIPE}\") beside the formats simulated from its base, "
                        f"{inventory.model_id} (its config without the quantization config)")
    return Plan(inventory, hardware, workload, simulated, recommendations, notes,
                base_of=base_of.model_id if base_of is not None else None)


def _say_what_the_publisher_kept(recommendations: list[Recommendation], given: Inventory,
                                 simulated: dict[tuple[str, str], Inventory]) -> None:
    """A row that quantizes modules the quantized checkpoint's publisher kept in BF16 (attention,
    routers, the first layers) says so: the publisher kept them for accuracy, and the row's speed
    is bought with a risk the release avoided (rules.toml [caveat])."""
    kept = {m.name: m for m in given.modules if m.params and m.format in PLAIN}
    for rec in recommendations:
        sim = simulated.get((rec.format, rec.recipe))
        if rec.given or sim is None:
            continue
        taken = [m for m in sim.modules if m.name in kept and m.format not in PLAIN]
        if not taken:
            continue
        labels = list(dict.fromkeys(short_label(m.name) for m in taken))
        rec.reasons.insert(0, rules()["caveat"]["publisher_kept"].format(
            given=given.model_id, count=len(taken), labels=", ".join(labels[:4]) + (", ..." if len(labels) > 4 else ""),
            gb=sum(kept[m.name].nbytes for m in taken) / 1e9))


def _name_published(recommendations: list[Recommendation], evidence: Evidence, given: Inventory | None) -> None:
    """The best row of each format that asks the user to quantize names the published checkpoint
    of that format instead, where one is known (measurements.toml, the hub's listing): served as
    published, not made again. It was quantized with its maker's recipe, which this row's recipe
    only approximates, and the row says so."""
    done: set[str] = set()
    for rec in recommendations:
        if rec.given or not rec.quantize_with or rec.format in done:
            continue
        published = evidence.published(rec.format)
        if published is None or (given is not None and published == given.model_id):
            continue
        done.add(rec.format)
        rec.reasons.insert(1 if rec.decided_by else 0, f"published as {published}: serve it rather than quantize (made with its "
                              f"maker's recipe; this row prices recipe {rec.recipe})")
        rec.checkpoint, rec.quantize_with = published, ""

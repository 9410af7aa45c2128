"""How many concurrent requests fit, and what each gets: `roofline capacity` (pure).

1. The memory vLLM gives the KV cache (each term shown, measured or estimated), then the KV cache as
   vLLM lays it out (roofline.predict.kv_capacity): blocks, tokens, max concurrency — the two numbers
   vLLM logs at start-up.
2. The decode curve: per concurrency level, the step model (roofline.predict.step) prices the step
   (MoE experts by the routing assumption, every sequence's KV and state, tensor FLOPs, the launch
   floor); its breakdown names the bound; aggregate and per-stream tok/s; the knee where it turns
   compute-bound.
3. TTFT of one prompt from the step model's compute time per token plus one read of the weights.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.architecture import config_int, text_config
from roofline.model.inventory import Inventory
from roofline.predict.backends import default_backend
from roofline.predict.bands import band_for, band_json, step_regime
from roofline.predict.cuda_graphs import full_decode_tokens, past_full_note
from roofline.predict.deployment import default_capture_tokens
from roofline.predict.drafting import draft_method_run
from roofline.predict.hardware import Hardware
from roofline.predict.kv_capacity import KVCapacity, KVLayout, kv_capacity
from roofline.predict.launch import graphs_apply
from roofline.predict.scheduler_config import async_scheduling, batch_defaults, max_concurrent_batches
from roofline.predict.step import StepConfig, price_step
from roofline.predict.topology import Topology, refusal, stage_layers, tensor_parallel_placement
from roofline.predict.traffic import KV_DTYPE_BYTES, ROUTINGS, Scenario, compute_traffic, dtype_bytes

from .held_layout import HeldLayout, held_layout
from .profile_run import ProfilePeak, cuda_graph_estimate, model_runner, profile_peak
from .scale_out import scale_out

SCHEMA = "roofline.capacity/1"
GIB = 2**30


@dataclass(frozen=True)
class Request:
    """The serving setup capacity is asked about (vLLM's option names)."""

    max_model_len: int
    kv_cache_dtype: str = "auto"
    auto_max_model_len: bool = False  # --max-model-len auto / -1: fitted down to what the KV cache holds
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    cpu_kvcache_space_gib: float | None = None  # VLLM_CPU_KVCACHE_SPACE, on a CPU server
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    prefix_caching: bool = True
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    prompt_len: int = 512
    output_len: int = 256
    routing: str = "uniform"  # uniform | shared
    min_tok_s: float | None = None  # per stream: the SLO "each user still gets X tok/s"
    max_ttft_ms: float | None = None  # the SLO "first token within S"
    tp: int = 1  # tensor-parallel ranks (--tensor-parallel-size): memory terms and KV pages per rank
    link: str | None = None  # interconnect of the TP ranks (hardware.toml [link.*]; default per hardware)
    enforce_eager: bool = False  # --enforce-eager: no CUDA-graph pool, every kernel launched by the host
    # the scheduler's flags (predict/scheduler_config.py reads them as it reads a Deployment's)
    chunked_prefill: bool | None = None
    async_scheduling: bool | None = None
    long_prefill_token_threshold: int | None = None
    max_num_active_seqs: int | None = None
    capture_tokens: int | None = None  # the largest step vLLM captures a CUDA graph of (deployment.capture_tokens)
    cudagraph_mode: str = "full_and_piecewise"  # vLLM's CUDA-graph mode (step.StepConfig.cudagraph_mode)
    gpus: int | None = None  # --gpus / --boxes: devices per box and boxes; the split plan --gpus / --boxes ranks first
    boxes: int | None = None
    network: str | None = None  # the link between boxes (hardware.toml [link.*] of scope network)
    # the rest of a vLLM deployment (roofline/predict/deployment.py): pipeline stages, data-parallel
    # engines and expert parallelism beside --tp, the backend and the speculation the curve runs
    pp: int = 1
    dp: int = 1
    expert_parallel: bool = False
    backend: object = None  # roofline.predict.backends.Backend; None: vLLM's default for the format
    speculative_tokens: int = 0
    acceptance_rate: float = 0.7  # per draft token (roofline.predict.speculation converts vLLM's figure)
    draft_method: str = "mtp"  # --speculative-config's method: what a draft reads and launches (predict/drafting)
    drafter: object = None  # roofline.predict.drafting.DraftReads of a draft checkpoint; None: by method
    attention_backend: str | None = None  # --attention-backend; None: vLLM's choice (predict/attention.py)


@dataclass
class SloAnswer:
    """The largest concurrency that keeps the SLO, and what stops the next one."""

    concurrency: int  # 0: not even one stream keeps it
    per_stream_tok_s: float  # at that concurrency (one stream's when 0)
    aggregate_tok_s: float
    ttft_ms: float
    bound: str  # kv memory | max_num_seqs | bandwidth | compute | launch | ttft
    next_per_stream_tok_s: float | None  # one more stream's figure, when a limit of speed binds
    sentence: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class MemoryTerm:
    name: str
    bytes: float  # positive: what the term takes from (or, for "requested", gives to) the budget
    kind: str  # given | vllm default | checkpoint | estimate
    source: str


@dataclass
class CurvePoint:
    concurrency: int
    step_ms: float
    aggregate_tok_s: float
    per_stream_tok_s: float
    bound: str  # memory | compute | launch
    memory_ms: float
    compute_ms: float
    launch_ms: float
    fits: bool  # within the KV cache's max concurrency at this context and max_num_seqs

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Capacity:
    model_id: str
    hardware: Hardware
    request: Request
    memory_terms: list[MemoryTerm]
    kv: KVCapacity
    curve: list[CurvePoint]
    knee_concurrency: int | None
    ttft_ms: float
    context: int
    fit_concurrency: int  # requests of the curve's prompt + output that the KV cache and max_num_seqs admit
    recommended_kv_cache_memory_bytes: int | None = None  # unified-memory boxes
    notes: list[str] = field(default_factory=list)
    kv_cache_dtype_resolved: str = ""  # the KV dtype the cache is sized at ("auto" resolved as vLLM does)
    slo: SloAnswer | None = None  # --min-tok-s / --max-ttft
    band: dict = field(default_factory=dict)  # the curve's validated error band (predict/bands.py)
    split: dict | None = None  # --gpus / --boxes: the topology and why it was chosen
    replicas: int = 1  # data-parallel engines, each with its own KV cache of `kv`
    server: object = None  # the load model's view of this server (advise/load.Server): TTFT, a load's latencies
    load: dict | None = None  # a load's answer (advise/load.LoadAnswer.to_json), when one was asked for

    def verdict(self) -> str:
        """The summary of the table beneath it: a peak only among the concurrencies that fit."""
        fitting = [p for p in self.curve if p.fits]
        best = max(fitting, key=lambda p: p.aggregate_tok_s) if fitting else None
        request_tokens = self.request.prompt_len + self.request.output_len
        # the curve's requests (prompt + output) when they are shorter than the longest one
        curve_requests = "" if request_tokens == self.kv.max_model_len else \
            f", {self.fit_concurrency} of {request_tokens:,} (the curve's requests)"
        text = (f"{self.kv.tokens:,} KV tokens: {self.kv.max_concurrency:.2f} requests of {self.kv.max_model_len:,} "
                f"tokens{curve_requests}")
        if self.replicas > 1:
            text = (f"{self.replicas} data-parallel replicas of {self.kv.tokens:,} KV tokens each: "
                    f"{self.replicas * self.kv.max_concurrency:.2f} requests of {self.kv.max_model_len:,} tokens"
                    f"{curve_requests}")
        if best is not None:
            text += (f"; decode peaks at {best.aggregate_tok_s:.0f} tok/s aggregate at concurrency {best.concurrency} "
                     f"({best.per_stream_tok_s:.1f} per stream)")
        elif self.curve:
            text += (f"; none of the concurrencies asked for fits (at most {self.fit_concurrency} requests run at "
                     f"once)")
        if self.knee_concurrency:
            text += f"; compute-bound from concurrency {self.knee_concurrency}"
        return text

    def to_json(self) -> dict:
        hw = self.hardware
        return {
            "schema": SCHEMA, "model": self.model_id,
            "hardware": {"key": hw.key, "name": hw.name, "bandwidth_gbps": hw.bandwidth_gbps,
                         "memory_gb": hw.memory_gb, "tensor_tflops": dict(hw.tensor_tflops)},
            "request": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.request.__dict__.items()
                        if k not in ("backend", "drafter")}
            | {"backend": self.request.backend.name if self.request.backend else None,
               "drafter": self.request.drafter.source if self.request.drafter else None}
            | {"kv_cache_dtype_resolved": self.kv_cache_dtype_resolved},
            "memory_terms": {t.name: {"bytes": t.bytes, "kind": t.kind, "source": t.source} for t in self.memory_terms},
            "kv_cache": self.kv.to_json(),
            "context": self.context, "fit_concurrency": self.fit_concurrency,
            "curve": [p.to_json() for p in self.curve],
            "knee_concurrency": self.knee_concurrency, "ttft_ms": self.ttft_ms,
            "recommended_kv_cache_memory_bytes": self.recommended_kv_cache_memory_bytes,
            "verdict": self.verdict(), "notes": list(self.notes),
            "slo": self.slo.to_json() if self.slo else None,
            "band": self.band, "split": self.split, "replicas": self.replicas,
            "first_token": self.server.first_token_json(self.request.prompt_len) if self.server else None,
            "load": self.load,
        }


def _table() -> dict:
    return load_table("serving")


def batched_tokens(request: "Request", hardware: Hardware) -> int:
    """max_num_batched_tokens: given, else vLLM's default for the device (predict/scheduler_config.py)."""
    return request.max_num_batched_tokens or batch_defaults(hardware, world_size=_cpu_world(request, hardware))[0]


def max_num_seqs(request: "Request", hardware: Hardware) -> int:
    """max_num_seqs: given, else vLLM's default for the device (predict/scheduler_config.py)."""
    return request.max_num_seqs or batch_defaults(hardware, world_size=_cpu_world(request, hardware))[1]


def _cpu_world(request: "Request", hardware: Hardware) -> int:
    return request.tp * request.pp if hardware.host == "cpu" else 1


def _platform(hardware: Hardware) -> dict:
    """serving.toml [platform.cpu] or [platform.cuda]: what vLLM's platform imposes."""
    return _table()["platform"]["cpu" if hardware.host == "cpu" else "cuda"]


def state_dtype(hardware: Hardware, model_state_dtype: str) -> str:
    """The recurrent state's dtype as vLLM keeps it on this platform: vLLM-CPU resets it to float32 where
    its accelerated GDN kernels run (a host with AVX-512 BF16: the CPU entry stands for this host), the
    dtype the model's shape derived everywhere else (serving.toml [platform.*] state_dtype)."""
    platform = _platform(hardware)
    wanted = platform.get("state_dtype")
    needs = platform.get("state_dtype_needs")
    if wanted is None:
        return model_state_dtype
    if needs:
        from roofline.sources.host import cpu_flags

        if not set(needs) & cpu_flags():
            return model_state_dtype
    return wanted


def platform_layout(hardware: Hardware, mla: bool = False) -> KVLayout:
    """The platform's block sizes; an MLA model on a GPU takes its MLA backend's block (serving.toml)."""
    entry = _platform(hardware)
    if mla and "mla_block_size" in entry:
        major = (hardware.compute_capability or "").split(".")[0]
        block = entry["mla_block_size"].get(major, entry["mla_block_size_default"])
        return KVLayout(block, block)
    return KVLayout(entry["default_block_size"], entry["kernel_block"])


def request_profile_peak(inventory: Inventory, hardware: Hardware, request: Request, tokens: int, seqs: int,
                         tp: int = 1) -> ProfilePeak:
    """vLLM's profile run for the request's engine (advise/profile_run.py): its model runner, the experts' kernel
    (the request's backend, else vLLM's default for the checkpoint), the device's SMs, torch.compile on a GPU unless
    --enforce-eager."""
    runner = _runner(inventory, request)
    return profile_peak(inventory, tokens, seqs, request.max_model_len,
                        request.block_size or platform_layout(hardware, mla=True).default_block_size, tp, runner,
                        *experts_kernel(inventory, hardware, request), hardware.sm_count,
                        compiled=graphs_apply(hardware) and not request.enforce_eager)


def _runner(inventory: Inventory, request: Request) -> str:
    return model_runner(inventory, draft_method_run(request.draft_method, request.speculative_tokens))


def _boxes(parallel: dict) -> int:
    """The boxes the curve's placement spans (one without a placement)."""
    placement = parallel.get("placement")
    return placement.boxes if placement else 1


def _async(hardware: Hardware, request: Request, parallel: dict):
    """Async scheduling as vLLM resolves it for the request's line over its placement's boxes."""
    return async_scheduling(hardware, request.async_scheduling,
                            draft_method_run(request.draft_method, request.speculative_tokens), _boxes(parallel))


def experts_kernel(inventory: Inventory, hardware: Hardware, request: Request) -> tuple[str, str | None]:
    """(the experts' format, the MoE backend they run on: the request's, else vLLM's default here); ("", None)
    without experts' weights to speak of."""
    backend = request.backend or default_backend(inventory.main_format(), hardware)
    experts = next((m for m in inventory.modules if m.role == "moe_experts"), None)
    return (experts.format if experts else ""), getattr(backend, "moe_backend", None)


# below this (GiB) the weights' line does not name what vLLM holds beyond the checkpoint (it is still counted)
HELD_SAID = 0.005


def request_held_layout(inventory: Inventory, hardware: Hardware, request: Request, tp: int = 1) -> HeldLayout:
    """What the weights take on a GPU beyond the checkpoint's tensors: the experts' kernel layout (the request's
    backend, else vLLM's default here) and the caching allocator's blocks at load."""
    if hardware.host == "cpu":
        return HeldLayout(0.0, 0.0, "")
    return held_layout(inventory, *experts_kernel(inventory, hardware, request), tp)


def _runner_text(peak: ProfilePeak) -> str:
    return "vLLM's V2 model runner" if peak.runner == "v2" else "vLLM's V1 model runner (MoE / hybrid)"


def memory_terms(inventory: Inventory, hardware: Hardware, request: Request,
                 weights_per_rank: float | None = None, tp: int = 1) -> list[MemoryTerm]:
    """What one rank's KV cache gets (every term per GPU; weights_per_rank: the fullest rank's share
    of a split over `tp` tensor-parallel ranks and pipeline stages)."""
    mem = _table()["memory"]
    if hardware.host == "cpu" and request.cpu_kvcache_space_gib is not None:
        # vLLM-CPU's legacy variable wins over --kv-cache-memory-bytes (vllm/platforms/cpu.py)
        return [MemoryTerm("kv_cache", request.cpu_kvcache_space_gib * GIB, "given",
                           "VLLM_CPU_KVCACHE_SPACE (GiB): vLLM-CPU sets kv_cache_memory_bytes from it, over "
                           "--kv-cache-memory-bytes")]
    if request.kv_cache_memory_bytes is not None:
        return [MemoryTerm("kv_cache", request.kv_cache_memory_bytes, "given",
                           "--kv-cache-memory-bytes: vLLM skips its memory profile and uses exactly this")]
    utilization = request.gpu_memory_utilization or mem["gpu_memory_utilization"]
    seqs = max_num_seqs(request, hardware)
    tokens = batched_tokens(request, hardware)
    peak = request_profile_peak(inventory, hardware, request, tokens, seqs, tp)
    layout = request_held_layout(inventory, hardware, request, tp)
    if weights_per_rank is not None and request.pp > 1:  # the fullest stage holds its share of the layers' layout
        layout = layout.share(min(1.0, weights_per_rank * tp / inventory.weight_bytes))
    if hardware.runtime_memory_gib:  # what vLLM multiplies: the runtime's total, not the datasheet's
        device, device_text = hardware.runtime_memory_gib * GIB, (f"{hardware.runtime_memory_gib:g} GiB device memory "
                                                                 f"as the CUDA runtime reports it")
    else:
        device, device_text = hardware.memory_gb * 1e9, f"{hardware.memory_gb:g} GB device memory"
    terms = [MemoryTerm("requested", utilization * device,
                        "given" if request.gpu_memory_utilization else "vllm default",
                        f"gpu_memory_utilization {utilization:g} x {device_text}"),
             MemoryTerm("weights", (inventory.weight_bytes if weights_per_rank is None else weights_per_rank)
                        + layout.bytes,
                        "checkpoint", ("the checkpoint's tensors (audit)" if weights_per_rank is None else
                                       f"the fullest rank's share of the checkpoint's tensors ({tp} tensor-parallel "
                                       f"ranks; replicated ones whole)")
                        + (f", and {layout.bytes / GIB:.2f} GiB vLLM holds beyond them"
                           + (f" ({layout.layout / GIB:.2f} the experts' kernel layout)" if layout.layout else "")
                           + f": {layout.source}" if layout.bytes >= HELD_SAID * GIB else "")),
             MemoryTerm("activation_peak", peak.peak, "estimate",
                        f"vLLM's profile run on {_runner_text(peak)}: {tokens} batched tokens through one layer's "
                        f"widest transients and the residual stream"
                        + (", a cold torch.compile's copy of the embedding table" if peak.compile else "")
                        + (f" over the MoE's {peak.moe_workspace / GIB:.2f} GiB workspace" if peak.moe_workspace
                           else "")
                        + f", then the dummy sampler on {seqs} rows of the vocabulary: {peak.set_by} (vLLM "
                          f"measures it at start-up)"
                        + (f"; a rank's share of the {tp} tensor-parallel ranks' split outputs" if tp > 1 else "")),
             MemoryTerm("non_torch", mem["non_torch_gib"] * GIB if hardware.host != "cpu" else 0.0,
                        mem["non_torch_kind"], mem["non_torch_source"])]
    graph_pool = captures_graphs(request, hardware)
    if graph_pool:
        largest = request.capture_tokens or default_capture_tokens(seqs, tokens, request.speculative_tokens,
                                                                    inventory.shape.architecture, hardware)
        estimate = cuda_graph_estimate(inventory.shape.num_layers // max(request.pp, 1), largest, peak.runner)
        terms.append(MemoryTerm("cuda_graphs", estimate.bytes, "measured" if estimate.bytes else "vllm default",
                                estimate.source))
        graph_pool = estimate.bytes > 0
    left = terms[0].bytes - sum(t.bytes for t in terms[1:])
    terms.append(MemoryTerm("kv_cache", left, "derived", "requested - weights - activation peak - non-torch"
                            + (" - CUDA graphs" if graph_pool else "")))
    return terms


def decode_curve(inventory: Inventory, hardware: Hardware, levels, context: int, kv_cache_dtype: str,
                 routing: str = "uniform", fit: int | None = None, parallel: dict | None = None):
    """(points, knee concurrency, the one-stream step) of decoding at each concurrency level with
    `context` tokens per sequence: each point is the step model's price of that batch. `parallel`:
    the StepConfig's topology and placement (tensor parallelism)."""
    curve = []
    one = None
    price = step_pricer(inventory, hardware, context, kv_cache_dtype, routing, parallel)
    for n in levels:
        step = price(n)
        one = one or (step if n == 1 else None)
        b = step.breakdown()
        curve.append(CurvePoint(n, step.step_ms, step.tok_s, step.per_stream_tok_s, b.bound, b.memory_time_s * 1e3,
                                b.compute_time_s * 1e3, b.launch_time_s * 1e3, fit is None or n <= fit))
    knee = next((p.concurrency for p in curve if p.bound == "compute"), None)
    return curve, knee, one or price(1)


def captures_graphs(request: Request, hardware: Hardware) -> bool:
    """Whether vLLM captures CUDA graphs (and estimates their memory, gpu_worker.py): a GPU, not --enforce-eager,
    a cudagraph_mode other than none."""
    return graphs_apply(hardware) and not request.enforce_eager and request.cudagraph_mode != "none"


def full_decode_graphs(request: Request, hardware: Hardware) -> bool:
    """Whether vLLM captures full CUDA graphs of decode steps: it captures graphs, in a mode with full ones."""
    return captures_graphs(request, hardware) and request.cudagraph_mode in (
        "full_and_piecewise", "full", "full_decode_only")


def step_pricer(inventory: Inventory, hardware: Hardware, context: int, kv_cache_dtype: str, routing: str,
                parallel: dict | None = None):
    """n -> the step model's price of decoding n sequences of `context` tokens (the curve and the SLO)."""
    def price(n: int):
        return price_step(inventory, hardware, StepConfig(batch=n, context=context, kv_cache_dtype=kv_cache_dtype,
                                                          routing=routing, **(parallel or {})))
    return price


def _band(inventory: Inventory, hardware: Hardware, request: Request, step):
    """The band of the curve's figures: the class of its largest concurrency's step, on that step's backend."""
    return band_for(inventory, hardware, graphs=not request.enforce_eager, batch=max(request.concurrency),
                    regime=step_regime(step), kernel=step.backend.kernel)


def capacity(inventory: Inventory, hardware: Hardware, request: Request) -> Capacity:
    if request.routing not in ROUTINGS:
        raise RooflineError(f"--routing {request.routing!r}: use uniform or shared")
    if request.prompt_len + request.output_len > request.max_model_len:
        raise RooflineError(f"a request of --prompt-len {request.prompt_len} + --output-len {request.output_len} tokens "
                            f"does not fit --max-model-len {request.max_model_len} (vLLM refuses such a request)")
    context = min(request.prompt_len + request.output_len // 2, request.max_model_len)  # the curve's
    parallel, split = _parallel(inventory, hardware, request, context)
    topology = parallel.get("topology", Topology())
    weights = inventory.weight_bytes
    stage_weights = [weights]
    if topology.devices > 1:
        stage_weights = [t["weight_bytes"] for t in price_step(inventory, hardware, StepConfig(**parallel)).stage_totals()]
        weights = max(stage_weights)
    terms = memory_terms(inventory, hardware, request, weights if topology.devices > 1 else None, topology.tp)
    budget = terms[-1].bytes
    given = terms[-1].kind == "given"
    per_gpu = " per GPU" if topology.devices > 1 else ""
    if given and budget + weights > hardware.memory_gb * 1e9:
        raise RooflineError(f"does not fit: {budget / GIB:,.2f} GiB of KV cache beside {weights / 1e9:.2f} GB "
                            f"of weights{per_gpu} is more than the {hardware.memory_gb:g} GB of {hardware.name}")
    if budget <= 0:
        weights = weights / 1e9
        raise RooflineError(f"does not fit: the weights ({weights:.2f} GB{per_gpu}) and vLLM's overheads leave no KV "
                            f"cache memory of the {terms[0].bytes / 1e9:.2f} GB requested"
                            + ("" if topology.devices > 1 else "; --tp N or --gpus / --boxes split the weights over "
                                                                   "several GPUs"))
    shape = inventory.shape
    kv_name = request.kv_cache_dtype
    traffic_kv = compute_traffic(inventory, Scenario(kv_cache_dtype=kv_name))
    in_flight = max_concurrent_batches(_async(hardware, request, parallel).on, _runner(inventory, request),
                                       topology.pp) * batched_tokens(request, hardware)

    def cache(max_model_len: int) -> KVCapacity:
        return kv_capacity(
            shape, kv_dtype_bytes=KV_DTYPE_BYTES[traffic_kv.kv_dtype], model_dtype_bytes=int(dtype_bytes(shape.dtype)),
            state_dtype_bytes=int(dtype_bytes(state_dtype(hardware, shape.state_dtype))), memory_bytes=int(budget),
            max_model_len=max_model_len,
            layout=platform_layout(hardware, mla=bool(config_int(text_config(inventory.config), "kv_lora_rank"))),
            block_size=request.block_size, prefix_caching=request.prefix_caching, tp=topology.tp,
            max_in_flight_tokens=in_flight,
            stages=_stage_budgets(shape.num_layers, topology.pp, stage_weights, budget, weights, given))

    kv = cache(request.max_model_len)
    fitted_note = None
    if request.auto_max_model_len and kv.num_blocks < kv.blocks_for(request.max_model_len):
        # vLLM's auto-fit (--max-model-len auto / -1): the largest length one request of which the cache holds
        low, high = 0, request.max_model_len
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if kv.blocks_for(mid) <= kv.num_blocks else (low, mid - 1)
        if low < 1:
            raise RooflineError("Cannot auto-fit max_model_len: not enough GPU memory available to serve even a "
                                "single token. Try increasing `gpu_memory_utilization`.")
        fitted_note = (f"--max-model-len auto: vLLM fits it to {low:,} tokens (the model's {request.max_model_len:,} "
                       "do not fit the KV cache)")
        if request.prompt_len + request.output_len > low:
            raise RooflineError(f"--max-model-len auto fits {low:,} tokens: a request of --prompt-len "
                                f"{request.prompt_len} + --output-len {request.output_len} does not fit it")
        request = replace(request, max_model_len=low)
        kv = cache(low)
    if kv.num_blocks < kv.blocks_for(request.max_model_len):
        # vLLM's own start-up check (check_enough_kv_cache_memory / "No available memory for the cache blocks")
        raise RooflineError(f"vLLM refuses to start: {budget / GIB:,.3g} GiB of KV cache hold {kv.num_blocks} blocks, "
                            f"fewer than the {kv.blocks_for(request.max_model_len)} one request of --max-model-len "
                            f"{request.max_model_len} needs; give the KV cache more memory or lower --max-model-len")
    per_request_blocks = kv.blocks_for(request.prompt_len + request.output_len)
    max_seqs = max_num_seqs(request, hardware)
    if shape.recurrent and full_decode_graphs(request, hardware) and max_seqs > kv.num_blocks:
        # vLLM's check before it captures full decode graphs (CompilationConfig.resolve_cudagraph_mode_and_sizes):
        # each decode sequence needs a Mamba / GDN state block of its own
        raise RooflineError(f"vLLM refuses to start: max_num_seqs ({max_seqs}) exceeds available Mamba cache blocks "
                            f"({kv.num_blocks}); each decode sequence needs one for vLLM's full CUDA graphs; lower "
                            f"--max-num-seqs to at most {kv.num_blocks} or give the KV cache more memory "
                            f"(--gpu-memory-utilization)")
    fit = min(kv.num_blocks // per_request_blocks, max_seqs) * topology.dp  # each replica its own cache and cap
    curve, knee, one = decode_curve(inventory, hardware, request.concurrency, context, kv_name, request.routing, fit,
                                    parallel)
    server = load_server(inventory, hardware, request, kv, context, parallel)
    ttft = server.first_token_s(request.prompt_len)
    notes = list(kv.notes) + ([fitted_note] if fitted_note else [])
    if hardware.host == "cpu":
        notes.append("CPU host: no launch floor modelled")
    if not hardware.tensor_tflops:
        notes.append("no compute roof: the hardware entry has no tensor_tflops (roofline calibrate measures a bf16 "
                     "GEMM); the curve is bandwidth-bound by construction")
    if request.routing == "shared" and shape.num_experts:
        notes.append("routing shared: every stream decodes the same text, so a step reads one token's experts")
    if not request.enforce_eager and request.cudagraph_mode in ("full_and_piecewise", "full_decode_only"):
        largest, full = _graph_sizes(inventory, hardware, request)
        per_request = 1 + request.speculative_tokens
        graph_note = past_full_note(max_seqs, full // per_request, largest // per_request)
        notes += [graph_note] if graph_note else []
    recommended = None
    unified = _table()["unified"]
    if hardware.key in unified["hardware"] and request.kv_cache_memory_bytes is None:
        usable = hardware.usable_memory_gb * 1e9
        reserved = sum(t.bytes for t in terms[1:-1])
        recommended = int((usable * (1 - unified["safety_margin"]) - reserved) // kv.bytes_per_block * kv.bytes_per_block)
        notes.append(f"unified memory: pass --kv-cache-memory-bytes {recommended} ({recommended / GIB:.1f} GiB, "
                     f"{100 * unified['safety_margin']:.0f}% of the usable {hardware.usable_memory_gb:g} GB left free) "
                     "instead of trusting vLLM's profile here")
    slo = None
    if request.min_tok_s is not None or request.max_ttft_ms is not None:
        kv_limit = kv.num_blocks // per_request_blocks
        slo = answer_slo(step_pricer(inventory, hardware, context, kv_name, request.routing, parallel),
                         request, fit, "kv memory" if kv_limit < max_seqs else "max_num_seqs", ttft, context)
    return Capacity(model_id=inventory.model_id, hardware=hardware, request=request, memory_terms=terms, kv=kv,
                    curve=curve, knee_concurrency=knee, ttft_ms=ttft * 1e3, context=context, fit_concurrency=fit,
                    recommended_kv_cache_memory_bytes=recommended, notes=notes,
                    kv_cache_dtype_resolved=traffic_kv.kv_dtype, slo=slo,
                    band=band_json(_band(inventory, hardware, request, step_pricer(
                        inventory, hardware, context, kv_name, request.routing, parallel)(max(request.concurrency)))),
                    split=split, replicas=topology.dp, server=server)


def _stage_budgets(num_layers: int, pp: int, stage_weights: list[float], budget: float, weights: float,
                   given: bool) -> list[tuple[range, int]] | None:
    """Under pipeline parallelism, each stage's layers and its worker's KV memory: the budget of the
    fullest rank plus what that stage's lighter weights leave (a fixed --kv-cache-memory-bytes is the
    same on every worker)."""
    if pp == 1:
        return None
    return [(layers, int(budget if given else budget + weights - stage))
            for layers, stage in zip(stage_layers(num_layers, pp), stage_weights)]


def _graph_sizes(inventory: Inventory, hardware: Hardware, request: Request) -> tuple[int, int]:
    """(the largest step vLLM captures, the largest decode step it replays a FULL graph of), in tokens."""
    from roofline.predict.scheduler_config import scheduler_settings

    settings = scheduler_settings(request, hardware)
    largest = request.capture_tokens or default_capture_tokens(
        settings.max_num_seqs, settings.max_num_batched_tokens, request.speculative_tokens,
        inventory.shape.architecture, hardware)
    return largest, full_decode_tokens(settings.max_num_seqs, request.speculative_tokens, largest,
                                       settings.max_num_batched_tokens)


def _parallel(inventory: Inventory, hardware: Hardware, request: Request,
              context: int) -> tuple[dict, dict | None]:
    """The StepConfig fields of the server's setup and, for --gpus / --boxes, the split: eager or CUDA
    graphs; for --tp N vLLM's own refusal of the split first, then the ranks placed on the hardware's
    links; for --gpus / --boxes the split plan --gpus / --boxes ranks first (advise/scale_out.py) at the
    curve's largest concurrency."""
    mode = {"graphs": False} if request.enforce_eager else {"cudagraph_mode": request.cudagraph_mode}  # as it runs
    mode["async_scheduling"] = request.async_scheduling  # None: vLLM's default (step.StepConfig)
    if request.backend is not None:
        mode["backend"] = request.backend
    if request.attention_backend is not None:
        mode["attention_backend"] = request.attention_backend
    if not request.enforce_eager:  # a decode batch padded past --max-num-seqs runs without its FULL graph
        mode["full_decode_tokens"] = _graph_sizes(inventory, hardware, request)[1]
    if request.speculative_tokens:
        mode |= {"speculative_tokens": request.speculative_tokens, "acceptance_rate": request.acceptance_rate,
                 "draft_method": request.draft_method, "drafter": request.drafter}
    if request.gpus is not None or request.boxes is not None:
        concurrency = max(request.concurrency)
        plan = scale_out(inventory, hardware, boxes=request.boxes or 1, devices_per_box=request.gpus or 1,
                         concurrency=concurrency, context=context,
                         kv_cache_dtype=request.kv_cache_dtype, in_box_link_name=request.link,
                         network=request.network)
        best = plan.ranked[0]
        split = {"label": best.topology.label, "tp": best.topology.tp, "pp": best.topology.pp,
                 "dp": best.topology.dp, "ep": best.topology.ep, "devices": best.topology.devices,
                 "boxes": best.boxes, "ranked_by": f"{'aggregate' if concurrency > 1 else 'single-stream'} tok/s at concurrency {concurrency}",
                 "alternatives": [r.topology.label for r in plan.ranked[1:4]]}
        return mode | {"topology": best.topology, "placement": best.placement}, split
    topology = Topology(tp=request.tp, pp=request.pp, dp=request.dp, expert_parallel=request.expert_parallel)
    if topology.devices == 1:
        return mode, None
    reason = refusal(inventory.config, topology)
    if reason:
        where = f"--tp {request.tp}" if topology.devices == request.tp else topology.label
        raise RooflineError(f"{where}: vLLM refuses this split of {inventory.model_id}: {reason}")
    placement = tensor_parallel_placement(hardware, request.tp, request.link) if topology.devices == request.tp \
        else None
    return mode | {"topology": topology, **({"placement": placement} if placement else {})}, None


def load_server(inventory: Inventory, hardware: Hardware, request: Request, kv: KVCapacity, context: int,
                parallel: dict):
    """The load model's view of the server capacity sized (advise/load.py): the step model at the curve's
    configuration on one data-parallel replica, vLLM's scheduler with the request's flags, this KV cache."""
    from roofline.predict.scheduler_config import scheduler_settings

    from .load import server_for

    topology = parallel.get("topology", Topology())
    one_replica = {**parallel, "topology": Topology(topology.tp, topology.pp, 1, topology.expert_parallel and
                                                    topology.tp > 1)} if topology.dp > 1 else parallel
    if topology.dp > 1:
        one_replica.pop("placement", None)
    config = StepConfig(context=context, kv_cache_dtype=request.kv_cache_dtype, routing=request.routing,
                        capture_tokens=None if request.enforce_eager else request.capture_tokens, **one_replica)
    return server_for(inventory, hardware, config, scheduler_settings(request, hardware, boxes=_boxes(parallel)),
                      num_blocks=kv.num_blocks, blocks_for=kv.blocks_for, max_model_len=request.max_model_len)


# what the step's bound means for the user asking how many streams keep their speed
SPEED_BOUNDS = {"memory": "bandwidth", "compute": "compute", "launch": "launch", "host": "engine host"}


def answer_slo(price, request: Request, fit: int, fit_bound: str, alone_s: float, context: int) -> SloAnswer:
    """The largest concurrency n <= fit (what the KV cache and max_num_seqs admit) at which each stream
    still decodes min_tok_s and a new request's first token comes within max_ttft_ms. Per-stream tok/s
    falls and TTFT grows with n, so the answer is found by bisection. TTFT under load (an estimate):
    the request's prefill alone plus one decode step of the n running streams it joins."""
    @functools.cache
    def holds(n: int):
        step = price(n)
        ttft_ms = 1e3 * (alone_s + step.step_ms / 1e3)
        speed = request.min_tok_s is None or step.per_stream_tok_s >= request.min_tok_s
        first = request.max_ttft_ms is None or ttft_ms <= request.max_ttft_ms
        return speed and first, step, ttft_ms, ("ttft" if speed else SPEED_BOUNDS.get(step.bound, step.bound))

    wants = " and ".join(x for x in (
        f">= {request.min_tok_s:g} tok/s per stream" if request.min_tok_s is not None else "",
        f"the first token within {request.max_ttft_ms:g} ms" if request.max_ttft_ms is not None else "") if x)
    ok, step, ttft_ms, why = holds(1)
    if not ok:
        return SloAnswer(0, step.per_stream_tok_s, step.tok_s, ttft_ms, why, None,
                         f"no concurrency keeps {wants} at {context:,} tokens: one stream alone gets "
                         f"{step.per_stream_tok_s:.1f} tok/s, first token in {ttft_ms:.0f} ms ({why}-bound)")
    low, high = 1, max(1, fit)
    if holds(high)[0]:
        low = high
    else:
        while high - low > 1:  # holds(low), not holds(high)
            mid = (low + high) // 2
            low, high = (mid, high) if holds(mid)[0] else (low, mid)
    _, step, ttft_ms, _ = holds(low)
    if low == fit:
        bound, following = fit_bound, None
        tokens = request.prompt_len + request.output_len
        why_text = (f"the KV cache holds no more requests of {tokens:,} tokens" if fit_bound == "kv memory" else
                    f"vLLM's max_num_seqs ({fit}) admits no more")
    else:
        _, after, after_ttft, bound = holds(low + 1)
        following = after.per_stream_tok_s
        why_text = (f"one more and the first token takes {after_ttft:.0f} ms" if bound == "ttft" else
                    f"one more and each stream gets {following:.1f} tok/s ({bound}-bound)")
    sentence = (f"up to {low:,} concurrent requests at {context:,} tokens keep {wants}: "
                f"{step.per_stream_tok_s:.1f} tok/s each, {step.tok_s:.0f} aggregate, first token in {ttft_ms:.0f} ms; "
                f"{why_text}")
    return SloAnswer(low, step.per_stream_tok_s, step.tok_s, ttft_ms, bound, following, sentence)

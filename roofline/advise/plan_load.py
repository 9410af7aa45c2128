"""A plan's rows under a load: each row that fits served as capacity sizes it (its KV cache, vLLM's scheduler for
the device, the step model of its format and backend), the load model run at the user's rate (or trace, or
burst), and with targets the highest rate each row keeps them at. The plan ranks on these when a load is asked
for: the rows keeping the targets first, then the highest such rate (or, without targets, the shortest
end-to-end latency at p90).

Nothing here prices a step: capacity (advise/capacity.py) builds the server, advise/load.py runs it."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from roofline.errors import RooflineError
from roofline.model.inventory import Inventory
from roofline.predict.hardware import Hardware
from roofline.predict.load import LoadResult
from roofline.predict.workload import Workload as Arrivals

from .capacity import Request, capacity
from .load import Targets, highest_rate, serve


@dataclass(frozen=True)
class PlanLoad:
    """The load a plan ranks at: the requests (predict/workload.Workload, at its rate, or a trace or burst of
    them) and the targets; notes from reading a trace."""

    arrivals: Arrivals
    targets: Targets = field(default_factory=Targets)
    notes: tuple[str, ...] = ()
    targets_alone: bool = False  # no rate, trace or burst given: each row at the highest rate keeping the targets

    @property
    def label(self) -> str:
        if self.targets_alone:
            return "the highest rate keeping the targets"
        return self.arrivals.label

    def to_json(self) -> dict:
        a = self.arrivals
        return {"arrival": a.arrival, "rate": None if self.targets_alone else a.rate, "requests": len(a.trace) if a.arrival == "trace" else a.requests,
                "prompt_len": a.prompt_len, "output_len": a.output_len, "range_ratio": a.range_ratio,
                "shared_prefix": a.shared_prefix, "seed": a.seed, "label": self.label, "targets_alone": self.targets_alone,
                "targets": self.targets.to_json(), "notes": list(self.notes)}


@dataclass
class RowLoad:
    """One row under the plan's load."""

    result: LoadResult | None  # the run at the load (None: the row's server does not start)
    keeps: bool  # the run keeps the targets (True without targets)
    broken: list[str]  # what it misses
    highest_rate: float | None = None  # with targets: the highest Poisson rate keeping them
    saturation: float | None = None
    refused: str = ""  # why the server does not start or the load does not run (capacity's / the load's line)
    targeted: bool = False  # targets were given: the highest rate keeping them ranks (0 where none does)

    @property
    def merit(self) -> float:
        """Higher is better: the highest rate keeping the targets, else 1 / end-to-end p90 at the load."""
        if self.targeted:
            return self.highest_rate or 0.0
        e2e = self.result.e2e if self.result else None
        return 1 / e2e.p90 if e2e and e2e.p90 > 0 else 0.0

    def to_json(self) -> dict:
        r = self.result

        def ms(metric: str, q: str) -> float | None:
            stat = getattr(r, metric) if r else None
            return getattr(stat, q) * 1e3 if stat else None
        return {"keeps_targets": self.keeps, "broken": list(self.broken), "highest_rate": self.highest_rate,
                "saturation_rate": self.saturation, "refused": self.refused or None,
                "ttft_p90_ms": ms("ttft", "p90"), "ttft_mean_ms": ms("ttft", "mean"), "tpot_p90_ms": ms("tpot", "p90"),
                "itl_mean_ms": ms("itl", "mean"), "e2e_p90_ms": ms("e2e", "p90"),
                "request_throughput": r.request_throughput if r else None}


def plan_load(asked) -> PlanLoad | None:
    """The load a plan ranks under, from the load asked for (advise/load.workload_for's answer; None: none): one
    rate (several are capacity's sweep), a trace, or a burst; with targets alone, each row at the highest rate
    keeping them."""
    if asked is None:
        return None
    arrivals, rates, burst, targets, notes = asked
    if len(rates) > 1 or (burst and (rates or arrivals.arrival == "trace")):
        raise RooflineError("plan ranks the rows under one load: one request rate, a trace or a burst (capacity "
                            "sweeps several rates)")
    if burst:
        arrivals = replace(arrivals, arrival="burst", requests=burst, rate=None)
    return PlanLoad(arrivals, targets, tuple(notes), targets_alone=not (rates or burst or arrivals.arrival == "trace"))


def row_request(load: PlanLoad | None, *, context: int, kv_cache_dtype: str, backend, tp: int, link: str | None,
                graphs: bool, speculative_tokens: int, acceptance_rate: float,
                gpu_memory_utilization: float | None, cudagraph_mode: str = "full_and_piecewise",
                async_scheduling: bool | None = None, draft_method: str = "mtp") -> Request:
    """The capacity Request of one plan row: the row's serve line (--max-model-len = the plan's context, its
    KV dtype, backend, TP, eager or graphs, speculation) and the load's request lengths (without a load, one
    request of the whole context: what vLLM checks at start-up)."""
    lengths = {"prompt_len": max(1, context - 1), "output_len": 1}
    if load is not None:
        a = load.arrivals
        longest = max((r.prompt + r.output for r in a.trace), default=0) if a.arrival == "trace" else \
            int((a.prompt_len + a.output_len) * (1 + a.range_ratio))
        if longest > context:
            raise RooflineError(f"the load's requests reach {longest:,} tokens, more than --context {context:,} (the "
                                "rows' --max-model-len): give a longer --context or shorter requests")
        lengths = {"prompt_len": a.prompt_len, "output_len": a.output_len}
    return Request(max_model_len=context, kv_cache_dtype=kv_cache_dtype, concurrency=(1,), **lengths, tp=tp,
                   link=link, enforce_eager=not graphs, cudagraph_mode=cudagraph_mode, backend=backend,
                   speculative_tokens=speculative_tokens, acceptance_rate=acceptance_rate,
                   gpu_memory_utilization=gpu_memory_utilization, async_scheduling=async_scheduling,
                   draft_method=draft_method)


# capacity's lines for a serve line vLLM would not start (its own checks at start-up, or no memory left for them)
REFUSALS = ("vLLM refuses to start", "does not fit")


def start_refusal(inventory: Inventory, hardware: Hardware, request: Request) -> str:
    """Why vLLM would not start the row's serve line, as capacity says it ("" where it starts)."""
    try:
        capacity(inventory, hardware, request)
    except RooflineError as refused:
        if str(refused).startswith(REFUSALS):
            return str(refused)
        raise
    return ""


def row_load(inventory: Inventory, hardware: Hardware, request: Request, load: PlanLoad) -> RowLoad:
    """The row's server as capacity sizes it, run at the load; with targets, the highest rate keeping them."""
    try:
        server = capacity(inventory, hardware, request).server
    except RooflineError as refused:  # vLLM would not start it (no KV cache left, a request too long for it)
        return RowLoad(None, False, [], refused=str(refused))
    if load.targets_alone:
        answer = highest_rate(server, load.arrivals, load.targets)
        return RowLoad(answer.at_rate, answer.rate is not None, [] if answer.rate is not None else answer.breaks_first,
                       answer.rate, answer.saturation, targeted=True)
    result = serve(server, load.arrivals)
    broken = load.targets.broken(result)
    if not load.targets.any:
        return RowLoad(result, True, [])
    rated = replace(load.arrivals, arrival="poisson", rate=load.arrivals.rate or 1.0, trace=()) \
        if load.arrivals.arrival != "poisson" else load.arrivals
    answer = highest_rate(server, rated, load.targets)
    return RowLoad(result, not broken, broken, answer.rate, answer.saturation, targeted=True)

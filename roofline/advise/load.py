"""A deployment under load, answered before it starts: the KV cache vLLM will have (advise/capacity.py), the
scheduler it runs (predict/scheduler_config.py), the step model kept for it (predict/step.StepPricer), the
requests a workload sends (predict/workload.py), and the load model (predict/load.py) between them.

- `first_token`: one request alone, its prompt in the chunks vLLM schedules, each chunk a step of the step
  model, plus the host's time per request: what every TTFT figure roofline prints comes from.
- `serve`: a workload at one rate (or a burst, or a trace): TTFT, ITL, TPOT, E2E and their percentiles.
- `saturation`: the most requests per second the server completes with its queue never empty.
- `highest_rate`: the highest rate whose TTFT p90 and per-request decode rate keep the targets, and what breaks
  first above it, with the range the step model's validated band puts around it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from roofline.errors import RooflineError
from roofline.model.inventory import Inventory
from roofline.predict.bands import spread
from roofline.predict.deployment import Deployment, step_config
from roofline.predict.first_token import FirstToken, first_token
from roofline.predict.hardware import Hardware
from roofline.predict.load import LoadResult, simulate
from roofline.predict.prefill import request_overhead_s
from roofline.predict.scheduler import Blocks
from roofline.predict.scheduler_config import SchedulerSettings, scheduler_settings
from roofline.predict.step import StepConfig, StepPricer
from roofline.predict.workload import Workload, generate

SCHEMA = "roofline.load/1"
RATE_SEARCH_STEPS = 14  # bisection steps of the highest rate keeping the targets (a share of 2^-14 of the span)
CURVE_SHARES = (0.1, 0.25, 0.4, 0.55, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25)  # of the saturation rate: the chart's rates
CURVE_REQUESTS = 120  # requests of each of the chart's runs


@dataclass
class Server:
    """What the load model needs of one deployment, gathered once."""

    pricer: StepPricer
    settings: SchedulerSettings
    num_blocks: int
    blocks_for: object  # tokens -> KV blocks of one request
    overhead_s: float
    overhead_kind: str
    overhead_source: str
    speculative_tokens: int
    acceptance: float  # per draft token
    max_model_len: int

    def blocks(self) -> Blocks:
        return Blocks(self.num_blocks, self.blocks_for)

    def first_token(self, prompt: int) -> FirstToken:
        """One request alone (predict/first_token.py): its prompt steps and the host's time."""
        return first_token(self.pricer, self.settings, prompt, (self.overhead_s, self.overhead_kind,
                                                                  self.overhead_source))

    def first_token_s(self, prompt: int) -> float:
        return self.first_token(prompt).seconds

    def first_token_json(self, prompt: int) -> dict:
        return self.first_token(prompt).to_json()


def server_for(inventory: Inventory, hardware: Hardware, config: StepConfig, settings: SchedulerSettings, *,
               num_blocks: int, blocks_for, max_model_len: int) -> Server:
    """The load model's view of a serving configuration (`config`: the step model's, as every command builds it
    from the deployment) whose KV cache holds `num_blocks` (capacity's answer)."""
    overhead, kind, source = request_overhead_s(hardware)
    return Server(StepPricer(inventory, hardware, replace(config, batch=1, chunks=())), settings, num_blocks,
                  blocks_for, overhead, kind, source, config.speculative_tokens,
                  config.acceptance_rate if config.speculative_tokens else 0.0, max_model_len)


def deployment_server(inventory: Inventory, deployment: Deployment, hardware: Hardware, *, num_blocks: int,
                      blocks_for, max_model_len: int, context: int, acceptance: float,
                      routing: str = "uniform") -> Server:
    """server_for a Deployment: its StepConfig (predict/deployment.step_config) and its scheduler."""
    config = step_config(deployment, inventory, hardware, batch=1, context=context, acceptance_rate=acceptance,
                         routing=routing)
    return server_for(inventory, hardware, config, scheduler_settings(deployment, hardware), num_blocks=num_blocks,
                      blocks_for=blocks_for, max_model_len=max_model_len)


def serve(server: Server, workload: Workload) -> LoadResult:
    requests = generate(workload)
    longest = max(r.prompt + r.output for r in requests)
    if longest > server.max_model_len:
        raise RooflineError(f"a request of {longest:,} tokens is longer than --max-model-len {server.max_model_len:,}: "
                            "vLLM rejects it")
    return simulate(server.pricer, server.settings, server.blocks(), requests,
                    speculative_tokens=server.speculative_tokens, acceptance=server.acceptance,
                    overhead_s=server.overhead_s, seed=workload.seed)


def saturation(server: Server, workload: Workload) -> float:
    """Requests per second the server completes with its queue never empty: a backlog of the workload's
    requests (at least a few times what runs at once) sent at once, completions counted between the first and
    last quarter of them (the start-up ramp and the drain left out)."""
    backlog = max(workload.requests, 4 * min(server.settings.max_num_seqs, 256), 64)
    result = serve(server, replace(workload, arrival="burst", requests=backlog, rate=None, trace=()))
    ends = sorted(arrival + e2e for arrival, _, e2e, _ in result.per_request)
    low, high = ends[len(ends) // 4], ends[(3 * len(ends)) // 4]
    counted = (3 * len(ends)) // 4 - len(ends) // 4
    return counted / (high - low) if high > low else result.request_throughput


@dataclass(frozen=True)
class Targets:
    ttft_p90_s: float | None = None  # --ttft-p90: 90% of first tokens within this
    min_tok_s: float | None = None  # --min-tok-s: 90% of requests decode at least this fast (1 / TPOT p90)

    @property
    def any(self) -> bool:
        return self.ttft_p90_s is not None or self.min_tok_s is not None

    def broken(self, result: LoadResult) -> list[str]:
        """What of the targets `result` misses, each as a phrase (empty: it keeps them)."""
        out = []
        if self.ttft_p90_s is not None and result.ttft.p90 > self.ttft_p90_s:
            out.append(f"TTFT p90 reaches {result.ttft.p90 * 1e3:,.0f} ms (the target {self.ttft_p90_s * 1e3:,.0f} ms)")
        if self.min_tok_s is not None and result.tpot is not None and 1 / result.tpot.p90 < self.min_tok_s:
            out.append(f"decode falls to {1 / result.tpot.p90:.2f} tok/s per request at p90 (the target "
                       f"{self.min_tok_s:g})")
        return out

    def to_json(self) -> dict:
        return {"ttft_p90_ms": None if self.ttft_p90_s is None else self.ttft_p90_s * 1e3, "min_tok_s": self.min_tok_s}


@dataclass
class RateAnswer:
    rate: float | None  # the highest rate keeping the targets (None: not even the lowest tried)
    low: float | None  # the same at the band's slow end (every step priced slower by the band)
    high: float | None  # and at its fast end
    at_rate: LoadResult | None
    breaks_first: list[str]  # what misses the targets just above the rate
    saturation: float
    sentence: str

    def to_json(self) -> dict:
        return {"rate": self.rate, "low": self.low, "high": self.high, "breaks_first": self.breaks_first,
                "saturation_rate": self.saturation, "sentence": self.sentence,
                "at_rate": self.at_rate.to_json() if self.at_rate else None}


def highest_rate(server: Server, workload: Workload, targets: Targets, band: float | None = None) -> RateAnswer:
    """The highest Poisson rate (the workload's lengths, requests and seed) whose run keeps the targets: found by
    bisection between nothing and the saturation rate (above it the queue grows without end), the same requests'
    lengths at every rate (one seed)."""
    if not targets.any:
        raise RooflineError("give a target: --ttft-p90 SECONDS and / or --min-tok-s TOK_S")
    sat = saturation(server, workload)

    def search(at: Server) -> tuple[float | None, LoadResult | None, list[str]]:
        top = saturation(at, workload) if at is not server else sat

        def run(rate: float) -> LoadResult:
            return serve(at, replace(workload, arrival="poisson", rate=rate, trace=()))
        low, high = 0.0, top
        best, best_result, broke = None, None, []
        first = run(top)
        if not targets.broken(first):
            return top, first, ["the queue: above this rate it grows without end (saturation)"]
        broke = targets.broken(first)
        for _ in range(RATE_SEARCH_STEPS):
            mid = (low + high) / 2
            result = run(mid)
            missed = targets.broken(result)
            if missed:
                high, broke = mid, missed
            else:
                low, best, best_result = mid, mid, result
        return best, best_result, broke

    rate, result, broke = search(server)
    low = high = None
    if band:
        low = search(_scaled(server, 1 + band))[0]
        high = search(_scaled(server, 1 / (1 + band)))[0]
    wants = " and ".join(x for x in (
        f"TTFT p90 <= {targets.ttft_p90_s * 1e3:,.0f} ms" if targets.ttft_p90_s is not None else "",
        f">= {targets.min_tok_s:g} tok/s per request (p90)" if targets.min_tok_s is not None else "") if x)
    span = f" (between {low:.2f} and {high:.2f} within the step model's {spread(band)})" \
        if rate is not None and low is not None and high is not None else ""
    if rate is None:
        sentence = (f"no rate keeps {wants}: even a trickle of requests misses them ("
                    f"{'; '.join(broke) or 'too slow an answer'})")
    elif rate >= sat:
        sentence = (f"up to {rate:.2f} requests/s keep {wants}{span}: the server's saturation rate, above which its "
                    "queue and every first token grow without end, comes first")
    else:
        sentence = (f"up to {rate:.2f} requests/s keep {wants}{span}; above it first {'; '.join(broke)}. Saturation: "
                    f"{sat:.2f} requests/s")
    return RateAnswer(rate, low, high, result, broke, sat, sentence)


def _scaled(server: Server, factor: float) -> Server:
    pricer = StepPricer.__new__(StepPricer)
    pricer.__dict__.update(server.pricer.__dict__)
    pricer.scale = server.pricer.scale * factor
    return replace(server, pricer=pricer)


@dataclass
class LoadAnswer:
    """A deployment under one or several loads: each rate's run, the saturation rate, the targets' answer."""

    workload: Workload
    runs: list = field(default_factory=list)  # [(label, rate or None, LoadResult)]
    saturation: float | None = None
    targets: Targets | None = None
    answer: RateAnswer | None = None
    first_token_alone_s: float = 0.0
    curve: list = field(default_factory=list)  # [(rate, LoadResult)] from a trickle to past saturation: the chart
    overhead: dict = field(default_factory=dict)
    scheduler: dict = field(default_factory=dict)
    band: float | None = None

    def to_json(self) -> dict:
        w = self.workload
        return {"schema": SCHEMA,
                "workload": {"arrival": w.arrival, "rate": w.rate, "requests": w.requests if w.arrival != "trace"
                             else len(w.trace), "prompt_len": w.prompt_len, "output_len": w.output_len,
                             "range_ratio": w.range_ratio, "shared_prefix": w.shared_prefix, "seed": w.seed},
                "scheduler": self.scheduler, "request_overhead": self.overhead,
                "first_token_alone_ms": self.first_token_alone_s * 1e3,
                "runs": [{"label": label, "rate": rate, **result.to_json()} for label, rate, result in self.runs],
                "curve": [{"rate": rate, **{key: getattr(r, key).to_json() if getattr(r, key) else None
                                            for key in ("ttft", "itl", "tpot", "e2e")},
                           "request_throughput": r.request_throughput} for rate, r in self.curve],
                "saturation_rate": self.saturation, "targets": self.targets.to_json() if self.targets else None,
                "answer": self.answer.to_json() if self.answer else None, "band": self.band}


def answer_load(server: Server, workload: Workload, *, rates: tuple[float, ...] = (), burst: int | None = None,
                targets: Targets | None = None, band: float | None = None) -> LoadAnswer:
    """Every run asked for (each rate, a burst, the workload's own trace), the saturation rate, and with targets
    the highest rate keeping them."""
    out = LoadAnswer(workload, targets=targets, band=band,
                     overhead={"ms": server.overhead_s * 1e3, "kind": server.overhead_kind,
                               "source": server.overhead_source},
                     scheduler=server.settings.to_json(),
                     first_token_alone_s=server.first_token_s(workload.prompt_len))
    if workload.arrival == "trace":
        out.runs.append((workload.label, None, serve(server, workload)))
    for rate in rates:
        out.runs.append((f"{rate:g} req/s", rate, serve(server, replace(workload, arrival="poisson", rate=rate))))
    if burst:
        out.runs.append((f"burst of {burst}", None, serve(server, replace(workload, arrival="burst",
                                                                          requests=burst, rate=None))))
    if workload.arrival != "trace":
        out.saturation = saturation(server, workload)
    if targets is not None and targets.any:
        out.answer = highest_rate(server, workload, targets, band)
        out.saturation = out.answer.saturation
    if out.saturation:  # latency against the rate, from a trickle to past saturation (the report's chart)
        sample = replace(workload, arrival="poisson", requests=min(workload.requests, CURVE_REQUESTS), trace=())
        out.curve = [(share * out.saturation, serve(server, replace(sample, rate=share * out.saturation)))
                     for share in CURVE_SHARES]
    return out


def load_json(server: Server, decode_band: dict | None, workload: Workload, rates: tuple[float, ...] = (),
              burst: int | None = None, targets: Targets | None = None, notes: list[str] | tuple = ()) -> dict:
    """The JSON of a deployment under a load, as capacity, preflight and the Python API attach it: the runs, the
    saturation rate and, with targets, the highest rate keeping them within the band the step model is sure of
    (the wider of the decode class's and the prompt rates' validated errors)."""
    band = max((e for e in ((decode_band or {}).get("error"), server.pricer._terms.rates.band) if e is not None),
               default=None)
    answer = answer_load(server, workload, rates=rates, burst=burst,
                         targets=targets if targets is not None and targets.any else None, band=band)
    return answer.to_json() | {"notes": list(notes)}


def workload_for(*, rates: tuple[float, ...], burst: int | None, trace, requests: int, range_ratio: float,
                 shared_prefix: float, seed: int, ttft_p90_s: float | None, min_tok_s: float | None, prompt_len: int,
                 output_len: int, targets_alone: bool = False):
    """(Workload, the rates to run, the burst, Targets, notes) of a load asked for (None where nothing asks for
    one): Poisson at the first rate, or a trace (its requests, whether they carry times, notes: live/traces.py) —
    replayed at its own times, or spaced at the first rate when it has none. `targets_alone`: --min-tok-s asks
    for a load by itself (plan's; capacity's --min-tok-s alone is its concurrency answer)."""
    if not (rates or burst or trace or ttft_p90_s is not None or (targets_alone and min_tok_s is not None)):
        return None
    notes: list[str] = []
    workload = Workload(arrival="poisson", rate=rates[0] if rates else 1.0, requests=requests, prompt_len=prompt_len,
                        output_len=output_len, range_ratio=range_ratio, shared_prefix=shared_prefix, seed=seed)
    if trace:
        requests_, timed, notes = trace
        notes = list(notes)
        if not timed:
            if not rates:
                raise RooflineError("the trace's requests carry no arrival times: give a request rate to space them")
            requests_ = [replace(r, arrival_s=i / rates[0]) for i, r in enumerate(requests_)]
            notes.append(f"the trace's {len(requests_)} requests at a constant {rates[0]:g} requests/s (it has no "
                         "times)")
            rates = rates[1:]
        workload = Workload(arrival="trace", trace=tuple(requests_), prompt_len=requests_[0].prompt,
                            output_len=requests_[0].output, seed=seed)
    return workload.validate(), rates, burst, Targets(ttft_p90_s, min_tok_s), notes


def run_workload(run) -> Workload:
    """A measured run's requests as the load model replays them: at their own start times where the file has them,
    else arriving as its tool sent them (a rate, a burst)."""
    if run.requests:
        return Workload(arrival="trace", trace=run.requests, prompt_len=run.prompt_len, output_len=run.output_len)
    return Workload(arrival=run.arrival, rate=run.rate, requests=run.num_prompts, prompt_len=run.prompt_len,
                    output_len=run.output_len)


def runs_server(inventory: Inventory, deployment: Deployment, hardware: Hardware, runs, *, context: int,
                acceptance: float, routing: str = "uniform") -> Server:
    """The server the measured runs (live/result_files.LoadRun) ran on, as the deployment says and capacity sizes
    it: --max-model-len, when the deployment does not give it, the longest request (or `context`)."""
    from .capacity import capacity
    from .deploy import capacity_request, deployed_inventory

    longest = max(max((r.prompt + r.output for r in run.requests), default=run.prompt_len + run.output_len)
                  for run in runs)
    if deployment.max_model_len is None:
        deployment = replace(deployment, max_model_len=max(longest, context))
    request = capacity_request(deployment, inventory, hardware, acceptance, levels=(1,),
                               prompt_len=runs[0].prompt_len, output_len=runs[0].output_len, routing=routing)
    return capacity(deployed_inventory(inventory, deployment), hardware, request).server


def compare_run(run, result: LoadResult) -> dict:
    """A measured run (live/result_files.LoadRun) beside the load model's run of the same requests: each metric's
    mean and percentiles, measured, predicted and their error."""
    metrics = {}
    for key in ("ttft", "itl", "tpot", "e2e"):
        ours = getattr(result, key)
        measured = run.measured.get(key) or {}
        metrics[key] = {q: {"measured_ms": measured.get(f"{q}_ms"),
                            "predicted_ms": getattr(ours, q) * 1e3 if ours else None,
                            "error": (getattr(ours, q) * 1e3 / measured[f"{q}_ms"] - 1)
                            if ours and measured.get(f"{q}_ms") else None}
                        for q in ("mean", "p50", "p90", "p99")}
    return {"label": run.label, "tool": run.tool, "arrival": run.arrival, "rate": run.rate,
            "requests": len(run.requests) or run.num_prompts, "prompt_len": run.prompt_len,
            "output_len": run.output_len, "metrics": metrics,
            "throughput": {"measured": run.throughput, "predicted": result.request_throughput}}


def prompt_steps(server: Server, prompt: int) -> int:
    return max(1, math.ceil(prompt / server.settings.max_num_batched_tokens))


def server_under_load(server: Server, metrics) -> dict | None:
    """What a running server's own histograms say of its latency (live/server_facts.Metrics: vLLM's
    time_to_first_token, request_queue_time, request_prefill_time, inter_token_latency since it started), beside
    what the load model prices for its mean request alone: where the first token's time goes (waiting in the
    queue, or the prompt steps: other requests' decodes and chunks sharing them), and the saturation rate at its
    mean lengths. None where the server has served nothing."""
    ttft, queue, prefill = metrics.mean("ttft"), metrics.mean("queue"), metrics.mean("prefill")
    prompt, output = metrics.mean("prompt_len"), metrics.mean("output_len")
    if ttft is None or not prompt or not output:
        return None
    alone = server.first_token_s(max(1, round(prompt)))
    sat = saturation(server, Workload(requests=64, prompt_len=max(1, round(prompt)), output_len=max(1, round(output))))
    findings = []
    if queue is not None and queue > 0.25 * ttft:
        findings.append(f"requests wait {queue * 1e3:,.0f} ms in vLLM's queue before their first step, of a "
                        f"{ttft * 1e3:,.0f} ms first token: the server admits them slower than they arrive (KV "
                        f"blocks or max_num_seqs full); at these lengths it completes at most {sat:.2f} requests/s")
    if prefill is not None and prefill > 1.5 * (alone - server.overhead_s):
        findings.append(f"a prompt's steps take {prefill * 1e3:,.0f} ms where one request alone takes "
                        f"{(alone - server.overhead_s) * 1e3:,.0f} ms: its chunks share steps with the other requests' "
                        "decodes and prompts (mixed steps); a smaller --max-num-batched-tokens trades a longer first "
                        "token for steadier decodes, a larger one the reverse")
    running, waiting = metrics.total("running"), metrics.total("waiting")
    return {"measured": {"ttft_mean_ms": ttft * 1e3, "queue_mean_ms": None if queue is None else queue * 1e3,
                         "prefill_mean_ms": None if prefill is None else prefill * 1e3,
                         "itl_mean_ms": None if metrics.mean("itl") is None else metrics.mean("itl") * 1e3,
                         "prompt_mean": prompt, "output_mean": output, "running": running, "waiting": waiting,
                         "preemptions": metrics.total("preemptions")},
            "predicted": {"first_token_alone_ms": alone * 1e3, "saturation_rate": sat,
                          "request_overhead_ms": server.overhead_s * 1e3},
            "findings": findings}

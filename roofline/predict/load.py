"""A server under load (pure, seeded): vLLM's scheduler (predict/scheduler.py) forms each step, the step model
(predict/step.py StepPricer) prices it, the clock moves by that price, and every request's first token, every
token after it and its end are recorded: TTFT, inter-token latency, time per output token and end-to-end
latency (mean and percentiles, as `vllm bench serve` reports them), throughput, the queue, preemptions.

The step is the only event (arrivals are read between steps): schedule -> price -> advance -> complete. A run
of steps that only decode, with nothing to admit and no arrival due, is advanced in one stride priced at its
middle context (its tokens, latencies and KV blocks counted step by step in closed form): a long decode costs
a handful of prices instead of one per token. With speculative decoding every step is drawn on its own: each
draft token is accepted with the per-token chance, stopping at the first rejection (seeded).

What a request spends on the server's host outside the steps (HTTP, tokenizing, detokenizing and streaming:
predict/prefill.py request_overhead_s) is added to its first token and its end, not to the scheduler's clock.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from roofline.errors import RooflineError

from .scheduler import Blocks, Live, SchedulerState, decode_context
from .scheduler_config import SchedulerSettings
from .step import StepPricer
from .workload import Request

MAX_STRIDE = 256  # decode steps advanced in one stride at most (the context's growth priced at its middle)
MAX_STEPS = 20_000_000  # a run that needs more steps than this is not a load the model can answer
PERCENTILES = (50, 90, 99)


@dataclass
class Stat:
    """One latency over the run: mean and percentiles, in seconds (weighted samples: a stride's tokens)."""

    mean: float
    p50: float
    p90: float
    p99: float
    count: int

    def to_json(self) -> dict:
        return {"mean_ms": self.mean * 1e3, "p50_ms": self.p50 * 1e3, "p90_ms": self.p90 * 1e3,
                "p99_ms": self.p99 * 1e3, "count": self.count}


def stat(values, weights=None) -> Stat | None:
    """Mean and percentiles as vLLM's bench computes them (np.percentile: linear interpolation between the
    closest ranks); a weighted sample counts as that many equal samples (a stride's tokens)."""
    import numpy as np

    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return None
    if weights is None:
        p50, p90, p99 = np.percentile(values, PERCENTILES)
        return Stat(float(values.mean()), float(p50), float(p90), float(p99), int(values.size))
    weights = np.asarray(weights, dtype=float)
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    upto = np.cumsum(weights)  # samples up to and including each value
    total = float(upto[-1])

    def at(rank: float) -> float:  # the value of the rank-th sample (0-based) of the expanded sorted samples
        return float(values[min(int(np.searchsorted(upto, rank, side="right")), values.size - 1)])

    out = []
    for q in PERCENTILES:
        rank = q / 100 * (total - 1)
        low, high = math.floor(rank), math.ceil(rank)
        out.append(at(low) + (at(high) - at(low)) * (rank - low))
    return Stat(float((values * weights).sum() / total), out[0], out[1], out[2], int(total))


@dataclass
class LoadResult:
    requests: int
    completed: int
    duration_s: float  # first arrival to last completion
    ttft: Stat | None
    itl: Stat | None
    tpot: Stat | None
    e2e: Stat | None
    request_throughput: float  # completed requests per second
    output_throughput: float  # generated tokens per second
    mean_waiting: float  # requests queued, averaged over the run's time
    max_waiting: int
    mean_running: float
    preemptions: int
    steps: int
    prompt_steps: int  # steps that computed a prompt's tokens (alone or beside decodes)
    priced: int  # the step model's prices taken (strides and single steps)
    overhead_s: float
    per_request: list = field(default_factory=list)  # (arrival, ttft, e2e, tpot) of each, seconds

    def to_json(self, per_request: bool = False) -> dict:
        out = {key: (value.to_json() if isinstance(value, Stat) else value) for key, value in self.__dict__.items()
               if key != "per_request"}
        if per_request:
            out["per_request"] = [{"arrival_s": a, "ttft_ms": t * 1e3, "e2e_ms": e * 1e3,
                                   "tpot_ms": None if p is None else p * 1e3} for a, t, e, p in self.per_request]
        return out


def simulate(pricer: StepPricer, settings: SchedulerSettings, blocks: Blocks, requests: list[Request], *,
             speculative_tokens: int = 0, acceptance: float = 0.7, overhead_s: float = 0.0,
             seed: int = 0) -> LoadResult:
    """Serve `requests` (in arrival order) from an empty server until the last one ends."""
    import numpy as np

    if not requests:
        raise RooflineError("no requests to serve")
    for request in requests:
        if blocks.need(request.prompt + request.output + speculative_tokens) > blocks.total:
            raise RooflineError(f"a request of {request.prompt + request.output:,} tokens needs more KV blocks than the "
                                f"cache holds ({blocks.total:,}): vLLM rejects it")
    rng = np.random.default_rng(seed)
    state = SchedulerState(settings=settings, blocks=blocks, speculative_tokens=speculative_tokens)
    lives = [Live(i, r) for i, r in enumerate(requests)]
    arrivals = [r.arrival_s for r in requests]
    next_arrival, now = 0, requests[0].arrival_s
    itl_values, itl_weights = [], []
    steps = prompt_steps = priced = 0
    waiting_area = running_area = 0.0
    max_waiting = 0
    finished = 0
    # with async scheduling vLLM forms step n + 1 while step n runs: a request that arrives during step n is
    # first seen when step n + 2 is formed, at the end of step n (the scheduler's view lags one step)
    lag = 0.0
    while finished < len(lives):
        seen = now - (lag if settings.async_scheduling else 0.0)
        while next_arrival < len(lives) and arrivals[next_arrival] <= seen:
            state.waiting.append(lives[next_arrival])
            next_arrival += 1
        if not state.running and not state.waiting:
            if next_arrival < len(lives) and arrivals[next_arrival] <= now:
                lag = 0.0  # an idle engine forms a step as soon as a request is there
                continue
            now, lag = arrivals[next_arrival], 0.0
            continue
        plan = state.form_step()
        if plan.empty:  # nothing fits: the head of the queue waits for blocks no running request will free
            raise RooflineError("the scheduler is stuck: a waiting request can never be admitted (its prompt needs "
                                "more KV blocks than are ever free)")
        chunks = state.chunk_work(plan)
        stride = 1
        if not chunks and not speculative_tokens:
            stride = _stride(state, plan, now, arrivals, next_arrival, pricer)
        context = decode_context(plan) + (stride - 1) / 2
        dt = pricer.seconds(len(plan.decodes), context, chunks)
        priced += 1
        if dt <= 0:
            raise RooflineError("the step model priced a step at no time")
        waiting_area += len(state.waiting) * dt * stride
        running_area += len(state.running) * dt * stride
        max_waiting = max(max_waiting, len(state.waiting))
        end = now + dt * stride
        steps += stride
        if chunks:
            prompt_steps += 1
        if steps > MAX_STEPS:
            raise RooflineError(f"more than {MAX_STEPS:,} steps: the load never drains (the server cannot keep up "
                                "with it, or a request never ends)")
        # prompts: the chunk's tokens computed; a prompt finished samples its first token at the step's end
        for live, take in plan.chunks:
            live.computed += take
            if not live.prefilling and not live.generated:
                live.generated = 1
                live.first_token_s = live.last_token_s = end
                if live.request.shared_prefix:
                    group = live.request.prefix_group
                    state.cached_prefixes[group] = max(state.cached_prefixes.get(group, 0), live.request.shared_prefix)
        # decodes: 1 token a step (a stride: `stride` of them), or 1 + the accepted drafts. Every decode's
        # inter-token latency this step is dt: one sample weighted by their tokens (a speculative step: by them)
        ended = []
        if speculative_tokens:
            for live in plan.decodes:
                gained = min(1 + _accepted(rng, acceptance, speculative_tokens), live.request.output - live.generated)
                live.computed += gained
                live.generated += gained
                state._grow(live, live.computed)
                live.last_token_s = end
                if live.generated >= live.request.output:
                    ended.append(live)
            weight = len(plan.decodes)
        else:
            weight = 0
            for live in plan.decodes:
                left = live.request.output - live.generated
                gained = stride if stride < left else left
                live.computed += gained
                live.generated += gained
                weight += gained
                if stride > 1:  # a stride's blocks were checked free (_stride): take them
                    state._grow(live, live.computed)
                if gained == left:  # its last token: when it ends (no later token of it reads the time)
                    live.last_token_s = now + dt * gained
                    ended.append(live)
        if weight:
            itl_values.append(dt)
            itl_weights.append(weight)
        now, lag = end, dt
        ended += [live for live, _ in plan.chunks if live.generated and live.done]
        for live in ended:
            live.finish_s = live.last_token_s
            live.admitted = False
            state.release(live)
            finished += 1
        if ended:
            state.running = [live for live in state.running if live.admitted]
    start = requests[0].arrival_s
    duration = max(l.finish_s for l in lives) - start
    ttfts = [l.first_token_s - l.request.arrival_s + overhead_s for l in lives]
    e2es = [l.finish_s - l.request.arrival_s + overhead_s for l in lives]
    tpots = [(l.finish_s - l.first_token_s) / (l.request.output - 1) if l.request.output > 1 else None for l in lives]
    output_tokens = sum(l.request.output for l in lives)
    return LoadResult(
        requests=len(lives), completed=finished, duration_s=duration, ttft=stat(ttfts),
        itl=stat(itl_values, itl_weights), tpot=stat([t for t in tpots if t is not None]), e2e=stat(e2es),
        request_throughput=finished / duration if duration > 0 else math.inf,
        output_throughput=output_tokens / duration if duration > 0 else math.inf,
        mean_waiting=waiting_area / duration if duration > 0 else 0.0, max_waiting=max_waiting,
        mean_running=running_area / duration if duration > 0 else 0.0, preemptions=state.preemptions,
        steps=steps, prompt_steps=prompt_steps, priced=priced, overhead_s=overhead_s,
        per_request=[(l.request.arrival_s, t, e, p) for l, t, e, p in zip(lives, ttfts, e2es, tpots)])


def _accepted(rng, acceptance: float, drafts: int) -> int:
    """Draft tokens one verify step keeps: each accepted with the per-token chance, stopping at the first
    rejection."""
    kept = 0
    while kept < drafts and rng.random() < acceptance:
        kept += 1
    return kept


def _stride(state: SchedulerState, plan, now: float, arrivals: list[float], next_arrival: int,
            pricer: StepPricer) -> int:
    """How many identical decode steps can run before anything but the contexts changes: no request ends, no
    arrival could be admitted, the KV blocks they grow into are free."""
    stride = min(min(live.request.output - live.generated for live in plan.decodes), MAX_STRIDE)
    if len(plan.decodes) != len(state.running):
        return 1
    admissible = not state.waiting and len(state.running) < state.settings.max_num_active_seqs
    if state.waiting and len(state.running) < state.settings.max_num_active_seqs:
        return 1  # something waits for blocks a step may free: step by step
    if admissible and next_arrival < len(arrivals):
        dt = pricer.seconds(len(plan.decodes), decode_context(plan))
        until = max(1, math.ceil((arrivals[next_arrival] - now) / dt))
        stride = min(stride, until)
    while stride > 1:
        need = sum(max(0, state.blocks.need(live.computed + stride) - live.blocks) for live in plan.decodes)
        if need <= state.blocks.free:
            break
        stride //= 2
    return max(1, stride)

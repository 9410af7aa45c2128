"""vLLM V1's step formation as policy (pure): which requests a step runs and how many tokens each, the KV
blocks they take, admission, preemption. It changes only the queue and the KV state; time, events and metrics
are the load model's (predict/load.py), the price of a step the step model's (predict/step.py).

Mirrors vllm/v1/core/sched/scheduler.py Scheduler.schedule (vLLM 0.32; the same in 0.26 where it matters here):

- one token budget per step (max_num_batched_tokens): running requests first, in admission order, each taking
  min(what it still needs, the budget left): a decode 1 + its draft tokens, a prompt its next chunk (capped by
  long_prefill_token_threshold when more than one request is eligible);
- a running request whose next tokens do not fit the free KV blocks preempts the newest running request (its
  blocks freed, its computed tokens reset: it recomputes later), then retries; if it is the newest, it waits;
- only if this step preempted nobody, waiting requests are admitted first come first served while fewer than
  max_num_active_seqs run and budget is left: a prefix-cache hit first (whole blocks, at most all but one
  prompt token), then blocks for its whole uncached prompt must be free (scheduler_reserve_full_isl) or
  admission stops there (head-of-line); without chunked prefill a prompt that does not fit the budget left waits;
- the first token is sampled in the step that finishes the prompt.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from .scheduler_config import SchedulerSettings
from .step import Chunk
from .workload import Request


@dataclass(slots=True)
class Live:
    """A request inside the server (slots: the load model touches every running request every step)."""

    index: int
    request: Request
    computed: int = 0  # tokens whose KV is computed (prompt, then prompt + generated)
    generated: int = 0  # output tokens produced
    blocks: int = 0  # KV blocks it holds
    admitted: bool = False
    preemptions: int = 0
    cached: int = 0  # prompt tokens a prefix-cache hit skipped
    covered: int = 0  # the most tokens its blocks hold (Blocks.holds): below it a step needs no block check
    first_token_s: float | None = None
    last_token_s: float | None = None
    finish_s: float | None = None

    @property
    def target(self) -> int:
        """Its tokens so far: the prompt and what it generated."""
        return self.request.prompt + self.generated

    @property
    def prefill_target(self) -> int:
        """Tokens computed as a prompt before it decodes: the prompt; after a preemption its tokens so far but the
        last, which the next decode step computes (vLLM recomputes them in chunks and samples at the end: the
        same tokens)."""
        return self.target - (1 if self.generated else 0)

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prefill_target

    @property
    def done(self) -> bool:
        return self.generated >= self.request.output


@dataclass
class Blocks:
    """The KV cache's blocks: how many a request of n tokens holds (the KV layout's own count:
    predict/kv_capacity.py KVCapacity.blocks_for), and how many are free."""

    total: int
    blocks_for: object  # tokens -> blocks
    free: int = 0
    _memo: dict = field(default_factory=dict)

    def __post_init__(self):
        self.free = self.total

    _holds: dict = field(default_factory=dict)

    def need(self, tokens: int) -> int:
        found = self._memo.get(tokens)
        if found is None:
            found = self._memo[tokens] = int(self.blocks_for(tokens))
        return found

    def holds(self, blocks: int) -> int:
        """The most tokens `blocks` blocks hold (blocks_for grows with the tokens)."""
        found = self._holds.get(blocks)
        if found is None:
            low, high = 0, 1
            while self.need(high) <= blocks and high < 1 << 40:
                low, high = high, high * 2
            while high - low > 1:  # need(low) <= blocks < need(high)
                mid = (low + high) // 2
                low, high = (mid, high) if self.need(mid) <= blocks else (low, mid)
            found = self._holds[blocks] = low
        return found


@dataclass
class StepPlan:
    decodes: list  # [Live] decoding this step
    chunks: list  # [(Live, tokens)] computing prompt tokens this step
    preempted: list  # [Live] preempted in forming it
    context_sum: int = 0  # KV tokens of the decoding sequences, summed

    @property
    def empty(self) -> bool:
        return not self.decodes and not self.chunks


@dataclass
class SchedulerState:
    settings: SchedulerSettings
    blocks: Blocks
    speculative_tokens: int = 0
    waiting: deque = field(default_factory=deque)  # [Live], FCFS (a preempted request goes back to the front)
    running: list = field(default_factory=list)  # [Live], in admission order
    cached_prefixes: dict = field(default_factory=dict)  # prefix group -> tokens of its prefix the cache holds
    preemptions: int = 0

    def _grow(self, live: Live, tokens: int) -> bool:
        """Take the blocks `live` needs to hold `tokens` computed tokens (and its drafts' lookahead)."""
        need = self.blocks.need(tokens + self.speculative_tokens) - live.blocks
        if need <= 0:
            return True
        if need > self.blocks.free:
            return False
        self.blocks.free -= need
        live.blocks += need
        live.covered = self.blocks.holds(live.blocks)
        return True

    def release(self, live: Live) -> None:
        self.blocks.free += live.blocks
        live.blocks = live.covered = 0

    def _preempt(self, victim: Live) -> None:
        self.running.remove(victim)
        self.release(victim)
        victim.computed, victim.admitted = 0, False
        victim.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(victim)

    def form_step(self) -> StepPlan:
        s = self.settings
        budget = s.max_num_batched_tokens
        decodes, chunks, preempted = [], [], []
        threshold = s.long_prefill_token_threshold
        spec = self.speculative_tokens
        context_sum = 0
        for live in list(self.running):
            if budget <= 0:
                break
            if not live.admitted:  # preempted by an earlier one of this loop
                continue
            # Live.prefill_target / prefilling, inlined: this loop runs over every running request every step
            prefill_target = live.request.prompt + live.generated - (1 if live.generated else 0)
            prefilling = live.computed < prefill_target
            if prefilling:
                take = min(prefill_target - live.computed, budget)
                if threshold and len(self.running) + len(self.waiting) > 1:
                    take = min(take, threshold)
            else:
                take = 1 + spec if 1 + spec <= budget else budget
            if live.computed + take + spec > live.covered:  # the blocks it holds do not cover the step
                while not self._grow(live, live.computed + take):
                    victim = self.running[-1]
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim is live:
                        break
                if not live.admitted:
                    continue
            budget -= take
            if prefilling:
                chunks.append((live, take))
            else:
                decodes.append(live)
                context_sum += live.computed
        if not preempted:
            while self.waiting and budget > 0 and len(self.running) < s.max_num_active_seqs:
                live = self.waiting[0]
                request = live.request
                hit = 0
                if s.prefix_caching and live.computed == 0:
                    held = self.cached_prefixes.get(request.prefix_group, 0)
                    shared = min(held, request.shared_prefix, live.prefill_target - 1)
                    hit = shared // s.block_size * s.block_size
                remaining = live.prefill_target - hit
                take = min(remaining, budget)
                if threshold:
                    take = min(take, threshold)
                if not s.chunked_prefill and remaining > budget:
                    break
                # the whole uncached prompt must fit (scheduler_reserve_full_isl), not only its first chunk
                if self.blocks.need(live.target + self.speculative_tokens) - live.blocks > self.blocks.free:
                    break
                self.waiting.popleft()
                live.computed, live.cached, live.admitted = hit, hit, True
                self._grow(live, live.target)
                self.running.append(live)
                budget -= take
                chunks.append((live, take))
        return StepPlan(decodes, chunks, preempted, context_sum)

    def chunk_work(self, plan: StepPlan) -> tuple[Chunk, ...]:
        return tuple(Chunk(take, live.computed, not live.generated and live.computed + take >= live.prefill_target)
                     for live, take in plan.chunks)


def decode_context(plan: StepPlan) -> float:
    """The mean KV tokens of the step's decoding sequences (KV read and attention are linear in it)."""
    if not plan.decodes:
        return 0.0
    return plan.context_sum / len(plan.decodes)


def blocks_per(tokens: int, block_size: int) -> int:
    return math.ceil(tokens / block_size)

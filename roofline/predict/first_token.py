"""The first token of one request alone: its prompt in the chunks vLLM's scheduler cuts it into (the step budget,
--long-prefill-token-threshold), each chunk a step of the step model (predict/step.StepPricer: the chunk's GEMMs,
attention over the prompt so far, its KV written; the first token sampled in the last), plus the host's time per
request (predict/prefill.request_overhead_s). What every TTFT figure roofline prints comes from: audit's line,
capacity's and preflight's first token, the load model's requests (advise/load.py)."""
from __future__ import annotations

from dataclasses import dataclass

from .scheduler_config import SchedulerSettings
from .step import Chunk, StepPricer


def prompt_chunks(prompt: int, settings: SchedulerSettings) -> list[Chunk]:
    """A prompt alone, as vLLM schedules it: chunks of the step budget (capped by the long-prefill threshold)."""
    budget = settings.max_num_batched_tokens
    if settings.long_prefill_token_threshold:
        budget = min(budget, settings.long_prefill_token_threshold)
    out, done = [], 0
    while done < prompt:
        take = min(budget, prompt - done)
        out.append(Chunk(take, done, done + take >= prompt))
        done += take
    return out


@dataclass(frozen=True)
class FirstToken:
    prompt: int
    overhead_s: float
    overhead_kind: str
    overhead_source: str
    steps_s: tuple[float, ...]  # each prompt step's seconds
    chunk_tokens: int  # the step budget the prompt was cut by
    rates: dict  # the prompt rates' row: where, kind, source, band (predict/prefill.py)

    @property
    def seconds(self) -> float:
        return self.overhead_s + sum(self.steps_s)

    def to_json(self) -> dict:
        return {"prompt_len": self.prompt, "ttft_ms": self.seconds * 1e3, "request_overhead_ms": self.overhead_s * 1e3,
                "prompt_steps_ms": [s * 1e3 for s in self.steps_s], "chunk_tokens": self.chunk_tokens,
                "rates": dict(self.rates), "overhead": {"kind": self.overhead_kind, "source": self.overhead_source}}


def first_token(pricer: StepPricer, settings: SchedulerSettings, prompt: int, overhead: tuple[float, str, str]) \
        -> FirstToken:
    """`overhead`: predict/prefill.request_overhead_s's (seconds, kind, source) for the hardware."""
    rates = pricer._terms.rates
    steps = tuple(pricer.seconds(0, 0, (chunk,)) for chunk in prompt_chunks(prompt, settings))
    return FirstToken(prompt, overhead[0], overhead[1], overhead[2], steps, settings.max_num_batched_tokens,
                      {"where": rates.where, "kind": rates.kind, "source": rates.source, "band": rates.band})

"""The requests a server is asked to serve (pure: a trace's records come in already read and checked,
live/traces.py): an arrival process (Poisson at a rate, a constant rate, a burst of N at once, or a trace's
own times), prompt and output lengths (fixed, or uniform over vLLM's --random-range-ratio), and a shared
prefix (the share of every prompt that is the same system prompt, which vLLM's prefix cache holds once).

Seeded: the same Workload gives the same requests (numpy's Generator: its Poisson and uniform draws are the
maintained, tested implementations, and one seeded stream makes a run reproducible bit for bit)."""
from __future__ import annotations

from dataclasses import dataclass

from roofline.errors import RooflineError

ARRIVALS = ("poisson", "constant", "burst", "trace")


@dataclass(frozen=True)
class Request:
    """One request: when it arrives, its prompt and output tokens, and how many of its prompt's first tokens it
    shares with the requests before it (a cached prefix, when prefix caching is on)."""

    arrival_s: float
    prompt: int
    output: int
    shared_prefix: int = 0
    prefix_group: int = 0  # requests of one group share their prefix (a trace's hash ids, or one system prompt)


@dataclass(frozen=True)
class Workload:
    arrival: str = "poisson"  # poisson | constant | burst | trace
    rate: float | None = None  # requests per second (poisson, constant)
    requests: int = 200  # how many requests arrive (a burst: all at once)
    prompt_len: int = 1024
    output_len: int = 256
    range_ratio: float = 0.0  # vLLM's --random-range-ratio: lengths uniform in [L(1 - r), L(1 + r)]
    shared_prefix: float = 0.0  # share of every prompt that is one prefix shared by all requests
    seed: int = 0
    trace: tuple[Request, ...] = ()  # arrival "trace": the requests as recorded

    def validate(self) -> "Workload":
        if self.arrival not in ARRIVALS:
            raise RooflineError(f"arrival {self.arrival!r}: one of {', '.join(ARRIVALS)}")
        if self.arrival in ("poisson", "constant") and not (self.rate and self.rate > 0):
            raise RooflineError(f"{self.arrival} arrivals need a request rate above 0")
        if self.arrival == "trace" and not self.trace:
            raise RooflineError("a trace with no requests")
        if self.arrival != "trace" and not 1 <= self.requests <= 1_000_000:
            raise RooflineError(f"{self.requests} requests: from 1 to 1,000,000")
        if not 0 <= self.range_ratio < 1:
            raise RooflineError(f"range ratio {self.range_ratio:g}: from 0 (fixed lengths) to below 1")
        if not 0 <= self.shared_prefix < 1:
            raise RooflineError(f"shared prefix {self.shared_prefix:g}: a share from 0 to below 1")
        if self.prompt_len < 1 or self.output_len < 1:
            raise RooflineError("prompt and output lengths are at least 1 token")
        return self

    @property
    def label(self) -> str:
        if self.arrival == "trace":
            return f"trace of {len(self.trace):,} requests"
        if self.arrival == "burst":
            return f"a burst of {self.requests:,} requests at once"
        return f"{self.rate:g} requests/s ({self.arrival}), {self.requests:,} requests"


def generate(workload: Workload) -> list[Request]:
    """The workload's requests, in arrival order."""
    import numpy as np

    workload = workload.validate()
    if workload.arrival == "trace":
        return sorted(workload.trace, key=lambda r: r.arrival_s)
    rng = np.random.default_rng(workload.seed)
    n = workload.requests
    if workload.arrival == "burst":
        arrivals = np.zeros(n)
    elif workload.arrival == "constant":
        arrivals = np.arange(n) / workload.rate
    else:  # Poisson: exponential gaps (vllm bench serve's default, burstiness 1), the first request at time 0
        gaps = rng.exponential(1.0 / workload.rate, n)
        gaps[0] = 0.0
        arrivals = np.cumsum(gaps)
    prompts = _lengths(rng, workload.prompt_len, workload.range_ratio, n)
    outputs = _lengths(rng, workload.output_len, workload.range_ratio, n)
    shared = [int(workload.shared_prefix * p) for p in prompts]
    return [Request(float(a), int(p), int(o), s) for a, p, o, s in zip(arrivals, prompts, outputs, shared)]


def _lengths(rng, mean: int, ratio: float, n: int):
    """vLLM's random dataset: uniform integers in [floor(L(1 - r)), ceil(L(1 + r))], at least 1."""
    import numpy as np

    if ratio == 0:
        return np.full(n, mean)
    low, high = max(1, int(mean * (1 - ratio))), max(1, int(np.ceil(mean * (1 + ratio))))
    return rng.integers(low, high + 1, n)

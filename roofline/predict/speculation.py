"""Speculative decoding's acceptance, in vLLM's terms and in the step model's.

vLLM reports (and users quote) the acceptance rate as accepted ÷ drafted tokens, and the mean
acceptance length as 1 + accepted tokens per draft. The traffic model (roofline.predict.traffic)
takes the chance `a` that each successive draft token is accepted, drafting stopping at the first
rejection: a draft of n tokens then accepts a + a^2 + ... + a^n tokens on average. This module is
the one conversion between the two, and the one break-even search behind every command that says
at which acceptance speculation stops paying.
"""
from __future__ import annotations

from typing import Callable

from roofline.errors import RooflineError


def accepted_tokens(per_token: float, draft_tokens: int) -> float:
    """a + a^2 + ... + a^n, the mean accepted tokens per draft, in closed form (n may be large)."""
    if per_token >= 1.0:
        return float(draft_tokens)
    return per_token * (1.0 - per_token ** draft_tokens) / (1.0 - per_token)


def per_token_from_accepted(accepted_per_draft: float, draft_tokens: int) -> float:
    """Mean accepted tokens per draft -> the per-token chance a with a + ... + a^n equal to it."""
    target = min(max(accepted_per_draft, 0.0), float(draft_tokens))
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if accepted_tokens(mid, draft_tokens) < target else (low, mid)
    return low


def per_token_acceptance(*, draft_tokens: int, acceptance_rate: float | None = None,
                         mean_acceptance_length: float | None = None) -> float:
    """vLLM's acceptance rate (accepted ÷ drafted) or mean acceptance length (1 + accepted per draft)
    -> the per-token chance the step model takes. One of the two is given."""
    if draft_tokens < 1:
        raise RooflineError("speculative decoding needs at least 1 draft token")
    if (acceptance_rate is None) == (mean_acceptance_length is None):
        raise RooflineError("give the acceptance rate or the mean acceptance length, not both")
    if acceptance_rate is not None:
        if not 0.0 <= acceptance_rate <= 1.0:
            raise RooflineError(f"acceptance rate {acceptance_rate:g} is not between 0 and 1 (accepted ÷ drafted)")
        return per_token_from_accepted(acceptance_rate * draft_tokens, draft_tokens)
    if not 1.0 <= mean_acceptance_length <= 1.0 + draft_tokens:
        raise RooflineError(f"mean acceptance length {mean_acceptance_length:g} is not between 1 and "
                            f"{1 + draft_tokens} (1 + accepted tokens per draft of {draft_tokens})")
    return per_token_from_accepted(mean_acceptance_length - 1.0, draft_tokens)


def vllm_acceptance_rate(per_token: float, draft_tokens: int) -> float:
    """Per-token chance -> vLLM's acceptance rate (accepted ÷ drafted)."""
    if draft_tokens <= 0:
        return 0.0
    return accepted_tokens(per_token, draft_tokens) / draft_tokens


def break_even(tok_s_at: Callable[[float], float], plain_tok_s: float, draft_tokens: int | None = None) -> float | None:
    """The per-token acceptance at which speculation neither gains nor loses against `plain_tok_s`
    (`tok_s_at(a)`: tok/s with speculation at per-token chance a); 0.0 when it gains at any
    acceptance (a draft that reads no weights), None when it never pays.

    With `draft_tokens` given, a step whose time does not move with the acceptance (the step model's: the
    verify and the drafts are the same work whatever is accepted) is solved on tok/s = tok/s(0) x (1 + a + ...
    + a^n), checked at three acceptances first; otherwise, or when the check fails, by pricing each probe."""
    rate = tok_s_at
    if draft_tokens:
        at = {a: tok_s_at(a) for a in (0.0, 0.5, 0.999)}

        def proportional(a: float) -> float:
            return at[0.0] * (1.0 + accepted_tokens(a, draft_tokens))
        if all(abs(proportional(a) - value) <= 1e-9 * max(abs(value), 1.0) for a, value in at.items()):
            rate = proportional

    def gain(a: float) -> float:  # the probe, on the closed form when it holds
        return rate(a) - plain_tok_s
    if gain(0.0) >= 0:
        return 0.0
    if gain(0.999) < 0:
        return None
    low, high = 0.0, 0.999
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if gain(mid) < 0 else (low, mid)
    return high

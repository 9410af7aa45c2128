"""One verdict for a measured decode speed: `validate` (against an audit) and `doctor` (against a
running server's own configuration) judge a measurement with this one function and the thresholds
of roofline/data/doctor.toml [verdict]. "Near expected" is the validated error band of the class
(roofline.predict.bands), the same source plan's ties use, not a constant of its own."""
from __future__ import annotations

from dataclasses import dataclass

from roofline.data import load_table

VERDICTS = ("above_ceiling", "above_expected", "near_expected", "below_expected", "far_below")


def _table() -> dict:
    return load_table("doctor")["verdict"]


@dataclass(frozen=True)
class Verdict:
    id: str  # one of VERDICTS
    text: str
    near_within: float  # the share either side of expected still "near expected" (the class's band)

    @property
    def engine_gap(self) -> bool:
        """Measured short of what the configuration allows by more than the model's own error."""
        return self.id in ("below_expected", "far_below")


def verdict_of(measured: float, ceiling: float, expected: float, band_error: float | None = None) -> Verdict:
    """`measured` tok/s against the `ceiling` (bytes per token at the bandwidth) and the `expected`
    tok/s of the same configuration; `band_error`: the class's validated error (a fraction)."""
    table = _table()
    near = band_error if band_error is not None else table["near_without_band"]
    if measured > ceiling * table["above_ceiling_tolerance"]:
        key = "above_ceiling"
    elif measured < expected * table["far_below"]:
        key = "far_below"  # whatever the band: a band wider than this (an eager class off its host) judges nothing
    elif measured > expected * (1 + near):
        key = "above_expected"  # the band holds on both sides: faster than it allows is the model's error too
    elif measured >= expected * (1 - near):
        key = "near_expected"
    else:
        key = "below_expected"
    return Verdict(key, table["text"][key], near)


def impossible(measured: float, ceiling: float, drafts: int = 0) -> str | None:
    """Why a measured decode rate (tok/s of one stream) cannot be a decode speed of this configuration, one
    line; None when it can. Above the ceiling by more than the table's `impossible_above` even with every draft
    token accepted: no engine reads the weights fewer times than that. The one check validate, doctor and
    calibrate --from-results make of a measurement before they use it."""
    limit = ceiling * (1 + drafts) * _table()["impossible_above"]
    if measured > 0 and measured <= limit:
        return None
    if measured <= 0:
        return f"measured {measured:g} tok/s is not a decode speed"
    all_drafts = f" with {drafts} draft tokens all accepted" if drafts else ""
    return (f"measured {measured:g} tok/s is {measured / ceiling:.1f}x the ceiling of {ceiling:.1f} tok/s{all_drafts}: "
            "no engine decodes that fast on this device; a figure of several streams is their sum")


def min_gain(predicted_tok_s: float) -> float:
    """The smallest gain (tok/s) a configuration change must buy to be offered as a fix."""
    return _table()["min_gain_share"] * predicted_tok_s

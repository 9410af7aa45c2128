"""Near-ties: candidates whose predicted tok/s lie within the model's own uncertainty are a tie,
not a ranking. A tie is broken by the evidence a user would weigh, in this order, and the plan
says which evidence decided:

1. measured on this hardware: a published measurement (roofline/data/measurements.toml) or the
   user's own validation record, of this format (the same base model first);
2. a published checkpoint exists (measured ones are published) vs quantize-it-yourself;
3. no calibration data needed to make it (recipes.toml [producer.*] needs_calibration);
then the prediction itself. Pure: the evidence is handed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from roofline.data import load_table
from roofline.model.formats import format_label
from roofline.model.naming import base_model_name


@dataclass
class Evidence:
    """What is known beyond the prediction, for one base model on one device."""

    base: str  # base model name, e.g. "Qwen3-8B"
    hardware: str  # hardware key
    measured: list[dict] = field(default_factory=list)  # on this hardware: format, tok_s, checkpoint, base, source
    published_rows: list[dict] = field(default_factory=list)  # measured anywhere: the checkpoint exists

    @classmethod
    def gather(cls, base: str, hardware: str, record_rows: list[dict] | None = None,
               published: list[dict] | None = None) -> "Evidence":
        """`published`: checkpoints known to exist beyond the measurements (the hub's listing)."""
        table = [dict(r) for r in load_table("measurements").get("measured", ())]
        rows = [r for r in table if r["hardware"] == hardware and r.get("graphs", True)]
        for row in record_rows or ():
            fmt, tok_s = row.get("weight_format"), row.get("measured_tok_s")
            # a measurement above the ceiling is a finding, not evidence (older records may hold one)
            if row.get("hardware") == hardware and fmt and isinstance(tok_s, (int, float)) \
                    and row.get("verdict") != "above_ceiling":
                rows.append({"format": fmt, "tok_s": float(tok_s), "checkpoint": row.get("model", "?"),
                             "base": base_model_name(str(row.get("model", ""))),
                             "source": f"your validation record ({row.get('recorded_at', 'undated')})"})
        return cls(base, hardware, rows, table + list(published or ()))

    def measurement(self, fmt: str) -> dict | None:
        """The best measurement of `fmt`: of this base model if any, else of any model."""
        rows = [r for r in self.measured if r["format"] == fmt]
        same = [r for r in rows if r.get("base", "").lower() == self.base.lower()]
        pool = same or rows
        return max(pool, key=lambda r: r["tok_s"]) if pool else None

    def published(self, fmt: str) -> str | None:
        row = next((r for r in self.published_rows if r["format"] == fmt and r.get("base", "").lower() == self.base.lower()
                    and "/" in r.get("checkpoint", "")), None)
        return row["checkpoint"] if row else None


def tie_marks(groups) -> dict[int, str]:
    """Each tie group (in the order given, repeats and 0 ignored) as its own mark, =a, =b, ..., so two
    ties in a row never read as one: the terminal and the report mark them alike."""
    ordered = list(dict.fromkeys(g for g in groups if g))
    return {group: f"={chr(ord('a') + n)}" for n, group in enumerate(ordered[:26])}


def tolerance(band=None) -> tuple[float, str]:
    """(fraction, why): two predictions closer than the model's validated error for the class (its band,
    roofline.predict.bands) are a tie; where no class was validated, the rules table's figure."""
    if band is not None:
        return band.error, f"the validated band of this class: {band.text()}"
    entry = load_table("rules")["ranking"]
    return float(entry["tie_tolerance"]), f"no validated class; {entry['tie_source']}"


def needs_calibration(fmt: str) -> bool:
    return bool(load_table("recipes").get("producer", {}).get(fmt, {}).get("needs_calibration", False))


def _score(rec, evidence: Evidence) -> tuple:
    measured = evidence.measurement(rec.format)
    same_base = bool(measured) and measured.get("base", "").lower() == evidence.base.lower()
    given = rec.given  # the user's own checkpoint exists and needs no quantizing
    return (measured is not None, same_base, measured["tok_s"] if same_base else 0.0,
            given or evidence.published(rec.format) is not None, given or not needs_calibration(rec.format))


def _why(winner, runner_up, evidence: Evidence) -> str:
    a, b = _score(winner, evidence), _score(runner_up, evidence)
    label = format_label(winner.format)
    measured = evidence.measurement(winner.format)
    if a[:3] != b[:3] and measured:
        where = "" if a[1] else f" on another model, {measured.get('base', '?')}, not {evidence.base}"
        return (f"measured on {evidence.hardware}{where}: {label} {measured['tok_s']:g} tok/s, "
                f"{measured['checkpoint']} ({measured['source']})")
    if a[3] != b[3]:
        if winner.given:
            return "the checkpoint given exists: nothing to quantize"
        return f"a published checkpoint exists: {evidence.published(winner.format)}"
    if a[4] != b[4]:
        return f"{label} needs no calibration data; {format_label(runner_up.format)} does"
    return "no evidence beyond the prediction: the higher predicted tok/s"


def break_ties(ranked: list, key, evidence: Evidence, tol: float) -> list:
    """`ranked` sorted best first by `key` (a tuple whose first item is `fits` and second the
    deciding tok/s), `tol` the tie tolerance (tolerance()). Returns the list reordered inside each tie,
    with rec.tie_group, rec.tied_with and rec.decided_by set on every member of a tie of two or more."""
    out, i = [], 0
    group_id = 0
    while i < len(ranked):
        lead = ranked[i]
        group = [lead]
        j = i + 1
        while j < len(ranked) and key(ranked[j])[0] == key(lead)[0] and key(ranked[j])[1] >= key(lead)[1] * (1 - tol):
            group.append(ranked[j])
            j += 1
        formats = {r.format for r in group}
        if len(formats) > 1:
            group_id += 1
            group.sort(key=lambda r: (_score(r, evidence), key(r)), reverse=True)
            # the row the prediction alone would have put first, of another format: what the evidence
            # overruled (or, with no evidence either way, what the prediction beat)
            runner_up = max((r for r in group if r.format != group[0].format), key=key)
            decided = _why(group[0], runner_up, evidence)
            for rec in group:
                rec.tie_group = group_id
                rec.tied_with = [f"{format_label(r.format)} ({r.backend.name})" for r in group if r is not rec]
                rec.decided_by = decided if rec is group[0] else ""
        out += group
        i = j
    return out

"""Checkpoints side by side: each one's own audit (the numbers `roofline audit` prints for it),
ranked by expected tok/s on the chosen hardware, with what separates each from the best.

Pure: it takes AuditResults (and skipped inputs with their reasons) and returns the comparison.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from roofline import __version__
from roofline.audit import AuditResult
from roofline.model.formats import PLAIN_FORMATS, format_label
from roofline.predict.hardware import Hardware
from roofline.units import human_bytes

from roofline.predict.backends import backends_for

SCHEMA = "roofline.compare/1"
PLAIN = set(PLAIN_FORMATS.values())
NOT_WEIGHTS = ("embedding", "norm")
# a difference worth a sentence: at least this share of the better row's bytes per token
NOTABLE_SHARE = 0.02
MAX_LINES = 3  # per checkpoint


@dataclass
class CompareRow:
    name: str  # shown: a folder's or file's name, or the hub id
    result: AuditResult
    main_format: str
    backend: str
    downloads: int | None = None
    rank: int = 0
    differences: list[str] = field(default_factory=list)  # vs the best row
    label: str = ""  # what the user gave (folder path, hub id, capture file)

    @property
    def resident_bytes(self) -> float:
        """Weights plus the KV cache and state of the scenario's sequences at its context."""
        t = self.result.traffic
        tokens_out = t.scenario.batch * t.tokens_per_step
        return self.result.inventory.weight_bytes + (t.kv_bytes_per_token + t.state_bytes_per_token) * tokens_out

    @property
    def fits(self) -> bool:
        return self.resident_bytes / 1e9 <= self.result.hardware.usable_memory_gb

    @property
    def residual_bytes_per_token(self) -> float:
        return sum(g.bytes_per_token for g in self.result.residuals)

    def residual_top(self, n: int = 3) -> list[tuple[str, float]]:
        top = sorted(self.result.residuals, key=lambda g: -g.bytes_per_token)[:n]
        return [(g.label, g.bytes_per_token) for g in top]

    def to_json(self) -> dict:
        audit = self.result.to_json()
        keep = ("model", "source", "weight_bytes", "bytes_per_token", "weight_bytes_per_token", "kv_bytes_per_token",
                "state_bytes_per_token", "ceiling_tok_s", "expected_tok_s", "memory", "quantization", "scenario",
                "checkpoint_bytes", "bytes_read")
        cg = audit.get("cuda_graph")
        return {"rank": self.rank, "name": self.name, "input": self.label, **{k: audit[k] for k in keep},
                "main_format": self.main_format, "main_format_label": format_label(self.main_format),
                "backend": self.backend, "cuda_graph_benefit": cg["benefit"] if cg else None,
                "resident_bytes": self.resident_bytes, "fits": self.fits,
                "residual_bytes_per_token": self.residual_bytes_per_token,
                "residual_top": [{"label": label, "bytes_per_token": b} for label, b in self.residual_top()],
                "bytes_per_token_by_role": self.bytes_by_role(),
                "downloads": self.downloads, "differences": list(self.differences)}

    def bytes_by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for g in self.result.groups:
            out[g.role] = out.get(g.role, 0.0) + g.bytes_per_token
        t = self.result.traffic
        out["kv_cache"], out["state"] = t.kv_bytes_per_token, t.state_bytes_per_token
        return {role: b for role, b in sorted(out.items(), key=lambda kv: -kv[1]) if b > 0}


@dataclass
class Comparison:
    hardware: Hardware
    rows: list[CompareRow]
    skipped: list[tuple[str, str]]  # (input, reason)
    sort: str = "expected"
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        scenario = self.rows[0].result.scenario if self.rows else None
        hw = self.hardware
        return {
            "schema": SCHEMA, "roofline_version": __version__, "sort": self.sort,
            "hardware": {"key": hw.key, "name": hw.name, "bandwidth_gbps": hw.bandwidth_gbps,
                         "usable_memory_gb": hw.usable_memory_gb},
            "scenario": None if scenario is None else {"batch": scenario.batch, "context": scenario.context,
                                                       "kv_cache_dtype": scenario.kv_cache_dtype,
                                                       "speculative_tokens": scenario.speculative_tokens,
                                                       "routing": scenario.routing},
            "rows": [row.to_json() for row in self.rows],
            "skipped": [{"input": label, "reason": reason} for label, reason in self.skipped],
            "notes": list(self.notes),
        }


def display_name(label: str, parts: int = 1) -> str:
    """A local path by its last `parts` parts (a capture file without .json); a hub id as it is."""
    import os

    if os.path.exists(label):
        name = "/".join(os.path.normpath(label).split(os.sep)[-parts:]).lstrip("/")
        return name[:-5] if name.endswith(".json") else name
    return label


def display_names(labels: list[str]) -> list[str]:
    """Each input's name in the table: its last path part, or as many more as tell it apart from the
    others (checkpoints called `model` in 300 folders are 300 rows a reader can tell apart)."""
    names = [display_name(label) for label in labels]
    for parts in range(2, 64):
        clashing = {n for n in names if names.count(n) > 1}
        if not clashing:
            break
        names = [display_name(label, parts) if name in clashing else name for label, name in zip(labels, names)]
    return names


def main_format(result: AuditResult) -> str:
    """The format of the weights that dominate the bytes per token: of a quantized checkpoint,
    the quantized format that carries the most bytes (its residuals are reported apart)."""
    weights = [g for g in result.groups if g.role not in NOT_WEIGHTS and g.role != "lm_head"]
    if result.quantized:
        weights = [g for g in weights if g.format not in PLAIN] or weights
    top = max(weights, key=lambda g: g.bytes_per_token, default=None)
    return top.format if top else "bf16"


def backend_name(fmt: str, hardware: Hardware) -> str:
    if not hardware.compute_capability:
        return "n/a (no GPU)"
    candidates = backends_for(fmt, hardware)
    if not candidates:
        return f"no vLLM kernel for {format_label(fmt)} on {hardware.name}"
    return candidates[0].name


def _kinds(result: AuditResult) -> dict[str, tuple[float, str]]:
    """module kind -> (bytes per token, its format label), weights only."""
    out: dict[str, tuple[float, list[str]]] = {}
    for g in result.groups:
        if g.role in NOT_WEIGHTS:
            continue
        total, formats = out.get(g.label, (0.0, []))
        out[g.label] = (total + g.bytes_per_token, formats + [format_label(g.format)])
    return {label: (b, "/".join(dict.fromkeys(f))) for label, (b, f) in out.items()}


def differences(best: CompareRow, row: CompareRow) -> list[str]:
    """Why `row` reads more per token than `best`, largest first: kinds of module stored wider,
    then the KV cache and the recurrent state."""
    a, b = best.result, row.result
    floor = NOTABLE_SHARE * a.traffic.bytes_per_token
    mine, theirs = _kinds(b), _kinds(a)
    lines = []
    for label in sorted(mine, key=lambda k: -(mine[k][0] - theirs.get(k, (0.0, ""))[0])):
        extra = mine[label][0] - theirs.get(label, (0.0, ""))[0]
        if extra < floor:
            break
        fmt = mine[label][1]
        verb = f"keeps {label} {fmt}" if fmt in ("BF16", "FP16", "FP32") else f"stores {label} in {fmt}"
        where = (f"where {best.name} has {theirs[label][1]}" if label in theirs
                 else f"which {best.name} does not have")
        lines.append(f"{row.name} {verb} {where}: +{human_bytes(extra)}/token")
    if len(lines) > MAX_LINES:  # the largest few say why; the rest as one sum
        rest = sum(mine[k][0] - theirs.get(k, (0.0, ""))[0] for k in mine) - sum(
            mine[k][0] - theirs.get(k, (0.0, ""))[0] for k in list(sorted(
                mine, key=lambda k: -(mine[k][0] - theirs.get(k, (0.0, ""))[0])))[:MAX_LINES])
        lines = lines[:MAX_LINES] + ([f"{row.name}: +{human_bytes(rest)}/token more in its other modules"]
                                     if rest >= floor else [])
    for what, mine_bytes, theirs_bytes in (
            ("KV cache", b.traffic.kv_bytes_per_token, a.traffic.kv_bytes_per_token),
            ("recurrent state", b.traffic.state_bytes_per_token, a.traffic.state_bytes_per_token)):
        if mine_bytes - theirs_bytes >= floor:
            lines.append(f"{row.name} reads +{human_bytes(mine_bytes - theirs_bytes)}/token more {what} "
                         f"({b.traffic.kv_dtype if what == 'KV cache' else 'state'})")
    if not lines and b.traffic.bytes_per_token > a.traffic.bytes_per_token:
        lines.append(f"{row.name} reads +{human_bytes(b.traffic.bytes_per_token - a.traffic.bytes_per_token)}/token,"
                     f" spread thinly over its modules")
    if b.expected_tok_s < a.expected_tok_s and b.traffic.bytes_per_token <= a.traffic.bytes_per_token:
        lines.append(f"{row.name} reads no more than {best.name} but launches more kernels per token "
                     f"(expected {b.expected_tok_s:.1f} vs {a.expected_tok_s:.1f} tok/s)")
    return lines


def compare(inputs: list[tuple[str, AuditResult, int | None]], hardware: Hardware,
            skipped: list[tuple[str, str]] | None = None, sort: str = "expected") -> Comparison:
    """inputs: (label, audit result, downloads or None). Ranked by expected tok/s (fitting
    checkpoints first), or by downloads."""
    names = display_names([label for label, _, _ in inputs])
    rows = [CompareRow(name, result, main_format(result), backend_name(main_format(result), hardware), downloads,
                       label=label)
            for name, (label, result, downloads) in zip(names, inputs)]
    if sort == "downloads":
        rows.sort(key=lambda r: -(r.downloads or 0))
    else:
        # equal speed (each step the engine's host's, say): the one reading fewer bytes a token first
        rows.sort(key=lambda r: (not r.fits, -r.result.expected_tok_s, r.result.traffic.bytes_per_token))
    for rank, row in enumerate(rows, 1):
        row.rank = rank
    if rows:
        best = max(rows, key=lambda r: r.result.expected_tok_s)
        for row in rows:
            if row is not best:
                row.differences = differences(best, row)
    return Comparison(hardware, rows, list(skipped or ()), sort)

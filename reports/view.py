"""What the page shows, read out of the JSON documents the commands already produce (audit
--json, plan --json, validate records). Nothing here computes a new number: it selects, groups
for display and labels. Every reader is tolerant: a section whose data is missing is left out."""
from __future__ import annotations

from dataclasses import dataclass, field

from roofline.errors import RooflineError
from roofline.model.formats import PLAIN_FORMATS, format_label
from roofline.model.grouping import short_label

# x-axis buckets of the per-layer chart for modules outside the decoder layers, in this order
OUTSIDE_LAYERS = ("mtp", "embedding", "lm_head", "other")
OUTSIDE_LABELS = {"mtp": "MTP", "embedding": "embed", "lm_head": "lm_head", "other": "other"}


@dataclass
class ModuleView:
    name: str
    label: str  # kind of module, e.g. "linear_attn.in_proj_qkvz"
    layer: int | None
    role: str
    format: str
    format_label: str
    quant_method: str
    bytes: int
    bytes_per_token: float
    residual: bool  # stayed unquantized in a quantized model (the audit's residual groups)

    @property
    def bucket(self) -> str:
        """x category of the per-layer chart."""
        if self.role == "mtp":
            return OUTSIDE_LABELS["mtp"]
        if self.layer is not None:
            return f"L{self.layer}"
        return OUTSIDE_LABELS.get(self.role, OUTSIDE_LABELS["other"])


@dataclass
class ReportData:
    audit: dict
    modules: list[ModuleView]
    plan_rows: list[dict] = field(default_factory=list)
    recommendation: object = None  # dict or str from the plan, when it names one
    validation_rows: list[dict] = field(default_factory=list)
    compare_rows: list[dict] = field(default_factory=list)  # `roofline compare --json` rows, ranked
    compare_skipped: list[dict] = field(default_factory=list)
    doctor: dict | None = None  # `roofline doctor --json` output
    capacity: dict | None = None  # `roofline capacity --json` output
    preflight: dict | None = None  # `roofline preflight --json` output

    @property
    def cuda_graph(self) -> dict | None:
        value = self.audit.get("cuda_graph")
        return value if isinstance(value, dict) and value else None

    @property
    def residual_bytes_per_token(self) -> float:
        return sum(float(g.get("bytes_per_token") or 0) for g in self.audit.get("residuals") or [])


def _group_key(label: str, role: str, fmt: str, quant_method: str) -> tuple:
    return (label, role, fmt, quant_method)


def module_views(audit: dict) -> list[ModuleView]:
    """Per-module rows with the residual flag of the group the audit put them in."""
    residual_groups = {
        _group_key(g.get("label", ""), g.get("role", ""), g.get("format", ""), g.get("quant_method", ""))
        for g in audit.get("residuals") or []
    }
    out = []
    for m in audit.get("modules") or []:
        name = str(m.get("name", ""))
        label = short_label(name)
        fmt = str(m.get("format", ""))
        key = _group_key(label, m.get("role", ""), fmt, m.get("quant_method", ""))
        residual = bool(m["residual"]) if "residual" in m else key in residual_groups
        layer = m.get("layer")
        out.append(ModuleView(
            name=name, label=label, layer=layer if isinstance(layer, int) else None,
            role=str(m.get("role", "other")), format=fmt, format_label=format_label(fmt) if fmt else "?",
            quant_method=str(m.get("quant_method", "")), bytes=int(m.get("bytes") or 0),
            bytes_per_token=float(m.get("bytes_per_token") or 0.0), residual=residual,
        ))
    return out


def layer_buckets(modules: list[ModuleView]) -> list[str]:
    """x categories: decoder layers in order, then what lies outside them."""
    layers = sorted({m.layer for m in modules if m.layer is not None and m.role != "mtp"})
    # buckets outside the layers only when a token reads something there (MTP is off by default)
    present = {m.bucket for m in modules if m.bytes_per_token > 0}
    return [f"L{n}" for n in layers] + [OUTSIDE_LABELS[k] for k in OUTSIDE_LAYERS if OUTSIDE_LABELS[k] in present]


def series_key(module: ModuleView) -> tuple[str, bool]:
    """Stack series of the per-layer chart: the format, with residuals apart."""
    return (module.format, module.residual)


def is_plain(fmt: str) -> bool:
    return fmt in PLAIN_FORMATS.values()


# "recommendations": `roofline plan --json` (ranked, best first)
_ROW_LISTS = ("recommendations", "rows", "ranked", "candidates", "formats", "plans", "results", "records")


def _rows_of(value, what: str) -> tuple[list[dict], dict]:
    """A list of dict rows from a list, from a document holding one under a usual key, or from
    a single record (one object without such a list). Also returns the document."""
    if value is None:
        return [], {}
    if isinstance(value, dict):
        for key in _ROW_LISTS:
            if isinstance(value.get(key), list):
                return _only_dicts(value[key], what), value
        return [value], {}
    if isinstance(value, list):
        return _only_dicts(value, what), {}
    raise RooflineError(f"{what}: expected a list of rows, got {type(value).__name__}")


def as_rows(value, what: str) -> list[dict]:
    return _rows_of(value, what)[0]


def _only_dicts(rows: list, what: str) -> list[dict]:
    if not all(isinstance(r, dict) for r in rows):
        raise RooflineError(f"{what}: every row must be a JSON object")
    return list(rows)


def report_data(audit: dict, plan=None, validation=None, compare=None, doctor=None, capacity=None,
                preflight=None) -> ReportData:
    """The page's view of the audit and each section (reports.SECTIONS), every one tolerant of absence."""
    if not isinstance(audit, dict) or "bytes_per_token" not in audit:
        raise RooflineError("report: the audit JSON has no bytes_per_token (is it `roofline audit --json` output?)")
    plan_rows, plan_doc = _rows_of(plan, "plan")
    recommendation = None
    for key in ("top_pick", "recommendation", "recommended", "top"):
        if plan_doc.get(key):
            recommendation = plan_doc[key]
            break
    if recommendation is None and plan_rows:
        recommendation = plan_rows[0]  # plan rows come ranked, best first
    validation_rows, _ = _rows_of(validation, "validation")
    compare_doc = compare if isinstance(compare, dict) else {}
    compare_rows = [r for r in compare_doc.get("rows") or [] if isinstance(r, dict)]
    skipped = [r for r in compare_doc.get("skipped") or [] if isinstance(r, dict)]
    return ReportData(audit=audit, modules=module_views(audit), plan_rows=plan_rows,
                      recommendation=recommendation, validation_rows=validation_rows,
                      compare_rows=compare_rows, compare_skipped=skipped,
                      doctor=doctor if isinstance(doctor, dict) and isinstance(doctor.get("causes"), list) else None,
                      capacity=capacity if isinstance(capacity, dict) and isinstance(capacity.get("curve"), list)
                      else None,
                      preflight=preflight if isinstance(preflight, dict) and isinstance(preflight.get("deployment"), dict)
                      else None)


def first_number(row: dict, *keys: str) -> float | None:
    for key in keys:
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def first_text(row: dict, *keys: str) -> str:
    for key in keys:
        value = row.get(key)
        if value not in (None, ""):
            return str(value)
    return ""


MEASURED_KEYS = ("measured_tok_s", "measured", "tok_s", "decode_tok_s")
PREDICTED_KEYS = ("predicted_tok_s", "expected_tok_s", "predicted")
# a plan row's expected tok/s: `roofline plan` calls it single_stream_tok_s
EXPECTED_KEYS = ("expected_tok_s", "single_stream_tok_s")
ROW_LABEL_KEYS = ("label", "name", "format", "recipe", "model", "run")


def row_label(row: dict, fallback: str) -> str:
    fmt = first_text(row, "format")
    parts = [first_text(row, "format_label") or (format_label(fmt) if fmt else "")]
    recipe = first_text(row, "recipe")
    if recipe and recipe not in parts:
        parts.append(recipe)
    label = " · ".join(p for p in parts if p)
    return label or first_text(row, *ROW_LABEL_KEYS) or fallback

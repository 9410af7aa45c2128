"""The HTML page: headline cards, charts, sortable tables, one self-contained file.

Escaping: every model-derived string reaches the page through `esc()` (HTML text and attribute
values) or through JSON written by `script_json()` / plotly, in which <, > and & cannot close a
<script> element. Nothing from the model is ever placed in a script as code."""
from __future__ import annotations

import base64
import hashlib
import html
import json
import math

from roofline import __version__
from roofline.advise.ties import tie_marks
from roofline.model.formats import format_label
from roofline.units import human_bytes, provenance as labelled

from . import charts
from .view import (
    EXPECTED_KEYS,
    MEASURED_KEYS,
    PREDICTED_KEYS,
    ReportData,
    first_number,
    first_text,
    row_label,
)

DATA_ELEMENT_ID = "roofline-data"


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def script_json(value) -> str:
    """JSON that is safe as the text of a <script> element."""
    out = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        out = out.replace(raw, escaped)
    return out


def _finite(value):
    """Infinite and NaN floats (a model with no bytes per token) as null in the embedded JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


# ---------------------------------------------------------------- plotly.js

def plotly_loader(cdn: bool) -> str:
    from plotly.io._utils import plotly_cdn_url
    from plotly.offline import get_plotlyjs

    source = get_plotlyjs()
    config = "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>"
    if cdn:
        # the same bundle the inline mode would embed, so its hash pins the CDN file
        digest = base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii")
        return (f'{config}<script charset="utf-8" src="{esc(plotly_cdn_url())}" '
                f'integrity="sha256-{digest}" crossorigin="anonymous"></script>')
    return f'{config}<script charset="utf-8">{source}</script>'


def figure_div(fig, div_id: str) -> str:
    import plotly.io as pio

    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


# ---------------------------------------------------------------- pieces

def card(title: str, value: str, detail: str = "", kind: str = "", detail_html: str = "") -> str:
    """detail: text; detail_html: markup already escaped (a serve line's flags)."""
    return (f'<div class="card {esc(kind)}"><div class="card-title">{esc(title)}</div>'
            f'<div class="card-value">{esc(value)}</div><div class="card-detail">{esc(detail)}{detail_html}</div></div>')


def command_html(words: list[str]) -> str:
    """A command line whose words never break inside (a flag such as --max-model-len=4096 stays
    whole); lines break between words."""
    def word(w: str) -> str:  # a long flag may break after its "=", nowhere else
        flag, equals, value = w.partition("=")
        if not w.startswith("-"):  # a path or hub id: breaks anywhere when longer than the line
            return f'<span class="path">{esc(w)}</span>'
        return (f'<span class="word">{esc(flag)}=</span><wbr><span class="word">{esc(value)}</span>' if equals
                else f'<span class="word">{esc(w)}</span>')

    return '<code class="command">' + " ".join(word(w) for w in words) + "</code>"


def expected_detail(audit: dict) -> str:
    """What the expected tok/s is made of, in the step model's own terms: the memory time at the
    bandwidth it reaches, plus the launches (and any communication) of one step."""
    step = audit.get("step") or {}
    breakdown = step.get("breakdown") or {}
    memory_ms, step_ms = first_number(breakdown, "memory_ms"), first_number(breakdown, "step_ms")
    efficiency = first_number(audit.get("efficiency") or {}, "value")
    bandwidth = first_number(audit.get("hardware") or {}, "bandwidth_gbps")
    if not (memory_ms and step_ms and bandwidth):
        return f"efficiency {efficiency}" if efficiency is not None else ""
    parts = [f"memory {memory_ms:.2f} ms at {efficiency:.2f} × {bandwidth:g} GB/s" if efficiency
             else f"memory {memory_ms:.2f} ms"]
    for key, label in (("launch_ms", "launches"), ("communication_ms", "communication"), ("pipeline_ms", "pipeline"),
                       ("host_ms", "the engine's host")):
        value = first_number(breakdown, key)
        if value:
            parts.append(f"{label} {value:.2f} ms")
    graphs = "CUDA graphs" if step.get("graphs", True) else "eager"
    return f"one step {step_ms:.2f} ms = " + " + ".join(parts) + f" ({graphs}; {breakdown.get('bound', '?')}-bound)"


def sortable_table(table_id: str, columns: list[tuple[str, str]], rows: list[list[tuple[str, object]]],
                   row_classes: list[str] | None = None, wrap_columns: set[int] = frozenset()) -> str:
    """columns: (header, "num" | "text"); rows: cells of (shown text, sort value); wrap_columns:
    indices of columns that hold a command line (a serve line), which wraps between its words."""
    head = "".join(
        f'<th class="{kind}" scope="col"><button type="button">{esc(header)}</button></th>'
        for header, kind in columns)
    body = []
    for n, row in enumerate(rows):
        klass = f' class="{esc(row_classes[n])}"' if row_classes and row_classes[n] else ""
        cells = []
        for index, ((shown, sort_value), (_, kind)) in enumerate(zip(row, columns)):
            value = "" if sort_value is None else sort_value
            if isinstance(value, float) and not math.isfinite(value):
                value = ""
            cell_class = f"{kind} wrap" if index in wrap_columns else kind
            content = (f'<div class="wrap">{command_html(str(shown).split())}</div>' if index in wrap_columns and shown
                       else esc(shown))
            cells.append(f'<td class="{cell_class}" data-value="{esc(value)}">{content}</td>')
        body.append(f"<tr{klass}>{''.join(cells)}</tr>")
    return (f'<table class="sortable" id="{esc(table_id)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _cell(key: str, value) -> tuple[str, object]:
    """A plan / validation value for display: bytes and tok/s made readable, the rest as is."""
    if isinstance(value, bool) or value is None:
        return ("" if value is None else ("yes" if value else "no"), "" if value is None else int(value))
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            return ("n/a", None)
        if "bytes" in key:
            return (human_bytes(value), value)
        if "tok_s" in key:
            return (charts.format_tok_s(value), value)
        if key.endswith("_gb"):
            return (f"{value:.1f} GB", value)
        if key.startswith("ratio") or key.endswith(("_ratio", "_share", "_fraction", "_loss")):
            return (f"{100 * value:.0f}%", value)
        return (f"{value:,}" if isinstance(value, int) else f"{value:,.2f}", value)
    if isinstance(value, (dict, list)):
        return ("", None)  # structured values have their own sections, never raw JSON in a cell
    if key == "format":
        return (format_label(str(value)), str(value))
    if key == "verdict":
        return (str(value).replace("_", " "), str(value))
    return (str(value), str(value))


def columns_table(table_id: str, columns: list[tuple[str, str, str]], rows: list[dict],
                  wrap: tuple[str, ...] = ()) -> str:
    """A sortable table of chosen columns, (key, header, "num" | "text"), each cell as the terminal
    rounds it; `wrap`: keys whose long text (a serve line) wraps inside the card, not past it."""
    cells = [[_cell(key, row.get(key)) for key, _, _ in columns] for row in rows]
    table = sortable_table(table_id, [(header, kind) for _, header, kind in columns], cells,
                           wrap_columns={n for n, (key, _, _) in enumerate(columns) if key in wrap})
    return f'<div class="table-wrap">{table}</div>'


# the plan's ranked rows as its terminal table shows them, plus the line that serves each
PLAN_COLUMNS = [("rank", "#", "num"), ("format", "format", "text"), ("recipe", "recipe", "text"),
                ("backend", "vLLM backend", "text"), ("single_stream_tok_s", "1-stream tok/s", "num"),
                ("aggregate_tok_s", "total tok/s", "num"), ("ceiling_tok_s", "ceiling tok/s", "num"),
                ("bytes_per_token", "bytes/token", "num"), ("resident_gb", "resident", "num"),
                ("fits", "fits", "text"), ("serve_command", "serve with", "text")]
# a validation record row: what was measured against what was predicted, and where
VALIDATION_COLUMNS = [("recorded_at", "recorded", "text"), ("model", "model", "text"),
                      ("hardware", "hardware", "text"), ("measured_tok_s", "measured tok/s", "num"),
                      ("expected_tok_s", "expected tok/s", "num"), ("ceiling_tok_s", "ceiling tok/s", "num"),
                      ("ratio_to_expected", "of expected", "num"), ("ratio_to_ceiling", "of ceiling", "num"),
                      ("verdict", "verdict", "text"), ("context", "context", "num"),
                      ("kv_cache_dtype", "KV cache", "text"), ("measured_by", "measured by", "text")]


def _fixed(value, places: int) -> str:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return f"{value:,.{places}f}" if ok else "n/a"


def _count(value) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _times(value) -> str:
    """vLLM logs its maximum concurrency with two decimals: "24.24x"."""
    return f"{value:.2f}x" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _tok_s(value) -> str:
    return "n/a" if value is None else f"{charts.format_tok_s(float(value))} tok/s"


# ---------------------------------------------------------------- sections

def headline(data: ReportData) -> str:
    a = data.audit
    hardware = a.get("hardware") or {}
    memory = a.get("memory") or {}
    total = float(a.get("bytes_per_token") or 0)
    cards = [
        card("Bytes read per token", human_bytes(total),
             f"weights {human_bytes(a.get('weight_bytes_per_token') or 0)} + KV "
             f"{human_bytes(a.get('kv_bytes_per_token') or 0)} + state {human_bytes(a.get('state_bytes_per_token') or 0)}"),
        card("Ceiling", _tok_s(a.get("ceiling_tok_s")),
             f"{hardware.get('name', '?')} at {hardware.get('bandwidth_gbps', '?')} GB/s"
             + (f" ({hardware['bandwidth_basis']})" if hardware.get("bandwidth_basis") else "")),
        card("Expected", _tok_s(a.get("expected_tok_s")), expected_detail(a), "accent"),
    ]
    residual = data.residual_bytes_per_token
    if a.get("residuals"):
        cards.append(card("Unquantized residuals", f"{100 * residual / total:.1f}%" if total else "?",
                          f"{human_bytes(residual)} per token in {len(a['residuals'])} kinds of module",
                          "warning"))
    cuda_graph = data.cuda_graph
    if cuda_graph:
        benefit = first_number(cuda_graph, "benefit", "speedup")
        graph, eager = first_number(cuda_graph, "graph_tok_s"), first_number(cuda_graph, "eager_tok_s")
        cards.append(card("CUDA-graph benefit", f"×{benefit:.2f}" if benefit else "?",
                          f"{_tok_s(graph)} with graphs, {_tok_s(eager)} eager"))
    if data.recommendation is not None:
        title, detail, command = _recommendation(data.recommendation)
        cards.append(card("Top recommendation", title, detail, kind="good", detail_html=command))
    measured = [first_number(r, *MEASURED_KEYS) for r in data.validation_rows]
    measured = [m for m in measured if m is not None]
    if measured:
        cards.append(card("Measured", _tok_s(measured[-1]),
                          f"{len(measured)} run{'s' if len(measured) > 1 else ''}; "
                          f"{100 * measured[-1] / a['ceiling_tok_s']:.0f}% of the ceiling"
                          if a.get("ceiling_tok_s") else f"{len(measured)} runs"))
    fits = memory.get("fits")
    cards.append(card("Weights resident", human_bytes(a.get("weight_bytes") or 0),
                      "" if fits is None else ("fits in " if fits else "does NOT fit in ")
                      + f"{memory.get('usable_gb', '?')} GB usable", "" if fits is not False else "warning"))
    return f'<section class="cards">{"".join(cards)}</section>'


def _recommendation(value) -> tuple[str, str, str]:
    """(title, detail text, the serve line as markup) of the plan's top pick."""
    if isinstance(value, str):
        return value, "", ""
    if not isinstance(value, dict):
        return str(value), "", ""
    title = row_label(value, "recommended")
    details = []
    expected = first_number(value, *EXPECTED_KEYS)
    if expected is not None:
        details.append(f"{charts.format_tok_s(expected)} tok/s expected")
    for key in ("backend", "kernel", "reason", "why"):
        if isinstance(value.get(key), str) and value[key]:
            details.append(value[key])
    command = value.get("serve_command")
    words = command.split() if isinstance(command, str) else \
        [str(f) for f in value.get("flags") or [] if isinstance(f, (str, int, float))]
    return title, "; ".join(details), command_html(words) if words else ""


def context_line(data: ReportData) -> str:
    a = data.audit
    arch = a.get("architecture") or {}
    quant = a.get("quantization") or {}
    scenario = a.get("scenario") or {}
    hardware = a.get("hardware") or {}
    items = [
        ("architecture", arch.get("architecture")),
        ("source", a.get("source")),
        ("layers", f"{arch.get('num_layers')} ({arch.get('attention_layers', 0)} attention, "
                   f"{arch.get('recurrent_layers', 0)} recurrent)" if arch.get("num_layers") else None),
        ("experts", f"{arch.get('experts_per_token')} of {arch.get('num_experts')} per token"
         if arch.get("num_experts") else None),
        ("quantization", " ".join(str(x) for x in (quant.get("method"), quant.get("algo")) if x)),
        ("scenario", f"batch {scenario.get('batch', '?')}, context {scenario.get('context', '?')}, KV cache "
                     f"{scenario.get('kv_cache_dtype_resolved') or scenario.get('kv_cache_dtype', '?')}"
                     + (f", speculative {scenario['speculative_tokens']}" if scenario.get("speculative_tokens") else "")),
        ("hardware", f"{hardware.get('name', '?')} ({hardware.get('bandwidth_gbps', '?')} GB/s: "
                     f"{hardware.get('bandwidth_source', '')})"),
    ]
    return "<dl class=\"context\">" + "".join(
        f"<div><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>" for k, v in items if v) + "</dl>"


def residual_section(data: ReportData) -> str:
    a = data.audit
    residuals = a.get("residuals") or []
    total = float(a.get("bytes_per_token") or 0) or 1.0
    if not residuals:
        kind = "none: every linear layer is quantized" if any(g.get("format") not in ("bf16", "fp16", "fp32")
                                                             for g in a.get("groups") or []) \
            else "the model is not quantized, so nothing is a residual"
        return f'<p class="muted">Unquantized residuals: {esc(kind)}.</p>'
    columns = [("module", "text"), ("role", "text"), ("n", "num"), ("format", "text"), ("quant method", "text"),
               ("resident", "num"), ("per token", "num"), ("share of bytes/token", "num")]
    rows = _group_rows(residuals, total)
    residual = data.residual_bytes_per_token
    return (f'<p>These modules stayed unquantized in a quantized model: <strong>{esc(human_bytes(residual))}'
            f'</strong> of every token’s <strong>{esc(human_bytes(total))}</strong> '
            f'({100 * residual / total:.1f}%). Quantizing the weights further does not shrink them.</p>'
            + sortable_table("residual-table", columns, rows, ["residual"] * len(rows)))


def _group_rows(groups: list[dict], total: float) -> list[list[tuple]]:
    """Table cells (shown text, sort value) of audit groups: the residual and module tables."""
    return [[(g.get("label", ""), g.get("label", "")), (g.get("role", ""), g.get("role", "")),
             (str(g.get("count", "")), g.get("count")), (g.get("format_label") or g.get("format", ""), g.get("format")),
             (g.get("quant_method", ""), g.get("quant_method")),
             (human_bytes(g.get("bytes") or 0), g.get("bytes")),
             (human_bytes(g.get("bytes_per_token") or 0), g.get("bytes_per_token")),
             (f"{100 * float(g.get('bytes_per_token') or 0) / total:.1f}%", g.get("bytes_per_token"))]
            for g in groups]


def groups_section(data: ReportData) -> str:
    groups = data.audit.get("groups") or []
    total = float(data.audit.get("bytes_per_token") or 0) or 1.0
    columns = [("module", "text"), ("role", "text"), ("n", "num"), ("format", "text"), ("quant method", "text"),
               ("resident", "num"), ("per token", "num"), ("share", "num")]
    rows = _group_rows(groups, total)
    classes = ["residual" if g.get("residual") else "" for g in groups]
    return (f'<details><summary>All {len(groups)} kinds of module</summary>'
            + sortable_table("group-table", columns, rows, classes) + "</details>")


def notes_section(data: ReportData) -> str:
    a = data.audit
    items = [f'<li class="disagreement"><strong>tensors vs config:</strong> {esc(n)}</li>'
             for n in a.get("disagreements") or []]
    items += [f"<li>{esc(n)}</li>" for n in a.get("notes") or []]
    advice = (data.cuda_graph or {}).get("advice")
    if advice:
        items.append(f"<li><strong>CUDA graphs:</strong> {esc(advice)}</li>")
    if not items:
        return ""
    return f'<section><h2>Notes</h2><ul class="notes">{"".join(items)}</ul></section>'


# the CUDA-graph facts of an audit as a reader reads them: (key, label, how to show the value,
# key of its provenance kind, key of its source)
CUDA_GRAPH_ROWS = (
    ("graph_tok_s", "with CUDA graphs (vLLM's default)", lambda v: f"{charts.format_tok_s(v)} tok/s", None, None),
    ("eager_tok_s", "eager (--enforce-eager)", lambda v: f"{charts.format_tok_s(v)} tok/s", None, None),
    ("benefit", "what CUDA graphs buy", lambda v: f"×{v:.2f}", None, None),
    ("enforce_eager_loss", "lost to --enforce-eager", lambda v: f"{100 * v:.0f}%", None, None),
    ("kernels_per_token", "kernels launched per token", lambda v: f"{v:,.0f}", None, None),
    ("host_us_per_kernel", "host cost per kernel, eager", lambda v: f"{v:g} µs", "host_cost_kind", "host_cost_source"),
    ("graph_floor_us_per_kernel", "per-kernel floor with graphs", lambda v: f"{v:g} µs", "graph_floor_kind",
     "graph_floor_source"),
    ("host_bound_layers_eager", "layers host-bound in eager mode", lambda v: f"{v:,.0f}", None, None),
)


def cuda_graph_section(data: ReportData) -> str:
    cuda_graph = data.cuda_graph
    if not cuda_graph:
        return ""
    rows = []
    for key, label, shown, kind_key, source_key in CUDA_GRAPH_ROWS:
        value = cuda_graph.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            continue
        kind = cuda_graph.get(kind_key) if kind_key else None
        source = cuda_graph.get(source_key) if source_key else None
        provenance = (f'<div class="source">{esc(labelled(kind, source))}</div>' if kind and source else "")
        rows.append(f'<tr><th scope="row">{esc(label)}</th><td>{esc(shown(value))}{provenance}</td></tr>')
    return (f'<section id="cuda-graph"><h2>CUDA graphs vs eager</h2>'
            f'<table class="kv">{"".join(rows)}</table></section>')


def _with_tie_marks(rows: list[dict]) -> list[dict]:
    """Each row with its tie group as the terminal marks it (=a, =b, ...), in the order the groups appear."""
    def group(row: dict):
        tie = row.get("tie")
        return tie.get("group") if isinstance(tie, dict) else None

    marks = tie_marks(group(row) for row in rows)
    return [{**row, "tie_mark": marks.get(group(row), "")} for row in rows]


def plan_section(data: ReportData, figure) -> str:
    if not data.plan_rows:
        return ""
    rows = _with_tie_marks(data.plan_rows)
    columns = PLAN_COLUMNS[:1] + [("tie_mark", "tie", "text")] + PLAN_COLUMNS[1:]
    return ('<section id="plan"><h2>Formats compared (plan)</h2>'
            '<p class="muted">Each row prices one format, recipe and vLLM backend with the step model; '
            'ranked best first. Rows marked with the same =letter are a tie: within the model\'s '
            'uncertainty of each other, ordered by evidence.</p>'
            f'<div class="chart">{figure}</div>'
            f'{columns_table("plan-table", columns, rows, wrap=("serve_command",))}</section>')


def compare_section(data: ReportData, figure) -> str:
    if not data.compare_rows:
        return ""
    columns = [("rank", "#", "num"), ("name", "checkpoint", "text"), ("main_format_label", "format", "text"),
               ("weight_bytes", "on disk", "num"), ("bytes_per_token", "bytes/token", "num"),
               ("ceiling_tok_s", "ceiling tok/s", "num"), ("expected_tok_s", "expected tok/s", "num"),
               ("residual_bytes_per_token", "BF16 residuals/token", "num"), ("fits", "fits", "text"),
               ("backend", "vLLM backend", "text")]
    rows = [[_cell(key, row.get(key)) for key, _, _ in columns] for row in data.compare_rows]
    table = sortable_table("compare-table", [(header, kind) for _, header, kind in columns], rows)
    why = "".join(f"<li>{esc(line)}</li>" for row in data.compare_rows for line in row.get("differences") or [])
    skipped = "".join(f"<li>{esc(r.get('input'))}: {esc(r.get('reason'))}</li>" for r in data.compare_skipped)
    return ('<section id="compare"><h2>Checkpoints compared</h2>'
            '<p class="muted">Each checkpoint\'s own audit on this hardware, ranked by expected tok/s.</p>'
            f'<div class="chart">{figure}</div>{table}'
            + (f"<h3>Why the others read more</h3><ul>{why}</ul>" if why else "")
            + (f"<h3>Skipped</h3><ul>{skipped}</ul>" if skipped else "") + "</section>")


def doctor_section(data: ReportData, figure) -> str:
    """`roofline doctor`: the server's configuration, measured vs predicted vs best, the ranked causes."""
    doc = data.doctor
    if not doc:
        return ""
    server = doc.get("server") or {}
    facts = [("model", server.get("model")), ("vLLM", server.get("version")), ("KV cache", server.get("kv_cache_dtype")),
             ("block size", server.get("block_size")), ("KV blocks", server.get("num_kv_blocks")),
             ("max_model_len", server.get("max_model_len")), ("graph mode", server.get("graph_mode")),
             ("TP", server.get("tp"))]
    spec = server.get("speculative")
    if isinstance(spec, dict):
        facts.append(("speculative", f"{spec.get('num_draft')} draft tokens ({spec.get('method')}), acceptance "
                                     f"{spec.get('acceptance_rate')}"))
    facts_html = "".join(f"<li>{esc(name)}: <b>{esc('not seen' if value is None else value)}</b></li>"
                         for name, value in facts)
    columns = [("#", "num"), ("cause", "text"), ("gain tok/s", "num"), ("fix", "text"), ("evidence", "text")]
    rows = [[(str(i), i), (c.get("id"), c.get("id")), (charts.format_tok_s(c.get("expected_gain_tok_s")),
                                                      c.get("expected_gain_tok_s")),
             (c.get("fix"), c.get("fix")), (c.get("evidence"), c.get("evidence"))]
            for i, c in enumerate([c for c in doc.get("causes") or [] if isinstance(c, dict)], 1)]
    table = sortable_table("doctor-table", columns, rows) if rows else "<p>No configuration cause found.</p>"
    unseen = "".join(f"<li>{esc(line)}</li>" for line in doc.get("unseen") or [])
    problems = "".join(f"<li>{esc(line)}</li>" for line in doc.get("problems") or [])
    return ('<section id="doctor"><h2>Live diagnosis (doctor)</h2>'
            f'<p>{esc(doc.get("verdict"))}</p><ul class="facts">{facts_html}</ul>'
            f'<div class="chart">{figure}</div>{table}' + _what_if_html(doc.get("what_if"))
            + (f"<h3>Could not see</h3><ul>{unseen}</ul>" if unseen else "")
            + (f"<h3>Partial</h3><ul>{problems}</ul>" if problems else "") + "</section>")


def _what_if_html(what) -> str:
    """doctor's what-if: the server with the flags given, priced beside it (the JSON's `what_if`)."""
    if not isinstance(what, dict):
        return ""
    said = " ".join(str(f) for f in what.get("flags") or [])
    if what.get("refusals"):
        body = "vLLM would refuse it: " + "; ".join(str(r) for r in what["refusals"])
    else:
        body = (f"{charts.format_tok_s(what.get('what_if_tok_s'))} tok/s against "
                f"{charts.format_tok_s(what.get('served_tok_s'))} as served "
                + (f"({what['gain_tok_s']:+.1f} tok/s)" if isinstance(what.get("gain_tok_s"), (int, float)) else ""))
    notes = "".join(f"<li>{esc(line)}</li>" for line in what.get("notes") or [])
    return (f'<h3>What if</h3><p id="doctor-what-if"><code>{esc(said)}</code>: {esc(body)}</p>'
            + (f"<ul>{notes}</ul>" if notes else ""))


def capacity_section(data: ReportData, figure, load_figure="") -> str:
    """`roofline capacity`: the KV cache as vLLM sizes it and the decode curve."""
    cap = data.capacity
    if not cap:
        return ""
    kv = cap.get("kv_cache") or {}
    terms = "".join(f"<li>{esc(name)}: <b>{esc(human_bytes(t.get('bytes') or 0))}</b> ({esc(t.get('kind'))}: "
                    f"{esc(t.get('source'))})</li>" for name, t in (cap.get("memory_terms") or {}).items()
                    if isinstance(t, dict))
    columns = [("concurrency", "num"), ("step ms", "num"), ("aggregate tok/s", "num"), ("per stream tok/s", "num"),
               ("bound", "text"), ("fits", "text")]
    # rounded as `roofline capacity` prints its curve
    rows = [[(str(p.get("concurrency")), p.get("concurrency")), (_fixed(p.get("step_ms"), 2), p.get("step_ms")),
             (_fixed(p.get("aggregate_tok_s"), 1), p.get("aggregate_tok_s")),
             (_fixed(p.get("per_stream_tok_s"), 2), p.get("per_stream_tok_s")),
             (p.get("bound"), p.get("bound")), ("yes" if p.get("fits") else "no", p.get("fits"))]
            for p in cap.get("curve") or [] if isinstance(p, dict)]
    return ('<section id="capacity"><h2>Capacity and concurrency</h2>'
            f'<p>{esc(cap.get("verdict"))}</p>'
            + (f'<p><b>SLO:</b> {esc((cap.get("slo") or {}).get("sentence"))}</p>'
               if isinstance(cap.get("slo"), dict) else "")
            + f'<p>KV cache size: <b>{esc(_count(kv.get("tokens")))}</b> tokens, maximum concurrency for '
            f'{esc(_count(kv.get("max_model_len")))} tokens per request: <b>{esc(_times(kv.get("max_concurrency")))}'
            '</b> (the two numbers vLLM logs at start-up).</p>'
            f'<ul class="facts">{terms}</ul><div class="chart">{figure}</div>'
            + sortable_table("capacity-table", columns, rows) + load_block(cap.get("load"), load_figure, "capacity")
            + "</section>")


def load_block(load: dict | None, figure, prefix: str) -> str:
    """A deployment under load (capacity's or preflight's "load"): the latency-against-rate chart, the answer, a
    row per run."""
    if not isinstance(load, dict):
        return ""
    columns = [("load", "text"), ("req/s done", "num"), ("TTFT p50 ms", "num"), ("TTFT p90 ms", "num"),
               ("ITL p50 ms", "num"), ("ITL p90 ms", "num"), ("E2E p50 ms", "num")]

    def ms(run, key, field):
        value = (run.get(key) or {}).get(field)
        return (_fixed(value, 1), value or 0)
    rows = [[(r.get("label"), r.get("label")), (_fixed(r.get("request_throughput"), 2), r.get("request_throughput")),
             ms(r, "ttft", "p50_ms"), ms(r, "ttft", "p90_ms"), ms(r, "itl", "p50_ms"), ms(r, "itl", "p90_ms"),
             ms(r, "e2e", "p50_ms")] for r in load.get("runs") or [] if isinstance(r, dict)]
    answer = (load.get("answer") or {}).get("sentence")
    saturation = load.get("saturation_rate")
    facts = [f"<li>one request alone: first token in <b>{esc(_fixed(load.get('first_token_alone_ms'), 1))} ms</b></li>"]
    if isinstance(saturation, (int, float)):
        facts.append(f"<li>saturation: <b>{esc(_fixed(saturation, 2))}</b> requests/s (above it the queue grows "
                     "without end)</li>")
    if answer:
        facts.append(f'<li id="{prefix}-load-answer"><b>{esc(answer)}</b></li>')
    return (f'<h3>Under load</h3><ul class="facts">{"".join(facts)}</ul><div class="chart">{figure}</div>'
            + (sortable_table(f"{prefix}-load-table", columns, rows) if rows else ""))


def preflight_section(data: ReportData, figure="") -> str:
    """`roofline preflight`: the deployment as written, what vLLM would refuse, and each flag's effect."""
    pre = data.preflight
    if not pre:
        return ""
    flags = " ".join(f.get("given", "") for f in pre["deployment"].get("flags") or [] if isinstance(f, dict))
    facts = [f"<li>flags: <code>{esc(flags or '(vLLM defaults)')}</code></li>"]
    facts += [f"<li><b>vLLM refuses:</b> {esc(r)}</li>" for r in pre.get("refusals") or []]
    if pre.get("error"):
        facts.append(f"<li><b>cannot be served:</b> {esc(pre['error'])}</li>")
    figures = pre.get("figures") or {}
    if figures:
        facts += [f"<li>1 stream: <b>{esc(_fixed(figures.get('tok_s_one_stream'), 1))}</b> tok/s; "
                  f"{esc(_count(figures.get('streams')))} streams: <b>{esc(_fixed(figures.get('tok_s_aggregate'), 1))}"
                  f"</b> tok/s ({esc(_fixed(figures.get('tok_s_per_stream'), 1))} each)</li>",
                  f"<li>KV cache: <b>{esc(_count(figures.get('kv_tokens')))}</b> tokens, maximum concurrency "
                  f"<b>{esc(_times(figures.get('max_concurrency')))}</b></li>"]
    columns = [("flag", "text"), ("1 stream", "num"), ("streams", "num"), ("requests that fit", "num"),
               ("note", "text")]

    def pct(value):
        return ("" if value is None else f"{100 * value:+.0f}%", value if value is not None else 0)
    rows = [[(e.get("given"), e.get("given")), pct((e.get("change") or {}).get("tok_s_one_stream")),
             pct((e.get("change") or {}).get("tok_s_aggregate")), pct((e.get("change") or {}).get("max_concurrency")),
             (e.get("note") or e.get("meaning"), e.get("note") or e.get("meaning"))]
            for e in pre.get("effects") or [] if isinstance(e, dict)]
    return ('<section id="preflight"><h2>Preflight of the deployment</h2>'
            f'<ul class="facts">{"".join(facts)}</ul>'
            + (sortable_table("preflight-table", columns, rows, wrap_columns={0}) if rows else "")
            + load_block(pre.get("load"), figure, "preflight") + "</section>")


def validation_section(data: ReportData) -> str:
    if not data.validation_rows:
        return ""
    rows = data.validation_rows
    summary = []
    for row in rows:
        measured, predicted = first_number(row, *MEASURED_KEYS), first_number(row, *PREDICTED_KEYS)
        if measured and predicted:
            verdict = first_text(row, "verdict_text", "verdict")
            summary.append(f"{row_label(row, 'run')}: measured {charts.format_tok_s(measured)} vs predicted "
                           f"{charts.format_tok_s(predicted)} tok/s ({100 * measured / predicted:.0f}%)"
                           + (f" — {verdict.replace('_', ' ')}" if verdict else ""))
    listing = "".join(f"<li>{esc(s)}</li>" for s in summary)
    return ('<section id="validation"><h2>Predicted vs measured (validate)</h2>'
            + (f"<ul>{listing}</ul>" if listing else "") + columns_table("validation-table", VALIDATION_COLUMNS, rows) + "</section>")


# ---------------------------------------------------------------- page

def render_page(data: ReportData, cdn: bool, embedded: dict) -> str:
    from roofline.predict.hardware import catalogue

    a = data.audit
    figures = {
        "chart-layers": charts.layer_bars(data),
        "chart-hierarchy": charts.hierarchy_treemap(data),
        "chart-roofline": charts.roofline_chart(data, catalogue()),
    }
    if data.plan_rows:
        figures["chart-plan"] = charts.plan_chart(data)
    if data.compare_rows:
        figures["chart-compare"] = charts.compare_chart(data)
    if data.doctor:
        figures["chart-doctor"] = charts.doctor_chart(data)
    if data.capacity:
        figures["chart-capacity"] = charts.capacity_chart(data)
        if isinstance(data.capacity.get("load"), dict):
            figures["chart-capacity-load"] = charts.load_chart(data.capacity["load"])
    if data.preflight and isinstance(data.preflight.get("load"), dict):
        figures["chart-preflight-load"] = charts.load_chart(data.preflight["load"])
    divs = {key: figure_div(fig, key) for key, fig in figures.items()}
    model = str(a.get("model", "model"))
    body = f"""
<header>
  <h1>{esc(model)}</h1>
  <p class="subtitle">roofline {esc(a.get('roofline_version', __version__))} · decode bytes per token and
  the bandwidth ceiling</p>
  {context_line(data)}
</header>
{headline(data)}
<section id="layers"><h2>Where the bytes go</h2>
  <p class="muted">Bytes read per decoded token in each decoder layer, stacked by storage format.
  <span class="swatch warning"></span> marks modules that stayed unquantized in a quantized model.</p>
  <div class="chart">{divs['chart-layers']}</div>
</section>
<section id="residuals"><h2>Unquantized residuals</h2>{residual_section(data)}{groups_section(data)}</section>
<section id="hierarchy"><h2>Module hierarchy</h2><div class="chart">{divs['chart-hierarchy']}</div></section>
<section id="roofline"><h2>Roofline</h2>
  <p class="muted">Single-stream decode is bandwidth bound: tok/s = bandwidth / bytes per token. Other
  hardware of the catalogue can be switched on in the legend.</p>
  <div class="chart">{divs['chart-roofline']}</div>
</section>
{plan_section(data, divs.get('chart-plan', ''))}
{compare_section(data, divs.get('chart-compare', ''))}
{doctor_section(data, divs.get('chart-doctor', ''))}
{capacity_section(data, divs.get('chart-capacity', ''), divs.get('chart-capacity-load', ''))}
{preflight_section(data, divs.get('chart-preflight-load', ''))}
{validation_section(data)}
{cuda_graph_section(data)}
{notes_section(data)}
<footer>Generated by roofline {esc(__version__)} from {esc(a.get('schema', 'audit JSON'))}.
The data behind this page is embedded in it (script #{DATA_ELEMENT_ID}).</footer>"""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(model)} — roofline report</title>
<style>{CSS}</style>
{plotly_loader(cdn)}
</head>
<body>
<main>{body}</main>
<script type="application/json" id="{DATA_ELEMENT_ID}">{script_json(_finite(embedded))}</script>
<script>{SORT_JS}</script>
</body>
</html>
"""


CSS = """
:root { --fg: #212529; --muted: #6c757d; --line: #dee2e6; --warn: #d9480f; --warn-bg: #fff4e6;
        --accent: #1c7ed6; --good: #2b8a3e; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #f8f9fa;
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 24px; }
h1 { font-size: 24px; margin: 0 0 2px; word-break: break-all; }
h2 { font-size: 18px; margin: 0 0 8px; }
section { background: white; border: 1px solid var(--line); border-radius: 8px; padding: 16px;
          margin: 16px 0; }
section.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 12px;
                background: none; border: 0; padding: 0; }
.card { background: white; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; }
.card-title { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card-value { font-size: 24px; font-weight: 600; margin: 2px 0; word-break: break-word; }
.card-detail { color: var(--muted); font-size: 12px; overflow-wrap: anywhere; }
code.command { display: block; margin-top: 4px; font-size: 11px; }
code.command .word { white-space: nowrap; }
code.command .path { overflow-wrap: anywhere; }
td.wrap div.wrap { min-width: 20em; }
td.wrap code.command { margin-top: 0; }
table.kv .source { color: var(--muted); font-size: 12px; margin-top: 2px; }
.card.warning { border-color: var(--warn); background: var(--warn-bg); }
.card.warning .card-value { color: var(--warn); }
.card.accent .card-value { color: var(--accent); }
.card.good { border-color: var(--good); grid-column: span 2; }
.card.good .card-value { color: var(--good); font-size: 18px; }
.subtitle, .muted { color: var(--muted); }
dl.context { display: flex; flex-wrap: wrap; gap: 4px 20px; margin: 8px 0 0; }
dl.context div { display: flex; gap: 6px; }
dl.context dt { color: var(--muted); }
dl.context dd { margin: 0; }
.table-wrap { overflow-x: auto; }
.table-wrap td.num { white-space: nowrap; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th.num, td.num { text-align: right; }
th button { all: unset; cursor: pointer; font-weight: 600; }
th button:focus-visible { outline: 2px solid var(--accent); }
th[aria-sort=ascending] button::after { content: " ▲"; }
th[aria-sort=descending] button::after { content: " ▼"; }
tr.residual td:first-child { border-left: 4px solid var(--warn); }
tr.residual { background: var(--warn-bg); }
table.kv th { width: 40%; color: var(--muted); font-weight: normal; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: middle; }
.swatch.warning { background: var(--warn); }
details summary { cursor: pointer; color: var(--accent); margin-top: 8px; }
ul.notes li.disagreement { color: var(--warn); }
footer { color: var(--muted); font-size: 12px; margin: 24px 0; }
"""

# Click a header to sort by it: numbers by the cell's data-value, text by its characters;
# a second click reverses. No libraries.
SORT_JS = """
(function () {
  function key(cell) {
    var raw = cell.getAttribute('data-value');
    if (raw !== null && raw !== '' && !isNaN(Number(raw))) return Number(raw);
    return cell.textContent.trim().toLowerCase();
  }
  function sort(table, index, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var numeric = th.classList.contains('num');
    var current = th.getAttribute('aria-sort');
    var descending = current ? current === 'ascending' : numeric;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
    rows.sort(function (a, b) {
      var x = key(a.cells[index]), y = key(b.cells[index]);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      var order = x < y ? -1 : x > y ? 1 : 0;
      return descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }
  Array.prototype.forEach.call(document.querySelectorAll('table.sortable'), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      th.querySelector('button').addEventListener('click', function () { sort(table, index, th); });
    });
  });
})();
"""

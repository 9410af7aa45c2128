"""The report's plotly figures. Every string that came from the model (module names, model id,
plan and validation labels) goes through `text()`: plotly renders labels as its own small HTML
dialect, so escaping makes a name show as the characters it is, never as markup. (The figure JSON
itself is safe inside <script>: plotly's encoder writes <, > and / as \\u escapes.)"""
from __future__ import annotations

import html
import math

from roofline.units import human_bytes

from .hierarchy import treemap_nodes
from .view import (
    EXPECTED_KEYS,
    ReportData,
    first_number,
    first_text,
    is_plain,
    layer_buckets,
    row_label,
    series_key,
)

WARNING = "#d9480f"  # BF16 residuals: the bytes a quantized model still reads at 2 bytes/weight
PLAIN = "#adb5bd"  # unquantized, and expected to be (norms, embeddings of a plain model)
FORMAT_COLOURS = {
    "fp8": "#1c7ed6", "fp8-block": "#4dabf7", "int8": "#5c7cfa",
    "nvfp4-w4a4": "#2b8a3e", "nvfp4-w4a16": "#51cf66", "mxfp4": "#12b886",
    "int4": "#7048e8", "int4-awq": "#9775fa", "int4-gptq": "#be4bdb",
}
EXTRA_COLOURS = ("#e64980", "#fab005", "#868e96", "#15aabf", "#82c91e")
KV_COLOUR = "#495057"
STATE_COLOUR = "#868e96"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"


def text(value) -> str:
    # quotes stay as they are: with < escaped no tag can open, and plotly's label renderer
    # decodes &lt; &gt; &amp; and numeric entities but shows &quot; literally
    return html.escape(str(value), quote=False)


def format_colour(fmt: str, residual: bool) -> str:
    if residual:
        return WARNING
    if is_plain(fmt):
        return PLAIN
    if fmt in FORMAT_COLOURS:
        return FORMAT_COLOURS[fmt]
    return EXTRA_COLOURS[sum(map(ord, fmt)) % len(EXTRA_COLOURS)]


def _layout(fig, title: str, height: int, **kwargs) -> None:
    fig.update_layout(title=dict(text=title, x=0, xanchor="left", font=dict(size=15)), height=height,
                      margin=dict(l=60, r=20, t=50, b=50), font=dict(family=FONT, size=12),
                      plot_bgcolor="white", paper_bgcolor="white", **kwargs)


# a byte axis reads "3.5GB", never plotly's default "3.5B" (billions, which reads as bytes)
BYTE_AXIS = dict(tickformat="~s", ticksuffix="B")
# the legend beside the plot, never over the x labels under it (a long last label, lm_head, was hidden)
LEGEND_BESIDE = dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top")


def format_tok_s(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


# ---------------------------------------------------------------- per-layer bytes

def layer_bars(data: ReportData):
    """Bytes read per token in each decoder layer (and outside them), stacked by format, with
    residuals in the warning colour; KV cache and recurrent state as bars of their own."""
    import plotly.graph_objects as go

    buckets = layer_buckets(data.modules)
    series: dict[tuple[str, bool], dict[str, list]] = {}
    for module in data.modules:
        if module.bytes_per_token <= 0:
            continue
        series.setdefault(series_key(module), {}).setdefault(module.bucket, []).append(module)
    # the heaviest series at the bottom of each stack
    order = sorted(series, key=lambda k: -sum(m.bytes_per_token for ms in series[k].values() for m in ms))
    fig = go.Figure()
    for key in order:
        fmt, residual = key
        by_bucket = series[key]
        example = next(iter(by_bucket.values()))[0]
        name = f"{example.format_label} (stayed unquantized)" if residual else example.format_label
        xs = [b for b in buckets if b in by_bucket]
        ys = [sum(m.bytes_per_token for m in by_bucket[b]) for b in xs]
        hover = [_bucket_hover(b, name, by_bucket[b]) for b in xs]
        fig.add_bar(x=xs, y=ys, name=text(name), marker_color=format_colour(fmt, residual),
                    customdata=hover, hovertemplate="%{customdata}<extra></extra>")
    audit = data.audit
    extra = [("KV cache", audit.get("kv_bytes_per_token"), KV_COLOUR,
              f"KV cache ({audit.get('scenario', {}).get('kv_cache_dtype_resolved', '')}, "
              f"context {audit.get('scenario', {}).get('context', '?')})"),
             ("state", audit.get("state_bytes_per_token"), STATE_COLOUR, "recurrent state (read + written)")]
    for label, value, colour, long_name in extra:
        if value:
            fig.add_bar(x=[label], y=[value], name=text(long_name), marker_color=colour,
                        customdata=[f"{text(long_name)}<br>{human_bytes(value)} per token"],
                        hovertemplate="%{customdata}<extra></extra>")
            buckets.append(label)
    _layout(fig, "Bytes read per token, by layer and format", 420, barmode="stack",
            legend=LEGEND_BESIDE, hovermode="closest")
    fig.update_xaxes(categoryorder="array", categoryarray=buckets, type="category", automargin=True)
    fig.update_yaxes(title_text="bytes / token", gridcolor="#eee", **BYTE_AXIS)
    return fig


def _bucket_hover(bucket: str, series_name: str, modules: list, limit: int = 8) -> str:
    modules = sorted(modules, key=lambda m: -m.bytes_per_token)
    total = sum(m.bytes_per_token for m in modules)
    lines = [f"<b>{text(bucket)}</b> · {text(series_name)}: {human_bytes(total)}"]
    lines += [f"{text(m.label)}  {human_bytes(m.bytes_per_token)}" for m in modules[:limit]]
    if len(modules) > limit:
        lines.append(f"… {len(modules) - limit} more")
    return "<br>".join(lines)


# ---------------------------------------------------------------- hierarchy

def hierarchy_treemap(data: ReportData):
    import plotly.graph_objects as go

    total = float(data.audit.get("weight_bytes_per_token") or 0) or 1.0
    nodes = treemap_nodes(data.modules, root_label=str(data.audit.get("model", "model")))
    colours, hover = [], []
    for node in nodes:
        module = node.module
        if module is None:
            colours.append("#f1f3f5")
            hover.append(f"<b>{text(node.id if node.parent else node.label)}</b><br>"
                         f"{human_bytes(node.value)} per token ({100 * node.value / total:.1f}% of weights read)")
        else:
            colours.append(format_colour(module.format, module.residual))
            flag = " — stayed unquantized" if module.residual else ""
            hover.append(f"<b>{text(module.name)}</b><br>{text(module.format_label)}{flag} · {text(module.role)}"
                         f"<br>{human_bytes(module.bytes_per_token)} per token "
                         f"({100 * module.bytes_per_token / total:.1f}% of weights read)"
                         f"<br>{human_bytes(module.bytes)} resident")
    fig = go.Figure(go.Treemap(
        ids=[text(n.id) for n in nodes], parents=[text(n.parent) for n in nodes],
        labels=[text(n.label) for n in nodes], values=[n.own for n in nodes], branchvalues="remainder",
        marker=dict(colors=colours, line=dict(width=1, color="white")), maxdepth=-1,
        customdata=hover, hovertemplate="%{customdata}<extra></extra>", textinfo="label",
        pathbar=dict(visible=True),
    ))
    _layout(fig, "Module hierarchy, sized by weight bytes read per token (click to zoom)", 560)
    fig.update_layout(margin=dict(l=10, r=10, t=50, b=10))
    return fig


# ---------------------------------------------------------------- roofline

def roofline_chart(data: ReportData, catalogue: dict | None = None):
    """tok/s against bytes per token, log-log: each bandwidth is a straight line; the audit's
    prediction, the plan's formats and measured runs are points."""
    import plotly.graph_objects as go

    audit = data.audit
    hardware = audit.get("hardware") or {}
    bandwidth = float(hardware.get("bandwidth_gbps") or 0)
    bytes_per_token = float(audit.get("bytes_per_token") or 0)
    points = []  # (trace name, x, y, labels, symbol, colour)
    points.append(("this audit: ceiling", [bytes_per_token], [audit.get("ceiling_tok_s")],
                   [str(audit.get("model", ""))], "diamond", "#212529"))
    points.append(("this audit: expected", [bytes_per_token], [audit.get("expected_tok_s")],
                   [str(audit.get("model", ""))], "circle", "#1c7ed6"))
    cuda_graph = data.cuda_graph
    if cuda_graph and first_number(cuda_graph, "eager_tok_s") is not None:
        points.append(("this audit: eager (no CUDA graphs)", [bytes_per_token],
                       [first_number(cuda_graph, "eager_tok_s")], ["--enforce-eager"], "circle-open", "#1c7ed6"))
    plan_x, plan_y, plan_labels = [], [], []
    for n, row in enumerate(data.plan_rows):
        x = first_number(row, "bytes_per_token")
        y = first_number(row, *EXPECTED_KEYS, "ceiling_tok_s")
        if x and y:
            plan_x.append(x), plan_y.append(y), plan_labels.append(row_label(row, f"plan row {n + 1}"))
    if plan_x:
        points.append(("plan: expected per format", plan_x, plan_y, plan_labels, "square", "#2b8a3e"))
    measured_x, measured_y, measured_labels = [], [], []
    for n, row in enumerate(data.validation_rows):
        y = first_number(row, "measured_tok_s", "measured", "tok_s", "decode_tok_s")
        x = first_number(row, "bytes_per_token") or bytes_per_token
        if y and x:
            measured_x.append(x), measured_y.append(y), measured_labels.append(row_label(row, f"run {n + 1}"))
    if measured_x:
        points.append(("measured", measured_x, measured_y, measured_labels, "star", WARNING))

    xs = [x for p in points for x in p[1] if x]
    lo, hi = min(xs) / LOG_PAD, max(xs) * LOG_PAD
    fig = go.Figure()
    line_x = [lo, hi]
    if bandwidth:
        fig.add_scatter(x=line_x, y=[bandwidth * 1e9 / x for x in line_x], mode="lines",
                        name=text(f"{hardware.get('name', 'hardware')} ceiling, {bandwidth:g} GB/s"),
                        line=dict(color="#212529", width=2.5), hoverinfo="skip")
    curve_x = [lo * (hi / lo) ** (i / 40) for i in range(41)]
    for name, curve, dash in _step_curves(audit, bytes_per_token):
        fig.add_scatter(x=curve_x, y=[curve(x) for x in curve_x], mode="lines", name=text(name),
                        line=dict(color="#1c7ed6", width=1.5, dash=dash), hoverinfo="skip")
    for name, x, y, labels, symbol, colour in points:
        hover = [f"<b>{text(label)}</b><br>{human_bytes(xv)} per token<br>{format_tok_s(yv)} tok/s"
                 for label, xv, yv in zip(labels, x, y)]
        fig.add_scatter(x=x, y=y, mode="markers", name=text(name), customdata=hover,
                        hovertemplate="%{customdata}<extra></extra>",
                        marker=dict(symbol=symbol, size=12, color=colour, line=dict(width=1, color="white")))
    # the rest of the catalogue last in the legend, off until clicked
    for key, other in (catalogue or {}).items():
        if key == hardware.get("key"):
            continue
        fig.add_scatter(x=line_x, y=[other.bandwidth_gbps * 1e9 / x for x in line_x], mode="lines",
                        name=text(f"{other.name}, {other.bandwidth_gbps:g} GB/s"), visible="legendonly",
                        line=dict(width=1), hoverinfo="skip")
    _layout(fig, "Roofline: decode tok/s against bytes read per token", 460, hovermode="closest",
            legend=dict(font=dict(size=11)))
    x_ticks = log_ticks(lo, hi)
    fig.update_xaxes(type="log", title_text="bytes read per token", gridcolor="#eee", range=[math.log10(lo), math.log10(hi)],
                     tickvals=x_ticks, ticktext=[human_bytes(v).replace(".00 ", " ") for v in x_ticks])
    # the axis spans the points (ceiling, expected, eager, plan, measured) with room for a marker's
    # size at either end; the lines run on past it
    fig.update_yaxes(title_text="tok/s (single stream)", gridcolor="#eee",
                     **tok_s_log_axis([y for p in points for y in p[2] if y]))
    return fig


LOG_PAD = 1.35  # a log axis runs this factor past its outermost points, so no marker is cut in half


def tok_s_log_axis(values: list[float]) -> dict:
    """A log tok/s axis over `values`, LOG_PAD past either end, ticks labelled as whole numbers."""
    lo, hi = min(values) / LOG_PAD, max(values) * LOG_PAD
    ticks = log_ticks(lo, hi)
    return dict(type="log", range=[math.log10(lo), math.log10(hi)], tickvals=ticks,
                ticktext=[f"{v:,.0f}" if v >= 1 else f"{v:.2g}" for v in ticks])


def _step_curves(audit: dict, bytes_per_token: float):
    """The step model's expected tok/s as a function of bytes per token, through the audit's own
    points: the step's memory time scaled with the bytes plus its other time (launches, communication),
    times the tokens a step emits (more than one under speculation), with CUDA graphs and, where the
    audit prices it, eager (its own launch time, through its own point). (name, f, dash)."""
    breakdown = (audit.get("step") or {}).get("breakdown") or {}
    memory_ms, step_ms = first_number(breakdown, "memory_ms"), first_number(breakdown, "step_ms")
    expected = first_number(audit, "expected_tok_s")
    if not (memory_ms and step_ms and bytes_per_token and expected):
        return []
    tokens_per_step = expected * step_ms / 1e3  # 1 without speculation; accepted drafts + 1 with it

    def curve(other_ms: float):
        return lambda x: tokens_per_step * 1e3 / (memory_ms * x / bytes_per_token + other_ms)

    other = step_ms - memory_ms
    per_step = "" if abs(tokens_per_step - 1) < 1e-6 else f", {tokens_per_step:.2f} tokens per step"
    out = [(f"expected: memory {memory_ms:.1f} ms at this point, scaling with bytes, + {other:.2f} ms per step "
            f"(launches, CUDA graphs{per_step})", curve(other), "dash")]
    eager = first_number(audit.get("cuda_graph") or {}, "eager_tok_s")
    if eager:
        other_eager = tokens_per_step * 1e3 / eager - memory_ms
        if other_eager > 0:
            out.append((f"eager: + {other_eager:.2f} ms of launches per step", curve(other_eager), "dot"))
    return out


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks between lo and hi, so that a log axis spanning less than a decade still
    labels its ticks with whole numbers instead of plotly's lone leading digits."""
    for mantissas in ((1, 2, 5), (1, 1.5, 2, 3, 5, 7)):  # the finer set when the span holds few ticks
        ticks = []
        for exponent in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
            for mantissa in mantissas:
                value = mantissa * 10.0 ** exponent
                if lo <= value <= hi:
                    ticks.append(value)
        if len(ticks) >= 3:
            break
    return ticks


# ---------------------------------------------------------------- plan

def plan_chart(data: ReportData):
    """Ceiling and expected tok/s of each simulated format, best first."""
    import plotly.graph_objects as go

    labels, ceilings, expected = [], [], []
    for n, row in enumerate(data.plan_rows):
        # one category per row of the table: the rank and the backend keep two rows of one format
        # and recipe (two NVFP4 W4A4 backends) from stacking into one bar
        backend = first_text(row, "backend")
        labels.append(text(f"#{row.get('rank', n + 1)} {row_label(row, f'row {n + 1}')}"
                           + (f" · {backend}" if backend else "")))
        ceilings.append(first_number(row, "ceiling_tok_s"))
        expected.append(first_number(row, *EXPECTED_KEYS))
    fig = go.Figure()
    fig.add_bar(y=labels, x=ceilings, orientation="h", name="ceiling", marker_color="#ced4da",
                hovertemplate="%{y}: ceiling %{x:,.1f} tok/s<extra></extra>")
    fig.add_bar(y=labels, x=expected, orientation="h", name="expected", marker_color="#2b8a3e",
                hovertemplate="%{y}: expected %{x:,.1f} tok/s<extra></extra>")
    _layout(fig, "Formats compared (plan)", max(260, 60 + 42 * len(labels)), barmode="group",
            legend=LEGEND_BESIDE)
    fig.update_yaxes(autorange="reversed", type="category", automargin=True)
    fig.update_xaxes(title_text="tok/s", gridcolor="#eee")
    return fig


def compare_chart(data: ReportData):
    """Bytes read per token by role, grouped per checkpoint (ranked order)."""
    import plotly.graph_objects as go

    labels = [text(first_text(row, "name", "input", "model") or f"row {n + 1}") for n, row in enumerate(data.compare_rows)]
    roles: list[str] = []
    for row in data.compare_rows:
        for role in (row.get("bytes_per_token_by_role") or {}):
            if role not in roles:
                roles.append(role)
    fig = go.Figure()
    for role in roles:
        values = [first_number(row.get("bytes_per_token_by_role") or {}, role) or 0.0 for row in data.compare_rows]
        fig.add_bar(x=labels, y=values, name=text(role),
                    customdata=[human_bytes(v) for v in values],
                    hovertemplate="%{x}<br>" + text(role) + ": %{customdata} per token<extra></extra>")
    _layout(fig, "Bytes read per token by role, per checkpoint", 460, barmode="group", legend=LEGEND_BESIDE)
    fig.update_yaxes(title_text="bytes / token", gridcolor="#eee", **BYTE_AXIS)
    fig.update_xaxes(type="category", automargin=True)
    return fig


def doctor_chart(data: ReportData):
    """The doctor's walk from this configuration to the best one: a waterfall of the configuration
    causes' gains, with the measured figure beside it."""
    import plotly.graph_objects as go

    doc = data.doctor or {}
    causes = [c for c in doc.get("causes") or [] if isinstance(c, dict) and c.get("kind") == "configuration"]
    predicted = first_number(doc, "predicted_tok_s") or 0.0
    x = ["this configuration"] + [text(c.get("id")) for c in causes] + ["best configuration"]
    y = [predicted] + [first_number(c, "expected_gain_tok_s") or 0.0 for c in causes] + [0.0]
    fig = go.Figure(go.Waterfall(x=x, y=y, measure=["absolute"] + ["relative"] * len(causes) + ["total"],
                                 hovertemplate="%{x}: %{y:.1f} tok/s<extra></extra>", name="predicted"))
    measured = first_number(doc, "measured_tok_s")
    if measured is not None:
        fig.add_scatter(x=[x[0]], y=[measured], mode="markers", marker=dict(size=14, symbol="diamond"),
                        name="measured", hovertemplate="measured: %{y:.1f} tok/s<extra></extra>")
    _layout(fig, "Single-stream tok/s: this configuration, each fix, the best configuration", 420)
    fig.update_yaxes(title_text="tok/s", gridcolor="#eee")
    return fig


def capacity_chart(data: ReportData):
    """Aggregate and per-stream tok/s against concurrency, the single-stream ceiling, the knee marked."""
    import plotly.graph_objects as go

    cap = data.capacity or {}
    points = [p for p in cap.get("curve") or [] if isinstance(p, dict)]
    x = [first_number(p, "concurrency") for p in points]
    fig = go.Figure()
    fig.add_scatter(x=x, y=[first_number(p, "aggregate_tok_s") for p in points], mode="lines+markers",
                    name="aggregate tok/s", customdata=[text(p.get("bound")) for p in points],
                    hovertemplate="concurrency %{x}: %{y:.1f} tok/s (%{customdata}-bound)<extra></extra>")
    fig.add_scatter(x=x, y=[first_number(p, "per_stream_tok_s") for p in points], mode="lines+markers",
                    name="per stream tok/s", hovertemplate="concurrency %{x}: %{y:.1f} tok/s per stream<extra></extra>")
    beyond = [p for p in points if p.get("fits") is False]
    if beyond:  # priced, but the KV cache (or max_num_seqs) does not admit that many requests at once
        fig.add_scatter(x=[first_number(p, "concurrency") for p in beyond],
                        y=[first_number(p, "aggregate_tok_s") for p in beyond], mode="markers", name="does not fit",
                        marker=dict(symbol="x-thin-open", size=14, color=WARNING, line=dict(width=2)),
                        hovertemplate="concurrency %{x}: does not fit the KV cache<extra></extra>")
    ceiling = first_number(data.audit, "ceiling_tok_s")
    xs = [v for v in x if v]
    if ceiling and xs:
        # a trace, not an hline annotation: on a log axis an annotation's y is read as a power of ten
        fig.add_scatter(x=[min(xs), max(xs)], y=[ceiling, ceiling], mode="lines", name="single-stream ceiling",
                        line=dict(color="#212529", dash="dot", width=1.5), hoverinfo="skip")
    knee = first_number(cap, "knee_concurrency")
    if knee:
        fig.add_vline(x=knee, line_dash="dash", line_color="#868e96")
        fig.add_annotation(x=math.log10(knee), y=1, xref="x", yref="paper", yanchor="bottom", showarrow=False,
                           text="knee: compute-bound from here")
    _layout(fig, "Decode tok/s against concurrency", 420)
    fig.update_xaxes(type="log", title_text="concurrent requests")
    ys = [v for trace in fig.data for v in trace.y if v]
    if ys:
        fig.update_yaxes(**tok_s_log_axis(ys))
    if xs:
        lo, hi = min(xs) / LOG_PAD, max(xs) * LOG_PAD
        ticks = [v for v in (2 ** n for n in range(0, 20)) if lo <= v <= hi]  # concurrency doubles
        fig.update_xaxes(range=[math.log10(lo), math.log10(hi)], tickvals=ticks, ticktext=[str(v) for v in ticks])
    fig.update_yaxes(type="log", title_text="tok/s", gridcolor="#eee")
    return fig


def load_chart(load: dict):
    """First-token and per-token latency against the request rate (the load model's runs from a trickle to past
    saturation): the saturation rate, the TTFT and decode targets and the highest rate keeping them marked."""
    import plotly.graph_objects as go

    points = [p for p in load.get("curve") or [] if isinstance(p, dict) and first_number(p, "rate")]
    fig = go.Figure()
    x = [first_number(p, "rate") for p in points]
    for key, field, name in (("ttft", "p50_ms", "TTFT p50"), ("ttft", "p90_ms", "TTFT p90"),
                             ("tpot", "p90_ms", "time per output token p90"), ("itl", "p50_ms", "inter-token p50")):
        ys = [first_number(p.get(key) or {}, field) for p in points]
        fig.add_scatter(x=x, y=ys, mode="lines+markers", name=name,
                        hovertemplate="%{x:.2f} requests/s: %{y:.1f} ms<extra>" + name + "</extra>")
    saturation = first_number(load, "saturation_rate")
    if saturation:
        fig.add_vline(x=saturation, line_dash="dash", line_color="#868e96")
        fig.add_annotation(x=saturation, y=1, xref="x", yref="paper", yanchor="bottom", showarrow=False,
                           text="saturation: the queue grows without end")
    target = first_number((load.get("targets") or {}), "ttft_p90_ms")
    if target and x:
        fig.add_scatter(x=[min(x), max(x)], y=[target, target], mode="lines", name="TTFT p90 target",
                        line=dict(color=WARNING, dash="dot", width=1.5), hoverinfo="skip")
    min_tok_s = first_number((load.get("targets") or {}), "min_tok_s")
    if min_tok_s and x:  # the decode target as the time per output token it allows, beside its p90
        fig.add_scatter(x=[min(x), max(x)], y=[1e3 / min_tok_s] * 2, mode="lines",
                        name=f"TPOT p90 target ({min_tok_s:g} tok/s)",
                        line=dict(color="#2b8a3e", dash="dot", width=1.5), hoverinfo="skip")
    answer = first_number((load.get("answer") or {}), "rate")
    if answer:
        fig.add_vline(x=answer, line_dash="dot", line_color=WARNING)
        fig.add_annotation(x=answer, y=0.97, xref="x", yref="paper", yanchor="top", xanchor="left", showarrow=False,
                           text=f" {answer:.2f} req/s keep the targets", font=dict(color=WARNING))
    _layout(fig, "Latency against the request rate", 420)
    fig.update_xaxes(title_text="requests per second (Poisson arrivals)")
    ys = [v for trace in fig.data for v in trace.y if v]
    fig.update_yaxes(type="log", title_text="milliseconds", gridcolor="#eee")
    if ys:
        fig.update_yaxes(range=[math.log10(min(ys) / LOG_PAD), math.log10(max(ys) * LOG_PAD)])
    return fig

"""The HTML report, without a browser: what the page holds, escaping, sections, the CLI.
(tests/test_report_browser.py opens the pages in headless Chromium.)"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from report_inputs import audit_json, checkpoint_factory, plan_json, validation_from

from roofline.errors import RooflineError
from roofline.reports import (
    add_to_report,
    read_report_data,
    render_report,
    write_audit_report,
)
from roofline.reports.hierarchy import ROOT_ID, treemap_nodes
from roofline.reports.view import module_views

PWNED = "<script>window.__pwned=1</script>"


@pytest.fixture
def checkpoint_of(request, tmp_path_factory):
    return checkpoint_factory(request, tmp_path_factory)


@pytest.fixture
def next_audit(checkpoint_of):
    return audit_json(checkpoint_of("qwen3_next"))


@pytest.fixture
def next_plan(checkpoint_of):
    return plan_json(checkpoint_of("qwen3_next"))


@pytest.fixture
def quantized_audit(checkpoint_of):
    return audit_json(checkpoint_of("ct_nvfp4a16_next"))


def chart_ids(page: str) -> list[str]:
    return re.findall(r'<div id="(chart-[a-z]+)" class="plotly-graph-div"', page)


def test_inline_page_is_self_contained(next_audit):
    page = render_report(next_audit)
    assert chart_ids(page) == ["chart-layers", "chart-hierarchy", "chart-roofline"]
    # plotly.js inlined exactly once, and nothing fetched from elsewhere
    assert page.count("Plotly.newPlot(") == 3
    from plotly.offline import get_plotlyjs

    bundle = get_plotlyjs()
    assert page.count(bundle[:300]) == 1 and bundle in page
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', page)
    assert "plot.ly" not in page.split("<main>")[1]


def test_cdn_page_loads_plotly_from_its_cdn(next_audit):
    page = render_report(next_audit, cdn=True)
    tags = re.findall(r'<script charset="utf-8" src="([^"]+)" integrity="sha256-[A-Za-z0-9+/=]+"', page)
    assert len(tags) == 1 and tags[0].startswith("https://cdn.plot.ly/plotly-")
    assert len(page) < len(render_report(next_audit)) / 10


def test_sections_follow_the_data(next_audit, next_plan):
    # a real audit carries the CUDA-graph estimate; without it, its section must go too
    next_audit = {k: v for k, v in next_audit.items() if k != "cuda_graph"}
    page = render_report(next_audit)
    for absent in ('id="plan"', 'id="validation"', 'id="cuda-graph"', "Top recommendation", "Measured"):
        assert absent not in page
    validation = validation_from(next_audit)
    page = render_report(next_audit, next_plan, validation)
    assert chart_ids(page) == ["chart-layers", "chart-hierarchy", "chart-roofline", "chart-plan"]
    assert 'id="plan-table"' in page and 'id="validation-table"' in page
    top = next_plan["top_pick"]
    assert "Top recommendation" in page and f"{top['format_label']} · {top['recipe']}" in page
    # the ranked plan rows as the terminal's table shows them, with the line that serves each; no
    # field names, no raw JSON
    header = re.search(r'<table class="sortable" id="plan-table"><thead>(.*?)</thead>', page).group(1)
    shown = re.findall(r"<button[^>]*>([^<]+)</button>", header)
    assert shown == ["#", "tie", "format", "recipe", "vLLM backend", "1-stream tok/s", "total tok/s", "ceiling tok/s",
                     "bytes/token", "resident", "fits", "serve with"]
    body = re.search(r'<table class="sortable" id="plan-table">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    assert body.count("<tr") == len(next_plan["recommendations"])


def test_cuda_graph_section_when_the_audit_has_one(next_audit):
    next_audit["cuda_graph"] = {"graph_tok_s": 50.0, "eager_tok_s": 20.0, "benefit": 2.5,
                                "kernels_per_token": 700, "advice": "keep CUDA graphs on"}
    page = render_report(next_audit)
    assert 'id="cuda-graph"' in page and "×2.50" in page and "keep CUDA graphs on" in page


def test_model_derived_strings_are_escaped(next_audit, next_plan):
    next_audit["model"] = 'org/"quoted" ' + PWNED
    next_audit["modules"][0]["name"] = "model.layers.0." + PWNED
    next_audit["groups"][0]["label"] = "<img src=x onerror=window.__pwned=2>"
    next_audit["notes"].append("</script>" + PWNED)
    plan = next_plan
    plan["recommendations"][0]["recipe"] = PWNED
    page = render_report(next_audit, plan, [{"label": PWNED, "measured_tok_s": 1.0}])
    assert "__pwned" in page
    # every occurrence sits in escaped HTML text or in \\u-escaped JSON
    assert "<script>window.__pwned" not in page
    assert "<img src=x" not in page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
    assert "&quot;quoted&quot;" in page
    # the only </script> are the page's own: one per chart, plotly.js, config, data, sort
    assert page.count("</script>") == len(chart_ids(page)) + 4


def test_embedded_data_round_trips_and_plan_validate_add_sections(next_audit, next_plan, tmp_path):
    path = tmp_path / "report.html"
    size = write_audit_report(next_audit, path)
    assert size == path.stat().st_size
    assert read_report_data(path)["audit"] == next_audit
    add_to_report(path, plan=next_plan)
    add_to_report(path, validation=validation_from(next_audit, 0.7))
    add_to_report(path, validation=validation_from(next_audit, 0.6))
    data = read_report_data(path)
    assert data["plan"] == next_plan
    assert [round(r["measured_tok_s"]) for r in data["validation"]] == \
        [round(next_audit["ceiling_tok_s"] * s) for s in (0.7, 0.6)]
    page = path.read_text()
    assert 'id="plan"' in page and 'id="validation"' in page


def test_treemap_tree_matches_the_modules(quantized_audit):
    modules = module_views(quantized_audit)
    nodes = treemap_nodes(modules, "m")
    assert nodes[0].id == ROOT_ID and sum(1 for n in nodes if not n.parent) == 1
    ids = {n.id for n in nodes}
    assert all(n.parent in ids for n in nodes[1:])
    leaves = [n for n in nodes if n.module is not None]
    assert sorted(n.module.name for n in leaves) == sorted(m.name for m in modules)
    assert sum(n.own for n in leaves) == pytest.approx(quantized_audit["weight_bytes_per_token"])
    assert nodes[0].value == pytest.approx(quantized_audit["weight_bytes_per_token"])
    # Qwen3-Next's linear_attn holds tensors (A_log, dt_bias) and sub-modules: its own leaf
    own = [n for n in leaves if n.id.endswith("linear_attn.(own tensors)")]
    assert own and all(n.module.name.endswith("linear_attn") for n in own)


def test_residuals_are_flagged_per_module(quantized_audit):
    modules = module_views(quantized_audit)
    residual_kinds = {g["label"] for g in quantized_audit["residuals"]}
    assert {"linear_attn.in_proj_qkvz", "lm_head"} <= residual_kinds
    for m in modules:
        assert m.residual == (m.label in residual_kinds and m.format == "bf16"), m.name
    page = render_report(quantized_audit)
    assert page.count('<tr class="residual">') == 2 * len(quantized_audit["residuals"])  # both tables
    assert "(stayed unquantized)" in page


def test_cli_audit_html(checkpoint_of, tmp_path):
    path = checkpoint_of("qwen3_next")
    out = tmp_path / "out.html"
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", str(path), "--html", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"report: {out}" in proc.stdout
    assert read_report_data(out)["audit"]["model"] == json.loads(json.dumps(path.name))
    print(f"\nreport size, plotly inlined: {out.stat().st_size / 1e6:.2f} MB")


def test_cli_plan_and_validate_add_their_sections(checkpoint_of, tmp_path):
    """audit --html, then plan --html and validate --html on the same file: one report, three
    sections; a file that is not a report is refused, not overwritten."""
    path = checkpoint_of("ct_nvfp4a16_next")
    out = tmp_path / "report.html"

    def cli(*args):
        proc = subprocess.run([sys.executable, "-m", "roofline.cli", *args], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc

    cli("audit", str(path), "--html", str(out))
    cli("plan", str(path), "--html", str(out))
    cli("validate", str(path), "--measured", "1000", "--no-record", "--html", str(out))
    data = read_report_data(out)
    assert data["plan"]["schema"].startswith("roofline.plan") and data["plan"]["recommendations"]
    assert [row["measured_tok_s"] for row in data["validation"]] == [1000]
    page = out.read_text()
    assert 'id="plan"' in page and 'id="validation"' in page and "Top recommendation" in page
    other = tmp_path / "notes.html"
    other.write_text("<html>mine</html>")
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "plan", str(path), "--html", str(other)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "not a roofline HTML report" in proc.stderr
    assert other.read_text() == "<html>mine</html>"


def test_bad_input_is_one_clear_error(next_audit, next_plan, tmp_path):
    with pytest.raises(RooflineError, match="bytes_per_token"):
        render_report({"model": "x"})
    with pytest.raises(RooflineError, match="does not exist"):
        write_audit_report(next_audit, tmp_path / "missing" / "out.html")
    with pytest.raises(RooflineError, match="every row must be a JSON object"):
        render_report(next_audit, plan_json=[1, 2])
    (tmp_path / "plain.html").write_text("<html></html>")
    with pytest.raises(RooflineError, match="not a roofline HTML report"):
        add_to_report(tmp_path / "plain.html", plan=next_plan)


def test_roofline_curves_pass_through_their_points_under_speculation():
    """#45.13: the expected and eager curves of the roofline chart go through the expected and eager points of
    the audit they draw, also where a step emits several tokens (MTP drafts accepted)."""
    from pathlib import Path

    from inprocess import run

    from reports.charts import _step_curves

    model = str(Path(__file__).resolve().parent / "reference_configs" / "nvidia__Qwen3.6-35B-A3B-NVFP4")
    for extra in ([], ["--speculative", "2"]):
        ran = run("audit", model, "--config-only", "--hardware", "gb10", "--json", *extra)
        assert ran.returncode == 0, ran.err
        audit = json.loads(ran.out)
        curves = {name.split(":")[0]: f for name, f, _ in _step_curves(audit, audit["bytes_per_token"])}
        assert curves["expected"](audit["bytes_per_token"]) == pytest.approx(audit["expected_tok_s"], rel=1e-9)
        assert curves["eager"](audit["bytes_per_token"]) == pytest.approx(audit["cuda_graph"]["eager_tok_s"], rel=1e-9)

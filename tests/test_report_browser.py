"""The HTML report in a real browser: Debian's headless Chromium, driven by playwright (its
Python client only; no browser download). Every chart must render, the console stay clean,
injected markup stay text, the tables sort; a screenshot is kept in artifacts/."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from report_inputs import audit_json, checkpoint_factory, plan_json, validation_from

from roofline.reports import write_audit_report

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
REFERENCE = Path(__file__).resolve().parent / "reference_configs"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
PWNED = "<script>window.__pwned=1</script>"
CHARTS = ("chart-layers", "chart-hierarchy", "chart-roofline", "chart-plan")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    assert executable, "Debian chromium is not installed (scripts/setup.sh --test installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def model_path(request, tmp_path_factory):
    """The hybrid NVFP4 fixture: BF16 residuals to show."""
    return checkpoint_factory(request, tmp_path_factory)("ct_nvfp4a16_next")


@pytest.fixture
def audit(model_path):
    return audit_json(model_path)


@pytest.fixture
def plan(model_path):
    return plan_json(model_path)


def open_page(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type in ("error", "warning") else None)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("requestfailed", lambda req: problems.append(f"request failed: {req.url}"))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, problems


def rendered(page, chart_id: str) -> dict:
    return page.evaluate("""id => {
        const div = document.getElementById(id);
        return {
            svg: div.querySelectorAll('.main-svg').length,
            traces: (div._fullData || []).length,
            marks: div.querySelectorAll('g.point path, g.slice path.surface, g.scatterlayer path.point, '
                                        + 'g.scatterlayer path.js-line').length,
        };
    }""", chart_id)


def test_full_report_renders_in_chromium(browser, audit, plan, tmp_path):
    audit["model"] = 'org/"evil" ' + PWNED
    audit["modules"][0]["name"] = "model.layers.0." + PWNED
    audit["notes"].append("</script>" + PWNED)
    audit["cuda_graph"] = {"graph_tok_s": audit["expected_tok_s"], "eager_tok_s": audit["expected_tok_s"] / 2,
                           "benefit": 2.0, "advice": "keep CUDA graphs on"}
    path = tmp_path / "report.html"
    size = write_audit_report(audit, path, plan=plan, validation=validation_from(audit))
    print(f"\nreport size (plotly inlined): {size / 1e6:.2f} MB")
    page, problems = open_page(browser, path)
    for chart in CHARTS:
        page.wait_for_selector(f"#{chart} .main-svg", timeout=30_000)
    for chart in CHARTS:
        state = rendered(page, chart)
        assert state["svg"] > 0 and state["traces"] > 0 and state["marks"] > 0, (chart, state)
    # treemap: a drawn tile per visible node; per-layer bars: one stack per decoder layer
    assert page.locator("#chart-hierarchy g.slice").count() > 10
    assert page.evaluate("document.getElementById('chart-layers')._fullData.length") >= 2

    # injected markup stayed text: nothing ran, and it reads as written
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert PWNED in page.inner_text("h1") and '"evil"' in page.inner_text("h1")
    assert PWNED in page.inner_text("ul.notes")
    assert PWNED in page.locator("#chart-hierarchy").inner_text() or \
        page.locator("#chart-hierarchy text", has_text="__pwned").count() > 0

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert problems == []
    page.close()


def test_tables_sort_by_clicking_a_header(browser, audit, plan, tmp_path):
    path = tmp_path / "report.html"
    write_audit_report(audit, path, plan=plan)
    page, problems = open_page(browser, path)
    table, column = "#residual-table", 6  # bytes per token

    def values():
        return page.evaluate(f"""() => Array.from(document.querySelectorAll('{table} tbody tr'))
            .map(r => Number(r.cells[{column}].dataset.value))""")

    header = page.locator(f"{table} thead th").nth(column).locator("button")
    header.click()
    first = values()
    assert len(first) >= 2 and first == sorted(first, reverse=True)
    header.click()
    assert values() == sorted(first)
    assert page.locator(f"{table} thead th").nth(column).get_attribute("aria-sort") == "ascending"
    text_header = page.locator(f"{table} thead th").nth(0).locator("button")
    text_header.click()
    names = page.evaluate(f"""() => Array.from(document.querySelectorAll('{table} tbody tr'))
        .map(r => r.cells[0].textContent.toLowerCase())""")
    assert names == sorted(names)
    assert problems == []
    page.close()


def test_report_without_optional_sections_renders(browser, audit, tmp_path):
    path = tmp_path / "plain.html"
    write_audit_report(audit, path)
    page, problems = open_page(browser, path)
    for chart in CHARTS[:3]:
        page.wait_for_selector(f"#{chart} .main-svg", timeout=30_000)
        assert rendered(page, chart)["traces"] > 0
    assert page.locator("#chart-plan").count() == 0 and page.locator("#validation").count() == 0
    assert problems == []
    page.close()


def test_compare_section_renders_in_chromium(browser, checkpoint, tmp_path):
    """`roofline compare --html`: the grouped bytes-by-role chart draws, the table sorts, a
    checkpoint name carrying markup stays text."""
    import json
    import subprocess
    import sys

    evil = tmp_path / "ckpt<img src=x onerror=window.__pwned=1>"
    shutil.copytree(checkpoint("qwen3_dense"), evil)
    path = tmp_path / "compare.html"
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "compare", str(checkpoint("ct_nvfp4a16")),
                           str(checkpoint("ct_fp8_dynamic")), str(evil), "--html", str(path), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["rows"]) == 3
    page, problems = open_page(browser, path)
    page.wait_for_selector("#chart-compare .main-svg", timeout=30_000)
    state = page.evaluate("""() => {
        const div = document.getElementById('chart-compare');
        return {traces: (div._fullData || []).length, bars: div.querySelectorAll('g.point path').length};
    }""")
    assert state["traces"] >= 3 and state["bars"] >= 6, state
    assert page.locator("#compare-table tbody tr").count() == 3
    assert "ckpt<img src=x onerror=window.__pwned=1>" in page.inner_text("#compare-table")  # text, not markup
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.locator("#compare-table th", has_text="bytes/token").locator("button").click()
    assert problems == []
    page.close()


def test_doctor_and_capacity_sections_render_in_chromium(browser, tmp_path):
    """`roofline doctor --html` and `roofline capacity --html`: the waterfall and the curve draw,
    the tables are there, a model name carrying markup stays text. Another model's section is
    refused in one line, the report left as it was (one model per report)."""
    repo = Path(__file__).resolve().parent.parent
    capture = json.loads((repo / "examples" / "doctor" / "qwen3-next-nvfp4-eager.capture.json").read_text())
    capture["model"] = "hybrid" + PWNED
    evil = tmp_path / "capture.json"
    evil.write_text(json.dumps(capture))
    doctor_path, capacity_path = tmp_path / "doctor.html", tmp_path / "capacity.html"
    capacity = ["capacity", str(repo / "examples" / "Qwen3-8B"), "--hardware", "h100-sxm", "--max-model-len", "4096"]
    assert cli("doctor", "--capture", str(evil), "--hardware", "gb10", "--html", str(doctor_path)).returncode == 0
    before = doctor_path.read_bytes()
    refused = cli(*capacity, "--html", str(doctor_path))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "second model" in refused.stderr
    assert doctor_path.read_bytes() == before
    assert cli(*capacity, "--html", str(capacity_path)).returncode == 0
    for path, chart, table, rows in ((doctor_path, "chart-doctor", "#doctor-table", 3),
                                     (capacity_path, "chart-capacity", "#capacity-table", 9)):
        page, problems = open_page(browser, path)
        page.wait_for_selector(f"#{chart} .main-svg", timeout=30_000)
        assert page.locator(f"{table} tbody tr").count() == rows
        if chart == "chart-doctor":
            assert "hybrid" + PWNED in page.inner_text("#doctor")  # text, not markup
            assert page.evaluate("typeof window.__pwned") == "undefined"
        else:
            assert "KV cache size:" in page.inner_text("#capacity")
        assert problems == []
        page.close()


# ------------------------------------------------------------------ charts and tables that tell the truth

def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofline.cli", *args], capture_output=True, text=True, timeout=300)


# every drawn chart: each axis's range against the points and bars drawn on it (lines that run on
# past the points are not data); in data units (log axes: the exponent). Bars start at zero.
AXES_JS = """id => {
    const div = document.getElementById(id);
    const layout = div._fullLayout;
    const out = [];
    for (const name of ['xaxis', 'yaxis']) {
        const axis = layout[name];
        const letter = name[0];
        const values = [];
        for (const trace of div._fullData) {
            if (trace.visible !== true) continue;
            const drawn = trace.type === 'bar' || trace.type === 'waterfall' ||
                          (trace.mode || '').includes('markers');
            if (!drawn) continue;
            const along = trace.type === 'bar' && trace.orientation === 'h' ? 'x' : 'y';
            if (trace.type === 'bar' && letter !== along) continue;
            if (trace.type === 'waterfall' && letter === 'y') {  // its bars end at the running sum
                let running = 0;
                trace.y.forEach((v, i) => {
                    const measure = (trace.measure || [])[i];
                    running = measure === 'absolute' ? v : measure === 'total' ? running : running + v;
                    values.push(running);
                });
            } else {
                for (const v of trace[letter] || []) if (typeof v === 'number' && isFinite(v)) values.push(v);
            }
            if (trace.type === 'bar' || trace.type === 'waterfall') values.push(0);
        }
        if (!values.length || axis.type === 'category') continue;
        const conv = axis.type === 'log' ? (v => Math.log10(v)) : (v => v);
        const data = values.filter(v => axis.type !== 'log' || v > 0).map(conv);
        out.push({axis: name, type: axis.type, range: axis.range.slice(),
                  lo: Math.min(...data), hi: Math.max(...data)});
    }
    return out;
}"""

# elements that reach past their card or section (charts draw inside their own SVG)
OVERFLOW_JS = """() => {
    const bad = [];
    for (const box of document.querySelectorAll('section, .card')) {
        const right = box.getBoundingClientRect().right + 1;
        for (const el of box.querySelectorAll('*')) {
            if (el.closest('.js-plotly-plot') || el.closest('details:not([open])')) continue;
            const wrap = el.closest('.table-wrap');
            if (wrap && wrap.scrollWidth > wrap.clientWidth + 1) { bad.push('scrolls: ' + (wrap.querySelector('table') || {}).id); break; }
            if (el.getBoundingClientRect().right > right) { bad.push((box.id || box.className) + ': ' + el.tagName + ' ' + el.textContent.slice(0, 60)); break; }
        }
    }
    if (document.documentElement.scrollWidth > window.innerWidth) bad.push('page wider than the window');
    return bad;
}"""

RAW_FLOAT = re.compile(r"(?<![\d:.])\d+\.\d{4,}")  # not an arXiv id (arXiv:2504.11750)
FIELD_NAME = re.compile(r"\b[a-z]+_(?:tok_s|bytes|gb|ms|ratio)\b|\btok s\b")


# in every chart: a legend that covers an axis label; a byte axis whose ticks do not say bytes
# ("3.5B" is plotly's billions); a capacity point that does not fit drawn like one that does
CHART_TEXT_JS = """id => {
    const div = document.getElementById(id);
    const bad = [];
    const legend = div.querySelector('g.legend');
    const box = legend ? legend.getBoundingClientRect() : null;
    for (const label of div.querySelectorAll('g.xtick text, g.ytick text, g.g-xtitle text, g.g-ytitle text')) {
        const r = label.getBoundingClientRect();
        if (box && r.width && r.left < box.right && r.right > box.left && r.top < box.bottom && r.bottom > box.top)
            bad.push(id + ': the legend covers the axis label ' + JSON.stringify(label.textContent));
    }
    const layout = div._fullLayout;
    for (const name of ['xaxis', 'yaxis']) {
        const axis = layout[name];
        const title = ((axis || {}).title || {}).text || '';
        if (!/bytes/.test(title) || axis.type === 'log') continue;
        for (const tick of div.querySelectorAll('g.' + name[0] + 'tick text'))
            if (tick.textContent !== '0' && !/B$/.test(tick.textContent))
                bad.push(id + ': byte tick ' + JSON.stringify(tick.textContent) + ' does not say bytes');
    }
    return bad;
}"""


def truth_problems(page) -> list[str]:
    """What the issue found wrong on the report pages, as checks: axis ranges outside or far past
    the data, text outside its card, raw floats and field names in tables, cards and chart text, legends
    over axis labels, byte axes in billions."""
    problems = page.evaluate(OVERFLOW_JS)
    for chart in page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => d.id)"):
        problems += page.evaluate(CHART_TEXT_JS, chart)
    for chart in page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => d.id)"):
        for axis in page.evaluate(AXES_JS, chart):
            lo, hi = sorted(axis["range"])
            span = max(axis["hi"] - axis["lo"], 1e-9)
            if lo > axis["lo"] + 1e-9 or hi < axis["hi"] - 1e-9:
                problems.append(f"{chart} {axis['axis']}: range {axis['range']} cuts the data {axis['lo']}..{axis['hi']}")
            slack = 0.3 if axis["type"] == "log" else 0.15 * span  # a log axis: a factor of two at most
            if lo < axis["lo"] - slack - 1e-9 or hi > axis["hi"] + slack + 1e-9:
                problems.append(f"{chart} {axis['axis']}: range {axis['range']} runs far past the data "
                                f"{axis['lo']}..{axis['hi']}")
    texts = page.evaluate("""() => [
        ...Array.from(document.querySelectorAll('td, th, .card-value, .card-detail, .js-plotly-plot text'))
            .map(e => e.textContent)]""")
    for t in texts:
        if RAW_FLOAT.search(t) or FIELD_NAME.search(t):
            problems.append(f"raw value or field name: {t[:80]!r}")
    return problems


def test_report_sections_tell_the_truth_in_chromium(browser, tmp_path):
    """One report as a user builds it (audit, plan, capacity, validate of one quantized checkpoint),
    a compare report and a doctor report, checked in Chromium: axis ranges within the data's, one
    bar per plan row, nothing past its card, numbers rounded as the terminal rounds them, the
    expected and eager points on the step model's curves."""
    model = str(REFERENCE / "nvidia__Qwen3-30B-A3B-NVFP4")
    report, compared, doctor = tmp_path / "report.html", tmp_path / "compare.html", tmp_path / "doctor.html"
    capacity = ["capacity", model, "--max-model-len", "32k"]  # 32k requests: the largest concurrencies do not fit
    for args in (["audit", model], ["plan", model], capacity, ["validate", model, "--measured", "58"]):
        proc = cli(*args, "--html", str(report), "--record", str(tmp_path / "record.jsonl")) if args[0] == "validate" \
            else cli(*args, "--html", str(report))
        assert proc.returncode == 0, proc.stderr
    repo = Path(__file__).resolve().parent.parent
    assert cli("compare", *map(str, sorted((repo / "examples" / "compare").iterdir())), "--html", str(compared)).returncode == 0
    assert cli("doctor", "--capture", str(repo / "examples" / "doctor" / "qwen3-next-nvfp4-eager.capture.json"),
               "--hardware", "gb10", "--html", str(doctor)).returncode == 0
    plan_text = cli("plan", model).stdout
    capacity_text = cli(*capacity).stdout

    page, problems = open_page(browser, report)
    for chart in ("chart-layers", "chart-roofline", "chart-plan", "chart-capacity"):
        page.wait_for_selector(f"#{chart} .main-svg", timeout=30_000)
    assert truth_problems(page) == []
    # the plan chart: one bar per table row in each series, in the table's order
    rows = page.locator("#plan-table tbody tr").count()
    bars = page.evaluate("""() => document.getElementById('chart-plan')._fullData.map(t => t.y)""")
    assert rows >= 10 and all(len(y) == rows and len(set(y)) == rows for y in bars), (rows, bars)
    # the terminal's figures: plan's 1-stream tok/s and capacity's curve, cell for cell
    terminal_plan = [line.split() for line in plan_text.splitlines() if re.match(r"\s+\d+(=[a-z])?\s{2}", line)]
    html_plan = page.evaluate("""() => Array.from(document.querySelectorAll('#plan-table tbody tr'))
        .map(r => Array.from(r.cells).map(c => c.textContent))""")
    # the report holds every ranked row, the terminal its --top (12): the same ranking, row for row
    assert len(html_plan) >= len(terminal_plan)
    assert [r[5] for r in html_plan][:len(terminal_plan)] == \
        [next(w for w in r if re.fullmatch(r"\d+\.\d", w)) for r in terminal_plan]
    assert [r[2] for r in html_plan][:3] == [re.split(r"\s{2,}", line.strip())[1] for line in plan_text.splitlines()
                                             if re.match(r"\s+\d+(=[a-z])?\s{2}", line)][:3]
    terminal_curve = [line.split() for line in capacity_text.splitlines() if re.fullmatch(
        r"\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\w+\s+\w+", line)]
    html_curve = page.evaluate("""() => Array.from(document.querySelectorAll('#capacity-table tbody tr'))
        .map(r => Array.from(r.cells).map(c => c.textContent.replace(/,/g, '')))""")
    assert [r[:4] for r in html_curve] == [r[:4] for r in terminal_curve] and len(html_curve) >= 5
    # a point that does not fit is marked as such on the curve, every one of them
    beyond = [int(r[0]) for r in terminal_curve if r[-1] == "no"]
    marked = page.evaluate("""() => (document.getElementById('chart-capacity')._fullData
        .find(t => t.name === 'does not fit') || {x: []}).x""")
    assert beyond and sorted(marked) == sorted(beyond), (beyond, marked)
    # the audit's expected and eager points lie on the curves the legend names for them
    on_curve = page.evaluate("""() => {
        const data = document.getElementById('chart-roofline')._fullData;
        const find = prefix => data.find(t => t.name.startsWith(prefix));
        const at = (curve, x) => {  // log-log interpolation
            for (let i = 1; i < curve.x.length; i++) if (curve.x[i] >= x) {
                const f = Math.log(x / curve.x[i - 1]) / Math.log(curve.x[i] / curve.x[i - 1]);
                return Math.exp(Math.log(curve.y[i - 1]) + f * Math.log(curve.y[i] / curve.y[i - 1]));
            }
        };
        return [['this audit: expected', 'expected:'], ['this audit: eager', 'eager:']].map(([point, curve]) => {
            const p = find(point), c = find(curve);
            return [p.y[0], at(c, p.x[0])];
        });
    }""")
    assert len(on_curve) == 2 and all(abs(y / on - 1) < 0.01 for y, on in on_curve), on_curve
    assert problems == []
    page.close()

    for path, charts_drawn in ((compared, ("chart-compare",)), (doctor, ("chart-doctor", "chart-roofline"))):
        page, problems = open_page(browser, path)
        for chart in charts_drawn:
            page.wait_for_selector(f"#{chart} .main-svg", timeout=30_000)
        assert truth_problems(page) == [], path.name
        assert problems == []
        page.close()


def test_load_chart_draws_the_targets_and_the_answer_in_chromium(browser, tmp_path):
    """`capacity --ttft-p90 --min-tok-s --request-rate --html`: latency against the request rate from a trickle
    to past saturation, both targets' lines, the saturation rate and the answer marked at the JSON's rates, the
    runs' table."""
    repo = Path(__file__).resolve().parent.parent
    args = ["capacity", str(repo / "examples" / "Qwen3-8B"), "--hardware", "gb10", "--max-model-len", "4096",
            "--prompt-len", "1024", "--ttft-p90", "1", "--min-tok-s", "10", "--request-rate", "1",
            "--num-prompts", "60"]
    path = tmp_path / "load.html"
    ran = cli(*args, "--html", str(path), "--json")
    assert ran.returncode == 0, ran.stderr
    load = json.loads(ran.stdout)["load"]
    page, problems = open_page(browser, path)
    page.wait_for_selector("#chart-capacity-load .main-svg", timeout=30_000)
    drawn = page.evaluate("""() => {
        const div = document.getElementById('chart-capacity-load');
        return {names: div._fullData.map(t => t.name),
                lines: (div._fullLayout.shapes || []).map(s => s.x0),
                x: div._fullData[0].x, ttft: div._fullData[1].y};
    }""")
    assert {"TTFT p90", "TTFT p90 target", "TPOT p90 target (10 tok/s)"} <= set(drawn["names"])
    assert drawn["lines"] == pytest.approx([load["saturation_rate"], load["answer"]["rate"]])
    assert drawn["x"] == pytest.approx([p["rate"] for p in load["curve"]])
    assert drawn["ttft"] == pytest.approx([p["ttft"]["p90_ms"] for p in load["curve"]])
    assert page.locator("#capacity-load-table tbody tr").count() == 1
    assert load["answer"]["sentence"] in page.inner_text("#capacity-load-answer")
    assert problems == []
    page.close()

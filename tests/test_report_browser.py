"""The HTML report in a real browser: Debian's headless Chromium, driven by playwright (its
Python client only; no browser download). Every chart must render, the console stay clean,
injected markup stay text, the tables sort; a screenshot is kept in artifacts/."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from report_inputs import audit_json, checkpoint_factory, plan_json, validation_from

from roofline.reports import write_audit_report

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
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
    """`roofline doctor --html` then `roofline capacity --html` into the same report: the waterfall
    and the curve draw, the tables are there, a model name carrying markup stays text."""
    import json
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    capture = json.loads((repo / "examples" / "doctor" / "qwen3-next-nvfp4-eager.capture.json").read_text())
    capture["model"] = "hybrid" + PWNED
    evil = tmp_path / "capture.json"
    evil.write_text(json.dumps(capture))
    path = tmp_path / "report.html"
    for args in (["doctor", "--capture", str(evil), "--hardware", "gb10"],
                 ["capacity", str(repo / "examples" / "Qwen3-8B"), "--hardware", "h100-sxm", "--max-model-len", "4096"]):
        proc = subprocess.run([sys.executable, "-m", "roofline.cli", *args, "--html", str(path)], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    page, problems = open_page(browser, path)
    for chart in ("chart-doctor", "chart-capacity"):
        page.wait_for_selector(f"#{chart} .main-svg", timeout=30_000)
    assert page.locator("#doctor-table tbody tr").count() == 4
    assert page.locator("#capacity-table tbody tr").count() == 9
    assert "hybrid" + PWNED in page.inner_text("#doctor")  # text, not markup
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert "KV cache size:" in page.inner_text("#capacity")
    assert problems == []
    page.close()

"""README examples from the real commands, so they cannot go stale.

Every block in README.md of the form

    <!-- roofline-example: audit examples/Qwen3.6-35B-A3B-NVFP4 --rows 8 -->
    ```text
    ...
    ```

holds what `roofline audit examples/Qwen3.6-35B-A3B-NVFP4 --rows 8` prints today (`ARGS | grep -e A -e B`:
the lines of it that hold A or B). The report
screenshot (docs/report.png) is made by headless Chromium from `roofline audit SCREENSHOT_MODEL
--html`, the load chart (docs/load.png) from `roofline capacity LOAD_ARGS --html`; docs/report.json and
docs/load.json keep the numbers they show, so a check can tell a stale picture without comparing pixels.

    .venv/bin/python scripts/readme_examples.py              # rewrite the blocks
    .venv/bin/python scripts/readme_examples.py --screenshot # also the picture (needs chromium)
    .venv/bin/python scripts/readme_examples.py --check      # exit 1 if anything is stale (the test runs this)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PICTURE, PICTURE_NUMBERS = REPO / "docs" / "report.png", REPO / "docs" / "report.json"
SCREENSHOT_MODEL = "examples/Qwen3.6-35B-A3B-NVFP4"
HEADLINE = ("model", "bytes_per_token", "ceiling_tok_s", "expected_tok_s", "weight_bytes")
# the latency-against-rate chart of the README's load section, from `capacity LOAD_ARGS --html`; docs/load.json
# keeps the numbers it shows (the saturation rate, the answer's rate)
LOAD_PICTURE, LOAD_NUMBERS = REPO / "docs" / "load.png", REPO / "docs" / "load.json"
LOAD_ARGS = ["capacity", "examples/Qwen3.6-35B-A3B-NVFP4", "--max-model-len", "32k", "--kv-cache-dtype", "fp8",
             "--prompt-len", "2048", "--ttft-p90", "2", "--min-tok-s", "20"]
BLOCK = re.compile(r"(<!-- roofline-example: (?P<args>[^>]*?) -->\n```text\n)(?P<body>.*?)(```)", re.S)


def roofline(args: list[str], columns: int = 100) -> str:
    env = dict(os.environ, COLUMNS=str(columns), NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"roofline {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout


def example_output(args: str) -> str:
    """What `roofline ARGS` prints; `ARGS | grep -e A -e B` keeps the lines holding A or B (a figure
    quoted from a long answer is still the command's own line)."""
    command, _, grep = args.partition(" | grep ")
    out = roofline(shlex.split(command), columns=1000 if grep else 100)  # a quoted line is never cut
    if grep:
        words = shlex.split(grep)
        wanted = [w for i, w in enumerate(words) if w != "-e" and (i == 0 or words[i - 1] == "-e" or "-e" not in words)]
        out = "".join(line for line in out.splitlines(keepends=True) if any(w in line for w in wanted))
    return out.rstrip("\n") + "\n"


def rendered_readme(text: str) -> str:
    def replace(match: re.Match) -> str:
        return match.group(1) + example_output(match["args"]) + match.group(4)
    return BLOCK.sub(replace, text)


def headline() -> dict:
    audit = json.loads(roofline(["audit", SCREENSHOT_MODEL, "--json"]))
    return {key: audit[key] for key in HEADLINE}


def load_headline() -> dict:
    load = json.loads(roofline(LOAD_ARGS + ["--json"]))["load"]
    return {"args": " ".join(LOAD_ARGS), "saturation_rate": round(load["saturation_rate"], 4),
            "rate": round(load["answer"]["rate"], 4) if load["answer"]["rate"] is not None else None}


def screenshot() -> None:
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if not executable:
        raise SystemExit("chromium is not installed (scripts/setup.sh --test installs it)")
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "report.html"
        roofline(["audit", SCREENSHOT_MODEL, "--html", str(page_path)])
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable,
                                                 args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(page_path.as_uri())
            page.wait_for_selector(".plotly .main-svg")
            page.screenshot(path=str(PICTURE), full_page=True)
            load_page = Path(tmp) / "load.html"
            roofline(LOAD_ARGS + ["--html", str(load_page)])
            page.goto(load_page.as_uri())
            chart = page.locator("h3:has-text('Under load') ~ div.chart").first
            chart.wait_for()
            chart.screenshot(path=str(LOAD_PICTURE))
            browser.close()
    PICTURE_NUMBERS.write_text(json.dumps(headline(), indent=1) + "\n")
    LOAD_NUMBERS.write_text(json.dumps(load_headline(), indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale examples; change nothing")
    parser.add_argument("--screenshot", action="store_true", help="also remake docs/report.png and docs/load.png")
    args = parser.parse_args()
    current = README.read_text(encoding="utf-8")
    if not BLOCK.search(current):
        raise SystemExit("README.md has no roofline-example blocks")
    fresh = rendered_readme(current)
    if args.check:
        stale = []
        if fresh != current:
            stale.append("README.md example blocks (run scripts/readme_examples.py)")
        shown = json.loads(PICTURE_NUMBERS.read_text()) if PICTURE_NUMBERS.is_file() else None
        if shown != headline():
            stale.append(f"{PICTURE.relative_to(REPO)} shows {shown}, the audit now gives {headline()} "
                         f"(run scripts/readme_examples.py --screenshot)")
        drawn = json.loads(LOAD_NUMBERS.read_text()) if LOAD_NUMBERS.is_file() else None
        if drawn != load_headline():
            stale.append(f"{LOAD_PICTURE.relative_to(REPO)} shows {drawn}, capacity now gives {load_headline()} "
                         f"(run scripts/readme_examples.py --screenshot)")
        for line in stale:
            print(f"stale: {line}", file=sys.stderr)
        return 1 if stale else 0
    if fresh != current:
        README.write_text(fresh, encoding="utf-8")
    if args.screenshot:
        screenshot()
    return 0


if __name__ == "__main__":
    sys.exit(main())

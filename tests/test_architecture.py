"""The layout's promises: imports point one way (import-linter contracts in setup.cfg, run on the
package as it installs), a backwards arrow fails them, and the light CLI paths never import
torch, transformers or vllm at run time."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
HEAVY = ("torch", "transformers", "vllm", "plotly")


def stage_installed_layout(root: Path) -> Path:
    """The repository's roofline/, hooks/ and reports/, plus hooks/ and reports/ inside roofline/ as
    setup.cfg's package_dir installs them: the contracts hold in both layouts at once."""
    skip = shutil.ignore_patterns("__pycache__")
    for name in ("roofline", "hooks", "reports"):
        shutil.copytree(REPO / name, root / name, ignore=skip)
    shutil.copytree(REPO / "hooks", root / "roofline" / "hooks", ignore=skip)
    shutil.copytree(REPO / "reports", root / "roofline" / "reports", ignore=skip)
    return root


def lint(root: Path) -> subprocess.CompletedProcess:
    if not LINT_IMPORTS.is_file():
        pytest.fail(f"{LINT_IMPORTS} missing: `scripts/setup.sh --test` installs import-linter", pytrace=False)
    return subprocess.run([str(LINT_IMPORTS), "--config", str(REPO / "setup.cfg"), "--no-cache"], cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def test_import_contracts_hold(tmp_path):
    result = lint(stage_installed_layout(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    # every contract ran (a renamed package would silently match nothing otherwise)
    assert "Contracts: 4 kept, 0 broken." in result.stdout


def test_import_contracts_hold_in_the_repository_as_it_is():
    """A bare `lint-imports` in the repository root (hooks/ and reports/ beside roofline/)."""
    result = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=REPO, env={"PYTHONPATH": str(REPO),
                            "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 4 kept, 0 broken." in result.stdout


@pytest.mark.parametrize("module, backwards_import, contract", [
    ("roofline/model/inventory.py", "from roofline.render.text import text_table", "Data flows one way"),
    ("roofline/predict/traffic.py", "from roofline.sources.local import load_local", "Data flows one way"),
    ("roofline/predict/traffic.py", "from roofline.reports import render_report", "Data flows one way"),
    ("roofline/live/capture.py", "from roofline.hooks import plugin", "Data flows one way"),
    ("hooks/walk.py", "from roofline.model.roles import classify", "The vLLM hook imports nothing"),
    ("reports/view.py", "from roofline.sources.local import load_local", "The report reads results"),
    ("roofline/sources/local.py", "import torch", "Light CLI never imports torch"),
])
def test_a_backwards_arrow_fails_the_contracts(tmp_path, module, backwards_import, contract):
    root = stage_installed_layout(tmp_path)
    path = root / module
    path.write_text(path.read_text() + f"\n\ndef _backwards():\n    {backwards_import}\n")
    result = lint(root)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if "BROKEN" in line]
    assert any(contract in line for line in broken), result.stdout


def _modules_after(argv: list[str]) -> tuple[int, list[str], str]:
    code = (
        "import json, sys\n"
        "from roofline.cli import main\n"
        f"rc = main({argv!r})\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "sys.stderr.write('\\nHEAVY=' + json.dumps([rc, heavy]) + '\\n')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    marker = [line for line in result.stderr.splitlines() if line.startswith("HEAVY=")]
    assert marker, result.stderr
    rc, heavy = json.loads(marker[-1][len("HEAVY="):])
    return rc, heavy, result.stdout


def test_help_imports_nothing_heavy():
    rc, heavy, out = _modules_after(["--help"])
    assert rc == 0 and "audit" in out
    assert heavy == []


def test_header_audit_imports_nothing_heavy(checkpoint):
    rc, heavy, out = _modules_after(["audit", str(checkpoint("ct_nvfp4a16")), "--json"])
    assert rc == 0 and json.loads(out)["source"] == "safetensors"
    assert heavy == []


def test_the_suite_never_reads_shared():
    """CI runs on a clean clone that may have no shared folder beside it: inputs the tests need are
    copied into tests/ (reference_configs/ with its SOURCES.md). No test file may reach for it."""
    word = "sha" + "red"  # spelled apart, so that this file does not match its own search
    needles = (f'"{word}"', f"'{word}'", f"../{word}", f"{word}/reference")
    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if any(needle in text for needle in needles):
            offenders.append(path.name)
    assert offenders == []
    assert (REPO / "tests" / "reference_configs" / "SOURCES.md").is_file()

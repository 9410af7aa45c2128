"""The README's examples are what the commands print today (issue: a screenshot showed a ceiling
from an older version). scripts/readme_examples.py regenerates them; this runs its --check."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_examples_and_report_picture_are_current():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "readme_examples.py"), "--check"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr

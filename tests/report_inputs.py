"""Real audits for the report tests: tiny checkpoints written by real libraries, audited by the
real audit path, through the suite's `checkpoint(name)` fixture (tests/conftest.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# the audit JSON of each checkpoint, computed once per test session
_AUDITS: dict[str, dict] = {}

def checkpoint_factory(request, tmp_path_factory):
    """The suite's checkpoint(name) fixture (tests/conftest.py: real tiny checkpoints)."""
    return request.getfixturevalue("checkpoint")


def audit_json(path: Path) -> dict:
    """`roofline audit PATH --json`, run as a user runs it."""
    key = str(path)
    if key not in _AUDITS:
        proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", key, "--json"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        _AUDITS[key] = json.loads(proc.stdout)
    return json.loads(json.dumps(_AUDITS[key]))  # a fresh copy: tests may change it


# Test double, named as such, until `roofline plan --json` exists: ranked plan rows in the shape
# that command writes. The report only lays them out, so their figures merely need to be
# consistent with the audit they extend.
_PLANS: dict[str, dict] = {}


def plan_json(path: Path) -> dict:
    """`roofline plan PATH --json`, run as a user runs it (once per session per checkpoint)."""
    key = str(path)
    if key not in _PLANS:
        proc = subprocess.run([sys.executable, "-m", "roofline.cli", "plan", key, "--json"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        _PLANS[key] = json.loads(proc.stdout)
    return json.loads(json.dumps(_PLANS[key]))  # a fresh copy: tests may alter it


def validation_from(audit: dict, measured_share: float = 0.7) -> list[dict]:
    """A real validation record row (roofline.live.validate + roofline.live.records, as `roofline validate`
    writes it) for a measurement at measured_share of the ceiling."""
    from roofline.live.records import record_row
    from roofline.live.validate import validate

    result = validate(audit, audit["ceiling_tok_s"] * measured_share)
    return [record_row(result, measured_by="test", audit=audit)]

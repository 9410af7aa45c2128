"""The HTML report: one self-contained page made from the JSON the commands already produce.

    render_report(audit_json, plan_json=None, validation_rows=None, cdn=False, **sections) -> str
    write_audit_report(result, path, cdn=False, **sections) -> int (bytes written)
    add_to_report(path, cdn=None, **sections) -> int
    update_report(path, audit, cdn=False, **sections) -> int

Sections (SECTIONS): plan, validation, compare, doctor, capacity, preflight, each the JSON its command prints.
The page embeds its own data as JSON, so a command can add its section to a report that
`audit --html` wrote earlier (add_to_report). plotly is imported only here, when a report is made:
the CLI stays light.
"""
from __future__ import annotations

import json
import os
import re
import tempfile

from roofline.errors import RooflineError
from roofline.untrusted import redacted

from .page import DATA_ELEMENT_ID, render_page
from .view import as_rows, report_data

__all__ = ["render_report", "write_audit_report", "add_to_report", "update_report", "read_report_data"]

# the sections a report can hold besides the audit, in the order the page shows them
SECTIONS = ("plan", "validation", "compare", "doctor", "capacity", "preflight")


def _sections(given: dict) -> dict:
    unknown = set(given) - set(SECTIONS)
    if unknown:
        raise TypeError(f"unknown report section(s): {', '.join(sorted(unknown))}")
    return {name: given.get(name) for name in SECTIONS}


def _render(audit_json: dict, sections: dict, cdn: bool) -> str:
    # nothing a user typed (a serve line's --api-key, a recipe's HF_TOKEN) is written into a page
    audit_json, sections = redacted(audit_json), {name: redacted(value) for name, value in sections.items()}
    data = report_data(audit_json, **sections)
    return render_page(data, cdn=cdn, embedded={"audit": audit_json, **sections, "cdn": bool(cdn)})


def render_report(audit_json: dict, plan_json=None, validation_rows=None, cdn: bool = False, **sections) -> str:
    """HTML of the report. plan_json: `roofline plan --json` output (an object holding ranked
    rows, or the list of rows); validation_rows: predicted-vs-measured records (a list of
    objects); the other sections by name (compare=, doctor=, capacity=). Sections without data are
    left out."""
    return _render(audit_json, _sections({**sections, "plan": plan_json, "validation": validation_rows}), cdn)


def _audit_json(result) -> dict:
    if isinstance(result, dict):
        return result
    to_json = getattr(result, "to_json", None)
    if to_json is None:
        raise RooflineError(f"report: cannot render a {type(result).__name__} (give an AuditResult or its JSON)")
    return to_json()


def write_audit_report(result, path, cdn: bool = False, **sections) -> int:
    """Write the report for an AuditResult (or its to_json() dict) to path; returns its size."""
    return _write(path, _render(_audit_json(result), _sections(sections), cdn))


def read_report_data(path) -> dict:
    """The data a report embeds: {"audit": ..., "plan": ..., "validation": ..., "cdn": ...}."""
    try:
        with open(path, encoding="utf-8") as fh:
            page = fh.read()
    except OSError as exc:
        raise RooflineError(f"{path}: cannot read the report ({exc.strerror or exc})") from None
    match = re.search(rf'<script type="application/json" id="{DATA_ELEMENT_ID}">(.*?)</script>', page, re.S)
    if not match:
        raise RooflineError(f"{path}: not a roofline HTML report (no embedded data)")
    try:
        data = json.loads(match.group(1))
    except ValueError:
        raise RooflineError(f"{path}: the report's embedded data is damaged") from None
    if not isinstance(data, dict) or not isinstance(data.get("audit"), dict):
        raise RooflineError(f"{path}: the report's embedded data has no audit")
    return data


def add_to_report(path, cdn: bool | None = None, **sections) -> int:
    """Add (or replace) sections of an existing report, keeping what it had. Validation rows are
    appended to those already there."""
    data = read_report_data(path)
    kept = _sections({name: data.get(name) for name in SECTIONS})
    for name, value in _sections(sections).items():
        if value is None:
            continue
        kept[name] = (as_rows(kept["validation"], "validation") + as_rows(value, "validation")
                      if name == "validation" else value)
    use_cdn = bool(data.get("cdn")) if cdn is None else cdn
    return _write(path, _render(data["audit"], kept, use_cdn))


def update_report(path, audit, *, cdn: bool = False, **sections) -> int:
    """What `plan --html`, `validate --html`, `compare --html`, `doctor --html` and `capacity --html`
    do: add their section to the report already at path (an earlier `audit --html`), or write a new
    report of `audit` with it."""
    audit_json = _audit_json(audit)
    if os.path.isfile(path):
        existing = read_report_data(path)  # a file that is not a roofline report is an error, not overwritten
        _same_model(path, existing["audit"], audit_json, sections)
        return add_to_report(path, **sections)
    return write_audit_report(audit_json, path, cdn=cdn, **sections)


def _same_model(path, report_audit: dict, audit: dict, sections: dict) -> None:
    """One model per report: a section of another model is refused, not quietly added beside the
    first. A comparison belongs in the report of any model it compares."""
    reported, model = str(report_audit.get("model")), str(audit.get("model"))
    compared = {str(row.get(key)) for row in as_rows(sections.get("compare"), "compare") if isinstance(row, dict)
                for key in ("model", "name", "input") if row.get(key)}
    if model == reported or reported in compared:
        return
    named = ", ".join(name for name, value in sections.items() if value is not None) or "section"
    raise RooflineError(f"{path} is the report of {reported}; the {named} of {model} would put a second model "
                        f"in it: give another --html file (or remove this one)")


def _write(path, page: str) -> int:
    """Write atomically: a reader never sees half a report."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise RooflineError(f"{path}: folder {directory} does not exist")
    encoded = page.encode("utf-8")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".roofline-report-", suffix=".html", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(encoded)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise RooflineError(f"{path}: cannot write the report ({exc.strerror or exc})") from None
    return len(encoded)

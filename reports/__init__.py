"""The HTML report: one self-contained page made from the JSON the commands already produce.

    render_report(audit_json, plan_json=None, validation_rows=None, cdn=False) -> str
    write_audit_report(result, path, cdn=False, plan=None, validation=None) -> int (bytes written)
    add_to_report(path, plan=None, validation=None, cdn=None) -> int

The page embeds its own data (audit, plan, validation) as JSON, so `plan` and `validate` can add
their sections to a report that `audit --html` wrote earlier (add_to_report). plotly is imported
only here, when a report is made: the CLI stays light.
"""
from __future__ import annotations

import json
import os
import re
import tempfile

from roofline.errors import RooflineError

from .page import DATA_ELEMENT_ID, render_page
from .view import as_rows, report_data

__all__ = ["render_report", "write_audit_report", "add_to_report", "read_report_data"]


def render_report(audit_json: dict, plan_json=None, validation_rows=None, cdn: bool = False, compare_json=None,
                  doctor_json=None, capacity_json=None) -> str:
    """HTML of the report. plan_json: `roofline plan --json` output (an object holding ranked
    rows, or the list of rows); validation_rows: predicted-vs-measured records (a list of
    objects). Sections without data are left out."""
    data = report_data(audit_json, plan_json, validation_rows, compare_json, doctor_json, capacity_json)
    embedded = {"audit": audit_json, "plan": plan_json, "validation": validation_rows, "compare": compare_json,
                "doctor": doctor_json, "capacity": capacity_json, "cdn": bool(cdn)}
    return render_page(data, cdn=cdn, embedded=embedded)


def _audit_json(result) -> dict:
    if isinstance(result, dict):
        return result
    to_json = getattr(result, "to_json", None)
    if to_json is None:
        raise RooflineError(f"report: cannot render a {type(result).__name__} (give an AuditResult or its JSON)")
    return to_json()


def write_audit_report(result, path, cdn: bool = False, plan=None, validation=None, compare=None, doctor=None,
                       capacity=None) -> int:
    """Write the report for an AuditResult (or its to_json() dict) to path; returns its size."""
    return _write(path, render_report(_audit_json(result), plan, validation, cdn=cdn, compare_json=compare,
                                      doctor_json=doctor, capacity_json=capacity))


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


def add_to_report(path, plan=None, validation=None, cdn: bool | None = None, compare=None, doctor=None,
                  capacity=None) -> int:
    """Add (or replace) the plan and/or validation sections of an existing report, keeping
    what it had. Validation rows are appended to those already there."""
    data = read_report_data(path)
    if plan is not None:
        data["plan"] = plan
    if validation is not None:
        data["validation"] = as_rows(data.get("validation"), "validation") + as_rows(validation, "validation")
    if compare is not None:
        data["compare"] = compare
    if doctor is not None:
        data["doctor"] = doctor
    if capacity is not None:
        data["capacity"] = capacity
    use_cdn = bool(data.get("cdn")) if cdn is None else cdn
    return _write(path, render_report(data["audit"], data.get("plan"), data.get("validation"), cdn=use_cdn,
                                      compare_json=data.get("compare"), doctor_json=data.get("doctor"),
                                      capacity_json=data.get("capacity")))


def update_report(path, audit, *, plan=None, validation=None, compare=None, doctor=None, capacity=None,
                  cdn: bool = False) -> int:
    """What `plan --html`, `validate --html`, `compare --html` and `doctor --html` and `capacity --html` do: add their section to the
    report already at path (an earlier `audit --html`), or write a new report of `audit` with it."""
    if os.path.isfile(path):
        read_report_data(path)  # a file that is not a roofline report is an error, not overwritten
        return add_to_report(path, plan=plan, validation=validation, compare=compare, doctor=doctor, capacity=capacity)
    return write_audit_report(audit, path, cdn=cdn, plan=plan, validation=validation, compare=compare, doctor=doctor,
                              capacity=capacity)


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

"""The load check's stall rule (benchmarks/serving/load_check.py STALL_S): a run whose TTFT rises by more than a
second from one Poisson arrival to the next stopped for a one-time compile; recorded runs carry the figures."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "serving"))

import load_check  # noqa: E402  (benchmarks/serving/load_check.py)
from points import h200_loads  # noqa: E402


def test_the_stalled_runs_are_found_by_their_signature_alone():
    stalls = {name: load_check.stall_s(run) for _, name, run in h200_loads()}
    stalled = {name for name, s in stalls.items() if s > load_check.STALL_S}
    # the two later runs the compile stopped, and three first runs (the same compiles, left out as first runs)
    assert stalled - load_check.WARM_FIRST == {"mixtral-8x7b-8l-rate-32.json.gz", "mixtral-8x7b-8l-host-rate-24.json.gz"}
    assert len(stalled & load_check.WARM_FIRST) == 3
    # a burst's requests arrive together and wait for each other's prompts: no stall by construction
    assert all(stalls[name] == 0.0 for name in stalls if "-burst-" in name)
    # no warm run of any other case comes near: its largest rise is a step or a few
    assert max(s for name, s in stalls.items() if name not in stalled) < 0.25


def test_the_recorded_check_leaves_the_stalls_out_and_counts_them_apart():
    check = json.loads((ROOT / "benchmarks" / "serving" / "load_check.json").read_text())
    rows = {r["file"]: r for r in check["rows"]}
    later = [r for r in check["rows"] if r["stalled"]]
    assert {r["file"] for r in later} == {"mixtral-8x7b-8l-rate-32.json.gz", "mixtral-8x7b-8l-host-rate-24.json.gz"}
    for row in later:  # before the stall the server ran at its price
        assert abs(row["before_stall"]["error"]) < 0.25
    counted = [r for r in check["rows"] if not (r["first_run"] or r["host_probe"] or r["stalled"])]
    assert check["summary"]["ttft_mean"]["runs"] == len(counted)
    assert check["summary"]["with_stalls"]["ttft_mean"]["runs"] == len(counted) + len(later)
    assert rows["mixtral-8x7b-8l-host-rate-16.json.gz"]["stalled"] is False

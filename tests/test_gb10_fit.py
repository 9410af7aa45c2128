"""GB10's coefficients are what benchmarks/gb10/fit.py computes from the committed runs: fit.json is not
stale, the data tables carry fit.json's figures with their kind and source, the step model as shipped
prices every run as the fit did, and the crossover the published c=16 bench showed comes out of the model.
The runs are the committed results.csv."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from roofline.data import load_table
from roofline.predict.backends import backends, backends_for
from roofline.predict.hardware import get_hardware
from roofline.predict.step import StepConfig, price_step
from roofline.predict.traffic import ROUTINGS

SAME_EXPERTS = ROUTINGS[1]  # every stream routes to the same experts (one prompt to every stream)

REPO = Path(__file__).resolve().parent.parent
FIT_SCRIPT = REPO / "benchmarks" / "gb10" / "fit.py"


def _module():
    spec = importlib.util.spec_from_file_location("gb10_fit", FIT_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gb10_fit"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gb10():
    module = _module()
    return module, module.run_fit(), json.loads(module.FIT_FILE.read_text())


def test_fit_json_is_what_the_runs_give(gb10):
    _, fresh, stored = gb10
    assert json.loads(json.dumps(fresh)) == stored, \
        "benchmarks/gb10/fit.json is stale: run benchmarks/gb10/fit.py"
    assert len([r for r in stored["runs"] if not r["source"].startswith("roofline/data")]) == 16
    assert stored["in_sample"]["mean_abs"] < 0.05  # the fit set itself within 5%
    assert stored["left_out"]["points"] == 16


def test_tables_carry_the_fit(gb10):
    _, _, stored = gb10
    c = stored["coefficients"]
    gb10_hw = get_hardware("gb10")
    assert gb10_hw.efficiency == pytest.approx(c["efficiency"])
    assert gb10_hw.efficiency_kind == "calibrated" and "benchmarks/gb10/fit.json" in gb10_hw.efficiency_source
    assert gb10_hw.family_efficiency == pytest.approx(c["family_efficiency"])
    assert "fit.json" in gb10_hw.family_efficiency_source
    launch = load_table("launch")
    assert launch["floor"]["gb10"]["graph_floor_us_per_kernel"] == pytest.approx(c["graph_floor_us_per_kernel"])
    assert launch["host"]["grace_arm"]["host_us_per_kernel"] == pytest.approx(c["host_us_per_kernel"])
    by_name = {b.name: b for b in backends()}
    for name, value in c["relative_efficiency"].items():
        rate = by_name[name].rate(gb10_hw)
        assert rate.relative_efficiency == pytest.approx(value) and "fit.json" in rate.source
    for family, figures in c["weight_only"].items():
        for name in figures["backends"]:
            rate = by_name[name].rate(gb10_hw)
            assert (rate.weight_gbps, rate.gemm_utilization) == pytest.approx(
                (figures["weight_gbps"], figures["gemm_utilization"])), name
            assert rate.kind == "calibrated" and "fit.json" in rate.source


def test_step_model_prices_each_run_as_the_fit(gb10):
    module, _, stored = gb10
    from roofline.advise.simulate import get_recipe, simulate
    from roofline.audit import load_inventory
    from roofline.predict.backends import backend_named

    hardware = get_hardware("gb10")
    runs = module.read_runs(module.RESULTS)
    for run, entry in zip(runs, stored["runs"]):
        inventory = load_inventory(run.config)
        if run.simulate:
            inventory = simulate(inventory, run.simulate, get_recipe("default"))
        fmt = inventory.main_format()
        backend = next(b for b in backends_for(fmt, hardware) if b.name == run.backend_name) if run.backend_name \
            else backend_named(fmt, run.backend_flag, hardware)
        step = price_step(inventory, hardware, StepConfig(batch=run.concurrency, context=run.context,
                                                          kv_cache_dtype=run.kv_cache_dtype, backend=backend,
                                                          graphs=run.graphs))
        assert step.tok_s == pytest.approx(entry["predicted_tok_s"], rel=0.005), entry["model"]
        assert step.ceiling_tok_s > run.tok_s  # the printed ceiling is never below a measured figure


def test_w4a4_w4a16_crossover_comes_out_of_the_model():
    """Nemotron-3-Nano NVFP4 on GB10: Marlin (W4A16 execution) ahead at one stream, FlashInfer's FP4 tensor
    cores (W4A4) ahead at 16 streams that all route to the same experts (one prompt to every stream) —
    from the fitted Marlin GEMM rate, no special case."""
    from roofline.audit import load_inventory

    hardware = get_hardware("gb10")
    inventory = load_inventory(str(REPO / "tests" / "reference_configs" / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4"))
    by_name = {b.name: b for b in backends_for("nvfp4-w4a4", hardware)}
    marlin, w4a4 = by_name["NVFP4 W4A4 on Marlin"], by_name["NVFP4 W4A4 FlashInfer CUTLASS"]

    def tok_s(backend, batch):
        return price_step(inventory, hardware, StepConfig(batch=batch, context=1536, kv_cache_dtype="fp8",
                                                          backend=backend, routing=SAME_EXPERTS)).tok_s

    assert tok_s(marlin, 1) > tok_s(w4a4, 1)
    assert tok_s(w4a4, 16) > 1.4 * tok_s(marlin, 16)


def test_fit_refuses_a_row_it_cannot_use(tmp_path):
    bad = tmp_path / "runs.csv"
    lines = (REPO / "benchmarks" / "gb10" / "results.csv").read_text().splitlines()
    bad.write_text("\n".join([lines[0], lines[1].replace(",1,decode_tok_s_single_stream,", ",one,decode_tok_s_single_stream,")]))
    done = subprocess.run([sys.executable, str(FIT_SCRIPT), str(bad)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "line 2" in done.stderr and "Traceback" not in done.stderr


def test_estimates_on_gb10_repeat_a_fitted_figure(gb10):
    """A 12.1 rate labelled "estimate" (a Marlin kernel the bench never ran) carries a fitted family's figure."""
    _, _, stored = gb10
    fitted = {f["gemm_utilization"] for f in stored["coefficients"]["weight_only"].values()}
    gb10_hw = get_hardware("gb10")
    estimates = [b for b in backends() if b.rate(gb10_hw) and b.rate(gb10_hw).kind == "estimate"]
    assert estimates
    for backend in estimates:
        assert backend.gemm_utilization(gb10_hw) in fitted, backend.name


def test_plan_ranks_w4a4_first_at_16_shared_streams_and_w4a16_at_one():
    """`plan --concurrency 16 --routing shared` for Nemotron-3-Nano NVFP4 on GB10 (the published c=16 bench
    sent one prompt to every stream): W4A4 first; at one stream W4A16; the routing is in the answer."""
    done = subprocess.run([sys.executable, "-m", "roofline.cli", "plan",
                           str(REPO / "tests" / "reference_configs" / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4"),
                           "--formats", "nvfp4-w4a4,nvfp4-w4a16", "--concurrency", "16", "--routing", SAME_EXPERTS,
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["workload"]["routing"] == SAME_EXPERTS
    assert plan["top_pick"]["format"] == "nvfp4-w4a4" and plan["top_pick"]["gemm_compute"] == "fp4"
    assert plan["pick_at_one"]["format"] == "nvfp4-w4a16"

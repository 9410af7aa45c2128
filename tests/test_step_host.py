"""The engine's host time per step (launch.toml [step_host]): measured under real `vllm serve` on the H200 box with
a model whose GPU step is ~0.3 ms (benchmarks/results/vllm_h200_host, `vllm bench serve --max-concurrency N`),
and with CUDA graphs the least a step takes (vLLM's async scheduling forms step n + 1 on the host while the GPU
runs step n). Recorded runs carry the figures; nothing here times anything."""
from __future__ import annotations

import gzip
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from roofline.audit import load_inventory
from roofline.data import load_table
from roofline.predict.hardware import get_hardware
from roofline.predict.launch import launch_costs
from roofline.predict.step import StepConfig, price_step

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "serving"))

import step_host  # noqa: E402  (benchmarks/serving/step_host.py)

TINY = ROOT / "benchmarks" / "gpu_vllm" / "configs" / "Qwen3-0.6B-2layers"


@pytest.fixture(scope="module")
def tiny():
    return load_inventory(str(TINY))


def test_the_table_is_the_fit_of_the_recorded_runs():
    data = step_host.points()
    assert sorted({batch for _, batch, _ in data}) == [1, 8, 32, 48, 64, 128, 256]
    assert len(data) == 11  # four server starts
    fixed_us, per_request_us = step_host.fit(data)
    table = load_table("launch")["step_host"]
    for host, row in step_host.rows(fixed_us, per_request_us, step_host.per_kind_us()).items():
        assert table[host]["fixed_us"] == row["fixed_us"] and table[host]["per_request_us"] == row["per_request_us"]
        assert table[host]["per_kv_group_us"] == row["per_kv_group_us"] and table[host]["kind"] == row["kind"]
        assert table[host]["per_kv_group_us_by_kind"] == row["per_kv_group_us_by_kind"]
    # one line through every start's runs: within the spread between starts (1.60-2.51 ms at a batch of 8)
    for _, batch, ms in data:
        assert (fixed_us + per_request_us * batch) / 1e3 == pytest.approx(ms, rel=0.25)
    assert table["x86_server"]["kind"] == "measured" and "vllm_h200_host" in table["x86_server"]["source"]


def test_a_short_gpu_step_takes_the_host_s_time_with_graphs_and_not_eager(tiny):
    hardware = get_hardware("h200")
    costs = launch_costs(hardware)
    for batch in (1, 32, 256):
        step = price_step(tiny, hardware, StepConfig(batch=batch, context=256))
        host_ms = (costs.step_host_us + costs.step_host_us_per_request * batch) / 1e3
        assert step.step_ms == pytest.approx(host_ms)
        b = step.breakdown()
        assert b.bound == "host" and b.host_s > 0
        assert b.seconds * 1e3 == pytest.approx(step.step_ms)  # the parts still add up to the step
        assert step.main.device_period_s(True) * 1e3 < host_ms
    eager = price_step(tiny, hardware, StepConfig(batch=1, context=256, graphs=False))
    assert eager.breakdown().host_s == 0.0  # eager's fitted host cost per kernel holds the engine's time


def test_a_long_gpu_step_is_untouched(tiny):
    """A full-size model's step is longer than the host's: the host floor changes nothing."""
    inventory = load_inventory(str(ROOT / "tests" / "reference_configs" / "Qwen__Qwen3-8B"))
    step = price_step(inventory, get_hardware("h200"), StepConfig(batch=32, context=1024))
    assert step.breakdown().host_s == 0.0
    assert step.step_ms == pytest.approx(step.main.device_period_s(True) * 1e3)


def test_a_cpu_host_has_no_step_floor(tiny):
    cpu = replace(get_hardware("h200"), host="cpu")
    assert launch_costs(cpu).step_host_s(64) == 0.0


def test_the_served_runs_replayed_through_the_load_model(tiny):
    """The closed-loop runs of the 2-layer model, replayed at the client's own start times through the load model:
    its time per output token is the host's, within the spread between server starts (without the floor the model
    was 7-12x too fast)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "serving"))
    from load_check import trace
    from predict import server

    from roofline.advise.load import serve

    for batch in (8, 64, 128):
        path = step_host.RESULTS / f"qwen3-06b-2l-conc-{batch}.json.gz"
        with gzip.open(path, "rt") as fh:
            run = json.load(fh)
        s = server("h200", str(TINY.relative_to(ROOT)), "")
        result = serve(s, trace(run))
        assert result.tpot.mean * 1e3 == pytest.approx(run["mean_tpot_ms"], rel=0.25)


def test_audit_says_when_the_engine_s_host_sets_the_step():
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", str(TINY), "--hardware", "h200"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = next(l for l in proc.stdout.splitlines() if l.strip().startswith("expected"))
    assert "the engine's host" in line and line.rstrip().endswith("host-bound)")
    big = subprocess.run([sys.executable, "-m", "roofline.cli", "audit",
                          str(ROOT / "tests" / "reference_configs" / "Qwen__Qwen3-8B"), "--hardware", "h200"],
                         capture_output=True, text=True, timeout=120)
    assert big.returncode == 0 and "the engine's host" not in big.stdout


def test_without_async_scheduling_the_host_adds_to_the_gpu(tiny):
    """--no-async-scheduling: vLLM schedules, runs and processes each step in turn, so the host's time adds up."""
    hardware = get_hardware("h200")
    overlapped = price_step(tiny, hardware, StepConfig(batch=8, context=256))
    serial = price_step(tiny, hardware, StepConfig(batch=8, context=256, async_scheduling=False))
    device_ms = serial.main.device_period_s(True) * 1e3
    assert serial.step_ms == pytest.approx(device_ms + serial.main.host_s * 1e3)
    assert overlapped.step_ms == pytest.approx(overlapped.main.host_s * 1e3)
    assert overlapped.step_ms < serial.step_ms
    assert serial.breakdown().seconds * 1e3 == pytest.approx(serial.step_ms)


def test_a_host_set_step_prints_the_host_regime_s_band(tiny):
    """A step the engine's host time sets takes the band of such steps (every family's, held out), not its
    family's: the host's speed, not the model, is what is uncertain there (validation.toml regime "host")."""
    from roofline.predict.bands import HOST_REGIME, band_for, step_regime
    from roofline.predict.traffic import Scenario
    from roofline.audit import run_audit

    hardware = get_hardware("h200")
    short = run_audit(tiny, Scenario(batch=1, context=256), hardware)
    assert step_regime(short.step) == HOST_REGIME
    band = short.band()
    assert band.regime == HOST_REGIME and "host time sets" in band.text()
    table = next(e for e in load_table("validation")["band"] if e.get("regime") == HOST_REGIME)
    assert band.error == pytest.approx(table["error"]) and table["basis"] == "out of sample"
    # the same family's device-set step keeps its family's band
    dense = load_inventory(str(ROOT / "tests" / "reference_configs" / "Qwen__Qwen3-8B"))
    long = run_audit(dense, Scenario(batch=1, context=1024), hardware)
    assert step_regime(long.step) == "" and long.band().regime == "" and long.band().family == "dense"
    assert long.band().error < band.error
    # eager steps are their family's (the fitted host cost per kernel holds the host's time)
    assert band_for(tiny, hardware, graphs=False, regime=step_regime(short.step)).mode == "eager"


def test_plan_prices_and_prints_no_async_scheduling():
    """plan --no-async-scheduling: every row priced with the host's time after the GPU's, and its serve line says so."""
    import subprocess

    def plan(*flags):
        proc = subprocess.run([sys.executable, "-m", "roofline.cli", "plan", str(TINY), "--hardware", "h200", "--json",
                               *flags], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["recommendations"]

    overlapped, serial = plan(), plan("--no-async-scheduling")
    assert serial[0]["single_stream_tok_s"] < overlapped[0]["single_stream_tok_s"]
    assert all("--no-async-scheduling" in r["serve_command"] for r in serial)
    assert not any("async-scheduling" in r["serve_command"] for r in overlapped)


def test_vllm_s_async_default_follows_the_speculation_and_the_executor(tiny):
    """vLLM 0.26 turns async scheduling off for a draft model or ngram (its log: 'Asynchronous scheduling is
    disabled', benchmarks/results/vllm_h200_spec/q8-d3.log, q8-n3.log) and under Ray's executor (several boxes); the
    step is priced as it runs, and a flag given wins where vLLM accepts it."""
    from roofline.predict.scheduler_config import async_refusal, async_scheduling
    from roofline.predict.topology import Topology, tensor_parallel_placement

    h200, gb10 = get_hardware("h200"), get_hardware("gb10")
    for method, on in (("mtp", True), ("eagle3", True), ("ngram_gpu", True), ("draft_model", False), ("ngram", False),
                       ("suffix", False), (None, True)):
        assert async_scheduling(h200, None, method).on is on, method
        assert async_scheduling(h200, False, method).on is False
    assert async_scheduling(h200, True, "draft_model").on and async_refusal(h200, True, "draft_model") is None
    assert "only supported with EAGLE" in async_refusal(h200, True, "ngram")
    assert not async_scheduling(gb10, None, None, boxes=2).on and "Ray" in async_scheduling(gb10, None, None, 2).why
    assert "ray" in async_refusal(gb10, True, None, boxes=2)
    assert not async_scheduling(replace(h200, host="cpu"), True).on  # vLLM-CPU turns it off whatever is given
    # the step model resolves it with the placement: two Sparks over ConnectX-7 run under Ray
    two_boxes = price_step(tiny, gb10, StepConfig(topology=Topology(tp=2),
                                                  placement=tensor_parallel_placement(gb10, 2)))
    one_box = price_step(tiny, gb10, StepConfig())
    assert two_boxes.config.async_scheduling is False and one_box.config.async_scheduling is True
    spec = price_step(tiny, h200, StepConfig(speculative_tokens=3, draft_method="ngram", acceptance_rate=0.0))
    assert spec.config.async_scheduling is False
    assert spec.step_ms == pytest.approx(spec.main.device_period_s(True) * 1e3 + spec.main.host_s * 1e3)


ASYNC_RUNS = ROOT / "benchmarks" / "results" / "vllm_h200_async"


def test_turning_async_scheduling_off_costs_the_host_s_step_as_measured():
    """Real vLLM 0.26 on an H200 (benchmarks/results/vllm_h200_async, one machine start): Qwen3-8B served and offline
    with async scheduling on and off. Off, each step waits for the engine's host step (1.5-2.0 ms measured); the step
    model adds the measured host step (launch.toml [step_host.x86_server]) and nothing fitted to these runs."""
    import subprocess

    def step_ms(batch, context, *flags):
        proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", str(ROOT / "tests" / "reference_configs" /
                               "Qwen__Qwen3-8B"), "--hardware", "h200", "--batch", str(batch), "--context",
                               str(context), "--json", *flags], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["step"]["step_ms"]

    runs = {name: json.loads((ASYNC_RUNS / f"{name}.json").read_text()) for name in ("q8-r0-on-1202", "q8-r0-off-1202")}
    assert runs["q8-r0-on-1202"]["async_scheduling"] and not runs["q8-r0-off-1202"]["async_scheduling"]
    for on_row, off_row in zip(runs["q8-r0-on-1202"]["decode"], runs["q8-r0-off-1202"]["decode"]):
        batch, context = off_row["batch"], off_row["context"]
        off = step_ms(batch, context, "--no-async-scheduling")
        assert abs(off / off_row["step_ms"] - 1) < 0.10, (batch, off, off_row["step_ms"])
        cost = off - step_ms(batch, context, "--async-scheduling")
        assert abs(cost - (off_row["step_ms"] - on_row["step_ms"])) < 0.35, (batch, cost)
    for batch in (1, 8):  # served: the time per output token of `vllm bench serve --max-concurrency N`
        served = {}
        for mode in ("on", "off"):
            with gzip.open(ASYNC_RUNS / f"q8-async-{mode}-conc-{batch}.json.gz", "rt") as fh:
                served[mode] = json.load(fh)["mean_tpot_ms"]
        cost = step_ms(batch, 160, "--no-async-scheduling") - step_ms(batch, 160, "--async-scheduling")
        assert abs(cost - (served["off"] - served["on"])) < 0.35, (batch, cost, served)


@pytest.mark.parametrize("async_on", [True, False])
@pytest.mark.parametrize("runner", ["v1", "v2"])
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_batches_in_flight_are_vllm_s_own(async_on, runner, pp):
    """The batches a sliding-window KV group holds tokens of (capacity's max_in_flight_tokens) are vLLM's
    VllmConfig.max_concurrent_batches, run here on the installed vLLM's own property."""
    from types import SimpleNamespace

    from vllm.config import VllmConfig

    from roofline.predict.scheduler_config import max_concurrent_batches

    config = SimpleNamespace(parallel_config=SimpleNamespace(pipeline_parallel_size=pp),
                             scheduler_config=SimpleNamespace(async_scheduling=async_on),
                             use_v2_model_runner=runner == "v2")
    assert max_concurrent_batches(async_on, runner, pp) == VllmConfig.max_concurrent_batches.fget(config)


def test_a_given_async_scheduling_vllm_refuses_is_never_priced(tiny):
    """--async-scheduling over two Sparks (Ray's executor) or with CPU ngram: vLLM refuses to start, so the step
    model refuses to price it, for every command alike."""
    from roofline.errors import RooflineError
    from roofline.predict.topology import Topology, tensor_parallel_placement

    gb10 = get_hardware("gb10")
    with pytest.raises(RooflineError, match="ray"):
        price_step(tiny, gb10, StepConfig(topology=Topology(tp=2), placement=tensor_parallel_placement(gb10, 2),
                                          async_scheduling=True))
    with pytest.raises(RooflineError, match="only supported with EAGLE"):
        price_step(tiny, gb10, StepConfig(speculative_tokens=2, draft_method="ngram", async_scheduling=True))
    assert price_step(tiny, gb10, StepConfig(speculative_tokens=2, draft_method="ngram", async_scheduling=False))


GRANITE = ROOT / "benchmarks" / "gpu_vllm" / "configs"


def test_the_host_builds_every_kv_cache_groups_metadata_a_step():
    """Granite-4.0-H-1B cut to 9 Mamba2 layers and 1 of attention makes ten KV cache groups, cut to 9 + 9 two (vLLM
    groups layers by kind, each group as large as the smallest kind): its model runner's host time per step, timed on
    one machine start (probe.py --time-host), differs by the eight groups' metadata, which launch.toml prices per
    group past the first, and every step of a model of many groups carries it."""
    from roofline.predict.kv_capacity import kv_cache_groups

    data = step_host.group_points()
    assert sorted({groups for _, groups, _, _ in data}) == [2, 10] and {batch for _, _, batch, _ in data} == {1, 8}
    per_group = step_host.per_group_us(data)
    assert 80 < per_group < 150  # 0.81 and 1.03 ms over the eight groups at batches 1 and 8
    # the 18-layer cut ran from the config the device wrote (its probe file names /tmp/g18): the one kept here
    kept = json.loads((ROOT / "benchmarks" / "results" / "vllm_h200_host_groups" / "g18-config.json").read_text())
    assert kept == json.loads((GRANITE / "Granite-4.0-H-1B-18layers-9m9a" / "config.json").read_text())
    groups = {name: kv_cache_groups(load_inventory(str(GRANITE / name)).shape) for name in
              ("Granite-4.0-H-1B", "Granite-4.0-H-1B-10layers-9m1a", "Granite-4.0-H-1B-18layers-9m9a",
               "gemma-3-12b-text", "Qwen3-Next-80B-A3B-12layers", "Qwen3-0.6B-2layers")}
    assert groups == {"Granite-4.0-H-1B": 10, "Granite-4.0-H-1B-10layers-9m1a": 10,
                      "Granite-4.0-H-1B-18layers-9m9a": 2, "gemma-3-12b-text": 6, "Qwen3-Next-80B-A3B-12layers": 4,
                      "Qwen3-0.6B-2layers": 1}
    hardware = get_hardware("h200")
    costs = launch_costs(hardware)
    ten = load_inventory(str(GRANITE / "Granite-4.0-H-1B-10layers-9m1a"))
    step = price_step(ten, hardware, StepConfig(batch=1, context=1024))
    assert step.main.kv_groups == ("attention",) + ("mamba",) * 9
    assert costs.step_host_us_per_kv_group == load_table("launch")["step_host"]["x86_server"]["per_kv_group_us"]
    host_ms = (costs.step_host_us + costs.step_host_us_per_request + 9 * costs.step_host_us_per_kv_group) / 1e3
    assert step.main.host_s * 1e3 == pytest.approx(host_ms) and step.step_ms == pytest.approx(host_ms)
    # the measured step of that cut (3.16 ms at batch 1) is its host's: the step priced within the host regime's band
    run = json.loads((ROOT / "benchmarks" / "results" / "vllm_h200_host_groups" /
                      "g4h-1b-9m1a-host-graphs-1202w.json").read_text())
    measured = next(r["step_ms"] for r in run["decode"] if r["batch"] == 1)
    assert step.step_ms == pytest.approx(measured, rel=0.15)
    # one group: nothing added
    tiny = price_step(load_inventory(str(TINY)), hardware, StepConfig(batch=1, context=256))
    assert tiny.main.kv_groups == ("attention",) and tiny.main.host_s * 1e3 == pytest.approx(
        (costs.step_host_us + costs.step_host_us_per_request) / 1e3)


def test_a_gdn_groups_metadata_costs_the_host_its_own_time():
    """GDN's metadata builder rebuilds its state's every step (vLLM 0.26 gives it no update_block_table): Qwen3-Next cut
    to 9 GDN layers and 1 of attention (ten groups) against 9 + 9 (two), timed the same way on one machine start, puts
    a GDN group at ~220 us where a Mamba2 group took ~115; a model's steps carry its own kind's figure, and the audit
    names the kind."""
    data = step_host.group_points("gdn")
    assert sorted({groups for _, groups, _, _ in data}) == [2, 10] and {batch for _, _, batch, _ in data} == {1, 8}
    per_kind = step_host.per_kind_us()
    assert 180 < per_kind["gdn"] < 260 and per_kind["gdn"] > 1.5 * per_kind["mamba"]
    hardware = get_hardware("h200")
    costs = launch_costs(hardware)
    assert costs.kv_group_us("gdn") == load_table("launch")["step_host"]["x86_server"]["per_kv_group_us_by_kind"]["gdn"]
    assert costs.kv_group_us("sliding 128") == costs.kv_group_us("mamba") == costs.step_host_us_per_kv_group
    ten = load_inventory(str(GRANITE / "Qwen3-Next-80B-A3B-10layers-9g1a"))
    step = price_step(ten, hardware, StepConfig(batch=1, context=1024))
    assert step.main.kv_groups == ("attention",) + ("gdn",) * 9
    assert step.main.host_s * 1e3 == pytest.approx(
        (costs.step_host_us + costs.step_host_us_per_request + 9 * costs.kv_group_us("gdn")) / 1e3)
    from roofline.render.audit import _kv_groups_text

    assert _kv_groups_text(step) == f" + {costs.kv_group_us('gdn'):g} us x 9 more KV cache groups (gdn)"
    # the run was the 12-layer config with --hf-overrides: the folder here is those layers, checked against the run
    run = json.loads((ROOT / "benchmarks" / "results" / "vllm_h200_host_gdn" / "qnext-9g1a-host-1202z.json").read_text())
    assert run["hf_overrides"]["layer_types"] == json.loads(
        (GRANITE / "Qwen3-Next-80B-A3B-10layers-9g1a" / "config.json").read_text())["layer_types"]

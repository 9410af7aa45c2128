"""The first token and the server under load (#42), the model: prompt chunks priced in the one step model
(predict/step.py), the step pricer the load model keeps (StepPricer) equal to price_step step for step, vLLM's
scheduler as policy (predict/scheduler.py) and the load model (predict/load.py) kept to their invariants, the
workloads (predict/workload.py), and the prefill rates table tied to the fit it says it rests on.

Inputs: real config.json files of public models (tests/reference_configs: config-only inventories)."""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from roofline.advise.load import Server, Targets, highest_rate, saturation, serve, server_for
from roofline.errors import RooflineError
from roofline.predict.hardware import get_hardware
from roofline.predict.load import simulate, stat
from roofline.predict.scheduler import Blocks, Live, SchedulerState, blocks_per
from roofline.predict.scheduler_config import SchedulerSettings
from roofline.predict.step import Chunk, StepConfig, StepPricer, price_step
from roofline.predict.workload import Request, Workload, generate

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "tests" / "reference_configs"
MODELS = {"dense": "Qwen__Qwen3-8B", "moe": "Qwen__Qwen3-30B-A3B", "hybrid": "nvidia__Qwen3.6-35B-A3B-NVFP4",
          "mamba": "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"}


@pytest.fixture(scope="module")
def inventories():
    from roofline.sources.config import load_config_only
    return {kind: load_config_only(str(CONFIGS / name)) for kind, name in MODELS.items()}


def _settings(**kw) -> SchedulerSettings:
    base = dict(max_num_batched_tokens=2048, max_num_seqs=256, max_num_active_seqs=256, chunked_prefill=True,
                async_scheduling=False, long_prefill_token_threshold=0, prefix_caching=True, block_size=16,
                defaults_source="the test's")
    return SchedulerSettings(**{**base, **kw})


def _server(inventory, hardware="h200", blocks=20_000, **settings) -> Server:
    hw = get_hardware(hardware)
    s = _settings(**settings)
    return server_for(inventory, hw, StepConfig(context=1024), s, num_blocks=blocks,
                      blocks_for=lambda n, b=s.block_size: blocks_per(n, b), max_model_len=32768)


# ----------------------------------------------------------------------------- the step model's prompt steps

@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("hardware", ["gb10", "h200"])
def test_step_pricer_prices_every_step_as_price_step(inventories, kind, hardware):
    """The load model's pricer is price_step with its terms kept: the same seconds for decodes alone, prompt
    chunks alone and both together."""
    inv, hw = inventories[kind], get_hardware(hardware)
    pricer = StepPricer(inv, hw, StepConfig(context=1024))
    cases = [(1, 1024, ()), (8, 3000, ()), (64, 700, ()), (0, 0, (Chunk(512),)), (0, 0, (Chunk(2048, 4096, False),)),
             (4, 2000, (Chunk(300, 100),)), (30, 1500, (Chunk(1000), Chunk(18, 60)))]
    for decodes, context, chunks in cases:
        step = price_step(inv, hw, StepConfig(batch=decodes, context=context, chunks=chunks))
        assert pricer.seconds(decodes, context, chunks) == pytest.approx(step.main.period_s(True), rel=1e-9), \
            (decodes, context, chunks)


@pytest.mark.parametrize("kind", list(MODELS))
def test_a_prompt_is_priced_by_compute_not_by_decode_steps(inventories, kind):
    """A prompt of P tokens costs far less than P decode steps, more than one, and grows with P; its tokens get
    cheaper each as a chunk grows (the GEMMs' ramp), and decodes beside a chunk add to the step."""
    inv, hw = inventories[kind], get_hardware("h200")
    pricer = StepPricer(inv, hw, StepConfig(context=1024))
    one_decode = pricer.seconds(1, 1024)
    prompt = [pricer.seconds(0, 0, (Chunk(p),)) for p in (64, 512, 2048, 8192)]
    assert all(a < b for a, b in zip(prompt, prompt[1:]))
    assert one_decode < prompt[-1] < 8192 * one_decode / 20
    per_token = [t / p for t, p in zip(prompt, (64, 512, 2048, 8192))]
    assert per_token[1] < per_token[0]
    mixed = pricer.seconds(16, 2048, (Chunk(512),))
    assert mixed > pricer.seconds(0, 0, (Chunk(512),)) and mixed > pricer.seconds(16, 2048)


@pytest.mark.parametrize("kind", ["hybrid", "mamba"])
def test_a_hybrid_short_prompt_waits_on_the_host_launching_its_scans(inventories, kind):
    """A recurrent layer's chunked scan runs outside vLLM's CUDA graphs, its Python wrapper launching a dozen
    kernels (prefill.toml [scan_host], measured): a short prompt's step is bound by that host time, a long one's by
    the GPU; decode steps never pay it."""
    from dataclasses import replace as swap

    from roofline.predict.prefill import scan_host_us_per_layer

    inv, hw = inventories[kind], get_hardware("h200")
    per_layer, table_kind, _ = scan_host_us_per_layer(hw)
    assert table_kind in ("measured", "calibrated") and per_layer["gdn"] > 0 and per_layer["mamba"] > 0
    pricer = StepPricer(inv, hw, StepConfig(context=1024))
    layers = len(inv.shape.recurrent)
    short, long, decode = (pricer.seconds(0, 0, (Chunk(256),)), pricer.seconds(0, 0, (Chunk(8192),)),
                           pricer.seconds(8, 1024))
    kinds = {layer.kind for layer in inv.shape.recurrent}
    assert short >= layers * min(per_layer[k] for k in kinds) * 1e-6
    pricer._terms = swap(pricer._terms, scan_host_us={})
    assert pricer.seconds(0, 0, (Chunk(256),)) < 0.8 * short  # the host's time is most of a short prompt's step
    assert pricer.seconds(0, 0, (Chunk(8192),)) > 0.7 * long
    assert pricer.seconds(8, 1024) == pytest.approx(decode)


def test_attention_of_narrow_heads_and_windows_reaches_its_own_share():
    """FlashAttention reaches less with 64-wide heads and little over a 128-token window (kernels measured on the
    H200, prefill.toml): the shares the step model takes by layer, ramping up with the chunk's tokens."""
    from roofline.predict.prefill import prefill_rates

    rates = prefill_rates(get_hardware("h200"))
    wide, narrow, window = (rates.attention_share(128, False, 8192), rates.attention_share(64, False, 8192),
                            rates.attention_share(64, True, 8192))
    assert window < narrow < wide <= rates.attention
    assert rates.attention_share(128, False, 512) < 0.5 * wide  # a short chunk's attention: few tiles
    gb10 = prefill_rates(get_hardware("gb10"))  # the H200's kernels x one tensor-core factor: the same ratios
    assert gb10.attention_share(64, True, 8192) / gb10.attention_share(128, False, 8192) == \
        pytest.approx(window / wide, rel=1e-2)


def test_causal_attention_makes_later_chunks_dearer(inventories):
    """The same 2,048 tokens cost more after 28k tokens of the prompt than at its start (attention over what the
    chunk follows)."""
    pricer = StepPricer(inventories["dense"], get_hardware("h200"), StepConfig(context=1024))
    assert pricer.seconds(0, 0, (Chunk(2048, 28_000, False),)) > 1.2 * pricer.seconds(0, 0, (Chunk(2048, 0, False),))


def test_first_token_is_the_chunks_plus_the_host(inventories):
    server = _server(inventories["dense"], max_num_batched_tokens=1024)
    parts = server.first_token_json(4000)
    assert len(parts["prompt_steps_ms"]) == 4  # 1024 + 1024 + 1024 + 928
    assert parts["ttft_ms"] == pytest.approx(parts["request_overhead_ms"] + sum(parts["prompt_steps_ms"]))
    assert server.first_token_s(4000) * 1e3 == pytest.approx(parts["ttft_ms"])
    assert parts["rates"]["kind"] in ("measured", "calibrated", "estimate") and parts["rates"]["source"]
    # a smaller step budget splits the prompt into more, smaller steps: never a faster first token here
    assert _server(inventories["dense"], max_num_batched_tokens=512).first_token_s(4000) >= server.first_token_s(4000)


# ----------------------------------------------------------------------------- the scheduler

def test_a_step_never_exceeds_its_token_budget_nor_the_kv_cache():
    settings = _settings(max_num_batched_tokens=256, max_num_seqs=8, max_num_active_seqs=8)
    blocks = Blocks(120, lambda n: blocks_per(n, 16))
    state = SchedulerState(settings, blocks)
    lives = [Live(i, Request(0.0, 300 + 37 * i, 20)) for i in range(12)]
    state.waiting.extend(lives)
    for _ in range(400):
        plan = state.form_step()
        if plan.empty:
            break
        tokens = len(plan.decodes) + sum(take for _, take in plan.chunks)
        assert tokens <= settings.max_num_batched_tokens
        assert len(state.running) <= settings.max_num_active_seqs
        assert 0 <= blocks.free <= blocks.total
        assert sum(l.blocks for l in state.running) == blocks.total - blocks.free
        for live, take in plan.chunks:
            live.computed += take
            if not live.prefilling and not live.generated:
                live.generated = 1
        for live in plan.decodes:
            live.computed += 1
            live.generated += 1
            state._grow(live, live.computed)
        for live in [l for l in state.running if l.done]:
            live.admitted = False
            state.release(live)
        state.running = [l for l in state.running if l.admitted]
    assert all(l.done for l in lives) and blocks.free == blocks.total


# ----------------------------------------------------------------------------- the load model

def _requests(n=60, rate=5.0, prompt=700, output=120, seed=3, **kw):
    return generate(Workload(arrival="poisson", rate=rate, requests=n, prompt_len=prompt, output_len=output,
                             range_ratio=0.3, seed=seed, **kw))


def test_every_request_ends_every_token_is_counted_every_block_returns(inventories):
    server = _server(inventories["moe"], blocks=600, max_num_seqs=32, max_num_active_seqs=32)
    requests = _requests()
    blocks = server.blocks()
    result = simulate(server.pricer, server.settings, blocks, requests, overhead_s=server.overhead_s)
    assert result.completed == result.requests == len(requests)
    assert blocks.free == blocks.total
    assert result.itl.count == sum(r.output - 1 for r in requests)  # the first token is the prompt step's
    for (arrival, ttft, e2e, tpot), request in zip(result.per_request, requests):
        assert arrival == request.arrival_s
        assert server.overhead_s < ttft <= e2e
    assert result.e2e.p50 <= result.e2e.p90 <= result.e2e.p99
    assert result.request_throughput == pytest.approx(len(requests) / result.duration_s)


def test_a_run_is_reproducible_and_its_seed_matters(inventories):
    server = _server(inventories["dense"])
    w = Workload(arrival="poisson", rate=8.0, requests=80, prompt_len=512, output_len=64, range_ratio=0.5, seed=11)
    a, b, c = serve(server, w), serve(server, w), serve(server, replace(w, seed=12))
    assert a.to_json() == b.to_json()
    assert a.to_json() != c.to_json()


def test_a_tight_cache_preempts_and_still_finishes(inventories):
    """KV blocks for a few requests only: vLLM preempts the newest running request and recomputes it later."""
    server = _server(inventories["dense"], blocks=90, max_num_seqs=64, max_num_active_seqs=64)
    result = simulate(server.pricer, server.settings, server.blocks(),
                      [Request(0.0, 400, 600) for _ in range(8)])
    assert result.preemptions > 0 and result.completed == 8
    roomy = _server(inventories["dense"], blocks=5000, max_num_seqs=64, max_num_active_seqs=64)
    assert simulate(roomy.pricer, roomy.settings, roomy.blocks(), [Request(0.0, 400, 600) for _ in range(8)]).preemptions == 0


def test_a_burst_queues_and_its_first_tokens_grow(inventories):
    """Twenty long prompts at once: they share prompt steps, so the later ones' first tokens come many times
    later than one request's alone."""
    server = _server(inventories["dense"])
    alone = server.first_token_s(4000)
    burst = serve(server, Workload(arrival="burst", requests=20, prompt_len=4000, output_len=32))
    assert burst.ttft.p90 > 4 * alone
    assert burst.ttft.p50 >= alone * 0.99
    assert burst.max_waiting > 0


def test_latency_grows_with_the_rate_and_saturates(inventories):
    server = _server(inventories["moe"])
    w = Workload(arrival="poisson", rate=1.0, requests=150, prompt_len=1024, output_len=128, seed=5)
    sat = saturation(server, w)
    low, high = (serve(server, replace(w, rate=share * sat)) for share in (0.2, 1.5))
    assert low.ttft.p90 < high.ttft.p90 and low.e2e.mean < high.e2e.mean
    assert low.itl.mean < high.itl.mean  # more decodes and chunks share each step
    assert low.request_throughput < high.request_throughput <= 1.1 * sat


def test_the_highest_rate_keeps_the_targets_and_one_above_it_does_not(inventories):
    server = _server(inventories["dense"])
    w = Workload(arrival="poisson", rate=1.0, requests=120, prompt_len=2048, output_len=128, seed=2)
    targets = Targets(ttft_p90_s=0.25)
    answer = highest_rate(server, w, targets, band=0.2)
    assert answer.rate is not None and answer.rate < answer.saturation
    assert not targets.broken(serve(server, replace(w, rate=answer.rate)))
    assert targets.broken(serve(server, replace(w, rate=answer.rate * 1.05)))
    assert answer.low < answer.rate < answer.high  # steps priced slower by the band keep a lower rate
    assert "TTFT p90" in answer.breaks_first[0]
    with pytest.raises(RooflineError):
        highest_rate(server, w, Targets())


def test_a_shared_prefix_is_computed_once(inventories):
    server = _server(inventories["dense"])
    w = Workload(arrival="poisson", rate=2.0, requests=60, prompt_len=3000, output_len=16, seed=4)
    plain, shared = serve(server, w), serve(server, replace(w, shared_prefix=0.8))
    assert shared.ttft.mean < 0.6 * plain.ttft.mean


def test_async_scheduling_sees_arrivals_a_step_late(inventories):
    server = _server(inventories["dense"], async_scheduling=True)
    sync = _server(inventories["dense"], async_scheduling=False)
    w = Workload(arrival="poisson", rate=6.0, requests=80, prompt_len=256, output_len=200, seed=9)
    assert serve(server, w).ttft.mean > serve(sync, w).ttft.mean


def test_speculative_steps_take_more_tokens_each(inventories):
    inv, hw = inventories["dense"], get_hardware("h200")
    s = _settings()
    plain = server_for(inv, hw, StepConfig(context=1024), s, num_blocks=20_000,
                       blocks_for=lambda n: blocks_per(n, 16), max_model_len=32768)
    spec = server_for(inv, hw, StepConfig(context=1024, speculative_tokens=3, acceptance_rate=0.8), s,
                      num_blocks=20_000, blocks_for=lambda n: blocks_per(n, 16), max_model_len=32768)
    w = Workload(arrival="poisson", rate=1.0, requests=20, prompt_len=256, output_len=400, seed=1)
    a, b = serve(plain, w), serve(spec, w)
    assert b.steps < 0.7 * a.steps
    assert b.tpot.mean < a.tpot.mean


def test_a_request_longer_than_the_model_or_the_cache_is_one_line(inventories):
    server = _server(inventories["dense"], blocks=10)
    with pytest.raises(RooflineError, match="KV blocks"):
        simulate(server.pricer, server.settings, server.blocks(), [Request(0.0, 500, 10)])
    long = replace(_server(inventories["dense"]), max_model_len=1000)
    with pytest.raises(RooflineError, match="max-model-len"):
        serve(long, Workload(arrival="burst", requests=2, prompt_len=990, output_len=20))


def test_weighted_percentiles_are_numpy_percentiles_of_the_expanded_samples():
    import numpy as np

    rng = np.random.default_rng(0)
    values = rng.random(50)
    weights = rng.integers(1, 9, 50)
    expanded = np.repeat(values, weights)
    s = stat(values, weights)
    assert [s.p50, s.p90, s.p99] == pytest.approx(list(np.percentile(expanded, (50, 90, 99))))
    assert s.mean == pytest.approx(expanded.mean()) and s.count == expanded.size


# ----------------------------------------------------------------------------- workloads

def test_poisson_arrivals_have_the_rate_and_lengths_stay_in_range():
    requests = generate(Workload(arrival="poisson", rate=4.0, requests=4000, prompt_len=1000, output_len=100,
                                 range_ratio=0.25, seed=7))
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(requests, requests[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(0.25, rel=0.06)
    assert all(750 <= r.prompt <= 1250 and 75 <= r.output <= 125 for r in requests)
    constant = generate(Workload(arrival="constant", rate=2.0, requests=5, prompt_len=10, output_len=3))
    assert [r.arrival_s for r in constant] == pytest.approx([0, 0.5, 1.0, 1.5, 2.0])
    burst = generate(Workload(arrival="burst", requests=6, prompt_len=10, output_len=3))
    assert {r.arrival_s for r in burst} == {0.0}


@pytest.mark.parametrize("bad", [dict(arrival="poisson", rate=0), dict(arrival="burst", requests=0),
                                 dict(arrival="poisson", rate=1, range_ratio=1.0),
                                 dict(arrival="poisson", rate=1, shared_prefix=-0.1),
                                 dict(arrival="trace"), dict(arrival="gamma", rate=1)])
def test_a_bad_workload_is_one_line(bad):
    with pytest.raises(RooflineError):
        Workload(**bad).validate()


# ----------------------------------------------------------------------------- the rates table and its fit

def _serving_script(name: str):
    """benchmarks/serving/NAME.py under a name of its own (benchmarks/gpu_vllm has a fit.py too: whichever a test
    imported first as `fit` would answer both)."""
    import importlib.util

    folder = REPO / "benchmarks" / "serving"
    key = f"roofline_serving_{name}"
    if key not in sys.modules:
        sys.path.insert(0, str(folder))  # its own imports: points, predict
        spec = importlib.util.spec_from_file_location(key, folder / f"{name}.py")
        sys.modules[key] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[key]


def test_the_prefill_table_is_what_the_fit_wrote():
    """roofline/data/prefill.toml's fitted rows are benchmarks/serving/fit.json's figures (fit.py --table writes
    them, rounded to three figures): a hand edit of either shows here."""
    from roofline.data import load_table

    fit_script = _serving_script("fit")
    scan_host_us, sustained = fit_script.scan_host_us, fit_script.sustained

    fit = {d["device"]: d for d in json.loads((REPO / "benchmarks" / "serving" / "fit.json").read_text())["devices"]}
    table = load_table("prefill")
    rows = {"h200": next(r for r in table["rate"] if r.get("cc") == "9.0"),
            "gb10": next(r for r in table["rate"] if r.get("hardware") == "gb10")}
    for device, row in rows.items():
        fitted = sustained(fit[device]["all"])  # the kernels' shares at the fitted sustained clock
        for name, value in fitted.items():
            if name in ("request_ms", "uncaptured_us", "prompt_independence", "sustained", "scan_host_scale") \
                    or value is None:
                continue
            kind, _, sub = name.partition(".")
            kind = {"ramp": "ramp_tokens"}.get(kind, kind)
            got = row[kind][sub] if sub else row[kind]
            assert got == pytest.approx(value, rel=5e-3), (device, name)
        assert row["band"] == pytest.approx(fit[device]["band90_left_out"], rel=5e-3)
        assert f"{100 * fit[device]['mean_abs_error']:.1f}% in sample" in row["source"]
    hosts = {m.get("host") or m.get("hardware"): m for m in table["request"]["measured"]}
    assert hosts["x86_server"]["ms"] == pytest.approx(fit["h200"]["all"]["request_ms"], rel=5e-3)
    assert hosts["gb10"]["ms"] == pytest.approx(fit["gb10"]["all"]["request_ms"], rel=5e-3)
    assert table["routing"]["prompt_independence"] == pytest.approx(fit["gb10"]["all"]["prompt_independence"],
                                                                     rel=5e-3)
    # GB10's shares are the H200's measured ones x its two fitted factors (tensor-core kernels, Marlin's), its ramps
    # the H200's with Marlin's own for its weight-only kernels: no GB10 share is a coefficient of its own
    factors, h200 = fit["gb10"]["params"], sustained(fit["h200"]["all"])
    assert set(fit["gb10"]["free"]) == {"tensor_factor", "marlin_factor", "request_ms", "prompt_independence",
                                        "uncaptured_us"}
    gb10 = rows["gb10"]
    for kind, sub, factor in (("gemm", "bf16", "tensor_factor"), ("moe", "bf16", "tensor_factor"),
                              ("attention", "", "tensor_factor"), ("scan", "gdn", "tensor_factor"),
                              ("weight_only", "", "marlin_factor"), ("moe_weight_only", "nvfp4", "marlin_factor")):
        measured = h200[f"{kind}.{sub}" if sub else kind]
        got = gb10[kind][sub] if sub else gb10[kind]
        assert got == pytest.approx(measured * factors[factor], rel=1e-2), (kind, sub)
    assert gb10["moe_weight_only"]["mxfp4"] == gb10["moe_weight_only"]["nvfp4"]  # Marlin's MoE runs both there
    marlin = json.loads((REPO / "benchmarks" / "serving" / "kernel_rates.json").read_text())["rates"]
    assert gb10["ramp_tokens"]["moe_mxfp4"] == pytest.approx(marlin["moe.nvfp4-marlin"]["ramp_tokens"], rel=5e-3)
    assert "moe_nvfp4" not in rows["h200"]["ramp_tokens"]
    # a hybrid layer's host time: the scans' measured wrapper x the mixer scale the H200's first tokens gave
    scan = next(m for m in table["scan_host"]["measured"] if m.get("host") == "x86_server")
    for kind, us in scan_host_us(fit["h200"]["all"]["scan_host_scale"], "h200").items():
        assert scan["us"][kind] == pytest.approx(us, rel=5e-3)


def test_the_kernel_rates_are_what_the_kernel_runs_give():
    """benchmarks/serving/kernel_rates.json (which fit.py fixes the Hopper shares to) is what the recorded kernel
    timings (benchmarks/results/vllm_kernels) give, and fit.json's fixed coefficients are its figures."""
    kernel_rates, kernel_params = _serving_script("kernel_rates"), _serving_script("fit").kernel_params

    recorded = json.loads((REPO / "benchmarks" / "serving" / "kernel_rates.json").read_text())
    assert kernel_rates.build() == recorded, "kernel_rates.json is stale: run benchmarks/serving/kernel_rates.py"
    assert "H200" in recorded["card"] and recorded["points_kept"] > 200
    fit = {d["device"]: d for d in json.loads((REPO / "benchmarks" / "serving" / "fit.json").read_text())["devices"]}
    assert fit["h200"]["fixed"] == pytest.approx(kernel_params())
    # the kernels, not the first tokens, decide the Hopper shares: none of them is a free coefficient of the fit
    assert not set(kernel_params()) & set(fit["h200"]["free"])


def test_a_weight_only_kernel_ramps_at_its_own_measured_tokens():
    """Marlin dequantizes its tiles while it loads them and reaches its share at fewer tokens an expert than Triton's
    fused MoE (kernel_rates.json): a row that carries Marlin's ramps (GB10, whose NVFP4 and MXFP4 experts run it)
    prices a weight-only backend's chunk at them and every other GEMM at its kind's; a row without them (the H200's)
    at its kind's for all."""
    from roofline.predict.hardware import get_hardware
    from roofline.predict.prefill import prefill_rates

    gb10, h200 = prefill_rates(get_hardware("gb10")), prefill_rates(get_hardware("h200"))
    assert gb10.ramp("moe", "nvfp4-w4a16") == gb10.ramp("moe", "mxfp4") == gb10.ramp_tokens["moe_nvfp4"]
    assert gb10.ramp("moe", "nvfp4-w4a16") < gb10.ramp("moe") == gb10.ramp_tokens["moe"]
    assert gb10.ramp("gemm", "nvfp4-w4a16") == gb10.ramp_tokens["weight_only"] < gb10.ramp("gemm")
    assert h200.ramp("moe", "nvfp4-w4a16") == h200.ramp("moe") and h200.ramp("gemm", "int4") == h200.ramp("gemm")

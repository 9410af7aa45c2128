"""The one step model (roofline.predict.step) against the known GB10 facts and its own invariants.
Inputs: the reference configs (config-only inventories); the dense Qwen3-8B NVFP4 checkpoint is the
Qwen3-8B config with an NVFP4 quantization config that keeps lm_head unquantized, as
RedHatAI/Qwen3-8B-NVFP4 does."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
from test_kernels import reference

from roofline.errors import RooflineError
from roofline.data import load_table
from roofline.predict.graphs import cuda_graph_summary
from roofline.predict.hardware import get_hardware
from roofline.predict.launch import launch_costs
from roofline.predict.links import links
from roofline.predict.step import StepConfig, price_step
from roofline.predict.topology import Topology, place
from roofline.predict.traffic import ROUTINGS, Scenario, compute_traffic

GB10 = StepConfig(batch=1, context=1024, kv_cache_dtype="fp8")  # the GB10 measurements: single stream, kv fp8
NVFP4_KEEP_LM_HEAD = {"producer": {"name": "modelopt"},
                      "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}}


@pytest.fixture(scope="module")
def dense_nvfp4():
    from roofline.sources.config import inventory_from_config
    with open(os.path.join(reference("Qwen__Qwen3-8B"), "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    return inventory_from_config("Qwen3-8B-NVFP4", config, NVFP4_KEEP_LM_HEAD)


@pytest.fixture(scope="module")
def hybrid_nvfp4():
    from roofline.sources.config import load_config_only
    return load_config_only(reference("nvidia__Qwen3.6-35B-A3B-NVFP4"))


@pytest.fixture(scope="module")
def moe():
    from roofline.sources.config import load_config_only
    return load_config_only(os.path.join(os.path.dirname(__file__), "reference_configs", "Qwen__Qwen3-30B-A3B"))


def test_dense_8b_gains_nothing_from_graphs_on_gb10(dense_nvfp4):
    step = price_step(dense_nvfp4, get_hardware("gb10"), GB10)
    # measured: eager 39.62, graphs 38.59 tok/s (FlashInfer CUTLASS on GB10: vLLM's default for W4A4 there)
    assert abs(step.graph_benefit - 1.0) <= 0.10
    assert step.graph_tok_s == pytest.approx(38.59, rel=0.10)
    assert step.eager_tok_s == pytest.approx(39.62, rel=0.10)
    assert "safe" in cuda_graph_summary(step)["advice"]  # its eager launches ~1/3 of the GPU's step: no loss measured


def test_an_eager_step_loses_where_the_host_takes_about_the_gpus_time():
    """Llama-3.1-70B's layers cut to 8 on an H200: the host's eager launches take about the GPU's step, where the
    GPU waits on the host's stalls: --enforce-eager measured 15-93% slower than graphs there (launch.toml
    [eager_overlap]: the loss at that share), the eager step priced so, the advice keeping graphs on and saying why;
    a dense 8B on GB10 (a share of 0.38, eager measured as fast as graphs) is still told eager is safe."""
    from roofline.audit import load_inventory

    inventory = load_inventory(os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu_vllm", "configs",
                                            "Llama-3.1-70B-8layers"))
    summary = cuda_graph_summary(price_step(inventory, get_hardware("h200"), StepConfig(batch=1, context=256)))
    curve = load_table("launch")["eager_overlap"]["loss_by_host_share"]
    loss = min(curve, key=lambda point: abs(point[0] - summary["eager_host_share"]))[1]  # the runs' own share
    assert 0.9 < summary["eager_host_share"] < 1.3
    assert summary["benefit"] == pytest.approx(1 + loss, rel=0.05)  # the GPU's time x (1 + the loss), not the host's
    assert summary["advice"].startswith("keep CUDA graphs on") and "waits on every stall" in summary["advice"]
    low = next(iter(load_table("launch")["eager_overlap"]["loss_by_host_share"]))
    assert low[1] < 0.02  # the GB10 dense seed, no loss (with any run whose share lies within the script's GROUP)


def test_hybrid_moe_loses_most_of_its_speed_in_eager_on_gb10(hybrid_nvfp4):
    step = price_step(hybrid_nvfp4, get_hardware("gb10"), GB10)
    summary = cuda_graph_summary(step)
    assert 2.5 < step.graph_benefit < 3.3  # reported: ~65% lost to --enforce-eager
    assert summary["advice"].startswith("keep CUDA graphs on")
    assert summary["host_bound_layers_eager"] == hybrid_nvfp4.shape.num_layers
    eager = step.breakdown(graphs=False)
    assert eager.bound == "launch" and step.breakdown(graphs=True).bound == "memory"


def test_host_cost_drives_the_benefit(hybrid_nvfp4, dense_nvfp4):
    """A faster host (half GB10's calibrated cost per kernel) shrinks the hybrid's benefit, a slower
    one (the x86 figure measured under vLLM's eager path) grows it; the dense one stays ~1 at GB10's own."""
    hardware = get_hardware("gb10")
    grace = launch_costs(hardware).host_us_per_kernel
    x86 = launch_costs(get_hardware("h200")).host_us_per_kernel
    fast = price_step(hybrid_nvfp4, hardware, replace(GB10, host_us_per_kernel=grace / 2))
    slow = price_step(hybrid_nvfp4, hardware, GB10)
    slower = price_step(hybrid_nvfp4, hardware, replace(GB10, host_us_per_kernel=x86))
    assert fast.graph_benefit < slow.graph_benefit < slower.graph_benefit
    assert fast.graph_tok_s == pytest.approx(slow.graph_tok_s) == pytest.approx(slower.graph_tok_s)
    dense = price_step(dense_nvfp4, hardware, GB10)  # its launches a third of the GPU's time: eager as fast
    assert dense.graph_benefit == pytest.approx(1.0, abs=0.02)
    # at the x86 host's cost they take ~80% of it: the GPU waits on the host (launch.toml [eager_overlap])
    assert price_step(dense_nvfp4, hardware, replace(GB10, host_us_per_kernel=x86)).graph_benefit > 1.3
    with pytest.raises(RooflineError):
        price_step(dense_nvfp4, hardware, replace(GB10, host_us_per_kernel=0))


def test_breakdown_adds_up_and_names_every_coefficient(hybrid_nvfp4):
    hardware = get_hardware("gb10")
    for graphs in (True, False):
        for batch in (1, 16):
            step = price_step(hybrid_nvfp4, hardware, replace(GB10, batch=batch, graphs=graphs))
            b = step.breakdown()
            assert b.seconds * 1e3 == pytest.approx(step.step_ms)
            assert step.tok_s == pytest.approx(batch / b.seconds)
            assert step.per_stream_tok_s == pytest.approx(step.tok_s / batch)
    names = {c.name: c for c in step.coefficients}
    for name in ("bandwidth", "efficiency", "backend_relative_efficiency", "tensor_tflops", "compute_utilization",
                 "kernels_per_step", "graph_floor", "host_launch"):
        assert names[name].source and names[name].kind
    assert names["efficiency"].kind == "calibrated"


def test_bytes_are_the_traffic_model_s(moe):
    """On one device the step reads exactly the audit's bytes per token x tokens."""
    hardware = get_hardware("h100-sxm")
    for batch in (1, 16):
        step = price_step(moe, hardware, StepConfig(batch=batch, context=4096))
        traffic = compute_traffic(moe, Scenario(batch=batch, context=4096))
        assert step.breakdown().bytes == pytest.approx(traffic.bytes_per_token * batch)
        assert step.ceiling_tok_s == pytest.approx(hardware.bandwidth_gbps * 1e9 / traffic.bytes_per_token)


def test_shared_routing_reads_one_sequence_s_experts(moe):
    hardware = get_hardware("h100-sxm")
    uniform = price_step(moe, hardware, StepConfig(batch=16))
    shared = price_step(moe, hardware, StepConfig(batch=16, routing=ROUTINGS[1]))  # one prompt to every stream
    one = price_step(moe, hardware, StepConfig(batch=1))
    experts = lambda step: sum(m.bytes_per_token for m in step.traffic.modules if m.role == "moe_experts") \
        * step.main.batch
    assert experts(shared) == pytest.approx(experts(one))
    assert experts(uniform) > 5 * experts(shared)
    assert shared.tok_s > uniform.tok_s


def test_tensor_parallel_halves_bytes_not_kernels(moe):
    """TP=2 over NVLink: each rank reads about half the bytes (replicated routers and norms aside),
    launches as many kernels, and pays vLLM's collectives; graph mode and eager alike."""
    hardware = get_hardware("h100-sxm")
    topology = Topology(tp=2)
    placement = place(topology, 8, links()["nvlink4"], None)
    one = price_step(moe, hardware, StepConfig(context=1024))
    two = price_step(moe, hardware, StepConfig(context=1024, topology=topology, placement=placement))
    b1, b2 = one.breakdown(), two.breakdown()
    assert 0.5 * b1.bytes < b2.bytes < 0.52 * b1.bytes
    assert b2.kernels == b1.kernels
    layers = moe.shape.num_layers
    kinds = {(c.kind, c.where.split(" (")[0]): c.per_step for c in two.collectives}
    assert kinds == {("all_reduce", "vocab-parallel embedding"): 1, ("all_reduce", "after each token mixer"): layers,
                     ("all_reduce", "after each MLP / MoE"): layers, ("all_gather", "vocab-parallel logits"): 1}
    assert b2.communication_s == pytest.approx(two.comm_s)
    assert two.eager_tok_s < two.graph_tok_s  # eager at TP > 1 is priced too (doctor's graph cause)


def test_speculation_amortises_the_weight_read(dense_nvfp4):
    hardware = get_hardware("gb10")
    plain = price_step(dense_nvfp4, hardware, GB10)
    spec = price_step(dense_nvfp4, hardware, replace(GB10, speculative_tokens=2, acceptance_rate=0.8))
    assert spec.main.tokens_per_sequence == pytest.approx(1 + 0.8 + 0.64)
    assert spec.tok_s > plain.tok_s


def test_json_and_provenance(hybrid_nvfp4):
    step = price_step(hybrid_nvfp4, get_hardware("gb10"), GB10)
    payload = cuda_graph_summary(step)
    for key in ("kernels_per_token", "eager_tok_s", "graph_tok_s", "benefit", "advice"):
        assert key in payload
    assert payload["host_cost_kind"] in ("measured", "calibrated", "estimate")
    assert payload["host_cost_source"] and payload["graph_floor_source"]
    assert sum(row["kernels"] for row in payload["per_layer"]) == pytest.approx(payload["kernels_per_token"])
    whole = step.to_json()
    assert whole["breakdown"]["bound"] in ("memory", "compute", "launch", "communication", "pipeline")
    assert json.dumps(whole, allow_nan=False)


def test_a_cpu_host_has_no_launches(moe):
    cpu = replace(get_hardware("h100-sxm"), key="cpu-test", host="cpu")
    step = price_step(moe, cpu, StepConfig())
    assert step.graph_tok_s == step.eager_tok_s
    assert step.breakdown().launch_s == 0 and cuda_graph_summary(step) is None


def test_audit_uses_the_model(dense_nvfp4):
    from roofline.audit import run_audit

    result = run_audit(dense_nvfp4, Scenario(context=1024, kv_cache_dtype="fp8"), get_hardware("gb10"))
    payload = result.to_json()
    assert payload["cuda_graph"]["graph_tok_s"] == pytest.approx(payload["expected_tok_s"])
    assert payload["step"]["aggregate_tok_s"] == pytest.approx(payload["expected_tok_s"])


def test_an_eager_stage_overlaps_its_host_and_gpu_as_a_whole():
    """vLLM launches eager kernels without waiting: through a layer whose kernels are slow the host runs ahead,
    through one whose are small the GPU waits. A stage takes the longer of its two totals (what both fits price),
    not the sum of each layer's longer one; with CUDA graphs each segment's own time. Where the host's total comes
    near the GPU's, the GPU waits on its stalls: the GPU's total x (1 + the measured loss at that share)."""
    from roofline.predict.launch import eager_overlap_factor
    from roofline.predict.step import Segment, stage_parts, stage_seconds

    slow_kernels = Segment(0, "layer", 0, memory_s=3e-3, floor_s=1e-4, host_s=5e-4)   # the GPU's layer
    small_kernels = Segment(1, "layer", 0, memory_s=5e-4, floor_s=1e-4, host_s=2e-3)  # the host's layer
    far = [replace(slow_kernels, host_s=3e-4), replace(small_kernels, host_s=9e-4)]  # 1.2 ms against 3.7 ms
    assert stage_seconds(far, graphs=False) == pytest.approx(3.7e-3)
    assert stage_seconds(far, graphs=False) < sum(s.seconds(False) for s in far)
    stage = [slow_kernels, small_kernels]  # 2.5 ms of launches against 3.7: the GPU waits on the host
    factor = eager_overlap_factor(2.5e-3, 3.7e-3)
    assert factor > 1.1 and stage_seconds(stage, graphs=False) == pytest.approx(3.7e-3 * factor)
    assert stage_parts(stage, graphs=False)["launch"] == pytest.approx(2e-4 + 3.7e-3 * (factor - 1))
    assert stage_seconds(stage, graphs=True) == pytest.approx(sum(s.seconds(True) for s in stage))
    host_bound = [small_kernels, small_kernels]  # 4 ms of launches against 1.2 ms on the GPU
    assert stage_seconds(host_bound, graphs=False) == pytest.approx(4e-3)
    assert stage_parts(host_bound, graphs=False)["launch"] == pytest.approx(4e-3)
    assert sum(stage_parts(stage, graphs=False).values()) == pytest.approx(stage_seconds(stage, graphs=False))
    # counted segments (the load model's pricer): the same arithmetic, each one times its count
    assert stage_seconds([small_kernels], False, counts=[2]) == pytest.approx(4e-3)


def test_a_grouped_expert_gemm_costs_its_backends_fixed_time_on_each_moe_layer():
    """Each MoE layer's two grouped expert GEMMs on a backend with a measured fixed time (rules.toml routed_call_us:
    MXFP4 on Hopper) add it to the layer's floor, at any batch; a dense layer, and the same model where no time was
    measured (GB10: its fitted rate holds it), add none."""
    from roofline.predict.backends import backend_named
    from roofline.sources.config import load_config_only

    configs = os.path.join(os.path.dirname(__file__), "reference_configs")
    inventory = load_config_only(os.path.join(configs, "openai__gpt-oss-20b"))
    h200, gb10 = get_hardware("h200"), get_hardware("gb10")
    for moe_backend in ("marlin", None):
        backend = backend_named("mxfp4", moe_backend, h200) if moe_backend else None
        step = price_step(inventory, h200, StepConfig(batch=1, context=1024, backend=backend))
        call_us = step.backend.routed_call_us(h200)
        assert call_us > 0
        layers = [s for s in step.main.segments if s.where == "layer"]
        assert len(layers) == 24 and {s.routed_calls for s in layers} == {2}
        assert all(s.routed_calls == 0 for s in step.main.segments if s.where != "layer")
        for s in layers:
            assert s.floor_s == pytest.approx((s.kernels * step.costs.graph_floor_us_per_kernel + 2 * call_us) * 1e-6)
        many = price_step(inventory, h200, StepConfig(batch=16, context=1024, backend=backend))
        assert {s.routed_calls for s in many.main.segments if s.where == "layer"} == {2}
        assert any(c.name == "routed_gemm_call" and c.value == call_us for c in step.coefficients)
    spark = price_step(inventory, gb10, StepConfig(batch=1, context=1024))
    assert spark.backend.routed_call_us(gb10) == 0.0
    assert all(s.floor_s == pytest.approx(s.kernels * spark.costs.graph_floor_us_per_kernel * 1e-6)
               for s in spark.main.segments)
    dense = price_step(load_config_only(reference("Qwen__Qwen3-8B")), h200, StepConfig(batch=1))
    assert all(s.routed_calls == 0 for s in dense.main.segments)

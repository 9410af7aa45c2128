"""The CUDA-graph model against the known GB10 facts (BRIEF §2, §7). Inputs: the reference
configs (config-only inventories); the dense Qwen3-8B NVFP4 checkpoint is the Qwen3-8B config
with an NVFP4 quantization config that keeps lm_head unquantized, as RedHatAI/Qwen3-8B-NVFP4."""
from __future__ import annotations

import json
import os

import pytest
from test_kernels import reference

from roofline.errors import RooflineError
from roofline.predict.cuda_graph import estimate, launch_costs
from roofline.predict.hardware import get_hardware
from roofline.predict.traffic import Scenario, compute_traffic

GB10_SCENARIO = Scenario(batch=1, context=1024, kv_cache_dtype="fp8")  # BRIEF §7: single stream, kv fp8
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


def _estimate(inventory, hardware="gb10", **kwargs):
    return estimate(inventory, compute_traffic(inventory, GB10_SCENARIO), get_hardware(hardware), **kwargs)


def test_dense_8b_gains_nothing_from_graphs_on_gb10(dense_nvfp4):
    result = _estimate(dense_nvfp4)
    # measured: eager 39.62, graphs 38.59 tok/s -> graph/eager 0.974
    assert abs(result.benefit - 1.0) <= 0.10
    assert result.graph_tok_s == pytest.approx(38.59, rel=0.15)
    assert "safe" in result.advice or "costs ~" in result.advice


def test_hybrid_moe_loses_most_of_its_speed_in_eager_on_gb10(hybrid_nvfp4):
    result = _estimate(hybrid_nvfp4)
    assert result.benefit > 2.0
    assert result.advice.startswith("keep CUDA graphs on")
    assert result.eager_loss > 0.5
    host_bound = [t for t in result.per_layer if t.layer is not None and t.host_bound]
    assert len(host_bound) == hybrid_nvfp4.shape.num_layers


def test_host_cost_drives_the_benefit(hybrid_nvfp4, dense_nvfp4):
    """A faster host (the x86 figure) shrinks the hybrid's benefit; the dense one stays ~1."""
    x86 = launch_costs(get_hardware("h200")).host_us_per_kernel
    fast = _estimate(hybrid_nvfp4, host_us_per_kernel=x86)
    slow = _estimate(hybrid_nvfp4)
    assert fast.benefit < slow.benefit
    assert fast.graph_tok_s == pytest.approx(slow.graph_tok_s)
    assert _estimate(dense_nvfp4, host_us_per_kernel=x86).benefit == pytest.approx(1.0, abs=0.02)
    with pytest.raises(RooflineError):
        _estimate(dense_nvfp4, host_us_per_kernel=0)


def test_json_and_provenance(hybrid_nvfp4):
    payload = _estimate(hybrid_nvfp4).to_json()
    for key in ("kernels_per_token", "eager_tok_s", "graph_tok_s", "benefit", "advice"):
        assert key in payload
    assert payload["host_cost_kind"] in ("measured", "calibrated", "estimate")
    assert payload["host_cost_source"] and payload["graph_floor_source"]
    assert sum(row["kernels"] for row in payload["per_layer"]) == pytest.approx(payload["kernels_per_token"])


def test_audit_uses_the_model(dense_nvfp4):
    from roofline.audit import run_audit

    result = run_audit(dense_nvfp4, GB10_SCENARIO, get_hardware("gb10"))
    payload = result.to_json()
    assert payload["cuda_graph"]["graph_tok_s"] == pytest.approx(payload["expected_tok_s"])

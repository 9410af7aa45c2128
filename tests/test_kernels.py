"""Kernel counts: the table estimate and the trace parser (real traces: one decode step of a
real-shape hybrid on an H200, and a CPU torch.profiler run of a tiny transformers Qwen3)."""
from __future__ import annotations

import gzip
import json
import os

import pytest

from roofline.errors import RooflineError
from roofline.live.profiler_trace import parse_trace
from roofline.predict.kernels import estimate_kernels

HERE = os.path.dirname(__file__)
H200_TRACE = os.path.join(HERE, "fixtures", "traces", "h200_hybrid_qwen3_6_24layers_step.json.gz")
# real config.json / hf_quant_config.json files shipped in examples/ (copies of reference/configs)
EXAMPLES = {"Qwen__Qwen3-8B": "Qwen3-8B", "nvidia__Qwen3.6-35B-A3B-NVFP4": "Qwen3.6-35B-A3B-NVFP4"}


def reference(name: str) -> str:
    return os.path.join(HERE, "..", "examples", EXAMPLES[name])


@pytest.fixture(scope="module")
def hybrid_inventory():
    from roofline.sources.config import load_config_only
    return load_config_only(reference("nvidia__Qwen3.6-35B-A3B-NVFP4"))


def test_table_counts_follow_layer_kinds(hybrid_inventory):
    profile = estimate_kernels(hybrid_inventory)
    per_layer = profile.per_layer()
    assert sorted(k for k in per_layer if k is not None) == list(range(40))
    roles_by_layer = {}
    for c in profile.counts:
        roles_by_layer.setdefault(c.layer, set()).add(c.role)
        assert c.source and c.kernels + c.eager > 0
    attention = {a.layer for a in hybrid_inventory.shape.attention}
    for layer in range(40):
        assert ("attention_core" in roles_by_layer[layer]) == (layer in attention)
        assert ("gdn_core" in roles_by_layer[layer]) == (layer not in attention)
        assert "moe_experts" in roles_by_layer[layer]
    assert profile.kernels_per_token == sum(per_layer.values())


def test_backend_changes_counts(hybrid_inventory):
    default = estimate_kernels(hybrid_inventory)
    moe = [c for c in default.counts if c.role == "moe_experts"]
    assert {c.backend for c in moe} == {"marlin"}  # W4A16 NVFP4 experts: Marlin
    with pytest.raises(RooflineError, match="unknown kernel backend"):
        estimate_kernels(hybrid_inventory, backend="no-such-backend")


def test_h200_trace_matches_the_layer_structure():
    """24 layers of a Qwen3.6-style hybrid, every 4th full attention: the parser must give the
    GDN layers one count and the attention layers another, with no kernel lost."""
    profile = parse_trace(H200_TRACE, num_layers=24)
    with gzip.open(H200_TRACE, "rt") as f:
        raw = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    assert profile.kernels_per_token == len(raw) == 2233
    per_layer = profile.per_layer()
    attention = [i for i in range(24) if (i + 1) % 4 == 0]
    gdn = [i for i in range(24) if i not in attention]
    assert len({per_layer[i] for i in attention}) == 1
    assert len({per_layer[i] for i in gdn}) == 1
    assert per_layer[gdn[0]] != per_layer[attention[0]]
    roles = {(c.layer, c.role) for c in profile.counts}
    assert all((i, "gdn_core") in roles for i in gdn)
    assert not any((i, "gdn_core") in roles for i in attention)
    assert all((i, "attention_core") in roles for i in attention)
    assert any(c.backend == "cublas" for c in profile.counts)
    assert profile.origin == "trace" and profile.device == "cuda"


def test_cpu_trace_of_a_tiny_transformers_model(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.profiler import ProfilerActivity, profile

    config = transformers.Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256)
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        past = model(torch.tensor([[1, 2, 3]]), use_cache=True).past_key_values
        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            model(torch.tensor([[4]]), past_key_values=past, use_cache=True)
    path = str(tmp_path / "step.json")
    prof.export_chrome_trace(path)
    result = parse_trace(path, num_layers=3)
    assert result.device == "cpu"
    per_layer = result.per_layer()
    assert per_layer[0] == per_layer[1] == per_layer[2] > 10
    assert None in per_layer  # embedding, final norm, lm_head
    assert result.to_json()["kernels_per_token"] == result.kernels_per_token


def test_bad_traces(tmp_path):
    with pytest.raises(RooflineError, match="no such trace"):
        parse_trace(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(RooflineError, match="not a chrome trace"):
        parse_trace(str(bad))
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(RooflineError, match="no GPU kernels"):
        parse_trace(str(empty))


def test_static_fp8_activation_quant_is_fused_under_graphs():
    """A ModelOpt FP8 GEMM (static activation scales) is one kernel with CUDA graphs (torch.compile fuses its
    scale-clamp-cast into the kernel before it: profiled on Qwen3.6-35B-A3B-NVFP4's FP8 projections) and two eager;
    online --quantization fp8 (dynamic scales) stays two with graphs, as the fit's Qwen3-8B steps say."""
    from pathlib import Path

    from roofline.advise.simulate import get_recipe, simulate
    from roofline.audit import load_inventory

    ref = Path(__file__).resolve().parent / "reference_configs"
    mixed = estimate_kernels(load_inventory(str(ref / "nvidia__Qwen3.6-35B-A3B-NVFP4")))
    out_proj = [c for c in mixed.counts if c.role == "linear_attn_out"]  # 30 GDN layers, one FP8 GEMM each
    assert len(out_proj) == 30 and {(c.kernels, c.eager) for c in out_proj} == {(1.0, 2.0)}
    online = estimate_kernels(simulate(load_inventory(str(ref / "Qwen__Qwen3-8B")), "fp8", get_recipe("default")))
    o_proj = [c for c in online.counts if c.role == "attention_out"]
    assert o_proj and {(c.kernels, c.eager) for c in o_proj} == {(2.0, 2.0)}

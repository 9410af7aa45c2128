"""A capture's formats follow the quantization config where the loaded tensors mislead: vLLM's
CompressedTensorsW4A4Nvfp4MoEMethod registers w13/w2_input_global_scale on a fused MoE layer even for
a weight-only (W4A16) scheme, so the tensors alone say W4A4 for a W4A16 checkpoint's experts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline.sources.capture import inventory_from_capture

REFERENCE = Path(__file__).parent / "reference_configs"


def _nvfp4_config(activations: bool) -> dict:
    group = {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                "group_size": 16},
             "input_activations": ({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}
                                   if activations else None)}
    return {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
            "config_groups": {"group_0": group}, "ignore": ["lm_head", "re:.*mlp.gate$"]}


def _capture(tmp_path: Path, activations: bool) -> Path:
    config = json.loads((REFERENCE / "Qwen__Qwen3-30B-A3B" / "config.json").read_text())
    config["num_hidden_layers"] = 2
    config["quantization_config"] = _nvfp4_config(activations)
    experts, hidden, inter = config["num_experts"], config["hidden_size"], config["moe_intermediate_size"]

    def row(attr, dtype, shape, nbytes_per):
        count = 1
        for d in shape:
            count *= d
        return [attr, "parameter", dtype, list(shape), int(count * nbytes_per), None, None, None]
    modules = []
    for layer in range(2):
        # what vLLM's NVFP4 MoE method holds for a fused expert layer, input scales included either way
        modules.append({"name": f"model.layers.{layer}.mlp.experts", "quant_method": "CompressedTensorsMoEMethod",
                        "global_num_experts": experts, "tensors": [
                            row("w13_weight_packed", "uint8", (experts, 2 * inter, hidden // 2), 1),
                            row("w13_weight_scale", "float8_e4m3fn", (experts, 2 * inter, hidden // 16), 1),
                            row("w13_weight_global_scale", "float32", (experts, 2), 4),
                            row("w13_input_global_scale", "float32", (experts, 2), 4),
                            row("w2_weight_packed", "uint8", (experts, hidden, inter // 2), 1),
                            row("w2_weight_scale", "float8_e4m3fn", (experts, hidden, inter // 16), 1),
                            row("w2_weight_global_scale", "float32", (experts,), 4),
                            row("w2_input_global_scale", "float32", (experts,), 4)]})
    record = {"format": "roofline-vllm-capture", "version": 1, "rank": 0, "world_size": 1, "tp_size": 1,
              "tensor_fields": ["attr", "kind", "dtype", "shape", "nbytes", "shard_dim", "shared_with", "fingerprint"],
              "model": "nvfp4-moe", "hf_config": config, "modules": modules}
    path = tmp_path / f"capture-{activations}.json"
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("activations, expected", [(False, "nvfp4-w4a16"), (True, "nvfp4-w4a4")])
def test_fused_experts_take_their_activations_from_the_config(tmp_path, activations, expected):
    inventory = inventory_from_capture(str(_capture(tmp_path, activations)))
    experts = [m for m in inventory.modules if m.role == "moe_experts"]
    assert experts and {m.format for m in experts} == {expected}
    if not activations:
        assert all(any("activations as the quantization config states them" in n for n in m.notes) for m in experts)

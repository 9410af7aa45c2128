"""Formats whose producers need a GPU (AutoAWQ, GPTQ, gpt-oss MXFP4, DeepSeek block FP8) cannot
write fixtures here. These checkpoints are written by the safetensors library with the tensor
names, dtypes and shapes those producers write (documented in roofline/model/detect.py), under the
producers' real quantization configs, and audited through the CLI like any other folder."""
from __future__ import annotations

import json
import subprocess
import sys

import torch
from safetensors.torch import save_file

OUT, IN, E = 256, 512, 4
BASE = {"model_type": "x", "num_hidden_layers": 1, "hidden_size": IN, "num_attention_heads": 4,
        "vocab_size": 64, "torch_dtype": "bfloat16"}


def audit(tmp_path, name, tensors, config):
    path = tmp_path / name
    path.mkdir()
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({**BASE, **config}))
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {m["name"]: m for m in json.loads(proc.stdout)["modules"]}, json.loads(proc.stdout)


def test_awq_gemm_layout(tmp_path):
    g = 128
    p = "model.layers.0.mlp.down_proj"
    tensors = {f"{p}.qweight": torch.zeros(IN, OUT // 8, dtype=torch.int32),
               f"{p}.qzeros": torch.zeros(IN // g, OUT // 8, dtype=torch.int32),
               f"{p}.scales": torch.zeros(IN // g, OUT, dtype=torch.float16)}
    modules, result = audit(tmp_path, "awq", tensors, {"quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": g, "version": "gemm", "zero_point": True}})
    m = modules[p]
    assert (m["format"], m["params"]) == ("int4-awq", OUT * IN)
    assert m["bytes"] == OUT * IN // 2 + (IN // g) * OUT // 2 + (IN // g) * OUT * 2
    assert result["disagreements"] == []


def test_gptq_layout(tmp_path):
    g = 128
    p = "model.layers.0.self_attn.q_proj"
    tensors = {f"{p}.qweight": torch.zeros(IN // 8, OUT, dtype=torch.int32),
               f"{p}.qzeros": torch.zeros(IN // g, OUT // 8, dtype=torch.int32),
               f"{p}.scales": torch.zeros(IN // g, OUT, dtype=torch.float16),
               f"{p}.g_idx": torch.zeros(IN, dtype=torch.int32)}
    modules, result = audit(tmp_path, "gptq", tensors, {"quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": g, "desc_act": False}})
    assert (modules[p]["format"], modules[p]["params"]) == ("int4-gptq", OUT * IN)
    assert result["disagreements"] == []


def test_gpt_oss_mxfp4_layout(tmp_path):
    p = "model.layers.0.mlp.experts"
    tensors = {f"{p}.gate_up_proj_blocks": torch.zeros(E, 2 * OUT, IN // 32, 16, dtype=torch.uint8),
               f"{p}.gate_up_proj_scales": torch.zeros(E, 2 * OUT, IN // 32, dtype=torch.uint8),
               f"{p}.gate_up_proj_bias": torch.zeros(E, 2 * OUT, dtype=torch.bfloat16),
               f"{p}.down_proj_blocks": torch.zeros(E, IN, OUT // 32, 16, dtype=torch.uint8),
               f"{p}.down_proj_scales": torch.zeros(E, IN, OUT // 32, dtype=torch.uint8),
               "model.layers.0.mlp.router.weight": torch.zeros(E, IN, dtype=torch.bfloat16)}
    modules, result = audit(tmp_path, "gptoss", tensors, {
        "num_local_experts": E, "num_experts_per_tok": 2,
        "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}})
    experts = modules[p]
    assert (experts["format"], experts["experts"], experts["params"]) == ("mxfp4", E, E * 3 * OUT * IN)
    # a token at batch 1 reads top_k / E of the experts
    assert experts["bytes_per_token"] == experts["bytes"] * 2 / E
    assert modules["model.layers.0.mlp.router"]["format"] == "bf16"
    assert result["disagreements"] == []


def test_block_fp8_layout(tmp_path):
    p = "model.layers.0.mlp.gate_proj"
    tensors = {f"{p}.weight": torch.zeros(OUT, IN, dtype=torch.float8_e4m3fn),
               f"{p}.weight_scale_inv": torch.zeros(OUT // 128, IN // 128, dtype=torch.float32),
               "lm_head.weight": torch.zeros(64, IN, dtype=torch.bfloat16)}
    modules, result = audit(tmp_path, "fp8block", tensors, {"quantization_config": {
        "quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128],
        "modules_to_not_convert": ["lm_head"]}})
    assert modules[p]["format"] == "fp8-block"
    assert modules[p]["bytes"] == OUT * IN + (OUT // 128) * (IN // 128) * 4
    assert modules["lm_head"]["format"] == "bf16"
    assert result["disagreements"] == []


def test_block_fp8_config_vs_bf16_tensor_is_reported(tmp_path):
    p = "model.layers.0.mlp.gate_proj"
    tensors = {f"{p}.weight": torch.zeros(OUT, IN, dtype=torch.bfloat16)}
    _, result = audit(tmp_path, "fp8wrong", tensors, {"quantization_config": {
        "quant_method": "fp8", "weight_block_size": [128, 128]}})
    assert any("mlp.gate_proj" in n and "tensors are BF16" in n for n in result["disagreements"])

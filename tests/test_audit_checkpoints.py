"""The header audit on real checkpoints written by real libraries (transformers, llm-compressor,
ModelOpt), checked against an independent count made with the safetensors library itself."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from independent_count import count_checkpoint
from safetensors import safe_open
from safetensors.torch import save_file

from roofline.audit import run_audit
from roofline.predict.hardware import get_hardware
from roofline.predict.traffic import Scenario, distinct_experts
from roofline.sources.local import load_local

ALL = ["qwen3_dense", "qwen3_tied", "qwen3_sharded", "qwen3_moe", "qwen3_next", "ct_fp8_dynamic",
       "ct_nvfp4a16", "ct_nvfp4_w4a4", "ct_w4a16_int4", "ct_fp8_moe", "ct_nvfp4a16_next", "modelopt_nvfp4"]
LINEAR = {"attention_qkv", "attention_out", "mlp", "moe_experts", "shared_expert", "linear_attn_in",
          "linear_attn_out"}


def audit(path, **scenario):
    return run_audit(load_local(str(path)), Scenario(**scenario), get_hardware("gb10"))


@pytest.mark.parametrize("name", ALL)
def test_every_tensor_is_counted_once(checkpoint, name):
    path = checkpoint(name)
    independent = count_checkpoint(path)
    inventory = load_local(str(path))
    assert inventory.weight_bytes == independent.total_bytes
    names = [t.name for m in inventory.modules for t in m.tensors]
    assert sorted(names) == sorted(independent.tensors)
    by_name = {t.name: t for m in inventory.modules for t in m.tensors}
    for tname, (dtype, shape, nbytes) in independent.as_tuples().items():
        assert (by_name[tname].dtype, tuple(by_name[tname].shape), by_name[tname].nbytes) == (dtype, tuple(shape), nbytes)
    # headers only: a few kB out of the whole file
    assert inventory.bytes_read < independent.total_bytes
    assert all(m.role != "other" or m.nbytes < 100 for m in inventory.modules), \
        [m.name for m in inventory.modules if m.role == "other"]


@pytest.mark.parametrize("name,fmt", [
    ("ct_fp8_dynamic", "fp8"), ("ct_nvfp4a16", "nvfp4-w4a16"), ("ct_nvfp4_w4a4", "nvfp4-w4a4"),
    ("ct_w4a16_int4", "int4"), ("modelopt_nvfp4", "nvfp4-w4a4"),
])
def test_formats_come_from_the_tensors(checkpoint, name, fmt):
    result = audit(checkpoint(name))
    modules = result.inventory.modules
    linear = [m for m in modules if m.role in LINEAR]
    assert linear and {m.format for m in linear} == {fmt}
    assert [m.format for m in modules if m.role == "lm_head"] == ["bf16"]  # ignore: lm_head
    assert result.inventory.disagreements == []
    residuals = {g.label for g in result.residuals}
    assert residuals == {"lm_head"}


def test_nvfp4_bytes_are_exact_including_scales(checkpoint):
    """NVFP4: E2M1 packed 2 per byte, one FP8 scale per 16 weights, one fp32 global scale."""
    dense = {m.name: m for m in load_local(str(checkpoint("qwen3_dense"))).modules}
    for m in load_local(str(checkpoint("ct_nvfp4a16"))).modules:
        if m.role in LINEAR:
            (out, inp), = [t.shape for t in dense[m.name].tensors if t.name.endswith(".weight")]
            assert m.params == out * inp
            assert m.nbytes == out * inp // 2 + out * inp // 16 + 4


def test_modelopt_names_and_w4a4(checkpoint):
    inventory = load_local(str(checkpoint("modelopt_nvfp4")))
    assert inventory.quant.method == "modelopt" and inventory.quant.algo == "NVFP4"
    q = next(m for m in inventory.modules if m.name.endswith("layers.0.self_attn.q_proj"))
    suffixes = {t.name.rsplit(".", 1)[1] for t in q.tensors}
    assert suffixes == {"weight", "weight_scale", "weight_scale_2", "input_scale"}
    assert q.format == "nvfp4-w4a4"


def test_fp8_moe_keeps_router_bf16(checkpoint):
    result = audit(checkpoint("ct_fp8_moe"))
    by_role = {}
    for m in result.inventory.modules:
        by_role.setdefault(m.role, set()).add(m.format)
    assert by_role["moe_experts"] == {"fp8"}
    assert by_role["router"] == {"bf16"}
    assert any(g.role == "router" for g in result.residuals)


def test_hybrid_roles(checkpoint):
    inventory = load_local(str(checkpoint("qwen3_next")))
    roles = {}
    for m in inventory.modules:
        roles.setdefault(m.role, []).append(m)
    labels = {m.name.split(".", 3)[-1] for m in roles["linear_attn_in"]}
    assert labels == {"linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba"}
    assert len(roles["conv1d"]) == len(roles["linear_attn_out"]) == 3
    assert len(roles["router"]) == len(roles["shared_expert_gate"]) == 4
    assert len(roles["shared_expert"]) == 12
    assert [m.experts for m in roles["moe_experts"]] == [8, 8, 8, 8]
    assert {m.layer for m in roles["attention_qkv"]} == {3}
    shape = inventory.shape
    assert [a.layer for a in shape.attention] == [3]
    assert [r.layer for r in shape.recurrent] == [0, 1, 2]


def test_hybrid_state_and_kv_arithmetic(checkpoint):
    path = checkpoint("qwen3_next")
    config = json.loads((path / "config.json").read_text())
    result = audit(path, context=512)
    t = result.traffic
    # one full-attention layer: K and V, kv heads x head dim, bf16, 512 tokens
    assert t.kv_bytes_per_token == 2 * config["num_key_value_heads"] * config["head_dim"] * 2 * 512
    # three GDN layers: state (v heads x k dim x v dim) + conv window, read and written, both in the model
    # dtype (bf16) as vLLM keeps a Qwen3-Next state on a GPU (serving.toml [[state_dtype]]: no config hook)
    hk, hv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv, kernel = config["linear_key_head_dim"], config["linear_value_head_dim"], config["linear_conv_kernel_dim"]
    state = hv * dk * dv * 2 + (2 * hk * dk + hv * dv) * (kernel - 1) * 2
    assert t.state_bytes_per_token == 3 * 2 * state


@pytest.mark.parametrize("batch", [1, 4])
def test_moe_bytes_per_token_independently(checkpoint, batch):
    path = checkpoint("qwen3_moe")
    config = json.loads((path / "config.json").read_text())
    count = count_checkpoint(path)
    experts = config.get("num_experts") or config["num_local_experts"]
    top_k = config["num_experts_per_tok"]
    expert_bytes = sum(n for name, (_, _, n) in count.as_tuples().items() if ".mlp.experts." in name)
    embedding = count.bytes_under("model.embed_tokens")
    dense = count.total_bytes - expert_bytes - embedding
    fraction = (1 - (1 - top_k / experts) ** batch)
    rows = config["vocab_size"]
    kv = config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * config["head_dim"] * 2 * 1024
    expected = (dense + expert_bytes * fraction + embedding * batch / rows) / batch + kv
    result = audit(path, batch=batch)
    assert result.traffic.bytes_per_token == pytest.approx(expected, rel=1e-12)
    assert result.ceiling_tok_s == pytest.approx(273e9 / expected, rel=1e-12)
    assert distinct_experts(experts, top_k, batch) == pytest.approx(experts * fraction)


def test_tied_lm_head_counts_once_and_reads_the_embedding(checkpoint):
    result = audit(checkpoint("qwen3_tied"))
    inventory = result.inventory
    lm_head = next(m for m in inventory.modules if m.role == "lm_head")
    embedding = next(m for m in inventory.modules if m.role == "embedding")
    assert lm_head.tied_to == embedding.name and lm_head.nbytes == 0
    assert inventory.weight_bytes == count_checkpoint(checkpoint("qwen3_tied")).total_bytes
    read = next(m for m in result.traffic.modules if m.role == "lm_head")
    assert read.bytes_per_token == embedding.nbytes


def test_sharded_equals_single_file(checkpoint):
    one, many = audit(checkpoint("qwen3_dense")).to_json(), audit(checkpoint("qwen3_sharded")).to_json()
    assert one["bytes_per_token"] == many["bytes_per_token"]
    assert one["modules"] == many["modules"]


def test_multimodal_wrapper_names(checkpoint, tmp_path):
    """model.language_model.* names and a text_config are read as the same language model."""
    src = checkpoint("qwen3_dense")
    out = tmp_path / "wrapped"
    out.mkdir()
    with safe_open(str(src / "model.safetensors"), framework="pt") as fh:
        tensors = {k.replace("model.", "model.language_model.", 1): fh.get_tensor(k) for k in fh.keys()}
    tensors["model.visual.blocks.0.attn.qkv.weight"] = tensors["lm_head.weight"][:64].clone()
    save_file(tensors, str(out / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({"architectures": ["Qwen3VLForConditionalGeneration"],
                                                 "model_type": "qwen3_vl", "text_config": config}))
    plain, wrapped = audit(src), audit(out)
    assert wrapped.traffic.bytes_per_token == plain.traffic.bytes_per_token  # vision read 0 in decode
    vision = [m for m in wrapped.inventory.modules if m.role == "vision"]
    assert len(vision) == 1 and vision[0].nbytes > 0
    assert sorted((m.role, m.layer or -1) for m in wrapped.inventory.modules if m.role != "vision") == \
        sorted((m.role, m.layer or -1) for m in plain.inventory.modules)


def test_config_disagreement_is_reported(checkpoint, tmp_path):
    """A config that says a module is unquantized while its tensors are NVFP4 (and one that
    claims W4A4 without input scales) is reported, and the tensors still decide the bytes."""
    path = tmp_path / "m"
    shutil.copytree(checkpoint("ct_nvfp4a16"), path)
    config = json.loads((path / "config.json").read_text())
    q = config["quantization_config"]
    q["ignore"] = list(q["ignore"]) + ["model.layers.0.mlp.down_proj"]
    q["config_groups"]["group_0"]["input_activations"] = {"num_bits": 4, "type": "float", "group_size": 16}
    (path / "config.json").write_text(json.dumps(config))
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    notes = result["disagreements"]
    assert any("mlp.down_proj" in n and "leaves it unquantized" in n for n in notes), notes
    assert any("says W4A4 but the checkpoint has no input scales" in n for n in notes), notes
    assert result["weight_bytes"] == count_checkpoint(checkpoint("ct_nvfp4a16")).total_bytes
    text = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", str(path)],
                          capture_output=True, text=True, timeout=120).stdout
    assert "! tensors vs config:" in text


def test_terminal_output_names_residuals(checkpoint):
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", str(checkpoint("ct_nvfp4a16_next"))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for line in ("bytes / token", "ceiling", "expected", "linear_attn.in_proj_qkvz", "<- stayed BF16",
                 "unquantized residuals"):
        assert line in out, out
    row = next(line for line in out.splitlines() if "linear_attn.in_proj_qkvz" in line)
    assert " 3 " in row and "BF16" in row


def test_json_schema_keys(checkpoint):
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", str(checkpoint("qwen3_moe")), "--json",
                           "--hardware", "h100-sxm", "--batch", "2", "--context", "64", "--kv-cache-dtype", "fp8"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("model", "source", "hardware", "scenario", "bytes_per_token", "weight_bytes", "ceiling_tok_s",
                "expected_tok_s", "modules", "groups"):
        assert key in out
    assert out["hardware"]["name"].startswith("NVIDIA H100") and out["hardware"]["bandwidth_gbps"] == 3350
    assert out["scenario"]["batch"] == 2 and out["scenario"]["kv_cache_dtype_resolved"] == "fp8"
    assert set(out["modules"][0]) >= {"name", "layer", "role", "format", "params", "bytes", "bytes_per_token"}
    assert sum(g["bytes_per_token"] for g in out["groups"]) == pytest.approx(out["weight_bytes_per_token"])

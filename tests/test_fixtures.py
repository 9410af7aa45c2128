"""The fixture checkpoints hold the layouts the libraries are known to write (BRIEF §4, §5b).

If a library bump changes a tensor name, dtype or shape, or a quantization_config field that
roofline reads, these tests say so before the tests built on the fixtures fail in odd ways.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURE_NAMES, FIXTURE_PYTHON, MAKE_SCRIPT, REPO
from independent_count import count_checkpoint

BASES = {"qwen3_dense", "qwen3_tied", "qwen3_sharded", "qwen3_moe", "qwen3_next"}
QUANTIZED = {  # name: (base, format string in quantization_config)
    "ct_fp8_dynamic": ("qwen3_dense", "float-quantized"),
    "ct_nvfp4a16": ("qwen3_dense", "nvfp4-pack-quantized"),
    "ct_nvfp4_w4a4": ("qwen3_dense", "nvfp4-pack-quantized"),
    "ct_w4a16_int4": ("qwen3_dense", "pack-quantized"),
    "ct_fp8_moe": ("qwen3_moe", "float-quantized"),
    "ct_nvfp4a16_next": ("qwen3_next", "nvfp4-pack-quantized"),
}


def config(directory: Path) -> dict:
    return json.loads((directory / "config.json").read_text())


def fixture_record(directory: Path) -> dict:
    return json.loads((directory / "FIXTURE.json").read_text())


def linear_modules(directory: Path) -> dict[str, tuple[int, int]]:
    """{module: (out, in)} of the nn.Linear weights of an unquantized checkpoint."""
    return {name[: -len(".weight")]: shape
            for name, (dtype, shape, _) in count_checkpoint(directory).as_tuples().items()
            if name.endswith(".weight") and len(shape) == 2 and "embed_tokens" not in name}


def ignored(module: str, patterns: list[str]) -> bool:
    # compressed-tensors semantics: "re:" patterns match from the start, others exactly
    return any(re.match(p[3:], module) if p.startswith("re:") else p == module for p in patterns)


def test_every_fixture_is_made(checkpoints):
    assert set(checkpoints) == BASES | set(QUANTIZED) | {"modelopt_nvfp4"} == set(FIXTURE_NAMES)
    for name, directory in checkpoints.items():
        record = fixture_record(directory)
        assert record["name"] == name
        assert record["versions"]["transformers"]
        for needed in ("config.json", "tokenizer.json", "tokenizer_config.json",
                       "generation_config.json"):
            assert (directory / needed).is_file(), f"{name} lacks {needed}"
        count = count_checkpoint(directory)
        assert count.total_bytes > 0
        assert "model.embed_tokens.weight" in count.tensors


def test_unquantized_bases_are_bf16(checkpoint):
    for name in BASES:
        dtypes = {t.dtype for t in count_checkpoint(checkpoint(name)).tensors.values()}
        assert dtypes == {"BF16"}, name
        assert "quantization_config" not in config(checkpoint(name))


def test_dense_untied_tied_and_sharded(checkpoint):
    dense = count_checkpoint(checkpoint("qwen3_dense"))
    assert [p.name for p in checkpoint("qwen3_dense").glob("*.safetensors")] == ["model.safetensors"]
    assert dense.tensors["lm_head.weight"].shape == dense.tensors["model.embed_tokens.weight"].shape
    assert config(checkpoint("qwen3_dense"))["tie_word_embeddings"] is False

    tied = count_checkpoint(checkpoint("qwen3_tied"))
    assert config(checkpoint("qwen3_tied"))["tie_word_embeddings"] is True
    assert "lm_head.weight" not in tied.tensors  # stored once, as the embedding
    assert set(tied.tensors) == set(dense.tensors) - {"lm_head.weight"}

    sharded_dir = checkpoint("qwen3_sharded")
    shards = sorted(p.name for p in sharded_dir.glob("*.safetensors"))
    assert len(shards) >= 3
    index = json.loads((sharded_dir / "model.safetensors.index.json").read_text())
    sharded = count_checkpoint(sharded_dir)
    assert index["weight_map"] == {name: t.file for name, t in sharded.tensors.items()}
    assert sorted(set(index["weight_map"].values())) == shards
    # same seed, same model: the sharded copy holds exactly the dense tensors
    assert sharded.as_tuples().keys() == dense.as_tuples().keys()
    assert {n: t[:3] for n, t in sharded.as_tuples().items()} == dense.as_tuples()
    assert index["metadata"]["total_size"] == sharded.total_bytes


def test_moe_experts_are_stored_per_expert(checkpoint):
    cfg = config(checkpoint("qwen3_moe"))
    tensors = count_checkpoint(checkpoint("qwen3_moe")).tensors
    # transformers 5 writes Qwen3-MoE's expert count as num_local_experts; published
    # Qwen3-MoE configs (reference/configs) say num_experts
    experts = cfg.get("num_experts", cfg.get("num_local_experts"))
    hidden, moe_inter = cfg["hidden_size"], cfg["moe_intermediate_size"]
    for layer in range(cfg["num_hidden_layers"]):
        mlp = f"model.layers.{layer}.mlp"
        assert tensors[f"{mlp}.gate.weight"].shape == (experts, hidden)
        for e in range(experts):
            # transformers 5 fuses experts in memory (experts.gate_up_proj) but save_pretrained
            # writes the per-expert names vLLM and published checkpoints use
            assert tensors[f"{mlp}.experts.{e}.gate_proj.weight"].shape == (moe_inter, hidden)
            assert tensors[f"{mlp}.experts.{e}.up_proj.weight"].shape == (moe_inter, hidden)
            assert tensors[f"{mlp}.experts.{e}.down_proj.weight"].shape == (hidden, moe_inter)
    assert not any("gate_up_proj" in name for name in tensors)


def test_qwen3_next_is_hybrid_with_gdn_and_shared_expert(checkpoint):
    cfg = config(checkpoint("qwen3_next"))
    tensors = count_checkpoint(checkpoint("qwen3_next")).tensors
    layer_types = cfg["layer_types"]
    assert set(layer_types) == {"linear_attention", "full_attention"}
    hidden = cfg["hidden_size"]
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    for layer, kind in enumerate(layer_types):
        prefix = f"model.layers.{layer}"
        if kind == "linear_attention":
            gdn = f"{prefix}.linear_attn"
            assert tensors[f"{gdn}.in_proj_qkvz.weight"].shape == (2 * hk * dk + 2 * hv * dv, hidden)
            assert tensors[f"{gdn}.in_proj_ba.weight"].shape == (2 * hv, hidden)
            assert tensors[f"{gdn}.conv1d.weight"].shape == (2 * hk * dk + hv * dv, 1,
                                                             cfg["linear_conv_kernel_dim"])
            assert tensors[f"{gdn}.A_log"].shape == (hv,)
            assert tensors[f"{gdn}.dt_bias"].shape == (hv,)
            assert tensors[f"{gdn}.norm.weight"].shape == (dv,)
            assert tensors[f"{gdn}.out_proj.weight"].shape == (hidden, hv * dv)
            assert not any(n.startswith(f"{prefix}.self_attn.") for n in tensors)
        else:
            heads, head_dim = cfg["num_attention_heads"], cfg["head_dim"]
            # Qwen3-Next's gated attention: q_proj also yields the output gate
            assert tensors[f"{prefix}.self_attn.q_proj.weight"].shape == (2 * heads * head_dim, hidden)
            assert not any(n.startswith(f"{prefix}.linear_attn.") for n in tensors)
        mlp = f"{prefix}.mlp"
        assert tensors[f"{mlp}.gate.weight"].shape == (cfg["num_experts"], hidden)
        assert tensors[f"{mlp}.shared_expert_gate.weight"].shape == (1, hidden)
        assert tensors[f"{mlp}.shared_expert.gate_proj.weight"].shape == (
            cfg["shared_expert_intermediate_size"], hidden)
        assert f"{mlp}.experts.{cfg['num_experts'] - 1}.down_proj.weight" in tensors


@pytest.mark.parametrize("name", sorted(QUANTIZED))
def test_quantized_layout(checkpoint, name):
    base_name, expected_format = QUANTIZED[name]
    directory = checkpoint(name)
    record = fixture_record(directory)
    assert record["library"] == "llmcompressor"
    scheme, ignore = record["recipe"]["scheme"], record["recipe"]["ignore"]
    quant = config(directory)["quantization_config"]
    assert quant["quant_method"] == "compressed-tensors"
    assert quant["format"] == expected_format
    assert quant["quantization_status"] == "compressed"
    (group,) = quant["config_groups"].values()
    assert group["targets"] == ["Linear"] and group["format"] == expected_format
    # llm-compressor writes its ignore list resolved to exact module names (regexes expanded)
    base_linears = linear_modules(checkpoint(base_name))
    assert set(quant["ignore"]) == {m for m in base_linears if ignored(m, ignore)}

    tensors = count_checkpoint(directory).tensors
    model_dtype = "BF16"
    for module, (out_features, in_features) in base_linears.items():
        if ignored(module, ignore):
            assert tensors[f"{module}.weight"].dtype == model_dtype
            assert not any(n.startswith(f"{module}.weight_") for n in tensors)
            continue
        got = {n[len(module) + 1:]: (t.dtype, t.shape) for n, t in tensors.items()
               if n.startswith(module + ".")}
        if scheme == "FP8_DYNAMIC":
            # per-channel scales, stored in the model's dtype (not fp32)
            assert got == {"weight": ("F8_E4M3", (out_features, in_features)),
                           "weight_scale": (model_dtype, (out_features, 1))}, module
        elif scheme in ("NVFP4A16", "NVFP4"):
            expected = {"weight_packed": ("U8", (out_features, in_features // 2)),
                        "weight_scale": ("F8_E4M3", (out_features, in_features // 16)),
                        "weight_global_scale": ("F32", (1,))}
            if scheme == "NVFP4":  # W4A4 also stores the activations' global scale
                expected["input_global_scale"] = ("F32", (1,))
            assert got == expected, module
        elif scheme == "W4A16":
            group_size = group["weights"]["group_size"]
            assert group_size == 128 and group["weights"]["symmetric"] is True
            assert got == {"weight_packed": ("I32", (out_features, in_features // 8)),
                           "weight_scale": (model_dtype, (out_features, in_features // group_size)),
                           "weight_shape": ("I64", (2,))}, module
        else:
            raise AssertionError(f"no expected layout for scheme {scheme}")


def test_quantization_config_details(checkpoint):
    def weights(name):
        (group,) = config(checkpoint(name))["quantization_config"]["config_groups"].values()
        return group["weights"], group["input_activations"]

    fp8_w, fp8_a = weights("ct_fp8_dynamic")
    assert (fp8_w["type"], fp8_w["num_bits"], fp8_w["strategy"]) == ("float", 8, "channel")
    assert (fp8_a["dynamic"], fp8_a["strategy"]) == (True, "token")
    w4a16_w, w4a16_a = weights("ct_nvfp4a16")
    assert (w4a16_w["num_bits"], w4a16_w["group_size"], w4a16_w["strategy"]) == (4, 16, "tensor_group")
    assert w4a16_a is None
    _, w4a4_a = weights("ct_nvfp4_w4a4")
    assert (w4a4_a["num_bits"], w4a4_a["group_size"], w4a4_a["dynamic"]) == (4, 16, "local")
    int4_w, int4_a = weights("ct_w4a16_int4")
    assert (int4_w["type"], int4_w["num_bits"], int4_w["strategy"]) == ("int", 4, "group")
    assert int4_a is None


def test_nvfp4_bytes_per_weight(checkpoint):
    """NVFP4 costs 0.5625 bytes per weight (+ fp32 global scales), BRIEF §3."""
    tensors = count_checkpoint(checkpoint("ct_nvfp4a16"))
    for module, (out_features, in_features) in linear_modules(checkpoint("qwen3_dense")).items():
        if module == "lm_head":
            continue
        assert tensors.bytes_under(module) == out_features * in_features * 0.5625 + 4, module


def test_modelopt_nvfp4_layout(checkpoint):
    """ModelOpt's own NVFP4 export: other tensor names than compressed-tensors', same bytes."""
    directory = checkpoint("modelopt_nvfp4")
    assert fixture_record(directory)["library"] == "modelopt"
    hf_quant = json.loads((directory / "hf_quant_config.json").read_text())
    assert hf_quant["producer"]["name"] == "modelopt"
    quantization = hf_quant["quantization"]
    assert quantization["quant_algo"] == "NVFP4" and quantization["group_size"] == 16
    assert quantization["exclude_modules"] == ["lm_head", "model.embed_tokens"]
    assert quantization["kv_cache_quant_algo"] is None
    # mirrored into config.json, where vLLM reads it
    mirrored = config(directory)["quantization_config"]
    assert (mirrored["quant_method"], mirrored["quant_algo"]) == ("modelopt", "NVFP4")

    count = count_checkpoint(directory)
    for module, (out_features, in_features) in linear_modules(checkpoint("qwen3_dense")).items():
        got = {n[len(module) + 1:]: (t.dtype, t.shape) for n, t in count.tensors.items()
               if n.startswith(module + ".")}
        if module == "lm_head":
            assert got == {"weight": ("BF16", (out_features, in_features))}
            continue
        # the packed FP4 weight keeps the name "weight"; both global scales are 0-d fp32
        assert got == {"weight": ("U8", (out_features, in_features // 2)),
                       "weight_scale": ("F8_E4M3", (out_features, in_features // 16)),
                       "weight_scale_2": ("F32", ()),
                       "input_scale": ("F32", ())}, module
        assert count.bytes_under(module) == out_features * in_features * 0.5625 + 8, module


def test_next_keeps_gdn_and_routers_bf16(checkpoint):
    tensors = count_checkpoint(checkpoint("ct_nvfp4a16_next")).tensors
    for name, t in tensors.items():
        if ".linear_attn." in name or name.endswith(("mlp.gate.weight", "shared_expert_gate.weight")):
            assert t.dtype == "BF16", name
    assert tensors["model.layers.0.mlp.experts.0.gate_proj.weight_packed"].dtype == "U8"
    assert tensors["model.layers.0.mlp.shared_expert.down_proj.weight_packed"].dtype == "U8"
    assert tensors["model.layers.3.self_attn.q_proj.weight_packed"].dtype == "U8"


def test_tokenizer_covers_the_vocabulary(checkpoint):
    directory = checkpoint("qwen3_dense")
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    ids = set(tokenizer["model"]["vocab"].values()) | {t["id"] for t in tokenizer["added_tokens"]}
    assert ids == set(range(config(directory)["vocab_size"]))


@pytest.mark.slow
def test_fixtures_are_deterministic(checkpoints, tmp_path):
    """Made again from scratch, a base and a quantized fixture come out byte for byte equal."""
    if not FIXTURE_PYTHON.is_file():
        pytest.fail(f"the fixture environment is missing ({FIXTURE_PYTHON})", pytrace=False)
    names = ["qwen3_dense", "ct_nvfp4_w4a4", "modelopt_nvfp4"]
    subprocess.run([str(FIXTURE_PYTHON), str(MAKE_SCRIPT), str(tmp_path), *names],
                   cwd=REPO, check=True, capture_output=True, timeout=600)

    def digest(directory: Path) -> str:
        sha = hashlib.sha256()
        for path in sorted(directory.glob("*.safetensors")) + [directory / "config.json"]:
            sha.update(path.read_bytes())
        return sha.hexdigest()

    for name in names:
        assert digest(tmp_path / name) == digest(checkpoints[name]), name


def test_reference_configs_are_reachable(reference_configs):
    configs = sorted(reference_configs.glob("*/config.json"))
    assert configs, f"no */config.json under {reference_configs}"
    for path in configs:
        assert isinstance(json.loads(path.read_text()), dict), path

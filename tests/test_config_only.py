"""Config-only inventory: transformers builds the module skeleton on the meta device, the
quantization config assigns formats, and everything downstream is the header audit's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline.audit import load_inventory, run_audit
from roofline.errors import RooflineError
from roofline.model.formats import PLAIN_FORMATS
from roofline.predict.hardware import get_hardware
from roofline.predict.traffic import Scenario

pytest.importorskip("transformers")

REFERENCE = Path(__file__).parent / "reference_configs"
ALL = sorted(p.name for p in REFERENCE.iterdir() if (p / "config.json").is_file())


def inventory(name: str):
    from roofline.sources.config import load_config_only

    return load_config_only(str(REFERENCE / name))


def by_label(inv) -> dict[str, set[str]]:
    from roofline.model.grouping import short_label

    out: dict[str, set[str]] = {}
    for m in inv.modules:
        out.setdefault(short_label(m.name), set()).add(m.format)
    return out


@pytest.mark.parametrize("name", ALL)
def test_every_reference_config_builds(name):
    inv = inventory(name)
    assert inv.source == "config"
    assert inv.weight_bytes > 1e9
    result = run_audit(inv, Scenario(), get_hardware("gb10"))
    assert 0 < result.traffic.bytes_per_token < inv.weight_bytes * 1.01 + result.traffic.kv_bytes_per_token
    assert any(m.role == "lm_head" for m in inv.modules)
    assert not any(m.role == "other" and m.nbytes > 1e8 for m in inv.modules), \
        [m.name for m in inv.modules if m.role == "other" and m.nbytes > 1e8]


def test_qwen3_8b_bf16_sizes_are_exact():
    inv = inventory("Qwen__Qwen3-8B")
    cfg = json.loads((REFERENCE / "Qwen__Qwen3-8B" / "config.json").read_text())
    h, i, L, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    mods = inv.by_name()
    assert mods["model.layers.0.mlp.down_proj"].nbytes == 2 * h * i
    assert mods["lm_head"].nbytes == 2 * v * h and mods["lm_head"].tied_to is None
    assert sum(1 for m in inv.modules if m.role == "mlp") == 3 * L


def test_checkpoint_names_not_transformers_names():
    # transformers 5 fuses experts and renames NemotronH / Mixtral; the inventory uses checkpoint names
    nemo = inventory("nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16").by_name()
    assert "backbone.embeddings" in nemo and nemo["backbone.embeddings"].role == "embedding"
    assert nemo["backbone.layers.1.mixer.experts"].experts == 128
    mixtral = inventory("mistralai__Mixtral-8x7B-v0.1").by_name()
    assert mixtral["model.layers.0.block_sparse_moe.experts"].experts == 8
    qwen = inventory("Qwen__Qwen3.6-35B-A3B").by_name()
    assert "model.language_model.layers.0.linear_attn.in_proj_qkv" in qwen
    assert qwen["model.language_model.layers.0.mlp.experts"].experts == 256
    assert any(name.startswith("mtp.layers.0.") for name in qwen)  # MTP modelled from a decoder layer


def test_nvfp4_modelopt_formats_and_scales():
    inv = inventory("nvidia__Qwen3-30B-A3B-NVFP4")
    mods = inv.by_name()
    q = mods["model.layers.0.self_attn.q_proj"]
    assert q.format == "nvfp4-w4a4" and q.quant_method == "modelopt"
    names = {t.name.rsplit(".", 1)[1]: t for t in q.tensors}
    assert names["weight"].dtype == "U8" and names["weight_scale"].dtype == "F8_E4M3"
    assert "weight_scale_2" in names and "input_scale" in names
    # 0.5 byte per weight + one E4M3 scale per 16 + two fp32 scalars
    assert q.nbytes == q.params // 2 + q.params // 16 + 8
    assert mods["model.layers.0.mlp.gate"].format == "bf16"  # excluded
    assert mods["lm_head"].format == "bf16"


def test_mixed_precision_config_json_wins():
    inv = inventory("nvidia__Qwen3.6-35B-A3B-NVFP4")
    labels = by_label(inv)
    assert labels["linear_attn.in_proj_qkv"] == {"fp8"}
    assert labels["mlp.experts"] == {"nvfp4-w4a16"}
    assert labels["linear_attn.in_proj_a"] <= set(PLAIN_FORMATS.values())
    # routers are GateLinear(quant_config=None) in vLLM
    assert labels["mlp.gate"] == {"bf16"}
    assert any("hf_quant_config.json" in d for d in inv.disagreements) or inv.quant.config_file == "config.json"


def test_block_fp8_and_mxfp4_layouts():
    fp8 = inventory("Qwen__Qwen3-30B-A3B-FP8").by_name()
    experts = fp8["model.layers.0.mlp.experts"]
    assert experts.format == "fp8-block"
    scale = next(t for t in experts.tensors if t.name.endswith("0.down_proj.weight_scale_inv"))
    assert scale.dtype == "F32" and scale.shape == (16, 6)  # ceil(2048/128), ceil(768/128)
    oss = inventory("openai__gpt-oss-20b").by_name()
    e = oss["model.layers.0.mlp.experts"]
    assert e.format == "mxfp4" and e.experts == 32
    assert oss["model.layers.0.self_attn.q_proj"].format == "bf16"
    assert oss["model.layers.0.mlp.router"].format == "bf16"


def test_unknown_architecture_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["FancyNewForCausalLM"], "model_type": "fancy_new", "hidden_size": 64,
        "num_hidden_layers": 2, "vocab_size": 100, "auto_map": {"AutoConfig": "x.FancyConfig"}}))
    with pytest.raises(RooflineError, match=r"FancyNewForCausalLM.*not in the installed transformers.*--trust-remote-code"):
        load_inventory(str(tmp_path))


def test_config_only_flag_on_cli(capsys):
    from roofline.cli import main

    assert main(["audit", str(REFERENCE / "Qwen__Qwen3-8B"), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["source"] == "config"
    assert payload["weight_bytes"] > 16e9


@pytest.mark.parametrize("fixture", ["qwen3_dense", "ct_fp8_dynamic", "ct_nvfp4a16"])
def test_config_only_matches_header_audit(fixture, checkpoint):
    """The tiny real checkpoints: per module, config-only and header audits agree on format and
    bytes, up to scale rounding (scale dtypes a producer picks)."""
    from roofline.sources.config import load_config_only
    from roofline.sources.local import load_local

    directory = str(checkpoint(fixture))
    header = load_local(directory).by_name()
    config = load_config_only(directory).by_name()
    assert set(header) == set(config), set(header) ^ set(config)
    for name, real in header.items():
        mine = config[name]
        assert mine.format == real.format, name
        assert mine.params == real.params, name
        assert abs(mine.nbytes - real.nbytes) <= max(64, 0.01 * real.nbytes), (name, mine.nbytes, real.nbytes)

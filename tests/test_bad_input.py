"""Bad input: one clear line on stderr and a non-zero exit, never a traceback or a number.

Each broken file starts from a real safetensors file written by the safetensors library and is
then damaged the way real files get damaged (cut short, header rewritten by hand)."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

ROOFLINE = [sys.executable, "-m", "roofline.cli"]

CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 1,
          "hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
          "vocab_size": 32, "torch_dtype": "bfloat16"}


def write_checkpoint(directory: Path, config: dict | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config or CONFIG))
    tensors = {"model.embed_tokens.weight": torch.zeros(32, 16, dtype=torch.bfloat16),
               "model.layers.0.self_attn.q_proj.weight": torch.zeros(16, 16, dtype=torch.bfloat16),
               "model.layers.0.mlp.down_proj.weight": torch.zeros(16, 32, dtype=torch.bfloat16),
               "lm_head.weight": torch.zeros(32, 16, dtype=torch.bfloat16)}
    path = directory / "model.safetensors"
    save_file(tensors, str(path))
    return path


def rewrite_header(path: Path, mutate) -> None:
    """Replace the JSON header by mutate(header) and keep the data section as it was."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    new = json.dumps(mutate(header)).encode()
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + length:])


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*ROOFLINE, *args], capture_output=True, text=True, env=env, timeout=120)


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert proc.stdout == ""


def test_good_checkpoint_is_accepted(tmp_path):
    write_checkpoint(tmp_path / "ok")
    proc = run("audit", str(tmp_path / "ok"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["weight_bytes"] == 2 * (32 * 16 + 16 * 16 + 16 * 32 + 32 * 16)


def test_missing_directory(tmp_path):
    assert_one_line_error(run("audit", str(tmp_path / "nope")), "no such directory")


def test_missing_config(tmp_path):
    path = write_checkpoint(tmp_path / "m")
    (path.parent / "config.json").unlink()
    assert_one_line_error(run("audit", str(path.parent)), "config.json")


def test_no_safetensors_and_no_config(tmp_path):
    (tmp_path / "empty").mkdir()
    assert_one_line_error(run("audit", str(tmp_path / "empty")), "config.json")


def test_truncated_file(tmp_path):
    path = write_checkpoint(tmp_path / "m")
    path.write_bytes(path.read_bytes()[:5])
    assert_one_line_error(run("audit", str(path.parent)), "truncated")


def test_truncated_data_section(tmp_path):
    path = write_checkpoint(tmp_path / "m")
    path.write_bytes(path.read_bytes()[:-100])
    assert_one_line_error(run("audit", str(path.parent)), "past the end")


def test_header_length_beyond_file(tmp_path):
    path = write_checkpoint(tmp_path / "m")
    raw = path.read_bytes()
    path.write_bytes(struct.pack("<Q", len(raw) * 10) + raw[8:])
    assert_one_line_error(run("audit", str(path.parent)), "runs past the end")


def test_header_length_over_100mb(tmp_path):
    path = write_checkpoint(tmp_path / "m")
    raw = path.read_bytes()
    path.write_bytes(struct.pack("<Q", 200 * 1024 * 1024) + raw[8:])
    assert_one_line_error(run("audit", str(path.parent)), "100 MB")


def test_invalid_header_json(tmp_path):
    path = write_checkpoint(tmp_path / "m")
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    broken = b"{" + b"x" * (length - 1)
    path.write_bytes(raw[:8] + broken + raw[8 + length:])
    assert_one_line_error(run("audit", str(path.parent)), "invalid safetensors header JSON")


def test_unknown_dtype(tmp_path):
    path = write_checkpoint(tmp_path / "m")
    rewrite_header(path, lambda h: {**h, "lm_head.weight": {**h["lm_head.weight"], "dtype": "Q3_K"}})
    assert_one_line_error(run("audit", str(path.parent)), "unknown dtype", "Q3_K")


def test_overlapping_offsets(tmp_path):
    path = write_checkpoint(tmp_path / "m")

    def overlap(h):
        names = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
        first, second = h[names[0]], h[names[1]]
        # the second tensor starts inside the first one, same size
        size = second["data_offsets"][1] - second["data_offsets"][0]
        start = first["data_offsets"][0] + 2
        second["data_offsets"] = [start, start + size]
        return h

    rewrite_header(path, overlap)
    assert_one_line_error(run("audit", str(path.parent)), "overlap")


def test_out_of_range_offsets(tmp_path):
    path = write_checkpoint(tmp_path / "m")

    def beyond(h):
        entry = h["lm_head.weight"]
        size = entry["data_offsets"][1] - entry["data_offsets"][0]
        entry["data_offsets"] = [10**9, 10**9 + size]
        return h

    rewrite_header(path, beyond)
    assert_one_line_error(run("audit", str(path.parent)), "past the end")


def test_offsets_disagree_with_shape(tmp_path):
    path = write_checkpoint(tmp_path / "m")
    rewrite_header(path, lambda h: {**h, "lm_head.weight": {**h["lm_head.weight"], "shape": [64, 16]}})
    assert_one_line_error(run("audit", str(path.parent)), "needs")


def test_hostile_shape(tmp_path):
    path = write_checkpoint(tmp_path / "m")
    rewrite_header(path, lambda h: {**h, "lm_head.weight": {**h["lm_head.weight"], "shape": [-1, "x"]}})
    assert_one_line_error(run("audit", str(path.parent)), "invalid shape")


def test_header_not_an_object(tmp_path):
    path = write_checkpoint(tmp_path / "m")
    rewrite_header(path, lambda h: [1, 2, 3])
    assert_one_line_error(run("audit", str(path.parent)), "not a JSON object")


def test_unknown_quant_method(tmp_path):
    write_checkpoint(tmp_path / "m", {**CONFIG, "quantization_config": {"quant_method": "bitsandbytes_nf3"}})
    assert_one_line_error(run("audit", str(tmp_path / "m")), "unknown quantization method", "bitsandbytes_nf3")


def test_unknown_modelopt_algo(tmp_path):
    write_checkpoint(tmp_path / "m")
    (tmp_path / "m" / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP3_MAGIC"}}))
    assert_one_line_error(run("audit", str(tmp_path / "m")), "FP3_MAGIC")


def test_invalid_config_json(tmp_path):
    write_checkpoint(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("{not json")
    assert_one_line_error(run("audit", str(tmp_path / "m")), "invalid JSON")


def test_index_with_escaping_shard_name(tmp_path):
    write_checkpoint(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"lm_head.weight": "../../etc/passwd.safetensors"}}))
    assert_one_line_error(run("audit", str(tmp_path / "m")), "not a plain file name")


def test_index_naming_a_missing_shard(tmp_path):
    write_checkpoint(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}))
    assert_one_line_error(run("audit", str(tmp_path / "m")), "missing")


def test_index_disagreeing_with_shards(tmp_path):
    write_checkpoint(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.layers.9.ghost.weight": "model.safetensors"}}))
    assert_one_line_error(run("audit", str(tmp_path / "m")), "lacks it")


def test_not_a_hub_id(tmp_path):
    assert_one_line_error(run("audit", "not a model"), "no such directory")


@pytest.mark.parametrize("args,fragment", [
    (["--batch", "0"], "--batch"),
    (["--hardware", "tpu-v9"], "unknown hardware"),
    (["--bandwidth", "-5"], "--bandwidth"),
])
def test_bad_options(tmp_path, args, fragment):
    write_checkpoint(tmp_path / "m")
    assert_one_line_error(run("audit", str(tmp_path / "m"), *args), fragment)


# ------------------------------------------------------------------------------- numeric options
EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "Qwen3-8B")


@pytest.mark.parametrize("argv", [
    ["audit", EXAMPLE, "--bandwidth", "nan"], ["audit", EXAMPLE, "--bandwidth", "inf"],
    ["audit", EXAMPLE, "--bandwidth", "-273"], ["audit", EXAMPLE, "--bandwidth", "0"],
    ["audit", EXAMPLE, "--acceptance-rate", "1.01"], ["audit", EXAMPLE, "--acceptance-rate", "-0.1"],
    ["audit", EXAMPLE, "--acceptance-rate", "nan"], ["audit", EXAMPLE, "--batch", "0"],
    ["audit", EXAMPLE, "--batch", "-3"], ["audit", EXAMPLE, "--context", "0"],
    ["audit", EXAMPLE, "--context", "99999999999"], ["audit", EXAMPLE, "--speculative", "-1"],
    ["audit", EXAMPLE, "--speculative", "1000"], ["audit", EXAMPLE, "--rows", "0"],
    ["plan", EXAMPLE, "--concurrency", "0"], ["plan", EXAMPLE, "--tp", "0"], ["plan", EXAMPLE, "--tp", "-2"],
    ["plan", EXAMPLE, "--memory-budget", "nan"], ["plan", EXAMPLE, "--memory-budget", "-1"],
    ["plan", EXAMPLE, "--bandwidth", "1e400"], ["plan", EXAMPLE, "--context", "-1"], ["plan", EXAMPLE, "--top", "0"],
    ["kernels", EXAMPLE, "--launch-us", "nan"], ["kernels", EXAMPLE, "--layers", "0"],
    ["validate", "--audit-json", "a.json", "--measured", "nan"], ["validate", "--audit-json", "a.json", "--measured", "0"],
    ["validate", "--audit-json", "a.json", "--measured", "-5"],
    ["calibrate", "--efficiency", "0"], ["calibrate", "--efficiency", "1.5"], ["calibrate", "--size-mb", "inf"],
    ["calibrate", "--repetitions", "0"], ["calibrate", "--threads", "0"],
    ["capture", "some/model", "--timeout", "nan"],
    ["bench", "--url", "http://127.0.0.1:9/v1", "--warmup", "-1"],
    ["bench", "--url", "http://127.0.0.1:9/v1", "--sweep-rounds", "0"],
])
def test_numeric_options_are_checked_at_the_edge(argv, capsys):
    """Non-finite, non-positive or out-of-range numbers: one line, exit code 2, nothing computed."""
    from roofline.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Invalid value for") and err.count("\n") == 1 and "Traceback" not in err


# ------------------------------------------------------------------------------- absurd configs
QWEN3_8B_CONFIG = json.loads((Path(EXAMPLE) / "config.json").read_text())
MOE_CONFIG = json.loads((Path(__file__).parent / "reference_configs" / "Qwen__Qwen3-30B-A3B" / "config.json")
                        .read_text())


@pytest.mark.parametrize("base, change, message", [
    (QWEN3_8B_CONFIG, {"num_hidden_layers": 10_000_000}, "num_hidden_layers = 1e+07 is implausibly large"),
    (QWEN3_8B_CONFIG, {"hidden_size": 10**9}, "hidden_size = 1e+09 is implausibly large"),
    (QWEN3_8B_CONFIG, {"vocab_size": 10**10}, "vocab_size = 1e+10 is implausibly large"),
    (MOE_CONFIG, {"num_experts": 10**6}, "num_experts = 1e+06 is implausibly large"),
    (MOE_CONFIG, {"num_hidden_layers": 2000, "num_experts": 60000}, "expert matrices ~ 1.2e+08"),
    (QWEN3_8B_CONFIG, {"num_hidden_layers": "36"}, "num_hidden_layers = '36' is not a number"),
    (QWEN3_8B_CONFIG, {"intermediate_size": -1}, "intermediate_size = -1 is negative"),
    (QWEN3_8B_CONFIG, {"text_config": {"num_hidden_layers": 10**6}}, "text_config.num_hidden_layers = 1e+06"),
])
def test_absurd_config_sizes_are_refused_before_building(tmp_path, base, change, message):
    model = tmp_path / "absurd"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(dict(base, **change)))
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", str(model), "--no-cache"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: config.json: ") and message in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


CT_GROUP = {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "group_size": 128, "strategy": "group"}}


@pytest.mark.parametrize("quantization,key", [
    ({"quant_method": "compressed-tensors", "config_groups": [CT_GROUP]}, "$.config_groups"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"group_0": {**CT_GROUP, "weights": {"num_bits": "4"}}}}, "num_bits"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": CT_GROUP}, "ignore": "lm_head"}, "$.ignore"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": "lm_head"}, "$.exclude_modules"),
    ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": ["a"]}, "quantized_layers"),
    ({"quant_method": "fp8", "weight_block_size": "128"}, "$.weight_block_size"),
    ({"quant_method": "mxfp4", "modules_to_not_convert": {"a": 1}}, "$.modules_to_not_convert"),
    ({"quant_method": "awq", "bits": "four"}, "$.bits"),
])
def test_a_wrong_typed_quantization_config_is_one_line(tmp_path, quantization, key):
    """Every quantization format roofline reads is checked against its schema before use (#36)."""
    write_checkpoint(tmp_path / "m", {**CONFIG, "quantization_config": quantization})
    for command in ("audit", "capacity"):
        assert_one_line_error(run(command, str(tmp_path / "m")), "quantization config", key)

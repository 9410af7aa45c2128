"""Granite 4.0-H (granitemoehybrid): Mamba2 layers beside a few attention layers, every layer with a shared MLP and,
in the MoE models, 64 routed experts fused in one 3-D tensor a projection. A real checkpoint written by transformers
(its GraniteMoeHybrid classes, tiny sizes) is audited: the experts read as routed, the Mamba2 projections as the
mixer's, nothing linear left unnamed; and the recurrent state is the one vLLM 0.32's own model class sizes (its
get_mamba_state_shape_from_config), for the tiny model and for the published Granite-4.0-H-Tiny config the GPU
harness runs. Before these, its experts were read whole every token (13.9 GB a token for a model of 1 GB active)
and its state was sized without its Mamba2 heads."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from roofline.audit import load_inventory, run_audit
from roofline.predict.hardware import get_hardware
from roofline.predict.traffic import Scenario

REPO = Path(__file__).resolve().parents[1]
PUBLISHED_TINY = REPO / "benchmarks" / "gpu_vllm" / "configs" / "Granite-4.0-H-Tiny"
NEMOTRON = REPO / "tests" / "reference_configs" / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"

TINY = {  # Granite 4.0-H's layout at toy sizes: 6 layers, the 3rd attention; 8 experts, 2 a token
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
    "hidden_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 64, "shared_intermediate_size": 96, "num_local_experts": 8, "num_experts_per_tok": 2,
    "layer_types": ["mamba", "mamba", "attention", "mamba", "mamba", "mamba"],
    "mamba_n_heads": 4, "mamba_d_head": 64, "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_conv": 4,
    "mamba_expand": 2, "position_embedding_type": "nope", "vocab_size": 512, "tie_word_embeddings": True,
    "max_position_embeddings": 1024, "torch_dtype": "bfloat16",
}


def audit(path: Path, context: int):
    return run_audit(load_inventory(str(path)), Scenario(context=context), get_hardware("gb10"))


@pytest.fixture(scope="module")
def granite(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    folder = tmp_path_factory.mktemp("granite_h")
    config = GraniteMoeHybridConfig(**{k: v for k, v in TINY.items() if k not in ("architectures", "model_type")})
    model = GraniteMoeHybridForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def test_experts_are_routed_and_the_mixer_is_mamba(granite):
    result = audit(granite, context=256)
    inventory = result.inventory
    roles: dict[str, list] = {}
    for module in inventory.modules:
        roles.setdefault(module.role, []).append(module)
    assert [m.experts for m in roles["moe_experts"]] == [8] * 12  # input_linear and output_linear, 6 layers
    assert len(roles["router"]) == 6 and len(roles["mlp"]) == 12  # the router, the shared MLP's two projections
    assert len(roles["mamba_in"]) == len(roles["mamba_out"]) == len(roles["conv1d"]) == 5
    # nothing a token reads whole is left without a role but the Mamba2 mixer's own A_log, D and dt_bias
    assert {m.name.rsplit(".", 1)[-1] for m in roles.get("other", [])} == {"mamba"}
    # the routed experts' bytes a token: 2 of 8 experts' share of the fused tensors, as the file stores them
    from safetensors import safe_open
    with safe_open(str(granite / "model.safetensors"), "pt") as f:
        expert_bytes = sum(f.get_slice(name).get_shape()[0] * f.get_slice(name).get_shape()[1]
                           * f.get_slice(name).get_shape()[2] * 2 for name in f.keys()
                           if ".block_sparse_moe.input_linear." in name or ".block_sparse_moe.output_linear." in name)
    routed = sum(m.bytes_per_token for m in result.traffic.modules if m.role == "moe_experts")
    assert routed == pytest.approx(expert_bytes * 2 / 8)
    shape = inventory.shape
    assert [a.layer for a in shape.attention] == [2]
    assert [r.layer for r in shape.recurrent] == [0, 1, 3, 4, 5]
    assert {r.kind for r in shape.recurrent} == {"mamba"}


def test_the_transformers_5_spelling_of_its_layers_is_read_alike(tmp_path):
    """transformers 5 saves "mamba" as "linear_attention" (its legacy layer-type remap): still Mamba2, not GDN."""
    renamed = dict(TINY, layer_types=["linear_attention" if t == "mamba" else "full_attention"
                                      for t in TINY["layer_types"]])
    (tmp_path / "config.json").write_text(json.dumps(renamed))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "config.json").write_text(json.dumps(TINY))
    new, old = load_inventory(str(tmp_path)).shape, load_inventory(str(tmp_path / "old")).shape
    assert new.recurrent == old.recurrent and new.attention == old.attention


# vLLM's own sizes of a Mamba2 layer's conv window and SSM state, from each architecture's model class
STATE_SIDE = r"""
import json, logging, sys, types
logging.disable(logging.WARNING)
from transformers import AutoConfig
from vllm.model_executor.models.granitemoehybrid import GraniteMoeHybridForCausalLM
from vllm.model_executor.models.nemotron_h import NemotronHForCausalLM
classes = {"GraniteMoeHybridForCausalLM": GraniteMoeHybridForCausalLM, "NemotronHForCausalLM": NemotronHForCausalLM}
out = {}
for folder in sys.argv[1:]:
    hf = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    vllm_config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(tensor_parallel_size=1),
                                        model_config=types.SimpleNamespace(hf_config=hf, hf_text_config=hf),
                                        cache_config=types.SimpleNamespace(use_replayssm=False),
                                        num_speculative_tokens=0, speculative_config=None)
    conv, temporal = classes[hf.architectures[0]].get_mamba_state_shape_from_config(vllm_config)
    prod = lambda shape: eval("*".join(map(str, shape)))
    out[folder] = [prod(conv), prod(temporal)]
print(json.dumps(out))
"""


def test_the_state_is_the_one_vllm_sizes(granite):
    folders = [str(granite), str(PUBLISHED_TINY), str(NEMOTRON)]
    proc = subprocess.run([sys.executable, "-c", STATE_SIDE, *folders], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    for folder in folders:
        layers = load_inventory(folder, config_only=True).shape.recurrent
        assert layers
        assert {(r.conv_elements, r.state_elements) for r in layers} == {tuple(theirs[folder])}, folder


def test_a_published_granite_prices_its_active_bytes():
    """Granite-4.0-H-Tiny: 6.9B parameters, 6 of 64 experts a token: about 1.5B a token read, not 6.9B."""
    result = audit(PUBLISHED_TINY, context=1024)
    weights = result.traffic.weight_bytes_per_token
    assert 2.5e9 < weights < 3.2e9
    assert sum(m.bytes for m in result.traffic.modules) > 13e9


def test_weights_no_role_names_are_said_not_silently_read_whole(tmp_path):
    """A module kind roles.toml does not know is priced as read whole each token; past 1% of the weights the audit
    says so (Granite's experts went unnamed before, 97% of its bytes). Every reference config is named whole."""
    from safetensors.torch import save_file
    torch = pytest.importorskip("torch")

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128,
              "vocab_size": 256, "torch_dtype": "bfloat16"}
    tensors = {"model.embed_tokens.weight": torch.zeros(256, 64), "lm_head.weight": torch.zeros(256, 64),
               "model.layers.0.self_attn.q_proj.weight": torch.zeros(64, 64),
               "model.layers.0.strange_block.proj.weight": torch.zeros(512, 64)}
    save_file({k: v.to(torch.bfloat16) for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    notes = audit(tmp_path, context=64).traffic.notes
    assert len(notes) == 1 and "strange_block.proj" in notes[0] and "match no role" in notes[0]
    for folder in sorted((REPO / "tests" / "reference_configs").iterdir()):
        if folder.is_dir():
            assert not audit(folder, context=64).traffic.notes, folder.name

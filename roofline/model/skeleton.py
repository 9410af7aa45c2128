"""The skeleton of a checkpoint: the unquantized tensors a checkpoint of a config stores
(checkpoint names), before any quantization config is applied. roofline.sources.transformers_meta
builds it from config.json; roofline.model.quantize turns it into what a producer stores.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .architecture import config_int, nemotron_pattern, shape_from_config, text_config
from .formats import dtype_nbytes
from .inventory import Tensor
from .roles import NOT_READ_IN_TEXT_DECODE, classify


@dataclass
class Skeleton:
    """The unquantized tensors a checkpoint of this config stores (checkpoint names), and
    which of them are linear-layer weights: only those can be quantized (a quantization
    config's "Linear" target reaches nn.Linear modules and routed experts, never embeddings,
    norms or conv1d)."""

    tensors: list[Tensor]
    linear_weights: set[str] = field(default_factory=set)


def add_mtp(config: dict, skeleton: Skeleton) -> None:
    """MTP / next-token-prediction layers that checkpoints ship but transformers does not build.

    Qwen3-Next / Qwen3.5: `mtp.layers.{i}.*` is one full-attention decoder layer (same MoE),
    plus `mtp.fc` [H, 2H] and the `mtp.pre_fc_norm_*` / `mtp.norm` norms (vLLM qwen3_next_mtp.py).
    DeepSeek-V3: `model.layers.{L+i}.*` is one MoE decoder layer plus `eh_proj` [H, 2H],
    `enorm`, `hnorm` and `shared_head.norm` (vLLM deepseek_mtp.py); the shared embedding and
    head are not stored again. NemotronH (Nemotron-3-Super): `mtp.layers.{j}.*`, one block per symbol
    of mtp_hybrid_override_pattern (or mtp_layers_block_type), e.g. "*E" an attention block then a MoE
    block, the first with `eh_proj`, `enorm`, `hnorm`, the last with `final_layernorm` (vLLM
    nemotron_h_mtp.py). Each decoder layer is copied from the model's last layer of the same kind, so
    its bytes are right to the extent the layers are alike.
    """
    cfg = text_config(config)
    model_type = str(cfg.get("model_type") or config.get("model_type") or "")
    layers = config_int(cfg, "mtp_num_hidden_layers") or config_int(cfg, "num_nextn_predict_layers")
    if layers <= 0:
        return
    tensors = skeleton.tensors
    hidden = config_int(cfg, "hidden_size")
    num_layers = config_int(cfg, "num_hidden_layers")
    dtype = next((t.dtype for t in tensors if t.name.endswith("norm.weight")), "BF16")
    shape = shape_from_config(config)
    by_layer: dict[int, list[Tensor]] = {}
    prefix = None
    for t in tensors:
        role, layer = classify(t.name, num_layers)
        if layer is not None and role not in NOT_READ_IN_TEXT_DECODE:
            by_layer.setdefault(layer, []).append(t)
            if prefix is None:
                prefix = t.name[: t.name.index(f"layers.{layer}.")]
    if prefix is None:
        return
    attention_layers = [a.layer for a in shape.attention]
    source = max(attention_layers) if attention_layers else max(by_layer)
    template = by_layer.get(source, [])
    marker = f"{prefix}layers.{source}."

    def vec(name: str, n: int) -> Tensor:
        return Tensor(name, dtype, (n,), dtype_nbytes(dtype, (n,)))

    def mat(name: str, out: int, inp: int) -> Tensor:
        return Tensor(name, dtype, (out, inp), dtype_nbytes(dtype, (out, inp)))

    linear = skeleton.linear_weights
    if model_type.startswith("deepseek"):
        for i in range(layers):
            base = f"{prefix}layers.{num_layers + i}."
            tensors += copy_layer(template, marker, base, linear)
            tensors += [mat(base + "eh_proj.weight", hidden, 2 * hidden), vec(base + "enorm.weight", hidden),
                        vec(base + "hnorm.weight", hidden), vec(base + "shared_head.norm.weight", hidden)]
            linear.add(base + "eh_proj.weight")
    elif model_type.startswith("nemotron_h"):
        blocks = nemotron_pattern(cfg, "mtp_hybrid_override_pattern", "mtp_layers_block_type") or "*"
        moe = [k for k, ts in by_layer.items() if any(".experts." in t.name for t in ts)]
        mamba = [r.layer for r in shape.recurrent]
        kinds = {"*": attention_layers, "E": moe, "M": mamba,
                 "-": [k for k in by_layer if k not in moe and k not in attention_layers and k not in mamba]}
        for i in range(layers * len(blocks)):
            symbol = blocks[i % len(blocks)]
            if not kinds.get(symbol):
                continue  # no layer of that kind to copy (vLLM refuses such a pattern: preflight says so)
            source = max(kinds[symbol])
            base = f"mtp.layers.{i}."
            tensors += copy_layer(by_layer[source], f"{prefix}layers.{source}.", base, linear)
            if i % len(blocks) == 0:
                tensors += [mat(base + "eh_proj.weight", hidden, 2 * hidden), vec(base + "enorm.weight", hidden),
                            vec(base + "hnorm.weight", hidden)]
                linear.add(base + "eh_proj.weight")
            if i % len(blocks) == len(blocks) - 1:
                tensors.append(vec(base + "final_layernorm.weight", hidden))
    elif model_type.startswith("qwen3_next") or model_type.startswith("qwen3_5"):
        for i in range(layers):
            tensors += copy_layer(template, marker, f"mtp.layers.{i}.", linear)
        tensors += [mat("mtp.fc.weight", hidden, 2 * hidden), vec("mtp.pre_fc_norm_embedding.weight", hidden),
                    vec("mtp.pre_fc_norm_hidden.weight", hidden), vec("mtp.norm.weight", hidden)]
        linear.add("mtp.fc.weight")


def copy_layer(template: list[Tensor], marker: str, base: str, linear: set[str]) -> list[Tensor]:
    out = []
    for t in template:
        name = base + t.name[len(marker):]
        if t.name in linear:
            linear.add(name)
        out.append(Tensor(name, t.dtype, t.shape, t.nbytes))
    return out
